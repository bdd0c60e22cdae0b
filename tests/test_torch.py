"""Gradients of a 3-layer MLP with softmax cross-entropy vs PyTorch autograd."""
from __future__ import annotations

import pytest

import circuitgrad as cg
from circuitgrad import nn
from _tolerance import assert_programs_close

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


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
