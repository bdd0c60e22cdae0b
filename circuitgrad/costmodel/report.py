"""Cost tables: a row per definition and the total, as every target's cost model reports them.

Each target's ``estimate`` (``circuitgrad.costmodel.cpu``, ``circuitgrad.backends.<target>.cost``) builds
its table with :func:`table` from ``(definition path, metrics)`` pairs of the program it runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..compile import CompiledModel
from ..diagram import Diagram
from ..primitives import path_of
from ..schedule import Program, schedule

__all__ = ["Cost", "Row", "METRICS", "group", "table", "program_of", "trace_order", "in_model_order"]

#: every metric a row may carry, with its table heading (targets fill the ones that apply)
METRICS = {
    "instructions": "instrs", "kernels": "kernels", "micro_ops": "µops",
    "flops": "FLOPs", "matmul_flops": "matmul FLOPs", "tensor_core_flops": "tensor-core FLOPs",
    "cuda_core_flops": "CUDA-core FLOPs", "bytes": "bytes", "cycles": "cycles", "words": "memory words",
    "lut4": "LUT4 (est.)", "dsp": "DSP (est.)", "bram": "BRAM (est.)",
    "constraints": "constraints", "lookups": "lookups", "seconds": "predicted s",
}


@dataclass
class Row:
    """The cost of one definition (``gpt/block0``) or of the whole function (``total``)."""
    name: str
    values: dict[str, float] = field(default_factory=dict)

    def __getattr__(self, k: str) -> Any:
        try:
            return self.__dict__["values"][k]
        except KeyError:
            raise AttributeError(k) from None

    def add(self, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.values[k] = self.values.get(k, 0) + v


@dataclass
class Cost:
    """A cost table: rows by definition, the total, and what the prediction assumed (``notes``)."""
    target: str
    device: str
    function: str
    rows: list[Row]
    total: Row
    notes: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def _get(self, k: str) -> Any:
        if k not in self.total.values:
            raise AttributeError(f"cost: {k} does not apply to target {self.target!r} "
                                 f"(it has {', '.join(self.total.values)})")
        v = self.total.values[k]
        return float(v) if k == "seconds" else int(v)

    flops = property(lambda self: self._get("flops"))
    matmul_flops = property(lambda self: self._get("matmul_flops"))
    bytes = property(lambda self: self._get("bytes"))
    seconds = property(lambda self: self._get("seconds"))
    constraints = property(lambda self: self._get("constraints"))
    lut4 = property(lambda self: self._get("lut4"))
    lookups = property(lambda self: self._get("lookups"))
    cycles = property(lambda self: self._get("cycles"))

    def __str__(self) -> str:
        keys = [k for k in METRICS if k in self.total.values]
        head = ["definition"] + [METRICS[k] for k in keys]
        body = [[r.name] + [_fmt(k, r.values[k]) if k in r.values else "" for k in keys] for r in self.rows + [self.total]]
        w = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head))]
        line = lambda cells: "  ".join(str(c).ljust(w[0]) if i == 0 else str(c).rjust(w[i])  # noqa: E731
                                       for i, c in enumerate(cells))
        out = [f"{self.function} on {self.target} ({self.device})", line(head), line(["-" * x for x in w])]
        out += [line(b) for b in body[:-1]] + [line(["-" * x for x in w]), line(body[-1])]
        return "\n".join(out + [f"* {n}" for n in self.notes])


def _fmt(k: str, v: float) -> str:
    if k == "seconds":
        return f"{v * 1e3:.3f} ms" if v < 1 else f"{v:.2f} s"
    v = int(v)
    if abs(v) >= 10 ** 6:
        return f"{v / 1e6:,.2f}M"
    return f"{v:,}"


def group(name: str, depth: int) -> str:
    """The definition a path is counted under: its first ``depth`` segments (``""`` → ``(plumbing)``)."""
    if not name:
        return "(plumbing)"
    return "/".join(name.split("/")[:depth])


def table(lines: Sequence[tuple[str, dict[str, float]]], depth: int) -> tuple[list[Row], Row]:
    """Rows by definition (first appearance order) and their total."""
    rows: dict[str, Row] = {}
    total = Row("total")
    for path, metrics in lines:
        k = path if path.startswith("(") else group(path, depth)
        rows.setdefault(k, Row(k)).add(metrics)
        total.add(metrics)
    return list(rows.values()), total


def program_of(f: Any, function: str) -> Program:
    """The SSA program of a compiled model's function, of a diagram (its forward map), or a program."""
    if isinstance(f, CompiledModel):
        if function not in f.diagrams:
            raise ValueError(f"cost: unknown function {function!r}; choose one of {sorted(f.diagrams)}")
        return f.fn(function).program
    if isinstance(f, Program):
        return f
    if isinstance(f, Diagram):
        return schedule(f)
    raise TypeError(f"cost: expected a compiled model (cg.compile_model), a Diagram or a Program, "
                    f"got {type(f).__name__}")


def trace_order(f: Any, function: str = "step") -> list[str]:
    """Definition paths in the order their operations were traced (the order of the diagram's operations:
    the model's layers first, then the loss, the reverse pass and the optimizer); ``[]`` for a bare program."""
    if isinstance(f, CompiledModel):
        f = f.diagrams.get(function)
    if not isinstance(f, Diagram):
        return []
    return list(dict.fromkeys(path_of(x) for x in f.H.x.table.tolist()))


def in_model_order(rows: list[Row], order: Sequence[str], depth: int) -> list[Row]:
    """``rows`` (in first-appearance order) sorted by where their definition first appears in ``order``
    (:func:`trace_order`); a row with no place there (``(inputs)``, ``(plumbing)``) stays after the row it
    followed."""
    rank: dict[str, int] = {}
    for path in order:
        if path:
            rank.setdefault(group(path, depth), len(rank))
    keys, last = [], -1.0
    for i, r in enumerate(rows):
        k = rank.get(r.name)
        last = float(k) if k is not None else last
        keys.append((last if k is not None else last + 0.5, i))
    return [r for _, r in sorted(zip(keys, rows), key=lambda kr: kr[0])]
