"""When a calibration of this machine is measured, kept or measured again, and what it says about it.

Every calibration (the CPU's rates, :mod:`.cpu`; the Ligero prover's, ``backends/zk/cost.py``) is stored with
the conditions it was measured under: the time, the 1-minute load average, the CPU count, and a key naming
what it depends on (its format version, the machine, the BLAS, the NumPy). A cached calibration is measured
again when :func:`reason` finds one of these (checked in this order):

* it was asked for (``refresh=True``, ``circuitgrad cost ... --recalibrate``);
* none is cached, or the file does not parse;
* its key differs: another format version, machine, CPU count, BLAS or NumPy;
* it is older than :data:`MAX_AGE_DAYS`;
* it was measured under load (a load average above :data:`BUSY` per CPU) and the machine is quieter now.

A calibration measured under load that is kept (the machine is still busy), or that was just measured under
load, is never used silently: a line on standard error says so. Measuring says what it measures and where it
is cached, with its progress (:mod:`circuitgrad.progress`), on standard error.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from ..cache import cache_dir

__all__ = ["BUSY", "MAX_AGE_DAYS", "Conditions", "now", "reason", "calibrated"]

T = TypeVar("T")

#: a calibration older than this many days is measured again
MAX_AGE_DAYS = 30
#: a machine is busy when its 1-minute load average is above this many runnable tasks per CPU
BUSY = 0.5


def _clock() -> float:
    return time.time()


def _loadavg() -> float:
    """The 1-minute load average (0 where the system has none)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return 0.0


@dataclass(frozen=True)
class Conditions:
    """When, and under what load, a calibration was (or would now be) measured."""
    measured_at: float          # seconds since the epoch
    load: float                 # 1-minute load average
    cpus: int

    @property
    def busy(self) -> bool:
        return self.load > BUSY * self.cpus

    def describe(self) -> str:
        return f"load {self.load:.1f} on {self.cpus} CPUs"

    def date(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(self.measured_at))


def now() -> Conditions:
    """The conditions a calibration measured now is measured under."""
    return Conditions(_clock(), _loadavg(), os.cpu_count() or 1)


def _stamp(d: dict) -> Conditions | None:
    try:
        c = Conditions(float(d["measured_at"]), float(d["load"]), int(d["cpus"]))
    except (KeyError, TypeError, ValueError):
        return None
    return c if c.cpus > 0 and c.load >= 0 else None


def reason(cached: Any, key: dict[str, Any], current: Conditions) -> str | None:
    """Why the cached calibration ``cached`` (a parsed JSON value, None when absent, ``...`` when unreadable)
    must be measured again now, or None to keep it."""
    if cached is None:
        return "none is cached yet"
    if cached is ... or not isinstance(cached, dict):
        return "the cached one does not parse"
    for k, v in key.items():
        if cached.get(k) != v:
            return f"the cached one has another {k} ({cached.get(k)!r}, this one {v!r})"
    then = _stamp(cached)
    if then is None:
        return "the cached one does not say when and under what load it was measured"
    age = (current.measured_at - then.measured_at) / 86400
    if age > MAX_AGE_DAYS:
        return f"the cached one is {age:.0f} days old (older than {MAX_AGE_DAYS})"
    if then.busy and not current.busy:
        return f"the cached one was measured under load ({then.describe()}); the machine is quieter now " \
               f"(load {current.load:.1f})"
    return None


#: the cache files whose calibration under load this process has already said it uses
_TOLD: set[str] = set()


def _read(path: str) -> Any:
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return ...


def calibrated(name: str, key: dict[str, Any], parse: Callable[[dict], T | None], measure: Callable[[], T],
               dump: Callable[[T], dict], what: str, refresh: bool = False, announce: bool = True
               ) -> tuple[T, Conditions]:
    """The calibration cached in ``name`` with its conditions, or a new one from ``measure()`` (which shows its
    own progress) when :func:`reason` finds one, written back with ``key`` and the conditions.

    ``parse`` returns None, or raises ``ValueError``/``KeyError``/``TypeError``, for a malformed value;
    ``what`` names the calibration in messages ("the CPU cost model"); ``announce=False`` leaves the line that
    says what is measured, and where it is cached, to ``measure``."""
    path = os.path.join(cache_dir(), name)
    current = now()
    d = _read(path)
    why = "asked to (--recalibrate)" if refresh else reason(d, key, current)
    if why is None:
        try:
            value = parse(d)
        except (ValueError, KeyError, TypeError, AttributeError):
            value = None
        if value is not None:
            then = _stamp(d)
            if then.busy and path not in _TOLD:          # once per process: a loop of cg.cost calls says it once
                _TOLD.add(path)
                _say(f"{what}: using the calibration measured {then.date()} under load ({then.describe()}); "
                     f"its times may be too long. It is measured again once the machine is quieter, or now with "
                     f"--recalibrate")
            return value, then
        why = "the cached one does not parse"
    if announce:
        _say(f"calibrating {what} on this machine ({why}); cached in {path}")
    value = measure()
    with open(path, "w") as fh:
        json.dump({**dump(value), **key, "measured_at": current.measured_at, "load": current.load,
                   "cpus": current.cpus}, fh)
    if current.busy:
        _say(f"{what} was calibrated under load ({current.describe()}); its times may be too long. It is "
             f"measured again once the machine is quieter, or now with --recalibrate")
    return value, current


def _say(line: str) -> None:
    print(f"circuitgrad: {line}", file=sys.stderr, flush=True)
