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
offset is an element's index), from the step's inputs. Sums of one geometry side by side
(:func:`~.passes.group_sums`) share the loop: each keeps its own accumulators, shuffles and shared memory, and
adds its terms in the order it would alone, so each output has the bits of its own kernel.

Row sums of one warp a row may run more in the same kernel (``Launch.then``, :mod:`~.epilogue`): further
stages of row sums (``<name>_1``, …), each after a ``__syncwarp`` so that it reads the sums lane 0 wrote, and
then an epilogue (``<name>_epi``) over the row's columns with every sum of the row in registers.

The per-lane partial is ``__host__ __device__``; ``<name>_body(group, …)`` (host only) runs the group's lanes in
turn, in the host mode's order, and replays the shuffles and the shared-memory sum exactly, and
``<name>__host_warp`` (``#ifdef CG_HOSTRUN``) runs it for the group's first warp, as the row kernels of
:mod:`~.row` do (see :mod:`~.warp`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .cuda import ctype
from .elementwise import element_body, value_function
from .kernel import Kernel, with_extents
from .sums import MAX_WARPS, UNROLL, Reduction, geometry, offset
from .warp import FULL, WARP, host_replay, lanes

if TYPE_CHECKING:
    from .plan import Launch, Plan

__all__ = ["Reduction", "geometry", "reduce_source", "reduce_kernel", "MAX_WARPS", "UNROLL"]


def reduce_source(step: Launch, plan: Plan, name: str, c: str, g: int | None = None,
                  warps: int | None = None) -> Reduction:
    """The geometry of ``step`` with its CUDA C source (``c``: the C type of the output, ``float`` or
    ``double``); ``g`` and ``warps`` override the chosen ``G`` and ``W`` (the tests and benchmarks try others).
    Sums it runs after its own (``Launch.then``, :mod:`~.epilogue`) are stages ``<name>_1``, … of the kernel, each
    after a ``__syncwarp`` (a later stage reads the sums lane 0 wrote: those pointers are not ``__restrict__``)."""
    cores, f = stages(step, plan)
    r = geometry(cores[0], plan, g, warps)
    if len(cores) > 1 and (r.g, r.warps) != (1, 1):
        raise AssertionError(f"sums after sums of G = {r.g}, W = {r.warps}: row sums of one warp expected")
    names = [name] + [f"{name}_{k}" for k in range(1, len(cores))]
    read_again = {v for core in cores[1:] for v in kernel_inputs(core, plan)} & {v for core in cores
                                                                                  for v in core.outputs}
    ts = [_Terms(core, plan, nm, c, prefix=f"b{k}_" if k else "", shared=read_again)   # sums read again
          for k, (core, nm) in enumerate(zip(cores, names))]
    e = _Epilogue(step, f, plan, name, c, r) if f is not None else None
    ein, eout = (e.params[:e.ins], e.params[e.ins:]) if e else ([], [])      # the kernel's inputs, then outputs
    outs = [f"{c}*{'' if v in read_again else ' __restrict__'} {y}" for t, core in zip(ts, cores)
            for y, v in zip(t.outs, core.outputs)]
    sig = ", ".join([t.params for t in ts] + ein + outs + eout)
    args = ", ".join([t.args for t in ts] + (e.args[:e.ins] if e else []) + [y for t in ts for y in t.outs]
                     + (e.args[e.ins:] if e else []))
    src = (e.source if e else "") + "".join(t.source + _partial(r, nm, c, t) for t, nm in zip(ts, names))
    src += _device(r, name, c, sig, ts, names, e) + host_replay(
        name,
        "// host only: the group's lanes one after another (31 … 0 in the host mode's reverse order), the\n"
        "// shuffles and the sum over the warps replayed in the device's order\n",
        "grp", sig, _host(r, name, c, ts, names, e),
        f"    if (warp % {r.warps} != 0) return;                   // the group's first warp runs the whole group\n"
        f"    const long long grp = (long long)(block * blockDim.x / {WARP} + warp) / {r.warps};\n"
        f"    if (grp < {r.groups}LL) {name}_body(grp, {args});\n")
    return Reduction(r.base, r.output, r.kept, r.reduced, r.g, r.warps, src,
                     sum((t.in_types for t in ts), ()) + (e.body.in_types if e else ()), e.body.reads if e else ())


def stages(step: Launch, plan: Plan) -> tuple[list[Launch], Launch | None]:
    """The sums ``step``'s kernel runs, in order, each :func:`alone`, and its epilogue (``None`` without one)."""
    chain = step.chain
    f = chain[-1] if chain[-1].kind == "fused" else None
    return [alone(m, plan) for m in chain if m.kind == "reduce"], f


class _Terms:
    """The kernel's parameters and how a lane reads sum ``k``'s term at an offset: ``x[o]`` (one sum reading its
    operand), ``in<j>[o]`` (sums side by side, :func:`~.passes.group_sums`), or ``<name>_term<k>(o, in0, …)``
    where the step makes the terms (:func:`~.passes.choose_summed`) from its inputs."""

    def __init__(self, step: Launch, plan: Plan, name: str, c: str, prefix: str = "",
                 shared: set[int] = frozenset()):
        """``prefix``: of its parameters' names (the stages of a kernel); ``shared``: arrays another stage writes,
        read through pointers that are not ``__restrict__``."""
        self.name, self.k = name, len(step.instrs)
        if self.k == 1 and not step.remat:
            self.source, self.in_types = "", (c,)
            self.params, self.args, self.outs = f"const {c}* __restrict__ {prefix}x", f"{prefix}x", [f"{prefix}y"]
            self.read = [f"{prefix}x[{{}}]"]
            return
        made = {r for a in step.remat for r in a.results}
        ins = kernel_inputs(step, plan)
        self.in_types = tuple(ctype(plan.program.types[v]) for v in ins)
        self.params = ", ".join(f"const {t}*{'' if v in shared else ' __restrict__'} {prefix}in{k}"
                                for k, (t, v) in enumerate(zip(self.in_types, ins)))
        self.args = ", ".join(f"{prefix}in{k}" for k in range(len(self.in_types)))
        self.outs = [f"{prefix}y"] if self.k == 1 else [f"{prefix}y{k}" for k in range(self.k)]
        self.source, self.read = "", []
        for k, a in enumerate(step.instrs):
            v = plan.read(plan.src(a.args[0]))[0]
            if v in made:
                fn = f"{name}_term{k}" if self.k > 1 else f"{name}_term"
                src, types = value_function(replace(step, inputs=ins), plan, fn, v, shared)
                assert types == self.in_types
                self.source += src
                self.read.append(f"{fn}({{}}, {self.args})")
            else:
                self.read.append(f"{prefix}in{ins.index(v)}[{{}}]")

    def at(self, k: int, offset: str) -> str:
        return self.read[k].format(offset)


class _Epilogue:
    """The fused step a kernel of row sums runs after them (``Launch.then``, :mod:`~.epilogue`):
    ``<name>_epi(grp, L, s, …)`` makes lane ``L``'s columns ``L, L + 32, …`` of row ``grp``, reading sum ``k``'s
    total of the row (of every stage's, in order) as ``s[k]`` (the kernel's ``tot``: every lane holds it after
    the shuffles). Its arrays are the kernel's last
    parameters, ``e_in<k>`` and ``e_out<k>``."""

    def __init__(self, step: Launch, f: Launch, plan: Plan, name: str, c: str, r: Reduction):
        if r.g != 1 or r.warps != 1:
            raise AssertionError(f"an epilogue after sums of G = {r.g}, W = {r.warps}: row sums of one warp expected")
        sums = step.outputs[:len(step.outputs) - len(f.outputs)]
        self.inputs = epilogue_inputs(step)
        e = replace(f, inputs=self.inputs)
        b = element_body(e, plan, name, given={v: f"s[{k}]" for k, v in enumerate(sums)}, pad="        ")
        self.body, self.outputs = b, list(f.outputs)
        names = [p.rsplit(" ", 1) for p in b.params]        # the inputs, then the outputs
        self.params = [f"{t} e_{n}" for t, n in names]
        self.args = [f"e_{n}" for _, n in names]
        self.ins = len(self.inputs)
        n = r.n
        self.source = (b.helper + f"// the epilogue: lane L makes columns L, L + {WARP}, ... of row grp, the row's sums "
                       f"in s\n__host__ __device__ inline void {name}_epi(long long grp, int L, const {c}* s, "
                       f"{', '.join(b.params)}) {{\n"
                       f"    for (long long col = L; col < {n}LL; col += {WARP}) {{\n"
                       f"        const long long i = grp * {n}LL + col;\n"
                       + "\n".join(b.lines) + "\n    }\n}\n")


def alone(step: Launch, plan: Plan) -> Launch:
    """The sums of ``step`` without what its kernel runs after them (``step`` itself when nothing): its own
    outputs, and the arrays its sums and the terms they make read."""
    if step.then is None:
        return step
    made = {r for a in step.remat + step.instrs for r in a.results}
    ins: list[int] = []
    for a in step.remat + step.instrs:
        for x in a.args:
            v = plan.src(x)
            if v not in plan.constants and plan.read(v)[0] not in made and plan.read(v)[0] not in ins:
                ins.append(plan.read(v)[0])
    return replace(step, inputs=ins, outputs=step.outputs[:len(step.outputs) - len(step.then.outputs)], then=None)


def epilogue_inputs(step: Launch) -> list[int]:
    """The arrays a sum kernel's epilogue reads: its fused step's inputs but the sums (held in registers)."""
    return [v for v in step.chain[-1].inputs if v not in step.outputs]


def kernel_arrays(step: Launch, plan: Plan) -> list[list[int]]:
    """The arrays a sum kernel reads, by stage (:func:`stages`), then its epilogue's: the first stage reads its
    operand's base where it sums one operand (``x``), else the arrays its terms are made from."""
    cores, f = stages(step, plan)
    parts = [[geometry(core, plan).base] if len(core.instrs) == 1 and not core.remat else kernel_inputs(core, plan)
             for core in cores]
    return parts + [epilogue_inputs(step) if f is not None else []]


def kernel_inputs(step: Launch, plan: Plan) -> list[int]:
    """The arrays a sum kernel reads: its step's inputs but the views (a view's base is among them)."""
    return [v for v in step.inputs if plan.read(v)[0] == v]


def _partial(r: Reduction, name: str, c: str, t: _Terms) -> str:
    """The per-lane helpers: ``<name>_out(o)`` and ``<name>_red(r)`` (offsets of an output and of a term) and
    ``<name>_part(grp, L, …, s)``, lane ``L``'s partial sum of each sum ``k`` into ``s[k]``, each in
    :data:`UNROLL` accumulators (the same order whatever the number of sums)."""
    G, W, m, n, K = r.g, r.warps, r.m, r.n, t.k
    stride = W * WARP // G                           # terms between a lane's loads
    hd = "__host__ __device__ inline"
    acc = [[f"s{u}_{k}" for k in range(K)] for u in range(UNROLL)]
    loads = "".join(f"            {{ const long long e = at + {name}_red(r + {u * stride}LL); "
                    + " ".join(f"{acc[u][k]} += {t.at(k, 'e')};" for k in range(K)) + " }\n" for u in range(UNROLL))
    tail = " ".join(f"{acc[0][k]} += {t.at(k, 'e')};" for k in range(K))
    assert UNROLL == 4
    return (f"{hd} long long {name}_out(long long o) {{ return {offset('o', r.kept)}; }}\n"
            f"{hd} long long {name}_red(long long r) {{ return {offset('r', r.reduced)}; }}\n"
            f"// lane L (0 <= L < {W * WARP}) of group `grp`: output grp*{G} + L%{G}, terms L/{G}, L/{G} + {stride}, ...\n"
            f"{hd} void {name}_part(long long grp, int L, {t.params}, {c}* s) {{\n"
            f"    {c} {' = 0, '.join(x for row in acc for x in row)} = 0;\n"
            f"    const long long o = grp * {G}LL + L % {G};\n"
            f"    if (o < {m}LL) {{\n"
            f"        const long long at = {name}_out(o);\n"
            f"        long long r = L / {G};\n"
            f"        for (; r + {(UNROLL - 1) * stride}LL < {n}LL; r += {UNROLL * stride}LL) {{\n"
            + loads +
            f"        }}\n"
            f"        for (; r < {n}LL; r += {stride}LL) {{ const long long e = at + {name}_red(r); {tail} }}\n"
            f"    }}\n"
            + "".join(f"    s[{k}] = ({acc[0][k]} + {acc[1][k]}) + ({acc[2][k]} + {acc[3][k]});\n" for k in range(K))
            + "}\n")


def _shuffle(c: str, K: int, G: int, pad: str) -> str:
    """Each lane adds its partner's partial, for o = 16, 8, … down to ``G`` (``s[k]`` for the ``K`` sums)."""
    return (f"{pad}for (int o = {WARP // 2}; o >= {G}; o >>= 1) {{\n"
            + "".join(f"{pad}    const {c} s_o{k} = __shfl_xor_sync({FULL}, s[{k}], o);\n"
                      f"{pad}    s[{k}] = s[{k}] + s_o{k};\n" for k in range(K))
            + f"{pad}}}\n")


def _device(r: Reduction, name: str, c: str, sig: str, ts: list[_Terms], names: list[str],
            e: _Epilogue | None = None) -> str:
    """The ``__global__`` kernel: each lane's partials, the shuffles down to ``G`` lanes, and with ``W > 1`` the
    warps' partials added in shared memory by the group's first warp. With ``W = 1``: each stage so in turn
    (``names``: its helpers'), then the epilogue ``e``, if any, with every sum of the row."""
    G, W, m = r.g, r.warps, r.m
    head = (f"extern \"C\" __global__ void {name}({sig}) {{\n"
            f"    // {W} warp(s) per group of {G} outputs (blockDim.x is a multiple of {W * WARP}: a group never "
            f"straddles blocks)\n"
            f"    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    const long long grp = t / {W * WARP};\n"
            f"    const int L = (int)(t % {W * WARP});\n")
    if W == 1:
        code = head + f"    if (grp >= {r.groups}LL) return;             // the whole warp\n"
        if e:
            code += f"    {c} tot[{sum(t.k for t in ts)}];                       // the row's sums, for the epilogue\n"
        at = 0
        for j, (t, nm) in enumerate(zip(ts, names)):
            if j:
                code += "    __syncwarp();                   // lane 0's sums above are read below by every lane\n"
            code += (f"    {{\n        {c} s[{t.k}];\n        {nm}_part(grp, L, {t.args}, s);\n"
                     + _shuffle(c, t.k, G, "        ")
                     + f"        if (L < {G} && grp * {G}LL + L < {m}LL) {{\n"
                     + "".join(f"            {y}[grp * {G}LL + L] = s[{k}];\n" for k, y in enumerate(t.outs))
                     + "        }\n"
                     + ("".join(f"        tot[{at + k}] = s[{k}];\n" for k in range(t.k)) if e else "")
                     + "    }\n")
            at += t.k
        if e:
            code += f"    {name}_epi(grp, L, tot, {', '.join(e.args)});     // every lane holds the row's sums\n"
        return code + "}\n"
    (t,) = ts
    K, part = t.k, WARP * G
    return (head + f"    {c} s[{K}];\n"
            f"    {name}_part(grp, L, {t.args}, s);          // 0 past the last output: every thread "
            f"reaches __syncthreads\n" + _shuffle(c, K, G, "    ")
            + f"    __shared__ {c} part[{K * part}];                 // [sum][warp of the block][output]\n"
            f"    const int w = (int)(threadIdx.x / {WARP});\n"
            f"    if (L % {WARP} < {G}) {{\n"
            + "".join(f"        part[{k * part} + w * {G} + L % {WARP}] = s[{k}];\n" for k in range(K))
            + f"    }}\n"
            f"    __syncthreads();\n"
            f"    if (L < {G} && grp * {G}LL + L < {m}LL) {{      // the group's first warp adds its warps, "
            f"in order\n"
            + "".join(f"        {c} tot{k} = part[{k * part} + w * {G} + L];\n"
                      f"        for (int j = 1; j < {W}; ++j) tot{k} = tot{k} + part[{k * part} + (w + j) * {G} + L];\n"
                      f"        {y}[grp * {G}LL + L] = tot{k};\n" for k, y in enumerate(t.outs))
            + "    }\n}\n")


def _host(r: Reduction, name: str, c: str, ts: list[_Terms], names: list[str], e: _Epilogue | None = None) -> str:
    """The host replay of group ``grp``: for each stage, its lanes in turn, the shuffles, then the sum over the
    warps; then the epilogue ``e``, if any, for each lane (with ``W = 1``, every lane's sums are lane 0's, bit
    for bit)."""
    G, W, m = r.g, r.warps, r.m
    n = W * WARP
    code = f"    {c} tot[{sum(t.k for t in ts)}];\n" if e else ""
    at = 0
    for t, nm in zip(ts, names):
        K = t.k
        keep = " ".join(f"s{k}[w * {WARP} + l] = p[{k}];" for k in range(K))
        code += ("    {\n" + "".join(f"    {c} s{k}[{n}] = {{}}, s2_{k}[{n}] = {{}};\n" for k in range(K))
                 + f"    for (int w = 0; w < {W}; ++w) {{\n"
                 + lanes(name, f"{c} p[{K}]; {nm}_part(grp, w * {WARP} + l, {t.args}, p); {keep}", "        ")
                 + f"        for (int o = {WARP // 2}; o >= {G}; o >>= 1) {{\n"
                 + "".join(lanes(name, f"s2_{k}[w * {WARP} + l] = s{k}[w * {WARP} + l] + s{k}[w * {WARP} + (l ^ o)];",
                                 "            ")
                           + lanes(name, f"s{k}[w * {WARP} + l] = s2_{k}[w * {WARP} + l];", "            ")
                           for k in range(K))
                 + f"        }}\n    }}\n"
                 f"    for (int l = 0; l < {G}; ++l) {{\n"
                 + "".join(f"        {c} tot{k} = s{k}[l];\n"
                           f"        for (int w = 1; w < {W}; ++w) tot{k} = tot{k} + s{k}[w * {WARP} + l];\n"
                           f"        if (grp * {G}LL + l < {m}LL) {y}[grp * {G}LL + l] = tot{k};\n"
                           for k, y in enumerate(t.outs))
                 + "    }\n"
                 + ("".join(f"    tot[{at + k}] = s{k}[0];\n" for k in range(K)) if e else "")
                 + "    }\n")
        at += K
    return code + (lanes(name, f"{name}_epi(grp, l, tot, {', '.join(e.args)});") if e else "")


def reduce_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """The sum kernel of a ``reduce`` step (``SumTo``): a warp or a few per group of outputs; with the sums and
    the epilogue it runs after its own (``Launch.then``)."""
    r = reduce_source(step, plan, name, ctype(plan.program.types[step.outputs[0]]))
    parts = kernel_arrays(step, plan)
    ins = [v for part in parts for v in part]
    cores, f = stages(step, plan)
    ops = [op for core in cores for op in ["SumTo"] * len(core.instrs) + [f"({a.op.name})" for a in core.remat]]
    if f is not None:                                        # then the epilogue's arrays (:class:`_Epilogue`)
        n = plan.program.types[f.instrs[-1].results[0]].size
        # a check only (it raises): the epilogue's reads at its own elements stay inside its arrays
        with_extents(Kernel(name, "", parts[-1], list(f.outputs), n, [], reads=r.reads), plan)
        ops += [a.op.name for a in f.instrs] + [f"({a.op.name})" for a in f.remat]
    return with_extents(Kernel(name, r.source, ins, list(step.outputs), r.groups, ops, frozenset(ins), r.in_types,
                               lanes=r.lanes), plan)
