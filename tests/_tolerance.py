"""How far apart two evaluations of one sum may land when they round differently.

Rounding model (IEEE 754, round to nearest): ``fl(a ∘ b) = (a ∘ b)(1 + δ)``, ``|δ| ≤ u = eps/2``. A sum of
``n`` terms, each a product rounded at most once (or fused into an FMA), accumulated in *any* order
(sequential, pairwise, blocked, SIMD lanes: whichever GEMM/GEMV kernel MKL or OpenBLAS picks on this CPU,
CIRCUITGRAD_BLAS=numpy or not) satisfies

    |fl(Σ tᵢ) − Σ tᵢ| ≤ γₙ · Σ|tᵢ|,    γₙ = n·u / (1 − n·u)

(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., (3.4)–(3.5)). Two such evaluations
of the same sum therefore differ by at most ``2·γₙ·Σ|tᵢ|`` ≈ ``n·eps·Σ|tᵢ|``: a bound in the *magnitude of
the terms*, not of the result, which may cancel to about 0 (where a relative tolerance alone fails).

Use these helpers where two code paths compute the same sums in different orders; keep exact equality
where the semantics promise it (integers, fixed point, pure data movement, one correctly rounded
operation on both sides, or literally the same code path).
"""
from __future__ import annotations

import numpy as np


def gamma(n: int, dtype=np.float64) -> float:
    """γₙ = n·u / (1 − n·u): the relative error bound of ``n`` rounded operations in ``dtype``."""
    u = float(np.finfo(dtype).eps) / 2
    assert n * u < 0.5, f"gamma: {n} roundings in {np.dtype(dtype)} bound nothing"
    return n * u / (1 - n * u)


def assert_sums_close(got, want, n: int, magnitude, dtype=None, err_msg: str = "") -> None:
    """``got`` and ``want``: two evaluations (in ``dtype``, by default ``got``'s) of sums of at most ``n``
    rounded terms whose absolute values add up to ``magnitude`` (broadcast against them). Passes where they
    differ by at most ``2·γₙ·magnitude``, or are equal (infinities, matching NaNs)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shapes differ: {got.shape} vs {want.shape} {err_msg}"
    g = gamma(n, got.dtype if dtype is None else dtype)
    # magnitude is itself a sum of n non-negative terms, computed in float64: it may fall short by γₙ
    tol = 2 * g * (1 + gamma(n)) * np.broadcast_to(np.asarray(magnitude, dtype=np.float64), got.shape)
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = (np.abs(g64 - w64) <= tol) | (g64 == w64) | (np.isnan(g64) & np.isnan(w64))
    if not ok.all():
        i = np.unravel_index(np.argmax(~ok), ok.shape)
        raise AssertionError(f"{(~ok).sum()} of {ok.size} elements differ by more than 2·γ_{n}·Σ|terms| "
                             f"(γ_{n} = {g:.3g}); first at {i}: {got[i]!r} vs {want[i]!r}, "
                             f"bound {tol[i]:.3g} {err_msg}")


def assert_matmul_close(got, want, a, b, dtype=None, err_msg: str = "") -> None:
    """``got`` and ``want``: two evaluations of ``a @ b`` (each element a dot product of length
    ``a.shape[-1]``, terms bounded by ``|a| @ |b|``), rounded in ``dtype`` (by default ``got``'s)."""
    a, b = np.asarray(a), np.asarray(b)
    magnitude = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert_sums_close(got, want, a.shape[-1], magnitude, dtype, err_msg)
