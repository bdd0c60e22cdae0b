"""Tracing: Python functions over symbolic wires (:class:`Var`) recorded as diagrams.

    f = trace(lambda x, y: (x * y + x,), [T, T], name="f")

:class:`Builder` collects one small hypergraph per operation and the wires to glue, and
:meth:`Builder.build` glues them all with one coequalizer, so tracing is linear in the size of the
result. This module also holds the operations :class:`Var`'s operators are (``+ - * / @ **``,
``.sum``, ``.max``, ``.reshape``, indexing, NumPy's ufuncs): :mod:`circuitgrad.ops` builds the rest
of the vocabulary on them and re-exports them, so ``ops.add`` is ``x + y``::

    diagram  ◀──  tracing (Var, Builder, trace, the arithmetic of Var)  ◀──  ops (layers' vocabulary)
"""
from __future__ import annotations

import builtins
import contextlib
from typing import Callable, Sequence

import numpy as np

from . import primitives as P
from .diagram import DTYPE, FF, HG, OH, Diagram, coequalizer, empty_labels, labels, relabel, short
from .primitives import Primitive, TypeMismatch, intern_op
from .provenance import BUILDERS, SCOPE, current_builder, current_path, definition, segment
from .types import NdArrayType, format_types, type_of

__all__ = ["Var", "Builder", "trace", "apply", "call", "UNSUPPORTED", "UNSUPPORTED_UFUNCS", "Number",
           "constant", "broadcast_to", "sum_to", "sum", "add", "neg", "sub", "scale", "mul", "matmul", "transpose",
           "permute", "reshape", "unary", "exp", "log", "sqrt", "tanh", "div", "power", "rpow", "max", "mean", "slice",
           "getitem"]

#: what a traced operation takes as a constant operand
Number = (int, float, np.integer, np.floating)


class Var:
    """A symbolic wire of the diagram being traced.

    Supports ``+ - * / @``, ``** k`` (integer ``k``), unary ``-``, ``.T``, ``.shape``, ``.sum(axis)``,
    ``.mean(axis)``, ``.max(axis)``, ``.reshape(shape)`` and NumPy's
    ``add``/``subtract``/``multiply``/``divide``/``matmul``/``negative``/``tanh``/``exp``/``log``/``sqrt`` ufuncs;
    the operations in :data:`UNSUPPORTED` raise a ``TypeError`` saying what to
    use instead.
    """
    __slots__ = ("builder", "wire", "type")

    def __init__(self, builder: "Builder", wire: int, type: NdArrayType):
        self.builder, self.wire, self.type = builder, wire, type

    def __repr__(self) -> str:
        return f"Var({self.wire}: {self.type})"

    # arithmetic sugar: the functions are below (ops re-exports them)
    def __add__(self, other): return add(self, other)
    def __radd__(self, other): return add(other, self)
    def __sub__(self, other): return sub(self, other)
    def __rsub__(self, other): return sub(other, self)
    def __mul__(self, other): return mul(self, other)
    def __rmul__(self, other): return mul(other, self)
    def __neg__(self): return neg(self)
    def __matmul__(self, other): return matmul(self, other)
    def __truediv__(self, other): return div(self, other)
    def __rtruediv__(self, other): return div(other, self)
    def __pow__(self, k): return power(self, k)
    def __rpow__(self, c): return rpow(c, self)

    def sum(self, axis: int | None = None, **numpy) -> "Var":
        """``ops.sum(x, axis)``: over one axis, or all (``axis=None``; also what ``np.sum(x)`` calls)."""
        if any(v is not None for v in numpy.values()):
            raise TypeError(f"x.sum: only axis= is supported on traced values, got {sorted(numpy)}")
        return sum(self, axis)

    def mean(self, axis: int | None = None) -> "Var":
        """``ops.mean(x, axis)``."""
        return mean(self, axis)

    def max(self, axis: int = -1) -> "Var":
        """``ops.max(x, axis)``: the maximum along one axis."""
        return max(self, axis)

    def reshape(self, *shape) -> "Var":
        """``ops.reshape(x, shape)`` (``x.reshape(2, 3)`` or ``x.reshape((2, 3))``)."""
        return reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)

    def __getitem__(self, key) -> "Var":
        """Basic NumPy indexing: ints, slices (positive steps), ``...`` and ``None`` (:func:`ops.getitem`)."""
        return getitem(self, key)

    @property
    def T(self) -> "Var":
        return transpose(self)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    def __array_ufunc__(self, ufunc, method: str, *inputs, **kwargs):
        """NumPy arithmetic on traced values (``np.float32(2) * x``) goes to :mod:`circuitgrad.ops`."""
        name = _UFUNC_OPS.get(ufunc.__name__) if method == "__call__" and not kwargs else None
        other = next((v for v in inputs if not isinstance(v, (Var,) + Number)), None)
        if name is not None and other is None:
            return _UFUNC_FUNCTIONS[name](*inputs)
        why, hint = UNSUPPORTED_UFUNCS.get(ufunc.__name__, _OTHER_UFUNC)
        what = f"np.{ufunc.__name__}{'' if method == '__call__' else '.' + method}(...)"
        if name is not None:
            what += f" with a {type(other).__name__} operand"
            hint = "arrays in a model are parameters (ops.param(T, label)) or constants (ops.constant(T, c))"
        raise TypeError(f"{what} {why}; {hint}")


#: NumPy ufuncs that have a traced equivalent: ufunc name -> circuitgrad.ops function
_UFUNC_OPS = {"add": "add", "subtract": "sub", "multiply": "mul", "negative": "neg", "matmul": "matmul",
              "tanh": "tanh", "exp": "exp", "log": "log", "sqrt": "sqrt", "divide": "div", "true_divide": "div"}

_NOT_YET = "is not supported on traced values yet"
_NO_VALUE = ("is not possible on a traced value: it is a wire of the diagram being traced, with no number "
             "until the compiled function runs")
_OPS = "use the functions of circuitgrad.ops (ops.add, ops.mul, ops.div, ops.matmul, ops.exp, ops.log, ops.sqrt, " \
       "ops.relu, ops.sigmoid, ops.tanh, ops.softmax, ops.heaviside, ops.sum, ops.max, ops.reshape, ops.permute)"
_SELECT = "the diagram cannot branch: select with h = ops.heaviside(x), then h * a + (1 - h) * b"

#: Operations a traced :class:`Var` refuses: attribute -> (what the user wrote, why, what to use).
#: Each becomes a method raising ``TypeError(f"{what} {why}; {instead}")``; implementing an operation
#: for real means deleting its entry and defining the method on :class:`Var`.
UNSUPPORTED: dict[str, tuple[str, str, str]] = {
    "__floordiv__": ("x // y", _NOT_YET, "there is no integer division"),
    "__rfloordiv__": ("c // x", _NOT_YET, "there is no integer division"),
    "__mod__": ("x % y", _NOT_YET, "there is no remainder"),
    "__rmod__": ("c % x", _NOT_YET, "there is no remainder"),
    "__divmod__": ("divmod(x, y)", _NOT_YET, "there is no integer division"),
    "__abs__": ("abs(x)", _NOT_YET, "use ops.relu(x) + ops.relu(-x)"),
    "__lt__": ("the comparison x < y", _NOT_YET, "use ops.heaviside(y - x): 1 where x < y, else 0"),
    "__le__": ("the comparison x <= y", _NOT_YET, "use 1 - ops.heaviside(x - y): 1 where x <= y, else 0"),
    "__gt__": ("the comparison x > y", _NOT_YET, "use ops.heaviside(x - y): 1 where x > y, else 0"),
    "__ge__": ("the comparison x >= y", _NOT_YET, "use 1 - ops.heaviside(y - x): 1 where x >= y, else 0"),
    "__setitem__": ("assigning x[...] = v", _NOT_YET, "traced values are immutable: compute a new one with ops"),
    "__iter__": ("iterating over x", _NOT_YET, "a traced value is one wire, not a sequence"),
    "__len__": ("len(x)", _NO_VALUE, "use x.shape[0]"),
    "__bool__": ("bool(x) (as in `if x:`, `x and y`, `not x`)", _NO_VALUE, _SELECT),
    "__float__": ("float(x)", _NO_VALUE, "constants are plain numbers or ops.constant(T, c)"),
    "__int__": ("int(x)", _NO_VALUE, "constants are plain numbers or ops.constant(T, c)"),
    "__index__": ("using x as an index", _NO_VALUE, "use x.shape for sizes"),
    "__array__": ("np.asarray(x)", _NO_VALUE, _OPS),
    "transpose": ("x.transpose()", _NOT_YET, "use x.T or ops.transpose(x)"),
    "dot": ("x.dot(y)", _NOT_YET, "use x @ y"),
    "min": ("x.min()", _NOT_YET, "there is no min reduction yet"),
    "astype": ("x.astype(...)", _NOT_YET,
               "dtypes never change inside a diagram: compile_model(dtype=...) retypes a whole model"),
}

#: NumPy ufuncs applied to a traced value: ufunc name -> (why, what to use)
UNSUPPORTED_UFUNCS: dict[str, tuple[str, str]] = {
    "maximum": (_NOT_YET, "for np.maximum(x, 0) use ops.relu(x)"),
    "absolute": (_NOT_YET, "use ops.relu(x) + ops.relu(-x)"),
}
_OTHER_UFUNC = (_NOT_YET, _OPS)


def _refuse(what: str, why: str, instead: str) -> Callable[..., object]:
    def method(self, *args, **kwargs):
        raise TypeError(f"{what} {why}; {instead}")
    method.__doc__ = f"Not supported: {what} raises TypeError ({instead})."
    return method


for _name, _entry in UNSUPPORTED.items():
    setattr(Var, _name, _refuse(*_entry))
del _name, _entry


_SINGLETONS: dict[int, OH] = {}


def _singleton(op: Primitive, path: str) -> OH:
    label = intern_op(op, path)
    d = _SINGLETONS.get(label)
    if d is None:
        x = FF(None, np.array([label], dtype=DTYPE))
        d = OH.singleton(x, labels(op.source), labels(op.target))
        _SINGLETONS[label] = d
    return d


class Builder:
    """Collects pieces (one hypergraph per operation) and the wires to glue."""

    def __init__(self) -> None:
        self.pieces: list[OH] = []
        self.n_wires = 0
        self.glue_a: list[int] = []
        self.glue_b: list[int] = []

    @staticmethod
    def current() -> "Builder":
        return current_builder()

    @contextlib.contextmanager
    def active(self):
        BUILDERS.append(self)
        try:
            yield self
        finally:
            BUILDERS.pop()

    def _add(self, piece: OH) -> int:
        offset = self.n_wires
        self.pieces.append(piece)
        self.n_wires += piece.H.W
        return offset

    def inputs(self, types: Sequence[NdArrayType]) -> list[Var]:
        """Fresh source wires of the given types (one discrete piece for all)."""
        offset = self._add(OH.identity(labels(types), empty_labels()))
        return [Var(self, offset + i, t) for i, t in enumerate(types)]

    def _glue(self, name: str, args: Sequence[Var], expected: Sequence[NdArrayType], wires: np.ndarray,
              offset: int) -> None:
        got = tuple(a.type if isinstance(a, Var) else a for a in args)
        if len(args) != len(expected) or any(not isinstance(a, Var) for a in args) or got != tuple(expected):
            raise TypeMismatch(f"{name}: expected {format_types(expected)}, got {format_types(got)}")
        for a in args:
            if a.builder is not self:
                raise ValueError(f"{name}: argument {a} belongs to another diagram")
        self.glue_a.extend(a.wire for a in args)
        self.glue_b.extend(int(offset + w) for w in wires)

    def apply(self, op: Primitive, *args: Var) -> tuple[Var, ...]:
        piece = _singleton(op, current_path())
        n = len(op.source)
        offset = self.n_wires
        self._glue(op.name, args, op.source, np.arange(n), offset)
        self._add(piece)
        return tuple(Var(self, offset + n + j, t) for j, t in enumerate(op.target))

    def call(self, d: Diagram, *args: Var) -> tuple[Var, ...]:
        offset = self.n_wires
        self._glue(getattr(d, "name", "diagram"), args, Diagram.of(d).source_types, d.s.table, offset)
        self._add(relabel(d, current_path()))
        tt = d.H.w.table[d.t.table]
        return tuple(Var(self, int(offset + w), type_of(l)) for w, l in zip(d.t.table, tt))

    def build(self, inputs: Sequence[Var], outputs: Sequence[Var], name: str) -> Diagram:
        for v in list(inputs) + list(outputs):
            if not isinstance(v, Var) or v.builder is not self:
                raise TypeError(f"{name}: outputs must be wires of the traced diagram, got {v!r}")
        W = self.n_wires
        H = HG.coproduct_list([p.H for p in self.pieces]) if self.pieces else HG.empty(empty_labels(), empty_labels())
        if self.glue_a:
            a = FF(W, np.asarray(self.glue_a, dtype=DTYPE))
            b = FF(W, np.asarray(self.glue_b, dtype=DTYPE))
            q = coequalizer(a, b)
            H = H.coequalize_vertices(q)
        else:
            q = FF.identity(W)
        s = FF(W, np.fromiter((v.wire for v in inputs), dtype=DTYPE, count=len(inputs))) >> q
        t = FF(W, np.fromiter((v.wire for v in outputs), dtype=DTYPE, count=len(outputs))) >> q
        return Diagram.of(OH(s, t, H), name)


def trace(fn: Callable[..., object], source: Sequence[NdArrayType], name: str | None = None,
          path: str | None = None) -> Diagram:
    """The diagram computed by ``fn`` on symbolic wires of the ``source`` types.

    ``fn`` returns a :class:`Var` or a tuple (or list) of them (the target,
    in order); anything else is a ``TypeError`` saying what it returned.
    Operations a :class:`Var` does not support (``x / y``, ``x > 0``,
    ``if x:``, ``np.exp(x)``, ``x.sum()``, …: see :data:`UNSUPPORTED`) raise a
    ``TypeError`` naming the operation and what to use instead.

    The result is a definition: its operations are created at path
    ``path`` (default :func:`segment` ``(name)``; ``""`` for none, so that the
    called diagrams keep their own paths), extended by the :func:`scope` s
    entered while tracing; calling it inside another trace puts those paths
    under the caller's.
    """
    name = name or getattr(fn, "__name__", "diagram")
    b = Builder()
    args = b.inputs(list(source))
    outer = SCOPE[:]
    SCOPE[:] = [] if path == "" else [segment(name if path is None else path)]
    try:
        with b.active():
            try:
                out = fn(*args)
            except TypeMismatch as e:
                raise TypeMismatch(f"in {name}: {e}") from None
    finally:
        SCOPE[:] = outer
    return b.build(args, _outputs(out, name), name)


def _outputs(out: object, name: str) -> tuple[Var, ...]:
    """The traced function's result as a tuple of Vars, or a ``TypeError`` saying what it returned."""
    if isinstance(out, Var):
        return (out,)
    if isinstance(out, (tuple, list)) and all(isinstance(v, Var) for v in out):
        return tuple(out)
    if isinstance(out, (tuple, list)):
        i, v = next((i, v) for i, v in enumerate(out) if not isinstance(v, Var))
        got = f"a {type(out).__name__} whose item {i} is {short(f'{type(v).__name__} {v!r}')}"
    elif out is None:
        got = "None (a missing return?)"
    else:
        got = short(f"{type(out).__name__} {out!r}")
        if isinstance(out, (int, float)):
            got += f" (a constant output is ops.constant(T, {out!r}))"
    return_type = "a Var (a traced value) or a tuple of Vars"
    raise TypeError(f"trace {name}: the traced function must return {return_type}, got {got}")


def apply(op: Primitive, *args: Var) -> tuple[Var, ...]:
    """Apply primitive ``op`` to wires of the diagram being traced."""
    b = args[0].builder if args and isinstance(args[0], Var) else Builder.current()
    return b.apply(op, *args)


def call(d: Diagram, *args: Var) -> tuple[Var, ...]:
    """Inline diagram ``d`` into the diagram being traced."""
    b = args[0].builder if args and isinstance(args[0], Var) else Builder.current()
    return b.call(d, *args)


# ------------------------------------------------------------- the arithmetic of Var
def _builder(*xs) -> Builder:
    for x in xs:
        if isinstance(x, Var):
            return x.builder
    return Builder.current()


def constant(T: NdArrayType, value: float, epsilon: bool = False) -> Var:
    """A wire of type ``T`` filled with ``value`` (``epsilon``: at least one fixed-point step, see :class:`Constant`)."""
    return Builder.current().apply(P.Constant(T, float(value), epsilon))[0]


def broadcast_to(x: Var, shape: Sequence[int]) -> Var:
    """``x`` broadcast to ``shape`` (identity when the shape already matches)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return x.builder.apply(P.Broadcast(x.type, x.type.with_shape(shape)), x)[0]


def sum_to(x: Var, shape: Sequence[int]) -> Var:
    """``x`` summed down to ``shape`` (the adjoint of :func:`broadcast_to`)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return x.builder.apply(P.SumTo(x.type, x.type.with_shape(shape)), x)[0]


def sum(x: Var, axis: int | None = None) -> Var:
    """Sum over one axis, or over all axes (``axis=None``)."""
    if axis is None:
        return sum_to(x, ())
    axis %= x.type.ndim
    y = sum_to(x, x.shape[:axis] + (1,) + x.shape[axis + 1:])
    return reshape(y, x.shape[:axis] + x.shape[axis + 1:])


def _binary(name: str, a, b) -> tuple[Var, Var]:
    if isinstance(a, Number) and isinstance(b, Var):
        a = constant(b.type, a)
    if isinstance(b, Number) and isinstance(a, Var):
        b = constant(a.type, b)
    if not (isinstance(a, Var) and isinstance(b, Var)):
        raise TypeError(f"{name}: operands must be traced wires or numbers, got {a!r} and {b!r}")
    if a.type.dtype != b.type.dtype:
        raise TypeMismatch(f"{name}: dtypes differ, got {format_types((a.type, b.type))}")
    if a.shape != b.shape:
        try:
            shape = np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise TypeMismatch(f"{name}: shapes do not broadcast, got {format_types((a.type, b.type))}") from None
        a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    return a, b


def add(a, b) -> Var:
    """Elementwise ``a + b``."""
    a, b = _binary("Add", a, b)
    return a.builder.apply(P.Add(a.type), a, b)[0]


def neg(x: Var) -> Var:
    """Elementwise ``-x``."""
    return x.builder.apply(P.Neg(x.type), x)[0]


def sub(a, b) -> Var:
    """Elementwise ``a - b`` (``a + (-b)``)."""
    if isinstance(b, Number):
        return add(a, -b)
    if isinstance(a, Number):
        return add(neg(b), a)
    return add(a, neg(b))


def scale(x: Var, c: float) -> Var:
    """``c · x`` for a constant ``c``."""
    return x.builder.apply(P.Scale(x.type, float(c)), x)[0]


def mul(a, b) -> Var:
    """Elementwise ``a * b``; a number operand becomes a :class:`Scale`."""
    if isinstance(b, Number) and isinstance(a, Var):
        return scale(a, b)
    if isinstance(a, Number) and isinstance(b, Var):
        return scale(b, a)
    a, b = _binary("Mul", a, b)
    return a.builder.apply(P.Mul(a.type), a, b)[0]


def matmul(a: Var, b: Var) -> Var:
    """``a @ b`` with NumPy's ``matmul`` rules for operands of two or more axes.

    ``[m, n] @ [n, p]`` is one :class:`MatMul`. A weight matrix on the right, ``[..., n] @ [n, p]``,
    is one :class:`MatMul` of the flattened rows. Otherwise the leading axes are broadcast and one
    :class:`BatchMatMul` multiplies ``[..., m, n] @ [..., n, p]``.
    """
    if not (isinstance(a, Var) and isinstance(b, Var)):
        raise TypeError(f"matmul: operands must be traced wires, got {a!r} and {b!r}")
    if a.type.ndim < 2 or b.type.ndim < 2:
        raise TypeMismatch(f"MatMul: operands need at least two axes, got {format_types((a.type, b.type))}")
    if a.type.ndim == 2 and b.type.ndim == 2:
        return _builder(a, b).apply(P.MatMul(a.type, b.type), a, b)[0]
    if b.type.ndim == 2:
        if a.shape[-1] != b.shape[0]:
            raise TypeMismatch(f"MatMul: inner dimensions differ ({a.shape[-1]} != {b.shape[0]}) in "
                               f"{format_types((a.type, b.type))}")
        flat = reshape(a, (int(np.prod(a.shape[:-1], dtype=np.int64)), a.shape[-1]))
        return reshape(matmul(flat, b), a.shape[:-1] + (b.shape[1],))
    try:
        lead = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise TypeMismatch(f"BatchMatMul: leading axes do not broadcast in {format_types((a.type, b.type))}") from None
    a, b = broadcast_to(a, lead + a.shape[-2:]), broadcast_to(b, lead + b.shape[-2:])
    return a.builder.apply(P.BatchMatMul(a.type, b.type), a, b)[0]


def transpose(x: Var) -> Var:
    """Matrix transpose; for more axes, the last two are swapped."""
    if x.type.ndim > 2:
        return permute(x, tuple(range(x.type.ndim - 2)) + (x.type.ndim - 1, x.type.ndim - 2))
    return x.builder.apply(P.Transpose(x.type), x)[0]


def permute(x: Var, axes: Sequence[int]) -> Var:
    """``np.transpose(x, axes)``."""
    axes = tuple(int(a) % (x.type.ndim or 1) for a in axes)
    if axes == tuple(range(x.type.ndim)):
        return x
    if x.type.ndim == 2:
        return transpose(x)
    return x.builder.apply(P.Permute(x.type, axes), x)[0]


def reshape(x: Var, shape: Sequence[int]) -> Var:
    """Row-major reshape."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    return x.builder.apply(P.Reshape(x.type, shape), x)[0]


def tanh(x: Var) -> Var:
    """Hyperbolic tangent."""
    return x.builder.apply(P.Tanh(x.type), x)[0]


def unary(cls, x: Var) -> Var:
    if not isinstance(x, Var):
        raise TypeError(f"{cls.__name__}: operand must be a traced wire, got {x!r}")
    return x.builder.apply(cls(x.type), x)[0]


def rpow(c, x: Var) -> Var:
    """``c ** x`` for a constant base ``c > 0``: ``exp(ln(c)·x)``."""
    if isinstance(c, bool) or not isinstance(c, Number) or not np.isfinite(c) or c <= 0:
        raise TypeError(f"c ** x: the base must be a finite number > 0, got {type(c).__name__} {c!r}; "
                        f"for a traced base use ops.exp(ops.log(b) * x)")
    return exp(scale(x, float(np.log(float(c)))))


def exp(x: Var) -> Var:
    """Elementwise ``e^x``."""
    return unary(P.Exp, x)


def log(x: Var) -> Var:
    """Elementwise natural logarithm (of positive values)."""
    return unary(P.Log, x)


def sqrt(x: Var) -> Var:
    """Elementwise square root (of non-negative values)."""
    return unary(P.Sqrt, x)


def div(a, b) -> Var:
    """Elementwise ``a / b``; a number divisor becomes a :class:`Scale` by ``1 / b``."""
    if isinstance(b, Number) and isinstance(a, Var):
        if b == 0:
            raise ZeroDivisionError(f"Div: division of {a.type} by the constant 0")
        return scale(a, 1.0 / b)
    a, b = _binary("Div", a, b)
    return a.builder.apply(P.Div(a.type), a, b)[0]


def power(x: Var, k: int) -> Var:
    """``x ** k`` for an integer ``k ≥ 0`` (repeated squaring: about ``2·log2 k`` products)."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 0:
        raise TypeError(f"x ** k: k must be an integer ≥ 0, got {k!r}; for 1 / x use 1 / x, for a root ops.sqrt")
    if k == 0:
        return constant(x.type, 1.0)
    out, base = None, x
    while k:
        if k & 1:
            out = base if out is None else mul(out, base)
        k >>= 1
        if k:
            base = mul(base, base)
    return out


@definition()
def max(x: Var, axis: int = -1) -> Var:
    """The maximum along ``axis`` (that axis removed): ``Σ x · ArgMaxMask(x)``.

    Its reverse derivative sends the gradient to the first maximum, as ``torch.max(x, dim)`` does.
    """
    nd = x.type.ndim
    axis %= nd
    if axis != nd - 1:
        order = tuple(i for i in range(nd) if i != axis) + (axis,)
        x = permute(x, order)
    mask = x.builder.apply(P.ArgMaxMask(x.type), x)[0]
    return sum(mul(x, mask), -1)


def mean(x: Var, axis: int | None = None) -> Var:
    """The mean over one axis, or over all elements."""
    n = x.type.size if axis is None else x.shape[axis % x.type.ndim]
    return scale(sum(x, axis), 1.0 / n)


def slice(x: Var, index: Sequence[tuple[int, int, int]]) -> Var:
    """The block ``x[a₀:b₀:c₀, …]``: one ``(start, stop, step)`` per axis (a :class:`Slice`)."""
    op = P.Slice(x.type, tuple(index))
    if all(i == (0, n, 1) for i, n in zip(op.index, x.shape)):
        return x
    return x.builder.apply(op, x)[0]


def getitem(x: Var, key) -> Var:
    """``x[key]`` with NumPy's basic indexing: integers (negative ones count from the end), slices with a
    positive step, one ``...`` and ``None`` (a new axis of size 1). Advanced (array) indexing is refused."""
    key = key if isinstance(key, tuple) else (key,)
    dots = [i for i, k in enumerate(key) if k is Ellipsis]          # by identity: keys may be arrays
    if len(dots) > 1:
        raise IndexError("x[...]: an index can only have a single ellipsis ('...')")
    used = builtins.sum(k is not None and k is not Ellipsis for k in key)
    if used > x.type.ndim:
        raise IndexError(f"x[...]: too many indices ({used}) for {x.type}")
    if not dots:
        dots, key = [len(key)], key + (Ellipsis,)
    at = dots[0]
    key = key[:at] + (builtins.slice(None),) * (x.type.ndim - used) + key[at + 1:]
    index, shape, axis = [], [], 0
    for k in key:
        if k is None:
            shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            i = int(k) + n if k < 0 else int(k)
            if not 0 <= i < n:
                raise IndexError(f"x[...]: index {int(k)} is out of bounds for axis {axis} of size {n} ({x.type})")
            index.append((i, i + 1, 1))
        elif isinstance(k, builtins.slice):
            a, b, c = k.indices(n)
            if c < 1:
                raise IndexError(f"x[...]: slices need a positive step, got {k} on axis {axis} ({x.type}); "
                                 f"an axis cannot be reversed")
            index.append((a, builtins.max(a, b), c))
            shape.append(len(range(a, b, c)))
        else:
            raise IndexError(f"x[...]: only integers, slices, '...' and None index a traced value, got "
                             f"{type(k).__name__} {k!r} (no advanced indexing)")
        axis += 1
    return reshape(slice(x, index), tuple(shape))


#: NumPy ufuncs with a traced equivalent, as functions (see :data:`_UFUNC_OPS`)
_UFUNC_FUNCTIONS = {"add": add, "sub": sub, "mul": mul, "neg": neg, "matmul": matmul, "tanh": tanh, "exp": exp,
                    "log": log, "sqrt": sqrt, "div": div}
