"""An R1CS prepared for the native prover: coefficients in ``F_p``, transposes, the digest
(``statement.r1cs_digest``), and the index of its contractions (:mod:`.contraction`).

The prover needs ``A·z``, ``B·z`` and ``C·z``. The verifier and the prover both
need the transposed product ``Aᵀ·r_a + Bᵀ·r_b + Cᵀ·r_c + Lᵀ·r_v`` for every
repetition of the linear test: one product by the stacked matrix, the
repetitions side by side. Both run as segment sums over CSR orders. The
transposed order is computed once per circuit, and so is the digest that binds
a proof to its circuit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuitgrad import allocator

from ...circuits import gf, tables
from ...circuits.r1cs import R1CS
from ...circuits.statement import r1cs_digest
from . import contraction

__all__ = ["Prepared", "prepare"]


@dataclass
class _Mat:
    """One matrix of the circuit as the prover reads it: the R1CS's own arrays (shared, not copied), and its
    palette of coefficients reduced into ``[0, p)``."""
    ptr: np.ndarray          # row CSR
    wires: np.ndarray        # int32
    codes: np.ndarray        # into palette
    palette: np.ndarray      # the distinct coefficients, in [0, p)

    def coeffs(self, lo: int, hi: int) -> np.ndarray:
        """The coefficients of terms ``lo … hi``, in ``[0, p)``."""
        return self.palette[self.codes[lo:hi]]

    def rows(self, z: np.ndarray, a: int, b: int) -> np.ndarray:
        """Rows ``a … b`` of ``M·z`` (``z`` in ``[0, p)``)."""
        if (jit := gf.compiled()) is not None:
            return jit.csr_rows(self.ptr, self.wires, self.codes, self.palette, z, a, b)
        lo, hi = int(self.ptr[a]), int(self.ptr[b])
        return gf.segment_sum(gf.mul(self.coeffs(lo, hi), z[self.wires[lo:hi]]), self.ptr[a:b + 1] - lo)

    def apply(self, z: np.ndarray) -> np.ndarray:
        """``M·z`` (one value per row)."""
        return self.rows(z, 0, len(self.ptr) - 1)


#: terms handled at once by :meth:`Transposed.apply_outer` (about ten temporaries of this length: 20 MiB)
_OUTER_BLOCK = 1 << 18


@dataclass
class Transposed:
    """``Sᵀ`` for the matrices ``A``, ``B``, ``C`` (and ``L`` with lookups) stacked, their rows numbered end to end:
    the column CSR (ordered by wire) that the linear test's coefficients on ``z`` need."""
    ptr: np.ndarray          # (n_wires + 1)
    rows: np.ndarray         # the stacked row of every entry, in wire order
    coeffs: np.ndarray       # in [0, p), in wire order
    n_rows: int              # rows of the stack

    def apply_outer(self, parts: list[tuple[int, int]], betas: np.ndarray, gammas: np.ndarray,
                    width: int = 0) -> np.ndarray:
        """``Sᵀ·r`` for each of ``σ`` vectors ``r`` that are rank one by blocks, without building them: block ``j``
        starts at stacked row ``parts[j][0]`` and its row ``i`` is ``betas[s, parts[j][1] + i // k]·gammas[s, i % k]``
        (``k = gammas.shape[1]``). Shape ``(σ, max(n_wires, width))``, zero past the wires: repetition ``s`` is
        ``out[s]``."""
        nw, (sg, k) = len(self.ptr) - 1, gammas.shape
        starts = np.array([a for a, _ in parts], dtype=np.int64)
        first = np.array([b for _, b in parts], dtype=np.int64)
        out = np.zeros((sg, max(nw, width)), dtype=np.int64)
        if (jit := gf.compiled()) is not None:
            return jit.apply_outer(self.ptr, self.rows, self.coeffs, starts, first, betas, gammas, out)
        w = 0
        while w < nw:
            end = int(np.searchsorted(self.ptr, self.ptr[w] + _OUTER_BLOCK, side="right")) - 1
            end = min(nw, max(end, w + 1))
            lo, hi = int(self.ptr[w]), int(self.ptr[end])
            rows = self.rows[lo:hi]
            j = np.searchsorted(starts, rows, side="right") - 1
            local = rows - starts[j]
            bi, gi = first[j] + local // k, local % k
            ptr = self.ptr[w:end + 1] - lo
            for s in range(sg):
                r = gf.mul(betas[s, bi], gammas[s, gi])
                out[s, w:end] = gf.segment_sum(gf.mul(r, self.coeffs[lo:hi]), ptr)
            w = end
        return out


@dataclass
class Prepared:
    r1cs: R1CS
    digest: bytes
    mats: tuple
    L: _Mat | None = None            # lookup rows (see :mod:`.lookup`)
    contraction: object = None       # contraction.Index of the circuit's contractions (see :mod:`.contraction`)
    _transposed: Transposed | None = None

    @property
    def transposed(self) -> Transposed:
        """``[A; B; C; L]ᵀ``, made on first use (the NumPy path's :meth:`apply_outer`)."""
        if self._transposed is None:
            self._transposed = _transposed(self.mats + ((self.L,) if self.L else ()), self.r1cs.n_wires)
        return self._transposed

    def apply_outer(self, parts: list[tuple[int, int]], betas: np.ndarray, gammas: np.ndarray,
                    width: int = 0) -> np.ndarray:
        """``Sᵀ·r`` for the stacked ``S = [A; B; C; L]`` and ``σ`` vectors ``r`` rank one by blocks, one block
        a matrix (see :meth:`Transposed.apply_outer`). The compiled kernels scatter each matrix's terms in
        row order (no transposed copy: 20 bytes a term less); the NumPy path sums the transposed matrix's
        segments. The same values either way."""
        jit = gf.compiled()
        if jit is None or self._transposed is not None:
            return self.transposed.apply_outer(parts, betas, gammas, width)
        mats = self.mats + ((self.L,) if self.L else ())
        if [a for a, _ in parts] != list(np.cumsum([0] + [len(m.ptr) - 1 for m in mats[:-1]])):
            raise ValueError("Prepared.apply_outer: one block a matrix, starting at its first stacked row")
        out = np.zeros((betas.shape[0], max(self.r1cs.n_wires, width)), dtype=np.int64)
        for m, (_, first) in zip(mats, parts):
            jit.scatter_outer(m.ptr, m.wires, m.codes, m.palette, first, betas, gammas, out)
        return out

    def failing(self, z: np.ndarray, block: int = 1 << 20) -> tuple[np.ndarray, np.ndarray]:
        """The constraint rows with ``(A·z)∘(B·z) ≠ C·z`` and the lookup rows whose value is outside its table,
        for ``z`` in ``[0, p)``: in this field's vectorised arithmetic, ``block`` rows at a time (what the
        prover checks before proving; :meth:`~circuitgrad.backends.zk.circuits.r1cs.R1CS.failing` is the same in Python integers)."""
        bad = []
        for lo in range(0, self.n_constraints, block):
            hi = min(self.n_constraints, lo + block)
            a, b, c = (m.rows(z, lo, hi) for m in self.mats)
            bad.append(lo + np.flatnonzero(gf.sub(gf.mul(a, b), c)))
        out = [np.concatenate(bad) if bad else np.zeros(0, dtype=np.int64)]
        bad = []
        if self.L is not None:
            for lo in range(0, self.n_lookups, block):
                hi = min(self.n_lookups, lo + block)
                bad.append(lo + np.flatnonzero(tables.outside(self.r1cs.lookup_keys(lo, hi), self.L.rows(z, lo, hi),
                                                              self.r1cs.function_tables)))
        out.append(np.concatenate(bad) if bad else np.zeros(0, dtype=np.int64))
        return out[0], out[1]

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


def _mat(m) -> _Mat:
    return _Mat(m.ptr, m.wires, m.codes, gf.reduce(m.palette))


#: terms sorted by wire at once while the transposed matrices are built
_SORT_BLOCK = 1 << 20


def _transposed(mats, n_wires: int) -> Transposed:
    """The column CSR of the matrices stacked (rows numbered end to end), by a counting sort on the wires a block
    of terms at a time (stable: by wire, then in stacked order), so that nothing of the size of all the terms is
    made but the result: each term's row (4 bytes where it fits) and coefficient in ``[0, p)``."""
    counts = np.zeros(n_wires, dtype=np.int64)
    for m in mats:
        counts += np.bincount(m.wires, minlength=n_wires)
    ptr = np.zeros(n_wires + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    del counts
    n_rows = sum(len(m.ptr) - 1 for m in mats)
    total = int(ptr[-1])
    rows = np.empty(total, dtype=np.int32 if n_rows < 2 ** 31 else np.int64)
    coeffs = np.empty(total, dtype=np.int64)
    cursor = ptr[:-1].copy()
    at = 0
    for m in mats:
        nt = len(m.wires)
        for lo in range(0, nt, _SORT_BLOCK):
            hi = min(nt, lo + _SORT_BLOCK)
            w = np.asarray(m.wires[lo:hi], dtype=np.int64)
            order = np.argsort(w, kind="stable")
            ws = w[order]
            first = np.ones(len(ws), dtype=bool)
            first[1:] = ws[1:] != ws[:-1]
            starts = np.flatnonzero(first)
            rank = np.arange(len(ws)) - np.repeat(starts, np.diff(np.append(starts, len(ws))))
            dest = cursor[ws] + rank
            term_rows = np.searchsorted(m.ptr, np.arange(lo, hi), side="right") - 1 + at
            rows[dest] = term_rows[order]
            coeffs[dest] = m.coeffs(lo, hi)[order]
            cursor[ws[first]] += np.diff(np.append(starts, len(ws)))
        at += len(m.ptr) - 1
    return Transposed(ptr, rows, coeffs, n_rows)


def prepare(r: R1CS) -> Prepared:
    """The prepared circuit (cached on the R1CS object)."""
    if r.counted:
        raise ValueError("ligero: this circuit was counted, not built (zk.compile(..., count_only=True)): it has "
                         "no constraint matrices to prove; compile it without count_only")
    cached = getattr(r, "_ligero_prepared", None)
    if cached is None:
        mats = tuple(_mat(m) for m in (r.A, r.B, r.C))
        L = None if r.L is None else _mat(r.L)
        cached = Prepared(r, r1cs_digest(r), mats, L, contraction.index(r.contractions) if r.contractions else None)
        r._ligero_prepared = cached
        allocator.trim(allocator.TRIM_AT_LEAST)     # the digest's and index's temporaries (1.4 GiB on tinygpt)
    return cached
