"""Product operands rounded once: under ``precision="bf16"``, one rounding of each value cuBLAS multiplies.

A bfloat16 product rounds its float32 operands to bfloat16 (:mod:`.blas`), each with a cast kernel of its own
before the product unless the value is stored rounded already (:mod:`.storage`: a value that only products
read). So a weight was cast twice a step (forward, backward), a gradient twice (``dx`` and ``dW``), and a value
another kernel reads too could not be stored rounded: 162 casts a step of the d=384 GPT, none of them in the
plan. :func:`round_operands` makes the rounding an instruction of the program, once per value::

    x ──► [cast] ──► x@W                      x ──► RoundBF16 ──► r ──► r@W
    x ──► [cast] ──► Wᵀ·dy(x)      becomes                        └───► (views of r)ᵀ·dy
    x ──► other kernels                       x ──► other kernels

``RoundBF16`` is elementwise: it joins the fused kernel making ``x``, which writes ``x`` and, as bfloat16, its
rounded copy (two more bytes an element, no launch); where ``x`` is another kernel's result (cuBLAS's, an
attention kernel's) it is a fused kernel of its own, in the plan and in the cost model, except that a tensor-core
attention kernel writes the copies of its own results as it stores them, and the ``dq`` kernel the copy of the
``dO`` it reads whole, which the ``dk``/``dv`` kernel multiplies (:func:`into_attention`). A weight's is made up
front, in one kernel with the others of its size (the plan does not sink it to its first reader,
:func:`~.plan.plan`), and lives until the backward's product reads it, as ``torch.autocast`` keeps its cast
of a weight. The products multiply the same operands as before (rounding is idempotent): the same bits.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.schedule import Apply, Program
from circuitgrad.types import Float, NdArrayType

from .attention import Attention
from .blas import BF16_BITS, round_bf16

__all__ = ["RoundBF16", "round_operands", "into_attention", "HELPER", "PRODUCTS"]

#: the products cuBLAS runs, whose float32 operands a ``bf16`` step rounds
PRODUCTS = (P.MatMul, P.BatchMatMul)

#: C: ``cg_round_bf16(x)``, float ``x`` rounded to bfloat16 (nearest even, :data:`~.blas.BF16_BITS`) and widened,
#: on the device and on the host; once per compilation unit (a module holds many kernels)
HELPER = ("#ifndef CG_ROUND_BF16\n#define CG_ROUND_BF16\n"
          "__host__ __device__ inline float cg_round_bf16(float x) {\n"
          "#ifdef __CUDA_ARCH__\n"
          "    const unsigned int b = __float_as_uint(x);\n"
          f"    return __uint_as_float(((unsigned int){BF16_BITS}) << 16);\n"
          "#else\n"
          "    unsigned int b; __builtin_memcpy(&b, &x, 4);\n"
          f"    const unsigned int r = ((unsigned int){BF16_BITS}) << 16; float y; __builtin_memcpy(&y, &r, 4);\n"
          "    return y;\n"
          "#endif\n"
          "}\n#endif\n")


@dataclass(frozen=True)
class RoundBF16(P.Primitive):
    """``T → T`` (float32): each element rounded to bfloat16 (nearest even) and widened back, as a bfloat16
    product reads its operand. The GPU backend's own instruction (:func:`round_operands`), read only by
    products."""
    T: NdArrayType
    kind: ClassVar[P.Kind] = P.Kind.ELEMENTWISE

    @property
    def source(self):
        return (self.T,)

    @property
    def target(self):
        return (self.T,)

    def cuda(self, a: str) -> str:
        """CUDA C of the rounding of expression ``a`` (the kernel defines :data:`HELPER`)."""
        return f"cg_round_bf16({a})"

    def evaluate(self, x) -> tuple[np.ndarray]:
        """NumPy: the values the product reads (:func:`~.blas.round_bf16`)."""
        return (round_bf16(np, np.ascontiguousarray(x, dtype=np.float32)),)


def round_operands(prog: Program) -> Program:
    """``prog`` with each float32 operand of a cuBLAS product read as ``RoundBF16`` of the array it is a view
    of: one rounding per array (right after the instruction making it), the operand's views made again on the
    rounded array, right before the product. The tensor-core ``dk``/``dv`` kernels' ``dO`` (which ``D =
    rowsum(dO∘O)`` keeps float32) is read as its rounding right after the ``dq`` kernel, which reads ``dO`` whole
    and writes that copy as it reads it (:func:`into_attention`)."""
    producers = prog.producers()
    types = list(prog.types)
    rounded: dict[int, int] = {}             # array -> its rounded copy
    made: dict[tuple, int] = {}              # (a rounded copy or a view of it, a view op) -> that view
    after: dict[int, list[Apply]] = {}       # instruction index (-1: the arguments) -> the roundings after it
    before: dict[int, list[Apply]] = {}      # product index -> the views it reads
    instrs = list(prog.instrs)

    def rounding(x: int, at: int, path: str) -> int:
        """The rounded copy of array ``x``, made right after instruction ``at`` where it is not made yet."""
        if (r := rounded.get(x)) is None:
            r = rounded[x] = len(types)
            types.append(types[x])
            after.setdefault(at, []).append(Apply(RoundBF16(types[x]), (x,), (r,), path))
        return r
    for i, a in enumerate(prog.instrs):
        if (c := _copier(prog, i)) is not None:       # dk/dv's dO, rounded as dq's kernel reads it
            j, n = c
            instrs[i] = Apply(a.op, a.args[:n] + (rounding(a.args[n], j, a.path),) + a.args[n + 1:], a.results, a.path)
            continue
        if not isinstance(a.op, PRODUCTS):
            continue
        args = list(a.args)
        for n, x in enumerate(a.args):
            t = types[x]
            if not (isinstance(t.dtype, Float) and t.dtype.bits == 32):
                continue
            chain, base = [], x                   # the views from the array to the operand, innermost first
            while (j := producers.get(base)) is not None and prog.instrs[j].op.kind == "view" \
                    and len(prog.instrs[j].args) == 1:
                chain.append(prog.instrs[j])
                base = prog.instrs[j].args[0]
            v = rounding(base, producers.get(base, -1), a.path)
            for view in reversed(chain):
                key = (v, view.op)
                if key not in made:
                    made[key] = len(types)
                    types.append(types[view.results[0]])
                    before.setdefault(i, []).append(Apply(view.op, (v,), (made[key],), view.path))
                v = made[key]
            args[n] = v
        instrs[i] = Apply(a.op, tuple(args), a.results, a.path)
    if not rounded:
        return prog
    out = list(after.get(-1, []))
    for i, a in enumerate(instrs):
        out.extend(before.get(i, []))
        out.append(a)
        out.extend(after.get(i, []))
    return dataclasses.replace(prog, types=types, instrs=_without_unread_views(out, prog.outputs))


def _copier(prog: Program, i: int) -> tuple[int, int] | None:
    """Where instruction ``i`` is a tensor-core attention kernel under ``"bf16"`` whose products read a float32
    input that an earlier one reads whole and can copy (:meth:`~.attention.Attention.copies`: ``dq``'s ``dO``,
    which ``dk`` and ``dv`` multiply): ``(that one's index, the input's position)``."""
    a = prog.instrs[i]
    if not isinstance(a.op, Attention):
        return None
    copied: dict[int, int] = {}             # an input copied -> the first kernel that can copy it
    for j, b in enumerate(prog.instrs[:i]):
        if isinstance(b.op, Attention):
            for n, x in zip(b.op.ins.split(), b.args):
                if n in b.op.copies():
                    copied.setdefault(x, j)
    return next(((copied[x], k) for k, (n, x) in enumerate(zip(a.op.ins.split(), a.args))
                 if n in a.op.bf16_inputs() and x in copied
                 and isinstance(prog.types[x].dtype, Float) and prog.types[x].dtype.bits == 32), None)


def _without_unread_views(instrs: list[Apply], outputs: list[int]) -> list[Apply]:
    """``instrs`` less the views nothing reads any more (those the products read before they read the rounded
    copies' views), innermost last."""
    while True:
        read = set(outputs) | {x for a in instrs for x in a.args}
        kept = [a for a in instrs if a.op.kind != "view" or any(r in read for r in a.results)]
        if len(kept) == len(instrs):
            return kept
        instrs = kept


def into_attention(plan) -> None:
    """``plan`` (a :class:`~.plan.Plan`, changed in place) with each launch rounding only results of the
    tensor-core attention kernels just before it (nothing but views in between), or inputs they read whole
    (:meth:`~.attention.Attention.copies`: ``dq``'s ``dO``), run by those kernels: each writes the copies as it
    stores its results or reads those inputs (``then``: the roundings; its ``outputs``: its own, then the
    copies). One launch less, and a read of the result less, a rounding::

        attention ──► O ──► [RoundBF16] ──► r          attention ──► O
                                                 becomes          └──► r   (the same store, rounded)

    A rounding made again later (:mod:`~.recompute`: O's copy for the backward) stays a launch of its own."""
    out: list = []
    maker: dict[int, int] = {}              # a result (or copied input) of a tensor-core attention kernel -> its launch
    for s in plan.steps:
        at = [maker.get(plan.src(a.args[0])) for a in s.instrs] if _rounds_only(s) else [None]
        if None not in at and all(out[k].then is None for k in set(at)) and all(
                k in at or out[k].kind == "view" for k in range(min(at), len(out))):
            for k in sorted(set(at)):
                mine = [a for a, j in zip(s.instrs, at) if j == k]
                made = {a.results[0] for a in mine}
                copies = dataclasses.replace(s, instrs=mine, inputs=[a.args[0] for a in mine],
                                             outputs=[r for r in s.outputs if r in made])
                out[k] = dataclasses.replace(out[k], outputs=out[k].outputs + copies.outputs, then=copies)
            continue
        if s.kind == "attention" and s.instrs[0].op.mma:
            a = s.instrs[0]
            maker.update((plan.src(v), len(out)) for v in s.outputs)
            maker.update((plan.src(x), len(out)) for x, n in zip(a.args, a.op.ins.split()) if n in a.op.copies())
        out.append(s)
    plan.steps = out


def _rounds_only(s) -> bool:
    """Whether launch ``s`` is a fused kernel of roundings alone, each storing its rounded array."""
    return (s.kind == "fused" and bool(s.instrs) and not s.remat and s.then is None
            and all(isinstance(a.op, RoundBF16) for a in s.instrs)
            and set(s.outputs) == {a.results[0] for a in s.instrs})
