"""The sequencer's static parameters: what every stage needs to size itself, derived once from the program."""
from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from circuitgrad.types import Fixed

from .kinds import Facts, Kind, Unit, facts

__all__ = ["SeqConfig", "DATA", "ROM_FIELDS", "ROM_BLOCK", "rom_blocks"]

#: a datapath register's options: no reset. Only the flags that say whether a word is used (valid, write
#: enables, the sequencer's state) are reset; a word or address is overwritten before a reset flag lets it be
#: used, and the reset line then reaches a few hundred flip-flops instead of most of them (5 983 of the
#: 784-32-10 step's 7 313 on the ECP5), which frees the routing and lets the placer pack flip-flops freely.
DATA = {"reset_less": True}

#: the decoded fields that a program whose data sits in SPRAM keeps in block RAM: the operands' bases, the fields
#: that vary most from micro-op to micro-op (in LUT tables, about half of a large program's decoder)
ROM_FIELDS = (("a", "base"), ("b", "base"), ("o", "base"))
#: the iCE40 block RAM those tables are cut into: (words, bits)
ROM_BLOCK = (256, 16)


def rom_blocks(n_ops: int, depth: int) -> int:
    """Block RAMs of the bases' tables of ``n_ops`` micro-ops over ``depth`` words (``ROM_BLOCK`` slices)."""
    aw = max(1, (max(1, depth) - 1).bit_length())
    words, bits = ROM_BLOCK
    return -(-max(1, n_ops) // words) * -(-len(ROM_FIELDS) * aw // bits)


@dataclass(frozen=True)
class SeqConfig:
    """Widths, lane count and the units built, fixed at elaboration (no signals).

    ``codes`` maps each micro-op kind to the value the decoded ``kind`` field carries for it (``kinds.KIND_CODES``).
    """
    dt: Fixed
    depth: int                  # memory words (at least 1)
    n_ops: int                  # micro-ops in the program
    lanes: int                  # MAC lanes (``macs``)
    one_port: bool              # one read port: two memory operands are read one after the other
    kmax: int                   # the longest reduction
    nmax: int                   # the most output elements of one micro-op
    used: frozenset[Kind]       # the micro-op kinds the program uses: units for the others are not built
    codes: Mapping[Kind, int]
    div_bits: int               # quotient bits of the sequential divider
    sqrt_bits: int              # root bits of the sequential square root
    rom_bram: bool = False      # the operands' bases decoded from block RAM (:data:`ROM_FIELDS`), not from LUTs

    @property
    def W(self) -> int:
        """The word width."""
        return self.dt.width

    @property
    def f(self) -> int:
        """The fractional bits."""
        return self.dt.frac

    @property
    def aw(self) -> int:
        """Address bits. Address arithmetic is modulo ``2^aw``: every address the memory sees is below
        ``depth``, and + and · commute with the reduction, so this is exact (masked lanes may wrap harmlessly)."""
        return max(1, (self.depth - 1).bit_length())

    @property
    def acc_w(self) -> int:
        """Accumulator bits: a sum of ``kmax`` products of two words over ``lanes`` lanes, exactly."""
        return 2 * self.W + max(1, self.kmax.bit_length()) + 1 + max(0, (self.lanes - 1).bit_length())

    @property
    def has_max(self) -> bool:
        """A ``max`` or ``argmax`` reduction is built (on lane 0 alone)."""
        return any(facts(k).unit is Unit.MAX for k in self.used)

    @property
    def has_argmax(self) -> bool:
        """The running maximum's index is kept (a kind whose result is an index: ``argmax``)."""
        return any(facts(k).index for k in self.used)

    @property
    def has_div(self) -> bool:
        """The sequential unit (``divf``, ``div``, ``sqrt``) is built."""
        return any(facts(k).sequential for k in self.used)

    def decodes(self, kind, where: Callable[[Facts], bool]):
        """Whether the decoded ``kind`` (a signal) is the code of a kind whose facts satisfy ``where``:
        ``(kind == c₀) | (kind == c₁) | …`` in :class:`~.kinds.Kind`'s order (every kind, used or not)."""
        return functools.reduce(operator.or_, [kind == self.codes[k] for k in Kind if where(facts(k))])
