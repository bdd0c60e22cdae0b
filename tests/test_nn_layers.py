"""Every layer, loss and optimizer: forward vs float64 NumPy, reverse derivative
(parameters included) vs central finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from _tolerance import assert_programs_close
from conftest import evaluate, rel_err, vjp_fd

F = cg.float64
B = 3


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _lse(x):
    return np.log(np.exp(x).sum(-1))


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
    ("mse", lambda: nn.mse(cg.NdArrayType((B, 5), F)), lambda a, y: (np.array(np.mean((a - y) ** 2)),)),
    ("softmax_cross_entropy", lambda: nn.softmax_cross_entropy(cg.NdArrayType((B, 5), F)),
     lambda a, y: (np.array(np.mean(_lse(a) - (y * a).sum(-1))),)),
    ("mlp", lambda: nn.mlp(B, [4, 6, 5], activation=nn.tanh, dtype=F),
     lambda W0, b0, W1, b1, x: (np.tanh(x @ W0 + b0) @ W1 + b1,)),
]


@pytest.mark.parametrize("name,make,ref", LAYERS, ids=[n for n, *_ in LAYERS])
def test_layer_forward_and_reverse(name, make, ref, rng):
    d, params = cg.unbind_parameters(make())
    xs = [rng.normal(size=t.shape) for t in d.source_types]
    got = evaluate(d, *xs)
    want = ref(*xs)
    # the NumPy reference computes the same formula (its own order of sums): within the same bound
    assert_programs_close(got, want, cg.schedule(d), xs)
    dys = [rng.normal(size=t.shape) for t in d.target_types]
    grads = evaluate(cg.rdiff(d), *xs, *dys)
    fd = vjp_fd(ref, xs, dys)
    assert len(grads) == len(fd) == len(xs)
    for g, w in zip(grads, fd):
        assert rel_err(g, w) < 1e-6


def test_layer_parameters_are_named_and_ordered():
    d, params = cg.unbind_parameters(nn.dense(B, 4, 5, F) >> nn.relu(B, 5, dtype=F) >> nn.dense(B, 5, 2, F))
    assert [(p.label, p.T.shape, p.init) for p in params] == [
        ("W", (4, 5), "glorot"), ("b", (5,), "zeros"), ("W", (5, 2), "glorot"), ("b", (2,), "zeros")]
    assert d.source_types[-1] == cg.NdArrayType((B, 4), F)


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
