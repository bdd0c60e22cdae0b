"""Python glue of a GPU step: generated source that launches the plan's kernels.

The generated function allocates each intermediate from the array module's
memory pool (``xp.empty``). It ``del``s every value after its last use, so
buffers return to CuPy's pool in liveness order, and a steady-state step
never calls ``cudaMalloc``. It calls cuBLAS for matrix products
(``xp.matmul``), and the generated kernels for everything else (reductions
included: a ``.sum`` only where no sum kernel applies). Nothing in a step synchronises with the host.

Every argument is made C-contiguous on entry (``xp.ascontiguousarray``, no copy when it
already is). With ``donate=True``, parameter updates are written into the array the kernel
read (each thread reads ``p[i]`` before it writes ``p[i]``): the parameter array passed in
when it is C-contiguous, else its contiguous copy, returned in its place. Folded
constants are C-contiguous too.

Views (transposes, permutations, broadcasts, reshapes) are NumPy/CuPy views
when something other than a kernel needs them (``xp.transpose``, ``.T``,
``.reshape``, or ``as_strided`` over the base array); kernels read the base
array itself through index arithmetic. A ``copy`` kernel gathers a view that
its consumer needs contiguous (a ``BatchMatMul`` operand, a row kernel input).

Each step's kernel is written by its kind's module (:func:`kernels`): :mod:`~.elementwise` (fused),
:mod:`~.row`, :mod:`~.gather` (gathers and copies), :mod:`~.reduction` and :mod:`~.attention`.

The same source also runs on the CPU with ``xp = numpy`` and *emulated*
kernels (:mod:`~.host.emulate`, ``backend="cupy-emulated"``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from circuitgrad import primitives as P
from circuitgrad.arguments import distinct_arrays
from circuitgrad.codegen import ident
from circuitgrad.schedule import Program

from . import attention, attention_mma, attention_quad, attention_source, blas, storage
from .elementwise import donations, fused_kernel
from .gather import copy_kernel, gather_kernel
from .graph import Graphed
from .kernel import Kernel
from .plan import Plan, last_readers, plan
from .reduction import kernel_arrays, reduce_kernel
from .rounding import into_attention, round_operands
from .row import row_kernel

__all__ = ["GpuFunction", "kernels", "generate", "build", "tensor_cores", "BLOCK", "VIEWS"]

#: the CuPy expression of each view (kind ``"view"``) when no kernel needs its layout: no launch, no copy
VIEWS: dict[type, Callable[[P.Primitive, str], str]] = {
    P.Transpose: lambda op, a: f"{a}.T",
    P.Reshape: lambda op, a: f"{a}.reshape({op.shape!r})",
    P.Permute: lambda op, a: f"xp.transpose({a}, {op.axes!r})",
    P.Broadcast: lambda op, a: f"xp.broadcast_to({a}, {op.T.shape!r})",
}

BLOCK = 256                 # a multiple of 32: a row kernel's warps never straddle blocks
assert BLOCK % 32 == 0


def kernels(plan: Plan, prefix: str = "cg", donate_pairs: dict[int, int] | None = None) -> dict[int, Kernel]:
    """The kernel of every fused, row-wise, gather, copy, reduce and attention step, keyed by step index.

    ``donate_pairs`` (output -> input it may overwrite): a fused kernel that writes an output into its input
    (see :func:`~.elementwise.donations`) drops ``__restrict__`` from both pointers, which then alias.
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
            out[i] = row_kernel(s, plan, f"{prefix}_row{i}")
        elif s.kind == "copy":
            out[i] = copy_kernel(s, plan, f"{prefix}_copy{i}")
        elif s.kind == "gather":
            out[i] = gather_kernel(s, plan, f"{prefix}_gather{i}")
        elif s.kind == "reduce":
            out[i] = reduce_kernel(s, plan, f"{prefix}_reduce{i}")
        elif s.kind == "attention":
            op = s.instrs[0].op
            make = (attention_mma.attention_kernel if op.mma else
                    attention_quad.attention_kernel if attention_quad.fits(op) else attention_source.attention_kernel)
            out[i] = make(s, plan, f"{prefix}_attention{i}")
    return out


def generate(p: Plan, ks: dict[int, Kernel], arg_names: Sequence[str], fn_name: str,
             donate_pairs: dict[int, int] | None = None, probe: bool = False) -> str:
    """Python source of the step. ``donate_pairs`` maps an output variable to the input it may overwrite.

    ``probe=True`` (for :mod:`~.profile`): the source calls ``_probe(-1)`` on entry and ``_probe(k)`` after
    the launch of plan step ``k``, so each launch can be timed on the stream.
    """
    prog = p.program
    names = {v: f"v{v}" for v in range(len(prog.types))}
    for v, n in zip(prog.inputs, arg_names):
        names[v] = ident(n)

    src = p.src
    readers = last_readers(p) if donate_pairs else None      # donation only into an input dead after the launch
    last: dict[int, int] = {}
    for k, s in enumerate(p.steps):
        for v in s.inputs:
            last[src(v)] = k
    keep = {src(v) for v in prog.outputs} | set(prog.inputs)
    # views only kernels that ran earlier read (through their bases: a sum joining an earlier one's kernel)
    unbuilt = {src(r) for k, s in enumerate(p.steps) if s.kind == "view" for r in s.outputs
               if src(r) not in keep and last.get(src(r), -1) < k}
    contiguous: set[int] = set(prog.inputs)   # caller arrays (made so on entry) and values produced by
                                              # kernels, cuBLAS or reductions: C-contiguous
    lines, consts = [], []
    if probe:
        lines.append("    _probe(-1)")
    # Every argument is made C-contiguous once, on entry (no copy when it already is; CuPy refuses a NumPy
    # array here, so a host array never reaches a kernel, where CuPy would pass a size-1 one by value).
    # Kernels index their arrays linearly, and a donated update is written into the array the kernel read:
    # the caller's own when it is C-contiguous, else this copy (then only the returned array is updated).
    for v in prog.inputs:
        fix = ".reshape(())" if prog.types[v].ndim == 0 else ""     # NumPy's makes a 0-d array 1-d
        lines.append(f"    {names[v]} = xp.ascontiguousarray({names[v]}){fix}")
    for k, s in enumerate(p.steps):
        ty = lambda v: prog.types[v]  # noqa: E731
        if s.kind == "const":
            for r in s.outputs:
                consts.append(f"C{r} = xp.asarray(_values[{r}])    # folded at compile time: {ty(r)}")
                names[r] = f"C{r}"
            continue
        a = s.instrs[0]
        args = [names[src(x)] for x in a.args]
        if s.kind == "matmul":
            note = "# cuBLAS" if a.op.name == "MatMul" else "# cuBLAS, batched"
            lines.append(f"    {names[a.results[0]]} = _matmul({args[0]}, {args[1]})".ljust(60) + note)
            contiguous.add(a.results[0])
        elif s.kind == "reduce" and k in ks:          # a sum kernel (reduction.reduce_kernel): a warp or a few per outputs
            kern, x = ks[k], src(a.args[0])
            b = kern.inputs[0]              # the base array of x, read through x's layout
            parts = kernel_arrays(s, p)     # the first sums' arrays, then later sums' and the epilogue's
            own, extra = parts[0], [v for part in parts[1:] for v in part]
            made = set(kern.outputs)        # later sums may read earlier ones, made by this kernel
            flat = lambda vs: [names[src(v)] if src(v) in contiguous or src(v) in p.values  # noqa: E731
                               or src(v) in made else f"xp.ascontiguousarray({names[src(v)]})" for v in vs]
            if s.remat or len(s.instrs) > 1:    # terms made from its inputs, or sums side by side (passes)
                arg = ", ".join(flat(own))
            elif b == x or b in keep or b in p.values or last.get(b, k) >= k:
                arg = names[b] if b in contiguous or b in p.values else f"xp.ascontiguousarray({names[b]})"
            elif p.read(x)[1]:              # the base was freed after its last step: its memory through x, flat
                item = ty(b).dtype.numpy_dtype().itemsize
                arg = f"xp.lib.stride_tricks.as_strided({names[x]}, ({ty(b).size},), ({item},))"
            else:                           # a reshape of the base: the same memory, in order
                arg = names[x]
            arg = ", ".join([arg] + flat(extra))
            for r in kern.outputs:          # bfloat16 bits for an epilogue's output stored so (storage)
                dt = "uint16" if r in p.narrow else ty(r).dtype.numpy_dtype().name
                lines.append(f"    {names[r]} = xp.empty({ty(r).shape!r}, dtype=xp.{dt})")
            grid = max(1, math.ceil(kern.threads / BLOCK))
            outs = ", ".join(names[r] for r in kern.outputs)
            lines.append(f"    {kern.name}(({grid},), ({BLOCK},), ({arg}, {outs}))".ljust(60)
                         + f"# {' + '.join(kern.ops)}")
            contiguous.update(kern.outputs)
        elif s.kind == "reduce":                   # CuPy's own sum: one stored operand (bench/gpu_sums.py)
            if s.remat or len(s.instrs) > 1 or s.then is not None:
                raise ValueError("a sum that makes its terms, shares a kernel or has an epilogue needs its "
                                 "generated kernel")
            lead, kept = a.op.axes()
            axes = lead + kept
            lines.append(f"    {names[a.results[0]]} = {args[0]}.sum(axis={axes!r}, keepdims=True)"
                         f".reshape({a.op.S.shape!r})".ljust(60) + "# reduction")
            contiguous.add(a.results[0])
        elif s.kind == "view" and src(a.results[0]) in unbuilt:
            pass                                      # not built: its base is freed here, after its readers
        elif s.kind == "view":
            op, r = a.op, a.results[0]
            if s.layout is not None:                  # built from the base array: one strided view of it
                base, stages = s.layout
                b = names[base] if base in contiguous or base in p.values else f"xp.ascontiguousarray({names[base]})"
                if not stages:
                    expr = f"{b}.reshape({ty(r).shape!r})"
                else:
                    ((shape, strides),) = stages
                    item = 2 if base in p.narrow else ty(r).dtype.numpy_dtype().itemsize
                    expr = (f"xp.lib.stride_tricks.as_strided({b}, {tuple(shape)!r}, "
                            f"{tuple(st * item for st in strides)!r})")
            else:
                expr = VIEWS[type(op)](op, args[0])
            lines.append(f"    {names[r]} = {expr}".ljust(60) + "# view, no launch")
        else:  # fused / rowwise / copy kernels
            kern = ks[k]
            # in place only where every thread reads the element it writes and no later launch reads the
            # input (elementwise.donations); such a kernel has no __restrict__ on the aliased pointers
            pairs = donations(kern, s, donate_pairs, k, readers)
            if pairs != kern.donated:
                kern = ks[k] = fused_kernel(s, p, kern.name, pairs)
            outs = []
            for v in kern.outputs:
                t = prog.types[v]
                donor = pairs.get(v)
                if donor is not None:
                    lines.append(f"    {names[v]} = {names[donor]}".ljust(60) + "# donated buffer")
                else:
                    dt = "uint16" if v in p.narrow else t.dtype.numpy_dtype().name    # bfloat16 bits (storage)
                    lines.append(f"    {names[v]} = xp.empty({t.shape!r}, dtype=xp.{dt})")
                outs.append(names[v])
            block = kern.block or BLOCK
            grid = max(1, math.ceil(kern.threads / block))     # a row kernel: 32 threads (a warp) a row
            # kernels index their inputs as C-contiguous arrays: views are made so
            ins = [names[src(x)] if src(x) in contiguous or src(x) in p.values
                   else f"xp.ascontiguousarray({names[src(x)]})" for x in kern.inputs]
            contiguous.update(kern.outputs)
            call = ", ".join(ins + outs)
            lines.append(f"    {kern.name}(({grid},), ({block},), ({call},))".ljust(60)
                         + f"# {' + '.join(kern.ops)}")
        if probe and s.kind not in ("view", "const"):
            lines.append(f"    _probe({k})")
        dead = sorted({src(x) for x in s.inputs if last.get(src(x)) == k and src(x) not in keep
                       and src(x) not in unbuilt and not names[src(x)].startswith("C")}
                      # and what it makes that nothing reads (a row's sums only its epilogue reads, in registers)
                      | {src(r) for r in s.outputs if s.kind not in ("view", "const") and src(r) not in last
                         and src(r) not in keep})
        if dead:
            lines.append(f"    del {', '.join(names[v] for v in dead)}")
    args = ", ".join(names[v] for v in prog.inputs)
    rets = ", ".join(names[src(v)] for v in prog.outputs)
    return "\n".join(consts + [f"def {fn_name}({args}):"] + lines +
                     [f"    return ({rets}{',' if len(prog.outputs) == 1 else ''})"]) + "\n"


@dataclass
class GpuFunction:
    """One compiled function (``step``, ``predict``, …) for the GPU."""
    program: Program
    plan: Plan
    kernels: dict[int, Kernel]
    python: str
    fn: Callable

    @property
    def launches(self) -> int:
        """Kernel launches per call (fused kernels + cuBLAS + reductions + row kernels + copies)."""
        return self.plan.launches

    @property
    def cuda_source(self) -> str:
        return "\n".join(k.source for k in self.kernels.values())

    @property
    def source(self) -> str:
        return self.python + "\n/* CUDA kernels */\n" + self.cuda_source

    donors: tuple = ()          # (position, name) of the arguments a ``donate=True`` step may overwrite
    name: str = ""
    arg_names: tuple = ()
    donate_pairs: dict | None = None
    namespace: dict = field(default_factory=dict, repr=False)   # what the source runs in: xp, launchers, constants
    precision: str = "fp32"     # of the matrix products: "fp32" or "tf32" (:mod:`~.blas`)
    graphed: Graphed | None = None      # the step replayed as a CUDA graph (:mod:`~.graph`), else None

    def run(self, *args):
        if self.donors:
            distinct_arrays([args[k] for k, _ in self.donors], [n for _, n in self.donors], "donate=True")
        return self.fn(*args) if self.graphed is None else self.graphed(*args)


def tensor_cores(xp) -> bool:
    """Whether ``xp``'s device runs the attention kernels' ``mma.sync`` (TF32: sm_80 or newer); NumPy's
    emulation and the host execution mode stand in for such a device."""
    device = getattr(getattr(xp, "cuda", None), "Device", None)
    return device is None or int(device().compute_capability) >= 80


def build(prog: Program, arg_names: Sequence[str], fn_name: str, xp, launcher: Callable,
          donate_pairs: dict[int, int] | None = None, precision: str = "fp32", graph: bool = False,
          launchers: Callable | None = None, fuse_attention: bool = True, store_bf16: bool = True,
          attention_3xtf32: bool = False) -> GpuFunction:
    """Plan, generate and bind one function. ``launcher(plan, index, kernel)`` makes the kernel callable
    (``launchers(plan, kernels)``, when given, makes them all at once: ``{index: callable}``).

    ``precision="tf32"`` or ``"bf16"``: float32 products on the tensor cores (:mod:`~.blas`). ``graph=True``: calls after
    the first replay one CUDA graph (:mod:`~.graph`; needs ``donate_pairs``). ``fuse_attention``: softmax and spherical
    attention cores run as the streaming kernels of :mod:`~.attention` where they qualify. ``store_bf16``: under
    ``"bf16"``, values only products read are stored as bfloat16 (:mod:`~.storage`; products read the same operands).
    ``attention_3xtf32``: under ``"fp32"``, the streaming attention kernels' products on the tensor cores as 3xTF32
    (as PyTorch's float32 attention; off by default until a device run measures it against the float32 check)."""
    if precision not in blas.PRECISIONS:
        raise ValueError(f"compile_model: precision must be one of {', '.join(map(repr, blas.PRECISIONS))}, got "
                         f"{precision!r}")
    if graph and not donate_pairs:
        raise ValueError("graph=True replays the step into the same buffers: it needs donate=True")
    if fuse_attention:
        mma = "3xtf32" if precision == "fp32" and attention_3xtf32 else precision
        prog = attention.fuse(prog, mma if tensor_cores(xp) else None)
    if precision == "bf16" and store_bf16:
        prog = round_operands(prog)         # each array a product multiplies rounded once (:mod:`~.rounding`)
    p = plan(prog, data=[v for v, n in zip(prog.inputs, arg_names) if n in ("x", "y")],
             updates={i: o for o, i in (donate_pairs or {}).items()})
    if precision == "bf16" and store_bf16:
        into_attention(p)                   # attention kernels write the copies of their results (:mod:`~.rounding`)
        p.narrow = storage.bf16_operands(p)
    ks = kernels(p, prefix=f"cg_{ident(fn_name)}", donate_pairs=donate_pairs)
    src = generate(p, ks, arg_names, ident(fn_name), donate_pairs)
    plain = precision == "fp32" and not graph
    ns: dict[str, object] = {"xp": xp, "_values": p.values,
                             "_matmul": xp.matmul if plain else blas.matmul(xp, precision, capturable=graph)}
    made = launchers(p, ks) if launchers is not None else {i: launcher(p, i, k) for i, k in ks.items()}
    for i, k in ks.items():
        ns[k.name] = made[i]
    exec(compile(src, f"<circuitgrad-gpu:{fn_name}>", "exec"), ns)
    g = GpuFunction(prog, p, ks, src, ns[ident(fn_name)], name=fn_name, arg_names=tuple(arg_names),
                    donate_pairs=donate_pairs, namespace=ns, precision=precision)
    if graph:
        g.graphed = Graphed(g.fn, xp, arg_names)
    if donate_pairs:
        donor_vars = set(donate_pairs.values())
        g.donors = tuple((k, n) for k, (v, n) in enumerate(zip(prog.inputs, arg_names)) if v in donor_vars)
    return g
