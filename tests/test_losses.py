"""``circuitgrad/losses.py``: each loss against float64 NumPy, with its reverse derivative against central finite
differences; integer labels are one-hot encoded at the call."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from conftest import assert_forward_and_reverse

F = cg.float64


def _lse(x):
    return np.log(np.exp(x).sum(-1))


LOSSES = [
    ("mse", lambda T: nn.mse(T), lambda a, y: (np.array(np.mean((a - y) ** 2)),)),
    ("softmax_cross_entropy", lambda T: nn.softmax_cross_entropy(T),
     lambda a, y: (np.array(np.mean(_lse(a) - (y * a).sum(-1))),)),
]


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4)], ids=["rows", "sequences"])
@pytest.mark.parametrize("name,make,ref", LOSSES, ids=[n for n, *_ in LOSSES])
def test_loss_forward_and_reverse(name, make, ref, shape, rng):
    assert_forward_and_reverse(make(cg.NdArrayType(shape, F)), ref, rng)


def test_integer_labels_are_one_hot_rows(rng):
    step = cg.compile_model(nn.mlp(4, [3, 5]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1), dtype=F)
    p, x, y = step.init_params(seed=0), rng.normal(size=(4, 3)), np.array([0, 4, 2, 2])
    assert step.loss(p, x, y) == step.loss(p, x, np.eye(5)[y])
