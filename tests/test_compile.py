"""compile_model: the user-facing API, and generated NumPy code vs the reference interpreter."""
from __future__ import annotations

import time

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from _tolerance import assert_programs_close
from conftest import rel_err

B = 8


def _model(dtype=cg.float32):
    return nn.dense(B, 4, 16, dtype) >> nn.relu(B, 16, dtype=dtype) >> nn.dense(B, 16, 3, dtype)


@pytest.fixture
def data(rng):
    return rng.normal(size=(B, 4)), rng.integers(0, 3, size=B)


def test_api_shapes_and_names(data):
    step = cg.compile_model(_model(), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1))
    params = step.init_params(seed=0)
    assert list(params) == ["W0", "b0", "W1", "b1"]
    assert [v.shape for v in params.values()] == [(4, 16), (16,), (16, 3), (3,)]
    assert all(v.dtype == np.float32 for v in params.values())
    x, y = data
    new = step.step(params, x, y)
    assert list(new) == list(params) and all(new[k].shape == params[k].shape for k in params)
    grads = step.gradients(params, x, y)
    assert list(grads) == ["W0", "b0", "W1", "b1"]
    assert step.predict(params, x).shape == (B, 3)
    assert "def step(W0, b0, W1, b1, x, y):" in step.source


def test_step_is_sgd_on_gradients(data):
    step = cg.compile_model(_model(cg.float64), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1))
    p = step.init_params(seed=1)
    x, y = data
    g = step.gradients(p, x, y)
    new = step.step(p, x, y)
    for k in p:
        np.testing.assert_allclose(new[k], p[k] - 0.1 * g[k], rtol=1e-12, atol=1e-14)


def test_gradients_match_finite_differences_of_loss(data):
    step = cg.compile_model(_model(cg.float64), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1))
    p = step.init_params(seed=2)
    p["b0"] = p["b0"] + 0.1          # keep relu inputs away from the kink
    x, y = data
    g = step.gradients(p, x, y)
    eps = 1e-6
    for k in ("W0", "b1"):
        fd = np.zeros_like(p[k])
        for i in np.ndindex(p[k].shape):
            hi, lo = dict(p), dict(p)
            hi[k] = p[k].copy(); hi[k][i] += eps
            lo[k] = p[k].copy(); lo[k][i] -= eps
            fd[i] = (step.loss(hi, x, y) - step.loss(lo, x, y)) / (2 * eps)
        assert rel_err(g[k], fd) < 1e-6


def test_momentum_state_is_part_of_params(data):
    step = cg.compile_model(_model(), loss=nn.mse, optimizer=nn.momentum(0.1, 0.9))
    p = step.init_params(seed=0)
    assert list(p) == ["W0", "b0", "W1", "b1", "momentum/W0", "momentum/b0", "momentum/W1", "momentum/b1"]
    x, y = data
    p1 = step.step(p, x, np.eye(3)[y])
    g = step.gradients(p, x, np.eye(3)[y])
    np.testing.assert_allclose(p1["momentum/W0"], g["W0"], rtol=1e-6)


def test_predict_any_number_of_rows(rng):
    step = cg.compile_model(_model(), loss=nn.mse, optimizer=nn.sgd(0.1))
    p = step.init_params(seed=0)
    x = rng.normal(size=(21, 4))
    full = step.predict(p, x)
    assert full.shape == (21, 3)
    np.testing.assert_allclose(full[:B], step.predict(p, x[:B]), rtol=1e-6)


def test_wrong_batch_and_labels_are_clear_errors(rng):
    step = cg.compile_model(_model(), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1))
    p = step.init_params(seed=0)
    with pytest.raises(ValueError) as e:
        step.step(p, rng.normal(size=(5, 4)), np.zeros(5, int))
    assert str(e.value) == ("step: input x must have shape (8, 4), got (5, 4) (this model was built for "
                            "batch 8; predict accepts any number of rows)")
    with pytest.raises(ValueError) as e:
        step.step(p, rng.normal(size=(8, 4)), np.full(8, 3))
    assert str(e.value) == "step: targets y must be class labels in 0..2, got values in [3, 3]"
    with pytest.raises(KeyError):       # also a ValueError (more cases in test_arguments.py)
        step.step({"W0": p["W0"]}, rng.normal(size=(8, 4)), np.zeros(8, int))


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError) as e:
        cg.compile_model(_model(), loss=nn.mse, optimizer=nn.sgd(0.1), backend="tpu")
    assert str(e.value) == ("compile_model: unknown backend 'tpu'; available: 'numpy', 'cupy', 'cupy-emulated', "
                            "'auto'")


@pytest.mark.parametrize("key", ["predict", "loss", "gradients", "step"])
def test_generated_numpy_equals_reference_interpreter(key, data):
    step = cg.compile_model(_model(cg.float64) >> nn.tanh(B, 3, dtype=cg.float64),
                            loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.1))
    p = step.init_params(seed=0)
    x, y = data
    fn = step.fn(key)
    args = [p[k] for k in step.param_names]
    if key == "step":
        args += [p[k] for k in step.state_names]
    args += [x] + ([np.eye(3)[y]] if key != "predict" else [])
    got = fn.run(*args)
    want = cg.run(fn.program, args)
    assert_programs_close(got, want, fn.program, args)      # MKL's GEMMs and GEMVs round in their own order


def test_fixed_point_compile_exact_and_deterministic(data):
    fx = cg.compile_model(_model(), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=cg.fixed(16, 8))
    p = fx.init_params(seed=0)
    assert all(v.dtype == np.int64 for v in p.values())
    x, y = data
    a = fx.step(p, x, np.eye(3)[y])
    b = fx.step(p, x, np.eye(3)[y])
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert any(not np.array_equal(a[k], p[k]) for k in a)
    assert all(t.dtype == cg.fixed(16, 8) for t in fx.fn("step").program.types)
    assert "MatMul" in fx.source


def test_compile_speed_is_recorded():
    """``compile_seconds`` is the compilation's own time: positive and within the call's wall time."""
    t0 = time.perf_counter()
    step = cg.compile_model(_model(), loss=nn.mse, optimizer=nn.sgd(0.1))
    outer = time.perf_counter() - t0
    assert 0 < step.compile_seconds <= outer
