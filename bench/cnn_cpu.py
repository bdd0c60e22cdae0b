"""The digits CNN in circuitgrad and in PyTorch (CPU eager): one training step, and the example's accuracy.

    python bench/cnn_cpu.py [--batch 32 128] [--repeats 9]

Two tables:

* **step time**: the median time of one training step (momentum SGD, softmax cross-entropy, float32)
  of ``examples/digits_cnn.py``'s model, conv 3x3 (1→16, padding 1), ReLU, 2x2 max pooling,
  flatten, dense 256→10, timed round robin with PyTorch eager on the same parameters and batch;
  circuitgrad's ratio to PyTorch;
* **training**: the example's default run (20 epochs, batch 32) in both frameworks from the same
  initial parameters and batch order: test accuracy.

PyTorch uses the threads it picks by default; circuitgrad's GEMM is MKL when installed.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "examples")]
from _util import interleaved_medians, machine, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import datasets, nn  # noqa: E402
import digits_cnn  # noqa: E402

LR, BETA = 0.05, 0.9


def torch_trainer(params: dict, B: int):
    """A PyTorch step on the same model from ``params``; returns ``(step(x, y), predict(x))``."""
    import torch
    F = torch.nn.functional
    p = {k: torch.tensor(np.asarray(v, dtype=np.float32), requires_grad=True) for k, v in params.items()
         if not k.startswith("momentum")}
    opt = torch.optim.SGD(list(p.values()), lr=LR, momentum=BETA, dampening=0.0)

    def forward(x):
        h = F.conv2d(x.reshape(-1, 1, 8, 8), p["W0"], p["b0"].reshape(-1), padding=1).relu()
        return F.max_pool2d(h, 2).flatten(1) @ p["W1"] + p["b1"]

    def step(x, y):
        opt.zero_grad()
        F.cross_entropy(forward(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        opt.step()

    def predict(x):
        with torch.no_grad():
            return forward(torch.from_numpy(x)).numpy()
    return step, predict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--epochs", type=int, default=20)
    a = ap.parse_args()
    print(f"machine: {machine()}")
    data = datasets.load("digits", seed=0)
    x_all = data.x_train.astype(np.float32)
    y_all = data.y_train.astype(np.int64)
    speed = []
    for B in a.batch:
        step = cg.compile_model(digits_cnn.cnn(B), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(LR, BETA))
        p = step.init_params(seed=0)
        x, y = x_all[:B], y_all[:B]
        fns = {"circuitgrad": lambda: step.step(p, x, y)}
        try:
            t_step, _ = torch_trainer(p, B)
            fns["pytorch"] = lambda: t_step(x, y)
        except ImportError:
            print("PyTorch is not installed: its column is skipped")
        m = interleaved_medians(fns, repeats=a.repeats, inner=20)
        torch_ms = m.get("pytorch", float("nan")) * 1e3
        speed.append([B, f"{m['circuitgrad'] * 1e3:.3f}", f"{torch_ms:.3f}", f"{m['circuitgrad'] * 1e3 / torch_ms:.2f}"])
    print("\n## one training step, median of round-robin repeats\n")
    print(table(["batch", "circuitgrad ms", "pytorch ms", "ratio"], speed))

    B = 32
    step = cg.compile_model(digits_cnn.cnn(B), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(LR, BETA))
    p0 = step.init_params(seed=0)
    rng = np.random.default_rng(0)
    plan = [list(datasets.batches(data.x_train, data.y_train, B, rng)) for _ in range(a.epochs)]
    p = p0
    for epoch in plan:
        for xb, yb in epoch:
            p = step.step(p, xb, yb)
    acc_cg = float((step.predict(p, data.x_test).argmax(1) == data.y_test).mean())
    try:
        t_step, t_predict = torch_trainer(p0, B)
        for epoch in plan:
            for xb, yb in epoch:
                t_step(xb.astype(np.float32), yb.astype(np.int64))
        acc_t = float((t_predict(data.x_test.astype(np.float32)).argmax(1) == data.y_test).mean())
    except ImportError:
        acc_t = float("nan")
    print(f"\n## training: {a.epochs} epochs, batch {B}, same initial parameters and batches\n")
    print(table(["framework", "test accuracy"], [["circuitgrad", f"{acc_cg:.4f}"], ["pytorch", f"{acc_t:.4f}"]]))


if __name__ == "__main__":
    main()
