"""What the calls of a step cost where the step makes them, and what calling a compiled model's function costs.

Two fixed costs that a call timed alone in a tight loop (:data:`.calls.PROBES`) does not show:

* **In a straight line.** A generated step runs each of its calls once, one after another, keeping its
  results alive; a tight loop of one call runs warm (its code, branches and freed result memory reused). The
  calibration times straight-line functions that make the first few kinds of call of :data:`.calls.PROBES`
  in turn (:func:`straight_line`) and divides by the sum of their tight-loop times: the factor the fixed
  cost of each line is charged at, which grows with the number of kinds a program's lines rotate through.
* **The entry.** ``step(params, x, y)`` (and ``loss``, ``gradients``, ``predict``) checks and converts its
  arguments (:mod:`circuitgrad.arguments`: each parameter's name, shape and dtype; ``x`` to the model's
  dtype, checked finite; integer labels range-checked and one-hot encoded), calls the generated function and
  names its results. :func:`entry_call` makes that sequence on tiny operands with ``n`` parameters; the
  calibration times it after a straight line (as in a training loop, whose step runs between two entries),
  less the straight line alone, at two ``n``: a fixed cost and a cost per parameter array. Its data
  movement, converting ``x`` and encoding the labels, is charged at the streaming rate (:func:`entry_bytes`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .. import arguments
from ..compile import CompiledModel
from ..types import Fixed, Index, NdArrayType, float32

__all__ = ["straight_line", "entry_call", "entry_arrays", "entry_bytes", "ENTRY_SIZES"]

#: the numbers of parameter arrays the entry is timed with
ENTRY_SIZES = (1, 65)


def straight_line(probes: dict[str, Callable[[], object]], rounds: int = 1) -> Callable[[], object]:
    """A function that calls each of ``probes`` once in turn (``rounds`` times), each result kept in a local
    until it returns, as a generated step's lines do."""
    names = [k for _ in range(rounds) for k in probes]
    body = "".join(f"    v{i} = P[{k!r}]()\n" for i, k in enumerate(names))
    ns: dict[str, Any] = {}
    exec(f"def line(P):\n{body}    return v0\n", ns)           # noqa: S102 (our own generated source)
    fn = ns["line"]
    return lambda: fn(probes)


def entry_call(n: int) -> Callable[[], object]:
    """What ``CompiledModel.step(params, x, y)`` does around its generated function, with ``n`` parameters of
    4×4 float32, a float64 batch of 2×4 converted to float32 and 2 integer labels of 3 classes."""
    names = [f"p{i}" for i in range(n)]
    params = {k: np.ones((4, 4), np.float32) for k in names}
    shapes = {k: (4, 4) for k in names}
    x, y = np.ones((2, 4)), np.zeros(2, np.int64)
    xt, yt = NdArrayType((2, 4), float32), NdArrayType((2, 3), float32)
    src = f"def run({', '.join(names)}, x, y):\n    return ({', '.join(names)},)\n"
    ns: dict[str, Any] = {}
    exec(src, ns)                                                # noqa: S102 (our own generated source)
    run = ns["run"]

    def call() -> dict:
        ps = arguments.parameters(params, names, shapes, shapes, float32, "step", np)
        out = run(*ps, arguments.inputs(x, xt, float32, np, "step"), arguments.targets(y, yt, float32, np, "step"))
        return dict(zip(names, out))
    return call


def entry_arrays(f: Any, function: str) -> int | None:
    """The parameter (and optimizer-state) arrays ``f.<function>`` checks on entry, or None where ``f`` is not
    a compiled model (a diagram or a program is costed as its generated function alone)."""
    if not isinstance(f, CompiledModel):
        return None
    return len(f.param_names) + (len(f.state_names) if function == "step" else 0)


def _x_bytes(t: NdArrayType, itemsize: int) -> int:
    if isinstance(t.dtype, Index):
        return 2 * 8 * t.size                      # ids: their minimum and maximum read
    # a float64 batch (NumPy's default) read, written in the model's dtype, read again to check it finite
    return t.size * (8 + 2 * itemsize + 1)


def entry_bytes(f: Any, function: str) -> int:
    """Bytes the entry of ``f.<function>`` moves: ``x`` converted (from float64, NumPy's default) and checked,
    and integer labels checked and one-hot encoded (``step``, ``loss``, ``gradients``)."""
    if not isinstance(f, CompiledModel):
        return 0
    itemsize = 8 if isinstance(f.dtype, Fixed) else int(np.dtype(f.dtype.numpy_dtype()).itemsize)
    n = _x_bytes(f.x_type, itemsize)
    if function != "predict":
        y: NdArrayType = f.y_type
        rows = y.size // y.shape[-1] if y.shape else 1
        n += rows * 8 + 2 * y.size * itemsize      # labels read, rows gathered from an identity and written
    return n


def parts(ns: Sequence[int], times: Sequence[float]) -> tuple[float, float]:
    """A fixed cost and a cost per parameter array from the entry's times at ``ns`` arrays (each at least 0)."""
    per = max((times[-1] - times[0]) / (ns[-1] - ns[0]), 0.0)
    return max(times[0] - per * ns[0], 0.0), per
