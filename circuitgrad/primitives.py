"""The closed set of primitive operations (the generators ``Σ₁``).

A primitive is a small frozen dataclass that knows its type ``source → target``
and nothing else: forward semantics live in the interpreters' rule tables
(:mod:`circuitgrad.interpret`, :mod:`circuitgrad.fixedpoint`), reverse derivatives
in :mod:`circuitgrad.optic`, code generation in each backend.  Every table is
keyed by primitive class and a conformance test checks that none is missing
a rule.  Constructors check shapes and dtypes and raise :class:`TypeMismatch`
naming the operation and the offending types.

Everything else (dense, relu, softmax, losses, optimizers) is a *definition*:
a diagram of these primitives (:mod:`circuitgrad.nn`).
"""
from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .types import Index, Interner, NdArrayType, format_types

__all__ = [
    "TypeMismatch", "Primitive", "Unary", "Binary", "Arrow", "Blocks", "PRIMITIVES",
    "Copy", "Add", "Neg", "Mul", "Scale", "Constant", "MatMul", "Transpose",
    "Reshape", "Broadcast", "SumTo", "Heaviside", "Sigmoid", "Tanh",
    "Softmax", "LogSumExp", "Parameter", "Exp", "Log", "Sqrt", "Rsqrt", "Div", "ArgMaxMask", "Permute",
    "BatchMatMul", "CausalMask", "OneHot", "Slice", "Pad", "Unfold", "Fold", "Kind", "KINDS",
    "intern_op", "op_of", "path_of",
]


class TypeMismatch(TypeError):
    """A shape or dtype mismatch found while building a model."""


class Kind(enum.StrEnum):
    """What a primitive does to its operands' elements and memory (:attr:`Primitive.kind`): the fact every pass asks
    first (code generation allocates, the GPU plan launches, the cost model counts bytes and drawings style by it).

    A ``str``: ``op.kind == "elementwise"`` holds and dicts keyed by kinds are read by name; it prints, formats and
    reprs as its value (``'elementwise'``), so generated code and messages read as when kinds were strings.
    """
    SOURCE = "source", "no operand: a value of its own (a parameter, a constant)"
    COPY = "copy", "one wire duplicated or discarded"
    ELEMENTWISE = "elementwise", "each result element from the operands' elements at the same index"
    ROWWISE = "rowwise", "each row of the last axis from the same row of the operand (softmax, log-sum-exp, argmax)"
    VIEW = "view", "the same elements in another layout: no arithmetic, and no copy needed"
    GATHER = "gather", "elements moved by an index map, some dropped, zero-filled or summed where they overlap"
    CONTRACTION = "contraction", "products summed over a shared axis (matrix products)"
    REDUCE = "reduce", "sums over axes"

    description: str

    def __new__(cls, value: str, description: str):
        member = str.__new__(cls, value)
        member._value_ = value
        member.description = description
        return member

    def __repr__(self) -> str:
        return repr(self.value)


#: every kind and what it means (:attr:`Kind.description`), in :class:`Kind`'s order
KINDS: dict[Kind, str] = {k: k.description for k in Kind}


class Primitive:
    """Base class: subclasses define ``source`` and ``target`` (tuples of types), and the facts passes ask
    about them as class attributes (``tests/test_conformance.py`` checks that every primitive sets ``kind``):

    * ``kind``: a :class:`Kind` (:data:`KINDS` says what each means);
    * ``linear``: a linear map of its operands (each of them, for a binary one);
    * ``commutative``: its two operands can be swapped (common-subexpression elimination sorts them);
    * ``positional``: elementwise, but each element's result depends on its index too;
    * ``pure``: two applications to the same operands are equal (a parameter is not: each is its own).
    """

    source: tuple[NdArrayType, ...]
    target: tuple[NdArrayType, ...]
    kind: ClassVar[Kind]
    linear: ClassVar[bool] = False
    commutative: ClassVar[bool] = False
    positional: ClassVar[bool] = False
    pure: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return type(self).__name__

    def __str__(self) -> str:
        return f"{self.name} : {format_types(self.source)} → {format_types(self.target)}"


@dataclass(frozen=True)
class Unary(Primitive):
    """Base of the elementwise ``T → T`` primitives."""
    T: NdArrayType

    @property
    def source(self): return (self.T,)

    @property
    def target(self): return (self.T,)


@dataclass(frozen=True)
class Binary(Primitive):
    """Base of the elementwise ``T ⊗ T → T`` primitives."""
    T: NdArrayType

    @property
    def source(self): return (self.T, self.T)

    @property
    def target(self): return (self.T,)


@dataclass(frozen=True)
class Arrow(Primitive):
    """Base of the one-operand primitives that change the type: ``S → T``."""
    S: NdArrayType
    T: NdArrayType

    @property
    def source(self): return (self.S,)

    @property
    def target(self): return (self.T,)


# --------------------------------------------------------------- structure
@dataclass(frozen=True)
class Copy(Primitive):
    """``T → T^n``: duplicate a wire ``n`` times (``n = 0`` discards it).

    Inserted by :func:`circuitgrad.diagram.monogamous` wherever a wire fans out.
    """
    kind = Kind.COPY
    linear = True
    T: NdArrayType
    n: int = 2

    @property
    def source(self): return (self.T,)

    @property
    def target(self): return (self.T,) * self.n


@dataclass(frozen=True)
class Parameter(Primitive):
    """``I → T``: a trainable parameter, with a name and an initialiser.

    ``init`` is ``"glorot"`` (uniform, Glorot & Bengio; fans ``C·kh·kw`` and ``O·kh·kw`` for ``[O, C, kh, kw]``
    convolution weights), ``"zeros"``, ``"ones"`` (normalisation gains) or
    ``"normal"`` (``N(0, 0.02²)``, embeddings as in GPT-2).
    ``uid`` keeps two layers of the same shape distinct.
    """
    kind = Kind.SOURCE
    pure = False
    T: NdArrayType
    label: str = "param"
    init: str = "glorot"
    uid: int = field(default_factory=lambda: next(_UIDS))

    def __post_init__(self):
        if self.init not in INITS:
            raise ValueError(f"Parameter {self.label}: unknown init {self.init!r} (use one of {list(INITS)})")

    @property
    def source(self): return ()

    @property
    def target(self): return (self.T,)


_UIDS = itertools.count()
#: the initialisers a :class:`Parameter` may name
INITS = ("glorot", "zeros", "ones", "normal")


@dataclass(frozen=True)
class Constant(Primitive):
    """``I → T``: every element equal to ``value``.

    ``epsilon=True`` marks a small positive stabiliser (``sqrt(v + ε)``): where a dtype cannot hold it
    (fixed point, ``ε`` below one step) it is one step, ``2^-frac``, instead of an error.
    """
    kind = Kind.SOURCE
    T: NdArrayType
    value: float
    epsilon: bool = False

    @property
    def source(self): return ()

    @property
    def target(self): return (self.T,)


@dataclass(frozen=True)
class OneHot(Arrow):
    """``S → T``: integer ids ``S : index(n)[...]`` to rows ``T : [..., n]`` with ``1`` at each id.

    The bridge from integer wires (token ids) to arithmetic: an embedding is ``OneHot(ids) @ E``. The
    ids carry no derivative.
    """
    kind = Kind.ELEMENTWISE
    positional = True

    def __post_init__(self):
        if not isinstance(self.S.dtype, Index):
            raise TypeMismatch(f"OneHot: ids must be an index(n) wire, got {self.S}")
        if self.T.shape != self.S.shape + (self.S.dtype.n,) or isinstance(self.T.dtype, Index):
            raise TypeMismatch(f"OneHot: {self.S} gives rows of shape {list(self.S.shape + (self.S.dtype.n,))} "
                               f"in a float or fixed dtype, not {self.T}")


# -------------------------------------------------------------- arithmetic
class Add(Binary):
    """``T ⊗ T → T``: elementwise sum."""
    kind = Kind.ELEMENTWISE
    linear = True
    commutative = True


class Neg(Unary):
    """``T → T``: elementwise negation."""
    kind = Kind.ELEMENTWISE
    linear = True


class Mul(Binary):
    """``T ⊗ T → T``: elementwise (Hadamard) product."""
    kind = Kind.ELEMENTWISE
    commutative = True


class Div(Binary):
    """``T ⊗ T → T``: elementwise quotient ``a / b`` (in fixed point: rounded, with a checkable remainder)."""
    kind = Kind.ELEMENTWISE


@dataclass(frozen=True)
class Scale(Unary):
    """``T → T``: multiplication by the constant ``c`` (a linear map)."""
    kind = Kind.ELEMENTWISE
    linear = True
    c: float = 1.0


@dataclass(frozen=True)
class MatMul(Primitive):
    """``[m, n] ⊗ [n, p] → [m, p]``: matrix product."""
    kind = Kind.CONTRACTION
    A: NdArrayType
    B: NdArrayType

    def __post_init__(self):
        a, b = self.A, self.B
        if a.ndim != 2 or b.ndim != 2:
            raise TypeMismatch(f"MatMul: operands must be matrices, got {format_types((a, b))}")
        if a.dtype != b.dtype:
            raise TypeMismatch(f"MatMul: dtypes differ, got {format_types((a, b))}")
        if a.shape[1] != b.shape[0]:
            raise TypeMismatch(
                f"MatMul: inner dimensions differ ({a.shape[1]} != {b.shape[0]}) in {format_types((a, b))}")

    @property
    def source(self): return (self.A, self.B)

    @property
    def target(self): return (NdArrayType((self.A.shape[0], self.B.shape[1]), self.A.dtype),)


@dataclass(frozen=True)
class BatchMatMul(Primitive):
    """``[..., m, n] ⊗ [..., n, p] → [..., m, p]``: one matrix product per leading index.

    The leading axes must be equal (``ops.matmul`` broadcasts them first, as NumPy's ``matmul`` does).
    """
    kind = Kind.CONTRACTION
    A: NdArrayType
    B: NdArrayType

    def __post_init__(self):
        a, b = self.A, self.B
        if a.ndim < 3 or a.ndim != b.ndim:
            raise TypeMismatch(f"BatchMatMul: operands must have the same number (≥ 3) of axes, got "
                               f"{format_types((a, b))}")
        if a.dtype != b.dtype:
            raise TypeMismatch(f"BatchMatMul: dtypes differ, got {format_types((a, b))}")
        if a.shape[:-2] != b.shape[:-2]:
            raise TypeMismatch(f"BatchMatMul: leading axes differ ({list(a.shape[:-2])} != "
                               f"{list(b.shape[:-2])}) in {format_types((a, b))}")
        if a.shape[-1] != b.shape[-2]:
            raise TypeMismatch(f"BatchMatMul: inner dimensions differ ({a.shape[-1]} != {b.shape[-2]}) in "
                               f"{format_types((a, b))}")

    @property
    def source(self): return (self.A, self.B)

    @property
    def target(self):
        return (self.A.with_shape(self.A.shape[:-1] + (self.B.shape[-1],)),)


# ----------------------------------------------------------------- layout
@dataclass(frozen=True)
class Transpose(Primitive):
    """``[m, n] → [n, m]``."""
    kind = Kind.VIEW
    linear = True
    T: NdArrayType

    def __post_init__(self):
        if self.T.ndim != 2:
            raise TypeMismatch(f"Transpose: operand must be a matrix, got {self.T}")

    @property
    def source(self): return (self.T,)

    @property
    def target(self): return (self.T.with_shape(self.T.shape[::-1]),)


@dataclass(frozen=True)
class Permute(Primitive):
    """``T → T'``: the axes of ``T`` in the order ``axes`` (``np.transpose(x, axes)``)."""
    kind = Kind.VIEW
    linear = True
    T: NdArrayType
    axes: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "axes", tuple(int(a) for a in self.axes))
        if sorted(self.axes) != list(range(self.T.ndim)):
            raise TypeMismatch(f"Permute: axes {list(self.axes)} are not a permutation of the {self.T.ndim} "
                               f"axes of {self.T}")

    @property
    def source(self): return (self.T,)

    @property
    def target(self): return (self.T.with_shape(tuple(self.T.shape[a] for a in self.axes)),)

    def inverse(self) -> tuple[int, ...]:
        """The axes that undo this permutation."""
        return tuple(int(i) for i in np.argsort(self.axes))


class CausalMask(Unary):
    """``[..., s, t] → [..., s, t]``: zero every entry above the diagonal (``j > i``); a linear map."""
    kind = Kind.ELEMENTWISE
    linear = True
    positional = True

    def __post_init__(self):
        if self.T.ndim < 2:
            raise TypeMismatch(f"CausalMask: operand needs at least two axes, got {self.T}")


@dataclass(frozen=True)
class Reshape(Primitive):
    """``T → T'`` with the same number of elements (row-major)."""
    kind = Kind.VIEW
    linear = True
    T: NdArrayType
    shape: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if int(np.prod(self.shape, dtype=np.int64)) != self.T.size:
            raise TypeMismatch(f"Reshape: cannot reshape {self.T} to {list(self.shape)}")

    @property
    def source(self): return (self.T,)

    @property
    def target(self): return (self.T.with_shape(self.shape),)


def _check_index(op: str, T: NdArrayType, index) -> tuple[tuple[int, int, int], ...]:
    """Normalise ``index`` to one ``(start, stop, step)`` per axis of ``T`` (``0 ≤ start ≤ stop ≤ n``, ``step ≥ 1``)."""
    try:
        index = tuple((int(a), int(b), int(c)) for a, b, c in index)
    except (TypeError, ValueError):
        raise TypeMismatch(f"{op}: index must be one (start, stop, step) per axis, got {index!r}") from None
    if len(index) != T.ndim or any(not (0 <= a <= b <= n) or c < 1 for (a, b, c), n in zip(index, T.shape)):
        raise TypeMismatch(f"{op}: index {[list(i) for i in index]} does not select from {T} "
                           f"(one (start, stop, step) per axis, 0 ≤ start ≤ stop ≤ size, step ≥ 1)")
    return index


def _selected(T: NdArrayType, index) -> NdArrayType:
    return T.with_shape(tuple(len(range(a, b, c)) for a, b, c in index))


@dataclass(frozen=True)
class Slice(Primitive):
    """``T → T'``: the strided block ``x[a₀:b₀:c₀, a₁:b₁:c₁, …]``, one ``(start, stop, step)`` per axis.

    Its adjoint (reverse map) is :class:`Pad` with the same index.
    """
    kind = Kind.GATHER
    linear = True
    T: NdArrayType
    index: tuple[tuple[int, int, int], ...]

    def __post_init__(self):
        object.__setattr__(self, "index", _check_index("Slice", self.T, self.index))

    @property
    def source(self): return (self.T,)

    @property
    def target(self): return (_selected(self.T, self.index),)


@dataclass(frozen=True)
class Pad(Arrow):
    """``S → T``: zeros of type ``T`` with ``S`` written at ``T[index]`` (``index`` as in :class:`Slice`).

    The adjoint of :class:`Slice`: zero padding, concatenation (a sum of pads) and dilation.
    """
    kind = Kind.GATHER
    linear = True
    index: tuple[tuple[int, int, int], ...]

    def __post_init__(self):
        object.__setattr__(self, "index", _check_index("Pad", self.T, self.index))
        if _selected(self.T, self.index) != self.S:
            raise TypeMismatch(f"Pad: {self.S} does not fill the block {[list(i) for i in self.index]} "
                               f"of {self.T}")


def pair(op: str, what: str, v, low: int) -> tuple[int, int]:
    t = (v, v) if isinstance(v, (int, np.integer)) else tuple(v)
    if len(t) != 2 or any(not isinstance(x, (int, np.integer)) or x < low for x in t):
        raise TypeMismatch(f"{op}: {what} must be an int ≥ {low} or a pair of them, got {v!r}")
    return int(t[0]), int(t[1])


@dataclass(frozen=True)
class Blocks(Primitive):
    """Base of :class:`Unfold` and :class:`Fold`: the sliding ``kh × kw`` blocks of an image type ``T``
    ``[B, C, H, W]`` with ``stride`` and zero ``padding`` (ints or pairs), as columns ``[B, C·kh·kw, L]``."""
    T: NdArrayType
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)

    def __post_init__(self):
        name = type(self).__name__
        object.__setattr__(self, "kernel", pair(name, "kernel", self.kernel, 1))
        object.__setattr__(self, "stride", pair(name, "stride", self.stride, 1))
        object.__setattr__(self, "padding", pair(name, "padding", self.padding, 0))
        if self.T.ndim != 4:
            raise TypeMismatch(f"{name}: the image must be [B, C, H, W], got {self.T}")
        if min(self.out_hw()) < 1:
            raise TypeMismatch(f"{name}: kernel {list(self.kernel)} with padding {list(self.padding)} does not "
                               f"fit {self.T}")

    def out_hw(self) -> tuple[int, int]:
        """``(Ho, Wo)``: block positions along the height and the width."""
        return tuple((n + 2 * p - k) // s + 1
                     for n, k, s, p in zip(self.T.shape[2:], self.kernel, self.stride, self.padding))

    @property
    def columns(self) -> NdArrayType:
        """``[B, C·kh·kw, Ho·Wo]``."""
        B, C = self.T.shape[:2]
        ho, wo = self.out_hw()
        return self.T.with_shape((B, C * self.kernel[0] * self.kernel[1], ho * wo))


@dataclass(frozen=True)
class Unfold(Blocks):
    """``[B, C, H, W] → [B, C·kh·kw, L]``: each sliding ``kh × kw`` block (zero padded) as a column.

    ``torch.nn.functional.unfold``: row ``(c·kh + i)·kw + j`` of column ``l = y·Wo + x`` is
    ``image[c, y·sh − ph + i, x·sw − pw + j]`` (0 outside the image). A convolution is this followed by a
    matrix product; the adjoint is :class:`Fold`.
    """
    kind = Kind.GATHER
    linear = True

    @property
    def source(self): return (self.T,)

    @property
    def target(self): return (self.columns,)


@dataclass(frozen=True)
class Fold(Blocks):
    """``[B, C·kh·kw, L] → [B, C, H, W]``: the adjoint of :class:`Unfold` (overlapping blocks summed).

    ``T`` is the image type; ``torch.nn.functional.fold`` with ``output_size=(H, W)``.
    """
    kind = Kind.GATHER
    linear = True

    @property
    def source(self): return (self.columns,)

    @property
    def target(self): return (self.T,)


def _check_broadcast(op: str, small: NdArrayType, big: NdArrayType) -> None:
    if small.dtype != big.dtype:
        raise TypeMismatch(f"{op}: dtypes differ, got {format_types((small, big))}")
    s, b = small.shape, big.shape
    if len(s) > len(b) or any(x not in (1, y) for x, y in zip(s[::-1], b[::-1])):
        raise TypeMismatch(f"{op}: {small} does not broadcast to {big}")


@dataclass(frozen=True)
class Broadcast(Arrow):
    """``S → T``: NumPy broadcasting of ``S`` to the larger shape ``T``."""
    kind = Kind.VIEW
    linear = True

    def __post_init__(self):
        _check_broadcast("Broadcast", self.S, self.T)

    def axes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(lead, kept)``: leading axes added, and axes of size 1 stretched."""
        lead = len(self.T.shape) - len(self.S.shape)
        kept = tuple(lead + i for i, d in enumerate(self.S.shape) if d == 1 and self.T.shape[lead + i] != 1)
        return tuple(range(lead)), kept


@dataclass(frozen=True)
class SumTo(Primitive):
    """``T → S``: sum over the axes that broadcasting ``S → T`` would add or stretch."""
    kind = Kind.REDUCE
    linear = True
    T: NdArrayType
    S: NdArrayType

    def __post_init__(self):
        _check_broadcast("SumTo", self.S, self.T)

    @property
    def source(self): return (self.T,)

    @property
    def target(self): return (self.S,)

    def axes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return Broadcast(self.S, self.T).axes()


# ---------------------------------------------------------- nonlinearities
class Heaviside(Unary):
    """``T → T``: ``1`` where ``x > 0``, else ``0`` (derivative zero)."""
    kind = Kind.ELEMENTWISE


class Sigmoid(Unary):
    """``T → T``: logistic function (piecewise linear in fixed point)."""
    kind = Kind.ELEMENTWISE


class Tanh(Unary):
    """``T → T``: hyperbolic tangent (``2σ(2x) - 1`` in fixed point)."""
    kind = Kind.ELEMENTWISE


class Exp(Unary):
    """``T → T``: ``e^x`` (in fixed point: ``2^k·p(r)`` with ``x·log2 e = k + r``)."""
    kind = Kind.ELEMENTWISE


class Log(Unary):
    """``T → T``: natural logarithm of positive values."""
    kind = Kind.ELEMENTWISE


class Sqrt(Unary):
    """``T → T``: square root of non-negative values (in fixed point: the floor, checked by squaring)."""
    kind = Kind.ELEMENTWISE


class Rsqrt(Unary):
    """``T → T``: ``1 / sqrt(x)`` of positive values.

    In fixed point exactly ``Div(1, Sqrt(x))``, each rounded as it is alone (so every target reuses its
    square root and its divider). A primitive of its own for its reverse derivative,
    ``dx = −½·dy·y³``: three products, where the derivative of ``Div(1, Sqrt(x))`` takes two divisions
    (the costliest rows of a ZK circuit, a quotient bit per cycle on the FPGA).
    """
    kind = Kind.ELEMENTWISE


class ArgMaxMask(Unary):
    """``[..., k] → [..., k]``: ``1`` at the first maximum along the last axis, else ``0``.

    Piecewise constant (derivative zero), like :class:`Heaviside`; ``max`` is the definition
    ``Σ x · ArgMaxMask(x)``, whose reverse derivative routes the gradient to that one element.
    """
    kind = Kind.ROWWISE

    def __post_init__(self):
        if self.T.ndim < 1:
            raise TypeMismatch(f"ArgMaxMask: operand needs at least one axis, got {self.T}")


@dataclass(frozen=True)
class Softmax(Unary):
    """``[..., k] → [..., k]``: softmax along the last axis.

    ``causal=True`` (operands with at least two axes ``[..., s, k]``): entry ``j > i`` of row ``i`` is
    masked out (probability exactly 0), as in a decoder's attention.
    """
    kind = Kind.ROWWISE
    causal: bool = False

    def __post_init__(self):
        if self.T.ndim < 1:
            raise TypeMismatch(f"Softmax: operand needs at least one axis, got {self.T}")
        if self.causal and self.T.ndim < 2:
            raise TypeMismatch(f"Softmax(causal=True): operand needs at least two axes, got {self.T}")


@dataclass(frozen=True)
class LogSumExp(Primitive):
    """``[..., k] → [...]``: ``log Σ exp`` along the last axis."""
    kind = Kind.ROWWISE
    T: NdArrayType

    def __post_init__(self):
        if self.T.ndim < 1:
            raise TypeMismatch(f"LogSumExp: operand needs at least one axis, got {self.T}")

    @property
    def source(self): return (self.T,)

    @property
    def target(self): return (self.T.with_shape(self.T.shape[:-1]),)


#: every primitive class; rule tables are checked against this tuple.
PRIMITIVES: tuple[type[Primitive], ...] = (
    Copy, Parameter, Constant, Add, Neg, Mul, Scale, MatMul, Transpose, Reshape,
    Broadcast, SumTo, Heaviside, Sigmoid, Tanh, Softmax, LogSumExp,
    Exp, Log, Sqrt, Rsqrt, Div, ArgMaxMask, Permute, BatchMatMul, CausalMask, OneHot, Slice, Pad, Unfold, Fold,
)


# ---------------------------------------------------------------- interning
# An edge label is an operation *at a place*: the primitive and the definition path that created it
# (``"gpt/block1/attention/causal_softmax_attention"``, see :mod:`circuitgrad.diagram`'s scopes).  Equal operations at
# different places get different labels, so provenance travels with every rewrite of the hypergraph
# (composition, tensoring, the reverse-derivative functor) at no cost.
_SITES: Interner[tuple[Primitive, str]] = Interner()


def intern_op(op: Primitive, path: str = "") -> int:
    """The integer edge label of ``op`` created at definition path ``path`` (allocated on first use)."""
    return _SITES.intern((op, path))


def op_of(label: int) -> Primitive:
    """The operation of an edge label."""
    return _SITES.lookup(label)[0]


def path_of(label: int) -> str:
    """The definition path of an edge label (``""`` where none was recorded)."""
    return _SITES.lookup(label)[1]
