"""The GPU step's peak memory (:mod:`circuitgrad.backends.gpu.memory`) against the allocations of the same step
in the host execution mode, where every device array is a NumPy array whose allocation can be watched."""
from __future__ import annotations

import weakref

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends.gpu import memory
from circuitgrad.backends.gpu.host import launch as hostlaunch
from circuitgrad.backends.gpu.host import run as hostrun

ok, why = hostrun.available()
pytestmark = pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")

MODELS = {
    "mlp": (lambda: nn.mlp(8, [6, 16, 4]), nn.softmax_cross_entropy, None),
    "gpt": (lambda: nn.gpt(4, 8, 13, d=24, heads=3, layers=2), nn.softmax_cross_entropy, 13),
}


class _Watch:
    """Bytes of device memory alive (each allocation once, rounded as CuPy's pool rounds) and their maximum."""

    def __init__(self):
        self.live = self.peak = 0
        self.seen: set[int] = set()

    def wrap(self, a: np.ndarray) -> None:
        root = hostlaunch._root(a)
        if id(root) in self.seen:
            return
        n = -(-a.nbytes // memory.ROUND) * memory.ROUND if a.size else 0
        self.seen.add(id(root))
        self.live += n
        self.peak = max(self.peak, self.live)
        weakref.finalize(root, self._free, id(root), n)

    def _free(self, key: int, n: int) -> None:
        self.seen.discard(key)
        self.live -= n


@pytest.mark.parametrize("donate", [False, True], ids=["keep", "donate"])
@pytest.mark.parametrize("name", list(MODELS))
def test_the_peak_is_what_the_host_run_allocates(name, donate, monkeypatch, rng):
    make, loss, vocab = MODELS[name]
    watch = _Watch()
    init = hostlaunch.DeviceBuffer.__init__

    def watched(self, a):
        init(self, a)
        watch.wrap(a)
    with hostrun.device() as cp:
        step = cg.compile_model(make(), loss=loss, optimizer=nn.adamw(0.01), backend="cupy", donate=donate)
        f = step.fn("step").compiled
        p = step.init_params(seed=0)
        x = rng.integers(0, vocab, size=step.x_type.shape) if vocab else rng.normal(size=step.x_type.shape)
        y = rng.integers(0, vocab, size=step.x_type.shape) if vocab else rng.integers(0, 4, size=8)
        monkeypatch.setattr(hostlaunch.DeviceBuffer, "__init__", watched)
        args = step.arguments("step", {k: cp.asarray(v) for k, v in p.items()}, x, y)
        consts = [v for k, v in f.namespace.items() if k.startswith("C")]
        for c in consts + args:         # made before the watch (init_params returns device arrays) or by it
            watch.wrap(c._a)
        watch.peak = watch.live
        out = f.fn(*args)
        del out
    assert memory.peak(f) == watch.peak


def test_the_cost_model_reports_the_peak_and_a_graph_issues_nothing():
    """``cg.cost(target="gpu")``: the peak of the function the backend builds, and with ``graph=True`` every
    launch costs its device time alone (no host issue cost), so the step is predicted faster."""
    step = cg.compile_model(nn.gpt(4, 8, 13, d=24, heads=3, layers=2), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(0.01), backend="cupy-emulated", donate=True)
    eager, graphed = cg.cost(step, target="gpu"), cg.cost(step, target="gpu", graph=True)
    assert eager.detail["peak_bytes"] == memory.peak(step.fn("step").compiled) > 0
    assert graphed.seconds < eager.seconds
    dev = eager.detail["device"]
    assert graphed.seconds < eager.detail["launches"] * (dev.launch_s + 1e-6) + 1e-4    # small kernels: starts
    assert eager.seconds >= eager.detail["launches"] * 10e-6                           # issue-bound
