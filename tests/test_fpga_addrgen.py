"""``backends/fpga/addrgen.py`` alone, fed by the decoder: for every micro-op of a training step on one lane and
on three, the loop counters issue exactly the (output, operand a, operand b) words of its views, each (element, k)
pair once, and ``last`` rises on the final pair; with lanes, each group's live lanes sit in distinct banks."""
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
from circuitgrad.backends.fpga.isa import interleave  # noqa: E402
from circuitgrad.backends.fpga.timing import const_b  # noqa: E402


def _expected(u, mod):
    """Every (output, a, b) word triple the micro-op reads and writes, from its views (NumPy's addressing)."""
    out = u.out.addresses().reshape(-1) % mod
    pairs = []
    for k in range(u.K):
        a = np.broadcast_to(u.a.addresses(k), u.out.shape).reshape(-1) % mod
        b = np.broadcast_to(u.b.addresses(k), u.out.shape).reshape(-1) % mod if u.b is not None else [None] * len(out)
        pairs += [(int(o), int(x), None if y is None else int(y)) for o, x, y in zip(out, a, b)]
    return sorted(pairs, key=repr)


@pytest.mark.parametrize("lanes", [1, 3])
def test_the_counters_issue_every_views_words(lanes):
    from amaranth import Module
    from amaranth.lib import wiring
    from amaranth.sim import Simulator
    step = cg.compile_model(nn.mlp(4, [3, 5, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.125),
                            dtype=cg.fixed(16, 8))
    mc = fpga.compile(step, macs=lanes).microcode
    cfg = _config(mc, 2, lanes)
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
            ctx.set(agen.load, 1)
            await ctx.tick()
            ctx.set(agen.load, 0)
            ctx.set(agen.advance, 1)
            groups = []
            for _ in range(100_000):
                one = (ctx.get(agen.out_addr), ctx.get(agen.ptr_a), ctx.get(agen.ptr_b) if u.b is not None else None)
                if lanes == 1:
                    groups.append([one])
                else:
                    live = [lane for lane in range(lanes) if (ctx.get(agen.live) >> lane) & 1]
                    groups.append([(ctx.get(agen.lane_o[lane]), ctx.get(agen.lane_a[lane]),
                                    ctx.get(agen.lane_b[lane]) if u.b is not None else None) for lane in live])
                    assert groups[-1][0] == one                # lane 0 is the issued position
                last = ctx.get(agen.last)
                await ctx.tick()
                if last:
                    break
            ctx.set(agen.advance, 0)
            got.append(groups)
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(got) == len(mc.ops)
    P = interleave(lanes)
    for u, groups in zip(mc.ops, got):
        assert sorted([t for g in groups for t in g], key=repr) == _expected(u, mod), (u.kind, u.source)
        for g in groups:                                       # the lanes of a group: distinct banks (or one word)
            for i in range(3):
                words = {t[i] for t in g if t[i] is not None}
                assert len({w % P for w in words}) == len(words), (u.source, g)
            assert len({t[0] for t in g}) == len(g)
