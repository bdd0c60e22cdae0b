"""CUDA C source of a ``SumTo`` step: a deterministic sum kernel (fixed summation order, no atomics).

``SumTo`` sums its input over the leading axes it drops and the axes it keeps with extent 1. After axes of
extent 1 are dropped and neighbours that are one run in memory merged, the input is ``kept`` axes (the
outputs, in order) and ``reduced`` axes (the ``n`` terms of each output), each an (extent, stride) pair of
the base array the step reads (its layout: SumTo's operand is one strided view at most, see
:func:`~.passes.place_views`). Output ``o`` is ``Σ_r x[out(o) + red(r)]``.

The outputs come in groups of ``G`` adjacent ones; a group is ``W`` warps (``W·32`` lanes, in one block).

* **Column sums** (the innermost kept axis has stride 1, the reduction does not): ``G = 8`` (fewer when that
  axis is shorter). Lane ``L`` of the group sums output ``group·G + L % G`` over the terms ``r = L / G,
  L / G + W·32/G, …``, so one warp load reads ``32/G`` rows of ``G`` consecutive elements (whole 32-byte
  sectors for float32).
* **Row sums** (the reduction is contiguous), and anything else: ``G = 1``, the lanes stride the terms.

Each lane accumulates in the output's type, in four accumulators (the loop unrolled by 4 for independent
loads), added as ``(s0 + s1) + (s2 + s3)``. A warp then combines the lanes of one output with
``__shfl_xor_sync`` for o = 16, 8, … down to ``G`` (every lane adds its partner's partial: the lanes of one
output end with one value), and with ``W > 1`` warp 0 of the group adds the warps' partials from shared memory,
warp 0 first. The order of every addition is fixed by the geometry, so the result is the same bit for bit on
every run. ``W`` grows with the terms per output (more loads in flight for a long reduction).

Where the plan makes the terms in the sum (:func:`~.passes.choose_summed`), a lane reads term ``o`` as
``<name>_term(o, in0, …)``, the instructions of ``Launch.remat`` at that element of their result (contiguous: an
offset is an element's index), from the step's inputs.

The per-lane partial is ``__host__ __device__``; ``<name>_body(group, …)`` (host only) runs the group's lanes in
turn, in the host mode's order, and replays the shuffles and the shared-memory sum exactly, and
``<name>__host_warp`` (``#ifdef CG_HOSTRUN``) runs it for the group's first warp, as the row kernels of
:mod:`~.row` do (see :mod:`~.warp`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuitgrad import primitives as P

from .cuda import ctype
from .elementwise import value_function
from .kernel import Kernel, with_extents
from .layout import contiguous_strides
from .plan import Launch, Plan
from .warp import FULL, WARP, host_replay, lanes

__all__ = ["Reduction", "geometry", "reduce_source", "reduce_kernel", "MAX_WARPS", "UNROLL"]

MAX_WARPS = 8           # warps of one group: a group never straddles a block of 256 threads (runtime.BLOCK)
UNROLL = 4              # accumulators per lane (independent loads in flight)
TERMS = 32              # a lane sums at most about this many terms before the group takes another warp
COLUMNS = 8             # outputs per group of a column sum (8 floats: one 32-byte sector)

Axis = tuple[int, int]  # (extent, stride in elements of the base array)


@dataclass(frozen=True)
class Reduction:
    """A sum kernel's geometry and source: ``groups`` groups of ``lanes`` threads each."""
    base: int                  # the variable read (the base array of the step's operand)
    output: int
    kept: tuple[Axis, ...]     # output axes, outer to inner
    reduced: tuple[Axis, ...]  # summed axes, outer to inner
    g: int                     # outputs per group
    warps: int                 # warps per group
    source: str = ""
    in_types: tuple = ()       # C types of the kernel's inputs: the operand, or those its terms are made from

    @property
    def m(self) -> int:
        return int(np.prod([e for e, _ in self.kept], dtype=np.int64))

    @property
    def n(self) -> int:
        return int(np.prod([e for e, _ in self.reduced], dtype=np.int64))

    @property
    def groups(self) -> int:
        return -(-self.m // self.g)

    @property
    def lanes(self) -> int:
        return self.warps * WARP


def _merge(axes: list[tuple[int, int, bool]]) -> list[tuple[int, int, bool]]:
    """Neighbouring axes of one kind (kept or reduced) that are one run in memory, as one axis."""
    out: list[tuple[int, int, bool]] = []
    for e, s, red in axes:
        if out and out[-1][2] == red and out[-1][1] == e * s:
            pe, _, _ = out.pop()
            e = pe * e
        out.append((e, s, red))
    return out


def geometry(step: Launch, plan: Plan, g: int | None = None, warps: int | None = None) -> Reduction:
    """How ``step`` (a ``SumTo``) is summed: its axes, ``G`` and ``W`` (chosen unless given)."""
    (a,) = step.instrs
    op = a.op
    if not isinstance(op, P.SumTo):
        raise NotImplementedError(f"GPU backend: no reduction kernel for {op.name}")
    shape = op.T.shape
    lead, kept = op.axes()
    summed = set(lead) | set(kept)
    base, stages = plan.read(plan.src(a.args[0]))
    if not stages:
        strides = contiguous_strides(shape)
    elif len(stages) == 1 and tuple(stages[0][0]) == tuple(shape):
        strides = tuple(stages[0][1])
    else:  # place_views copies an operand that is not one strided view of its base
        raise AssertionError(f"SumTo reads {len(stages)} layout stages: one strided view expected")
    axes = _merge([(e, s, d in summed) for d, (e, s) in enumerate(zip(shape, strides)) if e != 1])
    ks = tuple((e, s) for e, s, red in axes if not red)
    rs = tuple((e, s) for e, s, red in axes if red)
    top = sum((e - 1) * s for e, s, _ in axes)
    if top >= plan.program.types[base].size:
        raise AssertionError(f"SumTo reads offset {top} of a base of {plan.program.types[base].size} elements")
    if g is None:
        g = 1
        if ks and ks[-1][1] == 1 and not (rs and rs[-1][1] == 1):
            g = min(COLUMNS, 1 << (ks[-1][0].bit_length() - 1))
    if warps is None:
        n = int(np.prod([e for e, _ in rs], dtype=np.int64))
        warps = 1
        while warps < MAX_WARPS and -(-n * g // (WARP * warps)) > TERMS:
            warps *= 2
    if WARP % g or MAX_WARPS % warps:
        raise ValueError(f"reduction: G = {g} must divide {WARP} and W = {warps} divide {MAX_WARPS}")
    return Reduction(base, a.results[0], ks, rs, g, warps)


def _offset(var: str, axes: tuple[Axis, ...]) -> str:
    """The offset of element ``var`` (a linear index over ``axes``): ``Σ coord_d(var) · stride_d``."""
    terms, inner = [], 1
    for k in range(len(axes) - 1, -1, -1):
        e, s = axes[k]
        coord = var if inner == 1 else f"({var} / {inner}LL)"
        if k > 0:                                    # the outermost coordinate is below its extent already
            coord = f"({coord} % {e}LL)"
        if s:
            terms.append(coord if s == 1 else f"{coord} * {s}LL")
        inner *= e
    return " + ".join(terms) if terms else "0"


def reduce_source(step: Launch, plan: Plan, name: str, c: str, g: int | None = None,
                  warps: int | None = None) -> Reduction:
    """The geometry of ``step`` with its CUDA C source (``c``: the C type of the output, ``float`` or
    ``double``); ``g`` and ``warps`` override the chosen ``G`` and ``W`` (the tests and benchmarks try others)."""
    r = geometry(step, plan, g, warps)
    t = _Terms(step, plan, name, c)
    sig = f"{t.params}, {c}* __restrict__ y"
    src = t.source + _partial(r, name, c, t) + _device(r, name, c, sig, t.args) + host_replay(
        name,
        "// host only: the group's lanes one after another (31 … 0 in the host mode's reverse order), the\n"
        "// shuffles and the sum over the warps replayed in the device's order\n",
        "grp", sig, _host(r, name, c, t.args),
        f"    if (warp % {r.warps} != 0) return;                   // the group's first warp runs the whole group\n"
        f"    const long long grp = (long long)(block * blockDim.x / {WARP} + warp) / {r.warps};\n"
        f"    if (grp < {r.groups}LL) {name}_body(grp, {t.args}, y);\n")
    return Reduction(r.base, r.output, r.kept, r.reduced, r.g, r.warps, src, t.in_types)


class _Terms:
    """How a lane reads the term at an offset: ``x[o]`` (the operand in memory), or, where the step makes its
    terms (:func:`~.passes.choose_summed`), ``<name>_term(o, in0, …)`` computing them from the step's inputs."""

    def __init__(self, step: Launch, plan: Plan, name: str, c: str):
        if step.remat:
            (a,) = step.instrs
            v = plan.read(plan.src(a.args[0]))[0]
            self.source, self.in_types = value_function(step, plan, f"{name}_term", v)
            self.params = ", ".join(f"const {t}* __restrict__ in{k}" for k, t in enumerate(self.in_types))
            self.args = ", ".join(f"in{k}" for k in range(len(self.in_types)))
        else:
            self.source, self.in_types = "", (c,)
            self.params, self.args = f"const {c}* __restrict__ x", "x"
        self.made = bool(step.remat)
        self.name = name

    def at(self, offset: str) -> str:
        return f"{self.name}_term({offset}, {self.args})" if self.made else f"x[{offset}]"


def _partial(r: Reduction, name: str, c: str, t: _Terms) -> str:
    """The per-lane helpers: ``<name>_out(o)`` and ``<name>_red(r)`` (offsets of an output and of a term) and
    ``<name>_part(grp, L, …)``, lane ``L``'s partial sum in :data:`UNROLL` accumulators."""
    G, W, m, n = r.g, r.warps, r.m, r.n
    stride = W * WARP // G                           # terms between a lane's loads
    hd = "__host__ __device__ inline"
    acc = [f"s{u}" for u in range(UNROLL)]
    loads = "".join(f"            {s} += {t.at(f'at + {name}_red(r + {u * stride}LL)')};\n"
                    for u, s in enumerate(acc))
    assert UNROLL == 4
    return (f"{hd} long long {name}_out(long long o) {{ return {_offset('o', r.kept)}; }}\n"
            f"{hd} long long {name}_red(long long r) {{ return {_offset('r', r.reduced)}; }}\n"
            f"// lane L (0 <= L < {W * WARP}) of group `grp`: output grp*{G} + L%{G}, terms L/{G}, L/{G} + {stride}, ...\n"
            f"{hd} {c} {name}_part(long long grp, int L, {t.params}) {{\n"
            f"    {c} {' = 0, '.join(acc)} = 0;\n"
            f"    const long long o = grp * {G}LL + L % {G};\n"
            f"    if (o < {m}LL) {{\n"
            f"        const long long at = {name}_out(o);\n"
            f"        long long r = L / {G};\n"
            f"        for (; r + {(UNROLL - 1) * stride}LL < {n}LL; r += {UNROLL * stride}LL) {{\n"
            + loads +
            f"        }}\n"
            f"        for (; r < {n}LL; r += {stride}LL) s0 += {t.at(f'at + {name}_red(r)')};\n"
            f"    }}\n"
            f"    return (s0 + s1) + (s2 + s3);\n}}\n")


def _device(r: Reduction, name: str, c: str, sig: str, args: str) -> str:
    """The ``__global__`` kernel: each lane's partial, the shuffles down to ``G`` lanes, and with ``W > 1`` the
    warps' partials added in shared memory by the group's first warp."""
    G, W, m = r.g, r.warps, r.m
    shuffle = (f"    for (int o = {WARP // 2}; o >= {G}; o >>= 1) {{\n"
               f"        const {c} s_o = __shfl_xor_sync({FULL}, s, o);\n"
               f"        s = s + s_o;\n    }}\n")
    head = (f"extern \"C\" __global__ void {name}({sig}) {{\n"
            f"    // {W} warp(s) per group of {G} outputs (blockDim.x is a multiple of {W * WARP}: a group never "
            f"straddles blocks)\n"
            f"    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    const long long grp = t / {W * WARP};\n"
            f"    const int L = (int)(t % {W * WARP});\n")
    if W == 1:
        return (head + f"    if (grp >= {r.groups}LL) return;             // the whole warp\n"
                f"    {c} s = {name}_part(grp, L, {args});\n" + shuffle
                + f"    if (L < {G} && grp * {G}LL + L < {m}LL) y[grp * {G}LL + L] = s;\n}}\n")
    return (head + f"    {c} s = {name}_part(grp, L, {args});          // 0 past the last output: every thread "
            f"reaches __syncthreads\n" + shuffle
            + f"    __shared__ {c} part[{WARP * G}];                 // [warp of the block][output]\n"
            f"    const int w = (int)(threadIdx.x / {WARP});\n"
            f"    if (L % {WARP} < {G}) part[w * {G} + L % {WARP}] = s;\n"
            f"    __syncthreads();\n"
            f"    if (L < {G} && grp * {G}LL + L < {m}LL) {{      // the group's first warp adds its warps, "
            f"in order\n"
            f"        {c} tot = part[w * {G} + L];\n"
            f"        for (int j = 1; j < {W}; ++j) tot = tot + part[(w + j) * {G} + L];\n"
            f"        y[grp * {G}LL + L] = tot;\n    }}\n}}\n")


def _host(r: Reduction, name: str, c: str, args: str) -> str:
    """The host replay of group ``grp``: its lanes in turn, the shuffles, then the sum over the warps."""
    G, W, m = r.g, r.warps, r.m
    return (f"    {c} s[{W * WARP}] = {{}}, s2[{W * WARP}] = {{}};\n"
            f"    for (int w = 0; w < {W}; ++w) {{\n"
            + lanes(name, f"s[w * {WARP} + l] = {name}_part(grp, w * {WARP} + l, {args});", "        ")
            + f"        for (int o = {WARP // 2}; o >= {G}; o >>= 1) {{\n"
            + lanes(name, f"s2[w * {WARP} + l] = s[w * {WARP} + l] + s[w * {WARP} + (l ^ o)];", "            ")
            + lanes(name, f"s[w * {WARP} + l] = s2[w * {WARP} + l];", "            ")
            + f"        }}\n    }}\n"
            f"    for (int l = 0; l < {G}; ++l) {{\n"
            f"        {c} tot = s[l];\n"
            f"        for (int w = 1; w < {W}; ++w) tot = tot + s[w * {WARP} + l];\n"
            f"        if (grp * {G}LL + l < {m}LL) y[grp * {G}LL + l] = tot;\n    }}\n")


def reduce_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """The sum kernel of a ``reduce`` step (``SumTo``): a warp or a few per group of outputs."""
    r = reduce_source(step, plan, name, ctype(plan.program.types[step.outputs[0]]))
    ins = list(step.inputs) if step.remat else [r.base]
    ops = ["SumTo"] + [f"({a.op.name})" for a in step.remat]
    return with_extents(Kernel(name, r.source, ins, [r.output], r.groups, ops, frozenset(ins), r.in_types,
                               lanes=r.lanes), plan)
