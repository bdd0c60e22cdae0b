"""FPGA: the sequencer's cycles (its exact cycle model, micro-op by micro-op) and memory words.

The program is compiled to the sequencer's microcode by the FPGA backend itself; every micro-op
names the instruction it implements (``MatMul#12``), hence its definition, and the cycle model
(:func:`circuitgrad.backends.fpga.timing.op_cycles`) is the one the simulation tests check.
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["estimate"]

_SOURCE = re.compile(r"^[^#]*#(\d+)")


def estimate(f: Any, device: str | None = None, function: str = "step", depth: int = 2, macs: int = 1,
             read_ports: int = 2, dtype=None, on_chip: bool = True):
    from ..compile import CompiledModel
    from . import Cost, table
    if not isinstance(f, CompiledModel):
        raise TypeError(f"cost: the fpga target needs a compiled model (cg.compile_model), got {type(f).__name__}")
    from ..backends import fpga
    from ..backends.fpga.timing import op_cycles
    d = fpga.compile(f, dtype=dtype, macs=macs, function=function, read_ports=read_ports, on_chip=on_chip)
    mc = d.microcode
    paths = [a.path for a in d.model.fn(function).program.instrs]
    lines = [("(start and done)", {"micro_ops": 0, "cycles": 3 if mc.ops else 2})]
    for u, c in zip(mc.ops, op_cycles(mc, read_ports, macs)):
        m = _SOURCE.match(u.source)
        lines.append((paths[int(m.group(1))] if m else "(write-backs)", {"micro_ops": 1, "cycles": int(c)}))
    rows, total = table(lines, depth)
    total.values["words"] = mc.depth
    assert total.values["cycles"] == d.cycles, "the per-micro-op cycles must add up to the design's"
    notes = [f"{len(mc.ops)} micro-ops, {mc.depth} memory words of {mc.dtype} ({mc.dtype.width}-bit), "
             f"macs={macs}, read_ports={read_ports}"]
    return Cost("fpga", device or "sequencer", function, rows, total, notes, {"design": d})
