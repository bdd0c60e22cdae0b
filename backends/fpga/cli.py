"""``circuitgrad fpga synth|simulate``: hardware for an example's model.

    circuitgrad fpga synth examples/iris.py --target ice40-up5k [--function step] [--out out/fpga/]
    circuitgrad fpga simulate examples/iris.py --steps 5
"""
from __future__ import annotations

import os
import time

import numpy as np

import circuitgrad as cg
from circuitgrad import datasets, nn

__all__ = ["add_parser"]


def _design(a):
    from circuitgrad.cli import load_example

    from . import compile as fpga_compile
    mod = load_example(a.script)
    d = dict(mod.DEFAULTS)
    batch = a.batch or d["batch"]
    hidden = a.hidden if a.hidden is not None else d["hidden"]
    data = datasets.load(mod.DATASET, seed=0)
    step = cg.compile_model(nn.mlp(batch, [data.features, *hidden, data.classes]), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(a.lr), dtype=cg.fixed(a.width, a.frac))
    return data, step, fpga_compile(step, function=a.function, macs=a.macs,
                                    read_ports=getattr(a, "read_ports", 2))


def _synth(a) -> int:
    from .synth import synthesize
    t0 = time.perf_counter()
    print("[compile] …", flush=True)
    data, step, design = _design(a)
    print(f"[compile] {design.function} of {step.model.name}: {len(design.microcode.ops)} micro-ops, "
          f"{design.microcode.depth} memory words, {design.cycles} cycles per call "
          f"({time.perf_counter() - t0:.2f} s)", flush=True)
    from .devices import BOARDS
    target = a.target or (BOARDS[a.board]["target"] if a.board else "ice40-up5k")
    report = synthesize(design, target, a.out, log=lambda s: print(f"[build] {s}", flush=True), board=a.board)
    print(report)
    print(f"report written to {os.path.join(a.out, 'report.json')}")
    return 0


def _simulate(a) -> int:
    from . import simulate
    data, step, design = _design(a)
    if design.function != "step":
        raise SystemExit("circuitgrad fpga simulate: only --function step is simulated from the command line")
    hw = step.init_params(seed=0)
    sw = dict(hw)
    rng = np.random.default_rng(0)
    batches = datasets.batches(data.x_train, data.y_train, step.batch, rng)
    for k in range(a.steps):
        x, y = next(batches)
        t0 = time.perf_counter()
        hw, n = simulate(design, hw, x, y)
        sw = step.step(sw, x, y)
        exact = all(np.array_equal(hw[key], sw[key]) for key in sw)
        print(f"step {k}: {n} cycles (model {design.cycles}), bit-exact with the interpreter: {exact} "
              f"({time.perf_counter() - t0:.1f} s simulated)")
        if not exact:
            return 1
    return 0


def add_parser(sub) -> None:
    """Register ``fpga synth`` and ``fpga simulate`` under the ``circuitgrad`` command."""
    from .devices import BOARDS, TARGETS
    fp = sub.add_parser("fpga", help="FPGA designs of training steps").add_subparsers(dest="fpga_cmd", required=True)
    for name, fn, helptext in (("synth", _synth, "synthesize, place and route with YoWASP"),
                               ("simulate", _simulate, "simulate training steps bit-exactly")):
        p = fp.add_parser(name, help=helptext)
        p.add_argument("script")
        p.add_argument("--function", choices=["step", "predict"], default="step")
        p.add_argument("--macs", type=int, default=1)
        p.add_argument("--width", type=int, default=16)
        p.add_argument("--frac", type=int, default=8)
        p.add_argument("--lr", type=float, default=0.125)
        p.add_argument("--batch", type=int, default=None)
        p.add_argument("--hidden", type=int, nargs="*", default=None)
        if name == "synth":
            p.add_argument("--target", choices=sorted(TARGETS), default=None,
                           help="device (default: the board's, else ice40-up5k)")
            p.add_argument("--out", default="out/fpga")
            p.add_argument("--board", choices=sorted(BOARDS), default=None,
                           help="constrain the pins to a board (iCEBreaker: host port on PMOD 1A; ULX3S: on GPIO J1)")
            p.add_argument("--read-ports", type=int, choices=[1, 2], default=2, dest="read_ports")
        else:
            p.add_argument("--steps", type=int, default=3)
        p.set_defaults(fn=fn)
