"""``circuitgrad/optimizers.py``: each optimizer's update ``P ⊗ S ⊗ dP → P ⊗ S`` against its formula, and its
constants checked (Adam and AdamW trajectories against PyTorch are in ``test_nn.py``)."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from conftest import evaluate

F = cg.float64


@pytest.mark.parametrize("opt,ref", [
    (nn.sgd(0.5), lambda p, g: [p - 0.5 * g]),
    (nn.momentum(0.5, 0.9), lambda p, v, g: [p - 0.5 * (0.9 * v + g), 0.9 * v + g]),
])
def test_optimizer_update(opt, ref, rng):
    T = cg.NdArrayType((2, 3), F)
    d = opt.update([T])
    xs = [rng.normal(size=(2, 3)) for _ in d.source_types]
    for g, w in zip(evaluate(d, *xs), ref(*xs)):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_momentum_rejects_bad_beta():
    with pytest.raises(ValueError, match=r"^momentum: beta must be a finite number in \(0, 1\), got 1.5$"):
        nn.momentum(0.1, 1.5)
