"""Vectorised arithmetic in the 51-bit prime field ``F_p``, ``p = 262139·2^33 + 1``.

Elements are ``int64`` arrays with values in ``[0, p)``. The prime is chosen so
that every operation stays in NumPy:

* ``p < 2^51``: a product ``a·b < 2^102`` is reduced with the floating-point
  quotient trick. ``q = ⌊fl(a)·fl(b)·fl(1/p)⌋`` is within 1 of the true
  quotient, since the float error is below ``2^51·3·2^−53 < 1``. Then
  ``r = a·b − q·p`` is computed in wrapping ``int64`` arithmetic, lies in
  ``[−p, 2p)``, and is corrected by two unsigned minima (``min(r, r + p)``,
  then ``min(r, r − p)`` on ``uint64`` views: a negative value wraps to a huge
  one). Every pass writes into a preallocated buffer, with no Python loop
  over elements.
* ``2^33 | p − 1``: radix-2 NTTs exist up to size ``2^33`` (the transforms are the Ligero
  prover's, ``systems/ligero/ntt.py``).
* ``3`` generates ``F_p^*``, which gives the coset ``3·⟨ω_n⟩`` where codewords
  are evaluated. It is disjoint from the message subgroup ``H = ⟨ω_k⟩``.

Matrix products (the proximity test, the verifier's evaluations) use
``float64`` BLAS on limbs in signed form: the larger side in two 26-bit limbs
(at most ``2^25``), the other in three balanced 17-bit limbs (at most
``2^16``), so each of the six limb products summed over at most ``2^12`` terms
stays within ``2^53`` and is exact (longer inner dimensions are cut into such
chunks). BLAS dominates the verifier: note that OpenBLAS may not recognise a
virtual CPU and fall back to its slowest kernels (``OPENBLAS_CORETYPE``).

With Numba installed (``pip install 'circuitgrad[numba]'``), the NTTs, the elementwise products and the
matrix products with a short side run as compiled kernels instead (:mod:`.gf_numba`, 3–15× faster on one
core): the results are the same canonical values, so the proofs are the same bytes.
``CIRCUITGRAD_GF=numpy`` (or :func:`set_kernels`) forces the NumPy path; :func:`kernels` says which one runs.

``tests/test_zk_gf.py`` pins every function here against Python-int
reference implementations, and the compiled kernels against the NumPy path.
"""
from __future__ import annotations

import importlib.util
import os
import warnings
from functools import lru_cache

import numpy as np

from circuitgrad import blas

from .field import LIGERO51

__all__ = ["P", "GENERATOR", "TWO_ADICITY", "mul", "add", "sub", "neg", "negate", "inv", "powers", "sum_mod",
           "segment_sum", "matmul", "batch_inv", "lagrange_at", "root_of_unity", "from_bytes128", "reduce", "kernels",
           "set_kernels", "compiled", "cached_powers", "mul_const", "fold", "bufsize", "P64", "U64", "P_U", "P2_U",
           "INV_P"]

P = LIGERO51.p                    # 262139·2^33 + 1 = 2251756864012289, prime, 51 bits
GENERATOR = 3
TWO_ADICITY = 33
INV_P = 1.0 / P
P64 = np.int64(P)
_CHOICES = ("auto", "numba", "numpy")


def _choice(value: str) -> str:
    if value.lower() not in _CHOICES:
        raise ValueError(f"field kernels: auto, numba or numpy (CIRCUITGRAD_GF), got {value!r}")
    return value.lower()


_KERNELS = {"choice": _choice(os.environ.get("CIRCUITGRAD_GF", "auto")), "module": None}


def set_kernels(choice: str) -> str:
    """Run the compiled kernels (``"numba"``: a missing Numba is then an error), the NumPy path (``"numpy"``) or
    the kernels where Numba is installed (``"auto"``, the default; the variable ``CIRCUITGRAD_GF`` sets the
    start value). Returns the previous choice."""
    old = _KERNELS["choice"]
    _KERNELS["choice"] = _choice(choice)
    return old


def kernels() -> str:
    """``"numba"`` or ``"numpy"``: the path the NTTs and products take now (the kernels load on first use)."""
    return "numpy" if compiled() is None else "numba"


def compiled():
    """The compiled kernels (:mod:`.gf_numba`), or ``None`` for the NumPy path."""
    choice = _KERNELS["choice"]
    if choice == "numpy":
        return None
    if _KERNELS["module"] is None:
        _KERNELS["module"] = _load()
    if _KERNELS["module"] is False and choice == "numba":
        from circuitgrad.extras import MissingExtra
        raise MissingExtra("the compiled field arithmetic", "Numba", "numba")
    return _KERNELS["module"] or None


def _load():
    """:mod:`.gf_numba`, or ``False`` where Numba is not installed or does not load (then one warning)."""
    if importlib.util.find_spec("numba") is None:
        return False
    try:
        from . import gf_numba
        return gf_numba
    except Exception as e:          # an installed Numba that fails (a NumPy it does not support, no cache dir)
        warnings.warn(f"Numba is installed but does not load ({' '.join(str(e).split())}); the field "
                      "arithmetic runs in NumPy", RuntimeWarning, stacklevel=4)
        return False


def reduce(x) -> np.ndarray:
    """Signed integers (int64 or Python ints) → canonical ``int64`` representatives in ``[0, p)``."""
    a = np.asarray(x)
    if a.dtype == object:
        return np.array([int(v) % P for v in a.reshape(-1)], dtype=np.int64).reshape(a.shape)
    return np.mod(a.astype(np.int64), P64)


def as_rows(v: np.ndarray, m: int, k: int) -> np.ndarray:
    """``v`` laid out as ``m`` rows of ``k`` values, zero-padded (how every block of the committed matrix is laid out)."""
    out = np.zeros(m * k, dtype=np.int64)
    out[:len(v)] = v
    return out.reshape(m, k)


U64 = np.uint64
P_U, P2_U = np.uint64(P), np.uint64(2 * P)


_STRIP = 1 << 15         # elements per strip of the elementwise operations (their scratch stays in cache)


def fold(r: np.ndarray, m: np.uint64, tmp: np.ndarray | None = None) -> np.ndarray:
    """``r − m`` where that is non-negative, else ``r`` (in place on an ``int64`` array ``0 ≤ r < 2m``, by an
    unsigned minimum: a negative ``r − m`` wraps to a huge value)."""
    ru = r.view(U64)
    t = np.subtract(ru, m, out=None if tmp is None else tmp.view(U64))
    np.minimum(ru, t, out=ru)
    return r


def _lift(r: np.ndarray, m: np.uint64, tmp: np.ndarray | None = None) -> np.ndarray:
    """``r + m`` where ``r`` is negative, else ``r`` (in place on an ``int64`` array ``−m ≤ r < m``)."""
    ru = r.view(U64)
    t = np.add(ru, m, out=None if tmp is None else tmp.view(U64))
    np.minimum(ru, t, out=ru)
    return r


def _strips(out: np.ndarray, *ins: np.ndarray):
    """Flat strips ``(out, *ins)`` of at most ``_STRIP`` elements of same-shaped C-contiguous arrays."""
    flat = [x.reshape(-1) for x in (out,) + ins]
    for s in range(0, out.size, _STRIP):
        yield tuple(x[s:s + _STRIP] for x in flat)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Both arrays of one shape and C-contiguous (so that they can be walked in flat strips)."""
    return a.shape == b.shape and a.flags.c_contiguous and b.flags.c_contiguous


def add(a, b) -> np.ndarray:
    """``a + b mod p`` elementwise (broadcasting; field elements in, field elements out)."""
    return _combine(a, b, np.add, fold, lambda x, y: x + y)


def sub(a, b) -> np.ndarray:
    """``a − b mod p`` elementwise (broadcasting; field elements in, field elements out)."""
    return _combine(a, b, np.subtract, _lift, lambda x, y: x - y)


def _combine(a, b, ufunc, fix, scalar) -> np.ndarray:
    """``ufunc(a, b)`` brought back into ``[0, p)`` by ``fix`` (:func:`fold` after an add, :func:`_lift` after a
    subtract): in strips with reused scratch for large same-shaped arrays, else in one pass; Python ints for
    two scalars (``scalar``)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if not a.ndim and not b.ndim:
        return np.int64(scalar(int(a), int(b)) % P)
    if a.size > _STRIP and _same(a, b) and a.dtype == b.dtype == np.int64:
        out = np.empty(a.shape, dtype=np.int64)
        tmp = np.empty(min(a.size, _STRIP), dtype=np.int64)
        for o, x, y in _strips(out, a, b):
            ufunc(x, y, out=o)
            fix(o, P_U, tmp[:o.size])
        return out
    return fix(ufunc(a, b, dtype=np.int64), P_U)


def neg(a) -> np.ndarray:
    return sub(np.zeros_like(a, dtype=np.int64), a)


def negate(a: np.ndarray) -> np.ndarray:
    """``a ← −a mod p`` in place (an ``int64`` array of field elements), in strips: no full-size temporary."""
    flat = a.reshape(-1)
    for lo in range(0, len(flat), _STRIP):
        x = flat[lo:lo + _STRIP]
        np.subtract(P64, x, out=x)
        x[x == P64] = 0
    return a


def mul(a, b) -> np.ndarray:
    """``a·b mod p`` elementwise (broadcasting)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if not a.ndim and not b.ndim:
        return np.int64(int(a) * int(b) % P)
    if not b.ndim or not a.ndim:                       # by a constant: its quotient factor w/p precomputed
        x, w = (a, int(b)) if not b.ndim else (b, int(a))
        return mul_const(x, w)
    if not a.size or not b.size:
        return np.zeros(np.broadcast_shapes(a.shape, b.shape), dtype=np.int64)
    if (jit := compiled()) is not None:
        return jit.mul(a, b)
    if not _same(a, b):
        if b.ndim == 1 and a.ndim > 1 and a.shape[-1] == b.shape[0] and a.flags.c_contiguous:
            return _mul_rows(a, b)
        if a.ndim == 1 and b.ndim > 1 and b.shape[-1] == a.shape[0] and b.flags.c_contiguous:
            return _mul_rows(b, a)
        if a.ndim == 2 and b.shape == (a.shape[0], 1) and a.flags.c_contiguous:
            return _mul_cols(a, b)
        shape = np.broadcast_shapes(a.shape, b.shape)
        a = np.ascontiguousarray(np.broadcast_to(a, shape))
        b = np.ascontiguousarray(np.broadcast_to(b, shape))
    out = np.empty(a.shape, dtype=np.int64)
    n = min(a.size, _STRIP)
    f, g, q = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.float64), np.empty(n, dtype=np.int64)
    for r, x, y in _strips(out, a, b):
        m = r.size
        np.copyto(g[:m], y, casting="unsafe")
        _mul_into(r, x, y, g[:m], f[:m], q[:m])
    return out


def _mul_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a·b mod p`` for a C-contiguous ``a`` whose rows (last axis) are multiplied by the vector ``b``."""
    d = b.shape[0]
    rows = a.reshape(-1, d)
    out = np.empty(rows.shape, dtype=np.int64)
    step = max(1, _STRIP // max(1, d))
    n = min(rows.shape[0], step) * d
    f, q = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.int64)
    bf = b.astype(np.float64)
    with bufsize(d):
        for s in range(0, rows.shape[0], step):
            r = out[s:s + step]
            m = r.size
            _mul_into(r, rows[s:s + step], b, bf, f[:m].reshape(r.shape), q[:m].reshape(r.shape))
    return out.reshape(a.shape)


def _mul_cols(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a·b mod p`` for a C-contiguous ``(m, s)`` array ``a`` whose rows are multiplied by the column ``b``
    (``(m, 1)``), a strip of rows at a time (no broadcast copies)."""
    m, s = a.shape
    out = np.empty(a.shape, dtype=np.int64)
    step = max(1, _STRIP // max(1, s))
    n = min(m, step)
    f, q = np.empty((n, s), dtype=np.float64), np.empty((n, s), dtype=np.int64)
    for i in range(0, m, step):
        r = out[i:i + step]
        c = b[i:i + step]
        _mul_into(r, a[i:i + step], c, c.astype(np.float64), f[:r.shape[0]], q[:r.shape[0]])
    return out


def _mul_into(r: np.ndarray, x: np.ndarray, y: np.ndarray, yf: np.ndarray, fs: np.ndarray, qs: np.ndarray) -> None:
    """``r = x·y mod p`` (``y`` broadcasting against ``x``, ``yf`` its ``float64`` copy; ``fs``, ``qs`` scratch
    of ``r``'s shape)."""
    np.copyto(fs, x, casting="unsafe")
    np.multiply(fs, yf, out=fs)
    np.multiply(fs, INV_P, out=fs)
    np.copyto(qs, fs, casting="unsafe")                 # within 1 of ⌊x·y/p⌋
    np.multiply(x, y, out=r)                             # exact modulo 2^64 (arrays wrap silently)
    np.multiply(qs, P64, out=qs)
    np.subtract(r, qs, out=r)                           # true value in [−p, 2p)
    _lift(r, P_U, qs)
    fold(r, P_U, qs)


def mul_const(x: np.ndarray, w: int) -> np.ndarray:
    """``x·w mod p`` for an array ``x`` (values in ``[0, p)``) and a constant ``w``."""
    w %= P
    if (jit := compiled()) is not None:
        return jit.mul_const(x, w)
    wp, w64 = w * INV_P, np.int64(w)
    x = np.ascontiguousarray(x, dtype=np.int64)
    out = np.empty(x.shape, dtype=np.int64)
    n = min(x.size, _STRIP)
    f, q = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.int64)
    for r, xs in _strips(out, x):
        m = r.size
        fs, qs = f[:m], q[:m]
        np.copyto(fs, xs, casting="unsafe")
        np.multiply(fs, wp, out=fs)
        np.copyto(qs, fs, casting="unsafe")             # within 1 of ⌊x·w/p⌋ (two roundings)
        np.multiply(xs, w64, out=r)
        np.multiply(qs, P64, out=qs)
        np.subtract(r, qs, out=r)
        _lift(r, P_U, qs)
        fold(r, P_U, qs)
    return out


def inv(a: int) -> int:
    if int(a) % P == 0:
        raise ZeroDivisionError("inverse of 0 in F_p")
    return pow(int(a), P - 2, P)


_RUN = (1 << 12) - 1     # canonical values (below 2^51) that can be summed in int64 without overflow


def _small(a: np.ndarray) -> bool:
    """Every value in ``[0, 2^51)``, so that ``_RUN`` of them sum exactly in ``int64``."""
    return not a.size or (int(a.min()) >= 0 and int(a.max()) < 1 << 51)


def sum_mod(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """``Σ a mod p`` along ``axis``, exact for any ``int64`` values.

    Field elements are summed directly, ``_RUN`` at a time (below ``2^63``); other values in 26- and
    25-bit limbs summed separately (no ``int64`` overflow).
    """
    a = np.asarray(a, dtype=np.int64)
    if a.ndim and _small(a):
        n = a.shape[axis]
        if n <= _RUN:
            return np.sum(a, axis=axis) % P64
        b = np.moveaxis(a, axis, 0)
        acc = b[:_RUN].sum(axis=0) % P64
        for s in range(_RUN, n, _RUN):
            acc = add(acc, b[s:s + _RUN].sum(axis=0) % P64)
        return acc
    return _join(lo=(a & ((1 << 26) - 1)).sum(axis=axis), hi=(a >> 26).sum(axis=axis))


def _join(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``hi·2^26 + lo mod p`` for limb sums (each far below 2^63)."""
    return add(mul(reduce(hi), 1 << 26), reduce(lo))


def segment_sum(values: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """``out[i] = Σ values[ptr[i]:ptr[i+1]] mod p`` (CSR segments along the first axis; empty segments give 0).

    Field elements are summed directly, ``_RUN`` at a time: a longer segment is cut into pieces whose sums
    are added in a second pass, so that one long segment does not send every other down the limb path."""
    n = len(ptr) - 1
    v = np.asarray(values, dtype=np.int64)
    out = np.zeros((n,) + v.shape[1:], dtype=np.int64)
    if len(v) == 0 or n == 0:
        return out
    ptr = np.asarray(ptr, dtype=np.int64)
    lens = ptr[1:] - ptr[:-1]
    nonempty = lens > 0
    if not _small(v):
        starts = ptr[:-1][nonempty]
        out[nonempty] = _join(lo=np.add.reduceat(v & ((1 << 26) - 1), starts),
                              hi=np.add.reduceat(v >> 26, starts))
    elif int(lens.max()) <= _RUN:
        out[nonempty] = np.add.reduceat(v, ptr[:-1][nonempty]) % P64
    else:
        pieces = -(-lens // _RUN)                               # pieces of at most _RUN per segment
        first = np.cumsum(pieces) - pieces
        at = np.arange(int(pieces.sum()), dtype=np.int64)
        starts = np.repeat(ptr[:-1], pieces) + (at - np.repeat(first, pieces)) * _RUN
        partial = np.add.reduceat(v, starts) % P64
        sub_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(pieces, out=sub_ptr[1:])
        out = segment_sum(partial, sub_ptr)
    return out


_CHUNK = 1 << 12        # inner dimension per BLAS product: 2^12 · 2^25 · 2^16 = 2^53, exact in float64


def _limbs2(x: np.ndarray) -> tuple:
    """``x = lo + hi·2^26`` for ``x`` in ``[0, 2^51)``: ``lo`` in ``[−2^25, 2^25]``, ``hi`` in ``[0, 2^25]``
    (``float64``).

    Computed in ``float64``, where every value involved is an integer below ``2^53`` (exact), in strips.
    """
    xs = np.ascontiguousarray(x.T) if x.flags.f_contiguous and not x.flags.c_contiguous else x
    lo = np.empty(xs.shape, dtype=np.float64)
    hi = np.empty(xs.shape, dtype=np.float64)
    src = np.ascontiguousarray(xs, dtype=np.int64)
    for L, H, v in _strips(lo, hi, src):
        np.copyto(L, v, casting="unsafe")
        np.multiply(L, 2.0 ** -26, out=H)
        np.rint(H, out=H)
        np.subtract(L, H * 2.0 ** 26, out=L)
    return (lo.T, hi.T) if xs is not x else (lo, hi)


def _limbs3(x: np.ndarray) -> tuple:
    """``x ≡ b₀ + b₁·2^17 + b₂·2^34 (mod p)`` for ``x`` in ``[0, p)``, each ``|bᵢ| ≤ 2^16`` (``float64``):
    the balanced representative of ``x`` (in ``(−p/2, p/2)``) in balanced 17-bit limbs, computed exactly in floats."""
    f = np.asarray(x, dtype=np.float64)                  # exact: below 2^51
    f = f - np.float64(P) * (f > P // 2)                # in (−p/2, p/2)
    b2 = np.rint(f * 2.0 ** -34)
    f -= b2 * 2.0 ** 34                                 # in [−2^33, 2^33]
    b1 = np.rint(f * 2.0 ** -17)
    f -= b1 * 2.0 ** 17                                 # in [−2^16, 2^16]
    return f, b1, b2


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b mod p`` for 2-D arrays, via exact float64 limb products.

    The larger side splits into two 26-bit limbs (at most ``2^25`` in size), the other into three
    balanced 17-bit limbs (at most ``2^16``): six limb products, each summed over a chunk of at most
    ``2^12`` of the inner dimension, so below ``2^53`` and exact. The three limbs are laid side by
    side, so that two BLAS calls per chunk compute all six. With Numba, products with a short side are
    direct products instead (:mod:`.gf_numba`).
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    (m, K), nb = a.shape, b.shape[-1]
    if (jit := compiled()) is not None and (K <= 64 or min(m, nb) <= 4 or m * K * nb <= 1 << 21):
        return jit.matmul(a, b)                         # direct products: ≥ 2× faster there (bench/gf_kernels.py)
    if a.size >= b.size:
        return _matmul(a, b)
    return np.ascontiguousarray(_matmul(b.T, a.T).T)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`matmul` with the two-limb split on ``a``."""
    m, K = a.shape
    nb = b.shape[1]
    out = np.zeros((m, nb), dtype=np.int64)
    if not K or not m or not nb:
        return out
    jit = compiled()
    for k0 in range(0, K, _CHUNK):                      # limbs chunk by chunk: no full-size float copies
        A = _limbs2(a[:, k0:k0 + _CHUNK]) if jit is None else jit.limbs2(a[:, k0:k0 + _CHUNK])
        wide = np.concatenate(_limbs3(b[k0:k0 + _CHUNK]), axis=1)
        for i, x in enumerate(A):
            prod = blas.matmul(x, wide).astype(np.int64)                    # |·| ≤ 2^53: exact in any order
            for j in range(3):
                part = prod[:, j * nb:(j + 1) * nb] % P64                   # floor mod: in [0, p)
                out = add(out, part if i + j == 0 else mul_const(part, pow(2, 26 * i + 17 * j, P)))
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
def cached_powers(base: int, n: int) -> np.ndarray:
    """:func:`powers` of a scalar, cached (NTT twiddles and coset shifts)."""
    out = powers(base, n)
    out.setflags(write=False)
    return out


class bufsize:
    """Ufunc buffers no longer than ``run``, the operands' contiguous runs: with a longer buffer NumPy
    copies strided operands through it, which is 3–7× slower than working on them in place."""

    def __init__(self, run: int):
        self.size = min(8192, run - run % 16)

    def __enter__(self):
        self.old = None
        if self.size >= 16 and self.size != np.getbufsize():
            self.old = np.setbufsize(self.size)

    def __exit__(self, *exc):
        if self.old is not None:
            np.setbufsize(self.old)


def batch_inv(a: np.ndarray) -> np.ndarray:
    """Elementwise inverses of nonzero elements (any shape).

    Montgomery's trick on a product tree: the first half of the values is multiplied by the second
    (an odd one out carried up) down to one product, which a single Fermat inversion inverts; going
    back down, the inverse of each value in a half is its parent's inverse times its partner. About
    ``3·size`` multiplications in ``2·log₂(size)`` vectorised calls, and no Python loop over elements.
    """
    a = np.asarray(a, dtype=np.int64)
    if a.size and not a.all():
        raise ZeroDivisionError("batch_inv: an element is 0")
    flat = a.reshape(-1)
    if not flat.size:
        return np.zeros(a.shape, dtype=np.int64)
    levels = [np.ascontiguousarray(flat)]
    while len(levels[-1]) > 1:
        lv = levels[-1]
        h = len(lv) // 2
        levels.append(np.concatenate([mul(lv[:h], lv[h:2 * h]), lv[2 * h:]]))
    cur = np.array([inv(levels[-1][0])], dtype=np.int64)
    for lv in reversed(levels[:-1]):
        h = len(lv) // 2
        cur = np.concatenate([mul(cur[:h], lv[h:2 * h]), mul(cur[:h], lv[:h]), cur[h:]])
    return cur.reshape(a.shape)


def lagrange_at(k: int, points: np.ndarray) -> np.ndarray:
    """``L[h, j] = L_h(points_j)``: the Lagrange basis of the subgroup ``⟨ω_k⟩`` at points outside it.

    ``L_h(x) = (x^k − 1)/k · ω^h/(x − ω^h)``, so ``Σ_h v_h L[h, j]`` is the value at ``points_j`` of
    the polynomial of degree < k that takes the values ``v`` on the subgroup.
    """
    hs = cached_powers(root_of_unity(k), k)
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

