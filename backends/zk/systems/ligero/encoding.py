"""The rows of the two committed matrices, computed on demand from the witness and encoded.

    round 1   z | a = Az | b = Bz | c = Cz | v = Lz | m | masks (proximity, linear, quadratic)
    round 2   h_1 … h_σL | g_1 … g_σL | x_1 y_1 π_1 | …        (after the lookup and Freivalds challenges)

Rows are numbered end to end over both rounds (:class:`.protocol.Layout`). A row holds ``k`` values laid out
as :func:`~circuitgrad.backends.zk.circuits.gf.as_rows` does; its polynomial is ``interp_H(values) + (X^k − 1)·ρᵢ``, and the ``t`` masking
coefficients ``ρᵢ`` come from a pseudorandom function (SHAKE-256) of the proof's secret seed and the row's
number. So any process that holds the seed, the witness and the challenges recomputes any range of rows bit
for bit, in any grouping: the prover commits a block of rows and drops it, recomputes it for the tests and
the opened columns, and several processes can share the rows of one proof (:mod:`.prover`).

What stays in memory is the witness ``z``, the multiplicities ``m``, the round-2 rows that are not per
lookup (``g``, the Freivalds vectors) and the masks; the lookup values ``v``, the products ``Az``, ``Bz``,
``Cz`` and the inverses ``h`` are recomputed from ``z`` for the rows asked for.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

from circuitgrad import allocator

from ...circuits import gf, tables
from . import contraction, lookup, ntt as transforms

__all__ = ["Encoding", "prf", "rows_of"]


def prf(seed: bytes, label: bytes, index: int, nbytes: int) -> bytes:
    """``nbytes`` pseudorandom bytes for ``(label, index)`` under the secret ``seed`` (SHAKE-256)."""
    return hashlib.shake_256(seed + label + b":" + int(index).to_bytes(8, "little")).digest(nbytes)


def rows_of(values_of, total: int, lo: int, hi: int, k: int) -> np.ndarray:
    """Rows ``lo … hi`` (``k`` cells each) of a vector of ``total`` values, zero-padded past its end, where
    ``values_of(a, b)`` gives values ``a … b`` of the vector."""
    out = np.zeros((hi - lo) * k, dtype=np.int64)
    a, b = min(lo * k, total), min(hi * k, total)
    if b > a:
        out[:b - a] = values_of(a, b)
    return out.reshape(hi - lo, k)


#: lookups whose values are computed at once while counting the multiplicities
_LOOKUP_CELLS = 1 << 22


def _inverses(v: np.ndarray, alpha: int, sh) -> np.ndarray:
    """``1/(α − v)`` elementwise; :class:`.lookup.AlphaCollision` if some ``v`` is ``α`` (an honest prover meets
    one with probability at most ``σL·(padded lookups + table entries)/p``, and proves again)."""
    den = gf.sub(alpha, v)
    if not den.all():
        chance = math.log2(max(1, sh.sl * (sh.mv * sh.k + sh.size)) / gf.P)
        raise lookup.AlphaCollision(f"ligero: a lookup challenge equals a looked-up value or a table entry "
                                    f"(probability below 2^{chance:.0f}); prove again (fresh masking randomness "
                                    f"gives a fresh challenge)")
    return gf.batch_inv(den)


def _table_rows(m: np.ndarray, alphas: np.ndarray, sh) -> np.ndarray:
    """The rows ``g_1 … g_σL``: ``g_s = m/(α_s − T)`` over the table entries ``T``."""
    table, _ = sh.entries()
    return np.concatenate([gf.as_rows(gf.mul(_inverses(table, a, sh), m), sh.mm, sh.k) for a in alphas.tolist()])


class Encoding:
    """The committed rows of one proof. ``seed`` (secret, 32 bytes) draws every row's masking coefficients;
    ``masks`` are the coefficient rows of the ``3σ`` mask rows (the prover's driver holds them; a worker that
    computes only witness rows needs none)."""

    def __init__(self, pc, z: np.ndarray, lay, p, seed: bytes, masks: np.ndarray | None = None):
        self.pc, self.z, self.lay, self.p, self.seed, self.masks = pc, z, lay, p, seed, masks
        self.m = self._multiplicities() if lay.lk.n else None
        self.m_rows = gf.as_rows(self.m, lay.lk.mm, p.k) if lay.lk.n else None
        self.alphas = np.zeros(0, dtype=np.int64)
        self.held = None                           # the round-2 rows kept whole: g_s, then the Freivalds vectors
        lk, k = lay.lk, p.k
        mz, mq, c = lay.mz, lay.mq, lay.mz + 3 * lay.mq
        A, B, C = pc.mats
        nc = pc.n_constraints
        self.segments = [(0, mz, lambda lo, hi: rows_of(lambda a, b: z[a:b], len(z), lo, hi, k))]
        for i, M in enumerate((A, B, C)):
            self.segments.append((mz + i * mq, mz + (i + 1) * mq,
                                  lambda lo, hi, M=M: rows_of(lambda a, b: M.rows(z, a, b), nc, lo, hi, k)))
        if lk.n:
            self.segments += [(c, c + lk.mv, self.lookup_values),
                              (c + lk.mv, lay.mw, lambda lo, hi: self.m_rows[lo:hi])]
        r2 = lay.rows
        if lk.n:
            self.segments += [(r2 + s * lk.mv, r2 + (s + 1) * lk.mv, lambda lo, hi, s=s: self._inverses(s, lo, hi))
                              for s in range(lk.sl)]
        if lay.second:
            self.segments.append((r2 + lk.sl * lk.mv, lay.total, lambda lo, hi: self.held[lo:hi]))

    # -- the values ---------------------------------------------------------------------------------------------

    def lookup_values(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo … hi`` of ``v = Lz``."""
        return rows_of(lambda a, b: self.pc.L.rows(self.z, a, b), self.pc.n_lookups, lo, hi, self.p.k)

    def _multiplicities(self) -> np.ndarray:
        """``m``: how often each table entry is looked up (a pass over ``L``, which also checks every lookup)."""
        pc, sh = self.pc, self.lay.lk
        functions = pc.r1cs.function_tables
        start = sh.starts()
        m = np.zeros(sh.size, dtype=np.int64)
        step = max(1, _LOOKUP_CELLS // self.p.k)
        for lo in range(0, sh.mv, step):
            hi = min(sh.mv, lo + step)
            a, b = lo * self.p.k, min(hi * self.p.k, pc.n_lookups)
            v, keys = pc.L.rows(self.z, a, b), pc.r1cs.lookup_keys(a, b)
            out = tables.outside(keys, v, functions)
            if out.any():
                bad = int(np.flatnonzero(out)[0])
                raise ValueError(f"ligero: lookup {a + bad} ({pc.r1cs.lookup_tag_of(a + bad)}) is outside its table "
                                 f"{tables.describe(int(keys[bad]), functions)}: the witness does not satisfy "
                                 f"the circuit")
            m += np.bincount(start[sh.table_of(keys)] + tables.index(keys, v, functions), minlength=sh.size)
        allocator.trim(allocator.TRIM_AT_LEAST)     # the blocks' temporaries (0.6 GiB of heap on tinygpt)
        return m

    def start_second(self, alphas: np.ndarray, draws: list) -> None:
        """The round-2 rows that follow from the challenges and are kept whole (``g_s``, the Freivalds vectors).

        Raises :class:`.lookup.AlphaCollision` when a challenge is a table entry (a looked-up value equal to a
        challenge is found as the inverses ``h`` are computed)."""
        self.alphas = alphas
        lay, k = self.lay, self.p.k
        parts = []
        if lay.lk.n:
            parts.append(_table_rows(self.m, alphas, lay.lk))
        if lay.cs.n:
            parts.append(contraction.second_rows(self.z, self.pc.contraction, lay.cs, draws))
        self.held = np.concatenate(parts) if parts else np.zeros((0, k), dtype=np.int64)

    def _inverses(self, s: int, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo … hi`` of ``h_s = 1/(α_s − v)``."""
        return _inverses(self.lookup_values(lo, hi), int(self.alphas[s]), self.lay.lk)

    def keep_values(self) -> None:
        """Keep every row's values once computed (``8·rows·k`` bytes): the passes after the commitment then
        encode them again without computing ``Az``, ``Lz`` or the inverses again."""
        self._kept = np.empty((self.lay.total, self.p.k), dtype=np.int64)
        self._have = np.zeros(self.lay.total, dtype=bool)

    def values(self, a: int, b: int) -> np.ndarray:
        """The witness values of rows ``a … b`` (no mask row among them): ``(b − a, k)``."""
        kept = getattr(self, "_kept", None)
        if kept is not None and self._have[a:b].all():
            return kept[a:b]
        out = np.empty((b - a, self.p.k), dtype=np.int64)
        for s0, s1, f in self.segments:
            lo, hi = max(a, s0), min(b, s1)
            if lo < hi:
                out[lo - a:hi - a] = f(lo - s0, hi - s0)
        if kept is not None:
            kept[a:b] = out
            self._have[a:b] = True
        return out

    # -- the encoding -------------------------------------------------------------------------------------------

    def rho(self, a: int, b: int) -> np.ndarray:
        """The masking coefficients ``ρᵢ`` of rows ``a … b``: ``(b − a, t)``."""
        t = self.p.t
        data = b"".join(prf(self.seed, b"rho", i, 16 * t) for i in range(a, b))
        return gf.from_bytes128(data).reshape(b - a, t)

    def coeffs(self, a: int, b: int) -> np.ndarray:
        """Coefficients (degree < K) of the witness rows ``a … b``: ``interp_H(values) + (X^k − 1)·ρ``."""
        k, t = self.p.k, self.p.t
        out = np.zeros((b - a, self.p.K), dtype=np.int64)
        out[:, :k] = transforms.intt(self.values(a, b))
        rho = self.rho(a, b)
        out[:, :t] = gf.sub(out[:, :t], rho)
        out[:, k:] = rho
        return out

    def is_mask(self, a: int, b: int) -> bool:
        """Whether rows ``a … b`` are mask rows (they lie wholly inside or wholly outside them)."""
        m0, m1 = self.lay.mw, self.lay.rows
        if a < m1 and b > m0 and not (m0 <= a and b <= m1):
            raise ValueError(f"rows {a}…{b} straddle the mask rows {m0}…{m1}")
        return m0 <= a and b <= m1

    def evals(self, a: int, b: int, coeffs: np.ndarray | None = None) -> np.ndarray:
        """Rows ``a … b`` evaluated on the coset ``D`` (any rows, masks included): ``(b − a, n)``."""
        n = self.p.n
        out = np.empty((b - a, n), dtype=np.int64)
        for lo, hi in self.pieces(a, b):
            if self.is_mask(lo, hi):
                out[lo - a:hi - a] = transforms.coset_eval(self.masks[lo - self.lay.mw:hi - self.lay.mw], n)
            else:
                c = coeffs[lo - a:hi - a] if coeffs is not None else self.coeffs(lo, hi)
                out[lo - a:hi - a] = transforms.coset_eval(c, n)
        return out

    def at(self, a: int, b: int, powers: np.ndarray) -> np.ndarray:
        """Rows ``a … b`` at the points whose powers are ``powers`` (``powers[i, j] = η_j^i``)."""
        out = np.empty((b - a, powers.shape[1]), dtype=np.int64)
        for lo, hi in self.pieces(a, b):
            c = self.masks[lo - self.lay.mw:hi - self.lay.mw] if self.is_mask(lo, hi) else self.coeffs(lo, hi)
            out[lo - a:hi - a] = gf.matmul(c, powers[:c.shape[1]])
        return out

    def pieces(self, a: int, b: int) -> list[tuple[int, int]]:
        """``a … b`` cut at the mask rows' bounds."""
        cuts = sorted({a, b} | {x for x in (self.lay.mw, self.lay.rows) if a < x < b})
        return list(zip(cuts[:-1], cuts[1:]))
