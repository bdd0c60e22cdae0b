"""``zk.prove`` / ``zk.verify``: one entry point for every proof system.

``system="ligero"`` (the default) is the native transparent prover. It needs no
setup file and no Node.js. ``"groth16"`` and ``"plonk"`` go through snarkjs.
"""
from __future__ import annotations

from typing import Sequence

from . import ligero
from . import snarkjs as sj
from .ligero import LigeroProof

__all__ = ["SYSTEMS", "prove", "verify"]

SYSTEMS = ("ligero",) + tuple(sj.SYSTEMS)


def prove(circuit, wit, system: str = "ligero", **options):
    """Prove ``wit`` for ``circuit`` with ``system`` (``"ligero"``, ``"groth16"`` or ``"plonk"``).

    Options go to :func:`ligero.prove` (``params``, ``target_bits``, ``rng``, ``log``) or to
    snarkjs (``ptau_file``, ``log``).
    """
    if system == "ligero":
        return ligero.prove(circuit, wit, **options)
    if system in sj.SYSTEMS:
        return sj.prove(circuit, wit, system=system, **options)
    raise ValueError(f"zk.prove: unknown proof system {system!r}; choose one of {list(SYSTEMS)}")


def verify(proof, circuit=None, public: Sequence[int] | None = None) -> bool:
    """True when ``proof`` is valid; a Ligero proof needs the ``circuit`` it claims to prove.

    ``public`` (the statement's values, as ``wit.public``) must equal the proof's public values.
    A snarkjs proof carries its own verification key (which binds its circuit), so ``circuit`` is
    not needed for it.
    """
    if isinstance(proof, LigeroProof):
        if circuit is None:
            raise TypeError("zk.verify: a Ligero proof is checked against its circuit: zk.verify(proof, circuit, public)")
        return ligero.verify(proof, circuit, public)
    if public is not None and [str(int(v)) for v in public] != list(proof.public):
        return False
    return sj.verify(proof)
