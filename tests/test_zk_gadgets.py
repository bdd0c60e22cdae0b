"""ZK gadgets: every primitive's circuit accepts the interpreter's computation, and
changing any single non-deterministic witness value (a bit, a remainder, a quotient,
a sign, an intermediate) breaks at least one constraint."""
from __future__ import annotations

import re

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import primitives as P
from circuitgrad.backends import zk
from circuitgrad.diagram import apply
from circuitgrad.fixedpoint import quantize

Q = cg.fixed(16, 8)


def _circuit(op):
    d = cg.trace(lambda *a: apply(op, *a), op.source, name=op.name)
    prog = cg.retype(cg.schedule(d), Q)
    return prog, zk.compile_program(prog, Q, zk.BN254)


T = cg.NdArrayType((2, 3))
CASES = [
    P.Add(T), P.Neg(T), P.Mul(T), P.Scale(T, -0.75), P.MatMul(cg.NdArrayType((2, 3)), cg.NdArrayType((3, 2))),
    P.SumTo(T, cg.NdArrayType((3,))), P.Constant(T, 1.5), P.Heaviside(T), P.Sigmoid(T), P.Tanh(T),
    P.Softmax(T), P.Transpose(T), P.Broadcast(cg.NdArrayType((3,)), T),
]


def _inputs(op, rng, scale=3.0):
    return [quantize(rng.uniform(-scale, scale, size=t.shape), Q) for t in op.source]


@pytest.mark.parametrize("op", CASES, ids=lambda op: op.name)
def test_gadget_accepts_interpreter_and_pins_every_value(op, rng):
    prog, c = _circuit(op)
    xs = _inputs(op, rng)
    w = c.witness_raw(xs)
    assert c.check(w)
    want = cg.run_fixed(prog, xs)
    got = [w.values[o] for o in c.output_wires]
    assert all(np.array_equal(g, x) for g, x in zip(got, want))
    r = c.r1cs
    assert len(r.unconstrained_wires()) == 0
    p = r.field.p
    base = w.values.astype(object)
    for wire in range(1, r.n_wires):
        rows = r.rows_of_wire(wire)
        for delta in (1, p - 1, int(rng.integers(2, 1 << 62))):
            mutated = base.copy()
            mutated[wire] = (mutated[wire] + delta) % p
            assert len(r.failing(mutated, rows)) > 0, f"{op.name}: wire {r.wire_name(wire)} is not pinned"


def test_rescale_has_no_second_witness(rng):
    """The circomlib-ml class of bug: a quotient off by one with a compensating remainder."""
    op = P.Mul(T)
    prog, c = _circuit(op)
    w = c.witness_raw(_inputs(op, rng))
    q = c.output_wires[0].reshape(-1)[0]
    r = c.r1cs
    # find the rescale constraint mentioning q and the remainder bits in it; shift q by one and the
    # remainder by 2^f: the bits cannot represent it, so booleanity or the sum must break
    mutated = w.values.astype(object)
    mutated[q] += 1
    assert len(r.failing(mutated)) > 0


def test_unsupported_primitive_is_a_clear_error():
    T1 = cg.NdArrayType((2, 3), Q)
    d = cg.trace(lambda x: apply(P.LogSumExp(T1), x), [T1], name="lse")
    with pytest.raises(NotImplementedError) as e:
        zk.compile_program(cg.schedule(d), Q)
    assert str(e.value) == "zk.compile: the ZK backend has no rule for ['LogSumExp'] (used by lse)"


def test_unsatisfied_witness_names_constraint_and_operation(rng):
    op = P.MatMul(cg.NdArrayType((2, 3)), cg.NdArrayType((3, 2)))
    prog, c = _circuit(op)
    w = c.witness_raw(_inputs(op, rng))
    r = c.r1cs
    out_row = [i for i, t in enumerate(r.tags) if t.endswith(":output")][0]
    internal = r.A.wires[r.A.ptr[r.block_rows[out_row]]]        # the matmul result behind the output
    v = w.values.copy()
    v[internal] += 1
    with pytest.raises(zk.UnsatisfiedConstraint) as e:
        c.assert_satisfied(v)
    assert re.fullmatch(r"constraint \d+ of \d+ is not satisfied \(\d+ failing in all\); it comes from "
                        r"MatMul#0:matmul\.rescale", str(e.value)), str(e.value)


def test_overflowing_witness_is_a_clear_error():
    op = P.Mul(T)
    prog, c = _circuit(op)
    big = np.full((2, 3), Q.hi)
    with pytest.raises(cg.FixedPointOverflow) as e:
        c.witness_raw([big, big])
    assert str(e.value).startswith("Mul#0 overflowed fixed(16,8): result range [")
