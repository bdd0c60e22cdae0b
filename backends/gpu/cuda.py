"""CUDA C sources for the fused and row-wise kernels of a plan.

Every kernel comes in two parts:

* ``<name>_body(long long i, ...)``: the work for element (or row) ``i``. It
  is ``__host__ __device__``, so the tests compile the same code with
  ``nvcc`` for the CPU and compare it with NumPy.
* ``<name>(...)``: the ``extern "C" __global__`` wrapper that CuPy's
  ``RawKernel`` launches with one thread per element.

Broadcast inputs are read through index arithmetic with the shapes baked in
as constants (for example ``b[i % 16]`` for a bias). Scalar constants become
literals. Intermediate values stay in registers, and only the group's
outputs are written to memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.types import NdArrayType

from .plan import Launch, Plan

__all__ = ["Kernel", "RULES", "kernels", "ctype"]


def ctype(t: NdArrayType) -> str:
    bits = t.dtype.numpy_dtype().itemsize * 8
    if t.dtype.is_fixed or bits not in (32, 64):
        raise TypeError(f"GPU backend computes in float32/float64, got {t}")
    return "float" if bits == 32 else "double"


def _lit(v: float, c: str) -> str:
    s = repr(float(v))
    if s in ("inf", "-inf", "nan"):
        raise ValueError(f"GPU backend: constant {v} cannot be a literal")
    return f"{s}f" if c == "float" else s


def _fn(name: str, c: str) -> str:
    return name + ("f" if c == "float" else "")


#: CUDA C expression per elementwise primitive: ``(op, ctype, *argument expressions) -> expression``
RULES: dict[type, Callable[..., str]] = {
    P.Add: lambda op, c, a, b: f"({a} + {b})",
    P.Neg: lambda op, c, a: f"(-{a})",
    P.Mul: lambda op, c, a, b: f"({a} * {b})",
    P.Scale: lambda op, c, a: f"({a} * {_lit(op.c, c)})",
    P.Heaviside: lambda op, c, a: f"({a} > 0 ? ({c})1 : ({c})0)",
    P.Sigmoid: lambda op, c, a: f"(({c})1 / (({c})1 + {_fn('exp', c)}(-{a})))",
    P.Tanh: lambda op, c, a: f"{_fn('tanh', c)}({a})",
    # structural primitives are handled by the plan: no kernel code of their own
    P.Copy: None, P.Broadcast: None, P.Transpose: None, P.Reshape: None, P.Constant: None,
    P.MatMul: None, P.SumTo: None, P.Softmax: None, P.LogSumExp: None,
}


@dataclass
class Kernel:
    """A generated kernel: its name, full source, and how to call it."""
    name: str
    source: str
    inputs: list[int]          # plan variables read (pointer arguments, in order)
    outputs: list[int]         # plan variables written
    n: int                     # threads (elements or rows)
    ops: list[str]             # primitive names it executes (for reports)


def _index(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    """Index into an input of ``in_shape`` broadcast to ``out_shape``, from the output's linear ``i``."""
    if in_shape == out_shape:
        return "i"
    size = int(np.prod(in_shape, dtype=np.int64))
    if size == 1:
        return "0"
    lead = len(out_shape) - len(in_shape)
    terms = []
    in_stride = 1
    for d in range(len(out_shape) - 1, lead - 1, -1):
        dim_in = in_shape[d - lead]
        if dim_in != 1:
            out_stride = int(np.prod(out_shape[d + 1:], dtype=np.int64))
            coord = f"(i / {out_stride}LL)" if out_stride != 1 else "i"
            coord = f"({coord} % {out_shape[d]}LL)"
            terms.append(coord if in_stride == 1 else f"{coord} * {in_stride}LL")
        in_stride *= dim_in
    return " + ".join(terms) if terms else "0"


def _fused(step: Launch, plan: Plan, name: str) -> Kernel:
    prog = plan.program
    out_t = prog.types[step.instrs[-1].results[0]]
    c = ctype(out_t)
    shape = out_t.shape
    n = int(np.prod(shape, dtype=np.int64))

    src = plan.src
    names = {v: f"in{k}" for k, v in enumerate(step.inputs)}
    lines = []
    value: dict[int, str] = {}
    for v in step.inputs:
        value[v] = f"r{v}"
        lines.append(f"    const {c} r{v} = in{step.inputs.index(v)}[{_index(prog.types[v].shape, shape)}];")
    for a in step.instrs:
        args = []
        for x in a.args:
            s = src(x)
            args.append(_lit(plan.constants[s], c) if s in plan.constants else value[s])
        expr = RULES[type(a.op)](a.op, c, *args)
        r = a.results[0]
        value[r] = f"v{r}"
        lines.append(f"    const {c} v{r} = {expr};   // {a.op.name}")
    for k, v in enumerate(step.outputs):
        lines.append(f"    out{k}[i] = {value[v]};")
    params = [f"const {c}* __restrict__ in{k}" for k in range(len(step.inputs))] + \
             [f"{c}* __restrict__ out{k}" for k in range(len(step.outputs))]
    body = (f"__host__ __device__ inline void {name}_body(long long i, {', '.join(params)}) {{\n"
            + "\n".join(lines) + "\n}\n")
    pnames = [f"in{k}" for k in range(len(step.inputs))] + [f"out{k}" for k in range(len(step.outputs))]
    wrapper = (f"extern \"C\" __global__ void {name}({', '.join(params)}) {{\n"
               f"    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
               f"    if (i < {n}LL) {name}_body(i, {', '.join(pnames)});\n}}\n")
    del names
    return Kernel(name, body + wrapper, list(step.inputs), list(step.outputs), n, [a.op.name for a in step.instrs])


def _rowwise(step: Launch, plan: Plan, name: str) -> Kernel:
    a = step.instrs[0]
    t = plan.program.types[a.args[0]]
    c = ctype(t)
    k = t.shape[-1]
    rows = int(np.prod(t.shape[:-1], dtype=np.int64))
    e = _fn("exp", c)
    if isinstance(a.op, P.Softmax):
        tail = (f"    for (int j = 0; j < {k}; ++j) y[i * {k} + j] = {e}(x[i * {k} + j] - m) / s;\n")
    else:  # LogSumExp
        tail = f"    y[i] = m + {_fn('log', c)}(s);\n"
    body = (f"__host__ __device__ inline void {name}_body(long long i, const {c}* __restrict__ x, "
            f"{c}* __restrict__ y) {{\n"
            f"    {c} m = x[i * {k}];\n"
            f"    for (int j = 1; j < {k}; ++j) m = x[i * {k} + j] > m ? x[i * {k} + j] : m;\n"
            f"    {c} s = 0;\n"
            f"    for (int j = 0; j < {k}; ++j) s += {e}(x[i * {k} + j] - m);\n" + tail + "}\n")
    wrapper = (f"extern \"C\" __global__ void {name}(const {c}* __restrict__ x, {c}* __restrict__ y) {{\n"
               f"    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
               f"    if (i < {rows}LL) {name}_body(i, x, y);\n}}\n")
    return Kernel(name, body + wrapper, list(step.inputs), list(step.outputs), rows, [a.op.name])


def kernels(plan: Plan, prefix: str = "cg") -> dict[int, Kernel]:
    """The kernel of every fused and row-wise step, keyed by step index."""
    out: dict[int, Kernel] = {}
    for i, s in enumerate(plan.steps):
        if s.kind == "fused":
            out[i] = _fused(s, plan, f"{prefix}_fused{i}")
        elif s.kind == "rowwise":
            out[i] = _rowwise(s, plan, f"{prefix}_row{i}")
    return out
