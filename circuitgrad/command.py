"""What every command of the ``circuitgrad`` command line shares: the model-file options, loading the model file
with them, and :class:`UsageError` (a wrong command line). The core's commands (:mod:`circuitgrad.cli`) and the
backends' (``zk``, ``fpga``) import it, so that neither imports the other's command module."""
from __future__ import annotations

__all__ = ["UsageError", "load_model", "add_model_options", "missing_extra", "EXTRAS"]

from .extras import EXTRAS, missing_extra


class UsageError(Exception):
    """A wrong command line: a bad flag, argument or option value, a file that does not exist. ``main``
    prints it as one line and exits with status 2 (failures exit with 1; see the README's CLI conventions).
    Not a ValueError, so that a tool's handler of failures lets it through."""


def load_model(a, default_dtype, fixed: bool = True):
    """The model file ``a.script`` (``circuitgrad/modelfile.py``, or an example's short name) with the options
    of the command line: ``--batch``, ``--hidden`` and ``--lr`` where given, and every ``--option KEY=VALUE``.
    Returns the spec and the dtype it computes in, which ``spec.dtype`` also holds.

    ``fixed``: the tool computes in fixed point (fpga, zk): ``fixed(--width, --frac)``, else the file's own
    fixed dtype, else ``default_dtype``. Otherwise (cost on cpu/gpu, draw, show) the step the file defines,
    its dtype included, unless ``--dtype`` or ``--width/--frac`` name another. A ``model()`` that takes
    ``dtype`` is called with the dtype chosen (tinygpt then picks its fixed-point optimizer).

    Raises :class:`UsageError` for a bad command line and ``ValueError`` for a model file that does not load."""
    import inspect
    from dataclasses import replace

    from . import types
    from .modelfile import ModelFileError, OptionError, load, load_function, parse_option
    given = {k: v for k, v in (("batch", a.batch), ("hidden", a.hidden), ("lr", a.lr)) if v is not None}
    for k, v in (("batch", [a.batch] if a.batch is not None else []), ("hidden", a.hidden or [])):
        bad = next((x for x in v if x < 1), None)
        if bad is not None:
            raise UsageError(f"--{k} must be at least 1, got {bad}")
    if a.lr is not None and not (a.lr > 0 and a.lr != float("inf")):
        raise UsageError(f"--lr must be a finite number > 0, got {a.lr}")
    choice = getattr(a, "dtype", None)
    width, frac = getattr(a, "width", None), getattr(a, "frac", None)
    if choice in ("float32", "float64") and (width is not None or frac is not None):
        raise UsageError(f"--width and --frac choose a fixed-point dtype, not --dtype {choice}")
    fixed = fixed or choice == "fixed" or width is not None or frac is not None
    if width is not None or frac is not None:      # a fixed-point dtype the flags name must exist: a usage error
        try:
            types.fixed(width if width is not None else default_dtype.width,
                        frac if frac is not None else (width // 2 if width is not None else default_dtype.frac))
        except ValueError as e:
            flags = " ".join(f"--{k} {v}" for k, v in (("width", width), ("frac", frac)) if v is not None)
            raise UsageError(f"{flags}: {e}") from None
    try:
        given.update(parse_option(o) for o in (getattr(a, "option", None) or []))
        fn = load_function(a.script)
        takes = "dtype" in inspect.signature(fn).parameters
        default = inspect.signature(fn).parameters["dtype"].default if takes else inspect.Parameter.empty
        spec = None
        if fixed:
            # the file's own dtype: its model()'s default for dtype (read, so model() runs once), else its spec's
            if not takes:
                spec = load(a.script, given, fn)
            own = spec.dtype if spec is not None else default
            if width is not None:
                dtype = types.fixed(width, frac if frac is not None else width // 2)
            elif isinstance(own, types.Fixed) and frac is None:
                dtype = own
            else:
                dtype = types.fixed(default_dtype.width, frac if frac is not None else default_dtype.frac)
        else:
            dtype = getattr(types, choice) if choice in ("float32", "float64") else None
        if dtype is None:
            spec = load(a.script, given, fn)
            dtype = spec.dtype
        elif takes and (spec is None or spec.dtype != dtype):
            spec = load(a.script, {**given, "dtype": dtype}, fn)
        elif spec is None or spec.dtype != dtype:
            spec = replace(spec or load(a.script, given, fn), dtype=dtype)
    except OptionError as e:
        raise UsageError(str(e)) from None
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
