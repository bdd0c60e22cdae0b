"""Model files: one Python file that defines what the command-line tools train, prove and build.

A model file defines a function ``model(**options) -> ModelSpec``::

    import circuitgrad as cg
    from circuitgrad import nn

    def model(batch: int = 8, lr: float = 0.05, dtype=cg.float32) -> cg.ModelSpec:
        return cg.ModelSpec(model=nn.mlp(batch, [4, 16, 3], dtype=dtype), loss=nn.softmax_cross_entropy,
                            optimizer=nn.momentum(lr, 0.9), dtype=dtype,
                            data=lambda seed: batches_of_my_data(batch, seed),
                            dataset=lambda: (x_train, y_train))

``circuitgrad zk prove|verify``, ``fpga synth`` and ``fpga simulate`` load it
with :func:`load`, passing only the options named on their own command line
(``--batch 4`` → ``model(batch=4)``, ``--option heads=2`` → ``model(heads=2)``),
so the model, loss and optimizer the tools use are exactly those the script
trains. ``dataset()`` returns the whole training set ``(x, y)`` the batches are
drawn from; ``zk prove --private`` commits to it by its Merkle root.

``data(seed)`` returns an iterable of ``(x, y)`` batches (one epoch, say), each of exactly the
model's batch size. A tool takes them in order (:func:`batches`, with ``seed`` the ``--seed`` of
``zk prove``, 0 by default and for ``fpga simulate``), one per step, and when the iterable runs out
before the steps do it calls ``data(seed + 1)``, then ``data(seed + 2)``, and so on: a new epoch,
shuffled anew if ``data`` shuffles by its seed. So ``--steps 10`` over a ``data`` of 4 batches uses ``data(0)``'s 4, ``data(1)``'s 4 and
the first 2 of ``data(2)``. A short last batch is not padded or skipped: it is an error naming the
batch (``datasets.batches`` drops an epoch's remainder, so it never yields one). A call that yields
no batch at all, a ``data`` that returns no iterable, or an exception in the file's ``data`` code is a
one-line :class:`ModelFileError` naming the call (``data(3)``).

The tools import the file as a module (its ``if __name__ == "__main__":`` block never runs). A path that
is not a file but an example's short name (``iris``, ``tinygpt``) names that example, which ships with the
package (:func:`resolve`). An option of another type than ``model()``'s default for it (``hidden=banana``
where the default is ``(16,)``) is an :class:`OptionError` naming the option and the type.

The file is code and is run: name only files you trust. The tools take its
path from their own command line, never from a proof bundle or other data.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import itertools
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Mapping

from .diagram import Diagram
from .types import Dtype, float32

__all__ = ["ModelSpec", "ModelFileError", "OptionError", "load", "load_function", "parse_option", "batches",
           "check_batch", "dataset", "examples", "resolve"]


class ModelFileError(ValueError):
    """A model file that does not follow the convention, or options it does not accept."""


class OptionError(ModelFileError):
    """A command line that names no model file, or gives ``model()`` an option it does not take or a value of the
    wrong type: a usage error (the command-line tools exit with status 2)."""

#: where the example model files live: installed with the package (``circuitgrad/examples``, see setup.py),
#: or in a checkout next to ``circuitgrad/``
_EXAMPLE_DIRS = (os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples"),
                 os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))


_DEFINES_MODEL = re.compile(r"^(def model\(|model = )", re.M)


def examples() -> dict[str, str]:
    """The example model files by short name (``iris`` → its path): the files that define ``model()`` (a ``def``,
    or an assignment ``model = ...`` at the top level)."""
    out: dict[str, str] = {}
    for folder in _EXAMPLE_DIRS:
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            stem, ext = os.path.splitext(name)
            if ext != ".py" or stem.startswith("_") or stem in out:
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                if _DEFINES_MODEL.search(fh.read()):
                    out[stem] = os.path.join(folder, name)
    return out


def resolve(path: str) -> str:
    """The model file ``path`` names: the file itself, else the example of that short name (``iris``,
    ``tinygpt``: they ship with the package). A usage error when it is neither."""
    if os.path.isfile(path):
        return path
    if os.path.isdir(path):
        raise OptionError(f"{path} is a directory, not a model file (a .py file that defines model(**options))")
    if os.sep not in path and "/" not in path and not path.endswith(".py"):
        found = examples()
        if path in found:
            return found[path]
        raise OptionError(f"no such model file or example: {path} (the examples: {', '.join(found) or 'none'})")
    raise OptionError(f"no such model file: {path}")


@dataclass(frozen=True)
class ModelSpec:
    """What a model file's ``model()`` returns: everything needed to compile and feed a training step."""
    model: Diagram
    loss: Callable
    optimizer: Any                  # an nn.Optimizer
    dtype: Dtype = float32
    data: Callable[[int], Iterable[tuple]] | None = None
    #: the options ``model()`` ran with, its defaults included (filled by :func:`load`, as plain JSON values)
    options: Mapping[str, object] = field(default_factory=dict)
    #: the whole training set ``() -> (x, y)`` that ``data`` draws its batches from: what a private run
    #: commits to (``circuitgrad zk prove --private``)
    dataset: Callable[[], tuple] | None = None

    def compile(self, dtype: Dtype | None = None, **kwargs):
        """``cg.compile_model`` of this model, loss and optimizer (``dtype`` overrides the file's)."""
        from .compile import compile_model
        return compile_model(self.model, self.loss, self.optimizer, dtype or self.dtype, **kwargs)


def parse_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` from the command line; the value is a Python literal (``2``, ``0.5``, ``[16, 16]``,
    ``'spherical'``) or else the plain string (``spherical``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise OptionError(f"--option takes KEY=VALUE with KEY a Python name, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def load_function(path: str) -> Callable[..., ModelSpec]:
    """Import the model file at ``path`` (or the example of that short name, :func:`resolve`) as a module,
    never as ``__main__``, and return its ``model`` function. A syntax or import error is a
    :class:`ModelFileError` of one line."""
    path = resolve(path)
    spec = importlib.util.spec_from_file_location(f"circuitgrad_model_{abs(hash(os.path.abspath(path)))}", path)
    if spec is None or spec.loader is None:
        raise OptionError(f"{path}: not a Python file; a model file is a .py file that defines "
                          f"model(**options)")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except SyntaxError as e:
        where = "" if e.filename and os.path.abspath(e.filename) == os.path.abspath(path) else f": {e.filename}"
        raise ModelFileError(f"{path}{where}, line {e.lineno}: {type(e).__name__}: {e.msg}") from None
    except ImportError as e:
        raise ModelFileError(f"{path}: {type(e).__name__}: {e}") from None
    except (Exception, SystemExit) as e:     # anything else the file raises at import, sys.exit(3) included
        raise ModelFileError(f"{path}: import: {_raised(e)}") from None
    fn = getattr(mod, "model", None)
    if not callable(fn):
        raise OptionError(f"{path} must define model(**options) returning cg.ModelSpec "
                             f"(see circuitgrad/modelfile.py or examples/iris.py)")
    return fn


def load(path: str, options: Mapping[str, object] | None = None,
         fn: Callable[..., ModelSpec] | None = None) -> ModelSpec:
    """Run the model file at ``path`` and call its ``model(**options)``; the result is checked.
    ``fn``: the file's ``model`` function, already loaded by :func:`load_function`."""
    options = dict(options or {})
    fn = fn or load_function(path)
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(options) - set(params))
        if unknown:
            raise OptionError(f"{path}: model() takes no option {', '.join(unknown)}; it accepts "
                              f"{', '.join(params) or 'none'}")
    for k, v in options.items():
        if k in params:
            _check_option(path, k, v, params[k].default)
    try:
        out = fn(**options)
    except (Exception, SystemExit) as e:     # the file's own code: one line, never a traceback or its exit status
        raise ModelFileError(f"{path}: model(): {_raised(e)}") from None
    if not isinstance(out, ModelSpec):
        raise ModelFileError(f"{path}: model() must return cg.ModelSpec, got {type(out).__name__}")
    from . import nn
    checks = ((isinstance(out.model, Diagram), "model must be a cg.Diagram"),
              (callable(out.loss), "loss must be a loss function such as nn.softmax_cross_entropy"),
              (isinstance(out.optimizer, nn.Optimizer), "optimizer must be an nn optimizer such as nn.sgd(0.1)"),
              (isinstance(out.dtype, Dtype), "dtype must be a cg dtype such as cg.float32 or cg.fixed(16, 8)"),
              (out.data is None or callable(out.data), "data must be a function seed -> iterable of (x, y)"))
    bad = next((msg for ok, msg in checks if not ok), None)
    if bad:
        raise ModelFileError(f"{path}: model(): {bad}")
    ran = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    ran.update(options)
    return replace(out, options={k: _plain(v) for k, v in ran.items()})


def _raised(e: BaseException) -> str:
    """``Type: message`` of an exception a model file raised, on one line."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _kind(default: object) -> tuple[Callable[[object], bool], str] | None:
    """How to check a value given for an option whose default is ``default``: (test, what it must be), or
    None where any value goes (no default, ``None``, a dtype or another object)."""
    if isinstance(default, bool):
        return (lambda v: isinstance(v, bool)), "True or False"
    if isinstance(default, int):
        return (lambda v: isinstance(v, int) and not isinstance(v, bool)), "an integer"
    if isinstance(default, float):
        return (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)), "a number"
    if isinstance(default, str):
        return (lambda v: isinstance(v, str)), "a string"
    if isinstance(default, (list, tuple)):
        inner = {(k[1] if k else None) for k in map(_kind, default)}
        item = _kind(default[0]) if len(inner) == 1 and None not in inner else None
        if item is None:
            return (lambda v: isinstance(v, (list, tuple))), "a list"
        test, what = item
        plural = {"an integer": "integers", "a number": "numbers", "a string": "strings"}.get(what, what)
        return (lambda v: isinstance(v, (list, tuple)) and all(map(test, v))), f"a list of {plural}"
    return None


def _check_option(path: str, name: str, value: object, default: object) -> None:
    """An option of the wrong type for ``model()`` (by its default) is a usage error naming it."""
    kind = _kind(default)
    if kind is not None and not kind[0](value):
        raise OptionError(f"{path}: option {name} must be {kind[1]} (model()'s default is {default!r}), "
                          f"got {value!r}")


def _plain(v: object) -> object:
    """A JSON value for an option (tuples become lists, anything unusual its ``str``)."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def dataset(spec: ModelSpec, path: str = "the model file") -> tuple:
    """The training set ``(x, y)`` of ``spec`` (its ``dataset()``)."""
    if spec.dataset is None:
        raise ModelFileError(f"{path}: model() returned no dataset to commit to; set "
                             f"ModelSpec(dataset=lambda: (x_train, y_train))")
    return spec.dataset()


def check_batch(step, batch: object, k: int, path: str = "the model file") -> tuple:
    """Batch ``k`` of ``data()``, checked against the compiled ``step``'s input and targets (shape, dtype,
    finite values), as ``(x, y)``; a :class:`ModelFileError` naming the batch otherwise."""
    try:
        x, y = batch
    except (TypeError, ValueError):
        raise ModelFileError(f"{path}: data() batch {k} must be a pair (x, y), got {type(batch).__name__}") from None
    where = f"{path}: data() batch {k}"
    from .fixedpoint import FixedPointOverflow
    try:
        step._x(x, where)
        step._targets(y, where)
    except (TypeError, ValueError) as e:      # without the hint for predict's callers
        raise ModelFileError(str(e).split(" (this model was built for batch")[0]) from None
    except FixedPointOverflow as e:           # a value outside the fixed-point range
        raise ModelFileError(" ".join(str(e).split())) from None
    return x, y


def batches(spec: ModelSpec, seed: int, path: str = "the model file") -> Iterator[tuple]:
    """Endless ``(x, y)`` batches: all of ``data(seed)``, then of ``data(seed + 1)``, … (the module
    docstring states the contract). A call that yields nothing, a ``data`` that returns no iterable, or
    an exception the file's ``data`` code raises is a :class:`ModelFileError` naming the call."""
    if spec.data is None:
        raise ModelFileError(f"{path}: model() returned no data; set ModelSpec(data=lambda seed: ...)")
    for k in itertools.count():
        call = f"data({seed + k})"
        try:
            got = spec.data(seed + k)
        except (Exception, SystemExit) as e:      # the file's own code (a TypeError too): one line, as in model()
            raise ModelFileError(f"{path}: {call}: {_raised(e)}") from None
        try:
            it = iter(got)
        except TypeError as e:
            raise ModelFileError(f"{path}: {call} must return an iterable of (x, y) batches "
                                 f"({' '.join(str(e).split())})") from None
        yielded = False
        while True:
            try:
                batch = next(it)
            except StopIteration:
                break
            except (Exception, SystemExit) as e:
                raise ModelFileError(f"{path}: {call}: {_raised(e)}") from None
            yielded = True
            yield batch
        if not yielded:
            raise ModelFileError(f"{path}: {call} yielded no batch")
