"""Throughput of a large MLP's training step on synthetic data (GPU when present).

    python examples/gpu_mlp.py                         # backend auto: CuPy on a GPU, else NumPy
    python examples/gpu_mlp.py --sizes 4096 4096 4096 --batch 1024 --steps 200 --backend cupy

Prints the kernel launches per step (GPU), the steps per second and the
samples per second, and ends with ``throughput=<samples/s>``.
"""
import argparse
import os
import sys
import time

import numpy as np

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.progress import progress

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _train import add_backend, backend  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 1024, 1024, 10])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=50)
    add_backend(ap, default="auto")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    if a.batch < 1 or a.steps < 1 or min(a.sizes) < 1:
        ap.error(f"--batch, --steps and --sizes must be 1 or more, got {a.batch}, {a.steps} and {a.sizes}")
    backend(ap, a)
    step = cg.compile_model(nn.mlp(a.batch, a.sizes), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.01),
                            backend=a.backend, donate=True)
    xp = step.xp
    rng = np.random.default_rng(0)
    x = xp.asarray(rng.normal(size=(a.batch, a.sizes[0])).astype(np.float32))
    y = xp.asarray(np.eye(a.sizes[-1], dtype=np.float32)[rng.integers(0, a.sizes[-1], size=a.batch)])
    params = step.init_params(seed=0)
    params = step.step(params, x, y)            # warm-up (kernel compilation on the GPU)
    launches = step.launches_per_step
    print(f"MLP {'-'.join(map(str, a.sizes))}, batch {a.batch}, backend {step.backend}"
          + (f", {launches} kernel launches per step" if launches else ""))
    t0 = time.perf_counter()
    with progress(a.steps, "train", disable=a.quiet) as bar:
        for _ in range(a.steps):
            params = step.step(params, x, y)
            bar.update()
    step.to_host(params[step.param_names[0]])   # wait for the device
    dt = time.perf_counter() - t0
    print(f"{a.steps / dt:.1f} steps/s, loss {step.loss(params, x, y):.4f}")
    print(f"throughput={a.steps * a.batch / dt:.0f}")
