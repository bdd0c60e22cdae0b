"""CUDA C sources for the fused and row-wise kernels of a plan.

Every kernel comes in two parts:

* ``<name>_body(long long i, ...)``: the work for element (or row) ``i``. It
  is ``__host__ __device__``, so the tests compile the same code with
  ``nvcc`` for the CPU and compare it with NumPy.
* ``<name>(...)``: the ``extern "C" __global__`` wrapper that CuPy's
  ``RawKernel`` launches with one thread per element (a row kernel: one
  warp per row, below).

Inputs that are views (broadcasts, transposes, permutations, reshapes) are
read through index arithmetic with the shapes baked in as constants (for
example ``b[i % 16]`` for a bias, or a permuted ``k`` read in place).
Scalar constants become literals. Intermediate values stay in registers, and
only the group's outputs are written to memory.

Row kernels (``Softmax``, causal or not, ``LogSumExp``, ``ArgMaxMask``) run one
warp per row of the last axis (``Kernel.lanes == 32``): lane ``l`` reads and
writes columns ``l, l + 32, …``, and the warp combines its partials with
``__shfl_xor_sync``. Their ``<name>_body(row, ...)`` is host only: it runs the 32
lanes in turn and replays the shuffles exactly (see :func:`_rowwise`). Gathers
(``Slice``, ``Pad``, ``Unfold``, ``Fold``) run one thread per result element,
with the geometry baked in; ``copy`` kernels gather a view into a contiguous
array for a consumer that needs one (a batched cuBLAS product).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.types import Index, NdArrayType

from . import attention
from .layout import offset_bound
from .plan import Launch, Plan, Stage, contiguous_strides, gather_index
from .reduction import host_lane, reduce_source

__all__ = ["Kernel", "CUDA_EXPRESSIONS", "ROW_KERNELS", "GATHER_KERNELS", "kernels", "ctype", "donations", "last_readers",
           "reduce_kernel", "attention_kernel"]


def ctype(t: NdArrayType) -> str:
    """The C type of a wire: ``float``, ``double``, or ``long long`` for ``index(n)`` ids."""
    if isinstance(t.dtype, Index):
        return "long long"
    bits = t.dtype.numpy_dtype().itemsize * 8
    if t.dtype.is_fixed or bits not in (32, 64):
        raise TypeError(f"GPU backend computes in float32/float64, got {t}")
    return "float" if bits == 32 else "double"


def _lit(v: float, c: str) -> str:
    if c == "long long":
        return f"{int(v)}LL"
    s = repr(float(v))
    if s in ("inf", "-inf", "nan"):
        raise ValueError(f"GPU backend: constant {v} cannot be a literal")
    return f"{s}f" if c == "float" else s


def _fn(name: str, c: str) -> str:
    return name + ("f" if c == "float" else "")


def _causal(c: str, op: P.CausalMask, a: str) -> str:
    """Keep entry ``(q, j)`` of the last two axes when ``j <= q``; ``i`` is the element's linear index."""
    s, t = op.T.shape[-2:]
    return f"((i % {t}LL) <= ((i / {t}LL) % {s}LL) ? {a} : ({c})0)"


#: CUDA C expression per elementwise primitive (exactly those of kind ``"elementwise"``):
#: ``(ctype, op, *argument expressions) -> expression`` (the context first, as in every stateful table).
#: An expression may use ``i``, the element's linear index in the operand's shape (``CausalMask``).
CUDA_EXPRESSIONS: dict[type, Callable[..., str]] = {
    P.Add: lambda c, op, a, b: f"({a} + {b})",
    P.Neg: lambda c, op, a: f"(-{a})",
    P.Mul: lambda c, op, a, b: f"({a} * {b})",
    P.Div: lambda c, op, a, b: f"({a} / {b})",
    P.Scale: lambda c, op, a: f"({a} * {_lit(op.c, c)})",
    P.Heaviside: lambda c, op, a: f"({a} > 0 ? ({c})1 : ({c})0)",
    P.Sigmoid: lambda c, op, a: f"(({c})1 / (({c})1 + {_fn('exp', c)}(-{a})))",
    P.Tanh: lambda c, op, a: f"{_fn('tanh', c)}({a})",
    P.Exp: lambda c, op, a: f"{_fn('exp', c)}({a})",
    P.Log: lambda c, op, a: f"{_fn('log', c)}({a})",
    P.Sqrt: lambda c, op, a: f"{_fn('sqrt', c)}({a})",
    P.Rsqrt: lambda c, op, a: f"(({c})1 / {_fn('sqrt', c)}({a}))",
    P.CausalMask: _causal,
    # the operand is the row's id (read through a broadcast along the last axis)
    P.OneHot: lambda c, op, a: f"({a} == i % {op.T.shape[-1]}LL ? ({c})1 : ({c})0)",
}

#: the row kernels (:func:`_rowwise`: one warp per row) and gathers (:func:`_moves`: one thread per element) this
#: module writes, for the primitives of those kinds; ``tests/test_conformance.py`` checks both against the kinds
ROW_KERNELS = (P.Softmax, P.LogSumExp, P.ArgMaxMask)
GATHER_KERNELS = (P.Slice, P.Pad, P.Unfold, P.Fold)


@dataclass
class Kernel:
    """A generated kernel: its name, full source, and how to call it."""
    name: str
    source: str
    inputs: list[int]          # plan variables read (pointer arguments, in order)
    outputs: list[int]         # plan variables written
    n: int                     # items: elements, or rows of a row kernel (see ``lanes``)
    ops: list[str]             # primitive names it executes (for reports)
    strided: frozenset = frozenset()   # inputs read through a layout (not element i for element i)
    in_types: tuple = ()               # C type of each input (``long long`` for ids), as in the source
    donated: dict = field(default_factory=dict)   # output -> the input it is written into (no ``__restrict__``)
    lanes: int = 1             # threads per item: 1 (a thread per element), or 32 (a warp per row)
    extents: tuple = ()        # elements each pointer argument must hold (inputs, then outputs): its whole type
    reads: tuple = ()          # (input position, stages): reads at the thread's own index i in [0, n)

    @property
    def threads(self) -> int:
        """Threads the launch must cover: ``n`` items of ``lanes`` threads each."""
        return self.n * self.lanes


EXTENTS = "// circuitgrad extents:"
MAX_CHECKED = 1 << 22          # layout reads of kernels up to this many threads are checked when generated


def _with_extents(k: Kernel, plan: Plan) -> Kernel:
    """``k`` with the elements each pointer argument must hold: the size of its variable's type (a kernel reads
    an input's base array anywhere in it, through its layout, and writes every element of its outputs). The source
    carries them in a comment (``// circuitgrad extents: n…``) that the host execution mode checks at each launch
    against the memory from each argument's pointer to the end of its allocation."""
    k.extents = tuple(plan.program.types[v].size for v in list(k.inputs) + list(k.outputs))
    for pos, stages in k.reads:                # the largest offset each layout read reaches stays in its input
        if k.n > MAX_CHECKED:
            continue
        top = offset_bound(k.n, stages) if k.n else -1
        if top is None or top >= k.extents[pos]:        # the bound does not settle it: gather the offsets
            top = int(gather_index(k.n, stages).max()) if k.n else -1
        if top >= k.extents[pos]:
            raise AssertionError(f"kernel {k.name}: input {pos} is read at offset {top}, past its "
                                 f"{k.extents[pos]} elements (a layout bug: out of bounds on a device)")
    k.source += f"{EXTENTS} {' '.join(map(str, k.extents))}\n"
    return k


def _strided(t: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """Offset of element ``t`` (a linear index in ``shape``) of a strided view: ``Σ coord_d(t) · strides[d]``."""
    if all(n == 1 or s == c for n, s, c in zip(shape, strides, contiguous_strides(shape))):
        return t
    terms = []
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] == 1 or strides[d] == 0:
            continue
        out_stride = int(np.prod(shape[d + 1:], dtype=np.int64))
        coord = f"({t} / {out_stride}LL)" if out_stride != 1 else t
        coord = f"({coord} % {shape[d]}LL)"
        terms.append(coord if strides[d] == 1 else f"{coord} * {strides[d]}LL")
    return " + ".join(terms) if terms else "0"


def _index(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    """Index into an input of ``in_shape`` broadcast to ``out_shape``, from the output's linear ``i``."""
    if in_shape == out_shape:
        return "i"
    lead = len(out_shape) - len(in_shape)
    cs = contiguous_strides(in_shape)
    strides = tuple(0 if d < lead or in_shape[d - lead] == 1 else cs[d - lead] for d in range(len(out_shape)))
    return _strided("i", out_shape, strides)


def _read_index(stages: tuple[Stage, ...], tmp: str) -> tuple[str, list[str]]:
    """The base offset of element ``i`` of a view: one expression, after temporaries for multi-stage layouts."""
    expr, pre = "i", []
    for k, (shape, strides) in enumerate(stages):
        e = _strided(expr, shape, strides)
        if k < len(stages) - 1:
            pre.append(f"    const long long {tmp}_{k} = {e};")
            expr = f"{tmp}_{k}"
        else:
            expr = e
    return expr, pre


def _wrap(name: str, params: list[str], n: int) -> str:
    pnames = [p.rsplit(" ", 1)[1] for p in params]
    return (f"extern \"C\" __global__ void {name}({', '.join(params)}) {{\n"
            f"    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (i < {n}LL) {name}_body(i, {', '.join(pnames)});\n}}\n")


def fused_kernel(step: Launch, plan: Plan, name: str, donated: dict[int, int] | None = None) -> Kernel:
    """``donated``: output -> input it overwrites; neither pointer is ``__restrict__`` (they alias)."""
    prog = plan.program
    out_t = prog.types[step.instrs[-1].results[0]]
    c = ctype(out_t)
    n = out_t.size
    in_types = tuple(ctype(prog.types[v]) for v in step.inputs)
    defined = {r: a for a in step.remat for r in a.results}       # recomputed where they are read
    strided: set[int] = set()
    read_at: list[tuple[int, tuple]] = []
    count = [0]

    def fresh(prefix: str) -> str:
        count[0] += 1
        return f"{prefix}{count[0]}"

    def emit(instrs: list, lines: list[str], pad: str, again: bool) -> dict[int, str]:
        """Code for ``instrs`` at index ``i``; returns each result's register."""
        value: dict[int, str] = {}
        reads: dict[tuple, str] = {}

        def arg(a, x: int) -> str:
            s = plan.src(x)
            if s in plan.constants:
                return _lit(plan.constants[s], ctype(prog.types[s]))
            b, stages = plan.operand(a, s)
            if b in value:
                assert not stages, "a fused kernel reads its own values element for element"
                return value[b]
            key = (b, stages)
            if key in reads:
                return reads[key]
            idx, pre = _read_index(stages, fresh("j"))
            lines.extend(pad + p.lstrip() for p in pre)
            if b in defined:
                # a small group recomputed at the index this read needs: ``i`` shadowed in a block
                t, w = fresh("o"), fresh("w")
                lines.append(f"{pad}const long long {t} = {idx};")
                lines.append(f"{pad}{c} {w};")
                lines.append(f"{pad}{{")
                lines.append(f"{pad}    const long long i = {t};")
                needed = _closure(b, defined, plan)
                inner = emit([a2 for a2 in step.remat if a2.results[0] in needed], lines, pad + "    ", True)
                lines.append(f"{pad}    {w} = {inner[b]};")
                lines.append(f"{pad}}}")
                reads[key] = w
                return w
            k = step.inputs.index(b)
            if not again:                       # at the thread's own index: checked against the input's size
                read_at.append((k, stages))
            reg = fresh(f"r{b}_") if stages or again else f"r{b}"
            lines.append(f"{pad}const {in_types[k]} {reg} = in{k}[{idx}];")
            if stages or again:
                strided.add(b)
            reads[key] = reg
            return reg

        for a in instrs:
            expr = CUDA_EXPRESSIONS[type(a.op)](c, a.op, *(arg(a, x) for x in a.args))
            r = a.results[0]
            value[r] = f"v{r}"
            lines.append(f"{pad}const {c} v{r} = {expr};   // {a.op.name}")
        return value

    lines: list[str] = []
    value = emit(step.instrs, lines, "    ", False)
    for k, v in enumerate(step.outputs):
        lines.append(f"    out{k}[i] = {value[v]};")
    donated = donated or {}
    aliased = set(donated) | set(donated.values())
    restrict = lambda v: "" if v in aliased else " __restrict__"     # noqa: E731
    params = [f"const {t}*{restrict(v)} in{k}" for k, (t, v) in enumerate(zip(in_types, step.inputs))] + \
             [f"{ctype(prog.types[v])}*{restrict(v)} out{k}" for k, v in enumerate(step.outputs)]
    body = (f"__host__ __device__ inline void {name}_body(long long i, {', '.join(params)}) {{\n"
            + "\n".join(lines) + "\n}\n")
    ops = [a.op.name for a in step.instrs] + [f"({a.op.name})" for a in step.remat]
    return _with_extents(Kernel(name, body + _wrap(name, params, n), list(step.inputs), list(step.outputs), n,
                                ops, frozenset(strided), in_types, dict(donated), reads=tuple(read_at)), plan)


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


def donations(kern: Kernel, step: Launch, donate_pairs: dict[int, int] | None, index: int | None = None,
              last: dict[int, int] | None = None) -> dict[int, int]:
    """The outputs of a fused kernel written into the input they may overwrite (``donate_pairs``: output ->
    input): only where every thread reads the element it writes (the input is not read through a layout), and
    only where this launch (step ``index``) is the input's last reader (``last``, from :func:`last_readers`):
    a later launch, or a view read later, would otherwise read the updated values. Without ``index``/``last``
    nothing is donated."""
    if step.kind != "fused" or not donate_pairs or index is None or last is None:
        return {}
    return {v: d for v in kern.outputs if (d := donate_pairs.get(v)) is not None
            and d in kern.inputs and d not in kern.strided and last.get(d) == index}


def _closure(v: int, defined: dict, plan: Plan) -> set[int]:
    """The recomputed results ``v`` depends on (itself included)."""
    out, todo = set(), [v]
    while todo:
        r = todo.pop()
        if r in out or r not in defined:
            continue
        out.add(r)
        for x in defined[r].args:
            s = plan.src(x)
            if s not in plan.constants:
                todo.append(plan.read(s)[0])
    return out


def _gather(step: Launch, plan: Plan, name: str) -> Kernel:
    """``out[i] = base[offset(i)]``: a view made contiguous for a consumer that needs it."""
    (r,) = step.outputs
    t = plan.program.types[r]
    c = ctype(t)
    base, stages = step.layout
    idx, pre = _read_index(stages, "j")
    params = [f"const {c}* __restrict__ in0", f"{c}* __restrict__ out0"]
    body = (f"__host__ __device__ inline void {name}_body(long long i, {', '.join(params)}) {{\n"
            + "".join(p + "\n" for p in pre) + f"    out0[i] = in0[{idx}];\n}}\n")
    return _with_extents(Kernel(name, body + _wrap(name, params, t.size), [base], [r], t.size,
                                [f"copy({step.instrs[0].op.name})"], frozenset([base]), (c,),
                                reads=((0, tuple(stages)),)), plan)


WARP = 32
FULL = "0xffffffffu"


def _combine(name: str, tag: str, regs: list[tuple[str, str]], body: str) -> tuple[str, str, str]:
    """One warp reduction from ONE combine template: ``(helper, device loop, host replay)``.

    ``helper`` is the combine function, emitted once: ``<name>_comb_<tag>(T& r…, T r_o…)`` folds the partner's
    partial ``r_o`` into ``r`` (``body``). The device loop shuffles each register with lane ``lane ^ o`` (o = 16
    … 1) and calls it; the host replay calls the same function for every lane ``l`` with lane ``l ^ o``'s value
    (double-buffered, as the shuffle reads every lane's value before any lane combines), lanes in the order of
    ``<name>_lane`` (reversed in the host mode's ``reverse`` order). ``regs``: (register, C type)."""
    fn = f"{name}_comb_{tag}"
    sig = ", ".join([f"{t}& {r}" for r, t in regs] + [f"{t} {r}_o" for r, t in regs])
    helper = f"__host__ __device__ inline void {fn}({sig}) {{ {body} }}\n"
    shf = "".join(f"        const {t} {r}_o = __shfl_xor_sync({FULL}, {r}, o);\n" for r, t in regs)
    device = (f"    for (int o = {WARP // 2}; o > 0; o >>= 1) {{\n" + shf
              + f"        {fn}({', '.join(r for r, _ in regs)}, {', '.join(f'{r}_o' for r, _ in regs)});\n    }}\n")
    host = (f"    for (int o = {WARP // 2}; o > 0; o >>= 1) {{\n"
            + _lanes(name, "".join(f"{r}2[l] = {r}[l]; " for r, _ in regs)
                     + f"{fn}({', '.join(f'{r}2[l]' for r, _ in regs)}, {', '.join(f'{r}[l ^ o]' for r, _ in regs)});",
                     "        ")
            + _lanes(name, "".join(f"{r}[l] = {r}2[l]; " for r, _ in regs), "        ")
            + "    }\n")
    return helper, device, host


def _lanes(name: str, stmt: str, pad: str = "    ") -> str:
    """Host code: ``stmt`` for the warp's 32 lanes ``l``, one after another, in ``<name>_lane`` order."""
    return f"{pad}for (int l0 = 0; l0 < {WARP}; ++l0) {{ const int l = {name}_lane(l0); {stmt} }}\n"


def _rowwise(step: Launch, plan: Plan, name: str) -> Kernel:
    """One warp per row of the last axis: softmax (causal: row ``q`` keeps ``j <= q``), log-sum-exp, argmax.

    Lane ``l`` of the warp owns columns ``l, l + 32, …`` (coalesced reads and writes). Each lane computes its
    partial (max; sum of ``exp(x - m)``; first maximum and its index), the warp combines the partials with
    ``__shfl_xor_sync`` for o = 16, 8, 4, 2, 1 (a butterfly: every lane ends with the same value), and each lane
    writes its columns. The per-lane code is ``__host__ __device__``, and so is each combine (:func:`_combine`:
    one function that the device's shuffle loop and the host replay both call); ``<name>_body(row, …)`` (host
    only) runs the 32 lanes one after another and replays the butterfly exactly (``v'[l] = comb(v[l],
    v[l ^ o])``), so the host result is bitwise the device's given the same ``exp``/``log``. The host execution
    mode calls it through ``<name>__host_warp``, lanes 31 … 0 in its ``reverse`` order (``<name>_lane``), so that
    a lane whose partial depended on another's would differ between the orders; ``hostcheck`` calls it through
    its loop over rows.
    """
    a = step.instrs[0]
    t = plan.program.types[a.args[0]]
    c = ctype(t)
    k = t.shape[-1]
    rows = int(np.prod(t.shape[:-1], dtype=np.int64))
    e = _fn("exp", c)
    hd = "__host__ __device__ inline"
    X = f"x[i * {k}LL + j]"
    params = [f"const {c}* __restrict__ x", f"{c}* __restrict__ y"]
    sig = ", ".join(params)
    helpers: list[str] = []
    if type(a.op) not in ROW_KERNELS:
        raise NotImplementedError(f"GPU backend: no row kernel for {a.op.name}")
    if isinstance(a.op, P.ArgMaxMask):
        # NumPy's argmax: the first maximum, a NaN counts as the maximum (the first NaN). ``better`` orders
        # (value, index) pairs totally (NaN above every number, then value, then the smaller index first),
        # so the combine is associative and commutative: any grouping picks NumPy's pair, on every lane.
        helpers.append(
            f"{hd} bool {name}_better({c} v, int j, {c} m, int b) {{\n"
            f"    return v != v ? (m != m ? j < b : true) : (m != m ? false : (v > m || (v == m && j < b)));\n}}\n"
            f"{hd} void {name}_part(long long i, int lane, const {c}* __restrict__ x, {c}& m, int& b) {{\n"
            f"    m = x[i * {k}LL]; b = 0;          // column 0 belongs to every lane: no identity needed\n"
            f"    for (int j = lane; j < {k}; j += {WARP}) {{\n"
            f"        const {c} v = {X};\n"
            f"        if ({name}_better(v, j, m, b)) {{ m = v; b = j; }}\n"
            f"    }}\n}}\n"
            f"{hd} void {name}_write(long long i, int lane, {c}* __restrict__ y, int b) {{\n"
            f"    for (int j = lane; j < {k}; j += {WARP}) y[i * {k}LL + j] = j == b ? ({c})1 : ({c})0;\n}}\n")
        comb, dev, rep = _combine(name, "mb", [("m", c), ("b", "int")],
                                  f"if ({name}_better(m_o, b_o, m, b)) {{ m = m_o; b = b_o; }}")
        helpers.append(comb)
        device = (f"    {c} m; int b;\n"
                  f"    {name}_part(i, lane, x, m, b);\n"
                  + dev
                  + f"    {name}_write(i, lane, y, b);\n")
        host = (f"    {c} m[{WARP}] = {{}}, m2[{WARP}] = {{}}; int b[{WARP}] = {{}}, b2[{WARP}] = {{}};\n"
                + _lanes(name, f"{name}_part(i, l, x, m[l], b[l]);")
                + rep
                + _lanes(name, f"{name}_write(i, l, y, b[l]);"))
    else:
        if isinstance(a.op, P.Softmax) and a.op.causal:
            s = t.shape[-2]
            # row i is query q = i % s: keys j <= q only; the others get exactly 0
            n = f"(int)((i % {s}LL) + 1 < {k}LL ? (i % {s}LL) + 1 : {k}LL)"
        else:
            n = f"{k}"
        # the maximum propagates a NaN (then every output is NaN, as NumPy's); column 0 is every lane's start
        helpers.append(
            f"{hd} {c} {name}_max2({c} a, {c} b) {{ return (a > b || a != a) ? a : b; }}\n"
            f"{hd} int {name}_n(long long i) {{ return {n}; }}\n"
            f"{hd} {c} {name}_max(long long i, int lane, const {c}* __restrict__ x) {{\n"
            f"    const int n = {name}_n(i);\n"
            f"    {c} m = x[i * {k}LL];\n"
            f"    for (int j = lane; j < n; j += {WARP}) m = {name}_max2(m, {X});\n"
            f"    return m;\n}}\n"
            f"{hd} {c} {name}_sum(long long i, int lane, const {c}* __restrict__ x, {c} m) {{\n"
            f"    const int n = {name}_n(i);\n"
            f"    {c} s = 0;\n"
            f"    for (int j = lane; j < n; j += {WARP}) s += {e}({X} - m);\n"
            f"    return s;\n}}\n")
        if isinstance(a.op, P.Softmax):
            helpers.append(
                f"{hd} void {name}_write(long long i, int lane, const {c}* __restrict__ x, {c}* __restrict__ y, "
                f"{c} m, {c} s) {{\n"
                f"    const int n = {name}_n(i);\n"
                f"    for (int j = lane; j < {k}; j += {WARP}) y[i * {k}LL + j] = j < n ? {e}({X} - m) / s : ({c})0;\n"
                f"}}\n")
        else:  # LogSumExp: lane 0 writes the row's value
            helpers.append(
                f"{hd} void {name}_write(long long i, int lane, const {c}* __restrict__ x, {c}* __restrict__ y, "
                f"{c} m, {c} s) {{\n"
                f"    if (lane == 0) y[i] = m + {_fn('log', c)}(s);\n}}\n")
        comb_m, dev_m, rep_m = _combine(name, "max", [("m", c)], f"m = {name}_max2(m, m_o);")
        comb_s, dev_s, rep_s = _combine(name, "sum", [("s", c)], "s = s + s_o;")
        helpers += [comb_m, comb_s]
        device = (f"    {c} m = {name}_max(i, lane, x);\n"
                  + dev_m
                  + f"    {c} s = {name}_sum(i, lane, x, m);\n"
                  + dev_s
                  + f"    {name}_write(i, lane, x, y, m, s);\n")
        host = (f"    {c} m[{WARP}] = {{}}, m2[{WARP}] = {{}}, s[{WARP}] = {{}}, s2[{WARP}] = {{}};\n"
                + _lanes(name, f"m[l] = {name}_max(i, l, x);")
                + rep_m
                + _lanes(name, f"s[l] = {name}_sum(i, l, x, m[l]);")
                + rep_s
                + _lanes(name, f"{name}_write(i, l, x, y, m[l], s[l]);"))
    src = ("".join(helpers)
           + f"extern \"C\" __global__ void {name}({sig}) {{\n"
           f"    // one warp per row (blockDim.x is a multiple of 32): a warp past the last row returns as a whole\n"
           f"    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
           f"    const long long i = t / {WARP};\n"
           f"    const int lane = (int)(t % {WARP});\n"
           f"    if (i >= {rows}LL) return;\n"
           + device + "}\n"
           "#ifndef __CUDA_ARCH__\n"
           "// host only: the warp's 32 lanes one after another (31 … 0 in the host mode's reverse order: a lane's\n"
           "// partial must not depend on another's), and the butterfly replayed with the device's combine\n"
           + host_lane(name) +
           f"inline void {name}_body(long long i, {sig}) {{\n" + host + "}\n"
           "#ifdef CG_HOSTRUN\n"
           f"void {name}__host_warp(unsigned long long block, unsigned warp, {sig}) {{\n"
           f"    const long long i = (long long)(block * blockDim.x / {WARP}) + warp;\n"
           f"    if (i < {rows}LL) {name}_body(i, x, y);\n}}\n"
           "#endif\n#endif\n")
    return _with_extents(Kernel(name, src, list(step.inputs), list(step.outputs), rows,
                                [a.op.name + ("(causal)" if getattr(a.op, "causal", False) else "")], frozenset(),
                                (c,), lanes=WARP), plan)


def _coords(shape: tuple[int, ...], names: list[str]) -> list[str]:
    """Declarations of the coordinates of element ``i`` of a C-contiguous array of ``shape``."""
    cs = contiguous_strides(shape)
    return [f"    const long long {n} = (i / {st}LL) % {d}LL;" for n, st, d in zip(names, cs, shape)]


def _moves(op: P.Primitive, c: str) -> list[str]:
    """The body of a gather: ``y[i]`` from ``x`` (contiguous) for a Slice, Pad, Unfold or Fold."""
    if type(op) not in GATHER_KERNELS:
        raise NotImplementedError(f"GPU backend: no gather kernel for {op.name}")
    (xt,), (yt,) = op.source, op.target
    xs = contiguous_strides(xt.shape)
    if isinstance(op, P.Slice):
        off = sum(a * st for (a, _, _), st in zip(op.index, xs))
        strides = tuple(k * st for (_, _, k), st in zip(op.index, xs))
        return [f"    y[i] = x[{off}LL + {_strided('i', yt.shape, strides)}];"]
    if isinstance(op, P.Pad):
        d = len(yt.shape)
        lines = _coords(yt.shape, [f"t{k}" for k in range(d)])
        conds, terms = [], []
        for k, ((a, b, st), n) in enumerate(zip(op.index, xt.shape)):
            lines.append(f"    const long long r{k} = t{k} - {a}LL;")
            conds.append(f"r{k} >= 0 && r{k} % {st}LL == 0 && r{k} / {st}LL < {n}LL")
            terms.append(f"(r{k} / {st}LL) * {xs[k]}LL")
        return lines + [f"    y[i] = ({' && '.join(conds) or '1'}) ? x[{' + '.join(terms) or '0'}] : ({c})0;"]
    (kh, kw), (sh, sw), (ph, pw) = op.kernel, op.stride, op.padding
    B, C, H, W = op.T.shape
    ho, wo = P.Unfold(op.T, op.kernel, op.stride, op.padding).out_hw()
    K, L = C * kh * kw, ho * wo
    if isinstance(op, P.Unfold):
        return _coords((B, C, kh, kw, ho, wo), ["b", "ch", "ki", "kj", "oy", "ox"]) + [
            f"    const long long yy = oy * {sh}LL - {ph}LL + ki, xx = ox * {sw}LL - {pw}LL + kj;",
            f"    y[i] = (yy >= 0 && yy < {H}LL && xx >= 0 && xx < {W}LL) ? "
            f"x[((b * {C}LL + ch) * {H}LL + yy) * {W}LL + xx] : ({c})0;"]
    return _coords((B, C, H, W), ["b", "ch", "yy", "xx"]) + [       # Fold: sum the blocks over (yy, xx)
        f"    {c} acc = 0;",
        f"    for (long long ki = 0; ki < {kh}; ++ki) {{",
        f"        const long long ty = yy + {ph}LL - ki;",
        f"        if (ty < 0 || ty % {sh}LL != 0 || ty / {sh}LL >= {ho}LL) continue;",
        f"        for (long long kj = 0; kj < {kw}; ++kj) {{",
        f"            const long long tx = xx + {pw}LL - kj;",
        f"            if (tx < 0 || tx % {sw}LL != 0 || tx / {sw}LL >= {wo}LL) continue;",
        f"            acc += x[(b * {K}LL + (ch * {kh}LL + ki) * {kw}LL + kj) * {L}LL"
        f" + (ty / {sh}LL) * {wo}LL + tx / {sw}LL];",
        "        }",
        "    }",
        "    y[i] = acc;"]


def _gather_op(step: Launch, plan: Plan, name: str) -> Kernel:
    """One thread per result element of a Slice, Pad, Unfold or Fold (see :func:`_moves`)."""
    a = step.instrs[0]
    t = plan.program.types[a.results[0]]
    c = ctype(t)
    params = [f"const {c}* __restrict__ x", f"{c}* __restrict__ y"]
    body = (f"__host__ __device__ inline void {name}_body(long long i, {', '.join(params)}) {{\n"
            + "\n".join(_moves(a.op, c)) + "\n}\n")
    return _with_extents(Kernel(name, body + _wrap(name, params, t.size), list(step.inputs), list(step.outputs),
                                t.size, [a.op.name], frozenset(step.inputs), (c,)), plan)


def reduce_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """The sum kernel of a ``reduce`` step (``SumTo``; :mod:`~.reduction`): a warp or a few per group of outputs."""
    r = reduce_source(step, plan, name, ctype(plan.program.types[step.outputs[0]]))
    return _with_extents(Kernel(name, r.source, [r.base], [r.output], r.groups, ["SumTo"], frozenset([r.base]),
                                (ctype(plan.program.types[r.base]),), lanes=r.lanes), plan)


def attention_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """The streaming attention kernel of an ``attention`` step (:mod:`~.attention`): a thread per row."""
    (a,) = step.instrs
    c = ctype(plan.program.types[a.results[0]])
    strides = {}
    for n, x in zip(a.op.ins.split(), a.args):      # operands read where they lie: a strided view's strides
        _, stages = plan.read(plan.src(x))
        if stages:
            ((shape, st),) = stages
            assert shape == plan.program.types[x].shape and st[-1] == 1, f"{name}: {n} is not a row-major view"
            strides[n] = tuple(st)
    src, rows, _ = attention.source(a.op, name, c, strides)
    return _with_extents(Kernel(name, src, list(step.inputs), list(step.outputs), rows, [a.op.name],
                                frozenset(step.inputs), tuple(c for _ in step.inputs)), plan)


def kernels(plan: Plan, prefix: str = "cg", donate_pairs: dict[int, int] | None = None) -> dict[int, Kernel]:
    """The kernel of every fused, row-wise, gather, copy and reduce step, keyed by step index.

    ``donate_pairs`` (output -> input it may overwrite): a fused kernel that writes an output into its input
    (see :func:`donations`) drops ``__restrict__`` from both pointers, which then alias.
    """
    out: dict[int, Kernel] = {}
    last = last_readers(plan) if donate_pairs else None
    for i, s in enumerate(plan.steps):
        if s.kind == "fused":
            out[i] = fused_kernel(s, plan, f"{prefix}_fused{i}")
            pairs = donations(out[i], s, donate_pairs, i, last)
            if pairs:
                out[i] = fused_kernel(s, plan, f"{prefix}_fused{i}", pairs)
        elif s.kind == "rowwise":
            out[i] = _rowwise(s, plan, f"{prefix}_row{i}")
        elif s.kind == "copy":
            out[i] = _gather(s, plan, f"{prefix}_copy{i}")
        elif s.kind == "gather":
            out[i] = _gather_op(s, plan, f"{prefix}_gather{i}")
        elif s.kind == "reduce":
            out[i] = reduce_kernel(s, plan, f"{prefix}_reduce{i}")
        elif s.kind == "attention":
            out[i] = attention_kernel(s, plan, f"{prefix}_attention{i}")
    return out
