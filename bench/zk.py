"""ZK backend: circuit size, witness speed and snarkjs proving, vs ezkl proving inference.

    python bench/zk.py [--repeats 5] [--prove-max-power 13] [--ezkl]

For the iris training step (4-16-3, batch 8 and 32), a digits step
(64-64-10, batch 32) and the small CI steps, all in fixed(32, 16) unless
noted, the table reports: constraints (and the largest gadget kinds),
compile time, witness-generation time (median) and constraints per second.
It also reports snarkjs Groth16 setup / prove / verify times and the proof
size where the powers of tau are at most ``2^--prove-max-power`` (cached
after the first generation). With ``--ezkl`` (needs ``.venv-ezkl``, see
``bench/peers/ezkl_prove.py``), ezkl proving the *inference* of the same
MLPs runs in the same session.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402
from circuitgrad.backends import zk  # noqa: E402
from circuitgrad.backends.zk.systems import snarkjs as sj  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [  # name, batch, sizes, dtype, loss ("predict" cases prove inference, like the ezkl peer)
    ("iris predict", 1, [4, 16, 3], cg.fixed(16, 8), None),
    ("digits predict", 1, [64, 64, 10], cg.fixed(16, 8), None),
    ("iris step", 8, [4, 16, 3], cg.fixed(32, 16), nn.softmax_cross_entropy),
    ("iris step", 32, [4, 16, 3], cg.fixed(32, 16), nn.softmax_cross_entropy),
    ("digits step", 32, [64, 64, 10], cg.fixed(32, 16), nn.softmax_cross_entropy),
    ("CI step (groth16)", 2, [2, 4, 2], cg.fixed(16, 8), nn.mse),
    ("CI step (plonk)", 1, [2, 2, 2], cg.fixed(12, 6), nn.mse),
]


def _base_kinds(c: zk.Circuit) -> dict[str, int]:
    agg: dict[str, int] = {}
    for k, n in c.r1cs.counts_by_gadget().items():
        base = k.split(".")[0]
        agg[base] = agg.get(base, 0) + n
    return agg


def _kinds(c: zk.Circuit, top: int = 3) -> str:
    items = sorted(_base_kinds(c).items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{k} {100 * n / c.r1cs.n_constraints:.0f}%" for k, n in items)


def measure(name, batch, sizes, dt, loss, repeats, prove_max, system):
    function = "predict" if loss is None else "step"
    step = cg.compile_model(nn.mlp(batch, sizes), loss=loss or nn.mse, optimizer=nn.sgd(0.1), dtype=dt)
    t = time.perf_counter()
    c = zk.compile(step, function=function)
    t_compile = time.perf_counter() - t
    rng = np.random.default_rng(0)
    params = step.init_params(seed=0)
    x = rng.normal(size=(batch, sizes[0]))
    y = rng.integers(0, sizes[-1], size=batch) if loss is nn.softmax_cross_entropy else rng.normal(size=(batch, sizes[-1]))
    y = None if function == "predict" else y
    times = []
    for _ in range(repeats):
        w = c.witness(params, x, y)
        times.append(w.seconds)
    t_w = statistics.median(times)
    assert c.check(w)
    row = {"case": f"{name} {'-'.join(map(str, sizes))} b{batch} {dt}", "constraints": c.r1cs.n_constraints,
           "kinds": _kinds(c), "all_kinds": _base_kinds(c), "compile_s": t_compile, "witness_s": t_w,
           "constraints_per_s": c.r1cs.n_constraints / t_w}
    power = sj.ptau_power(c, system)
    row["power"] = power
    if power <= prove_max:
        proof = sj.prove(c, w, system=system, log=lambda s: print("  " + s, file=sys.stderr))
        t = time.perf_counter()
        ok = sj.verify(proof, c, w.public)
        row.update(setup_s=proof.timings.get("setup"), prove_s=proof.timings["prove"],
                   verify_s=time.perf_counter() - t, verified=ok,
                   proof_bytes=len(json.dumps(proof.proof, separators=(",", ":"))))
    return row


def ezkl_rows(models: list[str]) -> list[dict]:
    py = os.path.join(ROOT, ".venv-ezkl", "bin", "python")
    if not os.path.exists(py):
        print("ezkl peer not set up (see bench/peers/ezkl_prove.py): skipped", file=sys.stderr)
        return []
    out = subprocess.run([py, os.path.join(ROOT, "bench", "peers", "ezkl_prove.py"), "--models", *models],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"ezkl peer failed: {out.stderr[-500:]}", file=sys.stderr)
        return []
    return json.loads(out.stdout.strip().splitlines()[-1])["results"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prove-max-power", type=int, default=13)
    ap.add_argument("--ezkl", action="store_true", help="run the ezkl peer (inference proofs) too")
    a = ap.parse_args()
    rows = []
    for name, batch, sizes, dt, loss in CASES:
        system = "plonk" if "plonk" in name else "groth16"
        rows.append(measure(name, batch, sizes, dt, loss, a.repeats, a.prove_max_power, system))
    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    print(f"circuitgrad ZK backend (BN254, snarkjs {sj.SNARKJS_VERSION} Groth16 unless noted); {machine()}; "
          f"witness median of {a.repeats}")
    print(table(["case", "constraints", "largest gadgets", "compile s", "witness s", "constraints/s",
                 "ptau", "setup s", "prove s", "verify s", "proof B"],
                [[r["case"], r["constraints"], r["kinds"], f(r["compile_s"], ".3f"), f(r["witness_s"], ".4f"),
                  f"{r['constraints_per_s']:.3g}", f"2^{r['power']}", f(r.get("setup_s"), ".1f"),
                  f(r.get("prove_s"), ".2f"), f(r.get("verify_s"), ".2f"), r.get("proof_bytes", "-")]
                 for r in rows]))
    print("\nconstraints by gadget kind (share of each circuit)")
    kinds = sorted({k for r in rows for k in r["all_kinds"]}, key=lambda k: -sum(r["all_kinds"].get(k, 0) for r in rows))
    print(table(["case"] + kinds, [[r["case"]] + [f"{100 * r['all_kinds'].get(k, 0) / r['constraints']:.1f}%"
                                                  for k in kinds] for r in rows]))
    if a.ezkl:
        peers = ezkl_rows(["4-16-3", "64-64-10"])
        if peers:
            print("\nezkl (peer): inference of the same MLPs, batch 1")
            print(table(["model", "logrows", "setup s", "prove s", "verify s", "pk bytes", "proof bytes"],
                        [[p["model"], p.get("logrows"), f(p.get("setup_s"), ".1f"),
                          f(statistics.median(p["prove_s"]) if p.get("prove_s") else None, ".2f"),
                          f(p.get("verify_s"), ".2f"), p.get("pk_bytes"), p.get("proof_bytes")] for p in peers]))


if __name__ == "__main__":
    main()
