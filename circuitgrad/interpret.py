"""The float reference interpreter: the living definition of float semantics.

One entry point, :func:`run`, walks an SSA :class:`~circuitgrad.schedule.Program`
with a rule table keyed by primitive class.  :data:`FLOAT_RULES` is the float
table; :data:`circuitgrad.fixedpoint.FIXED_RULES` the fixed-point one.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from . import primitives as P
from .schedule import Program
from .types import NdArrayType

__all__ = ["run", "FLOAT_RULES", "UnboundParameter", "check_inputs"]


class UnboundParameter(ValueError):
    """A program still contains a Parameter operation."""


def unbound(op, *args):
    raise UnboundParameter(f"{op.name} '{op.label}' of type {op.T} has no value: bind parameters with "
                           f"circuitgrad.compile_model or diagram.unbind_parameters before running")


def _sum_to(x: np.ndarray, op: P.SumTo) -> np.ndarray:
    lead, kept = op.axes()
    axes = lead + kept
    y = x.sum(axis=axes, keepdims=True) if axes else x
    return y.reshape(op.S.shape)


def sigmoid(x: np.ndarray) -> np.ndarray:
    h = x.dtype.type(0.5)
    return np.tanh(x * h) * h + h          # = 1/(1+e^-x), overflow-free


def causal_keep(shape) -> np.ndarray:
    """``True`` where a causal mask keeps an entry of the last two axes (``j ≤ i``), as a broadcastable array."""
    s, t = shape[-2], shape[-1]
    return np.arange(t)[None, :] <= np.arange(s)[:, None]


def softmax(x: np.ndarray, causal: bool = False) -> np.ndarray:
    """Softmax along the last axis, in one new array (every step after the first in place)."""
    if causal:
        e = np.where(causal_keep(x.shape), x, x.dtype.type(-np.inf))
        np.subtract(e, e.max(axis=-1, keepdims=True), out=e)
    else:
        e = x - x.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    np.divide(e, e.sum(axis=-1, keepdims=True), out=e)
    return e


def causal_mask(x: np.ndarray) -> np.ndarray:
    return np.where(causal_keep(x.shape), x, x.dtype.type(0))


def one_hot(ids: np.ndarray, n: int, dtype) -> np.ndarray:
    """Rows with ``1`` at each id (ids already checked to lie in ``[0, n)``)."""
    return (np.asarray(ids)[..., None] == np.arange(n)).astype(dtype)


def argmax_mask(x: np.ndarray) -> np.ndarray:
    """One-hot of the first maximum along the last axis (in ``x``'s dtype)."""
    idx = x.argmax(axis=-1)[..., None]
    return (np.arange(x.shape[-1]) == idx).astype(x.dtype)


def logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def slices(index) -> tuple[slice, ...]:
    """A :class:`Slice`/:class:`Pad` index as NumPy slices."""
    return tuple(slice(a, b, c) for a, b, c in index)


def pad(x: np.ndarray, shape: tuple[int, ...], index) -> np.ndarray:
    """Zeros of ``shape`` with ``x`` written at ``index`` (:class:`Pad`)."""
    out = np.zeros(shape, dtype=x.dtype)
    out[slices(index)] = x
    return out


def add_into(out: np.ndarray, x: np.ndarray, index) -> np.ndarray:
    """``out + Pad(x)`` in place: ``out[index] += x`` (the NumPy backend's sum of pads)."""
    out[slices(index)] += x
    return out


def set_into(out: np.ndarray, x: np.ndarray, index) -> np.ndarray:
    """``out + Pad(x)`` in place where ``out`` is zero on ``index``: ``out[index] = x``."""
    out[slices(index)] = x
    return out


def _blocks(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def _valid(n: int, k: int, s: int, p: int, i: int, out: int) -> tuple[int, int]:
    """The block positions ``[o0, o1)`` whose kernel offset ``i`` lands inside ``[0, n)``: ``0 ≤ o·s − p + i < n``."""
    return max(0, -(-(p - i) // s)), min(out, (n - 1 + p - i) // s + 1)


def unfold(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int]) -> np.ndarray:
    """``torch.nn.functional.unfold``: one strided copy per kernel offset, zeros only where padding is read."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    B, C, H, W = x.shape
    ho, wo = _blocks(H, kh, sh, ph), _blocks(W, kw, sw, pw)
    out = np.empty((B, C, kh, kw, ho, wo), dtype=x.dtype)
    for i in range(kh):
        y0, y1 = _valid(H, kh, sh, ph, i, ho)
        for j in range(kw):
            x0, x1 = _valid(W, kw, sw, pw, j, wo)
            o = out[:, :, i, j]
            if y0 > 0 or y1 < ho or x0 > 0 or x1 < wo:
                o.fill(0)
            if y1 > y0 and x1 > x0:
                o[:, :, y0:y1, x0:x1] = x[:, :, y0 * sh - ph + i:(y1 - 1) * sh - ph + i + 1:sh,
                                          x0 * sw - pw + j:(x1 - 1) * sw - pw + j + 1:sw]
    return out.reshape(B, C * kh * kw, ho * wo)


def fold(cols: np.ndarray, shape: tuple[int, int, int, int], kernel: tuple[int, int], stride: tuple[int, int],
         padding: tuple[int, int]) -> np.ndarray:
    """``torch.nn.functional.fold`` into an image of ``shape``: the adjoint of :func:`unfold`."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    B, C, H, W = shape
    ho, wo = _blocks(H, kh, sh, ph), _blocks(W, kw, sw, pw)
    out = np.zeros((B, C, H + 2 * ph, W + 2 * pw), dtype=cols.dtype)
    c = cols.reshape(B, C, kh, kw, ho, wo)
    for i in range(kh):
        for j in range(kw):
            out[:, :, i:i + sh * ho:sh, j:j + sw * wo:sw] += c[:, :, i, j]
    return out[:, :, ph:ph + H, pw:pw + W]


def _dt(T: NdArrayType):
    return T.dtype.numpy_dtype()


FLOAT_RULES: dict[type, Callable] = {
    P.Copy: lambda op, x: (x,) * op.n,
    P.Parameter: unbound,
    P.Constant: lambda op: (np.full(op.T.shape, op.value, dtype=_dt(op.T)),),
    P.Add: lambda op, a, b: (a + b,),
    P.Neg: lambda op, a: (-a,),
    P.Mul: lambda op, a, b: (a * b,),
    P.Scale: lambda op, a: (a * _dt(op.T).type(op.c),),
    P.MatMul: lambda op, a, b: (a @ b,),
    P.Transpose: lambda op, a: (a.T,),
    P.Reshape: lambda op, a: (a.reshape(op.shape),),
    P.Broadcast: lambda op, a: (np.broadcast_to(a, op.T.shape),),
    P.SumTo: lambda op, a: (_sum_to(a, op),),
    P.Heaviside: lambda op, a: ((a > 0).astype(a.dtype),),
    P.Sigmoid: lambda op, a: (sigmoid(a),),
    P.Tanh: lambda op, a: (np.tanh(a),),
    P.Softmax: lambda op, a: (softmax(a, op.causal),),
    P.LogSumExp: lambda op, a: (logsumexp(a),),
    P.Exp: lambda op, a: (np.exp(a),),
    P.Log: lambda op, a: (np.log(a),),
    P.Sqrt: lambda op, a: (np.sqrt(a),),
    P.Rsqrt: lambda op, a: (1 / np.sqrt(a),),
    P.Div: lambda op, a, b: (a / b,),
    P.ArgMaxMask: lambda op, a: (argmax_mask(a),),
    P.Permute: lambda op, a: (np.transpose(a, op.axes),),
    P.BatchMatMul: lambda op, a, b: (np.matmul(a, b),),
    P.CausalMask: lambda op, a: (causal_mask(a),),
    P.OneHot: lambda op, s: (one_hot(s, op.S.dtype.n, _dt(op.T)),),
    P.Slice: lambda op, a: (a[slices(op.index)],),
    P.Pad: lambda op, a: (pad(a, op.T.shape, op.index),),
    P.Unfold: lambda op, a: (unfold(a, op.kernel, op.stride, op.padding),),
    P.Fold: lambda op, a: (fold(a, op.T.shape, op.kernel, op.stride, op.padding),),
}


def check_inputs(program: Program, inputs: Sequence[np.ndarray], names: Sequence[str] | None = None) -> None:
    """Raise a clear error when the number or shapes of ``inputs`` do not fit ``program``."""
    if len(inputs) != len(program.inputs):
        raise TypeError(f"{program.name}: expected {len(program.inputs)} inputs, got {len(inputs)}")
    for i, (v, x) in enumerate(zip(program.inputs, inputs)):
        t = program.types[v]
        if tuple(np.shape(x)) != t.shape:
            what = names[i] if names else f"input {i}"
            raise ValueError(f"{program.name}: {what} must have shape {list(t.shape)} ({t}), "
                             f"got {list(np.shape(x))}")


def run(program: Program, inputs: Sequence[np.ndarray], rules: dict | None = None,
        after: Callable | None = None) -> list[np.ndarray]:
    """Evaluate ``program`` on ``inputs`` with a rule table (float by default).

    ``after(index, instr, results)`` is called after every instruction (the
    fixed-point interpreter uses it for range checks).
    """
    rules = FLOAT_RULES if rules is None else rules
    check_inputs(program, inputs)
    env: list = [None] * len(program.types)
    for v, x in zip(program.inputs, inputs):
        env[v] = x
    for i, a in enumerate(program.instrs):
        rule = rules.get(type(a.op))
        if rule is None:
            raise NotImplementedError(f"{program.name}: no rule for {a.op.name} in this interpreter")
        out = rule(a.op, *(env[x] for x in a.args))
        if after is not None:
            after(i, a, out)
        for r, y in zip(a.results, out):
            env[r] = y
    return [env[v] for v in program.outputs]
