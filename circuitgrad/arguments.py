"""Checking and converting the arguments of ``predict``, ``loss``, ``gradients`` and ``step``.

The policy (recorded in ``docs/ARCHITECTURE.md``, "Inputs and errors"):

* **inputs** ``x``: any real dtype (integer or float), converted to the
  model's dtype (quantized, round half up, for fixed point: an integer ``x``
  means real values, not raw ones); the shape must be the model's
  (``predict``: any number of rows); float values must be finite.
* **targets** ``y``: integer class labels of shape ``(B,)`` in ``0..K-1``
  (floats are refused, even whole numbers), or target rows of exactly the
  model's shape ``(B, K)``, converted like ``x`` and finite.
* **parameters**: a dict with exactly the expected names (the optimizer
  state may also be passed to ``predict``/``loss``/``gradients``); each an
  array of the expected shape; float models take exactly their float dtype
  (never converted, so a float64 array given to a float32 model is an
  error), fixed-point models take raw integers ``v`` meaning ``v / 2**frac``,
  within the format's range.

A wrong kind of value or dtype is a ``TypeError``, a wrong shape, name or
value a ``ValueError`` (names: :class:`ParameterNameError`, also a
``KeyError``).  Messages start with the function and the argument, then say
what was expected and what was received, e.g.
``step: input x must have shape (8, 4), got (8, 5)``.

The checks are vectorised: one ``np.isfinite`` pass over a float batch, one
``min``/``max`` over labels and over fixed-point parameters, metadata checks
otherwise.  Arrays that already live on a GPU (CuPy) are not checked for
finiteness, which would synchronise the device every step; NumPy arrays
given to a GPU model are checked on the host before the transfer.

On a GPU (CuPy) backend nothing here reads a device array back:

* ids and labels already on the device are range-checked on the device
  (their minimum and maximum, accumulated in a :class:`DeviceChecks`), and
  labels are one-hot encoded there. The result is read at the next
  synchronising call (``predict``, ``loss``, or ``check_inputs()``), which
  raises the same ``ValueError`` then; until then an out-of-range id or
  label contributes a row of zeros (no memory outside the arrays is read).
  Host (NumPy) ids and labels are checked on the host at once, as on NumPy,
  then copied to the device (labels as integers, one-hot encoded there).
* host (NumPy) parameters are checked, then copied to the device as
  C-contiguous arrays; device parameters are used as they are.
"""
from __future__ import annotations

from typing import Collection, Mapping, Sequence

import numpy as np

from .fixedpoint import quantize
from .types import Dtype, Fixed, Index, NdArrayType

__all__ = ["ParameterNameError", "real_array", "convert", "inputs", "targets", "parameters", "array_module",
           "DeviceChecks", "device_array", "distinct_arrays"]


class ParameterNameError(KeyError, ValueError):
    """The parameters dict lacks expected names or holds unknown ones."""

    def __str__(self) -> str:          # KeyError would show the repr of the message
        return str(self.args[0]) if self.args else ""


def _on_device(a) -> bool:
    return hasattr(a, "__cuda_array_interface__")


def array_module(a):
    """The array module of ``a``: ``cupy`` for a device array (imported only then), else ``numpy``."""
    if not _on_device(a):
        return np
    import cupy
    return cupy.get_array_module(device_array(a, "array"))


def device_array(a, where: str):
    """``a`` as a ``cupy.ndarray`` when it is a device array of another library (a PyTorch CUDA tensor, a Numba
    device array: anything with ``__cuda_array_interface__``), wrapped without a copy by ``cupy.asarray``; any
    other value unchanged. Without CuPy such an array is refused, naming ``where``."""
    if not _on_device(a):
        return a
    try:
        import cupy
    except ImportError:
        raise TypeError(f"{where} is a device array ({type(a).__module__}.{type(a).__name__}, with "
                        f"__cuda_array_interface__), but CuPy is not installed to read it; pass a NumPy array "
                        f"or install CuPy") from None
    if isinstance(a, cupy.ndarray):
        return a
    try:
        return cupy.asarray(a)                     # zero copy: the same device memory
    except Exception as e:
        raise TypeError(f"{where} is a device array ({type(a).__module__}.{type(a).__name__}) that "
                        f"cupy.asarray cannot wrap ({e}); pass a cupy.ndarray") from None


def _pointer(a) -> int | None:
    """The data pointer of an array, read on the host (no sync): CuPy's ``a.data.ptr``, else the array interface."""
    if not getattr(a, "size", 0):
        return None
    ptr = getattr(getattr(a, "data", None), "ptr", None)
    if isinstance(ptr, int):
        return ptr
    for attr in ("__cuda_array_interface__", "__array_interface__"):
        face = getattr(a, attr, None)
        if isinstance(face, dict):
            return int(face["data"][0])
    return None


def distinct_arrays(arrays: Sequence, names: Sequence[str], where: str) -> None:
    """Refuse one array given for two entries that are updated in place (``donate=True``): each update would
    overwrite the other's input. Data pointers are compared on the host (no sync); the error names both."""
    seen: dict[int, str] = {}
    for a, name in zip(arrays, names):
        ptr = _pointer(a)
        if ptr is None:
            continue
        if ptr in seen:
            raise ValueError(f"{where}: parameters {seen[ptr]!r} and {name!r} are the same array (data pointer "
                             f"{ptr:#x}): with donate=True each parameter is updated in place, so each must be its "
                             f"own array; pass a copy for one of them (e.g. .copy())")
        seen[ptr] = name


class DeviceChecks:
    """Range checks of device ids and labels, run on the device and read at the next synchronising call.

    :meth:`add` records the minimum and maximum of an array (device reductions, no transfer), accumulated
    per argument; :meth:`check` reads them all (one transfer each) and raises the ``ValueError`` the host check
    would have raised, for the values seen since the last check: one error naming every failing argument.
    """

    def __init__(self) -> None:
        self.pending: dict[str, tuple] = {}      # where -> (device [min, max], bound n, message)

    def add(self, a, where: str, n: int, message) -> None:
        if not a.size:
            return
        xp = array_module(a)
        mm = xp.stack([a.min(), a.max()]).astype(np.int64)
        if where in self.pending:
            prev = self.pending[where][0]
            mm = xp.stack([xp.minimum(prev[0], mm[0]), xp.maximum(prev[1], mm[1])])
        self.pending[where] = (mm, n, message)

    def check(self) -> None:
        """Read every pending check (all of them, even after a failure) and raise one ``ValueError`` naming
        every failing argument: the first failure's message, then the others (``; also: …``)."""
        pending, self.pending = self.pending, {}
        failures = []
        for where, (mm, n, message) in pending.items():
            lo, hi = (int(v) for v in mm.get())
            if lo < 0 or hi >= n:
                failures.append(message(lo, hi))
        if failures:
            raise ValueError("; also: ".join(failures))


def _shape(shape: Sequence) -> str:
    """``(8, 4)``, ``(8,)``, ``(n, 4)``."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def real_array(a, where: str):
    """``a`` as an array (host, or the device array it already is) of an integer or float dtype."""
    if _on_device(a):
        arr = a = device_array(a, where)
    else:
        try:
            arr = np.asarray(a)
        except (ValueError, TypeError) as e:
            raise TypeError(f"{where} must be a rectangular array of numbers, got a {type(a).__name__} "
                            f"that NumPy cannot convert ({e})") from None
    if arr.dtype.kind not in "iuf":
        got = f"dtype {arr.dtype}" if hasattr(a, "dtype") else f"{type(a).__name__} (dtype {arr.dtype})"
        raise TypeError(f"{where} must be a real-valued array (integer or float dtype), got {got}")
    return arr


def check_finite(a: np.ndarray, where: str, note: str = "") -> None:
    """Raise ``ValueError`` if the host float array ``a`` holds NaN or infinity."""
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        n = int(a.size - np.count_nonzero(np.isfinite(a)))
        raise ValueError(f"{where} must be finite, got {n} NaN or infinite value{'s' if n != 1 else ''}{note}")


def convert(a, dtype: Dtype, xp, where: str):
    """A real array (:func:`real_array`) in ``dtype`` on the backend ``xp``: quantized for fixed point.

    Host float values are checked finite (after the conversion, so that a
    float64 value too large for float32 is caught too).
    """
    nd = dtype.numpy_dtype()
    if _on_device(a):
        return a if a.dtype == nd else a.astype(nd)
    if isinstance(dtype, Fixed):
        check_finite(a, where)
        return quantize(a, dtype, where)
    if a.dtype.kind != "f":
        b = a.astype(nd)
    elif a.dtype.itemsize > nd.itemsize:          # float64 → float32: values may become inf
        with np.errstate(over="ignore"):
            b = a.astype(nd)
        if not np.isfinite(b).all():
            check_finite(a, where)                # NaN or inf given
            check_finite(b, where, f" (values too large for {dtype})")
    else:
        b = a.astype(nd, copy=False)
        check_finite(b, where)
    return b if xp is np else xp.asarray(b)


def inputs(x, T: NdArrayType, dtype: Dtype, xp, fn: str, any_rows: bool = False,
           checks: DeviceChecks | None = None):
    """The input batch ``x`` of function ``fn`` checked against the model's input type ``T`` and converted.

    ``checks``: where device ids are range-checked lazily (without it, they are read back and checked now).
    """
    where = f"{fn}: input x"
    a = real_array(x, where)
    if isinstance(T.dtype, Index):
        return ids(a, T, xp, where, any_rows, checks)
    rest = T.shape[1:]
    if a.shape[1:] != rest or a.ndim != T.ndim or (not any_rows and a.shape[0] != T.shape[0]):
        if any_rows:
            msg = f"{where} must have shape {_shape(('n',) + rest)} for any number of rows n"
        else:
            msg = f"{where} must have shape {_shape(T.shape)}"
        msg += f", got {_shape(a.shape)}"
        if a.shape == rest:
            msg += "; for a single row pass x[None]"
        elif a.shape[1:] == rest and a.ndim == T.ndim:
            msg += f" (this model was built for batch {T.shape[0]}; predict accepts any number of rows)"
        raise ValueError(msg)
    return convert(a, dtype, xp, where)


def ids(a, T: NdArrayType, xp, where: str, any_rows: bool = False, checks: DeviceChecks | None = None):
    """Integer ids of an ``index(n)`` input: integers of ``T``'s shape (any rows with ``any_rows``) in ``[0, n)``."""
    n = T.dtype.n
    if a.ndim != T.ndim or a.shape[1:] != T.shape[1:] or (not any_rows and a.shape[0] != T.shape[0]):
        rows = ("n",) if any_rows else T.shape[:1]
        raise ValueError(f"{where} must have shape {_shape(rows + T.shape[1:])} (ids of a vocabulary of {n}), "
                         f"got {_shape(a.shape)}")
    if a.dtype.kind not in "iu":
        raise TypeError(f"{where} must hold integer ids of a vocabulary of {n}, got {a.dtype}")
    def message(lo: int, hi: int) -> str:
        return f"{where} holds ids in [{lo}, {hi}], outside the vocabulary of {n} (ids 0..{n - 1})"
    if _on_device(a) and checks is not None:          # checked on the device, read at the next sync
        checks.add(a, where, n, message)
        return a if a.dtype == np.int64 else a.astype(np.int64)
    host = a.get() if _on_device(a) else a
    if host.size and (int(host.min()) < 0 or int(host.max()) >= n):
        raise ValueError(message(int(host.min()), int(host.max())))
    out = np.asarray(host, dtype=np.int64)
    return out if xp is np else xp.asarray(out)


def targets(y, T: NdArrayType, dtype: Dtype, xp, fn: str = "", checks: DeviceChecks | None = None):
    """The targets ``y`` of function ``fn``: integer class labels (one-hot encoded here) or rows of type ``T``.

    ``checks``: where device labels are range-checked lazily (without it, they are read back and checked now).
    On a device backend the one-hot encoding runs on the device.
    """
    where = f"{fn}: targets y" if fn else "targets y"
    a = real_array(y, where)
    if a.shape == T.shape:
        return convert(a, dtype, xp, where)
    if T.ndim < 2:
        raise ValueError(f"{where} must have shape {_shape(T.shape)}, got {_shape(a.shape)}")
    if a.shape != T.shape[:-1] or a.dtype.kind == "f":
        expected = (f"{where} must be integer class labels of shape {_shape(T.shape[:-1])} or target rows of "
                    f"shape {_shape(T.shape)}")
        if a.dtype.kind == "f" and a.shape == T.shape[:-1]:
            raise TypeError(f"{expected}, got {a.dtype} labels; pass integers, e.g. y.astype(int)")
        raise ValueError(f"{expected}, got shape {_shape(a.shape)}")
    k = T.shape[-1]

    def message(lo: int, hi: int) -> str:
        return f"{where} must be class labels in 0..{k - 1}, got values in [{lo}, {hi}]"
    if _on_device(a) and checks is not None and not isinstance(dtype, Fixed):
        checks.add(a, where, k, message)                  # checked on the device, read at the next sync
        dm = array_module(a)
        return (a[..., None] == dm.arange(k)).astype(dtype.numpy_dtype())
    host = a.get() if _on_device(a) else a
    unsigned = host.view(f"u{host.itemsize}") if host.dtype.kind == "i" else host   # negatives become huge
    if host.size and unsigned.max() >= k:
        raise ValueError(message(int(host.min()), int(host.max())))
    if xp is not np and not isinstance(dtype, Fixed):     # the labels go up, the one-hot rows are made there
        labels = xp.asarray(np.asarray(host, dtype=np.int64))
        return (labels[..., None] == xp.arange(k)).astype(dtype.numpy_dtype())
    if isinstance(dtype, Fixed):
        return np.eye(k, dtype=np.int64)[host] * dtype.one
    one_hot = np.eye(k, dtype=dtype.numpy_dtype())[host]
    return one_hot if xp is np else xp.asarray(one_hot)


def _names_error(fn: str, missing: list[str], unknown: list[str], expected: Sequence[str]) -> ParameterNameError:
    parts = ([f"missing parameters {missing}"] if missing else []) + \
            ([f"unknown parameters {unknown}"] if unknown else [])
    return ParameterNameError(f"{fn}: {', '.join(parts)}; expected {list(expected)}")


def parameters(params: Mapping, names: Sequence[str], allowed: Collection[str],
               shapes: Mapping[str, tuple[int, ...]], dtype: Dtype, fn: str, xp=np) -> list:
    """``[params[n] for n in names]``, checked: names, shapes, dtypes (and range, in fixed point).

    ``allowed`` names may be present without being used (the optimizer
    state, for ``predict``); any other name is an error, since a misspelt
    name would otherwise be silently ignored. On a device backend (``xp``
    not NumPy), host arrays (0-d ones included) are checked, then copied to
    the device as C-contiguous arrays: a kernel never receives a NumPy array.
    """
    if not isinstance(params, (dict, Mapping)):
        raise TypeError(f"{fn}: params must be a dict of arrays by name (as returned by init_params), "
                        f"got {type(params).__name__}")
    try:
        out = [device_array(params[n], f"{fn}: parameter {n}") for n in names]
    except KeyError:
        out = None
    if out is None or len(params) > len(names):
        missing = [n for n in names if n not in params]
        unknown = [k for k in params if k not in allowed]
        if missing or unknown:
            raise _names_error(fn, missing, unknown, names)
    if isinstance(dtype, Fixed):
        for n, v in zip(names, out):
            _check_raw(v, shapes[n], dtype, f"{fn}: parameter {n}")
    else:
        want = dtype.numpy_dtype()
        for n, v in zip(names, out):
            if getattr(v, "dtype", None) != want or v.shape != shapes[n]:
                _check_float(v, shapes[n], dtype, f"{fn}: parameter {n}")
    if xp is not np:
        out = [v if _on_device(v) else xp.asarray(np.asarray(v, order="C")) for v in out]
    return out


def _check_shape(v, shape: tuple[int, ...], where: str) -> None:
    if tuple(v.shape) != shape:
        raise ValueError(f"{where} must have shape {_shape(shape)}, got {_shape(v.shape)}")


def _check_float(v, shape: tuple[int, ...], dtype: Dtype, where: str) -> None:
    """Why ``v`` is not an array of ``dtype`` and ``shape`` (the slow path of :func:`parameters`)."""
    if not (hasattr(v, "dtype") and hasattr(v, "shape")):
        raise TypeError(f"{where} must be a {dtype} array, got {type(v).__name__}")
    if v.dtype != dtype.numpy_dtype():
        raise TypeError(f"{where} must be {dtype}, got {v.dtype}; convert it with .astype(np.{dtype.numpy_dtype().name})")
    _check_shape(v, shape, where)


def _check_raw(v, shape: tuple[int, ...], dtype: Fixed, where: str) -> None:
    """``v`` must be an integer array of raw ``dtype`` values of ``shape``."""
    if not (hasattr(v, "dtype") and hasattr(v, "shape")):
        raise TypeError(f"{where} must be an integer array of raw {dtype} values, got {type(v).__name__}")
    if v.dtype.kind not in "iu":
        raise TypeError(f"{where} must hold raw {dtype} integers (v means v / 2**{dtype.frac}), got {v.dtype}; "
                        f"use init_params(), or quantize(values, {dtype}) from circuitgrad for real values")
    _check_shape(v, shape, where)
    if v.size:
        lo, hi = int(v.min()), int(v.max())
        if lo < dtype.lo or hi > dtype.hi:
            raise ValueError(f"{where} must hold raw values in {dtype}'s range [{dtype.lo}, {dtype.hi}], "
                             f"got values in [{lo}, {hi}]")
