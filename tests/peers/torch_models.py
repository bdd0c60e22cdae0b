"""``nn.mlp`` and the digits CNN (``examples/digits_cnn.py``) written directly in PyTorch, on circuitgrad's
parameter names (``W0``, ``b0``, … in layer order), so that both train from the same weights.

Used by ``bench/gpu_step.py`` (the same steps in both frameworks) and its tests (one step's loss and
parameters against circuitgrad's NumPy step).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["mlp", "cnn"]


def mlp(x, p: dict, layers: int):
    """``dense >> relu >> … >> dense``: ``x @ W{i} + b{i}`` (``W{i} : [in, out]``), ReLU between layers."""
    for i in range(layers):
        x = x @ p[f"W{i}"] + p[f"b{i}"]
        if i < layers - 1:
            x = torch.relu(x)
    return x


def cnn(x, p: dict, hidden: int = 0):
    """``[B, 64]`` pixels: ``[B, 1, 8, 8]``, conv 3×3 (padding 1; ``W0 : [O, 1, 3, 3]``, ``b0 : [O, 1, 1]``),
    ReLU, max pool 2, flatten (channel-major, as ``nn.flatten``), then the dense layers from ``W1``."""
    B = x.shape[0]
    h = F.conv2d(x.reshape(B, 1, 8, 8), p["W0"], p["b0"].reshape(-1), padding=1)
    h = F.max_pool2d(torch.relu(h), 2).reshape(B, -1)
    return mlp(h, {f"{n}{i}": p[f"{n}{i + 1}"] for i in range(hidden + 1) for n in "Wb"}, hidden + 1)
