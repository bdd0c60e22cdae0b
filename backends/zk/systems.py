"""The proof-system interface: one :class:`ProofSystem` per system, and the registry ``SYSTEMS``.

    system = zk.SYSTEMS["ligero"]                 # or "groth16", "plonk"
    circuit = zk.compile(step, dtype=system.dtype, field=system.field)
    proof = system.prove(circuit, wit)
    system.save(proof, system.step_name(0))       # step_000.proof (Ligero) or step_000/ (snarkjs)
    system.check(system.load("step_000.proof", circuit), circuit, wit.public)

``zk.prove``, ``zk.verify`` and ``zk.check``, ``circuitgrad zk prove|verify``, the bundles and the
private runs all go through this interface: a new proof system is one more implementation in the
registry, not one more branch in each of them.

Trust: :meth:`ProofSystem.load` reads untrusted files with validation (no larger than an honest proof
of the circuit the verifier compiled, where the system can say), and :meth:`ProofSystem.check`
derives what it checks against (the statement, the keys) from the verifier's circuit and options,
never from the proof. :meth:`ProofSystem.verifier_keys` takes only keys the verifier names or this
machine made.
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, Iterator, Sequence

from circuitgrad.cache import cache_dir
from circuitgrad.types import Fixed, fixed

from . import distributed, ligero
from . import snarkjs as sj
from .field import BN254, LIGERO51, Field
from .formats import FormatError
from .ligero import LigeroProof
from .statement import soundness_of, with_soundness

__all__ = ["ProofSystem", "LigeroSystem", "SnarkjsSystem", "Registry", "SYSTEMS", "MEMBERS"]

#: what every registered system provides (checked by ``tests/test_zk_systems.py``)
MEMBERS = ("name", "field", "dtype", "suffix", "lookups", "challenges", "soundness_modes", "default_soundness",
           "trusted_setup", "private_runs", "split_steps", "step_name", "statement", "soundness_of", "owns", "prove", "check",
           "verify", "save", "load", "verifier_keys", "missing_setup", "summary")


class ProofSystem(ABC):
    """A proof system: what a circuit must be for it, how it proves and checks, how its proofs are stored."""

    #: the registry key: ``--system``, ``chain.json``'s ``"system"``
    name: str
    #: the field ``circuitgrad zk`` compiles circuits over for it
    field: Field
    #: the fixed-point format ``circuitgrad zk`` defaults to (``--width``/``--frac`` unset)
    dtype: Fixed
    #: a step proof's name after ``step_000``: ``".proof"`` (one file), ``""`` (a directory)
    suffix: str
    #: whether it proves range checks by lookups (``zk.compile(..., range_checks="lookup")``)
    lookups: bool
    #: whether it draws Fiat–Shamir challenges the circuit uses (the contraction argument)
    challenges: bool
    #: the soundness analyses a verifier may require of its proofs; ``()``: the system has its own
    soundness_modes: tuple[str, ...]
    #: the analysis assumed when none is named (None when there are none)
    default_soundness: str | None
    #: whether proving and verifying need keys from a setup (powers of tau, proving and verification keys)
    trusted_setup: bool
    #: whether ``zk.prove_run`` (private weights behind commitments) proves with it
    private_runs: bool
    #: whether one proof's work can be shared among Dask workers (``prove(..., cluster=...)``)
    split_steps: bool

    def step_name(self, k: int) -> str:
        """The name of step ``k``'s proof in a bundle: ``step_000`` and the suffix."""
        return f"step_{k:03d}{self.suffix}"

    @abstractmethod
    def statement(self, circuit, soundness: str | None = None) -> str:
        """The public statement a proof of ``circuit`` makes (with the soundness analysis, where it names one)."""

    @abstractmethod
    def soundness_of(self, statement: str, circuit) -> str | None:
        """The soundness analysis for which :meth:`statement` of ``circuit`` is ``statement``, or None."""

    @abstractmethod
    def owns(self, proof: Any) -> bool:
        """Whether ``proof`` is a proof object of this system."""

    @abstractmethod
    def prove(self, circuit, wit, **options):
        """A proof that ``wit`` satisfies ``circuit`` (``options`` as ``zk.prove`` documents them)."""

    @abstractmethod
    def check(self, proof, circuit, public: Sequence[int] | None = None, soundness: str | None = None,
              **keys) -> None:
        """Raise ``Reject`` naming the first failed check of ``proof`` against the verifier's ``circuit``."""

    @abstractmethod
    def verify(self, proof, circuit, public: Sequence[int] | None = None, soundness: str | None = None,
               **keys) -> bool:
        """True when ``proof`` proves ``circuit`` for ``public`` (as :meth:`check`, without the reason)."""

    def save(self, proof, path: str) -> None:
        """Write ``proof`` at ``path`` (a file or a directory: see :attr:`suffix`)."""
        proof.save(path)

    @abstractmethod
    def load(self, path: str, circuit=None, soundness: str | None = None):
        """Read the untrusted proof at ``path`` (``FormatError`` says what is wrong); with the verifier's
        ``circuit``, no more bytes than an honest proof of it under ``soundness`` can have."""

    @abstractmethod
    def verifier_keys(self, circuit, vkey=None, zkey: str | None = None, ptau: str | None = None) -> dict:
        """The keys :meth:`check` takes for ``circuit``, derived from what the verifier names or made itself."""

    @abstractmethod
    def missing_setup(self, circuit) -> int | None:
        """``k`` of the ``2^k`` powers of tau this machine would generate to prove ``circuit`` (None: none)."""

    @abstractmethod
    def summary(self, proof, path: str) -> str:
        """One line about the proof written at ``path`` (its size, soundness or timings)."""

    def __repr__(self) -> str:
        return f"<proof system {self.name}>"


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
        the proof's rows are shared among Dask workers (:class:`.distributed.Split`), and the proof is the same."""
        cluster = options.pop("cluster", None)
        if cluster is None or cluster == "serial" or cluster == 1:
            return ligero.prove(circuit, wit, **options)
        with distributed.Split(cluster) as split:
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


class Registry(tuple):
    """The registered proof systems: the tuple of their names (what ``zk.SYSTEMS`` always was: ``in``,
    iteration, ``list(...)`` and argparse ``choices`` work unchanged) that also maps each name to its
    implementation, ``SYSTEMS["ligero"]``."""

    def __new__(cls, systems: Sequence[ProofSystem], fallback: str):
        self = super().__new__(cls, [s.name for s in systems])
        self.by_name = {s.name: s for s in systems}
        self.fallback = self.by_name[fallback]
        return self

    def __getitem__(self, key):
        """The implementation named ``key`` (a ``str``), or the name at an index or slice, as in a tuple."""
        if isinstance(key, str):
            return self.by_name[key]
        return super().__getitem__(key)

    def get(self, name: Any, default: ProofSystem | None = None) -> ProofSystem | None:
        """The implementation named ``name``, or ``default`` (for any ``name``, hashable or not)."""
        return self.by_name[name] if isinstance(name, str) and name in self.by_name else default

    def values(self) -> Iterator[ProofSystem]:
        """The implementations, in the order of the names."""
        return iter(self.by_name[n] for n in self)

    def items(self) -> Iterator[tuple[str, ProofSystem]]:
        """``(name, implementation)`` pairs, in order."""
        return iter((n, self.by_name[n]) for n in self)

    def for_proof(self, proof: Any) -> ProofSystem:
        """The system that :meth:`~ProofSystem.owns` ``proof``; anything else goes to the fallback system,
        whose checks reject it by name (``not a snarkjs proof: …``), as ``zk.verify`` always did."""
        return next((s for s in self.values() if s.owns(proof)), self.fallback)

    def __copy__(self) -> "Registry":
        return self

    def __deepcopy__(self, memo) -> "Registry":
        return self

    def __reduce__(self):
        return (_registered, ())


def _registered() -> Registry:
    """The registry (what a pickled ``SYSTEMS`` loads as)."""
    return SYSTEMS


#: name -> implementation; ``("ligero", "groth16", "plonk")`` as a tuple
SYSTEMS = Registry([LigeroSystem()] + [SnarkjsSystem(n) for n in sj.SYSTEMS], fallback=sj.SYSTEMS[0])
