"""Morphisms: open hypergraphs with typed wires, built by composition or tracing.

A :class:`Diagram` is an open hypergraph (:mod:`circuitgrad.open_hypergraph`) whose wire labels
are interned :class:`~circuitgrad.types.NdArrayType` s and whose edge labels are
interned :class:`~circuitgrad.primitives.Primitive` s::

        ┌───────┐      ┌──────┐
    x ──┤ dense ├──────┤ relu ├── y          dense(8,4,16) >> relu(8,16)
        └───────┘      └──────┘

``f >> g`` composes, ``f @ g`` tensors; both check types and name the
operations involved when they do not fit.  Diagrams are most easily written by
*tracing* a Python function over symbolic wires (:func:`circuitgrad.tracing.trace`)::

    f = trace(lambda x, y: (x * y + x,), [T, T], name="f")
"""
from __future__ import annotations

import collections
from typing import Callable, Iterable, Sequence

import numpy as np

from .finite_function import DTYPE, FiniteFunction as FF, IndexedCoproduct as IC
from .open_hypergraph import Hypergraph as HG, OpenHypergraph as OH
from .provenance import current_builder, segment
from .primitives import Parameter, TypeMismatch, Copy, intern_op, op_of, path_of
from .types import NdArrayType, format_types, intern_type, type_of

__all__ = [
    "Diagram", "identity", "sequential", "monogamous", "unbind_parameters", "IllFormedDiagram", "labels", "relabel",
    "coequalizer", "fresh_parameters",
]

_MAX_NAME = 60


class IllFormedDiagram(ValueError):
    """A diagram that is not a function: a wire with no or several producers, or a cycle."""


def labels(types: Iterable[NdArrayType]) -> FF:
    """The label function ``n → Σ₀`` of a list of wire types."""
    return FF(None, np.fromiter((intern_type(t) for t in types), dtype=DTYPE))


def empty_labels() -> FF:
    return FF(None, np.zeros(0, dtype=DTYPE))


def short(name: str) -> str:
    return name if len(name) <= _MAX_NAME else name[: _MAX_NAME - 1] + "…"


# --------------------------------------------------------------- provenance
def map_paths(f: OH, new_path: Callable[[str], str]) -> OH:
    """``f`` with every edge at path ``p`` moved to ``new_path(p)`` (one relabelling of the edge labels)."""
    if not f.H.X:
        return f
    u, inv = np.unique(f.H.x.table, return_inverse=True)
    lab = np.fromiter((intern_op(op_of(l), new_path(path_of(l))) for l in u), dtype=DTYPE, count=len(u))
    H = HG(f.H.s, f.H.t, f.H.w, FF(None, lab[inv].astype(DTYPE)))
    return Diagram.of(OH(f.s, f.t, H), getattr(f, "name", "diagram"))


#: glue pairs above which :func:`coequalizer` leaves the work to SciPy's connected components
SPARSE_ABOVE = 1024


def coequalizer(a: FF, b: FF) -> FF:
    """``a.coequalizer(b)``: the quotient ``q : W → Q`` identifying ``a[i]`` with ``b[i]``, classes numbered by
    their smallest wire (as SciPy numbers connected components), computed in NumPy for small gluings.

    Label propagation with pointer jumping: each wire's label falls to the smallest wire of its class.
    Tracing and ``>>`` glue a few wires at a time, where building SciPy's sparse matrix cost 0.5 ms a call.
    """
    W, s, t = a.target, a.table.astype(np.int64), b.table.astype(np.int64)
    if len(s) > SPARSE_ABOVE:
        return a.coequalizer(b)
    lab = np.arange(W, dtype=np.int64)
    while True:
        low = np.minimum(lab[s], lab[t])
        new = lab.copy()
        np.minimum.at(new, s, low)
        np.minimum.at(new, t, low)
        while True:                                   # pointer jumping: every label to its class's root
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, lab):
            break
        lab = new
    roots, q = np.unique(lab, return_inverse=True)
    return FF(len(roots), q.astype(DTYPE))


def relabel(f: OH, prefix: str) -> "Diagram":
    """``f`` as a part of the definition at ``prefix``: every path ``p`` becomes ``prefix/p``."""
    if not prefix:
        return Diagram.of(f, getattr(f, "name", "diagram"))
    return map_paths(f, lambda p: f"{prefix}/{p}" if p else prefix)


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
    return map_paths(f, new)


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
                f"cannot compose {short(f.name)} >> {short(getattr(g, 'name', 'diagram'))}: "
                f"{short(f.name)} outputs {format_types(f.target_types)} but "
                f"{short(getattr(g, 'name', 'diagram'))} expects {format_types(Diagram.of(g).source_types)}")
        q = coequalizer(f.t.inject0(g.H.W), g.s.inject1(f.H.W))    # OH.compose, with the coequalizer above
        h = OH(f.s.inject0(g.H.W) >> q, g.t.inject1(f.H.W) >> q, (f.H + g.H).coequalize_vertices(q))
        return Diagram.of(h, f"{f.name} >> {getattr(g, 'name', 'diagram')}")

    def tensor(f: "Diagram", g: "Diagram") -> "Diagram":
        return Diagram.of(OH.tensor(f, g), f"({f.name}) @ ({getattr(g, 'name', 'diagram')})")

    def __str__(self) -> str:
        return (f"{short(self.name)} : {format_types(self.source_types)} → {format_types(self.target_types)}"
                f"  [{self.H.X} operations, {self.H.W} wires]")

    def __repr__(self) -> str:
        return f"<Diagram {self}>"

    def __call__(self, *args):
        """Inline this diagram into the diagram being traced (``tracing.call``): ``args`` are its wires there."""
        b = args[0].builder if args and hasattr(args[0], "builder") else current_builder()
        return b.call(self, *args)


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
                f"cannot compose {short(names[i])} >> {short(names[i + 1])} (positions {i}, {i + 1}): "
                f"{short(names[i])} outputs {format_types(Diagram.of(f).target_types)} but "
                f"{short(names[i + 1])} expects {format_types(Diagram.of(g).source_types)}")
    ds = _parts(ds, name)
    offs = np.zeros(len(ds) + 1, dtype=np.int64)
    np.cumsum([d.H.W for d in ds], out=offs[1:])
    W = int(offs[-1])
    H = HG.coproduct_list([d.H for d in ds])
    ga = np.concatenate([offs[i] + d.t.table.astype(np.int64) for i, d in enumerate(ds[:-1])] + [np.zeros(0, np.int64)])
    gb = np.concatenate([offs[i + 1] + d.s.table.astype(np.int64) for i, d in enumerate(ds[1:])] + [np.zeros(0, np.int64)])
    q = coequalizer(FF(W, ga.astype(DTYPE)), FF(W, gb.astype(DTYPE)))
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
    return Diagram.of(OH.identity(labels(types), empty_labels()), name)


# ------------------------------------------------------------------ tracing
# ------------------------------------------------------------- normal forms
def check_producers(f: OH) -> None:
    """Raise :class:`IllFormedDiagram` unless every wire is produced exactly once."""
    outs = np.concatenate([f.s.table, f.H.t.values.table]).astype(np.int64)
    n = np.bincount(outs, minlength=f.H.W)
    bad = np.flatnonzero(n != 1)
    if len(bad):
        w = int(bad[0])
        what = "no producer" if n[w] == 0 else f"{n[w]} producers"
        raise IllFormedDiagram(f"{short(getattr(f, 'name', 'diagram'))}: wire {w} of type "
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


def fresh_parameters(d: Diagram) -> Diagram:
    """A copy of ``d`` whose parameters are new ones (same type, label, initialiser and definition path).

    Another layer of the same shape, without tracing it again: the wires, the edges and every other
    operation are ``d``'s, so the copy is the diagram a new trace would build.
    """
    x = d.H.x.table
    where = np.flatnonzero(kinds(d, Parameter))
    new = x.copy()
    for i in where:
        op = op_of(int(x[i]))
        new[i] = intern_op(Parameter(op.T, op.label, op.init), path_of(int(x[i])))
    return Diagram.of(OH(d.s, d.t, HG(d.H.s, d.H.t, d.H.w, FF(d.H.x.target, new))), d.name)


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
