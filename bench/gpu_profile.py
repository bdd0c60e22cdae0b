"""Where a GPU training step's time goes: each launch timed with CUDA events against the cost model's prediction.

    python bench/gpu_profile.py [--repeats 20] [--warmup 5] [--report gpu-profile.json] [--device h100]

Models: the GPT of ``examples/tinygpt.py`` (d=128, 4 heads, 2 layers, S=64, B=16, AdamW, the device
check's configuration), the CNN of ``examples/digits_cnn.py`` (batch 32, 16 channels, momentum SGD) and
the MLP 784-256-256-10 at batch 128 (SGD), all float32 with ``donate=True``. For each it prints
:func:`circuitgrad.backends.gpu.profile`'s table (by launch kind, by definition, the slowest launches)
and a summary: the unprobed step's wall time, the sum of the launches' stream times, the cost model's
prediction (``cg.cost(step, target="gpu")``) and the measured per-launch floor (the median time of
the launches with under a microsecond of device work). The cost model's issue costs
(``circuitgrad.backends.gpu.cost.ISSUE_S``) come from this script's run on an H100. Without a GPU it says why and exits with 0; ``--emulate`` runs the same code on the host
(``backend="cupy-emulated"``, host timestamps), to check the script itself.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (os.path.join(ROOT, "bench"), os.path.join(ROOT, "scripts"), os.path.join(ROOT, "examples")):
    sys.path.insert(0, p)
from _util import table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import datasets, nn  # noqa: E402
from circuitgrad.backends import gpu  # noqa: E402


def _gpt(backend: str):
    import gpu_check
    import tinygpt
    cfg = gpu_check.CONFIG
    step = gpu_check._spec(cfg).compile(backend=backend, donate=True)
    (x, y), = gpu_check._windows(cfg, 1)
    p = nn.set_learning_rate(step.init_params(seed=0), tinygpt.schedule(0, cfg["schedule_steps"], cfg["lr"]))
    return step, p, x, y


def _cnn(backend: str):
    import digits_cnn
    spec = digits_cnn.model(batch=32)
    step = spec.compile(backend=backend, donate=True)
    data = datasets.load("digits")
    return step, step.init_params(seed=0), data.x_train[:32], data.y_train[:32]


def _mlp(backend: str):
    B, sizes = 128, [784, 256, 256, 10]
    step = cg.compile_model(nn.mlp(B, sizes), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.01),
                            backend=backend, donate=True)
    rng = np.random.default_rng(0)
    return step, step.init_params(seed=0), rng.normal(size=(B, sizes[0])), rng.integers(0, sizes[-1], size=B)


MODELS = {"tinygpt d128 b16 s64": _gpt, "digits CNN b32": _cnn, "MLP 784-256-256-10 b128": _mlp}


def measure(make, backend: str, repeats: int, warmup: int, device: str) -> gpu.Profile:
    step, p, x, y = make(backend)
    args = step.arguments("step", {k: step.xp.asarray(v) for k, v in p.items()}, x, y)
    return gpu.profile(step.fn("step").compiled, *args, repeats=repeats, warmup=warmup, device=device)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="h100", help="the cost-model profile the predictions use")
    ap.add_argument("--report", help="also write every profile as JSON here")
    ap.add_argument("--models", nargs="*", choices=list(MODELS), default=list(MODELS))
    ap.add_argument("--emulate", action="store_true", help="run on the host (cupy-emulated) to check the script")
    a = ap.parse_args(argv)
    backend = "cupy-emulated" if a.emulate else "cupy"
    if not a.emulate:
        ok, why = gpu.available()
        if not ok:
            print(f"bench/gpu_profile.py: no GPU here ({why}); nothing measured")
            return 0
    rows, report = [], {}
    for name in a.models:
        prof = measure(MODELS[name], backend, a.repeats, a.warmup, a.device)
        print(f"== {name}\n{prof.table()}\n")
        report[name] = prof.to_json()
        floor = prof.floor_s
        rows.append([name, len(prof.launches), f"{prof.wall_s * 1e3:.3f}", f"{prof.measured_s * 1e3:.3f}",
                     f"{prof.predicted_s * 1e3:.3f}", f"{prof.measured_s / prof.predicted_s:.2f}",
                     "-" if floor is None else f"{floor * 1e6:.1f}"])
    print(f"GPU step profile, float32, median of {a.repeats} after {a.warmup} warm-up calls; "
          f"predictions: cost model '{a.device}' ({rows and report[a.models[0]]['device']})")
    print(table(["model", "launches", "wall ms", "sum of launches ms", "predicted ms", "measured / predicted",
                 "floor µs / launch"], rows))
    if a.report:
        with open(a.report, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
