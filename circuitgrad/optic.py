"""The reverse derivative as an optic functor over the whole hypergraph.

Every primitive ``f : A → B`` has a rule with a residual ``M``, a forward map
and a reverse map, each itself a diagram of primitives::

          ┌─────┐                     ┌─────┐
    A ────┤ fwd ├──── B        M ─────┤     │
          │     ├──── M        B' ────┤ rev ├──── A'
          └─────┘                     └─────┘

The :class:`ReverseDerivative` functor (an :class:`~circuitgrad.functor.Optic`,
Wilson & Zanasi, *Data-Parallel Algorithms for String Diagrams*, §10) maps
all operations at once: the forward and reverse maps of every edge are
tensored in a single ``tensor_list`` (rules are cached per operation, so a
64-layer MLP builds only a handful of distinct rule diagrams) and wired up by
a constant number of compositions with spiders.  Its cost is linear in the
size of the model.  ``rdiff(f) : A ⊗ B' → A'`` discards the forward outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import ops
from . import primitives as P
from .functor import FrobeniusFunctor, Optic
from .diagram import DTYPE, FF, IC, OH, Diagram, empty_labels, map_paths, labels, monogamous
from .tracing import apply, trace
from .types import NdArrayType

__all__ = ["REVERSE_RULES", "Rule", "rule_for", "rdiff", "lens", "ReverseDerivative"]


@dataclass(frozen=True)
class Rule:
    """``fwd : A → B ⊗ M`` and ``rev : M ⊗ B' → A'`` of one operation."""
    residual: tuple[NdArrayType, ...]
    fwd: Diagram
    rev: Diagram


def _lens(op, residual, fwd: Callable, rev: Callable) -> Rule:
    """Trace ``fwd(*a) -> (b, m)`` and ``rev(*m, *db) -> da`` into a :class:`Rule`."""
    def f(*a):
        b, m = fwd(*a)
        return tuple(b) + tuple(m)
    return Rule(tuple(residual),
                trace(f, op.source, name=f"fwd[{op.name}]"),
                trace(rev, tuple(residual) + op.target, name=f"rev[{op.name}]"))


def _self(op, *a):
    return apply(op, *a)


def _copy(op: P.Copy) -> Rule:
    def rev(*dys):
        if not dys:
            return ops.constant(op.T, 0.0)
        acc = dys[0]
        for d in dys[1:]:
            acc = ops.add(acc, d)
        return acc
    return _lens(op, (), lambda x: ((x,) * op.n, ()), rev)


def _nullary(op) -> Rule:          # Parameter, Constant: nothing flows back
    return _lens(op, (), lambda: (_self(op), ()), lambda dy: ())


def _linear(back: Callable) -> Callable:
    """Rule of a linear map whose reverse map is ``back(op, dy)``."""
    return lambda op: _lens(op, (), lambda *a: (_self(op, *a), ()), lambda *dy: back(op, *dy))


def _mul(op: P.Mul) -> Rule:
    return _lens(op, (op.T, op.T), lambda a, b: (_self(op, a, b), (a, b)),
                 lambda a, b, dy: (dy * b, dy * a))


def _matmul(op: P.MatMul) -> Rule:
    return _lens(op, (op.A, op.B), lambda a, b: (_self(op, a, b), (a, b)),
                 lambda a, b, dy: (dy @ b.T, a.T @ dy))


def _batch_matmul(op: P.BatchMatMul) -> Rule:
    return _lens(op, (op.A, op.B), lambda a, b: (_self(op, a, b), (a, b)),
                 lambda a, b, dy: (ops.matmul(dy, ops.transpose(b)), ops.matmul(ops.transpose(a), dy)))


def _div(op: P.Div) -> Rule:
    """``y = a / b``: ``da = dy / b``, ``db = −da · y`` (residuals ``b`` and ``y``)."""
    def fwd(a, b):
        (y,) = _self(op, a, b)
        return (y,), (b, y)

    def rev(b, y, dy):
        da = ops.div(dy, b)
        return da, ops.neg(ops.mul(da, y))
    return _lens(op, (op.T, op.T), fwd, rev)


def _input_residual(back: Callable) -> Callable:
    """Rule that keeps the *input* ``x`` as residual; ``back(x, dy) -> dx``."""
    return lambda op: _lens(op, (op.T,), lambda x: (_self(op, x), (x,)), lambda x, dy: back(op, x, dy))


def _output_residual(back: Callable) -> Callable:
    """Rule that keeps the *output* ``y`` as residual; ``back(y, dy) -> dx``."""
    def rule(op):
        def fwd(x):
            (y,) = _self(op, x)
            return (y,), (y,)
        return _lens(op, op.target, fwd, lambda y, dy: back(op, y, dy))
    return rule


def _softmax_back(op, s, dy):
    keep = s.shape[:-1] + (1,)
    inner = ops.broadcast_to(ops.sum_to(dy * s, keep), s.shape)
    return s * (dy - inner)


def _logsumexp(op: P.LogSumExp) -> Rule:
    def rev(x, dy):
        d = ops.broadcast_to(ops.reshape(dy, x.shape[:-1] + (1,)), x.shape)
        return d * ops.softmax(x)
    return _lens(op, (op.T,), lambda x: (_self(op, x), (x,)), rev)


#: reverse-derivative rule constructor for every primitive class.
REVERSE_RULES: dict[type, Callable[[P.Primitive], Rule]] = {
    P.Copy: _copy,
    P.Parameter: _nullary,
    P.Constant: _nullary,
    P.Add: _linear(lambda op, dy: (dy, dy)),
    P.Neg: _linear(lambda op, dy: ops.neg(dy)),
    P.Scale: _linear(lambda op, dy: ops.scale(dy, op.c)),
    P.Transpose: _linear(lambda op, dy: ops.transpose(dy)),
    P.Reshape: _linear(lambda op, dy: ops.reshape(dy, op.T.shape)),
    P.Broadcast: _linear(lambda op, dy: ops.sum_to(dy, op.S.shape)),
    P.SumTo: _linear(lambda op, dy: ops.broadcast_to(dy, op.T.shape)),
    P.Heaviside: _linear(lambda op, dy: ops.constant(op.T, 0.0)),
    P.Mul: _mul,
    P.MatMul: _matmul,
    P.Sigmoid: _output_residual(lambda op, y, dy: dy * (y * (1.0 - y))),
    P.Tanh: _output_residual(lambda op, t, dy: dy * (1.0 - t * t)),
    P.Softmax: _output_residual(_softmax_back),
    P.LogSumExp: _logsumexp,
    P.Exp: _output_residual(lambda op, y, dy: dy * y),
    P.Log: _input_residual(lambda op, x, dy: ops.div(dy, x)),
    P.Sqrt: _output_residual(lambda op, y, dy: ops.div(ops.scale(dy, 0.5), y)),
    # −½·dy·y³, halved first: no intermediate exceeds the result where y ≥ 1 (as the two divisions' did)
    P.Rsqrt: _output_residual(lambda op, y, dy: ops.scale(dy, -0.5) * y * y * y),
    P.Div: _div,
    P.ArgMaxMask: _linear(lambda op, dy: ops.constant(op.T, 0.0)),
    P.Permute: _linear(lambda op, dy: ops.permute(dy, op.inverse())),
    P.BatchMatMul: _batch_matmul,
    P.CausalMask: _linear(lambda op, dy: ops.causal_mask(dy)),
    P.OneHot: lambda op: _lens(op, (), lambda s: (_self(op, s), ()), lambda dy: ops.constant(op.S, 0)),
    # the layout primitives come in adjoint pairs: each one's reverse map is the other
    P.Slice: _linear(lambda op, dy: _self(P.Pad(op.target[0], op.T, op.index), dy)),
    P.Pad: _linear(lambda op, dy: _self(P.Slice(op.T, op.index), dy)),
    P.Unfold: _linear(lambda op, dy: _self(P.Fold(op.T, op.kernel, op.stride, op.padding), dy)),
    P.Fold: _linear(lambda op, dy: _self(P.Unfold(op.T, op.kernel, op.stride, op.padding), dy)),
}

_BY_OP: dict[P.Primitive, Rule] = {}
_CACHE: dict[int, Rule] = {}


def _at(f: OH, path: str) -> Diagram:
    """``f`` with every operation placed at ``path``: a rule's maps inherit their operation's path."""
    return map_paths(f, lambda p: path)


def rule_for(label: int) -> Rule:
    """The (cached) rule of the edge label ``label``: its operation's rule, placed at its path."""
    r = _CACHE.get(label)
    if r is None:
        op = P.op_of(label)
        base = _BY_OP.get(op)
        if base is None:
            make = REVERSE_RULES.get(type(op))
            if make is None:
                raise NotImplementedError(f"no reverse-derivative rule for {op}")
            base = _BY_OP[op] = make(op)
        path = P.path_of(label)
        r = _CACHE[label] = Rule(base.residual, _at(base.fwd, path), _at(base.rev, path))
    return r


def _tensor(ds: list) -> OH:
    if not ds:
        return OH.unit(empty_labels(), empty_labels())
    return OH.tensor_list(ds)


class _Identity(FrobeniusFunctor):
    """Identity on objects; ``pick`` selects the fwd or rev map of each rule."""

    def __init__(self, pick: str):
        self.pick = pick

    def map_objects(self, objects: FF) -> IC:
        return IC(FF(None, np.ones(len(objects), dtype=DTYPE)), objects)

    def map_operations(self, x: FF, sources: IC, targets: IC) -> OH:
        return _tensor([getattr(rule_for(l), self.pick) for l in x.table])


class ReverseDerivative(Optic):
    """The optic functor ``f ↦ (fwd f, rev f)`` applied to whole hypergraphs."""
    F = _Identity("fwd")
    R = _Identity("rev")

    def residual(self, x: FF, A: IC, B: IC) -> IC:
        rs = [rule_for(l).residual for l in x.table]
        sizes = np.fromiter((len(r) for r in rs), dtype=DTYPE, count=len(rs))
        return IC(FF(None, sizes), labels(t for r in rs for t in r))


_OPTIC = ReverseDerivative()


def lens(f: OH) -> Diagram:
    """``A ⊗ B' → B ⊗ A'``: the forward outputs and the reverse derivative together."""
    name = getattr(f, "name", "diagram")
    g = monogamous(f)
    A, B = g.source, g.target
    c = _OPTIC.map_arrow(g)
    return Diagram.of(_OPTIC.adapt(c, A, B), f"lens({name})")


def rdiff(f: OH) -> Diagram:
    """The reverse derivative ``R[f] : A ⊗ B' → A'`` of any morphism ``f : A → B``.

    ``R[f](a, db) = J_f(a)ᵀ · db``.  The forward outputs are dropped (their
    computation is removed later by the schedule's dead-code elimination).
    """
    name = getattr(f, "name", "diagram")
    d = lens(f)
    nB = len(f.t)
    return Diagram.of(OH(d.s, FF(d.t.target, d.t.table[nB:]), d.H), f"rdiff({name})")
