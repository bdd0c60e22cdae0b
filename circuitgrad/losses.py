"""Losses: functions ``T ↦ (Ŷ ⊗ Y → float[])`` of the model's output type ``T`` (re-exported by :mod:`.nn`).

``compile_model(model, loss=nn.mse, ...)`` applies the loss to the model's output type and composes it
after the model::

    X ──model──▶ Ŷ ─┐
                     ├── loss ──▶ float[]
    Y ───────────────┘
"""
from __future__ import annotations

import numpy as np

from . import ops
from .diagram import Diagram
from .tracing import Var, trace
from .types import NdArrayType

__all__ = ["mse", "softmax_cross_entropy"]


def mse(T: NdArrayType) -> Diagram:
    """Mean squared error ``mean((ŷ − y)²)`` over all elements: ``T ⊗ T → []``."""
    def loss(yhat: Var, y: Var) -> Var:
        d = yhat - y
        return ops.scale(ops.sum(d * d), 1.0 / T.size)
    return trace(loss, [T, T], name="mse")


def softmax_cross_entropy(T: NdArrayType) -> Diagram:
    """``mean_rows(logsumexp(ŷ_r) − Σ_k y_rk ŷ_rk)``: ``[..., K] ⊗ [..., K] → []`` (``y`` one-hot rows).

    Rows are every index but the last: ``[B, K]`` averages over the batch, ``[B, S, V]`` over every
    position, as ``torch.nn.functional.cross_entropy`` does. Integer labels (``[B]`` or ``[B, S]``)
    are accepted at the call and one-hot encoded there. Its reverse derivative is
    ``(softmax(ŷ) − y) / rows``: the log is never differentiated, so the fixed-point step needs only
    softmax.
    """
    B = int(np.prod(T.shape[:-1], dtype=np.int64)) if T.ndim > 1 else 1

    def loss(yhat: Var, y: Var) -> Var:
        per_row = ops.logsumexp(yhat) - ops.sum(y * yhat, axis=-1)
        return ops.scale(ops.sum(per_row), 1.0 / B)
    return trace(loss, [T, T], name="softmax_cross_entropy")
