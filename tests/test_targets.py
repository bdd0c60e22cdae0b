"""``circuitgrad/targets.py``: the one table of targets that compile_model, cg.cost, ``circuitgrad info``, the
command line and the conformance tests read."""
from __future__ import annotations

import pytest

import circuitgrad as cg
from circuitgrad import costmodel, nn
from circuitgrad.targets import DEFAULT_BACKEND, TARGETS, backend_target, backends, runtime, target


def test_every_reader_takes_its_list_from_the_registry():
    assert tuple(TARGETS) == ("cpu", "gpu", "fpga", "zk") == costmodel.TARGETS
    assert set(backends()) == {b for t in TARGETS.values() for b in t.backends} | {"auto"}
    assert runtime(DEFAULT_BACKEND).fixed and not runtime("cupy-emulated").fixed
    assert backend_target("cupy-emulated").name == "gpu" and backend_target("numpy").name == "cpu"


def test_modules_load_by_name_only_when_asked():
    assert TARGETS["zk"].module("command").__name__ == "circuitgrad.backends.zk.cli"
    assert TARGETS["cpu"].rule_table() is __import__("circuitgrad.codegen", fromlist=["NUMPY_RULES"]).NUMPY_RULES
    assert TARGETS["cpu"].available() == (True, "this machine")
    with pytest.raises(ValueError) as e:
        TARGETS["gpu"].module("command")
    assert str(e.value) == "target 'gpu' has no command module"


def test_unknown_names_say_what_exists():
    with pytest.raises(ValueError) as e:
        target("tpu")
    assert str(e.value) == "unknown target 'tpu'; choose one of cpu, gpu, fpga, zk"
    with pytest.raises(ValueError) as e:
        backend_target("jax")
    assert str(e.value) == "no target runs backend 'jax'"
    with pytest.raises(ValueError) as e:
        cg.cost(cg.compile_model(nn.mlp(2, [2, 2]), nn.mse, nn.sgd(0.1)), "tpu")
    assert str(e.value) == "cost: target must be one of cpu, gpu, fpga, zk, got 'tpu'"

