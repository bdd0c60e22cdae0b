"""The work of an SSA program, instruction by instruction: FLOPs, matrix-product FLOPs and bytes.

One small rule per primitive (a table keyed by primitive, as every interpreter here has), applied
to the program the backends run, so a model's cost follows from its definition: there is no second
table of layer formulas to keep in step with the layers.

* ``matmul_flops``: ``2·m·n·k`` per product, batch axes included (``MatMul``, ``BatchMatMul``;
  convolutions are an ``Unfold`` and a ``MatMul``), which is how PyTorch's ``FlopCounterMode`` counts.
* ``flops``: every arithmetic operation (matrix products included), one per element and operation.
* ``transcendentals``: ``exp``/``log``/``tanh``/``sigmoid``/``sqrt``/``rsqrt``/``div`` evaluations.
* ``bytes``: what a materialising interpreter reads and writes (operands and results once each);
  views (``Reshape``, ``Broadcast``, ``Transpose``, ``Permute``, ``Slice``) and ``Copy``/``Parameter``
  move nothing: their consumers read the memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import primitives as P
from ..schedule import Apply, Program
from ..types import Fixed, Index, NdArrayType

__all__ = ["Work", "work", "itemsize", "WORK_RULES"]


@dataclass(frozen=True)
class Work:
    """What one instruction (or a sum of them) computes and moves."""
    flops: int = 0
    matmul_flops: int = 0
    transcendentals: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def __add__(self, o: "Work") -> "Work":
        return Work(self.flops + o.flops, self.matmul_flops + o.matmul_flops,
                    self.transcendentals + o.transcendentals, self.bytes_read + o.bytes_read,
                    self.bytes_written + o.bytes_written)


def itemsize(t: NdArrayType) -> int:
    """Bytes per element: float32 4, float64 8, fixed point and token ids int64 (8)."""
    if isinstance(t.dtype, (Fixed, Index)):
        return 8
    return int(np.dtype(t.dtype.numpy_dtype()).itemsize)


def _matmul_flops(op: P.MatMul | P.BatchMatMul) -> int:
    a, b = op.source
    (out,) = op.target
    return 2 * out.size * a.shape[-1]


def _elementwise(per: int = 1, transcendental: int = 0) -> Callable[[P.Primitive], tuple[int, int, int]]:
    """``per`` flops (``transcendental`` of them special functions) per result element."""
    def rule(op: P.Primitive) -> tuple[int, int, int]:
        n = op.target[0].size
        return per * n, 0, transcendental * n
    return rule


def _free(op: P.Primitive) -> tuple[int, int, int]:
    return 0, 0, 0


def _reduce(op: P.Primitive) -> tuple[int, int, int]:
    return op.source[0].size - op.target[0].size, 0, 0


def _matmul(op: P.MatMul | P.BatchMatMul) -> tuple[int, int, int]:
    f = _matmul_flops(op)
    return f, f, 0


def _softmax(op: P.Softmax) -> tuple[int, int, int]:
    n = op.T.size
    return 5 * n, 0, n          # max, subtract, exp, sum, divide


def _logsumexp(op: P.LogSumExp) -> tuple[int, int, int]:
    n, rows = op.T.size, op.target[0].size
    return 4 * n + rows, 0, n + rows


def _fold(op: P.Fold) -> tuple[int, int, int]:
    return op.columns.size, 0, 0          # overlapping windows add up


#: primitive → (flops, matmul_flops, transcendentals) of one application
WORK_RULES: dict[type, Callable[[P.Primitive], tuple[int, int, int]]] = {
    P.Copy: _free, P.Parameter: _free, P.Constant: _free, P.Reshape: _free,
    P.Transpose: _free, P.Permute: _free, P.Broadcast: _free, P.OneHot: _free,
    P.Slice: _free, P.Pad: _free, P.Unfold: _free, P.Fold: _fold,
    P.Add: _elementwise(), P.Neg: _elementwise(), P.Mul: _elementwise(), P.Scale: _elementwise(),
    P.Heaviside: _elementwise(), P.CausalMask: _elementwise(), P.ArgMaxMask: _elementwise(2),
    P.Sigmoid: _elementwise(4, 1), P.Tanh: _elementwise(1, 1), P.Exp: _elementwise(1, 1),
    P.Log: _elementwise(1, 1), P.Sqrt: _elementwise(1, 1), P.Rsqrt: _elementwise(2, 1),
    P.Div: _elementwise(1, 1),
    P.SumTo: _reduce, P.MatMul: _matmul, P.BatchMatMul: _matmul,
    P.Softmax: _softmax, P.LogSumExp: _logsumexp,
}

#: kinds of operation that move no bytes of their own: views only relabel memory (reshapes, broadcasts,
#: transposes, as the code generator emits them), copies share their operand, and sources are hoisted out of
#: the step (parameters and constants are read by their consumers). A slice is a gather: the code generator
#: copies it (``.copy()``), so it reads and writes like any other operation.
_NO_BYTES = ("view", "copy", "source")


def work(p: Program, a: Apply) -> Work:
    """The work of instruction ``a`` of program ``p``."""
    rule = WORK_RULES.get(type(a.op))
    if rule is None:
        raise NotImplementedError(f"cost: no work rule for {a.op.name}")
    flops, mm, tr = rule(a.op)
    if a.op.kind in _NO_BYTES:
        return Work(flops, mm, tr)
    rd = sum(p.types[x].size * itemsize(p.types[x]) for x in a.args)
    wr = sum(p.types[r].size * itemsize(p.types[r]) for r in a.results)
    return Work(flops, mm, tr, rd, wr)
