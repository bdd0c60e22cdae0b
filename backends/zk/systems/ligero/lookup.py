"""logUp lookups in the Ligero argument: range checks against the tables ``T_b = [0, 2^b)``, and function tables.

A circuit with ``range_checks="lookup"`` carries a sparse matrix ``L`` and a
table key ``bᵢ`` per row: every value ``vᵢ = ⟨Lᵢ, z⟩`` must lie in ``T_{bᵢ}``, a range
``[0, 2^b)`` (``b ≤ 22``) or a function table of packed pairs (:mod:`..tables`). The
tables the circuit uses are laid end to end in key order, ``|T|`` entries in all (``value(e)``
the entry's value). The argument takes two commitments::

    round 1   z | a | b | c | v | m | masks           v = L·z, m_e = #{i : (bᵢ, vᵢ) = entry e}
              ── α₁ … α_σL drawn from the transcript ──
    round 2   h₁ … h_σL | g₁ … g_σL                    h_s,i = 1/(α_s − vᵢ),  g_s,e = m_e/(α_s − value(e))

and proves, with the R1CS, the constraints::

    v − L·z = 0                                   linear
    g_s,e·(α_s − value(e)) − m_e = 0              linear (α_s is public once drawn)
    Σ_{i : bᵢ = b} h_s,i − Σ_{e ∈ T_b} g_s,e = 0   linear, one per table b
    h_s ∘ (α_s − v) = 1                           quadratic, on every cell of the rows

The last two say ``Σ_{bᵢ = b} 1/(α_s − vᵢ) = Σ_j m_{b,j}/(α_s − j)`` for each table,
which for a random ``α_s`` holds only if every ``vᵢ`` of that table is in it
(Haböck 2022, Lemma 5, once per table; the union bound over the tables is
:func:`.params.lookup_error`). ``v`` and ``m`` are committed before the
challenges, so they cannot depend on them. Padding cells of ``v`` are 0 and
those of ``h`` are ``1/α_s``: they satisfy the quadratic rows and no sum counts
them. Every row is encoded, masked and opened like the witness rows, so zero
knowledge is unchanged.

This module gives the rows each round commits and each test's share; the
protocol itself is in :mod:`.protocol`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...circuits import gf, tables
from .coefficients import outer, piecewise
from .params import TABLE
from .transcript import Transcript

__all__ = ["TABLE", "Shape", "shape", "runs", "linear_rows", "quadratic_rows", "AlphaCollision"]


class AlphaCollision(RuntimeError):
    """A challenge equals a looked-up value or a table entry (probability below ``(N + |T|)/p``)."""


@dataclass(frozen=True)
class Shape:
    """Rows of the lookup blocks: ``mv`` for ``v`` (and each ``h_s``), ``mm`` for ``m`` (and each ``g_s``)."""
    n: int          # lookups
    k: int
    sl: int         # challenges
    tables: tuple = (8,)   # the table keys, ascending (:mod:`..tables`: range widths, then function tables)
    functions: tuple = field(default=(), compare=False)   # the circuit's function tables

    @property
    def size(self) -> int:
        """``|T|``: the table entries, laid end to end (``2^b`` for a range)."""
        return sum(tables.size(b, self.functions) for b in self.tables)

    @property
    def mv(self) -> int:
        return -(-self.n // self.k) if self.n else 0

    @property
    def mm(self) -> int:
        return -(-self.size // self.k) if self.n else 0

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """Every table entry's value and table index (``|T|`` each)."""
        return (np.concatenate([tables.entries(b, self.functions) for b in self.tables]),
                np.repeat(np.arange(len(self.tables)), [tables.size(b, self.functions) for b in self.tables]))

    def starts(self) -> np.ndarray:
        """Each table's first entry in the laid-out ``|T|``."""
        return np.cumsum([0] + [tables.size(b, self.functions) for b in self.tables])[:-1]

    def table_of(self, bits: np.ndarray) -> np.ndarray:
        """The table index of each lookup, from its key."""
        return np.searchsorted(np.array(self.tables, dtype=np.int64), bits)

    @property
    def first(self) -> int:
        """Witness rows that round 1 adds (``v``, ``m``)."""
        return self.mv + self.mm

    @property
    def second(self) -> int:
        """Rows of the round-2 commitment (``h_s``, ``g_s``)."""
        return self.sl * (self.mv + self.mm)


def shape(pc, k: int, sl: int) -> Shape:
    """The lookup blocks of a prepared circuit for rows of ``k`` cells and ``sl`` challenges."""
    return Shape(pc.n_lookups, k, sl if pc.n_lookups else 0, pc.r1cs.lookup_tables or (8,), pc.r1cs.function_tables)


def runs(block_keys: np.ndarray, block_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs of lookups into one table, from the lookup blocks' table keys and first rows (``block_rows``
    ends with the number of lookups; the builder orders the blocks by key): each run's first row, then the
    total, and each run's key."""
    keys = np.asarray(block_keys, dtype=np.int64)
    rows = np.asarray(block_rows, dtype=np.int64)
    keep = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, dtype=np.int64)
    return np.append(rows[keep], rows[-1]), keys[keep]


def linear_rows(sh: Shape, T: Transcript, s: int, alphas: np.ndarray, gamma: np.ndarray,
                runs: tuple[np.ndarray, np.ndarray]) -> list:
    """Challenge ``s`` of the linear test, lookup part: the coefficient blocks of the round-1 lookup rows (``v``,
    rank one ``β ⊗ γ`` with the repetition's ``γ``, whose flat values are also the coefficients on ``L``'s rows;
    then ``m``) and of the round-2 rows (``h_s``, ``g_s``). ``runs``: the lookups' runs of one table
    (:func:`runs`). The constraints have no constant."""
    nt = len(sh.tables)
    ov = outer(T, f"lin{s}.lookup", sh.mv, gamma)
    rg = T.field(f"lin{s}.table", sh.sl * sh.size).reshape(sh.sl, sh.size)
    rsum = T.field(f"lin{s}.sum", sh.sl * nt).reshape(sh.sl, nt)
    table, owner = sh.entries()
    bounds, keys = runs
    Rm = gf.as_rows(gf.neg(gf.sum_mod(rg, axis=0)), sh.mm, sh.k)
    Rh = [part for r in rsum for part in piecewise(r[sh.table_of(keys)], bounds, sh.mv, sh.k)]   # constant but at seams
    Rg = [gf.as_rows(gf.sub(gf.mul(rg[j], gf.sub(a, table)), rsum[j][owner]), sh.mm, sh.k)
          for j, a in enumerate(alphas.tolist())]
    return [ov, Rm] + Rh + [np.concatenate(Rg)]


def quadratic_rows(V: np.ndarray, H: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """``h_s ∘ (α_s − v) − 1`` at any points: ``V`` the ``v`` rows' values, ``H`` the ``h`` rows' (σL·mv)."""
    mv = V.shape[0]
    return np.concatenate([gf.sub(gf.mul(H[j * mv:(j + 1) * mv], gf.sub(a, V)), 1)
                           for j, a in enumerate(alphas.tolist())])
