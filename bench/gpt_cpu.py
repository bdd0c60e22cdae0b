"""The tinygpt run in circuitgrad and in PyTorch (CPU eager), from the same parameters and batch order.

    python bench/gpt_cpu.py [--steps 2500] [--attention softmax] [--repeats 7]

Three tables:

* **training**: ``examples/tinygpt.py``'s model and data, trained ``--steps`` steps by both frameworks
  from circuitgrad's initial parameters, on the same windows with the same cosine schedule (AdamW,
  float32); the validation loss of each and their ratio;
* **step time**: the median time of one training step of the benchmark GPT (d=128, 4 heads,
  2 layers, S=64, B=16, vocab 96), timed round robin, and circuitgrad's ratio to PyTorch;
* **compile time**: ``compile_model`` of a d=128 GPT of 3, 12 and 48 layers (training step).

PyTorch uses the threads it picks by default (2 here); circuitgrad's GEMM is MKL when installed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "peers"), os.path.join(ROOT, "examples")]
from _util import interleaved_medians, machine, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402
import tinygpt  # noqa: E402


def torch_run(params0: dict, train, val, plan, args):
    """Train the same GPT in PyTorch; returns (validation loss, trainer step function)."""
    import torch
    import torch_gpt
    F = torch.nn.functional
    p = {k: torch.tensor(np.asarray(v, dtype=np.float32), requires_grad=True) for k, v in params0.items()
         if not k.startswith("adam")}
    opt = torch.optim.AdamW(list(p.values()), lr=args.lr, eps=1e-8, weight_decay=0.01)

    def loss_of(x, y):
        logits = torch_gpt.gpt(torch.tensor(x), p, args.layers, args.heads, args.attention,
                               eps=cg.ops.ATTENTION_EPS)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(y).reshape(-1))

    def step(k, starts):
        for g in opt.param_groups:
            g["lr"] = tinygpt.schedule(k, args.steps, args.lr)
        opt.zero_grad()
        loss_of(*tinygpt.windows(train, starts, args.seq)).backward()
        opt.step()
    for k, starts in enumerate(plan):
        step(k, starts)
    with torch.no_grad():
        vl = float(np.mean([loss_of(*tinygpt.windows(val, s, args.seq)).item()
                            for s in tinygpt.val_starts(len(val), args.seq, args.batch)]))
    return vl, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=tinygpt.DEFAULTS["steps"])
    ap.add_argument("--attention", choices=["softmax", "spherical"], nargs="+", default=["softmax", "spherical"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--depths", type=int, nargs="*", default=[3, 12, 48])
    a = ap.parse_args()
    print(f"machine: {machine()}")
    defaults = tinygpt.parser().parse_args([])
    train, val = tinygpt.split(tinygpt.corpus(defaults.chars))
    rows, speed = [], {}
    for kind in a.attention:
        args = tinygpt.parser().parse_args(["--attention", kind, "--steps", str(a.steps), "--quiet"])
        step = tinygpt.build(args)
        params = step.init_params(seed=0)
        plan = tinygpt.batch_starts(len(train), args.seq, args.batch, args.steps, args.seed)
        t0 = time.perf_counter()
        p = params
        for k, starts in enumerate(plan):
            p = step.step(nn.set_learning_rate(p, tinygpt.schedule(k, args.steps, args.lr)),
                          *tinygpt.windows(train, starts, args.seq))
        t_cg = time.perf_counter() - t0
        cg_loss = tinygpt.val_loss(step, p, val, args.seq, args.batch)
        try:
            t0 = time.perf_counter()
            torch_loss, torch_step = torch_run(params, train, val, plan, args)
            t_torch = time.perf_counter() - t0
        except ImportError:
            print("PyTorch is not installed: its rows are skipped")
            torch_loss, torch_step, t_torch = float("nan"), None, float("nan")
        rows.append([kind, a.steps, f"{cg_loss:.4f}", f"{torch_loss:.4f}", f"{cg_loss / torch_loss - 1:+.2%}",
                     f"{t_cg:.0f} s", f"{t_torch:.0f} s"])
        x, y = tinygpt.windows(train, plan[0], args.seq)
        fns = {"circuitgrad": lambda: step.step(p, x, y)}
        if torch_step is not None:
            fns["pytorch"] = lambda: torch_step(0, plan[0])
        speed[kind] = interleaved_medians(fns, repeats=a.repeats, inner=3)
    print("\n## training (validation loss, nats per character)\n")
    print(table(["attention", "steps", "circuitgrad", "pytorch", "difference", "circuitgrad time", "pytorch time"],
                rows))
    print("\n## one training step, median of round-robin repeats\n")
    print(table(["attention", "circuitgrad ms", "pytorch ms", "ratio"],
                [[k, f"{v['circuitgrad'] * 1e3:.1f}", f"{v.get('pytorch', float('nan')) * 1e3:.1f}",
                  f"{v['circuitgrad'] / v.get('pytorch', float('nan')):.2f}"] for k, v in speed.items()]))
    if a.depths:
        crow = []
        for L in a.depths:
            t0 = time.perf_counter()
            cg.compile_model(nn.gpt(16, 64, 96, d=128, heads=4, layers=L), loss=nn.softmax_cross_entropy,
                             optimizer=nn.adamw(3e-3))
            crow.append([L, f"{time.perf_counter() - t0:.2f}"])
        print("\n## compile_model of the training step (d=128)\n")
        print(table(["layers", "seconds"], crow))


if __name__ == "__main__":
    main()
