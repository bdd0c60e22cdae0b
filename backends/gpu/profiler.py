"""Where a GPU function's time goes: every launch timed on the stream, beside the cost model's prediction.

    prof = gpu.profile(step.fn("step").compiled, *args)      # backend="cupy" (or "cupy-emulated")
    print(prof.table())

The function's source is generated again with probes (:func:`~.runtime.generate`, ``probe=True``):
a CUDA event is recorded on entry and after each launch, so the time between two events is the
launch's time on the stream, including any wait for the host to issue it. A step bound by the host
shows as launches that take about the same few microseconds whatever their size; ``floor_s``
(the median time of the launches whose roofline time is under a microsecond) measures that cost,
which the cost model predicts from ``cost.ISSUE_S``. ``wall_s`` is the unprobed call, timed
on the host with a synchronize after each call; the event records add a little host time, so
``span_s`` (first to last event) may exceed it slightly when the host is the bottleneck.

With NumPy arrays (``backend="cupy-emulated"``) the same code runs with host timestamps instead of
events: this is how the tests check it without a GPU. Arguments are copied before each call, so a
``donate=True`` step does not overwrite the caller's arrays.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from circuitgrad.codegen import ident
from circuitgrad.costmodel.report import group

from .cost import DEVICES, ISSUE_S, launch_cost

from .runtime import GpuFunction, generate

__all__ = ["Launch", "Profile", "profile"]


@dataclass
class Launch:
    """One launch of the plan: what it runs, its predicted and its measured (median) seconds."""
    index: int                 # the plan step
    kind: str                  # fused, matmul (cuBLAS), reduce, rowwise, gather, copy (generated kernels)
    what: str                  # kernel name and the primitives it runs, or the cuBLAS call
    path: str                  # the definition it comes from (``mlp/dense0``)
    bytes: int
    flops: int
    predicted_s: float
    roofline_s: float          # the device's work alone (bytes or FLOPs at the datasheet rates)
    measured_s: float = 0.0


@dataclass
class Profile:
    device: str
    function: str
    launches: list[Launch]
    wall_s: float              # median host time of an unprobed call, synchronized
    span_s: float              # median time from the entry event to the last launch's event
    repeats: int
    issue_s: dict              # the host's cost of issuing a launch that the prediction assumes, by kind
    samples: dict = field(default_factory=dict, repr=False)   # launch index -> its time in each call
    spans: list = field(default_factory=list, repr=False)     # each call's event span (the samples' sum)

    @property
    def measured_s(self) -> float:
        return sum(x.measured_s for x in self.launches)

    @property
    def predicted_s(self) -> float:
        return sum(x.predicted_s for x in self.launches)

    @property
    def floor_s(self) -> float | None:
        """Median time of the launches predicted to need under a microsecond of work (the launch cost)."""
        small = [x.measured_s for x in self.launches if x.roofline_s < 1e-6]
        return statistics.median(small) if small else None

    def by(self, key: str = "kind", depth: int = 2) -> list[dict]:
        """Launches summed by ``kind`` or by definition (``path`` cut to ``depth`` names, as the cost model's
        table groups them), slowest first."""
        if key not in ("kind", "path"):
            raise ValueError(f"profile: group by 'kind' or 'path', not {key!r}")
        groups: dict[str, dict] = {}
        for x in self.launches:
            k = x.kind if key == "kind" else x.path if x.path.startswith("(") else group(x.path, depth)
            g = groups.setdefault(k, {key: k, "launches": 0, "bytes": 0, "flops": 0,
                                      "predicted_s": 0.0, "measured_s": 0.0})
            g["launches"] += 1
            for f in ("bytes", "flops", "predicted_s", "measured_s"):
                g[f] += getattr(x, f)
        return sorted(groups.values(), key=lambda g: -g["measured_s"])

    def table(self, depth: int = 2, top: int = 10) -> str:
        """Plain-text report: totals, by kind, by definition, and the slowest launches."""
        def us(s: float) -> str:
            return f"{s * 1e6:,.1f}"

        def fmt(rows: list[list[str]], head: list[str]) -> list[str]:
            w = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
            line = lambda r: "  ".join(str(c).ljust(w[i]) if i == 0 else str(c).rjust(w[i])  # noqa: E731
                                       for i, c in enumerate(r))
            return [line(head), line(["-" * n for n in w]), *map(line, rows)]
        out = [f"{self.function} on {self.device}: {len(self.launches)} launches, median of {self.repeats}",
               f"  wall (unprobed, synchronized) {us(self.wall_s)} µs; event span {us(self.span_s)} µs; "
               f"sum of launches {us(self.measured_s)} µs; predicted {us(self.predicted_s)} µs",
               "  issue cost assumed " + ", ".join(f"{k} {us(v)} µs" for k, v in self.issue_s.items())
               + (f"; measured floor {us(self.floor_s)} µs a launch" if self.floor_s is not None else ""), ""]
        head = ["", "launches", "MB", "predicted µs", "measured µs", "measured / predicted"]
        for key in ("kind", "path"):
            rows = [[g[key], g["launches"], f"{g['bytes'] / 1e6:.2f}", us(g["predicted_s"]), us(g["measured_s"]),
                     f"{g['measured_s'] / g['predicted_s']:.2f}" if g["predicted_s"] else "-"]
                    for g in self.by(key, depth)]
            out += fmt(rows, [key if key == "kind" else "definition", *head[1:]]) + [""]
        slow = sorted(self.launches, key=lambda x: -x.measured_s)[:top]
        rows = [[x.index, x.kind, x.what[:60], x.path[:40], us(x.predicted_s), us(x.measured_s)] for x in slow]
        out += fmt(rows, ["step", "kind", "what", "definition", "predicted µs", "measured µs"])
        return "\n".join(out)

    def to_json(self) -> dict:
        return {"device": self.device, "function": self.function, "repeats": self.repeats,
                "wall_s": self.wall_s, "span_s": self.span_s, "issue_s_assumed": self.issue_s,
                "floor_s": self.floor_s, "measured_s": self.measured_s, "predicted_s": self.predicted_s,
                "by_kind": self.by("kind"), "by_definition": self.by("path"),
                "launches": [vars(x) for x in self.launches]}


def _what(f: GpuFunction, k: int) -> str:
    s = f.plan.steps[k]
    if k in f.kernels:
        return f"{f.kernels[k].name}: {' + '.join(f.kernels[k].ops)}"
    op = s.instrs[0].op.name if s.instrs else s.kind
    return f"cuBLAS {op}" if s.kind == "matmul" else op          # every other launch is a generated kernel


def _probed(f: GpuFunction, probe: Callable[[int], None]) -> Callable:
    """The function generated again with a ``_probe`` call on entry and after each launch."""
    src = generate(f.plan, dict(f.kernels), f.arg_names, f.name, f.donate_pairs, probe=True)
    ns = dict(f.namespace, _probe=probe)
    exec(compile(src, f"<circuitgrad-gpu-probed:{f.name}>", "exec"), ns)
    return ns[ident(f.name)]


def profile(f: GpuFunction, *args: Any, repeats: int = 10, warmup: int = 3, device: str = "h100",
            tf32: bool = False) -> Profile:
    """Time each launch of ``f`` on ``args`` (median of ``repeats`` after ``warmup`` calls).

    ``device`` names the cost-model profile the predictions use (``circuitgrad.backends.gpu.cost.DEVICES``), at
    ``f``'s own precision (``tf32=True``: as if its float32 products were TF32).
    """
    if not isinstance(f, GpuFunction):
        raise TypeError(f"profile: expected a GpuFunction (step.fn('step').compiled of a backend='cupy' "
                        f"model), got {type(f).__name__}")
    if len(args) != len(f.arg_names):
        raise TypeError(f"profile: {f.name} takes {len(f.arg_names)} arguments ({', '.join(f.arg_names)}), "
                        f"got {len(args)}")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"profile: repeats must be 1 or more and warmup 0 or more, got {repeats} and {warmup}")
    if device not in DEVICES:
        raise ValueError(f"profile: unknown device {device!r}; choose one of {', '.join(DEVICES)}")
    dev = DEVICES[device]
    xp = f.namespace["xp"]
    on_gpu = xp.__name__ == "cupy"
    marks: list[tuple[int, Any]] = []

    if on_gpu:
        def probe(k: int) -> None:
            e = xp.cuda.Event()
            e.record()
            marks.append((k, e))
        sync = xp.cuda.Device().synchronize

        def elapsed(a, b) -> float:
            return xp.cuda.get_elapsed_time(a, b) / 1e3
        name = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
    else:
        def probe(k: int) -> None:
            marks.append((k, time.perf_counter()))

        def sync() -> None:
            return None

        def elapsed(a, b) -> float:
            return b - a
        name = "host (emulated kernels)"
    probed = _probed(f, probe)
    fresh = lambda: [xp.array(a, copy=True) for a in args]  # noqa: E731

    def call(fn: Callable) -> float:
        inputs = fresh()
        sync()
        t = time.perf_counter()
        fn(*inputs)
        sync()
        return time.perf_counter() - t

    for _ in range(warmup):
        call(f.fn)
        call(probed)
        marks.clear()
    walls, spans, samples = [], [], {}
    for _ in range(repeats):
        walls.append(call(f.fn))
        marks.clear()
        call(probed)
        spans.append(elapsed(marks[0][1], marks[-1][1]))
        for (_, a), (k, b) in zip(marks, marks[1:]):
            samples.setdefault(k, []).append(elapsed(a, b))
    p, pl = f.program, f.plan
    launches = []
    for k, s in enumerate(pl.steps):
        if s.kind in ("view", "const"):
            continue
        c = launch_cost(p, pl, s, dev, "tf32" if tf32 else f.precision)
        launches.append(Launch(k, s.kind, _what(f, k), s.instrs[0].path if s.instrs else "", c["bytes"],
                               c["flops"], c["seconds"], c["roofline_s"], statistics.median(samples[k])))
    assert len(launches) == f.launches == len(samples), (len(launches), f.launches, len(samples))
    return Profile(name, f.name, launches, statistics.median(walls), statistics.median(spans), repeats,
                   dict(ISSUE_S), samples, spans)

