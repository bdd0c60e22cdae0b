"""Attention on a napkin: predicted HBM traffic of one attention head (circuitgrad/costmodel/napkin.py).

    python bench/napkin.py                                  # the table of docs/COST.md
    python bench/napkin.py --plot docs/attention_napkin.png # and the figure

For each N, the bytes one head moves between HBM and an on-chip memory of M elements, forward and
backward, for softmax and spherical attention, materialised (every N×N intermediate through HBM) and
streaming (FlashAttention-2's tiling), with the streaming/materialised ratios.  Default: d = 64,
M = an H100 thread block's 227 KiB of shared memory in float32 elements (58112), causal.  Nothing
runs on a GPU: these are the model's predictions.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "bench"), ROOT]
from _util import table  # noqa: E402

from circuitgrad.costmodel import napkin  # noqa: E402

MIB = 1024 * 1024


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--M", type=int, default=napkin.H100_M_FP32, help="on-chip memory, elements")
    ap.add_argument("--element-bytes", type=int, default=4)
    ap.add_argument("--no-causal", dest="causal", action="store_false")
    ap.add_argument("--plot", metavar="PNG", help="also write the log-log figure here")
    args = ap.parse_args(argv)

    fwd = napkin.tiles(max(args.N), args.d, args.M, outer="q")
    bwd = napkin.tiles(max(args.N), args.d, args.M, outer="kv")
    print(f"one head, d={args.d}, M={args.M} elements ({args.M * args.element_bytes} bytes), "
          f"{args.element_bytes}-byte elements, {'causal' if args.causal else 'no mask'}, forward+backward; "
          f"streaming tiles (Br, Bc): forward {fwd}, backward {bwd}\n")
    rows = []
    for N in args.N:
        io = {(k, a): napkin.attention_io(N, args.d, args.M, k, a, args.causal, True, args.element_bytes)
              for k in napkin.KINDS for a in napkin.ALGORITHMS}
        mib = lambda k, a: f"{io[k, a].bytes / MIB:,.1f}"  # noqa: E731
        ratio = lambda k: f"{io[k, 'streaming'].bytes / io[k, 'materialised'].bytes:.3f}"  # noqa: E731
        rows.append([N, mib("softmax", "materialised"), mib("softmax", "streaming"),
                     mib("spherical", "materialised"), mib("spherical", "streaming"),
                     ratio("softmax"), ratio("spherical")])
    print(table(["N", "softmax mat. MiB", "softmax stream. MiB", "spherical mat. MiB",
                 "spherical stream. MiB", "softmax stream./mat.", "spherical stream./mat."], rows))
    N = args.N[-1]
    soft, sph = (napkin.attention_io(N, args.d, args.M, k, "streaming", args.causal, True) for k in napkin.KINDS)
    print(f"\nstreaming at N={N}: softmax {soft.other_flops:,} non-matmul flops "
          f"({soft.transcendentals:,} exp/log/sqrt, {soft.rescales:,} accumulator rescales, "
          f"{soft.state_per_row} scalars/row); spherical {sph.other_flops:,} "
          f"({sph.transcendentals:,}, {sph.rescales}, {sph.state_per_row}); "
          f"matmul flops {soft.matmul_flops:,} both")
    if args.plot:
        napkin.plot(args.plot, d=args.d, M=args.M, causal=args.causal, element_bytes=args.element_bytes)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
