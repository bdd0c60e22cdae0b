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

The per-lane partial is ``__host__ __device__``; ``<name>_body(group, …)`` (host only) runs the group's lanes in
turn, in the host mode's order, and replays the shuffles and the shared-memory sum exactly, and
``<name>__host_warp`` (``#ifdef CG_HOSTRUN``) runs it for the group's first warp, as the row kernels of
:mod:`~.cuda` do.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuitgrad import primitives as P

from .plan import Launch, Plan, contiguous_strides

__all__ = ["Reduction", "geometry", "reduce_source", "host_lane", "MAX_WARPS", "UNROLL", "WARP"]

WARP = 32
MAX_WARPS = 8           # warps of one group: a group never straddles a block of 256 threads (runtime.BLOCK)
UNROLL = 4              # accumulators per lane (independent loads in flight)
TERMS = 32              # a lane sums at most about this many terms before the group takes another warp
COLUMNS = 8             # outputs per group of a column sum (8 floats: one 32-byte sector)
FULL = "0xffffffffu"

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


def _lanes(name: str, stmt: str, pad: str) -> str:
    return f"{pad}for (int l0 = 0; l0 < {WARP}; ++l0) {{ const int l = {name}_lane(l0); {stmt} }}\n"


def host_lane(name: str) -> str:
    """The host-only ``<name>_lane(l)``: a warp's lane ``l`` in the host mode's thread order (31 … 0 in reverse),
    so a kernel's host replay visits its lanes as the host execution mode orders threads."""
    return (f"inline int {name}_lane(int l) {{\n"
            "#ifdef CG_HOSTRUN\n"
            f"    return cg_reverse ? {WARP - 1} - l : l;\n"
            "#else\n"
            "    return l;\n"
            "#endif\n"
            "}\n")


def reduce_source(step: Launch, plan: Plan, name: str, c: str, g: int | None = None,
                  warps: int | None = None) -> Reduction:
    """The geometry of ``step`` with its CUDA C source (``c``: the C type of the output, ``float`` or
    ``double``); ``g`` and ``warps`` override the chosen ``G`` and ``W`` (the tests and benchmarks try others)."""
    r = geometry(step, plan, g, warps)
    G, W, m, n = r.g, r.warps, r.m, r.n
    stride = W * WARP // G                           # terms between a lane's loads
    hd = "__host__ __device__ inline"
    x = f"const {c}* __restrict__ x"
    sig = f"{x}, {c}* __restrict__ y"
    acc = [f"s{u}" for u in range(UNROLL)]
    loads = "".join(f"            {s} += x[at + {name}_red(r + {u * stride}LL)];\n" for u, s in enumerate(acc))
    part = (f"{hd} long long {name}_out(long long o) {{ return {_offset('o', r.kept)}; }}\n"
            f"{hd} long long {name}_red(long long r) {{ return {_offset('r', r.reduced)}; }}\n"
            f"// lane L (0 <= L < {W * WARP}) of group `grp`: output grp*{G} + L%{G}, terms L/{G}, L/{G} + {stride}, ...\n"
            f"{hd} {c} {name}_part(long long grp, int L, {x}) {{\n"
            f"    {c} {' = 0, '.join(acc)} = 0;\n"
            f"    const long long o = grp * {G}LL + L % {G};\n"
            f"    if (o < {m}LL) {{\n"
            f"        const long long at = {name}_out(o);\n"
            f"        long long r = L / {G};\n"
            f"        for (; r + {(UNROLL - 1) * stride}LL < {n}LL; r += {UNROLL * stride}LL) {{\n"
            + loads +
            f"        }}\n"
            f"        for (; r < {n}LL; r += {stride}LL) s0 += x[at + {name}_red(r)];\n"
            f"    }}\n"
            f"    return (s0 + s1) + (s2 + s3);\n}}\n")
    assert UNROLL == 4
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
        device = (head + f"    if (grp >= {r.groups}LL) return;             // the whole warp\n"
                  f"    {c} s = {name}_part(grp, L, x);\n" + shuffle
                  + f"    if (L < {G} && grp * {G}LL + L < {m}LL) y[grp * {G}LL + L] = s;\n}}\n")
    else:
        device = (head + f"    {c} s = {name}_part(grp, L, x);          // 0 past the last output: every thread "
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
    host = (f"    {c} s[{W * WARP}] = {{}}, s2[{W * WARP}] = {{}};\n"
            f"    for (int w = 0; w < {W}; ++w) {{\n"
            + _lanes(name, f"s[w * {WARP} + l] = {name}_part(grp, w * {WARP} + l, x);", "        ")
            + f"        for (int o = {WARP // 2}; o >= {G}; o >>= 1) {{\n"
            + _lanes(name, f"s2[w * {WARP} + l] = s[w * {WARP} + l] + s[w * {WARP} + (l ^ o)];", "            ")
            + _lanes(name, f"s[w * {WARP} + l] = s2[w * {WARP} + l];", "            ")
            + f"        }}\n    }}\n"
            f"    for (int l = 0; l < {G}; ++l) {{\n"
            f"        {c} tot = s[l];\n"
            f"        for (int w = 1; w < {W}; ++w) tot = tot + s[w * {WARP} + l];\n"
            f"        if (grp * {G}LL + l < {m}LL) y[grp * {G}LL + l] = tot;\n    }}\n")
    src = (part + device
           + "#ifndef __CUDA_ARCH__\n"
           "// host only: the group's lanes one after another (31 … 0 in the host mode's reverse order), the\n"
           "// shuffles and the sum over the warps replayed in the device's order\n"
           + host_lane(name) +
           f"inline void {name}_body(long long grp, {sig}) {{\n" + host + "}\n"
           "#ifdef CG_HOSTRUN\n"
           f"void {name}__host_warp(unsigned long long block, unsigned warp, {sig}) {{\n"
           f"    if (warp % {W} != 0) return;                   // the group's first warp runs the whole group\n"
           f"    const long long grp = (long long)(block * blockDim.x / {WARP} + warp) / {W};\n"
           f"    if (grp < {r.groups}LL) {name}_body(grp, x, y);\n}}\n"
           "#endif\n#endif\n")
    return Reduction(r.base, r.output, r.kept, r.reduced, G, W, src)
