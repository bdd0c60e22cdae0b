"""Small programs for the GPU plan's tests: a ``SumTo`` of a traced value, a scheduled program, and plans made
without the epilogue pass."""
from __future__ import annotations

import sys

import circuitgrad as cg
from circuitgrad import primitives as P


def sum_to(a, shape):
    """``SumTo`` of traced value ``a`` to ``shape``."""
    return a.builder.apply(P.SumTo(a.type, a.type.with_shape(shape)), a)[0]


def program(fn, types):
    """``fn`` traced on ``types`` and scheduled."""
    return cg.schedule(cg.trace(fn, list(types), name="f"))


def without_epilogues(m) -> None:
    """Plans made without ``fuse_epilogues`` (``m``: a ``pytest.MonkeyPatch``): each sum and what reads it apart."""
    m.setattr(sys.modules["circuitgrad.backends.gpu.plan"], "fuse_epilogues", lambda p, updates=None: p.steps)
