"""FPGA: the sequencer's cycles (its exact cycle model, micro-op by micro-op), memory words, and an
estimate of LUT4s, DSP blocks and block RAMs.

The program is compiled to the sequencer's microcode by the FPGA backend itself; every micro-op
names the instruction it implements (``MatMul#12``), hence its definition, and the cycle model
(:func:`circuitgrad.backends.fpga.timing.op_cycles`) is the one the simulation tests check.

Resources (per device family, ``device="ecp5-85k"`` or ``"ice40-up5k"``):

* block RAMs: the sequencer's memory copies (one per read port with one lane; with several, two for each
  of the ``interleave(macs)`` banks of every P-th word) times the blocks one copy needs (``⌈depth / block
  depth⌉``: 256 16-bit words on iCE40, 1024 on ECP5); a memory (with lanes: a bank) small enough goes to LUT RAM instead, as yosys maps it
  (:func:`.devices.in_lutram`: at most 80 16-bit words on ECP5);
* DSP blocks: each lane's multiplier and three more for the pipelined exp unit, which lane 0 alone
  builds (counted from synthesis, as yosys maps them);
* LUT4s: a linear model in the design's features (:func:`features`: micro-ops × address bits, lanes,
  one read port, the units the microcode uses times the lanes, the memory blocks), with non-negative coefficients
  fitted to yosys synthesis of 18 training designs at 1, 2 and 4 lanes and with one read port
  (``python bench/fpga_estimate.py --fit``
  regenerates :mod:`.cost_fit`; the bench's own designs, which the fit never saw, check it).

The unrolled ``predict`` (``unroll=params``, :func:`circuitgrad.backends.fpga.unroll`) has no memory
and no DSP block: its LUT4s are a linear model in the bits of the adders and of the subtractors that
its generated netlist declares (:func:`unrolled_features`), fitted the same way to 22 unrolled MLPs
with other shapes and weights than the bench's. Its cycles are its latency: one pipeline stage per
micro-op and the input register; a new batch enters every cycle.

Fmax (both designs, per family): a clock period linear in a few features (:func:`timing_features`,
:func:`unrolled_timing_features`), fitted to nextpnr's Fmax on the same training designs, placed and
routed.
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

from circuitgrad.compile import CompiledModel
from circuitgrad.costmodel.report import Cost, table

from . import compile as compile_design
from . import unroll as unroll_design
from .devices import TARGETS as _TARGETS, in_lutram
from .cost_fit import LUT4, PERIOD_NS, UNROLLED_LUT4, UNROLLED_PERIOD_NS
from .config import rom_blocks
from .extra import require_amaranth
from .isa import interleave, spram_cells
from .kinds import Kind, Unit, dsp_blocks, facts, lane_zero
from .netlist import adder_bits, sum_operands
from .timing import op_cycles

__all__ = ["estimate", "family", "fit", "DEVICES", "features", "resources", "unrolled_features", "timing_features", "fmax",
           "unrolled_timing_features", "unrolled_fmax", "FEATURES", "UNROLLED_FEATURES", "TIMING_FEATURES", "UNROLLED_TIMING_FEATURES"]

#: the LUT model's features, in order (see :func:`features`)
FEATURES = ("const", "rom", "lanes", "one_port", "sequential", "exp", "sigmoid", "tanh", "log", "compare", "lutram",
            "blocks", "crossbar")
#: the unrolled design's LUT model's features (see :func:`unrolled_features`)
UNROLLED_FEATURES = ("add_bits", "sub_bits")
#: the clock model's features (see :func:`timing_features`): the period is linear in them
TIMING_FEATURES = ("const", "banks", "wide", "tree", "one_port", "kluts")
#: … and the unrolled design's (the most operands of one sum, and its adder and subtractor bits)
UNROLLED_TIMING_FEATURES = ("const", "operands", "kbits")
#: block RAM geometry per family: 16-bit words per block
_BLOCKS = {"ecp5": 1024, "ice40": 256}
#: the share of the decoder's LUT tables left when the operands' bases are in block RAM (``config.ROM_FIELDS``):
#: measured with yosys on the UP5K designs of ``bench/fpga.py`` (0.32–0.45; the estimate is within 10% of all three)
ROM_KEPT = 0.4
#: the device each family's clock is estimated on
_DEVICES = {"ecp5": "ecp5-85k", "ice40": "ice40-up5k"}
#: the devices ``estimate`` takes (``device=``, ``circuitgrad cost --target fpga --device``): the capacities of
#: :data:`.devices.TARGETS`, against which it says whether the design fits
DEVICES = tuple(sorted(_TARGETS))


def family(device: str) -> str:
    fam = device.split("-", 1)[0].lower()
    if fam not in _BLOCKS:
        raise ValueError(f"cost: unknown FPGA device {device!r}; choose an ecp5-… or ice40-… target "
                         f"(ecp5-85k, ice40-up5k)")
    return fam


def check_device(device: str) -> str:
    """``device`` in lower case, if :data:`DEVICES` has it (``ValueError`` naming them otherwise)."""
    family(device)
    if device.lower() not in _TARGETS:
        raise ValueError(f"cost: unknown FPGA device {device!r}; choose one of {', '.join(DEVICES)}")
    return device.lower()


def fit(res: dict[str, int], device: str) -> tuple[bool, str]:
    """Whether estimated resources ``res`` (``lut4``, ``dsp``, ``bram``) fit ``device``, and a line that says
    so: each resource against the device's capacity, or what does not fit and by how much."""
    t = _TARGETS[device]
    have = [(res["lut4"], t.lut4, "LUT4s"), (res["dsp"], t.dsps, "DSP blocks"), (res["bram"], t.bram_blocks, "block RAMs")]
    if res.get("spram"):
        have.append((res["spram"], t.spram_blocks, "SPRAM blocks"))
    over = [f"{n:,} {what} (the device has {cap:,})" for n, cap, what in have if n > cap]
    if over:
        return False, f"does not fit the {t.name}: needs " + " and ".join(over)
    return True, f"fits the {t.name}: " + ", ".join(f"{n:,} of {cap:,} {what} ({n / cap:.0%})" for n, cap, what in have)


def brams(mc, device: str, macs: int = 1, read_ports: int = 2) -> int:
    """Block RAMs of the sequencer's memory on ``device`` (see the module docstring)."""
    fam = family(device)
    per = _BLOCKS[fam]
    rom = rom_blocks(len(mc.ops), mc.depth) if mc.spram_blocks else 0     # the operands' bases (config.ROM_FIELDS)
    P = interleave(macs) if macs > 1 else 1     # with lanes, two read ports for each bank of every P-th word
    words = -(-max(mc.ram_words, 1) // P)
    if in_lutram(fam, words, mc.dtype.width):
        return rom
    return (read_ports if macs == 1 else 2) * P * math.ceil(words * mc.dtype.width / (16 * per)) + rom


def sprams(mc) -> int:
    """SPRAM blocks (``SB_SPRAM256KA``) of the sequencer's memory: ``⌈width / 16⌉`` per block of the plan."""
    return mc.spram_blocks * spram_cells(mc.dtype.width)


def spram_for(mc, device: str, macs: int = 1, read_ports: int = 2) -> int:
    """The SPRAM blocks to plan ``mc``'s memory with on ``device``: all of the device's when its block RAM
    does not hold the memory and the design has one lane (SPRAM has one port), else none."""
    have = _TARGETS[check_device(device)].spram_blocks
    return have if have and macs == 1 and brams(mc, device, macs, read_ports) > _TARGETS[device].bram_blocks else 0


def planned(model: CompiledModel, device: str, spram: int | None = None, **options):
    """``fpga.compile(model, **options)`` as ``synth`` and this estimate plan it for ``device``: with ``spram``
    blocks, or (``None``) with :func:`spram_for`'s when block RAM alone does not hold the memory."""
    d = compile_design(model, spram=spram or 0, **options)
    if spram is None and (blocks := spram_for(d.microcode, device, d.macs, d.read_ports)):
        d = compile_design(model, spram=blocks, **options)
    return d


def dsps(mc, macs: int = 1) -> int:
    """DSP blocks: each lane's multiplier and those of the units ``mc`` uses (the exp unit's three, on lane 0)."""
    return dsp_blocks({u.kind for u in mc.ops}, macs)


def features(mc, device: str, macs: int = 1, read_ports: int = 2) -> list[float]:
    """The LUT model's inputs for microcode ``mc`` on ``device``, in :data:`FEATURES` order."""
    kinds = {u.kind for u in mc.ops}
    rows = [facts(k) for k in kinds]
    b = brams(mc, device, macs, read_ports)
    kept = ROM_KEPT if mc.spram_blocks else 1.0             # with SPRAM the bases' tables are block RAM
    # each unit is built once per lane, or on lane 0 alone where it takes DSP blocks (kinds.lane_zero)
    units = [(any(f.sequential for f in rows), Kind.DIVF), (Kind.EXP in kinds, Kind.EXP),
             (Kind.SIGMOID in kinds, Kind.SIGMOID), (Kind.TANH in kinds, Kind.TANH), (Kind.LOG in kinds, Kind.LOG),
             (any(f.unit is Unit.MAX for f in rows), Kind.MAX)]
    return [1.0, len(mc.ops) * math.log2(max(mc.depth, 2)) * kept, macs - 1.0, float(read_ports == 1),
            *[float(used) * (1 if lane_zero(k) else macs) for used, k in units], float(b == 0), float(b),
            crossbar(mc, macs)]


def crossbar(mc, macs: int) -> float:
    """The lanes' crossbars, in thousands of bit-inputs: each of ``P`` banks chooses among ``macs`` lanes for two reads
    (an address) and a write (an address and a word), and each lane among ``P`` banks for two words (0 at one lane)."""
    if macs == 1:
        return 0.0
    P, aw, W = interleave(macs), max(1, (max(1, mc.depth) - 1).bit_length()), mc.dtype.width
    return macs * P * (3 * aw + 3 * W) / 1000


def resources(mc, device: str, macs: int = 1, read_ports: int = 2) -> dict[str, int]:
    """Estimated ``lut4``, ``dsp`` and ``bram`` of the sequencer running ``mc`` on ``device``."""
    coeffs = LUT4[family(device)]
    x = features(mc, device, macs, read_ports)
    lut = sum(coeffs.get(k, 0.0) * v for k, v in zip(FEATURES, x))
    return {"lut4": int(round(lut)), "dsp": dsps(mc, macs), "bram": brams(mc, device, macs, read_ports),
            "spram": sprams(mc)}


def timing_features(mc, device: str, macs: int = 1, read_ports: int = 2) -> list[float]:
    """The clock model's inputs, in :data:`TIMING_FEATURES` order: 1, log2 of the block RAMs of one copy of
    the memory (the banks its read multiplexer chooses among, and how far apart they lie), whether there
    are more than 16 of them (a bank select of five bits or more: one more LUT level in the multiplexer; an
    iCE40 memory of 17–20 banks ran 20% slower than one of 14; with lanes, of one of the interleaved banks), the
    levels of the lanes' crossbar (``⌈log2 macs⌉``), one read port, and the estimated LUT4s in thousands (how far
    the logic spreads)."""
    per = _BLOCKS[family(device)]
    words = -(-max(mc.ram_words, 1) // interleave(macs))
    banks = max(1, math.ceil(words * mc.dtype.width / (16 * per)))
    return [1.0, math.log2(banks), float(banks > 16), float(math.ceil(math.log2(macs))), float(read_ports == 1),
            resources(mc, device, macs, read_ports)["lut4"] / 1000]


def fmax(mc, device: str, macs: int = 1, read_ports: int = 2) -> float:
    """Estimated Fmax (MHz) of the sequencer running ``mc`` on ``device``: a clock period linear in
    :func:`timing_features`, fitted to nextpnr on designs that are not the benchmark's (``cost_fit``)."""
    coeffs = PERIOD_NS[family(device)]
    period = sum(coeffs.get(k, 0.0) * v for k, v in zip(TIMING_FEATURES, timing_features(mc, device, macs, read_ports)))
    return 1000.0 / period


def rtlil_text(design, log: Callable[[str], object] = print, target: str | None = None) -> str:
    """:func:`.synth.rtlil_text`, imported when first called: elaborating needs Amaranth, the sequencer's
    estimate does not."""
    from .synth import rtlil_text as elaborate
    return elaborate(design, log, target)


def _rtlil(design, text: str | None = None) -> str:
    """``text``, or the design elaborated to RTLIL when it is not given."""
    return text if text is not None else rtlil_text(design, log=lambda *a: None)


def unrolled_timing_features(design, text: str | None = None) -> list[float]:
    """The unrolled clock model's inputs, in :data:`UNROLLED_TIMING_FEATURES` order: 1, log2 of one more
    than the most operands one sum adds (a whole dot product is one pipeline stage, and yosys maps the sum
    of its constant multiplies' shifted terms to one carry-save tree, whose depth grows with this; the one
    more keeps a design without adders, all of its weights zero, at a finite clock), and the adder and
    subtractor bits in thousands (how far the design spreads over the device).

    Both are read from the design's RTLIL (:mod:`.netlist`): ``text`` when given (one elaboration can serve
    every estimate of a design), else the design is elaborated."""
    text = _rtlil(design, text)
    return [1.0, math.log2(sum_operands(text) + 1), sum(adder_bits(text)) / 1000]


def unrolled_fmax(design, device: str, text: str | None = None) -> float:
    """Estimated Fmax (MHz) of an unrolled design: a period linear in :func:`unrolled_timing_features`."""
    coeffs = UNROLLED_PERIOD_NS[family(device)]
    x = unrolled_timing_features(design, text)
    return 1000.0 / sum(coeffs.get(k, 0.0) * v for k, v in zip(UNROLLED_TIMING_FEATURES, x))


def unrolled_features(design, text: str | None = None) -> list[float]:
    """The unrolled LUT model's inputs, in :data:`UNROLLED_FEATURES` order.

    The sums of the output widths of the ``$add`` and of the ``$sub`` cells in the design's RTLIL, as
    Amaranth emits it. The widths count bits that synthesis later trims (shifted-in zeros, constant
    operands), which the fitted coefficients absorb; negations and constant shifts are wiring or fold
    into the adders and are left out. ``text``: the design's RTLIL, if already elaborated.
    """
    return [float(b) for b in adder_bits(_rtlil(design, text))]


def unrolled_resources(design, device: str, text: str | None = None) -> dict[str, int]:
    """Estimated ``lut4``, ``dsp`` and ``bram`` of an unrolled design on ``device``: LUTs only."""
    coeffs = UNROLLED_LUT4[family(device)]
    lut = sum(coeffs.get(k, 0.0) * v for k, v in zip(UNROLLED_FEATURES, unrolled_features(design, text)))
    return {"lut4": int(round(lut)), "dsp": 0, "bram": 0}


_SOURCE = re.compile(r"^[^#]*#(\d+)")


def estimate(f: Any, device: str | None = None, function: str = "step", depth: int = 2, macs: int = 1,
             read_ports: int = 2, dtype=None, on_chip: bool = True, unroll: Any = None, spram: int | None = None):
    """The FPGA design's cost table: cycles and micro-ops by definition, and the resources, Fmax and fit
    (``detail["fits"]``, and the line ``detail["fit"]`` among the notes) on ``device`` (:data:`DEVICES`,
    default ``"ecp5-85k"``). ``spram``: the SPRAM blocks the memory plan may use (``None``: :func:`spram_for`)."""
    if not isinstance(f, CompiledModel):
        raise TypeError(f"cost: the fpga target needs a compiled model (cg.compile_model), got {type(f).__name__}")
    device = check_device(device or "ecp5-85k")
    if unroll is not None:
        if function != "predict":
            raise ValueError(f"cost: the unrolled FPGA design runs predict only; pass function='predict' "
                             f"(got {function!r})")
        require_amaranth("cg.cost(..., 'fpga', unroll=params)")
        d = unroll_design(f, unroll, dtype=dtype)
        cycles = [1] * len(d.microcode.ops)          # one pipeline stage per micro-op
        head = ("(input register)", {"micro_ops": 0, "cycles": 1})
    else:
        d = planned(f, device, spram, dtype=dtype, macs=macs, function=function, read_ports=read_ports,
                    on_chip=on_chip)
        cycles = op_cycles(d.microcode, read_ports, macs)
        head = ("(start, the last range check, done)", {"micro_ops": 0, "cycles": 4 if d.microcode.ops else 2})
    mc = d.microcode
    paths = [a.path for a in d.model.fn(function).program.instrs]
    lines = [head]
    for u, c in zip(mc.ops, cycles):
        m = _SOURCE.match(u.source)
        lines.append((paths[int(m.group(1))] if m else "(write-backs)", {"micro_ops": 1, "cycles": int(c)}))
    rows, total = table(lines, depth)
    if unroll is not None:
        assert total.values["cycles"] == d.latency, "the stages must add up to the pipeline's latency"
        text = _rtlil(d)                                   # one elaboration for the LUT and clock estimates
        res = unrolled_resources(d, device, text)
        clocks = {fam: unrolled_fmax(d, dev, text) for fam, dev in _DEVICES.items()}
        shape = (f"{len(mc.ops)} micro-ops unrolled into a {d.latency}-stage pipeline with the parameters built in; "
                 f"one batch per cycle, {d.latency} cycles of latency")
    else:
        total.values["words"] = mc.words
        assert total.values["cycles"] == d.cycles, "the per-micro-op cycles must add up to the design's"
        res = resources(mc, device, macs, read_ports)
        clocks = {fam: fmax(mc, dev, macs, read_ports) for fam, dev in _DEVICES.items()}
        where = (f" ({mc.ram_words} in block RAM, {mc.spram_words} in {mc.spram_blocks} SPRAM blocks)"
                 if mc.spram_blocks else "")
        shape = (f"{len(mc.ops)} micro-ops, {mc.words} memory words{where} of {mc.dtype} ({mc.dtype.width}-bit), "
                 f"macs={macs}, read_ports={read_ports}")
    res["fmax_mhz"] = round(clocks[family(device)], 1)
    total.values.update({k: v for k, v in res.items() if k != "fmax_mhz"})
    fits, verdict = fit(res, device)
    sp = f", {res['spram']} SPRAM" if res.get("spram") else ""
    notes = [shape, f"{device} estimate: {res['lut4']} LUT4, {res['dsp']} DSP, {res['bram']} block RAM{sp} "
                    f"(a model fitted to yosys synthesis: see docs/COST.md)", verdict,
             "Fmax estimate: " + ", ".join(f"{clocks[fam]:.0f} MHz on {fam}" for fam in sorted(clocks))
             + " (a clock model fitted to nextpnr: see docs/COST.md)"]
    return Cost("fpga", device, function, rows, total, notes, {"design": d, "resources": res, "fits": fits,
                                                              "fit": verdict})
