"""Fixed-point semantics: the specification the FPGA and ZK backends must match.

A value of dtype ``fixed(width, frac)`` is a signed integer ``v`` (held in an
``int64`` array) meaning ``v / 2**frac``.  The rules below are exact integer
computations; ``docs/FIXED_POINT.md`` restates them with measured errors.

* **Rescale** (one rounding mode everywhere): ``rescale(p) = (p + 2**(frac-1)) >> frac``
  (arithmetic shift: round half up).  Products are formed exactly and
  rescaled once; a matmul accumulates exactly and rescales once per output.
* **Constants** (learning rate, ``1/batch``, slopes) are ``floor(c·2**frac + 1/2)``.
  A constant that rounds to 0 is an error.
* **Overflow is never silent**: every instruction's result must lie in
  ``[-2**(width-1), 2**(width-1) - 1]`` or :class:`FixedPointOverflow` names
  the instruction.  (Intermediate products are exact in 63 bits, or in Python
  integers when a matmul's bound says 63 bits could overflow.)
* **Nonlinearities**: ReLU exact (``x · H(x)``); sigmoid by PLAN (piecewise
  linear, power-of-two slopes, max error 0.0189); ``tanh(x) = 2σ(2x) − 1``
  (max error 0.038); softmax by ``exp(z) = 2**(z·log2 e)`` with
  ``2**r ≈ 1 + r(0.66023 + 0.33977 r)`` on ``[0, 1)`` (relative error 0.27%)
  and an exact floor division; ``log`` (LogSumExp, used only for loss values)
  by ``log2(1+u) ≈ u(1.34655 − 0.34655u)`` (error 0.0077).
* **Checkable forms** (a ZK circuit checks them, an FPGA builds them from its
  sequential divider and exp unit): ``Div`` is a quotient rounded half up with
  a range-checked remainder, ``Sqrt`` the floor whose square brackets the
  input, ``Rsqrt`` exactly ``Div(1, Sqrt(x))``, ``Exp`` the same ``2**k · p(r)`` unit for either sign, ``Log`` the
  LogSumExp polynomial after normalising by the bit length, ``ArgMaxMask``
  the exact one-hot of the first maximum.
* **Domain errors** (division by zero, log of a value ≤ 0, square root of a
  negative value, reciprocal square root of a value ≤ 0) raise :class:`FixedPointDomainError`, which names the
  operation (and, from :func:`run_fixed`, the instruction) and says what to do.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from . import primitives as P
from .interpret import FLOAT_RULES, unbound, causal_keep, run
from .schedule import Apply, Program
from .types import Fixed, Index, NdArrayType

__all__ = [
    "FixedPointOverflow", "FixedPointDomainError", "FIXED_RULES", "quantize", "dequantize", "const",
    "rescale", "run_fixed", "EXP2_C1", "LOG2_C1", "exp_fixed", "log_fixed", "div_fixed", "sqrt_fixed",
]

EXP2_C1 = 0.66023      # 2**r ≈ 1 + r·(C1 + (1 − C1)·r), r ∈ [0, 1)
LOG2_C1 = 1.34655      # log2(1 + u) ≈ u·(C1 − (C1 − 1)·u), u ∈ [0, 1)
SIGMOID_PIECES = (     # PLAN (Amin, Curtis, Hayes-Gill 1997): |x| ≥ lower → slope·|x| + offset
    (5.0, 0.0, 1.0),
    (2.375, 0.03125, 0.84375),
    (1.0, 0.125, 0.625),
    (0.0, 0.25, 0.5),
)


class FixedPointOverflow(ArithmeticError):
    """A fixed-point result left the representable range."""


class FixedPointDomainError(FixedPointOverflow):
    """An operand outside an operation's domain: division by zero, log of a value ≤ 0, square root of a
    negative value.

    A :class:`FixedPointOverflow`, so that one ``except`` clause catches every fixed-point failure.
    ``where`` names the operation (``Div(fixed(32,16)[4], fixed(32,16)[4])``, plus ``at instruction i
    of program`` when raised by :func:`run_fixed`); ``detail`` says what went wrong and what to do.
    """

    def __init__(self, where: str, detail: str):
        super().__init__(f"{where}: {detail}")
        self.where, self.detail = where, detail


def _signature(op) -> str:
    return f"{op.name}({', '.join(str(t) for t in op.source)})"


def _index(mask: np.ndarray) -> list[int]:
    """The first index (row-major) where ``mask`` holds, as a list of ints."""
    return [int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape)]


def _smallest(x: np.ndarray, dt: Fixed) -> str:
    """``the smallest v at index [i, …]`` of raw values ``x``, for domain errors."""
    return f"the smallest {int(x.min()) / dt.one:.6g} at index {_index(x == x.min())}"


def _count(n: int, size: int, noun: str, cond: str) -> str:
    return f"{n} of {size} {noun} {'is' if n == 1 else 'are'} {cond}"


def _fx(t: NdArrayType) -> Fixed:
    if not isinstance(t.dtype, Fixed):
        raise TypeError(f"fixed-point interpreter given a non-fixed wire {t}; retype the program first")
    return t.dtype


def const(c: float, dt: Fixed, what: str = "constant") -> int:
    """The raw fixed-point value of constant ``c`` (round half up)."""
    v = math.floor(c * (1 << dt.frac) + 0.5)
    if c != 0 and v == 0:
        raise FixedPointOverflow(f"{what} {c} rounds to 0 in {dt}: its smallest step is 2**-{dt.frac} = "
                                 f"{1 / dt.one:g}; use more fractional bits")
    if not dt.lo <= v <= dt.hi:
        raise FixedPointOverflow(f"{what} {c} does not fit in {dt} (range [{dt.lo / dt.one}, {dt.hi / dt.one}])")
    return v


def constant_raw(op, dt: Fixed) -> int:
    """The raw value of a :class:`Constant` operation: ``const(value)``, or at least one step for an epsilon."""
    if getattr(op, "epsilon", False) and op.value > 0:
        return max(int(round(op.value * (1 << dt.frac))), 1)
    return const(op.value, dt, "Constant")


def rescale(p, frac: int):
    """``round_half_up(p / 2**frac)`` by an arithmetic shift (works on int64 or object arrays)."""
    return (p + (1 << (frac - 1))) >> frac


def quantize(x, dt: Fixed, what: str = "input") -> np.ndarray:
    """Float array → raw fixed-point int64 array (round half up, range-checked).

    NaN and ±inf have no fixed-point value: they raise ``ValueError`` naming how many there are and
    where the first is.  A finite value out of range raises :class:`FixedPointOverflow`."""
    x = np.asarray(x, dtype=np.float64)
    bad = ~np.isfinite(x)
    if bad.any() and x.ndim == 0:
        raise ValueError(f"{what} must be finite, got {float(x)} ({dt} represents only finite numbers)")
    if bad.any():
        k, i = int(bad.sum()), tuple(int(j) for j in np.argwhere(bad)[0])
        raise ValueError(f"{what} must be finite, got {k} NaN or infinite value{'s' if k != 1 else ''} of {x.size}, "
                         f"the first {float(x[i])} at index {i[0] if x.ndim == 1 else i} "
                         f"({dt} represents only finite numbers)")
    v = np.floor(x * (1 << dt.frac) + 0.5)
    if v.size and (v.min() < dt.lo or v.max() > dt.hi):
        raise FixedPointOverflow(f"{what}: values in [{x.min():.6g}, {x.max():.6g}] do not fit in {dt} "
                                 f"(range [{dt.lo / dt.one}, {dt.hi / dt.one}])")
    return v.astype(np.int64)


def dequantize(v, dt: Fixed) -> np.ndarray:
    """Raw fixed-point integers → float64."""
    return np.asarray(v, dtype=np.float64) / (1 << dt.frac)


# ------------------------------------------------------------------- rules
def _mul(op, a, b):
    return (rescale(a * b, _fx(op.T).frac),)


def _scale(op, a):
    dt = _fx(op.T)
    return (rescale(a * const(op.c, dt, "Scale constant"), dt.frac),)


def _exact_matmul(a, b, n: int, frac: int):
    """``rescale(a @ b)`` with exact accumulation: int64 when ``max|a|·max|b|·n < 2**62``, else Python ints."""
    bound = (int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0))) * n
    if bound < (1 << 62):
        return rescale(np.matmul(a, b), frac)
    y = rescale(np.matmul(a.astype(object), b.astype(object)), frac)     # Python ints: exact, slower
    if y.size and max(abs(int(y.min())), abs(int(y.max()))) < (1 << 62):
        y = y.astype(np.int64)
    return y        # otherwise left as Python ints: the range check reports the overflow


def _matmul(op, a, b):
    return (_exact_matmul(a, b, op.A.shape[1], _fx(op.A).frac),)


def _batch_matmul(op, a, b):
    return (_exact_matmul(a, b, op.A.shape[-1], _fx(op.A).frac),)


def _sum_to(op, a):
    lead, kept = op.axes()
    axes = lead + kept
    y = a.sum(axis=axes, keepdims=True) if axes else a
    return (y.reshape(op.S.shape),)


def sigmoid_fixed(x: np.ndarray, dt: Fixed) -> np.ndarray:
    """PLAN sigmoid on raw values."""
    ax = np.abs(x)
    done = ax >= const(SIGMOID_PIECES[0][0], dt)
    y = np.where(done, dt.one, 0)
    for lower, slope, offset in SIGMOID_PIECES[1:]:
        sel = ~done & (ax >= (const(lower, dt) if lower else 0))
        piece = rescale(ax * const(slope, dt), dt.frac) + const(offset, dt)
        y = np.where(sel, piece, y)
        done = done | sel
    return np.where(x >= 0, y, dt.one - y).astype(np.int64)


def _sigmoid(op, x):
    return (sigmoid_fixed(x, _fx(op.T)),)


def _tanh(op, x):
    dt = _fx(op.T)
    return (2 * sigmoid_fixed(2 * x, dt) - dt.one,)


LOG2_E = math.log2(math.e)


def exp_fixed(z: np.ndarray, dt: Fixed) -> np.ndarray:
    """``exp(z)`` on raw values of either sign: ``2**k · p(r)`` with ``z·log2 e = k + r``, ``r ∈ [0, 1)``.

    ``k ≤ 0``: ``p >> −k`` (floor; shift clamped to 62).  ``k > 0``: ``p << k``, exact, with the shift
    clamped to ``61 − frac`` (``p << (61 − frac) ≥ 2**61`` already exceeds every width, so the range
    check reports the overflow; the value it reports is then a lower bound).
    """
    f = dt.frac
    t = rescale(z * const(LOG2_E, dt, "exp unit constant log2(e) ="), f)
    k = t >> f                                              # floor
    r = t - (k << f)                                        # in [0, 2**f)
    c1 = const(EXP2_C1, dt, "exp unit constant")
    c2 = const(1.0 - EXP2_C1, dt, "exp unit constant")
    p = dt.one + rescale(r * (c1 + rescale(c2 * r, f)), f)  # in [2**f, 2**(f+1)]
    down = p >> np.minimum(np.maximum(-k, 0), 62)
    if not np.any(k > 0):
        return down
    return np.where(k > 0, p << np.clip(k, 0, 61 - f), down)


def _exp(op, x):
    return (exp_fixed(x, _fx(op.T)),)


def _softmax(op, x):
    dt = _fx(op.T)
    if not op.causal:
        e = exp_fixed(x - x.max(axis=-1, keepdims=True), dt)
    else:                               # row i keeps j ≤ i: masked entries leave the max and the sum
        keep = np.broadcast_to(causal_keep(x.shape), x.shape)
        m = np.where(keep, x, np.iinfo(np.int64).min).max(axis=-1, keepdims=True)
        e = np.where(keep, exp_fixed(np.where(keep, x - m, 0), dt), 0)
    return ((e << dt.frac) // e.sum(axis=-1, keepdims=True),)


def bit_length(s: np.ndarray) -> np.ndarray:
    n = np.floor(np.log2(np.maximum(s, 1).astype(np.float64))).astype(np.int64)
    n = np.where((np.int64(1) << n) > s, n - 1, n)           # exact fix-up of float rounding
    n = np.where((np.int64(1) << (n + 1)) <= s, n + 1, n)
    return n


LN2_EXTRA_BITS = 8     # the log unit's ln 2 has frac + 8 fractional bits


def log_fixed(s: np.ndarray, dt: Fixed) -> np.ndarray:
    """``ln(s / 2**frac)`` for raw ``s ≥ 1`` (any ``s < 2**62``).

    ``s ∈ [2**n, 2**(n+1))`` (``n`` its bit length − 1); ``mant = floor(s·2**frac / 2**n) ∈ [2**frac,
    2**(frac+1))`` (a shift); ``u = mant − 2**frac``; ``log2(1 + u) ≈ rescale(u·(C1 − rescale((C1 − 1)·u)))``;
    ``L = (n − frac)·2**frac + that`` is ``log2`` in raw fixed point (an exact integer, ``|L| < 2**(frac+6)``);
    the result is ``rescale(L · round(ln 2 · 2**(frac+8)), frac + 8)``: one rounding, and ``ln 2`` precise
    enough (error ``|n − frac|·2**-(frac+9)``) that it adds less than 1/8 ulp.
    """
    f = dt.frac
    n = bit_length(s)
    mant = np.where(n >= f, s >> np.maximum(n - f, 0), s << np.maximum(f - n, 0))
    u = mant - dt.one
    log2m = rescale(u * (const(LOG2_C1, dt, "log unit constant") -
                         rescale(const(LOG2_C1 - 1.0, dt, "log unit constant") * u, f)), f)
    L = ((n - f) << f) + log2m
    g = f + LN2_EXTRA_BITS
    ln2 = math.floor(math.log(2.0) * (1 << g) + 0.5)
    if 2 * f + LN2_EXTRA_BITS + 6 > 62:                      # the product needs more than 63 bits
        return rescale(L.astype(object) * ln2, g).astype(np.int64)
    return rescale(L * ln2, g)


def _logsumexp(op, x):
    dt = _fx(op.T)
    m = x.max(axis=-1, keepdims=True)
    s = exp_fixed(x - m, dt).sum(axis=-1)                   # ≥ 2**f
    return (m[..., 0] + log_fixed(s, dt),)


def _require(op, x: np.ndarray, bad: np.ndarray, what: str, cond: str, advice: str) -> None:
    """Raise :class:`FixedPointDomainError` for the inputs ``x`` marked ``bad`` (``what``: the failure)."""
    if np.any(bad):
        raise FixedPointDomainError(_signature(op), f"{what} ({_count(int(bad.sum()), bad.size, 'inputs', cond)}, "
                                                    f"{_smallest(x, _fx(op.T))}); {advice}")


def _log(op, x):
    dt = _fx(op.T)
    _require(op, x, x <= 0, "log of a value ≤ 0", "≤ 0",
             f"log needs inputs > 0: add an epsilon of at least 2**-{dt.frac} to a non-negative input")
    return (log_fixed(x, dt),)


def sqrt_fixed(a: np.ndarray, dt: Fixed) -> np.ndarray:
    """``floor(sqrt(a·2**frac))`` for raw ``a ≥ 0``, exactly: ``q² ≤ a·2**frac < (q + 1)²``."""
    n = np.asarray(a, dtype=np.int64) << dt.frac               # < 2**62
    q = np.floor(np.sqrt(n.astype(np.float64))).astype(np.int64)
    while np.any(too_big := q * q > n):                         # float rounding: off by at most 1
        q = q - too_big
    while np.any(too_small := (q + 1) * (q + 1) <= n):
        q = q + too_small
    return q


def _sqrt(op, x):
    _require(op, x, x < 0, "square root of a negative value", "< 0",
             "sqrt needs inputs ≥ 0: clamp them at 0 first (relu), or take the square root of a sum of squares")
    return (sqrt_fixed(x, _fx(op.T)),)


def _rsqrt(op, x):
    """``Div(1, Sqrt(x))``, both rounded as they are alone; ``x > 0`` (the root of a positive raw value is ≥ 1)."""
    dt = _fx(op.T)
    _require(op, x, x <= 0, "reciprocal square root of a value ≤ 0", "≤ 0",
             f"rsqrt needs inputs > 0: add an epsilon of at least 2**-{dt.frac}")
    return (div_fixed(dt.one, sqrt_fixed(x, dt), dt),)


def div_fixed(a: np.ndarray, b: np.ndarray, dt: Fixed) -> np.ndarray:
    """``floor(a·2**frac / b + 1/2)`` for raw ``b ≠ 0`` (round half up of the exact quotient).

    With ``s = sign(b)``: ``2·s·a·2**frac + |b| = 2·q·|b| + ρ`` with ``0 ≤ ρ < 2|b|``, i.e. the remainder
    ``r = a·2**frac − q·b`` satisfies ``−|b| ≤ 2·s·r < |b|``.
    """
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    num = np.where(b < 0, -a, a) << dt.frac                     # s·a·2**f, |num| ≤ 2**62
    den = np.abs(b)
    q = num // den                                              # floor
    rem = num - q * den                                         # in [0, |b|)
    return q + (2 * rem >= den)


def _div(op, a, b):
    dt = _fx(op.T)
    zero = b == 0
    if np.any(zero):
        raise FixedPointDomainError(
            _signature(op),
            f"division by zero ({_count(int(zero.sum()), zero.size, 'divisors', '0')}, the first at index "
            f"{_index(zero)}); keep divisors away from 0, e.g. add an epsilon of at least 2**-{dt.frac} to a "
            f"non-negative divisor")
    return (div_fixed(a, b, dt),)


def _one_hot(op, ids):
    """``2**frac`` at each id (ids were checked to lie in ``[0, n)`` at the call), else 0."""
    return ((np.asarray(ids)[..., None] == np.arange(op.S.dtype.n)).astype(np.int64) << _fx(op.T).frac,)


def _argmax_mask(op, x):
    """``2**frac`` at the first maximum along the last axis, else 0."""
    y = np.zeros(x.shape, dtype=np.int64)
    if x.size:
        np.put_along_axis(y, x.argmax(axis=-1)[..., None], _fx(op.T).one, axis=-1)
    return (y,)


FIXED_RULES: dict[type, Callable] = {
    P.Copy: lambda op, x: (x,) * op.n,
    P.Parameter: unbound,
    P.Constant: lambda op: (np.full(op.T.shape, constant_raw(op, _fx(op.T)), dtype=np.int64),),
    P.Add: lambda op, a, b: (a + b,),
    P.Neg: lambda op, a: (-a,),
    P.Mul: _mul,
    P.Scale: _scale,
    P.MatMul: _matmul,
    P.Transpose: lambda op, a: (a.T,),
    P.Reshape: lambda op, a: (a.reshape(op.shape),),
    P.Broadcast: lambda op, a: (np.broadcast_to(a, op.T.shape),),
    P.SumTo: _sum_to,
    P.Heaviside: lambda op, a: (np.where(a > 0, _fx(op.T).one, 0).astype(np.int64),),
    P.Sigmoid: _sigmoid,
    P.Tanh: _tanh,
    P.Softmax: _softmax,
    P.LogSumExp: _logsumexp,
    P.Exp: _exp,
    P.Log: _log,
    P.Sqrt: _sqrt,
    P.Rsqrt: _rsqrt,
    P.Div: _div,
    P.ArgMaxMask: _argmax_mask,
    P.Permute: lambda op, a: (np.transpose(a, op.axes),),
    P.BatchMatMul: _batch_matmul,
    P.OneHot: _one_hot,
    P.CausalMask: lambda op, a: (np.where(causal_keep(a.shape), a, 0).astype(np.int64),),
    # data movement (and Fold's sums of overlapping blocks): exact on raw integers, as in float
    P.Slice: FLOAT_RULES[P.Slice],
    P.Pad: FLOAT_RULES[P.Pad],
    P.Unfold: FLOAT_RULES[P.Unfold],
    P.Fold: FLOAT_RULES[P.Fold],
}


def _range_check(program: Program):
    def after(i: int, a: Apply, out: Sequence[np.ndarray]) -> None:
        for r, y in zip(a.results, out):
            if isinstance(program.types[r].dtype, Index):
                continue        # integer ids: checked against index(n) at the call, only moved since
            dt = _fx(program.types[r])
            if y.size == 0:
                continue
            lo, hi = int(y.min()), int(y.max())
            if lo < dt.lo or hi > dt.hi:
                raise FixedPointOverflow(
                    f"{program.site(i)} overflowed {dt}: "
                    f"result range [{lo / dt.one:.6g}, {hi / dt.one:.6g}] exceeds "
                    f"[{dt.lo / dt.one:.6g}, {dt.hi / dt.one:.6g}]; use more integer bits "
                    f"(a wider fixed format), smaller inputs or a smaller learning rate")
    return after


def run_fixed(program: Program, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate a fixed-point program on raw int64 inputs, range-checking every result.

    Every failure names its instruction: :class:`FixedPointOverflow` from the range check, and errors
    raised inside a rule (a :class:`FixedPointDomainError`, or a constant that does not fit) re-raised
    with ``Op(operand types) at instruction i of program`` in front.
    """
    check = _range_check(program)
    state = {"i": 0, "checking": False}

    def after(i: int, a: Apply, out: Sequence[np.ndarray]) -> None:
        state["i"], state["checking"] = i, True
        check(i, a, out)
        state["i"], state["checking"] = i + 1, False

    try:
        outs = run(program, [np.asarray(x, dtype=np.int64) for x in inputs], FIXED_RULES, after)
    except FixedPointOverflow as e:
        i = state["i"]
        if state["checking"] or i >= len(program.instrs):
            raise
        where = program.site(i)
        if isinstance(e, FixedPointDomainError):
            raise FixedPointDomainError(where, e.detail) from None
        raise FixedPointOverflow(f"{where}: {e}") from None
    return [np.asarray(o, dtype=np.int64) for o in outs]
