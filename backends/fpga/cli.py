"""``circuitgrad fpga synth|simulate|train``: hardware for an example's model.

    circuitgrad fpga synth examples/iris.py --target ice40-up5k [--function step] [--out out/fpga/]
    circuitgrad fpga synth examples/iris.py --board icebreaker        # the bitstream a board needs (UART)
    circuitgrad fpga simulate examples/iris.py --steps 5
    circuitgrad fpga train examples/iris.py --board icebreaker --port /dev/ttyUSB1 --steps 100
    circuitgrad fpga train examples/iris.py --port sim --steps 2     # the same bytes to the simulated board

The model file (``circuitgrad/modelfile.py``) defines ``model(**options)``: the model, loss, optimizer,
dtype and data that the script trains; ``--batch``, ``--lr`` and ``--option KEY=VALUE`` reach it.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from circuitgrad import modelfile
from circuitgrad.command import UsageError, add_model_options
from circuitgrad.progress import progress
from circuitgrad.types import fixed

from .extra import MissingExtra, require_amaranth, require_tools, synthesis_tools

__all__ = ["add_parser"]


def _check_design_flags(a) -> None:
    """The flags that shape the design (usage errors)."""
    if a.macs < 1:
        raise UsageError(f"--macs must be at least 1, got {a.macs}")
    if a.macs > 1 and getattr(a, "read_ports", 2) != 2:
        raise UsageError(f"--macs {a.macs} needs --read-ports 2 (each lane reads both operands at once)")
    if a.spram is not None and (a.spram < 0 or (a.spram and a.macs > 1)):
        raise UsageError(f"--spram must be at least 0, and SPRAM needs --macs 1 (one port a block), got --spram "
                         f"{a.spram} --macs {a.macs}")


def _design(a, target: str | None = None):
    """The model file's design; with ``target``, and no ``--spram``, planned with the target's SPRAM when its block
    RAM alone does not hold the memory (:func:`.cost.planned`)."""
    from circuitgrad.command import load_model

    from . import compile as fpga_compile
    from .cost import planned
    _check_design_flags(a)
    try:
        spec, dtype = load_model(a, fixed(16, 8))
        step = spec.compile(dtype=dtype)
        shape = dict(function=a.function, macs=a.macs, read_ports=getattr(a, "read_ports", 2))
        design = planned(step, target, a.spram, **shape) if target else fpga_compile(step, **shape, spram=a.spram or 0)
    except (ValueError, TypeError, NotImplementedError, ArithmeticError) as e:
        raise SystemExit(f"circuitgrad fpga: {e}") from None
    return spec, step, design


def _words(mc) -> str:
    """``N memory words`` and, with SPRAM, where they are."""
    where = f" ({mc.ram_words} in block RAM, {mc.spram_words} in SPRAM)" if mc.spram_blocks else ""
    return f"{mc.words} memory words{where}"


def _synth(a) -> int:
    from .devices import BOARDS, TARGETS
    if a.seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {a.seeds}")
    if a.pnr_timeout is not None and not a.pnr_timeout > 0:
        raise UsageError(f"--pnr-timeout must be a positive number of minutes, got {a.pnr_timeout}")
    _check_design_flags(a)
    target = a.target or (BOARDS[a.board]["target"] if a.board else "ice40-up5k")
    if a.board and BOARDS[a.board]["target"] != target:
        raise UsageError(f"--board {a.board} carries an {BOARDS[a.board]['target']}: use --target "
                         f"{BOARDS[a.board]['target']} (or no --target), not --target {target}")
    try:                                # before compiling: a missing tool is said at once
        require_tools("circuitgrad fpga synth", synthesis_tools(TARGETS[target].family))
    except MissingExtra as e:
        raise SystemExit(str(e)) from None
    from .synth import DoesNotFit, TimedOut, synthesize
    t0 = time.perf_counter()
    print("[compile] …", flush=True)
    spec, step, design = _design(a, target)
    print(f"[compile] {design.function} of {step.model.name}: {len(design.microcode.ops)} micro-ops, "
          f"{_words(design.microcode)}, {design.cycles} cycles per call "
          f"({time.perf_counter() - t0:.2f} s)", flush=True)
    host = a.host or ("uart" if a.board else "pins")
    try:
        report = synthesize(design, target, a.out, log=lambda s: print(f"[build] {s}", flush=True), board=a.board,
                            seeds=a.seeds, host=host, baud=a.baud,
                            pnr_timeout=None if a.pnr_timeout is None else 60 * a.pnr_timeout)
    except TimedOut as e:
        raise SystemExit(f"circuitgrad fpga synth: {e}") from None
    except DoesNotFit as e:             # its suggestion as this command's flag (--read-ports 1), not the keyword
        raise SystemExit(f"circuitgrad fpga synth: {e.cli_message()}") from None
    print(report)
    print(f"report written to {os.path.join(a.out, 'report.json')}")
    return 0


def _batches(a, spec, step):
    """``(k, x, y)`` for the model file's first ``--steps`` batches, each checked (one line for a bad one)."""
    batches = modelfile.batches(spec, 0, a.script)
    for k in range(a.steps):
        try:
            x, y = modelfile.check_batch(step, next(batches), k, a.script)
        except modelfile.ModelFileError as e:
            raise SystemExit(f"circuitgrad fpga: {e}") from None
        yield k, x, y


def _same(hw: dict, sw: dict) -> bool:
    """The hardware's parameters and optimizer state equal the interpreter's, bit for bit."""
    return all(np.array_equal(hw[key], sw[key]) for key in sw)


def _simulate(a) -> int:
    from circuitgrad.fixedpoint import FixedPointOverflow

    from . import simulate
    if a.function != "step":
        raise UsageError("only --function step is simulated from the command line")
    if a.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {a.steps}")
    _check_design_flags(a)
    try:
        require_amaranth("circuitgrad fpga simulate")
    except MissingExtra as e:
        raise SystemExit(str(e)) from None
    spec, step, design = _design(a)
    hw = step.init_params(seed=0)
    sw = dict(hw)
    for k, x, y in _batches(a, spec, step):
        t0 = time.perf_counter()
        try:                            # the simulated cycles on stderr: a GPT's step takes a minute
            with progress(design.cycles, f"simulating step {k}", unit="cycle", file=sys.stderr) as bar:
                hw, n = simulate(design, hw, x, y, progress=bar)
        except FixedPointOverflow as e:
            raise SystemExit(f"circuitgrad fpga: {e}") from None
        sw = step.step(sw, x, y)
        exact = _same(hw, sw)
        print(f"step {k}: {n} cycles (model {design.cycles}), bit-exact with the interpreter: {exact} "
              f"({time.perf_counter() - t0:.1f} s simulated)")
        if not exact:
            return 1
    return 0


def _train(a) -> int:
    """Train on a board (or the simulated one) through the driver, checking each step against the interpreter."""
    from circuitgrad.fixedpoint import FixedPointOverflow

    from .board import Board, SimulatedLine, open_port
    from .devices import BOARDS
    from .protocol import ProtocolError
    if a.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {a.steps}")
    if a.function != "step":
        raise UsageError("fpga train runs --function step (the training step) on the board")
    if a.port != "sim" and a.board is None:
        raise UsageError("--port names a board's serial port: say which board with --board (or use --port sim)")
    _check_design_flags(a)
    try:
        require_amaranth("circuitgrad fpga train") if a.port == "sim" else None
        spec, step, design = _design(a, BOARDS[a.board]["target"] if a.board else None)
        line = SimulatedLine(design) if a.port == "sim" else open_port(a.port, a.baud)
    except MissingExtra as e:
        raise SystemExit(str(e)) from None
    except OSError as e:                # pyserial's SerialException is an OSError: no such port, no permission
        raise SystemExit(f"circuitgrad fpga train: cannot open {a.port}: {e}") from None
    board = Board(design, line)
    hw = sw = step.init_params(seed=0)
    where = "the simulated board" if a.port == "sim" else f"{a.board} on {a.port}"
    for k, x, y in _batches(a, spec, step):
        t0 = time.perf_counter()
        try:
            hw = board.step(hw, x, y)
        except (ProtocolError, FixedPointOverflow, OSError) as e:     # OSError: pyserial's, a board unplugged
            raise SystemExit(f"circuitgrad fpga train: step {k}: {e}") from None
        sw = step.step(sw, x, y)
        exact = _same(hw, sw)
        print(f"step {k}: {board.cycles} cycles on {where}, bit-exact with the interpreter: {exact} "
              f"({time.perf_counter() - t0:.2f} s)", flush=True)
        if not exact:
            return 1
    if a.save:
        np.savez(a.save, **hw)
        print(f"parameters written to {a.save}")
    return 0


def add_parser(sub) -> None:
    """Register ``fpga synth``, ``fpga simulate`` and ``fpga train`` under the ``circuitgrad`` command."""
    from .devices import BOARDS, HOSTS, TARGETS
    from .protocol import DEFAULT_BAUD
    fp = sub.add_parser("fpga", help="FPGA designs of training steps").add_subparsers(dest="fpga_cmd", required=True)
    for name, fn, helptext in (("synth", _synth, "synthesize, place and route with YoWASP"),
                               ("simulate", _simulate, "simulate training steps bit-exactly"),
                               ("train", _train, "train on a board over its USB serial port")):
        p = fp.add_parser(name, help=helptext)
        add_model_options(p)
        p.add_argument("--function", choices=["step", "predict"], default="step")
        p.add_argument("--macs", type=int, default=1)
        p.add_argument("--width", type=int, default=None, help="fixed-point width (default: the file's, else 16)")
        p.add_argument("--frac", type=int, default=None, help="fractional bits (default: the file's, else width/2)")
        p.add_argument("--spram", type=int, default=None,
                       help="single-port RAM blocks the memory may use (iCE40 UP5K: 4; default: the device's when "
                            "its block RAM alone does not hold the memory, else 0)")
        if name == "synth":
            p.add_argument("--target", choices=sorted(TARGETS), default=None,
                           help="device (default: the board's, else ice40-up5k)")
            p.add_argument("--out", default="out/fpga")
            p.add_argument("--board", choices=sorted(BOARDS), default=None,
                           help="constrain the pins to a board: its USB serial chip (--host uart, the default with a "
                                "board) or the pin port (iCEBreaker: PMOD 1A; ULX3S: GPIO J1)")
            p.add_argument("--host", choices=HOSTS, default=None,
                           help="host port: uart (the framed protocol of fpga train) or pins (default: uart with "
                                "--board, else pins)")
            p.add_argument("--baud", type=int, default=DEFAULT_BAUD, help=f"UART rate (default {DEFAULT_BAUD})")
            p.add_argument("--read-ports", type=int, choices=[1, 2], default=2, dest="read_ports")
            p.add_argument("--seeds", type=int, default=1,
                           help="place and route with nextpnr seeds 1..N and keep the median Fmax (default: one run)")
            p.add_argument("--pnr-timeout", type=float, default=None, dest="pnr_timeout", metavar="MINUTES",
                           help="stop a place-and-route run still routing after MINUTES and leave its seed out "
                                "(default: no limit)")
        elif name == "train":
            p.add_argument("--board", choices=sorted(BOARDS), default=None, help="the board the bitstream runs on")
            p.add_argument("--port", required=True,
                           help="its serial port (/dev/ttyUSB1, COM3), or sim for the simulated board")
            p.add_argument("--baud", type=int, default=DEFAULT_BAUD, help=f"UART rate (default {DEFAULT_BAUD})")
            p.add_argument("--steps", type=int, default=3)
            p.add_argument("--save", default=None, help="write the trained parameters to this .npz")
        else:
            p.add_argument("--steps", type=int, default=3)
        p.set_defaults(fn=fn)
