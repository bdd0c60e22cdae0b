"""Fixed-point rules of the second-stage vocabulary (Exp, Log, Sqrt, Div, ArgMaxMask, Permute,
BatchMatMul, CausalMask, causal Softmax): bit-exact against pure-Python integer references, the
checkable identities a ZK circuit uses (remainder, square bracket, one-hot), error bounds against
float64 (the numbers of docs/FIXED_POINT.md), and errors that name the operation."""
from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import ops
from circuitgrad import primitives as P
from circuitgrad.tracing import apply
from circuitgrad.fixedpoint import (EXP2_C1, FIXED_RULES, LOG2_C1, FixedPointDomainError, dequantize,
                                    quantize)
from circuitgrad.interpret import FLOAT_RULES

Q32 = cg.fixed(32, 16)
Q16 = cg.fixed(16, 8)
FORMATS = [Q32, Q16]


def _run(op, *xs):
    d = cg.trace(lambda *a: apply(op, *a), op.source, name=op.name)
    return cg.run_fixed(cg.schedule(d), list(xs))


def _float(op, *raw, dt):
    (y,) = FLOAT_RULES[type(op)](op, *(dequantize(x, dt) for x in raw))
    return y


def _raw(rng, lo: float, hi: float, shape, dt) -> np.ndarray:
    return rng.integers(math.ceil(lo * dt.one), math.floor(hi * dt.one) + 1, size=shape)


# ------------------------------------------------- pure-Python references (one element, Python ints)
def _c(x: float, f: int) -> int:
    return math.floor(x * (1 << f) + 0.5)


def _rs(p: int, f: int) -> int:
    return (p + (1 << (f - 1))) >> f


def exp_ref(z: int, f: int) -> int:
    t = _rs(z * _c(math.log2(math.e), f), f)
    k = t >> f
    r = t - (k << f)
    p = (1 << f) + _rs(r * (_c(EXP2_C1, f) + _rs(_c(1 - EXP2_C1, f) * r, f)), f)
    return p >> min(-k, 62) if k <= 0 else p << min(k, 61 - f)


def log_ref(s: int, f: int) -> int:
    n = s.bit_length() - 1
    u = ((s << f) >> n) - (1 << f)
    log2m = _rs(u * (_c(LOG2_C1, f) - _rs(_c(LOG2_C1 - 1, f) * u, f)), f)
    return _rs((((n - f) << f) + log2m) * _c(math.log(2), f + 8), f + 8)


def div_ref(a: int, b: int, f: int) -> int:
    return math.floor(Fraction(a << f, b) + Fraction(1, 2))


# --------------------------------------------------------------- exact integer definitions
@pytest.mark.parametrize("dt", FORMATS + [cg.fixed(32, 28), cg.fixed(8, 4)], ids=str)
def test_exp_is_the_2k_unit_for_either_sign(dt, rng):
    top = math.log(dt.hi / dt.one) - 0.01
    x = np.concatenate([_raw(rng, -30, top, 2000, dt), [0, -1, 1, dt.lo, int(top * dt.one)]])
    (got,) = _run(P.Exp(cg.NdArrayType(x.shape, dt)), x)
    assert got.tolist() == [exp_ref(int(v), dt.frac) for v in x]


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_exp_of_non_positive_is_the_softmax_unit(dt, rng):
    """Softmax and Exp share one exp unit: softmax of [0, z] is exp(z) / (1 + exp(z)) on the same integers."""
    z = _raw(rng, -20, 0, 500, dt)
    (e,) = _run(P.Exp(cg.NdArrayType(z.shape, dt)), z)
    x = np.stack([np.zeros_like(z), z], -1)
    (s,) = _run(P.Softmax(cg.NdArrayType(x.shape, dt)), x)
    assert s[:, 1].tolist() == ((e << dt.frac) // (dt.one + e)).tolist()


@pytest.mark.parametrize("dt", FORMATS + [cg.fixed(32, 24), cg.fixed(32, 30), cg.fixed(8, 4)], ids=str)
def test_log_normalises_by_bit_length(dt, rng):
    x = np.concatenate([rng.integers(1, dt.hi + 1, size=2000), [1, 2, 3, dt.one - 1, dt.one, dt.one + 1, dt.hi],
                        1 << np.arange(dt.width - 1)])
    x = x[np.abs(np.log(x / dt.one)) < dt.hi / dt.one - 0.01]    # results in range
    (got,) = _run(P.Log(cg.NdArrayType(x.shape, dt)), x)
    assert got.tolist() == [log_ref(int(v), dt.frac) for v in x]
    assert np.all(got[x == dt.one] == 0)                        # ln 1 = 0 exactly


@pytest.mark.parametrize("dt", FORMATS + [cg.fixed(8, 4)], ids=str)
def test_rsqrt_is_one_divided_by_the_square_root(dt, rng):
    """``Rsqrt`` is defined as ``Div(1, Sqrt(x))`` (what its ZK and FPGA rules build), checked here against
    integer arithmetic: ``q = isqrt(x·2^f)``, then ``1/q`` rounded half up."""
    x = np.concatenate([rng.integers(1, dt.hi + 1, size=3000), [1, 2, 3, dt.one, dt.hi]])
    (y,) = _run(P.Rsqrt(cg.NdArrayType(x.shape, dt)), x)
    for a, r in zip(x.tolist(), y.tolist()):
        q = math.isqrt(a << dt.frac)
        num = dt.one << dt.frac
        assert r == num // q + (2 * (num % q) >= q)


@pytest.mark.parametrize("dt", FORMATS + [cg.fixed(32, 31), cg.fixed(8, 4)], ids=str)
def test_sqrt_is_the_floor_bracketed_by_squares(dt, rng):
    x = np.concatenate([rng.integers(0, dt.hi + 1, size=3000), [0, 1, 2, dt.one, dt.hi],
                        np.arange(1, 200) ** 2 >> dt.frac, (np.arange(1, 46341) ** 2)[-50:] >> dt.frac])
    x = x[x <= dt.hi]
    (q,) = _run(P.Sqrt(cg.NdArrayType(x.shape, dt)), x)
    for a, r in zip(x.tolist(), q.tolist()):
        n = a << dt.frac
        assert r * r <= n < (r + 1) * (r + 1)
        assert r == math.isqrt(n)


@pytest.mark.parametrize("dt", FORMATS + [cg.fixed(32, 31), cg.fixed(8, 4)], ids=str)
def test_div_rounds_half_up_with_a_checkable_remainder(dt, rng):
    a = np.concatenate([rng.integers(dt.lo, dt.hi + 1, size=3000), [dt.lo, dt.hi, 0, 1, -1, 7, -7]])
    b = np.concatenate([rng.integers(dt.lo, dt.hi + 1, size=3000), [-1 << dt.frac, dt.hi, 3, -3, 3, 2, -2]])
    b = np.where(b == 0, 1, b)
    ok = np.abs(a / b) < dt.hi / dt.one / 2                      # quotients in range
    a, b = a[ok], b[ok]
    (q,) = _run(P.Div(cg.NdArrayType(a.shape, dt)), a, b)
    for x, y, r in zip(a.tolist(), b.tolist(), q.tolist()):
        assert r == div_ref(x, y, dt.frac)
        rem = (x << dt.frac) - r * y                             # the circuit's remainder
        s = 1 if y > 0 else -1
        assert -abs(y) <= 2 * s * rem < abs(y)


def test_div_ties_round_half_up():
    dt = Q32
    half = 1 << (dt.frac + 1)                                   # a / half = a · 2^-17: ties at odd a
    (q,) = _run(P.Div(cg.NdArrayType((6,), dt)), np.array([1, -1, 3, -3, 1, -1]),
                np.array([half, half, half, half, -half, -half]))
    assert q.tolist() == [1, 0, 2, -1, 0, 1]                    # 0.5→1, −0.5→0, 1.5→2, −1.5→−1


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_argmax_mask_is_one_hot_at_the_first_maximum(dt, rng):
    x = rng.integers(-3, 3, size=(200, 7)) * dt.one             # many ties
    (m,) = _run(P.ArgMaxMask(cg.NdArrayType(x.shape, dt)), x)
    assert set(np.unique(m).tolist()) == {0, dt.one}
    assert np.all((m == dt.one).sum(-1) == 1)
    idx = np.argmax(m, -1)
    rows = np.arange(len(x))
    assert np.all(x[rows, idx] == x.max(-1))
    assert all(np.all(x[i, :idx[i]] < x[i, idx[i]]) for i in rows)   # the first maximum


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_permute_and_causal_mask_move_data_exactly(dt, rng):
    T = cg.NdArrayType((3, 4, 5, 6), dt)
    x = rng.integers(dt.lo, dt.hi + 1, size=T.shape)
    (p,) = _run(P.Permute(T, (2, 0, 3, 1)), x)
    assert np.array_equal(p, np.transpose(x, (2, 0, 3, 1)))
    (c,) = _run(P.CausalMask(T), x)
    j, i = np.meshgrid(np.arange(6), np.arange(5))
    assert np.array_equal(c, np.where(j <= i, x, 0))


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_one_hot_rows_are_exact(dt, rng):
    S = cg.NdArrayType((3, 4), cg.index(5))
    ids = rng.integers(0, 5, size=S.shape)
    (y,) = _run(P.OneHot(S, cg.NdArrayType((3, 4, 5), dt)), ids)
    assert np.array_equal(y, (ids[..., None] == np.arange(5)) * dt.one)


def test_copied_ids_pass_the_range_check(rng):
    """An index(n) wire that fans out is copied, not range-checked as fixed point."""
    S = cg.NdArrayType((2, 3), cg.index(7))
    d = cg.trace(lambda i: ops.add(ops.one_hot(i, Q16), ops.one_hot(i, Q16)), [S])
    ids = rng.integers(0, 7, size=S.shape)
    (y,) = cg.run_fixed(cg.schedule(d), [ids])
    assert np.array_equal(y, (ids[..., None] == np.arange(7)) * 2 * Q16.one)


@pytest.mark.parametrize("big", [False, True])
def test_batch_matmul_accumulates_exactly_and_rescales_once(big, rng):
    dt = Q32
    A, B = cg.NdArrayType((2, 3, 5), dt), cg.NdArrayType((2, 5, 4), dt)
    lim = (1 << 31) - 1 if big else 1 << 12
    a = rng.integers(-lim, lim, size=A.shape) // (1 << 14 if big else 1)
    b = rng.integers(-lim, lim, size=B.shape) // (1 << 14 if big else 1)
    if big:                                                      # max|a|·max|b|·n ≥ 2^62: Python ints
        a[0, 0, 0], b[0, 0, 0] = dt.hi, dt.hi
        a[0, 0, 1:], b[0, 1:, 0] = 0, 0
        a[1], b[1] = a[1] // (1 << 8), b[1] // (1 << 8)
    want = [[[_rs(sum(int(a[h, i, k]) * int(b[h, k, j]) for k in range(5)), dt.frac) for j in range(4)]
             for i in range(3)] for h in range(2)]
    if any(abs(v) > dt.hi for m in want for r in m for v in r):
        with pytest.raises(cg.FixedPointOverflow, match=r"^BatchMatMul\("):
            _run(P.BatchMatMul(A, B), a, b)
    else:
        (got,) = _run(P.BatchMatMul(A, B), a, b)
        assert got.tolist() == want


@pytest.mark.parametrize("dt", FORMATS, ids=str)
def test_causal_softmax_masks_exactly_and_rows_sum_to_one(dt, rng):
    T = cg.NdArrayType((5, 7, 7), dt)
    x = _raw(rng, -8, 8, T.shape, dt)
    (s,) = _run(P.Softmax(T, causal=True), x)
    j, i = np.meshgrid(np.arange(7), np.arange(7))
    assert np.all(s[:, j > i] == 0)                             # masked: exactly 0
    assert np.all(s >= 0)
    total = s.sum(-1)
    assert np.all(total <= dt.one) and np.all(total > dt.one - 7)   # each entry floors: < 1 ulp each
    assert np.all(s[:, 0, 0] == dt.one)                         # row 0 sees only itself
    for r in range(7):                                          # row r = plain softmax of its prefix
        (p,) = _run(P.Softmax(cg.NdArrayType((5, r + 1), dt)), np.ascontiguousarray(x[:, r, :r + 1]))
        assert np.array_equal(s[:, r, :r + 1], p)


def test_causal_softmax_ignores_masked_values(rng):
    """A huge masked score changes neither the max nor the sum."""
    dt = Q32
    T = cg.NdArrayType((3, 3), dt)
    x = _raw(rng, -2, 2, T.shape, dt)
    y = x.copy()
    y[0, 1:], y[1, 2] = dt.hi, dt.hi
    assert np.array_equal(_run(P.Softmax(T, causal=True), x)[0], _run(P.Softmax(T, causal=True), y)[0])


# ------------------------------------------------------------- error bounds against float64
# (primitive, dtype) → bound on |fixed − float64| over random inputs (the float64 reference is taken at
# the dequantized inputs). Measured maxima over grids: docs/FIXED_POINT.md, bench/fixed_point_error.py.
def _exp_pos(dt, rng):
    return (_raw(rng, 0, math.log(dt.hi / dt.one) - 0.01, (4000,), dt),)


def _div_args(dt, rng):
    a = rng.integers(dt.lo, dt.hi + 1, size=4000)
    b = np.rint(np.exp(rng.uniform(0, math.log(dt.hi), size=4000))).astype(np.int64) * rng.choice([-1, 1], 4000)
    ok = np.abs(a / b) < 0.99 * dt.hi / dt.one
    return a[ok], b[ok]


CASES = {
    # name: (op of a shape, inputs, {dtype: bound}, relative?)
    "exp x≤0": (lambda s, dt: P.Exp(cg.NdArrayType(s, dt)),
                lambda dt, rng: (_raw(rng, -16, 0, (4000,), dt),), {Q32: 0.0025, Q16: 0.005}, False),
    "exp x>0": (lambda s, dt: P.Exp(cg.NdArrayType(s, dt)), _exp_pos, {Q32: 0.003, Q16: 0.0095}, True),
    "log": (lambda s, dt: P.Log(cg.NdArrayType(s, dt)),
            lambda dt, rng: (np.exp(rng.uniform(0, math.log(dt.hi), 4000)).astype(np.int64),),
            {Q32: 0.0055, Q16: 0.0115}, False),
    "sqrt": (lambda s, dt: P.Sqrt(cg.NdArrayType(s, dt)),
             lambda dt, rng: (rng.integers(0, dt.hi + 1, size=4000),), {Q32: 2 ** -16, Q16: 2 ** -8}, False),
    "rsqrt": (lambda s, dt: P.Rsqrt(cg.NdArrayType(s, dt)),
              lambda dt, rng: (rng.integers(dt.one // 4, dt.hi + 1, size=4000),), {Q32: 2 ** -15, Q16: 2 ** -5},
              False),
    "div": (lambda s, dt: P.Div(cg.NdArrayType(s, dt)), _div_args,
            {Q32: 2 ** -17 + 1e-9, Q16: 2 ** -9 + 1e-9}, False),
    "batch_matmul": (lambda s, dt: P.BatchMatMul(cg.NdArrayType((4, 8, 16), dt), cg.NdArrayType((4, 16, 8), dt)),
                     lambda dt, rng: (_raw(rng, -1, 1, (4, 8, 16), dt), _raw(rng, -1, 1, (4, 16, 8), dt)),
                     {Q32: 2 ** -17 + 1e-12, Q16: 2 ** -9 + 1e-12}, False),
    "softmax causal": (lambda s, dt: P.Softmax(cg.NdArrayType((64, 12, 12), dt), causal=True),
                       lambda dt, rng: (_raw(rng, -8, 8, (64, 12, 12), dt),), {Q32: 0.001, Q16: 0.02}, False),
    "logsumexp": (lambda s, dt: P.LogSumExp(cg.NdArrayType((400, 10), dt)),
                  lambda dt, rng: (_raw(rng, -8, 8, (400, 10), dt),), {Q32: 0.0075, Q16: 0.025}, False),
}


@pytest.mark.parametrize("dt", FORMATS, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_error_against_float64_within_documented_bound(name, dt, rng):
    make, args, bounds, relative = CASES[name]
    xs = args(dt, rng)
    op = make(xs[0].shape, dt)
    (got,) = _run(op, *xs)
    want = _float(op, *xs, dt=dt)
    err = np.abs(dequantize(got, dt) - want)
    if relative:
        err = err / np.abs(want)
    assert err.max() <= bounds[dt], f"{name} at {dt}: error {err.max():.4g} > {bounds[dt]}"
    if name == "sqrt":                                            # floor: never above the true root
        assert np.all(dequantize(got, dt) <= want + 1e-12)


@pytest.mark.parametrize("dt", FORMATS, ids=str)
@pytest.mark.parametrize("op_of", [
    lambda T: P.ArgMaxMask(T), lambda T: P.Permute(T, (1, 2, 0)), lambda T: P.CausalMask(T),
    lambda T: P.Slice(T, ((1, 6, 2), (0, 5, 1), (2, 4, 1))),
    lambda T: P.Pad(T, T.with_shape((7, 9, 5)), ((1, 7, 1), (0, 9, 2), (0, 5, 1))),
    lambda T: P.Unfold(T.with_shape((2, 3, 5, 5)), kernel=3, stride=2, padding=1),
    lambda T: P.Fold(T.with_shape((2, 1, 6, 5)), kernel=(2, 3), stride=1, padding=(0, 1)),
], ids=["argmax_mask", "permute", "causal_mask", "slice", "pad", "unfold", "fold"])
def test_selection_and_movement_equal_float(op_of, dt, rng):
    op = op_of(cg.NdArrayType((6, 5, 5), dt))
    (T,) = op.source
    x = rng.integers(-4, 4, size=T.shape) * (dt.one // 2)
    (got,) = _run(op, x)
    assert np.array_equal(dequantize(got, dt), _float(op, x, dt=dt))


def test_layer_norm_and_causal_attention_track_float(rng):
    """The new rules compose: layer norm (Sqrt, Div) and causal softmax attention (BatchMatMul, Permute)."""
    for dt, tol in ((Q32, 0.002), (Q16, 0.05)):
        Tq = cg.NdArrayType((2, 6, 4), dt)
        fns = {"layer_norm": (lambda x: ops.layer_norm(x, eps=1e-2), 1),
               "attention": (lambda q, k, v: ops.attention(q, k, v, causal=True), 3)}
        for name, (fn, n) in fns.items():
            xs = [quantize(rng.normal(size=Tq.shape), dt) for _ in range(n)]
            (got,) = cg.run_fixed(cg.schedule(cg.trace(fn, [Tq] * n)), xs)
            Tf = Tq.with_dtype(cg.float64)
            (want,) = cg.run(cg.schedule(cg.trace(fn, [Tf] * n)), [dequantize(x, dt) for x in xs])
            assert np.abs(dequantize(got, dt) - want).max() < tol, (name, dt)


# --------------------------------------------------------------------------- errors
DOMAIN_ERRORS = [
    ("div", P.Div(cg.NdArrayType((3,), Q32)), (np.array([1, 2, 3]), np.array([5, 0, 0])),
     "Div(fixed(32,16)[3], fixed(32,16)[3]) at instruction 0 of Div: division by zero (2 of 3 divisors are "
     "0, the first at index [1]); keep divisors away from 0, e.g. add an epsilon of at least 2**-16 to a "
     "non-negative divisor"),
    ("log", P.Log(cg.NdArrayType((2, 2), Q16)), (np.array([[256, 0], [3, 1]]),),
     "Log(fixed(16,8)[2, 2]) at instruction 0 of Log: log of a value ≤ 0 (1 of 4 inputs is ≤ 0, the "
     "smallest 0 at index [0, 1]); log needs inputs > 0: add an epsilon of at least 2**-8 to a "
     "non-negative input"),
    ("sqrt", P.Sqrt(cg.NdArrayType((4,), Q32)), (np.array([4, -1 << 14, 0, -1 << 14]),),
     "Sqrt(fixed(32,16)[4]) at instruction 0 of Sqrt: square root of a negative value (2 of 4 inputs are "
     "< 0, the smallest -0.25 at index [1]); sqrt needs inputs ≥ 0: clamp them at 0 first (relu), or take "
     "the square root of a sum of squares"),
    ("rsqrt", P.Rsqrt(cg.NdArrayType((3,), Q16)), (np.array([4, 0, -3]),),
     "Rsqrt(fixed(16,8)[3]) at instruction 0 of Rsqrt: reciprocal square root of a value ≤ 0 (2 of 3 inputs "
     "are ≤ 0, the smallest -0.0117188 at index [2]); rsqrt needs inputs > 0: add an epsilon of at least "
     "2**-8"),
]


@pytest.mark.parametrize("op,args,message", [c[1:] for c in DOMAIN_ERRORS], ids=[c[0] for c in DOMAIN_ERRORS])
def test_domain_errors_name_the_instruction(op, args, message):
    with pytest.raises(FixedPointDomainError) as e:
        _run(op, *args)
    assert str(e.value) == message
    assert isinstance(e.value, cg.FixedPointOverflow)


def test_rule_errors_name_the_operation_without_a_program():
    """Backends call FIXED_RULES directly (the ZK witness): the message still names the operation."""
    T = cg.NdArrayType((2,), Q16)
    with pytest.raises(FixedPointDomainError) as e:
        FIXED_RULES[P.Div](P.Div(T), np.array([1, 1]), np.array([1, 0]))
    assert str(e.value).startswith("Div(fixed(16,8)[2], fixed(16,8)[2]): division by zero (1 of 2 divisors is 0")


def test_domain_error_inside_a_program_names_its_instruction():
    T = cg.NdArrayType((2, 3), Q32)
    d = cg.trace(lambda x, y: ops.add(ops.log(ops.exp(x)), ops.log(y)), [T, T], name="f")
    x = np.zeros((2, 3), dtype=np.int64)
    with pytest.raises(FixedPointDomainError, match=r"^Log\(fixed\(32,16\)\[2, 3\]\) at instruction \d+ of f: "
                                                    r"log of a value ≤ 0 \(6 of 6 inputs are ≤ 0"):
        cg.run_fixed(cg.schedule(d), [x, x])


OVERFLOWS = [
    # (op, dtype, inputs, operand types in the message)
    (lambda dt: P.Exp(cg.NdArrayType((3,), dt)), Q16, lambda dt: (np.array([0, 4 * dt.one, 5 * dt.one]),)),
    (lambda dt: P.Exp(cg.NdArrayType((2,), dt)), Q32, lambda dt: (np.array([0, 100 * dt.one]),)),
    (lambda dt: P.Log(cg.NdArrayType((2,), dt)), cg.fixed(8, 6), lambda dt: (np.array([64, 1]),)),
    (lambda dt: P.Div(cg.NdArrayType((2,), dt)), Q16, lambda dt: (np.array([dt.one, dt.one]), np.array([dt.one, 1]))),
    (lambda dt: P.BatchMatMul(cg.NdArrayType((1, 1, 2), dt), cg.NdArrayType((1, 2, 1), dt)), Q16,
     lambda dt: (np.full((1, 1, 2), 10 * dt.one), np.full((1, 2, 1), 10 * dt.one))),
    (lambda dt: P.ArgMaxMask(cg.NdArrayType((2,), dt)), cg.fixed(8, 7), lambda dt: (np.array([1, 2]),)),
    (lambda dt: P.OneHot(cg.NdArrayType((2,), cg.index(3)), cg.NdArrayType((2, 3), dt)), cg.fixed(8, 7),
     lambda dt: (np.array([0, 2]),)),
    # overlapping blocks summed back: 4 copies of 0.5 where blocks meet
    (lambda dt: P.Fold(cg.NdArrayType((1, 1, 3, 3), dt), kernel=2), cg.fixed(8, 6),
     lambda dt: (np.full((1, 4, 4), dt.one // 2),)),
]


@pytest.mark.parametrize("case", OVERFLOWS, ids=["exp16", "exp32", "log", "div", "batch_matmul", "argmax_mask",
                                                "one_hot", "fold"])
def test_overflow_names_the_new_operation(case):
    make, dt, args = case
    op = make(dt)
    types = ", ".join(re.escape(str(t)) for t in op.source)
    with pytest.raises(cg.FixedPointOverflow, match=rf"^{op.name}\({types}\) at instruction 0 of {op.name} "
                                                    rf"overflowed {re.escape(str(dt))}: result range \["):
        _run(op, *args(dt))


def test_exp_overflow_is_reported_for_any_positive_argument():
    """Shifts are clamped, never wrapped: e^x for the largest x still reports an overflow, not garbage."""
    for dt in FORMATS + [cg.fixed(32, 8), cg.fixed(24, 20)]:
        T = cg.NdArrayType((1,), dt)
        with pytest.raises(cg.FixedPointOverflow, match=r"^Exp\("):
            _run(P.Exp(T), np.array([dt.hi]))
        (y,) = _run(P.Exp(T), np.array([dt.lo]))                  # the most negative: no wrap either
        assert y.tolist() == [exp_ref(dt.lo, dt.frac)]
        assert abs(y[0] / dt.one - math.exp(dt.lo / dt.one)) <= 2 / dt.one


def test_causal_softmax_without_room_for_its_constants_names_the_operation():
    dt = cg.fixed(8, 7)                                          # log2(e) does not fit in [-1, 1)
    T = cg.NdArrayType((2, 2), dt)
    with pytest.raises(cg.FixedPointOverflow) as e:
        _run(P.Softmax(T, causal=True), np.zeros((2, 2), dtype=np.int64))
    assert str(e.value) == ("Softmax(fixed(8,7)[2, 2]) at instruction 0 of Softmax: exp unit constant log2(e) = "
                            "1.4426950408889634 does not fit in fixed(8,7) (range [-1.0, 0.9921875])")


@pytest.mark.parametrize("dt", FORMATS + [cg.fixed(8, 7), cg.fixed(32, 31)], ids=str)
def test_sqrt_never_overflows(dt):
    """sqrt(hi·2^f) < 2^(w−1) for every format: Sqrt needs no range check of its own."""
    (q,) = _run(P.Sqrt(cg.NdArrayType((3,), dt)), np.array([0, dt.one if dt.frac < dt.width - 1 else 1, dt.hi]))
    assert int(q.max()) <= dt.hi


def test_epsilon_constants_are_at_least_one_step_in_fixed_point():
    """Spherical attention's ε = 1e-6 and layer norm's 1e-5 are below fixed(16,8)'s step: they become one step,
    while an ordinary constant that rounds to 0 is still an error."""
    from circuitgrad import primitives as P
    from circuitgrad.fixedpoint import constant_raw
    T = cg.NdArrayType((), cg.fixed(16, 8))
    assert constant_raw(P.Constant(T, 1e-6, epsilon=True), T.dtype) == 1
    assert constant_raw(P.Constant(T, 0.5, epsilon=True), T.dtype) == 128
    with pytest.raises(cg.FixedPointOverflow, match="rounds to 0"):
        constant_raw(P.Constant(T, 1e-6), T.dtype)
