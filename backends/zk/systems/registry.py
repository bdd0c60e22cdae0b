"""The registered proof systems: ``SYSTEMS`` (name -> :class:`~.interface.ProofSystem`), the one used when none is
named (:data:`DEFAULT`) and the one that refuses what no system owns (:data:`FALLBACK`).

    system = zk.SYSTEMS["ligero"]                 # or "groth16", "plonk"
    circuit = zk.compile(step, dtype=system.dtype, field=system.field)
    proof = system.prove(circuit, wit)
    system.save(proof, system.step_name(0))       # step_000.proof (Ligero) or step_000/ (snarkjs)
    system.check(system.load("step_000.proof", circuit), circuit, wit.public)

``system="ligero"`` (:data:`DEFAULT`) is the native transparent prover (:mod:`.ligero`). It needs no
setup file and no Node.js. ``"groth16"`` and ``"plonk"`` go through snarkjs (:mod:`.snarkjs`).
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from circuitgrad.cache import cache_dir
from circuitgrad.types import fixed

from ..circuits.field import BN254, LIGERO51
from ..circuits.formats import FormatError
from . import ligero
from . import snarkjs as sj
from .cluster import Split
from .interface import ProofSystem
from .ligero import LigeroProof
from .ligero.params import soundness_of, with_soundness

__all__ = ["LigeroSystem", "SnarkjsSystem", "SYSTEMS", "DEFAULT", "FALLBACK", "for_proof"]


def _refuse_keys(who: str, keys: dict) -> None:
    if keys:
        raise TypeError(f"{who}: a Ligero proof needs no keys (got {sorted(keys)})")


def _refuse_soundness(who: str, soundness: str | None) -> None:
    if soundness is not None:
        raise TypeError(f"{who}: soundness names an analysis of Ligero proofs; this is a snarkjs proof")


class LigeroSystem(ProofSystem):
    """The native transparent prover (:mod:`.ligero`): no setup, lookups and challenges, two soundness bounds."""

    name = "ligero"
    field = LIGERO51
    dtype = fixed(16, 8)
    suffix = ".proof"
    lookups = True
    challenges = True
    soundness_modes = tuple(ligero.SOUNDNESS)
    default_soundness = ligero.DEFAULT_SOUNDNESS
    trusted_setup = False
    private_runs = True
    split_steps = True

    def statement(self, circuit, soundness: str | None = None) -> str:
        """The circuit's statement and the soundness analysis the proof's parameters meet."""
        return with_soundness(circuit.statement(), soundness or self.default_soundness)

    def soundness_of(self, statement: str, circuit) -> str | None:
        """The analysis ``statement`` claims for ``circuit`` (None: it is not one of the circuit's)."""
        return soundness_of(statement, circuit.statement())

    def owns(self, proof: Any) -> bool:
        """Whether ``proof`` is a :class:`LigeroProof`."""
        return isinstance(proof, LigeroProof)

    def prove(self, circuit, wit, **options) -> LigeroProof:
        """:func:`ligero.prove` (``params``, ``target_bits``, ``rng``, ``log``, ``soundness``, ``check``); with
        ``cluster`` (as for private runs: a number of local workers, a scheduler address, a Client or a cluster),
        the proof's rows are shared among Dask workers (:class:`~.cluster.Split`), and the proof is the same."""
        cluster = options.pop("cluster", None)
        if cluster is None or cluster == "serial" or cluster == 1:
            return ligero.prove(circuit, wit, **options)
        with Split(cluster) as split:
            proof = ligero.prove(circuit, wit, split=split, **options)
            proof.timings.update({f"bytes_{k}": float(v) for k, v in split.moved.items()},
                                 workers=float(split.workers))
        return proof

    def check(self, proof, circuit, public: Sequence[int] | None = None, soundness: str | None = None,
              **keys) -> None:
        """:func:`ligero.check` under ``soundness`` (default ``"longfellow"``); a Ligero proof takes no keys."""
        _refuse_keys("zk.check", keys)
        ligero.check(proof, circuit, public, soundness=soundness or self.default_soundness)

    def verify(self, proof, circuit, public: Sequence[int] | None = None, soundness: str | None = None,
               **keys) -> bool:
        """:func:`ligero.verify` under ``soundness`` (default ``"longfellow"``)."""
        _refuse_keys("zk.verify", keys)
        return ligero.verify(proof, circuit, public, soundness=soundness or self.default_soundness)

    def load(self, path: str, circuit=None, soundness: str | None = None) -> LigeroProof:
        """A ``.proof`` file; with ``circuit``, at most :func:`ligero.max_proof_bytes` of it."""
        if circuit is None:
            return ligero.load(path)
        mode = soundness or self.default_soundness      # a proof claiming another analysis: refused by that first
        return ligero.load(path, ligero.max_proof_bytes(circuit, soundness=mode), soundness=mode)

    def verifier_keys(self, circuit, vkey=None, zkey: str | None = None, ptau: str | None = None) -> dict:
        """None: the proof is checked against the circuit alone."""
        return {}

    def missing_setup(self, circuit) -> int | None:
        """None: a transparent system has no setup."""
        return None

    def summary(self, proof, path: str) -> str:
        """The file's size and the proof's soundness bits."""
        return f"{os.path.getsize(path) / 1024:.0f} KiB, {proof.soundness_bits:.1f} bits"


class SnarkjsSystem(ProofSystem):
    """Groth16 or PLONK through snarkjs (:mod:`.snarkjs`): BN254, plain R1CS, keys from a setup."""

    field = BN254
    dtype = fixed(32, 16)
    suffix = ""
    lookups = False
    challenges = False
    soundness_modes = ()
    default_soundness = None
    trusted_setup = True
    private_runs = False
    split_steps = False

    def __init__(self, name: str):
        if name not in sj.SYSTEMS:
            raise ValueError(f"SnarkjsSystem: unknown system {name!r}; snarkjs systems are {sj.SYSTEMS}")
        self.name = name

    def statement(self, circuit, soundness: str | None = None) -> str:
        """The circuit's statement (snarkjs names no soundness analysis)."""
        if soundness is not None:
            raise TypeError(f"{self.name}: soundness names an analysis of Ligero proofs; a {self.name} statement "
                            f"names none")
        return circuit.statement()

    def soundness_of(self, statement: str, circuit) -> str | None:
        """None: a snarkjs statement names no soundness analysis."""
        return None

    def owns(self, proof: Any) -> bool:
        """Whether ``proof`` is a snarkjs :class:`~.snarkjs.Proof` of this system."""
        return isinstance(proof, sj.Proof) and proof.system == self.name

    def prove(self, circuit, wit, **options) -> sj.Proof:
        """:func:`snarkjs.prove` (``ptau_file``, ``keys``, ``log``); ``soundness`` is refused."""
        if "soundness" in options:
            raise TypeError(f"zk.prove: soundness names an analysis of Ligero proofs, not of {self.name}")
        return sj.prove(circuit, wit, system=self.name, **options)

    def check(self, proof, circuit, public: Sequence[int] | None = None, soundness: str | None = None,
              **keys) -> None:
        """:func:`snarkjs.check` against a key derived from ``circuit`` (``keys``: ``vkey``, ``zkey``,
        ``ptau_file``)."""
        _refuse_soundness("zk.check", soundness)
        sj.check(proof, circuit, public, **keys)

    def verify(self, proof, circuit, public: Sequence[int] | None = None, soundness: str | None = None,
               **keys) -> bool:
        """:func:`snarkjs.verify` against a key derived from ``circuit``."""
        _refuse_soundness("zk.verify", soundness)
        return sj.verify(proof, circuit, public, **keys)

    def load(self, path: str, circuit=None, soundness: str | None = None) -> sj.Proof:
        """A proof directory (``proof.json``, ``public.json``, ``verification_key.json``, ``statement.json``)
        of this system; snarkjs files are small and bounded by their reader."""
        where = os.path.basename(path)
        if not os.path.isdir(path):
            raise FormatError(f"{where}: a {self.name} proof is a directory (proof.json, public.json, "
                              f"verification_key.json, statement.json)")
        proof = sj.Proof.load(path)
        if proof.system != self.name:
            raise FormatError(f"{where}: a {proof.system} proof, not {self.name}")
        return proof

    def verifier_keys(self, circuit, vkey=None, zkey: str | None = None, ptau: str | None = None) -> dict:
        """``{"vkey": ...}`` from :func:`snarkjs.verification_key`: never the key a proof carries."""
        return {"vkey": sj.verification_key(circuit, self.name, vkey, zkey, ptau)}

    def missing_setup(self, circuit) -> int | None:
        """The powers of tau :func:`snarkjs.ptau_power` names, unless this machine has them cached."""
        power = sj.ptau_power(circuit, self.name)
        cached = os.path.exists(os.path.join(cache_dir("ptau"), f"pot{power}.ptau"))
        return None if cached else power

    def summary(self, proof, path: str) -> str:
        """The proof's timings (setup and prove, seconds)."""
        return str(proof.timings)


#: the registered proof systems, name -> implementation, in order: ``ligero``, ``groth16``, ``plonk``
SYSTEMS: dict[str, ProofSystem] = {s.name: s for s in [LigeroSystem(), *(SnarkjsSystem(n) for n in sj.SYSTEMS)]}
#: the system ``zk.prove`` and ``circuitgrad zk`` use when none is named
DEFAULT = "ligero"
#: the system that checks what no registered system owns: its checks reject it by name (``not a snarkjs proof: …``)
FALLBACK: ProofSystem = SYSTEMS[sj.SYSTEMS[0]]


def for_proof(proof: Any) -> ProofSystem:
    """The system that :meth:`~.interface.ProofSystem.owns` ``proof``; anything else goes to :data:`FALLBACK`,
    whose checks reject it by name, as ``zk.verify`` always did."""
    return next((s for s in SYSTEMS.values() if s.owns(proof)), FALLBACK)

