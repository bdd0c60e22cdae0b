"""Objects of the category: wire types ``NdArrayType(shape, dtype)``.

Dtypes are the semirings the targets compute in:

* ``float32`` / ``float64``: IEEE floats (NumPy, CuPy);
* ``fixed(width, frac)``: signed two's-complement Q format, a value ``v``
  stored in ``width`` bits means ``v / 2**frac`` (FPGA, ZK); see
  :mod:`circuitgrad.fixedpoint` for the arithmetic.

Wire labels in the open hypergraphs are small integers: every type is
*interned* once in a process-wide table, so that comparing, permuting and
coequalizing labels stays a vectorised integer operation (object arrays
would call ``__eq__`` once per wire).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Hashable, Sequence, TypeVar

import numpy as np

__all__ = [
    "Dtype", "Float", "Fixed", "Index", "float32", "float64", "fixed", "index",
    "NdArrayType", "Interner", "intern_type", "type_of", "format_types",
]


class Dtype:
    """Base class of the scalar types a wire can carry."""

    is_fixed: bool = False

    def numpy_dtype(self) -> np.dtype:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Float(Dtype):
    """An IEEE float of ``bits`` bits (32 or 64)."""
    bits: int = 32

    def __post_init__(self) -> None:
        if self.bits not in (32, 64):
            raise ValueError(f"Float bits must be 32 or 64, got {self.bits}")

    def numpy_dtype(self) -> np.dtype:
        return np.dtype(np.float32 if self.bits == 32 else np.float64)

    def __str__(self) -> str:
        return f"float{self.bits}"


@dataclass(frozen=True)
class Fixed(Dtype):
    """Signed fixed point: ``width`` bits, of which ``frac`` are fractional.

    Raw values are held in ``int64`` arrays; ``width <= 32`` so that the
    exact product of two values fits in 63 bits.
    """
    width: int
    frac: int
    is_fixed = True

    def __post_init__(self) -> None:
        if not 2 <= self.width <= 32:
            raise ValueError(f"fixed width must be in 2..32, got {self.width}")
        if not 1 <= self.frac < self.width:
            raise ValueError(f"fixed frac must be in 1..width-1 = 1..{self.width - 1}, got {self.frac}")

    @property
    def lo(self) -> int:
        """Smallest representable raw value."""
        return -(1 << (self.width - 1))

    @property
    def hi(self) -> int:
        """Largest representable raw value."""
        return (1 << (self.width - 1)) - 1

    @property
    def one(self) -> int:
        """The raw value of 1.0."""
        return 1 << self.frac

    def numpy_dtype(self) -> np.dtype:
        return np.dtype(np.int64)

    def __str__(self) -> str:
        return f"fixed({self.width},{self.frac})"


@dataclass(frozen=True)
class Index(Dtype):
    """Integers in ``[0, n)``: token ids and class labels (``int64`` arrays in every target).

    The bound is part of the type, so every call checks its inputs against it. Index wires keep their
    dtype when a model is retyped to a float or fixed-point dtype.
    """
    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"index(n): n must be an integer ≥ 1, got {self.n!r}")

    def numpy_dtype(self) -> np.dtype:
        return np.dtype(np.int64)

    def __str__(self) -> str:
        return f"index({self.n})"


float32 = Float(32)
float64 = Float(64)


def index(n: int) -> Index:
    """The dtype of integers in ``[0, n)`` (token ids of a vocabulary of ``n``)."""
    return Index(n)


def fixed(width: int, frac: int) -> Fixed:
    """The fixed-point dtype with ``width`` bits, ``frac`` of them fractional."""
    return Fixed(width, frac)


@dataclass(frozen=True)
class NdArrayType:
    """A wire type: an array of ``shape`` with scalars of ``dtype``."""
    shape: tuple[int, ...]
    dtype: Dtype = float32

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)
        if not isinstance(self.dtype, Dtype):
            raise TypeError(f"dtype must be a circuitgrad dtype (float32, float64, fixed(w, f), index(n)), "
                            f"got {self.dtype!r}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def with_dtype(self, dtype: Dtype) -> "NdArrayType":
        return NdArrayType(self.shape, dtype)

    def with_shape(self, shape: Sequence[int]) -> "NdArrayType":
        return NdArrayType(tuple(shape), self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


# ---------------------------------------------------------------- interning
K = TypeVar("K", bound=Hashable)


class Interner(Generic[K]):
    """A process-wide bijection between hashable values and small integer labels."""

    def __init__(self) -> None:
        self._values: list[K] = []
        self._ids: dict[K, int] = {}

    def intern(self, v: K) -> int:
        """The label of ``v`` (allocated on first use)."""
        i = self._ids.get(v)
        if i is None:
            i = self._ids[v] = len(self._values)
            self._values.append(v)
        return i

    def lookup(self, label: int) -> K:
        """The value with label ``label``."""
        return self._values[int(label)]


_TYPES: Interner[NdArrayType] = Interner()
intern_type = _TYPES.intern     #: the integer label of a wire type (allocated on first use)
type_of = _TYPES.lookup         #: the wire type with a given integer label


def format_types(types: Sequence[NdArrayType]) -> str:
    """``(float32[8, 4], float32[4, 16])``: a readable list of wire types."""
    return "(" + ", ".join(str(t) for t in types) + ")"
