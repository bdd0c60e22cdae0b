"""The sequencer's cycle model, without Amaranth (pure Python): each kind's latency, lanes and sequential bits
are its row of :data:`.kinds.FACTS`."""
from __future__ import annotations

import numpy as np

from .kinds import FACTS, facts, quotient_bits, root_bits
from .microcode import Microcode

__all__ = ["cycles", "op_cycles", "div_bits", "sqrt_bits", "latency", "const_b", "READ_LATENCY", "WRITE_LATENCY",
           "DRAIN", "DRAIN_MAX"]


def div_bits(mc: Microcode) -> int:
    """Quotient bits the sequential divider produces (one per cycle)."""
    return quotient_bits(mc.dtype)


def sqrt_bits(mc: Microcode) -> int:
    """Root bits the sequential square root produces (one per cycle): ``⌈(W + f) / 2⌉``."""
    return root_bits(mc.dtype)


#: cycles from a read address to its word at the operand registers' inputs: the block RAM, then a register
#: per bank (``banks.BankedMemory``)
READ_LATENCY = 2
#: cycles from a write's request to the end of the cycle in which it lands (its word, address and bank
#: enables are registered)
WRITE_LATENCY = 1
#: cycles from a micro-op's last issue to the next micro-op's load: the read (``READ_LATENCY``), the operand
#: registers, the product and the accumulator's two halves, then the write's request; the last write lands at the end of
#: the load's cycle, which reads nothing with two read ports (one more cycle with one read port, whose
#: load reads a constant operand)
DRAIN = READ_LATENCY + 4
#: the most drain cycles after the first a micro-op can take (one read port or several lanes, and the
#: deepest pipelined unit): what the drain counter and the decoded drain field hold
DRAIN_MAX = DRAIN + max(f.latency for f in FACTS.values())


def latency(kind: str) -> int:
    """Extra pipeline stages micro-op kind ``kind`` takes beyond a product's (its drain is longer by that):
    ``FACTS[kind].latency``."""
    return facts(kind).latency


def const_b(u) -> bool:
    """Whether micro-op ``u``'s second operand is one value (a constant read once, not per element)."""
    return u.b is not None and u.b.kstride == 0 and all(st == 0 for st in u.b.strides)


def cycles(mc: Microcode, read_ports: int = 2, macs: int = 1) -> int:
    """Cycles from ``start`` to ``done`` (the cycle model; exact for this sequencer).

    A micro-op costs 1 (load) + ``DRAIN`` (6) cycles (one more with one read port, one more with several lanes:
    their products are registered before the lane sum), plus :func:`latency`
    more drain cycles for an ``exp``, ``sigmoid`` or ``tanh`` (their pipelined units), plus one per
    (element, k) pair; a ``divf`` or ``div`` element costs
    ``div_bits + 6`` (issue, two cycles for the read to reach the operand registers, load, one cycle per
    quotient bit, the rounding, write), a ``sqrt`` element ``sqrt_bits + 6``. With one read port, an operation that reads
    two non-constant operands issues every other cycle, and a constant
    operand is read once, in ``READ_LATENCY`` extra load cycles. With ``macs`` lanes, a
    sum over ``K`` takes ``⌈K / macs⌉`` cycles per element; a maximum or argmax runs on
    lane 0 alone (``K`` cycles), so that lanes need no comparators.
    """
    if not mc.ops:                       # a program of views only: start, then done
        return 2
    return 4 + int(sum(op_cycles(mc, read_ports, macs)))


def op_cycles(mc: Microcode, read_ports: int = 2, macs: int = 1) -> np.ndarray:
    """The cycles of each micro-op of ``mc`` (:func:`cycles` is 4 more than their sum: start, the range check of
    the last write, and done)."""
    out = np.zeros(len(mc.ops), dtype=np.int64)
    for i, u in enumerate(mc.ops):
        n = int(np.prod(u.out.shape, dtype=np.int64))
        two = read_ports == 1 and u.b is not None and not const_b(u)
        f = facts(u.kind)
        c = 1 + DRAIN + (read_ports == 1) + (macs > 1) + f.latency + READ_LATENCY * (read_ports == 1 and const_b(u))
        steps = u.K if f.one_lane else -(-u.K // macs)
        if f.sequential:
            c += n * (f.bits(mc.dtype) + 3 + READ_LATENCY + 1 + two)
        else:
            c += n * steps * (2 if two else 1)
        out[i] = c
    return out


