"""The FPGA backend: fixed-point programs on a sequenced datapath, in Amaranth HDL.

    from circuitgrad.backends import fpga
    design = fpga.compile(step, dtype=cg.fixed(16, 8))     # predict or training step
    outputs, cycles = fpga.simulate(design, params, x, y)     # bit-exact with the interpreter

See ``docs/FPGA.md``. Built:
* the microcode compiler (:mod:`.isa`, :mod:`.rules`, :mod:`.microcode`), covering every primitive of a
  training step: MLPs, GPTs (softmax or spherical attention) and CNNs; the micro-op kinds and their facts
  (unit, operands, latency) in :mod:`.kinds`;
* a sequencer that runs every micro-op kind (:mod:`.sequencer`, :mod:`.units`): softmax, division, square
  root, log, exp of either sign, argmax;
* a cycle model that matches simulation exactly.

* YoWASP synthesis (:mod:`.synth`), ``lib.stream`` interfaces (:mod:`.accel`),
  and on-chip parameter write-back for training (:func:`train`);
* ``macs`` lanes, each computing output elements of its own (``timing.lane_plan``);
* :func:`unroll`: predict as a pipeline with the weights as constants (:mod:`.unrolled`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuitgrad import arguments
from circuitgrad.compile import CompiledModel, compile_model
from circuitgrad.progress import Counter
from circuitgrad.types import Fixed, fixed

from .extra import MissingExtra, require_amaranth
from .isa import spram_cells
from .kinds import FACTS, Kind
from .microcode import FPGA_RULES, UNSUPPORTED, Microcode, compile_program, execute
from .timing import cycles


def __getattr__(name: str):
    """``Sequencer`` needs Amaranth: imported on first use, with a clear error without it."""
    if name == "Sequencer":
        return _sequencer("fpga.Sequencer").Sequencer
    raise AttributeError(name)


def installed() -> str:
    """What ``circuitgrad info`` reports: Amaranth's version and the YoWASP tools found, or what to install."""
    from .extra import INSTALL, synthesis_tools, tool
    try:
        import amaranth
    except ImportError:
        return f"no Amaranth (fpga simulate and synth need it: {INSTALL})"
    names = ("yosys", *synthesis_tools("ice40")[1:], *synthesis_tools("ecp5")[1:])
    have = [f"yowasp-{n}" for n in names if tool(n) is not None]
    lost = [f"yowasp-{n}" for n in names if f"yowasp-{n}" not in have]
    missing = f"; not found: {', '.join(lost)} (fpga synth needs them: {INSTALL})" if lost else ""
    return f"Amaranth {amaranth.__version__}" + (f", {', '.join(have)}" if have else "") + missing


def _sequencer(what: str):
    """The Amaranth sequencer module (:mod:`.sequencer`); :class:`~.extra.MissingExtra` naming ``what`` without
    Amaranth."""
    require_amaranth(what)
    from . import sequencer
    return sequencer

__all__ = ["FPGA_RULES", "UNSUPPORTED", "Design", "UnrolledDesign", "compile", "unroll", "simulate", "train", "Sequencer",
           "cycles", "Microcode", "compile_program", "execute", "Kind", "FACTS", "MissingExtra", "installed"]


@dataclass
class Design:
    """A compiled function of a model, ready to simulate or elaborate."""
    model: CompiledModel
    function: str
    microcode: Microcode
    macs: int = 1
    read_ports: int = 2
    uses_dsp = True                     # multipliers map to DSP blocks

    @property
    def cycles(self) -> int:
        """Predicted cycles per call (exact for the current sequencer)."""
        return cycles(self.microcode, self.read_ports, self.macs)

    def component(self, bank_words: int | None = None, cells: str | None = None):
        """The Amaranth :class:`~.sequencer.Sequencer` of this design (``bank_words``: words per block RAM of the
        target; ``None`` keeps the memory in one bank, as the simulation does; ``cells``: the device family whose
        memory and DSP primitives synthesis instantiates, ``None`` for the models the simulation runs)."""
        return _sequencer("design.component()").Sequencer(self.microcode, self.read_ports, self.macs, bank_words,
                                                           cells)

    def top(self, bank_words: int | None = None, cells: str | None = None):
        """The sequencer behind the serial pins that synthesis builds (:class:`~.synth.Top`)."""
        _sequencer("design.top()")
        from .synth import Top
        return Top(self.component(bank_words, cells))

    def serial_top(self, divisor: int, bank_words: int | None = None, cells: str | None = None):
        """The sequencer behind the framed UART protocol at ``divisor`` clock cycles per bit
        (:class:`~.link.SerialTop`: what a board's bitstream holds, and :class:`~.board.Board` drives)."""
        _sequencer("design.serial_top()")
        from .link import SerialTop
        return SerialTop(self.component(bank_words, cells), divisor)


@dataclass
class UnrolledDesign:
    """``predict`` unrolled into a pipeline with the parameters built in (:mod:`.unrolled`)."""
    model: CompiledModel
    microcode: Microcode
    consts: dict[int, int]
    function: str = "predict"
    uses_dsp = False                    # constant multiplies go to LUTs

    @property
    def cycles(self) -> int:
        """Cycles per call at full throughput: a new batch enters every cycle."""
        return 1

    @property
    def latency(self) -> int:
        """Cycles from a batch entering to its result leaving: one register per micro-op, plus the input."""
        return len(self.microcode.ops) + 1

    def component(self):
        _sequencer("design.component()")
        from .unrolled import Unrolled
        return Unrolled(self.microcode, self.consts)

    def top(self, bank_words: int | None = None, cells: str | None = None):
        """The pipeline behind the serial pins (it has no memory or lanes: the other arguments are ignored)."""
        _sequencer("design.top()")
        from .unrolled import UnrolledTop
        return UnrolledTop(self.component())


def unroll(model: CompiledModel, params, dtype: Fixed | None = None) -> UnrolledDesign:
    """``model``'s ``predict`` as a fully unrolled pipeline with ``params`` built in as constants.

    Every weight multiply becomes a constant multiply in LUTs, and a new batch
    enters every cycle. This suits tiny layers only, and the design must be
    rebuilt when the weights change; the sequencer (:func:`compile`) is the
    general design. Operations without an unrolled unit (softmax's ``max``,
    ``exp`` and ``divf``) are refused here, by name. Integer ``params`` are
    taken as raw values of ``dtype`` (as :func:`simulate` does), floats are
    quantized.
    """
    require_amaranth("fpga.unroll")
    dtype = dtype or (model.dtype if isinstance(model.dtype, Fixed) else fixed(16, 8))
    fx = model if model.dtype == dtype else compile_model(model.model, model.loss_fn, model.optimizer, dtype)
    mc = compile_program(fx.fn("predict").program, dtype, write_back=0)
    from .unrolled import check_unrollable
    check_unrollable(mc)
    consts = {}
    for view, name in zip(mc.inputs[:-1], fx.param_names, strict=True):
        v = np.asarray(params[name])
        raw = v if np.issubdtype(v.dtype, np.integer) else fx.cast(v, name)     # raw fixed point, or floats
        consts.update(zip((int(a) for a in view.addresses().reshape(-1)), (int(v) for v in np.asarray(raw).reshape(-1))))
    return UnrolledDesign(fx, mc, consts)


def compile(model: CompiledModel, dtype: Fixed | None = None, macs: int = 1, function: str = "step",
            read_ports: int = 2, on_chip: bool = True, spram: int = 0) -> Design:
    """The FPGA design of ``model``'s ``step`` (default) or ``predict``.

    ``read_ports=1`` halves the block RAM (iCE40 duplicates a memory per read
    port) at the cost of two cycles per two-operand element. With
    ``on_chip=True`` (default), a training step writes the updated
    parameters and optimizer state back into their on-chip memory, so
    training continues with new batches only (:func:`train`). ``spram``: the
    single-port RAM blocks (16K × 16 bits each; the iCE40 UP5K has 4) the
    memory plan may place tensors in besides block RAM; it needs ``macs=1``.
    """
    if spram < 0 or (spram and macs > 1):
        raise ValueError(f"fpga.compile: spram must be ≥ 0, and SPRAM needs macs=1 (got spram={spram}, macs={macs})")
    if macs < 1 or (macs > 1 and read_ports != 2):
        raise ValueError(f"fpga.compile: macs must be ≥ 1, and macs > 1 needs read_ports=2 "
                         f"(got macs={macs}, read_ports={read_ports})")
    dtype = dtype or (model.dtype if isinstance(model.dtype, Fixed) else fixed(16, 8))
    fx = model if model.dtype == dtype else compile_model(model.model, model.loss_fn, model.optimizer, dtype)
    n_state = len(fx.param_names) + len(fx.state_names) if function == "step" and on_chip else 0
    blocks = spram // spram_cells(dtype.width)                  # a wider word takes blocks side by side
    mc = compile_program(fx.fn(function).program, dtype, write_back=n_state, spram=blocks)
    return Design(fx, function, mc, macs, read_ports)


def simulate(design: Design, params, x, y=None, check_collisions: bool = False,
             progress: Counter | None = None) -> tuple[dict[str, np.ndarray], int]:
    """Run the design in Amaranth's simulator: ``(outputs by name, cycles)``.

    ``check_collisions`` also fails if a block-RAM word is ever read in the cycle it is written
    (the synthesized memories leave that case undefined; see ``docs/FPGA.md``). ``progress``: a bar
    (``update(n)``: tqdm, :func:`circuitgrad.progress.progress`) that counts the simulated cycles, of which
    there are ``design.cycles``.
    """
    _sequencer("fpga.simulate")
    if isinstance(design, UnrolledDesign):
        from .sim import run_unrolled
        if params is not None:
            raise ValueError("an unrolled design has its parameters built in: pass params=None, or rebuild it "
                             "with fpga.unroll(model, params)")
        outs, n = run_unrolled(design, [design.model.cast(x, "input")])
        return {"predict": outs[0]}, n
    from .sim import simulate as _simulate
    fx, key = design.model, design.function
    names = fx.param_names + (fx.state_names if key == "step" else [])
    args = [np.asarray(params[n]) if np.issubdtype(np.asarray(params[n]).dtype, np.integer)
            else fx.cast(params[n], n) for n in names]
    args.append(arguments.inputs(x, fx.x_type, fx.dtype, fx.xp, key))      # the design's batch, exactly
    if key != "predict":
        args.append(fx._targets(y))
    outs, n = _simulate(design.microcode, args, read_ports=design.read_ports, macs=design.macs,
                        check_collisions=check_collisions, progress=progress)
    out_names = names if key == "step" else ([key] if key != "gradients" else fx.param_names)
    return dict(zip(out_names, outs)), n


def train(design: Design, params, batches, check_collisions: bool = False,
          progress: Counter | None = None) -> tuple[dict[str, np.ndarray], int]:
    """Train on the simulated FPGA: parameters are loaded once, then only batches go in.

    Returns the final parameters and optimizer state, read from on-chip
    memory, and the total number of cycles. ``check_collisions`` and ``progress`` (``design.cycles``
    per batch) as in :func:`simulate`.
    """
    _sequencer("fpga.train")
    from .sim import run_steps
    fx = design.model
    names = fx.param_names + fx.state_names
    init = [np.asarray(params[n]) if np.issubdtype(np.asarray(params[n]).dtype, np.integer)
            else fx.cast(params[n], n) for n in names]
    data = [(fx._x(x, "step"), fx._targets(y)) for x, y in batches]
    state, n = run_steps(design.microcode, init, data, read_ports=design.read_ports, macs=design.macs,
                         check_collisions=check_collisions, progress=progress)
    return dict(zip(names, state)), n
