"""The device memory a GPU function holds at its peak, from its own generated code run on shapes alone.

    peak = memory.peak(f)          # bytes: arguments, folded constants and the intermediates at their peak

The glue of :mod:`~.runtime` allocates each value from CuPy's pool and frees it by reference counting
(``del`` after the last use; a view keeps its base alive). The same source is executed here against a stand-in
array module whose arrays carry a shape and a dtype but no data, whose kernels and products only allocate
their outputs, and which counts the bytes alive, rounded as CuPy's pool rounds (to 512 bytes). Python's
reference counting frees them when CuPy's would, so the count follows the real step's allocations:

* an argument or a folded constant is alive throughout;
* a kernel's or a product's output from its ``xp.empty`` (or the product) until its last reference goes;
* a view allocates nothing and keeps its base; ``ascontiguousarray`` and ``reshape`` of a strided view copy;
* under ``precision="bf16"``, a product's bfloat16 copies of its float32 operands, for the product's duration;
  a value stored as bfloat16 (:mod:`~.storage`) counts two bytes an element.

What it does not count: cuBLAS's workspace (32 MiB on the backend's own handle, allocated once), CuPy's
reduction temporaries, and the pool's cached free blocks (memory the pool holds, not memory in use).
"""
from __future__ import annotations

import math
import types
from typing import Any

import numpy as np

__all__ = ["peak", "Tracker", "ROUND"]

ROUND = 512                    # CuPy's memory pool hands out multiples of 512 bytes


class Tracker:
    """Bytes alive and their maximum."""

    def __init__(self):
        self.live = self.peak = 0

    def alloc(self, n: int) -> None:
        self.live += n
        self.peak = max(self.peak, self.live)

    def free(self, n: int) -> None:
        self.live -= n


class _Buffer:
    __slots__ = ("tracker", "nbytes", "__weakref__")

    def __init__(self, tracker: Tracker, nbytes: int):
        self.tracker, self.nbytes = tracker, nbytes
        tracker.alloc(nbytes)

    def __del__(self):
        self.tracker.free(self.nbytes)


class _Array:
    """A shape, a dtype, the buffer it lives in (shared by views) and whether it is C-contiguous."""
    __slots__ = ("shape", "dtype", "buffer", "contiguous")

    def __init__(self, shape, dtype, buffer: _Buffer, contiguous: bool = True):
        self.shape, self.dtype, self.buffer, self.contiguous = tuple(shape), np.dtype(dtype), buffer, contiguous

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def T(self) -> "_Array":
        return self.view(self.shape[::-1], self.ndim < 2)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def view(self, shape, contiguous: bool) -> "_Array":
        return _Array(shape, self.dtype, self.buffer, contiguous)

    def reshape(self, *shape) -> "_Array":
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return self.view(shape, True) if self.contiguous else _new(self.buffer.tracker, shape, self.dtype)

    def sum(self, axis=None, keepdims=False) -> "_Array":
        axes = range(self.ndim) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
        shape = [1 if d in axes else n for d, n in enumerate(self.shape)]
        return _new(self.buffer.tracker, shape, self.dtype)


def _new(tracker: Tracker, shape, dtype) -> _Array:
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    return _Array(shape, dtype, _Buffer(tracker, -(-nbytes // ROUND) * ROUND))


def _module(tracker: Tracker) -> types.SimpleNamespace:
    def empty(shape, dtype=np.float32):
        return _new(tracker, shape, dtype)

    def asarray(a):
        return a if isinstance(a, _Array) else _new(tracker, np.shape(a), np.asarray(a).dtype)

    def ascontiguousarray(a):
        return a if a.contiguous else _new(tracker, a.shape, a.dtype)

    def matmul(a, b, bf16: bool = False):
        # precision "bf16": each float32 operand is cast to a C-contiguous bfloat16 copy (blas), alive through
        # the product; an operand stored as bfloat16 (uint16 bits, :mod:`~.storage`) is read as it is
        copies = [_new(tracker, x.shape, np.uint16) for x in (a, b) if bf16 and x.dtype == np.float32]
        out = np.float32 if a.dtype == np.uint16 else a.dtype
        c = _new(tracker, tuple(a.shape[:-1]) + (b.shape[-1],), out)
        del copies
        return c

    def transpose(a, axes):
        return a.view(tuple(a.shape[i] for i in axes), list(axes) == sorted(axes))

    def broadcast_to(a, shape):
        return a.view(shape, tuple(shape) == a.shape)

    def as_strided(a, shape, strides):
        return a.view(shape, False)

    xp = types.SimpleNamespace(empty=empty, asarray=asarray, ascontiguousarray=ascontiguousarray, matmul=matmul,
                               transpose=transpose, broadcast_to=broadcast_to,
                               lib=types.SimpleNamespace(stride_tricks=types.SimpleNamespace(as_strided=as_strided)))
    for name in ("float32", "float64", "int64", "int32", "bool_", "uint8", "uint16"):
        setattr(xp, name, getattr(np, name))
    return xp


def peak(f: Any) -> int:
    """The bytes a call of ``f`` (a :class:`~.runtime.GpuFunction`) holds at its peak, its arguments included."""
    tracker = Tracker()
    xp = _module(tracker)
    bf16 = getattr(f, "precision", "fp32") == "bf16"
    ns: dict[str, Any] = {"xp": xp, "_values": f.plan.values, "_matmul": lambda a, b: xp.matmul(a, b, bf16)}
    for k in f.kernels.values():
        ns[k.name] = lambda grid, block, args: None
    exec(compile(f.python, f"<circuitgrad-gpu-memory:{f.name}>", "exec"), ns)
    prog = f.program
    args = [_new(tracker, prog.types[v].shape, prog.types[v].dtype.numpy_dtype()) for v in prog.inputs]
    out = ns[f.python.split("def ", 1)[1].split("(", 1)[0]](*args)
    result = tracker.peak
    del out, args, ns
    return result
