"""``backends/fpga/writeback.py`` alone: the range check flags exactly the words outside ``fixed(16, 8)``, and the
writeback gives the port to the pipeline over the divider over the host, with a sticky overflow that keeps the
first faulting micro-op."""
from __future__ import annotations

import pytest

pytest.importorskip("amaranth")

import circuitgrad as cg  # noqa: E402
from circuitgrad.backends.fpga.config import SeqConfig  # noqa: E402
from circuitgrad.backends.fpga.kinds import KIND_CODES  # noqa: E402
from circuitgrad.backends.fpga.writeback import CHECK_LATENCY, RangeCheck, Writeback  # noqa: E402

Q = cg.fixed(16, 8)
CFG = SeqConfig(dt=Q, depth=16, n_ops=6, lanes=1, one_port=False, kmax=4, nmax=4,
                used=frozenset({"mac", "add"}), codes=KIND_CODES, div_bits=24, sqrt_bits=12)


def _run(dut, bench, clocked: bool = True) -> None:
    from amaranth.sim import Simulator
    sim = Simulator(dut)
    if clocked:
        sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_range_check_flags_exactly_the_words_outside_the_dtype():
    """One result a cycle, each flagged ``CHECK_LATENCY`` cycles later with its pc; an invalid one never is."""
    dut, seen = RangeCheck(CFG), []
    ews = [0, 1, -1, Q.hi, Q.lo, Q.hi + 1, Q.lo - 1, 5 * Q.hi]
    accs = [(Q.hi << 8) + 255, Q.hi << 8, (Q.hi + 1) << 8, Q.lo << 8, (Q.lo << 8) - 1]     # rescaled sums: ≫ 8
    cases = ([("ew", v, 1) for v in ews] + [("max", Q.hi + 1, 1), ("ew", Q.hi + 1, 0)]
             + [("acc", v, 1) for v in accs])

    async def bench(ctx):
        for i, (kind, v, valid) in enumerate(cases + [("ew", 0, 0)] * CHECK_LATENCY):
            ctx.set(dut.is_max, kind == "max")
            ctx.set(dut.reduce, kind == "acc")
            ctx.set(dut.rescale, kind == "acc")
            ctx.set(dut.acc if kind == "acc" else dut.ew, v)
            ctx.set(dut.valid, valid)
            ctx.set(dut.pc, i % 6)
            await ctx.tick()
            seen.append((ctx.get(dut.bad), ctx.get(dut.bad_pc)))
    _run(dut, bench)
    for i, (kind, v, valid) in enumerate(cases):
        word = v >> 8 if kind == "acc" else v
        bad, pc = seen[i + CHECK_LATENCY - 1]
        assert bad == (valid and kind != "max" and not Q.lo <= word <= Q.hi), (kind, v)
        assert pc == i % 6


def test_the_pipeline_wins_the_port_and_the_first_fault_sticks():
    dut, log = Writeback(CFG), []

    async def bench(ctx):
        ctx.set(dut.host, 1)
        ctx.set(dut.host_addr, 3)
        ctx.set(dut.host_wdata, 7)
        ctx.set(dut.host_we, 1)
        log.append(("host", ctx.get(dut.wr_addr), ctx.get(dut.wr_data), ctx.get(dut.wr_en)))
        ctx.set(dut.host, 0)
        ctx.set(dut.div_write, 1)
        ctx.set(dut.div_addr, 5)
        ctx.set(dut.div_data, -2)
        ctx.set(dut.div_bad, 1)
        ctx.set(dut.pc, 2)
        ctx.set(dut.valid, 1)
        ctx.set(dut.addr, 9)
        ctx.set(dut.data, 11)
        log.append(("both", ctx.get(dut.wr_addr), ctx.get(dut.wr_data), ctx.get(dut.wr_en)))
        ctx.set(dut.div_bad, 0)
        await ctx.tick()                                   # the divider's write; its check comes a cycle later
        ctx.set(dut.div_write, 0)
        ctx.set(dut.div_bad, 1)
        await ctx.tick()                                   # … and sets the overflow at pc 2 a cycle after that
        ctx.set(dut.div_bad, 0)
        await ctx.tick()
        ctx.set(dut.bad, 1)
        ctx.set(dut.data_pc, 4)
        await ctx.tick()
        await ctx.tick()                                   # the range check's bad, later: pc 2 stays
        log.append(("fault", ctx.get(dut.overflow), ctx.get(dut.fault)))
        ctx.set(dut.clear, 1)
        ctx.set(dut.valid, 0)
        await ctx.tick()
        log.append(("cleared", ctx.get(dut.overflow), ctx.get(dut.fault)))
    _run(dut, bench)
    assert log == [("host", 3, 7, 1), ("both", 9, 11, 1), ("fault", 1, 2), ("cleared", 0, 0)]
