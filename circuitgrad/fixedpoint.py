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
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from . import primitives as P
from .interpret import _unbound, run
from .schedule import Apply, Program
from .types import Fixed, NdArrayType

__all__ = [
    "FixedPointOverflow", "FIXED_RULES", "quantize", "dequantize", "const", "rescale",
    "run_fixed", "EXP2_C1", "LOG2_C1",
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


def rescale(p, frac: int):
    """``round_half_up(p / 2**frac)`` by an arithmetic shift (works on int64 or object arrays)."""
    return (p + (1 << (frac - 1))) >> frac


def quantize(x, dt: Fixed, what: str = "input") -> np.ndarray:
    """Float array → raw fixed-point int64 array (round half up, range-checked)."""
    x = np.asarray(x, dtype=np.float64)
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


def _matmul(op, a, b):
    dt = _fx(op.A)
    n = op.A.shape[1]
    bound = (int(np.abs(a).max(initial=0)) * int(np.abs(b).max(initial=0))) * n
    if bound < (1 << 62):
        return (rescale(a @ b, dt.frac),)
    y = rescale(a.astype(object) @ b.astype(object), dt.frac)     # Python ints: exact, slower
    if y.size and max(abs(int(y.min())), abs(int(y.max()))) < (1 << 62):
        y = y.astype(np.int64)
    return (y,)     # otherwise left as Python ints: the range check reports the overflow


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


def exp_fixed(z: np.ndarray, dt: Fixed) -> np.ndarray:
    """``exp(z)`` for raw ``z ≤ 0``: ``2**k · p(r)`` with ``z·log2 e = k + r``."""
    f = dt.frac
    t = rescale(z * const(math.log2(math.e), dt), f)       # ≤ 0
    k = t >> f                                              # floor, ≤ 0
    r = t - (k << f)                                        # in [0, 2**f)
    c1 = const(EXP2_C1, dt)
    c2 = const(1.0 - EXP2_C1, dt)
    p = dt.one + rescale(r * (c1 + rescale(c2 * r, f)), f)  # in [2**f, 2**(f+1)]
    return p >> np.minimum(-k, 62)


def _softmax(op, x):
    dt = _fx(op.T)
    e = exp_fixed(x - x.max(axis=-1, keepdims=True), dt)
    return ((e << dt.frac) // e.sum(axis=-1, keepdims=True),)


def _bit_length(s: np.ndarray) -> np.ndarray:
    n = np.floor(np.log2(np.maximum(s, 1).astype(np.float64))).astype(np.int64)
    n = np.where((np.int64(1) << n) > s, n - 1, n)           # exact fix-up of float rounding
    n = np.where((np.int64(1) << (n + 1)) <= s, n + 1, n)
    return n


def _logsumexp(op, x):
    dt = _fx(op.T)
    f = dt.frac
    m = x.max(axis=-1, keepdims=True)
    s = exp_fixed(x - m, dt).sum(axis=-1)                   # ≥ 2**f
    n = _bit_length(s)                                      # s ∈ [2**n, 2**(n+1))
    mant = (s << f) >> n                                    # [1, 2) in raw
    u = mant - dt.one
    log2m = rescale(u * (const(LOG2_C1, dt) - rescale(const(LOG2_C1 - 1.0, dt) * u, f)), f)
    ln2 = const(math.log(2.0), dt)
    return (m[..., 0] + (n - f) * ln2 + rescale(log2m * ln2, f),)


FIXED_RULES: dict[type, Callable] = {
    P.Copy: lambda op, x: (x,) * op.n,
    P.Parameter: _unbound,
    P.Constant: lambda op: (np.full(op.T.shape, const(op.value, _fx(op.T)), dtype=np.int64),),
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
}


def _range_check(program: Program):
    def after(i: int, a: Apply, out: Sequence[np.ndarray]) -> None:
        for r, y in zip(a.results, out):
            dt = _fx(program.types[r])
            if y.size == 0:
                continue
            lo, hi = int(y.min()), int(y.max())
            if lo < dt.lo or hi > dt.hi:
                args = ", ".join(str(program.types[x]) for x in a.args)
                raise FixedPointOverflow(
                    f"{a.op.name}({args}) at instruction {i} of {program.name} overflowed {dt}: "
                    f"result range [{lo / dt.one:.6g}, {hi / dt.one:.6g}] exceeds "
                    f"[{dt.lo / dt.one:.6g}, {dt.hi / dt.one:.6g}]; use more integer bits "
                    f"(a wider fixed format), smaller inputs or a smaller learning rate")
    return after


def run_fixed(program: Program, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate a fixed-point program on raw int64 inputs, range-checking every result."""
    outs = run(program, [np.asarray(x, dtype=np.int64) for x in inputs], FIXED_RULES, _range_check(program))
    return [np.asarray(o, dtype=np.int64) for o in outs]
