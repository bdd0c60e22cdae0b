"""The ``circuitgrad`` command line.

    circuitgrad info                       version, primitives, backends
    circuitgrad show examples/iris.py      the generated step code of an example's model
    circuitgrad zk prove examples/iris.py --steps 1 --out proofs/
    circuitgrad zk verify examples/iris.py proofs/ --init-seed 0
    circuitgrad fpga synth examples/iris.py --target ice40-up5k
    circuitgrad fpga simulate examples/iris.py --steps 5
    circuitgrad draw examples/tinygpt.py -o gpt.svg [--step] [--expand attention]
    circuitgrad cost examples/tinygpt.py --target cpu|gpu|fpga|zk [--device h100] [--macs 4]

``zk``, ``fpga``, ``draw`` and ``cost`` take a model file (:mod:`circuitgrad.modelfile`): ``model(**options)`` returns
what the script trains; ``--batch``, ``--hidden``, ``--lr`` and ``--option KEY=VALUE`` reach it.
"""
from __future__ import annotations

import argparse
import importlib
import runpy
import sys
from typing import Sequence

from . import __version__
from .primitives import PRIMITIVES


def load_model(a, default_dtype):
    """The model file ``a.script`` (``circuitgrad/modelfile.py``) with the options of the command line:
    ``--batch``, ``--hidden`` and ``--lr`` where given, and every ``--option KEY=VALUE``. Returns the spec
    and the fixed-point dtype: ``fixed(--width, --frac)``, else the file's own fixed dtype, else
    ``default_dtype(width)``. A file that breaks the convention is a one-line error."""
    import inspect

    from . import types
    from .modelfile import ModelFileError, load, load_function, parse_option
    given = {k: v for k, v in (("batch", a.batch), ("hidden", a.hidden), ("lr", a.lr)) if v is not None}
    for k, v in (("batch", [a.batch] if a.batch is not None else []), ("hidden", a.hidden or [])):
        bad = next((x for x in v if x < 1), None)
        if bad is not None:
            raise ValueError(f"--{k} must be at least 1, got {bad}")
    try:
        given.update(parse_option(o) for o in (getattr(a, "option", None) or []))
        fn = load_function(a.script)
        params = inspect.signature(fn).parameters
        # a model() that takes dtype gets the one compiled for, and chooses what suits it (tinygpt: its
        # fixed-point optimizer); its own default dtype is read from the signature, so it runs once
        own = params["dtype"].default if "dtype" in params else None
        spec = None if own is not None else load(a.script, given, fn)
        own = own if spec is None else spec.dtype
        if a.width is not None:
            dtype = types.fixed(a.width, a.frac if a.frac is not None else a.width // 2)
        elif isinstance(own, types.Fixed) and a.frac is None:
            dtype = own
        else:
            dtype = types.fixed(default_dtype.width, a.frac if a.frac is not None else default_dtype.frac)
        if spec is None:
            spec = load(a.script, {**given, "dtype": dtype}, fn)
    except ModelFileError as e:
        raise ValueError(str(e)) from None
    return spec, dtype


def add_model_options(p) -> None:
    """The options that reach a model file's ``model()`` (the same for every tool)."""
    p.add_argument("script", help="the model file: defines model(**options) -> cg.ModelSpec")
    p.add_argument("--batch", type=int, default=None, help="model(batch=N) (default: the file's)")
    p.add_argument("--hidden", type=int, nargs="*", default=None, help="model(hidden=[...]) (MLP examples)")
    p.add_argument("--lr", type=float, default=None, help="model(lr=X) (default: the file's)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="any other model() option, a Python literal (repeatable): --option heads=2")


def _info(_args) -> int:
    print(f"circuitgrad {__version__}")
    print(f"primitives ({len(PRIMITIVES)}): {', '.join(p.__name__ for p in PRIMITIVES)}")
    for b in ("gpu", "fpga", "zk"):
        mod = importlib.import_module(f"circuitgrad.backends.{b}")
        rules = getattr(mod, "RULES", {})
        unsupported = ", ".join(c.__name__ for c in getattr(mod, "UNSUPPORTED", {}))
        state = (f"{len(rules)} rules" + (f" (unsupported: {unsupported})" if unsupported else "")
                 if rules else "not implemented yet")
        if b == "gpu":
            ok, why = mod.available()
            state += f"; device: {why}" if ok else f"; unavailable here: {why}"
        print(f"backend {b}: {state}")
    print("backend numpy: available (float32/float64 code generation; fixed point by the reference interpreter)")
    return 0


def _show(args) -> int:
    sys.argv = [args.script, "--show-source", "--epochs", "0", "--quiet"] + (["--dtype", args.dtype])
    runpy.run_path(args.script, run_name="__main__")
    return 0


def _fixed_options(p) -> None:
    p.add_argument("--width", type=int, default=None, help="fixed-point width (fpga and zk; default: the file's or 16)")
    p.add_argument("--frac", type=int, default=None, help="fractional bits (default: width/2)")


def _reported(fn):
    """Run a command; a bad model, option or fixed-point range is one line on stderr and exit status 2."""
    def run(args) -> int:
        from .fixedpoint import FixedPointOverflow
        try:
            return fn(args)
        except (ValueError, TypeError, FixedPointOverflow, NotImplementedError) as e:
            print(f"circuitgrad {args.cmd}: {e}", file=sys.stderr)
            return 2
    return run


@_reported
def _cost(args) -> int:
    from . import types
    from .costmodel import cost
    spec, dtype = load_model(args, types.fixed(16, 8))
    fixed = args.target in ("fpga", "zk")
    step = spec.compile(dtype if fixed else None)
    options = {"cpu": {}, "gpu": {"tf32": args.tf32}, "fpga": {"macs": args.macs},
               "zk": {"prover_time": not args.no_prover_time}}[args.target]
    print(cost(step, args.target, device=args.device, function=args.function, depth=args.depth, **options))
    return 0


@_reported
def _draw(args) -> int:
    from . import types
    from .drawing import draw
    spec, _ = load_model(args, types.fixed(16, 8))
    draw(spec.compile() if args.step else spec.model, path=args.output, expand=tuple(args.expand),
         depth=args.depth)
    print(f"wrote {args.output}")
    return 0


def _add_views(sub) -> None:
    p = sub.add_parser("cost", help="predicted cost of a model file's training step on a target")
    add_model_options(p)
    _fixed_options(p)
    p.add_argument("--target", choices=["cpu", "gpu", "fpga", "zk"], default="cpu")
    p.add_argument("--device", default=None, help="gpu: h100 or h200 (default h100)")
    p.add_argument("--function", default="step", choices=["step", "predict", "gradients", "loss"])
    p.add_argument("--depth", type=int, default=2, help="rows group definitions by this many path segments")
    p.add_argument("--macs", type=int, default=1, help="fpga: MAC lanes")
    p.add_argument("--tf32", action="store_true", help="gpu: float32 products on tensor cores (TF32)")
    p.add_argument("--no-prover-time", action="store_true", help="zk: counts only, no prover calibration")
    p.set_defaults(fn=_cost)
    p = sub.add_parser("draw", help="a neural circuit diagram (SVG) of a model file's model or training step")
    add_model_options(p)
    _fixed_options(p)
    p.add_argument("-o", "--output", default="model.svg", help="the SVG file to write (default model.svg)")
    p.add_argument("--step", action="store_true", help="draw the whole training step, not the model")
    p.add_argument("--expand", action="append", default=[], metavar="NAME",
                   help="expand the definitions named NAME (repeatable; '*' expands everything)")
    p.add_argument("--depth", type=int, default=1, help="levels of definitions shown as boxes (default 1)")
    p.set_defaults(fn=_draw)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="circuitgrad", description="circuitgrad command line")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="version, primitives and backends").set_defaults(fn=_info)
    p = sub.add_parser("show", help="print the generated step code of an example script")
    p.add_argument("script")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "fixed"])
    p.set_defaults(fn=_show)
    from .backends.zk import cli as zk_cli
    zk_cli.add_parser(sub)
    from .backends.fpga import cli as fpga_cli
    fpga_cli.add_parser(sub)
    _add_views(sub)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
