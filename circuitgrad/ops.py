"""Functions that apply primitives to traced wires (the vocabulary of definitions).

Inside :func:`circuitgrad.trace` these behave like NumPy functions::

    def dense(x):                     # x : float32[8, 4]
        W = param(NdArrayType((4, 16)), "W")
        return x @ W + param(NdArrayType((16,)), "b", init="zeros")

Binary operations broadcast NumPy-style (an explicit :class:`Broadcast`
is inserted) and accept Python numbers (a :class:`Scale` or a
:class:`Constant`).  Dtypes never change implicitly: mixing float32 and
float64 raises :class:`~circuitgrad.primitives.TypeMismatch`.

The operations that are :class:`~circuitgrad.tracing.Var`'s own operators (``add``, ``mul``,
``matmul``, ``sum``, ``reshape``, …) live in :mod:`circuitgrad.tracing` with it; this module
re-exports them and builds the rest of the vocabulary on them.
"""
from __future__ import annotations

import builtins
from typing import Sequence

import numpy as np

from . import primitives as P
from .tracing import (Builder, Var, add, unary, broadcast_to, constant, div, exp, getitem, log, matmul, max,
                      mean, mul, neg, permute, power, reshape, scale, slice, sqrt, sub, sum, sum_to, tanh, transpose)
from .provenance import definition, scope
from .primitives import TypeMismatch
from .types import Dtype, NdArrayType, float32, format_types

__all__ = [
    "add", "sub", "mul", "neg", "scale", "matmul", "transpose", "reshape",
    "broadcast_to", "sum_to", "sum", "constant", "param", "heaviside",
    "sigmoid", "tanh", "softmax", "logsumexp", "relu",
    "exp", "log", "sqrt", "rsqrt", "div", "power", "max", "mean", "permute", "causal_mask",
    "layer_norm", "gelu", "attention", "ATTENTION_EPS", "one_hot", "add_epsilon",
    "getitem", "slice", "pad", "concat", "unfold", "fold", "conv2d", "max_pool2d", "avg_pool2d", "maximum",
]


def add_epsilon(x: Var, eps: float) -> Var:
    """``x + ε`` with ``ε`` an epsilon constant (one fixed-point step where the dtype cannot hold ``ε``)."""
    return add(x, constant(x.type, eps, epsilon=True))


def param(T: NdArrayType, label: str = "param", init: str = "glorot") -> Var:
    """A trainable parameter of type ``T`` (see :class:`~circuitgrad.primitives.Parameter`)."""
    return Builder.current().apply(P.Parameter(T, label, init))[0]


def causal_mask(x: Var) -> Var:
    """Zero the entries above the diagonal of the last two axes."""
    return x.builder.apply(P.CausalMask(x.type), x)[0]


def heaviside(x: Var) -> Var:
    """``1`` where ``x > 0`` else ``0``."""
    return x.builder.apply(P.Heaviside(x.type), x)[0]


def relu(x: Var) -> Var:
    """``x · H(x)``: exact in every dtype."""
    return mul(x, heaviside(x))


def sigmoid(x: Var) -> Var:
    """Logistic sigmoid."""
    return x.builder.apply(P.Sigmoid(x.type), x)[0]


def softmax(x: Var, causal: bool = False) -> Var:
    """Softmax over the last axis; ``causal``: entries above the diagonal of the last two axes get 0."""
    return x.builder.apply(P.Softmax(x.type, bool(causal)), x)[0]


def logsumexp(x: Var) -> Var:
    """``log Σ exp`` over the last axis."""
    return x.builder.apply(P.LogSumExp(x.type), x)[0]


# ------------------------------------------------------ the second vocabulary


def rsqrt(x: Var) -> Var:
    """``1 / sqrt(x)`` of positive values (an :class:`~circuitgrad.primitives.Rsqrt`: in fixed point exactly
    ``div(1, sqrt(x))``, with a reverse derivative of three products instead of two divisions)."""
    return unary(P.Rsqrt, x)


def _keep(x: Var, reduced: Var) -> Var:
    """A last-axis reduction broadcast back to ``x``'s shape."""
    return broadcast_to(reshape(reduced, x.shape[:-1] + (1,)), x.shape)


@definition()
def layer_norm(x: Var, eps: float = 1e-5) -> Var:
    """``(x − mean) / sqrt(var + eps)`` over the last axis (biased variance, no affine), as PyTorch."""
    xc = sub(x, _keep(x, mean(x, -1)))
    var = mean(mul(xc, xc), -1)
    return mul(xc, _keep(x, rsqrt(add_epsilon(var, eps))))


@definition()
def gelu(x: Var) -> Var:
    """GELU, tanh approximation (PyTorch's ``approximate="tanh"``)."""
    inner = scale(add(x, scale(power(x, 3), 0.044715)), float(np.sqrt(2.0 / np.pi)))
    return mul(scale(x, 0.5), add(tanh(inner), 1.0))


#: ε of spherical attention: ``a = s / sqrt(Σ s² + ε)``
ATTENTION_EPS = 1e-6


def attention(q: Var, k: Var, v: Var, causal: bool = False, kind: str = "softmax") -> Var:
    """Attention over ``q, k, v : [..., S, dh]`` with scores ``s = q·kᵀ / sqrt(dh)``.

    * ``kind="softmax"``: ``softmax(s) @ v`` (``torch.nn.functional.scaled_dot_product_attention``);
      ``causal`` masks key ``j > i`` for query ``i``.
    * ``kind="spherical"``: each query's scores, masked entries set to 0, normalised to unit L2 norm,
      ``a = s / sqrt(Σ s² + ε)`` (``ε = ATTENTION_EPS`` = 1e-6; one step in fixed point), then ``a @ v``.
      No exponential and no
      running maximum: a streaming form needs only a running sum of squares.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Var) or t.type.ndim < 2:
            raise TypeError(f"attention: {name} must be a traced wire of shape [..., S, dh], got {t!r}")
    if q.shape[-1] != k.shape[-1] or k.shape[:-1] != v.shape[:-1] or q.shape[:-2] != k.shape[:-2]:
        raise TypeMismatch(f"attention: q, k, v must be [..., S, dh], [..., T, dh], [..., T, dv], got "
                           f"{format_types((q.type, k.type, v.type))}")
    if kind not in ("softmax", "spherical"):
        raise ValueError(f"attention: kind must be 'softmax' or 'spherical', got {kind!r}")
    with scope(attention_name(kind, causal)):
        return _attention(q, k, v, causal, kind)


def attention_name(kind: str = "softmax", causal: bool = False) -> str:
    """The definition (path segment) of the attention core ``QKᵀ → scale → normalise → ·V``:
    ``"softmax_attention"``, ``"causal_spherical_attention"``, …"""
    return f"{'causal_' if causal else ''}{kind}_attention"


def _attention(q: Var, k: Var, v: Var, causal: bool, kind: str) -> Var:
    c = 1.0 / float(np.sqrt(q.shape[-1]))
    if kind == "softmax":
        a = softmax(scale(matmul(q, transpose(k)), c), causal=causal)
    else:
        # the mask goes first and once more on ``a``: the same values, but the scale and, in the reverse
        # derivative, the product ``da·r`` then skip the masked scores (a ZK circuit proves only the kept ones)
        mask = causal_mask if causal else (lambda x: x)
        s = scale(mask(matmul(q, transpose(k))), c)
        a = mask(mul(s, _keep(s, rsqrt(add_epsilon(sum(mul(s, s), -1), ATTENTION_EPS)))))
    return matmul(a, v)


def one_hot(ids: Var, dtype: Dtype = float32) -> Var:
    """Rows ``[..., n]`` with ``1`` at each id of an ``index(n)`` wire (the model's dtype replaces ``dtype``)."""
    T = NdArrayType(ids.shape + (getattr(ids.type.dtype, "n", 0),), dtype)
    return ids.builder.apply(P.OneHot(ids.type, T), ids)[0]


# ------------------------------------------------------------- slicing


def pad(x: Var, widths: Sequence[tuple[int, int]]) -> Var:
    """Zero padding: ``widths`` is ``(before, after)`` per axis, as in ``np.pad`` (a :class:`Pad`)."""
    widths = [tuple(int(v) for v in w) for w in widths]
    if len(widths) != x.type.ndim or any(len(w) != 2 or min(w) < 0 for w in widths):
        raise TypeMismatch(f"pad: widths must be one (before, after) ≥ 0 per axis of {x.type}, got {widths}")
    if all(w == (0, 0) for w in widths):
        return x
    T = x.type.with_shape(tuple(n + a + b for n, (a, b) in zip(x.shape, widths)))
    index = tuple((a, a + n, 1) for n, (a, _) in zip(x.shape, widths))
    return x.builder.apply(P.Pad(x.type, T, index), x)[0]


def concat(xs: Sequence[Var], axis: int = 0) -> Var:
    """``np.concatenate(xs, axis)``: a sum of :class:`Pad` s (each one's reverse map is a slice)."""
    xs = list(xs)
    if not xs or not all(isinstance(v, Var) for v in xs):
        raise TypeError(f"concat: expected a non-empty sequence of traced wires, got {xs!r}")
    first = xs[0].type
    if first.ndim == 0:
        raise TypeMismatch(f"concat: operands need at least one axis, got {format_types(tuple(u.type for u in xs))}")
    axis %= first.ndim
    for v in xs[1:]:
        t = v.type
        if t.dtype != first.dtype or t.ndim != first.ndim or \
                t.shape[:axis] + t.shape[axis + 1:] != first.shape[:axis] + first.shape[axis + 1:]:
            raise TypeMismatch(f"concat: operands must agree on every axis but {axis}, got "
                               f"{format_types(tuple(u.type for u in xs))}")
    if len(xs) == 1:
        return xs[0]
    total = builtins.sum(v.shape[axis] for v in xs)
    T = first.with_shape(first.shape[:axis] + (total,) + first.shape[axis + 1:])
    out, at = None, 0
    for v in xs:
        index = tuple((at, at + v.shape[d], 1) if d == axis else (0, n, 1) for d, n in enumerate(T.shape))
        y = v.builder.apply(P.Pad(v.type, T, index), v)[0]
        out = y if out is None else add(out, y)
        at += v.shape[axis]
    return out


# --------------------------------------------------------- convolution
def unfold(x: Var, kernel, stride=1, padding=0) -> Var:
    """``torch.nn.functional.unfold``: ``[B, C, H, W] → [B, C·kh·kw, L]`` (an :class:`Unfold`)."""
    return x.builder.apply(P.Unfold(x.type, kernel, stride, padding), x)[0]


def fold(cols: Var, size: tuple[int, int], kernel, stride=1, padding=0) -> Var:
    """``torch.nn.functional.fold(cols, output_size=size)``: ``[B, C·kh·kw, L] → [B, C, H, W]``."""
    B, K = cols.shape[:2] if cols.type.ndim == 3 else (0, 0)
    kh, kw = P.pair("Fold", "kernel", kernel, 1)
    if cols.type.ndim != 3 or K % (kh * kw):
        raise TypeMismatch(f"Fold: columns must be [B, C·{kh}·{kw}, L], got {cols.type}")
    T = cols.type.with_shape((B, K // (kh * kw)) + tuple(size))
    return cols.builder.apply(P.Fold(T, kernel, stride, padding), cols)[0]


@definition()
def conv2d(x: Var, w: Var, stride=1, padding=0) -> Var:
    """``torch.nn.functional.conv2d`` (no bias): NCHW input ``[B, C, H, W]``, OIHW weights ``[O, C, kh, kw]``.

    An :class:`Unfold` and one matrix product ``w[O, C·kh·kw] @ cols[B, C·kh·kw, L]`` (im2col); the
    reverse derivative is the same two steps transposed: a :class:`Fold` of ``wᵀ @ dy``, and
    ``Σ_b dy @ colsᵀ`` for the weights.
    """
    if not (isinstance(x, Var) and isinstance(w, Var)):
        raise TypeError(f"conv2d: operands must be traced wires, got {x!r} and {w!r}")
    if x.type.ndim != 4 or w.type.ndim != 4 or x.shape[1] != w.shape[1] or x.type.dtype != w.type.dtype:
        raise TypeMismatch(f"conv2d: input [B, C, H, W] and weights [O, C, kh, kw] must agree on C and dtype, "
                           f"got {format_types((x.type, w.type))}")
    try:
        op = P.Unfold(x.type, w.shape[2:], stride, padding)
    except TypeMismatch as e:
        raise TypeMismatch(f"conv2d: {e} (weights {w.type})") from None
    cols = x.builder.apply(op, x)[0]
    O = w.shape[0]
    ho, wo = op.out_hw()
    y = matmul(reshape(w, (O, cols.shape[1])), cols)
    return reshape(y, (x.shape[0], O, ho, wo))


def _windows(name: str, x: Var, kernel, stride, padding) -> list[Var]:
    """The ``kh·kw`` strided slices ``[B, C, Ho, Wo]`` of a pooling window's offsets (row-major order)."""
    if not isinstance(x, Var) or x.type.ndim != 4:
        raise TypeMismatch(f"{name}: input must be a traced [B, C, H, W] wire, got "
                           f"{x.type if isinstance(x, Var) else repr(x)}")
    kernel = P.pair(name, "kernel", kernel, 1)
    stride = kernel if stride is None else P.pair(name, "stride", stride, 1)
    try:
        ho, wo = P.Unfold(x.type, kernel, stride, padding).out_hw()
    except TypeMismatch as e:
        raise TypeMismatch(f"{name}: {e}") from None
    (sh, sw), (ph, pw) = stride, P.pair(name, "padding", padding, 0)
    x = pad(x, [(0, 0), (0, 0), (ph, ph), (pw, pw)])
    B, C = x.shape[:2]
    return [slice(x, ((0, B, 1), (0, C, 1), (i, i + sh * (ho - 1) + 1, sh), (j, j + sw * (wo - 1) + 1, sw)))
            for i in range(kernel[0]) for j in range(kernel[1])]


def maximum(a: Var, b: Var) -> Var:
    """Elementwise ``max(a, b)``, exactly: ``h·b + (1 − h)·a`` with ``h = H(b − a)`` (ties and the
    gradient go to ``a``, as PyTorch sends a pooling window's gradient to its first maximum)."""
    h = heaviside(sub(b, a))
    return add(mul(h, b), mul(sub(1.0, h), a))


@definition()
def max_pool2d(x: Var, kernel, stride=None, padding=0) -> Var:
    """``torch.nn.functional.max_pool2d`` (``stride`` defaults to ``kernel``). The gradient goes to the first
    maximum of each window. ``padding`` must be 0: PyTorch pads with ``-inf``, which fixed point cannot hold."""
    if P.pair("max_pool2d", "padding", padding, 0) != (0, 0):
        raise TypeMismatch(f"max_pool2d: padding must be 0, got {padding!r} (PyTorch pads with -inf, which "
                           f"fixed point cannot hold; pad with ops.pad where zeros are meant)")
    win = _windows("max_pool2d", x, kernel, stride, 0)
    out = win[0]
    for w in win[1:]:
        out = maximum(out, w)
    return out


@definition()
def avg_pool2d(x: Var, kernel, stride=None, padding=0) -> Var:
    """``torch.nn.functional.avg_pool2d`` (``stride`` defaults to ``kernel``; zero padding counted in the
    average, PyTorch's default ``count_include_pad=True``)."""
    win = _windows("avg_pool2d", x, kernel, stride, padding)
    out = win[0]
    for w in win[1:]:
        out = add(out, w)
    return scale(out, 1.0 / len(win))
