"""Lowering rules: one per primitive, each emitting micro-ops over views (see :mod:`.microcode`).

A rule is ``rule(cx, op, *args) -> views of its results``, the convention of every stateful rule table
(docs/ARCHITECTURE.md): ``args`` are the operands' views, ``cx`` (:class:`Context`) allocates memory and
constants and emits micro-ops, and ``cx.shape`` is the first result's shape. Layout rules return views and
emit nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.fixedpoint import const, constant_raw
from circuitgrad.interpret import causal_keep
from circuitgrad.types import Fixed

from .isa import MicroOp, View, broadcast_view, permute_view, reshape_view, slice_view
from .kinds import Kind

__all__ = ["Context", "FPGA_RULES", "UNSUPPORTED"]


@dataclass
class Context:
    """What a rule may do: allocate, name constants, emit micro-ops (``where`` names the instruction)."""
    alloc: Callable[[tuple[int, ...]], View]
    constant: Callable[[int], int]
    table: Callable[[np.ndarray], View]
    ops: list[MicroOp]
    where: str
    dt: Fixed
    shape: tuple[int, ...] = ()            # the instruction's first result's

    def emit(self, kind: Kind, out: View, a: View, b: View | None = None, K: int = 1, rescale: bool = False,
             tag: str = "") -> View:
        self.ops.append(MicroOp(kind, out, a, b, K, rescale, self.where + (f":{tag}" if tag else "")))
        return out

    def zeros(self, shape: tuple[int, ...]) -> View:
        """A fresh region filled with 0 by one ``copy`` of the constant 0."""
        out = self.alloc(shape)
        return self.emit(Kind.COPY, out, View(self.constant(0), out.shape, (0,) * len(shape)), tag="zero")

    def copy(self, v: View) -> View:
        """``v`` copied into a fresh contiguous region."""
        return self.emit(Kind.COPY, self.alloc(v.shape), v, tag="copy")

    def reshape(self, v: View, shape: tuple[int, ...]) -> View:
        """``v`` reshaped: a view when the strides allow it, else a copy first."""
        r = reshape_view(v, shape)
        return r if r is not None else reshape_view(self.copy(v), shape)

    def reduce(self, v: View, axes: tuple[int, ...], shape: tuple[int, ...]) -> tuple[View, int]:
        """``v`` as an outer view of ``shape`` (the ``axes`` removed) and a flattened reduction ``(kstride, K)``.

        The summed axes must flatten to one stride; otherwise ``v`` is first copied with them innermost.
        """
        keep = [d for d in range(len(v.shape)) if d not in axes]
        K = int(np.prod([v.shape[d] for d in axes], dtype=np.int64))
        inner = reshape_view(View(0, tuple(v.shape[d] for d in axes), tuple(v.strides[d] for d in axes)), (K,))
        outer = reshape_view(View(v.base, tuple(v.shape[d] for d in keep), tuple(v.strides[d] for d in keep)),
                             shape)
        if inner is None or outer is None:
            moved = self.copy(permute_view(v, tuple(keep) + tuple(axes)))
            return self.reduce(moved, tuple(range(len(keep), len(v.shape))), shape)
        return View(outer.base, outer.shape, outer.strides, inner.strides[0] if K > 1 else 0), K


def _splat(cx: Context, raw: int, shape: tuple[int, ...]) -> View:
    return View(cx.constant(raw), shape, (0,) * len(shape))


def _per_row(v: View, shape: tuple[int, ...]) -> View:
    """A per-row vector ``v`` (shape ``shape[:-1]``) broadcast along the last axis of ``shape``."""
    return broadcast_view(View(v.base, v.shape + (1,), v.strides + (0,)), shape)


def _ew(kind: Kind):
    def rule(cx, op, *args):
        shape = cx.shape
        return (cx.emit(kind, cx.alloc(shape), args[0], args[1] if len(args) > 1 else None),)
    return rule


def _rsqrt(cx, op, *args):
    """``Div(1, Sqrt(x))``, as the fixed-point semantics define it: the square root, then the divider."""
    shape = cx.shape
    root = cx.emit(Kind.SQRT, cx.alloc(shape), args[0], None)
    return (cx.emit(Kind.DIV, cx.alloc(shape), _splat(cx, cx.dt.one, shape), root),)


def _mul(cx, op, *args):
    shape = cx.shape
    return (cx.emit(Kind.MAC, cx.alloc(shape), args[0], args[1], 1, True),)


def _scale(cx, op, *args):
    shape = cx.shape
    return (cx.emit(Kind.MAC, cx.alloc(shape), args[0], _splat(cx, const(op.c, cx.dt, "Scale constant"), shape), 1, True),)


def _matmul(cx, op, *args):
    shape = cx.shape
    a, b = args
    av = View(a.base, shape, (a.strides[0], 0), a.strides[1])
    bv = View(b.base, shape, (0, b.strides[1]), b.strides[0])
    return (cx.emit(Kind.MAC, cx.alloc(shape), av, bv, op.A.shape[1], True),)


def _batch_matmul(cx, op, *args):
    """``[..., m, n] @ [..., n, p]``: one ``mac`` over the leading axes (legalised per batch index)."""
    shape = cx.shape
    a, b = args
    av = View(a.base, shape, a.strides[:-2] + (a.strides[-2], 0), a.strides[-1])
    bv = View(b.base, shape, b.strides[:-2] + (0, b.strides[-1]), b.strides[-2])
    return (cx.emit(Kind.MAC, cx.alloc(shape), av, bv, op.A.shape[-1], True),)


def _sum_to(cx, op, *args):
    shape = cx.shape
    lead, kept = op.axes()
    red, K = cx.reduce(args[0], lead + kept, shape)
    return (cx.emit(Kind.MAC, cx.alloc(shape), red, None, K, False),)


def _softmax(cx, op, *args):
    """Row max, ``exp(x − max)``, row sum, floor division; a causal softmax runs the max and the exp on
    the kept prefix of each row (one micro-op per row index), the masked entries staying 0."""
    shape = cx.shape
    x, last = args[0], len(shape) - 1
    rows = shape[:-1]
    m = cx.alloc(rows)
    if not op.causal:
        red, K = cx.reduce(x, (last,), rows)
        cx.emit(Kind.MAX, m, red, None, K, tag="max")
        e = cx.emit(Kind.EXP, cx.alloc(shape), x, _per_row(m, shape), tag="exp")
    else:
        e = cx.zeros(shape)
        lead = shape[:-2]
        for i in range(shape[-2]):
            n = min(i + 1, shape[-1])
            xi = View(x.base + i * x.strides[-2], lead + (n,), x.strides[:-2] + (x.strides[-1],))
            mi = View(m.base + i * m.strides[-1], lead, m.strides[:-1])
            cx.emit(Kind.MAX, mi, View(xi.base, lead, xi.strides[:-1], xi.strides[-1]), None, n, tag=f"max{i}")
            ei = View(e.base + i * e.strides[-2], lead + (n,), e.strides[:-2] + (e.strides[-1],))
            cx.emit(Kind.EXP, ei, xi, _per_row(mi, lead + (n,)), tag=f"exp{i}")
    ered, K = cx.reduce(e, (last,), rows)
    s = cx.emit(Kind.MAC, cx.alloc(rows), ered, None, K, False, tag="sum")
    return (cx.emit(Kind.DIVF, cx.alloc(shape), e, _per_row(s, shape), tag="divide"),)


def _constant(cx, op, *args):
    shape = cx.shape
    return (_splat(cx, constant_raw(op, cx.dt), shape),)


def _causal_mask(cx, op, *args):
    """``x`` times a constant 0/1 table (an exact product: no rescale)."""
    shape = cx.shape
    keep = cx.table(np.asarray(causal_keep(shape[-2:]), dtype=np.int64))
    return (cx.emit(Kind.MAC, cx.alloc(shape), args[0], broadcast_view(keep, shape)),)


def _iota(cx: Context, n: int, shape: tuple[int, ...]) -> View:
    """The constant table ``0, 1, …, n − 1``: its entries (indices, token ids) must fit one memory word."""
    if n - 1 > cx.dt.hi:
        raise NotImplementedError(f"FPGA backend: {cx.where} compares indices up to {n - 1}, more than one "
                                  f"{cx.dt} word holds ({cx.dt.hi}); use a wider fixed-point format")
    return broadcast_view(cx.table(np.arange(n, dtype=np.int64)), shape)


def _one_hot(cx, op, *args):
    """``eq(id, j)`` against a constant table ``0, 1, …, n − 1``: ``2^f`` where equal."""
    shape = cx.shape
    return (cx.emit(Kind.EQ, cx.alloc(shape), _per_row(args[0], shape), _iota(cx, shape[-1], shape)),)


def _argmax_mask(cx, op, *args):
    """The first maximum's index per row (an ``argmax`` reduction), then ``eq`` against ``0, …, n − 1``."""
    shape = cx.shape
    rows = shape[:-1]
    red, K = cx.reduce(args[0], (len(shape) - 1,), rows)
    idx = cx.emit(Kind.ARGMAX, cx.alloc(rows), red, None, K, tag="argmax")
    return (cx.emit(Kind.EQ, cx.alloc(shape), _per_row(idx, shape), _iota(cx, K, shape), tag="mask"),)


def _pad(cx, op, *args):
    """Zeros, then the operand copied into its block."""
    shape = cx.shape
    out = cx.zeros(shape)
    cx.emit(Kind.COPY, slice_view(out, op.index), args[0], tag="block")
    return (out,)


def _interior(op) -> tuple[tuple[int, int, int], ...]:
    """The image's block inside its padded version (a :class:`Slice` index)."""
    (ph, pw), (B, C, H, W) = op.padding, op.T.shape
    return (0, B, 1), (0, C, 1), (ph, ph + H, 1), (pw, pw + W, 1)


def _padded_zeros(op, cx: Context) -> View:
    B, C, H, W = op.T.shape
    ph, pw = op.padding
    return cx.zeros((B, C, H + 2 * ph, W + 2 * pw))


def _padded(op, x: View, cx: Context) -> View:
    if not any(op.padding):
        return x
    out = _padded_zeros(op, cx)
    cx.emit(Kind.COPY, slice_view(out, _interior(op)), x, tag="pad")
    return out


def _blocks(op, img: View) -> View:
    """The ``[B, C, kh, kw, Ho, Wo]`` view of the sliding blocks of a (padded) image view."""
    (kh, kw), (sh, sw), (ho, wo) = op.kernel, op.stride, op.out_hw()
    B, C = op.T.shape[:2]
    sB, sC, sH, sW = img.strides
    return View(img.base, (B, C, kh, kw, ho, wo), (sB, sC, sH, sW, sH * sh, sW * sw))


def _unfold(cx, op, *args):
    """im2col as one ``copy`` from the blocks' affine view (the reduction of a convolution runs over
    ``(c, i, j)``, which no single reduction stride reaches: see ``docs/FPGA.md``)."""
    shape = cx.shape
    blocks = _blocks(op, _padded(op, args[0], cx))
    out = cx.alloc(shape)
    cx.emit(Kind.COPY, reshape_view(out, blocks.shape), blocks, tag="im2col")
    return (out,)


def _fold(cx, op, *args):
    """col2im: each kernel offset ``(i, j)`` adds its columns into the padded image in place."""
    img = _padded_zeros(op, cx)
    blocks = _blocks(op, img)
    cols = cx.reshape(args[0], blocks.shape)
    for i in range(op.kernel[0]):
        for j in range(op.kernel[1]):
            at = tuple((0, n, 1) for n in blocks.shape[:2]) + ((i, i + 1, 1), (j, j + 1, 1)) + tuple(
                (0, n, 1) for n in blocks.shape[4:])
            tgt = slice_view(blocks, at)
            cx.emit(Kind.ADD, tgt, tgt, slice_view(cols, at), tag=f"block{i},{j}")
    return (slice_view(img, _interior(op)),)


FPGA_RULES: dict[type, Callable] = {
    P.Copy: lambda cx, op, *args: (args[0],) * op.n,
    P.Transpose: lambda cx, op, *args: (permute_view(args[0], (1, 0)),),
    P.Permute: lambda cx, op, *args: (permute_view(args[0], op.axes),),
    P.Reshape: lambda cx, op, *args: (cx.reshape(args[0], cx.shape),),
    P.Broadcast: lambda cx, op, *args: (broadcast_view(args[0], cx.shape),),
    P.Slice: lambda cx, op, *args: (slice_view(args[0], op.index),),
    P.Constant: _constant,
    P.Add: _ew(Kind.ADD),
    P.Neg: _ew(Kind.NEG),
    P.Heaviside: _ew(Kind.HEAVISIDE),
    P.Sigmoid: _ew(Kind.SIGMOID),
    P.Tanh: _ew(Kind.TANH),
    P.Log: _ew(Kind.LOG),
    P.Sqrt: _ew(Kind.SQRT),
    P.Rsqrt: _rsqrt,
    P.Div: _ew(Kind.DIV),
    P.Exp: lambda cx, op, *args: (cx.emit(Kind.EXP, cx.alloc(cx.shape), args[0], _splat(cx, 0, cx.shape)),),
    P.Mul: _mul,
    P.Scale: _scale,
    P.MatMul: _matmul,
    P.BatchMatMul: _batch_matmul,
    P.SumTo: _sum_to,
    P.Softmax: _softmax,
    P.CausalMask: _causal_mask,
    P.OneHot: _one_hot,
    P.ArgMaxMask: _argmax_mask,
    P.Pad: _pad,
    P.Unfold: _unfold,
    P.Fold: _fold,
}

#: primitives without an FPGA rule, and why
UNSUPPORTED = {
    P.LogSumExp: "appears only in loss values, never in a training step (its reverse derivative is softmax)",
}
