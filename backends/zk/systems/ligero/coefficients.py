"""The linear test's coefficient rows: dense blocks and rank-one blocks ``β ⊗ γ``.

The linear test combines every linear constraint with a random coefficient and
lays the resulting coefficient on every committed cell: one row of ``k``
coefficients per committed row. Most of those rows are challenges themselves
(the coefficients on ``a``, ``b``, ``c``, the lookup values ``v`` and the
Freivalds vectors ``x``, ``y``), and they are drawn with tensor structure::

    block of m rows:   R[i, h] = β_i · γ_h        β ∈ F^m per block,  γ ∈ F^k once per repetition

For a violation ``E ≠ 0`` (one row per committed row, ``k`` cells each) the
combination ``βᵀ E γ`` is a nonzero polynomial of degree 2 in the challenges,
so it vanishes with probability at most ``2/|F|`` (Schwartz–Zippel), against
``1/|F|`` for independent coefficients: :func:`.params.round_errors` counts it.

What the structure buys: a rank-one row's polynomial is ``β_i·g(X)`` with one
``g = interp_H(γ)`` for the whole block, so

* the prover adds ``ĝ(η)·Σ_i β_i·U_i(η)`` on the coset (no NTT per row: the
  per-row interpolation and evaluation were most of the prover's linear test),
* the verifier evaluates ``r_i(η_j) = β_i·g(η_j)`` from one ``k × t`` product
  (not one per row), and
* the transcript squeezes ``m + k`` field elements per block instead of ``m·k``.

Constant rows (the logUp sums' coefficients, the Freivalds sums') are rank one
with ``γ = 1`` (``g = 1``), and are found row by row in dense blocks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from circuitgrad import allocator

from ...circuits import gf
from . import ntt as transforms

__all__ = ["Outer", "Deferred", "DEFERRED_BYTES", "VERIFY_DEFERRED_BYTES", "Rows", "materialized", "together",
           "outer", "piecewise", "values_at"]


@dataclass(frozen=True)
class Outer:
    """``m`` coefficient rows ``R[i, h] = β_i·γ_h`` (``γ`` of length ``k``; ``None``: every ``γ_h = 1``)."""
    beta: np.ndarray
    gamma: np.ndarray | None

    def flat(self, size: int | None = None) -> np.ndarray:
        """The rows laid end to end (``m·k`` values, the first ``size`` of them when given)."""
        if self.gamma is None:
            raise ValueError("a block of constant rows has no length of its own: use dense(k)")
        full = self.dense(len(self.gamma)).reshape(-1)
        return full if size is None else full[:size]

    def dense(self, k: int) -> np.ndarray:
        """The ``m × k`` rows."""
        if self.gamma is None:
            return np.repeat(self.beta[:, None], k, axis=1)
        return gf.mul(np.repeat(self.beta, k).reshape(-1, k), self.gamma)     # rows by a vector: no broadcast copy


def outer(T, label: str, m: int, gamma: np.ndarray) -> Outer:
    """A rank-one block of ``m`` rows: its row factors ``β`` drawn from the transcript ``T`` (``m`` values)."""
    return Outer(T.field(label, m), gamma)


def piecewise(values: np.ndarray, bounds: np.ndarray, m: int, k: int) -> list:
    """The ``m`` rows of ``k`` (laid end to end) of the vector that is ``values[j]`` on ``[bounds[j], bounds[j+1])``
    and 0 from ``bounds[-1]`` on (``bounds[0] = 0``): runs of constant rows as :class:`Outer` blocks with
    ``γ = 1``, the rows a bound cuts as dense ones. Nothing of size ``m·k`` is built."""
    values = np.append(np.asarray(values, dtype=np.int64), 0)         # past the last bound: 0
    bounds = np.asarray(bounds, dtype=np.int64)
    cut = np.zeros(m, dtype=bool)
    inner = bounds[bounds % k != 0] // k
    cut[inner[inner < m]] = True
    first = values[np.searchsorted(bounds, np.arange(m, dtype=np.int64) * k, side="right") - 1]
    parts, a = [], 0
    while a < m:
        b = a + 1
        while b < m and cut[b] == cut[a]:
            b += 1
        if cut[a]:
            cells = np.arange(a * k, b * k, dtype=np.int64)
            parts.append(values[np.searchsorted(bounds, cells, side="right") - 1].reshape(b - a, k))
        else:
            parts.append(Outer(first[a:b], None))
        a = b
    return parts


@dataclass(frozen=True)
class Deferred:
    """A dense block of ``m`` rows computed when asked, not held with the challenges: the coefficients on ``z``
    (8 bytes a wire). ``make(args_list)`` computes the blocks of several :class:`Deferred` of the same ``make``
    together (one pass over the constraint matrices for all of them): :func:`materialized`."""
    m: int
    args: tuple
    make: Callable[[list], list]


#: the deferred blocks the prover computes at once (bytes): every repetition of the linear test together below it
DEFERRED_BYTES = 1 << 30
#: the same for the verifier, which holds no witness and no encoded rows: two of tinygpt's three repetitions
#: together (its verification 23 s instead of 28 s one at a time, 6.8 GiB at the peak instead of 6.2)
VERIFY_DEFERRED_BYTES = 5 << 28


def together(count: int, size: int, budget: int | None = None) -> int:
    """How many of ``count`` repetitions whose deferred blocks take ``size`` bytes each are computed at once
    within ``budget`` bytes (default :data:`DEFERRED_BYTES`): all of them when the blocks are empty, at least
    one. What :func:`materialized` groups by, and what the prover's memory model counts."""
    budget = DEFERRED_BYTES if budget is None else budget
    return max(1, count if not size else min(count, budget // size))


def materialized(reps: Sequence["Rows"], budget: int | None = None):
    """``(indices, rows)`` groups covering ``reps`` in order, each with its :class:`Deferred` blocks computed, as
    many repetitions a group as :func:`together` allows within ``budget`` bytes."""
    size = max([8 * p.m * R.k for R in reps for p in R.parts if isinstance(p, Deferred)], default=0)
    per = together(len(reps), size, budget)
    for a in range(0, len(reps), per):
        group = list(range(a, min(len(reps), a + per)))
        out = _materialize([reps[i] for i in group])
        yield group, out
        del out                                 # the generator holds nothing of a group once the next is asked for


def _materialize(reps: list) -> list:
    """``reps`` with their :class:`Deferred` blocks computed, those of one ``make`` together."""
    by_make: dict = {}
    for i, R in enumerate(reps):
        for j, p in enumerate(R.parts):
            if isinstance(p, Deferred):
                by_make.setdefault(id(p.make), (p.make, []))[1].append((i, j, p))
    parts = [list(R.parts) for R in reps]
    for make, items in by_make.values():
        for (i, j, p), block in zip(items, make([p.args for _, _, p in items])):
            parts[i][j] = block.reshape(p.m, reps[i].k)
    return [Rows(ps, R.k) for ps, R in zip(parts, reps)]


def _height(part) -> int:
    """Rows of a block: a dense one's first axis, a rank-one one's ``β``, a deferred one's ``m``."""
    return len(part.beta) if isinstance(part, Outer) else part.m if isinstance(part, Deferred) else part.shape[0]


def _row_consts(R: np.ndarray) -> np.ndarray:
    """Which rows of a dense block are constant."""
    return (R == R[:, :1]).all(axis=1) if R.size else np.zeros(R.shape[0], dtype=bool)


#: cells of one block of rows that the prover evaluates on the coset at once (bounds its temporaries: 32 MiB)
BLOCK_CELLS = 1 << 22


@dataclass
class Rows:
    """The coefficient matrix of one repetition of the linear test: blocks of rows, each dense (``m × k``)
    or :class:`Outer`, stacked in the order of the committed rows they multiply."""
    parts: list
    k: int

    @property
    def n_rows(self) -> int:
        return sum(_height(p) for p in self.parts)

    def dense(self) -> np.ndarray:
        """Every row as a dense ``(rows, k)`` array (for tests and small circuits)."""
        return np.concatenate([p.dense(self.k) if isinstance(p, Outer) else p for p in self.materialize().parts])

    def materialize(self) -> "Rows":
        """These rows with every :class:`Deferred` block computed (the others shared)."""
        return next(materialized([self]))[1][0]

    def _spans(self):
        at = 0
        for p in self.parts:
            yield p, at, at + _height(p)
            at += _height(p)

    def values_at(self, lag: np.ndarray) -> np.ndarray:
        """``r_i(η_j) = Σ_h R[i, h]·L_h(η_j)`` for every row, given the Lagrange values ``lag`` (``k × t``) at the
        opened points (:func:`values_at` of this one repetition)."""
        return values_at([self], lag)[0]

    def window(self, a: int, b: int) -> "Rows":
        """Rows ``a … b`` of this matrix (the blocks cut to them; rank-one blocks keep their ``γ``)."""
        parts = []
        for p, lo, hi in self._spans():
            x, y = max(a, lo), min(b, hi)
            if x < y:
                if isinstance(p, Deferred):
                    raise ValueError("Rows.window: rows of a deferred block (materialize it first)")
                parts.append(Outer(p.beta[x - lo:y - lo], p.gamma) if isinstance(p, Outer) else p[x - lo:y - lo])
        return Rows(parts, self.k)

    def combine(self, U: np.ndarray, W: np.ndarray, n: int, ghat: dict | None = None) -> np.ndarray:
        """``Σᵢ rᵢ(η)·U[W[i]](η)`` at every point ``η`` of the coset ``D``: dense rows interpolated and evaluated
        there a block at a time, constant rows and rank-one blocks as ``ĝ(η)·Σᵢ βᵢ·U[W[i]](η)`` (no NTT per
        row). ``ghat`` keeps each ``ĝ`` on ``D`` between calls (keyed by ``id(γ)``: hold the ``γ`` alive)."""
        ghat = {} if ghat is None else ghat
        acc = np.zeros(n, dtype=np.int64)
        by_gamma = {}                                   # id(γ) → (γ, [β blocks], [row blocks])
        for p, a, b in self._spans():
            if isinstance(p, Outer):
                g = by_gamma.setdefault(id(p.gamma), (p.gamma, [], []))
                g[1].append(p.beta)
                g[2].append(W[a:b])
                continue
            const = _row_consts(p)
            if const.any():
                g = by_gamma.setdefault(id(None), (None, [], []))
                g[1].append(p[const, 0])
                g[2].append(W[a:b][const])
            rows = np.flatnonzero(~const)
            step = max(1, BLOCK_CELLS // n)
            for c in range(0, len(rows), step):
                sel = rows[c:c + step]
                Rd = transforms.coset_eval(transforms.intt(p[sel]), n)
                acc = gf.add(acc, gf.sum_mod(gf.mul(Rd, U[W[a:b][sel]]), axis=0))
        for gamma, betas, rows in by_gamma.values():    # Σ βᵢ·Uᵢ over every block that shares γ, then × ĝ
            s = _weighted_rows(np.concatenate(betas), U, np.concatenate(rows), n)
            if gamma is not None and id(gamma) not in ghat:
                ghat[id(gamma)] = transforms.coset_eval(transforms.intt(gamma[None, :]), n)[0]
            acc = gf.add(acc, s if gamma is None else gf.mul(ghat[id(gamma)], s))
        return acc


#: cells of the dense rows multiplied by the Lagrange values in one product (bounds the verifier's temporaries)
VALUE_CELLS = 1 << 24


def values_at(reps: Sequence[Rows], lag: np.ndarray, budget: int | None = None) -> list[np.ndarray]:
    """:meth:`Rows.values_at` of several repetitions: rank-one blocks from one ``k × t`` product per distinct
    ``γ``, constant rows as their constant (the basis sums to 1), and the other dense rows of every
    repetition gathered into as few products with ``lag`` as :data:`VALUE_CELLS` allows (each product splits
    ``lag`` into limbs once). Deferred blocks are computed in groups that fit ``budget`` bytes (default
    :data:`VERIFY_DEFERRED_BYTES`)."""
    k, t = lag.shape
    if any(isinstance(p, Deferred) for R in reps for p in R.parts):     # the deferred rows a group at a time
        values = []
        for _, group in materialized(reps, VERIFY_DEFERRED_BYTES if budget is None else budget):
            values += values_at(group, lag)
            del group                                   # before the next group is made
            allocator.trim(allocator.TRIM_AT_LEAST)
        return values
    outs = [np.empty((R.n_rows, t), dtype=np.int64) for R in reps]
    gammas, pending = {}, []
    for R, out in zip(reps, outs):
        for p, a, b in R._spans():
            if isinstance(p, Outer):
                key = id(p.gamma)
                if key not in gammas:
                    gammas[key] = (np.ones(t, dtype=np.int64) if p.gamma is None
                                   else gf.matmul(p.gamma[None, :], lag)[0])
                out[a:b] = gf.mul(p.beta[:, None], gammas[key][None, :])
                continue
            const = _row_consts(p)
            out[a:b][const] = p[const, :1]
            rows = np.flatnonzero(~const)
            step = max(1, VALUE_CELLS // k)
            for c in range(0, len(rows), step):                # the rows are gathered when multiplied, not here
                pending.append((out, a + rows[c:c + step], p, rows[c:c + step]))
    group, cells = [], 0
    for item in pending + [None]:
        if item is None or (group and cells + len(item[3]) * k > VALUE_CELLS):
            if group:
                src = [p[rows] for _, _, p, rows in group]
                vals = gf.matmul(src[0] if len(src) == 1 else np.concatenate(src), lag)
                del src
                at = 0
                for out, where, _, _ in group:
                    out[where] = vals[at:at + len(where)]
                    at += len(where)
            group, cells = [], 0
        if item is not None:
            group.append(item)
            cells += len(item[3]) * k
    return outs


def _weighted_rows(beta: np.ndarray, U: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """``Σᵢ βᵢ·U[rows[i]]`` (length ``n``), a block of rows at a time."""
    acc = np.zeros(n, dtype=np.int64)
    step = max(1, BLOCK_CELLS // n)
    for a in range(0, len(rows), step):
        acc = gf.add(acc, gf.matmul(beta[None, a:a + step], U[rows[a:a + step]])[0])
    return acc
