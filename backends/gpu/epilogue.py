"""A row's sums and the elementwise work that reads them, in one kernel (the plan's last pass).

A layer norm sums each row, then normalises the row with those sums; its backward pass does the same with two
sums of products. The plan makes the sums a ``reduce`` step and the work reading them the ``fused`` step right
after it: two launches, and the row read twice from memory. Where the sums are row sums of one warp each
(``G = 1``, ``W = 1``: every lane ends the warp's shuffles holding the row's total) and the fused step reads
them only at its own row, the fused step becomes the sum kernel's *epilogue* (``Launch.then``)::

    x ──► [ Σ_row ] ──► s (R×1) ──► [ f(x, s) ] ──► y          two launches
    x ──► [ Σ_row ; f(x, s) ] ──► s, y                         one: the warp of row o sums it, then
                                                               writes y[o·n + c] for its columns c

The sums are still written (a later step may read them), and the epilogue reads them from the warp's registers,
so every value has the bits it had in two launches. Not fused: a fused step that writes a donated parameter's
update (the update is written in place only by a fused kernel), column sums and sums of more than one warp, and
a fused step reading a sum at another row than its own, or through a layout whose offsets are not ``i // k``
(followed symbolically through the layouts' stages at compile time).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from .sums import geometry

if TYPE_CHECKING:
    from .plan import Launch, Plan

__all__ = ["fuse_epilogues", "chains", "fits", "AHEAD", "STAGES"]

AHEAD = 8             # steps after the sums searched for the step that reads them
STAGES = 3            # sums a kernel runs, one after another


def fuse_epilogues(p: Plan, updates: dict[int, int] | None = None) -> list[Launch]:
    """``p``'s steps with each ``reduce`` step's readers run by its kernel: first row sums that :func:`chains`
    take, then a fused step that :func:`fits`, its epilogue. Each is the first step of its kind after the sums
    that reads them, within ``AHEAD`` steps; it moves up to the sums only when no step between makes anything
    it reads (the parameter work the plan sinks to its reader, or another sum, often stands between), and when
    its results, now alive while the steps between run (less the values it reads last, freed as early), raise
    none of them above the most bytes any step holds (:func:`_may_move_up`). ``updates``: input -> the output
    written into it (a donated update, which stays a fused kernel)."""
    donated = set((updates or {}).values())
    steps = list(p.steps)
    out: list[Launch] = []
    i = 0
    while i < len(steps):
        s = steps[i]
        if s.kind == "reduce" and s.then is None:
            while len(s.chain) < STAGES:
                k = _reader(p, steps, i, "reduce")
                if k is None or not chains(p, s, steps[k], donated) or not _may_move_up(p, steps, i, k):
                    break
                steps[i] = s = _then(s, steps.pop(k))
            j = _reader(p, steps, i, "fused")
            if j is not None and fits(p, s, steps[j], donated) and _may_move_up(p, steps, i, j):
                steps[i] = s = _then(s, steps.pop(j))
        out.append(s)
        i += 1
    return out


def _then(s: Launch, t: Launch) -> Launch:
    """``s`` with ``t`` run last by its kernel (at the end of its :attr:`~.plan.Launch.chain`)."""
    inner = t if s.then is None else _then(s.then, t)
    return replace(s, inputs=s.inputs + [v for v in t.inputs if v not in s.inputs and v not in s.outputs],
                   outputs=s.outputs + t.outputs, then=inner)


def _reader(p: Plan, steps: list[Launch], i: int, kind: str) -> int | None:
    """The index of the first step of ``kind`` after ``steps[i]`` that reads its results, if it is within
    ``AHEAD`` steps and no step between makes a value it reads (or the base of one)."""
    sums = set(steps[i].outputs)
    made: set[int] = set()
    for j in range(i + 1, min(i + 1 + AHEAD, len(steps))):
        t = steps[j]
        reads = {w for v in t.inputs for w in (v, p.src(v), p.read(p.src(v))[0])}
        if t.kind == kind and reads & sums:
            return j if not reads & made else None
        made.update(t.outputs)
    return None


def _may_move_up(p: Plan, steps: list[Launch], i: int, j: int) -> bool:
    """Whether ``steps[j]`` may run in the kernel of ``steps[i]``, before the steps between: its results are then
    alive while those run, and the values it reads last are freed before them. It may when that raises no
    step's bytes alive above the most any step has (:func:`_alive`), or adds nothing to them."""
    if j == i + 1:
        return True
    made = {p.src(r) for s in steps[:j] for r in s.outputs if s.kind not in ("view", "const")}
    later = {p.read(p.src(v))[0] for s in steps[j + 1:] for v in s.inputs} | \
        {p.read(p.src(v))[0] for v in p.program.outputs}
    views = {p.src(r) for s in steps if s.kind == "view" for r in s.outputs}
    freed = {b for v in steps[j].inputs for b in [p.read(p.src(v))[0]] if b in made and b not in later}
    if any(v in views for v in freed):
        return False
    added = sum(_nbytes(p, v) for v in steps[j].outputs) - sum(_nbytes(p, v) for v in freed)
    if added <= 0:
        return True
    alive = _alive(p, steps)
    return max(alive[i + 1:j]) + added <= max(alive)


def _nbytes(p: Plan, v: int) -> int:
    t = p.program.types[v]
    return t.size * t.dtype.numpy_dtype().itemsize


def _alive(p: Plan, steps: list[Launch]) -> np.ndarray:
    """The bytes of the values each step's kernel makes that are alive while each step runs: from the step making
    one to the last reading it (through any view), or to the end for the program's outputs. Arguments, alive
    throughout, are left out; arrays count four bytes an element (bfloat16 storage is chosen after the plan)."""
    base = lambda v: p.read(p.src(v))[0]                # noqa: E731
    last: dict[int, int] = {}
    for m, s in enumerate(steps):
        for v in s.inputs:
            last[base(v)] = m
    end = {base(v) for v in p.program.outputs}
    delta = np.zeros(len(steps) + 1, dtype=np.int64)
    seen: set[int] = set()
    for m, s in enumerate(steps):
        if s.kind == "view":
            continue
        for r in s.outputs:
            if (b := p.src(r)) not in seen:
                seen.add(b)
                n = _nbytes(p, b)
                delta[m] += n
                delta[(len(steps) - 1 if b in end else max(m, last.get(b, m))) + 1] -= n
    return np.cumsum(delta[:-1])


def chains(p: Plan, sums: Launch, t: Launch, donated: set[int] = frozenset()) -> bool:
    """Whether the ``reduce`` step ``t`` can run in the kernel of the ``reduce`` step ``sums`` (and those it runs
    after them), after them: both row sums of one warp a row over rows of the same length, ``t``'s rows read in
    order (its term ``o·n + r`` is term ``r`` of row ``o``), and ``t`` making its terms from their results read
    only at their own row."""
    if sums.kind != "reduce" or t.kind != "reduce" or t.then is not None \
            or any(m.kind != "reduce" for m in sums.chain):
        return False
    if set(t.outputs) & donated:
        return False
    r, q = geometry(sums, p), geometry(t, p)
    if (r.g, r.warps, q.g, q.warps) != (1, 1, 1, 1) or (r.m, r.n) != (q.m, q.n):
        return False
    if q.reduced != ((q.n, 1),) or q.kept not in (((q.m, q.n),), ()):
        return False
    made = {v: a for a in t.remat for v in a.results}
    roots = [made.get(p.read(p.src(a.args[0]))[0]) for a in t.instrs]
    if any(a is None for a in roots):                    # a sum of an array: it reads no sum of ``sums``
        return False
    return _reads_own_row(p, replace(t, instrs=roots), set(sums.outputs), q.n)


def fits(p: Plan, sums: Launch, f: Launch, donated: set[int] = frozenset()) -> bool:
    """Whether fused step ``f`` can run as the epilogue of the ``reduce`` step ``sums`` (see the module)."""
    if sums.kind != "reduce" or f.kind != "fused" or sums.chain[-1].kind != "reduce":
        return False
    if not set(sums.outputs) & set(f.inputs) or set(f.outputs) & donated:
        return False
    r = geometry(sums, p)
    n = p.program.types[f.instrs[-1].results[0]].size
    if r.g != 1 or r.warps != 1 or r.m * r.n != n:
        return False
    if any(p.program.types[v].size != n for a in f.instrs for v in a.results):
        return False
    return _reads_own_row(p, f, set(sums.outputs), r.n)


def _reads_own_row(p: Plan, f: Launch, sums: set[int], n: int) -> bool:
    """Whether every read of ``sums`` by ``f`` (its instructions', and those it recomputes where they are read)
    is, at ``f``'s element ``i``, of the sum's element ``i // n``. Index maps are followed symbolically as
    ``i -> i // k`` (:func:`_divides`); a read of a sum through any other map is refused."""
    defined = {r: a for a in f.remat for r in a.results}

    def touches(a) -> bool:                    # whether ``a`` reads a sum, itself or through what it recomputes
        bases = [p.operand(a, p.src(x))[0] for x in a.args if p.src(x) not in p.constants]
        return any(b in sums or (b in defined and touches(defined[b])) for b in bases)

    def ok(a, k: int | None) -> bool:          # f's element i reads element i // k of a's result (None: unknown)
        size = p.program.types[a.results[0]].size
        for x in a.args:
            s = p.src(x)
            if s in p.constants:
                continue
            b, stages = p.operand(a, s)
            j = _divides(stages, size, k)
            if b in sums and j != n:
                return False
            if b in defined and not (ok(defined[b], j) if j is not None else not touches(defined[b])):
                return False
        return True

    return all(ok(a, 1) for a in f.instrs)


def _divides(stages: tuple, size: int, k: int | None) -> int | None:
    """``k'`` where element ``i // k`` of a result of ``size`` elements reads element ``i // k'`` of its operand
    through ``stages`` (:func:`~.layout.gather_index`); ``None`` where no such ``k'`` is found."""
    for shape, strides in stages:
        if k is None:
            return None
        d = _stage_divides(shape, strides, size)
        if d is None:
            return None
        k, size = k * d, -(-size // d)
    return k


def _stage_divides(shape: tuple[int, ...], strides: tuple[int, ...], size: int) -> int | None:
    """``d`` where one stage maps each element ``i < size`` to ``i // d``: its inner axes (of ``d`` elements) have
    stride 0, its outer axes the strides of an array of their shape, in order; ``None`` otherwise."""
    if size > int(np.prod(shape, dtype=np.int64)):
        return None                            # the coordinates wrap
    axes = [(m, st) for m, st in zip(shape, strides) if m != 1]
    inner = 1
    while axes and axes[-1][1] == 0:
        inner *= axes.pop()[0]
    step = 1
    for m, st in reversed(axes):
        if st != step:
            return None
        step *= m
    return inner
