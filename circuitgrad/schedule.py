"""From a diagram to one typed SSA program that every backend consumes.

:func:`schedule` checks that the diagram is a function (every wire produced
exactly once, no cycle), layers its operations with a vectorised Kahn
algorithm (all operations of one layer are independent: data-parallel),
removes operations whose results reach no output, and numbers the surviving
wires as SSA variables::

    v2 = MatMul(v1, v0)          # float32[8, 16]
    v3 = Heaviside(v2)           # float32[8, 16]
    ...

Each level of the layering costs a constant number of NumPy calls, so the
whole pass is linear in the size of the diagram (no Python loop per wire).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .diagram import IllFormedDiagram, short, check_producers
from .provenance import segment
from .primitives import Primitive, op_of, path_of
from .types import Dtype, Index, NdArrayType, type_of

__all__ = ["Apply", "Program", "schedule", "layering", "retype"]


@dataclass(frozen=True)
class Apply:
    """``results = op(*args)``, with ``args``/``results`` SSA variable numbers; ``path`` is the
    definition that created it (``"gpt/block1/attention/causal_softmax_attention"``, ``""`` if none)."""
    op: Primitive
    args: tuple[int, ...]
    results: tuple[int, ...]
    path: str = ""


@dataclass
class Program:
    """A straight-line typed SSA program.

    ``types[v]`` is the type of variable ``v``; ``inputs`` are the variables
    bound by the caller (in order), ``outputs`` those returned.
    """
    types: list[NdArrayType]
    inputs: list[int]
    outputs: list[int]
    instrs: list[Apply]
    name: str = "program"
    layers: list[int] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        ins = ", ".join(f"v{v}: {self.types[v]}" for v in self.inputs)
        lines = [f"def {self.name}({ins}):"]
        for a in self.instrs:
            lhs = ", ".join(f"v{r}" for r in a.results) or "_"
            lines.append(f"    {lhs} = {a.op.name}({', '.join(f'v{x}' for x in a.args)})"
                         f"    # {', '.join(str(self.types[r]) for r in a.results)}"
                         + (f"  @ {a.path}" if a.path else ""))
        lines.append(f"    return ({', '.join(f'v{v}' for v in self.outputs)})")
        return "\n".join(lines)

    def site(self, i: int) -> str:
        """``Exp(float32[8, 8]) at instruction 12 of step (gpt/block0/attention/causal_softmax_attention)``: where
        instruction ``i`` is, for error messages."""
        a = self.instrs[i]
        args = ", ".join(str(self.types[x]) for x in a.args)
        at = f" ({a.path})" if a.path and a.path != segment(self.name) else ""
        return f"{a.op.name}({args}) at instruction {i} of {self.name}{at}"

    def producers(self) -> dict[int, int]:
        """``{variable: index of the instruction that defines it}`` (inputs are absent)."""
        return {r: i for i, a in enumerate(self.instrs) for r in a.results}

    def uses(self) -> dict[int, list[int]]:
        """``{variable: indices of the instructions that read it}``, in program order."""
        out: dict[int, list[int]] = {}
        for i, a in enumerate(self.instrs):
            for x in a.args:
                out.setdefault(x, []).append(i)
        return out

    def count(self) -> dict[str, int]:
        """Number of instructions per primitive name."""
        out: dict[str, int] = {}
        for a in self.instrs:
            out[a.op.name] = out.get(a.op.name, 0) + 1
        return out


def _segments(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ptr, owner)``: CSR pointers and the segment of every element."""
    ptr = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    owner = np.repeat(np.arange(len(sizes)), sizes)
    return ptr, owner


def _gather(ptr: np.ndarray, segs: np.ndarray) -> np.ndarray:
    """Indices of all elements of segments ``segs`` (a segmented arange)."""
    lens = ptr[segs + 1] - ptr[segs]
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(ptr[segs] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return starts + np.arange(total)


def _producers(f) -> np.ndarray:
    """``prod[w]``: the edge producing wire ``w``, or ``-1`` for a source wire."""
    check_producers(f)
    tptr, towner = _segments(f.H.t.sources.table.astype(np.int64))
    outs = f.H.t.values.table.astype(np.int64)
    W = f.H.W
    prod = np.full(W, -1, dtype=np.int64)
    prod[outs] = towner
    return prod


def layering(f) -> np.ndarray:
    """``layer[e]`` for every edge: a topological layering (Kahn, level by level)."""
    X = f.H.X
    prod = _producers(f)
    sptr, sowner = _segments(f.H.s.sources.table.astype(np.int64))
    dep_from = prod[f.H.s.values.table.astype(np.int64)]
    keep = dep_from >= 0
    src, dst = dep_from[keep], sowner[keep]
    order = np.argsort(src, kind="stable")
    src, dst = src[order], dst[order]
    ptr = np.zeros(X + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=X), out=ptr[1:])
    indeg = np.bincount(dst, minlength=X)
    layer = np.full(X, -1, dtype=np.int64)
    frontier = np.flatnonzero(indeg == 0)
    depth = 0
    while len(frontier):
        layer[frontier] = depth
        succ = dst[_gather(ptr, frontier)]
        np.subtract.at(indeg, succ, 1)
        frontier = np.unique(succ[indeg[succ] == 0])
        depth += 1
    if (layer < 0).any():
        e = int(np.flatnonzero(layer < 0)[0])
        raise IllFormedDiagram(f"{short(getattr(f, 'name', 'diagram'))}: the diagram has a cycle through "
                               f"operation {op_of(f.H.x.table[e])}")
    return layer


def schedule(f, name: str | None = None) -> Program:
    """The SSA program of diagram ``f`` (live operations only, in layer order)."""
    name = name or getattr(f, "name", "program")
    X, W = f.H.X, f.H.W
    layer = layering(f)
    sizes_s = f.H.s.sources.table.astype(np.int64)
    sizes_t = f.H.t.sources.table.astype(np.int64)
    sptr, _ = _segments(sizes_s)
    tptr, _ = _segments(sizes_t)
    svals = f.H.s.values.table.astype(np.int64)
    tvals = f.H.t.values.table.astype(np.int64)

    # dead-code elimination, one layer at a time from the last
    needed = np.zeros(W, dtype=bool)
    needed[f.t.table.astype(np.int64)] = True
    live = np.zeros(X, dtype=bool)
    by_layer = np.argsort(layer, kind="stable")
    bounds = np.searchsorted(layer[by_layer], np.arange(layer.max() + 2 if X else 1))
    for k in range(len(bounds) - 2, -1, -1):
        edges = by_layer[bounds[k]:bounds[k + 1]]
        if not len(edges):
            continue
        occ = _gather(tptr, edges)
        owner = np.repeat(edges, sizes_t[edges])
        hit = np.unique(owner[needed[tvals[occ]]])
        live[hit] = True
        needed[svals[_gather(sptr, hit)]] = True

    order = by_layer[live[by_layer]]
    var = np.full(W, -1, dtype=np.int64)
    inputs = f.s.table.astype(np.int64)
    var[inputs] = np.arange(len(inputs))
    defined = tvals[_gather(tptr, order)]
    var[defined] = len(inputs) + np.arange(len(defined))
    wl = f.H.w.table
    nvars = len(inputs) + len(defined)
    types = [None] * nvars
    for w in np.concatenate([inputs, defined]):
        types[var[w]] = type_of(wl[w])
    instrs = []
    xs = f.H.x.table
    for e in order:
        instrs.append(Apply(op_of(xs[e]),
                            tuple(int(v) for v in var[svals[sptr[e]:sptr[e + 1]]]),
                            tuple(int(v) for v in var[tvals[tptr[e]:tptr[e + 1]]]),
                            path_of(xs[e])))
    outputs = [int(v) for v in var[f.t.table.astype(np.int64)]]
    return Program(types, [int(v) for v in var[inputs]], outputs, instrs, name, [int(layer[e]) for e in order])


# ------------------------------------------------------------------ retyping
def retype_type(v, dtype: Dtype):
    """A wire type in ``dtype``; index types (token ids) keep theirs, other values are unchanged."""
    if isinstance(v, NdArrayType) and not isinstance(v.dtype, Index):
        return v.with_dtype(dtype)
    return v


def retype_op(op: Primitive, dtype: Dtype) -> Primitive:
    """``op`` with every wire type's dtype replaced by ``dtype``."""
    changes = {f.name: retype_type(getattr(op, f.name), dtype) for f in dataclasses.fields(op)
               if isinstance(getattr(op, f.name), NdArrayType)}
    return dataclasses.replace(op, **changes) if changes else op


def retype(p: Program, dtype: Dtype) -> Program:
    """The same program computing in ``dtype`` (a functor on objects and arrows)."""
    cache: dict[Primitive, Primitive] = {}
    instrs = []
    for a in p.instrs:
        op = cache.get(a.op)
        if op is None:
            op = cache[a.op] = retype_op(a.op, dtype)
        instrs.append(Apply(op, a.args, a.results, a.path))
    return Program([retype_type(t, dtype) for t in p.types], list(p.inputs), list(p.outputs), instrs,
                   p.name, list(p.layers))
