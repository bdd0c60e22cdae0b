"""Model files (``circuitgrad/modelfile.py``): the convention the command-line tools load, the examples
that follow it, and its errors."""
from __future__ import annotations

import itertools
import os
import re

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import modelfile
from circuitgrad.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL_GPT = {"batch": 1, "seq": 4, "d": 8, "heads": 2, "layers": 1, "chars": 5000}


@pytest.mark.parametrize("path, options, model_name", [
    ("examples/iris.py", {"batch": 4}, "mlp(4,4-16-3)"),
    ("examples/digits.py", {}, "mlp(32,64-64-10)"),
    ("examples/digits_cnn.py", {"batch": 2, "channels": 2}, "cnn(conv3x3x2,maxpool2,32-10)"),
    ("examples/tinygpt.py", {**SMALL_GPT, "attention": "spherical"},
     "gpt(B=1,S=4,vocab=96,d=8,heads=2,layers=1,spherical)"),
])
def test_every_example_defines_what_it_trains(path, options, model_name):
    spec = modelfile.load(os.path.join(ROOT, path), options)
    assert spec.model.name == model_name
    assert spec.options["batch"] == options.get("batch", spec.options["batch"])
    step = spec.compile()
    params = step.init_params(seed=0)
    x, y = next(modelfile.batches(spec, 0, path))
    after = step.step(params, x, y)
    assert any(not np.array_equal(after[k], params[k]) for k in step.param_names)


def test_the_fixed_point_dtype_picks_the_scripts_fixed_point_optimizer():
    path = os.path.join(ROOT, "examples/tinygpt.py")
    assert modelfile.load(path, SMALL_GPT).optimizer.name.startswith("adamw")
    assert modelfile.load(path, {**SMALL_GPT, "dtype": cg.fixed(16, 8)}).optimizer.name.startswith("momentum")


@pytest.mark.parametrize("text, parsed", [
    ("heads=2", ("heads", 2)), ("lr=0.5", ("lr", 0.5)), ("hidden=[16, 8]", ("hidden", [16, 8])),
    ("attention=spherical", ("attention", "spherical")), ("attention='spherical'", ("attention", "spherical")),
])
def test_options_are_python_literals_or_strings(text, parsed):
    assert modelfile.parse_option(text) == parsed


def _write(tmp_path, body: str) -> str:
    p = tmp_path / "m.py"
    p.write_text("import circuitgrad as cg\nfrom circuitgrad import nn\n" + body)
    return str(p)


def test_errors_name_the_file_and_what_to_do(tmp_path):
    cases = [
        ("x = 1\n", "{p} must define model(**options) returning cg.ModelSpec (see circuitgrad/modelfile.py or "
                    "examples/iris.py)", {}),
        ("def model(batch=2):\n    return nn.mlp(batch, [2, 2])\n", "{p}: model() must return cg.ModelSpec, got "
                                                                     "Diagram", {}),
        ("def model(batch=2):\n    return cg.ModelSpec(nn.mlp(batch, [2, 2]), nn.mse, 0.1)\n",
         "{p}: model(): optimizer must be an nn optimizer such as nn.sgd(0.1)", {}),
        ("def model(batch=2):\n    return cg.ModelSpec(nn.mlp(batch, [2, 2]), nn.mse, nn.sgd(0.1))\n",
         "{p}: model() takes no option heads; it accepts batch", {"heads": 2}),
    ]
    for body, message, options in cases:
        p = _write(tmp_path, body)
        with pytest.raises(modelfile.ModelFileError) as e:
            modelfile.load(p, options)
        assert str(e.value) == message.format(p=p)
    with pytest.raises(modelfile.ModelFileError, match=r"^no such model file: nowhere\.py$"):
        modelfile.load("nowhere.py")
    with pytest.raises(modelfile.ModelFileError, match=r"^--option takes KEY=VALUE with KEY a Python name, got '2'$"):
        modelfile.parse_option("2")
    p = _write(tmp_path, "def model():\n    return cg.ModelSpec(nn.mlp(2, [2, 2]), nn.mse, nn.sgd(0.1))\n")
    with pytest.raises(modelfile.ModelFileError, match=r"model\(\) returned no data; set ModelSpec\(data="):
        next(modelfile.batches(modelfile.load(p), 0, p))


def test_cli_errors_are_one_line(tmp_path, capsys):
    os.chdir(ROOT)          # an option model() does not take is a usage error: status 2 (README: CLI conventions)
    assert main(["fpga", "simulate", "examples/iris.py", "--option", "heads=2"]) == 2
    assert capsys.readouterr().err == ("circuitgrad fpga: examples/iris.py: model() takes no option heads; it "
                                       "accepts batch, hidden, lr, momentum, dtype\n")


def test_fpga_simulate_runs_the_model_the_script_trains(capsys):
    """Momentum SGD, as examples/iris.py trains (the earlier CLI rebuilt a plain-SGD MLP)."""
    os.chdir(ROOT)
    assert main(["fpga", "simulate", "examples/iris.py", "--batch", "4", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("bit-exact with the interpreter: True") == 2


@pytest.mark.slow
def test_zk_prove_and_verify_a_gpt_model_file(tmp_path, capsys):
    os.chdir(ROOT)
    opts = ["examples/tinygpt.py", *sum((["--option", f"{k}={v}"] for k, v in SMALL_GPT.items()), []),
            "--option", "attention=spherical"]
    assert main(["zk", "prove", *opts, "--steps", "1", "--out", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "public statement: step of gpt(B=1,S=4,vocab=96,d=8,heads=2,layers=1,spherical)" in out
    assert "  optimizer:      momentum(lr=0.1 (raw 26), beta=0.9 (raw 230))\n  arithmetic:     fixed(16,8) over" in out
    assert main(["zk", "verify", *opts, str(tmp_path / "p"), "--init-seed", "0"]) == 0
    assert "all 1 proofs verify" in capsys.readouterr().out
    assert main(["zk", "verify", *opts[:-1], "attention=softmax", str(tmp_path / "p"), "--init-seed", "0"]) == 1


@pytest.mark.slow
def test_fpga_simulate_a_gpt_model_file(capsys):
    """The GPT the script trains, simulated on the sequencer from the shell (momentum SGD, token ids)."""
    os.chdir(ROOT)
    opts = ["examples/tinygpt.py", *sum((["--option", f"{k}={v}"] for k, v in SMALL_GPT.items()), [])]
    assert main(["fpga", "simulate", *opts, "--macs", "4", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("bit-exact with the interpreter: True") == 1


def test_fpga_synth_of_a_design_too_big_is_one_line(capsys):
    os.chdir(ROOT)
    opts = ["examples/tinygpt.py", *sum((["--option", f"{k}={v}"] for k, v in SMALL_GPT.items()), [])]
    with pytest.raises(SystemExit) as e:
        main(["fpga", "synth", *opts, "--macs", "8", "--target", "ice40-up5k"])
    assert re.fullmatch(r"circuitgrad fpga synth: ice40-up5k: the design needs \d+ block RAMs \(2 read ports × 8 banks of "
                        r"\d+ words × 16 bits, \d+ blocks each\), the device has 30 \([\d.]+x too many\)(; at most "
                        r"--macs \d fits)?", str(e.value.code))


# ------------------------------------------------------------------ data(): when the steps outnumber the batches
DATA = """
calls = []

def model(batch=2, n=2, fail=None):
    import numpy as np

    def data(seed):
        calls.append(seed)
        if fail == "call":
            raise RuntimeError("no disk")
        if fail == "typeerror":
            return len(seed)
        if fail == "none":
            return None
        def gen():
            for i in range(0 if fail == "empty" else n):
                if fail == "midway" and i == 1:
                    raise OSError("read error")
                yield np.full((batch, 2), 10 * seed + i), np.zeros(batch, dtype=int)
        return gen()
    return cg.ModelSpec(nn.mlp(batch, [2, 2]), nn.softmax_cross_entropy, nn.sgd(0.1), data=data)
"""


def test_data_runs_out_then_the_next_seed_is_called(tmp_path):
    """10 steps over 4 batches a call: data(5)'s 4, data(6)'s 4, then the first 2 of data(7), in order."""
    p = _write(tmp_path, DATA)
    spec = modelfile.load(p, {"n": 4})
    xs = [int(x[0, 0]) for x, _ in itertools.islice(modelfile.batches(spec, 5, p), 10)]
    assert xs == [50, 51, 52, 53, 60, 61, 62, 63, 70, 71]
    assert spec.data.__globals__["calls"] == [5, 6, 7]


@pytest.mark.parametrize("fail, message", [
    ("empty", "{p}: data(3) yielded no batch"),
    ("none", "{p}: data(3) must return an iterable of (x, y) batches ('NoneType' object is not iterable)"),
    ("call", "{p}: data(3): RuntimeError: no disk"),
    ("typeerror", "{p}: data(3): TypeError: object of type 'int' has no len()"),   # the file's bug, not the contract
    ("midway", "{p}: data(3): OSError: read error"),
])
def test_a_data_function_that_fails_is_one_line_naming_the_call(tmp_path, fail, message):
    p = _write(tmp_path, DATA)
    it = modelfile.batches(modelfile.load(p, {"fail": fail}), 3, p)
    with pytest.raises(modelfile.ModelFileError) as e:
        list(itertools.islice(it, 5))
    assert str(e.value) == message.format(p=p)
