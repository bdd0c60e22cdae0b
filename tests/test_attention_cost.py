"""Exact costs of one causal attention head: spherical attention's weights in a training step
take at most half of softmax's constraints + lookups, and its FPGA memory stays under 2048 words."""
import pytest
from _attention import constraints, head

import circuitgrad as cg

DT = cg.fixed(16, 8)


@pytest.mark.parametrize("S", [16, 32])
def test_spherical_weights_cost_at_most_half_of_softmax_in_a_training_step(S):
    soft = constraints(head("softmax", S, 16, DT, True), DT, "lookup")[1]
    sph = constraints(head("spherical", S, 16, DT, True), DT, "lookup")[1]
    assert sph <= soft / 2, (sph, soft)


def test_spherical_weights_cost_less_than_softmax_at_short_sequences():
    """At S = 8 the ratio is 0.51 since range checks use one table per limb width: both heads
    got cheaper (softmax's weights 2905 → 2589, spherical's 1419 → 1323), softmax's more: a range check
    whose width is not a multiple of 8 no longer needs a second, shifted lookup, and softmax has more."""
    soft = constraints(head("softmax", 8, 16, DT, True), DT, "lookup")[1]
    sph = constraints(head("spherical", 8, 16, DT, True), DT, "lookup")[1]
    assert sph < soft, (sph, soft)


def test_best_fit_keeps_a_spherical_head_under_2048_words():
    """First fit let the 16-word row sums split a 256-word block: 2051 words, one more address bit."""
    from circuitgrad.backends import fpga
    assert fpga.compile_program(head("spherical", 16, 16, DT, False), DT).depth < 2048
