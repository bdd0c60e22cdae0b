"""What the conservative soundness analysis costs: default (Longfellow) against classic Ligero parameters.

    python bench/soundness.py [--repeats 5] [--cases iris8 digits]

For each model step (the circuits of bench/prover.py: fixed(16, 8) over the 51-bit Ligero field, ranges
as logUp lookups) the step is proved with ``soundness="longfellow"`` (the default) and
``soundness="classic"``. Both reach 100 bits, each by its own bound (docs/ZK.md, "Soundness"); the
table gives both bounds for both parameter sets, the proof file's size, and the medians of
``--repeats`` prover and verifier runs, timed round robin across the two modes
(bench/_util.interleaved_medians, one warm-up run each) so that a change of load on a shared
machine hits both alike. The verifier asks for the analysis the proof claims. The load average
before and after is printed with the table.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import interleaved_medians, machine, table  # noqa: E402
from prover import _model_circuit  # noqa: E402

CASES = ["iris8", "iris32", "digits"]


def measure(case: str, repeats: int) -> list[dict]:
    from circuitgrad.backends.zk.systems import ligero
    from circuitgrad.backends.zk.systems.ligero import params as LP
    from circuitgrad.backends.zk.systems.ligero.proofio import dumps
    c, wit = _model_circuit(case)
    lookups = c.r1cs.n_lookups
    proofs = {m: ligero.prove(c, wit, check=False, soundness=m) for m in LP.SOUNDNESS}
    fns = {}
    for m, proof in proofs.items():
        assert ligero.verify(proof, c, wit.public, soundness=m), f"{case} {m}: the proof does not verify"
        fns[("prove", m)] = lambda m=m: ligero.prove(c, wit, check=False, soundness=m)
        fns[("verify", m)] = lambda m=m: ligero.verify(proofs[m], c, wit.public, soundness=m)
    t = interleaved_medians(fns, repeats, warmup=1)     # round robin: a load change hits both modes alike
    rows = []
    for m, proof in proofs.items():
        p = proof.params
        rows.append({"case": case, "mode": m, "params": f"k={p.k} t={p.t} n={p.n} σ={p.sigma} σL={p.lookup_sigma}",
                     "longfellow": LP.soundness_bits(p, lookups=lookups, soundness="longfellow"),
                     "classic": LP.soundness_bits(p, lookups=lookups, soundness="classic"),
                     "bytes": len(dumps(proof)), "prove_s": t[("prove", m)], "verify_s": t[("verify", m)]})
        print(f"[{case} {m}] prove {rows[-1]['prove_s']:.2f} s, verify {rows[-1]['verify_s']:.3f} s",
              file=sys.stderr, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cases", nargs="*", default=["iris8", "digits"], choices=CASES)
    a = ap.parse_args()
    load = os.getloadavg()[0]
    rows = [r for case in a.cases for r in measure(case, a.repeats)]
    print(f"default (Longfellow) against classic Ligero parameters; {machine()}; median of {a.repeats}, "
          f"round robin; load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    out = []
    for r in rows:
        base = next(b for b in rows if b["case"] == r["case"] and b["mode"] == "longfellow")
        ratio = lambda key: "" if r is base else f" ({r[key] / base[key]:.2f}×)"  # noqa: E731
        out.append([r["case"], r["mode"], r["params"], f"{r['longfellow']:.1f}", f"{r['classic']:.1f}",
                    f"{r['bytes'] / 1024:.0f}{ratio('bytes')}", f"{r['prove_s']:.2f}{ratio('prove_s')}",
                    f"{r['verify_s']:.3f}{ratio('verify_s')}"])
    print(table(["case", "soundness", "parameters", "Longfellow bits", "classic bits", "proof KiB", "prove s",
                 "verify s"], out))


if __name__ == "__main__":
    main()
