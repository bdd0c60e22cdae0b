"""Patterns over an SSA program: the one matching mechanism of the rewriters (the simplifier, the NumPy
generator's float rewrites, the GPU passes).

A pattern describes an instruction and, recursively, the instructions that produce its arguments::

    Pat(P.Neg, Pat(P.Scale, once=True, name="s"))          Neg(Scale(x, c)), the Scale read only there
    Pat(P.Add, X("x"), Pat(P.Constant, when=is_zero), commute=True)        x + 0 and 0 + x

:func:`match` tries one pattern at an instruction and returns what it bound (a name to the instruction or
the variable it matched), or ``None``; :class:`Rules` is an ordered table of ``(pattern, action)`` whose
first match wins, as tinygrad's ``PatternMatcher``. The rewriters keep their own bookkeeping (aliases,
in-place replacements, side tables): a pattern only says *where*, through a :class:`Graph` that answers
who produces a variable and how often it is read, which a rewriter may update as it goes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from .schedule import Apply, Program

__all__ = ["Pat", "X", "Graph", "match", "Rules"]


@dataclass(frozen=True)
class Pat:
    """An instruction of class ``op`` (a class or a tuple of them) whose arguments match ``args`` in order.

    ``name`` binds the instruction; ``once`` (of an argument's pattern) requires the variable it matches to be
    read exactly once, an output counting as a read; ``when(apply)`` is any further condition on the
    instruction; ``commute`` also tries two arguments swapped. A pattern with ``op=None`` matches any variable
    and binds it (see :func:`X`). A name bound twice keeps the last binding."""
    op: type | tuple[type, ...] | None = None
    args: tuple["Pat", ...] | None = None
    name: str | None = None
    once: bool = False
    when: Callable[[Apply], bool] | None = None
    commute: bool = False

    def __init__(self, op=None, *args: "Pat", name: str | None = None, once: bool = False,
                 when: Callable[[Apply], bool] | None = None, commute: bool = False):
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "args", tuple(args) if args else None)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "once", once)
        object.__setattr__(self, "when", when)
        object.__setattr__(self, "commute", commute)


def X(name: str | None = None, once: bool = False) -> Pat:
    """Any variable (an input, a constant or a result), bound to ``name``."""
    return Pat(None, name=name, once=once)


@dataclass
class Graph:
    """Who produces each variable and how many times it is read (outputs count), as a rewriter sees them.

    :meth:`of` builds it from a whole program; a rewriter that builds its output instruction by instruction
    fills ``producer`` as it goes and adjusts ``reads``."""
    producer: dict[int, Apply] = field(default_factory=dict)
    reads: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, p: Program) -> "Graph":
        return cls({r: a for a in p.instrs for r in a.results}, read_counts(p))

    def once(self, v: int) -> bool:
        return self.reads.get(v, 0) == 1


def read_counts(p: Program) -> dict[int, int]:
    """How many times each variable is read (an output counts as a read)."""
    reads: dict[int, int] = {}
    for v in [x for a in p.instrs for x in a.args] + list(p.outputs):
        reads[v] = reads.get(v, 0) + 1
    return reads


def match(pat: Pat, a: Apply, g: Graph, args: Sequence[int] | None = None) -> dict[str, Any] | None:
    """The bindings of ``pat`` at instruction ``a`` (whose arguments are ``args``, by default its own), or
    ``None``."""
    out: dict[str, Any] = {}
    return out if _apply(pat, a, tuple(a.args if args is None else args), g, out) else None


def _apply(pat: Pat, a: Apply, args: tuple[int, ...], g: Graph, out: dict) -> bool:
    if pat.op is not None and not isinstance(a.op, pat.op):
        return False
    if pat.when is not None and not pat.when(a):
        return False
    if pat.args is not None:
        orders = [args] + ([args[::-1]] if pat.commute and len(args) == 2 else [])
        for order in orders:
            trial = dict(out)
            if len(order) == len(pat.args) and all(_var(q, v, g, trial) for q, v in zip(pat.args, order)):
                out.clear()
                out.update(trial)
                break
        else:
            return False
    if pat.name is not None:
        out[pat.name] = a
    return True


def _var(pat: Pat, v: int, g: Graph, out: dict) -> bool:
    if pat.once and not g.once(v):
        return False
    if pat.op is None:
        if pat.name is not None:
            out[pat.name] = v
        return True
    a = g.producer.get(v)
    return a is not None and _apply(pat, a, tuple(a.args), g, out)


@dataclass(frozen=True)
class Rules:
    """An ordered table of ``(pattern, action)``: :meth:`first` runs the action of the first pattern that
    matches, ``action(a, bindings)``, and returns its result (``None`` when none matches, or when the action
    declines by returning ``None``: the next rule is tried)."""
    table: tuple[tuple[Pat, Callable[[Apply, Mapping[str, Any]], Any]], ...]

    def __init__(self, table: Iterable[tuple[Pat, Callable[[Apply, Mapping[str, Any]], Any]]]):
        object.__setattr__(self, "table", tuple(table))

    def first(self, a: Apply, g: Graph, args: Sequence[int] | None = None) -> Any:
        for pat, action in self.table:
            b = match(pat, a, g, args)
            if b is not None:
                r = action(a, b)
                if r is not None:
                    return r
        return None
