"""An R1CS prepared for the native prover: coefficients in ``F_p``, transposes, the digest, and the index of
its contractions (:mod:`.contraction`).

The prover needs ``A·z``, ``B·z`` and ``C·z``. The verifier and the prover both
need the transposed products ``Aᵀ·r``. Both run as segment sums over CSR
orders. The transposed order is computed once per circuit, and so is the
digest that binds a proof to its circuit.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..r1cs import R1CS
from . import contraction, gf

__all__ = ["Prepared", "prepare", "digest"]


@dataclass
class _Mat:
    ptr: np.ndarray          # row CSR
    wires: np.ndarray
    coeffs: np.ndarray       # in [0, p)
    tptr: np.ndarray         # column CSR (order by wire)
    torder: np.ndarray
    trows: np.ndarray
    tcoeffs: np.ndarray      # coeffs[torder], in the column order

    def apply(self, z: np.ndarray) -> np.ndarray:
        """``M·z`` (one value per constraint)."""
        return gf.segment_sum(gf.mul(self.coeffs, z[self.wires]), self.ptr)

    def apply_t(self, r: np.ndarray) -> np.ndarray:
        """``Mᵀ·r`` (one value per wire)."""
        return gf.segment_sum(gf.mul(self.tcoeffs, r[self.trows]), self.tptr)


@dataclass
class Prepared:
    r1cs: R1CS
    digest: bytes
    mats: tuple
    L: _Mat | None = None            # lookup rows (see :mod:`.lookup`)
    contraction: object = None       # contraction.Index of the circuit's contractions (see :mod:`.contraction`)

    @property
    def lookup_table(self) -> int:
        """``|T|``: the entries of the circuit's lookup tables together (0 without lookups)."""
        return self.r1cs.lookup_table_size

    @property
    def contraction_cells(self) -> int:
        """``N``: the cells of each Freivalds vector (0 without contractions)."""
        return self.r1cs.contraction_cells

    @property
    def n_lookups(self) -> int:
        return self.r1cs.n_lookups

    @property
    def n_wires(self) -> int:
        return self.r1cs.n_wires

    @property
    def n_constraints(self) -> int:
        return self.r1cs.n_constraints

    @property
    def n_public(self) -> int:
        return self.r1cs.n_public


def digest(r: R1CS) -> bytes:
    """SHA-256 of the constraint system (sizes, every matrix's CSR arrays, the lookup matrix, limb width and
    every lookup's table if it has lookups, every contraction's wire tensors if it has any); independent of
    the field."""
    h = hashlib.sha256(b"circuitgrad-r1cs-v1")
    h.update(np.array([r.n_wires, r.n_pub_out, r.n_pub_in, r.n_prv_in, r.n_constraints], dtype="<i8").tobytes())
    mats = (r.A, r.B, r.C)
    if r.L is not None:
        h.update(b"lookups")
        h.update(np.array([r.n_lookups, r.table_bits], dtype="<i8").tobytes())
        h.update(np.ascontiguousarray(r.lookup_bits, dtype="<i8").tobytes())     # every lookup's table
        mats += (r.L,)
    for m in mats:
        for arr in (m.ptr, m.wires, m.coeffs):
            h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    if r.contractions:
        h.update(b"contractions")
        h.update(np.array([len(r.contractions)], dtype="<i8").tobytes())
        for c in r.contractions:
            for arr in (c.a, c.b, c.c):
                h.update(np.array(arr.shape, dtype="<i8").tobytes())
                h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    return h.digest()


def _mat(m, n_wires: int) -> _Mat:
    rows = np.repeat(np.arange(len(m.ptr) - 1, dtype=np.int64), np.diff(m.ptr))
    order = np.argsort(m.wires, kind="stable")
    tptr = np.zeros(n_wires + 1, dtype=np.int64)
    np.cumsum(np.bincount(m.wires, minlength=n_wires), out=tptr[1:])
    coeffs = gf.reduce(m.coeffs)
    return _Mat(m.ptr, m.wires.astype(np.int64), coeffs, tptr, order, rows[order], coeffs[order])


def prepare(r: R1CS) -> Prepared:
    """The prepared circuit (cached on the R1CS object)."""
    if r.counted:
        raise ValueError("ligero: this circuit was counted, not built (zk.compile(..., count_only=True)): it has "
                         "no constraint matrices to prove; compile it without count_only")
    cached = getattr(r, "_ligero_prepared", None)
    if cached is None:
        cached = Prepared(r, digest(r), tuple(_mat(m, r.n_wires) for m in (r.A, r.B, r.C)),
                          None if r.L is None else _mat(r.L, r.n_wires),
                          contraction.index(r.contractions) if r.contractions else None)
        r._ligero_prepared = cached
    return cached
