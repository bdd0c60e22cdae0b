"""Transformer layers and Adam against PyTorch: a block's loss and gradients, Adam/AdamW trajectories."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
import _peers
from _tolerance import assert_programs_close, assert_within, error_bounds

torch = _peers.torch()
pytestmark = pytest.mark.torch
F = torch.nn.functional
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "peers"))
import torch_gpt  # noqa: E402


def torch_block(x, p, heads, causal, kind):
    return torch_gpt.block(x, p, heads, causal, kind, eps=cg.ops.ATTENTION_EPS)


def _assert_equals_torch(step, params, x, y, loss, grads, tl, tp):
    """torch's kernels evaluate the same expressions as our loss and gradient programs: each side within the
    program's error bound of the exact value (tests/_tolerance.py)."""
    args = [params[k] for k in step.param_names] + [step._x(x, "loss"), step._targets(y, "loss")]
    assert_programs_close([loss], [tl.item()], step.fn("loss").program, args, err_msg="loss")
    assert_programs_close([grads[k] for k in step.param_names], [tp[k].grad.numpy() for k in step.param_names],
                          step.fn("gradients").program, args, err_msg="gradients")


class _Trajectory:
    """The error bound of a run of training steps: each step's program from the previous step's bound."""

    def __init__(self, step):
        self.compiled, self.names = step, step.param_names + step.state_names
        self.err = [0.0] * len(self.names)

    def step(self, params, x, y):
        s = self.compiled
        args = [params[k] for k in self.names] + [s._x(x, "step"), s._targets(y, "step")]
        self.err = error_bounds(s.fn("step").program, args, self.err + [0.0, 0.0])

    def check(self, params, tp):
        bound = dict(zip(self.names, self.err))
        ks = self.compiled.param_names
        assert_within([params[k] for k in ks], [tp[k].detach().numpy() for k in ks], [bound[k] for k in ks],
                      err_msg="parameters after the run")


@pytest.mark.parametrize("kind", ["softmax", "spherical"])
@pytest.mark.parametrize("causal", [True, False])
def test_transformer_block_loss_and_gradients_equal_pytorch(kind, causal, rng):
    B, S, d, heads = 2, 5, 8, 2
    step = cg.compile_model(nn.transformer_block(B, S, d, heads=heads, causal=causal, kind=kind), nn.mse,
                            nn.sgd(0.1), dtype=cg.float64)
    params = {k: v + rng.normal(scale=0.1, size=v.shape) for k, v in step.init_params(seed=3).items()}
    x, y = rng.normal(size=(B, S, d)), rng.normal(size=(B, S, d))
    grads, loss = step.gradients(params, x, y), step.loss(params, x, y)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    tl = F.mse_loss(torch_block(torch.tensor(x), tp, heads, causal, kind), torch.tensor(y))
    tl.backward()
    _assert_equals_torch(step, params, x, y, loss, grads, tl, tp)


@pytest.mark.parametrize("name,make,torch_opt", [
    ("adam", lambda: nn.adam(0.01), lambda ps: torch.optim.Adam(ps, lr=0.01)),
    ("adam-l2", lambda: nn.adam(0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
     lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adamw", lambda: nn.adamw(0.01, weight_decay=0.05), lambda ps: torch.optim.AdamW(ps, lr=0.01,
                                                                                       weight_decay=0.05)),
])
def test_adam_trajectories_equal_torch_optim(name, make, torch_opt, rng):
    B, sizes = 6, [4, 7, 3]
    step = cg.compile_model(nn.mlp(B, sizes, activation=nn.tanh), nn.mse, make(), dtype=cg.float64)
    params = step.init_params(seed=1)
    tp = {k: torch.tensor(params[k], requires_grad=True) for k in step.param_names}
    opt = torch_opt(list(tp.values()))
    err = _Trajectory(step)
    for _ in range(10):
        x, y = rng.normal(size=(B, sizes[0])), rng.normal(size=(B, sizes[-1]))
        err.step(params, x, y)
        params = step.step(params, x, y)
        opt.zero_grad()
        h = torch.tanh(torch.tensor(x) @ tp["W0"] + tp["b0"]) @ tp["W1"] + tp["b1"]
        F.mse_loss(h, torch.tensor(y)).backward()
        opt.step()
    assert float(params["adam/t"]) == 10.0
    err.check(params, tp)


def test_learning_rate_schedule_without_recompiling(rng):
    B, sizes = 4, [3, 2]
    step = cg.compile_model(nn.mlp(B, sizes), nn.mse, nn.adam(0.1), dtype=cg.float64)
    p0 = step.init_params(seed=0)
    x, y = rng.normal(size=(B, 3)), rng.normal(size=(B, 2))
    fast, slow = step.step(p0, x, y), step.step(nn.set_learning_rate(p0, 0.01), x, y)
    # Adam's first step moves every parameter by about lr: the rate in the state is the one used
    assert np.allclose(np.abs(fast["W0"] - p0["W0"]), 0.1, rtol=1e-3)
    assert np.allclose(np.abs(slow["W0"] - p0["W0"]), 0.01, rtol=1e-3)
    with pytest.raises(KeyError, match="set_learning_rate: params hold no 'adam/lr'"):
        nn.set_learning_rate(cg.compile_model(nn.mlp(B, sizes), nn.mse, nn.sgd(0.1)).init_params(0), 0.1)


@pytest.mark.parametrize("args,message", [
    (dict(lr=-1.0), "adam: learning rate lr must be a finite number > 0, got -1.0"),
    (dict(betas=(0.9, 1.0)), "adam: beta2 must be a finite number in (0, 1), got 1.0"),
    (dict(eps=0.0), "adam: eps must be a finite number > 0, got 0.0"),
])
def test_adam_arguments_are_checked(args, message):
    with pytest.raises(ValueError, match=f"^{message.replace('(', r'[(]').replace(')', r'[)]')}$"):
        nn.adam(**args)


def test_layer_building_errors():
    with pytest.raises(ValueError, match=r"^nn.attention: d=10 must be a multiple of heads=4$"):
        nn.attention(2, 3, 10, heads=4)
    with pytest.raises(ValueError, match=r"^nn.transformer_block: attention must be 'softmax' or 'spherical', "
                                         r"got 'linear'$"):
        nn.transformer_block(2, 3, 8, kind="linear")


@pytest.mark.parametrize("kind", ["softmax", "spherical"])
def test_gpt_training_step_gradients_equal_pytorch(kind, rng):
    B, S, V, d, heads, layers = 2, 6, 11, 8, 2, 2
    step = cg.compile_model(nn.gpt(B, S, V, d=d, heads=heads, layers=layers, attention=kind),
                            loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1), dtype=cg.float64)
    params = {k: v + rng.normal(scale=0.1, size=v.shape) for k, v in step.init_params(seed=0).items()}
    ids, nxt = rng.integers(0, V, size=(B, S)), rng.integers(0, V, size=(B, S))
    grads, loss = step.gradients(params, ids, nxt), step.loss(params, ids, nxt)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    logits = torch_gpt.gpt(torch.tensor(ids), tp, layers, heads, kind, eps=cg.ops.ATTENTION_EPS)
    tl = F.cross_entropy(logits.reshape(-1, V), torch.tensor(nxt).reshape(-1))
    tl.backward()
    _assert_equals_torch(step, params, ids, nxt, loss, grads, tl, tp)


# ------------------------------------------------------------ convolutions
def _issue_cnn(B):
    """The CNN of the issue, verbatim."""
    return cg.sequential([nn.conv2d(B, 1, 8, 8, 16, kernel=3, padding=1), nn.relu(B, 16, 8, 8),
                          nn.max_pool2d(B, 16, 8, 8, 2), nn.flatten(B, 16, 4, 4), nn.dense(B, 256, 10)])


def _torch_cnn(tp, x):
    h = F.conv2d(x, tp["W0"], tp["b0"].reshape(-1), padding=1).relu()
    return F.max_pool2d(h, 2).flatten(1) @ tp["W1"] + tp["b1"]


def test_cnn_training_step_equals_pytorch(rng):
    B = 5
    step = cg.compile_model(_issue_cnn(B), nn.softmax_cross_entropy, nn.sgd(0.1), dtype=cg.float64)
    params = step.init_params(seed=0)
    assert {k: params[k].shape for k in step.param_names} == {"W0": (16, 1, 3, 3), "b0": (16, 1, 1),
                                                              "W1": (256, 10), "b1": (10,)}
    x, y = rng.normal(size=(B, 1, 8, 8)), rng.integers(0, 10, size=B)
    new = step.step(params, x, y)
    tp = {k: torch.tensor(params[k], requires_grad=True) for k in step.param_names}
    F.cross_entropy(_torch_cnn(tp, torch.tensor(x)), torch.tensor(y)).backward()
    # the gradient read back from the step, (p − new)/0.1: new's bound/0.1, the subtraction's and the division's
    # rounding (u each); torch's: the gradient program's bound
    args = [params[k] for k in step.param_names] + [step._x(x, "step"), step._targets(y, "step")]
    e_new = error_bounds(step.fn("step").program, args)
    e_grad = error_bounds(step.fn("gradients").program, args)
    u = np.finfo(np.float64).eps / 2
    grads = [(params[k] - new[k]) / 0.1 for k in step.param_names]
    bounds = [(en / 0.1 + 2 * u * np.abs(g) + eg) / 2 for en, eg, g in zip(e_new, e_grad, grads)]
    assert_within(grads, [tp[k].grad.numpy() for k in step.param_names], bounds)


def test_conv_layer_geometry_and_init_match_pytorch_conventions(rng):
    d = nn.conv2d(2, 3, 9, 7, 4, kernel=(3, 2), stride=2, padding=(1, 0))
    assert d.target_types == (cg.NdArrayType((2, 4, 5, 3)),)
    assert nn.flatten(2, 4, 5, 3).target_types == (cg.NdArrayType((2, 60)),)
    assert nn.avg_pool2d(2, 4, 5, 3, 3, stride=1, padding=1).target_types == (cg.NdArrayType((2, 4, 5, 3)),)
    step = cg.compile_model(_issue_cnn(2), nn.softmax_cross_entropy, nn.sgd(0.1))
    W = step.init_params(seed=0)["W0"]
    lim = np.sqrt(6.0 / (1 * 9 + 16 * 9))             # Glorot: fans C·kh·kw and O·kh·kw
    assert np.abs(W).max() <= lim and np.abs(W).max() > 0.8 * lim


@pytest.mark.parametrize("name,make,torch_opt", [
    ("sgd", lambda: nn.clip_grad_norm(nn.sgd(0.5), 0.1), lambda ps: torch.optim.SGD(ps, lr=0.5)),
    ("adamw", lambda: nn.clip_grad_norm(nn.adamw(0.01, weight_decay=0.05), 0.05),
     lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05)),
    ("not-clipped", lambda: nn.clip_grad_norm(nn.momentum(0.1), 1e3), lambda ps: torch.optim.SGD(ps, lr=0.1,
                                                                                               momentum=0.9)),
])
def test_gradient_clipping_equals_torch_clip_grad_norm(name, make, torch_opt, rng):
    B, sizes = 6, [4, 7, 3]
    opt = make()
    step = cg.compile_model(nn.mlp(B, sizes, activation=nn.tanh), nn.mse, opt, dtype=cg.float64)
    params = step.init_params(seed=1)
    tp = {k: torch.tensor(params[k], requires_grad=True) for k in step.param_names}
    topt = torch_opt(list(tp.values()))
    clipped = 0
    err = _Trajectory(step)
    for _ in range(10):
        x, y = rng.normal(size=(B, sizes[0])), 3 * rng.normal(size=(B, sizes[-1]))
        err.step(params, x, y)
        params = step.step(params, x, y)
        topt.zero_grad()
        h = torch.tanh(torch.tensor(x) @ tp["W0"] + tp["b0"]) @ tp["W1"] + tp["b1"]
        F.mse_loss(h, torch.tensor(y)).backward()
        clipped += float(torch.nn.utils.clip_grad_norm_(list(tp.values()), opt.max_norm)) > opt.max_norm
        topt.step()
    assert clipped == (0 if name == "not-clipped" else 10)
    err.check(params, tp)


def test_gradient_clipping_keeps_the_schedule_and_names_its_constant():
    opt = nn.clip_grad_norm(nn.adamw(0.01), 0.5)
    assert opt.constants()[-1] == ("clip max norm", 0.5)
    step = cg.compile_model(nn.mlp(2, [3, 2]), nn.mse, opt)
    assert "adam/lr" in nn.set_learning_rate(step.init_params(0), 0.001)
    with pytest.raises(ValueError, match=r"^clip_grad_norm: max_norm must be a finite number > 0, got 0.0$"):
        nn.clip_grad_norm(nn.sgd(0.1), 0.0)
    with pytest.raises(TypeError, match=r"^clip_grad_norm: optimizer must be an nn optimizer"):
        nn.clip_grad_norm("sgd", 1.0)


@pytest.mark.parametrize("dtype", [cg.float32, cg.float64], ids=str)
def test_clipping_keeps_the_step_length_for_huge_gradients(dtype):
    """torch's coefficient min(1, m / (n + 1e-6)): a gradient of norm 1e8 still moves the parameters by m."""
    P = [cg.NdArrayType((3,), dtype)]
    prog = cg.schedule(nn.clip_grad_norm(nn.sgd(1.0), 1.0).update(P))
    for n in (1e4, 1e8, 1e17):
        g = (np.array([1.0, 2.0, 2.0]) * n / 3).astype(dtype.numpy_dtype())
        (p,) = cg.run(prog, [np.zeros(3, dtype.numpy_dtype()), g])
        assert abs(np.linalg.norm(p.astype(np.float64)) - 1.0) < 1e-6


def test_clipping_in_fixed_point_with_vanishing_gradients():
    """A perfectly fit batch (zero gradients) is a zero step, not an overflow of m / ε."""
    step = cg.compile_model(nn.mlp(4, [3, 2]), nn.mse, nn.clip_grad_norm(nn.sgd(0.1), 1.0), dtype=cg.fixed(32, 16))
    p = step.init_params(seed=0)
    x = np.random.default_rng(0).normal(size=(4, 3))
    q = step.step(p, x, np.asarray(step.predict(p, x), dtype=float))
    for k in step.param_names:
        assert np.array_equal(q[k], p[k]), k


def test_rms_norm_loss_and_gradients_equal_pytorch(rng):
    """``nn.rms_norm``: ``x / sqrt(mean(x²) + eps) · g`` over the last axis, with a learned gain ``g`` (ones at
    init, moved here so that the gain's gradient matters), then a dense layer and softmax cross-entropy."""
    B, d, m = 4, 8, 3
    step = cg.compile_model(nn.rms_norm(B, d, eps=1e-3, dtype=cg.float64) >> nn.dense(B, d, m, dtype=cg.float64),
                            nn.softmax_cross_entropy, nn.sgd(0.1), dtype=cg.float64)
    params = step.init_params(seed=0)
    assert set(params) == {"rms_g0", "W0", "b0"} and np.array_equal(params["rms_g0"], np.ones(d))
    params["rms_g0"] = rng.uniform(0.5, 1.5, d)
    x, y = rng.normal(size=(B, d)), rng.integers(0, m, size=B)
    loss, grads = step.loss(params, x, y), step.gradients(params, x, y)
    tp = {k: torch.tensor(params[k], requires_grad=True) for k in step.param_names}
    tx = torch.tensor(x)
    h = tx / torch.sqrt((tx * tx).mean(-1, keepdim=True) + 1e-3) * tp["rms_g0"]
    tl = F.cross_entropy(h @ tp["W0"] + tp["b0"], torch.tensor(y))
    tl.backward()
    _assert_equals_torch(step, params, x, y, loss, grads, tl, tp)


# ------------------------------------------------------------------ an MLP against PyTorch autograd
@pytest.mark.parametrize("act,tact", [(nn.relu, torch.relu), (nn.sigmoid, torch.sigmoid), (nn.tanh, torch.tanh)])
def test_mlp_gradients_match_pytorch(act, tact, rng):
    B, sizes = 16, [5, 12, 9, 4]
    model = nn.mlp(B, sizes, activation=act, dtype=cg.float64)
    step = cg.compile_model(model, loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1))
    p = step.init_params(seed=7)
    x, y = rng.normal(size=(B, sizes[0])), rng.integers(0, sizes[-1], size=B)
    grads = step.gradients(p, x, y)
    loss = step.loss(p, x, y)

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    h = torch.tensor(x)
    for i in range(len(sizes) - 1):
        h = h @ tp[f"W{i}"] + tp[f"b{i}"]
        if i < len(sizes) - 2:
            h = tact(h)
    tl = torch.nn.functional.cross_entropy(h, torch.tensor(y))
    tl.backward()
    # torch's kernels evaluate the same expressions: each within our program's error bound of the exact value
    args = [p[k] for k in step.param_names] + [step._x(x, "loss"), step._targets(y, "loss")]
    assert_programs_close([loss], [tl.item()], step.fn("loss").program, args)
    assert_programs_close([grads[k] for k in step.param_names], [tp[k].grad.numpy() for k in step.param_names],
                          step.fn("gradients").program, args)
