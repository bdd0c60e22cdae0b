"""Profile the native Ligero prover and verifier on GPT training-step circuits.

    python bench/prover_profile.py [--cases gpt16 gpt32] [--repeats 1] [--top 25] [--out FILE.json]
    python bench/prover_profile.py --compare BEFORE.json AFTER.json

Cases (fixed(16, 8) steps, softmax cross-entropy, SGD 0.125, compiled over zk.LIGERO51):
  gpt16  nn.gpt(2, 8, 16, d=16, heads=2, layers=1, attention="softmax")
  gpt32  nn.gpt(2, 16, 32, d=32, heads=2, layers=1)          (about 10 s per proof)
  gpt64  nn.gpt(4, 32, 96, d=64, heads=4, layers=2)          (about 2 minutes per proof, 8 GB: run it once)

For each case the script proves with a seeded generator (``rng=np.random.default_rng(0)``) under
cProfile, verifies under cProfile, and prints the top functions by total (own) time and by cumulative
time. ``--repeats N`` adds N unprofiled prove/verify runs whose medians are reported. The SHA-256 of
the seeded proof's bytes is printed too: a change to the field arithmetic or the hashing must leave it
unchanged. ``--out`` writes everything as JSON; ``--compare`` prints two such files side by side
(the hot functions before and after).

``--root DIR`` imports ``circuitgrad`` (and ``circuitgrad.backends``) from another checkout, for
example a ``git worktree`` of the unchanged code, so that both sides run under one interpreter setup.
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import importlib.abc
import importlib.util
import json
import os
import pstats
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, table  # noqa: E402
from prover import time_ligero  # noqa: E402

CASES = {"gpt16": dict(B=2, S=8, V=16, d=16, heads=2, layers=1, attention="softmax"),
         "gpt32": dict(B=2, S=16, V=32, d=32, heads=2, layers=1, attention="softmax"),
         "gpt64": dict(B=4, S=32, V=96, d=64, heads=4, layers=2, attention="softmax")}


class _RootFinder(importlib.abc.MetaPathFinder):
    """Map ``circuitgrad`` and ``circuitgrad.backends`` to a checkout (ahead of the editable install)."""

    def __init__(self, root: str):
        self.map = {"circuitgrad": os.path.join(root, "circuitgrad"),
                    "circuitgrad.backends": os.path.join(root, "backends")}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.map:
            d = self.map[fullname]
            return importlib.util.spec_from_file_location(fullname, os.path.join(d, "__init__.py"),
                                                          submodule_search_locations=[d])
        return None


def _use_root(root: str) -> None:
    sys.meta_path.insert(0, _RootFinder(os.path.abspath(root)))


def build(case: str):
    """The compiled circuit of a case and its witness."""
    import circuitgrad as cg
    from circuitgrad import nn
    from circuitgrad.backends import zk
    o = CASES[case]
    rng = np.random.default_rng(0)
    step = cg.compile_model(nn.gpt(o["B"], o["S"], o["V"], d=o["d"], heads=o["heads"], layers=o["layers"],
                                   attention=o["attention"]),
                            loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=cg.fixed(16, 8))
    x, y = rng.integers(0, o["V"], (o["B"], o["S"])), rng.integers(0, o["V"], (o["B"], o["S"]))
    c = zk.compile(step, field=zk.LIGERO51)
    wit = c.witness(step.init_params(seed=0), x, y)
    return c, wit


def _top(prof: cProfile.Profile, n: int) -> list:
    """The ``n`` functions with the largest own time, and those with the largest cumulative time."""
    st = pstats.Stats(prof)
    rows = []
    for (file, line, fn), (cc, nc, tt, ct, _) in st.stats.items():
        short = f"{os.path.basename(file)}:{fn}" if file != "~" else fn
        rows.append({"func": short, "where": f"{file}:{line}", "calls": nc, "tottime": tt, "cumtime": ct})
    by_tot = sorted(rows, key=lambda r: -r["tottime"])[:n]
    by_cum = sorted(rows, key=lambda r: -r["cumtime"])[:n]
    return [by_tot, by_cum]


def run_case(case: str, repeats: int, top: int, proof_dir: str | None) -> dict:
    from circuitgrad.backends.zk.systems import ligero
    from circuitgrad.backends.zk.systems.ligero.proofio import dumps
    t0 = time.perf_counter()
    c, wit = build(case)
    compile_s = time.perf_counter() - t0
    assert c.check(wit)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    proof = ligero.prove(c, wit, check=False, rng=np.random.default_rng(0))
    prof.disable()
    prove_prof_s = time.perf_counter() - t0
    prove_top = _top(prof, top)
    blob = dumps(proof)
    if proof_dir:
        os.makedirs(proof_dir, exist_ok=True)
        with open(os.path.join(proof_dir, f"{case}.proof"), "wb") as f:
            f.write(blob)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    ok = ligero.verify(proof, c, wit.public)
    prof.disable()
    verify_prof_s = time.perf_counter() - t0
    assert ok, f"{case}: the proof does not verify"
    verify_top = _top(prof, top)
    prove_s, verify_s = time_ligero(c, wit, repeats, case)[1:] if repeats else ([], [])
    p = proof.params
    return {"case": case, "constraints": c.r1cs.n_constraints, "wires": c.r1cs.n_wires, "lookups": c.r1cs.n_lookups,
            "params": f"k={p.k} t={p.t} n={p.n} σ={p.sigma} σL={p.lookup_sigma}", "compile_s": compile_s,
            "prove_profiled_s": prove_prof_s, "verify_profiled_s": verify_prof_s, "prove_s": prove_s,
            "verify_s": verify_s, "timings": {k: float(v) for k, v in proof.timings.items()},
            "proof_sha256": hashlib.sha256(blob).hexdigest(), "proof_bytes": len(blob),
            "prove_top": prove_top, "verify_top": verify_top}


def _med(xs: list, fallback: float) -> float:
    return statistics.median(xs) if xs else fallback


def show(r: dict, top: int) -> None:
    print(f"\n## {r['case']}: {r['constraints']} constraints, {r['wires']} wires, {r['lookups']} lookups; "
          f"{r['params']}")
    n = len(r["prove_s"])
    prove, verify = _med(r["prove_s"], r["prove_profiled_s"]), _med(r["verify_s"], r["verify_profiled_s"])
    how = f"median of {n}" if n else "one profiled run"
    print(f"prove {prove:.2f} s, verify {verify:.3f} s ({how}); profiled: prove {r['prove_profiled_s']:.2f} s, "
          f"verify {r['verify_profiled_s']:.3f} s; phases {', '.join(f'{k} {v:.2f}' for k, v in r['timings'].items())}")
    print(f"seeded proof: {r['proof_bytes']} bytes, sha256 {r['proof_sha256']}")
    for what in ("prove", "verify"):
        tot, cum = r[f"{what}_top"]
        print(f"\n{what}: top {top} by own time")
        print(table(["function", "calls", "own s", "cum s"],
                    [[x["func"], x["calls"], f"{x['tottime']:.3f}", f"{x['cumtime']:.3f}"] for x in tot[:top]]))
        print(f"\n{what}: top {top} by cumulative time")
        print(table(["function", "calls", "own s", "cum s"],
                    [[x["func"], x["calls"], f"{x['tottime']:.3f}", f"{x['cumtime']:.3f}"] for x in cum[:top]]))


def compare(before: str, after: str, top: int) -> None:
    B = {r["case"]: r for r in json.load(open(before))["cases"]}
    A = {r["case"]: r for r in json.load(open(after))["cases"]}
    rows = []
    for case in B:
        if case not in A:
            continue
        b, a = B[case], A[case]
        for what in ("prove", "verify"):
            tb = _med(b[f"{what}_s"], b[f"{what}_profiled_s"])
            ta = _med(a[f"{what}_s"], a[f"{what}_profiled_s"])
            rows.append([case, what, f"{tb:.3f}", f"{ta:.3f}", f"{tb / ta:.2f}x"])
        same = "identical" if b["proof_sha256"] == a["proof_sha256"] else "DIFFERENT"
        print(f"{case}: seeded proofs {same} ({b['proof_sha256'][:16]}…, {a['proof_sha256'][:16]}…)")
    print(table(["case", "", "before s", "after s", "speed-up"], rows))
    for case in B:
        if case not in A:
            continue
        for what in ("prove", "verify"):
            tb = {x["func"]: x for x in B[case][f"{what}_top"][0]}
            ta = {x["func"]: x for x in A[case][f"{what}_top"][0]}
            names = sorted(set(tb) | set(ta), key=lambda f: -max(tb.get(f, {}).get("tottime", 0),
                                                                   ta.get(f, {}).get("tottime", 0)))[:top]
            fmt = lambda d, f: f"{d[f]['tottime']:.3f}" if f in d else "–"
            print(f"\n{case} {what}: own time of the hot functions (profiled runs)")
            print(table(["function", "before s", "after s"], [[f, fmt(tb, f), fmt(ta, f)] for f in names]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=["gpt16"], choices=list(CASES))
    ap.add_argument("--repeats", type=int, default=0, help="unprofiled prove/verify runs (medians reported)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--out", default=None, help="write the results as JSON")
    ap.add_argument("--proof-dir", default=None, help="write each seeded proof there")
    ap.add_argument("--root", default=None, help="import circuitgrad from this checkout")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), default=None)
    a = ap.parse_args()
    if a.compare:
        compare(*a.compare, a.top)
        return
    if a.root:
        _use_root(a.root)
    import circuitgrad
    print(f"circuitgrad from {os.path.dirname(circuitgrad.__file__)}; {machine()}", file=sys.stderr)
    results = []
    for case in a.cases:
        print(f"[{case}] …", file=sys.stderr, flush=True)
        r = run_case(case, a.repeats, a.top, a.proof_dir)
        show(r, a.top)
        results.append(r)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"machine": machine(), "cases": results}, f, indent=1)


if __name__ == "__main__":
    main()
