"""CPU: FLOPs and bytes of the SSA program, and a roofline time from a one-off calibration.

The calibration measures, once per machine (cached in ``~/.cache/circuitgrad/cpu-calibration.json``,
or ``$CIRCUITGRAD_CACHE``), what the NumPy backend's building blocks achieve here:

* the GEMM rate of :func:`circuitgrad.blas.matmul` at several sizes (FLOP/s, by product size),
* the streaming rate of an elementwise NumPy operation at several sizes (bytes/s, by array size),
  on operands cycled through a pool larger than the caches and into a fresh result, as in a step,
* the rate of ``np.exp`` (evaluations/s) and the fixed cost of one NumPy call (seconds).

An instruction is predicted to take ``call + max(matmul_flops / gemm(size), bytes / stream(size))
+ transcendentals / exp``: the roofline of the two resources it uses, plus the interpreter's call.
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import blas
from ..cache import cached
from .report import Cost, program_of, table
from .work import Work, work

__all__ = ["Calibration", "calibrate", "estimate", "machine"]

_GEMM_SIZES = (16, 32, 64, 128, 256, 512)
_STREAM_SIZES = (256, 4096, 65536, 1 << 20, 1 << 23)
_VERSION = 4
#: bytes of operands the elementwise calibration cycles through (more than the last-level cache)
_POOL_BYTES = 96 << 20


@dataclass(frozen=True)
class Calibration:
    """Measured rates of this machine (see the module docstring)."""
    gemm_flops: tuple[float, ...]        # FLOP/s at 2·n³ for n in _GEMM_SIZES
    stream_bytes: tuple[float, ...]      # bytes/s of ``a + b`` (3 arrays) at _STREAM_SIZES float32 elements
    exp_per_s: float
    call_s: float
    machine: str
    blas: str

    def gemm(self, flops: float) -> float:
        """FLOP/s of a product of ``flops`` (log-interpolated between the measured sizes)."""
        xs = np.log([2.0 * n ** 3 for n in _GEMM_SIZES])
        return float(np.exp(np.interp(np.log(max(flops, 1.0)), xs, np.log(self.gemm_flops))))

    def stream(self, nbytes: float) -> float:
        """Bytes/s of an elementwise pass over ``nbytes`` in all."""
        xs = np.log([12.0 * n for n in _STREAM_SIZES])
        return float(np.exp(np.interp(np.log(max(nbytes, 1.0)), xs, np.log(self.stream_bytes))))

    def seconds(self, w: Work) -> float:
        t = max(w.matmul_flops / self.gemm(w.matmul_flops) if w.matmul_flops else 0.0,
                w.bytes / self.stream(w.bytes) if w.bytes else 0.0)
        return self.call_s + t + w.transcendentals / self.exp_per_s


def _per_call(fn, batch_s: float = 0.02, repeats: int = 7) -> float:
    """Seconds per call of ``fn``: calls batched to about ``batch_s`` each, median of ``repeats`` batches."""
    fn()
    t0 = time.perf_counter()
    fn()
    k = max(1, int(batch_s / max(time.perf_counter() - t0, 1e-7)))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        ts.append((time.perf_counter() - t0) / k)
    return statistics.median(ts)


def _measure() -> Calibration:
    rng = np.random.default_rng(0)
    gemm = []
    for n in _GEMM_SIZES:
        a, b = rng.standard_normal((2, n, n), dtype=np.float32)
        gemm.append(2.0 * n ** 3 / _per_call(lambda: blas.matmul(a, b)))
    stream = []
    for n in _STREAM_SIZES:
        # operands cycle through a pool larger than the caches, as a step's many arrays do, and every
        # result is a fresh array, as the generated code's are
        pool = [rng.standard_normal(n, dtype=np.float32) for _ in range(max(3, _POOL_BYTES // (4 * n)))]
        it = iter(range(1 << 62))

        def add() -> None:
            i = next(it) % (len(pool) - 1)
            np.add(pool[i], pool[i + 1])
        stream.append(12.0 * n / _per_call(add))
    big = rng.standard_normal(1 << 20, dtype=np.float32)
    exp_rate = (1 << 20) / _per_call(lambda: np.exp(big))
    tiny = np.ones(4, np.float32)
    call = _per_call(lambda: np.add(tiny, tiny))
    return Calibration(tuple(gemm), tuple(stream), exp_rate, call, machine(), blas.name())


def machine() -> str:
    return f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores".replace("  ", " ")


def _parse(d: dict) -> Calibration | None:
    """A cached calibration, or None unless every rate is there, finite and positive."""
    c = Calibration(tuple(float(v) for v in d["gemm_flops"]), tuple(float(v) for v in d["stream_bytes"]),
                    float(d["exp_per_s"]), float(d["call_s"]), d["machine"], d["blas"])
    rates = c.gemm_flops + c.stream_bytes + (c.exp_per_s, c.call_s)
    ok = (len(c.gemm_flops), len(c.stream_bytes)) == (len(_GEMM_SIZES), len(_STREAM_SIZES)) and \
        all(np.isfinite(r) and r > 0 for r in rates)
    return c if ok else None


def calibrate(refresh: bool = False) -> Calibration:
    """This machine's :class:`Calibration`: measured once (a few seconds), then read from the cache."""
    key = {"version": _VERSION, "machine": machine(), "blas": blas.name()}
    return cached("cpu-calibration.json", key, _parse, _measure, asdict, refresh)


def estimate(f: Any, device: str | None = None, function: str = "step", depth: int = 2,
             calibration: Calibration | None = None):
    if device not in (None, "this", "cpu"):
        raise ValueError(f"cost: the cpu target measures this machine; device must be None, got {device!r}")
    cal = calibration or calibrate()
    p = program_of(f, function)
    lines = []
    for a in p.instrs:
        w = work(p, a)
        lines.append((a.path, {"instructions": 1, "flops": w.flops, "matmul_flops": w.matmul_flops,
                               "bytes": w.bytes, "seconds": cal.seconds(w)}))
    rows, total = table(lines, depth)
    notes = [f"calibration: {cal.machine}, {cal.blas} GEMM {cal.gemm(2 * 512 ** 3) / 1e9:.1f} GFLOP/s at 512³, "
             f"stream {cal.stream(12 << 23) / 1e9:.1f} GB/s, {cal.call_s * 1e6:.2f} µs per call",
             "time per instruction: call + max(matmul FLOPs / GEMM rate, bytes / stream rate) + exp evaluations"]
    return Cost("cpu", cal.machine, p.name, rows, total, notes, {"calibration": cal})
