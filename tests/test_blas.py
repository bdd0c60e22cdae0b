"""The optional MKL GEMM agrees with np.matmul on every layout it accepts."""
from __future__ import annotations

import numpy as np
import pytest

from circuitgrad import blas


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_layouts(dtype, tol, ta, tb, rng):
    a = rng.normal(size=(7, 5) if not ta else (5, 7)).astype(dtype)
    b = rng.normal(size=(5, 3) if not tb else (3, 5)).astype(dtype)
    a, b = (a.T if ta else a), (b.T if tb else b)
    got = blas.matmul(a, b)
    assert got.dtype == dtype and got.flags.c_contiguous
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol)


def test_matmul_falls_back_for_strided_and_int(rng):
    a = rng.normal(size=(8, 10))[:, ::2]                 # neither C- nor F-contiguous
    b = rng.normal(size=(5, 4))
    np.testing.assert_allclose(blas.matmul(a, b), a @ b, rtol=1e-12)
    i = np.arange(6).reshape(2, 3)
    assert np.array_equal(blas.matmul(i, i.T), i @ i.T)
    assert blas.matmul(np.zeros((0, 3)), np.zeros((3, 2))).shape == (0, 2)


def test_name_reports_the_gemm_in_use():
    assert blas.name() == "numpy" or blas.name().startswith("mkl (libmkl_rt")
