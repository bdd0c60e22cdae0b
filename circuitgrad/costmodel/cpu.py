"""CPU: FLOPs and bytes of the SSA program, and a time from a calibration of this machine.

The calibration measures what the NumPy backend's building blocks achieve here, and is cached in
``~/.cache/circuitgrad/cpu-calibration.json`` (or ``$CIRCUITGRAD_CACHE``) with when and under what load it
was measured (:mod:`.calibration` says when it is measured again):

* the fixed cost of each kind of call the generated code makes (:data:`.calls.PROBES`: a ufunc, an MKL GEMM,
  a GEMV reduction, ``softmax``, ...), on tiny operands;
* the GEMM rate of :func:`circuitgrad.blas.matmul` at several sizes (FLOP/s, by product size, net of the
  call's fixed cost),
* the streaming rate of an elementwise NumPy operation at several sizes (bytes/s, by array size, net of a
  ufunc's fixed cost), on operands cycled through a pool larger than the caches and into a fresh result,
  as in a step,
* the rate of ``np.exp`` (evaluations/s).

An instruction is predicted to take ``calls + max(matmul_flops / gemm(size), bytes / stream(size))
+ transcendentals / exp``, where ``calls`` is the sum of the fixed costs of the calls in the line the code
generator emits for it (:func:`.calls.expressions`): nothing for a constant folded at generation time or a
view, one ufunc for an elementwise operation, a GEMM call for a product, and so on.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .. import __version__, blas
from ..progress import progress
from .calibration import Conditions, calibrated
from .calls import PROBES, calls, expressions
from .report import Cost, program_of, table
from .work import Work, work

__all__ = ["Calibration", "calibrate", "recalibrate", "estimate", "machine"]

_GEMM_SIZES = (16, 32, 64, 128, 256, 512)
_STREAM_SIZES = (256, 4096, 65536, 1 << 20, 1 << 23)
#: the cache's format: a calibration of another format is measured again
_VERSION = 5
#: bytes of operands the elementwise calibration cycles through (more than the last-level cache)
_POOL_BYTES = 96 << 20
#: the smallest part of a measured time that counts as rate once a call's fixed cost is taken off
_NET = 0.05


@dataclass(frozen=True)
class Calibration:
    """Measured rates of this machine (see the module docstring)."""
    gemm_flops: tuple[float, ...]        # FLOP/s at 2·n³ for n in _GEMM_SIZES, net of a GEMM call
    stream_bytes: tuple[float, ...]      # bytes/s of ``a + b`` (3 arrays) at _STREAM_SIZES float32 elements, net
    exp_per_s: float
    call_s: float                        # one ufunc on tiny operands
    machine: str
    blas: str
    calls: dict[str, float] = field(default_factory=dict)      # seconds per call of each kind of .calls.PROBES
    conditions: Conditions | None = field(default=None, compare=False)

    def gemm(self, flops: float) -> float:
        """FLOP/s of a product of ``flops`` (log-interpolated between the measured sizes)."""
        xs = np.log([2.0 * n ** 3 for n in _GEMM_SIZES])
        return float(np.exp(np.interp(np.log(max(flops, 1.0)), xs, np.log(self.gemm_flops))))

    def stream(self, nbytes: float) -> float:
        """Bytes/s of an elementwise pass over ``nbytes`` in all."""
        xs = np.log([12.0 * n for n in _STREAM_SIZES])
        return float(np.exp(np.interp(np.log(max(nbytes, 1.0)), xs, np.log(self.stream_bytes))))

    def fixed(self, kinds: list[str]) -> float:
        """Seconds of the fixed costs of these calls (a kind not measured costs a ufunc)."""
        return sum(self.calls.get(k, self.call_s) for k in kinds)

    def seconds(self, w: Work, kinds: list[str] | None = None) -> float:
        """Seconds of an instruction doing ``w`` with the calls ``kinds`` (default: one ufunc)."""
        t = max(w.matmul_flops / self.gemm(w.matmul_flops) if w.matmul_flops else 0.0,
                w.bytes / self.stream(w.bytes) if w.bytes else 0.0)
        return (self.call_s if kinds is None else self.fixed(kinds)) + t + w.transcendentals / self.exp_per_s


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


def _net(seconds: float, fixed: float) -> float:
    """A measured time less a call's fixed cost (at least :data:`_NET` of it)."""
    return max(seconds - fixed, _NET * seconds)


def _measure() -> Calibration:
    rng = np.random.default_rng(0)
    n_steps = len(PROBES) + len(_GEMM_SIZES) + len(_STREAM_SIZES) + 1
    with progress(n_steps, "calibrating the CPU cost model", unit="measurement", file=sys.stderr) as bar:
        fixed = {}
        for kind, fn in PROBES.items():
            fixed[kind] = _per_call(fn)
            bar.update()
        bar.set_postfix(last="call costs")
        gemm = []
        for n in _GEMM_SIZES:
            a, b = rng.standard_normal((2, n, n), dtype=np.float32)
            gemm.append(2.0 * n ** 3 / _net(_per_call(lambda: blas.matmul(a, b)), fixed["matmul"]))
            bar.set_postfix(last=f"GEMM {n}³")
            bar.update()
        stream = []
        for n in _STREAM_SIZES:
            # operands cycle through a pool larger than the caches, as a step's many arrays do, and every
            # result is a fresh array, as the generated code's are
            pool = [rng.standard_normal(n, dtype=np.float32) for _ in range(max(3, _POOL_BYTES // (4 * n)))]
            it = iter(range(1 << 62))

            def add() -> None:
                i = next(it) % (len(pool) - 1)
                np.add(pool[i], pool[i + 1])
            stream.append(12.0 * n / _net(_per_call(add), fixed["ufunc"]))
            bar.set_postfix(last=f"stream {n:,} floats")
            bar.update()
        big = rng.standard_normal(1 << 20, dtype=np.float32)
        exp_rate = (1 << 20) / _net(_per_call(lambda: np.exp(big)), fixed["ufunc"])
        bar.set_postfix(last="exp")
        bar.update()
    return Calibration(tuple(gemm), tuple(stream), exp_rate, fixed["ufunc"], machine(), blas.name(), fixed)


def machine() -> str:
    return f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores".replace("  ", " ")


def _parse(d: dict) -> Calibration | None:
    """A cached calibration, or None unless every rate is there, finite and positive."""
    fixed = {str(k): float(v) for k, v in d["calls"].items()}
    c = Calibration(tuple(float(v) for v in d["gemm_flops"]), tuple(float(v) for v in d["stream_bytes"]),
                    float(d["exp_per_s"]), float(d["call_s"]), d["machine"], d["blas"], fixed)
    rates = c.gemm_flops + c.stream_bytes + (c.exp_per_s, c.call_s) + tuple(fixed.values())
    ok = (len(c.gemm_flops), len(c.stream_bytes)) == (len(_GEMM_SIZES), len(_STREAM_SIZES)) and \
        set(fixed) == set(PROBES) and all(np.isfinite(r) and r > 0 for r in rates)
    return c if ok else None


def _dump(c: Calibration) -> dict:
    d = asdict(c)
    del d["conditions"]
    return d


def _key() -> dict[str, Any]:
    """What a CPU calibration depends on: a calibration with another key is measured again."""
    return {"version": _VERSION, "machine": machine(), "cpus": os.cpu_count(), "blas": blas.name(),
            "numpy": np.__version__, "circuitgrad": __version__}


def calibrate(refresh: bool = False) -> Calibration:
    """This machine's :class:`Calibration`: measured (a few seconds, with progress on standard error), then read
    from the cache until :mod:`.calibration` finds it stale; ``refresh=True`` measures it again now."""
    c, when = calibrated("cpu-calibration.json", _key(), _parse, _measure, _dump, "the CPU cost model", refresh)
    return Calibration(c.gemm_flops, c.stream_bytes, c.exp_per_s, c.call_s, c.machine, c.blas, c.calls, when)


def recalibrate() -> Calibration:
    """Measure this machine's :class:`Calibration` again now (``circuitgrad cost --recalibrate``)."""
    return calibrate(refresh=True)


def estimate(f: Any, device: str | None = None, function: str = "step", depth: int = 2,
             calibration: Calibration | None = None):
    if device not in (None, "this", "cpu"):
        raise ValueError(f"cost: the cpu target measures this machine; device must be None, got {device!r}")
    cal = calibration or calibrate()
    p = program_of(f, function)
    lines = []
    for a, expr in zip(p.instrs, expressions(p)):
        w = work(p, a)
        kinds = calls(expr) if expr is not None else None
        secs = 0.0 if kinds is None else cal.seconds(w, kinds)
        lines.append((a.path, {"instructions": 1, "flops": w.flops, "matmul_flops": w.matmul_flops,
                               "bytes": w.bytes, "seconds": secs}))
    rows, total = table(lines, depth)
    when = f", measured {cal.conditions.date()} at {cal.conditions.describe()}" if cal.conditions else ""
    notes = [f"calibration: {cal.machine}, {cal.blas} GEMM {cal.gemm(2 * 512 ** 3) / 1e9:.1f} GFLOP/s at 512³, "
             f"stream {cal.stream(12 << 23) / 1e9:.1f} GB/s, {cal.call_s * 1e6:.2f} µs per ufunc call, "
             f"{cal.calls.get('matmul', cal.call_s) * 1e6:.2f} µs per GEMM call{when}",
             "time per instruction: its generated line's calls + max(matmul FLOPs / GEMM rate, bytes / stream rate) "
             "+ exp evaluations"]
    return Cost("cpu", cal.machine, p.name, rows, total, notes, {"calibration": cal})
