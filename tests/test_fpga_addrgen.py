"""``backends/fpga/addrgen.py`` alone, fed by the decoder: for every micro-op of a training step with two MAC lanes,
the loop counters issue exactly the (output, operand a, operand b) words of its views, element by element and lane
by lane along the reduction, and ``last`` rises on the final pair."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth")

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402
from circuitgrad.backends import fpga  # noqa: E402
from circuitgrad.backends.fpga.addrgen import AddressGen  # noqa: E402
from circuitgrad.backends.fpga.sequencer import _config  # noqa: E402
from circuitgrad.backends.fpga.decode import DECODE_LATENCY, Decoder  # noqa: E402
from circuitgrad.backends.fpga.kinds import FACTS  # noqa: E402
from circuitgrad.backends.fpga.timing import const_b  # noqa: E402

LANES = 2


def _expected(u, mod):
    """The pairs the micro-op issues: per element (row-major), per k step, the live lanes' addresses."""
    out = u.out.addresses().reshape(-1) % mod
    step = 1 if FACTS[u.kind].one_lane else LANES
    pairs = []
    for e in range(len(out)):
        for k in range(0, u.K, step):
            lanes = range(min(step, u.K - k))
            a = [int(np.broadcast_to(u.a.addresses(k + l), u.out.shape).reshape(-1)[e] % mod) for l in lanes]
            b = [int(np.broadcast_to(u.b.addresses(k + l), u.out.shape).reshape(-1)[e] % mod) if u.b is not None
                 else None for l in lanes]
            pairs.append((int(out[e]), a, b))
    return pairs


def test_the_counters_issue_every_views_words():
    from amaranth import Module
    from amaranth.lib import wiring
    from amaranth.sim import Simulator
    step = cg.compile_model(nn.mlp(4, [3, 5, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.125),
                            dtype=cg.fixed(16, 8))
    mc = fpga.compile(step, macs=LANES).microcode
    cfg = _config(mc, 2, LANES)
    mod = 1 << cfg.aw
    m = Module()
    m.submodules.dec = dec = Decoder(mc, cfg, [const_b(u) for u in mc.ops])
    m.submodules.agen = agen = AddressGen(cfg)
    wiring.connect(m, dec.fields, agen.fields)
    got = []

    async def bench(ctx):
        for pc, u in enumerate(mc.ops):
            ctx.set(dec.pc, pc)
            for _ in range(DECODE_LATENCY):                    # the fields are registered
                await ctx.tick()
            ctx.set(agen.one_lane, FACTS[u.kind].one_lane)
            ctx.set(agen.load, 1)
            await ctx.tick()
            ctx.set(agen.load, 0)
            ctx.set(agen.advance, 1)
            pairs = []
            for _ in range(100_000):
                live = [lane for lane in range(LANES) if (ctx.get(agen.live) >> lane) & 1]
                pairs.append((ctx.get(agen.out_addr), [ctx.get(agen.lane_a[lane]) for lane in live],
                              [ctx.get(agen.lane_b[lane]) if u.b is not None else None for lane in live]))
                last = ctx.get(agen.last)
                await ctx.tick()
                if last:
                    break
            ctx.set(agen.advance, 0)
            got.append(pairs)
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(got) == len(mc.ops)
    for u, pairs in zip(mc.ops, got):
        assert pairs == _expected(u, mod), (u.kind, u.source)
