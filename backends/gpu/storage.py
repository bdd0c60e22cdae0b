"""Values stored as bfloat16: under ``precision="bf16"``, an intermediate that only products read.

A ``bf16`` step rounds every float32 product operand to bfloat16 (round to nearest even, :mod:`~.blas`). A value
that a fused kernel writes and nothing but products read is therefore only ever seen rounded, so the kernel
that makes it may round it as it stores it: two bytes an element instead of four, and no cast before the
product. The products read exactly the same operands (rounding once at the producer or at each product gives the
same bits; the emulated and host-run steps are the same bits, while on a device cuBLAS may read a stored operand
transposed where it read a cast copy, in another order of accumulation); the memory of such values halves (a
GPT's layer-norm and GELU outputs, saved for the backward)::

    fused kernel --(float32)--> store --> cast --(bf16)--> cuBLAS      before
    fused kernel --(round)--> store bf16 -------------------> cuBLAS      after

The tensor-core attention kernels under ``"bf16"`` round their products' operands as cuBLAS does, so their
q, k and v count as products' operands (:meth:`~.attention.Attention.bf16_inputs`): a GPT's are stored rounded
and the kernels read them as the bfloat16 pairs their ``mma.sync`` takes, with no conversion; so is the rounded
copy of ``dO`` (a cuBLAS result in a GPT) that the ``dq`` kernel writes for the ``dk``/``dv`` kernel
(:func:`~.rounding.into_attention`). Nothing else is narrowed: a value another kernel, a sum, a copy or the
function's caller reads stays float32, as do cuBLAS's results (float32 accumulation), parameters and the
optimizer's state.
"""
from __future__ import annotations

import numpy as np

from circuitgrad.types import Float

from .blas import BF16_BITS, round_bf16
from .plan import Plan

__all__ = ["bf16_operands", "STORE", "store_helper", "to_bf16_bits"]

STORE = "unsigned short"        # the C type of a value stored as bfloat16 (its bits)


def bf16_operands(plan: Plan) -> frozenset[int]:
    """The float32 values of ``plan`` that a fused kernel (or a sum kernel's epilogue) writes and only products read (directly or through
    views): cuBLAS's, and the tensor-core attention kernels' under ``"bf16"`` (a GPT's q, k and v); never an
    output of the function."""
    root: dict[int, int] = {}

    def base(v: int) -> int:
        v = plan.src(v)
        return root.get(v, v)

    kinds: dict[int, set[str]] = {}
    for s in plan.steps:
        if s.kind == "view":                 # a view reads nothing itself: its readers read its base
            for r in s.outputs:
                root[plan.src(r)] = base(s.inputs[0]) if s.inputs else plan.src(r)
            continue
        # an attention kernel's bf16 products round their operands as cuBLAS's do (Attention.bf16_inputs)
        rounded = s.instrs[0].op.bf16_inputs() if s.kind == "attention" else frozenset()
        names = s.instrs[0].op.ins.split() if s.kind == "attention" else [None] * len(s.inputs)
        for v, n in zip(s.inputs, names):
            kinds.setdefault(base(v), set()).add("matmul" if n in rounded else s.kind)
    returned = {base(v) for v in plan.program.outputs} | {plan.src(v) for v in plan.program.outputs}
    types = plan.program.types
    fused = [s for s in plan.steps if s.kind == "fused"] + [s.chain[-1] for s in plan.steps
                                                             if s.then is not None and s.chain[-1].kind == "fused"]
    return frozenset(v for s in fused for v in s.outputs
                     if v not in returned and kinds.get(v) == {"matmul"}
                     and isinstance(types[v].dtype, Float) and types[v].dtype.bits == 32)


def store_helper(name: str) -> str:
    """``<name>_bf16(x)``: the bits of float ``x`` rounded to bfloat16 (``blas.BF16_BITS``, the rounding of the
    cast before a product), on the device and on the host."""
    return (f"__host__ __device__ inline unsigned short {name}_bf16(float x) {{\n"
            "#ifdef __CUDA_ARCH__\n"
            "    const unsigned int b = __float_as_uint(x);\n"
            "#else\n"
            "    unsigned int b; __builtin_memcpy(&b, &x, 4);\n"
            "#endif\n"
            f"    return {BF16_BITS};\n"
            "}\n")


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """NumPy: the bits (``uint16``) of float32 ``a`` rounded to bfloat16 (``blas.round_bf16``)."""
    rounded = round_bf16(np, np.ascontiguousarray(a, dtype=np.float32))
    return (rounded.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
