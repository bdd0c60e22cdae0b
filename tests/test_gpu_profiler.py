"""``gpu.profile`` on the host (``backend="cupy-emulated"``): every launch timed once, the predictions those of
the cost model, the probed function computing what the step computes, the caller's arrays left alone, and its
errors. ``tests/test_gpu_device.py`` runs it with CUDA events on a device."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu.profiler import _probed


def _cnn(B: int = 4) -> cg.Diagram:
    return cg.sequential([nn.conv2d(B, 1, 8, 8, 4, kernel=3, padding=1), nn.relu(B, 4, 8, 8),
                          nn.max_pool2d(B, 4, 8, 8, 2), nn.flatten(B, 4, 4, 4), nn.dense(B, 64, 10)])


@pytest.fixture(scope="module")
def cnn():
    step = cg.compile_model(_cnn(), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.05, 0.9),
                            backend="cupy-emulated", donate=True)
    p = step.init_params(seed=0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, size=4)
    args = step.arguments("step", p, x, y)
    assert len(args) == len(step.fn("step").compiled.arg_names)
    assert np.array_equal(args[-1], np.eye(10, dtype=np.float32)[y])     # labels as the step takes them
    return step, args


def test_every_launch_is_timed_once(cnn):
    step, args = cnn
    f = step.fn("step").compiled
    prof = gpu.profile(f, *args, repeats=2, warmup=1)
    timed = [s for s in f.plan.steps if s.kind not in ("view", "const")]
    assert [x.index for x in prof.launches] == [k for k, s in enumerate(f.plan.steps)
                                               if s.kind not in ("view", "const")]
    assert len(prof.launches) == len(timed) == step.launches_per_step
    assert all(len(v) == 2 for v in prof.samples.values()) and len(prof.spans) == 2
    for i, span in enumerate(prof.spans):      # consecutive probes: the intervals tile the span
        assert sum(v[i] for v in prof.samples.values()) == pytest.approx(span, rel=1e-9)
    assert all(x.measured_s >= 0 for x in prof.launches)
    assert prof.span_s > 0 and prof.wall_s > 0
    assert sum(g["launches"] for g in prof.by("kind")) == len(timed)
    assert {g["kind"] for g in prof.by("kind")} == {s.kind for s in timed}


def test_predictions_are_the_cost_models(cnn):
    step, args = cnn
    prof = gpu.profile(step.fn("step").compiled, *args, repeats=1, warmup=0)
    c = cg.cost(step, target="gpu")
    assert prof.predicted_s == pytest.approx(c.total.values["seconds"], rel=1e-12)
    assert sum(x.bytes for x in prof.launches) == c.total.values["bytes"]
    ours = {g["path"]: g["predicted_s"] for g in prof.by("path")}
    assert ours == pytest.approx({r.name: r.values["seconds"] for r in c.rows}, rel=1e-12)


def test_probed_source_computes_the_step(cnn):
    step, args = cnn
    f = step.fn("step").compiled
    seen: list[int] = []
    probed = _probed(f, seen.append)
    a = probed(*[np.array(v, copy=True) for v in args])
    b = f.fn(*[np.array(v, copy=True) for v in args])
    assert len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))
    assert seen == [-1] + [x.index for x in gpu.profile(f, *args, repeats=1, warmup=0).launches]


def test_callers_arrays_are_not_donated(cnn):
    step, args = cnn
    before = [np.array(a, copy=True) for a in args]
    gpu.profile(step.fn("step").compiled, *args, repeats=2, warmup=1)
    assert all(np.array_equal(a, b) for a, b in zip(args, before))


def test_table_and_json(cnn):
    step, args = cnn
    prof = gpu.profile(step.fn("step").compiled, *args, repeats=1, warmup=0)
    text = prof.table(top=3)
    assert text.startswith(f"step on host (emulated kernels): {len(prof.launches)} launches, median of 1")
    assert "conv2d" in text and "measured / predicted" in text
    j = prof.to_json()
    assert len(j["launches"]) == len(prof.launches) and j["measured_s"] == prof.measured_s


def test_arguments_of_each_function(cnn):
    step, args = cnn
    p = step.init_params(seed=0)
    n = len(step.param_names)
    assert len(step.arguments("predict", p, args[-2])) == n + 1
    assert len(step.arguments("loss", p, args[-2], args[-1])) == n + 2
    with pytest.raises(ValueError) as e:
        step.arguments("train", p, args[-2], args[-1])
    assert str(e.value) == "arguments: unknown function 'train'; choose one of ['gradients', 'loss', 'predict', 'step']"


def test_errors(cnn):
    step, args = cnn
    f = step.fn("step").compiled
    with pytest.raises(TypeError) as e:
        gpu.profile(step, *args)
    assert str(e.value) == ("profile: expected a GpuFunction (step.fn('step').compiled of a backend='cupy' model), "
                            "got CompiledModel")
    with pytest.raises(TypeError) as e:
        gpu.profile(f, *args[:-1])
    assert str(e.value).startswith(f"profile: step takes {len(args)} arguments (W0, b0, ")
    with pytest.raises(ValueError) as e:
        gpu.profile(f, *args, repeats=0)
    assert str(e.value) == "profile: repeats must be 1 or more and warmup 0 or more, got 0 and 3"
    with pytest.raises(ValueError) as e:
        gpu.profile(f, *args, device="a100")
    assert str(e.value) == "profile: unknown device 'a100'; choose one of h100, h200"
    with pytest.raises(ValueError) as e:
        gpu.profile(f, *args, repeats=1, warmup=0).by("op")
    assert str(e.value) == "profile: group by 'kind' or 'path', not 'op'"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_predictions_are_at_the_functions_precision(precision):
    """The predictions cost the function at the precision it was compiled for, as ``cg.cost`` does: an MLP whose
    products are bound by arithmetic is predicted slower in fp32 (CUDA cores) than on the tensor cores."""
    from circuitgrad.backends.gpu.cost import DEVICES, launch_cost
    step = cg.compile_model(nn.mlp(256, [512, 1024, 10]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.05),
                            backend="cupy-emulated", donate=True, precision=precision)
    rng = np.random.default_rng(0)
    args = step.arguments("step", step.init_params(seed=0), rng.normal(size=(256, 512)).astype(np.float32),
                          rng.integers(0, 10, size=256))
    f = step.fn("step").compiled
    prof = gpu.profile(f, *args, repeats=1, warmup=0)
    dev = DEVICES["h100"]
    for x in prof.launches:
        want = launch_cost(f.program, f.plan, f.plan.steps[x.index], dev, precision)
        assert (x.predicted_s, x.roofline_s) == pytest.approx((want["seconds"], want["roofline_s"]), rel=1e-12)
    big = max((x for x in prof.launches if x.kind == "matmul"), key=lambda x: x.flops)
    fp32 = launch_cost(f.program, f.plan, f.plan.steps[big.index], dev, "fp32")["roofline_s"]
    assert (big.roofline_s == fp32) == (precision == "fp32") and big.roofline_s <= fp32
