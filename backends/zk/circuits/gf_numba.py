"""Compiled kernels (Numba) for the hot spots of :mod:`.gf`: NTTs of many rows, elementwise and matrix products.

:mod:`.gf` calls these when Numba is installed (``pip install 'circuitgrad[numba]'``) and the NumPy path is not
forced (``CIRCUITGRAD_GF=numpy`` or :func:`.gf.set_kernels`). Every result is the canonical representative in
``[0, p)``, so it equals the NumPy path's bit for bit (``tests/test_zk_gf.py`` checks it):

* ``a·w mod p`` (``a``, ``w`` in ``[0, p)``) takes the quotient ``q = ⌊fl(a)·fl(w/p)⌋``, within 1 of
  ``⌊a·w/p⌋`` as in the NumPy path, then ``r = a·w − q·p`` in *unsigned* 64-bit arithmetic, which wraps by
  definition (Numba marks signed products ``nsw``, under which LLVM treats an overflow as undefined); the true
  ``r`` lies in ``[−p, 2p)`` and two compares bring it into ``[0, p)``.
* An NTT is decimation in time on one row at a time: the row is read in bit-reversed order (the permutation
  costs one gather, fused with the copy the call makes anyway), its first two stages are one radix-4
  butterfly, and each later stage is one loop over two contiguous halves with a contiguous twiddle table,
  which LLVM vectorises. Every value is kept in ``[0, p)`` (a compare costs nothing here, unlike a NumPy
  pass). A row of ``2^16`` values (512 KiB) stays in L2 through its stages.
* A matrix product with a short side (the prover's combinations of a few dozen rows) is computed by direct
  products, a row of ``b`` times one entry of ``a`` added into a strip of ``out`` that stays in cache: about
  0.5 ns per multiply-add, against BLAS limb products whose splitting and joining cost more than that until
  all three sides are long. :func:`.gf.matmul` calls it where it measured at least 2× faster: an inner
  dimension of at most 64, an outer one of at most 4, or at most ``2^21`` multiply-adds.
* Every kernel runs on the calling thread. Spreading NTT rows over the two cores with ``prange`` halved an
  NTT on an idle machine but did not shorten a proof: the prover's GEMMs (MKL) and hashing then competed
  with Numba's OpenMP workers, which spin after each parallel region (the GPT d=32 proof took 4.1 s with them,
  2.4 s without, 2.5 s with ``OMP_WAIT_POLICY=passive``), and waking a worker on a busy core cost
  milliseconds per small call.

NTT inputs may lie in ``[0, 2p)`` (as the NumPy path's lazy butterflies allow); products take ``[0, p)``.
Every kernel is compiled on first use and cached on disk (``cache=True``), and releases the GIL while it runs
(``nogil=True``: threads of one process, such as a Dask worker's, transform rows side by side).
"""
from __future__ import annotations

from functools import lru_cache

import numba as nb
import numpy as np

from .field import LIGERO51

__all__ = ["ntt", "coset_eval", "mul", "mul_const", "matmul", "apply_outer", "scatter_outer", "limbs2", "csr_rows",
           "gather_segment_sum"]

_PRIME = LIGERO51.p           # the field of :mod:`.gf` (this module imports nothing of it: gf loads this one)
_P = np.int64(_PRIME)
_PU = np.uint64(_PRIME)
_INV_P = 1.0 / _PRIME
_U = nb.uint64
_COLS = 2048                 # columns per strip of a direct matrix product


@nb.njit(inline="always")
def _red(a):
    """``a`` in ``[0, 2p)`` → ``[0, p)``."""
    return a - _P if a >= _P else a


@nb.njit(inline="always")
def _diff(a, b):
    """``a − b mod p`` for ``a``, ``b`` in ``[0, p)``."""
    d = a - b
    return d + _P if d < 0 else d


@nb.njit(inline="always")
def _fix(r):
    """The wrapped ``r`` (true value in ``[−p, 2p)``) → ``[0, p)``."""
    r = nb.int64(r)
    if r < 0:
        r += _P
    if r >= _P:
        r -= _P
    return r


@nb.njit(inline="always")
def _mulmod(a, w, wf):
    """``a·w mod p`` for ``a``, ``w`` in ``[0, p)`` and ``wf = fl(w/p)``."""
    q = nb.int64(nb.float64(a) * wf)                    # within 1 of ⌊a·w/p⌋
    return _fix(_U(a) * _U(w) - _U(q) * _PU)


@nb.njit(inline="always")
def _mulmod2(a, b):
    """``a·b mod p`` for ``a``, ``b`` in ``[0, p)`` (the quotient formed as the NumPy path forms it)."""
    q = nb.int64(nb.float64(a) * nb.float64(b) * _INV_P)
    return _fix(_U(a) * _U(b) - _U(q) * _PU)


@nb.njit(inline="always")
def _butterflies(u, v, tw, twf):
    """``u, v ← u + v·w, u − v·w`` elementwise (separate views, so that LLVM vectorises the loop)."""
    for j in range(u.shape[0]):
        a = u[j]
        b = _mulmod(v[j], tw[j], twf[j])
        u[j] = _red(a + b)
        v[j] = _diff(a, b)


@nb.njit(inline="always")
def _ntt_row(x, tw, twf):
    """DIT NTT of the row ``x`` in place: values in ``[0, p)`` in bit-reversed order in, natural order out.

    ``tw``/``twf`` hold the twiddles ``w_2h^j``, ``j < h``, of the stages ``h = 2, 4, …, n/2`` one after the other
    (stage ``h`` at offset ``h − 2``) and their quotients ``w/p``. The stages ``h = 1, 2`` (twiddles 1 and
    ``w_4``) are one radix-4 butterfly.
    """
    n = x.shape[0]
    if n == 2:
        a, b = x[0], x[1]
        x[0], x[1] = _red(a + b), _diff(a, b)
    if n < 4:
        return
    w4, w4f = tw[1], twf[1]
    for s in range(0, n, 4):
        a, b, c, e = x[s], x[s + 1], x[s + 2], x[s + 3]
        t0, t1 = _red(a + b), _diff(a, b)
        t2, t3 = _red(c + e), _mulmod(_diff(c, e), w4, w4f)
        x[s], x[s + 2] = _red(t0 + t2), _diff(t0, t2)
        x[s + 1], x[s + 3] = _red(t1 + t3), _diff(t1, t3)
    h = 4
    while h < n:
        for s in range(0, n, 2 * h):
            _butterflies(x[s:s + h], x[s + h:s + 2 * h], tw[h - 2:2 * h - 2], twf[h - 2:2 * h - 2])
        h *= 2


@nb.njit(cache=True, nogil=True)
def _ntt(x, out, tw, twf, rev, scale, scalef):
    """``out[r] = NTT(x[r])`` for the rows of ``x`` (``(rows, n)``, values in ``[0, 2p)``), each value then
    multiplied by ``scale`` (per column, ``scalef = scale/p``; empty for none)."""
    n = x.shape[1]
    for r in range(x.shape[0]):
        row = out[r]
        src = x[r]
        for i in range(n):
            row[i] = _red(src[rev[i]])
        _ntt_row(row, tw, twf)
        if scale.shape[0]:
            for i in range(n):
                row[i] = _mulmod(row[i], scale[i], scalef[i])


@nb.njit(cache=True, nogil=True)
def _coset(c, out, shift, shiftf, tw, twf, rev):
    """``out[r] = NTT((c[r]·shift^j)_j zero-padded)`` for coefficients ``c`` (``(rows, d)``, values in
    ``[0, 2p)``) and ``out`` of shape ``(rows, n)``, ``n ≥ d``; ``shift``/``shiftf``: the shift's powers and their
    quotients."""
    d = c.shape[1]
    for r in range(c.shape[0]):
        row = out[r]
        for i in range(row.shape[0]):
            j = rev[i]
            row[i] = _mulmod(_red(c[r, j]), shift[j], shiftf[j]) if j < d else 0
        _ntt_row(row, tw, twf)


@nb.njit(cache=True, nogil=True)
def _mul_flat(a, b, out):
    for i in range(out.shape[0]):
        out[i] = _mulmod2(a[i], b[i])


@nb.njit(cache=True, nogil=True)
def _mul_rows(a, b, out):
    """``out[r] = a[r]·b`` for ``(rows, d)`` arrays and a vector ``b`` of length ``d``."""
    for r in range(a.shape[0]):
        for i in range(a.shape[1]):
            out[r, i] = _mulmod2(a[r, i], b[i])


@nb.njit(cache=True, nogil=True)
def _mul_cols(a, b, out):
    """``out[r] = a[r]·b[r]`` for ``(rows, d)`` arrays and a vector ``b`` of length ``rows``."""
    for r in range(a.shape[0]):
        br = b[r]
        for i in range(a.shape[1]):
            out[r, i] = _mulmod2(a[r, i], br)


@nb.njit(cache=True, nogil=True)
def _mul_const(x, w, wf, out):
    for i in range(out.shape[0]):
        out[i] = _mulmod(x[i], w, wf)


# ---- the calls :mod:`.gf` makes (tables cached per size) ----

@nb.njit(cache=True, nogil=True)
def _powers_into(base, basef, out):
    acc = np.int64(1)
    for i in range(out.shape[0]):
        out[i] = acc
        acc = _mulmod(acc, base, basef)


@lru_cache(maxsize=64)
def _powers(base: int, n: int) -> np.ndarray:
    """``base^j`` for ``j < n`` (``base`` in ``[0, p)``)."""
    out = np.empty(n, dtype=np.int64)
    b = base % _PRIME
    _powers_into(np.int64(b), b * _INV_P, out)
    return out


def _root(n: int) -> int:
    """A primitive ``n``-th root of unity (``3`` generates the multiplicative group)."""
    return pow(3, (_PRIME - 1) // n, _PRIME)


@lru_cache(maxsize=64)
def _bitrev(n: int) -> np.ndarray:
    bits = n.bit_length() - 1
    idx = np.arange(n)
    rev = np.zeros(n, dtype=np.int64)
    for i in range(bits):
        rev |= ((idx >> i) & 1) << (bits - 1 - i)
    return rev


@lru_cache(maxsize=64)
def _tables(root: int, n: int) -> tuple:
    """Twiddles of the stages ``h = 2 … n/2`` one after the other, their quotients ``w/p``, and the bit reversal."""
    w = _powers(root, n)
    parts = []
    h = 2
    while h < n:
        parts.append(w[::n // (2 * h)][:h])
        h *= 2
    tw = np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
    return tw, tw.astype(np.float64) * _INV_P, _bitrev(n)


@lru_cache(maxsize=64)
def _scaled(n: int, base: int) -> tuple:
    """``n⁻¹·base^j`` for ``j < n``, and their quotients (the factors that end an inverse NTT)."""
    s = mul_const(_powers(base, n), pow(n, _PRIME - 2, _PRIME))
    return s, s.astype(np.float64) * _INV_P


@lru_cache(maxsize=64)
def _shifts(base: int, d: int) -> tuple:
    """``base^j`` for ``j < d``, and their quotients."""
    s = _powers(base, d)
    return s, s.astype(np.float64) * _INV_P


_NONE = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))


def ntt(a: np.ndarray, root: int, inverse_base: int | None = None) -> np.ndarray:
    """NTT along the last axis with the root ``root`` (natural order); with ``inverse_base``, each output column
    ``j`` is then multiplied by ``n⁻¹·inverse_base^j`` (an inverse NTT: ``1``; from a coset: ``shift⁻¹``)."""
    n = a.shape[-1]
    x = np.ascontiguousarray(a, dtype=np.int64).reshape(-1, n)
    out = np.empty(x.shape, dtype=np.int64)
    if out.size:
        _ntt(x, out, *_tables(root, n), *(_NONE if inverse_base is None else _scaled(n, inverse_base)))
    return out.reshape(a.shape)


def coset_eval(coeffs: np.ndarray, n: int, shift: int) -> np.ndarray:
    """Evaluations on ``shift·⟨ω_n⟩`` of the polynomials with ``coeffs`` (last axis, length ``d ≤ n``)."""
    d = coeffs.shape[-1]
    lead = coeffs.shape[:-1]
    c = np.ascontiguousarray(coeffs, dtype=np.int64).reshape(int(np.prod(lead)), d)
    out = np.zeros((c.shape[0], n), dtype=np.int64)
    if out.size and d:
        _coset(c, out, *_shifts(shift, d), *_tables(_root(n), n))
    return out.reshape(*lead, n)


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a·b mod p`` for non-empty ``int64`` arrays of at least one dimension each (broadcasting)."""
    if a.ndim < b.ndim or a.ndim == b.ndim == 2 and a.shape[1] == 1 and b.shape[1] != 1:
        a, b = b, a                                     # the larger operand first
    if a.shape == b.shape:
        x, y = np.ascontiguousarray(a), np.ascontiguousarray(b)
        out = np.empty(x.shape, dtype=np.int64)
        _mul_flat(x.reshape(-1), y.reshape(-1), out.reshape(-1))
        return out
    if b.ndim == 1 and a.ndim > 1 and a.shape[-1] == b.shape[0]:
        x = np.ascontiguousarray(a)
        out = np.empty(x.shape, dtype=np.int64)
        _mul_rows(x.reshape(-1, b.shape[0]), np.ascontiguousarray(b), out.reshape(-1, b.shape[0]))
        return out
    if a.ndim == 2 and b.shape == (a.shape[0], 1):
        x = np.ascontiguousarray(a)
        out = np.empty(x.shape, dtype=np.int64)
        _mul_cols(x, np.ascontiguousarray(b[:, 0]), out)
        return out
    shape = np.broadcast_shapes(a.shape, b.shape)
    return mul(np.ascontiguousarray(np.broadcast_to(a, shape)), np.ascontiguousarray(np.broadcast_to(b, shape)))


def mul_const(x: np.ndarray, w: int) -> np.ndarray:
    """``x·w mod p`` for an ``int64`` array ``x`` (values in ``[0, p)``) and ``w`` in ``[0, p)``."""
    x = np.ascontiguousarray(x, dtype=np.int64)
    out = np.empty(x.shape, dtype=np.int64)
    _mul_const(x.reshape(-1), np.int64(w), w * _INV_P, out.reshape(-1))
    return out


@nb.njit(cache=True, nogil=True)
def _matmul(a, b, out):
    """``out = a @ b mod p`` by direct products: for each strip of ``_COLS`` columns, each row of ``b`` times each
    entry of its column of ``a`` is added into the strip of ``out`` (which stays in cache)."""
    m, K = a.shape
    for c0 in range(0, b.shape[1], _COLS):
        c1 = min(c0 + _COLS, b.shape[1])
        for k in range(K):
            src = b[k, c0:c1]
            for i in range(m):
                w = a[i, k]
                wf = nb.float64(w) * _INV_P
                row = out[i, c0:c1]
                for c in range(src.shape[0]):
                    row[c] = _red(row[c] + _mulmod(src[c], w, wf))


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b mod p`` for 2-D ``int64`` arrays of field elements, by direct products (for short inner
    dimensions, where the BLAS limb products of :func:`.gf.matmul` spend their time splitting and joining)."""
    if b.shape[1] < a.shape[0]:                         # the longer outer side as the rows the loop runs along
        return np.ascontiguousarray(matmul(b.T, a.T).T)
    out = np.zeros((a.shape[0], b.shape[1]), dtype=np.int64)
    _matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), out)
    return out


@nb.njit(cache=True, nogil=True)
def _apply_outer(ptr, rows, coeffs, starts, first, betas, gammas, k, out):
    """``out[s, w] = Σ_e r_s(rows[e])·coeffs[e]`` over the terms ``e`` of wire ``w``, with ``r_s`` rank one by blocks
    (see :meth:`~circuitgrad.backends.zk.systems.ligero.circuitdata.Transposed.apply_outer`)."""
    sg = betas.shape[0]
    nparts = starts.shape[0]
    acc = np.zeros(sg, dtype=np.int64)
    for w in range(ptr.shape[0] - 1):
        acc[:] = 0
        for e in range(ptr[w], ptr[w + 1]):
            row = np.int64(rows[e])
            j = nparts - 1
            while j > 0 and starts[j] > row:
                j -= 1
            local = row - starts[j]
            bi = first[j] + local // k
            gi = local % k
            c = coeffs[e]
            for s in range(sg):
                v = _mulmod2(_mulmod2(betas[s, bi], gammas[s, gi]), c)
                a = acc[s] + v
                acc[s] = a - _P if a >= _P else a
        for s in range(sg):
            out[s, w] = acc[s]


def apply_outer(ptr: np.ndarray, rows: np.ndarray, coeffs: np.ndarray, starts: np.ndarray, first: np.ndarray,
                betas: np.ndarray, gammas: np.ndarray, out: np.ndarray) -> np.ndarray:
    """:meth:`~circuitgrad.backends.zk.systems.ligero.circuitdata.Transposed.apply_outer` in one pass over the terms
    (``out`` zeroed, ``(σ, ≥ wires)``)."""
    _apply_outer(ptr, rows, coeffs, starts, first, np.ascontiguousarray(betas, dtype=np.int64),
                 np.ascontiguousarray(gammas, dtype=np.int64), np.int64(gammas.shape[1]), out)
    return out


@nb.njit(cache=True, nogil=True)
def _scatter_outer(ptr, wires, codes, palette, first, betas, gammas, k, out):
    """``out[s, wires[e]] += r_s(i)·palette[codes[e]]`` over the terms ``e`` of every row ``i``, with
    ``r_s(i) = betas[s, first + i // k]·gammas[s, i % k]``."""
    sg = betas.shape[0]
    r = np.zeros(sg, dtype=np.int64)
    for i in range(ptr.shape[0] - 1):
        lo, hi = ptr[i], ptr[i + 1]
        if lo == hi:
            continue
        bi = first + i // k
        gi = i % k
        for s in range(sg):
            r[s] = _mulmod2(betas[s, bi], gammas[s, gi])
        for e in range(lo, hi):
            w = wires[e]
            c = palette[codes[e]]
            for s in range(sg):
                a = out[s, w] + _mulmod2(r[s], c)
                out[s, w] = a - _P if a >= _P else a


def scatter_outer(ptr: np.ndarray, wires: np.ndarray, codes: np.ndarray, palette: np.ndarray, first: int,
                  betas: np.ndarray, gammas: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Adds ``Mᵀ·r_s`` into ``out[s]`` for one matrix in row order, ``r_s`` rank one (see
    :meth:`~circuitgrad.backends.zk.systems.ligero.circuitdata.Prepared.apply_outer`): the transposed product without
    a transposed copy of ``M``."""
    _scatter_outer(ptr, wires, codes, np.ascontiguousarray(palette, dtype=np.int64), np.int64(first),
                   np.ascontiguousarray(betas, dtype=np.int64), np.ascontiguousarray(gammas, dtype=np.int64),
                   np.int64(gammas.shape[1]), out)
    return out


@nb.njit(cache=True, nogil=True)
def _csr_rows(ptr, wires, codes, palette, z, out):
    for i in range(out.shape[0]):
        acc = 0
        for e in range(ptr[i], ptr[i + 1]):
            a = acc + _mulmod2(palette[codes[e]], z[wires[e]])
            acc = a - _P if a >= _P else a
        out[i] = acc


def csr_rows(ptr: np.ndarray, wires: np.ndarray, codes: np.ndarray, palette: np.ndarray, z: np.ndarray,
             a: int, b: int) -> np.ndarray:
    """Rows ``a … b`` of ``M·z`` for a CSR matrix whose term ``e`` is ``palette[codes[e]]`` on ``wires[e]``
    (:meth:`~circuitgrad.backends.zk.systems.ligero.circuitdata._Mat.rows` in one pass: no gathered
    temporaries)."""
    out = np.empty(b - a, dtype=np.int64)
    _csr_rows(ptr[a:b + 1], wires, codes, np.ascontiguousarray(palette, dtype=np.int64),
              np.ascontiguousarray(z, dtype=np.int64), out)
    return out


@nb.njit(cache=True, nogil=True)
def _gather_segment_sum(values, order, ptr, out):
    for i in range(out.shape[0]):
        acc = 0
        for j in range(ptr[i], ptr[i + 1]):
            a = acc + values[order[j]]
            acc = a - _P if a >= _P else a
        out[i] = acc


def gather_segment_sum(values: np.ndarray, order: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """``out[i] = Σ values[order[ptr[i]:ptr[i+1]]] mod p`` for ``values`` in ``[0, p)`` (one pass, no gathered
    copy)."""
    out = np.empty(len(ptr) - 1, dtype=np.int64)
    _gather_segment_sum(np.ascontiguousarray(values, dtype=np.int64), np.asarray(order), np.asarray(ptr), out)
    return out


@nb.njit(cache=True, nogil=True)
def _limbs2(x, lo, hi):
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            v = nb.float64(x[i, j])
            h = np.floor(v * 2.0 ** -26 + 0.5)
            hi[i, j] = h
            lo[i, j] = v - h * 2.0 ** 26


def limbs2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`.gf._limbs2` in one pass over ``x`` (any strides: a column strip of a wide matrix is read in place):
    ``x = lo + hi·2^26`` with ``|lo| ≤ 2^25``, ``float64`` in ``x``'s order (a column-major ``x`` is walked as
    its transpose, in memory order)."""
    if x.ndim == 2 and abs(x.strides[0]) < abs(x.strides[1]):
        lo, hi = limbs2(x.T)
        return lo.T, hi.T
    lo = np.empty(x.shape, dtype=np.float64)
    hi = np.empty(x.shape, dtype=np.float64)
    _limbs2(x, lo, hi)
    return lo, hi
