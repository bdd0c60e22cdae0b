"""On a GPU (marked ``gpu``; skipped without CuPy and a CUDA device): every primitive and layer
agrees with the NumPy backend within float32 tolerance, and digits trains to the same accuracy."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import train_mlp

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import gpu

ok, why = gpu.available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no GPU: {why}")]

LAYERS = [
    ("relu", lambda B: nn.mlp(B, [6, 16, 4])),
    ("sigmoid", lambda B: nn.mlp(B, [6, 16, 4], activation=nn.sigmoid)),
    ("tanh", lambda B: nn.mlp(B, [6, 16, 4], activation=nn.tanh)),
    ("softmax", lambda B: nn.mlp(B, [6, 16, 4]) >> nn.softmax(B, 4)),
]


@pytest.mark.parametrize("name,make", LAYERS, ids=[n for n, _ in LAYERS])
@pytest.mark.parametrize("key", ["predict", "loss", "gradients", "step"])
def test_gpu_agrees_with_numpy(name, make, key, rng):
    B = 16
    ref = cg.compile_model(make(B), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.1))
    dev = cg.compile_model(make(B), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.1), backend="cupy")
    p = ref.init_params(seed=0)
    x = rng.normal(size=(B, 6)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, size=B)]
    args = [p[k] for k in ref.param_names] + ([p[k] for k in ref.state_names] if key == "step" else [])
    args += [x] + ([y] if key != "predict" else [])
    want = ref.fn(key).run(*args)
    got = dev.fn(key).run(*[dev.xp.asarray(a) for a in args])
    for g, w in zip(got, want):
        np.testing.assert_allclose(dev.to_host(g), w, rtol=2e-5, atol=2e-6)


def test_digits_trains_to_the_numpy_accuracy():
    accs = [train_mlp("digits", 32, [64, 64, 10], 20, backend)[1] for backend in ("numpy", "cupy")]
    assert abs(accs[0] - accs[1]) <= 0.01 and accs[1] >= 0.95
