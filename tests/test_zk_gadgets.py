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
from circuitgrad.tracing import apply
from circuitgrad.fixedpoint import quantize
from circuitgrad.schedule import retype
from conftest import CASES, VOCAB, T, replay_lie, vocab_inputs as _inputs

Q = cg.fixed(16, 8)


def _circuit(op, range_checks="bits"):
    d = cg.trace(lambda *a: apply(op, *a), op.source, name=op.name)
    prog = retype(cg.schedule(d), Q)
    return prog, zk.compile_program(prog, Q, zk.BN254, range_checks=range_checks)


@pytest.mark.parametrize("op", CASES + VOCAB, ids=lambda op: op.name + ("(causal)" if getattr(op, "causal", 0) else ""))
def test_gadget_accepts_interpreter_and_pins_every_value(op, rng):
    prog, c = _circuit(op)
    xs = _inputs(op, rng)
    w = c.witness_raw(xs)
    assert c.check(w)
    want = cg.run_fixed(prog, xs)
    got = [w.values[o] for o in c.output_wires]
    assert all(np.array_equal(g, x) for g, x in zip(got, want))
    _assert_pinned(c, w, rng, op.name)


def _assert_pinned(c, w, rng, name):
    """No wire is unconstrained, and moving any wire by ±1 or a random value breaks a constraint."""
    r = c.r1cs
    assert len(r.unconstrained_wires()) == 0
    p = r.field.p
    base = w.values.astype(object)
    for wire in range(1, r.n_wires):
        rows = r.rows_of_wire(wire)
        for delta in (1, p - 1, int(rng.integers(2, 1 << 62))):
            mutated = base.copy()
            mutated[wire] = (mutated[wire] + delta) % p
            assert len(r.failing(mutated, rows)) > 0, f"{name}: wire {r.wire_name(wire)} is not pinned"


@pytest.mark.parametrize("kind", ["softmax", "spherical"])
def test_causal_attention_head_and_its_reverse_pin_every_wire(kind, rng):
    """Masked entries are the constant-0 wire, and products, sums and MACs with it cost nothing: the
    whole head (forward and reverse derivative) stays sound and bit-exact."""
    from circuitgrad import ops
    T = cg.NdArrayType((3, 2))
    d = cg.rdiff(cg.trace(lambda q, k, v: ops.attention(q, k, v, causal=True, kind=kind), [T] * 3, name=kind))
    prog = retype(cg.schedule(d), Q)
    c = zk.compile_program(prog, Q)
    xs = [quantize(rng.uniform(-2, 2, size=prog.types[v].shape), Q) for v in prog.inputs]
    w = c.witness_raw(xs)
    assert c.check(w)
    assert all(np.array_equal(w.values[o], x) for o, x in zip(c.output_wires, cg.run_fixed(prog, xs)))
    _assert_pinned(c, w, rng, kind)


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


@pytest.mark.parametrize("range_checks", ["bits", "lookup"])
@pytest.mark.parametrize("op", VOCAB, ids=lambda op: op.name + ("(causal)" if getattr(op, "causal", 0) else ""))
def test_no_second_witness_from_a_consistent_lie(op, range_checks, rng):
    """Structured mutations (quotient + 1 with its remainder recomputed, root − 1 with its gaps, another
    maximum, shift or bit length with everything after it): no lie about a value computed by a fill has
    a consistent completion, whether ranges are bits or lookups."""
    prog, c = _circuit(op, range_checks)
    xs = _inputs(op, rng)
    assert c.check(c.witness_raw(xs))
    for wires, _ in c.fills:
        if not len(wires):                               # a range check's witness-time guard fills nothing
            continue
        for wire in {int(wires[0]), int(wires[-1]), int(wires[len(wires) // 2])}:
            for delta in (1, -1):
                W = replay_lie(c, xs, wire, delta, (ArithmeticError, ValueError, IndexError))
                assert W is None or not c.check(W), f"{op.name}: lying about {c.r1cs.wire_name(wire)} by {delta}"


#: values at the edges of each domain, in fixed(16,8): (op, operand values)
EDGES = [
    (P.Exp(cg.NdArrayType((6,))), [[-40.0, -6.0, -0.004, 0.0, 3.0, 4.8]]),
    (P.Sqrt(cg.NdArrayType((5,))), [[0.0, 1 / 256, 0.25, 2.0, Q.hi / 256]]),
    (P.Rsqrt(cg.NdArrayType((5,))), [[1 / 256, 2 / 256, 0.25, 2.0, Q.hi / 256]]),
    (P.Log(cg.NdArrayType((5,))), [[1 / 256, 0.5, 1.0, 7.3, Q.hi / 256]]),
    (P.Div(cg.NdArrayType((5,))), [[1.0, -3.0, 127.0, 0.0, -0.5], [-1 / 256, 64.0, 127.0, -2.0, 1 / 256]]),
]


@pytest.mark.parametrize("op,vals", EDGES, ids=lambda v: getattr(v, "name", ""))
def test_edges_of_the_domain(op, vals):
    prog, c = _circuit(op)
    xs = [quantize(np.array(v), Q) for v in vals]
    try:
        want = cg.run_fixed(prog, xs)
    except cg.FixedPointOverflow:                 # the interpreter refuses: so must the witness
        with pytest.raises(cg.FixedPointOverflow):
            c.witness_raw(xs)
        return
    w = c.witness_raw(xs)
    assert c.check(w)
    assert np.array_equal(w.values[c.output_wires[0]], want[0])


@pytest.mark.parametrize("op,vals,message", [
    (P.Exp(cg.NdArrayType((2,))), [[1.0, 5.0]], "Exp#0 overflowed fixed(16,8)"),
    (P.Div(cg.NdArrayType((2,))), [[1.0, 1.0], [1.0, 0.0]], "Div(fixed(16,8)[2], fixed(16,8)[2]): division by zero"),
    (P.Sqrt(cg.NdArrayType((2,))), [[1.0, -1.0]], "Sqrt(fixed(16,8)[2]): square root of a negative value"),
    (P.Rsqrt(cg.NdArrayType((2,))), [[1.0, 0.0]], "Rsqrt(fixed(16,8)[2]): reciprocal square root of a value ≤ 0"),
    (P.Log(cg.NdArrayType((2,))), [[1.0, 0.0]], "Log(fixed(16,8)[2]): log of a value ≤ 0"),
])
def test_out_of_domain_witness_is_refused_naming_the_operation(op, vals, message):
    prog, c = _circuit(op)
    with pytest.raises(cg.FixedPointOverflow) as e:
        c.witness_raw([quantize(np.array(v), Q) for v in vals])
    assert str(e.value).startswith(message), str(e.value)


# ------------------------------------------------------------------ the limb width of range checks by lookups
_FIELD_BITS = 50.99997                       # log2 of the 51-bit Ligero prime 262139·2^33 + 1


def test_ten_million_20_bit_values_take_one_lookup_each_into_a_2_20_table():
    """Committed cells (limb wires + (1 + σL)·(lookups + table entries)), by hand for 10^7 values of 20 bits:
    B = 20: one lookup each, no limb wire, the table [0, 2^20); log2(10^7 + 2^20) = 23.4, so σL =
    ⌈101 / 27.6⌉ = 4 and 5·(10^7 + 2^20) = 55,242,880 cells. Every B < 20 needs two lookups per value:
    at least 5·2·10^7 = 10^8 cells (B = 16: 10^7 limb wires + 5·(2·10^7 + 2^16 + 2^4) = 110,327,760).
    B = 21, 22 use the same [0, 2^20) table (a value's own width) and tie: the narrower wins."""
    from circuitgrad.backends.zk.circuits import gadgets as G
    requests = {20: 10 ** 7}
    assert G.lookup_cells(requests, 20, _FIELD_BITS) == 5 * (10 ** 7 + 2 ** 20) == 55_242_880
    assert G.lookup_cells(requests, 16, _FIELD_BITS) == 10 ** 7 + 5 * (2 * 10 ** 7 + 2 ** 16 + 2 ** 4) == 110_327_760
    assert G.lookup_cells(requests, 22, _FIELD_BITS) == 55_242_880
    assert G.best_table_bits(requests, _FIELD_BITS) == 20
    assert G.best_table_bits(requests, _FIELD_BITS, choices=range(8, 17)) == 10    # the old range: two 10-bit limbs


def test_ten_thousand_20_bit_values_keep_a_small_table():
    """By hand for 10^4 values of 20 bits: B = 10 is two lookups into [0, 2^10) and one limb wire per value;
    log2(2·10^4 + 2^10) = 14.4, σL = ⌈101 / 36.6⌉ = 3: 10^4 + 4·(2·10^4 + 1024) = 94,096 cells. B = 8, 9 need
    three lookups (≥ 2·10^4 + 4·3·10^4 = 140,000), B = 11 … 19 two lookups and a table of 2^B ≥ 2048 > 1024
    entries, B ≥ 20 the table [0, 2^20) alone: 5·(10^4 + 2^20) = 5,292,880 (σL = ⌈101 / 31.0⌉ = 4)."""
    from circuitgrad.backends.zk.circuits import gadgets as G
    requests = {20: 10 ** 4}
    assert G.lookup_cells(requests, 10, _FIELD_BITS) == 10 ** 4 + 4 * (2 * 10 ** 4 + 2 ** 10) == 94_096
    assert G.lookup_cells(requests, 20, _FIELD_BITS) == 5 * (10 ** 4 + 2 ** 20) == 5_292_880
    assert G.best_table_bits(requests, _FIELD_BITS) == 10


def test_a_mix_of_widths_pays_for_the_table_of_its_commonest_width():
    """10^7 values of 20 bits and 10^7 of 10 bits (remainders): B = 20 gives tables [0, 2^10) and [0, 2^20),
    one lookup per value, log2(2·10^7 + 2^20 + 2^10) = 24.3, σL = ⌈101 / 26.7⌉ = 4:
    5·(2·10^7 + 2^20 + 2^10) = 105,248,000 cells. B = 10: three lookups per pair and 10^7 limb wires,
    10^7 + 5·(3·10^7 + 2^10) = 160,005,120; B = 16: the same lookups and tables [0, 2^4), [0, 2^10),
    [0, 2^16): 10^7 + 5·(3·10^7 + 2^4 + 2^10 + 2^16) = 160,332,880."""
    from circuitgrad.backends.zk.circuits import gadgets as G
    requests = {20: 10 ** 7, 10: 10 ** 7}
    assert G.lookup_cells(requests, 20, _FIELD_BITS) == 105_248_000
    assert G.lookup_cells(requests, 10, _FIELD_BITS) == 160_005_120
    assert G.lookup_cells(requests, 16, _FIELD_BITS) == 160_332_880
    assert G.best_table_bits(requests, _FIELD_BITS) == 20
