"""Contractions ``C = A·B`` in the Ligero argument: Freivalds' check, linear in ``|A| + |B| + |C|``.

A circuit compiled with ``contractions="argument"`` carries, besides its R1CS,
records ``(A, B, C)`` of wire tensors of shapes ``(L, m, n)``, ``(L, n, p)``,
``(L, m, p)`` (:class:`..r1cs.Contraction`): every ``C[l]`` must be the exact
product ``A[l]·B[l]``. Instead of one constraint per multiply-accumulate, the
argument takes the second commitment of the two-round structure that the
logUp lookups use (:mod:`.lookup`)::

    round 1   z (holds A, B and C) | a | b | c | …
              ── u_s ∈ F^(Σ L·m), v_s ∈ F^(Σ L·p) drawn from the transcript, s = 1 … σC ──
    round 2   … | x_s | y_s | π_s     x_s[l] = A[l]ᵀ·u_s[l],  y_s[l] = B[l]·v_s[l],  π_s = x_s ∘ y_s

and proves, with the R1CS, the constraints::

    x_s − Aᵀu_s = 0                   linear (u_s is public once drawn)
    y_s − B v_s = 0                   linear
    Σ π_s − Σ_l u_s[l]ᵀ·C[l]·v_s[l] = 0   linear, over the N real cells of π_s
    x_s ∘ y_s − π_s = 0               quadratic, on every cell of the rows

Together they say ``Σ_l u[l]ᵀ (C[l] − A[l]B[l]) v[l] = 0``. If some ``C[l] ≠ A[l]B[l]``
the left side is a nonzero polynomial of degree 2 in the entries of ``u`` and ``v``,
so by Schwartz–Zippel a random draw is a root with probability at most ``2/|F|``
(Freivalds' check, all contractions of the circuit at once). ``A``, ``B`` and ``C``
are committed before the challenges, so they cannot depend on them; ``σC``
independent draws give ``(2/|F|)^σC`` (:func:`.params.contraction_error`).

Work per draw: the prover computes ``x`` and ``y`` (``|A| + |B|`` products) and
commits ``3N`` cells, ``N = Σ_l L·n``; the linear test's coefficients on the
wires are ``−r_x[k]·u[i]`` on ``A[i, k]``, ``−r_y[k]·v[j]`` on ``B[k, j]`` and
``−r_Σ·u[i]·v[j]`` on ``C[i, j]``: ``|A| + |B| + 2|C|`` products, for prover and
verifier alike. Every row is encoded, masked and opened like the witness rows,
so zero knowledge is unchanged.

This module gives the rows each round commits and each test's share; the
protocol itself is in :mod:`.protocol`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...circuits import gf
from .coefficients import outer, piecewise
from .transcript import Transcript

__all__ = ["Shape", "Index", "WireTerms", "index", "challenges", "second_rows", "linear_rows",
           "quadratic_rows"]


@dataclass(frozen=True)
class Shape:
    """Rows of the contraction blocks: each of ``x_s``, ``y_s``, ``π_s`` has ``mx`` rows of ``k`` cells."""
    n: int          # N: cells of each x_s (Σ L·n over the contractions)
    k: int
    sigma: int      # independent draws (u_s, v_s)

    @property
    def mx(self) -> int:
        return -(-self.n // self.k) if self.n else 0

    @property
    def rows(self) -> int:
        """Rows of the round-2 commitment that the contractions add."""
        return 3 * self.sigma * self.mx if self.n else 0


@dataclass
class Index:
    """Where every wire occurrence of every contraction sits in the vectors ``x``/``y``, ``u`` and ``v``,
    and the occurrences sorted by wire (for the linear test's per-wire sums); computed once per circuit."""
    n: int                          # N (cells of x, y)
    nu: int                         # cells of u (Σ L·m)
    nv: int                         # cells of v (Σ L·p)
    a_x: np.ndarray                 # per occurrence in A: index into x, and into u
    a_u: np.ndarray
    b_y: np.ndarray                 # per occurrence in B: index into y, and into v
    b_v: np.ndarray
    c_u: np.ndarray                 # per occurrence in C: index into u, and into v
    c_v: np.ndarray
    order: np.ndarray               # occurrences [A | B | C] sorted by wire (stable)
    ptr: np.ndarray                 # CSR over the distinct wires
    wires: np.ndarray               # the distinct wires, ascending
    parts: list                     # per contraction: (a, b) wire tensors and the offsets into x, u, v


def index(contractions) -> Index:
    """The :class:`Index` of a circuit's contraction records."""
    ax, au, by, bv, cu, cv, wa, wb, wc, parts = [], [], [], [], [], [], [], [], [], []
    ox = ou = ov = 0
    for c in contractions:
        L, m, n = c.a.shape
        p = c.b.shape[2]
        l, i, k = np.indices((L, m, n)).reshape(3, -1)
        ax.append(ox + l * n + k)
        au.append(ou + l * m + i)
        l, k, j = np.indices((L, n, p)).reshape(3, -1)
        by.append(ox + l * n + k)
        bv.append(ov + l * p + j)
        l, i, j = np.indices((L, m, p)).reshape(3, -1)
        cu.append(ou + l * m + i)
        cv.append(ov + l * p + j)
        wa.append(c.a.reshape(-1))
        wb.append(c.b.reshape(-1))
        wc.append(c.c.reshape(-1))
        parts.append((c.a, c.b, ox, ou, ov))
        ox, ou, ov = ox + L * n, ou + L * m, ov + L * p
    wires = np.concatenate([_cat(wa), _cat(wb), _cat(wc)])
    order = np.argsort(wires, kind="stable")
    ws = wires[order]
    first = np.ones(len(ws), dtype=bool)
    first[1:] = ws[1:] != ws[:-1]
    starts = np.flatnonzero(first)
    return Index(ox, ou, ov, _cat(ax), _cat(au), _cat(by), _cat(bv), _cat(cu), _cat(cv), _narrow(order),
                 np.append(starts, len(ws)).astype(np.int64), _narrow(ws[starts]), parts)


def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` (non-negative indices) as int32 where they fit: half the index's memory (0.4 GiB on tinygpt's step)."""
    return a.astype(np.int32) if not a.size or int(a.max()) < 2 ** 31 else a.astype(np.int64)


def _cat(xs: list) -> np.ndarray:
    return _narrow(np.concatenate(xs)) if xs else np.zeros(0, dtype=np.int32)


def challenges(T: Transcript, ix: Index, sh: Shape) -> list[tuple[np.ndarray, np.ndarray]]:
    """The draws ``(u_s, v_s)``, ``s = 1 … σC``, from the transcript (after the first commitment)."""
    return [(T.field(f"contract{s}.u", ix.nu), T.field(f"contract{s}.v", ix.nv)) for s in range(sh.sigma)]


def _xy(z: np.ndarray, ix: Index, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x = Aᵀu`` and ``y = B v``, every contraction and batch index laid end to end (length N)."""
    x = np.zeros(ix.n, dtype=np.int64)
    y = np.zeros(ix.n, dtype=np.int64)
    for a, b, ox, ou, ov in ix.parts:
        L, m, n = a.shape
        p = b.shape[2]
        uu = u[ou:ou + L * m].reshape(L, m, 1)
        vv = v[ov:ov + L * p].reshape(L, 1, p)
        x[ox:ox + L * n] = gf.sum_mod(gf.mul(z[a], uu), axis=1).reshape(-1)          # Σ_i u_i A[i, k]
        y[ox:ox + L * n] = gf.sum_mod(gf.mul(z[b], vv), axis=2).reshape(-1)          # Σ_j B[k, j] v_j
    return x, y


def second_rows(z: np.ndarray, ix: Index, sh: Shape, draws: list) -> np.ndarray:
    """Round 2: ``x_s | y_s | π_s`` for every draw (``3·σC·mx`` rows of ``k``); ``z`` in ``[0, p)``."""
    rows = []
    for u, v in draws:
        x, y = _xy(z, ix, u, v)
        rows += [gf.as_rows(x, sh.mx, sh.k), gf.as_rows(y, sh.mx, sh.k), gf.as_rows(gf.mul(x, y), sh.mx, sh.k)]
    return np.concatenate(rows)


def linear_rows(ix: Index, sh: Shape, T: Transcript, s: int, draws: list,
                gamma: np.ndarray) -> tuple["WireTerms | None", list]:
    """Challenge ``s`` of the linear test, contraction part: the coefficients to subtract on the wires of ``A``,
    ``B``, ``C`` (:class:`WireTerms`, summed when asked, or None), and the coefficient blocks of the round-2 rows
    ``x_s | y_s | π_s`` (those on ``x_s`` and ``y_s`` rank one, ``β ⊗ γ`` with the repetition's ``γ``)."""
    rows, terms = [], []
    for d, (u, v) in enumerate(draws):
        ox = outer(T, f"lin{s}.contract{d}.x", sh.mx, gamma)
        oy = outer(T, f"lin{s}.contract{d}.y", sh.mx, gamma)
        rsum = int(T.field(f"lin{s}.contract{d}.sum", 1)[0])
        terms.append((ox, oy, rsum, u, v))
        rows += [ox, oy] + piecewise(np.array([rsum]), np.array([0, ix.n]), sh.mx, sh.k)
    return (WireTerms(ix, terms) if ix.order.size else None), rows


@dataclass(frozen=True)
class WireTerms:
    """One repetition's contraction terms on the wires: ``r_x[k]·u[i]`` on ``A[i, k]``, ``r_y[k]·v[j]`` on
    ``B[k, j]`` and ``r_Σ·u[i]·v[j]`` on ``C[i, j]``, summed over the draws and by wire when asked (what it
    holds is the draws' challenges; the sums take 12 bytes a distinct wire)."""
    ix: Index
    terms: list                     # per draw: (the x block, the y block, r_Σ, u, v)

    def sums(self) -> tuple[np.ndarray, np.ndarray]:
        """``(wires, values)``: the distinct wires of the contractions and the coefficient on each."""
        ix = self.ix
        na, nb = len(ix.a_x), len(ix.b_y)
        occ = np.zeros(na + nb + len(ix.c_u), dtype=np.int64)    # [A | B | C] occurrences, summed over the draws
        for ox, oy, rsum, u, v in self.terms:
            _add_products(occ[:na], ox.flat(ix.n), ix.a_x, u, ix.a_u)
            _add_products(occ[na:na + nb], oy.flat(ix.n), ix.b_y, v, ix.b_v)
            _add_products(occ[na + nb:], u, ix.c_u, v, ix.c_v, rsum)
        jit = gf.compiled()
        return ix.wires, (gf.segment_sum(occ[ix.order], ix.ptr) if jit is None
                          else jit.gather_segment_sum(occ, ix.order, ix.ptr))


#: occurrences whose coefficients are computed at once (bounds the temporaries: a few of 8 MiB)
_TERMS = 1 << 20


def _add_products(out: np.ndarray, x: np.ndarray, ix: np.ndarray, y: np.ndarray, iy: np.ndarray,
                  scale: int = 1) -> None:
    """``out += scale·x[ix]·y[iy]`` in place, a block of occurrences at a time."""
    for lo in range(0, len(out), _TERMS):
        hi = min(len(out), lo + _TERMS)
        prod = gf.mul(x[ix[lo:hi]], y[iy[lo:hi]])
        out[lo:hi] = gf.add(out[lo:hi], prod if scale == 1 else gf.mul(scale, prod))


def quadratic_rows(U: np.ndarray, sh: Shape) -> np.ndarray:
    """``x_s ∘ y_s − π_s`` at any points: ``U`` the contraction blocks' values (``3·σC·mx`` rows)."""
    m = sh.mx
    out = [gf.sub(gf.mul(U[(3 * s) * m:(3 * s + 1) * m], U[(3 * s + 1) * m:(3 * s + 2) * m]),
                  U[(3 * s + 2) * m:(3 * s + 3) * m]) for s in range(sh.sigma)]
    return np.concatenate(out) if out else np.zeros((0, U.shape[1]), dtype=np.int64)
