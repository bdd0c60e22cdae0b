"""Layers, losses and optimizers: definitions, i.e. named diagrams of primitives.

Layers are morphisms ``X → Y`` whose parameters are :class:`Parameter`
operations inside the diagram, so they compose with ``>>`` and tensor with ``@``::

    model = dense(B, 4, 16) >> relu(B, 16) >> dense(B, 16, 3)

Losses are functions ``T ↦ (Ŷ ⊗ Y → float[])`` and optimizers build the update
``P ⊗ S ⊗ dP → P ⊗ S`` for the parameter types ``P`` (``S`` = optimizer state).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import ops
from .diagram import Diagram, Var, sequential, trace
from .types import Dtype, NdArrayType, float32

__all__ = [
    "linear", "bias", "dense", "relu", "sigmoid", "tanh", "softmax",
    "mse", "softmax_cross_entropy", "sgd", "momentum", "Optimizer", "mlp",
]


def _T(shape: Sequence[int], dtype: Dtype) -> NdArrayType:
    return NdArrayType(tuple(shape), dtype)


# ------------------------------------------------------------------ layers
def linear(B: int, n: int, m: int, dtype: Dtype = float32) -> Diagram:
    """``x ↦ x @ W`` with ``W : [n, m]`` (Glorot-uniform initialised)."""
    W = _T((n, m), dtype)
    return trace(lambda x: x @ ops.param(W, "W"), [_T((B, n), dtype)], name=f"linear({B},{n},{m})")


def bias(B: int, m: int, dtype: Dtype = float32) -> Diagram:
    """``x ↦ x + b`` with ``b : [m]`` broadcast over the batch (zero initialised)."""
    b = _T((m,), dtype)
    return trace(lambda x: x + ops.param(b, "b", init="zeros"), [_T((B, m), dtype)], name=f"bias({B},{m})")


def dense(B: int, n: int, m: int, dtype: Dtype = float32) -> Diagram:
    """``linear(B, n, m) >> bias(B, m)``::

            ┌────────┐   ┌──────┐
        x ──┤ @ W    ├───┤ + b  ├── y
            └────────┘   └──────┘
    """
    d = linear(B, n, m, dtype) >> bias(B, m, dtype)
    d.name = f"dense({B},{n},{m})"
    return d


def _elementwise(name: str, fn, shape: Sequence[int], dtype: Dtype) -> Diagram:
    return trace(fn, [_T(shape, dtype)], name=f"{name}({','.join(map(str, shape))})")


def relu(*shape: int, dtype: Dtype = float32) -> Diagram:
    """``max(x, 0) = x · H(x)`` (exact in fixed point)."""
    return _elementwise("relu", ops.relu, shape, dtype)


def sigmoid(*shape: int, dtype: Dtype = float32) -> Diagram:
    """Logistic sigmoid."""
    return _elementwise("sigmoid", ops.sigmoid, shape, dtype)


def tanh(*shape: int, dtype: Dtype = float32) -> Diagram:
    """Hyperbolic tangent."""
    return _elementwise("tanh", ops.tanh, shape, dtype)


def softmax(*shape: int, dtype: Dtype = float32) -> Diagram:
    """Softmax over the last axis."""
    return _elementwise("softmax", ops.softmax, shape, dtype)


def mlp(B: int, sizes: Sequence[int], activation=relu, dtype: Dtype = float32) -> Diagram:
    """``dense >> activation >> … >> dense`` through the layer ``sizes``."""
    layers = []
    for i, (n, m) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(dense(B, n, m, dtype))
        if i < len(sizes) - 2:
            layers.append(activation(B, m, dtype=dtype))
    return sequential(layers, name=f"mlp({B},{'-'.join(map(str, sizes))})")


# ------------------------------------------------------------------ losses
def mse(T: NdArrayType) -> Diagram:
    """Mean squared error ``mean((ŷ − y)²)`` over all elements: ``T ⊗ T → []``."""
    def loss(yhat: Var, y: Var) -> Var:
        d = yhat - y
        return ops.scale(ops.sum(d * d), 1.0 / T.size)
    return trace(loss, [T, T], name="mse")


def softmax_cross_entropy(T: NdArrayType) -> Diagram:
    """``mean_b(logsumexp(ŷ_b) − Σ_k y_bk ŷ_bk)``: ``[B, K] ⊗ [B, K] → []`` (``y`` one-hot).

    Its reverse derivative is ``(softmax(ŷ) − y) / B``: the log is never
    differentiated, so the fixed-point step needs only softmax.
    """
    B = T.shape[0] if T.ndim > 1 else 1

    def loss(yhat: Var, y: Var) -> Var:
        per_row = ops.logsumexp(yhat) - ops.sum(y * yhat, axis=-1)
        return ops.scale(ops.sum(per_row), 1.0 / B)
    return trace(loss, [T, T], name="softmax_cross_entropy")


# -------------------------------------------------------------- optimizers
def _rate(fn: str, what: str, v: object, upper: float = math.inf) -> float:
    """``v`` as a float in ``(0, upper)``, or a clear error naming ``fn`` and ``what``."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{fn}: {what} must be a number, got {type(v).__name__} {v!r}")
    f = float(v)
    if not (math.isfinite(f) and 0 < f < upper):
        bound = "> 0" if upper == math.inf else f"in (0, {upper:g})"
        raise ValueError(f"{fn}: {what} must be a finite number {bound}, got {f!r}")
    return f


@dataclass(frozen=True)
class Optimizer:
    """Builds the update diagram ``P ⊗ S ⊗ dP → P ⊗ S`` for parameter types ``P``.

    ``lr`` must be a finite number > 0 and ``beta`` 0 (no momentum) or in ``(0, 1)``.
    """
    name: str
    lr: float
    beta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", _rate(self.name, "learning rate lr", self.lr))
        if self.beta != 0:
            object.__setattr__(self, "beta", _rate(self.name, "beta", self.beta, upper=1.0))

    def constants(self) -> list[tuple[str, float]]:
        """The constants of the update, by name: ``learning rate`` and, with momentum, ``momentum beta``."""
        return [("learning rate", self.lr)] + ([("momentum beta", self.beta)] if self.beta else [])

    def state(self, params: Sequence[NdArrayType]) -> list[tuple[str, NdArrayType]]:
        """``(suffix, type)`` of the optimizer state, per parameter order."""
        return [("momentum", t) for t in params] if self.beta else []

    def update(self, params: Sequence[NdArrayType]) -> Diagram:
        k = len(params)
        state = [t for _, t in self.state(params)]

        def step(*vs: Var):
            p, s, g = vs[:k], vs[k:k + len(state)], vs[k + len(state):]
            if not self.beta:
                return tuple(pi - ops.scale(gi, self.lr) for pi, gi in zip(p, g))
            v = tuple(ops.scale(si, self.beta) + gi for si, gi in zip(s, g))
            return tuple(pi - ops.scale(vi, self.lr) for pi, vi in zip(p, v)) + v
        return trace(step, list(params) + state + list(params), name=self.name)


def sgd(lr: float) -> Optimizer:
    """Plain SGD: ``p ← p − lr·∇p`` (``lr``: a finite number > 0)."""
    return Optimizer(f"sgd({lr})", _rate("sgd", "learning rate lr", lr))


def momentum(lr: float, beta: float = 0.9) -> Optimizer:
    """Heavy-ball momentum: ``v ← β·v + ∇p``, ``p ← p − lr·v`` (``lr > 0`` and ``β ∈ (0, 1)``, finite)."""
    return Optimizer(f"momentum({lr},{beta})", _rate("momentum", "learning rate lr", lr),
                     _rate("momentum", "beta", beta, upper=1.0))
