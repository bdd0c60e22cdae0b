"""Host execution mode, the launch side: CUDA kernels compiled for the CPU and run one thread at a time.

:mod:`~.run` is the ``cupy`` stand-in (device arrays, the module functions, :func:`~.run.device`); this
module is what its ``cupy.RawKernel`` does, and the device memory a launch checks. It imports nothing from
:mod:`~.run`: a device array is a :class:`DeviceBuffer` here (``run.DeviceArray`` subclasses it).

* **Kernels are the generated CUDA C**, compiled for the CPU by ``nvcc -x c++`` (all kernels built
  together into one shared library, cached on disk by content). The ``extern "C" __global__`` function
  itself runs, once per thread: a host entry point loops over the launch grid, sets ``blockIdx``,
  ``threadIdx``, ``blockDim`` and ``gridDim``, and calls it with the arguments unpacked from a
  ``void**`` array, as ``cuLaunchKernel`` does. Threads run one at a time, in ``order="forward"`` or
  ``"reverse"`` (blocks and threads reversed), so a kernel whose thread reads what another thread writes
  (an in-place update that is not element for element) gives different results in the two orders.
* **Arguments follow CuPy's ``RawKernel`` rules**: a device array passes its data pointer, whatever its
  strides (a Fortran-ordered array is read as if it were C-ordered); a NumPy array of size one is passed
  *by value* (its bytes, not a pointer: a kernel that dereferences it faults, which here raises
  :class:`IllegalAddress`); a larger NumPy array is a ``TypeError``; each array's dtype is checked against
  the C type of the parameter it binds to (parsed from the kernel's signature), and launch sizes against
  CUDA's limits (1024 threads a block, 4 KB of arguments).
* **Device memory is guarded**: every allocation (:func:`alloc`: NaN-filled, a sentinel for integers) has
  :data:`GUARD` elements on both sides that are checked after each launch (a write out of bounds raises
  :class:`IllegalAddress`; views and ``as_strided`` results are checked through the allocation they view). A
  generated kernel's source states how many elements each pointer argument must hold (``// circuitgrad
  extents: …``, the size of its variable's type, inputs then outputs); each launch checks that the memory from
  the pointer to the end of its allocation holds that many, before the kernel runs, so a too-small buffer is
  caught whether the kernel reads or writes past it.

A kernel whose threads cooperate (warp shuffles, shared memory, ``__syncthreads``) cannot run one thread at a
time. Such a kernel's source may define a host emulation ``void <name>__host_warp(unsigned long long block,
unsigned warp, <the kernel's parameters>)`` (marked ``#ifdef CG_HOSTRUN``); the launch then calls it once per
warp of 32 threads, in the chosen order, with ``blockIdx``/``blockDim``/``gridDim`` set. The prelude declares the
warp intrinsics (``__shfl*_sync``, ``__syncwarp``, ``__syncthreads``) so that such a kernel compiles; a kernel that
uses them without a host emulation is refused when it is created. The row kernels (``gpu.row``, a warp per
row) emulate their warp so: the same per-lane functions and combine function, and the shuffle butterfly
replayed lane for lane. In ``"reverse"`` order the launch also sets ``cg_reverse``, and such an emulation runs
its lanes 31 … 0 (the row kernels do), so a lane that read another lane's partial shows.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
import threading
import weakref

import numpy as np

from .check import Param, nvcc, signature

__all__ = ["RawKernel", "DeviceBuffer", "IllegalAddress", "LaunchError", "available", "ORDERS", "GUARD",
           "FLAGS"]

ORDERS = ("forward", "reverse")
GUARD = 16                     # elements of guard memory each side of every allocation
launch_state = threading.local()


def _order() -> str:
    return getattr(launch_state, "order", "forward")


class LaunchError(RuntimeError):
    """A launch a device would refuse (CUDA_ERROR_INVALID_VALUE and the like)."""


class IllegalAddress(RuntimeError):
    """What a device would report as ``cudaErrorIllegalAddress`` (and then refuse every later call)."""


def available() -> tuple[bool, str]:
    """``(True, nvcc path)`` when the host mode can compile kernels, else ``(False, why)``."""
    exe = nvcc()
    return (True, exe) if exe else (False, "nvcc not found: install the CUDA toolkit (the host execution mode "
                                           "compiles the generated kernels with nvcc)")


# ------------------------------------------------------------------ device memory
_guards: dict[int, tuple] = {}          # id(buffer) -> (weakref to it, guard elements, canary value)


def _canary(dtype: np.dtype):
    return np.nan if dtype.kind == "f" else (np.iinfo(dtype).min + 7 if dtype.kind in "iu" else 0)


def alloc(shape, dtype, order: str = "C") -> np.ndarray:
    """NaN-filled memory (a sentinel for integers) with :data:`GUARD` canary elements on each side."""
    dtype = np.dtype(dtype)
    shape = (shape,) if np.isscalar(shape) else tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.empty(n + 2 * GUARD, dtype=dtype)
    buf[...] = _canary(dtype)
    _guards[id(buf)] = (weakref.ref(buf, lambda r, k=id(buf): _guards.pop(k, None)), GUARD)
    return buf[GUARD:GUARD + n].reshape(shape, order=order)


def _root(a: np.ndarray) -> np.ndarray:
    """The allocation ``a`` views, through views and ``as_strided`` results (whose ``base`` is NumPy's
    ``DummyArray``, itself holding the array it was made from)."""
    while True:
        b = a.base
        if not isinstance(b, np.ndarray) and isinstance(getattr(b, "base", None), np.ndarray):
            b = b.base
        if not isinstance(b, np.ndarray):
            return a
        a = b


def _available(a: np.ndarray) -> int:
    """Elements of ``a``'s dtype from its data pointer to the end of its allocation (guard memory excluded)."""
    root = _root(a)
    g = _guards.get(id(root))
    guard = g[1] if g is not None and g[0]() is root else 0
    start = a.__array_interface__["data"][0]
    end = root.__array_interface__["data"][0] + (root.size - guard) * root.itemsize
    return max(0, (end - start) // a.itemsize)


_EXTENTS = re.compile(r"^// circuitgrad extents:((?: \d+)*)\s*$", re.M)


def _check_guards(arrays, what: str) -> None:
    for k, a in arrays:
        root = _root(a)
        g = _guards.get(id(root))
        if g is None or g[0]() is not root:
            continue
        edge = np.concatenate([root[:g[1]], root[-g[1]:]])
        c = _canary(root.dtype)
        bad = ~np.isnan(edge) if root.dtype.kind == "f" else edge != c
        if bad.any():
            root[:g[1]] = c
            root[-g[1]:] = c
            raise IllegalAddress(f"{what} wrote outside the allocation of argument {k} (guard memory changed): "
                                 f"on a device, an out-of-bounds write (cudaErrorIllegalAddress, or silent "
                                 f"corruption of a neighbouring buffer)")


class DeviceBuffer:
    """Device memory as a launch sees it: a NumPy array (``_a``) in guarded host memory. A kernel argument that
    is one passes its data pointer (:class:`~.run.DeviceArray` is the ``cupy.ndarray`` stand-in built on it)."""
    __slots__ = ("_a", "__weakref__")

    def __init__(self, a: np.ndarray):
        self._a = a


# ------------------------------------------------------------------ compiling kernels for the host
_PRELUDE = r"""// circuitgrad host execution mode: CUDA kernels compiled as C++ and run one thread at a time
#define CG_HOSTRUN 1
#include <math.h>
#include <stdint.h>
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
struct cg_dim3 { unsigned int x, y, z; };
static cg_dim3 threadIdx, blockIdx, blockDim, gridDim;
typedef unsigned long long cg_ull;
struct float4 { float x, y, z, w; };   // CUDA's vector types, for 16-byte loads
struct double2 { double x, y; };
static inline cg_dim3 cg_coords(cg_ull v, unsigned nx, unsigned ny) {   // linear block/thread id -> (x, y, z)
    return cg_dim3{(unsigned)(v % nx), (unsigned)((v / nx) % ny), (unsigned)(v / ((cg_ull)nx * ny))};
}
static const int warpSize = 32;
static int cg_reverse = 0;          // the launch's thread order: a warp emulation runs its lanes 31 … 0 when set
#define __shared__ static
// Warp intrinsics, so that a cooperative kernel compiles: the launch runs its <name>__host_warp emulation
// instead (RawKernel refuses to run one thread at a time a kernel that shuffles and has none).
#include <stdio.h>
#include <stdlib.h>
template <class T> static inline T cg_no_warp(T v) {
    fprintf(stderr, "circuitgrad hostrun: a warp intrinsic ran one thread at a time\n");
    abort();
    return v;
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int, int = 32) { return cg_no_warp(v); }
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned, int = 32) { return cg_no_warp(v); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned, int = 32) { return cg_no_warp(v); }
template <class T> static inline T __shfl_sync(unsigned, T v, int, int = 32) { return cg_no_warp(v); }
static inline void __syncwarp(unsigned = 0xffffffffu) { cg_no_warp(0); }
static inline void __syncthreads() { cg_no_warp(0); }
// A vector load (16 bytes: float4, double2; 8: four bfloat16 values) from an address a device would refuse
// (misaligned address).
static inline void cg_vec_load(const void* p, unsigned bytes, const char* a, const char* what) {
    if ((cg_ull)p % bytes) {
        fprintf(stderr, "circuitgrad hostrun: %s %u-byte load of %s from %p, not %u-byte aligned: on a device, "
                "a misaligned address error\n", a, bytes, what, p, bytes);
        abort();
    }
}
#define CG_VEC_LOAD(p) cg_vec_load(p, 16, "a", #p)
#define CG_VEC_LOAD8(p) cg_vec_load(p, 8, "an", #p)
// A vector store (8 or 16 bytes) to an address a device would refuse.
static inline void cg_vec_store(const void* p, unsigned bytes, const char* what) {
    if ((cg_ull)p % bytes) {
        fprintf(stderr, "circuitgrad hostrun: %s %u-byte store to %s at %p, not %u-byte aligned: on a device, "
                "a misaligned address error\n", bytes == 8 ? "an" : "a", bytes, what, p, bytes);
        abort();
    }
}
#define CG_VEC_STORE(p, bytes) cg_vec_store(p, bytes, #p)
// Row i of an operand of n rows (an attention kernel's matrix), read or written outside [0, n): on a device,
// memory outside the operand (a fault, or another array's values), which the guard elements may not show.
static inline long long cg_row(long long i, long long n, const char* what) {
    if (i < 0 || i >= n) {
        fprintf(stderr, "circuitgrad hostrun: row %lld of %s, which has %lld rows: on a device, an access "
                "outside the operand\n", i, what, n);
        abort();
    }
    return i;
}
#define CG_ROW(i, n, what) cg_row((i), (n), what)
"""
_COOPERATIVE = re.compile(r"\b(__shfl\w*_sync|__syncthreads|__syncwarp|__shared__)\b")


def _launcher(name: str, params: list[Param], code: str) -> str:
    call = ", ".join(f"*({p.cast}*)args[{k}]" for k, p in enumerate(params))
    head = (f'extern "C" void cg_launch_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, '
            f"unsigned bz, int reverse, void** args) {{\n"
            f"    gridDim = cg_dim3{{gx, gy, gz}}; blockDim = cg_dim3{{bx, by, bz}}; cg_reverse = reverse;\n"
            f"    const cg_ull nb = (cg_ull)gx * gy * gz, nt = (cg_ull)bx * by * bz;\n"
            f"    for (cg_ull b0 = 0; b0 < nb; ++b0) {{\n"
            f"        const cg_ull b = reverse ? nb - 1 - b0 : b0;\n"
            f"        blockIdx = cg_coords(b, gx, gy);\n")
    if re.search(r"\b" + re.escape(name) + r"__host_warp\s*\(", code):
        loop = (f"        const unsigned nw = (unsigned)((nt + 31) / 32);\n"
                f"        for (unsigned w0 = 0; w0 < nw; ++w0) {name}__host_warp(b, reverse ? nw - 1 - w0 : w0"
                f"{', ' if call else ''}{call});\n")
    else:
        loop = (f"        for (cg_ull t0 = 0; t0 < nt; ++t0) {{\n"
                f"            threadIdx = cg_coords(reverse ? nt - 1 - t0 : t0, bx, by);\n"
                f"            {name}({call});\n"
                f"        }}\n")
    return head + loop + "    }\n}\n"


def _cache_dir() -> str:
    d = os.environ.get("CIRCUITGRAD_HOSTRUN_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "circuitgrad", "hostrun")
    os.makedirs(d, exist_ok=True)
    return d


# -ffp-contract=off: each product and sum rounded, as NumPy does, never fused into an FMA (GCC does at -O2 on an
# FMA CPU): an expression has the same bits in every kernel that inlines it, on any host
FLAGS = ["-x", "c++", "-O1", "-shared", "-Xcompiler", "-fPIC", "-Xcompiler", "-ffp-contract=off"]


def _build(units: list[tuple[str, str, list[Param]]]) -> ctypes.CDLL:
    """One shared library of kernels ``(code, name, params)`` (names unique), cached by content."""
    exe = nvcc()
    if exe is None:
        raise FileNotFoundError(available()[1])
    src = _PRELUDE + "".join(f"\n// ---- {name}\n{code}\n{_launcher(name, params, code)}"
                             for code, name, params in units)
    key = hashlib.sha256((src + "\0" + " ".join(FLAGS)).encode()).hexdigest()[:24]
    lib = os.path.join(_cache_dir(), f"k{key}.so")
    if not os.path.exists(lib):
        with tempfile.TemporaryDirectory() as tmp:
            cu = os.path.join(tmp, "kernels.cpp")
            with open(cu, "w") as fh:
                fh.write(src)
            out = os.path.join(tmp, "kernels.so")
            res = subprocess.run([exe, *FLAGS, "-o", out, cu], capture_output=True, text=True)
            if res.returncode != 0:
                names = ", ".join(n for _, n, _ in units)
                raise RuntimeError(f"nvcc failed on kernels compiled for the host ({names}):\n{res.stderr[-3000:]}")
            os.replace(out, lib + f".{os.getpid()}")
            os.replace(lib + f".{os.getpid()}", lib)
    return ctypes.CDLL(lib)


_pending: list["RawKernel"] = []


def _compile_pending(k: "RawKernel") -> None:
    """Build ``k`` with every kernel created but not yet built (one nvcc call per model function)."""
    todo = [r for r in _pending if r._fn is None]
    if k not in todo:
        todo.append(k)
    while todo:
        batch, names, rest = [], set(), []
        for r in todo:
            (rest if r.name in names else batch).append(r)
            names.add(r.name)
        try:
            lib = _build([(r.code, r.name, r.params) for r in batch])
        except Exception:
            # the failing batch leaves the queue (each of its kernels fails again when called), not later builds
            _pending[:] = [r for r in _pending if r not in batch]
            raise
        for r in batch:
            r._lib, r._fn = lib, getattr(lib, f"cg_launch_{r.name}")
            r._fn.restype = None
            r._fn.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
        todo = rest
    _pending[:] = [r for r in _pending if r._fn is None]


class RawKernel:
    """``cupy.RawKernel(code, name)``: the kernel compiled for the host, launched one thread at a time."""

    def __init__(self, code: str, name: str, options=(), backend: str = "nvrtc", **kwargs):
        self.code, self.name = code, name
        self.params = signature(code, name)
        self.host_warp = re.search(r"\b" + re.escape(name) + r"__host_warp\s*\(", code) is not None
        coop = _COOPERATIVE.search(code)
        if coop and not self.host_warp:
            raise NotImplementedError(
                f"kernel {name} uses {coop.group(1)} (threads that cooperate), which cannot run one thread at a "
                f"time: define its host emulation `{name}__host_warp(block, warp, …)` under #ifdef CG_HOSTRUN")
        m = _EXTENTS.search(code)
        self.extents = tuple(int(v) for v in m.group(1).split()) if m else None
        self._lib = self._fn = None
        _pending.append(self)

    def compile(self, log_stream=None) -> None:
        if self._fn is None:
            _compile_pending(self)

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None, **kwargs) -> None:
        capture = getattr(launch_state, "capture", None)
        if capture is not None:             # a capturing stream records the launch (see capture)
            capture.append(lambda: self(grid, block, args, shared_mem, stream))
            return
        where = f"kernel {self.name}"
        if not isinstance(grid, tuple) or not isinstance(block, tuple) or not isinstance(args, tuple):
            raise TypeError(f"{where}: grid, block and args must be tuples (CuPy's RawKernel.__call__ is typed so)")
        g = [max(1, int(v)) for v in (grid + (1, 1))[:3]]
        b = [max(1, int(v)) for v in (block + (1, 1))[:3]]
        if b[0] * b[1] * b[2] > 1024 or b[0] > 1024 or b[1] > 1024 or b[2] > 64:
            raise LaunchError(f"{where}: block {tuple(b)}: a device refuses more than 1024 threads a block "
                              f"(CUDA_ERROR_INVALID_VALUE)")
        if g[0] > 2 ** 31 - 1 or g[1] > 65535 or g[2] > 65535:
            raise LaunchError(f"{where}: grid {tuple(g)} exceeds CUDA's limits (CUDA_ERROR_INVALID_VALUE)")
        if len(args) != len(self.params):
            raise LaunchError(f"{where} takes {len(self.params)} arguments, got {len(args)}: CuPy does not check, "
                              f"a device reads junk for the missing ones")
        keep, slots, arrays, size = [], [], [], 0
        for k, (a, p) in enumerate(zip(args, self.params)):
            arg = f"{where}: argument {k} for `{p.decl}`"
            if isinstance(a, DeviceBuffer):
                if not p.pointer:
                    raise TypeError(f"{arg}: a device array passes its pointer, but the kernel takes a {p.ctype} "
                                    f"by value")
                if a._a.dtype != p.dtype:
                    raise TypeError(f"{arg}: a {a._a.dtype} array, but the kernel reads {p.ctype} ({p.dtype}): "
                                    f"on a device it reinterprets the bytes (wrong values, or reads past the end)")
                v = ctypes.c_void_p(a._a.__array_interface__["data"][0])
                if self.extents is not None and k < len(self.extents) and self.extents[k] > _available(a._a):
                    raise IllegalAddress(
                        f"{arg}: the kernel indexes {self.extents[k]} elements from this pointer, but its buffer "
                        f"holds {_available(a._a)} (shape {a._a.shape}): on a device, a read or write out of bounds "
                        f"(cudaErrorIllegalAddress, or silently another buffer's data)")
                arrays.append((k, a._a))
                size += 8
            elif isinstance(a, np.ndarray) and a.size != 1:
                raise TypeError(f"{arg}: You are trying to pass a numpy.ndarray of shape {a.shape} as a kernel "
                                f"parameter. Only numpy.ndarrays of size one can be passed by value. If you meant to "
                                f"pass a pointer to __global__ memory, you need to pass a cupy.ndarray instead.")
            elif a is None or isinstance(a, (np.ndarray, np.generic, int, float, bool)):
                what = ("None (a NULL pointer)" if a is None else
                        f"a size-1 numpy.ndarray (shape {a.shape}, {a.dtype})" if isinstance(a, np.ndarray) else
                        f"a host scalar {type(a).__name__}")
                if p.pointer:
                    raise IllegalAddress(
                        f"{arg}: {what} is passed BY VALUE (CuPy passes NumPy arrays of size one and scalars as "
                        f"their bytes), but the parameter is a pointer: on a device the kernel dereferences those "
                        f"bytes (plus junk) as an address, an illegal memory access (cudaErrorIllegalAddress) "
                        f"that poisons the CUDA context. Pass a cupy.ndarray.")
                x = np.asarray(a if a is not None else 0)
                if isinstance(a, (int, float, bool)) and not isinstance(a, np.generic):
                    x = np.asarray(a, dtype={bool: np.bool_, int: np.int64, float: np.float64}[type(a)])
                if x.dtype != p.dtype:
                    raise TypeError(f"{arg}: {what} of dtype {x.dtype} passed by value ({x.dtype.itemsize} bytes) "
                                    f"for a {p.ctype}: a device reinterprets the bytes")
                x = np.ascontiguousarray(x.reshape(()))
                keep.append(x)
                v = ctypes.c_void_p(x.ctypes.data)
                slots.append(v)
                size += x.dtype.itemsize
                continue
            else:
                raise TypeError(f"{arg}: Unsupported type {type(a)}")
            keep.append(v)
            slots.append(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p))
        if size > 4096:
            raise LaunchError(f"{where}: {size} bytes of arguments, over CUDA's 4 KB limit")
        if self._fn is None:
            _compile_pending(self)
        argv = (ctypes.c_void_p * max(1, len(slots)))(*[s.value for s in slots])
        self._fn(*g, *b, int(_order() == "reverse"), argv)
        _check_guards(arrays, where)
