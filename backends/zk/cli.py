"""``circuitgrad zk prove|verify``: prove training steps of an example and check the proofs.

    circuitgrad zk prove examples/digits.py --system ligero --steps 4 --out proofs/
    circuitgrad zk verify proofs/

Each step gets its own proof (``proofs/step_000.proof`` for Ligero,
``proofs/step_000/`` for snarkjs), and the proofs form a chain: step ``k``
proves ``params_k → params_{k+1}``, so its public inputs must equal the
public outputs of step ``k − 1``. ``verify`` checks every proof and that
chain.

Why one proof per step rather than one proof of the chain: the chain is
already bound by equal public values, which anyone can compare. Per-step
proofs keep the prover's memory at one step's circuit, and they let step
``k`` be proved while training continues. A failure names the step. One
Ligero proof of ``s`` steps would be smaller in total, since proof size
grows like the square root of the circuit. But its prover would hold all
``s`` witnesses at once, and snarkjs would need a ``2^⌈log2(s·M)⌉`` ceremony.

Ligero proofs are verified against the circuit. ``chain.json`` records the
example and the options, so ``verify`` recompiles the circuit and checks each
proof's circuit digest.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

import circuitgrad as cg
from circuitgrad import datasets, nn

from . import ligero
from . import snarkjs as sj
from .circuit import compile as zk_compile
from .field import BN254, LIGERO51
from .formats import FormatError
from .prover import SYSTEMS

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


def _setup(script: str, batch, hidden, width: int, frac: int, lr, seed: int, field: str = "bn254"):
    """The example's dataset, compiled step and circuit for the given options."""
    from circuitgrad.cli import load_example
    mod = load_example(script)
    d = dict(mod.DEFAULTS)
    batch = batch or d["batch"]
    hidden = hidden if hidden is not None else d["hidden"]
    data = datasets.load(mod.DATASET, seed=seed)
    model = nn.mlp(batch, [data.features, *hidden, data.classes])
    step = cg.compile_model(model, loss=nn.softmax_cross_entropy, optimizer=nn.sgd(lr or d["lr"]),
                            dtype=cg.fixed(width, frac))
    return data, step, zk_compile(step, field=LIGERO51 if field == "ligero51" else BN254), batch


def _options(a) -> dict:
    width = a.width or (16 if a.system == "ligero" else 32)
    frac = a.frac or width // 2
    return {"script": os.path.abspath(a.script), "batch": a.batch, "hidden": a.hidden, "width": width,
            "frac": frac, "lr": a.lr, "seed": a.seed, "field": "ligero51" if a.system == "ligero" else "bn254"}


def _refuse_large_setup(a, circuit) -> None:
    r = circuit.r1cs
    power = sj._power(circuit, a.system)
    cached = os.path.exists(os.path.join(sj.cache_dir("ptau"), f"pot{power}.ptau"))
    if not (a.ptau or cached or power <= a.max_local_ptau):
        eta = 132 * 2.13 ** (power - 12) / 60
        raise SystemExit(
            f"circuitgrad zk: {r.n_constraints} constraints need powers of tau 2^{power} for {a.system}, which is "
            f"not cached; preparing it locally would take about {eta:.0f} minutes on a 2-core machine (measured: "
            f"132 s at 2^12, 281 s at 2^13). Pass --ptau FILE (a prepared ceremony file of at least 2^{power}), "
            f"shrink the circuit (--batch, --hidden, --width/--frac), pass --max-local-ptau {power} to "
            f"generate it anyway, or use the native prover: --system ligero.")


def _prove(a) -> int:
    opts = _options(a)
    with _Phase("compile"):
        data, step, circuit, batch = _setup(**opts)
    print(f"public statement: {circuit.statement()}")
    if a.system != "ligero":
        _refuse_large_setup(a, circuit)
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
        if a.system == "ligero":
            with _Phase(f"prove {k}"):
                proof = ligero.prove(circuit, wit, log=lambda s: print("  " + s, flush=True))
            where = os.path.join(a.out, f"step_{k:03d}.proof")
            proof.save(where)
            info = f"{os.path.getsize(where) / 1024:.0f} KiB, {proof.soundness_bits:.1f} bits"
        else:
            with _Phase(f"setup+prove {k}"):
                proof = sj.prove(circuit, wit, system=a.system, ptau_file=a.ptau, log=lambda s: print("  " + s))
            where = os.path.join(a.out, f"step_{k:03d}")
            proof.save(where)
            info = str(proof.timings)
        params = step.step(params, x, y)
        print(f"step {k}: proof in {where} ({len(proof.public)} public values, {info})")
    with open(os.path.join(a.out, "chain.json"), "w") as fh:
        json.dump({"steps": a.steps, "system": a.system, "statement": circuit.statement(), "options": opts}, fh,
                  indent=1)
    return 0


def _verify(a) -> int:
    root = a.proofs
    chain_path = os.path.join(root, "chain.json")
    chain = json.load(open(chain_path)) if os.path.isfile(chain_path) else {}
    if chain.get("system") == "ligero" or root.endswith(".proof"):
        return _verify_ligero(root, chain)
    dirs = sorted(os.path.join(root, n) for n in os.listdir(root) if n.startswith("step_")) \
        if os.path.isdir(root) and not os.path.exists(os.path.join(root, "proof.json")) else [root]
    if not dirs:
        raise SystemExit(f"circuitgrad zk verify: no proofs (step_*/ or proof.json) in {root}")
    results = []
    for d in dirs:
        proof = sj.Proof.load(d)
        results.append((d, proof, sj.verify(proof), proof.public))
    return _report(results, proof.statement)


def _report(results: list, statement: str) -> int:
    """Print one line per proof, check the chain (inputs of step k = outputs of step k − 1)."""
    ok, prev = True, None
    for where, proof, good, public in results:
        n = proof.public_outputs
        chained = prev is None or list(public[n:]) == list(prev[1][:prev[0].public_outputs])
        print(f"{where}: {proof.system} {'OK' if good else 'INVALID'}"
              + ("" if chained else " (does not continue the previous step)"))
        ok = ok and good and chained
        prev = (proof, public)
    print(f"statement: {statement}")
    print("all proofs verify" if ok else "VERIFICATION FAILED")
    return 0 if ok else 1


def _verify_ligero(root: str, chain: dict) -> int:
    files = [root] if root.endswith(".proof") else sorted(
        os.path.join(root, n) for n in os.listdir(root) if n.startswith("step_") and n.endswith(".proof"))
    if not files or "options" not in chain:
        raise SystemExit(f"circuitgrad zk verify: {root} needs step_*.proof files and the chain.json that "
                         f"'zk prove --system ligero' writes (it names the circuit to verify against)")
    with _Phase("compile"):
        circuit = _setup(**chain["options"])[2]
    results = []
    for f in files:
        try:
            proof = ligero.load(f)
        except FormatError as e:
            raise SystemExit(f"circuitgrad zk verify: {e}") from None
        try:
            ligero.check(proof, circuit)
            good = True
        except ligero.Reject as e:
            print(f"  {f}: {e}")
            good = False
        results.append((f, proof, good, [int(v) for v in proof.public]))
    return _report(results, circuit.statement())


def add_parser(sub) -> None:
    """Register ``zk prove`` and ``zk verify`` under the ``circuitgrad`` command."""
    zk = sub.add_parser("zk", help="zero-knowledge proofs of training steps").add_subparsers(dest="zk_cmd",
                                                                                            required=True)
    p = zk.add_parser("prove", help="prove training steps of an example script")
    p.add_argument("script")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--out", default="proofs")
    p.add_argument("--system", choices=SYSTEMS, default="ligero",
                   help="ligero (native, transparent, default), groth16 or plonk (snarkjs)")
    p.add_argument("--width", type=int, default=None, help="fixed-point width (default 16 for ligero, else 32)")
    p.add_argument("--frac", type=int, default=None, help="fractional bits (default width/2)")
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
