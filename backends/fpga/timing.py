"""The sequencer's cycle model, without Amaranth (pure Python): each kind's latency, lanes and sequential bits
are its row of :data:`.kinds.FACTS`."""
from __future__ import annotations

import numpy as np

import math
from typing import NamedTuple

from .isa import View, align, interleave, view_2d
from .kinds import FACTS, facts, lane_zero, quotient_bits, root_bits
from .microcode import Microcode

__all__ = ["cycles", "op_cycles", "lane_plan", "LanePlan", "div_bits", "sqrt_bits", "latency", "const_b", "READ_LATENCY", "WRITE_LATENCY",
           "DRAIN", "DRAIN_MAX", "LANE_LATENCY", "LANE_DRAIN", "views_2d"]


def div_bits(mc: Microcode) -> int:
    """Quotient bits the sequential divider produces (one per cycle)."""
    return quotient_bits(mc.dtype)


def sqrt_bits(mc: Microcode) -> int:
    """Root bits the sequential square root produces (one per cycle): ``⌈(W + f) / 2⌉``."""
    return root_bits(mc.dtype)


#: cycles from a read address to its word at the operand registers' inputs: the block RAM, then a register
#: per bank (``banks.BankedMemory``)
READ_LATENCY = 2
#: with several lanes, the cycles the interleaved memory adds to a read: each lane's address is registered with
#: the bank it selects, each bank's address after the crossbar, and each bank's word before the lanes choose
#: among them (``interleave.InterleavedMemory``)
LANE_LATENCY = 3
#: with several lanes, the drain cycles they add: ``LANE_LATENCY`` and each lane's product register (``mac.py``)
LANE_DRAIN = LANE_LATENCY + 1
#: cycles from a write's request to the end of the cycle in which it lands (its word, address and bank
#: enables are registered)
WRITE_LATENCY = 1
#: cycles from a micro-op's last issue to the next micro-op's load: the read (``READ_LATENCY``), the operand
#: registers, the product and the accumulator's two halves, then the write's request; the last write lands at the end of
#: the load's cycle, which reads nothing with two read ports (one more cycle with one read port, whose
#: load reads a constant operand)
DRAIN = READ_LATENCY + 4
#: the most drain cycles after the first a micro-op can take (one read port or the lanes' address stage, and the
#: deepest pipelined unit): what the drain counter and the decoded drain field hold
DRAIN_MAX = DRAIN - 1 + LANE_DRAIN + max(f.latency for f in FACTS.values())


class LanePlan(NamedTuple):
    """How a micro-op runs on several lanes. The lanes take consecutive elements of one output axis (the
    columns, or the rows when ``swap``), ``lanes`` of them at a time (at most the design's): the ``n_lane``
    elements of that axis in ``⌈n_lane / lanes⌉`` groups, for each of the ``n_other`` elements of the other."""
    swap: bool
    lanes: int
    n_other: int
    n_lane: int

    @property
    def groups(self) -> int:
        """Issue groups: ``n_other · ⌈n_lane / lanes⌉``."""
        return self.n_other * -(-self.n_lane // self.lanes)


def _distinct(stride: int, banks: int) -> int:
    """How many consecutive lanes a stream of ``stride`` keeps in distinct banks of ``banks``."""
    return banks // math.gcd(stride % banks, banks)


def views_2d(u) -> list[tuple[int, int, int, int, int, int]]:
    """``view_2d`` of micro-op ``u``'s output, ``a`` and ``b`` (``b`` all zero strides when absent), in the
    output's coordinates."""
    bv = u.b if u.b is not None else View(0, u.out.shape, (0,) * len(u.out.shape))
    return [view_2d(u.out)] + [view_2d(View(v.base, u.out.shape, align(v, u.out), v.kstride)) for v in (u.a, bv)]


def lane_plan(u, lanes: int) -> LanePlan:
    """The lanes' axis and count for micro-op ``u`` on ``lanes`` lanes.

    The memory is interleaved across ``P = interleave(lanes)`` banks; the lanes of one group read and write at
    ``base + l·s`` for each stream (``out``, ``a``, ``b``), so ``p`` lanes stay in distinct banks when ``p ≤ P /
    gcd(s, P)`` (an odd stride: all of them). A read of stride 0 is one word for every lane. Of the two output
    axes, the one that takes fewer groups is chosen (the columns on a tie). A kind whose unit takes DSP blocks
    (``kinds.lane_zero``: exp) runs on lane 0 alone.
    """
    (_, n0, n1, o0, o1, _), (_, _, _, a0, a1, _), (_, _, _, b0, b1, _) = views_2d(u)
    if lanes == 1 or lane_zero(u.kind):            # (a unit with DSP blocks is on lane 0 alone)
        return LanePlan(False, 1, n0, n1)
    P = interleave(lanes)
    best = None
    for swap, n_lane, n_other, so, sa, sb in ((False, n1, n0, o1, a1, b1), (True, n0, n1, o0, a0, b0)):
        p = min(lanes, n_lane, _distinct(so, P))
        for s in (sa, sb) if u.b is not None else (sa,):
            if s:
                p = min(p, _distinct(s, P))
        plan = LanePlan(swap, max(1, p), n_other, n_lane)
        if best is None or plan.groups < best.groups:
            best = plan
    return best


def latency(kind: str) -> int:
    """Extra pipeline stages micro-op kind ``kind`` takes beyond a product's (its drain is longer by that):
    ``FACTS[kind].latency``."""
    return facts(kind).latency


def const_b(u) -> bool:
    """Whether micro-op ``u``'s second operand is one value (a constant read once, not per element)."""
    return u.b is not None and u.b.kstride == 0 and all(st == 0 for st in u.b.strides)


def cycles(mc: Microcode, read_ports: int = 2, macs: int = 1) -> int:
    """Cycles from ``start`` to ``done`` (the cycle model; exact for this sequencer).

    A micro-op costs 1 (load) + ``DRAIN`` (6) cycles (one more with one read port, ``LANE_DRAIN`` more with
    several lanes), plus :func:`latency`
    more drain cycles for an ``exp``, ``sigmoid`` or ``tanh`` (their pipelined units), plus one per
    (element, k) pair; a ``divf`` or ``div`` element costs
    ``div_bits + 6`` (issue, two cycles for the read to reach the operand registers, load, one cycle per
    quotient bit, the rounding, write), a ``sqrt`` element ``sqrt_bits + 6``. With one read port, an operation that reads
    two non-constant operands issues every other cycle, and a constant
    operand is read once, in ``READ_LATENCY`` extra load cycles. With ``macs`` lanes, each lane computes
    output elements of its own (:func:`lane_plan`): a group of up to ``macs`` elements issues per (k, cycle),
    a read takes ``LANE_LATENCY`` more cycles (so does a divider element; a drain ``LANE_DRAIN``) and a
    micro-op of ``n`` elements costs ``lane_plan(u, macs).groups`` times an element's cycles.
    """
    if not mc.ops:                       # a program of views only: start, then done
        return 2
    return 4 + int(sum(op_cycles(mc, read_ports, macs)))


def op_cycles(mc: Microcode, read_ports: int = 2, macs: int = 1) -> np.ndarray:
    """The cycles of each micro-op of ``mc`` (:func:`cycles` is 4 more than their sum: start, the range check of
    the last write, and done)."""
    out = np.zeros(len(mc.ops), dtype=np.int64)
    lane = LANE_LATENCY * (macs > 1)
    for i, u in enumerate(mc.ops):
        n = lane_plan(u, macs).groups if macs > 1 else int(np.prod(u.out.shape, dtype=np.int64))
        two = read_ports == 1 and u.b is not None and not const_b(u)
        f = facts(u.kind)
        c = (1 + DRAIN + (read_ports == 1) + LANE_DRAIN * (macs > 1) + f.latency
             + READ_LATENCY * (read_ports == 1 and const_b(u)))
        if f.sequential:
            c += n * (f.bits(mc.dtype) + 3 + READ_LATENCY + lane + 1 + two)
        else:
            c += n * u.K * (2 if two else 1)
        out[i] = c
    return out


