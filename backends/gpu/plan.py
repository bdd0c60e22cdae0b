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
are not kept alive from the forward pass on.

Rematerialisation. A small group (at most ``REMAT`` instructions) whose results only fused
kernels read, through layouts, is recomputed inside each of them at the index each read needs:
a layer norm's ``1/sqrt(var + eps)`` per row, read through a broadcast along the row, costs no
launch and no memory of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.interpret import FLOAT_RULES
from circuitgrad.schedule import Apply, Program

__all__ = ["Launch", "Plan", "plan", "Layout", "gather_index",
           "read_through", "contiguous_strides", "nocopy_reshape"]

#: how many recent groups of the same size an instruction without a producer group may join
HORIZONTAL = 8
#: the largest group recomputed inside the kernels that read it (instructions)
REMAT = 12
#: a bound on a fused kernel's pointer arguments (inputs read, plus every member's result): CUDA
#: takes at most 4 KB of kernel arguments (before CUDA 12.1), 512 pointers
POINTERS = 384

Stage = tuple[tuple[int, ...], tuple[int, ...]]       # (shape, strides in elements)
Layout = tuple[int, tuple[Stage, ...]]               # (base variable, stages)


@dataclass
class Launch:
    """One step of the plan.

    ``kind`` is ``fused``, ``matmul``, ``reduce``, ``rowwise``, ``gather``, ``copy``, ``view`` or ``const``.
    ``instrs`` are the SSA instructions it executes (in order); ``inputs`` the
    variables it reads from memory; ``outputs`` the variables it writes.
    ``layout``: for ``copy`` steps, and ``view`` steps built from their base, the layout read.
    ``remat``: for ``fused`` steps, instructions of small groups recomputed inside this kernel at
    each index where ``instrs`` read their results (through a broadcast, say), instead of a launch
    of their own.
    """
    kind: str
    instrs: list[Apply]
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    layout: Layout | None = None
    remat: list[Apply] = field(default_factory=list)

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

    @property
    def launches(self) -> int:
        return sum(s.launches for s in self.steps)

    def src(self, v: int) -> int:
        """The variable ``v`` really is: copies (and repeated gathers) resolved."""
        while v in self.folded:
            v = self.folded[v]
        return v

    def read(self, v: int) -> Layout:
        """``(base, stages)``: where a kernel finds the elements of ``v`` (``stages == ()``: ``base`` itself)."""
        s = self.src(v)
        return self.layouts.get(s, (s, ()))

    def operand(self, a: Apply, x: int) -> Layout:
        """Where element ``i`` of instruction ``a``'s result finds its operand ``x`` (see :func:`_operand`)."""
        return _operand(a, self.read(x))


# ------------------------------------------------------------------- layouts
def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def _identity(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    return all(n == 1 or s == c for n, s, c in zip(shape, strides, contiguous_strides(shape)))


def nocopy_reshape(shape: tuple[int, ...], strides: tuple[int, ...],
                   new: tuple[int, ...]) -> tuple[int, ...] | None:
    """The strides of ``new`` viewing the same elements, or None when a reshape must copy (NumPy's rule)."""
    if 0 in shape or 0 in new:
        return contiguous_strides(new)
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    out = [0] * len(new)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(new) and oi < len(old):
        np_, op = new[ni], old[oi][0]
        while np_ != op:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for ok in range(oi, oj - 1):
            if old[ok][1] != old[ok + 1][0] * old[ok + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for nk in range(nj - 1, ni, -1):
            out[nk - 1] = out[nk] * new[nk]
        ni, oi = nj, oj
        nj, oj = nj + 1, oj + 1
    last = out[ni - 1] if ni >= 1 else 1
    for nk in range(ni, len(new)):
        out[nk] = last
    return tuple(out)


def _view_stages(op: P.Primitive, stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    """The stages of ``op``'s result, given the stages of its operand."""
    (in_t,), (out_t,) = op.source, op.target
    if isinstance(op, P.Reshape):
        if stages:
            shape, strides = stages[0]
            st = nocopy_reshape(shape, strides, out_t.shape)
            if st is not None:
                stages = ((out_t.shape, st),) + stages[1:]
    else:
        if isinstance(op, P.Transpose):
            picks = [1, 0]
        elif isinstance(op, P.Permute):
            picks = list(op.axes)
        else:  # Broadcast: added and stretched axes read with stride 0
            lead = out_t.ndim - in_t.ndim
            picks = [None if k < lead or (in_t.shape[k - lead] == 1 and out_t.shape[k] != 1) else k - lead
                     for k in range(out_t.ndim)]
        if stages and stages[0][0] == in_t.shape:
            base, rest = stages[0][1], stages[1:]
        else:
            base, rest = contiguous_strides(in_t.shape), stages
        stages = ((out_t.shape, tuple(0 if d is None else base[d] for d in picks)),) + rest
    if stages and _identity(*stages[0]):
        stages = stages[1:]
    return stages


def _operand(a: Apply, layout: Layout) -> Layout:
    """The layout of an elementwise instruction's operand, indexed by the instruction's result.

    The same as the operand's own layout, except for ``OneHot``: element ``i`` of ``[..., n]`` reads
    id ``i / n``, a broadcast of the ids along a new last axis.
    """
    if not isinstance(a.op, P.OneHot):
        return layout
    base, stages = layout
    S = a.op.S
    S1 = S.with_shape(S.shape + (1,))
    stages = _view_stages(P.Reshape(S, S1.shape), stages)
    return base, _view_stages(P.Broadcast(S1, S.with_shape(a.op.T.shape)), stages)


def gather_index(n: int, stages: tuple[Stage, ...]) -> np.ndarray:
    """The base offsets of elements ``0 … n-1`` of a view (the index arithmetic the kernels do)."""
    idx = np.arange(n, dtype=np.int64)
    for shape, strides in stages:
        off = np.zeros_like(idx)
        for d, (m, s) in enumerate(zip(shape, strides)):
            if m != 1 and s != 0:
                off += (idx // int(np.prod(shape[d + 1:], dtype=np.int64))) % m * s
        idx = off
    return idx


def read_through(base: np.ndarray, shape: tuple[int, ...], stages: tuple[Stage, ...]) -> np.ndarray:
    """The view ``(base, stages)`` of ``shape``, gathered with NumPy."""
    flat = np.asarray(base).reshape(-1)
    if not stages:
        return flat.reshape(shape)
    return flat[gather_index(int(np.prod(shape, dtype=np.int64)), stages)].reshape(shape)


def _viewable(shape: tuple[int, ...], stages: tuple[Stage, ...]) -> bool:
    """One strided array over the base (what NumPy and CuPy views can be)."""
    return not stages or (len(stages) == 1 and stages[0][0] == shape)


def _fortran(shape: tuple[int, ...], stages: tuple[Stage, ...]) -> bool:
    """A column-major matrix (a transposed contiguous one): cuBLAS reads it without a copy."""
    if len(shape) != 2 or len(stages) != 1 or stages[0][0] != shape:
        return False
    return _identity(shape[::-1], stages[0][1][::-1])


# ---------------------------------------------------------------------- plan
def _sink_parameter_work(prog: Program, data: set[int]) -> tuple[Program, set[int]]:
    """``prog`` with parameter-only work moved just before its first reader, and those instructions' indices.

    Parameter-only work reads no ``data`` input, even indirectly (optimizer terms such as ``b1·m``, a weight
    decay ``W·(1 − lr·wd)``): the schedule may place it anywhere, and run early, its weight-sized results
    would stay alive through the whole forward and backward pass.
    """
    if not data:                           # no data input: nothing to tell parameter work from the rest
        return prog, set()
    producer = prog.producers()
    free: set[int] = set()
    for i, a in enumerate(prog.instrs):
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


def plan(prog: Program, data: Sequence[int] = ()) -> Plan:
    """The fusion plan of ``prog`` (see the module docstring); ``data``: its inputs that are data (``x``, ``y``),
    the others being parameters and optimizer state."""
    prog, free = _sink_parameter_work(prog, set(data))
    producer, uses = prog.producers(), prog.uses()
    shape_of = lambda v: prog.types[v].shape       # noqa: E731
    size_of = lambda v: prog.types[v].size         # noqa: E731
    # constant folding: every instruction whose arguments are all known is evaluated now
    values: dict[int, np.ndarray] = {}
    for a in prog.instrs:
        if all(x in values for x in a.args) and a.op.pure and a.op.kind != "copy":
            for r, v in zip(a.results, FLOAT_RULES[type(a.op)](a.op, *(values[x] for x in a.args))):
                # C-contiguous: kernels index constants linearly (a folded transpose is a Fortran-ordered
                # view, and CuPy's asarray keeps that order)
                values[r] = np.array(v, dtype=prog.types[r].dtype.numpy_dtype(), order="C")
    constants = {v: float(val.reshape(-1)[0]) for v, val in values.items()
                 if val.size and np.all(val == val.reshape(-1)[0])}

    def known(a: Apply) -> bool:
        return bool(a.results) and all(r in values for r in a.results)

    folded: dict[int, int] = {}
    for a in prog.instrs:
        if isinstance(a.op, P.Copy) and not known(a):
            for r in a.results:
                folded[r] = a.args[0]

    def src(v: int) -> int:
        while v in folded:
            v = folded[v]
        return v

    out_src = {src(o) for o in prog.outputs}

    def consumers(v: int) -> list[int]:
        """Instructions that read ``v``, through copies."""
        out = []
        for k in uses.get(v, []):
            if isinstance(prog.instrs[k].op, P.Copy) and not known(prog.instrs[k]):
                for r in prog.instrs[k].results:
                    out.extend(consumers(r))
            else:
                out.append(k)
        return out

    # layouts of the views, and which ones the run time must build (a view, or a gathered copy)
    layouts: dict[int, Layout] = {}
    copies: dict[int, Layout] = {}        # view variable -> the layout its copy kernel gathers
    gathered: dict[tuple, int] = {}       # (layout, shape) -> the variable already holding that copy
    built: dict[int, str] = {}            # view variable -> "natural" (from its operand) or "strided" (from its base)

    def read(v: int) -> Layout:
        s = src(v)
        return layouts.get(s, (s, ()))

    for a in prog.instrs:
        if a.op.kind != "view" or known(a):
            continue
        r, x = a.results[0], src(a.args[0])
        base, stages = read(x)
        stages = _view_stages(a.op, stages)
        layouts[r] = (base, stages)
        shape = shape_of(r)
        contiguous = not stages
        need_array, need_contiguous, ok = r in out_src, False, True
        for k in consumers(r):
            op = prog.instrs[k].op
            if op.kind in ("elementwise", "view"):
                continue                                   # read through the layout
            if op.kind in ("rowwise", "gather"):
                need_contiguous = True                     # the kernel is given the base pointer
                continue
            need_array = True
            if isinstance(op, P.BatchMatMul):
                ok &= contiguous
            elif isinstance(op, P.MatMul):
                ok &= contiguous or _fortran(shape, stages)
        if (need_contiguous and not contiguous) or (need_array and not (_viewable(shape, stages) and ok)):
            key = (base, stages, shape)
            if key in gathered and r not in out_src:
                folded[r] = gathered[key]             # the same elements were gathered already
                continue
            gathered[key] = r
            copies[r] = (base, stages)
            layouts[r] = (r, ())
        elif need_array:
            x_built = x not in layouts or x in built or x in copies
            built[r] = "natural" if x_built else "strided"

    def readers(v: int, base: int | None = None) -> list[int | None]:
        """Instructions that read ``v`` element for element (through copies and reshapes); None: read otherwise."""
        base = v if base is None else base
        out: list[int | None] = []
        for k in consumers(v):
            a = prog.instrs[k]
            if a.op.kind == "view":
                r = a.results[0]
                if layouts.get(r) == (base, ()) and r not in built and r not in copies and r not in out_src:
                    out.extend(readers(r, base))
                else:
                    out.append(None)
            else:
                out.append(k)
        return out

    group_of: dict[int, int] = {}          # instruction index -> group id
    groups: list[list[int]] = []
    start: list[int] = []
    by_size: dict[int, list[int]] = {}     # element count -> groups, oldest first
    outside: list[set[int]] = []           # per group: the variables it reads from memory
    nres: list[int] = []                   # per group: how many results its members have

    def pointers(a: Apply, g: int) -> int:
        """An upper bound on group ``g``'s pointer arguments once ``a`` joins it."""
        new = {read(src(x))[0] for x in a.args if src(x) not in constants} - outside[g]
        new = {b for b in new if group_of.get(producer.get(b, -1)) != g}
        return len(outside[g]) + len(new) + nres[g] + len(a.results)

    def pos(j: int) -> int:
        """Where instruction ``j`` runs: its group's position, or its own."""
        return start[group_of[j]] if j in group_of else j

    def fits(a: Apply, y: int, g: int, at: int) -> bool:
        """``a`` may read ``y`` as a member of group ``g`` running at position ``at``."""
        s = src(y)
        if s in values:
            return True                              # a literal, or an array hoisted out of the step
        b, stages = _operand(a, read(s))
        j = producer.get(b, -1)
        if group_of.get(j) == g:
            return not stages
        return pos(j) < at if j >= 0 else True

    def sinkable(g: int, i: int) -> bool:
        """Nothing outside group ``g`` reads its results before instruction ``i``: it may run at ``i``."""
        members = set(groups[g])
        return all(k > i for j in groups[g] for r in prog.instrs[j].results for k in consumers(r)
                   if k not in members)

    for i, a in enumerate(prog.instrs):
        if known(a) or a.op.kind != "elementwise":
            continue
        size = size_of(a.results[0])
        chosen = None
        for x in a.args:
            s = src(x)
            if s in constants:
                continue
            b, stages = _operand(a, read(s))
            j = producer.get(b)
            if stages or j is None or j not in group_of:
                continue
            g = group_of[j]
            if size_of(prog.instrs[j].results[0]) != size:
                continue
            if all(fits(a, y, g, start[g]) for y in a.args) and pointers(a, g) <= POINTERS:
                chosen = g
                break
        if chosen is None:                 # horizontal: a recent group of the same size whose inputs are ready
            for g in reversed(by_size.get(size, [])[-HORIZONTAL:]):
                if pointers(a, g) > POINTERS:
                    continue
                # parameter-only work never joins a group that starts before it: before its gradients
                if (i not in free or start[g] >= i) and all(fits(a, y, g, start[g]) for y in a.args):
                    chosen = g
                    break
                if sinkable(g, i) and all(fits(a, y, g, i) for y in a.args):
                    chosen, start[g] = g, i          # the group now runs here, when all its inputs are ready
                    break
        if chosen is None:
            chosen = len(groups)
            groups.append([])
            start.append(i)
            outside.append(set())
            nres.append(0)
            by_size.setdefault(size, []).append(chosen)
        outside[chosen] |= {b for b in (read(src(x))[0] for x in a.args if src(x) not in constants)
                            if group_of.get(producer.get(b, -1)) != chosen}
        nres[chosen] += len(a.results)
        groups[chosen].append(i)
        group_of[i] = chosen

    # producer inlining: a group whose results feed only one later group (element for element) joins it
    for g in range(len(groups) - 1, -1, -1):
        if not groups[g]:
            continue
        results = [r for j in groups[g] for r in prog.instrs[j].results]
        if any(r in out_src for r in results):
            continue
        found = {group_of.get(k) if k is not None else None for r in results for k in readers(r)}
        if len(found) != 1:
            continue
        (h,) = found
        if h is None or h == g or start[h] < start[g]:
            continue
        if size_of(prog.instrs[groups[h][0]].results[0]) != size_of(prog.instrs[groups[g][0]].results[0]):
            continue
        if len(outside[g] | outside[h]) + nres[g] + nres[h] > POINTERS:
            continue
        outside[h] |= outside[g]
        nres[h] += nres[g]
        for j in groups[g]:
            group_of[j] = h
        groups[h] = sorted(groups[g] + groups[h])     # runs at start[h]: g's inputs are older still
        groups[g] = []

    def kernel_readers(v: int) -> list[int | None]:
        """Instructions that read ``v`` through any layout; None: something else needs it in memory."""
        out: list[int | None] = []
        for k in consumers(v):
            a = prog.instrs[k]
            if a.op.kind == "view":
                r = a.results[0]
                if r in built or r in copies or r in out_src or src(r) != r:
                    out.append(None)
                else:
                    out.extend(kernel_readers(r))
            else:
                out.append(k)
        return out

    # rematerialisation: small groups only kernels read are recomputed inside them (no nesting)
    remat: dict[int, list[int]] = {}       # host group -> groups recomputed in it
    gone: set[int] = set()
    for g in sorted((g for g in range(len(groups)) if groups[g]), key=lambda g: start[g]):
        if len(groups[g]) > REMAT or g in remat:
            continue
        results = [r for j in groups[g] for r in prog.instrs[j].results]
        if any(r in out_src for r in results):
            continue
        hosts: set[int] = set()
        for r in results:
            for k in kernel_readers(r):
                h = group_of.get(k) if k is not None else None
                if h is None:
                    hosts = set()
                    break
                if h != g:
                    hosts.add(h)
            else:
                continue
            break
        if not hosts or any(start[h] < start[g] for h in hosts):
            continue
        if any(group_of.get(producer.get(read(src(x))[0], -1)) in gone
               for j in groups[g] for x in prog.instrs[j].args if src(x) not in constants):
            continue                               # its inputs must be in memory
        gone.add(g)
        for h in hosts:
            remat.setdefault(h, []).append(g)

    steps: list[Launch] = []
    emitted: set[int] = set()
    for i, a in enumerate(prog.instrs):
        if i in emitted or (isinstance(a.op, P.Copy) and not known(a)) or any(r in folded for r in a.results):
            continue
        if known(a):
            # an array only where something reads it from memory: fused kernels inline uniform constants
            if any(r in out_src or any(not known(prog.instrs[k]) and (k not in group_of or r not in constants)
                                       for k in consumers(r)) for r in a.results):
                steps.append(Launch("const", [a], [], list(a.results)))
            continue
        if i in group_of:
            if i != start[group_of[i]] or group_of[i] in gone:
                continue                              # emitted with its group, at the group's start
            members = groups[group_of[i]]
            again = sorted(j for g in remat.get(group_of[i], []) for j in groups[g])
            emitted.update(members)
            inside = {r for j in members + again for r in prog.instrs[j].results}
            ins: list[int] = []
            for j in again + members:
                for x in prog.instrs[j].args:
                    s = src(x)
                    if s in constants:
                        continue
                    b = read(s)[0]
                    if b not in inside and b not in ins:
                        ins.append(b)
            mset = set(members)
            outs = [r for j in members for r in prog.instrs[j].results
                    if r in out_src or any(k is None or k not in mset for k in readers(r))]
            steps.append(Launch("fused", [prog.instrs[j] for j in members], ins, outs,
                                remat=[prog.instrs[j] for j in again]))
            continue
        if a.op.kind == "view":
            r = a.results[0]
            if r in copies:
                steps.append(Launch("copy", [a], [copies[r][0]], [r], layout=copies[r]))
            elif built.get(r) == "natural":
                steps.append(Launch("view", [a], [src(a.args[0])], [r]))
            elif built.get(r) == "strided":
                steps.append(Launch("view", [a], [layouts[r][0]], [r], layout=layouts[r]))
            continue                                  # otherwise only kernels read it, through its layout
        if a.op.kind == "contraction":
            steps.append(Launch("matmul", [a], [src(x) for x in a.args], list(a.results)))
        elif a.op.kind == "reduce":
            steps.append(Launch("reduce", [a], [src(x) for x in a.args], list(a.results)))
        elif a.op.kind == "rowwise":
            steps.append(Launch("rowwise", [a], [read(a.args[0])[0]], list(a.results)))
        elif a.op.kind == "gather":
            steps.append(Launch("gather", [a], [read(a.args[0])[0]], list(a.results)))
        else:
            raise NotImplementedError(f"GPU backend: no rule for {a.op}")
    return Plan(prog, steps, folded, constants, values, layouts)
