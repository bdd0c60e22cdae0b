"""CPU: FLOPs and bytes of the SSA program, and a time from a calibration of this machine.

The calibration measures what the NumPy backend's building blocks achieve here, and is cached in
``~/.cache/circuitgrad/cpu-calibration.json`` (or ``$CIRCUITGRAD_CACHE``) with when and under what load it
was measured (:mod:`.calibration` says when it is measured again):

* the fixed cost of each kind of call the generated code makes (:data:`.calls.PROBES`: a ufunc, an MKL GEMM,
  a GEMV reduction, ``softmax``, ...), on tiny operands;
* the GEMM rate of :func:`circuitgrad.blas.matmul` at several sizes (FLOP/s, by product size, net of the
  call's fixed cost), on operands cycled through a pool larger than the caches, as in a step,
* the streaming rate of an elementwise NumPy operation at several sizes (bytes/s, by array size, net of a
  ufunc's fixed cost), on operands cycled through a pool larger than the caches and into a fresh result,
  as in a step,
* the rate of ``np.exp`` (evaluations/s);
* the factor a call's fixed cost takes in a straight line of calls, as a step makes them, over its
  tight-loop time (``context``), for lines that rotate through 2, 6, 14 and all the kinds of call
  (:data:`_CONTEXT_KINDS`): the more kinds a step's code rotates through, the colder each call runs;
* the entry of a compiled model's function: checking and converting its arguments, calling the generated
  function and naming its results, timed after a straight line (a fixed cost and one per parameter array,
  :mod:`.entry`).

An instruction is predicted to take ``context(kinds) · calls + max(matmul_flops / gemm(size), bytes / stream(size))
+ transcendentals / exp``, where ``calls`` is the sum of the fixed costs of the calls in the line the code
generator emits for it (:func:`.calls.expressions`): nothing for a constant folded at generation time or a
view, one ufunc for an elementwise operation, a GEMM call for a product, and so on; ``kinds`` is the
number of kinds of call in the whole program, where the factor is interpolated. A compiled model's
function adds its entry (the row ``(arguments)``): ``entry + per array · arrays + bytes / stream(bytes)``.
"""
from __future__ import annotations

import dataclasses
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
from .entry import ENTRY_SIZES, entry_arrays, entry_bytes, entry_call, parts, straight_line
from .report import Cost, program_of, table
from .work import Work, work

__all__ = ["Calibration", "calibrate", "recalibrate", "estimate", "machine"]

_GEMM_SIZES = (16, 32, 64, 128, 256, 512)
_STREAM_SIZES = (256, 4096, 65536, 1 << 20, 1 << 23)
#: the cache's format: a calibration of another format is measured again
_VERSION = 6
#: the numbers of kinds of call the straight lines that measure ``context`` rotate through (at most all)
_CONTEXT_KINDS = (2, 6, 14, 1 << 10)
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
    context: tuple[float, ...] = (1.0,)  # a straight line of calls over their tight-loop times, ...
    context_kinds: tuple[int, ...] = (1,)  # ... rotating through this many kinds of call
    entry: tuple[float, float] = (0.0, 0.0)   # seconds of a compiled function's entry: fixed, per parameter array
    conditions: Conditions | None = field(default=None, compare=False)

    def gemm(self, flops: float) -> float:
        """FLOP/s of a product of ``flops`` (log-interpolated between the measured sizes)."""
        xs = np.log([2.0 * n ** 3 for n in _GEMM_SIZES])
        return float(np.exp(np.interp(np.log(max(flops, 1.0)), xs, np.log(self.gemm_flops))))

    def stream(self, nbytes: float) -> float:
        """Bytes/s of an elementwise pass over ``nbytes`` in all."""
        xs = np.log([12.0 * n for n in _STREAM_SIZES])
        return float(np.exp(np.interp(np.log(max(nbytes, 1.0)), xs, np.log(self.stream_bytes))))

    def factor(self, distinct: int) -> float:
        """The straight-line factor of a program whose code makes ``distinct`` kinds of call (interpolated)."""
        return float(np.interp(distinct, self.context_kinds, self.context))

    def fixed(self, kinds: list[str], distinct: int | None = None) -> float:
        """Seconds of the fixed costs of these calls in a straight line of a program making ``distinct`` kinds
        of call (default: these calls' kinds; a kind not measured costs a ufunc): their tight-loop times times
        :meth:`factor`."""
        n = len(set(kinds)) if distinct is None else distinct
        return self.factor(n) * sum(self.calls.get(k, self.call_s) for k in kinds)

    def entry_seconds(self, arrays: int, nbytes: int) -> float:
        """Seconds of a compiled function's entry that checks ``arrays`` parameter arrays and moves ``nbytes``."""
        return self.entry[0] + self.entry[1] * arrays + (nbytes / self.stream(nbytes) if nbytes else 0.0)

    def seconds(self, w: Work, kinds: list[str] | None = None, distinct: int | None = None) -> float:
        """Seconds of an instruction doing ``w`` with the calls ``kinds`` (default: one ufunc) in a program
        making ``distinct`` kinds of call (:meth:`fixed`)."""
        t = max(w.matmul_flops / self.gemm(w.matmul_flops) if w.matmul_flops else 0.0,
                w.bytes / self.stream(w.bytes) if w.bytes else 0.0)
        fixed = self.call_s if kinds is None else self.fixed(kinds, distinct)
        return fixed + t + w.transcendentals / self.exp_per_s


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


def _pool(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Arrays of ``n`` float32 values, together larger than the caches (:data:`_POOL_BYTES`)."""
    return [rng.standard_normal(n, dtype=np.float32) for _ in range(max(3, _POOL_BYTES // (4 * n)))]


def _measure() -> Calibration:
    rng = np.random.default_rng(0)
    n_steps = len(PROBES) + len(_GEMM_SIZES) + len(_STREAM_SIZES) + 3
    kinds = list(PROBES)
    with progress(n_steps, "calibrating the CPU cost model", unit="measurement", file=sys.stderr) as bar:
        fixed = {}
        for kind, fn in PROBES.items():
            fixed[kind] = _per_call(fn)
            bar.update()
        bar.set_postfix(last="call costs")
        # the straight line and the entry next to the calls they are compared with, before the large pools
        counts, context = sorted({min(m, len(kinds)) for m in _CONTEXT_KINDS}), []
        for m in counts:
            # the first m kinds, in turn, as many times as it takes to make about as many lines as all of them
            rounds = max(1, len(kinds) // m)
            part = {k: PROBES[k] for k in kinds[:m]}
            t = _per_call(straight_line(part, rounds))
            context.append(max(t / (rounds * sum(fixed[k] for k in part)), 1.0))
        line = straight_line(PROBES)
        alone = _per_call(line)
        bar.set_postfix(last="straight lines")
        bar.update()
        entries = []
        for n in ENTRY_SIZES:
            enter = entry_call(n)

            def both() -> None:
                line()
                enter()
            entries.append(max(_per_call(both) - alone, 0.0))
        bar.set_postfix(last="entry")
        bar.update()
        gemm = []
        for n in _GEMM_SIZES:
            # operands cycle through a pool larger than the caches, as a step's weights and activations do
            pool = [a.reshape(n, n) for a in _pool(rng, n * n)]
            it = iter(range(1 << 62))

            def product() -> None:
                i = next(it) % (len(pool) - 1)
                blas.matmul(pool[i], pool[i + 1])
            gemm.append(2.0 * n ** 3 / _net(_per_call(product), fixed["matmul"]))
            bar.set_postfix(last=f"GEMM {n}³")
            bar.update()
        stream = []
        for n in _STREAM_SIZES:
            # operands cycle through a pool larger than the caches, as a step's many arrays do, and every
            # result is a fresh array, as the generated code's are
            pool = _pool(rng, n)
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
    return Calibration(tuple(gemm), tuple(stream), exp_rate, fixed["ufunc"], machine(), blas.name(), fixed,
                       tuple(context), tuple(counts), parts(ENTRY_SIZES, entries))


def machine() -> str:
    return f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores".replace("  ", " ")


def _parse(d: dict) -> Calibration | None:
    """A cached calibration, or None unless every rate is there, finite and positive."""
    fixed = {str(k): float(v) for k, v in d["calls"].items()}
    entry = tuple(float(v) for v in d["entry"])
    c = Calibration(tuple(float(v) for v in d["gemm_flops"]), tuple(float(v) for v in d["stream_bytes"]),
                    float(d["exp_per_s"]), float(d["call_s"]), d["machine"], d["blas"], fixed,
                    tuple(float(v) for v in d["context"]), tuple(int(v) for v in d["context_kinds"]),
                    (entry[0], entry[1]) if len(entry) == 2 else (-1.0, -1.0))
    rates = c.gemm_flops + c.stream_bytes + (c.exp_per_s, c.call_s) + c.context + tuple(fixed.values())
    ok = (len(c.gemm_flops), len(c.stream_bytes)) == (len(_GEMM_SIZES), len(_STREAM_SIZES)) and \
        set(fixed) == set(PROBES) and all(np.isfinite(r) and r > 0 for r in rates) and \
        all(np.isfinite(e) and e >= 0 for e in c.entry) and len(c.context) == len(c.context_kinds) > 0 and \
        list(c.context_kinds) == sorted(set(c.context_kinds)) and min(c.context_kinds) > 0
    return c if ok else None


def _dump(c: Calibration) -> dict:
    d = asdict(c)
    del d["conditions"]
    return d


def _key() -> dict[str, Any]:
    """What a CPU calibration depends on: a calibration with another key is measured again."""
    return {"version": _VERSION, "machine": machine(), "cpu_count": os.cpu_count(), "blas": blas.name(),
            "numpy": np.__version__, "circuitgrad": __version__}


def calibrate(refresh: bool = False) -> Calibration:
    """This machine's :class:`Calibration`: measured (a few seconds, with progress on standard error), then read
    from the cache until :mod:`.calibration` finds it stale; ``refresh=True`` measures it again now."""
    c, when = calibrated("cpu-calibration.json", _key(), _parse, _measure, _dump, "the CPU cost model", refresh)
    return dataclasses.replace(c, conditions=when)


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
    exprs = expressions(p)
    made = [calls(e) if e is not None else None for e in exprs]
    distinct = len({k for ks in made if ks for k in ks})
    for a, kinds in zip(p.instrs, made):
        w = work(p, a)
        secs = 0.0 if kinds is None else cal.seconds(w, kinds, distinct)
        lines.append((a.path, {"instructions": 1, "flops": w.flops, "matmul_flops": w.matmul_flops,
                               "bytes": w.bytes, "seconds": secs}))
    arrays = entry_arrays(f, function)
    if arrays is not None:
        nbytes = entry_bytes(f, function)
        lines.insert(0, ("(arguments)", {"instructions": 0, "flops": 0, "matmul_flops": 0, "bytes": nbytes,
                                         "seconds": cal.entry_seconds(arrays, nbytes)}))
    rows, total = table(lines, depth)
    when = f", measured {cal.conditions.date()} at {cal.conditions.describe()}" if cal.conditions else ""
    notes = [f"calibration: {cal.machine}, {cal.blas} GEMM {cal.gemm(2 * 512 ** 3) / 1e9:.1f} GFLOP/s at 512³, "
             f"stream {cal.stream(12 << 23) / 1e9:.1f} GB/s, {cal.call_s * 1e6:.2f} µs per ufunc call, "
             f"{cal.calls.get('matmul', cal.call_s) * 1e6:.2f} µs per GEMM call (×{cal.factor(distinct):.2f} in a "
             f"straight line of {distinct} kinds of call), entry {cal.entry[0] * 1e6:.1f} µs + {cal.entry[1] * 1e6:.2f} µs per parameter array{when}",
             "time per instruction: its generated line's calls × straight-line factor + max(matmul FLOPs / GEMM "
             "rate, bytes / stream rate) + exp evaluations; a compiled function adds its entry ((arguments))"]
    return Cost("cpu", cal.machine, p.name, rows, total, notes, {"calibration": cal})
