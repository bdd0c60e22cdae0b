"""Rank-1 constraint systems, built in vectorised blocks.

A constraint is ``⟨A_i, w⟩ · ⟨B_i, w⟩ = ⟨C_i, w⟩`` over ``F_p`` with
``w[0] = 1``. :class:`Builder` appends *blocks*: ``m`` constraints of the same
shape at once, each linear combination given as a list of
``(wires[m], coeffs[m])`` terms. Every block carries a tag that names the
program instruction and the gadget it came from. Error reports and the
per-gadget constraint counts use these tags.

Coefficients are small signed integers (``int64``). They are reduced into
the field only when constraints are checked or files are written. Witness
values are signed ``int64`` too: every wire in our gadgets is a range-checked
fixed-point value, a bit, a product of two such values, or a bounded
remainder, so none comes near ``2**63``.

A *combination* (:meth:`Builder.combination`) is a value with no wire of its
own: a linear combination of wires, named by a negative index ``−(k+1)``. Every
row and lookup that names it gets its terms instead (so it costs no wire and no
constraint), a contraction gets a wire for it (:meth:`Builder.materialize`), and
the witness program computes its value at ``W[−(k+1)]`` in an array extended by
``n_combinations`` entries past the wires (:meth:`.circuit.Circuit.witness_raw`).

Wire layout, as circom expects it: ``0`` is the constant 1, then the public
outputs, then the public inputs, then the private inputs, then internal wires.

A system may also carry *lookups* (``range_checks="lookup"``): rows of a
sparse matrix ``L`` whose values ``⟨L_i, w⟩`` must each lie in a table named by the lookup's key
(``lookup_bits``, :mod:`.tables`): a range ``[0, 2^b_i)`` with ``b_i ≤ 22`` (:data:`MAX_TABLE_BITS`), or one
of the circuit's function tables (``function_tables``: the packed pairs ``(x, f(x))`` of a fused elementwise
region, :mod:`.fusion`). A range check splits its value into limbs of the builder's ``table_bits`` and a
top limb of the bits that remain, each looked up in the table of its width.
The native Ligero prover proves them with a logUp
argument (:mod:`~circuitgrad.backends.zk.systems.ligero.lookup`); the ``.r1cs`` format has no lookups, so such a
system cannot go to snarkjs.

A system may also carry *contractions* (``contractions="argument"``): triples
of wire tensors ``(A, B, C)`` of shapes ``(L, m, n)``, ``(L, n, p)``, ``(L, m, p)``
with ``C[l] = A[l]·B[l]`` exactly. The native prover proves them with a
randomized check whose cost is linear in the three tensors
(:mod:`~circuitgrad.backends.zk.systems.ligero.contraction`), instead of one constraint per
multiply-accumulate; the ``.r1cs`` format has no challenges, so such a system
cannot go to snarkjs either (``contractions="mac"`` keeps one constraint per
multiply-accumulate).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from . import tables
from .field import Field
from .sparse import Assembler, Matrix
from .tables import FUNCTION_TABLE, MAX_TABLE_BITS

__all__ = ["Builder", "R1CS", "Term", "Contraction", "UnsatisfiedConstraint", "TABLE_BITS", "MAX_TABLE_BITS",
           "RANGE_CHECKS", "CONTRACTIONS", "COMBINATION_TERMS"]

#: the default limb width of range checks by lookups (``[0, 2^TABLE_BITS)``); circuits choose theirs
TABLE_BITS = 8
#: how gadgets prove that a value lies in a range: bit decompositions, or lookups into the table
RANGE_CHECKS = ("bits", "lookup")
#: how a contraction of two witness tensors is proved: a randomized argument of the native prover, or one
#: constraint per multiply-accumulate (plain R1CS)
CONTRACTIONS = ("argument", "mac")

Term = tuple  # (wires: ndarray[int64] or int, coeffs: ndarray[int64] or int)
#: the longest linear combination that :meth:`Builder.combination` keeps without a wire: each row that reads
#: the value carries its terms instead of one
COMBINATION_TERMS = 8


class UnsatisfiedConstraint(ValueError):
    """A witness violates a constraint; the message names the constraint and its origin."""


@dataclass(frozen=True)
class Contraction:
    """``C[l] = A[l]·B[l]`` exactly, for wire tensors ``a (L, m, n)``, ``b (L, n, p)``, ``c (L, m, p)``."""
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    tag: str

    def __post_init__(self):
        (L, m, n), (L2, n2, p), (L3, m3, p3) = self.a.shape, self.b.shape, self.c.shape
        if not (L == L2 == L3 and n == n2 and m == m3 and p == p3):
            raise ValueError(f"Contraction {self.tag}: shapes {self.a.shape} · {self.b.shape} → {self.c.shape} "
                             f"do not compose")

    @property
    def terms(self) -> int:
        """Wire occurrences: ``|A| + |B| + |C|`` (what the argument's work is linear in)."""
        return self.a.size + self.b.size + self.c.size

    @property
    def macs(self) -> int:
        """Multiply-accumulates that one constraint each would cost."""
        L, m, n = self.a.shape
        return L * m * n * self.b.shape[2]

    def failing(self, w: np.ndarray, p: int) -> np.ndarray:
        """Flat indices into ``c`` where ``C ≠ A·B`` (mod ``p``, in exact integers)."""
        w = np.asarray(w)
        A, B = w[self.a], w[self.b]
        big = max(int(np.abs(A).max(initial=0)), 1) * max(int(np.abs(B).max(initial=0)), 1) * self.a.shape[2]
        small = w.dtype == np.int64 and p < 1 << 62              # an int64 array mod p stays int64 (NumPy 2: a
        if small and big < 1 << 62:                               # larger p is an OverflowError, not an upcast)
            want = np.matmul(A, B) % p                             # exact in int64
        else:
            A, B = A.astype(object), B.astype(object)
            want = np.stack([A[i].dot(B[i]) for i in range(A.shape[0])]) % p
        got = np.asarray(w[self.c], dtype=np.int64 if small else object) % p
        return np.flatnonzero((want - got).reshape(-1) % p != 0)


@dataclass
class R1CS:
    """A finished constraint system (see the module docstring for the wire layout)."""
    field: Field
    n_wires: int
    n_pub_out: int
    n_pub_in: int
    n_prv_in: int
    A: Matrix
    B: Matrix
    C: Matrix
    tags: list[str]                     # one per block
    block_rows: np.ndarray              # first row of each block (ascending) + total
    wire_names: list[tuple[int, int, str]] = field(default_factory=list)   # (first wire, count, name)
    L: Matrix | None = None            # lookup rows: each ⟨L_i, w⟩ must lie in the table lookup_bits[i] names
    lookup_tags: list[str] = field(default_factory=list)
    lookup_block_rows: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    contractions: tuple = ()            # Contraction records, proved by the native prover's argument
    table_bits: int = TABLE_BITS        # the limb width the range checks were split by
    lookup_block_bits: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))   # table key per block
    #: a circuit counted, not built (``Builder(count_only=True)``): sizes and tags only, no matrices or witness
    counted: dict | None = None
    #: wires per gadget kind: each gadget's unnamed wires (see :meth:`Builder.alloc`); named ones under ``"(named)"``
    wires_by_gadget: dict = field(default_factory=dict)
    #: function tables (key ``FUNCTION_TABLE + j``): sorted distinct packed pairs, and what each one computes
    function_tables: tuple = ()
    function_names: tuple = ()

    @property
    def nonzeros(self) -> int:
        """Nonzero coefficients of ``A``, ``B`` and ``C`` together (a counted circuit's count is of the terms
        before a row's repeated wires are merged: an upper bound, within 3% on the benchmark circuits, as a sum
        substituted into a row that also reads one of its terms repeats that wire)."""
        return self.counted["nonzeros"] if self.counted else sum(len(M.wires) for M in (self.A, self.B, self.C))

    @functools.cached_property
    def lookup_bits(self) -> np.ndarray:
        """Each lookup's table key (from its block's): a range width, or a function table's key (:mod:`.tables`)."""
        return np.repeat(self.lookup_block_bits, np.diff(self.lookup_block_rows))

    def lookup_keys(self, lo: int, hi: int) -> np.ndarray:
        """The table keys of lookups ``lo … hi``, from their blocks' (what :attr:`lookup_bits` holds for every
        lookup, without that array: the prover and the digest read it a block of rows at a time)."""
        if hi <= lo:
            return np.zeros(0, dtype=np.int64)
        rows = np.asarray(self.lookup_block_rows, dtype=np.int64)
        first = int(np.searchsorted(rows, lo, side="right")) - 1
        last = int(np.searchsorted(rows, hi, side="left"))
        return np.repeat(np.asarray(self.lookup_block_bits, dtype=np.int64)[first:last],
                         np.diff(np.clip(rows[first:last + 1], lo, hi)))

    @property
    def lookup_tables(self) -> tuple[int, ...]:
        """The keys of the lookup tables, ascending (``()`` without lookups): range widths, then function tables."""
        return tuple(int(b) for b in np.unique(self.lookup_block_bits)) if self.n_lookups else ()

    @property
    def lookup_table_size(self) -> int:
        """The entries of every lookup table together (``2^b`` for a range): what the logUp argument commits
        multiplicities for."""
        return sum(tables.size(b, self.function_tables) for b in self.lookup_tables)

    @property
    def contraction_cells(self) -> int:
        """``N = Σ L·n`` over the contractions: the cells of each Freivalds vector (0 without any)."""
        return sum(c.a.shape[0] * c.a.shape[2] for c in self.contractions)

    @property
    def n_contraction_terms(self) -> int:
        """``Σ |A| + |B| + |C|`` over the contractions (0 without any)."""
        return sum(c.terms for c in self.contractions)

    def failing_contractions(self, w: np.ndarray) -> list[tuple[int, int]]:
        """``(contraction, flat index into its C)`` for every entry with ``C ≠ A·B``."""
        return [(i, int(j)) for i, c in enumerate(self.contractions) for j in c.failing(w, self.field.p)]

    @property
    def n_lookups(self) -> int:
        return 0 if self.L is None else int(self.lookup_block_rows[-1])

    def lookup_tag_of(self, row: int) -> str:
        """The instruction and gadget that produced lookup ``row``."""
        return self.lookup_tags[int(np.searchsorted(self.lookup_block_rows, row, side="right")) - 1]

    def failing_lookups(self, w: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """The lookup rows (of ``rows``, default all) whose value is outside the table."""
        if self.L is None:
            return np.zeros(0, dtype=np.int64)
        v = self.L.evaluate(w, self.field.p, rows)
        bits = self.lookup_bits if rows is None else self.lookup_bits[np.asarray(rows)]
        bad = np.flatnonzero(tables.outside(bits, v, self.function_tables))
        return bad if rows is None else np.asarray(rows)[bad]

    def lookup_rows_of_wire(self, wire: int) -> np.ndarray:
        """Every lookup in which ``wire`` appears."""
        if self.L is None:
            return np.zeros(0, dtype=np.int64)
        hit = np.flatnonzero(self.L.wires == wire)
        return np.unique(np.searchsorted(self.L.ptr, hit, side="right") - 1)

    @property
    def n_constraints(self) -> int:
        return int(self.block_rows[-1])

    @property
    def n_public(self) -> int:
        return self.n_pub_out + self.n_pub_in

    def tag_of(self, row: int) -> str:
        """The instruction and gadget that produced constraint ``row``."""
        return self.tags[int(np.searchsorted(self.block_rows, row, side="right")) - 1]

    def failing(self, w: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """The rows (of ``rows``, default all) that ``w`` does not satisfy."""
        p = self.field.p
        a, b, c = (M.evaluate(w, p, rows) for M in (self.A, self.B, self.C))
        bad = np.flatnonzero((a * b - c) % p != 0)
        return bad if rows is None else np.asarray(rows)[bad]

    def check(self, w: np.ndarray) -> bool:
        """True when ``w`` (with ``w[0] = 1``) satisfies every constraint."""
        return (len(w) == self.n_wires and int(w[0]) % self.field.p == 1 and len(self.failing(w)) == 0
                and len(self.failing_lookups(w)) == 0 and not self.failing_contractions(w))

    def assert_satisfied(self, w: np.ndarray,
                         failing: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        """Raise :class:`UnsatisfiedConstraint` naming the first failing constraint and its origin. ``failing``:
        finds the failing constraint rows and lookup rows of a witness of the right length in the caller's own
        arithmetic (the native prover's field, a block of rows at a time); by default :meth:`failing` and
        :meth:`failing_lookups`, in Python integers."""
        if len(w) != self.n_wires:
            raise UnsatisfiedConstraint(f"witness has {len(w)} values, the circuit has {self.n_wires} wires")
        if int(w[0]) % self.field.p != 1:
            raise UnsatisfiedConstraint(f"witness value 0 must be 1 (the constant wire), got {w[0]}")
        found = None if failing is None else failing(w)
        bad = self.failing(w) if found is None else found[0]
        if len(bad):
            r = int(bad[0])
            raise UnsatisfiedConstraint(f"constraint {r} of {self.n_constraints} is not satisfied "
                                        f"({len(bad)} failing in all); it comes from {self.tag_of(r)}")
        bad = self.failing_lookups(w) if found is None else found[1]
        if len(bad):
            r = int(bad[0])
            raise UnsatisfiedConstraint(f"lookup {r} of {self.n_lookups} is outside its table "
                                        f"{tables.describe(int(self.lookup_bits[r]), self.function_tables)} "
                                        f"({len(bad)} failing in all); it comes from {self.lookup_tag_of(r)}")
        bad = self.failing_contractions(w)
        if bad:
            i, j = bad[0]
            raise UnsatisfiedConstraint(f"contraction {i} of {len(self.contractions)} ({self.contractions[i].tag}): "
                                        f"entry {j} of C is not the product A·B ({len(bad)} failing in all)")

    def rows_of_wire(self, wire: int) -> np.ndarray:
        """Every constraint in which ``wire`` appears (in A, B or C)."""
        rows = []
        for M in (self.A, self.B, self.C):
            hit = np.flatnonzero(M.wires == wire)
            rows.append(np.searchsorted(M.ptr, hit, side="right") - 1)
        return np.unique(np.concatenate(rows))

    def unconstrained_wires(self) -> np.ndarray:
        """Lint: wires that appear in no constraint (must be empty for a sound circuit)."""
        seen = np.zeros(self.n_wires, dtype=bool)
        for M in (self.A, self.B, self.C) + ((self.L,) if self.L is not None else ()):
            seen[M.wires[M.coeffs % self.field.p != 0] if M.coeffs.dtype == object else M.wires[M.coeffs != 0]] = True
        for c in self.contractions:
            for x in (c.a, c.b, c.c):
                seen[x.reshape(-1)] = True
        return np.flatnonzero(~seen)

    def counts_by_gadget(self, lookups: bool = False) -> dict[str, int]:
        """Number of constraints (or with ``lookups``, of lookups) per gadget kind (the tag after the last ':')."""
        out: dict[str, int] = {}
        tags, rows = (self.lookup_tags, self.lookup_block_rows) if lookups else (self.tags, self.block_rows)
        sizes = np.diff(rows)
        for t, n in zip(tags, sizes):
            k = t.rsplit(":", 1)[-1]
            out[k] = out.get(k, 0) + int(n)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def wire_name(self, w: int) -> str:
        for start, n, name in self.wire_names:
            if start <= w < start + n:
                return name if n == 1 else f"{name}[{w - start}]"
        return "one" if w == 0 else f"w{w}"


class Builder:
    """Accumulates wires, constraint blocks and the witness program that fills the wires."""

    def __init__(self, field: Field, range_checks: str = "bits", contractions: str = "mac",
                 table_bits: int = TABLE_BITS, count_only: bool = False, witness: bool = True):
        if range_checks not in RANGE_CHECKS:
            raise ValueError(f"range_checks must be one of {list(RANGE_CHECKS)}, got {range_checks!r}")
        if contractions not in CONTRACTIONS:
            raise ValueError(f"contractions must be one of {list(CONTRACTIONS)}, got {contractions!r}")
        if not isinstance(table_bits, (int, np.integer)) or isinstance(table_bits, bool) or \
                not 3 <= table_bits <= MAX_TABLE_BITS:
            raise ValueError(f"table_bits must be an integer in [3, {MAX_TABLE_BITS}], got {table_bits!r}")
        self.table_bits = int(table_bits)
        #: count constraints, lookups and nonzeros without building matrices or a witness program (cost models
        #: of circuits too large to hold); the result cannot be checked, proved or exported
        self.count_only = bool(count_only)
        #: keep the witness program (the gadgets' fill functions); a verifier needs only the matrices
        self.witness = bool(witness) and not self.count_only
        self.nonzeros = 0
        self.lookup_widths: list[int] = []          # table key per lookup block (:mod:`.tables`)
        self.function_tables: list[np.ndarray] = []   # key FUNCTION_TABLE + j
        self.function_names: list[str] = []
        self._function_keys: dict[bytes, int] = {}    # a table's bytes → its key (one table per function)
        self.range_requests: dict[int, int] = {}    # nbits → values range-checked by lookups (for choosing B)
        self.field = field
        self.range_checks = range_checks
        self.contractions = contractions
        self.contraction_records: list[Contraction] = []
        self.lookup_rows = Assembler()             # the lookups' L, a block at a time
        self.lookup_tags: list[str] = []
        self.lookup_block_rows: list[int] = []
        self.n_lookups = 0
        self.n = 1                                  # wire 0 is the constant 1
        self.rows = 0
        self.matrices = {"A": Assembler(), "B": Assembler(), "C": Assembler()}
        self.tags: list[str] = []
        self.block_rows: list[int] = []
        self.fills: list[tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]] = []
        self.names: list[tuple[int, int, str]] = []
        self.context = "circuit"
        self.wire_kinds: dict[str, int] = {}        # wires per gadget kind (see alloc)
        self._pending = 0                           # unnamed wires not yet given to a gadget kind
        # combinations, CSR: combination k (index −(k+1)) is Σ cw[ptr[k]:ptr[k+1]]·ww[…] (terms kept unless counting)
        self._cptr = _Grow()
        self._cptr.append(np.zeros(1, dtype=np.int64))
        self._cwires, self._ccoeffs, self._creal = _Grow(), _Grow(), _Grow()

    @property
    def n_combinations(self) -> int:
        """Combinations made so far (:meth:`combination`): the witness array extends this far past the wires."""
        return len(self._cptr) - 1

    # ------------------------------------------------------------- wires
    def _attribute(self, kind: str, n: int) -> None:
        if n:
            self.wire_kinds[kind] = self.wire_kinds.get(kind, 0) + n

    def _block(self, kind: str) -> None:
        """The pending unnamed wires belong to the block of ``kind`` just added."""
        self._attribute(kind, self._pending)
        self._pending = 0

    def alloc(self, shape: int | Sequence[int], name: str | None = None) -> np.ndarray:
        """Fresh wires, as an array of the given shape. Unnamed wires count towards the gadget kind of the next
        block (constraints, lookups or a contraction) added, named ones (inputs, outputs, constants) towards
        ``"(named)"`` (:attr:`R1CS.wires_by_gadget`)."""
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        n = int(np.prod(shape, dtype=np.int64))
        w = np.arange(self.n, self.n + n, dtype=np.int64).reshape(shape)
        if name:
            self.names.append((self.n, n, name))
            self._attribute("(named)", n)
        else:
            self._pending += n
        self.n += n
        return w

    def combination(self, terms: Iterable[Term], max_terms: int = COMBINATION_TERMS) -> np.ndarray | None:
        """Values ``Σ terms`` with no wire and no constraint (negative indices, see the module docstring), or
        None where some value would have more than ``max_terms`` terms (combinations in ``terms`` count by
        their own terms). The caller fills their values and checks their range, as for wires."""
        terms = list(terms)
        m = max(np.size(w) for w, _ in terms)
        rows = np.arange(m, dtype=np.int64)
        if self.count_only:                          # lengths only: a term per wire, a combination's per its
            lens = np.zeros(m, dtype=np.int64)
            for w, c in terms:
                w = np.broadcast_to(np.asarray(w, dtype=np.int64).reshape(-1), (m,))
                c = np.broadcast_to(np.asarray(c, dtype=np.int64).reshape(-1), (m,))
                lens += self._term_lengths(w, c)
        else:
            parts = self._expand(_coo(rows, terms, m))
            r, w, c = (np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
                       for i in range(3))
            order = np.argsort(r, kind="stable")
            r, w, c = r[order], w[order], c[order]
            lens = np.bincount(r, minlength=m)
        if m == 0 or lens.max() > max_terms:
            return None
        k = self.n_combinations
        self._cptr.append(self._cptr.last + np.cumsum(lens))
        if not self.count_only:
            self._cwires.append(w)
            self._ccoeffs.append(c)
        self._creal.append(np.full(m, -1, dtype=np.int64))
        return -(k + 1 + np.arange(m, dtype=np.int64))

    def _term_lengths(self, w: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Terms per value of one term ``(w, c)``: 0 for a zero coefficient, a combination's own count, else 1."""
        lens = (c != 0).astype(np.int64)
        neg = np.flatnonzero((w < 0) & (c != 0))
        if len(neg):
            ptr, k = self._cptr.view(), -w[neg] - 1
            lens[neg] = ptr[k + 1] - ptr[k]
        return lens

    def _expand(self, parts: list) -> list:
        """COO parts with every combination's index replaced by its terms (times its coefficient)."""
        out = []
        for r, w, c in parts:
            neg = w < 0
            if not neg.any():
                out.append((r, w, c))
                continue
            if not neg.all():
                out.append((r[~neg], w[~neg], c[~neg]))
            k = -w[neg] - 1
            ptr = self._cptr.view()
            lens = ptr[k + 1] - ptr[k]
            idx = np.repeat(ptr[k] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(int(lens.sum()))
            out.append((np.repeat(r[neg], lens), self._cwires.view()[idx],
                        np.repeat(c[neg], lens) * self._ccoeffs.view()[idx]))
        return out

    def materialize(self, wires: np.ndarray, kind: str = "linear") -> np.ndarray:
        """``wires`` with every combination replaced by a wire of its own (one constraint ``Σ terms = o`` the
        first time a combination needs one, what :meth:`contract` needs)."""
        wires = np.asarray(wires, dtype=np.int64)
        neg = wires < 0
        if not neg.any():
            return wires
        k = np.unique(-wires[neg] - 1)
        real = self._creal.view()
        new = k[real[k] < 0]
        if len(new):
            pending, self._pending = self._pending, 0         # the caller's wires stay with the caller's gadget
            o = self.alloc(len(new))
            self.constrain([(-(new + 1), 1)], [(0, 1)], [(o, 1)], kind)
            self._pending = pending
            self.fill(o, lambda W, v=-(new + 1): W[v])
            real[new] = o
        out = wires.copy()
        out[neg] = real[-wires[neg] - 1]
        return out

    def fill(self, wires: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        """Witness step: ``W[wires] = fn(W)`` (run in order by :meth:`Circuit.witness`)."""
        if not self.witness:
            return
        self.fills.append((np.asarray(wires, dtype=np.int64).reshape(-1), fn))

    # ------------------------------------------------------- constraints
    def constrain(self, A: Iterable[Term], B: Iterable[Term], C: Iterable[Term], kind: str) -> None:
        """Add ``m`` constraints ``A·B = C``; each term is ``(wires, coeffs)`` broadcast to ``(m,)``."""
        A, B, C = list(A), list(B), list(C)
        m = max(np.size(w) for terms in (A, B, C) for w, _ in terms)
        if m == 0:
            return
        rows = np.arange(self.rows, self.rows + m, dtype=np.int64)
        for key, terms in (("A", A), ("B", B), ("C", C)):
            if self.count_only:
                self.nonzeros += self._count(terms, m)
            else:
                self.matrices[key].add(self._expand(_coo(rows, terms, m)), self.rows, m)
        self.tags.append(f"{self.context}:{kind}")
        self.block_rows.append(self.rows)
        self.rows += m
        self._block(kind)

    def _count(self, terms: list, m: int) -> int:
        """The nonzero coefficients that :func:`_coo` and :meth:`_expand` would keep."""
        total = 0
        for w, c in terms:
            c = np.asarray(c)
            w = np.asarray(w)
            if (w < 0).any():
                total += int(self._term_lengths(np.broadcast_to(w.reshape(-1), (m,)),
                                                np.broadcast_to(c.reshape(-1), (m,))).sum())
            else:
                total += m if c.ndim == 0 and c != 0 else int(np.count_nonzero(np.broadcast_to(c.reshape(-1), (m,))))
        return total

    def lookup(self, terms: Iterable[Term], kind: str, bits: int | None = None) -> None:
        """Add ``m`` lookups: each value ``Σ terms`` (broadcast to ``(m,)``) must lie in ``[0, 2^bits)``
        (default: the builder's ``table_bits``; at most :data:`MAX_TABLE_BITS`)."""
        bits = self.table_bits if bits is None else int(bits)
        if not 1 <= bits <= MAX_TABLE_BITS:
            raise ValueError(f"Builder.lookup: tables have 1 to {MAX_TABLE_BITS} bits, got {bits}")
        self._lookup(terms, kind, bits)

    def _lookup(self, terms: Iterable[Term], kind: str, key: int) -> None:
        if self.range_checks != "lookup":
            raise ValueError(f"Builder.lookup: this builder checks ranges with {self.range_checks}; "
                             f"lookups need Builder(field, range_checks='lookup')")
        terms = list(terms)
        m = max(np.size(w) for w, _ in terms)
        if m == 0:
            return
        rows = np.arange(self.n_lookups, self.n_lookups + m, dtype=np.int64)
        if not self.count_only:
            self.lookup_rows.add(self._expand(_coo(rows, terms, m)), self.n_lookups, m)
        self.lookup_tags.append(f"{self.context}:{kind}")
        self.lookup_block_rows.append(self.n_lookups)
        self.lookup_widths.append(key)
        self.n_lookups += m
        self._block(kind)

    def function_table(self, table: np.ndarray, name: str) -> int:
        """The key of the function table ``table`` (sorted distinct packed pairs, :mod:`.tables`), added once: a
        second region that computes the same function shares it."""
        table = np.ascontiguousarray(table, dtype=np.int64)
        if table.ndim != 1 or not len(table) or (len(table) > 1 and (np.diff(table) <= 0).any()) or table[0] < 0 \
                or table[-1] >= self.field.p:
            raise ValueError("Builder.function_table: a table is a non-empty ascending array of distinct field "
                             "elements")
        h = table.tobytes()
        key = self._function_keys.get(h)
        if key is None:
            key = self._function_keys[h] = FUNCTION_TABLE + len(self.function_tables)
            self.function_tables.append(table)
            self.function_names.append(name)
        return key

    def table_lookup(self, terms: Iterable[Term], kind: str, key: int) -> None:
        """Add ``m`` lookups of the values ``Σ terms`` into the function table ``key`` (:meth:`function_table`)."""
        if not 0 <= key - FUNCTION_TABLE < len(self.function_tables):
            raise ValueError(f"Builder.table_lookup: no function table has key {key}")
        self._lookup(terms, kind, key)

    def contract(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, kind: str) -> None:
        """Record ``C = A·B`` exactly (wire tensors ``(…, m, n)``, ``(…, n, p)``, ``(…, m, p)``, leading axes
        flattened), proved by the native prover's contraction argument (``contractions="argument"`` only)."""
        if self.contractions != "argument":
            raise ValueError(f"Builder.contract: this builder proves contractions with {self.contractions!r}; "
                             f"the argument needs Builder(field, contractions='argument')")
        a, b, c = (self.materialize(x) for x in (a, b, c))
        m, n, p = a.shape[-2], a.shape[-1], b.shape[-1]
        if self.count_only:                     # the shapes alone (zero-stride arrays)
            L = int(np.prod(c.shape[:-2], dtype=np.int64))
            rec = Contraction(*(np.broadcast_to(np.int64(0), (L, *s)) for s in ((m, n), (n, p), (m, p))),
                              f"{self.context}:{kind}")
        else:
            rec = Contraction(*(np.ascontiguousarray(x, dtype=np.int64).reshape(-1, *s)
                                for x, s in ((a, (m, n)), (b, (n, p)), (c, (m, p)))), f"{self.context}:{kind}")
        if rec.a.size and rec.b.size:
            self.contraction_records.append(rec)
            self._block(kind)

    def _lookups_by_table(self) -> list[int]:
        """Reorder the lookup blocks by table key (stably), so that each table's lookups are contiguous: the
        linear test's coefficient rows of the logUp inverses are then constant but at the tables' seams, which
        the verifier evaluates at no cost (:func:`~circuitgrad.backends.zk.systems.ligero.protocol.verify_prepared`). The blocks' new order."""
        starts = np.array(self.lookup_block_rows + [self.n_lookups], dtype=np.int64)
        widths = np.array(self.lookup_widths, dtype=np.int64)
        order = np.argsort(widths, kind="stable")
        sizes = np.diff(starts)
        new_starts = np.zeros(len(order), dtype=np.int64)
        new_starts[order] = np.concatenate([[0], np.cumsum(sizes[order])[:-1]])
        self.lookup_tags = [self.lookup_tags[i] for i in order]
        self.lookup_widths = [self.lookup_widths[i] for i in order]
        self.lookup_block_rows = [int(new_starts[i]) for i in order]
        return [int(i) for i in order]

    def finish(self, n_pub_out: int, n_pub_in: int, n_prv_in: int) -> R1CS:
        """The constraint system (the builder's blocks are released into it)."""
        order = self._lookups_by_table()              # a counting builder's assemblers hold no blocks, no rows
        L = self.lookup_rows.finish(None if self.count_only else order) if self.range_checks == "lookup" else None
        widths = np.array(self.lookup_widths, dtype=np.int64)
        bounds = np.array(self.lookup_block_rows + [self.n_lookups], dtype=np.int64)
        mats = (self.matrices[k].finish() for k in "ABC")
        return R1CS(self.field, self.n, n_pub_out, n_pub_in, n_prv_in, *mats, list(self.tags),
                    np.array(self.block_rows + [self.rows], dtype=np.int64),
                    list(self.names), L, list(self.lookup_tags), bounds, tuple(self.contraction_records),
                    self.table_bits, widths,
                    {"nonzeros": int(self.nonzeros)} if self.count_only else None,
                    {**self.wire_kinds, **({"(unattributed)": self._pending} if self._pending else {})},
                    tuple(self.function_tables), tuple(self.function_names))


class _Grow:
    """An int64 array that grows by appending (amortised doubling)."""

    def __init__(self):
        self._a, self._n = np.zeros(16, dtype=np.int64), 0

    def append(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.int64).reshape(-1)
        if self._n + len(x) > len(self._a):
            a = np.zeros(max(2 * len(self._a), self._n + len(x)), dtype=np.int64)
            a[:self._n] = self._a[:self._n]
            self._a = a
        self._a[self._n:self._n + len(x)] = x
        self._n += len(x)

    def view(self) -> np.ndarray:
        return self._a[:self._n]

    @property
    def last(self) -> int:
        return int(self._a[self._n - 1])

    def __len__(self) -> int:
        return self._n


def _coo(rows: np.ndarray, terms: list, m: int) -> list:
    """COO parts ``(rows, wires, coeffs)`` of ``m`` linear combinations; zero coefficients dropped."""
    out = []
    for w, c in terms:
        w = np.broadcast_to(np.asarray(w, dtype=np.int64).reshape(-1), (m,))
        c = np.broadcast_to(np.asarray(c, dtype=np.int64).reshape(-1), (m,))
        keep = c != 0
        if keep.all():
            out.append((rows, w, c))
        elif keep.any():
            out.append((rows[keep], w[keep], c[keep]))
    return out
