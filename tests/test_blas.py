"""The optional MKL GEMM agrees with np.matmul on every layout it accepts."""
from __future__ import annotations

import numpy as np
import pytest
from _tolerance import assert_matmul_close, assert_sums_close

from circuitgrad import blas


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_layouts(dtype, ta, tb, rng):
    a = rng.normal(size=(7, 5) if not ta else (5, 7)).astype(dtype)
    b = rng.normal(size=(5, 3) if not tb else (3, 5)).astype(dtype)
    a, b = (a.T if ta else a), (b.T if tb else b)
    got = blas.matmul(a, b)
    assert got.dtype == dtype and got.flags.c_contiguous
    # dot products of length 5 rounded in dtype, against float64: within 2·γ₅(dtype)·(|a|@|b|)
    assert_matmul_close(got, a.astype(np.float64) @ b.astype(np.float64), a, b, dtype=dtype)


def test_matmul_falls_back_for_strided_and_int(rng):
    a = rng.normal(size=(8, 10))[:, ::2]                 # neither C- nor F-contiguous
    b = rng.normal(size=(5, 4))
    np.testing.assert_array_equal(blas.matmul(a, b), a @ b)         # the fallback is np.matmul itself
    i = np.arange(6).reshape(2, 3)
    assert np.array_equal(blas.matmul(i, i.T), i @ i.T)
    assert blas.matmul(np.zeros((0, 3)), np.zeros((3, 2))).shape == (0, 2)


def test_name_reports_the_gemm_in_use():
    assert blas.name() == "numpy" or blas.name().startswith("mkl (libmkl_rt")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose", [False, True])
def test_matvec(dtype, transpose, rng):
    a = rng.normal(size=(7, 5)).astype(dtype)
    v = rng.normal(size=7 if transpose else 5).astype(dtype)
    got = blas.matvec(a, v, transpose=transpose)
    want = (a.T if transpose else a).astype(np.float64) @ v.astype(np.float64)
    assert got.dtype == dtype and got.shape == want.shape
    assert_matmul_close(got, want, a.T if transpose else a, v, dtype=dtype)     # length 7 or 5, in dtype


def test_matvec_falls_back_and_checks_shapes(rng):
    a = rng.normal(size=(6, 8))[:, ::2]                  # not C-contiguous: NumPy
    assert_sums_close(blas.matvec(a, np.ones(4)), a.sum(axis=1), 4, np.abs(a).sum(axis=1))    # np.dot vs sum
    if blas.name() != "numpy":
        with pytest.raises(ValueError) as e:
            blas.matvec(np.ones((3, 4)), np.ones(3))
        assert str(e.value) == "matvec: (3, 4) @ (3,)"


def test_sums_over_leading_and_trailing_axes(rng):
    """The NumPy backend's SumTo over a leading and a trailing block of axes (GEMVs) equals NumPy's sum;
    middle axes, strided and integer arrays fall back to it."""
    from circuitgrad.codegen import sum_axes
    x = rng.normal(size=(3, 4, 5))
    xt = x.transpose(1, 0, 2)                           # strided: NumPy's sum, exactly
    for axes, shape in (((0,), (4, 5)), ((0, 1), (5,)), ((2,), (3, 4, 1)), ((1, 2), (3, 1, 1)), ((0, 1, 2), ()),
                        ((0, 2), (4,)), ((1,), (3, 1, 5))):
        n = int(np.prod([x.shape[a] for a in axes]))          # GEMV(s) with ones vs NumPy's pairwise sum
        assert_sums_close(sum_axes(x, axes, shape), x.sum(axis=axes).reshape(shape), n,
                          np.abs(x).sum(axis=axes).reshape(shape))
        want = xt.sum(axis=axes, keepdims=True)
        np.testing.assert_array_equal(sum_axes(xt, axes, want.shape), want)
    i = np.arange(24).reshape(2, 3, 4)
    assert np.array_equal(sum_axes(i, (2,), (2, 3, 1)), i.sum(axis=2, keepdims=True))


_THREADS = """
import ctypes, glob, os, sys
from circuitgrad import blas
assert blas.name().startswith("mkl")
lib = ctypes.CDLL(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*"))[0])
print(lib.MKL_Get_Max_Threads())
"""


@pytest.mark.skipif(blas.name() == "numpy", reason="MKL is not installed")
def test_mkl_threading_layer_is_the_one_asked_for():
    """``sequential`` is MKL's sequential layer (one thread); the default is its Intel OpenMP layer."""
    import os
    import subprocess
    import sys

    def threads(layer: str | None) -> int:
        env = {k: v for k, v in os.environ.items() if k != "CIRCUITGRAD_MKL_THREADING"}
        env.update({"CIRCUITGRAD_MKL_THREADING": layer} if layer else {})
        out = subprocess.run([sys.executable, "-c", _THREADS], env=env, capture_output=True, text=True, check=True)
        return int(out.stdout)
    assert threads("sequential") == 1
    assert threads(None) == threads("intel")
    if (os.cpu_count() or 1) > 1:
        assert threads(None) > 1


def test_bad_threading_layer_is_refused():
    import os
    import subprocess
    import sys
    env = dict(os.environ, CIRCUITGRAD_MKL_THREADING="pgi", CIRCUITGRAD_BLAS="auto")
    out = subprocess.run([sys.executable, "-c", "import circuitgrad.blas"], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "ValueError: CIRCUITGRAD_MKL_THREADING must be one of ['gnu', 'intel', 'sequential'], got 'pgi'" \
        in out.stderr


_BROKEN_MKL = """
import glob
glob.glob = lambda pattern: ["/nonexistent/libmkl_rt.so.2"] if "libmkl_rt" in pattern else []
import circuitgrad.blas as blas
print(blas.name())
"""


@pytest.mark.parametrize("choice", ["auto", "mkl"])
def test_an_mkl_that_does_not_load(choice):
    """An install cut short leaves libmkl_rt.so that ctypes cannot load: by default a warning and NumPy
    (``import circuitgrad`` must not fail), an error when MKL was asked for."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, CIRCUITGRAD_BLAS=choice)
    env.pop("CIRCUITGRAD_MKL_THREADING", None)
    out = subprocess.run([sys.executable, "-W", "always", "-c", _BROKEN_MKL], env=env, capture_output=True,
                         text=True)
    if choice == "auto":
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "numpy"
        assert "RuntimeWarning: MKL (/nonexistent/libmkl_rt.so.2) is installed but does not load (" in out.stderr
    else:
        assert out.returncode != 0
        assert "ImportError: CIRCUITGRAD_BLAS=mkl but /nonexistent/libmkl_rt.so.2 does not load (" in out.stderr
