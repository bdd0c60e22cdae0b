"""``circuitgrad zk prove|verify``: prove training steps of an example and check the proofs.

    circuitgrad zk prove examples/iris.py --steps 1 --out proofs/
    circuitgrad zk verify proofs/

Each step gets its own proof (``proofs/step_000/``, …), and the proofs form a
chain: step ``k`` proves ``params_k → params_{k+1}``, so its public inputs
must equal the public outputs of step ``k − 1``. ``verify`` checks every
proof and that chain. snarkjs cannot prove one step inside another, so a
single proof of the whole chain would need recursion; the native prover is
planned for that.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

import circuitgrad as cg
from circuitgrad import datasets, nn

from . import snarkjs as sj
from .circuit import compile as zk_compile

__all__ = ["add_parser"]


class _Phase:
    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        print(f"[{self.name}] …", flush=True)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            print(f"[{self.name}] done in {time.perf_counter() - self.t0:.2f} s", flush=True)


def _prove(a) -> int:
    from circuitgrad.cli import load_example
    mod = load_example(a.script)
    d = dict(mod.DEFAULTS)
    batch = a.batch or d["batch"]
    hidden = a.hidden if a.hidden is not None else d["hidden"]
    data = datasets.load(mod.DATASET, seed=a.seed)
    dtype = cg.fixed(a.width, a.frac)
    with _Phase("compile"):
        model = nn.mlp(batch, [data.features, *hidden, data.classes])
        step = cg.compile_model(model, loss=nn.softmax_cross_entropy, optimizer=nn.sgd(a.lr or d["lr"]),
                                dtype=dtype)
        circuit = zk_compile(step)
    r = circuit.r1cs
    print(f"public statement: {circuit.statement()}")
    power = sj._power(circuit, a.system)
    cached = os.path.exists(os.path.join(sj.cache_dir("ptau"), f"pot{power}.ptau"))
    if not (a.ptau or cached or power <= a.max_local_ptau):
        eta = 132 * 2.13 ** (power - 12) / 60
        raise SystemExit(
            f"circuitgrad zk: {r.n_constraints} constraints need powers of tau 2^{power} for {a.system}, which is "
            f"not cached; preparing it locally would take about {eta:.0f} minutes on a 2-core machine (measured: "
            f"132 s at 2^12, 281 s at 2^13). Pass --ptau FILE (a prepared ceremony file of at least 2^{power}), "
            f"shrink the circuit (--batch, --hidden, --width/--frac), or pass --max-local-ptau {power} to "
            f"generate it anyway.")
    params = step.init_params(seed=a.seed)
    rng = np.random.default_rng(a.seed)
    batches = datasets.batches(data.x_train, data.y_train, batch, rng)
    os.makedirs(a.out, exist_ok=True)
    for k in range(a.steps):
        try:
            x, y = next(batches)
        except StopIteration:
            batches = datasets.batches(data.x_train, data.y_train, batch, rng)
            x, y = next(batches)
        with _Phase(f"witness {k}"):
            wit = circuit.witness(params, x, y)
            circuit.assert_satisfied(wit)
        with _Phase(f"setup+prove {k}"):
            proof = sj.prove(circuit, wit, system=a.system, ptau_file=a.ptau, log=lambda s: print("  " + s))
        where = os.path.join(a.out, f"step_{k:03d}")
        proof.save(where)
        params = step.step(params, x, y)
        print(f"step {k}: proof in {where} ({len(proof.public)} public values, {proof.timings})")
    with open(os.path.join(a.out, "chain.json"), "w") as fh:
        json.dump({"steps": a.steps, "system": a.system, "statement": circuit.statement()}, fh, indent=1)
    return 0


def _verify(a) -> int:
    root = a.proofs
    dirs = sorted(os.path.join(root, n) for n in os.listdir(root) if n.startswith("step_")) \
        if os.path.isdir(root) and not os.path.exists(os.path.join(root, "proof.json")) else [root]
    if not dirs:
        raise SystemExit(f"circuitgrad zk verify: no proofs (step_*/ or proof.json) in {root}")
    ok, prev = True, None
    for d in dirs:
        proof = sj.Proof.load(d)
        good = sj.verify(proof)
        n = proof.public_outputs
        chained = prev is None or proof.public[n:] == prev.public[:prev.public_outputs]
        print(f"{d}: {proof.system} {'OK' if good else 'INVALID'}"
              + ("" if chained else " (does not continue the previous step)"))
        ok = ok and good and chained
        prev = proof
    print(f"statement: {proof.statement}")
    print("all proofs verify" if ok else "VERIFICATION FAILED")
    return 0 if ok else 1


def add_parser(sub) -> None:
    """Register ``zk prove`` and ``zk verify`` under the ``circuitgrad`` command."""
    zk = sub.add_parser("zk", help="zero-knowledge proofs of training steps").add_subparsers(dest="zk_cmd",
                                                                                            required=True)
    p = zk.add_parser("prove", help="prove training steps of an example script")
    p.add_argument("script")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--out", default="proofs")
    p.add_argument("--system", choices=sj.SYSTEMS, default="groth16")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--frac", type=int, default=16)
    p.add_argument("--batch", type=int, default=None, help="batch size (default: the example's)")
    p.add_argument("--hidden", type=int, nargs="*", default=None, help="hidden widths (default: the example's)")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ptau", default=None, help="prepared powers-of-tau file (default: generated and cached)")
    p.add_argument("--max-local-ptau", type=int, default=14,
                   help="largest powers of tau to generate locally without --ptau (default 14)")
    p.set_defaults(fn=_prove)
    v = zk.add_parser("verify", help="verify proofs written by 'zk prove'")
    v.add_argument("proofs")
    v.set_defaults(fn=_verify)
