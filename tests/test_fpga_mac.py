"""``backends/fpga/mac.py`` alone: fed one (element, k) pair a cycle (``k`` a cycle before the metadata, the operands a
cycle after it, as the address generator and the memory give them), the pipeline's stage 3
holds the exact dot product, the rescaled one rounded half up, the running max, or the index of the first maximum,
for elements back to back; an exp's results come out ``EXP_STAGES`` cycles later, and a pair of the micro-op
before it never does."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth")

import circuitgrad as cg  # noqa: E402
from circuitgrad.backends.fpga.config import SeqConfig  # noqa: E402
from circuitgrad.backends.fpga.mac import MacPipeline  # noqa: E402
from circuitgrad.backends.fpga.microcode import elementwise_model  # noqa: E402
from circuitgrad.backends.fpga.kinds import EXP_STAGES, KIND_CODES  # noqa: E402
from circuitgrad.backends.fpga.timing import DRAIN  # noqa: E402

Q = cg.fixed(16, 8)
K = 5
CFG = SeqConfig(dt=Q, depth=16, n_ops=4, lanes=1, one_port=False, kmax=K, nmax=4,
                used=frozenset({"mac", "max", "argmax"}), codes=KIND_CODES, div_bits=24, sqrt_bits=12)


def _want(kind: str, rescale: bool, a: np.ndarray, b: np.ndarray) -> int:
    if kind == "mac":
        s = int(np.dot(a, b))
        return (s + (1 << (Q.frac - 1))) >> Q.frac if rescale else s
    return int(a.max()) if kind == "max" else int(np.argmax(a))          # argmax: the first maximum


@pytest.mark.parametrize("kind, rescale", [("mac", False), ("mac", True), ("max", False), ("argmax", False)])
def test_stage_three_holds_each_elements_result(kind, rescale):
    from amaranth.sim import Simulator
    rng = np.random.default_rng(0)
    elements = [(rng.integers(-3000, 3000, K), rng.integers(-3000, 3000, K)) for _ in range(3)]
    elements.append((np.array([7, 9, 9, -1, 9]), np.ones(K, dtype=np.int64)))         # ties: the first stays
    dut, got = MacPipeline(CFG), []
    pairs = [(e, k) for e in range(len(elements)) for k in range(K)]

    async def bench(ctx):
        ctx.set(dut.kind, KIND_CODES[kind])
        ctx.set(dut.rescale, rescale)
        ctx.set(dut.has_b, kind == "mac")
        ctx.set(dut.k, 0)                                  # k is taken at issue, a cycle before the metadata
        await ctx.tick()
        for i in range(len(pairs) + 6):
            if i < len(pairs):                             # pair i's metadata
                e, k = pairs[i]
                ctx.set(dut.valid, 1)
                ctx.set(dut.first, k == 0)
                ctx.set(dut.last, k + 1 == K)
                ctx.set(dut.addr, e)
            else:
                ctx.set(dut.valid, 0)
            ctx.set(dut.k, pairs[i + 1][1] if i + 1 < len(pairs) else 0)
            if 0 < i <= len(pairs):                        # pair i − 1's operands, a cycle after its metadata
                e, k = pairs[i - 1]
                a, b = elements[e]
                ctx.set(dut.a, int(a[k]))
                ctx.set(dut.b, int(b[k]))
            await ctx.tick()
            if ctx.get(dut.out_valid):
                got.append((ctx.get(dut.out_addr), ctx.get(dut.out_value)))
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == [(e, _want(kind, rescale, a, b)) for e, (a, b) in enumerate(elements)]


def test_an_exp_comes_out_late_and_alone():
    """An exp's pairs leave ``EXP_STAGES`` cycles after a product's would; the products of the micro-op before it
    (drained, as the sequencer drains, but not yet through the exp's longer delay line) are written once."""
    from amaranth.sim import Simulator
    cfg = SeqConfig(dt=Q, depth=16, n_ops=4, lanes=1, one_port=False, kmax=1, nmax=16,
                    used=frozenset({"mac", "exp"}), codes=KIND_CODES, div_bits=24, sqrt_bits=12)
    rng = np.random.default_rng(1)
    a, b = rng.integers(-1500, 500, 12), rng.integers(0, 1500, 12)            # a − b ≤ 2: every exp fits
    dut, got = MacPipeline(cfg), []
    macs = [(3, 5), (-7, 9)]                                        # a product's pairs first: addresses 14, 15

    async def bench(ctx):
        ctx.set(dut.kind, KIND_CODES["mac"])
        ctx.set(dut.has_b, 1)
        await ctx.tick()
        for i in range(len(macs) + DRAIN):
            ctx.set(dut.valid, i < len(macs))
            ctx.set(dut.first, 1)
            ctx.set(dut.last, 1)
            ctx.set(dut.addr, 14 + i)
            if 0 < i <= len(macs):
                ctx.set(dut.a, macs[i - 1][0])
                ctx.set(dut.b, macs[i - 1][1])
            await ctx.tick()
            got.append((ctx.get(dut.out_valid), ctx.get(dut.out_addr), ctx.get(dut.out_value)))
        ctx.set(dut.kind, KIND_CODES["exp"])                        # the exp's load, after the products' drain
        for i in range(len(a) + EXP_STAGES + 6):
            ctx.set(dut.valid, i < len(a))
            ctx.set(dut.addr, i)
            if 0 < i <= len(a):
                ctx.set(dut.a, int(a[i - 1]))
                ctx.set(dut.b, int(b[i - 1]))
            await ctx.tick()
            got.append((ctx.get(dut.out_valid), ctx.get(dut.out_addr), ctx.get(dut.out_value)))
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    out = [(addr, v) for valid, addr, v in got if valid]
    assert out[:2] == [(14, 15), (15, -63)]
    assert out[2:] == [(i, int(y)) for i, y in enumerate(elementwise_model("exp", a, b, Q))]
    first_exp = next(i for i, (valid, addr, _) in enumerate(got) if valid and addr == 0)
    first_mac = next(i for i, (valid, _, _) in enumerate(got) if valid)
    assert first_exp - first_mac == len(macs) + DRAIN + EXP_STAGES     # its first pair entered len(macs) + DRAIN later
