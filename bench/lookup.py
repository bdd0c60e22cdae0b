"""Range checks as bits against logUp lookups in the native Ligero prover: size, time and memory.

    python bench/lookup.py [--repeats 3] [--cases iris8 digits gpt-softmax gpt-spherical cnn2]

Every case is a fixed(16, 8) training step (softmax cross-entropy, SGD) compiled twice over the
Ligero field, with ``range_checks="bits"`` (every range a bit decomposition, what snarkjs takes)
and ``range_checks="lookup"`` (limbs looked up in ``[0, 2^8)``), and proved at ≥ 100 bits:
  iris8          MLP 4-16-3, batch 8
  digits         MLP 64-64-10, batch 32
  gpt-softmax    GPT B=2, S=8, vocab 16, d=16, 2 heads, 1 layer, softmax attention
  gpt-spherical  the same GPT with spherical (L2) attention
  cnn2           the digits CNN example (2 channels, batch 2)
Each (case, mode) runs in its own process, which gives its peak resident memory. Prover and
verifier times are medians of --repeats runs; the ratio table divides lookup by bits, both
measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, table  # noqa: E402
from prover import _model_circuit, time_ligero  # noqa: E402

CASES = ["iris8", "digits", "gpt-softmax", "gpt-spherical", "cnn2"]
MODES = ["bits", "lookup"]


def child(case: str, mode: str, repeats: int) -> dict:
    from circuitgrad.backends.zk.systems.ligero.proofio import dumps
    from circuitgrad.backends.zk.systems.ligero.protocol import layout
    from circuitgrad.backends.zk.systems.ligero.circuitdata import prepare
    c, wit = _model_circuit(case, mode)
    c.assert_satisfied(wit)
    proof, prove_s, verify_s = time_ligero(c, wit, repeats, f"{case}/{mode}")
    lay = layout(prepare(c.r1cs), proof.params)
    r = c.r1cs
    return {"case": case, "mode": mode, "constraints": r.n_constraints, "wires": r.n_wires, "lookups": r.n_lookups,
            "cells": int(len(lay.w) * lay.k), "sigma_l": proof.params.lookup_sigma, "bits": proof.soundness_bits,
            "prove_s": statistics.median(prove_s), "verify_s": statistics.median(verify_s),
            "proof_bytes": len(dumps(proof)), "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=CASES, choices=CASES)
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child, a.repeats)))
        return
    rows = {}
    for case in a.cases:
        for mode in MODES:
            print(f"[{case} {mode}] …", file=sys.stderr, flush=True)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", case, mode, "--repeats",
                                  str(a.repeats)], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"[{case} {mode}] failed: {out.stderr[-1500:]}")
            rows[case, mode] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"native Ligero prover, range checks as bits and as logUp lookups (table 2^8); {machine()}; "
          f"median of {a.repeats}")
    print(table(["case", "ranges", "constraints", "wires", "lookups", "σL", "committed cells", "bits", "prove s",
                 "verify s", "proof KiB", "peak MiB"],
                [[r["case"], r["mode"], r["constraints"], r["wires"], r["lookups"], r["sigma_l"], r["cells"],
                  f"{r['bits']:.1f}", f"{r['prove_s']:.2f}", f"{r['verify_s']:.2f}", f"{r['proof_bytes'] / 1024:.0f}",
                  f"{r['peak_mib']:.0f}"] for r in rows.values()]))
    print("\nlookup ÷ bits (same run)")
    ratio = []
    for case in a.cases:
        b, lk = rows[case, "bits"], rows[case, "lookup"]
        ratio.append([case] + [f"{lk[k] / b[k]:.2f}×" for k in ("constraints", "cells", "prove_s", "verify_s",
                                                                  "proof_bytes", "peak_mib")])
    print(table(["case", "constraints", "committed cells", "prove", "verify", "proof size", "peak memory"], ratio))


if __name__ == "__main__":
    main()
