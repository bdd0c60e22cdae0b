"""The analysis passes of :func:`~.plan.plan`, over one shared :class:`PlanState` (see :mod:`~.plan` for the rules).

Each pass fills its own fields of the state and reads those of the passes before it::

    program --> fold_constants --> place_views --> group_elementwise --> inline_producers --> choose_remat
                  values             layouts         group_of, groups       group_of, groups     remat
                  constants          copies          start, by_size         outside, nres        gone
                  folded, out_src    built           outside, nres
            --> choose_unstored --> choose_summed --> group_sums
                  unstored, remat     summed, gone      sums, joined

:func:`~.plan.plan` then turns the state into launches (:func:`~.plan.emit_launches`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.interpret import FLOAT_RULES
from circuitgrad.schedule import Apply, Program

from .layout import Layout, fortran, located, operand, resolve, transposed, view_stages, viewable

__all__ = ["HORIZONTAL", "REMAT", "PARTIAL", "POINTERS", "PlanState", "fold_constants", "place_views", "group_elementwise",
           "inline_producers", "choose_remat", "choose_unstored", "choose_summed", "group_sums", "SUMS"]

#: how many recent groups of the same size an instruction without a producer group may join
HORIZONTAL = 8
#: the largest group recomputed inside the kernels that read it (instructions)
REMAT = 12
#: the largest launched group whose results only later fused kernels read are recomputed there, not stored
PARTIAL = 32
#: the most sums one kernel computes side by side (:func:`group_sums`)
SUMS = 4
#: a bound on a fused kernel's pointer arguments (inputs read, plus every member's result): CUDA
#: takes at most 4 KB of kernel arguments (before CUDA 12.1), 512 pointers
POINTERS = 384


@dataclass
class PlanState:
    """What the passes share: the program, and what each pass decided about it."""
    prog: Program
    free: set[int]                         # parameter-only instructions (indices into prog.instrs)
    updates: dict[int, int] = field(default_factory=dict)   # input -> the output written into it (donation)
    late: dict[int, int] = field(default_factory=dict)      # copy (recompute) -> the number of the value it makes
    producer: dict[int, int] = field(init=False)         # variable -> the instruction defining it
    uses: dict[int, list[int]] = field(init=False)       # variable -> the instructions reading it
    # fold_constants
    values: dict[int, np.ndarray] = field(default_factory=dict)   # every compile-time constant (C-contiguous)
    constants: dict[int, float] = field(default_factory=dict)     # the uniform ones (inlined as literals)
    folded: dict[int, int] = field(default_factory=dict)   # Copy result (or repeated gathered view) -> its value
    out_src: set[int] = field(default_factory=set)         # the program's outputs, copies resolved
    # place_views
    layouts: dict[int, Layout] = field(default_factory=dict)   # view variable -> where kernels read it
    copies: dict[int, Layout] = field(default_factory=dict)    # view variable -> the layout its copy kernel gathers
    built: dict[int, str] = field(default_factory=dict)  # view variable -> "natural" (from its operand) or "strided"
    # group_elementwise, inline_producers
    group_of: dict[int, int] = field(default_factory=dict)     # instruction index -> group id
    groups: list[list[int]] = field(default_factory=list)     # group id -> its instructions (empty: merged away)
    start: list[int] = field(default_factory=list)            # group id -> the position it runs at
    by_size: dict[int, list[int]] = field(default_factory=dict)   # element count -> groups, oldest first
    outside: list[set[int]] = field(default_factory=list)     # group id -> the variables it reads from memory
    nres: list[int] = field(default_factory=list)             # group id -> how many results its members have
    # choose_remat
    remat: dict[int, list[int]] = field(default_factory=dict)  # host group -> groups recomputed in it
    gone: set[int] = field(default_factory=set)                # groups recomputed in their hosts, not launched
    unstored: dict[int, set[int]] = field(default_factory=dict)  # launched group -> results its hosts recompute
    # choose_summed
    summed: dict[int, list[int]] = field(default_factory=dict)  # SumTo instruction -> groups making its terms
    # group_sums
    sums: dict[int, list[int]] = field(default_factory=dict)    # first SumTo -> the sums its kernel computes
    joined: set[int] = field(default_factory=set)               # SumTos computed in an earlier one's kernel

    def __post_init__(self) -> None:
        self.producer, self.uses = self.prog.producers(), self.prog.uses()

    # ------------------------------------------------------------ queries
    def written_at(self, v: int) -> int:
        """Where the output written into donated input ``v`` is computed: its group's start, or its index."""
        k = self.producer.get(self.src(self.updates[v]), -1)
        g = self.group_of.get(k)
        return self.start[g] if g is not None else k

    def shape_of(self, v: int) -> tuple[int, ...]:
        return self.prog.types[v].shape

    def size_of(self, v: int) -> int:
        return self.prog.types[v].size

    def bytes_of(self, v: int) -> int:
        return self.prog.types[v].size * self.prog.types[v].dtype.numpy_dtype().itemsize

    def known(self, a: Apply) -> bool:
        """Every result of ``a`` is a compile-time constant."""
        return bool(a.results) and all(r in self.values for r in a.results)

    def src(self, v: int) -> int:
        """The variable ``v`` really is (:func:`~.layout.resolve`)."""
        return resolve(self.folded, v)

    def read(self, v: int) -> Layout:
        """Where a kernel finds the elements of ``v`` (:func:`~.layout.located`)."""
        return located(self.folded, self.layouts, v)

    def group_results(self, g: int) -> list[int]:
        """The results of group ``g``'s members."""
        return [r for j in self.groups[g] for r in self.prog.instrs[j].results]

    def consumers(self, v: int) -> list[int]:
        """Instructions that read ``v``, through copies."""
        out = []
        for k in self.uses.get(v, []):
            a = self.prog.instrs[k]
            if isinstance(a.op, P.Copy) and not self.known(a):
                for r in a.results:
                    out.extend(self.consumers(r))
            else:
                out.append(k)
        return out

    def readers(self, v: int, base: int | None = None) -> list[int | None]:
        """Instructions that read ``v`` element for element (through copies and reshapes); None: read otherwise."""
        base = v if base is None else base
        out: list[int | None] = []
        for k in self.consumers(v):
            a = self.prog.instrs[k]
            if a.op.kind == "view":
                r = a.results[0]
                if (self.layouts.get(r) == (base, ()) and r not in self.built and r not in self.copies
                        and r not in self.out_src):
                    out.extend(self.readers(r, base))
                else:
                    out.append(None)
            else:
                out.append(k)
        return out

    def kernel_readers(self, v: int) -> list[int | None]:
        """Instructions that read ``v`` through any layout; None: something else needs it in memory."""
        out: list[int | None] = []
        for k in self.consumers(v):
            a = self.prog.instrs[k]
            if a.op.kind == "view":
                r = a.results[0]
                if r in self.built or r in self.copies or r in self.out_src or self.src(r) != r:
                    out.append(None)
                else:
                    out.extend(self.kernel_readers(r))
            else:
                out.append(k)
        return out

    def memory_inputs(self, a: Apply) -> set[int]:
        """The arrays ``a`` reads from memory (the bases of its non-literal arguments)."""
        return {self.read(self.src(x))[0] for x in a.args if self.src(x) not in self.constants}

    # ---------------------------------------------------- grouping queries
    def pointers(self, a: Apply, g: int) -> int:
        """An upper bound on group ``g``'s pointer arguments once ``a`` joins it."""
        new = self.memory_inputs(a) - self.outside[g]
        new = {b for b in new if self.group_of.get(self.producer.get(b, -1)) != g}
        return len(self.outside[g]) + len(new) + self.nres[g] + len(a.results)

    def pos(self, j: int) -> int:
        """Where instruction ``j`` runs: its group's position, or its own."""
        return self.start[self.group_of[j]] if j in self.group_of else j

    def fits(self, a: Apply, y: int, g: int, at: int) -> bool:
        """``a`` may read ``y`` as a member of group ``g`` running at position ``at``."""
        s = self.src(y)
        if s in self.values:
            return True                              # a literal, or an array hoisted out of the step
        b, stages = operand(a, self.read(s))
        j = self.producer.get(b, -1)
        if self.group_of.get(j) == g:
            return not stages
        return self.pos(j) < at if j >= 0 else True

    def may_join(self, i: int, g: int) -> bool:
        """Instruction ``i`` may run in group ``g``: copies making a value again (:mod:`~.recompute`) run with copies
        of the same value alone; other work runs with none (it would run at the copies' place, or they at its)."""
        n = self.late.get(i)
        return all(self.late.get(j) == n for j in self.groups[g])

    def sinkable(self, g: int, i: int) -> bool:
        """Nothing outside group ``g`` reads its results before instruction ``i``: it may run at ``i``."""
        members = set(self.groups[g])
        return all(k > i for j in self.groups[g] for r in self.prog.instrs[j].results for k in self.consumers(r)
                   if k not in members)


# ------------------------------------------------------------------ passes
def fold_constants(st: PlanState) -> None:
    """Evaluate now every instruction whose arguments are all known; resolve copies to their source.

    Fills ``values`` (C-contiguous arrays), ``constants`` (the uniform ones, which kernels inline as
    literals), ``folded`` (each ``Copy`` result that is not a constant -> its argument) and ``out_src``.
    """
    prog = st.prog
    for a in prog.instrs:
        if all(x in st.values for x in a.args) and a.op.pure and a.op.kind != "copy":
            own = getattr(a.op, "evaluate", None)      # the backend's own instructions (gpu.rounding)
            vals = [st.values[x] for x in a.args]
            for r, v in zip(a.results, own(*vals) if own else FLOAT_RULES[type(a.op)](a.op, *vals)):
                # C-contiguous: kernels index constants linearly (a folded transpose is a Fortran-ordered
                # view, and CuPy's asarray keeps that order)
                st.values[r] = np.array(v, dtype=prog.types[r].dtype.numpy_dtype(), order="C")
    st.constants.update({v: float(val.reshape(-1)[0]) for v, val in st.values.items()
                         if val.size and np.all(val == val.reshape(-1)[0])})
    for a in prog.instrs:
        if isinstance(a.op, P.Copy) and not st.known(a):
            for r in a.results:
                st.folded[r] = a.args[0]
    st.out_src.update(st.src(o) for o in prog.outputs)


def place_views(st: PlanState) -> None:
    """Give every view a layout, and decide which views the run time must build.

    A view only kernels read (elementwise ones, through index arithmetic) is never built. Row and
    gather kernels need a contiguous operand, ``BatchMatMul`` a contiguous batch (or one with its last
    two axes swapped), ``MatMul`` a C- or F-contiguous matrix, and ``SumTo`` and the outputs any strided
    array::

        view --+-- only kernels read it --------------------- layout only (no step)
               +-- one strided array, every reader takes it -- built: a "natural" or "strided" view step
               +-- otherwise -------------------------------- copies: a gather kernel (or folded into
                                                              an earlier copy of the same elements)
    """
    gathered: dict[tuple, int] = {}       # (base, stages, shape) -> the variable already holding that copy
    for a in st.prog.instrs:
        if a.op.kind != "view" or st.known(a):
            continue
        r, x = a.results[0], st.src(a.args[0])
        base, stages = st.read(x)
        stages = view_stages(a.op, stages)
        st.layouts[r] = (base, stages)
        shape = st.shape_of(r)
        contiguous = not stages
        need_array, need_contiguous, ok = r in st.out_src, False, True
        for k in st.consumers(r):
            op = st.prog.instrs[k].op
            if op.kind in ("elementwise", "view"):
                continue                                   # read through the layout
            if op.kind == "attention" and viewable(shape, stages) and (not stages or stages[0][1][-1] == 1):
                continue                                   # read in place, a row at a time (gpu.attention)
            if op.kind in ("rowwise", "gather", "attention"):
                need_contiguous = True                     # the kernel is given the base pointer
                continue
            need_array = True
            if isinstance(op, P.BatchMatMul):
                ok &= contiguous or transposed(shape, stages)
            elif isinstance(op, P.MatMul):
                ok &= contiguous or fortran(shape, stages)
        if (need_contiguous and not contiguous) or (need_array and not (viewable(shape, stages) and ok)):
            key = (base, stages, shape)
            if key in gathered and r not in st.out_src:
                st.folded[r] = gathered[key]             # the same elements were gathered already
                continue
            gathered[key] = r
            st.copies[r] = (base, stages)
            st.layouts[r] = (r, ())
        elif need_array:
            x_built = x not in st.layouts or x in st.built or x in st.copies
            st.built[r] = "natural" if x_built else "strided"


def group_elementwise(st: PlanState) -> None:
    """Put each elementwise instruction in a group: the fused kernel it runs in.

    An instruction joins the group of a producer it reads element for element (vertical), else a
    recent group of its size whose inputs are ready, maybe moving that group down to it
    (horizontal), else starts a group of its own::

        vertical:    g = [a, b = f(a)]     <-- c = h(b)              (c reads b element for element)
        horizontal:  g = [u1 = W1 - lr*G1] <-- u2 = W2 - lr*G2       (same size, G2 ready by g's start)

    A group runs at its ``start``, the position of its first instruction (or where it was moved).
    """
    for i, a in enumerate(st.prog.instrs):
        if st.known(a) or a.op.kind != "elementwise":
            continue
        size = st.size_of(a.results[0])
        chosen = _producer_group(st, i, a, size)
        if chosen is None:
            chosen = _horizontal_group(st, i, a, size)
        if chosen is None:
            chosen = len(st.groups)
            st.groups.append([])
            st.start.append(i)
            st.outside.append(set())
            st.nres.append(0)
            st.by_size.setdefault(size, []).append(chosen)
        st.outside[chosen] |= {b for b in st.memory_inputs(a) if st.group_of.get(st.producer.get(b, -1)) != chosen}
        st.nres[chosen] += len(a.results)
        st.groups[chosen].append(i)
        st.group_of[i] = chosen


def _producer_group(st: PlanState, i: int, a: Apply, size: int) -> int | None:
    """The group of a producer that ``a`` reads element for element and may join, if any."""
    for x in a.args:
        s = st.src(x)
        if s in st.constants:
            continue
        b, stages = operand(a, st.read(s))
        j = st.producer.get(b)
        if stages or j is None or j not in st.group_of:
            continue
        g = st.group_of[j]
        if st.size_of(st.prog.instrs[j].results[0]) != size:
            continue
        if all(st.fits(a, y, g, st.start[g]) for y in a.args) and st.pointers(a, g) <= POINTERS and st.may_join(i, g):
            return g
    return None


def _horizontal_group(st: PlanState, i: int, a: Apply, size: int) -> int | None:
    """A recent group of ``size`` elements whose inputs are ready, that instruction ``i`` may join, if any
    (the group is moved to ``i`` where it must wait for ``a``'s inputs)."""
    for g in reversed(st.by_size.get(size, [])[-HORIZONTAL:]):
        if st.pointers(a, g) > POINTERS:
            continue
        # parameter-only work never joins a group that starts before it: before its gradients
        if ((i not in st.free or st.start[g] >= i) and st.may_join(i, g)
                and all(st.fits(a, y, g, st.start[g]) for y in a.args)):
            return g
        if st.sinkable(g, i) and st.may_join(i, g) and all(st.fits(a, y, g, i) for y in a.args):
            st.start[g] = i                      # the group now runs here, when all its inputs are ready
            return g
    return None


def inline_producers(st: PlanState) -> None:
    """Merge a group whose results feed only one later group of its size, element for element, into it::

        g = [a, b] --b--> h = [c(b), d]      becomes      h = [a, b, c, d]   (at h's start)

    Later groups first; a group read by the function's outputs stays.
    """
    for g in range(len(st.groups) - 1, -1, -1):
        if not st.groups[g]:
            continue
        results = st.group_results(g)
        if any(r in st.out_src for r in results):
            continue
        found = {st.group_of.get(k) if k is not None else None for r in results for k in st.readers(r)}
        if len(found) != 1:
            continue
        (h,) = found
        if h is None or h == g or st.start[h] < st.start[g]:
            continue
        instrs = st.prog.instrs
        if st.size_of(instrs[st.groups[h][0]].results[0]) != st.size_of(instrs[st.groups[g][0]].results[0]):
            continue
        if len(st.outside[g] | st.outside[h]) + st.nres[g] + st.nres[h] > POINTERS:
            continue
        st.outside[h] |= st.outside[g]
        st.nres[h] += st.nres[g]
        for j in st.groups[g]:
            st.group_of[j] = h
        st.groups[h] = sorted(st.groups[g] + st.groups[h])     # runs at start[h]: g's inputs are older still
        st.groups[g] = []


def choose_remat(st: PlanState) -> None:
    """Recompute small groups inside the kernels that read them, instead of launching them (no nesting).

    A group of at most ``REMAT`` instructions whose results only fused kernels read, through any
    layout, and whose own inputs stay in memory, is recomputed at each index its hosts read::

        g = [s = 1/sqrt(var + eps)] --broadcast--> h = [x*s, ...]      becomes      h = [x*s, ...], remat [g]
    """
    for g in sorted((g for g in range(len(st.groups)) if st.groups[g]), key=lambda g: st.start[g]):
        if len(st.groups[g]) > REMAT or g in st.remat:
            continue
        results = st.group_results(g)
        if any(r in st.out_src for r in results):
            continue
        hosts = _remat_hosts(st, g, results)
        if not hosts or any(st.start[h] < st.start[g] for h in hosts):
            continue
        if any(st.group_of.get(st.producer.get(b, -1)) in st.gone
               for j in st.groups[g] for b in st.memory_inputs(st.prog.instrs[j])):
            continue                               # its inputs must be in memory
        st.gone.add(g)
        for h in hosts:
            st.remat.setdefault(h, []).append(g)


def choose_unstored(st: PlanState) -> None:
    """Recompute in later fused kernels the results of a launched group that only they read, instead of
    storing them: the group still runs if something else reads its other results from memory (else it is
    not launched at all), its hosts recompute all of it from its inputs, which stay in memory for them::

        g = [h = x + b; t = tanh(c·(h + 0.044715·h³)); y = 0.5·h·(1 + t)] --y--> matmul
                                                                           --t, h--> backward kernel k
        becomes  g writes y alone;  k = [..., remat g]  (t and h recomputed, never in memory)

    This is what keeps a GELU's intermediates (four arrays of the MLP's width per layer) and a layer norm's
    normalised input out of memory until the backward pass. A group qualifies with at most ``PARTIAL``
    instructions; the small groups it recomputes itself (a row's ``1/sqrt(var + eps)``) are recomputed in its
    hosts too. A host must start after it, be launched, recompute nothing that is itself recomputed, stay
    within ``POINTERS`` and start before the update of each donated parameter the group reads (written in
    place, it would overwrite what the host reads).
    """
    hosted = {h for gs in st.remat.values() for h in gs}
    for g in sorted((g for g in range(len(st.groups)) if st.groups[g]), key=lambda g: st.start[g]):
        if g in st.gone or g in hosted or len(st.groups[g]) > PARTIAL:
            continue
        inner = st.remat.get(g, [])
        only, hosts = set(), set()
        for r in st.group_results(g):
            if r in st.out_src:
                continue
            hs = {st.group_of.get(k) if k is not None else None for k in st.kernel_readers(r)} - {g}
            if not hs or None in hs or any(h in st.gone or h in hosted or st.start[h] <= st.start[g] for h in hs):
                continue
            only.add(r)
            hosts |= hs
        if not only:
            continue
        ins = {b for k in [g, *inner] for j in st.groups[k] for b in st.memory_inputs(st.prog.instrs[j])}
        if any(len(st.outside[h]) + len(ins) + st.nres[h] > POINTERS for h in hosts):
            continue
        if any(st.start[h] >= st.written_at(b) for b in ins if b in st.updates for h in hosts):
            continue                       # a donated parameter would be read after its update overwrote it
        members = set(st.groups[g])
        if any(r not in only and (r in st.out_src or any(k is None or k not in members for k in st.readers(r)))
               for r in st.group_results(g)):
            st.unstored[g] = only
        else:                              # nothing left for it to write: recomputed, never launched
            st.gone.add(g)
        hosted.add(g)
        for h in hosts:
            mine = st.remat.setdefault(h, [])
            mine.extend(k for k in [*inner, g] if k not in mine)


def choose_summed(st: PlanState) -> None:
    """Make in the sum kernels that read them the terms of a group that only sums read, instead of launching it::

        g = [d = x - m; s = d·d] --s--> SumTo(s)        becomes        SumTo's term i: (x[i] - m[i / n])²

    A group qualifies when every result it still stores (:func:`choose_unstored`) is read only by ``SumTo``
    instructions, element for element (no view in between: a layout would change which term is which), with at
    most ``PARTIAL`` instructions (a copy that makes a value again, :mod:`~.recompute`, is read by products
    only: its group never qualifies). Its inputs, and those of the groups it
    recomputes, must be in memory at each sum and not yet overwritten by a donated parameter's update, and those
    held for the sums alone (no kernel reads them later, nor makes again a result that reads them) must hold no
    more bytes than its results. The group is then not launched: no array of
    its results is written, nor read back by the sums.
    """
    instrs = st.prog.instrs
    for g in sorted((g for g in range(len(st.groups)) if st.groups[g]), key=lambda g: st.start[g]):
        if g in st.gone or len(st.groups[g]) > PARTIAL:
            continue
        inner = st.remat.get(g, [])
        made = {r for k in [*inner, g] for j in st.groups[k] for r in instrs[j].results}
        sums: set[int] = set()
        unstored = st.unstored.get(g, set())
        ok = True
        for r in st.group_results(g):
            if r in unstored:
                continue
            if r in st.out_src:
                ok = False
                break
            outside = [k for k in st.readers(r) if k is None or k not in st.groups[g]]
            if not all(k is not None and isinstance(instrs[k].op, P.SumTo) and k > st.start[g] for k in outside):
                ok = False
                break
            sums.update(outside)
        if not ok or not sums:
            continue
        ins = {b for k in [*inner, g] for j in st.groups[k] for b in st.memory_inputs(instrs[j])} - made
        if any((p := st.group_of.get(st.producer.get(b, -1))) is not None
               and (p in st.gone or b in st.unstored.get(p, set())) for b in ins):
            continue                # an input not in memory (defensive: the earlier passes leave none)
        if len(ins) + 1 > POINTERS:
            continue
        if any(k >= st.written_at(b) for b in ins if b in st.updates for k in sums):
            continue                       # a donated parameter would be read after its update overwrote it
        last = max(sums)
        held = sum(st.bytes_of(b) for b in ins if not _read_from(st, b, last))
        if held > sum(st.bytes_of(r) for r in st.group_results(g) if r not in unstored) and _work_between(st, g, sums):
            continue                       # inputs kept for the sums would hold more than the terms they replace
        st.gone.add(g)
        for k in sums:
            mine = st.summed.setdefault(k, [])
            mine.extend(h for h in [*inner, g] if h not in mine)


def group_sums(st: PlanState) -> None:
    """Compute sums of one geometry side by side, in the first one's kernel::

        SumTo(dy) -> [384]   ...   SumTo(dy·x̂) -> [384]        becomes        one kernel at the first: dy read once

    A ``SumTo`` joins the latest earlier one with the same operand and result types when both read their
    operands element for element (no layout: a term's offset is the same in both) or make their terms, and
    every array it reads is made before the earlier one runs (so it reads no result of the kernel it joins);
    at most ``SUMS`` a kernel, within ``POINTERS``. Each sum adds its terms in the order it would alone.
    """
    instrs = st.prog.instrs
    latest: dict[tuple, int] = {}
    reads: dict[int, set[int]] = {}
    for k, a in enumerate(instrs):
        if not isinstance(a.op, P.SumTo):
            continue
        made = k in st.summed
        base, stages = st.read(st.src(a.args[0]))
        if stages and not made:
            continue
        if made:
            inner = {r for h in st.summed[k] for j in st.groups[h] for r in instrs[j].results}
            ins = {b for h in st.summed[k] for j in st.groups[h] for b in st.memory_inputs(instrs[j])} - inner
        else:
            ins = {base}
        reads[k] = ins
        key = (a.op.T, a.op.S)
        first = latest.get(key)
        if first is not None:
            members = st.sums.setdefault(first, [first])
            ready = all((j := st.producer.get(b)) is None or st.pos(j) < first for b in ins)
            union = set().union(*(reads[m] for m in members), ins)
            if ready and len(members) < SUMS and len(union) + len(members) + 1 <= POINTERS:
                members.append(k)
                st.joined.add(k)
                continue
            if len(members) == 1:
                del st.sums[first]
        latest[key] = k
    for first in [f for f, m in st.sums.items() if len(m) == 1]:
        del st.sums[first]


def _work_between(st: PlanState, g: int, sums: set[int]) -> bool:
    """Something but the sums and views runs after group ``g`` and before the last of ``sums``."""
    return any(st.prog.instrs[j].op.kind != "view" and j not in sums and st.group_of.get(j) not in st.gone
               for j in range(st.start[g] + 1, max(sums)) if st.pos(j) > st.start[g])


def _read_from(st: PlanState, b: int, k: int) -> bool:
    """Array ``b`` stays in memory until instruction ``k`` anyway: an input or output, or read there or later, by
    its reader's kernel or by a kernel that makes that reader's results again (:func:`choose_remat`,
    :func:`choose_unstored`)."""
    if b in st.prog.inputs or b in st.out_src:
        return True
    for j in st.kernel_readers(b):
        if j is None or st.pos(j) >= k:
            return True
        h = st.group_of.get(j)
        if h is not None and any(st.start[x] >= k for x, inner in st.remat.items() if h in inner):
            return True
    return False


def _remat_hosts(st: PlanState, g: int, results: list[int]) -> set[int]:
    """The other groups reading group ``g``'s ``results``; empty when anything but a fused kernel reads one."""
    hosts: set[int] = set()
    for r in results:
        for k in st.kernel_readers(r):
            h = st.group_of.get(k) if k is not None else None
            if h is None:
                return set()
            if h != g:
                hosts.add(h)
    return hosts
