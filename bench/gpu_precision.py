"""tinygpt trained with its products in float32, TF32 and bfloat16: the validation loss of each against float32.

    python bench/gpu_precision.py [--steps 1000] [--backend cupy-emulated|cupy] [--precisions fp32,bf16]

The training of ``examples/tinygpt.py`` (its data, windows, schedule and AdamW), compiled with
``precision=`` each in turn, from the same initial parameters on the same batches; the table gives each
run's validation loss and its ratio to the float32 run's (the goal for bf16: within 2%). On
``cupy-emulated`` (the default, no GPU needed) the GPU step's glue runs on NumPy with the products of
operands rounded as the tensor cores round them (``gpu.blas``); on ``cupy`` it runs on the device.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from _util import table  # noqa: E402

import tinygpt as T  # noqa: E402


def train(precision: str, steps: int, backend: str, seed: int = 0) -> tuple[float, float]:
    """``(validation loss, seconds)`` of tinygpt trained ``steps`` steps with ``precision`` products."""
    D = T.DEFAULTS
    train_ids, val_ids = T.split(T.corpus(D["chars"]))
    step = T.model().compile(backend=backend, precision=precision)
    params = step.init_params(seed=seed)
    args = argparse.Namespace(steps=steps, lr=D["lr"])
    t0 = time.perf_counter()
    for k, starts in enumerate(T.batch_starts(len(train_ids), D["seq"], D["batch"], steps, seed)):
        params = step.step(T.with_rate(params, k, args), *T.windows(train_ids, starts, D["seq"]))
    return T.val_loss(step, params, val_ids, D["seq"], D["batch"]), time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--backend", choices=["cupy-emulated", "cupy"], default="cupy-emulated")
    ap.add_argument("--precisions", default="fp32,tf32,bf16", help="comma-separated: fp32, tf32, bf16")
    a = ap.parse_args(argv)
    wanted = a.precisions.split(",")
    if "fp32" not in wanted:
        wanted.insert(0, "fp32")
    rows, ref = [], None
    for p in wanted:
        loss, seconds = train(p, a.steps, a.backend)
        ref = loss if p == "fp32" else ref
        rows.append([p, f"{loss:.4f}", f"{loss / ref:.4f}", f"{seconds:.0f}"])
        print(f"gpu_precision: {p}: val_loss {loss:.4f} in {seconds:.0f} s", flush=True)
    print(f"tinygpt, {a.steps} steps on {a.backend}")
    print(table(["products", "val_loss", "× float32", "seconds"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
