"""Native Ligero prover: prover and verifier time, proof size and peak memory, against snarkjs and ezkl.

    python bench/prover.py [--repeats 3] [--cases iris8 iris32 digits syn1e5 syn1e6] [--ezkl] [--snarkjs]
                           [--baseline REV]

Cases (all fixed(16, 8), proved over the 51-bit Ligero field at ≥ 100 bits):
  iris-predict  inference of the iris MLP 4-16-3, batch 1 (what the ezkl peer proves)
  iris8/iris32  the iris training step (4-16-3, softmax cross-entropy, SGD) at batch 8 and 32
  digits        the digits example's training step (64-64-10, batch 32)
  gpt-softmax   a GPT step: batch 2, S=8, vocab 16, d=16, 2 heads, 1 layer, softmax attention
  gpt-spherical the same GPT step with spherical (L2) attention
  gpt32-softmax/-spherical  a GPT step: batch 2, S=16, vocab 32, d=32, 2 heads, 1 layer
  gpt64-softmax a GPT step: batch 4, S=32, vocab 96, d=64, 4 heads, 2 layers (not in the default cases)
  cnn8          the digits CNN example's step (2 channels, batch 8)
  syn1e5/1e6    synthetic circuits of 10^5 and 10^6 multiplication constraints
  syn8k         a synthetic circuit of 8 000 constraints: the largest whose powers of tau
                (2^13) are practical here, proved by both Ligero and snarkjs Groth16 (--snarkjs)
  tinygpt       examples/tinygpt.py's step in fixed(20, 10) (d=128, 2 layers, B=16, S=64; not in the default
                cases): counted, and proved only when the predicted prover memory fits this machine's
With --workers N every case is also proved on a Dask LocalCluster of N workers (one proof's rows shared,
``zk.prove(..., cluster=N)``), as the row "case (N workers)": its proof must be byte for byte the single
process's (same seed), and the bytes sent to and received from the workers are reported.
The "prover MiB" column is the memory a proof adds to its process (``timings["memory"]``), against
``cg.cost``'s prediction ("predicted MiB"); "predicted s" is ``cg.cost``'s prover time for the case (this
machine's calibration) against the measured "prove s".
The model circuits are compiled over the Ligero field, so their matrix products are proved by the
contraction argument (Freivalds' check, docs/ZK.md) and their ranges are logUp lookups (see
bench/lookup.py for bits against lookups); a second table gives each model circuit's largest gadget
kinds, as shares of its constraints + lookups. Each case runs in its own process, which gives the peak resident memory (ru_maxrss, including the
interpreter and NumPy). Prover and verifier times are medians of --repeats runs.
With --ezkl (needs .venv-ezkl, see bench/peers/ezkl_prove.py), ezkl proves the inference of the
same 4-16-3 model in the same session. With --baseline REV (a git revision, e.g. the main a change started
from), every model case is also proved by the library as it was at REV, in the same run and by the same
benchmark code (a git worktree of REV, imported instead of this checkout), as the row "case (REV)".
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, table  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ["iris-predict", "iris8", "iris32", "digits", "gpt-softmax", "gpt-spherical", "gpt32-softmax",
         "gpt32-spherical", "cnn8", "syn8k", "syn1e5", "syn1e6"]
#: cases that run only when named (minutes each)
EXTRA = ["gpt64-softmax", "tinygpt"]
#: the GPT cases: (batch, S, vocab, d, heads, layers)
GPTS = {"gpt": (2, 8, 16, 16, 2, 1), "gpt32": (2, 16, 32, 32, 2, 1), "gpt64": (4, 32, 96, 64, 4, 2)}


def model_step(case: str):
    """The compiled fixed(16, 8) step (or predict) of a model case, and one batch ``(x, y)``."""
    import circuitgrad as cg
    from circuitgrad import datasets, nn
    Q = cg.fixed(16, 8)
    rng = np.random.default_rng(0)
    if case.startswith("gpt"):
        name, attention = case.split("-")
        B, S, V, d, heads, layers = GPTS[name]
        step = cg.compile_model(nn.gpt(B, S, V, d=d, heads=heads, layers=layers, attention=attention),
                                loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
        return step, rng.integers(0, V, (B, S)), rng.integers(0, V, (B, S))
    if case.startswith("cnn"):
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        from digits_cnn import cnn
        batch = int(case[3:])
        step = cg.compile_model(cnn(batch, channels=2, dtype=Q), loss=nn.softmax_cross_entropy,
                                optimizer=nn.sgd(0.125), dtype=Q)
        return step, rng.uniform(0, 1, step.x_type.shape), rng.integers(0, 10, batch)
    ds, batch, hidden = {"iris-predict": ("iris", 1, 16), "iris8": ("iris", 8, 16), "iris32": ("iris", 32, 16),
                         "digits": ("digits", 32, 64)}[case]
    data = datasets.load(ds, seed=0)
    step = cg.compile_model(nn.mlp(batch, [data.features, hidden, data.classes]), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(0.1), dtype=Q)
    return step, data.x_train[:batch], data.y_train[:batch]


def _model_circuit(case: str, range_checks: str | None = None, contractions: str | None = None):
    from circuitgrad.backends import zk
    step, x, y = model_step(case)
    fn = "predict" if case.endswith("predict") else "step"
    extra = {"contractions": contractions} if contractions else {}
    c = zk.compile(step, field=zk.LIGERO51, function=fn, range_checks=range_checks, **extra)
    wit = c.witness(step.init_params(seed=0), x, y if fn == "step" else None)
    return c, wit


def split(c, top: int = 6) -> str:
    """The largest gadget kinds of a circuit: constraints and lookups, as ``kind n`` pairs."""
    kinds = c.r1cs.counts_by_gadget()
    for k, n in c.r1cs.counts_by_gadget(lookups=True).items():
        kinds[f"{k} (lookups)"] = n
    total = c.r1cs.n_constraints + c.r1cs.n_lookups
    best = sorted(kinds.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{k} {100 * n / total:.0f}%" for k, n in best)


def synthetic(n: int, field=None):
    """``n − 8`` products ``cᵢ = aᵢ·bᵢ`` of private values; the first 8 products are public.

    Built over BN254 by default so that snarkjs accepts it too (Ligero proves any circuit whose
    ``required_bits`` fit its own field)."""
    import circuitgrad as cg
    from circuitgrad.backends import zk
    from circuitgrad.backends.zk.circuits.r1cs import Builder
    m = n - 8
    b = Builder(field or zk.BN254)
    pub = b.alloc(8, "out")
    A, B = b.alloc(m, "a"), b.alloc(m, "b")
    C = b.alloc(m)
    b.constrain([(A, 1)], [(B, 1)], [(C, 1)], "product")
    b.constrain([(C[:8], 1)], [(0, 1)], [(pub, 1)], "output")
    r = b.finish(8, 0, 2 * m)
    rng = np.random.default_rng(0)
    W = np.zeros(r.n_wires, dtype=np.int64)
    W[0] = 1
    W[A] = rng.integers(-2 ** 15, 2 ** 15, m)
    W[B] = rng.integers(-2 ** 15, 2 ** 15, m)
    W[C] = W[A] * W[B]
    W[pub] = W[C[:8]]
    c = zk.Circuit(r, None, None, f"synthetic{n}", [], [], [], [], [], [], 0.0, None, cg.fixed(16, 8), 32)
    return c, zk.Witness(c, W)


def time_ligero(c, wit, repeats: int, what: str) -> tuple:
    """The last proof, and the prover's and verifier's times (seconds) of ``repeats`` runs."""
    from circuitgrad.backends.zk.systems import ligero
    prove_s, verify_s = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        proof = ligero.prove(c, wit, check=False)
        prove_s.append(time.perf_counter() - t0)
        if i == 0:                                  # the first proof's memory: later ones reuse the freed heap
            first_memory = proof.timings.get("memory", float("nan"))
        proof.timings["first_memory"] = first_memory
        t0 = time.perf_counter()
        ok = ligero.verify(proof, c, wit.public)
        verify_s.append(time.perf_counter() - t0)
        assert ok, f"{what}: the proof does not verify"
    return proof, prove_s, verify_s


def _tinygpt(count_only: bool):
    """tinygpt's fixed(20, 10) step circuit (as ``circuitgrad zk prove examples/tinygpt.py --width 20 --frac 10``),
    counted or built, and one batch's witness when built."""
    import types
    import circuitgrad as cg
    from circuitgrad import modelfile
    from circuitgrad.backends import zk
    from circuitgrad.command import load_model
    a = types.SimpleNamespace(script="examples/tinygpt.py", batch=None, hidden=None, lr=None, option=[], width=20,
                              frac=10, dtype=None)
    spec, dtype = load_model(a, cg.fixed(20, 10))
    step = spec.compile(dtype=dtype)
    c = zk.compile(step, field=zk.LIGERO51, count_only=count_only)
    if count_only:
        return c, None
    x, y = next(modelfile.batches(spec, 0, "examples/tinygpt.py"))
    wit = c.witness(step.init_params(seed=0), x, y)
    c.release_witness_program()                 # one proof: as `circuitgrad zk prove` does for its last step
    return c, wit


def _available() -> int:
    """Memory available to a new allocation here (bytes; Linux ``MemAvailable``, else the total)."""
    try:
        with open("/proc/meminfo") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable"))
    except (OSError, StopIteration):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def child(case: str, repeats: int, snarkjs: bool, contractions: str | None = None, workers: int = 0) -> dict:
    from circuitgrad.backends import zk
    from circuitgrad.backends.zk import cost
    if case == "tinygpt":
        counted, _ = _tinygpt(True)
        r = counted.r1cs
        prover = cost.prover_memory(counted)
        # the built circuit and its witness come first: 6 bytes a term of A, B, C, L and 4 a row
        # (backends/zk/circuits/sparse.py), the witness and its program (about 74 bytes a wire, measured on GPT d=64 and
        # tinygpt)
        circuit = 6 * (r.nonzeros + int(cost.LOOKUP_TERMS * r.n_lookups)) + 4 * (3 * r.n_constraints + r.n_lookups) \
            + 74 * r.n_wires
        need = prover + circuit
        if need > 0.9 * _available():
            return {"case": case, "constraints": r.n_constraints, "wires": r.n_wires, "lookups": r.n_lookups,
                    "skipped": f"the circuit ({circuit / 2 ** 30:.1f} GiB) and the prover's predicted memory "
                               f"({prover / 2 ** 30:.1f} GiB) do not fit the {_available() / 2 ** 30:.1f} GiB available",
                    "predicted_mib": prover / 2 ** 20}
        c, wit = _tinygpt(False)
    else:
        c, wit = synthetic({"syn8k": 8000, "syn1e5": 10 ** 5, "syn1e6": 10 ** 6}[case]) if case.startswith("syn") \
            else _model_circuit(case, contractions=contractions)
    # tinygpt's check would evaluate 0.5 billion terms in Python integers; its proof's verification checks it
    assert case == "tinygpt" or c.check(wit)
    if workers:
        return _split_row(c, wit, case, workers, repeats)
    proof, prove_s, verify_s = time_ligero(c, wit, repeats, case)
    from circuitgrad.backends.zk.systems.ligero.proofio import dumps
    sl = f" σL={proof.params.lookup_sigma}" if c.r1cs.n_lookups else ""
    sl += f" σC={proof.params.contraction_sigma}" if getattr(c.r1cs, "contractions", ()) else ""
    row = {"case": case + (f" ({contractions})" if contractions else ""), "constraints": c.r1cs.n_constraints, "wires": c.r1cs.n_wires, "lookups": c.r1cs.n_lookups,
           "params": f"k={proof.params.k} t={proof.params.t} n={proof.params.n} σ={proof.params.sigma}{sl}",
           "bits": proof.soundness_bits, "prove_s": statistics.median(prove_s),
           "verify_s": statistics.median(verify_s), "proof_bytes": len(dumps(proof)),
           "split": split(c) if not case.startswith("syn") else "",
           "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "prover_mib": proof.timings["first_memory"] / 2 ** 20,
           "predicted_mib": cost.prover_memory(c) / 2 ** 20 if hasattr(cost, "prover_memory") else float("nan"),
           "predicted_s": cost.prover_seconds(c) if hasattr(cost, "prover_seconds") else float("nan")}
    if snarkjs:
        from circuitgrad.backends.zk.systems import snarkjs as sj
        t0 = time.perf_counter()
        sp = zk.prove(c, wit, system="groth16", log=lambda s: print("  " + s, file=sys.stderr))
        total = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert sj.verify(sp, c, wit.public)
        row["groth16"] = {"prove_s": sp.timings["prove"], "setup_s": sp.timings.get("setup"), "total_s": total,
                          "verify_s": time.perf_counter() - t0, "proof_bytes": len(json.dumps(sp.proof))}
    return row


def _baseline_env(rev: str) -> tuple[dict, object]:
    """An environment whose Python imports circuitgrad from a git worktree of ``rev`` (checked out in a temporary
    directory, removed by the returned cleanup), for the baseline rows."""
    import shutil
    import tempfile
    tmp = tempfile.mkdtemp(prefix="cg-baseline-")
    tree = os.path.join(tmp, "tree")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, rev], check=True, capture_output=True)
    site = os.path.join(tmp, "site")
    os.makedirs(site)
    with open(os.path.join(site, "sitecustomize.py"), "w") as fh:
        fh.write(f"""import importlib.util, os, sys
ROOTS = {{"circuitgrad": "circuitgrad", "circuitgrad.backends": "backends", "circuitgrad.examples": "examples"}}
class _Baseline:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name in ROOTS:
            d = os.path.join({tree!r}, ROOTS[name])
            return importlib.util.spec_from_file_location(name, os.path.join(d, "__init__.py"),
                                                          submodule_search_locations=[d])
sys.meta_path.insert(0, _Baseline)
""")
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def cleanup():
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return env, cleanup


def _split_row(c, wit, case: str, workers: int, repeats: int) -> dict:
    """The case proved on a LocalCluster of ``workers`` (started once, outside the timing), against one process
    with the same seed: the same bytes, the time, and the bytes moved."""
    import numpy as np
    from distributed import Client, LocalCluster
    from circuitgrad.backends.zk.systems import ligero
    from circuitgrad.backends.zk.systems.cluster import Split
    from circuitgrad.backends.zk.systems.ligero.proofio import dumps
    one = dumps(ligero.prove(c, wit, check=False, rng=np.random.default_rng(1)))
    times = []
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for _ in range(repeats):
            split = Split(client)
            t0 = time.perf_counter()
            proof = ligero.prove(c, wit, check=False, rng=np.random.default_rng(1), split=split)
            times.append(time.perf_counter() - t0)
    assert dumps(proof) == one, f"{case}: the split proof differs from the single process's"
    return {"case": f"{case} ({workers} workers)", "constraints": c.r1cs.n_constraints, "wires": c.r1cs.n_wires,
            "lookups": c.r1cs.n_lookups, "prove_s": statistics.median(times), "same_bytes": True,
            "sent_mib": split.moved["sent"] / 2 ** 20, "received_mib": split.moved["received"] / 2 ** 20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=CASES, choices=CASES + EXTRA)
    ap.add_argument("--baseline", metavar="REV", default=None,
                    help="also prove every model case with the library at git revision REV (same run, same code)")
    ap.add_argument("--contractions", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--snarkjs", action="store_true", help="prove syn8k with snarkjs Groth16 too")
    ap.add_argument("--ezkl", action="store_true", help="run the ezkl peer (inference of 4-16-3)")
    ap.add_argument("--workers", type=int, default=0, help="also prove each case on a LocalCluster of N workers")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.repeats, a.snarkjs, a.contractions, a.workers)))
        return
    rows = []
    runs = [(case, None) for case in a.cases]
    if a.workers:
        runs = [r for case in a.cases for r in ((case, None), (case, "split"))]
    env_old = None
    if a.baseline:
        runs = [r for case in a.cases
                for r in ([(case, None)] + ([] if case.startswith("syn") or case == "tinygpt" else [(case, "old")]))]
        env_old, cleanup = _baseline_env(a.baseline)
    try:
        for case, mode in runs:
            where = {"old": f" at {a.baseline}", "split": f" on {a.workers} workers"}.get(mode, "")
            print(f"[{case}{where}] …", file=sys.stderr, flush=True)
            cmd = [sys.executable, os.path.abspath(__file__), "--child", case, "--repeats", str(a.repeats)]
            if a.snarkjs and case == "syn8k":
                cmd.append("--snarkjs")
            if mode == "split":
                cmd += ["--workers", str(a.workers)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env_old if mode == "old" else None)
            if out.returncode != 0:
                print(f"[{case}] failed: {out.stderr[-800:]}", file=sys.stderr)
                continue
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            if mode == "old":
                rows[-1]["case"] = f"{case} ({a.baseline})"
    finally:
        if a.baseline:
            cleanup()
    print(f"circuitgrad native Ligero prover (51-bit field, SHA-256); {machine()}; median of {a.repeats}")
    proved = [r for r in rows if "params" in r]
    print(table(["case", "constraints", "lookups", "parameters", "bits", "prove s", "predicted s", "verify s",
                 "proof KiB", "peak MiB", "prover MiB", "predicted MiB"],
                [[r["case"], r["constraints"], r["lookups"], r["params"], f"{r['bits']:.1f}", f"{r['prove_s']:.2f}",
                  f"{r.get('predicted_s', float('nan')):.2f}", f"{r['verify_s']:.2f}", f"{r['proof_bytes'] / 1024:.0f}", f"{r['peak_mib']:.0f}",
                  f"{r.get('prover_mib', float('nan')):.0f}", f"{r.get('predicted_mib', float('nan')):.0f}"]
                 for r in proved]))
    for r in {r["case"]: r for r in rows}.values():
        if "skipped" in r:
            print(f"\n{r['case']}: {r['constraints']:,} constraints, {r['lookups']:,} lookups, {r['wires']:,} wires; "
                  f"not proved: {r['skipped']}")
    splits = [r for r in rows if "same_bytes" in r]
    if splits:
        print("\none proof's rows on a Dask LocalCluster (the same bytes as one process)")
        print(table(["case", "prove s", "sent MiB", "received MiB"],
                    [[r["case"], f"{r['prove_s']:.2f}", f"{r['sent_mib']:.1f}", f"{r['received_mib']:.1f}"]
                     for r in splits]))
    split_rows = [[r["case"], r["split"]] for r in proved if r.get("split")]
    if split_rows:
        print("\nlargest gadget kinds (share of constraints + lookups)")
        print(table(["case", "gadget kinds"], split_rows))
    peers = [r for r in rows if "groth16" in r]
    for r in peers:
        g = r["groth16"]
        print(f"\nsnarkjs Groth16 (peer), {r['case']} ({r['constraints']} constraints, ptau cached): prove "
              f"{g['prove_s']:.2f} s (Ligero {r['prove_s']:.2f} s, ratio {g['prove_s'] / r['prove_s']:.1f}x), "
              f"setup {g['setup_s'] or 0:.1f} s, verify {g['verify_s']:.2f} s, proof {g['proof_bytes']} B")
    if a.ezkl:
        from zk import ezkl_rows
        for p in ezkl_rows(["4-16-3"]):
            mine = next((r for r in rows if r["case"] == "iris-predict"), None)
            pv = statistics.median(p["prove_s"]) if p.get("prove_s") else None
            ratio = f", ratio {pv / mine['prove_s']:.1f}x" if mine and pv else ""
            print(f"\nezkl (peer) inference of {p['model']}: setup {p.get('setup_s', 0):.1f} s, prove "
                  f"{pv:.2f} s{ratio} against Ligero iris-predict, verify {p.get('verify_s', 0):.2f} s, "
                  f"proof {p.get('proof_bytes')} B, proving key {p.get('pk_bytes')} B")


if __name__ == "__main__":
    main()
