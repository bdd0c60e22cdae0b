"""Morphisms: open hypergraphs with typed wires, built by composition or tracing.

A :class:`Diagram` is an ``open_hypergraphs`` open hypergraph whose wire labels
are interned :class:`~circuitgrad.types.NdArrayType` s and whose edge labels are
interned :class:`~circuitgrad.primitives.Primitive` s::

        ┌───────┐      ┌──────┐
    x ──┤ dense ├──────┤ relu ├── y          dense(8,4,16) >> relu(8,16)
        └───────┘      └──────┘

``f >> g`` composes, ``f @ g`` tensors; both check types and name the
operations involved when they do not fit.  Diagrams are most easily written by
*tracing* a Python function over symbolic wires (:func:`trace`)::

    f = trace(lambda x, y: (x * y + x,), [T, T], name="f")

Tracing collects one small hypergraph per operation and glues all their wires
at the end with a single coequalizer, so its cost is linear in the size of
the result.
"""
from __future__ import annotations

import collections
import contextlib
from typing import Callable, Iterable, Sequence

import numpy as np
import open_hypergraphs.numpy as ohn

from .provenance import _SCOPE, current_path, segment
from .primitives import Parameter, Primitive, TypeMismatch, Copy, intern_op, op_of, path_of
from .types import NdArrayType, format_types, intern_type, type_of

__all__ = [
    "Diagram", "Var", "Builder", "trace", "apply", "call", "identity", "sequential",
    "monogamous", "unbind_parameters", "IllFormedDiagram", "labels", "UNSUPPORTED", "UNSUPPORTED_UFUNCS",
    "relabel",
]

FF = ohn.FiniteFunction
IC = ohn.IndexedCoproduct
HG = ohn.Hypergraph
OH = ohn.OpenHypergraph
DTYPE = FF.Dtype

_MAX_NAME = 60


class IllFormedDiagram(ValueError):
    """A diagram that is not a function: a wire with no or several producers, or a cycle."""


def labels(types: Iterable[NdArrayType]) -> FF:
    """The label function ``n → Σ₀`` of a list of wire types."""
    return FF(None, np.fromiter((intern_type(t) for t in types), dtype=DTYPE))


def _empty() -> FF:
    return FF(None, np.zeros(0, dtype=DTYPE))


def _short(name: str) -> str:
    return name if len(name) <= _MAX_NAME else name[: _MAX_NAME - 1] + "…"


# --------------------------------------------------------------- provenance
def _map_paths(f: OH, new_path: Callable[[str], str]) -> OH:
    """``f`` with every edge at path ``p`` moved to ``new_path(p)`` (one relabelling of the edge labels)."""
    if not f.H.X:
        return f
    u, inv = np.unique(f.H.x.table, return_inverse=True)
    lab = np.fromiter((intern_op(op_of(l), new_path(path_of(l))) for l in u), dtype=DTYPE, count=len(u))
    H = HG(f.H.s, f.H.t, f.H.w, FF(None, lab[inv].astype(DTYPE)))
    return Diagram.of(OH(f.s, f.t, H), getattr(f, "name", "diagram"))


def relabel(f: OH, prefix: str) -> "Diagram":
    """``f`` as a part of the definition at ``prefix``: every path ``p`` becomes ``prefix/p``."""
    if not prefix:
        return Diagram.of(f, getattr(f, "name", "diagram"))
    return _map_paths(f, lambda p: f"{prefix}/{p}" if p else prefix)


def _top(f: OH) -> str:
    """The definition ``f`` is: the first segment its operations' paths share, else its name's segment."""
    heads = {path_of(l).partition("/")[0] for l in np.unique(f.H.x.table)}
    return heads.pop() if len(heads) == 1 and "" not in heads else segment(getattr(f, "name", "diagram"))


def _as_part(f: OH, seg: str) -> OH:
    """``f`` as the definition ``seg``: paths under ``f``'s own top segment are renamed, others prefixed."""
    top = _top(f)

    def new(p: str) -> str:
        head, _, rest = p.partition("/")
        if head == top:
            return f"{seg}/{rest}" if rest else seg
        return f"{seg}/{p}" if p else seg
    return _map_paths(f, new)


class Diagram(OH):
    """A morphism ``source → target`` of the free symmetric monoidal category."""

    name: str = "diagram"

    @classmethod
    def of(cls, f: OH, name: str = "diagram") -> "Diagram":
        d = cls(f.s, f.t, f.H)
        d.name = name
        return d

    @property
    def source_types(self) -> tuple[NdArrayType, ...]:
        return tuple(type_of(i) for i in self.H.w.table[self.s.table])

    @property
    def target_types(self) -> tuple[NdArrayType, ...]:
        return tuple(type_of(i) for i in self.H.w.table[self.t.table])

    def compose(f: "Diagram", g: "Diagram") -> "Diagram":
        a = f.H.w.table[f.t.table]
        b = g.H.w.table[g.s.table]
        if len(a) != len(b) or not np.array_equal(a, b):
            raise TypeMismatch(
                f"cannot compose {_short(f.name)} >> {_short(getattr(g, 'name', 'diagram'))}: "
                f"{_short(f.name)} outputs {format_types(f.target_types)} but "
                f"{_short(getattr(g, 'name', 'diagram'))} expects {format_types(Diagram.of(g).source_types)}")
        h = OH.compose(f, g)
        return Diagram.of(h, f"{f.name} >> {getattr(g, 'name', 'diagram')}")

    def tensor(f: "Diagram", g: "Diagram") -> "Diagram":
        return Diagram.of(OH.tensor(f, g), f"({f.name}) @ ({getattr(g, 'name', 'diagram')})")

    def __str__(self) -> str:
        return (f"{_short(self.name)} : {format_types(self.source_types)} → {format_types(self.target_types)}"
                f"  [{self.H.X} operations, {self.H.W} wires]")

    def __repr__(self) -> str:
        return f"<Diagram {self}>"

    def __call__(self, *args: "Var") -> tuple["Var", ...]:
        """Inline this diagram into the diagram being traced."""
        return call(self, *args)


def sequential(ds: Sequence[OH], name: str | None = None) -> Diagram:
    """``ds[0] >> ds[1] >> … >> ds[-1]`` in one step: linear in the total size.

    Repeated ``>>`` copies the growing diagram each time (quadratic for deep
    models); this tensors all pieces and glues every interface with a single
    coequalizer.
    """
    if not ds:
        raise ValueError("sequential needs at least one diagram")
    names = [getattr(d, "name", "diagram") for d in ds]
    for i, (f, g) in enumerate(zip(ds[:-1], ds[1:])):
        a, b = f.H.w.table[f.t.table], g.H.w.table[g.s.table]
        if len(a) != len(b) or not np.array_equal(a, b):
            raise TypeMismatch(
                f"cannot compose {_short(names[i])} >> {_short(names[i + 1])} (positions {i}, {i + 1}): "
                f"{_short(names[i])} outputs {format_types(Diagram.of(f).target_types)} but "
                f"{_short(names[i + 1])} expects {format_types(Diagram.of(g).source_types)}")
    ds = _parts(ds, name)
    offs = np.zeros(len(ds) + 1, dtype=np.int64)
    np.cumsum([d.H.W for d in ds], out=offs[1:])
    W = int(offs[-1])
    H = HG.coproduct_list([d.H for d in ds])
    ga = np.concatenate([offs[i] + d.t.table.astype(np.int64) for i, d in enumerate(ds[:-1])] + [np.zeros(0, np.int64)])
    gb = np.concatenate([offs[i + 1] + d.s.table.astype(np.int64) for i, d in enumerate(ds[1:])] + [np.zeros(0, np.int64)])
    q = FF(W, ga.astype(DTYPE)).coequalizer(FF(W, gb.astype(DTYPE)))
    H = H.coequalize_vertices(q)
    s = FF(W, (offs[0] + ds[0].s.table).astype(DTYPE)) >> q
    t = FF(W, (offs[-2] + ds[-1].t.table.astype(np.int64)).astype(DTYPE)) >> q
    return Diagram.of(OH(s, t, H), name or " >> ".join(names[:3]) + (" >> …" if len(names) > 3 else ""))


def _parts(ds: Sequence[OH], name: str | None) -> list[OH]:
    """The parts of a :func:`sequential` as definitions: repeated names numbered (``block0``, ``block1``),
    all under ``segment(name)`` when a name is given."""
    segs = [_top(d) for d in ds]
    count = collections.Counter(segs)
    seen: dict[str, int] = {}
    out = []
    for d, s in zip(ds, segs):
        if count[s] > 1:
            k = seen[s] = seen.get(s, -1) + 1
            d = _as_part(d, f"{s}{k}")
        out.append(relabel(d, segment(name)) if name else d)
    return out


def identity(types: Sequence[NdArrayType], name: str = "id") -> Diagram:
    """The identity on a list of wire types."""
    return Diagram.of(OH.identity(labels(types), _empty()), name)


# ------------------------------------------------------------------ tracing
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

    # arithmetic sugar: see circuitgrad.ops for the functions
    def __add__(self, other): from . import ops; return ops.add(self, other)
    def __radd__(self, other): from . import ops; return ops.add(other, self)
    def __sub__(self, other): from . import ops; return ops.sub(self, other)
    def __rsub__(self, other): from . import ops; return ops.sub(other, self)
    def __mul__(self, other): from . import ops; return ops.mul(self, other)
    def __rmul__(self, other): from . import ops; return ops.mul(other, self)
    def __neg__(self): from . import ops; return ops.neg(self)
    def __matmul__(self, other): from . import ops; return ops.matmul(self, other)
    def __truediv__(self, other): from . import ops; return ops.div(self, other)
    def __rtruediv__(self, other): from . import ops; return ops.div(other, self)
    def __pow__(self, k): from . import ops; return ops.power(self, k)

    def sum(self, axis: int | None = None, **numpy) -> "Var":
        """``ops.sum(x, axis)``: over one axis, or all (``axis=None``; also what ``np.sum(x)`` calls)."""
        from . import ops
        if any(v is not None for v in numpy.values()):
            raise TypeError(f"x.sum: only axis= is supported on traced values, got {sorted(numpy)}")
        return ops.sum(self, axis)

    def mean(self, axis: int | None = None) -> "Var":
        """``ops.mean(x, axis)``."""
        from . import ops
        return ops.mean(self, axis)

    def max(self, axis: int = -1) -> "Var":
        """``ops.max(x, axis)``: the maximum along one axis."""
        from . import ops
        return ops.max(self, axis)

    def reshape(self, *shape) -> "Var":
        """``ops.reshape(x, shape)`` (``x.reshape(2, 3)`` or ``x.reshape((2, 3))``)."""
        from . import ops
        return ops.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)

    def __getitem__(self, key) -> "Var":
        """Basic NumPy indexing: ints, slices (positive steps), ``...`` and ``None`` (:func:`ops.getitem`)."""
        from . import ops
        return ops.getitem(self, key)

    @property
    def T(self) -> "Var":
        from . import ops
        return ops.transpose(self)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    def __array_ufunc__(self, ufunc, method: str, *inputs, **kwargs):
        """NumPy arithmetic on traced values (``np.float32(2) * x``) goes to :mod:`circuitgrad.ops`."""
        from . import ops
        name = _UFUNC_OPS.get(ufunc.__name__) if method == "__call__" and not kwargs else None
        other = next((v for v in inputs if not isinstance(v, (Var,) + ops.Number)), None)
        if name is not None and other is None:
            return getattr(ops, name)(*inputs)
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
    "__rpow__": ("c ** x", _NOT_YET, "there is no elementwise exponential yet"),
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

    _stack: list["Builder"] = []

    def __init__(self) -> None:
        self.pieces: list[OH] = []
        self.n_wires = 0
        self.glue_a: list[int] = []
        self.glue_b: list[int] = []

    @classmethod
    def current(cls) -> "Builder":
        if not cls._stack:
            raise RuntimeError("no diagram is being traced: call this inside circuitgrad.trace(...)")
        return cls._stack[-1]

    @contextlib.contextmanager
    def active(self):
        Builder._stack.append(self)
        try:
            yield self
        finally:
            Builder._stack.pop()

    def _add(self, piece: OH) -> int:
        offset = self.n_wires
        self.pieces.append(piece)
        self.n_wires += piece.H.W
        return offset

    def inputs(self, types: Sequence[NdArrayType]) -> list[Var]:
        """Fresh source wires of the given types (one discrete piece for all)."""
        offset = self._add(OH.identity(labels(types), _empty()))
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
        H = HG.coproduct_list([p.H for p in self.pieces]) if self.pieces else HG.empty(_empty(), _empty())
        if self.glue_a:
            a = FF(W, np.asarray(self.glue_a, dtype=DTYPE))
            b = FF(W, np.asarray(self.glue_b, dtype=DTYPE))
            q = a.coequalizer(b)
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
    outer = _SCOPE[:]
    _SCOPE[:] = [] if path == "" else [segment(name if path is None else path)]
    try:
        with b.active():
            try:
                out = fn(*args)
            except TypeMismatch as e:
                raise TypeMismatch(f"in {name}: {e}") from None
    finally:
        _SCOPE[:] = outer
    return b.build(args, _outputs(out, name), name)


def _outputs(out: object, name: str) -> tuple[Var, ...]:
    """The traced function's result as a tuple of Vars, or a ``TypeError`` saying what it returned."""
    if isinstance(out, Var):
        return (out,)
    if isinstance(out, (tuple, list)) and all(isinstance(v, Var) for v in out):
        return tuple(out)
    if isinstance(out, (tuple, list)):
        i, v = next((i, v) for i, v in enumerate(out) if not isinstance(v, Var))
        got = f"a {type(out).__name__} whose item {i} is {_short(f'{type(v).__name__} {v!r}')}"
    elif out is None:
        got = "None (a missing return?)"
    else:
        got = _short(f"{type(out).__name__} {out!r}")
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


# ------------------------------------------------------------- normal forms
def check_producers(f: OH) -> None:
    """Raise :class:`IllFormedDiagram` unless every wire is produced exactly once."""
    outs = np.concatenate([f.s.table, f.H.t.values.table]).astype(np.int64)
    n = np.bincount(outs, minlength=f.H.W)
    bad = np.flatnonzero(n != 1)
    if len(bad):
        w = int(bad[0])
        what = "no producer" if n[w] == 0 else f"{n[w]} producers"
        raise IllFormedDiagram(f"{_short(getattr(f, 'name', 'diagram'))}: wire {w} of type "
                               f"{type_of(f.H.w.table[w])} has {what}; a wire must be produced exactly "
                               f"once (by an operation or as a source)")


def monogamous(f: OH) -> Diagram:
    """An equal diagram in which every wire has exactly one producer and one consumer.

    Wires used ``k != 1`` times get an explicit :class:`Copy` ``(T, k)``
    (``k = 0`` discards).  Raises :class:`IllFormedDiagram` if a wire has
    no producer or several.  Vectorised: no Python loop over wires.
    """
    W = f.H.W
    name = getattr(f, "name", "diagram")
    check_producers(f)
    ns = len(f.H.s.values)
    cons = np.concatenate([f.H.s.values.table, f.t.table]).astype(np.int64)
    deg = np.bincount(cons, minlength=W)
    fan = np.flatnonzero(deg != 1)
    if len(fan) == 0:
        return Diagram.of(f, name)
    occ = np.flatnonzero(deg[cons] != 1)                 # occurrences to rewire
    new = W + np.arange(len(occ))
    cons2 = cons.copy()
    cons2[occ] = new
    order = np.argsort(cons[occ], kind="stable")          # group by wire (ascending = fan order)
    copy_targets = new[order]
    wl = f.H.w.table
    key = wl[fan].astype(np.int64) * (1 << 20) + deg[fan]
    ukey, inv = np.unique(key, return_inverse=True)
    ulab = np.array([intern_op(Copy(type_of(k >> 20), int(k & ((1 << 20) - 1)))) for k in ukey], dtype=DTYPE)
    H = HG(
        s=IC(FF(None, np.concatenate([f.H.s.sources.table, np.ones(len(fan), DTYPE)])),
             FF(W + len(occ), np.concatenate([cons2[:ns], fan]).astype(DTYPE))),
        t=IC(FF(None, np.concatenate([f.H.t.sources.table, deg[fan].astype(DTYPE)])),
             FF(W + len(occ), np.concatenate([f.H.t.values.table, copy_targets]).astype(DTYPE))),
        w=FF(None, np.concatenate([wl, wl[cons[occ]]]).astype(DTYPE)),
        x=FF(None, np.concatenate([f.H.x.table, ulab[inv]]).astype(DTYPE)),
    )
    return Diagram.of(OH(FF(H.W, f.s.table), FF(H.W, cons2[ns:].astype(DTYPE)), H), name)


def kinds(f: OH, cls: type) -> np.ndarray:
    """Boolean mask of the edges of ``f`` whose operation is an instance of ``cls``."""
    u, inv = np.unique(f.H.x.table, return_inverse=True)
    return np.array([isinstance(op_of(l), cls) for l in u], dtype=bool)[inv] if len(u) else np.zeros(0, bool)


def unbind_parameters(f: OH) -> tuple[Diagram, list[Parameter]]:
    """Turn every :class:`Parameter` edge into a new source wire, in edge order.

    ``f : A → B`` with parameters ``P₁ … Pₖ`` inside becomes
    ``P₁ ⊗ … ⊗ Pₖ ⊗ A → B``.
    """
    name = getattr(f, "name", "diagram")
    mask = kinds(f, Parameter)
    if not mask.any():
        return Diagram.of(f, name), []
    idx = np.flatnonzero(mask)
    params = [op_of(l) for l in f.H.x.table[idx]]
    tsrc = f.H.t.sources.table
    seg = np.repeat(mask, tsrc)
    pw = f.H.t.values.table[seg]                       # one output wire per parameter
    keep = ~mask
    H = HG(
        s=IC(FF(None, f.H.s.sources.table[keep]), f.H.s.values),
        t=IC(FF(None, tsrc[keep]), FF(f.H.W, f.H.t.values.table[~seg])),
        w=f.H.w, x=FF(None, f.H.x.table[keep]))
    s = FF(f.H.W, np.concatenate([pw, f.s.table]).astype(DTYPE))
    return Diagram.of(OH(s, f.t, H), name), params
