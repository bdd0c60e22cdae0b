"""Rows per elementwise operation: a sum has no wire and no constraint of its own (its terms go into the rows
that read it), and no range check where interval analysis proves it in range; cheating about either is
still rejected, by the constraints and by the native prover's verifier."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import replay_lie

import circuitgrad as cg
from circuitgrad import primitives as P
from circuitgrad.backends import zk
from circuitgrad.backends.zk.circuits import intervals as I
from circuitgrad.tracing import apply
from circuitgrad.schedule import retype

Q = cg.fixed(16, 8)
N = 4
T = cg.NdArrayType((N,))


def _circuit(fn, n_in, range_checks="lookup", **kw):
    prog = retype(cg.schedule(cg.trace(fn, (T,) * n_in, name="t")), Q)
    field = zk.LIGERO51 if range_checks == "lookup" else zk.BN254
    extra = {"table_bits": 16} if range_checks == "lookup" else {}
    return prog, zk.compile_program(prog, Q, field, range_checks=range_checks, **extra, **kw)


def _raw(rng, lo=-3.0, hi=3.0):
    return [np.round(rng.uniform(lo, hi, N) * Q.one).astype(np.int64)]


# ---------------------------------------------------------------- the rows that are gone
@pytest.mark.parametrize("range_checks", ["lookup", "bits"])
def test_a_sum_read_by_a_product_has_no_wire_and_no_constraint(range_checks, rng):
    """``(a + b)·c`` on 4 entries, counted by hand. Per entry: the product's constraint, its quotient and
    remainder wires, the output's constraint; the sum is a combination inside them. With lookups (16-bit
    table): 3 input checks, the sum's range check, the remainder's and the quotient's, one lookup each.
    With bits (w = 16, f = 8): 3·17 input constraints, the sum's 17, the remainder's 8 bits, the quotient's 17,
    the product and the output."""
    prog, c = _circuit(lambda a, b, x: (a + b) * x, 3, range_checks)
    r = c.r1cs
    assert c.n_combinations == N
    if range_checks == "lookup":
        assert (r.n_constraints, r.n_lookups, r.n_wires) == (2 * N, 6 * N, 1 + N + 3 * N + 2 * N)
        assert r.counts_by_gadget() == {"mul": N, "output": N}
        assert r.counts_by_gadget(lookups=True) == {"input.range.limbs": 3 * N, "mul.remainder.limbs": N,
                                                    "linear.range.limbs": N, "mul.range.limbs": N}
    else:
        assert r.n_constraints == N * (3 * 17 + 17 + 8 + 17 + 2)
        assert r.n_wires == 1 + N + 3 * N + N * (3 * 16 + 16 + 8 + 16 + 1)   # out, inputs, bits, quotient
        assert "linear" not in r.counts_by_gadget()
    xs = [_raw(rng)[0] for _ in range(3)]
    w = c.witness_raw(xs)
    assert c.check(w)
    assert np.array_equal(w.values[c.output_wires[0]], cg.run_fixed(prog, xs)[0])
    assert len(r.unconstrained_wires()) == 0


def test_a_sum_proven_in_range_has_no_range_check(rng):
    """``a/4 + b/4`` cannot leave fixed(16, 8): the sum has no wire, no constraint and no lookup; each scale
    keeps its constraint, quotient and remainder wires and their two lookups."""
    prog, c = _circuit(lambda a, b: a * 0.25 + b * 0.25, 2)
    assert [type(a.op).__name__ for a in prog.instrs] == ["Scale", "Scale", "Add"]
    r = c.r1cs
    assert r.counts_by_gadget() == {"scale": 2 * N, "output": N}
    assert r.counts_by_gadget(lookups=True) == {"input.range.limbs": 2 * N, "scale.remainder.limbs": 2 * N,
                                                "scale.range.limbs": 2 * N}
    assert r.n_wires == 1 + N + 2 * N + 4 * N
    xs = [_raw(rng, -127, 127)[0] for _ in range(2)]
    xs[0][0], xs[1][0] = Q.lo, Q.lo                                 # the extremes of the interval
    xs[0][1], xs[1][1] = Q.hi, Q.hi
    w = c.witness_raw(xs)
    assert c.check(w) and np.array_equal(w.values[c.output_wires[0]], cg.run_fixed(prog, xs)[0])


def test_a_sum_that_can_overflow_keeps_its_range_check():
    prog, c = _circuit(lambda a, b: a * 0.5 + b, 2)
    assert c.r1cs.counts_by_gadget(lookups=True)["linear.range.limbs"] == N
    assert I.intervals(prog, Q)[1] == set()


def test_a_sum_read_by_a_contraction_gets_one_wire():
    """A matmul operand needs wires: the sum gets a wire and one constraint (kind ``linear``), once."""
    A, B = cg.NdArrayType((2, 3)), cg.NdArrayType((3, 2))
    prog = retype(cg.schedule(cg.trace(lambda a, b, x: (a + b) @ x, (A, A, B), name="t")), Q)
    c = zk.compile_program(prog, Q, zk.LIGERO51, table_bits=16)
    assert c.r1cs.counts_by_gadget()["linear"] == 6
    rng = np.random.default_rng(3)
    xs = [np.round(rng.uniform(-2, 2, s.shape) * Q.one).astype(np.int64) for s in (A, A, B)]
    w = c.witness_raw(xs)
    assert c.check(w) and np.array_equal(w.values[c.output_wires[0]], cg.run_fixed(prog, xs)[0])


def test_counting_and_building_agree_with_combinations():
    prog = retype(cg.schedule(cg.trace(lambda a, b, x: ((a + b) - x) * (a - x) + b, (T,) * 3, name="t")), Q)
    built = zk.compile_program(prog, Q, zk.LIGERO51, table_bits=16)
    counted = zk.compile_program(prog, Q, zk.LIGERO51, table_bits=16, count_only=True)
    b, k = built.r1cs, counted.r1cs
    assert (k.n_wires, k.n_constraints, k.n_lookups) == (b.n_wires, b.n_constraints, b.n_lookups)
    assert k.nonzeros == b.nonzeros


# ---------------------------------------------------------------- intervals
def test_intervals_of_a_small_program():
    prog = retype(cg.schedule(cg.trace(lambda a, b: a * 0.25 + b * 0.25 + a, (T, T), name="t")), Q)
    bounds, proven = I.intervals(prog, Q)
    kinds = [type(a.op).__name__ for a in prog.instrs]
    assert kinds == ["Scale", "Scale", "Add", "Add"]
    assert proven == {2}
    q = (Q.lo + 128) >> 8 << 6, (Q.hi * 64 + 128) >> 8               # rescale(x·64) at both ends: [−8192, 8192]
    assert q == (-8192, 8192)
    assert bounds[prog.instrs[2].results[0]] == (-16384, 16384)
    assert bounds[prog.instrs[3].results[0]] == (Q.lo, Q.hi)          # cut to the format by its range check
    assert I.intervals(prog, Q, [(0, 256), (0, 256)])[1] == {2, 3}


@pytest.mark.parametrize("dt", [cg.fixed(16, 8), cg.fixed(20, 10)])
def test_plan_images_reach_exactly_zero_and_one(dt):
    """Sigmoid reaches 0 (``x ≤ −5``) and 1 (``x ≥ 5``) and nothing beyond; tanh −1 and 1."""
    assert I._plan_image(dt, False) == (0, dt.one)
    assert I._plan_image(dt, True) == (-dt.one, dt.one)


def test_plan_images_follow_the_interpreter_where_rounding_overshoots():
    """In fixed(12, 4) the rounded pieces overshoot 1.0: the image is the interpreter's, not [0, 1]."""
    dt = cg.fixed(12, 4)
    x = np.arange(dt.lo, dt.hi + 1)
    op = P.Sigmoid(cg.NdArrayType(x.shape))
    prog = retype(cg.schedule(cg.trace(lambda a: apply(op, a), op.source, name="s")), dt)
    y = cg.run_fixed(prog, [x])[0]
    assert int(y.max()) > dt.one and int(y.min()) < 0
    assert I._plan_image(dt, False) == (int(y.min()), int(y.max()))


def test_plan_images_above_20_bits_are_the_format():
    dt = cg.fixed(24, 12)
    assert I._plan_image(dt, False) == I._plan_image(dt, True) == (dt.lo, dt.hi)


# ---------------------------------------------------------------- cheating provers
@pytest.mark.parametrize("range_checks", ["lookup", "bits"])
@pytest.mark.parametrize("fn,n_in", [(lambda a, b, x: (a + b) * x, 3), (lambda a, b, x: (a - b) * 0.75 + x, 3),
                                     (lambda a, b: a * 0.25 + b * 0.25, 2)], ids=["mul", "scale", "proven"])
def test_no_consistent_lie_about_a_combination(fn, n_in, range_checks, rng):
    """Lying about a sum that has no wire (every later value recomputed from the lie) breaks a constraint."""
    prog, c = _circuit(fn, n_in, range_checks)
    xs = [_raw(rng)[0] for _ in range(n_in)]
    assert c.check(c.witness_raw(xs)) and c.n_combinations
    for index in range(-1, -c.n_combinations - 1, -1):
        for delta in (1, -1, 256):
            W = replay_lie(c, xs, index, delta)
            assert W is None or not c.check(W), (index, delta)


def test_an_overflowing_sum_without_a_wire_is_rejected():
    """``(a + b)·x`` with ``a + b`` past the format: the witness program refuses, and a witness built past that
    refusal breaks the sum's range check (a lookup), which the native prover refuses to prove."""
    prog, c = _circuit(lambda a, b, x: (a + b) * x, 3)
    xs = [np.full(N, Q.hi), np.full(N, 2), np.full(N, 1)]
    with pytest.raises(cg.FixedPointOverflow, match=r"^Add#0 overflowed fixed\(16,8\)"):
        c.witness_raw(xs)
    W = np.zeros(c.r1cs.n_wires + c.n_combinations, dtype=np.int64)
    W[0] = 1
    for wires, v in zip(c.input_wires, xs):
        W[wires.reshape(-1)] = v
    for wires, fn in c.fills:                       # the sum's fill and its range guard would refuse: skip them
        if wires.size:
            W[wires] = (W[c.input_wires[0]] + W[c.input_wires[1]]) if (wires < 0).all() else fn(W)
    bad = W[:c.r1cs.n_wires]
    assert c.r1cs.failing(bad).size == 0 and c.r1cs.failing_lookups(bad).size == N
    assert not c.check(bad)
    with pytest.raises(ValueError, match=r"^ligero: lookup \d+ \(.*linear\.range\.limbs\) is outside its table"):
        zk.prove(c, bad, check=False)


@pytest.mark.parametrize("fn,n_in", [(lambda a, b, x: (a + b) * x, 3), (lambda a, b: a * 0.25 + b * 0.25, 2)],
                         ids=["mul", "proven"])
def test_the_native_verifier_rejects_a_lie_about_a_combination(fn, n_in, rng):
    """A product's quotient moved by one ulp (as if the sum were one larger), its remainder recomputed: the
    witness breaks a constraint, and its proof (made without the prover's satisfiability check) is rejected."""
    prog, c = _circuit(fn, n_in)
    xs = [_raw(rng)[0] for _ in range(n_in)]
    honest = c.witness_raw(xs)
    zk.check(zk.prove(c, honest, rng=np.random.default_rng(0)), c, honest.public)
    W = replay_lie(c, xs, -1, 1 << Q.frac)
    assert W is not None and not c.check(W)
    public = [int(v) % c.field.p for v in W[1:1 + c.r1cs.n_public]]
    proof = zk.prove(c, W, check=False, rng=np.random.default_rng(1))
    with pytest.raises(zk.Reject):
        zk.check(proof, c, public)
