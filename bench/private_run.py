"""Private training runs: what commitments and committed data cost, and Dask proving.

    python bench/private_run.py [--steps 8] [--repeats 3] [--no-peer]

1. Constraints of the private step circuit by part (the step itself, the two commitments, the
   batch's Merkle openings) against the public-parameter circuit, for the iris and digits steps;
   constraints per committed value. Peer, measured in the same run: circomlib's Poseidon
   (BN254, the hash ezkl and circom users commit with), compiled by circom 2 (npm ``circom2``) for 12
   inputs, constraints per hashed element.
2. Ligero prove and verify time and proof size of one step, private against public (medians).
3. A run of ``--steps`` iris steps proved serially and on a Dask ``LocalCluster`` of 2 workers
   (this machine has 2 cores; medians), and the aggregation alternative: the estimated size of one
   Ligero proof of all steps against the sum of the per-step proofs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, median_time, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import datasets, nn  # noqa: E402
from circuitgrad.backends import zk  # noqa: E402
from circuitgrad.backends.zk.systems import ligero  # noqa: E402
from circuitgrad.backends.zk.circuits.commit import fresh_randomness  # noqa: E402
from circuitgrad.backends.zk.systems.ligero.params import choose, proof_bytes  # noqa: E402
from circuitgrad.cache import cache_dir  # noqa: E402

FX = cg.fixed(16, 8)
CIRCOM = ("circom2@0.2.23", "circomlib@2.0.5")


def case(name):
    data = datasets.load(name)
    B, hidden = (8, [16]) if name == "iris" else (32, [64])
    step = cg.compile_model(nn.mlp(B, [data.features, *hidden, data.classes]), loss=nn.softmax_cross_entropy,
                            optimizer=nn.momentum(0.05, 0.9), dtype=FX)
    return step, data, B


def by_part(circuit) -> dict[str, int]:
    """Constraints by part of a private step: the tags' contexts name them."""
    r = circuit.r1cs
    sizes = np.diff(r.block_rows)
    out = {"commitments": 0, "dataset membership": 0, "step": 0}
    for tag, n in zip(r.tags, sizes):
        ctx = tag.split(":", 1)[0]
        key = "commitments" if ctx.startswith("commitment") else ctx if ctx in out else "step"
        out[key] += int(n)
    return out


def circom_poseidon(log=print) -> int | None:
    """Constraints of circomlib's Poseidon(12) (t = 13 over BN254) compiled with circom 2 --O2."""
    if shutil.which("npm") is None:
        return None
    prefix = cache_dir("npm-circom")
    exe = os.path.join(prefix, "node_modules", ".bin", "circom2")
    if not os.path.exists(exe):
        log(f"installing {' '.join(CIRCOM)} with npm into {prefix} (once)")
        res = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", prefix, *CIRCOM],
                             capture_output=True, text=True)
        if res.returncode:
            log(f"npm failed: {res.stderr[-300:]}")
            return None
    with tempfile.TemporaryDirectory() as d:        # circom2 (WASI) sees its working directory only
        for f in ("poseidon.circom", "poseidon_constants.circom"):
            shutil.copy(os.path.join(prefix, "node_modules", "circomlib", "circuits", f), d)
        with open(os.path.join(d, "h.circom"), "w") as fh:
            fh.write('pragma circom 2.0.0;\ninclude "poseidon.circom";\ntemplate H() { signal input in[12]; '
                     'signal output out; component p = Poseidon(12); for (var i = 0; i < 12; i++) '
                     '{ p.inputs[i] <== in[i]; } out <== p.out; }\ncomponent main = H();\n')
        res = subprocess.run([exe, "h.circom", "--r1cs", "--O2", "-o", "."], capture_output=True, text=True, cwd=d)
    counts = [int(line.split(":")[1]) for line in res.stdout.splitlines()
              if "non-linear constraints" in line or line.strip().startswith("linear constraints")]
    return sum(counts) if counts else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-peer", action="store_true", help="skip the circom/circomlib peer")
    a = ap.parse_args()
    print(f"# {machine()}")
    h = zk.poseidon2(zk.LIGERO51)
    rows, prove_rows = [], []
    for name in ("iris", "digits"):
        step, data, B = case(name)
        ds = zk.commit_dataset(step, data.x_train, data.y_train)
        priv = zk.compile(step, public="commitments", data_rows=ds.tree.n)
        pub = zk.compile(step, field=zk.LIGERO51)
        parts = by_part(priv)
        committed = sum(int(np.prod(w.shape)) for w in priv.output_wires)
        rows.append([f"{name} {'-'.join(map(str, step.model.name.split(',')[-1].rstrip(')').split('-')))} b{B}",
                     pub.r1cs.n_constraints, priv.r1cs.n_constraints, parts["step"], parts["commitments"],
                     f"{parts['commitments'] / (2 * (committed + h.capacity)):.1f}", parts["dataset membership"],
                     f"{ds.tree.n} rows, depth {priv.private.depth}"])
        p = step.init_params(seed=0)
        x, y = next(iter(datasets.batches(data.x_train, data.y_train, B, np.random.default_rng(0))))
        wpub = pub.witness(p, x, y)
        wpriv = priv.witness_private(p, x, y, ds.tree, fresh_randomness(zk.LIGERO51), fresh_randomness(zk.LIGERO51))
        pr_pub, pr_priv = ligero.prove(pub, wpub), ligero.prove(priv, wpriv)        # also the warm-up
        t_pub = median_time(lambda: ligero.prove(pub, wpub), a.repeats, warmup=0)
        t_priv = median_time(lambda: ligero.prove(priv, wpriv), a.repeats, warmup=0)
        v_pub = median_time(lambda: ligero.check(pr_pub, pub, wpub.public), a.repeats)
        v_priv = median_time(lambda: ligero.check(pr_priv, priv, wpriv.public), a.repeats)
        from circuitgrad.backends.zk.systems.ligero.proofio import dumps
        prove_rows.append([name, f"{t_pub:.2f} s", f"{t_priv:.2f} s", f"{t_priv / t_pub:.2f}",
                           f"{v_pub:.3f} s / {v_priv:.3f} s", f"{len(dumps(pr_pub)) / 1024:.0f} / "
                                                               f"{len(dumps(pr_priv)) / 1024:.0f} KiB"])
    print("\nConstraints: public-parameter step against private step (commitments and Merkle openings)")
    print(table(["step", "public", "private", "of which step", "commitments", "per committed value",
                 "Merkle openings", "dataset"], rows))
    print(f"Poseidon2 over ligero51: t={h.t}, d={h.d}, R_F={h.rounds_f}, R_P={h.rounds_p}: "
          f"{h.constraints_per_permutation} constraints per permutation, "
          f"{h.constraints_per_permutation / h.rate:.1f} per absorbed element")
    if not a.no_peer:
        n = circom_poseidon()
        if n is None:
            print("peer: circom/circomlib not available (needs npm)")
        else:
            print(f"peer: circomlib Poseidon(12) (BN254, t=13), circom 2 --O2: {n} constraints, {n / 12:.1f} per "
                  f"hashed element; ours {h.constraints_per_permutation / h.rate:.1f} "
                  f"({n / 12 / (h.constraints_per_permutation / h.rate):.2f}x fewer)")
    print("\nLigero, one step (medians of %d): prove public / private, verify, proof size" % a.repeats)
    print(table(["step", "prove public", "prove private", "ratio", "verify public / private", "proof public / private"],
                prove_rows))

    step, data, B = case("iris")
    ds = zk.commit_dataset(step, data.x_train, data.y_train)
    batches = [b for _, b in zip(range(a.steps), datasets.batches(data.x_train, data.y_train, B,
                                                                    np.random.default_rng(0)))]
    p0 = step.init_params(seed=0)
    run = zk.prove_run(step, p0, batches, dataset=ds, cluster="serial", progress=False)         # also the warm-up
    t_ser = median_time(lambda: zk.prove_run(step, p0, batches, dataset=ds, cluster="serial", progress=False),
                        a.repeats, warmup=0)
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            Client(cl) as client:
        zk.prove_run(step, p0, batches[:2], dataset=ds, cluster=client, progress=False)    # warm the workers
        t_dask = median_time(lambda: zk.prove_run(step, p0, batches, dataset=ds, cluster=client, progress=False),
                             a.repeats, warmup=0)
    assert zk.verify_run(run, step, c0=run.commitments[0], d=ds.commitment)
    t_ver = median_time(lambda: zk.verify_run(run, step, c0=run.commitments[0], d=ds.commitment), a.repeats,
                        warmup=0)
    priv = zk.compile(step, public="commitments", data_rows=ds.tree.n)
    from circuitgrad.backends.zk.systems.ligero.proofio import dumps
    per = sum(len(dumps(p)) for p in run.proofs)
    nw, nc, nl = priv.r1cs.n_wires, priv.r1cs.n_constraints, priv.r1cs.n_lookups
    agg = proof_bytes(choose(nw * a.steps, nc * a.steps, lookups=nl * a.steps), nw * a.steps, nc * a.steps,
                      nl * a.steps)
    print(f"\nA run of {a.steps} iris steps (medians of {a.repeats})")
    print(table(["proving", "wall time", "per step", "speedup"],
                [['serial (cluster="serial")', f"{t_ser:.2f} s", f"{t_ser / a.steps:.2f} s", "1.00"],
                 ["LocalCluster, 2 workers", f"{t_dask:.2f} s", f"{t_dask / a.steps:.2f} s", f"{t_ser / t_dask:.2f}"]]))
    print(f"verify_run: {t_ver:.2f} s for {a.steps} steps")
    print(f"proofs: {a.steps} per-step proofs {per / 1024:.0f} KiB in all; one aggregated Ligero proof of the "
          f"{a.steps} steps (a {nc * a.steps}-constraint circuit) would be about {agg / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
