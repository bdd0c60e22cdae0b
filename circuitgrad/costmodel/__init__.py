"""What a model costs on each target, before running it.

    c = cg.cost(step, target="gpu", device="h100")    # also "cpu", "fpga" (macs=, read_ports=), "zk"
    print(c)                                            # by definition (layer): FLOPs, bytes, time …
    c.flops, c.matmul_flops, c.bytes, c.seconds, c.constraints, c.cycles

Every figure comes from the program the target runs (the SSA program, the GPU's fused-kernel plan,
the FPGA's microcode, the ZK circuit), attributed to definitions through provenance
(:mod:`circuitgrad.provenance`); see ``docs/COST.md``. The CPU's model is :mod:`.cpu`; each other
target's lives with its backend (``circuitgrad.backends.<target>.cost``), found through
:data:`circuitgrad.targets.TARGETS`. :mod:`.report` holds the table every model fills.
"""
from __future__ import annotations

from typing import Any

from ..targets import TARGETS as _REGISTRY
from .report import Cost, Row, group, in_model_order, program_of, table, trace_order

__all__ = ["Cost", "Row", "cost", "TARGETS", "group", "program_of", "table"]

#: the targets :func:`cost` knows
TARGETS = tuple(_REGISTRY)


def cost(f: Any, target: str = "cpu", device: str | None = None, function: str = "step", depth: int = 2,
         recalibrate: bool = False, **options: Any) -> Cost:
    """The predicted cost of ``f`` (a compiled model's ``function``, or a diagram's forward map) on ``target``.

    * ``"cpu"``: FLOPs, bytes and a roofline time from a one-off calibration of this machine
      (``options``: ``calibration=`` a :class:`~circuitgrad.costmodel.cpu.Calibration`).
    * ``"gpu"``: the fused-kernel plan's HBM traffic, tensor-core and CUDA-core FLOPs and a
      per-kernel roofline time on ``device`` (``"h100"``, ``"h200"``; ``tf32=True`` puts float32
      products on tensor cores, ``graph=True`` drops the host's issue costs of a CUDA-graph step), and the
      step's peak device memory (``detail["peak_bytes"]``).
    * ``"fpga"``: the sequencer's exact cycles and memory words (``macs=``, ``read_ports=``,
      ``dtype=``; needs a compiled model).
    * ``"zk"``: the circuit's exact constraints and lookups by gadget kind, and a calibrated time of
      the native Ligero prover (``dtype=``, ``field=``, ``range_checks=``; needs a compiled model).

    Rows group the instructions by the first ``depth`` segments of their definition path, in the model's order
    (where each definition's operations first appear in the trace: the layers, the loss, the optimizer).
    ``recalibrate=True`` measures this machine's calibration again first (``cpu``, ``zk``; see
    :mod:`circuitgrad.costmodel.calibration` for when it is measured again by itself).
    """
    if target not in TARGETS:
        raise ValueError(f"cost: target must be one of {', '.join(TARGETS)}, got {target!r}")
    model = _REGISTRY[target].module("cost")
    if recalibrate:
        if not hasattr(model, "recalibrate"):
            raise ValueError(f"cost: target {target!r} has no calibration of this machine to measure again "
                             f"(the cpu and zk targets have)")
        unused = ("prover_time=False leaves the prover's time model out" if options.get("prover_time") is False else
                  "calibration= gives the calibration to use" if options.get("calibration") is not None else None)
        if unused:
            raise ValueError(f"cost: recalibrate=True measures a calibration this call would not use: {unused}")
        model.recalibrate()
    c = model.estimate(f, device=device, function=function, depth=depth, **options)
    c.rows = in_model_order(c.rows, trace_order(f, function), depth)
    return c
