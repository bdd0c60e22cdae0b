"""``backends/fpga/divider.py`` alone: the sequential unit, simulated by itself, computes what the microcode's NumPy
model computes (``microcode.elementwise_model``) for ``divf``, ``div`` and ``sqrt`` in exactly ``bits`` steps, and
raises ``bad`` for operands outside the domain and results outside the word."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth")

import circuitgrad as cg  # noqa: E402
from circuitgrad.backends.fpga.config import SeqConfig  # noqa: E402
from circuitgrad.backends.fpga.divider import SeqDivider  # noqa: E402
from circuitgrad.backends.fpga.microcode import elementwise_model  # noqa: E402
from circuitgrad.backends.fpga.kinds import KIND_CODES  # noqa: E402

Q = cg.fixed(16, 8)
CASES = {   # kind: (a, b) raw words: zero, ±1, the word's limits, exact halves (rounding), results that overflow
    "divf": [(0, 1), (1, 1), (256, 256), (255, 256), (32767, 32767), (100, 3), (32767, 1), (5, 0), (-5, 2)],
    "div": [(0, 7), (256, 512), (-256, 512), (300, -7), (-300, -7), (1, 3), (-1, 3), (32767, 1), (9, 0),
            (1, 512), (-1, 512), (3, -512), (1, 2 * 256 + 1),
            (-32768, 32767)],
    "sqrt": [(0, None), (1, None), (256, None), (255, None), (32767, None), (-1, None), (1024, None)],
}


def _config(kind: str) -> SeqConfig:
    return SeqConfig(dt=Q, depth=4, n_ops=1, lanes=1, one_port=False, kmax=1, nmax=1,
                     used=frozenset({kind}), codes=KIND_CODES, div_bits=Q.width + Q.frac,
                     sqrt_bits=(Q.width + Q.frac + 1) // 2)


def _want(kind: str, a: int, b: int | None) -> tuple[int | None, bool]:
    """(the model's word, or None where ``bad`` makes it irrelevant; whether the unit must flag the case)."""
    domain = {"divf": b is not None and (b <= 0 or a < 0), "div": b == 0, "sqrt": a < 0}[kind]
    if domain:
        return None, True
    v = int(elementwise_model(kind, np.array([a]), None if b is None else np.array([b]), Q)[0])
    return (None, True) if not Q.lo <= v <= Q.hi else (v, False)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_divider_alone_agrees_with_the_model(kind):
    from amaranth.sim import Simulator
    cfg = _config(kind)
    dut = SeqDivider(cfg)
    bits = cfg.sqrt_bits if kind == "sqrt" else cfg.div_bits
    got = []

    async def bench(ctx):
        ctx.set(dut.is_sqrt, kind == "sqrt")
        ctx.set(dut.is_rdiv, kind == "div")
        for a, b in CASES[kind]:
            ctx.set(dut.a, a)
            ctx.set(dut.b, 0 if b is None else b)
            ctx.set(dut.load, 1)
            await ctx.tick()
            ctx.set(dut.load, 0)
            ctx.set(dut.step_sqrt if kind == "sqrt" else dut.step_div, 1)
            steps = 0
            while True:
                last = ctx.get(dut.last)
                await ctx.tick()
                steps += 1
                if last:
                    break
            ctx.set(dut.step_sqrt if kind == "sqrt" else dut.step_div, 0)
            ctx.set(dut.round, 1)                          # the rounding's comparison is registered
            await ctx.tick()
            ctx.set(dut.round, 0)
            word = ctx.get(dut.result)                     # written in this cycle; checked in the next
            await ctx.tick()
            got.append((word, bool(ctx.get(dut.bad)), steps))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for (a, b), (word, bad, steps) in zip(CASES[kind], got):
        want, flagged = _want(kind, a, b)
        assert steps == bits, (kind, a, b)
        assert bad == flagged, (kind, a, b, word)
        if want is not None:
            assert word == want, (kind, a, b)
