"""Functions that apply primitives to traced wires (the vocabulary of definitions).

Inside :func:`circuitgrad.trace` these behave like NumPy functions::

    def dense(x):                     # x : float32[8, 4]
        W = param(NdArrayType((4, 16)), "W")
        return x @ W + param(NdArrayType((16,)), "b", init="zeros")

Binary operations broadcast NumPy-style (an explicit :class:`Broadcast`
is inserted) and accept Python numbers (a :class:`Scale` or a
:class:`Constant`).  Dtypes never change implicitly: mixing float32 and
float64 raises :class:`~circuitgrad.primitives.TypeMismatch`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import primitives as P
from .diagram import Builder, Var
from .primitives import TypeMismatch
from .types import NdArrayType, format_types

__all__ = [
    "add", "sub", "mul", "neg", "scale", "matmul", "transpose", "reshape",
    "broadcast_to", "sum_to", "sum", "constant", "param", "heaviside",
    "sigmoid", "tanh", "softmax", "logsumexp", "relu",
]

Number = (int, float, np.integer, np.floating)


def _builder(*xs) -> Builder:
    for x in xs:
        if isinstance(x, Var):
            return x.builder
    return Builder.current()


def constant(T: NdArrayType, value: float) -> Var:
    """A wire of type ``T`` filled with ``value``."""
    return Builder.current().apply(P.Constant(T, float(value)))[0]


def param(T: NdArrayType, label: str = "param", init: str = "glorot") -> Var:
    """A trainable parameter of type ``T`` (see :class:`~circuitgrad.primitives.Parameter`)."""
    return Builder.current().apply(P.Parameter(T, label, init))[0]


def broadcast_to(x: Var, shape: Sequence[int]) -> Var:
    """``x`` broadcast to ``shape`` (identity when the shape already matches)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return x.builder.apply(P.Broadcast(x.type, x.type.with_shape(shape)), x)[0]


def sum_to(x: Var, shape: Sequence[int]) -> Var:
    """``x`` summed down to ``shape`` (the adjoint of :func:`broadcast_to`)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return x.builder.apply(P.SumTo(x.type, x.type.with_shape(shape)), x)[0]


def sum(x: Var, axis: int | None = None) -> Var:
    """Sum over one axis, or over all axes (``axis=None``)."""
    if axis is None:
        return sum_to(x, ())
    axis %= x.type.ndim
    y = sum_to(x, x.shape[:axis] + (1,) + x.shape[axis + 1:])
    return reshape(y, x.shape[:axis] + x.shape[axis + 1:])


def _binary(name: str, a, b) -> tuple[Var, Var]:
    if isinstance(a, Number) and isinstance(b, Var):
        a = constant(b.type, a)
    if isinstance(b, Number) and isinstance(a, Var):
        b = constant(a.type, b)
    if not (isinstance(a, Var) and isinstance(b, Var)):
        raise TypeError(f"{name}: operands must be traced wires or numbers, got {a!r} and {b!r}")
    if a.type.dtype != b.type.dtype:
        raise TypeMismatch(f"{name}: dtypes differ, got {format_types((a.type, b.type))}")
    if a.shape != b.shape:
        try:
            shape = np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise TypeMismatch(f"{name}: shapes do not broadcast, got {format_types((a.type, b.type))}") from None
        a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    return a, b


def add(a, b) -> Var:
    """Elementwise ``a + b``."""
    a, b = _binary("Add", a, b)
    return a.builder.apply(P.Add(a.type), a, b)[0]


def neg(x: Var) -> Var:
    """Elementwise ``-x``."""
    return x.builder.apply(P.Neg(x.type), x)[0]


def sub(a, b) -> Var:
    """Elementwise ``a - b`` (``a + (-b)``)."""
    if isinstance(b, Number):
        return add(a, -b)
    if isinstance(a, Number):
        return add(neg(b), a)
    return add(a, neg(b))


def scale(x: Var, c: float) -> Var:
    """``c · x`` for a constant ``c``."""
    return x.builder.apply(P.Scale(x.type, float(c)), x)[0]


def mul(a, b) -> Var:
    """Elementwise ``a * b``; a number operand becomes a :class:`Scale`."""
    if isinstance(b, Number) and isinstance(a, Var):
        return scale(a, b)
    if isinstance(a, Number) and isinstance(b, Var):
        return scale(b, a)
    a, b = _binary("Mul", a, b)
    return a.builder.apply(P.Mul(a.type), a, b)[0]


def matmul(a: Var, b: Var) -> Var:
    """Matrix product ``a @ b``."""
    return _builder(a, b).apply(P.MatMul(a.type, b.type), a, b)[0]


def transpose(x: Var) -> Var:
    """Matrix transpose."""
    return x.builder.apply(P.Transpose(x.type), x)[0]


def reshape(x: Var, shape: Sequence[int]) -> Var:
    """Row-major reshape."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return x.builder.apply(P.Reshape(x.type, shape), x)[0]


def heaviside(x: Var) -> Var:
    """``1`` where ``x > 0`` else ``0``."""
    return x.builder.apply(P.Heaviside(x.type), x)[0]


def relu(x: Var) -> Var:
    """``x · H(x)``: exact in every dtype."""
    return mul(x, heaviside(x))


def sigmoid(x: Var) -> Var:
    """Logistic sigmoid."""
    return x.builder.apply(P.Sigmoid(x.type), x)[0]


def tanh(x: Var) -> Var:
    """Hyperbolic tangent."""
    return x.builder.apply(P.Tanh(x.type), x)[0]


def softmax(x: Var) -> Var:
    """Softmax over the last axis."""
    return x.builder.apply(P.Softmax(x.type), x)[0]


def logsumexp(x: Var) -> Var:
    """``log Σ exp`` over the last axis."""
    return x.builder.apply(P.LogSumExp(x.type), x)[0]
