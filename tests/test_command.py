"""``circuitgrad/command.py``: the model-file options every command shares, and the dtype each tool computes in."""
from __future__ import annotations

import argparse

import pytest

import circuitgrad as cg
from circuitgrad.command import UsageError, add_model_options, load_model

pytest.importorskip("sklearn")          # the iris example's data


def _args(*argv: str, dtype: str | None = None, width: int | None = None, frac: int | None = None):
    p = argparse.ArgumentParser()
    add_model_options(p)
    a = p.parse_args(["iris", *argv])
    a.dtype, a.width, a.frac = dtype, width, frac
    return a


def test_the_dtype_each_tool_computes_in():
    spec, dt = load_model(_args(), cg.fixed(16, 8))                        # fpga, zk: fixed point
    assert dt == spec.dtype == cg.fixed(16, 8)
    spec, dt = load_model(_args(width=32), cg.fixed(16, 8))
    assert dt == cg.fixed(32, 16)
    spec, dt = load_model(_args(), cg.fixed(16, 8), fixed=False)           # cost, draw, show: the file's own
    assert dt == spec.dtype == cg.float32
    spec, dt = load_model(_args(dtype="float64"), cg.fixed(16, 8), fixed=False)
    assert dt == cg.float64


def test_options_reach_model():
    spec, _ = load_model(_args("--batch", "4", "--hidden", "5", "--option", "momentum=0"), cg.fixed(16, 8))
    assert spec.model.name == "mlp(4,4-5-3)" and spec.optimizer.name.startswith("sgd")


@pytest.mark.parametrize("argv, kw, message", [
    (["--batch", "0"], {}, "--batch must be at least 1, got 0"),
    (["--hidden", "4", "-1"], {}, "--hidden must be at least 1, got -1"),
    (["--lr", "0"], {}, "--lr must be a finite number > 0, got 0.0"),
    ([], {"dtype": "float32", "width": 16}, "--width and --frac choose a fixed-point dtype, not --dtype float32"),
    ([], {"width": 16, "frac": 20}, "--width 16 --frac 20: fixed frac must be in 1..width-1 = 1..15, got 20"),
])
def test_a_wrong_command_line_is_a_usage_error(argv, kw, message):
    with pytest.raises(UsageError) as e:
        load_model(_args(*argv, **kw), cg.fixed(16, 8))
    assert str(e.value) == message
