"""``backends/fpga/decode.py`` alone: for every micro-op of a training step, the fields the decoder registers for
``pc`` address exactly the memory words of the micro-op's views (``isa.View.addresses``), element by element and
along the reduction."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth")

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402
from circuitgrad.backends import fpga  # noqa: E402
from circuitgrad.backends.fpga.sequencer import _config  # noqa: E402
from circuitgrad.backends.fpga.decode import DECODE_LATENCY, Decoder  # noqa: E402
from circuitgrad.backends.fpga.kinds import KIND_CODES  # noqa: E402
from circuitgrad.backends.fpga.timing import const_b  # noqa: E402


def _decoded(mc, cfg):
    from amaranth.sim import Simulator
    dut = Decoder(mc, cfg, [const_b(u) for u in mc.ops])
    out = []

    async def bench(ctx):
        for pc in range(len(mc.ops)):
            ctx.set(dut.pc, pc)
            for _ in range(DECODE_LATENCY):                # the tables' registers, then the fields'
                await ctx.tick()
            f = dut.fields
            out.append({"kind": ctx.get(f.kind), "K": ctx.get(f.K), "n0": ctx.get(f.n0_last) + 1,
                        "n1": ctx.get(f.n1_last) + 1,
                        **{x: tuple(ctx.get(getattr(getattr(f, x), y)) for y in ("base", "s0", "s1", "ks"))
                           for x in ("a", "b", "o")}})
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


@pytest.mark.parametrize("function, spram", [("step", 0), ("predict", 0), ("step", 4)])
def test_decoded_fields_address_the_views(function, spram):
    step = cg.compile_model(nn.mlp(4, [3, 6, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.125),
                            dtype=cg.fixed(16, 8))
    mc = fpga.compile(step, function=function, spram=spram).microcode
    cfg = _config(mc, 2, 1)
    assert cfg.rom_bram == (spram > 0)          # with SPRAM the bases come from block RAM
    mod = 1 << cfg.aw
    for u, f in zip(mc.ops, _decoded(mc, cfg)):
        assert f["kind"] == KIND_CODES[u.kind] and f["K"] == u.K
        n = int(np.prod(u.out.shape))
        assert f["n0"] * f["n1"] == n
        i0, i1 = np.divmod(np.arange(n), f["n1"])

        def at(x, k):
            base, s0, s1, ks = f[x]
            return (base + i0 * s0 + i1 * s1 + k * ks) % mod
        assert np.array_equal(at("o", 0), u.out.addresses().reshape(-1))
        for k in range(u.K):
            assert np.array_equal(at("a", k), np.broadcast_to(u.a.addresses(k), u.out.shape).reshape(-1) % mod)
            if u.b is not None:
                assert np.array_equal(at("b", k), np.broadcast_to(u.b.addresses(k), u.out.shape).reshape(-1) % mod)


def test_bases_from_block_ram_equal_the_tables_past_one_block():
    """A program longer than one block RAM of bases (256 micro-ops): both decoders give the same fields."""
    from dataclasses import replace
    step = cg.compile_model(nn.gpt(1, 4, 5, d=8, heads=2, layers=1), nn.softmax_cross_entropy, nn.sgd(0.1),
                            dtype=cg.fixed(16, 8))
    mc = fpga.compile(step, spram=4).microcode
    cfg = _config(mc, 2, 1)
    assert len(mc.ops) > 256 and cfg.rom_bram
    assert _decoded(mc, cfg) == _decoded(mc, replace(cfg, rom_bram=False))
