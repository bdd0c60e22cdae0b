"""The proof-system interface: what one :class:`ProofSystem` provides (:data:`MEMBERS`).

``zk.prove``, ``zk.verify`` and ``zk.check``, ``circuitgrad zk prove|verify``, the bundles and the
private runs all go through this interface: a new proof system is one more implementation in the
registry (:mod:`.registry`), not one more branch in each of them.

Trust: :meth:`ProofSystem.load` reads untrusted files with validation (no larger than an honest proof
of the circuit the verifier compiled, where the system can say), and :meth:`ProofSystem.check`
derives what it checks against (the statement, the keys) from the verifier's circuit and options,
never from the proof. :meth:`ProofSystem.verifier_keys` takes only keys the verifier names or this
machine made.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

from circuitgrad.types import Fixed

from ..circuits.field import Field

__all__ = ["ProofSystem", "MEMBERS"]

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
