"""``backends/gpu/recompute.py``: values made again for the backward pass's products, on small programs whose
answer is known, then on GPT steps (same bits, less memory)."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import interpret, nn, ops
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import memory, recompute as rc
from circuitgrad.backends.gpu.host import run as hostrun

X = cg.NdArrayType((16, 8), cg.float32)
W = cg.NdArrayType((8, 8), cg.float32)


@pytest.fixture
def every_value(monkeypatch):
    """Make values of any size again (the default skips those under 4 MiB)."""
    monkeypatch.setattr(rc, "BYTES", 0)


def _prog(fn, types):
    return cg.schedule(cg.trace(fn, types, name="f"))


def _names(prog):
    return [type(a.op).__name__ for a in prog.instrs]


def _forward_and_backward(x, w, w2):
    """``y = tanh(x)`` read by a product, then by another after a product that does not read it."""
    y = ops.tanh(x)
    z = y @ w
    u = z @ w2
    return ops.transpose(y) @ u


def test_a_value_read_again_after_other_products_is_made_again(every_value, rng):
    prog = _prog(_forward_and_backward, [X, W, W])
    again, added = rc.recompute(prog)
    assert _names(prog).count("Tanh") == 1 and _names(again).count("Tanh") == 2
    assert {type(a.op).__name__ for a in added} == {"Tanh", "Transpose"} and set(added.values()) == {0}
    tanhs = [a.results[0] for a in again.instrs if type(a.op).__name__ == "Tanh"]
    products = [a for a in again.instrs if type(a.op).__name__ == "MatMul"]
    first, last = tanhs
    assert first in products[0].args and all(first not in a.args for a in products[1:])
    remade = next(a for a in added if a.results[0] == last)
    assert again.instrs.index(remade) < again.instrs.index(products[-1])
    xs = [rng.normal(size=t.shape).astype(np.float32) for t in (X, W, W)]
    values: dict[int, np.ndarray] = {}
    interpret.run(again, xs, after=lambda i, a, results: values.update(zip(a.results, results)))
    assert np.array_equal(values[first], values[last])       # the late product reads the same operand


def _tanh_read_by(readers):
    """``y = tanh(x)``, then ``readers(y, w, w2)``."""
    return lambda x, w, w2: readers(ops.tanh(x), w, w2)


KEPT = {
    "no product between": _tanh_read_by(lambda y, w, w2: ops.transpose(y) @ (y @ w)),
    "an elementwise late reader": _tanh_read_by(lambda y, w, w2: y * ((y @ w) @ w2)),
    "an output": _tanh_read_by(lambda y, w, w2: (ops.transpose(y) @ ((y @ w) @ w2), y)),
    "inputs not alive later": lambda x, w, w2: _forward_and_backward(x @ w, w, w2),
}


@pytest.mark.parametrize("case", list(KEPT))
def test_values_kept(case, every_value):
    """What is not made again: a value with nothing but its own readers between them, a late reader a kernel (it
    recomputes the value itself), an output, and one made from operands freed before the late readers (making it
    again would keep them)."""
    prog = _prog(KEPT[case], [X, W, W])
    tanh = next(a.results[0] for a in prog.instrs if type(a.op).__name__ == "Tanh")
    assert len({k for k in prog.uses()[tanh]}) + (tanh in prog.outputs) >= 2       # read twice, by one instruction
    assert rc.recompute(prog) == (prog, {})


@pytest.mark.parametrize("limit", ["BYTES", "LIMIT"])
def test_small_values_and_long_chains_are_kept(limit, every_value, monkeypatch):
    """At most :data:`LIMIT` instructions are copied, and values under :data:`BYTES` are kept (4 MiB by default)."""
    monkeypatch.setattr(rc, limit, {"BYTES": 16 * 8 * 4 + 1, "LIMIT": 0}[limit])
    prog = _prog(_forward_and_backward, [X, W, W])
    assert rc.recompute(prog) == (prog, {})


def test_a_value_read_through_a_view_of_one_made_again_is_kept(every_value):
    """``y2 = sigmoid(y1ᵀ)`` would be made again from ``y1ᵀ``, which its own late product reads later still: a copy
    would keep ``y1``, already made again, alive from the forward pass on. ``y1`` alone is made again."""
    V = cg.NdArrayType((16, 16), cg.float32)

    def two(x, w, w2, w3, w4):
        y1 = ops.tanh(x)
        yt = ops.transpose(y1)
        y2 = ops.sigmoid(yt)
        a = (((y1 @ w) @ w2) @ w2) @ w2
        b = (y2 @ w3) @ w4
        return ops.transpose(y2) @ b, yt @ a
    prog = _prog(two, [X, W, W, V, V])
    again, added = rc.recompute(prog)
    assert sorted(type(a.op).__name__ for a in added) == ["Tanh", "Transpose"]
    assert _names(again).count("Sigmoid") == 1


def test_a_donated_input_updated_before_the_late_product_is_not_read_there(every_value):
    """``x`` is donated and its update, ``x - 0.5``, is written into it before the late product: a copy of ``tanh``
    there would read the update."""
    prog = _prog(lambda x, w, w2: (_forward_and_backward(x, w, w2), x - ops.constant(X, 0.5)), [X, W, W])
    x, update = prog.inputs[0], prog.outputs[1]
    made = {r: i for i, a in enumerate(prog.instrs) for r in a.results}
    late = max(i for i, a in enumerate(prog.instrs) if type(a.op).__name__ == "MatMul")
    assert made[update] < late                   # as scheduled: the update is made before the late product
    assert rc.recompute(prog, {x: update}) == (prog, {})
    assert _names(rc.recompute(prog)[0]).count("Tanh") == 2      # not donated: made again


def test_an_update_that_waits_for_no_product_may_run_first(every_value):
    """``x - tanh(x)/2`` comes after the late product in program order, but waits for no product: the plan may run
    it with the forward pass's kernels, so ``tanh(x)`` is not made again from the donated ``x``."""
    prog = _prog(lambda x, w, w2: (_forward_and_backward(x, w, w2), x - ops.tanh(x) * ops.constant(X, 0.5)), [X, W, W])
    x, update = prog.inputs[0], prog.outputs[1]
    made = {r: i for i, a in enumerate(prog.instrs) for r in a.results}
    late = max(i for i, a in enumerate(prog.instrs) if type(a.op).__name__ == "MatMul")
    assert made[update] > late                   # program order alone would allow it
    assert rc.recompute(prog, {x: update}) == (prog, {})


def test_an_update_that_waits_for_the_late_product_runs_after_it(every_value, monkeypatch):
    """``x - yᵀ·u`` waits for the late product itself: ``tanh(x)`` is made again before it, ``x`` is still donated,
    and the step gives the same bits."""
    S = cg.NdArrayType((8, 8), cg.float32)
    prog = _prog(lambda x, w, w2: x - _forward_and_backward(x, w, w2) * ops.constant(S, 0.5), [S, W, W])
    x, update = prog.inputs[0], prog.outputs[0]
    assert _names(rc.recompute(prog, {x: update})[0]).count("Tanh") == 2
    xs = [np.random.default_rng(3).normal(size=(8, 8)).astype(np.float32) for _ in range(3)]
    out = {}
    for size in (0, 1 << 62):
        monkeypatch.setattr(rc, "BYTES", size)
        f = gpu.compile_function(prog, ["x", "w", "w2"], "f", emulate=True, donate_pairs={update: x})
        assert "# donated buffer" in f.python
        out[size] = (f.fn(*[a.copy() for a in xs])[0], str(f.plan.program).count("Tanh"))
    assert out[0][1] == 2 and out[1 << 62][1] == 1
    assert np.array_equal(out[0][0], out[1 << 62][0])


GPT = (lambda: nn.gpt(8, 8, 13, d=32, heads=2, layers=2), nn.softmax_cross_entropy, 13)


def _gpt_step(backend, precision, rng, monkeypatch, on):
    monkeypatch.setattr(rc, "BYTES", 0 if on else 1 << 62)
    make, loss, vocab = GPT
    step = cg.compile_model(make(), loss=loss, optimizer=nn.adamw(0.01), backend=backend, donate=True,
                            precision=precision)
    x = rng.integers(0, vocab, size=step.x_type.shape)
    y = rng.integers(0, vocab, size=step.x_type.shape)
    p = step.init_params(seed=0)
    for _ in range(2):
        p = step.step(p, x, y)
    f = step.fn("step").compiled
    return {k: np.asarray(step.to_host(v)) for k, v in p.items()}, memory.peak(f), f.plan.launches, f.python


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_gpt_step_makes_its_layer_norm_and_gelu_outputs_again(precision, monkeypatch):
    """Two AdamW steps of a GPT on ``cupy-emulated``: the same bits with and without values made again, a lower
    peak, and one launch more for each value (its copies fuse together, and with nothing else). At any size, the
    token ids' one-hot rows, which the embedding's product reads in both passes, are made again too."""
    kept, on = (_gpt_step("cupy-emulated", precision, np.random.default_rng(1), monkeypatch, flag)
                for flag in (False, True))
    assert kept[0].keys() == on[0].keys()
    assert all(np.array_equal(kept[0][k], on[0][k]) for k in kept[0])
    layers = 2
    values = layers * 3 + 2                      # two layer norms and a GELU a layer, the last layer norm, the one-hot ids
    if precision == "bf16":                      # and each weight's rounded copy (gpu.rounding), 6 a layer, E and W
        values += layers * 6 + 2
    assert on[1] < kept[1]
    assert on[2] == kept[2] + values
    assert on[3].count("# cuBLAS") == kept[3].count("# cuBLAS")


@pytest.mark.skipif(not hostrun.available()[0], reason="host execution mode unavailable: no nvcc")
def test_the_generated_cuda_gives_the_same_bits(monkeypatch):
    """The same in the host execution mode: the kernels nvcc compiles, the copies among them."""
    with hostrun.device():
        kept, on = (_gpt_step("cupy", "bf16", np.random.default_rng(2), monkeypatch, flag) for flag in (False, True))
    assert all(np.array_equal(kept[0][k], on[0][k]) for k in kept[0])
    assert on[1] < kept[1]


@pytest.mark.parametrize("optimizer", [nn.adamw(0.01), nn.momentum(0.05)], ids=["adamw", "momentum"])
def test_each_value_made_again_costs_one_launch(optimizer):
    """A GPT at B·S = 1024 (where a copy's kernel could have moved an earlier group of its size down to it):
    every value's copies are one kernel more, all other work fused as without them."""
    kept, on = (_step(nn.gpt(8, 128, 96, d=256, heads=4, layers=2), nn.softmax_cross_entropy, size, optimizer)
                for size in (1 << 62, 0))
    assert on.plan.launches == kept.plan.launches + 2 * 3 + 2


def _step(model, loss, size: int, optimizer=None, donate: bool = True):
    """The compiled step function of ``model`` on ``cupy-emulated``, values of ``size`` bytes or more made again."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rc, "BYTES", size)
        step = cg.compile_model(model, loss=loss, optimizer=optimizer or nn.adamw(0.01), backend="cupy-emulated",
                                donate=donate)
    return step.fn("step").compiled


MODELS = {
    "mlp, layer norm, GELU": lambda: (nn.dense(2048, 1024, 1024) >> nn.layer_norm(2048, 1024) >> nn.gelu(2048, 1024)
                                      >> nn.dense(2048, 1024, 1024) >> nn.gelu(2048, 1024) >> nn.dense(2048, 1024, 16),
                                      nn.mse),
    "gpt, one layer": lambda: (nn.gpt(8, 256, 96, d=256, heads=4, layers=1), nn.softmax_cross_entropy),
    "gpt, two layers": lambda: (nn.gpt(16, 256, 96, d=128, heads=4, layers=2), nn.softmax_cross_entropy),
}


@pytest.mark.parametrize("donate", [False, True], ids=["keep", "donate"])
@pytest.mark.parametrize("name", list(MODELS))
def test_the_peak_never_rises(name, donate):
    """At the default size, on a step whose peak is not between a value's readers (one GPT layer) as on those
    whose peak is (two layers; the MLP, whose layer norm's sums make their terms): values made again never hold
    more."""
    peaks = [memory.peak(_step(*MODELS[name](), size, donate=donate)) for size in (1 << 62, rc.BYTES)]
    assert peaks[1] <= peaks[0]
    assert (peaks[1] < peaks[0]) == (name != "gpt, one layer")


def test_a_real_size_gpt_holds_less():
    """The GPT of ``bench/gpu_step.py``'s d384 row (d=384, 6 layers, 6 heads, batch 16 × 256), at the default size:
    every layer's GELU output (24 MiB in float32) and layer-norm outputs are made again, and the float32 peak
    falls by more than 6 × 24 MiB."""
    kept, on = (memory.peak(_step(nn.gpt(16, 256, 96, d=384, heads=6, layers=6), nn.softmax_cross_entropy, size,
                                  nn.adamw(3e-3, weight_decay=0.01))) for size in (1 << 62, rc.BYTES))
    assert kept - on > 6 * 24 * 2**20
