"""``zk.prove`` / ``zk.verify`` / ``zk.check``: one entry point for every proof system.

Each is a :class:`~.interface.ProofSystem` in the registry ``SYSTEMS`` (:mod:`.registry`); these
functions only pick it (by name to prove, by the proof's type to verify).
"""
from __future__ import annotations

from typing import Sequence

from .registry import DEFAULT, SYSTEMS, for_proof

__all__ = ["prove", "verify", "check"]


def prove(circuit, wit, system: str = DEFAULT, **options):
    """Prove ``wit`` for ``circuit`` with ``system`` (``"ligero"``, ``"groth16"`` or ``"plonk"``).

    Options go to :func:`ligero.prove` (``params``, ``target_bits``, ``rng``, ``log``, and ``soundness``:
    ``"longfellow"``, the default, or the more conservative ``"classic"``) or to snarkjs
    (``ptau_file``, ``keys`` from :func:`snarkjs.setup`, ``log``).
    """
    impl = SYSTEMS.get(system) if isinstance(system, str) else None
    if impl is None:
        raise ValueError(f"zk.prove: unknown proof system {system!r}; choose one of {list(SYSTEMS)}")
    return impl.prove(circuit, wit, **options)


def verify(proof, circuit=None, public: Sequence[int] | None = None, soundness: str | None = None, **keys) -> bool:
    """True when ``proof`` proves ``circuit`` (which the verifier compiled itself) for ``public``.

    ``public`` (the statement's values, as ``wit.public``; default the proof's own) must be canonical
    field elements, ``[0, p)``, equal to the proof's. Nothing the proof carries is trusted: a Ligero
    proof is checked against the circuit's digest and statement; a snarkjs proof against a verification
    key derived from the circuit (``keys``: ``vkey=``, ``zkey=``, ``ptau_file=``; see
    :func:`snarkjs.verification_key`), never the key inside the proof. ``soundness`` (Ligero only) is the
    analysis the verifier requires, ``"longfellow"`` (the default) or ``"classic"``: a proof whose
    parameters claim another one is refused.
    """
    if circuit is None or not hasattr(circuit, "r1cs"):
        raise TypeError("zk.verify: a proof is checked against the circuit the verifier compiled itself: "
                        "zk.verify(proof, zk.compile(step), public)")
    return for_proof(proof).verify(proof, circuit, public, soundness, **keys)


def check(proof, circuit, public: Sequence[int] | None = None, soundness: str | None = None, **keys) -> None:
    """Like :func:`verify`, but raise :class:`Reject` naming the first failed check."""
    for_proof(proof).check(proof, circuit, public, soundness, **keys)
