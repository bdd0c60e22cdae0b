"""Why spherical attention trails softmax on tinygpt: short PyTorch runs of variants of its normalisation.

    python bench/spherical_variants.py [--steps 800] [--variants softmax plain count square] [--lr 3e-3]

Each run trains ``examples/tinygpt.py``'s GPT in PyTorch (one thread) from circuitgrad's initial
parameters on the same batches with the example's cosine schedule, changing only how each query's
scores ``s`` (masked entries 0) become weights ``a``:

* ``softmax``: ``softmax(s)`` (the reference);
* ``plain``: ``s / sqrt(Σ s² + ε)``, the spherical attention of ``ops.attention`` (``kind="spherical"``);
* ``count``: ``plain / sqrt(n)`` with ``n`` the query's number of keys (a uniform ``a`` then averages
  ``v`` as softmax does, instead of growing with ``sqrt(n)``);
* ``square``: ``plain²``, non-negative weights that sum to 1 (a degree-2 kernel instead of ``exp``).

Prints the validation loss of each (nats per character) and its ratio to softmax's.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "peers"), os.path.join(ROOT, "examples")]
from _util import machine, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
import tinygpt  # noqa: E402


def run(variant: str, steps: int, lr: float) -> float:
    import torch
    import torch_gpt
    F = torch.nn.functional
    torch.set_num_threads(1)
    args = tinygpt.parser().parse_args(["--attention", "spherical", "--steps", str(steps), "--quiet"])
    train, val = tinygpt.split(tinygpt.corpus(args.chars))
    params = tinygpt.build(args).init_params(seed=0)
    p = {k: torch.tensor(np.asarray(v, dtype=np.float32), requires_grad=True) for k, v in params.items()
         if not k.startswith("adam")}

    def attend(q, k, v):
        S = q.shape[-2]
        if variant == "softmax":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        mask = torch.tril(torch.ones(S, S))
        s = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5) * mask
        a = s / torch.sqrt((s * s).sum(-1, keepdim=True) + cg.ops.ATTENTION_EPS)
        if variant == "count":
            a = a / torch.sqrt(mask.sum(-1, keepdim=True))
        elif variant == "square":
            a = a * a
        return a @ v

    opt = torch.optim.AdamW(list(p.values()), lr=lr, eps=1e-8, weight_decay=0.01)

    def loss_of(x, y):
        logits = torch_gpt.gpt(torch.tensor(x), p, args.layers, args.heads, "spherical", attend=attend)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(y).reshape(-1))
    for k, starts in enumerate(tinygpt.batch_starts(len(train), args.seq, args.batch, steps, args.seed)):
        for g in opt.param_groups:
            g["lr"] = tinygpt.schedule(k, steps, lr)
        opt.zero_grad()
        loss_of(*tinygpt.windows(train, starts, args.seq)).backward()
        opt.step()
    with torch.no_grad():
        return float(np.mean([loss_of(*tinygpt.windows(val, s, args.seq)).item()
                              for s in tinygpt.val_starts(len(val), args.seq, args.batch)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--variants", nargs="+", default=["softmax", "plain", "count", "square"],
                    choices=["softmax", "plain", "count", "square"])
    a = ap.parse_args()
    print(f"machine: {machine()}")
    rows, ref = [], None
    for v in a.variants:
        t0 = time.perf_counter()
        loss = run(v, a.steps, a.lr)
        ref = loss if v == "softmax" else ref
        rows.append([v, a.steps, f"{loss:.4f}", f"{loss / ref - 1:+.1%}" if ref else "", f"{time.perf_counter() - t0:.0f} s"])
    print(table(["weights", "steps", "val loss", "vs softmax", "time"], rows))


if __name__ == "__main__":
    main()
