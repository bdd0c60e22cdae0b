"""Matrix products of the GPU glue on a cuBLAS handle of the backend's own, optionally on TF32 tensor cores.

    mm = blas.matmul(cupy, "tf32", capturable=True)     # a callable: mm(a, b) is a @ b
    c = mm(a, b)                            # [m, k] @ [k, n], or batched [..., m, k] @ [..., k, n]

A step run call by call uses ``cupy.matmul`` (for TF32, with CuPy's compute type set around the call). A step
replayed as a CUDA graph (``graph=True``) cannot: CuPy refuses every cuBLAS call while a stream is capturing
(its ``cublas.setStream`` raises), so there the products go to ``cublasGemmEx``/``cublasGemmStridedBatchedEx``
through ``ctypes``, on a handle created here with a 32 MiB workspace of its own (set before any capture, as
cuBLAS's CUDA-graph notes ask) and the current stream set on every call.

* ``precision="fp32"``: ``CUBLAS_COMPUTE_32F`` (``64F`` for float64), exactly what ``cupy.matmul`` asks for.
* ``precision="tf32"``: ``CUBLAS_COMPUTE_32F_FAST_TF32`` for float32 (products on the tensor cores from
  operands rounded to TF32's 10-bit mantissa, float32 accumulation), as PyTorch's ``allow_tf32``; float64 is
  unaffected.
* ``precision="bf16"``: float32 operands rounded to bfloat16 (a generated cast, round to nearest even) and
  multiplied on the tensor cores with float32 accumulation and a float32 result (``CUDA_R_16BF`` operands,
  ``CUBLAS_COMPUTE_32F``): the products of ``torch.autocast(dtype=torch.bfloat16)``, with everything else
  (the elementwise work, reductions, the loss, the parameters and the optimizer) in float32. Always on this
  backend's handle (CuPy has no bfloat16 product without ``ml_dtypes``). An operand already stored as
  bfloat16 (a ``uint16`` array of its bits, :mod:`~.storage`) is read as it is, without a cast: a compiled
  step's always are (:mod:`~.rounding` rounds each once, in the program); the cast here serves the rest
  (``store_bf16=False``, a constant).

Operands are read in place when their last two axes are a row-major or a transposed (column-major) matrix
and their leading axes one uniform batch stride; any other layout is copied first. Under the host execution
mode (:mod:`~.host.run`) the product is NumPy's, with TF32 operands rounded to 10 mantissa bits (round to
nearest, ties away from zero, as ``cvt.rna.tf32.f32``) and bfloat16 operands to 7 (round to nearest even).
"""
from __future__ import annotations

import ctypes
import os
from typing import Callable

import numpy as np

__all__ = ["PRECISIONS", "matmul", "own_handle", "handle_made", "round_tf32", "round_bf16", "widen_bf16", "operand",
           "WORKSPACE"]

PRECISIONS = ("fp32", "tf32", "bf16")
OP_N, OP_T = 0, 1                                           # cublasOperation_t
CUDA_R = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}   # cudaDataType_t
CUDA_R_16BF = 14
COMPUTE = {("fp32", np.dtype(np.float32)): 68, ("tf32", np.dtype(np.float32)): 77,   # cublasComputeType_t
           ("fp32", np.dtype(np.float64)): 70, ("tf32", np.dtype(np.float64)): 70,
           ("bf16", np.dtype(np.float32)): 68}
GEMM_DEFAULT = -1                                           # cublasGemmAlgo_t
WORKSPACE = 32 << 20                                        # bytes: what cuBLAS asks for on Hopper


def round_tf32(xp, a):
    """``a`` (float32) rounded to TF32's 10 mantissa bits: round to nearest, ties away from zero; a NaN becomes
    the quiet NaN of its sign (rounding its bits would carry some into a zero or an infinity)."""
    bits = a.view(xp.uint32)
    rounded = (bits + xp.uint32(0x1000)) & xp.uint32(0xFFFFE000)
    nan = (bits & xp.uint32(0x7FFFFFFF)) > xp.uint32(0x7F800000)
    return xp.where(nan, (bits & xp.uint32(0x80000000)) | xp.uint32(0x7FC00000), rounded).view(xp.float32)


def round_bf16(xp, a):
    """``a`` (float32) rounded to bfloat16 (8 mantissa bits, round to nearest even) and widened back: the
    value a bfloat16 tensor-core product reads (``ml_dtypes.bfloat16`` rounds the same); a NaN becomes the quiet
    NaN of its sign (rounding its bits would carry some into an infinity or a zero)."""
    bits = a.view(xp.uint32)
    odd = (bits >> xp.uint32(16)) & xp.uint32(1)
    rounded = (bits + xp.uint32(0x7FFF) + odd) & xp.uint32(0xFFFF0000)
    nan = (bits & xp.uint32(0x7FFFFFFF)) > xp.uint32(0x7F800000)      # a NaN stays one (the sign kept, quiet)
    return xp.where(nan, (bits & xp.uint32(0x80000000)) | xp.uint32(0x7FC00000), rounded).view(xp.float32)


#: C: the bfloat16 bits of the float32 bits ``b``, round to nearest even, a NaN the quiet NaN of its sign (the
#: cast below and the kernels that store values as bfloat16, :mod:`~.storage`)
BF16_BITS = ("((b & 0x7FFFFFFFu) > 0x7F800000u ? (unsigned short)(((b >> 16) & 0x8000u) | 0x7FC0u)"
             " : (unsigned short)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16))")
#: float32 -> bfloat16 bits (uint16), round to nearest even: the operands of a bfloat16 product
TO_BF16 = ("float32 x", "uint16 y", f"unsigned int b = __float_as_uint(x); y = {BF16_BITS}", "cg_to_bf16")


def operand(shape: tuple[int, ...], strides: tuple[int, ...], item: int) -> tuple[int, int, int] | None:
    """``(op, ld, batch stride)`` of an array's last two axes as a cuBLAS operand (strides in bytes), or ``None``
    when it must be copied first. ``op`` is ``OP_N`` for a row-major matrix, ``OP_T`` for a column-major one."""
    if any(s % item for s in strides):
        return None
    s = [st // item for st in strides]
    *batch, r, c = shape
    sr, sc = s[-2], s[-1]
    if (c == 1 or sc == 1) and (r == 1 or sr == c):
        op, ld = OP_N, max(c, 1)
    elif (r == 1 or sr == 1) and (c == 1 or sc == r):
        op, ld = OP_T, max(r, 1)
    else:
        return None
    dims = [(n, st) for n, st in zip(batch, s[:-2]) if n != 1]
    if not dims:
        return op, ld, r * c
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * n1:
            return None
    return op, ld, dims[-1][1]


class _Cublas:
    """The loaded ``libcublas`` (CuPy's own copy, found in the process's memory map) and this backend's handle."""

    def __init__(self, xp):
        from cupy_backends.cuda.libs import cublas as cupy_cublas   # loads libcublas
        self.handle = cupy_cublas.create()
        path = next((p for p in _mapped() if os.path.basename(p).startswith("libcublas.so")), None)
        if path is None:
            raise RuntimeError("backend='cupy': cannot find the libcublas CuPy loaded (TF32 and CUDA-graph steps "
                               "call it directly)")
        self.lib = lib = ctypes.CDLL(path)
        v, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        lib.cublasSetStream_v2.argtypes = [v, v]
        lib.cublasSetWorkspace_v2.argtypes = [v, v, ctypes.c_size_t]
        lib.cublasGemmEx.argtypes = [v, i, i, i, i, i, v, v, i, i, v, i, i, v, v, i, i, i, i]
        lib.cublasGemmStridedBatchedEx.argtypes = [v, i, i, i, i, i, v, v, i, i, ll, v, i, i, ll, v, v, i, i, ll,
                                                   i, i, i]
        for f in (lib.cublasSetStream_v2, lib.cublasSetWorkspace_v2, lib.cublasGemmEx,
                  lib.cublasGemmStridedBatchedEx):
            f.restype = ctypes.c_int
        self.workspace = xp.empty(WORKSPACE, dtype=xp.uint8)       # lives as long as the handle
        self.check("cublasSetWorkspace_v2", lib.cublasSetWorkspace_v2(self.handle, self.workspace.data.ptr,
                                                                     WORKSPACE))
        self.scalars = {np.dtype(np.float32): (ctypes.c_float(1.0), ctypes.c_float(0.0)),
                        np.dtype(np.float64): (ctypes.c_double(1.0), ctypes.c_double(0.0))}

    @staticmethod
    def check(what: str, status: int) -> None:
        if status != 0:
            raise RuntimeError(f"backend='cupy': {what} failed with cuBLAS status {status}")


def _mapped() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            return [line.split()[-1] for line in f if "/" in line]
    except OSError:
        return []


_HANDLES: dict[int, _Cublas] = {}


def _device_matmul(xp, precision: str) -> Callable:
    layouts: dict = {}
    cast = xp.ElementwiseKernel(*TO_BF16) if precision == "bf16" else None

    def mm(a, b):
        lib = _HANDLES.get(xp.cuda.Device().id)
        if lib is None:
            lib = _HANDLES[xp.cuda.Device().id] = _Cublas(xp)
        key = (a.shape, a.strides, b.shape, b.strides, a.dtype)
        lay = layouts.get(key)
        if lay is None:
            lay = layouts[key] = (operand(a.shape, a.strides, a.itemsize), operand(b.shape, b.strides, b.itemsize))
        la, lb = lay
        out_dtype = np.dtype(np.float32) if a.dtype == np.uint16 else a.dtype
        if precision == "bf16":     # operands rounded to bfloat16 (C-contiguous copies), unless stored so already
            a, b = (x if x.dtype == np.uint16 else cast(x) for x in (a, b))
            la, lb = operand(a.shape, a.strides, 2), operand(b.shape, b.strides, 2)
        if la is None:
            a, la = _packed(xp, a)
        if lb is None:
            b, lb = _packed(xp, b)
        *batch, m, k = a.shape
        n = b.shape[-1]
        c = xp.empty((*batch, m, n), dtype=out_dtype)
        ct, compute = CUDA_R[np.dtype(out_dtype)], COMPUTE[precision, np.dtype(out_dtype)]
        dt = CUDA_R_16BF if precision == "bf16" else ct
        one, zero = lib.scalars[np.dtype(out_dtype)]
        L = lib.lib
        lib.check("cublasSetStream_v2", L.cublasSetStream_v2(lib.handle, xp.cuda.get_current_stream().ptr))
        pa, pb, pc, pone, pzero = a.data.ptr, b.data.ptr, c.data.ptr, ctypes.byref(one), ctypes.byref(zero)
        # row-major C = A B is column-major C^T = B^T A^T: cuBLAS's (m, n, k) = (n, m, k), B first
        if not batch or c.size == 0 or int(np.prod(batch)) == 1:
            lib.check("cublasGemmEx", L.cublasGemmEx(lib.handle, lb[0], la[0], n, m, k, pone, pb, dt, lb[1], pa, dt,
                                                     la[1], pzero, pc, ct, n, compute, GEMM_DEFAULT))
        else:
            lib.check("cublasGemmStridedBatchedEx", L.cublasGemmStridedBatchedEx(
                lib.handle, lb[0], la[0], n, m, k, pone, pb, dt, lb[1], lb[2], pa, dt, la[1], la[2], pzero, pc, ct,
                n, m * n, int(np.prod(batch)), compute, GEMM_DEFAULT))
        return c
    return mm


def _packed(xp, a):
    a = xp.ascontiguousarray(a)
    return a, operand(a.shape, a.strides, a.itemsize)


def _host_matmul(xp, precision: str) -> Callable:
    rnd = {"tf32": round_tf32, "bf16": round_bf16}.get(precision)

    def mm(a, b):
        stored = np.uint16 in (a.dtype, b.dtype)          # an operand stored as bfloat16 (:mod:`~.storage`)
        if stored and precision != "bf16":
            raise TypeError(f"matmul: a bfloat16 operand (uint16 bits) under precision {precision!r}")
        if rnd is not None and (stored or a.dtype == np.float32):
            a, b = (widen_bf16(xp, x) if x.dtype == np.uint16 else rnd(xp, xp.ascontiguousarray(x)) for x in (a, b))
        return xp.matmul(a, b)
    return mm


def widen_bf16(xp, bits):
    """bfloat16 bits (``uint16``, a value stored so by :mod:`~.storage`) as the float32 values they are."""
    return (xp.ascontiguousarray(bits).astype(xp.uint32) << xp.uint32(16)).view(xp.float32)


def _cupy_matmul(xp, precision: str) -> Callable:
    """``cupy.matmul`` with float32 products on the TF32 tensor cores (CuPy's compute type, set around the call)."""
    if precision == "fp32":
        return xp.matmul
    from cupy._core import _routines_linalg as linalg
    f32 = np.dtype(np.float32)

    def mm(a, b):
        if a.dtype != f32:
            return xp.matmul(a, b)
        old = linalg.get_compute_type(f32)
        linalg.set_compute_type(f32, linalg.COMPUTE_TYPE_TF32)
        try:
            return xp.matmul(a, b)
        finally:
            linalg.set_compute_type(f32, old)
    return mm


def matmul(xp, precision: str = "fp32", capturable: bool = False) -> Callable:
    """The product ``mm(a, b)`` for array module ``xp`` (CuPy, the :mod:`~.host.run` stand-in, or NumPy).

    ``capturable=True``: on this backend's own cuBLAS handle through ``ctypes``, which a CUDA graph can capture;
    else ``cupy.matmul`` (with CuPy's TF32 compute type for ``precision="tf32"``), which issues faster."""
    if precision not in PRECISIONS:
        raise ValueError(f"matmul precision must be one of {PRECISIONS}, got {precision!r}")
    if xp is np or getattr(xp, "hostrun", False):
        return _host_matmul(xp, precision)
    return _device_matmul(xp, precision) if own_handle(precision, capturable) else _cupy_matmul(xp, precision)


def own_handle(precision: str, capturable: bool = False) -> bool:
    """Whether a device's products at ``precision`` run on this backend's cuBLAS handle, made at the first such
    product with its :data:`WORKSPACE` (bf16's, and those a CUDA graph captures), rather than ``cupy.matmul``."""
    return capturable or precision == "bf16"


def handle_made(device: int) -> bool:
    """Whether this process made the backend's cuBLAS handle (and its workspace) on CUDA device ``device``."""
    return device in _HANDLES
