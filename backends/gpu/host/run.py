"""Host execution mode: the ``cupy`` backend's generated glue and real kernel sources, run on the CPU.

``backend="cupy-emulated"`` runs the glue on NumPy with kernels *emulated* by NumPy, so it follows NumPy's
rules, not CuPy's, and never runs the generated CUDA C. This module runs the ``backend="cupy"`` code path
itself, unchanged, against a stand-in ``cupy`` module::

    from circuitgrad.backends.gpu import host
    with host.device(order="reverse"):           # sys.modules["cupy"] is the stand-in inside
        step = cg.compile_model(model, loss=..., optimizer=..., backend="cupy", donate=True)
        params = step.step(step.init_params(), x, y)
        host = {k: v.get() for k, v in params.items()}

What the stand-in does as a device does:

* **Kernels are the generated CUDA C**, compiled for the CPU by ``nvcc -x c++`` and launched one thread at a
  time, in ``order="forward"`` or ``"reverse"``, by ``cupy.RawKernel`` (:class:`~.launch.RawKernel`, which
  also checks arguments by CuPy's rules, launch sizes against CUDA's limits, and device memory's guards and
  extents: see :mod:`~.launch`).
* **Arrays follow CuPy's rules**: device arrays are :class:`DeviceArray`, not ``numpy.ndarray``;
  ``numpy.asarray(device_array)`` raises CuPy's ``TypeError`` (use ``.get()``); ``asarray`` of a NumPy
  array keeps Fortran order only for an F- and not C-contiguous array (CuPy's ``flags.fnc`` rule; any other
  layout, a permuted or strided one included, arrives C-ordered); ``ascontiguousarray`` refuses NumPy input and,
  as CuPy's, returns at least one dimension (a 0-d array comes back with shape ``(1,)``); other functions refuse
  NumPy arrays. ``empty`` returns NaN-filled memory (so an element no kernel writes shows), and every
  allocation has guard elements on both sides, checked after each launch (see :mod:`~.launch`).
* **Reads back to the host are recorded**: ``.get()``, ``item``, ``tolist``, ``bool``/``int``/``float``/
  ``index`` of a device array, and printing one each append ``"what at file:line"`` to ``cupy.syncs`` (cleared
  when :func:`device` is entered), as each would wait for the device; a test can require none in a step.
* cuBLAS products, reductions, views (``as_strided``, ``transpose``, …) delegate to NumPy.

What it cannot show: timing, occupancy, NVRTC (device) compilation, real concurrency (two threads of one
launch never interleave), CUDA's float contraction into FMAs and its fast math functions, and the driver's
behaviour after a fault. See ``docs/GPU.md``, "Host execution mode".
"""
from __future__ import annotations

import contextlib
import os
import sys
import types
from typing import Iterator

import numpy as np

from . import capture
from .check import signature
from .launch import (ORDERS, DeviceBuffer, IllegalAddress, LaunchError, RawKernel, alloc, launch_state,
                         available)

__all__ = ["DeviceArray", "RawKernel", "IllegalAddress", "LaunchError", "device", "cupy", "ORDERS",
           "signature", "available"]

IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy "
            "array explicitly.")


# ------------------------------------------------------------------ device arrays
def _sync(what: str) -> None:
    """Record a read of device memory by the host (a synchronisation on a device): ``cupy.syncs`` lists them as
    ``"what at file:line"`` (the caller outside this module), so a test can require a step to make none."""
    capture.refuse(f"a read of device memory by the host ({what})")
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    where = f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}" if f is not None else "?"
    cupy.syncs.append(f"{what} at {where}")


def _unwrap(x):
    if isinstance(x, DeviceArray):
        return x._a
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _wrap(x):
    if isinstance(x, np.ndarray):
        return DeviceArray(x)
    if isinstance(x, np.generic):           # CuPy returns 0-d arrays, never NumPy scalars
        return DeviceArray(np.asarray(x))
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    if isinstance(x, list):
        return [_wrap(v) for v in x]
    return x


def _refuse_host(args, where: str) -> None:
    """CuPy functions take cupy.ndarray (and Python or NumPy scalars), not numpy.ndarray."""
    for a in args:
        if isinstance(a, np.ndarray):
            raise TypeError(f"{where}: Unsupported type {type(a)} (a numpy.ndarray given to a CuPy function; "
                            f"move it to the device with cupy.asarray)")
        if isinstance(a, (list, tuple)):
            _refuse_host(a, where)


def _call(fn, name: str, args: tuple, kwargs: dict, base: np.ndarray | None = None):
    """``fn`` on the unwrapped arguments, wrapped; during a capture, recorded (see :mod:`~.capture`)."""
    a, kw = _unwrap(args), _unwrap(kwargs)
    if capture.capturing() is None:
        return _wrap(fn(*a, **kw))
    if any(isinstance(x, np.ndarray) for x in _arrays(args, kwargs, None)):
        capture.refuse("a host-to-device copy")
    if name in capture.INPLACE or name.startswith("__i") or "out" in kw:
        capture.record(lambda: fn(*a, **kw))
        return _wrap(kw["out"]) if "out" in kw else None
    with np.errstate(all="ignore"):
        r = fn(*a, **kw)
    if isinstance(r, np.ndarray) and not any(isinstance(x, np.ndarray) and np.may_share_memory(r, x)
                                             for x in _arrays(a, kw, base)):
        def again(r=r):
            with np.errstate(all="ignore"):
                np.copyto(r, fn(*a, **kw), casting="unsafe")
        capture.record(again)
    return _wrap(r)


def _arrays(args, kwargs, base):
    for x in [base, *args, *kwargs.values()]:
        if isinstance(x, (list, tuple)):
            yield from x
        else:
            yield x


class DeviceArray(DeviceBuffer):
    """A ``cupy.ndarray`` stand-in: NumPy memory that refuses implicit conversion to NumPy (``.get()`` copies)."""
    __slots__ = ()
    __array_priority__ = 100.0
    __hash__ = None

    # -- CuPy's refusals
    def __array__(self, *args, **kwargs):
        raise TypeError(IMPLICIT)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _refuse_host(inputs, f"cupy.{ufunc.__name__}")
        if "out" in kwargs:
            _refuse_host(kwargs["out"], f"cupy.{ufunc.__name__}")
        return _call(getattr(ufunc, method), ufunc.__name__, inputs, kwargs)

    def __array_function__(self, func, types_, args, kwargs):
        _refuse_host(args, f"cupy.{func.__name__}")
        return _call(func, func.__name__, args, kwargs)

    # -- what CuPy has
    def get(self, stream=None, order="C", out=None) -> np.ndarray:
        _sync("get")
        return np.array(self._a, order=order, copy=True)

    def item(self, *args):
        _sync("item")
        return self._a.item(*args)

    def tolist(self):
        _sync("tolist")
        return self._a.tolist()

    @property
    def __cuda_array_interface__(self) -> dict:
        a = self._a
        return {"shape": a.shape, "typestr": a.dtype.str, "version": 3,
                "data": (a.__array_interface__["data"][0], False),
                "strides": None if a.flags.c_contiguous else a.strides}

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self._a.__array_interface__["data"][0])

    @property
    def T(self) -> "DeviceArray":
        return DeviceArray(self._a.T)

    def __getattr__(self, name):
        if name.startswith("__"):           # __array_interface__, __array_struct__, …: no implicit conversion
            raise AttributeError(name)
        v = getattr(self._a, name)
        if callable(v):
            def method(*args, **kwargs):
                _refuse_host(args, f"cupy.ndarray.{name}")
                return _call(v, name, args, kwargs, self._a)
            return method
        return _wrap(v) if isinstance(v, np.ndarray) else v

    def __getitem__(self, key):
        return _wrap(self._a[_unwrap(key)])

    def __setitem__(self, key, value):
        _call(self._a.__setitem__, "__setitem__", (key, value), {})

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Iterator["DeviceArray"]:
        return (DeviceArray(np.asarray(v)) for v in self._a)

    # -- reads back to the host: each waits for the device (recorded in ``cupy.syncs``)
    def __float__(self) -> float:
        _sync("__float__")
        return float(self._a)

    def __int__(self) -> int:
        _sync("__int__")
        return int(self._a)

    def __index__(self) -> int:
        _sync("__index__")
        return self._a.__index__()

    def __bool__(self) -> bool:
        _sync("__bool__")
        return bool(self._a)

    def __repr__(self) -> str:
        _sync("__repr__")
        return "hostrun." + repr(self._a).replace("array(", "DeviceArray(", 1)

    def __str__(self) -> str:
        _sync("__str__")
        return str(self._a)


def _binop(name):
    def op(self, *other):
        _refuse_host(other, f"cupy.ndarray.{name}")
        r = _call(getattr(self._a, name), name, other, {}, self._a)
        if name.startswith("__i"):          # in place: the array itself (recorded during a capture)
            return self
        return r if r is not None and r is not NotImplemented else NotImplemented
    op.__name__ = name
    return op


for _n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
           "lshift", "rshift"):
    for _f in (f"__{_n}__", f"__r{_n}__", f"__i{_n}__"):
        setattr(DeviceArray, _f, _binop(_f))
for _f in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__neg__", "__pos__", "__abs__",
           "__invert__"):
    setattr(DeviceArray, _f, _binop(_f))


# ------------------------------------------------------------------ the cupy stand-in
class _Interface:
    """NumPy's view of another library's device array: here device memory is host memory."""

    def __init__(self, cai: dict):
        self.__array_interface__ = {"shape": tuple(cai["shape"]), "typestr": cai["typestr"], "version": 3,
                                    "data": (int(cai["data"][0]), bool(cai["data"][1])),
                                    "strides": cai.get("strides")}


def _asarray(a, dtype=None, order=None, *, blocking=False):
    if not isinstance(a, (DeviceArray, np.ndarray)) and hasattr(a, "__cuda_array_interface__"):
        a = DeviceArray(np.asarray(_Interface(a.__cuda_array_interface__)))   # CuPy wraps it: no copy
    if isinstance(a, DeviceArray):
        if order in ("C", "c") and not a._a.flags.c_contiguous or order in ("F", "f") and not a._a.flags.f_contiguous:
            return _array(a, dtype, order=order)
        return a if dtype is None or np.dtype(dtype) == a.dtype else DeviceArray(a._a.astype(dtype))
    return _array(a, dtype, order=order or "K")


def _array(a, dtype=None, copy=True, order="K", subok=False, ndmin=0, *, blocking=False):
    host = _unwrap(a)
    order = (order or "K").upper()
    if not isinstance(a, DeviceArray):
        capture.refuse("a host-to-device copy")
    if isinstance(a, DeviceArray):
        # a device array: CuPy's astype(order=order), which for "K" keeps the source's axis order
        h = np.array(host, dtype=dtype, order=order, copy=True, ndmin=ndmin)
    else:
        # a host array: CuPy's _array_default turns "K"/"A" into "F" only for an F- and not C-contiguous NumPy
        # array (flags.fnc); anything else (a permuted or strided array, a list) becomes C-ordered
        if order in ("K", "A"):
            order = "F" if isinstance(host, np.ndarray) and host.flags.f_contiguous and not host.flags.c_contiguous \
                else "C"
        h = np.array(host, dtype=dtype, order=order, copy=True, ndmin=ndmin)   # a host→device copy
    if h.flags.c_contiguous or not h.flags.f_contiguous and min(h.strides, default=0) < 0:
        out = alloc(h.shape, h.dtype)
    elif h.flags.f_contiguous:
        out = alloc(h.shape, h.dtype, "F")
    else:                                   # order "K" of a permuted device array: dense, in the same axis order
        out = np.lib.stride_tricks.as_strided(alloc(h.size, h.dtype), h.shape, h.strides)
    out[...] = h
    if capture.capturing() is not None:       # a device-to-device copy: recorded
        capture.record(lambda: out.__setitem__(Ellipsis, np.asarray(host, dtype=dtype)))
    return DeviceArray(out)


def _ascontiguousarray(a, dtype=None):
    """CuPy's: at least one dimension (a 0-d array becomes shape ``(1,)``, a view when no copy is needed)."""
    if not isinstance(a, DeviceArray):
        raise TypeError(f"Argument 'a' has incorrect type (expected cupy._core.core._ndarray_base, got "
                        f"{type(a).__module__}.{type(a).__name__})")
    src = a._a.reshape((1,)) if a._a.ndim == 0 else a._a
    if src.flags.c_contiguous and (dtype is None or np.dtype(dtype) == a.dtype):
        return a if src is a._a else DeviceArray(src)
    out = alloc(src.shape, dtype or a.dtype)
    out[...] = src
    if capture.capturing() is not None:
        capture.record(lambda: out.__setitem__(Ellipsis, src))
    return DeviceArray(out)


def _empty(shape, dtype=float, order="C"):
    return DeviceArray(alloc(shape, dtype, order))


def _as_strided(x, shape=None, strides=None):
    if not isinstance(x, DeviceArray):
        raise TypeError(f"as_strided: Unsupported type {type(x)}")
    return DeviceArray(np.lib.stride_tricks.as_strided(x._a, shape, strides))


def _asnumpy(a, stream=None, order="C", out=None):
    return a.get(order=order) if isinstance(a, DeviceArray) else np.asarray(a, order=order)


def _get_array_module(*args):
    return cupy if any(isinstance(a, DeviceArray) for a in args) else np


class _Runtime:
    @staticmethod
    def getDeviceCount() -> int:
        return 1

    @staticmethod
    def getDeviceProperties(i: int) -> dict:
        return {"name": b"circuitgrad host run (nvcc -x c++, one thread at a time)", "multiProcessorCount": 1,
                "maxThreadsPerBlock": 1024, "totalGlobalMem": 0}

    @staticmethod
    def deviceSynchronize() -> None:
        return None


class _Device:
    compute_capability = "90"          # the device the generated code is written for (tensor-core attention)

    def __init__(self, i: int = 0):
        self.id = i

    def synchronize(self) -> None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class _FakeCupy(types.ModuleType):
    """The ``cupy`` names the backend uses; any other NumPy function, delegated (refusing NumPy arrays)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        obj = getattr(np, name)
        if isinstance(obj, (type, np.dtype)) or not callable(obj):
            return obj

        def fn(*args, **kwargs):
            _refuse_host(args, f"cupy.{name}")
            return _call(obj, name, args, kwargs)
        fn.__name__ = name
        return fn


cupy = _FakeCupy("cupy", "circuitgrad.backends.gpu.host.run: a CuPy stand-in for the host execution mode")
cupy.__file__ = __file__
cupy.__version__ = "13.0.0+hostrun"
cupy.ndarray = DeviceArray
cupy.RawKernel = RawKernel
cupy.asarray = _asarray
cupy.array = _array
cupy.ascontiguousarray = _ascontiguousarray
cupy.empty = _empty
cupy.asnumpy = _asnumpy
cupy.get_array_module = _get_array_module
cupy.lib = types.SimpleNamespace(stride_tricks=types.SimpleNamespace(as_strided=_as_strided))
cupy.cuda = types.SimpleNamespace(runtime=_Runtime(), Device=_Device, Stream=capture.Stream,
                                  get_current_stream=capture.get_current_stream, Event=capture.Event,
                                  MemoryPool=capture.MemoryPool, using_allocator=capture.using_allocator,
                                  Graph=capture.Graph)
cupy.get_default_memory_pool = capture.MemoryPool
cupy.hostrun = True                       # how code can tell the stand-in from CuPy
cupy.syncs = []                           # every read of device memory by the host (see _sync); device() clears it


@contextlib.contextmanager
def device(order: str = "forward") -> Iterator[types.ModuleType]:
    """Within: ``import cupy`` gives the stand-in (``backend="cupy"`` runs on the host), threads in ``order``."""
    if order not in ORDERS:
        raise ValueError(f"host.device: order must be one of {ORDERS}, got {order!r}")
    ok, why = available()
    if not ok:
        raise FileNotFoundError(why)
    saved, prev = sys.modules.get("cupy"), getattr(launch_state, "order", None)
    sys.modules["cupy"] = cupy
    launch_state.order = order
    cupy.syncs.clear()
    try:
        yield cupy
    finally:
        if saved is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = saved
        if prev is None:
            del launch_state.order
        else:
            launch_state.order = prev
