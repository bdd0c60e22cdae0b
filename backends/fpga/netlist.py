"""Statistics of a design's RTLIL netlist (as Amaranth emits it, before synthesis) for the cost model.

* :func:`adder_bits`: the output bits of the ``$add`` and of the ``$sub`` cells (the unrolled
  design's LUTs are linear in them);
* :func:`adder_levels`: the most adders on one combinational path between registers (the unrolled
  design's clock period grows with them)::

      [reg] ──► $add ──► $sub ──► $shl ──► $add ──► … ──► [reg]
                  1        2     (wiring)     3          levels = 3

The parse is the RTLIL that :func:`circuitgrad.backends.fpga.synth.rtlil_text` returns: cells with
``connect`` lines per port, module-level ``connect`` and ``process`` ``assign`` statements (zero-level
edges). Registers (``$dff`` and its variants) end a path. Signals are tracked per whole wire, not per
bit, so a path is as long as the longest through any bit of its wires: an upper bound for the bits.
"""
from __future__ import annotations

import re
from collections import defaultdict, deque

__all__ = ["adder_bits", "adder_levels", "ADDERS"]

#: cells that become a carry chain in synthesis: one adder level each
ADDERS = frozenset({"$add", "$sub", "$neg"})
#: cells that register their inputs: no combinational path through them
_REGISTERS = frozenset({"$dff", "$adff", "$dffe", "$adffe", "$sdff", "$sdffe", "$sdffce", "$aldff", "$dffsr",
                        "$memrd", "$memwr", "$mem", "$mem_v2", "$memrd_v2", "$memwr_v2"})
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


def adder_levels(text: str) -> int:
    """The most :data:`ADDERS` on one combinational path of any module of ``text``.

    Every module is a graph of wires; a cell joins each of its input wires to each of its output
    wires, with weight 1 for an adder and 0 otherwise, and a register joins none. The longest path is
    found in topological order; wires on a combinational loop (which a valid design has only as a
    false path through multiplexers) are left out.
    """
    best = 0
    for edges in _modules(text):
        best = max(best, _longest(edges))
    return best


def _modules(text: str) -> list[dict[str, list[tuple[str, int]]]]:
    """Per module: destination wire → [(source wire, weight)]."""
    mods: list[dict] = []
    edges: dict = defaultdict(list)
    cell, ins, outs = None, [], []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        head = words[0]
        if head == "module":
            edges = defaultdict(list)
            mods.append(edges)
        elif head == "cell":
            cell, ins, outs = words[1], [], []
        elif head == "connect" and cell is not None:
            (outs if words[1] in _OUTPUTS else ins).extend(_WIRE.findall(" ".join(words[2:])))
        elif head in ("connect", "assign"):        # module connection, or a process' assignment
            for dst in _WIRE.findall(words[1])[:1]:
                edges[dst].extend((src, 0) for src in _WIRE.findall(" ".join(words[2:])))
        elif head == "end" and cell is not None:
            if cell not in _REGISTERS and cell.startswith("$"):
                weight = int(cell in ADDERS)
                for dst in outs:
                    edges[dst].extend((src, weight) for src in ins)
            cell = None
    return mods


def _longest(edges: dict[str, list[tuple[str, int]]]) -> int:
    succ: dict[str, list[tuple[str, int]]] = defaultdict(list)
    indeg: dict[str, int] = defaultdict(int)
    for dst, srcs in edges.items():
        for src, w in srcs:
            succ[src].append((dst, w))
            indeg[dst] += 1
            indeg.setdefault(src, 0)
    dist = dict.fromkeys(indeg, 0)
    queue = deque(n for n, d in indeg.items() if d == 0)
    while queue:
        n = queue.popleft()
        for dst, w in succ[n]:
            dist[dst] = max(dist[dst], dist[n] + w)
            indeg[dst] -= 1
            if indeg[dst] == 0:
                queue.append(dst)
    return max((d for n, d in dist.items() if indeg[n] == 0), default=0)
