"""``backends/fpga/units.py`` alone: every elementwise unit, and the pipelined exp unit, computes what the
microcode's NumPy model computes (``microcode.elementwise_model``), on the word's edges and random words."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth")

import circuitgrad as cg  # noqa: E402
from circuitgrad.backends.fpga.microcode import elementwise_model  # noqa: E402
from circuitgrad.backends.fpga.kinds import FACTS, Kind  # noqa: E402
from circuitgrad.backends.fpga.units import EW_WIDTH, elementwise, exp_unit, sigmoid_unit  # noqa: E402

Q = cg.fixed(16, 8)
#: the kinds with a combinational unit (``units.elementwise``)
ELEMENTWISE = tuple(k for k in Kind if FACTS[k].combinational)


def _words(rng, n=60):
    edges = [0, 1, -1, Q.one, -Q.one, Q.hi, Q.lo, Q.hi // 2, Q.lo // 2]
    return np.concatenate([edges, rng.integers(Q.lo, Q.hi + 1, n)]).astype(np.int64)


def _domain(kind, a):
    return a > 0 if kind == "log" else np.ones(len(a), bool)              # log's unit is defined for a > 0


def _simulate(kind, a, b, piped=False):
    """The unit's results on ``a``, ``b``; ``piped``: the sequencer's pipelined unit, fed a pair every cycle."""
    from amaranth import Module, Signal, signed
    from amaranth.sim import Simulator
    m = Module()
    sa, sb = Signal(signed(Q.width)), Signal(signed(Q.width))
    if kind == "exp":
        out = exp_unit(m, sa, sb, Q)
    elif piped:
        out = sigmoid_unit(m, sa, Q, tanh=kind == "tanh")
    else:
        out = elementwise(m, kind, sa, sb, Q, "u")
    clocked, got = kind == "exp" or piped, []

    async def bench(ctx):
        for i in range(len(a) + (FACTS[kind].latency if clocked else 0)):
            if i < len(a):
                ctx.set(sa, int(a[i]))
                ctx.set(sb, int(b[i]))
            if clocked:                                # back to back: one pair in, one result out, per cycle
                await ctx.tick()
                if i >= FACTS[kind].latency - 1 and len(got) < len(a):
                    got.append(ctx.get(out))
            else:
                await ctx.delay(1e-9)
                got.append(ctx.get(out))
    sim = Simulator(m)
    if clocked:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return np.array(got, dtype=np.int64)


@pytest.mark.parametrize("kind, piped", [(k, False) for k in ELEMENTWISE] + [("exp", True), ("sigmoid", True),
                                                                            ("tanh", True)])
def test_unit_agrees_with_the_model(kind, piped):
    rng = np.random.default_rng(sorted(ELEMENTWISE + ("exp",)).index(kind))
    a = _words(rng)
    b = np.roll(a, 3) if kind != "exp" else rng.integers(0, Q.hi + 1, len(a))   # exp: a − b of softmax, ≤ 0 mostly
    keep = _domain(kind, a)
    a, b = a[keep], b[keep]
    want = elementwise_model(kind, a, b, Q)
    got = _simulate(kind, a, b, piped)
    fits = (want >= Q.lo) & (want <= Q.hi)
    np.testing.assert_array_equal(got[fits], want[fits])
    # a result the word cannot hold (a sum past the word, exp of a large z) stays outside it in the unit's wider
    # output (EW_WIDTH bits), so that the range check flags it as the interpreter does
    out = got[~fits]
    assert np.all((out < Q.lo) | (out > Q.hi)) and np.all(np.abs(got) < 1 << (EW_WIDTH(Q) - 1))
    assert kind not in ("add", "exp") or (~fits).any()          # the table does reach past the word
