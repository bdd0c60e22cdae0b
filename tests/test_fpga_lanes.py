"""Lanes (``timing.lane_plan``, ``backends/fpga/interleave.py``): which axis and how many lanes a micro-op takes,
the interleaved memory alone, and the bank-conflict check that makes the plan's promise observable."""
from __future__ import annotations

import re

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import fpga
from circuitgrad.backends.fpga.isa import MicroOp, View, interleave
from circuitgrad.backends.fpga.timing import LANE_DRAIN, LanePlan, cycles, lane_plan, op_cycles

Q = cg.fixed(16, 8)


def _op(shape, out_strides, a_strides, b_strides=None, K=1, kstride=0):
    out = View(0, shape, out_strides)
    a = View(1000, shape, a_strides, kstride)
    b = View(2000, shape, b_strides) if b_strides is not None else None
    return MicroOp("mac" if K > 1 or b is not None else "add", out, a, b, K=K)


@pytest.mark.parametrize("lanes, banks", [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8)])
def test_lanes_interleave_across_a_power_of_two_of_banks(lanes, banks):
    assert interleave(lanes) == banks


@pytest.mark.parametrize("op, lanes, plan", [
    # a dense layer's forward: x[b, k] the same word for every lane (stride 0), W[k, j] and out[b, j] stride 1
    (_op((8, 16), (16, 1), (4, 0), (0, 1), K=4, kstride=1), 8, LanePlan(False, 8, 8, 16)),
    # three columns: all eight lanes go down the rows instead (strides 3, odd)
    (_op((8, 3), (3, 1), (3, 1), (3, 1)), 8, LanePlan(True, 8, 3, 8)),
    # a column stride of 16 puts every lane in one of 8 banks; the rows' stride 1 does not
    (_op((16, 16), (1, 16), (1, 16)), 8, LanePlan(True, 8, 16, 16)),
    # strides 2 and 6 share a factor 2 with 8 banks: four lanes stay apart
    (_op((4, 32), (64, 2), (192, 6)), 8, LanePlan(False, 4, 4, 32)),
    # every stride a multiple of the 8 banks: one lane, down the columns on a tie
    (_op((5, 8), (8, 16), (16, 32)), 8, LanePlan(False, 1, 5, 8)),
    # three lanes over 4 banks: stride 1 keeps three lanes apart
    (_op((2, 9), (9, 1), (9, 1), (0, 0)), 3, LanePlan(False, 3, 2, 9)),
    # exp: its unit's DSP blocks are on lane 0 alone
    (MicroOp("exp", View(0, (8, 3), (3, 1)), View(100, (8, 3), (3, 1)), View(200, (8, 3), (1, 0))), 8,
     LanePlan(False, 1, 8, 3)),
    # one lane: the columns, as the single-lane sequencer walks them
    (_op((8, 3), (3, 1), (3, 1), (3, 1)), 1, LanePlan(False, 1, 8, 3)),
])
def test_the_plan_picks_the_axis_and_the_lanes_that_stay_in_distinct_banks(op, lanes, plan):
    assert lane_plan(op, lanes) == plan
    P = interleave(lanes)
    for v in (op.out, op.a) + ((op.b,) if op.b is not None else ()):
        s = v.strides[0 if plan.swap else 1]
        words = {v.base + lane * s for lane in range(plan.lanes)}
        assert len({w % P for w in words}) == len(words)           # distinct banks, or one word


def test_eight_lanes_take_under_a_quarter_of_the_iris_steps_cycles():
    # elementwise micro-ops, reductions and the divider all run on the lanes (the cycle model is exact:
    # tests/test_fpga.py simulates it)
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    mc = fpga.compile(step).microcode
    assert 4 * cycles(mc, 2, 8) < cycles(mc)
    # the elementwise kinds, the reductions, max and the divider gain; exp runs on lane 0 (its unit's DSPs)
    per_op = list(zip(mc.ops, op_cycles(mc), op_cycles(mc, 2, 8)))
    assert {u.kind for u, one, eight in per_op if eight < one} == {"mac", "add", "heaviside", "neg", "max", "divf"}
    assert all(eight == one + LANE_DRAIN for u, one, eight in per_op if u.kind == "exp")


def test_interleaved_memory_routes_each_lane_to_its_bank():
    pytest.importorskip("amaranth")
    from amaranth.sim import Simulator
    from circuitgrad.backends.fpga.interleave import HOST_LATENCY, InterleavedMemory
    from circuitgrad.backends.fpga.timing import LANE_LATENCY, READ_LATENCY
    L, depth = 3, 37
    dut = InterleavedMemory(16, depth, list(range(100, 100 + depth)), L)
    assert [dut.locate(a)[1] for a in (0, 5, 36)] == [0, 1, 9]          # word a // 4 of bank a % 4
    got = []

    async def bench(ctx):
        # three lanes write words 7, 8, 9 (banks 3, 0, 1) in one cycle
        for lane, addr in enumerate((7, 8, 9)):
            ctx.set(dut.w_addr[lane], addr)
            ctx.set(dut.w_data[lane], -addr)
            ctx.set(dut.w_en[lane], 1)
        await ctx.tick()                                           # registered with their banks
        for lane in range(L):
            ctx.set(dut.w_en[lane], 0)
        await ctx.tick()                                           # the writes land
        await ctx.tick()
        # a reads 8, 9, 10 (stride 1); b reads word 30 on every lane (stride 0: one bank, one word)
        for lane in range(L):
            ctx.set(dut.a_addr[lane], 8 + lane)
            ctx.set(dut.a_used[lane], 1)
            ctx.set(dut.b_addr[lane], 30)
            ctx.set(dut.b_used[lane], 1)
        for _ in range(LANE_LATENCY + READ_LATENCY):             # registered with their banks, read, registered
            await ctx.tick()
        got.append(([ctx.get(dut.a_data[lane]) for lane in range(L)], [ctx.get(dut.b_data[lane]) for lane in range(L)]))
        # the host reads word 9 (written -9), then 10: each comes HOST_LATENCY cycles after its address
        ctx.set(dut.host, 1)
        for addr in (9, 10):
            ctx.set(dut.host_addr, addr)
            words = []
            for _ in range(HOST_LATENCY):
                await ctx.tick()
                words.append(ctx.get(dut.host_data))
            got.append(words)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got[0] == ([-8, -9, 110], [130, 130, 130])
    assert HOST_LATENCY == READ_LATENCY + 1 and got[1][-1] == -9 and got[2][-1] == 110
    assert -9 not in got[1][:-1] and 110 not in got[2][:-1]              # not a cycle earlier


def test_a_plan_that_puts_two_lanes_in_one_bank_is_caught(monkeypatch, rng):
    pytest.importorskip("amaranth")
    from circuitgrad.backends.fpga import decode, timing
    from circuitgrad.backends.fpga.sim import BankConflict

    def every_lane(u, lanes):                  # ignore the strides: eight lanes on the columns
        plan = lane_plan(u, 1)
        return LanePlan(False, min(lanes, plan.n_lane), plan.n_other, plan.n_lane)
    monkeypatch.setattr(decode, "lane_plan", every_lane)
    monkeypatch.setattr(timing, "lane_plan", every_lane)
    step = cg.compile_model(nn.mlp(4, [4, 6, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    d = fpga.compile(step, macs=8)
    p = step.init_params(seed=0)
    x, y = rng.normal(size=(4, 4)), rng.integers(0, 2, size=4)
    with pytest.raises(BankConflict) as e:
        fpga.simulate(d, p, x, y, check_collisions=True)
    assert re.fullmatch(r"cycle \d+: reads of [ab] at addresses (\d+) and (\d+) both reach bank (\d+)", str(e.value))
    first, second, bank = map(int, re.findall(r"\d+", str(e.value))[1:])
    assert first != second and first % 8 == second % 8 == bank


def test_lanes_train_bit_exact_with_exact_cycles_on_a_layer_norm_gelu_mlp(rng):
    pytest.importorskip("amaranth")
    B = 4
    model = (nn.dense(B, 6, 8, dtype=Q) >> nn.layer_norm(B, 8, dtype=Q) >> nn.gelu(B, 8, dtype=Q)
             >> nn.dense(B, 8, 3, dtype=Q))
    step = cg.compile_model(model, loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.05, 0.9), dtype=Q)
    d1, d4 = fpga.compile(step), fpga.compile(step, macs=4)
    p = step.init_params(seed=0)
    x, y = rng.normal(size=(B, 6)), rng.integers(0, 3, size=B)
    want = step.step(p, x, y)
    got, n = fpga.simulate(d4, p, x, y, check_collisions=True)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    # four lanes pay 1.9x here: with a batch of 4, each micro-op's drain (LANE_DRAIN longer) is a large share
    assert n == d4.cycles < 0.55 * d1.cycles


@pytest.mark.parametrize("target, macs, cells", [("ecp5-85k", 4, 4), ("ecp5-85k", 1, 0), ("ice40-up5k", 2, 0)])
def test_lane_products_are_ecp5_dsp_blocks_with_their_own_registers(target, macs, cells):
    # for the ECP5, each lane's product is a MULT18X18D whose input and output registers are the model's a₁, b₁
    # and product registers; the simulation (no target) and the iCE40 keep the Amaranth model
    from circuitgrad.backends.fpga.synth import rtlil_text
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    design = fpga.compile(step, macs=macs)
    il = rtlil_text(design, log=lambda s: None, target=target)
    blocks = re.findall(r"cell \\MULT18X18D .*?\n  end", il, re.S)
    assert len(blocks) == cells
    for b in blocks:
        for reg in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"):
            assert f'parameter \\{reg} "CLK0"' in b
        assert 'parameter \\REG_PIPELINE_CLK' not in b
    assert "MULT18X18D" not in rtlil_text(design, log=lambda s: None)


def _sync_registers(component) -> dict[str, bool]:
    """Each register of ``component`` (elaborated): its name → whether it has no reset."""
    from amaranth.hdl import Fragment

    def walk(fragment):
        yield fragment
        for sub, *_ in fragment.subfragments:
            yield from walk(sub)
    return {s.name: s.reset_less for f in walk(Fragment.get(component, None))
            for st in f.statements.get("sync", []) for s in st._lhs_signals()}


def test_only_the_flags_of_the_lanes_memory_are_reset():
    """Words, addresses and bank selects are data (no reset: the reset line reaches few flip-flops); the flags
    that qualify them (which banks a lane hits, the banks' write enables) are reset, so no write lands in reset."""
    from circuitgrad.backends.fpga.interleave import InterleavedMemory
    regs = _sync_registers(InterleavedMemory(16, 64, [], 4))
    flags = {n for n in regs if n.endswith(("_hits", "_tap_on")) or n.startswith("w_en")}
    assert {"a0_hits", "w3_hits", "w_en", "w_en0", "w_en_full3"} <= flags
    assert not any(regs[n] for n in flags)
    data = {n for n in regs if n.endswith(("_addr", "_word", "_data", "_tap")) or "_bank" in n} - flags
    assert {"a0_addr", "b3_addr", "a_bank2_word", "w1_data", "a1_bank_d0", "host_bank", "r0_bank0"} <= data
    assert all(regs[n] for n in data), sorted(n for n in data if not regs[n])
