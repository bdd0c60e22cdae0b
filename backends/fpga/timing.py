"""The sequencer's cycle model and capabilities, without Amaranth (pure Python)."""
from __future__ import annotations

import numpy as np

from .microcode import Microcode

__all__ = ["HW_KINDS", "SEQUENTIAL", "check_supported", "cycles", "op_cycles", "div_bits", "sqrt_bits", "ew_stages"]

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


def ew_stages(mc: Microcode) -> int:
    """Extra pipeline stages of the elementwise path: 4 when the exp unit is built (one multiply per stage)."""
    return 4 if any(u.kind == "exp" for u in mc.ops) else 0


def const_b(u) -> bool:
    """Whether micro-op ``u``'s second operand is one value (a constant read once, not per element)."""
    return u.b is not None and u.b.kstride == 0 and all(st == 0 for st in u.b.strides)


def cycles(mc: Microcode, read_ports: int = 2, macs: int = 1) -> int:
    """Cycles from ``start`` to ``done`` (the cycle model; exact for this sequencer).

    A micro-op costs 1 (load) + 3 (drain) cycles, plus 4 more drain cycles in
    every op when the pipelined exp unit is built (:func:`ew_stages`), plus one per (element, k)
    pair; a ``divf`` or ``div`` element costs ``div_bits + 3`` (issue, load, one cycle
    per quotient bit, write), a ``sqrt`` element ``sqrt_bits + 3``. With one read port, an operation that reads
    two non-constant operands issues every other cycle, and a constant
    operand is read once, in one extra load cycle. With ``macs`` lanes, a
    sum over ``K`` takes ``⌈K / macs⌉`` cycles per element; a maximum or argmax runs on
    lane 0 alone (``K`` cycles), so that lanes need no comparators.
    """
    if not mc.ops:                       # a program of views only: start, then done
        return 2
    return 3 + int(sum(op_cycles(mc, read_ports, macs)))


def op_cycles(mc: Microcode, read_ports: int = 2, macs: int = 1) -> np.ndarray:
    """The cycles of each micro-op of ``mc`` (:func:`cycles` is 3 more than their sum: start and done)."""
    D = ew_stages(mc)
    out = np.zeros(len(mc.ops), dtype=np.int64)
    for i, u in enumerate(mc.ops):
        n = int(np.prod(u.out.shape, dtype=np.int64))
        two = read_ports == 1 and u.b is not None and not const_b(u)
        c = 4 + D + (read_ports == 1 and const_b(u))
        steps = u.K if u.kind in ("max", "argmax") else -(-u.K // macs)
        if u.kind in SEQUENTIAL:
            c += n * ((sqrt_bits(mc) if u.kind == "sqrt" else div_bits(mc)) + 3 + two)
        else:
            c += n * steps * (2 if two else 1)
        out[i] = c
    return out


