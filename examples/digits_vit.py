"""A small vision transformer on scikit-learn's 8x8 digits; prints ``accuracy=<test accuracy>``.

Each image is a sequence of its 8 rows (8 pixels each), embedded to ``d``, with learned positions,
through ``--layers`` transformer blocks (not causal), a layer norm, a mean over the rows and a
linear head to the 10 classes. AdamW, softmax cross-entropy.

    python examples/digits_vit.py                          # softmax attention, float32
    python examples/digits_vit.py --attention spherical    # L2-normalised scores: no exp, no max
    python examples/digits_vit.py --backend cupy           # on a GPU (fused CUDA kernels)
"""
from __future__ import annotations

import argparse
import os
import sys

import circuitgrad as cg
from circuitgrad import datasets, nn, ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _train import add_backend, backend, train  # noqa: E402

DATASET = "digits"


def vit(B: int, d: int, heads: int, layers: int, attention: str, dtype=cg.float32) -> cg.Diagram:
    """``[B, 64]`` pixels → ``[B, 10]`` logits."""
    T = cg.NdArrayType

    def embed(x):
        rows = ops.reshape(x, (B, 8, 8))
        W, b = ops.param(T((8, d), dtype), "patch_W"), ops.param(T((d,), dtype), "patch_b", init="zeros")
        return rows @ W + b

    def head(x):
        pooled = ops.mean(x, 1)
        return pooled @ ops.param(T((d, 10), dtype), "cls_W") + ops.param(T((10,), dtype), "cls_b", init="zeros")
    parts = [cg.trace(embed, [T((B, 64), dtype)], name=f"rows({B},8x8->{d})"), nn.positional_embedding(B, 8, d, dtype)]
    parts += [nn.transformer_block(B, 8, d, heads, causal=False, kind=attention, dtype=dtype) for _ in range(layers)]
    parts += [nn.layer_norm(B, 8, d, dtype=dtype), cg.trace(head, [T((B, 8, d), dtype)], name=f"mean-pool-head({d},10)")]
    return cg.sequential(parts, name=f"vit(d={d},heads={heads},layers={layers},{attention})")


def main() -> float:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attention", choices=["softmax", "spherical"], default="softmax")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--d", type=int, default=32)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    add_backend(p)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    data = datasets.load(DATASET, seed=args.seed)
    if not 1 <= args.batch <= len(data.x_train):
        p.error(f"--batch must be in 1..{len(data.x_train)} (the training rows), got {args.batch}")
    if args.epochs < 0:
        p.error(f"--epochs must be 0 or more, got {args.epochs}")
    backend(p, args)
    try:
        step = cg.compile_model(vit(args.batch, args.d, args.heads, args.layers, args.attention),
                                loss=nn.softmax_cross_entropy, optimizer=nn.adamw(args.lr, weight_decay=0.01),
                                backend=args.backend)
    except (ValueError, TypeError) as e:
        p.error(str(e))
    args.show_source = False
    return train(data, args, step)


if __name__ == "__main__":
    main()
