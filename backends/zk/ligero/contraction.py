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

from . import gf
from .coefficients import outer, piecewise
from .transcript import Transcript

__all__ = ["Shape", "Index", "index", "challenges", "second_rows", "linear_rows", "quadratic_rows"]


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
    cat = lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, dtype=np.int64)  # noqa: E731
    wires = np.concatenate([cat(wa), cat(wb), cat(wc)])
    order = np.argsort(wires, kind="stable")
    ws = wires[order]
    first = np.ones(len(ws), dtype=bool)
    first[1:] = ws[1:] != ws[:-1]
    starts = np.flatnonzero(first)
    return Index(ox, ou, ov, cat(ax), cat(au), cat(by), cat(bv), cat(cu), cat(cv), order,
                 np.append(starts, len(ws)).astype(np.int64), ws[starts], parts)


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
                gamma: np.ndarray) -> tuple[tuple | None, list]:
    """Challenge ``s`` of the linear test, contraction part: the coefficients to subtract on the wires of ``A``,
    ``B``, ``C`` (``(wires, values)``, or None), and the coefficient blocks of the round-2 rows
    ``x_s | y_s | π_s`` (those on ``x_s`` and ``y_s`` rank one, ``β ⊗ γ`` with the repetition's ``γ``)."""
    rows, coef = [], []
    for d, (u, v) in enumerate(draws):
        ox = outer(T, f"lin{s}.contract{d}.x", sh.mx, gamma)
        oy = outer(T, f"lin{s}.contract{d}.y", sh.mx, gamma)
        rx, ry = ox.flat(ix.n), oy.flat(ix.n)
        rsum = int(T.field(f"lin{s}.contract{d}.sum", 1)[0])
        coef += [gf.mul(rx[ix.a_x], u[ix.a_u]), gf.mul(ry[ix.b_y], v[ix.b_v]),
                 gf.mul(rsum, gf.mul(u[ix.c_u], v[ix.c_v]))]
        rows += [ox, oy] + piecewise(np.array([rsum]), np.array([0, ix.n]), sh.mx, sh.k)
    if not ix.order.size:
        return None, rows
    occ = np.concatenate([_sum_draws(coef, len(draws), part) for part in range(3)])   # the same occurrences
    jit = gf.compiled()                                                              # in every draw
    return (ix.wires, gf.segment_sum(occ[ix.order], ix.ptr) if jit is None
            else jit.gather_segment_sum(occ, ix.order, ix.ptr)), rows


def _sum_draws(coef: list, draws: int, part: int) -> np.ndarray:
    """``Σ_s`` of the occurrence coefficients of one part (0: A, 1: B, 2: C) over the draws."""
    out = coef[part]
    for s in range(1, draws):
        out = gf.add(out, coef[3 * s + part])
    return out


def quadratic_rows(U: np.ndarray, sh: Shape) -> np.ndarray:
    """``x_s ∘ y_s − π_s`` at any points: ``U`` the contraction blocks' values (``3·σC·mx`` rows)."""
    m = sh.mx
    out = [gf.sub(gf.mul(U[(3 * s) * m:(3 * s + 1) * m], U[(3 * s + 1) * m:(3 * s + 2) * m]),
                  U[(3 * s + 2) * m:(3 * s + 3) * m]) for s in range(sh.sigma)]
    return np.concatenate(out) if out else np.zeros((0, U.shape[1]), dtype=np.int64)
