"""Every basic layer of ``nn``: forward vs float64 NumPy, reverse derivative (parameters included) vs central
finite differences. The losses are tested in ``test_losses.py``, the optimizers in ``test_optimizers.py``."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.diagram import unbind_parameters
from conftest import assert_forward_and_reverse

F = cg.float64
B = 3


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# (layer, reference(params..., inputs...) -> outputs, parameter shapes)
LAYERS = [
    ("linear", lambda: nn.linear(B, 4, 5, F), lambda W, x: (x @ W,)),
    ("bias", lambda: nn.bias(B, 5, F), lambda b, x: (x + b,)),
    ("dense", lambda: nn.dense(B, 4, 5, F), lambda W, b, x: (x @ W + b,)),
    ("relu", lambda: nn.relu(B, 5, dtype=F), lambda x: (np.maximum(x, 0),)),
    ("sigmoid", lambda: nn.sigmoid(B, 5, dtype=F), lambda x: (_sig(x),)),
    ("tanh", lambda: nn.tanh(B, 5, dtype=F), lambda x: (np.tanh(x),)),
    ("softmax", lambda: nn.softmax(B, 5, dtype=F), lambda x: (_softmax(x),)),
    ("mlp", lambda: nn.mlp(B, [4, 6, 5], activation=nn.tanh, dtype=F),
     lambda W0, b0, W1, b1, x: (np.tanh(x @ W0 + b0) @ W1 + b1,)),
]


@pytest.mark.parametrize("name,make,ref", LAYERS, ids=[n for n, *_ in LAYERS])
def test_layer_forward_and_reverse(name, make, ref, rng):
    d, _ = unbind_parameters(make())
    assert_forward_and_reverse(d, ref, rng)


def test_layer_parameters_are_named_and_ordered():
    d, params = unbind_parameters(nn.dense(B, 4, 5, F) >> nn.relu(B, 5, dtype=F) >> nn.dense(B, 5, 2, F))
    assert [(p.label, p.T.shape, p.init) for p in params] == [
        ("W", (4, 5), "glorot"), ("b", (5,), "zeros"), ("W", (5, 2), "glorot"), ("b", (2,), "zeros")]
    assert d.source_types[-1] == cg.NdArrayType((B, 4), F)
