"""Transformers and convolutions in zero knowledge: three training steps of a tiny GPT
(softmax and spherical attention) and of a small digits CNN, each as an R1CS circuit whose witness
is bit-exact with the fixed-point interpreter, satisfies every constraint, leaves no wire
unconstrained, and is accepted by snarkjs ``wtns check``."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import snarkjs_or_skip

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from digits_cnn import cnn  # noqa: E402

Q = cg.fixed(16, 8)
B, S, V = 1, 4, 8


def _gpt(attention):
    step = cg.compile_model(nn.gpt(B, S, V, d=8, heads=2, layers=1, attention=attention),
                            loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    rng = np.random.default_rng(1)
    batches = [(rng.integers(0, V, (B, S)), rng.integers(0, V, (B, S))) for _ in range(3)]
    return step, batches


def _cnn():
    step = cg.compile_model(cnn(2, channels=2, dtype=Q), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(0.125), dtype=Q)
    rng = np.random.default_rng(2)
    batches = [(rng.uniform(0, 1, step.x_type.shape), rng.integers(0, 10, 2)) for _ in range(3)]
    return step, batches


MODELS = {"gpt-softmax": lambda: _gpt("softmax"), "gpt-spherical": lambda: _gpt("spherical"), "cnn": _cnn}


@pytest.fixture(scope="module", params=[(m, rc) for m in sorted(MODELS) for rc in ("bits", "lookup")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def run(request):
    name, rc = request.param
    step, batches = MODELS[name]()
    circuit = zk.compile(step, range_checks=rc)
    params = step.init_params(seed=0)
    witnesses = []
    for x, y in batches:
        w = circuit.witness(params, x, y)
        params = step.step(params, x, y)              # the fixed-point interpreter
        witnesses.append((w, params))
    return f"{name}-{rc}", step, circuit, witnesses


def test_three_steps_are_bit_exact_and_satisfy_the_circuit(run):
    name, step, circuit, witnesses = run
    for k, (w, after) in enumerate(witnesses):
        circuit.assert_satisfied(w)
        outs = w.outputs()
        for p in step.param_names:
            assert np.array_equal(outs[p], np.asarray(after[p.replace("_", "/", 1)] if p not in after else after[p])), \
                f"{name}: step {k}, parameter {p}"


def test_lookups_prove_and_verify_natively(run):
    """The native prover proves the lookup circuit of the last step; it is far smaller than the bits one."""
    name, step, circuit, witnesses = run
    if circuit.range_checks == "bits":
        return
    w, _ = witnesses[-1]
    proof = zk.prove(circuit, w, rng=np.random.default_rng(0))
    assert proof.lookups == circuit.r1cs.n_lookups > 0
    assert zk.verify(proof, circuit, w.public)
    bits = zk.compile(step, range_checks="bits").r1cs
    r = circuit.r1cs
    assert r.n_constraints < bits.n_constraints / 3 and r.n_wires < bits.n_wires / 2
    assert not zk.verify(proof, zk.compile(step, range_checks="bits"), w.public)


def test_no_wire_is_unconstrained(run):
    name, step, circuit, witnesses = run
    assert circuit.r1cs.unconstrained_wires().size == 0


def test_a_wrong_parameter_update_is_refused(run):
    name, step, circuit, witnesses = run
    w, _ = witnesses[0]
    bad = w.values.copy()
    bad[circuit.output_wires[0].reshape(-1)[0]] += 1
    assert not circuit.check(bad)


@pytest.mark.slow
def test_snarkjs_accepts_the_exported_witness(run, tmp_path):
    name, step, circuit, witnesses = run
    w, _ = witnesses[-1]
    if circuit.range_checks == "lookup":
        with pytest.raises(ValueError, match=r"^export: this circuit proves its ranges with \d+ lookups, which "
                                             r"\.r1cs files and snarkjs cannot express; compile it with "
                                             r"zk\.compile\(\.\.\., range_checks='bits'\)"):
            circuit.export(str(tmp_path), w)
        return
    exe = snarkjs_or_skip()
    paths = circuit.export(str(tmp_path), w)
    chk = subprocess.run([exe, "wtns", "check", paths["r1cs"], paths["wtns"]], capture_output=True, text=True)
    assert chk.returncode == 0 and "WITNESS IS CORRECT" in chk.stdout, chk.stdout[-500:] + chk.stderr[-500:]


def test_a_wire_named_twice_in_a_combination_is_written_once():
    """The ``.r1cs`` format keeps one coefficient per wire (snarkjs keeps the last of repeated ones):
    the builder sums repeated wires, sorts each row by wire and drops zero coefficients."""
    from circuitgrad.backends.zk.circuits.r1cs import Builder
    b = Builder(zk.BN254)
    x, y = b.alloc(1), b.alloc(1)
    b.constrain([(x, 2), (y, 1), (x, -1), (y, -1)], [(0, 1)], [(y, 3), (x, 1)], "twice")
    r = b.finish(0, 0, 0)
    assert list(r.A.wires) == [int(x[0])] and list(r.A.coeffs) == [1]
    assert list(r.C.wires) == [int(x[0]), int(y[0])] and list(r.C.coeffs) == [1, 3]
    assert r.check(np.array([1, 3, 0])) and not r.check(np.array([1, 3, 1]))   # x = x + 3y
