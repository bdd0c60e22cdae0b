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
