"""The ``circuitgrad`` command line.

    circuitgrad info                       version, primitives, backends
    circuitgrad show examples/iris.py      the generated step code of an example's model
    circuitgrad zk prove examples/iris.py --steps 1 --out proofs/
    circuitgrad zk verify proofs/
    circuitgrad fpga synth examples/iris.py --target ice40-up5k
    circuitgrad fpga simulate examples/iris.py --steps 5
"""
from __future__ import annotations

import argparse
import importlib
import runpy
import sys
from typing import Sequence

from . import __version__
from .primitives import PRIMITIVES


def load_example(path: str):
    """Import an example script (``examples/iris.py``) without running it: its DATASET and DEFAULTS."""
    import importlib.util
    import os
    if not os.path.exists(path):
        raise SystemExit(f"circuitgrad: no such example script: {path}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("circuitgrad_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, "DATASET") or not hasattr(mod, "DEFAULTS"):
        raise SystemExit(f"circuitgrad: {path} must define DATASET and DEFAULTS (see examples/iris.py)")
    return mod


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
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
