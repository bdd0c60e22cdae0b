"""The geometry of a ``SumTo`` (or of sums side by side): which axes it keeps and which it sums, over the memory
of the array it reads, and how a sum kernel (:mod:`~.reduction`) splits them into groups of ``G`` outputs and
``W`` warps. Kept apart from the kernels' source so that the plan (:mod:`~.epilogue`) can ask it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from circuitgrad import primitives as P

from .layout import contiguous_strides
from .warp import WARP

if TYPE_CHECKING:
    from .plan import Launch, Plan

__all__ = ["Axis", "Reduction", "geometry", "offset", "MAX_WARPS", "UNROLL", "TERMS", "COLUMNS"]

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
                               # (each stage's), then its epilogue's
    reads: tuple = ()          # the epilogue's reads at its own elements (:attr:`~.kernel.Kernel.reads`)

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
    """How ``step`` (one ``SumTo``, or several of one geometry side by side) is summed: its axes, ``G`` and ``W``
    (chosen unless given)."""
    found = [_axes(a, plan) for a in step.instrs]
    base, ks, rs = found[0]
    if any((k, r) != (ks, rs) for _, k, r in found[1:]):
        raise AssertionError(f"sums side by side with different geometries: {[(k, r) for _, k, r in found]}")
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
    return Reduction(base, step.instrs[0].results[0], ks, rs, g, warps)


def _axes(a, plan: Plan) -> tuple[int, tuple[Axis, ...], tuple[Axis, ...]]:
    """``(base, kept, reduced)`` of one ``SumTo``: the array it reads and its axes over that array's memory."""
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
    top = sum((e - 1) * s for e, s, _ in axes)
    if top >= plan.program.types[base].size:
        raise AssertionError(f"SumTo reads offset {top} of a base of {plan.program.types[base].size} elements")
    return (base, tuple((e, s) for e, s, red in axes if not red), tuple((e, s) for e, s, red in axes if red))


def offset(var: str, axes: tuple[Axis, ...]) -> str:
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
