"""Calibrations of this machine: when they are measured again, what they say, ``--recalibrate``, the CPU model's
fixed costs per call, and cost tables in the model's order."""
from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest

import circuitgrad as cg
from circuitgrad import blas, nn
from circuitgrad.cli import main
from circuitgrad.costmodel import calibration as calib
from circuitgrad.costmodel import calls as cost_calls
from circuitgrad.costmodel import cpu as cost_cpu
from circuitgrad.costmodel import entry as cost_entry

DAY = 86400.0
KEY = {"version": 5, "machine": "x86_64 2 cores"}


def _cached(at: float, load: float, cpus: int = 2, **key) -> dict:
    return {**KEY, **key, "rate": 1.0, "measured_at": at, "load": load, "cpus": cpus}


# ------------------------------------------------------------------ the rules
@pytest.mark.parametrize("cached, now, expect", [
    (None, (0, 0.1), "none is cached yet"),
    (..., (0, 0.1), "the cached one does not parse"),
    ([1, 2], (0, 0.1), "the cached one does not parse"),
    (_cached(0, 0.1, version=4), (0, 0.1), "the cached one has another version (4, this one 5)"),
    (_cached(0, 0.1, machine="arm64 8 cores"), (0, 0.1),
     "the cached one has another machine ('arm64 8 cores', this one 'x86_64 2 cores')"),
    ({**KEY, "rate": 1.0}, (0, 0.1), "the cached one does not say when and under what load it was measured"),
    (_cached(0, 0.1), (31 * DAY, 0.1), "the cached one is 31 days old (older than 30)"),
    (_cached(0, 1.5), (DAY, 0.3),
     "the cached one was measured under load (load 1.5 on 2 CPUs); the machine is quieter now (load 0.3)"),
    (_cached(0, 1.5), (DAY, 1.8), None),             # still busy: kept (and said so, below)
    (_cached(0, 0.9), (29 * DAY, 0.1), None),         # 0.9 on 2 CPUs is not under load; 29 days is not stale
])
def test_reason_to_measure_again(cached, now, expect):
    assert calib.reason(cached, KEY, calib.Conditions(now[0], now[1], 2)) == expect


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A cache in ``tmp_path`` and a machine whose clock and load the test sets."""
    monkeypatch.setenv("CIRCUITGRAD_CACHE", str(tmp_path))
    state = {"t": 1_000_000.0, "load": 0.2, "measured": 0}
    monkeypatch.setattr(calib, "_clock", lambda: state["t"])
    monkeypatch.setattr(calib, "_loadavg", lambda: state["load"])
    monkeypatch.setattr(calib.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(calib, "_TOLD", set())
    return state


def _rate(machine, refresh=False):
    def measure():
        machine["measured"] += 1
        return 2.5
    return calib.calibrated("rates.json", KEY, lambda d: float(d["rate"]), measure, lambda v: {"rate": v},
                            "the test model", refresh)[0]


def test_calibrated_measures_keeps_and_measures_again(machine, tmp_path, capsys):
    path = os.path.join(str(tmp_path), "rates.json")
    assert _rate(machine) == 2.5 and machine["measured"] == 1
    assert capsys.readouterr().err == (f"circuitgrad: calibrating the test model on this machine (none is cached "
                                       f"yet); cached in {path}\n")
    d = json.loads(open(path).read())
    assert d == {"rate": 2.5, **KEY, "measured_at": 1_000_000.0, "load": 0.2, "cpus": 2}
    machine["t"] += 29 * DAY
    assert _rate(machine) == 2.5 and machine["measured"] == 1          # read back, silently
    assert capsys.readouterr() == ("", "")
    machine["t"] += 2 * DAY
    _rate(machine)
    assert machine["measured"] == 2
    assert "(the cached one is 31 days old (older than 30))" in capsys.readouterr().err
    _rate(machine, refresh=True)
    assert machine["measured"] == 3
    assert "(asked to (--recalibrate))" in capsys.readouterr().err


def test_a_calibration_under_load_is_said_kept_while_busy_and_measured_again_when_quiet(machine, capsys):
    machine["load"] = 1.6
    _rate(machine)
    err = capsys.readouterr().err.splitlines()
    assert err[1] == ("circuitgrad: the test model was calibrated under load (load 1.6 on 2 CPUs); its times may be "
                      "too long. It is measured again once the machine is quieter, or now with --recalibrate")
    machine["load"], machine["t"] = 1.9, machine["t"] + 60
    _rate(machine)
    assert machine["measured"] == 1                                     # still busy: kept, and said so
    date = calib.Conditions(1_000_000.0, 1.6, 2).date()
    assert capsys.readouterr().err == (
        f"circuitgrad: the test model: using the calibration measured {date} under load (load 1.6 on 2 CPUs); its "
        f"times may be too long. It is measured again once the machine is quieter, or now with --recalibrate\n")
    _rate(machine)
    assert machine["measured"] == 1 and capsys.readouterr().err == ""     # said once per process
    machine["load"] = 0.4
    _rate(machine)
    assert machine["measured"] == 2
    assert "(the cached one was measured under load (load 1.6 on 2 CPUs); the machine is quieter now (load 0.4))" \
        in capsys.readouterr().err


# ------------------------------------------------------------------ the CPU calibration
@pytest.fixture
def small_cpu(monkeypatch):
    """The CPU calibration on two sizes of each kind and a small pool (fast)."""
    monkeypatch.setattr(cost_cpu, "_GEMM_SIZES", (16, 32))
    monkeypatch.setattr(cost_cpu, "_STREAM_SIZES", (256, 4096))
    monkeypatch.setattr(cost_cpu, "_POOL_BYTES", 1 << 16)
    monkeypatch.setattr(cost_cpu, "PROBES", {k: cost_calls.PROBES[k] for k in ("ufunc", "matmul")})


def test_cpu_calibration_shows_progress_and_records_its_conditions(machine, small_cpu, tmp_path, capsys):
    monkeypatch_probes = cost_cpu.PROBES
    c = cost_cpu.calibrate()
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    path = os.path.join(str(tmp_path), "cpu-calibration.json")
    assert lines[0] == f"circuitgrad: calibrating the CPU cost model on this machine (none is cached yet); cached in {path}"
    assert re.fullmatch(r"calibrating the CPU cost model: 9/9 measurements, last exp, \d+\.\d s", lines[-1]), lines
    assert c.conditions == calib.Conditions(1_000_000.0, 0.2, 2) and set(c.calls) == set(monkeypatch_probes)
    d = json.loads(open(path).read())
    assert {k: d[k] for k in ("measured_at", "load", "cpus", "version", "blas")} == \
        {"measured_at": 1_000_000.0, "load": 0.2, "cpus": 2, "version": 6, "blas": blas.name()}
    assert cost_cpu.calibrate() == c and capsys.readouterr() == ("", "")


def test_recalibrate_in_the_api_and_the_command_line(machine, small_cpu, capsys):
    cost_cpu.calibrate()
    step = cg.compile_model(nn.mlp(4, [3, 5, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1))
    capsys.readouterr()
    cg.cost(step, "cpu", recalibrate=True)
    assert "(asked to (--recalibrate))" in capsys.readouterr().err
    assert main(["cost", "iris", "--target", "cpu", "--recalibrate"]) == 0
    assert "(asked to (--recalibrate))" in capsys.readouterr().err
    with pytest.raises(ValueError, match=re.escape("cost: target 'gpu' has no calibration of this machine to measure "
                                                   "again (the cpu and zk targets have)")):
        cg.cost(step, "gpu", recalibrate=True)


@pytest.mark.parametrize("argv, message", [
    (["--target", "gpu", "--recalibrate"],
     "circuitgrad cost: --recalibrate measures this machine for --target cpu or zk; --target gpu has no calibration"),
    (["--target", "zk", "--no-prover-time", "--recalibrate"],
     "circuitgrad cost: --recalibrate measures the prover's time model, which --no-prover-time leaves out"),
])
def test_recalibrate_usage_errors(argv, message, capsys):
    assert main(["cost", "iris", *argv]) == 2
    assert capsys.readouterr().err == message + "\n"


# ------------------------------------------------------------------ fixed costs of the generated code
@pytest.mark.parametrize("expr, kinds", [
    ("matmul(v26 * np.float32(-0.1), v43)", ["matmul", "ufunc", "scalar"]),
    ("(v21 > 0).astype(np.float32)", ["astype", "ufunc"]),
    ("softmax(v32, causal=True)", ["softmax_causal"]),
    ("v9[0:4:1, 0:2:1].copy()", ["copy", "index"]),
    ("1 / np.sqrt(v3)", ["ufunc", "ufunc"]),
    ("sum_axes(v37, (0,), (3,))", ["sum_axes"]),
    ("np.matmul(v1, v2)", ["batched_matmul"]),
    ("x.T", []),
])
def test_calls_of_a_generated_line(expr, kinds):
    assert sorted(cost_calls.calls(expr)) == sorted(kinds)


def test_cpu_time_counts_the_calls_of_each_generated_line():
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125))
    p = step.fn("step").program
    exprs = cost_calls.expressions(p)
    kinds = [type(a.op).__name__ for a, e in zip(p.instrs, exprs) if e is not None and e.startswith("matmul(")]
    assert kinds == ["MatMul"] * 5                            # the five products of the step, each a GEMM call
    assert [e for a, e in zip(p.instrs, exprs) if type(a.op).__name__ == "Constant"] == [None]   # folded
    slow = {k: 1e-9 for k in cost_calls.PROBES} | {"matmul": 1e-3}
    cal = cost_cpu.Calibration((1e15,) * 6, (1e15,) * 5, 1e15, 1e-9, "test", "numpy", slow)
    assert cg.cost(step, "cpu", calibration=cal).seconds == pytest.approx(5e-3, rel=1e-3)


# ------------------------------------------------------------------ the model's order
def test_cost_rows_follow_the_model_not_the_schedule_nor_the_alphabet():
    # relu comes after dense0 in the model; the schedule runs dense1's bias broadcast and the loss's constants
    # first, and the alphabet puts dense1 before relu
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125))
    cal = cost_cpu.Calibration((1e9,) * 6, (1e10,) * 5, 1e9, 1e-6, "test", "numpy")
    names = [r.name for r in cg.cost(step, "cpu", calibration=cal).rows]
    assert names == ["(arguments)", "(plumbing)", "mlp/dense0", "mlp/relu", "mlp/dense1", "softmax_cross_entropy", "sgd"]
    gpu = [r.name for r in cg.cost(step, "gpu").rows]
    assert gpu == ["mlp/dense0", "mlp/relu", "mlp/dense1", "softmax_cross_entropy", "sgd"]
    fixed = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                             dtype=cg.fixed(16, 8))
    zk = [r.name for r in cg.cost(fixed, "zk", prover_time=False).rows]
    assert zk == ["(inputs)", "(constants)", "mlp/dense0", "mlp/relu", "mlp/dense1", "(plumbing)",
                  "softmax_cross_entropy", "sgd", "(outputs)"]


# ------------------------------------------------------------------ a step's straight line and its entry
def test_cpu_time_charges_the_straight_line_factor_and_the_entry():
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.125))
    p = step.fn("step").program
    costs = {k: (i + 1) * 1e-6 for i, k in enumerate(cost_calls.PROBES)}
    made = [k for e in cost_calls.expressions(p) if e is not None for k in cost_calls.calls(e)]
    fast = (1e18,) * 6, (1e18,) * 5, 1e18, 1e-6, "test", "numpy", costs
    plain = cg.cost(step, "cpu", calibration=cost_cpu.Calibration(*fast))
    assert plain.seconds == pytest.approx(sum(costs[k] for k in made), rel=1e-6)   # context 1, no entry
    cal = cost_cpu.Calibration(*fast, context=(2.5,), context_kinds=(1,), entry=(3e-4, 2e-5))
    c = cg.cost(step, "cpu", calibration=cal)
    arrays = len(step.param_names) + len(step.state_names)
    assert arrays == 8                                          # W0 b0 W1 b1 and their momenta
    rows = {r.name: r for r in c.rows}
    assert rows["(arguments)"].seconds == pytest.approx(3e-4 + 8 * 2e-5, rel=1e-6)
    # x: 8×4 float64 read, float32 written and read to check it finite (and a bool per element); 8 labels
    # read, their one-hot rows of 3 gathered and written
    assert rows["(arguments)"].bytes == 8 * 4 * (8 + 4 + 4 + 1) + 8 * 8 + 2 * 8 * 3 * 4
    assert c.seconds == pytest.approx(2.5 * sum(costs[k] for k in made) + 3e-4 + 8 * 2e-5, rel=1e-6)
    predict = {r.name: r for r in cg.cost(step, "cpu", function="predict", calibration=cal).rows}
    assert predict["(arguments)"].seconds == pytest.approx(3e-4 + 4 * 2e-5, rel=1e-6)   # no optimizer state
    g = cg.trace(lambda a: a + a, [cg.NdArrayType((4,), cg.float32)], name="g")
    assert "(arguments)" not in [r.name for r in cg.cost(g, "cpu", calibration=cal).rows]   # no entry of its own


def test_straight_line_factor_follows_the_kinds_of_call_a_program_makes():
    cal = cost_cpu.Calibration((1e18,) * 6, (1e18,) * 5, 1e18, 1e-6, "test", "numpy", {"ufunc": 1e-6, "matmul": 1e-5},
                               context=(1.0, 2.0), context_kinds=(2, 6))
    assert [cal.factor(n) for n in (1, 2, 4, 6, 30)] == [1.0, 1.0, 1.5, 2.0, 2.0]
    assert cal.fixed(["ufunc", "matmul"], distinct=4) == pytest.approx(1.5 * 1.1e-5)
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125))
    made = [cost_calls.calls(e) for e in cost_calls.expressions(step.fn("step").program) if e is not None]
    distinct = len({k for ks in made for k in ks})
    assert distinct == 6                                        # ufunc, scalar, astype, matmul, sum_axes, softmax
    cal = dataclasses.replace(cal, context=(1.0, 3.0), context_kinds=(2, 10))
    assert cal.factor(distinct) == 2.0
    c = cg.cost(step, "cpu", calibration=cal)
    calls_s = sum(cal.calls.get(k, cal.call_s) for ks in made for k in ks)
    assert c.seconds == pytest.approx(2.0 * calls_s, rel=1e-6)


def test_straight_line_makes_each_call_once_and_entry_checks_its_arguments():
    made = []
    line = cost_entry.straight_line({k: (lambda k=k: made.append(k)) for k in ("a", "b", "c")}, rounds=2)
    line()
    assert made == ["a", "b", "c"] * 2
    for n in cost_entry.ENTRY_SIZES:
        out = cost_entry.entry_call(n)()
        assert sorted(out) == sorted(f"p{i}" for i in range(n)) and out["p0"].shape == (4, 4)
    assert cost_entry.parts((1, 65), (3e-5, 3e-5 + 64e-7)) == pytest.approx((3e-5 - 1e-7, 1e-7))
    assert cost_entry.parts((1, 65), (3e-5, 2e-5)) == (3e-5, 0.0)          # never a negative cost per array


def test_a_machine_that_cannot_count_its_cpus_keeps_its_calibration(machine, monkeypatch):
    """``os.cpu_count()`` may be None: the CPU model's key records it as such, beside the conditions' count
    (1), and the next call reads the calibration back instead of measuring it again."""
    monkeypatch.setattr(calib.os, "cpu_count", lambda: None)
    monkeypatch.setattr(cost_cpu.os, "cpu_count", lambda: None)
    key = cost_cpu._key()
    assert key["cpu_count"] is None

    def measure():
        machine["measured"] += 1
        return 2.5

    def rate():
        return calib.calibrated("rates.json", key, lambda d: float(d["rate"]), measure, lambda v: {"rate": v},
                                "the test model")[0]
    assert rate() == 2.5 and rate() == 2.5
    assert machine["measured"] == 1


@pytest.mark.parametrize("target, options, why", [
    ("zk", {"prover_time": False}, "prover_time=False leaves the prover's time model out"),
    ("cpu", {"calibration": object()}, "calibration= gives the calibration to use"),
])
def test_recalibrating_for_a_call_that_would_not_use_it_is_refused(target, options, why):
    with pytest.raises(ValueError) as e:
        cg.cost(nn.mlp(2, [3, 2]), target, function="predict", recalibrate=True, **options)
    assert str(e.value) == f"cost: recalibrate=True measures a calibration this call would not use: {why}"


def _positive_rate(d: dict) -> float | None:
    v = d["rate"]
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


STAMP = '"measured_at": 1000000.0, "load": 0.2, "cpus": 2'


@pytest.mark.parametrize("content", [
    "{not json", "[1, 2]", '{"rate": 1.0, "version": 0, ' + STAMP + '}',
    '{"rate": -3, "version": 1, ' + STAMP + '}', '{"rate": "x", "version": 1, ' + STAMP + '}',
    '{"version": 1, ' + STAMP + '}', "",
], ids=["damaged", "not-an-object", "stale-key", "refused-by-parse", "wrong-type", "missing-field", "empty"])
def test_a_cached_file_that_does_not_parse_is_measured_again(machine, tmp_path, content):
    """Cached files are untrusted input: anything damaged, foreign or refused by ``parse`` is measured again
    and written back."""
    (tmp_path / "rates.json").write_text(content)
    value, _ = calib.calibrated("rates.json", {"version": 1}, _positive_rate, lambda: 7.0, lambda v: {"rate": v},
                                "the test model")
    assert value == 7.0
    assert json.loads((tmp_path / "rates.json").read_text()) == {"rate": 7.0, "version": 1, "measured_at": 1e6,
                                                                 "load": 0.2, "cpus": 2}
