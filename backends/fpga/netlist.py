"""Statistics of a design's RTLIL netlist (as Amaranth emits it, before synthesis) for the cost model.

* :func:`adder_bits`: the output bits of the ``$add`` and of the ``$sub`` cells (the unrolled
  design's LUTs are linear in them);
* :func:`sum_operands`: the most operands one sum adds, through adders whose results have no other
  use: what yosys' ``alumacc`` merges into one multi-operand ``$macc`` and maps to a carry-save tree
  (the unrolled design's clock period grows with its logarithm)::

      a ──┐
      b ──┴► $add ──┐
      c ───► $shl ──┴► $add ──┐          operands = 4 (a, b, c, d): one $macc
      d ──────────────► $neg ─┴► $add ──► [reg]

The parse is the RTLIL that :func:`circuitgrad.backends.fpga.synth.rtlil_text` returns: cells with
``connect`` lines per port, module-level ``connect`` and ``process`` ``assign`` statements (wiring).
Signals are tracked per whole wire, not per bit.
"""
from __future__ import annotations

import re
from collections import defaultdict

__all__ = ["adder_bits", "sum_operands", "ADDERS"]

#: cells that add: a carry chain each in synthesis, or one operand row of a merged sum
ADDERS = frozenset({"$add", "$sub", "$neg"})
#: cells that only route bits (constant shifts, sign or zero extension): a sum passes through them
_WIRING = frozenset({"$shl", "$pos"})
_OUTPUTS = frozenset({"\\Y", "\\Q", "\\DATA", "\\RD_DATA"})
_WIRE = re.compile(r"[\\$][^\s\[\]{}]+")


def adder_bits(text: str) -> tuple[int, int]:
    """The sums of the ``Y_WIDTH`` of the ``$add`` cells and of the ``$sub`` cells in ``text``."""
    bits = {"$add": 0, "$sub": 0}
    kind = None
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["cell"]:
            kind = words[1] if words[1] in bits else None
        elif kind and words[:2] == ["parameter", "\\Y_WIDTH"]:
            bits[kind] += int(words[2])
        elif words == ["end"]:
            kind = None
    return bits["$add"], bits["$sub"]


def _cells(text: str) -> list[list[tuple[str, list[str], list[str]]]]:
    """Per module: its cells as (type, input wires, output wires); a module ``connect`` or a process'
    ``assign`` is a cell of type ``"="``."""
    mods: list[list] = []
    cells: list = []
    cell = None
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        head = words[0]
        if head == "module":
            cells = []
            mods.append(cells)
        elif head == "cell":
            cell = (words[1], [], [])
        elif head == "connect" and cell is not None:
            (cell[2] if words[1] in _OUTPUTS else cell[1]).extend(_WIRE.findall(" ".join(words[2:])))
        elif head in ("connect", "assign"):        # module connection, or a process' assignment
            cells.append(("=", _WIRE.findall(" ".join(words[2:])), _WIRE.findall(words[1])[:1]))
        elif head == "end" and cell is not None:
            cells.append(cell)
            cell = None
    return mods


def sum_operands(text: str) -> int:
    """The most operands one adder tree of ``text`` sums (1 when it has no adder).

    An adder's operand that another adder computes, through wiring only (:data:`_WIRING`, connections)
    and with no other use on the way, counts that adder's operands; any other operand counts one.
    """
    best = 1
    for cells in _cells(text):
        driver = {w: c for c in cells for w in c[2]}
        uses: dict[str, int] = defaultdict(int)
        for c in cells:
            for w in c[1]:
                uses[w] += 1
        memo: dict[int, int] = {}

        def operands(cell) -> int:
            if id(cell) not in memo:
                memo[id(cell)] = 1                 # a loop through adders counts once
                n = 0
                for w in cell[1]:
                    d = driver.get(w)
                    while d is not None and (d[0] in _WIRING or d[0] == "=") and d[1] and uses[w] == 1:
                        w = d[1][0]
                        d = driver.get(w)
                    n += operands(d) if d is not None and d[0] in ADDERS and uses[w] == 1 else 1
                memo[id(cell)] = n
            return memo[id(cell)]

        best = max([best] + [operands(c) for c in cells if c[0] in ADDERS])
    return best
