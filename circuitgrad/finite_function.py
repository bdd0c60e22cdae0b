"""Finite functions and indexed coproducts: the arrays every diagram is made of.

A :class:`FiniteFunction` ``f : A → B`` is an integer array of length ``A``
whose entries lie in ``range(B)`` (``B = None``: an unbounded target, used
for segment sizes).  ``>>`` composes (``(f >> g)[i] = g[f[i]]``), ``@``
tensors (block-diagonal), ``+`` is the copairing::

    f : 2 → 3   [0 2]
    g : 3 → 2   [1 0 1]
    f >> ...    needs f.target == g.source
    f @ g : 5 → 5   [0 2 | 4 3 4]
    f + h       needs f.target == h.target: [0 2 | h...]

An :class:`IndexedCoproduct` is a segmented array: ``sources[i]`` values
belong to the ``i``-th segment (the inputs or outputs of operation ``i``).

These are the data-parallel operations of Wilson & Zanasi, *Data-Parallel
Algorithms for String Diagrams*, as the ``open-hypergraphs`` package (0.1.3)
implements them, restricted to what circuitgrad uses and owned here so that
the core needs only NumPy and SciPy at their current versions.  The tests
check these against ``open-hypergraphs`` wherever it is installed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import connected_components

__all__ = ["FiniteFunction", "IndexedCoproduct", "DTYPE", "segmented_arange"]

#: the dtype of every table (as ``open_hypergraphs.numpy``)
DTYPE = np.uint32


def segmented_arange(sizes: np.ndarray) -> np.ndarray:
    """``concatenate([arange(n) for n in sizes])`` without a loop: ``[2 3 0 1] ↦ [0 1 0 1 2 0]``."""
    sizes = np.asarray(sizes)
    ptr = np.zeros(len(sizes) + 1, dtype=sizes.dtype)
    np.cumsum(sizes, out=ptr[1:])
    return np.arange(int(ptr[-1]), dtype=sizes.dtype) - np.repeat(ptr[:-1], sizes)


def _segmented_sum(sizes: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Sums of consecutive segments of ``x`` of the given sizes."""
    ptr = np.zeros(len(sizes) + 1, dtype=sizes.dtype)
    np.cumsum(sizes, out=ptr[1:])
    sums = np.zeros(len(x) + 1, dtype=x.dtype)
    np.cumsum(x, out=sums[1:])
    return sums[ptr[1:]] - sums[ptr[:-1]]


class FiniteFunction:
    """A function ``source → target`` between finite sets, as its table."""

    __slots__ = ("table", "target")
    Dtype = DTYPE

    def __init__(self, target: int | None, table: np.ndarray):
        if not isinstance(table, np.ndarray):
            raise ValueError(f"table must be a numpy array, not {type(table).__name__}")
        if table.ndim != 1:
            raise ValueError(f"table must be a 1D array, but had shape {table.shape}")
        if target is not None:
            if table.dtype != DTYPE:
                raise ValueError(f"table.dtype must be {np.dtype(DTYPE)} for a finite target, not {table.dtype}")
            target = int(target)
            if len(table) and int(table.max()) >= target:
                raise ValueError(f"table max value must be less than target {target} but was {int(table.max())}")
        self.table = table
        self.target = target

    # ----------------------------------------------------------------- basics
    @property
    def source(self) -> int:
        return len(self.table)

    @property
    def dtype(self):
        return self.table.dtype

    @property
    def type(self) -> tuple[int, int | None]:
        return self.source, self.target

    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self):
        return iter(self.table)

    def __str__(self) -> str:
        return f"{self.table} : {self.source} → {self.target}"

    def __repr__(self) -> str:
        return f"FiniteFunction({self.target!r}, {self.table!r})"

    def __eq__(f, g) -> bool:
        return (isinstance(g, FiniteFunction) and f.source == g.source and f.target == g.target
                and bool(np.all(f.table == g.table)))

    __hash__ = None  # mutable table: not hashable (as a NumPy array)

    def _finite(self) -> int:
        if self.target is None:
            raise ValueError(f"a finite function with an unbounded target has no coproduct injections: {self}")
        return self.target

    # --------------------------------------------------------------- category
    @classmethod
    def identity(cls, n: int) -> "FiniteFunction":
        return cls(n, np.arange(n, dtype=DTYPE))

    def compose(f, g: "FiniteFunction") -> "FiniteFunction":
        if f.target != g.source:
            raise ValueError(f"cannot compose finite functions {f.type} >> {g.type}: {f.target} != {g.source}")
        return type(f)(g.target, g.table[f.table])

    __rshift__ = compose

    # ------------------------------------------------------------- coproducts
    @classmethod
    def initial(cls, b: int | None, dtype=None) -> "FiniteFunction":
        return cls(b, np.zeros(0, dtype=dtype or DTYPE))

    def to_initial(self) -> "FiniteFunction":
        return type(self).initial(self.target, self.table.dtype)

    @classmethod
    def inj0(cls, a: int, b: int) -> "FiniteFunction":
        return cls(a + b, np.arange(a, dtype=DTYPE))

    @classmethod
    def inj1(cls, a: int, b: int) -> "FiniteFunction":
        return cls(a + b, np.arange(a, a + b, dtype=DTYPE))

    def inject0(f, b: int) -> "FiniteFunction":
        """``f >> ι₀``, computed directly."""
        return type(f)(f._finite() + b, f.table)

    def inject1(f, a: int) -> "FiniteFunction":
        """``f >> ι₁``, computed directly."""
        return type(f)(a + f._finite(), (a + f.table).astype(f.table.dtype))

    def coproduct(f, g: "FiniteFunction") -> "FiniteFunction":
        if f.target != g.target:
            raise ValueError(f"coproduct of finite functions with targets {f.target} and {g.target}")
        return type(f)(f.target, np.concatenate([f.table, g.table]).astype(f.dtype, copy=False))

    __add__ = coproduct

    @classmethod
    def coproduct_list(cls, fs: Sequence["FiniteFunction"], target: int | None = None,
                       dtype=None) -> "FiniteFunction":
        if not fs:
            return cls.initial(target, dtype)
        if any(f.target != fs[0].target for f in fs):
            raise ValueError("coproduct_list: the finite functions have different targets")
        return cls(fs[0].target, np.concatenate([f.table for f in fs]).astype(fs[0].dtype, copy=False))

    # ------------------------------------------------------- monoidal product
    def tensor(f, g: "FiniteFunction") -> "FiniteFunction":
        a, b = f._finite(), g._finite()
        return type(f)(a + b, np.concatenate([f.table, g.table + DTYPE(a)]).astype(DTYPE, copy=False))

    __matmul__ = tensor

    @classmethod
    def tensor_list(cls, fs: Sequence["FiniteFunction"]) -> "FiniteFunction":
        if not fs:
            return cls.initial(0)
        offsets = np.zeros(len(fs) + 1, dtype=np.int64)
        np.cumsum([f._finite() for f in fs], out=offsets[1:])
        table = np.concatenate([f.table.astype(np.int64) + o for f, o in zip(fs, offsets[:-1])])
        return cls(int(offsets[-1]), table.astype(DTYPE))

    @classmethod
    def twist(cls, a: int, b: int) -> "FiniteFunction":
        """The symmetry ``a + b → b + a`` (position ``i`` is sent to ``table[i]``)."""
        return cls(a + b, np.concatenate([b + np.arange(a), np.arange(b)]).astype(DTYPE))

    @classmethod
    def transpose(cls, a: int, b: int) -> "FiniteFunction":
        """Where entry ``i`` of a row-major ``b × a`` matrix lands in its transpose."""
        i = np.arange(a * b, dtype=np.int64)
        return cls(a * b, ((i % a) * b + i // a).astype(DTYPE))

    @classmethod
    def terminal(cls, a: int) -> "FiniteFunction":
        return cls(1, np.zeros(a, dtype=DTYPE))

    @classmethod
    def constant(cls, x: int, a: int, b: int | None, dtype=None) -> "FiniteFunction":
        if b is not None and x >= b:
            raise ValueError(f"{x} is not an element of the set {{0..{b}}}")
        return cls(b, np.full(a, x, dtype=dtype or DTYPE))

    @classmethod
    def singleton(cls, x: int, b: int | None, dtype=None) -> "FiniteFunction":
        return cls.constant(x, 1, b, dtype)

    def argsort(f) -> "FiniteFunction":
        """The stable sorting permutation ``p`` with ``p >> f`` monotone."""
        return type(f)(f.source, np.argsort(f.table, kind="stable").astype(DTYPE))

    # ------------------------------------------------------------ coequalizers
    def coequalizer(f, g: "FiniteFunction") -> "FiniteFunction":
        """The quotient ``q : B → Q`` with ``f >> q == g >> q``, classes numbered as SciPy's connected components."""
        if f.type != g.type:
            raise ValueError(f"cannot coequalize finite functions of different types: {f.type} != {g.type}")
        n = f._finite()
        m = csr_array((np.ones(len(f.table), dtype=DTYPE), (f.table, g.table)), shape=(n, n))
        Q, q = connected_components(m)
        return type(f)(int(Q), q.astype(DTYPE))

    def coequalizer_universal(q, f: "FiniteFunction") -> "FiniteFunction":
        """The map ``u : Q → B'`` with ``q >> u == f`` (``f`` must be constant on ``q``'s classes)."""
        table = np.zeros(q._finite(), dtype=f.table.dtype)
        table[q.table] = f.table
        u = type(f)(f.target, table)
        if not (q >> u) == f:
            raise ValueError(f"no universal map: {f} is not constant on the classes of {q}")
        return u

    # ------------------------------------------------------------- injections
    def injections(s, a: "FiniteFunction") -> "FiniteFunction":
        """``Σ_{x ∈ A} ι_{a(x)} : Σ_{x ∈ A} s(a(x)) → Σ_{n ∈ N} s(n)``: a blockwise ``a`` with block sizes ``s``."""
        if s.table.dtype != a.table.dtype:
            raise ValueError(f"s and a must have the same dtype, but got {s.table.dtype} and {a.table.dtype}")
        dtype = a.table.dtype
        p = np.zeros(s.source + 1, dtype=dtype)
        np.cumsum(s.table, out=p[1:])
        k = (a >> s).table
        return type(s)(int(p[-1]), (segmented_arange(k) + np.repeat(p[a.table], k)).astype(dtype, copy=False))


@dataclass
class IndexedCoproduct:
    """``Σ_{i ∈ N} f_i``: segment sizes ``sources : N → ℕ`` and the concatenated ``values``."""

    sources: FiniteFunction
    values: FiniteFunction

    def __post_init__(self):
        if self.sources.target is not None:
            raise ValueError("the sources of an indexed coproduct have an unbounded target (None)")
        total = int(np.sum(self.sources.table, dtype=np.int64))
        if len(self.values) != total:
            raise ValueError(f"an indexed coproduct's segments sum to {total} but it has {len(self.values)} values")

    @property
    def target(self) -> int | None:
        return self.values.target

    def __len__(self) -> int:
        return len(self.sources)

    def __iter__(self) -> Iterator[FiniteFunction]:
        ptr = np.zeros(len(self.sources) + 1, dtype=np.int64)
        np.cumsum(self.sources.table, out=ptr[1:])
        for i in range(len(self.sources)):
            yield FiniteFunction(self.target, self.values.table[ptr[i]:ptr[i + 1]])

    @classmethod
    def initial(cls, target: int | None, dtype=None) -> "IndexedCoproduct":
        return cls(FiniteFunction.initial(None, dtype), FiniteFunction.initial(target, dtype))

    @classmethod
    def singleton(cls, values: FiniteFunction, dtype=None) -> "IndexedCoproduct":
        return cls(FiniteFunction.singleton(len(values), None, dtype), values)

    @classmethod
    def elements(cls, values: FiniteFunction, dtype=None) -> "IndexedCoproduct":
        return cls(FiniteFunction.constant(1, len(values), None, dtype), values)

    def coproduct(x, y: "IndexedCoproduct") -> "IndexedCoproduct":
        return type(x)(x.sources + y.sources, x.values + y.values)

    __add__ = coproduct

    def tensor(x, y: "IndexedCoproduct") -> "IndexedCoproduct":
        return type(x)(x.sources + y.sources, x.values @ y.values)

    __matmul__ = tensor

    @classmethod
    def tensor_list(cls, xs: Sequence["IndexedCoproduct"]) -> "IndexedCoproduct":
        if not xs:
            raise ValueError("tensor_list needs a nonempty list")
        return cls(FiniteFunction.coproduct_list([x.sources for x in xs]),
                   FiniteFunction.tensor_list([x.values for x in xs]))

    def indexed_values(self, x: FiniteFunction) -> FiniteFunction:
        """The values of :meth:`map_indexes` alone."""
        return self.sources.injections(x) >> self.values

    def map_values(self, x: FiniteFunction) -> "IndexedCoproduct":
        """``Σ f_i >> x``."""
        return type(self)(self.sources, self.values >> x)

    def map_indexes(self, x: FiniteFunction) -> "IndexedCoproduct":
        """``Σ_{i ∈ W} f_{x(i)}``: the segments picked (and reordered) by ``x``."""
        return type(self)(x >> self.sources, self.indexed_values(x))

    def flatmap(x, y: "IndexedCoproduct") -> "IndexedCoproduct":
        """Compose ``x : A → B*`` with ``y : B → C*`` to ``A → C*``."""
        if len(x.values) != len(y):
            raise ValueError(f"flatmap: {len(x.values)} values against {len(y)} segments")
        return type(x)(FiniteFunction(None, _segmented_sum(x.sources.table, y.sources.table)), y.values)
