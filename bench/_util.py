"""Timing helpers shared by the benchmarks: medians of repeated runs, tables."""
from __future__ import annotations

import platform
import statistics
import time
from typing import Callable, Sequence


def median_time(fn: Callable[[], object], repeats: int = 5, inner: int = 1, warmup: int = 1) -> float:
    """Median over ``repeats`` of the mean time of ``inner`` calls (seconds)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t) / inner)
    return statistics.median(times)


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int = 5, inner: int = 1,
                        warmup: int = 2) -> dict[str, float]:
    """Median per-call time of each function, timed round robin (one repeat each in turn)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            for _ in range(inner):
                fn()
            times[k].append((time.perf_counter() - t) / inner)
    return {k: statistics.median(v) for k, v in times.items()}


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (pastes into docs/BENCHMARKS.md)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in cells[1:]])


def machine() -> str:
    import os
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
