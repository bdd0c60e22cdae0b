"""Matrix products for the NumPy backend: Intel MKL when installed, else NumPy.

NumPy 1.26 ships OpenBLAS 0.3.23 (NumPy 2's OpenBLAS is newer). Matrix
products are about 80% of an MLP training step, and the step is faster with
the MKL that PyTorch uses than with NumPy's OpenBLAS (``docs/BENCHMARKS.md``,
the CPU training step). When the ``mkl`` wheel is installed
(``pip install 'circuitgrad[mkl]'``), :func:`matmul` calls
``cblas_sgemm``/``cblas_dgemm`` from ``libmkl_rt`` through ctypes. Operands
that are neither C-contiguous nor transposed C-contiguous, and dtypes other
than float32/float64, fall back to ``np.matmul``.

MKL is left to its own threading by default: its Intel OpenMP layer, one
thread per core, with MKL choosing how many threads each call uses. Its
float32 GEMMs of a GPT step are then as fast as PyTorch's (1024×128 @
128×512: 0.69 ms, 1.36 ms single-threaded, on the 2-core machine).
``CIRCUITGRAD_MKL_THREADING=intel|sequential|gnu`` asks MKL for a layer (a
layer that MKL refuses is an error), but on that machine both explicit
choices made the 784-256-256-10 step slower than MKL's default: 2.7 ms
with ``intel``, 1.9 ms with ``sequential``, 1.3 ms with neither. (Before
2026-11-24 the layer codes were off by one: ``sequential`` asked for MKL's
PGI layer, which MKL refused, and so left MKL at its default; every figure
in ``docs/BENCHMARKS.md`` was taken that way.) Matrix-vector products
(:func:`matvec`, the backend's sums) use MKL too: with NumPy's OpenBLAS
pool also in a step, the two pools take turns spinning.

``CIRCUITGRAD_BLAS=numpy`` forces NumPy; ``CIRCUITGRAD_BLAS=mkl`` makes a
missing MKL an error. An MKL that is installed but does not load (an install
cut short) is, by default, a ``RuntimeWarning`` and NumPy's matmul.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
import warnings

import numpy as np

__all__ = ["matmul", "matvec", "name"]

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_GEMM: dict[np.dtype, object] = {}
_GEMV: dict[np.dtype, object] = {}
_LAYERS = {"intel": 0, "sequential": 1, "gnu": 3}     # MKL_THREADING_* of mkl_service.h


def _load() -> str:
    choice = os.environ.get("CIRCUITGRAD_BLAS", "auto").lower()
    if choice not in ("auto", "numpy", "mkl"):
        raise ValueError(f"CIRCUITGRAD_BLAS must be auto, numpy or mkl, got {choice!r}")
    if choice == "numpy":
        return "numpy"
    threading = os.environ.get("CIRCUITGRAD_MKL_THREADING", "").lower()
    if threading and threading not in _LAYERS:
        raise ValueError(f"CIRCUITGRAD_MKL_THREADING must be one of {sorted(_LAYERS)}, got {threading!r}")
    libs = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
    if not libs:
        if choice == "mkl":
            raise ImportError("CIRCUITGRAD_BLAS=mkl but libmkl_rt was not found: pip install 'circuitgrad[mkl]'")
        return "numpy"
    try:
        lib = ctypes.CDLL(libs[0])
        lib.cblas_sgemm, lib.cblas_dgemm, lib.cblas_sgemv, lib.cblas_dgemv     # noqa: B018 (a symbol is missing?)
    except (OSError, AttributeError) as e:       # an install cut short: the file is there, it does not load
        if choice == "mkl":
            raise ImportError(f"CIRCUITGRAD_BLAS=mkl but {libs[0]} does not load ({e}): "
                              "pip install --force-reinstall 'circuitgrad[mkl]'") from e
        warnings.warn(f"MKL ({libs[0]}) is installed but does not load ({e}); NumPy's matmul is used",
                      RuntimeWarning, stacklevel=2)
        return "numpy"
    if threading and lib.MKL_Set_Threading_Layer(ctypes.c_int(_LAYERS[threading])) < 0:
        raise ImportError(f"CIRCUITGRAD_MKL_THREADING={threading}: MKL ({libs[0]}) refused this threading layer")
    P, I = ctypes.c_void_p, ctypes.c_int
    for dt, fn, mv, scalar in ((np.dtype(np.float32), lib.cblas_sgemm, lib.cblas_sgemv, ctypes.c_float),
                               (np.dtype(np.float64), lib.cblas_dgemm, lib.cblas_dgemv, ctypes.c_double)):
        fn.restype = mv.restype = None
        fn.argtypes = [I, I, I, I, I, I, scalar, P, I, P, I, scalar, P, I]
        mv.argtypes = [I, I, I, I, scalar, P, I, P, I, scalar, P, I]
        _GEMM[dt], _GEMV[dt] = fn, mv
    return f"mkl ({os.path.basename(libs[0])})"


_NAME = _load()


def name() -> str:
    """Which GEMM :func:`matmul` uses: ``"numpy"`` or ``"mkl (...)"``."""
    return _NAME


def _layout(x: np.ndarray) -> tuple[int, int] | None:
    if x.flags.c_contiguous:
        return _NO_TRANS, x.shape[1]
    if x.flags.f_contiguous:
        return _TRANS, x.shape[0]
    return None


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for matrices (MKL GEMM when available)."""
    gemm = _GEMM.get(a.dtype)
    if gemm is None or a.ndim != 2 or b.ndim != 2 or b.dtype != a.dtype or 0 in a.shape + b.shape:
        return np.matmul(a, b)
    la, lb = _layout(a), _layout(b)
    if la is None or lb is None:
        return np.matmul(a, b)
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    out = np.empty((m, n), dtype=a.dtype)
    gemm(_ROW_MAJOR, la[0], lb[0], m, n, k, 1.0, a.ctypes.data, la[1], b.ctypes.data, lb[1], 0.0,
         out.ctypes.data, n)
    return out


def matvec(a: np.ndarray, v: np.ndarray, transpose: bool = False) -> np.ndarray:
    """``a @ v`` (or ``a.T @ v``) for a C-contiguous matrix ``a`` and a vector ``v`` (MKL GEMV when available).

    The same library as :func:`matmul`: mixing NumPy's OpenBLAS pool into a step whose GEMMs are MKL's
    makes the two thread pools take turns spinning (measured: the digits CNN step 2.4× slower).
    """
    gemv = _GEMV.get(a.dtype)
    if gemv is None or a.ndim != 2 or v.dtype != a.dtype or not a.flags.c_contiguous or 0 in a.shape:
        return np.dot(a.T if transpose else a, v)
    v = np.ascontiguousarray(v)
    m, n = a.shape
    if v.shape != ((m,) if transpose else (n,)):
        raise ValueError(f"matvec: {a.shape}{'ᵀ' if transpose else ''} @ {v.shape}")
    out = np.empty(n if transpose else m, dtype=a.dtype)
    gemv(_ROW_MAJOR, _TRANS if transpose else _NO_TRANS, m, n, 1.0, a.ctypes.data, n, v.ctypes.data, 1, 0.0,
         out.ctypes.data, 1)
    return out
