"""glibc's allocator, set for a compiled step's large short-lived arrays.

A NumPy training step allocates and frees hundreds of arrays of 0.1–2 MiB
per call. With glibc's defaults (an mmap threshold that starts at 128 KiB
and a heap trimmed once 2× that lies free at its top) most of them are
fresh pages: every step page-faults its working set back in. Measured on
the tinygpt benchmark GPT (``bench/gpt_cpu.py``'s model, 2 cores): 45.5 ms
a step with the defaults, 34.5 ms with the setting below (medians of 4
processes each).

:func:`tune` sets glibc's mmap threshold to 32 MiB (the largest it
accepts) and its trim threshold to 64 MiB, once per process: arrays below
32 MiB come from the heap and up to 64 MiB of freed heap is kept for the
next step instead of being handed back to the kernel. This is a process-wide
setting (it is what a caching allocator does); ``CIRCUITGRAD_MALLOC=system``
leaves the allocator alone. Without glibc it does nothing.

:func:`trim` hands the heap's free pages back to the kernel (``malloc_trim``). Building a large circuit
frees gigabytes of mid-sized temporaries that the heap keeps (on tinygpt's step 4.5 of 8.2 GiB); the ZK
compiler and prover call it between phases, so that a phase's peak is its own arrays, not the heap the
previous phases left behind.
"""
from __future__ import annotations

import ctypes
import functools
import os
import time

__all__ = ["tune", "trim", "Trimmer", "free_heap", "TRIM_AT_LEAST"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20


def tune() -> str:
    """Set glibc's thresholds (see the module) once; returns what was done.

    ``"tuned"``, ``"system"`` (``CIRCUITGRAD_MALLOC=system``) or ``"unavailable"`` (no glibc).
    """
    choice = os.environ.get("CIRCUITGRAD_MALLOC", "tuned").lower()
    if choice not in ("tuned", "system"):
        raise ValueError(f"CIRCUITGRAD_MALLOC must be tuned or system, got {choice!r}")
    return _tune() if choice == "tuned" else "system"


@functools.cache
def _tune() -> str:
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):       # not glibc
        return "unavailable"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    return "tuned" if ok else "unavailable"


@functools.cache
def _malloc_trim():
    try:
        f = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):       # not glibc
        return None
    f.argtypes, f.restype = [ctypes.c_size_t], ctypes.c_int
    return f


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.cache
def _mallinfo2():
    try:
        f = ctypes.CDLL("libc.so.6").mallinfo2       # glibc 2.33 and later
    except (OSError, AttributeError):
        return None
    f.argtypes, f.restype = [], _Mallinfo2
    return f


def free_heap() -> int | None:
    """Bytes the heap holds free (glibc's ``mallinfo2().fordblks``, every arena), or None where unknown."""
    f = _mallinfo2()
    return None if f is None else int(f().fordblks)


#: :func:`trim` with ``at_least`` left alone a heap with less free than this: handing pages back costs the page
#: faults of taking them again (GPT d=64's proof took 5% longer trimmed at every phase)
TRIM_AT_LEAST = 256 << 20


def trim(at_least: int = 0) -> bool:
    """Return the heap's free pages to the kernel (glibc's ``malloc_trim(0)``), when it holds at least
    ``at_least`` bytes free (where that is known); False where nothing was done (no glibc,
    ``CIRCUITGRAD_MALLOC=system``, or too little free)."""
    f = _malloc_trim() if os.environ.get("CIRCUITGRAD_MALLOC", "tuned").lower() != "system" else None
    if f is None:
        return False
    if at_least:
        free = free_heap()
        if free is not None and free < at_least:
            return False
    f(0)
    return True


class Trimmer:
    """:func:`trim` (of at least :data:`TRIM_AT_LEAST` free) at most once every ``every`` seconds, for the long
    loops whose blocks of mid-sized temporaries fragment the heap (a pass of the prover over tinygpt's rows kept
    1.9 GiB of freed heap)."""

    def __init__(self, every: float = 5.0):
        self.every, self._clock = every, time.monotonic
        self.last = self._clock()

    def __call__(self) -> None:
        now = self._clock()
        if now - self.last >= self.every:
            trim(TRIM_AT_LEAST)
            self.last = self._clock()
