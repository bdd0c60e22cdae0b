"""Sparse matrices of a constraint system, stored compactly: CSR rows, 4-byte wires and coefficient codes.

A row of ``A``, ``B``, ``C`` or ``L`` is a short linear combination of wires whose coefficients are
small signed integers drawn from a few distinct values (``±1``, powers of two, rounded constants). So a
matrix keeps each term as its wire (``int32``) and the *code* of its coefficient (``uint16``, or
``uint32`` past 65 536 distinct values) into a ``palette`` of the distinct coefficients::

    row i:  Σ_e palette[codes[e]] · w[wires[e]]      e in ptr[i] … ptr[i+1]

6 bytes a term against 16 for ``int64`` wires and coefficients, and 4 bytes a row (``int32`` row
pointers while the terms number below 2^31). Rows are canonical: each row's terms
sorted by wire, one term per wire (repeated wires summed, as the ``.r1cs`` format requires), no zero
coefficients.

:class:`Assembler` builds a matrix from blocks of consecutive new rows, canonicalising each block as it
comes (a block's rows are its own, so this is the same matrix as sorting everything at the end), so that
building a circuit never holds more than the compact terms and one block in ``int64``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuitgrad import allocator

__all__ = ["Matrix", "Assembler", "canonical"]

#: the widest wire index a matrix stores (``int32``)
MAX_WIRES = 2 ** 31 - 1


def _ptr_dtype(terms: int) -> type:
    return np.int32 if terms <= MAX_WIRES else np.int64


def _code_dtype(n: int) -> type:
    return np.uint16 if n <= 1 << 16 else np.uint32


def canonical(rows: np.ndarray, wires: np.ndarray, coeffs: np.ndarray, n_rows: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(counts per row, wires, coeffs)`` of COO terms in canonical order: by row, then wire; repeated
    ``(row, wire)`` pairs summed; zero coefficients dropped."""
    order = np.lexsort((wires, rows))
    rows, wires, coeffs = rows[order], wires[order], coeffs[order]
    if len(rows):
        first = np.ones(len(rows), dtype=bool)
        first[1:] = (rows[1:] != rows[:-1]) | (wires[1:] != wires[:-1])
        if not first.all():
            starts = np.flatnonzero(first)
            rows, wires, coeffs = rows[starts], wires[starts], np.add.reduceat(coeffs, starts)
        keep = coeffs != 0
        if not keep.all():
            rows, wires, coeffs = rows[keep], wires[keep], coeffs[keep]
    return np.bincount(rows, minlength=n_rows), wires, coeffs


@dataclass(eq=False)
class Matrix:
    """One of ``A``, ``B``, ``C``, ``L`` in CSR form: the terms of row ``i`` are ``ptr[i]:ptr[i+1]``, term ``e``
    is ``palette[codes[e]]·w[wires[e]]``."""
    ptr: np.ndarray          # rows + 1 (int32 below 2^31 terms, else int64)
    wires: np.ndarray        # int32
    codes: np.ndarray        # uint16 or uint32 into palette
    palette: np.ndarray      # the distinct coefficients (int64, or Python ints for wide fields)

    @classmethod
    def from_coo(cls, rows: np.ndarray, wires: np.ndarray, coeffs: np.ndarray, n_rows: int) -> "Matrix":
        """The canonical matrix of COO terms (see the module docstring): one block of an :class:`Assembler`."""
        a = Assembler()
        a.add([(rows, wires, coeffs)], 0, n_rows)
        return a.finish()

    @property
    def coeffs(self) -> np.ndarray:
        """Every term's coefficient (a new array; :meth:`coeffs_of` for a range of terms)."""
        return self.palette[self.codes]

    @coeffs.setter
    def coeffs(self, values: np.ndarray) -> None:
        values = np.asarray(values)
        if values.shape != self.wires.shape:
            raise ValueError(f"Matrix.coeffs: {values.shape[0] if values.ndim else 0} coefficients for "
                             f"{len(self.wires)} terms")
        self.palette, codes = np.unique(values, return_inverse=True)
        self.codes = codes.reshape(-1).astype(_code_dtype(len(self.palette)))

    def coeffs_of(self, lo: int, hi: int) -> np.ndarray:
        """The coefficients of terms ``lo … hi``."""
        return self.palette[self.codes[lo:hi]]

    @property
    def n_rows(self) -> int:
        return len(self.ptr) - 1

    @property
    def nbytes(self) -> int:
        return self.ptr.nbytes + self.wires.nbytes + self.codes.nbytes + self.palette.nbytes

    def evaluate(self, w: np.ndarray, p: int, rows: np.ndarray | None = None) -> np.ndarray:
        """``⟨M_i, w⟩ mod p`` for the given rows (all rows by default), as Python ints."""
        if rows is None:
            idx = np.arange(len(self.wires))
            owner = np.repeat(np.arange(self.n_rows), np.diff(self.ptr))
            n = self.n_rows
        else:
            lens = self.ptr[rows + 1] - self.ptr[rows]
            starts = np.repeat(self.ptr[rows] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
            idx = starts + np.arange(int(lens.sum()))
            owner = np.repeat(np.arange(len(rows)), lens)
            n = len(rows)
        prod = self.palette[self.codes[idx]].astype(object) * np.asarray(w, dtype=object)[self.wires[idx]]
        out = np.zeros(n, dtype=object)
        np.add.at(out, owner, prod)
        return out % p


def _wires(wires: np.ndarray) -> np.ndarray:
    wires = np.asarray(wires)
    if len(wires) and int(wires.max()) > MAX_WIRES:
        raise ValueError(f"a constraint matrix stores wires below 2^31; wire {int(wires.max())} is beyond")
    return wires.astype(np.int32)


#: bytes of copied blocks between two returns of the heap's free pages (:func:`circuitgrad.allocator.trim`)
_TRIM_BYTES = 256 << 20


class Assembler:
    """A :class:`Matrix` built from blocks of new rows: :meth:`add` canonicalises a block and keeps it compact;
    :meth:`finish` joins the blocks (in the order given, default as added) into one matrix."""

    def __init__(self):
        self.blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []    # (counts, wires, codes)
        self.codes: dict = {}                       # coefficient → code
        self.rows = 0
        self.terms = 0

    def add(self, parts: list, first_row: int, m: int) -> None:
        """Rows ``first_row … first_row + m`` (the next ones): COO ``parts`` ``(rows, wires, coeffs)`` with
        rows in that range."""
        if first_row != self.rows:
            raise ValueError(f"Assembler.add: rows {first_row}… after {self.rows} rows")
        if parts:
            rows, wires, coeffs = (np.concatenate([np.asarray(p[i]) for p in parts]) for i in range(3))
            counts, wires, coeffs = canonical(rows.astype(np.int64) - first_row, wires.astype(np.int64),
                                              coeffs, m)
        else:
            counts, wires, coeffs = np.zeros(m, dtype=np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        values, inverse = np.unique(coeffs, return_inverse=True)
        table = np.array([self.codes.setdefault(v if isinstance(v, int) else v.item(), len(self.codes))
                          for v in values], dtype=np.uint32)
        self.blocks.append((counts.astype(np.int32), _wires(wires), table[inverse.reshape(-1)]))
        self.rows += m
        self.terms += len(wires)

    def finish(self, order: list[int] | None = None) -> Matrix:
        """The matrix of the blocks, in ``order`` (block indices; default as added). The blocks are released
        as they are copied."""
        order = range(len(self.blocks)) if order is None else order
        ptr = np.zeros(self.rows + 1, dtype=_ptr_dtype(self.terms))
        wires = np.empty(self.terms, dtype=np.int32)
        dtype = _code_dtype(len(self.codes))
        codes = np.empty(self.terms, dtype=dtype)
        row = term = freed = 0
        for i in order:
            counts, w, c = self.blocks[i]
            self.blocks[i] = None
            freed += counts.nbytes + w.nbytes + c.nbytes
            if freed >= _TRIM_BYTES:            # the copied blocks' pages back to the kernel as we go
                allocator.trim()
                freed = 0
            np.cumsum(counts, out=ptr[row + 1:row + 1 + len(counts)])
            ptr[row + 1:row + 1 + len(counts)] += term
            wires[term:term + len(w)] = w
            codes[term:term + len(c)] = c
            row, term = row + len(counts), term + len(w)
        if row != self.rows:
            raise ValueError(f"Assembler.finish: the order covers {row} of {self.rows} rows")
        palette = np.array(list(self.codes), dtype=object)
        if all(-(1 << 62) < v < 1 << 62 for v in palette):
            palette = palette.astype(np.int64)
        self.blocks, self.codes = [], {}
        return Matrix(ptr, wires, codes, palette)
