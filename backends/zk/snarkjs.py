"""Groth16 and PLONK proofs through snarkjs 0.7.x (Node.js).

snarkjs is installed by npm into the user cache
(``~/.cache/circuitgrad/npm``, or ``$CIRCUITGRAD_CACHE/npm``) the first
time it is needed. ``$CIRCUITGRAD_SNARKJS`` points at another snarkjs
executable. Node.js and npm must be on ``PATH``; if they are not, the error
says so and how to install them.

Powers of tau are generated locally, with one random contribution, and
cached by size (``…/ptau/pot<k>.ptau``). That makes them a *local* trusted
setup: fine for tests and for proving to yourself. For proofs that others
should trust, pass ``ptau=`` a file from a public ceremony. Measured here:
``prepare phase2`` takes about 20 s at 2^12 and about 38 min at 2^16, so
large circuits need the native prover (``system="ligero"``) or a downloaded ptau.
Proving keys are cached by the SHA-256 of the ``.r1cs`` file, so proving
several steps of one model runs the setup once.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from .circuit import Circuit, Witness

__all__ = ["SNARKJS_VERSION", "ToolMissing", "SnarkjsError", "Proof", "prove", "verify", "snarkjs", "ptau"]

SNARKJS_VERSION = "0.7.6"
SYSTEMS = ("groth16", "plonk")


class ToolMissing(RuntimeError):
    """Node.js, npm or snarkjs is not available."""


class SnarkjsError(RuntimeError):
    """snarkjs failed; the message carries its output."""


def cache_dir(*parts: str) -> str:
    root = os.environ.get("CIRCUITGRAD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "circuitgrad")
    path = os.path.join(root, *parts)
    os.makedirs(path, exist_ok=True)
    return path


def snarkjs(install: bool = True, log: Callable[[str], None] = print) -> str:
    """Path of the snarkjs executable (installed through npm on first use)."""
    env = os.environ.get("CIRCUITGRAD_SNARKJS")
    if env:
        if not os.path.exists(env):
            raise ToolMissing(f"CIRCUITGRAD_SNARKJS={env} does not exist")
        return env
    prefix = cache_dir("npm")
    exe = os.path.join(prefix, "node_modules", ".bin", "snarkjs")
    if os.path.exists(exe):
        return exe
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise ToolMissing("snarkjs needs Node.js and npm, which are not on PATH: install them "
                          "(for example 'apt-get install nodejs npm', or from nodejs.org) and retry")
    if not install:
        raise ToolMissing(f"snarkjs is not installed in {prefix}")
    log(f"installing snarkjs@{SNARKJS_VERSION} with npm into {prefix} (once)")
    res = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", prefix,
                          f"snarkjs@{SNARKJS_VERSION}"], capture_output=True, text=True)
    if res.returncode != 0 or not os.path.exists(exe):
        raise ToolMissing(f"npm could not install snarkjs@{SNARKJS_VERSION}: {res.stderr.strip()[-500:]}")
    return exe


def _run(args: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([snarkjs()] + args, capture_output=True, text=True)
    if check and res.returncode != 0:
        out = (res.stdout + res.stderr).strip()
        raise SnarkjsError(f"snarkjs {what} failed (exit {res.returncode}): {out[-800:]}")
    return res


def ptau(power: int, log: Callable[[str], None] = print) -> str:
    """A prepared powers-of-tau file for ``2**power`` constraints (generated once, cached)."""
    if not 1 <= power <= 28:
        raise ValueError(f"powers of tau: power must be in 1..28, got {power}")
    final = os.path.join(cache_dir("ptau"), f"pot{power}.ptau")
    if os.path.exists(final):
        return final
    with tempfile.TemporaryDirectory(dir=cache_dir("ptau")) as tmp:
        p0, p1, p2 = (os.path.join(tmp, f"{i}.ptau") for i in range(3))
        t0 = time.perf_counter()
        log(f"setup: powers of tau 2^{power}: new")
        _run(["powersoftau", "new", "bn128", str(power), p0], "powersoftau new")
        log("setup: powers of tau: contribute (local random entropy)")
        _run(["powersoftau", "contribute", p0, p1, "--name=circuitgrad", f"-e={secrets.token_hex(32)}"],
             "powersoftau contribute")
        log("setup: powers of tau: prepare phase2 (the slow part)")
        _run(["powersoftau", "prepare", "phase2", p1, p2], "powersoftau prepare phase2")
        os.replace(p2, final)
        log(f"setup: powers of tau 2^{power} ready in {time.perf_counter() - t0:.1f} s")
    return final


@dataclass
class Proof:
    """A snarkjs proof with everything needed to verify it."""
    system: str
    proof: dict
    public: list[str]
    verification_key: dict
    statement: str = ""
    circuit_digest: str = ""
    timings: dict = field(default_factory=dict)
    public_outputs: int = 0          # the first ``public_outputs`` public values are outputs

    def save(self, directory: str) -> None:
        """Write ``proof.json``, ``public.json``, ``verification_key.json`` and ``statement.json``."""
        os.makedirs(directory, exist_ok=True)
        for name, obj in (("proof", self.proof), ("public", self.public),
                          ("verification_key", self.verification_key)):
            with open(os.path.join(directory, f"{name}.json"), "w") as fh:
                json.dump(obj, fh, indent=1)
        with open(os.path.join(directory, "statement.json"), "w") as fh:
            json.dump({"system": self.system, "statement": self.statement, "circuit_sha256": self.circuit_digest,
                       "public_outputs": self.public_outputs, "snarkjs": SNARKJS_VERSION,
                       "timings_s": self.timings}, fh, indent=1)

    @classmethod
    def load(cls, directory: str):
        """Read a proof saved by :meth:`save`; malformed files raise a clear ValueError.

        A path to a file (not a directory) is read as a native Ligero ``.proof`` file.
        """
        if os.path.isfile(directory):
            from .ligero import load
            return load(directory)
        def read(name):
            path = os.path.join(directory, f"{name}.json")
            try:
                with open(path) as fh:
                    return json.load(fh)
            except FileNotFoundError:
                raise ValueError(f"{directory}: missing {name}.json") from None
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
        meta = read("statement")
        system = meta.get("system") if isinstance(meta, dict) else None
        if system not in SYSTEMS:
            raise ValueError(f"{directory}/statement.json: unknown proof system {system!r}")
        public = read("public")
        if not isinstance(public, list) or not all(isinstance(v, str) and v.isdigit() for v in public):
            raise ValueError(f"{directory}/public.json: expected a list of decimal strings")
        proof, vk = read("proof"), read("verification_key")
        if not isinstance(proof, dict) or not isinstance(vk, dict):
            raise ValueError(f"{directory}: proof.json and verification_key.json must be JSON objects")
        return cls(system, proof, public, vk, meta.get("statement", ""), meta.get("circuit_sha256", ""),
                   meta.get("timings_s", {}), int(meta.get("public_outputs", 0)))


def _power(circuit: Circuit, system: str) -> int:
    r = circuit.r1cs
    if system == "groth16":
        n = r.n_constraints + r.n_public + 1
    else:  # PLONK: one gate per constraint plus one per extra term, plus public inputs
        import numpy as np
        terms = np.diff(r.A.ptr) + np.diff(r.B.ptr) + np.diff(r.C.ptr)
        n = int(np.maximum(terms - 2, 1).sum()) + r.n_public + 1
    return max(8, math.ceil(math.log2(n)))


def prove(circuit: Circuit, wit: Witness, system: str = "groth16", ptau_file: str | None = None,
          log: Callable[[str], None] = print) -> Proof:
    """Prove ``wit`` for ``circuit`` with snarkjs (setup cached per circuit); returns a :class:`Proof`."""
    if system not in SYSTEMS:
        raise ValueError(f"zk.prove: unknown system {system!r}; snarkjs systems are {SYSTEMS} "
                         f"(the native transparent prover is zk.prove(..., system='ligero'))")
    circuit.assert_satisfied(wit)
    timings = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = circuit.export(tmp, wit, "circuit")
        digest = hashlib.sha256(open(paths["r1cs"], "rb").read()).hexdigest()
        keydir = cache_dir("keys", f"{digest[:32]}-{system}")
        zkey, vkey = os.path.join(keydir, "final.zkey"), os.path.join(keydir, "verification_key.json")
        if not os.path.exists(vkey):
            power = _power(circuit, system)
            t0 = time.perf_counter()
            pt = ptau_file or ptau(power, log)
            log(f"setup: {system} proving key for {circuit.r1cs.n_constraints} constraints")
            if system == "groth16":
                z0 = os.path.join(keydir, "0.zkey")
                _run(["groth16", "setup", paths["r1cs"], pt, z0], "groth16 setup")
                _run(["zkey", "contribute", z0, zkey, "--name=circuitgrad", f"-e={secrets.token_hex(32)}"],
                     "zkey contribute")
                os.remove(z0)
            else:
                res = _run(["plonk", "setup", paths["r1cs"], pt, zkey], "plonk setup", check=False)
                need = re.search(r"2\*\*(\d+)", res.stdout + res.stderr)
                if res.returncode != 0 and need and ptau_file is None:
                    _run(["plonk", "setup", paths["r1cs"], ptau(int(need.group(1)) + 1, log), zkey], "plonk setup")
                elif res.returncode != 0:
                    raise SnarkjsError(f"snarkjs plonk setup failed: {(res.stdout + res.stderr)[-800:]}")
            _run(["zkey", "export", "verificationkey", zkey, vkey], "zkey export verificationkey")
            timings["setup"] = time.perf_counter() - t0
        log(f"prove: {system}")
        t0 = time.perf_counter()
        proof_path, public_path = os.path.join(tmp, "proof.json"), os.path.join(tmp, "public.json")
        _run([system, "prove", zkey, paths["wtns"], proof_path, public_path], f"{system} prove")
        timings["prove"] = time.perf_counter() - t0
        proof = json.load(open(proof_path))
        public = json.load(open(public_path))
        vk = json.load(open(vkey))
    expected = [str(v) for v in wit.public]
    if public != expected:
        raise SnarkjsError("snarkjs public signals differ from the circuit's public statement")
    return Proof(system, proof, public, vk, circuit.statement(), digest, timings, circuit.r1cs.n_pub_out)


def verify(proof: Proof) -> bool:
    """True when snarkjs accepts ``proof`` against its verification key and public values."""
    with tempfile.TemporaryDirectory() as tmp:
        proof.save(tmp)
        res = _run([proof.system, "verify", os.path.join(tmp, "verification_key.json"),
                    os.path.join(tmp, "public.json"), os.path.join(tmp, "proof.json")], "verify", check=False)
    out = res.stdout + res.stderr
    if res.returncode == 0 and "OK" in out:
        return True
    if "invalid proof" in out.lower() or (res.returncode != 0 and "ERROR" in out):
        return False
    raise SnarkjsError(f"snarkjs verify gave an unexpected answer (exit {res.returncode}): {out[-500:]}")
