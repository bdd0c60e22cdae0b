"""The CUDA C language of the generated kernels: types, literals, math functions, index expressions, and the
skeleton of a kernel with a thread per element.

Every kernel shape (:mod:`~.elementwise`, :mod:`~.row`, :mod:`~.gather`, :mod:`~.reduction`,
:mod:`~.attention`) writes its text with these. A kernel with a thread per element comes in two parts:

* ``<name>_body(long long i, ...)``: the work for element ``i``. It is ``__host__ __device__``, so the tests
  compile the same code with ``nvcc`` for the CPU and compare it with NumPy.
* ``<name>(...)``: the ``extern "C" __global__`` wrapper that CuPy's ``RawKernel`` launches with one thread
  per element (:func:`element_kernel`).

Inputs that are views (broadcasts, transposes, permutations, reshapes) are read through index arithmetic with
the shapes baked in as constants (:func:`strided_offset`: ``b[i % 16]`` for a bias, or a permuted ``k`` read in
place). Scalar constants become literals (:func:`literal`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.types import Index, NdArrayType

from .layout import Stage, contiguous_strides

__all__ = ["CUDA_EXPRESSIONS", "ctype", "literal", "mathfn", "pointer", "strided_offset", "broadcast_index",
           "read_index", "element_kernel"]


def ctype(t: NdArrayType) -> str:
    """The C type of a wire: ``float``, ``double``, or ``long long`` for ``index(n)`` ids."""
    if isinstance(t.dtype, Index):
        return "long long"
    bits = t.dtype.numpy_dtype().itemsize * 8
    if t.dtype.is_fixed or bits not in (32, 64):
        raise TypeError(f"GPU backend computes in float32/float64, got {t}")
    return "float" if bits == 32 else "double"


def literal(v: float, c: str) -> str:
    """The constant ``v`` as a literal of C type ``c`` (``0.5f``, ``0.5``, ``3LL``); infinities and NaN have none."""
    if c == "long long":
        return f"{int(v)}LL"
    s = repr(float(v))
    if s in ("inf", "-inf", "nan"):
        raise ValueError(f"GPU backend: constant {v} cannot be a literal")
    return f"{s}f" if c == "float" else s


def mathfn(name: str, c: str) -> str:
    """The C math function ``name`` for type ``c``: ``expf`` for ``float``, ``exp`` for ``double``."""
    return name + ("f" if c == "float" else "")


def pointer(c: str, name: str, const: bool = False) -> str:
    """A ``__restrict__`` pointer parameter: ``const float* __restrict__ x``."""
    return f"{'const ' if const else ''}{c}* __restrict__ {name}"


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
    P.Scale: lambda c, op, a: f"({a} * {literal(op.c, c)})",
    P.Heaviside: lambda c, op, a: f"({a} > 0 ? ({c})1 : ({c})0)",
    P.Sigmoid: lambda c, op, a: f"(({c})1 / (({c})1 + {mathfn('exp', c)}(-{a})))",
    P.Tanh: lambda c, op, a: f"{mathfn('tanh', c)}({a})",
    P.Exp: lambda c, op, a: f"{mathfn('exp', c)}({a})",
    P.Log: lambda c, op, a: f"{mathfn('log', c)}({a})",
    P.Sqrt: lambda c, op, a: f"{mathfn('sqrt', c)}({a})",
    P.Rsqrt: lambda c, op, a: f"(({c})1 / {mathfn('sqrt', c)}({a}))",
    P.CausalMask: _causal,
    # the operand is the row's id (read through a broadcast along the last axis)
    P.OneHot: lambda c, op, a: f"({a} == i % {op.T.shape[-1]}LL ? ({c})1 : ({c})0)",
}


def strided_offset(t: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
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


def broadcast_index(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    """Index into an input of ``in_shape`` broadcast to ``out_shape``, from the output's linear ``i``."""
    if in_shape == out_shape:
        return "i"
    lead = len(out_shape) - len(in_shape)
    cs = contiguous_strides(in_shape)
    strides = tuple(0 if d < lead or in_shape[d - lead] == 1 else cs[d - lead] for d in range(len(out_shape)))
    return strided_offset("i", out_shape, strides)


def read_index(stages: tuple[Stage, ...], tmp: str) -> tuple[str, list[str]]:
    """The base offset of element ``i`` of a view: one expression, after temporaries for multi-stage layouts
    (``const long long <tmp>_<k> = …;`` statements, in order)."""
    expr, pre = "i", []
    for k, (shape, strides) in enumerate(stages):
        e = strided_offset(expr, shape, strides)
        if k < len(stages) - 1:
            pre.append(f"    const long long {tmp}_{k} = {e};")
            expr = f"{tmp}_{k}"
        else:
            expr = e
    return expr, pre


def element_kernel(name: str, params: list[str], lines: list[str], n: int) -> str:
    """A kernel with a thread per element ``i < n``: ``<name>_body(i, params)`` (``__host__ __device__``, its
    statements ``lines``) and the ``extern "C" __global__`` wrapper ``<name>(params)`` that calls it."""
    pnames = [p.rsplit(" ", 1)[1] for p in params]
    return (f"__host__ __device__ inline void {name}_body(long long i, {', '.join(params)}) {{\n"
            + "\n".join(lines) + "\n}\n"
            f"extern \"C\" __global__ void {name}({', '.join(params)}) {{\n"
            f"    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (i < {n}LL) {name}_body(i, {', '.join(pnames)});\n}}\n")
