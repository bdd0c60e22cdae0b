"""GPU training step: circuitgrad (CuPy, fused kernels) vs PyTorch eager and torch.compile.

    python bench/gpu_step.py [--repeats 50] [--warmup 10]

Models: MLP 784-256-256-10 at batch 128 and MLP 4096-4096-4096 at batch 1024
(ReLU, softmax cross-entropy, SGD, float32), and the CNN of ``examples/digits_cnn.py``
(conv 3x3 1→16, ReLU, max pool 2, dense 256→10, batch 32, momentum SGD). For each implementation the
table reports the median per-step time measured with CUDA events after
warm-up, and circuitgrad's kernel launches per step. The peers, PyTorch eager,
``torch.compile`` and ``torch.compile(mode="reduce-overhead")``, run in the
same process. The GPT's timing is ``scripts/gpu-check.sh``'s, and
``bench/gpu_profile.py`` shows where each step's time goes. Without a GPU the script says why and
exits with 0.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from _util import table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402
from circuitgrad.backends import gpu  # noqa: E402

MODELS = [([784, 256, 256, 10], 128), ([4096, 4096, 4096], 1024)]


def cuda_time(fn, repeats: int, warmup: int) -> float:
    import cupy
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return statistics.median(times)


def ours(sizes, B, repeats, warmup):
    import cupy
    step = cg.compile_model(nn.mlp(B, sizes), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.01),
                            backend="cupy", donate=True)
    state = {"p": step.init_params(seed=0)}
    rng = np.random.default_rng(0)
    x = cupy.asarray(rng.normal(size=(B, sizes[0])).astype(np.float32))
    y = cupy.asarray(np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], size=B)])
    f = step.fn("step").run
    names = step.param_names

    def run():
        out = f(*[state["p"][k] for k in names], x, y)
        state["p"] = dict(zip(names, out))
    return cuda_time(run, repeats, warmup), step.launches_per_step


def ours_cnn(B, repeats, warmup):
    import digits_cnn
    step = digits_cnn.model(batch=B).compile(backend="cupy", donate=True)
    rng = np.random.default_rng(0)
    args = step.arguments("step", {k: step.xp.asarray(v) for k, v in step.init_params(seed=0).items()},
                          rng.normal(size=(B, 64)), rng.integers(0, 10, size=B))
    f = step.fn("step").run
    n = len(step.param_names + step.state_names)
    state = {"a": args}

    def run():
        out = f(*state["a"])
        state["a"] = list(out) + state["a"][n:]
    return cuda_time(run, repeats, warmup), step.launches_per_step


def torch_cnn_rows(B, repeats, warmup):
    """The same CNN in PyTorch: conv 3x3 (padding 1) 1→16, ReLU, max pool 2, flatten, linear 256→10."""
    import torch

    def make():
        return torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                   torch.nn.Flatten(), torch.nn.Linear(256, 10)).to("cuda")
    x = torch.randn(B, 1, 8, 8, device="cuda")
    y = torch.randint(0, 10, (B,), device="cuda")
    return _torch_modes(make, lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), x, y,
                        repeats, warmup)


def torch_rows(sizes, B, repeats, warmup):
    import torch
    dev = "cuda"

    def make():
        layers = []
        for i, (n, m) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(torch.nn.Linear(n, m))
            if i < len(sizes) - 2:
                layers.append(torch.nn.ReLU())
        return torch.nn.Sequential(*layers).to(dev)
    x = torch.randn(B, sizes[0], device=dev)
    y = torch.randint(0, sizes[-1], (B,), device=dev)
    return _torch_modes(make, lambda m: torch.optim.SGD(m.parameters(), lr=0.01), x, y, repeats, warmup)


def _torch_modes(make, optimizer, x, y, repeats, warmup):
    """ms per step of PyTorch eager and both ``torch.compile`` modes on a fresh model each."""
    import torch
    rows = {}
    for label, mode in (("PyTorch eager", None), ("torch.compile", "default"),
                        ("torch.compile reduce-overhead", "reduce-overhead")):
        model = make()
        opt = optimizer(model)

        def train_step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        if mode is not None:      # the optimizer's state (momentum buffers) made outside the compiled graph
            train_step()
        fn = train_step if mode is None else torch.compile(train_step, mode=mode)
        if mode == "reduce-overhead":     # CUDA graphs: each call a new step, or the optimizer state's
            graphed = fn                  # outputs of the last replay are read after being overwritten

            def fn():
                torch.compiler.cudagraph_mark_step_begin()
                graphed()
        try:
            rows[label] = cuda_time(fn, repeats, warmup)
        except Exception as e:  # report, don't hide
            print(f"{label} failed: {type(e).__name__}: {e}", file=sys.stderr)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()
    ok, why = gpu.available()
    if not ok:
        print(f"bench/gpu_step.py: no GPU here ({why}); nothing measured")
        return 0
    try:
        import torch
        have_torch = torch.cuda.is_available()
    except ImportError:
        have_torch = False
    rows = []
    for sizes, B in MODELS:
        t, launches = ours(sizes, B, a.repeats, a.warmup)
        rows.append([f"{'-'.join(map(str, sizes))} b{B}", "circuitgrad (CuPy)", f"{t * 1e3:.3f}", launches, "1.00"])
        if have_torch:
            for label, tt in torch_rows(sizes, B, a.repeats, a.warmup).items():
                rows.append(["", label, f"{tt * 1e3:.3f}", "-", f"{tt / t:.2f}"])
    t, launches = ours_cnn(32, a.repeats, a.warmup)
    rows.append(["digits CNN b32", "circuitgrad (CuPy)", f"{t * 1e3:.3f}", launches, "1.00"])
    if have_torch:
        for label, tt in torch_cnn_rows(32, a.repeats, a.warmup).items():
            rows.append(["", label, f"{tt * 1e3:.3f}", "-", f"{tt / t:.2f}"])
    print(f"GPU training step, float32, median of {a.repeats} (CUDA events, after {a.warmup} warm-up); device: {why}")
    print(table(["model", "implementation", "ms / step", "kernels / step", "time / circuitgrad"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
