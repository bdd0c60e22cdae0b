"""Spherical against softmax attention on the ZK and FPGA targets.

One causal head ``q, k, v : [S, dh]`` in fixed point, forward and its reverse derivative (what a
training step proves), lowered by ``zk.compile_program``: constraints per head, split into the
attention weights (softmax or the L2 normalisation: their special functions, divisions, square
roots and the range checks they need) and the rest (the two products ``q·kᵀ`` and ``a·v``,
identical in both). ``--fpga`` adds the sequencer's cycles for the same programs (exact cycle model,
``macs`` lanes), split the same way, and the resources yosys synthesizes for the heads at ``--synth-seq``
(LUT4s, flip-flops, DSPs on an ECP5-85k: the units a program uses are the only ones built).

    python bench/attention_targets.py                  # --seq 8 16 32 64 --dh 16 --dtype 16 8
    python bench/attention_targets.py --fpga           # --macs 4 --synth-seq 16
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from _attention import constraints, head, shared  # noqa: E402
from _util import table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad.schedule import Program



def fpga_cycles(prog: Program, dt: cg.Fixed, macs: int) -> tuple[int, int]:
    """(all cycles, those of the attention weights: every micro-op but the matrix products')."""
    from circuitgrad.backends import fpga
    from circuitgrad.backends.fpga.timing import cycles
    mc = fpga.compile_program(prog, dt)
    total = fpga.cycles(mc, 2, macs)
    prods = [u for u in mc.ops if u.source.split("#")[0] in ("BatchMatMul", "MatMul")
             and shared(prog, int(u.source.split("#")[1]))]
    only = type(mc)(mc.dtype, prods, mc.depth, mc.init, mc.inputs, mc.outputs)
    base = cycles(type(mc)(mc.dtype, [], mc.depth, {}, [], []), 2, macs)          # start and done
    return total, total - (cycles(only, 2, macs) - base)


def fpga_cells(prog: Program, dt: cg.Fixed, macs: int, outdir: str) -> tuple[int, int, int]:
    """(LUT4s, flip-flops, DSPs) of the sequencer running ``prog``, synthesized by yosys for an ECP5-85k."""
    from circuitgrad.backends import fpga
    from circuitgrad.backends.fpga.synth import cell_counts
    design = fpga.Design(None, prog.name, fpga.compile_program(prog, dt), macs, 2)
    cells = cell_counts(design, "ecp5-85k", outdir, log=lambda s: None)
    ffs = sum(v for k, v in cells.items() if k.startswith("TRELLIS_FF") or "DFF" in k)
    return cells.get("LUT4", 0), ffs, cells.get("MULT18X18D", 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--dh", type=int, default=16)
    ap.add_argument("--dtype", type=int, nargs=2, default=[16, 8], metavar=("WIDTH", "FRAC"))
    ap.add_argument("--fpga", action="store_true", help="also the sequencer's cycles and synthesized resources")
    ap.add_argument("--macs", type=int, default=4)
    ap.add_argument("--synth-seq", type=int, nargs="*", default=[16], help="sequence lengths to synthesize")
    args = ap.parse_args()
    dt = cg.fixed(*args.dtype)
    for rc in ("bits", "lookup"):
        rows = []
        for S in args.seq:
            for reverse in (False, True):
                res = {k: constraints(head(k, S, args.dh, dt, reverse), dt, rc) for k in ("softmax", "spherical")}
                (ts, ws), (tp, wp) = res["softmax"], res["spherical"]
                rows.append([S, "forward + reverse" if reverse else "forward", ts, tp, f"{tp / ts:.2f}",
                             ws, wp, f"{wp / ws:.2f}"])
        what = "R1CS constraints, ranges as bits" if rc == "bits" else \
            "constraints + lookups, ranges as lookups (the native prover)"
        print(f"{'' if rc == 'bits' else chr(10)}one causal head, dh={args.dh}, {dt}: {what} (zk.compile_program)")
        print(table(["S", "program", "softmax", "spherical", "ratio", "softmax weights", "spherical weights",
                     "ratio"], rows))
    if not args.fpga:
        return
    rows, cells = [], []
    for S in args.seq:
        for reverse in (False, True):
            res = {k: fpga_cycles(head(k, S, args.dh, dt, reverse), dt, args.macs) for k in ("softmax", "spherical")}
            (ts, ws), (tp, wp) = res["softmax"], res["spherical"]
            rows.append([S, "forward + reverse" if reverse else "forward", ts, tp, f"{tp / ts:.2f}",
                         ws, wp, f"{wp / ws:.2f}"])
            if S in args.synth_seq:
                with tempfile.TemporaryDirectory() as tmp:
                    got = {k: fpga_cells(head(k, S, args.dh, dt, reverse), dt, args.macs, os.path.join(tmp, k))
                           for k in ("softmax", "spherical")}
                (ls, fs, ds), (lp, fp, dp) = got["softmax"], got["spherical"]
                cells.append([S, "forward + reverse" if reverse else "forward", ls, lp, f"{lp / ls:.2f}", fs, fp,
                              ds, dp])
    print(f"\nthe same heads on the FPGA sequencer, macs={args.macs}: cycles (exact cycle model)")
    print(table(["S", "program", "softmax", "spherical", "ratio", "softmax weights", "spherical weights",
                 "ratio"], rows))
    if cells:
        print("\nresources of the sequencer running each head (yosys synth_ecp5, ECP5-85k)")
        print(table(["S", "program", "LUT4 softmax", "LUT4 spherical", "ratio", "FF softmax", "FF spherical",
                     "DSP softmax", "DSP spherical"], cells))


if __name__ == "__main__":
    main()
