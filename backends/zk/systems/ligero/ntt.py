"""Number-theoretic transforms in ``F_p`` (:mod:`~circuitgrad.backends.zk.circuits.gf`): evaluations on ``⟨ω_n⟩``
and on the coset ``3·⟨ω_n⟩``.

``2^33 | p − 1``, so radix-2 NTTs exist up to size ``2^33``. Galois's generic NTT at BN254 size took 234 s
at ``2^13``; this one takes milliseconds. Its butterflies keep values in ``[0, 2p)`` (Harvey's lazy
reduction: two fewer passes per stage), run on blocks of ``2^16`` elements that stay in cache, and see only
operands with long contiguous runs: the last 7 stages run on the transposed block, and NumPy's ufunc buffer
is kept no longer than a run (a longer one makes NumPy copy strided operands, 3–7× slower). With Numba
installed, each public function here calls its compiled kernel
(:mod:`~circuitgrad.backends.zk.circuits.gf_numba`) instead, which gives the same values.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...circuits.gf import (P2_U, INV_P, P64, P_U, U64, GENERATOR, bufsize, fold, compiled, mul_const, cached_powers,
                            inv, matmul, mul, root_of_unity)

__all__ = ["ntt", "intt", "coset_eval", "coset_interp", "warm"]


@lru_cache(maxsize=64)
def _bitrev(n: int) -> np.ndarray:
    bits = n.bit_length() - 1
    idx = np.arange(n)
    rev = np.zeros(n, dtype=np.int64)
    for i in range(bits):
        rev |= ((idx >> i) & 1) << (bits - 1 - i)
    rev.setflags(write=False)
    return rev


_INNER = 128            # the last log2(_INNER) stages run on the transposed block
_BLOCK = 1 << 16        # elements per block (with its buffers, about 2.5 MB: in L2)


def _butterflies(u, v, tw, twf, d, t, q, f) -> None:
    """Decimation-in-frequency butterflies in place: ``u ← u + v``, ``v ← (u − v)·w``.

    Inputs and outputs lie in ``[0, 2p)``. ``d, t, q, f`` are scratch arrays of ``u``'s shape, and
    ``tw``, ``twf`` (``w`` and ``w/p``) broadcast against it; ``tw is None`` means ``w = 1``.
    """
    uu, vu, du, tu = u.view(U64), v.view(U64), d.view(U64), t.view(U64)
    np.subtract(uu, vu, out=du)
    np.add(du, P2_U, out=tu)
    np.minimum(du, tu, out=du)              # u − v in [0, 2p)
    np.add(uu, vu, out=uu)
    np.subtract(uu, P2_U, out=tu)
    np.minimum(uu, tu, out=uu)              # u + v in [0, 2p)
    if tw is None:
        np.copyto(v, d)
        return
    np.copyto(f, d, casting="unsafe")
    np.multiply(f, twf, out=f)
    np.copyto(q, f, casting="unsafe")       # within 1 of ⌊d·w/p⌋, since d·w/p < 2p and 2p·2^−52 < 1
    np.multiply(d, tw, out=v)
    np.multiply(q, P64, out=q)
    np.subtract(v, q, out=v)                # d·w mod p, in [−p, 2p)
    np.add(v, P64, out=t)
    np.minimum(vu, tu, out=vu)              # in [0, 2p)


@lru_cache(maxsize=64)
def _stage_twiddles(root: int, n: int) -> tuple:
    """``(h, w, w/p)`` per stage, ``h = n/2 … 1`` (``w = None`` for the last stage, whose twiddle is 1)."""
    w = cached_powers(root, n)
    out = []
    h = n // 2
    while h >= 1:
        tw = np.ascontiguousarray(w[::n // (2 * h)][:h])
        out.append((h, None, None) if h == 1 else (h, tw, tw.astype(np.float64) * INV_P))
        h //= 2
    return tuple(out)


@lru_cache(maxsize=16)
def _permutations(n: int, c: int) -> tuple:
    """Row orders for a block of ``c`` rows that undo the bit reversal around the transposition.

    Write ``n = n₁·n₂`` (``n₂ = min(n, _INNER)``), a position as ``i = i_hi·n₂ + i_lo`` and an output index
    as ``j = J_hi·n₁ + J_lo``; then ``rev(j) = rev₁(J_lo)·n₂ + rev₂(J_hi)``. Before the transposition the
    ``n₂``-runs of each row are put in ``rev₁`` order (``pre``), so that ``T[i_lo, r·n₁ + rev₁(i_hi)]``
    holds position ``i`` of row ``r``; after the last stage, output run ``(r, J_hi)`` (``n₁`` values) is row
    ``rev₂(J_hi)·c + r`` of ``T`` seen as ``(n₂·c, n₁)`` (``post``). Both move whole runs, not elements."""
    n2 = min(n, _INNER)
    n1 = n // n2
    rev1, rev2 = _bitrev(n1), _bitrev(n2)
    pre = (np.arange(c)[:, None] * n1 + rev1[None, :]).reshape(-1)
    post = (rev2[None, :] * c + np.arange(c)[:, None]).reshape(-1)
    pre.setflags(write=False)
    post.setflags(write=False)
    return pre, post


def _ntt(a: np.ndarray, root: int, copy: bool = True) -> np.ndarray:
    """Decimation-in-frequency NTT along the last axis (natural order in and out).

    Rows are processed in blocks of about ``_BLOCK`` elements, so that every stage's passes stay in
    cache. The stages with half-size ``h ≥ _INNER`` pair runs of ``h`` elements in place; the block
    is then transposed to ``(_INNER, ·)``, where the remaining stages pair whole rows. Two gathers of
    whole runs (:func:`_permutations`) undo the bit reversal. ``copy=False`` lets it work in ``a``.
    """
    n = a.shape[-1]
    lead = a.shape[:-1]
    x = np.array(a, dtype=np.int64, copy=copy, order="C").reshape(-1, n)        # transformed in place
    if not x.size:
        return x.reshape(*lead, n)
    stages = _stage_twiddles(root, n)
    n2 = min(n, _INNER)
    chunk = max(1, _BLOCK // n)
    c0 = min(chunk, x.shape[0])
    d_, t_, q_ = (np.empty(max(1, c0 * n // 2), dtype=np.int64) for _ in range(3))
    f_ = np.empty(len(d_), dtype=np.float64)
    T_ = np.empty(c0 * n, dtype=np.int64)
    S_ = np.empty(c0 * n, dtype=np.int64)
    for r0 in range(0, x.shape[0], chunk):
        blk = x[r0:r0 + chunk]
        c = blk.shape[0]
        m = c * n // 2
        for h, tw, twf in stages:
            if h < n2:
                break
            v4 = blk.reshape(c, n // (2 * h), 2, h)
            shp = (c, n // (2 * h), h)
            with bufsize(h):
                _butterflies(v4[:, :, 0], v4[:, :, 1], tw, twf, *(s[:m].reshape(shp) for s in (d_, t_, q_, f_)))
        cols = c * n // n2
        T = T_[:c * n].reshape(n2, cols)
        S = S_[:c * n].reshape(cols, n2)
        pre, post = _permutations(n, c)
        # mode="clip": the indices are in range by construction, and "raise" would copy through a buffer
        np.take(blk.reshape(cols, n2), pre, axis=0, out=S, mode="clip")
        np.copyto(T, S.T)
        for h, tw, twf in stages:
            if h >= n2:
                continue
            v4 = T.reshape(n2 // (2 * h), 2, h, cols)
            shp = (n2 // (2 * h), h, cols)
            with bufsize(cols):
                _butterflies(v4[:, 0], v4[:, 1], None if tw is None else tw[:, None],
                             None if twf is None else twf[:, None], *(s[:m].reshape(shp) for s in (d_, t_, q_, f_)))
        o = blk.reshape(-1)                     # the block's result, back in place (no fresh pages to fault in)
        np.take(T_[:c * n].reshape(n2 * c, n // n2), post, axis=0, out=o.reshape(n2 * c, n // n2), mode="clip")
        for s in range(0, o.size, max(1, m)):
            seg = o[s:s + m]
            fold(seg, P_U, t_[:seg.size])
    return x.reshape(*lead, n)


def ntt(a: np.ndarray) -> np.ndarray:
    """Evaluations on ``⟨ω_n⟩`` of polynomials with coefficients ``a`` (last axis, length ``n``)."""
    if (jit := compiled()) is not None:
        return jit.ntt(a, root_of_unity(a.shape[-1]))
    return _ntt(a, root_of_unity(a.shape[-1]))


def intt(a: np.ndarray) -> np.ndarray:
    """Coefficients of the polynomials with evaluations ``a`` on ``⟨ω_n⟩`` (inverse of :func:`ntt`)."""
    n = a.shape[-1]
    if (jit := compiled()) is not None:
        return jit.ntt(a, inv(root_of_unity(n)), 1)
    return mul_const(_ntt(a, inv(root_of_unity(n))), inv(n))


def coset_eval(coeffs: np.ndarray, n: int, shift: int = GENERATOR) -> np.ndarray:
    """Evaluations on ``shift·⟨ω_n⟩`` of polynomials with ``coeffs`` (last axis, length ≤ ``n``)."""
    d = coeffs.shape[-1]
    if d > n:
        raise ValueError(f"degree bound {d} exceeds the domain size {n}")
    if (jit := compiled()) is not None:
        return jit.coset_eval(coeffs, n, shift)
    padded = np.zeros((*coeffs.shape[:-1], n), dtype=np.int64)
    padded[..., :d] = mul(coeffs, cached_powers(shift, d))
    return _ntt(padded, root_of_unity(n), copy=False)


def coset_interp(evals: np.ndarray, shift: int = GENERATOR) -> np.ndarray:
    """Coefficients (length ``n``) of the polynomials with evaluations ``evals`` on ``shift·⟨ω_n⟩``."""
    n = evals.shape[-1]
    if (jit := compiled()) is not None:
        return jit.ntt(evals, inv(root_of_unity(n)), inv(shift))
    return mul(intt(evals), cached_powers(inv(shift), n))


def warm() -> None:
    """Load the compiled kernels where they run, by calling each once on small inputs: a proof that starts
    after it measures its own work (``timings["memory"]``), not Numba's runtime and code (about 150 MiB)."""
    if compiled() is None:
        return
    x = np.arange(1, 33, dtype=np.int64).reshape(4, 8)
    intt(coset_eval(x, 16))
    mul(x, x), mul(x, x[:1]), mul(x, x[:, :1]), mul(x, 3)
    matmul(x, x.T), matmul(x[:1], x.T), matmul(x.T, x[:, :1])
