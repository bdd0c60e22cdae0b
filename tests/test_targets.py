"""``circuitgrad/targets.py``: the one table of targets that compile_model, cg.cost, ``circuitgrad info``, the
command line and the conformance tests read."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import costmodel, nn
from circuitgrad.targets import DEFAULT_BACKEND, TARGETS, Runtime, Target, backend_target, backends, runtime, target


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


class _Interpreted:
    """The toy runtime's compiled function: the program run by the reference interpreter, counting calls."""

    def __init__(self, program, arg_names, name, donate_pairs=None):
        from circuitgrad.interpret import run
        self.calls, self.source, self.launches = 0, f"# toy: {name}({', '.join(arg_names)})", 1
        self.donate_pairs = donate_pairs

        def call(*xs):
            self.calls += 1
            return run(program, xs)
        self.run = call


def test_a_toy_target_registered_in_the_test_alone_compiles_and_runs_a_model(monkeypatch):
    """A runtime is a row: a target defined here (its module too) trains through ``compile_model``, and its
    options are checked from the row, with the core unchanged."""
    toy = types.ModuleType("toy_target")
    toy.compile_function = _Interpreted
    monkeypatch.setitem(sys.modules, "toy_target", toy)
    monkeypatch.setitem(TARGETS, "toy", Target("toy", "toy_target", "circuitgrad.interpret:FLOAT_RULES",
                                               "circuitgrad.costmodel.cpu",
                                               (Runtime("toy", "toy_target:compile_function", options=("donate",)),),
                                               title="the toy"))
    assert "toy" in backends() and backend_target("toy").name == "toy"
    model = nn.mlp(4, [3, 5, 2])
    step = cg.compile_model(model, nn.mse, nn.sgd(0.1), backend="toy", donate=True)
    ref = cg.compile_model(model, nn.mse, nn.sgd(0.1))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    y = np.cos(x[:, :2])
    p = q = ref.init_params(seed=3)
    for _ in range(3):
        p, q = step.step(p, x, y), ref.step(q, x, y)
    f = step.fn("step").compiled
    assert isinstance(f, _Interpreted) and f.calls == 3 and f.donate_pairs is not None
    assert step.source.startswith("# toy: step(") and step.launches_per_step == 1
    for k in q:            # the interpreter against generated NumPy: float32 sums in another order
        np.testing.assert_allclose(p[k], q[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError) as e:
        cg.compile_model(model, nn.mse, nn.sgd(0.1), backend="toy", precision="tf32")
    assert str(e.value) == ("compile_model: precision='tf32' is for the GPU (backend='cupy' or 'cupy-emulated'); "
                            "the toy backend multiplies in the model's dtype")
    with pytest.raises(ValueError) as e:
        cg.compile_model(model, nn.mse, nn.sgd(0.1), backend="toy", dtype=cg.fixed(16, 8))
    assert str(e.value).startswith("compile_model: the toy backend computes in float32/float64, not fixed(16,8); "
                                   "fixed point runs on backend='numpy'")
