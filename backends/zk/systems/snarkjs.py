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
Proving keys are cached by the SHA-256 of the ``.r1cs`` file and of the
powers of tau, so proving several steps of one model runs the setup once.

**Verification never trusts the proof's own key.** :func:`verify` takes the
circuit the verifier compiled itself and derives the verification key from
it (:func:`verification_key`):

* PLONK: the setup is deterministic, so the verifier runs it on its circuit
  and a powers-of-tau file it trusts;
* Groth16: the key of a setup the verifier trusts: a verification key it was
  given out of band (``vkey=``), a proving key checked with ``snarkjs zkey
  verify`` against its circuit and powers of tau (``zkey=``; this trusts
  whoever contributed to its phase 2: a prover who was the only contributor
  can forge proofs), or this machine's own setup of the circuit
  (:func:`setup`).

The key the proof carries is only compared with the derived one, for a
clearer error.
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
from typing import Callable, Sequence

from circuitgrad.cache import cache_dir

from ..circuits.circuit import Circuit, Witness
from ..circuits.field import BN254
from ..circuits.formats import FormatError, json_loads, printable, read_untrusted
from .ligero.protocol import Reject

__all__ = ["SNARKJS_VERSION", "ToolMissing", "SnarkjsError", "Proof", "Keys", "setup", "verification_key",
           "prove", "verify", "check", "snarkjs", "ptau"]

SNARKJS_VERSION = "0.7.6"
SYSTEMS = ("groth16", "plonk")


class ToolMissing(RuntimeError):
    """Node.js, npm or snarkjs is not available."""


class SnarkjsError(RuntimeError):
    """snarkjs failed; the message carries its output."""


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


def ptau(power: int, log: Callable[[str], None] = print, create: bool = True) -> str:
    """A prepared powers-of-tau file for ``2**power`` constraints (generated once, cached).

    ``create=False`` returns only a file this machine already has (else :class:`ToolMissing`).
    """
    if not 1 <= power <= 28:
        raise ValueError(f"powers of tau: power must be in 1..28, got {power}")
    final = os.path.join(cache_dir("ptau"), f"pot{power}.ptau")
    if os.path.exists(final):
        return final
    if not create:
        raise ToolMissing(f"no powers of tau 2^{power} on this machine ({final}): pass the ceremony file you "
                          f"trust (ptau_file= / --ptau)")
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


_DEC = re.compile(r"0|[1-9][0-9]{0,77}")
_MAX_JSON = 4 << 20          # bytes: a proof, key or public file larger than this is refused unread


def _read_json(path: str, missing: str):
    """A JSON file of at most ``_MAX_JSON`` bytes (a regular file); :class:`FormatError` otherwise."""
    if not os.path.lexists(path):
        raise FormatError(missing)
    data = read_untrusted(path, _MAX_JSON, "snarkjs JSON file")
    try:
        return json_loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:        # bad UTF-8 or JSON, huge integers, deep nesting
        raise FormatError(f"{printable(path)}: not valid JSON ({printable(str(e))[:200]})") from None


def _canonical(v, what: str, bound: int) -> str:
    """``v`` as a canonical decimal string below ``bound`` (no sign, no leading zeros), else FormatError."""
    if not isinstance(v, str) or not _DEC.fullmatch(v) or int(v) >= bound:
        raise FormatError(f"{what}: {str(v)[:80]!r} is not a canonical decimal number below {bound}")
    return v


#: the BN254 base field, in which the curve points of snarkjs proofs and keys lie
BN254_Q = 21888242871839275222246405745257275088696311157297823662689037894645226208583


def _check_numbers(obj, what: str) -> None:
    """Every leaf of a snarkjs proof (nested lists and dicts) a canonical decimal below the base field."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in ("protocol", "curve"):
                _check_numbers(v, f"{what}.{k}")
    elif isinstance(obj, list) and len(obj) <= 3:
        for i, v in enumerate(obj):
            _check_numbers(v, f"{what}[{i}]")
    else:
        _canonical(obj, what, BN254_Q)


def _check_proof(system: str, proof, public, where: str = "proof") -> None:
    """Structure, curve and ranges of a snarkjs proof and its public values (FormatError)."""
    if system not in SYSTEMS:
        raise FormatError(f"{where}: unknown proof system {system!r}; snarkjs systems are {list(SYSTEMS)}")
    if not isinstance(proof, dict) or proof.get("protocol") != system or proof.get("curve") != "bn128":
        raise FormatError(f"{where}: proof.json must be a {system} proof over bn128 "
                          f"(protocol {proof.get('protocol') if isinstance(proof, dict) else None!r})")
    _check_numbers(proof, f"{where}/proof.json")
    if not isinstance(public, list):
        raise FormatError(f"{where}/public.json: expected a list of decimal strings")
    for i, v in enumerate(public):
        _canonical(v, f"{where}/public.json[{i}]", BN254.p)


@dataclass
class Proof:
    """A snarkjs proof. Its ``verification_key`` is what the prover used: never what a verifier trusts."""
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
        """Read a proof saved by :meth:`save`, validating every field (:class:`FormatError` says what is wrong).

        A path to a file (not a directory) is read as a native Ligero ``.proof`` file.
        """
        if os.path.isfile(directory):
            from .ligero import load
            return load(directory)
        if not os.path.isdir(directory):
            raise FormatError(f"{directory}: no such proof directory")

        def read(name):
            return _read_json(os.path.join(directory, f"{name}.json"), f"{directory}: missing {name}.json")
        meta = read("statement")
        if not isinstance(meta, dict):
            raise FormatError(f"{directory}/statement.json: expected a JSON object")
        system = meta.get("system")
        proof, public, vk = read("proof"), read("public"), read("verification_key")
        _check_proof(system, proof, public, directory)
        if not isinstance(vk, dict):
            raise FormatError(f"{directory}/verification_key.json: expected a JSON object")
        statement, digest, n_out = meta.get("statement", ""), meta.get("circuit_sha256", ""), \
            meta.get("public_outputs", 0)
        timings = meta.get("timings_s", {})
        if not isinstance(statement, str) or not isinstance(digest, str) or not isinstance(timings, dict):
            raise FormatError(f"{directory}/statement.json: statement and circuit_sha256 must be strings")
        if not isinstance(n_out, int) or isinstance(n_out, bool) or not 0 <= n_out <= len(public):
            raise FormatError(f"{directory}/statement.json: public_outputs must be an integer in 0..{len(public)}")
        return cls(system, proof, public, vk, statement, digest, timings, n_out)


@dataclass
class Keys:
    """The keys of one circuit's setup: the proving key file and the verification key."""
    system: str
    zkey: str
    verification_key: dict
    ptau: str


def ptau_power(circuit: Circuit, system: str) -> int:
    """``k`` of the ``2^k`` powers of tau ``system`` needs for ``circuit`` (its gates rounded up, at least 8)."""
    r = circuit.r1cs
    if system == "groth16":
        n = r.n_constraints + r.n_public + 1
    else:  # PLONK: one gate per constraint plus one per extra term, plus public inputs
        import numpy as np
        terms = np.diff(r.A.ptr) + np.diff(r.B.ptr) + np.diff(r.C.ptr)
        n = int(np.maximum(terms - 2, 1).sum()) + r.n_public + 1
    return max(8, math.ceil(math.log2(n)))


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _r1cs_file(circuit: Circuit, directory: str) -> tuple[str, str]:
    """The circuit's ``.r1cs`` written into ``directory``, and its SHA-256."""
    from ..circuits import formats
    path = os.path.join(directory, "circuit.r1cs")
    formats.write_r1cs(path, circuit.r1cs)
    return path, _sha256_file(path)


def _read_vkey(vkey, system: str, circuit: Circuit) -> dict:
    """A verification key given by the verifier (dict or path), checked against the system and the circuit."""
    if isinstance(vkey, (str, os.PathLike)):
        vkey = _read_json(str(vkey), f"verification key {vkey}: no such file")
    if not isinstance(vkey, dict) or vkey.get("protocol") != system or vkey.get("curve") != "bn128":
        raise FormatError(f"the verification key is not a {system} key over bn128")
    if vkey.get("nPublic") != circuit.r1cs.n_public:
        raise FormatError(f"the verification key has {vkey.get('nPublic')} public values, the circuit "
                          f"{circuit.r1cs.n_public}: it is another circuit's key")
    return vkey


def setup(circuit: Circuit, system: str = "groth16", ptau_file: str | None = None,
          log: Callable[[str], None] = print, create: bool = True) -> Keys:
    """The proving and verification keys of ``circuit`` (cached per circuit and powers of tau).

    PLONK's setup is deterministic given the powers of tau. Groth16's adds one phase-2 contribution
    of local randomness: whoever runs it can forge proofs for this circuit, so the verifier (or a
    ceremony it trusts), not the prover, should run it and hand the prover ``keys.zkey``.
    ``create=False`` returns only keys this machine has made before (else :class:`ToolMissing`),
    and never generates powers of tau.
    """
    circuit.require_r1cs(f"snarkjs {system}")
    if system not in SYSTEMS:
        raise ValueError(f"zk.setup: unknown system {system!r}; snarkjs systems are {SYSTEMS}")
    with tempfile.TemporaryDirectory() as tmp:
        r1cs, digest = _r1cs_file(circuit, tmp)
        power = ptau_power(circuit, system)
        if ptau_file is not None and not os.path.isfile(ptau_file):
            raise ToolMissing(f"powers of tau file {ptau_file} does not exist")
        tag = "local" if ptau_file is None else _sha256_file(ptau_file)[:16]
        keydir = cache_dir("keys", f"{digest[:32]}-{system}-{tag}")
        zkey, vkey = os.path.join(keydir, "final.zkey"), os.path.join(keydir, "verification_key.json")
        used = os.path.join(keydir, "ptau.txt")       # which powers of tau the cached keys were made from
        if os.path.exists(vkey) and os.path.exists(used):
            return Keys(system, zkey, json.load(open(vkey)), open(used).read())
        if not create and system == "groth16":
            raise ToolMissing("no Groth16 setup of this circuit on this machine: pass the verification key of a "
                              "setup you trust (verification_key= / --vkey), or its proving key (zkey= / --zkey), "
                              "or run zk.setup(circuit) yourself and give the prover its zkey")
        pt = ptau_file or ptau(power, log, create=create)
        log(f"setup: {system} keys for {circuit.r1cs.n_constraints} constraints")
        if system == "groth16":
            z0 = os.path.join(keydir, "0.zkey")
            _run(["groth16", "setup", r1cs, pt, z0], "groth16 setup")
            _run(["zkey", "contribute", z0, zkey, "--name=circuitgrad", f"-e={secrets.token_hex(32)}"],
                 "zkey contribute")
            os.remove(z0)
        else:
            res = _run(["plonk", "setup", r1cs, pt, zkey], "plonk setup", check=False)
            need = re.search(r"2\*\*(\d+)", res.stdout + res.stderr)
            if res.returncode != 0 and need and ptau_file is None:
                pt = ptau(int(need.group(1)) + 1, log, create=create)
                _run(["plonk", "setup", r1cs, pt, zkey], "plonk setup")
            elif res.returncode != 0:
                raise SnarkjsError(f"snarkjs plonk setup failed: {(res.stdout + res.stderr)[-800:]}")
        _run(["zkey", "export", "verificationkey", zkey, vkey], "zkey export verificationkey")
        with open(used, "w") as fh:
            fh.write(pt)
        return Keys(system, zkey, json.load(open(vkey)), pt)


def verification_key(circuit: Circuit, system: str, vkey=None, zkey: str | None = None,
                     ptau_file: str | None = None, log: Callable[[str], None] = print) -> dict:
    """The verification key a verifier may trust for ``circuit``, derived from the circuit, not a proof.

    In order: ``vkey`` (a key the verifier was given out of band: dict or path), ``zkey`` (a proving
    key, checked by ``snarkjs zkey verify`` against the circuit and ``ptau_file``; Groth16 only), a
    deterministic PLONK setup from ``ptau_file`` or this machine's powers of tau, or this machine's own
    Groth16 setup of the circuit. Raises :class:`ToolMissing` when none is available.
    """
    circuit.require_r1cs(f"snarkjs {system}")
    if vkey is not None:
        return _read_vkey(vkey, system, circuit)
    if zkey is not None:
        if system != "groth16":
            raise ValueError("zkey= is checked for Groth16 keys; a PLONK key is derived from the powers of tau")
        if ptau_file is None:
            raise ValueError("checking a Groth16 proving key needs the powers of tau it was made from (ptau_file=)")
        with tempfile.TemporaryDirectory() as tmp:
            r1cs, _ = _r1cs_file(circuit, tmp)
            res = _run(["zkey", "verify", r1cs, ptau_file, zkey], "zkey verify", check=False)
            if res.returncode != 0 or "ZKey Ok!" not in res.stdout + res.stderr:
                raise FormatError(f"{zkey}: snarkjs zkey verify says this proving key was not made from this "
                                  f"circuit and powers of tau: {(res.stdout + res.stderr).strip()[-300:]}")
            out = os.path.join(tmp, "vkey.json")
            _run(["zkey", "export", "verificationkey", zkey, out], "zkey export verificationkey")
            return _read_vkey(out, system, circuit)
    return setup(circuit, system, ptau_file, log, create=False).verification_key


def prove(circuit: Circuit, wit: Witness, system: str = "groth16", ptau_file: str | None = None,
          keys: Keys | None = None, log: Callable[[str], None] = print) -> Proof:
    """Prove ``wit`` for ``circuit`` with snarkjs; returns a :class:`Proof`.

    ``keys`` from a setup the verifier trusts (:func:`setup`); by default this machine's own setup
    (cached per circuit).
    """
    circuit.require_r1cs(f"snarkjs {system}")
    if system not in SYSTEMS:
        raise ValueError(f"zk.prove: unknown system {system!r}; snarkjs systems are {SYSTEMS} "
                         f"(the native transparent prover is zk.prove(..., system='ligero'))")
    if keys is not None and keys.system != system:
        raise ValueError(f"zk.prove: keys are for {keys.system}, not {system}")
    circuit.assert_satisfied(wit)
    timings = {}
    t0 = time.perf_counter()
    keys = keys or setup(circuit, system, ptau_file, log)
    timings["setup"] = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        paths = circuit.export(tmp, wit, "circuit")
        log(f"prove: {system}")
        t0 = time.perf_counter()
        proof_path, public_path = os.path.join(tmp, "proof.json"), os.path.join(tmp, "public.json")
        _run([system, "prove", keys.zkey, paths["wtns"], proof_path, public_path], f"{system} prove")
        timings["prove"] = time.perf_counter() - t0
        proof = json.load(open(proof_path))
        public = json.load(open(public_path))
    expected = [str(v) for v in wit.public]
    if public != expected:
        raise SnarkjsError("snarkjs public signals differ from the circuit's public statement")
    return Proof(system, proof, public, keys.verification_key, circuit.statement(), circuit.digest().hex(),
                 timings, circuit.r1cs.n_pub_out)


def check(proof: Proof, circuit: Circuit, public: Sequence[int] | None = None, vkey=None,
          zkey: str | None = None, ptau_file: str | None = None) -> None:
    """Raise :class:`Reject` naming the first failed check of ``proof`` against ``circuit``.

    The verification key is derived by :func:`verification_key`; the one in the proof is only compared.
    ``public`` (default: the proof's own) must be canonical field elements equal to the proof's.
    """
    if not isinstance(proof, Proof):
        raise Reject(f"not a snarkjs proof: {type(proof).__name__}")
    try:
        _check_proof(proof.system, proof.proof, proof.public)
    except FormatError as e:
        raise Reject(str(e)) from None
    if public is not None:
        vals = [int(v) for v in public]
        bad = next((i for i, v in enumerate(vals) if not 0 <= v < circuit.field.p), None)
        if bad is not None:
            raise Reject(f"public value {bad} ({vals[bad]}) is not a canonical element of {circuit.field} "
                         f"(it must lie in [0, p))")
        if [str(v) for v in vals] != list(proof.public):
            raise Reject("the public values differ from the proof's")
    if len(proof.public) != circuit.r1cs.n_public or proof.public_outputs != circuit.r1cs.n_pub_out:
        raise Reject(f"the proof has {len(proof.public)} public values ({proof.public_outputs} outputs), the "
                     f"circuit {circuit.r1cs.n_public} ({circuit.r1cs.n_pub_out} outputs)")
    if proof.statement != circuit.statement() or proof.circuit_digest != circuit.digest().hex():
        raise Reject("the proof's statement is not this circuit's")
    vk = verification_key(circuit, proof.system, vkey, zkey, ptau_file, log=lambda s: None)
    if proof.verification_key != vk:
        raise Reject("the proof's verification key is not the one derived for this circuit (another circuit or "
                     "another setup)")
    with tempfile.TemporaryDirectory() as tmp:
        files = {"verification_key": vk, "public": list(proof.public), "proof": proof.proof}
        for name, obj in files.items():
            with open(os.path.join(tmp, f"{name}.json"), "w") as fh:
                json.dump(obj, fh)
        res = _run([proof.system, "verify"] + [os.path.join(tmp, f"{n}.json") for n in files], "verify",
                   check=False)
    out = res.stdout + res.stderr
    if res.returncode == 0 and "OK" in out:
        return
    if "invalid proof" in out.lower() or (res.returncode != 0 and "ERROR" in out):
        raise Reject(f"snarkjs {proof.system} verify: invalid proof")
    raise SnarkjsError(f"snarkjs verify gave an unexpected answer (exit {res.returncode}): {out[-500:]}")


def verify(proof: Proof, circuit: Circuit, public: Sequence[int] | None = None, vkey=None,
           zkey: str | None = None, ptau_file: str | None = None) -> bool:
    """True when ``proof`` proves ``circuit`` (and ``public``) under a key derived from the circuit."""
    try:
        check(proof, circuit, public, vkey, zkey, ptau_file)
        return True
    except Reject:
        return False
