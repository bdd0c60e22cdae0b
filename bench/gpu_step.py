"""GPU training step: circuitgrad (CuPy, fused kernels) vs PyTorch eager and torch.compile.

    python bench/gpu_step.py [--repeats 50] [--warmup 10]

Models: MLP 784-256-256-10 at batch 128 and MLP 4096-4096-4096 at batch 1024
(ReLU, softmax cross-entropy, SGD, float32). For each implementation the
table reports the median per-step time measured with CUDA events after
warm-up, and circuitgrad's kernel launches per step. The peers, PyTorch eager,
``torch.compile`` and ``torch.compile(mode="reduce-overhead")``, run in the
same process. There is no transformer row yet: the foundation has no
attention primitive. Without a GPU the script says why and exits with 0.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
    rows = {}
    for label, mode in (("PyTorch eager", None), ("torch.compile", "default"),
                        ("torch.compile reduce-overhead", "reduce-overhead")):
        model = make()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(B, sizes[0], device=dev)
        y = torch.randint(0, sizes[-1], (B,), device=dev)

        def train_step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        fn = train_step if mode is None else torch.compile(train_step, mode=mode)
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
    print(f"GPU training step, float32, median of {a.repeats} (CUDA events, after {a.warmup} warm-up); device: {why}")
    print(table(["model", "implementation", "ms / step", "kernels / step", "time / circuitgrad"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
