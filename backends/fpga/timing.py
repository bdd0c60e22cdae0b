"""The sequencer's cycle model and capabilities, without Amaranth (pure Python)."""
from __future__ import annotations

import numpy as np

from .microcode import Microcode

__all__ = ["HW_KINDS", "SEQUENTIAL", "check_supported", "cycles", "op_cycles", "div_bits", "sqrt_bits", "latency",
           "READ_LATENCY", "WRITE_LATENCY", "DRAIN", "EXP_STAGES", "SIGMOID_STAGES", "LATENCY",
           "DRAIN_MAX"]

HW_KINDS = {"mac", "add", "neg", "heaviside", "sigmoid", "tanh", "eq", "log", "max", "argmax", "exp", "divf", "div",
            "sqrt", "copy"}
#: the kinds the sequential unit computes, one result bit per cycle
SEQUENTIAL = {"divf", "div", "sqrt"}
#: the decoder's code of each micro-op kind (the sequencer's ``kind`` field)
KIND_CODES = {k: i for i, k in enumerate(sorted(HW_KINDS))}


def check_supported(mc: Microcode) -> None:
    """Raise a clear error naming every micro-op the hardware cannot run yet."""
    bad = sorted({f"{u.kind} ({u.source})" for u in mc.ops if u.kind not in HW_KINDS})
    if bad:
        raise NotImplementedError(f"the FPGA sequencer cannot run these micro-ops yet: {', '.join(bad)}")


def div_bits(mc: Microcode) -> int:
    """Quotient bits the sequential divider produces (one per cycle)."""
    return mc.dtype.width + mc.dtype.frac


def sqrt_bits(mc: Microcode) -> int:
    """Root bits the sequential square root produces (one per cycle): ``⌈(W + f) / 2⌉``."""
    return (mc.dtype.width + mc.dtype.frac + 1) // 2


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
#: the exp unit's extra registers between the operand registers and the product's stage (one multiply or
#: one add or one shift per stage); only an ``exp`` micro-op waits for them
EXP_STAGES = 8
#: … and the sigmoid and tanh unit's (``units.sigmoid_unit``)
SIGMOID_STAGES = 4
#: the kinds whose units are pipelined, and their extra stages
LATENCY = {"exp": EXP_STAGES, "sigmoid": SIGMOID_STAGES, "tanh": SIGMOID_STAGES}


#: the most drain cycles after the first a micro-op can take (one read port or several lanes, and the
#: deepest pipelined unit): what the drain counter and the decoded drain field hold
DRAIN_MAX = DRAIN + max(LATENCY.values())


def latency(kind: str) -> int:
    """Extra pipeline stages micro-op kind ``kind`` takes beyond a product's (its drain is longer by that)."""
    return LATENCY.get(kind, 0)


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
        c = 1 + DRAIN + (read_ports == 1) + (macs > 1) + latency(u.kind) + READ_LATENCY * (read_ports == 1 and const_b(u))
        steps = u.K if u.kind in ("max", "argmax") else -(-u.K // macs)
        if u.kind in SEQUENTIAL:
            c += n * ((sqrt_bits(mc) if u.kind == "sqrt" else div_bits(mc)) + 3 + READ_LATENCY + 1 + two)
        else:
            c += n * steps * (2 if two else 1)
        out[i] = c
    return out


