"""Spherical against softmax attention on the ZK and FPGA targets (issue 13, part 3).

One causal head ``q, k, v : [S, dh]`` in fixed point, forward and its reverse derivative (what a
training step proves), lowered by ``zk.compile_program``: constraints per head, split into the
attention weights (softmax or the L2 normalisation: their special functions, divisions, square
roots and the range checks they need) and the rest (the two products ``q·kᵀ`` and ``a·v``,
identical in both). ``--fpga`` adds the sequencer's cycles for the same programs.

    python bench/attention_targets.py                  # --seq 8 16 32 64 --dh 16 --dtype 16 8
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import ops  # noqa: E402
from circuitgrad.backends import zk  # noqa: E402

WEIGHTS = ("softmax", "sqrt", "div", "exp", "causal", "square")       # gadget tags of the weights


def head(kind: str, S: int, dh: int, dt: cg.Fixed, reverse: bool) -> cg.Program:
    T = cg.NdArrayType((S, dh))
    d = cg.trace(lambda q, k, v: ops.attention(q, k, v, causal=True, kind=kind), [T, T, T], name=f"{kind}-head")
    if reverse:
        d = cg.rdiff(d)
    return cg.retype(cg.schedule(d), dt)


def constraints(prog: cg.Program, dt: cg.Fixed) -> tuple[int, int]:
    """(all constraints, those of the attention weights: every instruction but the matrix products)."""
    c = zk.compile_program(prog, dt)
    r = c.r1cs
    sizes = {}
    for tag, n in zip(r.tags, (r.block_rows[1:] - r.block_rows[:-1])):
        where = tag.split(":", 1)[0]
        sizes[where] = sizes.get(where, 0) + int(n)
    products = sum(n for k, n in sizes.items() if k.startswith(("BatchMatMul", "MatMul", "input", "output")))
    return r.n_constraints, r.n_constraints - products


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--dh", type=int, default=16)
    ap.add_argument("--dtype", type=int, nargs=2, default=[16, 8], metavar=("WIDTH", "FRAC"))
    args = ap.parse_args()
    dt = cg.fixed(*args.dtype)
    rows = []
    for S in args.seq:
        for reverse in (False, True):
            res = {k: constraints(head(k, S, args.dh, dt, reverse), dt) for k in ("softmax", "spherical")}
            (ts, ws), (tp, wp) = res["softmax"], res["spherical"]
            rows.append([S, "forward + reverse" if reverse else "forward", ts, tp, f"{tp / ts:.2f}",
                         ws, wp, f"{wp / ws:.2f}"])
    print(f"one causal head, dh={args.dh}, {dt}: R1CS constraints (zk.compile_program)")
    print(table(["S", "program", "softmax", "spherical", "ratio", "softmax weights", "spherical weights",
                 "ratio"], rows))


if __name__ == "__main__":
    main()
