"""Prime fields for circuits.

Circuits are built over the integers with small signed coefficients and
reduced into the field once: when constraints are checked and when files are
written. :class:`Field` only knows its prime. :meth:`Field.galois` gives the
matching ``galois.GF`` for users who want field arithmetic on arrays. It is
built with ``primitive_element=`` and ``verify=False``; otherwise ``galois``
spends minutes factoring ``p − 1`` for a 254-bit prime.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["Field", "BN254", "LIGERO51", "field"]


@dataclass(frozen=True)
class Field:
    """The prime field ``F_p``; ``generator`` is a multiplicative generator (for galois)."""
    p: int
    name: str
    generator: int | None = None

    @property
    def n8(self) -> int:
        """Bytes per element in the iden3 binary formats (a multiple of 8)."""
        return ((self.p.bit_length() + 63) // 64) * 8

    @property
    def bits(self) -> int:
        return self.p.bit_length()

    def reduce(self, values) -> np.ndarray:
        """Signed integers (int64 or object arrays) → canonical representatives in ``[0, p)`` (object array)."""
        v = np.asarray(values, dtype=object)
        return v % self.p

    def galois(self):
        """The ``galois.GF(p)`` class of this field (built quickly, cached)."""
        return _galois(self.p, self.generator)

    def __str__(self) -> str:
        return self.name


@lru_cache(maxsize=None)
def _galois(p: int, generator: int | None):
    from circuitgrad.extras import require
    galois = require("galois", "field arithmetic on arrays (Field.galois)", "galois", "zk")
    if generator is None:
        return galois.GF(p, verify=False)
    return galois.GF(p, primitive_element=generator, verify=False)


#: the BN254 (alt_bn128) scalar field, used by circom and snarkjs
BN254 = Field(21888242871839275222246405745257275088548364400416034343698204186575808495617, "bn254", 5)


#: the native Ligero prover's field, p = 262139·2^33 + 1 (51 bits, NTTs up to 2^33; see gf.py)
LIGERO51 = Field(262139 * 2 ** 33 + 1, "ligero51", 3)


def field(p: int, name: str | None = None, generator: int | None = None) -> Field:
    """Any prime field; ``zk.compile`` refuses one too small for the program (see ``lower.required_bits``)."""
    if p < 3 or p % 2 == 0:
        raise ValueError(f"field modulus must be an odd prime, got {p}")
    return Field(int(p), name or f"F_{p}", generator)
