"""Fused elementwise kernels: a group of elementwise instructions (:mod:`~.plan`) as one kernel, a thread per
element.

Each instruction becomes a register, ``const float v12 = (v10 + v11);``, by its primitive's CUDA expression
(:data:`~.cuda.CUDA_EXPRESSIONS`); intermediate values stay in registers, and only the group's outputs are
written to memory. Inputs are read through their layouts (``r3 = in0[(i % 16LL)]``, a bias broadcast along
rows), and a small group recomputed inside the kernel (the plan's ``remat``) is evaluated at the index each read
needs, in a block of its own. A kernel may write an output into the input it reads (:func:`donations`): those
two pointers then lose ``__restrict__``.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, field

from circuitgrad.schedule import Apply

from .cuda import CUDA_EXPRESSIONS, ctype, element_kernel, literal, read_index
from .kernel import Kernel, with_extents
from .plan import Launch, Plan
from . import rounding
from .storage import STORE, store_helper

__all__ = ["Body", "element_body", "fused_kernel", "donations", "value_function"]


def fused_kernel(step: Launch, plan: Plan, name: str, donated: dict[int, int] | None = None) -> Kernel:
    """The kernel of a ``fused`` step. ``donated``: output -> input it overwrites; neither pointer is
    ``__restrict__`` (they alias)."""
    out_t = plan.program.types[step.instrs[-1].results[0]]
    b = element_body(step, plan, name, donated)
    ops = [a.op.name for a in step.instrs] + [f"({a.op.name})" for a in step.remat]
    return with_extents(Kernel(name, b.helper + element_kernel(name, b.params, b.lines, out_t.size), list(step.inputs),
                               list(step.outputs), out_t.size, ops, frozenset(b.strided), b.in_types,
                               dict(donated or {}), reads=b.reads), plan)


@dataclass
class Body:
    """The statements of a fused step at element ``i`` (its outputs written), the parameters they use (``in<k>``,
    ``out<k>``), the C types of the inputs, those read through a layout, the reads at ``i`` itself, and the
    helper a bfloat16 store needs."""
    lines: list[str]
    params: list[str]
    in_types: tuple
    strided: set[int]
    reads: tuple
    helper: str


def element_body(step: Launch, plan: Plan, name: str, donated: dict[int, int] | None = None,
                 given: dict[int, str] | None = None, pad: str = "    ") -> Body:
    """The body of ``step``'s kernel at element ``i``: each instruction a register, each output written.
    ``donated``: output -> input it overwrites (neither pointer ``__restrict__``); ``given``: variables the
    caller holds, an expression each (a row's sum, :mod:`~.reduction`), read as that wherever they are read."""
    prog = plan.program
    w = _Writer(step, plan, ctype(prog.types[step.instrs[-1].results[0]]), given)
    lines: list[str] = []
    value = w.emit(step.instrs, _Scope(lines, pad, False))
    narrow = [v in plan.narrow for v in step.outputs]          # stored as bfloat16 (:mod:`~.storage`)
    for k, v in enumerate(step.outputs):
        lines.append(f"{pad}out{k}[i] = {f'{name}_bf16({value[v]})' if narrow[k] else value[v]};")
    aliased = set(donated or {}) | set((donated or {}).values())
    restrict = lambda v: "" if v in aliased else " __restrict__"     # noqa: E731
    params = [f"const {t}*{restrict(v)} in{k}" for k, (t, v) in enumerate(zip(w.in_types, step.inputs))] + \
             [f"{STORE if narrow[k] else ctype(prog.types[v])}*{restrict(v)} out{k}" for k, v in enumerate(step.outputs)]
    helper = (store_helper(name) if any(narrow) else "") + \
        (rounding.HELPER if any(isinstance(a.op, rounding.RoundBF16) for a in step.instrs + step.remat) else "")
    return Body(lines, params, w.in_types, w.strided, tuple(w.read_at), helper)


def value_function(step: Launch, plan: Plan, name: str, v: int,
                   shared: frozenset[int] | set[int] = frozenset()) -> tuple[str, tuple[str, ...]]:
    """``(source, input types)`` of ``__host__ __device__ T <name>(long long i, const T0* in0, …)``: the value of
    ``v`` at its element ``i``, made by ``step.remat`` from ``step.inputs`` (a sum kernel's terms). ``shared``:
    inputs the same kernel writes (an earlier stage's sums): not ``__restrict__``, so that they are not read
    through the read-only data cache (``ld.global.nc``), which the kernel's own stores do not update."""
    c = ctype(plan.program.types[v])
    w = _Writer(step, plan, c)
    lines: list[str] = []
    reg = w.recompute(v, "i", _Scope(lines, "    ", True))
    params = ", ".join(f"const {t}*{'' if x in shared else ' __restrict__'} in{k}"
                       for k, (t, x) in enumerate(zip(w.in_types, step.inputs)))
    return (f"__host__ __device__ inline {c} {name}(long long i, {params}) {{\n" + "\n".join(lines)
            + f"\n    return {reg};\n}}\n", w.in_types)


def donations(kern: Kernel, step: Launch, donate_pairs: dict[int, int] | None, index: int | None = None,
              last: dict[int, int] | None = None) -> dict[int, int]:
    """The outputs of a fused kernel written into the input they may overwrite (``donate_pairs``: output ->
    input): only where every thread reads the element it writes (the input is not read through a layout), and
    only where this launch (step ``index``) is the input's last reader (``last``, from
    :func:`~.plan.last_readers`): a later launch, or a view read later, would otherwise read the updated values.
    Without ``index``/``last`` nothing is donated."""
    if step.kind != "fused" or not donate_pairs or index is None or last is None:
        return {}
    return {v: d for v in kern.outputs if (d := donate_pairs.get(v)) is not None
            and d in kern.inputs and d not in kern.strided and last.get(d) == index}


@dataclass
class _Scope:
    """Where statements go: their lines and indent, and whether ``i`` is not the thread's own element (a block
    that recomputes a value at another index); the registers of the values and reads made there."""
    lines: list[str]
    pad: str
    again: bool
    value: dict[int, str] = field(default_factory=dict)      # result -> its register
    reads: dict[tuple, str] = field(default_factory=dict)    # (base, stages) -> the register read


class _Writer:
    """The statements of one fused kernel's body, and what its reads are (strided, checked at ``i``)."""

    def __init__(self, step: Launch, plan: Plan, c: str, given: dict[int, str] | None = None):
        self.step, self.plan, self.c, self.given = step, plan, c, given or {}
        self.in_types = tuple(ctype(plan.program.types[v]) for v in step.inputs)
        self.defined = {r: a for a in step.remat for r in a.results}       # recomputed where they are read
        self.strided: set[int] = set()
        self.read_at: list[tuple[int, tuple]] = []
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, instrs: list[Apply], scope: _Scope) -> dict[int, str]:
        """Code for ``instrs`` at index ``i``; returns each result's register."""
        for a in instrs:
            # the backend's own instructions (gpu.rounding) carry their expression, the core's are in the table
            rule = getattr(a.op, "cuda", None) or functools.partial(CUDA_EXPRESSIONS[type(a.op)], self.c, a.op)
            expr = rule(*(self.arg(a, x, scope) for x in a.args))
            r = a.results[0]
            scope.value[r] = f"v{r}"
            scope.lines.append(f"{scope.pad}const {self.c} v{r} = {expr};   // {a.op.name}")
        return scope.value

    def arg(self, a: Apply, x: int, scope: _Scope) -> str:
        """The expression of operand ``x`` of ``a``: a literal, a register, or a read of an input."""
        plan = self.plan
        s = plan.src(x)
        if s in plan.constants:
            return literal(plan.constants[s], ctype(plan.program.types[s]))
        b, stages = plan.operand(a, s)
        if b in self.given:                 # held by the caller (checked to be the one this element reads)
            return self.given[b]
        if b in scope.value:
            assert not stages, "a fused kernel reads its own values element for element"
            return scope.value[b]
        key = (b, stages)
        if key in scope.reads:
            return scope.reads[key]
        idx, pre = read_index(stages, self.fresh("j"))
        scope.lines.extend(scope.pad + p.lstrip() for p in pre)
        if b in self.defined:
            scope.reads[key] = self.recompute(b, idx, scope)
            return scope.reads[key]
        k = self.step.inputs.index(b)
        if not scope.again:                 # at the thread's own index: checked against the input's size
            self.read_at.append((k, stages))
        reg = self.fresh(f"r{b}_") if stages or scope.again else f"r{b}"
        scope.lines.append(f"{scope.pad}const {self.in_types[k]} {reg} = in{k}[{idx}];")
        if stages or scope.again:
            self.strided.add(b)
        scope.reads[key] = reg
        return reg

    def recompute(self, b: int, idx: str, scope: _Scope) -> str:
        """A small group recomputed at the index this read needs: ``i`` shadowed in a block; returns the register
        that holds ``b`` after it."""
        pad = scope.pad
        t, w = self.fresh("o"), self.fresh("w")
        scope.lines.append(f"{pad}const long long {t} = {idx};")
        scope.lines.append(f"{pad}{self.c} {w};")
        scope.lines.append(f"{pad}{{")
        scope.lines.append(f"{pad}    const long long i = {t};")
        needed = _closure(b, self.defined, self.plan)
        inner = self.emit([a2 for a2 in self.step.remat if a2.results[0] in needed],
                          _Scope(scope.lines, pad + "    ", True))
        scope.lines.append(f"{pad}    {w} = {inner[b]};")
        scope.lines.append(f"{pad}}}")
        return w


def _closure(v: int, defined: dict, plan: Plan) -> set[int]:
    """The recomputed results ``v`` depends on element for element (itself included); one read through a layout
    (a broadcast row statistic) is recomputed at its own index when it is read, in a block of its own."""
    out, todo = set(), [v]
    while todo:
        r = todo.pop()
        if r in out or r not in defined:
            continue
        out.add(r)
        for x in defined[r].args:
            s = plan.src(x)
            if s not in plan.constants:
                b, stages = plan.operand(defined[r], s)
                if not stages:
                    todo.append(b)
    return out
