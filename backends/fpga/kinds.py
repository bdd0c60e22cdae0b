"""Micro-op kinds: the enum :class:`Kind` and :data:`FACTS`, the one table of what the backend knows about each.

The rules (:mod:`.rules`) emit kinds; the NumPy model (:func:`.microcode.execute`), the cycle model
(:mod:`.timing`), the decoder (:mod:`.decode`), the pipeline (:mod:`.mac`), the units (:mod:`.units`,
:mod:`.divider`), the unrolled datapath (:mod:`.unrolled`) and the resource estimate (:mod:`.cost`) read this
table instead of lists of their own; ``tests/test_fpga_kinds.py`` checks that each covers exactly these kinds.
Pure Python (no Amaranth).

A kind is a ``str`` (``u.kind == "mac"`` holds, and a dict keyed by kinds is read by name) that prints, formats
and reprs as its name (``'mac'``), so microcode and messages read as they did when kinds were strings.
``Kind("fft")`` raises a ``ValueError`` that names the kinds.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from circuitgrad.types import Fixed

__all__ = ["Kind", "Unit", "Operand", "Facts", "FACTS", "UnitFacts", "UNITS", "KIND_CODES", "facts",
           "EXP_STAGES", "SIGMOID_STAGES", "quotient_bits", "root_bits", "lane_zero", "dsp_blocks"]


class Kind(enum.StrEnum):
    """A micro-op kind: one row of :data:`FACTS`.

    The members' order is the order in which the pipeline builds the units of the kinds a program uses
    (the netlist's signal order): append a new kind, do not reorder.
    """
    MAC = "mac"
    MAX = "max"
    ARGMAX = "argmax"
    EXP = "exp"
    ADD = "add"
    NEG = "neg"
    HEAVISIDE = "heaviside"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    EQ = "eq"
    LOG = "log"
    COPY = "copy"
    DIVF = "divf"
    DIV = "div"
    SQRT = "sqrt"

    def __repr__(self) -> str:
        return repr(self.value)

    @classmethod
    def _missing_(cls, value):
        raise ValueError(f"unknown FPGA micro-op kind {value!r}; the kinds are {', '.join(sorted(cls))}")


class Unit(enum.Enum):
    """The sequencer's hardware that computes a kind (:data:`UNITS`: what builds it)."""
    ACCUMULATOR = "accumulator"     # the lanes' products and the exact accumulator
    MAX = "max"                     # the running maximum (and its index), on lane 0 alone
    ELEMENTWISE = "elementwise"     # combinational, between the operand registers and stage 2
    EXP = "exp"                     # pipelined: EXP_STAGES registers
    SIGMOID = "sigmoid"             # pipelined: SIGMOID_STAGES registers (sigmoid, and tanh = 2σ(2x) − 1)
    DIVIDER = "divider"             # sequential: one result bit per cycle


class Operand(enum.Enum):
    """Whether a kind reads a second operand ``b``."""
    NONE = "none"
    OPTIONAL = "optional"           # mac: without b, a sum of a
    REQUIRED = "required"


@dataclass(frozen=True)
class UnitFacts:
    """What builds a unit (``module.name`` in this package) and the DSP blocks it takes beyond the lanes'."""
    builder: str
    dsps: int = 0


#: each unit's builder and DSP blocks (the lanes' multipliers are counted per lane, by ``cost.dsps``)
UNITS: dict[Unit, UnitFacts] = {
    Unit.ACCUMULATOR: UnitFacts("mac.MacPipeline"),
    Unit.MAX: UnitFacts("mac.MacPipeline"),
    Unit.ELEMENTWISE: UnitFacts("units.elementwise"),
    Unit.EXP: UnitFacts("units.exp_unit", dsps=3),
    Unit.SIGMOID: UnitFacts("units.sigmoid_unit"),
    Unit.DIVIDER: UnitFacts("divider.SeqDivider"),
}

#: the exp unit's extra registers between the operand registers and the product's stage (one multiply or
#: one add or one shift per stage); only an ``exp`` micro-op waits for them
EXP_STAGES = 8
#: … and the sigmoid and tanh unit's (``units.sigmoid_unit``)
SIGMOID_STAGES = 4


def quotient_bits(dt: Fixed) -> int:
    """Quotient bits the sequential divider produces for ``dt`` (one per cycle): ``W + f``."""
    return dt.width + dt.frac


def root_bits(dt: Fixed) -> int:
    """Root bits the sequential square root produces for ``dt`` (one per cycle): ``⌈(W + f) / 2⌉``."""
    return (dt.width + dt.frac + 1) // 2


@dataclass(frozen=True)
class Facts:
    """Everything the backend branches on for one kind (a row of :data:`FACTS`).

    * ``code``: the decoded ``kind`` field, the number the decoder's tables hold for it (fixed: never renumber);
    * ``unit``: the hardware that computes it; ``b``: whether it reads a second operand;
    * ``reduces``: it loops over ``k`` (``K ≥ 1``; every other kind has ``K = 1``);
    * ``latency``: pipeline stages beyond a product's (its drain is that much longer);
    * ``bits``: for a sequential kind, the unit's cycles per element (a result bit each) for a format; ``None``
      for a pipelined one (a pair per cycle): :attr:`sequential`;
    * ``index``: its result is an index (argmax), not a fixed-point value, so it is not range checked;
    * ``combinational``: ``units.elementwise`` computes it; ``unrolled``: the unrolled datapath builds it;
      ``mask``: … as a 1-bit mask ``a > 0`` (a product by it is a multiplexer); ``fits``: its result is a word
      it read (copy), so the unrolled datapath does not range check it;
    * ``refuses``: the operands its unit refuses (the overflow flag rises), as messages name them;
    * ``computes``: what it computes, on raw fixed point (the semantics of ``circuitgrad.fixedpoint``).
    """
    code: int
    unit: Unit
    b: Operand
    computes: str
    reduces: bool = False
    latency: int = 0
    bits: Callable[[Fixed], int] | None = None
    index: bool = False
    combinational: bool = False
    unrolled: bool = False
    mask: bool = False
    fits: bool = False
    refuses: str = ""

    @property
    def sequential(self) -> bool:
        """Its elements run one at a time on a multi-cycle unit (else pipelined: one pair per cycle)."""
        return self.bits is not None


_N, _O, _R = Operand.NONE, Operand.OPTIONAL, Operand.REQUIRED

#: the facts of every kind (see :class:`Facts`)
FACTS: dict[Kind, Facts] = {
    Kind.MAC: Facts(9, Unit.ACCUMULATOR, _O, "out[o] = rescale(Σ_k a[o,k]·b[o,k]) (MatMul, Mul, Scale); without b "
                    "Σ_k a[o,k] (SumTo, exact)", reduces=True, unrolled=True),
    Kind.MAX: Facts(10, Unit.MAX, _N, "out[o] = max_k a[o,k] (softmax's row maximum)", reduces=True),
    Kind.ARGMAX: Facts(1, Unit.MAX, _N, "out[o] = the first k where a[o,k] is largest (a raw index)",
                       reduces=True, index=True),
    Kind.EXP: Facts(6, Unit.EXP, _R, "exp_fixed(a − b)", latency=EXP_STAGES),
    Kind.ADD: Facts(0, Unit.ELEMENTWISE, _R, "a + b", combinational=True, unrolled=True),
    Kind.NEG: Facts(11, Unit.ELEMENTWISE, _N, "−a", combinational=True, unrolled=True),
    Kind.HEAVISIDE: Facts(7, Unit.ELEMENTWISE, _N, "2^f where a > 0, else 0", combinational=True, unrolled=True,
                          mask=True),
    Kind.SIGMOID: Facts(12, Unit.SIGMOID, _N, "sigmoid_fixed(a)", latency=SIGMOID_STAGES, combinational=True,
                        unrolled=True),
    Kind.TANH: Facts(14, Unit.SIGMOID, _N, "2·sigmoid_fixed(2a) − 2^f", latency=SIGMOID_STAGES,
                     combinational=True, unrolled=True),
    Kind.EQ: Facts(5, Unit.ELEMENTWISE, _R, "2^f where a = b, else 0 (one-hot rows)", combinational=True,
                   unrolled=True),
    Kind.LOG: Facts(8, Unit.ELEMENTWISE, _N, "log_fixed(a)", combinational=True, unrolled=True,
                    refuses="an operand ≤ 0"),
    Kind.COPY: Facts(2, Unit.ELEMENTWISE, _N, "a (write-back of updated parameters, zero fills, im2col)",
                     combinational=True, unrolled=True, fits=True),
    Kind.DIVF: Facts(4, Unit.DIVIDER, _R, "⌊a·2^f / b⌋ (softmax: a ≥ 0, b > 0)", bits=quotient_bits,
                     refuses="a negative dividend or a divisor ≤ 0"),
    Kind.DIV: Facts(3, Unit.DIVIDER, _R, "⌊a·2^f / b + 1/2⌋, signed (fixedpoint.div_fixed)", bits=quotient_bits,
                    refuses="a zero divisor"),
    Kind.SQRT: Facts(13, Unit.DIVIDER, _N, "⌊sqrt(a·2^f)⌋", bits=root_bits, refuses="a negative radicand"),
}

#: the decoder's code of each kind (the sequencer's ``kind`` field): :attr:`Facts.code`
KIND_CODES: dict[Kind, int] = {k: f.code for k, f in FACTS.items()}


def facts(kind: str) -> Facts:
    """The facts of ``kind`` (a :class:`Kind` or its name; ``ValueError`` naming the kinds for another)."""
    return FACTS[Kind(kind)]


def lane_zero(kind) -> bool:
    """``kind`` runs on lane 0 alone: its unit takes DSP blocks (the exp unit's three), so the other lanes do
    not build it (``timing.lane_plan`` gives it one lane)."""
    return UNITS[facts(kind).unit].dsps > 0


def dsp_blocks(kinds, lanes: int = 1) -> int:
    """DSP blocks of a sequencer of ``lanes`` lanes that computes ``kinds``: a multiplier per lane, and those of
    the units they use (the exp unit's three), on lane 0 alone."""
    return lanes + sum(UNITS[unit].dsps for unit in {facts(k).unit for k in kinds})
