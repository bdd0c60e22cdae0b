"""circuitgrad.allocator: large step arrays come from the heap, not from fresh mmaps."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from circuitgrad import allocator

# In a fresh process: tune (or not), then count glibc's mmapped blocks (mallinfo's hblks)
# around the allocation of a 4 MiB array, far above glibc's initial 128 KiB mmap threshold.
_PROBE = """
import ctypes, numpy as np
from circuitgrad import allocator
print(allocator.tune())
class MallInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("arena ordblks smblks hblks hblkhd usmblks fsmblks "
                                            "uordblks fordblks keepcost").split()]
mallinfo = ctypes.CDLL("libc.so.6").mallinfo
mallinfo.restype = MallInfo
before = mallinfo().hblks
a = np.ones(1 << 20, dtype=np.float32)
print(mallinfo().hblks - before)
"""


def _probe(setting: str) -> list[str]:
    env = dict(os.environ, CIRCUITGRAD_MALLOC=setting)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_process_serves_large_arrays_from_the_heap():
    assert _probe("system") == ["system", "1"]          # glibc's default: a fresh mmap
    assert _probe("tuned") == ["tuned", "0"]


def test_bad_setting_is_refused(monkeypatch):
    monkeypatch.setenv("CIRCUITGRAD_MALLOC", "jemalloc")
    with pytest.raises(ValueError) as e:
        allocator.tune()
    assert str(e.value) == "CIRCUITGRAD_MALLOC must be tuned or system, got 'jemalloc'"


def test_compiling_a_numpy_step_tunes_the_allocator(monkeypatch):
    import circuitgrad as cg
    from circuitgrad import nn
    calls = []
    monkeypatch.setattr(allocator, "tune", lambda: calls.append(1) or "tuned")
    cg.compile_model(nn.mlp(4, [3, 2]), loss=nn.mse, optimizer=nn.sgd(0.1)).fn("step")
    assert calls


# In a fresh process: fragment the heap (free every other 1 MiB block), then trim only above a threshold.
_TRIM = """
import os
import numpy as np
from circuitgrad import allocator
allocator.tune()
blocks = [np.ones(1 << 17) for _ in range(400)]          # 400 blocks of 1 MiB from the heap
del blocks[::2]
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
free, before = allocator.free_heap(), rss()
print(free >= 150 << 20, allocator.trim(1 << 40), rss() > before - (50 << 20), allocator.trim(100 << 20),
      rss() < before - (150 << 20))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and mallinfo2")
def test_trim_hands_back_a_fragmented_heap_only_above_its_threshold():
    out = subprocess.run([sys.executable, "-c", _TRIM], env=dict(os.environ, CIRCUITGRAD_MALLOC="tuned"),
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "True", "True", "True"]


def test_the_trimmer_trims_at_most_once_a_period(monkeypatch):
    calls = []
    monkeypatch.setattr(allocator, "trim", lambda at_least=0: calls.append(at_least) or True)
    now = [100.0]
    t = allocator.Trimmer(every=5.0)
    t._clock, t.last = (lambda: now[0]), now[0]
    for dt in (1.0, 3.0, 2.0, 1.0, 5.0):
        now[0] += dt
        t()
    assert calls == [allocator.TRIM_AT_LEAST, allocator.TRIM_AT_LEAST]
