"""Fusion planning: an SSA program as a short list of GPU launches.

Each instruction is planned by its primitive's kind (``op.kind``, :data:`circuitgrad.primitives.KINDS`).
Elementwise primitives (``Add, Neg, Mul, Scale, Heaviside, Sigmoid, Tanh, Exp, Log, Sqrt, Rsqrt, Div,
CausalMask, OneHot``) over the same number of elements are fused into one kernel (``OneHot`` reads
its integer id through a broadcast along the new last axis). The remaining
instructions become ``matmul`` (cuBLAS: ``MatMul`` and, batched, ``BatchMatMul``), ``reduce``
(SumTo), ``rowwise`` (Softmax, causal or not, LogSumExp, ArgMaxMask), ``gather`` (Slice, Pad,
Unfold, Fold: one thread per result element reading a contiguous operand at computed offsets, zero
outside it; Fold sums its overlapping blocks in a loop, so no atomics), ``view`` (no launch) and
``copy`` (a gather kernel) steps.

Layouts. ``Broadcast``, ``Transpose``, ``Permute`` and ``Reshape`` never move data by themselves.
Each of their results has a *layout* ``(base, stages)``: ``base`` is a C-contiguous array, and
``stages`` map the view's linear element index to an offset in ``base``. A stage ``(shape,
strides)`` maps an index ``t`` to ``Σ_d ((t / Π shape[d+1:]) % shape[d]) · strides[d]``; the stages
apply in order, and no stage means the identity (a reshape of a contiguous array). A permutation
or broadcast of a strided array composes into one stage; a reshape keeps the linear index, so it
either stays one stage (when NumPy could reshape without a copy) or adds a stage.

Fused kernels read their inputs through these layouts (index arithmetic such as ``b[i % 16]`` or
``k[(i % 8) * 32 + …]``), so a view read by a kernel costs neither a launch nor memory. A view
is only built at run time when something other than a kernel needs it: as a NumPy/CuPy view
(``view`` step, no launch) when that is one strided array and the consumer accepts it, else
gathered into a contiguous array by a generated ``copy`` kernel (one launch). Consumers' needs:
``BatchMatMul`` and row kernels take contiguous operands only (``cupy.matmul`` would copy a
strided batch itself), ``MatMul`` takes C- or F-contiguous matrices (cuBLAS transposes), ``SumTo``
and the function's outputs take any strided view.

Grouping rule. An instruction joins the group of one of its producers when the element counts
match, it reads that producer's value element for element (no layout in between), and every
input it takes from outside the group was produced before the group's first instruction. The
whole group then runs at the position of its first instruction. Every input is ready by then,
and every consumer comes later, so the order stays topological. An instruction with no such
producer group may join a recent group of the same size on the same condition, or when nothing
reads that group's results before the instruction, moving the group there (horizontal fusion:
the optimizer updates of all parameters of one size run in one kernel, after the last gradient).
Parameter-only work (reading no data input: Adam's ``b1·m``, a weight decay) is first moved just
before its first reader, and never joins a group that starts before it, so its weight-sized results
are not kept alive from the forward pass on. The copies of :mod:`~.recompute` fuse with copies of the same
value alone.

Rematerialisation. A small group (at most ``REMAT`` instructions) whose results only fused
kernels read, through layouts, is recomputed inside each of them at the index each read needs:
a layer norm's ``1/sqrt(var + eps)`` per row, read through a broadcast along the row, costs no
launch and no memory of its own. A group whose results only sums read is not launched: each sum computes
its terms where it reads them (:func:`~.passes.choose_summed`; a layer norm's ``(x − mean)²``), and sums of
one geometry share a kernel (:func:`~.passes.group_sums`). Before all this, :func:`~.recompute.recompute`
copies the elementwise work making a large value that products read in both passes to just before the
backward pass's products.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.schedule import Apply, Program

from .layout import (Layout, contiguous_strides, gather_index, located, nocopy_reshape, operand, read_through, resolve,
                     view_stages,
                     viewable)
from .passes import (PlanState, choose_remat, choose_summed, choose_unstored, fold_constants, group_elementwise,
                     group_sums, inline_producers, place_views)
from .epilogue import fuse_epilogues
from .recompute import recompute
from .rounding import RoundBF16
# re-exported: the names other modules (and tests) import from here
from .layout import Stage as Stage
from .passes import HORIZONTAL as HORIZONTAL, POINTERS as POINTERS, REMAT as REMAT

__all__ = ["Launch", "Plan", "plan", "last_readers", "Layout", "gather_index",
           "read_through", "contiguous_strides", "nocopy_reshape"]

# the layout helpers under the names they had when they were defined here
_view_stages, _viewable = view_stages, viewable


@dataclass
class Launch:
    """One step of the plan.

    ``kind`` is ``fused``, ``matmul``, ``reduce``, ``rowwise``, ``gather``, ``copy``, ``view`` or ``const``.
    ``instrs`` are the SSA instructions it executes (in order); ``inputs`` the
    variables it reads from memory; ``outputs`` the variables it writes.
    ``layout``: for ``copy`` steps, and ``view`` steps built from their base, the layout read.
    ``remat``: for ``fused`` steps, instructions of small groups recomputed inside this kernel at
    each index where ``instrs`` read their results (through a broadcast, say), instead of a launch
    of their own; for ``reduce`` steps, those making the sum's terms where it reads them.
    ``then``: for ``reduce`` steps, what its kernel runs after the sums, row by row (:mod:`~.epilogue`): row sums
    reading these (which may have a ``then`` of their own), or a fused step; ``inputs`` and ``outputs`` then hold
    every step's of the :attr:`chain`. For ``attention`` steps, the roundings of its results its kernel stores too
    (:func:`~.rounding.into_attention`): ``outputs`` holds their copies after its results, ``inputs`` its own.
    """
    kind: str
    instrs: list[Apply]
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    layout: Layout | None = None
    remat: list[Apply] = field(default_factory=list)
    then: Launch | None = None

    @property
    def work(self) -> list[Apply]:
        """Every instruction the launch runs: those it recomputes, its own, and its epilogue's."""
        return self.remat + self.instrs + (self.then.work if self.then is not None else [])

    @property
    def chain(self) -> list[Launch]:
        """This step and those its kernel runs after it (``then``), in order."""
        return [self] + (self.then.chain if self.then is not None else [])

    @property
    def launches(self) -> int:
        """Kernel launches this step costs (views and hoisted constants cost none)."""
        return 0 if self.kind in ("view", "const") else 1


@dataclass
class Plan:
    program: Program
    steps: list[Launch]
    folded: dict[int, int]         # Copy result (or repeated gathered view) -> the variable holding its value
    constants: dict[int, float]    # uniform constant variables (inlined as literals)
    values: dict[int, np.ndarray] = field(default_factory=dict)   # every compile-time constant (C-contiguous)
    layouts: dict[int, Layout] = field(default_factory=dict)      # view variables read through their base
    narrow: frozenset = frozenset()    # values stored as bfloat16 bits (``precision="bf16"``, :mod:`~.storage`)

    @property
    def launches(self) -> int:
        return sum(s.launches for s in self.steps)

    def src(self, v: int) -> int:
        """The variable ``v`` really is: copies (and repeated gathers) resolved (:func:`~.layout.resolve`)."""
        return resolve(self.folded, v)

    def read(self, v: int) -> Layout:
        """``(base, stages)``: where a kernel finds the elements of ``v`` (``stages == ()``: ``base`` itself)."""
        return located(self.folded, self.layouts, v)

    def operand(self, a: Apply, x: int) -> Layout:
        """Where element ``i`` of instruction ``a``'s result finds its operand ``x`` (see :func:`~.layout.operand`)."""
        return operand(a, self.read(x))


# ---------------------------------------------------------------------- plan
def _sink_parameter_work(prog: Program, data: set[int]) -> tuple[Program, set[int]]:
    """``prog`` with parameter-only work moved just before its first reader, and those instructions' indices.

    Parameter-only work reads no ``data`` input, even indirectly (optimizer terms such as ``b1·m``, a weight
    decay ``W·(1 − lr·wd)``): the schedule may place it anywhere, and run early, its weight-sized results
    would stay alive through the whole forward and backward pass. A weight's rounded copy (:mod:`~.rounding`) is
    not moved: made up front, the copies of one size are one kernel, alive until the backward reads them.
    """
    if not data:                           # no data input: nothing to tell parameter work from the rest
        return prog, set()
    producer = prog.producers()
    free: set[int] = set()
    for i, a in enumerate(prog.instrs):
        if isinstance(a.op, RoundBF16):
            continue                       # a weight's rounded copy: made up front, with the others of its size
        if a.args and all(producer.get(x, -1) in free or (x not in producer and x not in data) for x in a.args):
            free.add(i)
    if not free:
        return prog, free
    order: list[int] = []
    done: set[int] = set()

    def need(i: int) -> None:              # the parameter-only work instruction i reads, first
        for x in prog.instrs[i].args:
            j = producer.get(x)
            if j is not None and j in free and j not in done:
                done.add(j)
                need(j)
                order.append(j)

    for i in range(len(prog.instrs)):
        if i in free:
            continue
        need(i)
        order.append(i)
    order += [i for i in sorted(free) if i not in done]
    moved = Program(prog.types, prog.inputs, prog.outputs, [prog.instrs[i] for i in order], prog.name, prog.layers)
    return moved, {k for k, i in enumerate(order) if i in free}


def plan(prog: Program, data: Sequence[int] = (), updates: dict[int, int] | None = None) -> Plan:
    """The fusion plan of ``prog`` (see the module docstring); ``data``: its inputs that are data (``x``, ``y``),
    the others being parameters and optimizer state; ``updates``: input -> the output that may be written
    into it (a donated parameter's update), which no recomputation may read it after.

    The passes, in order (each in :mod:`~.passes` but the first two, the emission of launches and the last,
    in :mod:`~.epilogue`)::

        make values again --> sink parameter work --> fold constants --> place views --> group elementwise work
            --> inline producers --> choose remat --> choose unstored --> choose summed --> group sums
            --> emit launches --> fuse epilogues
    """
    prog, again = recompute(prog, updates)
    prog, free = _sink_parameter_work(prog, set(data))
    st = PlanState(prog, free, dict(updates or {}), late={i: again[a] for i, a in enumerate(prog.instrs) if a in again})
    fold_constants(st)
    place_views(st)
    group_elementwise(st)
    inline_producers(st)
    choose_remat(st)
    choose_unstored(st)
    choose_summed(st)
    group_sums(st)
    p = Plan(prog, emit_launches(st), st.folded, st.constants, st.values, st.layouts)
    p.steps = fuse_epilogues(p, updates)
    return p


def emit_launches(st: PlanState) -> list[Launch]:
    """The plan's steps, in program order: one per group (at its start), view to build, or other instruction.

    Copies and folded views cost nothing; a constant is a ``const`` step only where something reads it
    from memory (fused kernels inline the uniform ones); a view only kernels read has no step.
    """
    steps: list[Launch] = []
    emitted: set[int] = set()
    for i, a in enumerate(st.prog.instrs):
        if i in emitted or (isinstance(a.op, P.Copy) and not st.known(a)) or any(r in st.folded for r in a.results):
            continue
        if st.known(a):
            if _read_from_memory(st, a):
                steps.append(Launch("const", [a], [], list(a.results)))
            continue
        if i in st.group_of:
            g = st.group_of[i]
            if i != st.start[g] or g in st.gone:
                continue                              # emitted with its group, at the group's start
            emitted.update(st.groups[g])
            steps.append(_fused_step(st, g))
            continue
        step = _single_step(st, i, a)
        if step is not None:
            steps.append(step)
    return steps


def _read_from_memory(st: PlanState, a: Apply) -> bool:
    """A constant instruction's results are needed as an array: an output, or read by something other than a
    fused kernel that inlines it as a literal (a uniform constant)."""
    return any(r in st.out_src or any(not st.known(st.prog.instrs[k]) and (k not in st.group_of or r not in st.constants)
                                      for k in st.consumers(r)) for r in a.results)


def _fused_step(st: PlanState, g: int) -> Launch:
    """Group ``g``'s kernel: its members, the groups recomputed in it, the arrays it reads and those it writes
    (the results read by anything but its members)."""
    instrs = st.prog.instrs
    members = st.groups[g]
    again, ins = _recomputed(st, members, st.remat.get(g, []))
    mset, unstored = set(members), st.unstored.get(g, set())
    outs = [r for j in members for r in instrs[j].results if r not in unstored
            and (r in st.out_src or any(k is None or k not in mset for k in st.readers(r)))]
    return Launch("fused", [instrs[j] for j in members], ins, outs, remat=[instrs[j] for j in again])


def _recomputed(st: PlanState, members: list[int], groups: list[int]) -> tuple[list[int], list[int]]:
    """``(again, ins)``: the instructions of ``groups`` that the reads of instructions ``members`` need (in
    program order; a kernel recomputes them), and the arrays all of them read from memory."""
    instrs = st.prog.instrs
    made = {r: j for h in groups for j in st.groups[h] for r in instrs[j].results}
    needed: set[int] = set()
    todo = [x for j in members for x in instrs[j].args]
    while todo:                           # the recomputed instructions the members' reads need, no more
        s = st.src(todo.pop())
        j = made.get(st.read(s)[0]) if s not in st.constants else None
        if j is not None and j not in needed:
            needed.add(j)
            todo.extend(instrs[j].args)
    again = sorted(needed)
    inside = {r for j in again + members for r in instrs[j].results}
    ins: list[int] = []
    for j in again + members:
        for x in instrs[j].args:
            s = st.src(x)
            if s in st.constants:
                continue
            b = st.read(s)[0]
            if b not in inside and b not in ins:
                ins.append(b)
    return again, ins


def _single_step(st: PlanState, i: int, a: Apply) -> Launch | None:
    """The step of an instruction outside the fused groups (None: a view only kernels read, through its layout)."""
    if a.op.kind == "view":
        r = a.results[0]
        if r in st.copies:
            return Launch("copy", [a], [st.copies[r][0]], [r], layout=st.copies[r])
        if st.built.get(r) == "natural":
            return Launch("view", [a], [st.src(a.args[0])], [r])
        if st.built.get(r) == "strided":
            return Launch("view", [a], [st.layouts[r][0]], [r], layout=st.layouts[r])
        return None
    if a.op.kind == "contraction":
        return Launch("matmul", [a], [st.src(x) for x in a.args], list(a.results))
    if a.op.kind == "reduce" and i in st.joined:      # computed in an earlier sum's kernel (group_sums)
        return None
    if a.op.kind == "reduce" and (i in st.summed or i in st.sums):
        return _sums_step(st, st.sums.get(i, [i]))
    if a.op.kind == "reduce":
        return Launch("reduce", [a], [st.src(x) for x in a.args], list(a.results))
    if a.op.kind == "rowwise":
        return Launch("rowwise", [a], [st.read(a.args[0])[0]], list(a.results))
    if a.op.kind == "gather":
        return Launch("gather", [a], [st.read(a.args[0])[0]], list(a.results))
    if a.op.kind == "attention":               # the streaming kernels of gpu.attention: contiguous operands
        return Launch("attention", [a], [st.read(x)[0] for x in a.args], list(a.results))
    raise NotImplementedError(f"GPU backend: no rule for {a.op}")


def _sums_step(st: PlanState, members: list[int]) -> Launch:
    """The kernel of sums side by side (:func:`~.passes.group_sums`), each reading its operand's base or making its
    terms (:func:`~.passes.choose_summed`): the instructions that make them, and every array they read (and the views
    they read them through, so that the glue frees those after it)."""
    instrs = st.prog.instrs
    again: set[int] = set()
    ins: list[int] = []
    for k in members:
        if k in st.summed:
            made, reads = _recomputed(st, [k], st.summed[k])
            again.update(made)
        else:                 # its operand's base, which the kernel reads, and the operand (a view: freed after)
            x = st.src(instrs[k].args[0])
            reads = [st.read(x)[0], x]
        ins.extend(b for b in reads if b not in ins)
    return Launch("reduce", [instrs[k] for k in members], ins, [r for k in members for r in instrs[k].results],
                  remat=[instrs[j] for j in sorted(again)])


def last_readers(plan: Plan) -> dict[int, int]:
    """The index of the last step that reads each variable's memory, views included: a step that reads a view
    (``.T``, a reshape, ``as_strided`` of a base) reads its base, so the base's last reader is the view's. A
    variable a program output aliases (returned as, or through a view of it) is read after every step."""
    root: dict[int, int] = {}

    def base(v: int) -> int:
        v = plan.src(v)
        return root.get(v, v)

    last: dict[int, int] = {}
    for k, s in enumerate(plan.steps):
        for v in s.inputs:
            b = base(v)
            last[b] = max(last.get(b, -1), k)
        if s.kind == "view":
            for r in s.outputs:
                root[plan.src(r)] = base(s.inputs[0]) if s.inputs else plan.src(r)
    for v in plan.program.outputs:
        b = base(v)
        if b != plan.src(v):
            last[b] = len(plan.steps)            # returned through a view: alive after the call
    return last
