"""``backends/fpga/mac.py`` alone: fed one (element, k) pair a cycle on two lanes (``k`` itself at issue, a cycle
before its operands, as the address generator gives it), the pipeline's stage 3 holds the exact dot product, the
rescaled one rounded half up, the running max, or the index of the first maximum, for elements back to back."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("amaranth")

import circuitgrad as cg  # noqa: E402
from circuitgrad.backends.fpga.config import SeqConfig  # noqa: E402
from circuitgrad.backends.fpga.mac import MacPipeline  # noqa: E402
from circuitgrad.backends.fpga.timing import KIND_CODES  # noqa: E402

Q = cg.fixed(16, 8)
L, K = 2, 5
CFG = SeqConfig(dt=Q, depth=16, n_ops=4, lanes=L, one_port=False, ew_stages=0, kmax=K, nmax=4,
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
    step = 1 if kind != "mac" else L

    pairs = [(e, k) for e in range(len(elements)) for k in range(0, K, step)]

    async def bench(ctx):
        ctx.set(dut.kind, KIND_CODES[kind])
        ctx.set(dut.rescale, rescale)
        ctx.set(dut.has_b, kind == "mac")
        ctx.set(dut.k, 0)                                  # k is taken at issue, a cycle before its operands
        await ctx.tick()
        for i, (e, k) in enumerate(pairs):
            a, b = elements[e]
            ctx.set(dut.valid, 1)
            ctx.set(dut.first, k == 0)
            ctx.set(dut.last, k + step >= K)
            ctx.set(dut.addr, e)
            ctx.set(dut.k, pairs[i + 1][1] if i + 1 < len(pairs) else 0)
            ctx.set(dut.a, int(a[k]))
            ctx.set(dut.b, int(b[k]))
            live = [k + lane < K for lane in range(L)] if kind == "mac" else [True] + [False] * (L - 1)
            ctx.set(dut.mask, sum(int(x) << lane for lane, x in enumerate(live)))
            if k + 1 < K:
                ctx.set(dut.lane_a[0], int(a[k + 1]))
                ctx.set(dut.lane_b[0], int(b[k + 1]))
            await ctx.tick()
            if ctx.get(dut.out_valid):
                got.append((ctx.get(dut.out_addr), ctx.get(dut.out_value)))
        ctx.set(dut.valid, 0)
        for _ in range(3):
            await ctx.tick()
            if ctx.get(dut.out_valid):
                got.append((ctx.get(dut.out_addr), ctx.get(dut.out_value)))
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == [(e, _want(kind, rescale, a, b)) for e, (a, b) in enumerate(elements)]
