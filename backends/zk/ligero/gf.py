"""Vectorised arithmetic in the 51-bit prime field ``F_p``, ``p = 262139·2^33 + 1``.

Elements are ``int64`` arrays with values in ``[0, p)``. The prime is chosen so
that every operation stays in NumPy:

* ``p < 2^51``: a product ``a·b < 2^102`` is reduced with the floating-point
  quotient trick. ``q = ⌊fl(a)·fl(b)·fl(1/p)⌋`` is within 1 of the true
  quotient, since the float error is below ``2^51·3·2^−53 < 1``. Then
  ``r = a·b − q·p`` is computed in wrapping ``int64`` arithmetic, lies in
  ``[−p, 2p)``, and is corrected with two sign masks. That makes about 12
  NumPy passes, with no Python loop over elements.
* ``2^33 | p − 1``: radix-2 NTTs exist up to size ``2^33``. Galois's generic
  NTT at BN254 size took 234 s at ``2^13``; this one takes milliseconds.
* ``3`` generates ``F_p^*``, which gives the coset ``3·⟨ω_n⟩`` where codewords
  are evaluated. It is disjoint from the message subgroup ``H = ⟨ω_k⟩``.

Matrix products (used for the proximity test) split each element into three
17-bit limbs, so each of the nine limb products is exact in ``float64`` BLAS
for inner dimensions below ``2^19``.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..field import LIGERO51

__all__ = ["P", "GENERATOR", "TWO_ADICITY", "mul", "add", "sub", "neg", "inv", "powers", "sum_mod",
           "segment_sum", "matmul", "batch_inv", "lagrange_at", "root_of_unity", "ntt", "intt", "coset_eval", "coset_interp",
           "from_bytes128", "reduce"]

P = LIGERO51.p                    # 262139·2^33 + 1 = 2251756864012289, prime, 51 bits
GENERATOR = 3
TWO_ADICITY = 33
_INV_P = 1.0 / P
_P = np.int64(P)


def reduce(x) -> np.ndarray:
    """Signed integers (int64 or Python ints) → canonical ``int64`` representatives in ``[0, p)``."""
    a = np.asarray(x)
    if a.dtype == object:
        return np.array([int(v) % P for v in a.reshape(-1)], dtype=np.int64).reshape(a.shape)
    return np.mod(a.astype(np.int64), _P)


def as_rows(v: np.ndarray, m: int, k: int) -> np.ndarray:
    """``v`` laid out as ``m`` rows of ``k`` values, zero-padded (how every block of the committed matrix is laid out)."""
    out = np.zeros(m * k, dtype=np.int64)
    out[:len(v)] = v
    return out.reshape(m, k)


def add(a, b) -> np.ndarray:
    s = np.add(a, b, dtype=np.int64)
    s -= _P
    s += _P & (s >> 63)
    return s


def sub(a, b) -> np.ndarray:
    s = np.subtract(a, b, dtype=np.int64)
    s += _P & (s >> 63)
    return s


def neg(a) -> np.ndarray:
    return sub(np.zeros_like(a, dtype=np.int64), a)


def mul(a, b) -> np.ndarray:
    """``a·b mod p`` elementwise (broadcasting)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    q = (a.astype(np.float64) * b.astype(np.float64) * _INV_P).astype(np.int64)
    if a.ndim and b.ndim:
        r = a * b - q * _P                 # exact modulo 2^64 (arrays wrap silently); true value in [-p, 2p)
    else:
        with np.errstate(over="ignore"):   # NumPy scalars warn on wrap-around
            r = a * b - q * _P
    r += _P & (r >> 63)
    r -= _P
    r += _P & (r >> 63)
    return r


def inv(a: int) -> int:
    if int(a) % P == 0:
        raise ZeroDivisionError("inverse of 0 in F_p")
    return pow(int(a), P - 2, P)


def sum_mod(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """``Σ a mod p`` along ``axis``, exact: 26- and 25-bit limbs summed separately (no int64 overflow)."""
    a = np.asarray(a, dtype=np.int64)
    return _join(lo=(a & ((1 << 26) - 1)).sum(axis=axis), hi=(a >> 26).sum(axis=axis))


def _join(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``hi·2^26 + lo mod p`` for limb sums (each far below 2^63)."""
    return add(mul(reduce(hi), 1 << 26), reduce(lo))


def segment_sum(values: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """``out[i] = Σ values[ptr[i]:ptr[i+1]] mod p`` (CSR segments; empty segments give 0)."""
    n = len(ptr) - 1
    out = np.zeros(n, dtype=np.int64)
    if len(values) == 0 or n == 0:
        return out
    nonempty = ptr[1:] > ptr[:-1]
    starts = ptr[:-1][nonempty]
    v = np.asarray(values, dtype=np.int64)
    out[nonempty] = _join(lo=np.add.reduceat(v & ((1 << 26) - 1), starts), hi=np.add.reduceat(v >> 26, starts))
    return out


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b mod p`` for 2-D arrays, via exact float64 limb products (inner dimension < 2^19).

    Both sides split into three 17-bit limbs. The limbs of ``b`` are laid side by side, so three
    BLAS calls compute all nine limb products. Each is below ``2^53`` and therefore exact.
    """
    if a.shape[1] >= 1 << 19:
        raise ValueError("gf.matmul: inner dimension must be below 2^19")
    nb = b.shape[1]
    wide = np.concatenate([((b >> s) & 0x1FFFF).astype(np.float64) for s in (0, 17, 34)], axis=1)
    out = np.zeros((a.shape[0], nb), dtype=np.int64)
    for i, s in enumerate((0, 17, 34)):
        prod = (((a >> s) & 0x1FFFF).astype(np.float64) @ wide).astype(np.int64)
        for j in range(3):
            out = add(out, mul(reduce(prod[:, j * nb:(j + 1) * nb]), pow(2, 17 * (i + j), P)))
    return out


def root_of_unity(n: int) -> int:
    """A primitive ``n``-th root of unity (``n`` a power of two up to ``2^33``)."""
    if n & (n - 1) or not 1 <= n <= 1 << TWO_ADICITY:
        raise ValueError(f"no NTT of size {n} in F_p (sizes are powers of two up to 2^{TWO_ADICITY})")
    return pow(GENERATOR, (P - 1) // n, P)


def powers(base, n: int) -> np.ndarray:
    """``[1, base, base², …, base^(n−1)]`` along a new first axis (``base`` a scalar or an array), by doubling."""
    b = np.asarray(base, dtype=np.int64)
    out = np.ones((n,) + b.shape, dtype=np.int64)
    if n > 1:
        out[1] = b
        filled = 2
        while filled < n:
            step = min(filled, n - filled)
            out[filled:filled + step] = mul(out[:step], mul(out[filled - 1], b))     # × base^filled
            filled += step
    return out


@lru_cache(maxsize=64)
def _powers(base: int, n: int) -> np.ndarray:
    """:func:`powers` of a scalar, cached (NTT twiddles and coset shifts)."""
    out = powers(base, n)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=64)
def _bitrev(n: int) -> np.ndarray:
    bits = n.bit_length() - 1
    idx = np.arange(n)
    rev = np.zeros(n, dtype=np.int64)
    for i in range(bits):
        rev |= ((idx >> i) & 1) << (bits - 1 - i)
    rev.setflags(write=False)
    return rev


def _mul_twiddle(a: np.ndarray, w: np.ndarray, w_over_p: np.ndarray) -> np.ndarray:
    """``a·w mod p`` for a constant ``w`` with ``w/p`` precomputed (two fewer passes than :func:`mul`)."""
    q = (a.astype(np.float64) * w_over_p).astype(np.int64)
    r = a * w - q * _P
    r += _P & (r >> 63)
    r -= _P
    r += _P & (r >> 63)
    return r


@lru_cache(maxsize=64)
def _stage_twiddles(root: int, n: int) -> tuple:
    w = _powers(root, n)
    out = []
    h = n // 2
    while h >= 1:
        tw = np.ascontiguousarray(w[::n // (2 * h)][:h])
        out.append((h, tw, tw.astype(np.float64) * _INV_P))
        h //= 2
    return tuple(out)


def _ntt(a: np.ndarray, root: int) -> np.ndarray:
    """Decimation-in-frequency NTT along the last axis (natural order in and out).

    Rows are processed in blocks of about 2^17 elements, so that every stage's passes stay in cache.
    """
    n = a.shape[-1]
    lead = a.shape[:-1]
    x = np.array(a, dtype=np.int64).reshape(-1, n)
    out = np.empty_like(x)
    stages = _stage_twiddles(root, n)
    rev = _bitrev(n)
    chunk = max(1, (1 << 17) // n)
    for r0 in range(0, x.shape[0], chunk):
        blk = x[r0:r0 + chunk]
        c = blk.shape[0]
        for h, tw, twf in stages:
            v4 = blk.reshape(c, n // (2 * h), 2, h)
            u, v = v4[:, :, 0, :], v4[:, :, 1, :]
            d = sub(u, v)
            s_ = add(u, v)
            v4[:, :, 1, :] = _mul_twiddle(d, tw, twf)
            v4[:, :, 0, :] = s_
        out[r0:r0 + c] = blk[:, rev]
    return out.reshape(*lead, n)


def ntt(a: np.ndarray) -> np.ndarray:
    """Evaluations on ``⟨ω_n⟩`` of polynomials with coefficients ``a`` (last axis, length ``n``)."""
    return _ntt(a, root_of_unity(a.shape[-1]))


def intt(a: np.ndarray) -> np.ndarray:
    """Coefficients of the polynomials with evaluations ``a`` on ``⟨ω_n⟩`` (inverse of :func:`ntt`)."""
    n = a.shape[-1]
    return mul(_ntt(a, inv(root_of_unity(n))), inv(n))


def coset_eval(coeffs: np.ndarray, n: int, shift: int = GENERATOR) -> np.ndarray:
    """Evaluations on ``shift·⟨ω_n⟩`` of polynomials with ``coeffs`` (last axis, length ≤ ``n``)."""
    d = coeffs.shape[-1]
    if d > n:
        raise ValueError(f"degree bound {d} exceeds the domain size {n}")
    padded = np.zeros((*coeffs.shape[:-1], n), dtype=np.int64)
    padded[..., :d] = mul(coeffs, _powers(shift, d))
    return ntt(padded)


def coset_interp(evals: np.ndarray, shift: int = GENERATOR) -> np.ndarray:
    """Coefficients (length ``n``) of the polynomials with evaluations ``evals`` on ``shift·⟨ω_n⟩``."""
    n = evals.shape[-1]
    return mul(intt(evals), _powers(inv(shift), n))


def batch_inv(a: np.ndarray) -> np.ndarray:
    """Elementwise inverses of nonzero elements (any shape).

    Montgomery's trick on a ``(rows, cols)`` reshaping with ``rows ≈ √size``. One Python loop step
    handles a whole row, and a single Fermat inversion per column finishes it.
    """
    a = np.asarray(a, dtype=np.int64)
    if a.size and not a.all():
        raise ZeroDivisionError("batch_inv: an element is 0")
    flat = a.reshape(-1)
    rows = max(1, int(np.sqrt(flat.size)))
    cols = -(-flat.size // rows)
    x = np.ones(rows * cols, dtype=np.int64)
    x[:flat.size] = flat
    x = x.reshape(rows, cols)
    pre = np.empty_like(x)
    acc = np.ones(cols, dtype=np.int64)
    for i in range(rows):
        pre[i] = acc
        acc = mul(acc, x[i])
    inv_acc = np.array([inv(v) for v in acc.tolist()], dtype=np.int64)
    out = np.empty_like(x)
    for i in range(rows - 1, -1, -1):
        out[i] = mul(inv_acc, pre[i])
        inv_acc = mul(inv_acc, x[i])
    return out.reshape(-1)[:flat.size].reshape(a.shape)


def lagrange_at(k: int, points: np.ndarray) -> np.ndarray:
    """``L[h, j] = L_h(points_j)``: the Lagrange basis of the subgroup ``⟨ω_k⟩`` at points outside it.

    ``L_h(x) = (x^k − 1)/k · ω^h/(x − ω^h)``, so ``Σ_h v_h L[h, j]`` is the value at ``points_j`` of
    the polynomial of degree < k that takes the values ``v`` on the subgroup.
    """
    hs = _powers(root_of_unity(k), k)
    x = np.asarray(points, dtype=np.int64)
    xk = np.array([pow(int(v), k, P) for v in x.tolist()], dtype=np.int64)
    scale = mul(sub(xk, 1), inv(k))
    return mul(mul(batch_inv(sub(x[None, :], hs[:, None])), hs[:, None]), scale[None, :])


def from_bytes128(data: bytes) -> np.ndarray:
    """Field elements from 16-byte big-endian chunks, reduced mod ``p`` (bias below ``2^−77``)."""
    raw = np.frombuffer(data, dtype=">u8").reshape(-1, 2)
    hi = reduce((raw[:, 0] % np.uint64(P)).astype(np.int64))
    lo = reduce((raw[:, 1] % np.uint64(P)).astype(np.int64))
    return add(mul(hi, pow(2, 64, P)), lo)
