"""The ``circuitgrad`` command line.

    circuitgrad info                       version, primitives, backends
    circuitgrad show examples/iris.py      the generated code of a model file's training step
    circuitgrad zk prove examples/iris.py --steps 1 --out proofs/
    circuitgrad zk verify examples/iris.py proofs/ --init-seed 0
    circuitgrad fpga synth examples/iris.py --target ice40-up5k
    circuitgrad fpga simulate examples/iris.py --steps 5
    circuitgrad draw examples/tinygpt.py -o gpt.svg [--step] [--expand attention]
    circuitgrad cost examples/tinygpt.py --target cpu|gpu|fpga|zk [--device h100] [--macs 4]

``zk``, ``fpga``, ``draw``, ``cost`` and ``show`` take a model file (:mod:`circuitgrad.modelfile`), or an example's
short name (``tinygpt``, ``iris``): ``model(**options)`` returns what the script trains; ``--batch``, ``--hidden``,
``--lr`` and ``--option KEY=VALUE`` reach it. The file is imported as a module, never run as ``__main__``.

An error is one line on stderr. The exit status is 2 for a wrong command line (:class:`UsageError`: a bad flag,
argument or option value, a file that does not exist) and 1 for a failure (a model file that does not load, a
model that does not compile, a bad data batch, a proof that does not verify); see the README's CLI conventions.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import __version__
from .command import UsageError, add_model_options, load_model, missing_extra
from .primitives import PRIMITIVES
from .targets import TARGETS


def _info(args) -> int:
    """Version, primitives and targets (wrapped by :func:`_reported` below: a backend that cannot load is one line)."""
    import platform

    import numpy
    import scipy
    print(f"circuitgrad {__version__} on Python {platform.python_version()}, NumPy {numpy.__version__}, "
          f"SciPy {scipy.__version__}")
    print(f"primitives ({len(PRIMITIVES)}): {', '.join(p.__name__ for p in PRIMITIVES)}")
    for t in TARGETS.values():
        unsupported = ", ".join(c.__name__ for c in t.unsupported())
        state = f"{len(t.rule_table())} rules" + (f" (unsupported: {unsupported})" if unsupported else "")
        ok, why = t.available()
        state += f"; runs on {why}" if ok else f"; unavailable here: {why}"
        found = t.runtime()
        state += f"; found {found}" if found else ""
        print(f"target {t.name}: {t.summary}; {state}")
    return 0


def _dtype_option(p) -> None:
    p.add_argument("--dtype", default=None, choices=["float32", "float64", "fixed"],
                   help="compile in this dtype instead of the file's (fixed: --width/--frac, else the file's "
                        "fixed dtype, else fixed(16,8))")


def _fixed_options(p) -> None:
    p.add_argument("--width", type=int, default=None, help="fixed-point width (fpga and zk; default: the file's or 16)")
    p.add_argument("--frac", type=int, default=None, help="fractional bits (default: width/2)")


def _reported(fn):
    """Run a command; a model that does not load or compile, a fixed-point range it overflows, a file it cannot
    write or a missing optional dependency (named with its extra, :func:`command.missing_extra`) is one line on
    stderr and exit status 1 (a bad command line raises :class:`UsageError`: status 2, from ``main``)."""
    def run(args) -> int:
        from .fixedpoint import FixedPointOverflow
        try:
            return fn(args)
        except ImportError as e:
            print(f"circuitgrad {args.cmd}: {missing_extra(e)}", file=sys.stderr)
            return 1
        except BrokenPipeError:          # the reader of stdout stopped early: main ends quietly
            raise
        except (ValueError, TypeError, FixedPointOverflow, NotImplementedError, OSError) as e:
            print(f"circuitgrad {args.cmd}: {' '.join(str(e).split())}", file=sys.stderr)
            return 1
    return run


_info = _reported(_info)


@_reported
def _show(args) -> int:
    """The generated step code of the model file's own training step (imported as a module, never run)."""
    from . import types
    spec, _ = load_model(args, types.fixed(16, 8), fixed=False)
    step = spec.compile()
    print(f"# {step.model.name}: the training step compiled for {step.dtype}")
    print(step.source)
    return 0


def _check_cost_args(args) -> None:
    """The values of ``cost``'s own flags (usage errors)."""
    if args.target in ("fpga", "zk") and args.dtype in ("float32", "float64"):
        raise UsageError(f"--target {args.target} computes in fixed point, not --dtype {args.dtype}")
    if args.target == "cpu" and args.device is not None:
        raise UsageError(f"--device names a GPU (--target gpu) or an FPGA (--target fpga); the cpu target "
                         f"measures this machine, got --device {args.device}")
    if args.target == "gpu" and args.device is not None:
        DEVICES = TARGETS["gpu"].module("cost").DEVICES
        if args.device.lower() not in DEVICES:
            raise UsageError(f"--device {args.device}: unknown GPU device; choose one of {', '.join(DEVICES)}")
    if args.target == "fpga" and args.device is not None:
        DEVICES = TARGETS["fpga"].module("cost").DEVICES
        if args.device.lower() not in DEVICES:
            raise UsageError(f"--device {args.device}: unknown FPGA device; choose one of {', '.join(DEVICES)}")
    if args.target == "zk" and args.device is not None:
        raise UsageError(f"--device does not apply to --target zk, got --device {args.device}")
    if args.macs < 1:
        raise UsageError(f"--macs must be at least 1, got {args.macs}")
    if args.depth < 1:
        raise UsageError(f"--depth must be at least 1, got {args.depth}")
    if args.recalibrate and args.target not in ("cpu", "zk"):
        raise UsageError(f"--recalibrate measures this machine for --target cpu or zk; --target {args.target} "
                         f"has no calibration")
    if args.recalibrate and args.no_prover_time:
        raise UsageError("--recalibrate measures the prover's time model, which --no-prover-time leaves out")


@_reported
def _cost(args) -> int:
    """``cg.cost`` of the step the model file defines (its dtype, loss and optimizer), in fixed point for the
    fpga and zk targets, or in the dtype ``--dtype``/``--width`` name."""
    from . import types
    from .costmodel import cost
    _check_cost_args(args)
    spec, _ = load_model(args, types.fixed(16, 8), fixed=args.target in ("fpga", "zk"))
    step = spec.compile()
    options = {"cpu": {}, "gpu": {"tf32": args.tf32, "graph": args.graph}, "fpga": {"macs": args.macs},
               "zk": {"prover_time": not args.no_prover_time}}[args.target]
    print(cost(step, args.target, device=args.device, function=args.function, depth=args.depth,
               recalibrate=args.recalibrate, **options))
    return 0


@_reported
def _draw(args) -> int:
    """``cg.draw`` of the model file's model, or of the training step it defines (``--step``)."""
    import os

    from . import types
    from .drawing import UnknownDefinition, draw
    if not args.output:
        raise UsageError("-o needs the SVG file to write, e.g. -o model.svg")
    if os.path.isdir(args.output):
        name = os.path.splitext(os.path.basename(args.script.rstrip("/\\")))[0] or "model"
        raise UsageError(f"-o {args.output} is a directory; -o names the SVG file to write, e.g. "
                         f"-o {os.path.join(args.output, name + '.svg')}")
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        raise UsageError(f"-o {args.output}: no such directory {os.path.dirname(args.output) or folder}")
    if args.depth < 1:
        raise UsageError(f"--depth must be at least 1, got {args.depth}")
    spec, _ = load_model(args, types.fixed(16, 8), fixed=False)
    if args.fold is not None and not args.step:
        raise UsageError("--fold and --no-fold choose the layout of a training step: add --step")
    try:
        svg = draw(spec.compile() if args.step else spec.model, expand=tuple(args.expand), depth=args.depth,
                   fold=args.fold)
    except UnknownDefinition as e:
        raise UsageError(f"--expand: {e.detail}") from None
    try:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(svg)
    except OSError as e:                 # the command line was right; this file cannot be written
        raise OSError(f"-o {args.output}: cannot write it: {e.strerror or e}") from None
    print(f"wrote {args.output}")
    return 0


def _add_views(sub) -> None:
    p = sub.add_parser("cost", help="predicted cost of a model file's training step on a target")
    add_model_options(p)
    _fixed_options(p)
    _dtype_option(p)
    p.add_argument("--target", choices=list(TARGETS), default="cpu")
    p.add_argument("--device", default=None, help="gpu: h100 or h200 (default h100); fpga: ice40-up5k, ecp5-25k or "
                                                  "ecp5-85k (default), and whether the design fits it")
    p.add_argument("--function", default="step", choices=["step", "predict", "gradients", "loss"])
    p.add_argument("--depth", type=int, default=2, help="rows group definitions by this many path segments")
    p.add_argument("--macs", type=int, default=1, help="fpga: MAC lanes")
    p.add_argument("--tf32", action="store_true", help="gpu: float32 products on tensor cores (TF32)")
    p.add_argument("--graph", action="store_true", help="gpu: the step replayed as one CUDA graph (no issue costs)")
    p.add_argument("--no-prover-time", action="store_true", help="zk: counts only, no prover calibration")
    p.add_argument("--recalibrate", action="store_true",
                   help="cpu, zk: measure this machine's calibration again now (it is cached, and measured again "
                        "by itself when stale or taken under load: docs/COST.md)")
    p.set_defaults(fn=_cost)
    p = sub.add_parser("draw", help="a neural circuit diagram (SVG) of a model file's model or training step")
    add_model_options(p)
    _fixed_options(p)
    _dtype_option(p)
    p.add_argument("-o", "--output", default="model.svg", help="the SVG file to write (default model.svg)")
    p.add_argument("--step", action="store_true", help="draw the whole training step, not the model")
    p.add_argument("--expand", action="append", default=[], metavar="NAME",
                   help="expand the definitions named NAME (repeatable; '*' expands everything)")
    p.add_argument("--depth", type=int, default=1, help="levels of definitions shown as boxes (default 1)")
    p.add_argument("--fold", action=argparse.BooleanOptionalAction, default=None,
                   help="with --step: the lens layout, forward on top and the reverse pass folded under it "
                        "(the default where the step can be folded), or --no-fold for one row")
    p.set_defaults(fn=_draw)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="circuitgrad", description="circuitgrad command line")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="version, primitives and backends").set_defaults(fn=_info)
    p = sub.add_parser("show", help="print the generated code of a model file's training step")
    add_model_options(p)
    _fixed_options(p)
    _dtype_option(p)
    p.set_defaults(fn=_show)
    for t in TARGETS.values():
        if t.command is not None:
            t.module("command").add_parser(sub)
    _add_views(sub)
    args = ap.parse_args(argv)
    try:
        return _quiet_on_closed_pipe(args.fn)(args)
    except UsageError as e:             # a wrong command line: one line and status 2, as argparse does
        print(f"circuitgrad {args.cmd}: {e}", file=sys.stderr)
        return 2


def _quiet_on_closed_pipe(fn):
    """``fn`` whose output may go to a reader that stops early (``circuitgrad info | head``): a closed pipe ends
    the command quietly with status 141, as a standard tool killed by SIGPIPE (never 0: a ``zk verify`` cut
    short has not verified), instead of a traceback or an error line about the pipe."""
    def run(args) -> int:
        try:
            out = fn(args)
            sys.stdout.flush()
            return out
        except BrokenPipeError:
            import os
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # Python's flush at exit finds no pipe
            return 128 + 13                                                   # 128 + SIGPIPE
    return run


if __name__ == "__main__":  # pragma: no cover
    # ``python -m circuitgrad.cli``: run the imported module's main, whose UsageError the backends raise
    from circuitgrad.cli import main as _main
    sys.exit(_main())
