"""A character-level GPT trained on the Python standard library's own source; prints ``val_loss=<nats/char>``.

The text ships with every Python installation (no download): the ``.py`` files at the top of the
standard library, in sorted order, mapped to 96 characters (printable ASCII and newline; a tab is a
space, anything else is dropped). The last 10% is held out for validation. AdamW with a cosine
learning-rate schedule (``nn.set_learning_rate``: no recompilation), then a short greedy sample.
``--dtype fixed`` trains in exact fixed(32,16) with momentum SGD (see :func:`build`).

    python examples/tinygpt.py                          # softmax attention, float32
    python examples/tinygpt.py --attention spherical    # L2-normalised scores: no exp, no max
    python examples/tinygpt.py --backend cupy           # on a GPU (fused CUDA kernels; auto: when usable)
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import sysconfig
import time

import numpy as np

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.progress import progress

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _train import add_backend, backend  # noqa: E402

VOCAB = "\n" + "".join(chr(c) for c in range(32, 127))          # 96 characters
DEFAULTS = dict(steps=2500, batch=16, seq=64, d=128, heads=4, layers=2, lr=3e-3, chars=2_000_000)


def corpus(limit: int = DEFAULTS["chars"]) -> np.ndarray:
    """Token ids of the standard library's top-level ``.py`` files (sorted), at most ``limit`` characters."""
    root = sysconfig.get_paths()["stdlib"]
    table = {c: i for i, c in enumerate(VOCAB)}
    table["\t"] = table[" "]
    ids: list[int] = []
    for name in sorted(os.listdir(root)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(root, name), encoding="utf-8", errors="replace") as fh:
            ids.extend(table[c] for c in fh.read() if c in table)
        if len(ids) >= limit:
            break
    return np.array(ids[:limit], dtype=np.int64)


def split(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = int(len(ids) * 0.9)
    return ids[:n], ids[n:]


def windows(ids: np.ndarray, starts: np.ndarray, seq: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``[B, seq]`` and next-character targets ``[B, seq]`` from the windows at ``starts``."""
    idx = starts[:, None] + np.arange(seq + 1)
    w = ids[idx]
    return w[:, :-1], w[:, 1:]


def batch_starts(n: int, seq: int, batch: int, steps: int, seed: int) -> np.ndarray:
    """The training windows of every step: ``[steps, batch]`` (the same order for any trainer)."""
    return np.random.default_rng(seed).integers(0, n - seq - 1, size=(steps, batch))


def val_starts(n: int, seq: int, batch: int, batches: int = 16) -> np.ndarray:
    """Evenly spaced, non-overlapping validation windows: ``[batches, batch]``."""
    count = min(batches * batch, (n - 1) // seq)
    starts = np.arange(count) * seq
    return starts[: (count // batch) * batch].reshape(-1, batch)


def schedule(step: int, steps: int, lr: float) -> float:
    """Cosine decay from ``lr`` to ``lr/10`` after a 5% linear warm-up."""
    warm = max(1, steps // 20)
    if step < warm:
        return lr * (step + 1) / warm
    t = (step - warm) / max(1, steps - warm)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def val_loss(step, params, ids: np.ndarray, seq: int, batch: int) -> float:
    starts = val_starts(len(ids), seq, batch)
    return float(np.mean([step.loss(params, *windows(ids, s, seq)) for s in starts]))


def sample(step, params, prompt: str, n: int, seq: int) -> str:
    """``n`` characters after ``prompt``, greedily (the window's last ``seq`` characters, space-padded)."""
    ctx = [VOCAB.index(c) for c in prompt if c in VOCAB]
    for _ in range(n):
        window = ([VOCAB.index(" ")] * seq + ctx)[-seq:]
        logits = step.to_host(step.predict(params, np.array([window])))
        ctx.append(int(np.argmax(logits[0, -1])))
    return "".join(VOCAB[i] for i in ctx)


def model(batch: int = DEFAULTS["batch"], seq: int = DEFAULTS["seq"], d: int = DEFAULTS["d"],
          heads: int = DEFAULTS["heads"], layers: int = DEFAULTS["layers"], attention: str = "softmax",
          lr: float = DEFAULTS["lr"], fixed_lr: float = 0.1, chars: int = DEFAULTS["chars"],
          dtype: cg.Dtype = cg.float32) -> cg.ModelSpec:
    """The model file convention (``circuitgrad zk prove``, ``fpga synth``): this script's GPT, loss and
    optimizer, and its training windows. AdamW in float. In fixed point, Adam's second moment
    ``(1 − β₂)·g²`` falls below one step for typical gradients (measured in fixed(32,16): AdamW did not
    learn), so fixed point trains with momentum SGD at the constant rate ``fixed_lr``."""
    gpt = nn.gpt(batch, seq, len(VOCAB), d=d, heads=heads, layers=layers, attention=attention)
    opt = nn.momentum(fixed_lr, 0.9) if isinstance(dtype, cg.Fixed) else nn.adamw(lr)

    def data(seed: int):
        train, _ = split(corpus(chars))
        for starts in batch_starts(len(train), seq, batch, 256, seed):
            yield windows(train, starts, seq)
    return cg.ModelSpec(gpt, nn.softmax_cross_entropy, opt, dtype, data)


def build(args) -> cg.CompiledModel:
    """The step this script trains: :func:`model` in float32 (AdamW) or fixed(32,16) (momentum SGD), on
    ``args.backend`` (fixed point always on NumPy)."""
    gpu = {k: v for k, v in (("precision", getattr(args, "precision", "fp32")),
                              ("graph", getattr(args, "graph", False))) if v not in ("fp32", False)}
    if gpu.get("graph"):
        gpu["donate"] = True
    return model(args.batch, args.seq, args.d, args.heads, args.layers, args.attention, args.lr, args.fixed_lr,
                 args.chars, cg.float32 if args.dtype == "float32" else cg.fixed(32, 16)).compile(
        backend="numpy" if args.dtype == "fixed" else getattr(args, "backend", "numpy"), **gpu)


def with_rate(params: dict, k: int, args) -> dict:
    """The scheduled learning rate for step ``k`` (Adam keeps it in ``params``; momentum's is fixed)."""
    return nn.set_learning_rate(params, schedule(k, args.steps, args.lr)) if "adam/lr" in params else params


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attention", choices=["softmax", "spherical"], default="softmax")
    p.add_argument("--dtype", choices=["float32", "fixed"], default="float32",
                   help="fixed: exact fixed(32,16) training in the reference interpreter (much slower)")
    for k, v in DEFAULTS.items():
        p.add_argument(f"--{k}", type=type(v), default=v)
    p.add_argument("--fixed-lr", type=float, default=0.1, help="momentum SGD's rate with --dtype fixed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample", type=int, default=120, help="characters to generate at the end")
    add_backend(p)
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                   help="GPU: the matrix products in float32, on TF32 tensor cores, or in bfloat16 (float32 elsewhere)")
    p.add_argument("--graph", action="store_true", help="GPU: each step replayed as one CUDA graph")
    p.add_argument("--quiet", action="store_true")
    return p


def main() -> float:
    p = parser()
    args = p.parse_args()
    for k in ("steps", "batch", "seq", "d", "heads", "chars"):
        if getattr(args, k) < 1:
            p.error(f"--{k} must be at least 1, got {getattr(args, k)}")
    train, val = split(corpus(args.chars))
    if len(val) < args.seq + 1 or len(train) < args.seq + 1:
        p.error(f"--chars {args.chars} leaves too little text for windows of --seq {args.seq}")
    backend(p, args)
    try:
        step = build(args)
    except (ValueError, TypeError) as e:
        p.error(str(e))
    print(f"{step.model.name}: {sum(np.size(v) for k, v in step.init_params(0).items() if k in step.param_names)} "
          f"parameters, compiled for {step.dtype} on {step.backend} in {step.compile_seconds:.2f} s; {len(train)} train / {len(val)} "
          f"validation characters")
    params = step.init_params(seed=args.seed)
    plan = batch_starts(len(train), args.seq, args.batch, args.steps, args.seed)
    t0 = time.perf_counter()
    with progress(args.steps, f"train tinygpt [{args.attention}, {step.dtype}]", disable=args.quiet) as bar:
        for k, starts in enumerate(plan):
            params = step.step(with_rate(params, k, args), *windows(train, starts, args.seq))
            bar.update()
            if k % 100 == 0:
                bar.set_postfix(loss=f"{step.loss(params, *windows(train, starts, args.seq)):.3f}")
    print(f"trained {args.steps} steps in {time.perf_counter() - t0:.1f} s")
    if args.sample:
        print("sample: " + repr(sample(step, params, "def ", args.sample, args.seq)))
    loss = val_loss(step, params, val, args.seq, args.batch)
    print(f"val_loss={loss:.4f}")
    return loss


if __name__ == "__main__":
    main()
