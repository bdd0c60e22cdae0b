"""Peephole simplification of SSA programs, shared by every backend.

The reverse derivative of a definition is built mechanically and contains
patterns such as ``x + 0`` (the zero cotangent of a Heaviside step) or
``-(c·g)`` (a learning-rate scale followed by the negation of a
subtraction).  :func:`simplify` removes them before any backend sees the
program, so the NumPy code, the FPGA sequencer and the ZK circuit all run
the same, shorter program::

    Add(x, Constant 0)        →  x
    Neg(Scale(x, c))          →  Scale(x, −c)      (when the Scale has no other use)
    Neg(Neg(x))               →  x
    Scale(x, 1)               →  x
    f(x, y) twice             →  f(x, y) once     (common subexpressions; ``x·y`` = ``y·x``)

The last one matters most to reverse derivatives: the rule of ``Mul`` applied to
``x·x`` emits ``dy·x`` twice, and a training step's ZK circuit would prove both.
Parameters are never merged (two of one shape are distinct by construction).

In fixed point one more rewrite turns a product summed along the last axis
into one contraction (a dot product per row)::

    SumTo(Mul(x, y))          →  Reshape(BatchMatMul(x[..., None, :], y[..., :, None]))

(when the product has no other use and the sum keeps every axis but the last).
A sum of rounded products becomes one rounding of the exact sum: more
accurate, and cheaper everywhere: a ZK circuit proves a dot product with one
constraint per product and a single range-checked rescale per row (a
rounded product costs a constraint and three lookups), the FPGA runs it as
one ``mac`` on its lanes. Layer norm's variance, the reverse derivatives of
softmax, of layer norm and of spherical attention are such sums.

The fixed-point semantics are defined on the simplified program (the
interpreter runs it too), so all targets still agree bit for bit.
"""
from __future__ import annotations

from . import primitives as P
from .pattern import Graph, Pat, Rules, X, match, read_counts
from .schedule import Apply, Program
from .types import Fixed

__all__ = ["simplify", "PEEPHOLES", "CONTRACTION"]

#: the peepholes above, first match first: ``("alias", variable)`` (the result is that variable) or
#: ``("negate", scale)`` (the Scale instruction absorbs the negation)
PEEPHOLES = Rules([
    (Pat(P.Add, Pat(P.Constant, when=lambda c: c.op.value == 0.0), X("x"), commute=True),
     lambda a, b: ("alias", b["x"])),
    (Pat(P.Scale, X("x"), when=lambda a: a.op.c == 1.0), lambda a, b: ("alias", b["x"])),
    (Pat(P.Neg, Pat(P.Neg, X("x"))), lambda a, b: ("alias", b["x"])),
    (Pat(P.Neg, Pat(P.Scale, once=True, name="scale")), lambda a, b: ("negate", b["scale"])),
])

#: a product summed along the last axis, in fixed point, the product read only there
CONTRACTION = Pat(P.SumTo, Pat(P.Mul, X("x"), X("y"), once=True, name="mul"),
                  when=lambda a: isinstance(a.op.T.dtype, Fixed) and a.op.T.ndim >= 1
                  and a.op.S.shape == a.op.T.shape[:-1] + (1,))


def simplify(p: Program) -> Program:
    """The program with the rewrites above applied and dead instructions removed."""
    g = Graph({}, read_counts(p))        # the output's producers, filled as it is built
    producer, uses = g.producer, g.reads
    pos: dict[int, int] = {}          # result variable -> index in instrs
    subst: dict[int, int] = {}
    instrs: list[Apply] = []

    def res(v: int) -> int:
        while v in subst:
            v = subst[v]
        return v

    seen: dict[tuple, Apply] = {}         # (op, args) -> its first occurrence

    def alias(r: int, s: int) -> None:
        """``r`` is ``s`` from now on; ``s`` inherits ``r``'s uses (an upper bound: it stays safe)."""
        subst[r] = s
        uses[s] = uses.get(s, 0) + uses.get(r, 0)

    for a in p.instrs:
        args = tuple(res(x) for x in a.args)
        op = a.op
        key = None if not op.pure else (op, _canonical(op, args))
        if key is not None and key in seen:
            for r, s in zip(a.results, seen[key].results):
                alias(r, s)
            continue
        hit = PEEPHOLES.first(a, g, args)
        if hit is not None and hit[0] == "alias":
            alias(a.results[0], hit[1])
            continue
        if hit is not None:                       # Neg(Scale(x, c)) → Scale(x, −c), in the Scale's place
            src = hit[1]
            new = Apply(P.Scale(src.op.T, -src.op.c), src.args, a.results, src.path)
            seen.pop((src.op, src.args), None)       # its result is gone: no later Scale may reuse it
            seen.setdefault((new.op, new.args), new)
            instrs[pos[args[0]]] = new
            producer[a.results[0]] = new
            pos[a.results[0]] = pos[args[0]]
            continue
        new = Apply(op, args, a.results, a.path)
        if key is not None:
            seen[key] = new
        instrs.append(new)
        for r in a.results:
            producer[r] = new
            pos[r] = len(instrs) - 1
    outputs = [res(v) for v in p.outputs]
    return _contract(_dce(Program(p.types, list(p.inputs), outputs, instrs, p.name)))


def _contract(p: Program) -> Program:
    """``SumTo(Mul(x, y))`` along the last axis → one contraction, in fixed point (see the module docs)."""
    g = Graph.of(p)
    types = list(p.types)
    instrs: list[Apply] = []
    dropped: set[int] = set()

    def fresh(t) -> int:
        types.append(t)
        return len(types) - 1

    for a in p.instrs:
        op = a.op
        b = match(CONTRACTION, a, g)
        if b is None:
            instrs.append(a)
            continue
        m = b["mul"]
        T, n = op.T, op.T.shape[-1]
        x, y = m.args
        lead = T.shape[:-1]
        row, col = T.with_shape(lead + (1, n)), T.with_shape(lead + (n, 1))
        xr, yr = fresh(row), fresh(col)
        instrs += [Apply(P.Reshape(T, row.shape), (x,), (xr,), a.path), Apply(P.Reshape(T, col.shape), (y,), (yr,), a.path)]
        dot = fresh(T.with_shape(lead + (1, 1)))
        mm = P.BatchMatMul(row, col) if lead else P.MatMul(row, col)
        instrs += [Apply(mm, (xr, yr), (dot,), a.path), Apply(P.Reshape(types[dot], op.S.shape), (dot,), a.results, a.path)]
        dropped.add(id(m))
    if not dropped:
        return p
    kept = [a for a in instrs if id(a) not in dropped]
    return Program(types, list(p.inputs), list(p.outputs), kept, p.name)


def _canonical(op: P.Primitive, args: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(args)) if op.commutative else args


def _dce(p: Program) -> Program:
    live = set(p.outputs)
    keep: list[Apply] = []
    for a in reversed(p.instrs):
        if any(r in live for r in a.results):
            keep.append(a)
            live.update(a.args)
    keep.reverse()
    return Program(p.types, p.inputs, p.outputs, keep, p.name)
