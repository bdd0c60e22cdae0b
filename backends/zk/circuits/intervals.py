"""Interval analysis: which linear results of a fixed-point program cannot leave the format.

Every value of a program gets one interval ``[lo, hi]`` of raw integers that holds for every entry, every
input in range and every witness that satisfies the circuit. Each instruction's interval comes from its
operands' and its semantics (:doc:`docs/FIXED_POINT.md`):

| primitive | interval |
|---|---|
| Add, Neg, SumTo (``k`` terms), Fold (``c`` entries) | the exact sum of the operands' intervals |
| Mul, Scale, MatMul (``n`` products) | ``rescale`` of the extreme products (``n`` times), monotone |
| Constant | its raw value |
| Heaviside, Softmax, OneHot, ArgMaxMask | ``[0, 2^f]`` (``s = ⌊e·2^f/Σe⌋`` with ``0 ≤ e ≤ Σe``) |
| Sigmoid, Tanh | the image of the whole format (evaluated for widths up to 20, else the format) |
| Exp, Sqrt | ``[0, hi]`` |
| data movement | the operand's (with 0 where masked, padded or out of the image) |
| anything else | the format ``[lo, hi]`` |

Every result is then cut to the format: its range check (kept on every instruction but the proven ones)
guarantees it. A linear instruction (Add, Neg, SumTo, Fold) whose exact interval already lies in the format
is *proven*: its range check is redundant, and the lowering leaves it out (``Lowering.proven``). Why this
is sound: the circuit pins every value to the interpreter's (each gadget's argument, in program order), so
a value's interval over honest computations bounds it in every satisfying witness, and a proven
combination's integer value lies in the format like any range-checked wire's, so every constraint that
reads it stays within ``lower.required_bits``.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.fixedpoint import const, constant_raw, sigmoid_fixed
from circuitgrad.types import Fixed

__all__ = ["intervals", "product_operands", "Interval", "EXHAUSTIVE_BITS"]

Interval = tuple  # (lo, hi): Python ints

#: Sigmoid and Tanh are evaluated on every input of formats up to this width
EXHAUSTIVE_BITS = 20

_MOVE = (P.Transpose, P.Reshape, P.Broadcast, P.Permute, P.Slice)
_WITH_ZERO = (P.Pad, P.CausalMask, P.Unfold)
_UNIT = (P.Heaviside, P.Softmax, P.OneHot, P.ArgMaxMask)
_LINEAR = (P.Add, P.Neg, P.SumTo, P.Fold)


def _rescale(v: int, f: int) -> int:
    return (v + (1 << (f - 1))) >> f


def _products(a: Interval, b: Interval, n: int, f: int) -> Interval:
    """``rescale`` of a sum of ``n`` products (fewer where a factor is the 0 wire: 0 is in both intervals)."""
    ps = [x * y for x in a for y in b]
    return _rescale(n * min(min(ps), 0), f), _rescale(n * max(max(ps), 0), f)


@functools.lru_cache(maxsize=None)
def _plan_image(dt: Fixed, tanh: bool) -> Interval:
    if dt.width > EXHAUSTIVE_BITS:
        return dt.lo, dt.hi
    x = np.arange(dt.lo, dt.hi + 1, dtype=np.int64)
    y = 2 * sigmoid_fixed(2 * x, dt) - dt.one if tanh else sigmoid_fixed(x, dt)
    return int(y.min()), int(y.max())


def _fold_count(op: P.Fold) -> int:
    return -(-op.kernel[0] // op.stride[0]) * -(-op.kernel[1] // op.stride[1])


def _exact(op, args: list, prog, a, dt: Fixed) -> list | None:
    """The exact intervals of ``op``'s results from its operands' (None: the format)."""
    f, one = dt.frac, dt.one
    if isinstance(op, P.Copy):
        return [args[0]] * op.n
    if isinstance(op, _MOVE):
        return [args[0]]
    if isinstance(op, _WITH_ZERO):
        return [(min(args[0][0], 0), max(args[0][1], 0))]
    if isinstance(op, P.Constant):
        c = constant_raw(op, dt)
        return [(c, c)]
    if isinstance(op, P.Add):
        return [(args[0][0] + args[1][0], args[0][1] + args[1][1])]
    if isinstance(op, P.Neg):
        return [(-args[0][1], -args[0][0])]
    if isinstance(op, P.SumTo):
        k = int(np.prod(op.T.shape, dtype=np.int64)) // max(1, int(np.prod(op.S.shape, dtype=np.int64)))
        return [(k * min(args[0][0], 0), k * max(args[0][1], 0))]
    if isinstance(op, P.Fold):
        c = _fold_count(op)
        return [(c * min(args[0][0], 0), c * max(args[0][1], 0))]
    if isinstance(op, P.Mul):
        return [_products(args[0], args[1], 1, f)]
    if isinstance(op, P.Scale):
        c = const(op.c, dt, "Scale constant")
        return [_products(args[0], (c, c), 1, f)]
    if isinstance(op, (P.MatMul, P.BatchMatMul)):
        return [_products(args[0], args[1], prog.types[a.args[0]].shape[-1], f)]
    if isinstance(op, _UNIT):
        return [(0, one)] * len(a.results)
    if isinstance(op, (P.Sigmoid, P.Tanh)):
        return [_plan_image(dt, isinstance(op, P.Tanh))]
    if isinstance(op, (P.Exp, P.Sqrt)):
        return [(0, dt.hi)]
    return None


def intervals(prog, dt: Fixed, inputs: Sequence[Interval | None] = ()) -> tuple[dict[int, Interval], set[int]]:
    """Each value's interval, and the indices of the linear instructions proven in range.

    ``inputs``: a tighter interval per program input than the format (None: the format), such as
    ``[0, 2^f]`` for one-hot targets.
    """
    fmt = (dt.lo, dt.hi)
    bounds: dict[int, Interval] = {}
    for k, v in enumerate(prog.inputs):
        given = inputs[k] if k < len(inputs) else None
        bounds[v] = (max(given[0], dt.lo), min(given[1], dt.hi)) if given is not None else fmt
    proven: set[int] = set()
    for i, a in enumerate(prog.instrs):
        args = [bounds.get(x, fmt) for x in a.args]
        exact = _exact(a.op, args, prog, a, dt)
        if exact is None:
            exact = [fmt] * len(a.results)
        if isinstance(a.op, _LINEAR) and fmt[0] <= exact[0][0] and exact[0][1] <= fmt[1]:
            proven.add(i)
        for r, (lo, hi) in zip(a.results, exact):
            bounds[r] = (max(lo, dt.lo), min(hi, dt.hi))
    return bounds, proven


def product_operands(prog) -> set[int]:
    """Indices of the instructions whose result reaches an operand of a ``MatMul`` or ``BatchMatMul`` (through
    data movement only)."""
    move = (P.Copy, P.Transpose, P.Reshape, P.Broadcast, P.Permute, P.Slice, P.Pad, P.CausalMask, P.Unfold)
    users: dict[int, list] = {}
    for a in prog.instrs:
        for x in a.args:
            users.setdefault(x, []).append(a)
    made = {r: i for i, a in enumerate(prog.instrs) for r in a.results}
    out: set[int] = set()
    for a in prog.instrs:
        if not isinstance(a.op, (P.MatMul, P.BatchMatMul)):
            continue
        todo = list(a.args)
        while todo:
            v = todo.pop()
            i = made.get(v)
            if i is None or i in out:
                continue
            src = prog.instrs[i]
            if isinstance(src.op, move):
                todo.extend(src.args)
            else:
                out.add(i)
    return out
