"""The command line describes the step the model file trains, finds the examples by
their short name, imports a model file as a module, and ends every error in one line with the status of the
README's CLI conventions (2: a wrong command line; 1: a failure)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import circuitgrad as cg
from circuitgrad import modelfile
from circuitgrad.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINYGPT = os.path.join(ROOT, "examples", "tinygpt.py")
IRIS = os.path.join(ROOT, "examples", "iris.py")
SMALL_GPT = {"batch": 1, "seq": 4, "d": 8, "heads": 2, "layers": 1, "chars": 5000}
GPT_ARGS = sum((["--option", f"{k}={v}"] for k, v in SMALL_GPT.items()), [])


def _write(tmp_path, body: str, name: str = "m.py") -> str:
    p = tmp_path / name
    p.write_text("import numpy as np\nimport circuitgrad as cg\nfrom circuitgrad import nn\n" + body)
    return str(p)


# a float model file whose model() takes dtype (as the README's template does), with a plain-SGD step
SMALL = """
def model(batch=2, lr=0.125, nan=False, rows=None, dtype=cg.float32):
    def data(seed):
        x = np.zeros((rows or batch, 2))
        if nan:
            x[0, 0] = np.nan
        yield x, np.zeros(batch, dtype=int)
    return cg.ModelSpec(nn.mlp(batch, [2, 2], dtype=dtype), nn.softmax_cross_entropy, nn.sgd(lr), dtype, data)
"""


# ------------------------------------------------------------------ cost and draw use the file's own step
def test_cost_gpu_of_tinygpt_is_the_adamw_step_it_trains(capsys):
    """The default tinygpt: the CLI's table is cg.cost of the file's own float32 AdamW step (it was the
    fixed(16,8) momentum step: 597 MB and 181 launches against the AdamW step's 309 MB)."""
    assert main(["cost", TINYGPT, "--target", "gpu"]) == 0
    out = capsys.readouterr().out
    spec = modelfile.load(TINYGPT)
    assert spec.dtype == cg.float32 and spec.optimizer.name.startswith("adamw")
    assert out == str(cg.cost(spec.compile(), "gpu")) + "\n"
    rows = [line.split()[0] for line in out.splitlines() if line and line[0].isalpha()]
    assert "adamw" in rows and "momentum" not in rows


@pytest.mark.parametrize("target, extra, options", [
    ("gpu", [], {}),
    ("gpu", ["--device", "h200", "--tf32"], {"device": "h200", "tf32": True}),
    ("fpga", ["--macs", "2"], {"macs": 2}),
])
def test_cost_is_cg_cost_of_the_files_step(capsys, target, extra, options):
    assert main(["cost", TINYGPT, *GPT_ARGS, "--target", target, *extra]) == 0
    out = capsys.readouterr().out
    # fpga computes in fixed point: the file's model() is asked for fixed(16,8) (tinygpt: momentum SGD)
    spec = modelfile.load(TINYGPT, {**SMALL_GPT, **({"dtype": cg.fixed(16, 8)} if target == "fpga" else {})})
    assert out == str(cg.cost(spec.compile(), target, **options)) + "\n"


def test_cost_dtype_names_another_step(capsys):
    assert main(["cost", TINYGPT, *GPT_ARGS, "--target", "gpu", "--dtype", "fixed"]) == 0
    fixed = modelfile.load(TINYGPT, {**SMALL_GPT, "dtype": cg.fixed(16, 8)})
    assert fixed.optimizer.name.startswith("momentum")
    assert capsys.readouterr().out == str(cg.cost(fixed.compile(), "gpu")) + "\n"
    assert main(["cost", TINYGPT, *GPT_ARGS, "--target", "gpu", "--dtype", "float64"]) == 0
    f64 = modelfile.load(TINYGPT, {**SMALL_GPT, "dtype": cg.float64})
    assert capsys.readouterr().out == str(cg.cost(f64.compile(), "gpu")) + "\n"


def test_cost_of_a_file_whose_model_takes_no_dtype_compiles_in_the_dtype_asked(tmp_path, capsys):
    p = _write(tmp_path, "def model(batch=2):\n    return cg.ModelSpec(nn.mlp(batch, [2, 2]), nn.mse, nn.sgd(0.125))\n")
    assert main(["cost", p, "--target", "gpu"]) == 0
    step = modelfile.load(p).compile()
    assert capsys.readouterr().out == str(cg.cost(step, "gpu")) + "\n"
    assert main(["cost", p, "--target", "fpga"]) == 0
    step = modelfile.load(p).compile(cg.fixed(16, 8))
    assert capsys.readouterr().out == str(cg.cost(step, "fpga")) + "\n"


@pytest.mark.parametrize("step", [False, True])
def test_draw_is_cg_draw_of_the_files_model_or_step(tmp_path, capsys, step):
    out = tmp_path / "gpt.svg"
    assert main(["draw", TINYGPT, *GPT_ARGS, "-o", str(out), *(["--step"] if step else [])]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    spec = modelfile.load(TINYGPT, SMALL_GPT)
    svg = out.read_text(encoding="utf-8")
    assert svg == cg.draw(spec.compile() if step else spec.model)
    if step:                                   # the float AdamW step, not a fixed-point momentum step
        assert "fixed(16,8)" not in svg and "adam" in svg and "momentum" not in svg


# ------------------------------------------------------------------ show: imported, never run as __main__
def test_show_imports_the_file_and_never_runs_its_main(tmp_path, capsys):
    marker = tmp_path / "ran"
    p = _write(tmp_path, SMALL + f"\nif __name__ == '__main__':\n    open({str(marker)!r}, 'w').write('trained')\n"
                                 f"    raise SystemExit('__main__ ran')\n")
    assert main(["show", p]) == 0
    out = capsys.readouterr().out
    assert not marker.exists()
    step = modelfile.load(p).compile()
    assert out == f"# mlp(2,2-2): the training step compiled for float32\n{step.source}\n"
    assert main(["show", p, "--dtype", "fixed"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# mlp(2,2-2): the training step compiled for fixed(16,8)\n")
    assert out == (f"# mlp(2,2-2): the training step compiled for fixed(16,8)\n"
                   f"{modelfile.load(p, {'dtype': cg.fixed(16, 8)}).compile().source}\n")
    assert not marker.exists()


def test_show_of_tinygpt_needs_no_training_script_flags(capsys):
    """tinygpt's own command line has no --show-source: the old show ran its __main__ and failed."""
    assert main(["show", "tinygpt", *GPT_ARGS]) == 0
    assert capsys.readouterr().out.startswith("# gpt(B=1,S=4,vocab=96,d=8,heads=2,layers=1,softmax): the training "
                                              "step compiled for float32\n")


# ------------------------------------------------------------------ --dtype fixed prints fixed types
@pytest.mark.parametrize("script, first", [
    ("iris.py", "iris: mlp(8,4-16-3) : (fixed(32,16)[8, 4]) → (fixed(32,16)[8, 3])  [12 operations, 13 wires]"),
    ("digits_cnn.py", "digits: cnn(conv3x3x16,maxpool2,256-10) : (fixed(32,16)[32, 64]) → (fixed(32,16)[32, 10])  "
                      "[49 operations, 50 wires]"),
])
def test_fixed_point_runs_print_the_model_in_fixed_point(script, first):
    pytest.importorskip("sklearn")
    res = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), "--dtype", "fixed", "--epochs", "0",
                          "--quiet"], capture_output=True, text=True, timeout=300, check=True)
    assert res.stdout.splitlines()[0] == first


def test_a_model_files_spec_is_typed_in_its_dtype():
    pytest.importorskip("sklearn")
    spec = modelfile.load(IRIS, {"dtype": cg.fixed(16, 8)})
    assert str(spec.model).startswith("mlp(8,4-16-3) : (fixed(16,8)[8, 4]) → (fixed(16,8)[8, 3])")


# ------------------------------------------------------------------ examples by short name
def test_the_examples_are_found_by_short_name(capsys):
    assert {"iris", "digits", "digits_cnn", "tinygpt"} <= set(modelfile.examples())
    assert modelfile.resolve("tinygpt") == modelfile.examples()["tinygpt"]
    assert os.path.samefile(modelfile.resolve("tinygpt"), TINYGPT)
    assert main(["cost", "tinygpt", *GPT_ARGS, "--target", "gpu"]) == 0
    by_name = capsys.readouterr().out
    assert main(["cost", TINYGPT, *GPT_ARGS, "--target", "gpu"]) == 0
    assert capsys.readouterr().out == by_name


def test_a_file_in_the_working_directory_wins_over_an_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, SMALL, name="iris")               # a file named like an example: the file
    assert modelfile.resolve("iris") == "iris"


def test_an_unknown_short_name_lists_the_examples(capsys):
    assert main(["cost", "nosuchexample"]) == 2
    names = ", ".join(modelfile.examples())
    assert capsys.readouterr().err == (f"circuitgrad cost: no such model file or example: nosuchexample "
                                       f"(the examples: {names})\n")


# ------------------------------------------------------------------ one-line errors
def test_syntax_and_import_errors_in_a_model_file_are_one_line(tmp_path, capsys):
    syn = str(tmp_path / "syn.py")
    open(syn, "w").write("import circuitgrad as cg\ndef model(:\n    pass\n")
    imp = _write(tmp_path, "import nosuchmodule_xyz\n", name="imp.py")
    assert main(["cost", syn]) == 1
    assert capsys.readouterr().err == f"circuitgrad cost: {syn}, line 2: SyntaxError: invalid syntax\n"
    assert main(["draw", imp, "-o", str(tmp_path / "x.svg")]) == 1
    assert capsys.readouterr().err == f"circuitgrad draw: {imp}: ModuleNotFoundError: No module named 'nosuchmodule_xyz'\n"
    for cmd in (["zk", "prove"], ["fpga", "simulate"]):
        with pytest.raises(SystemExit) as e:
            main([*cmd, imp])
        assert e.value.code == f"circuitgrad {cmd[0]}: {imp}: ModuleNotFoundError: No module named 'nosuchmodule_xyz'"
    with pytest.raises(modelfile.ModelFileError) as e:        # an error in a module the file imports names both
        helper = tmp_path / "helper_syn.py"
        helper.write_text("x = (\n")
        modelfile.load_function(_write(tmp_path, f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n"
                                                 f"import helper_syn\n", name="outer.py"))
    assert str(e.value) == f"{tmp_path / 'outer.py'}: {helper}, line 1: SyntaxError: '(' was never closed"


@pytest.mark.parametrize("option, message", [
    ("rows=3", "data() batch 0: input x must have shape (2, 2), got (3, 2)"),
    ("nan=True", "data() batch 0: input x must be finite, got 1 NaN or infinite value"),
])
@pytest.mark.parametrize("cmd", [["zk", "prove"], ["fpga", "simulate"]])
def test_a_bad_data_batch_is_one_line(tmp_path, cmd, option, message):
    p = _write(tmp_path, SMALL)
    extra = ["--out", str(tmp_path / "proofs")] if cmd[0] == "zk" else []
    with pytest.raises(SystemExit) as e:
        main([*cmd, p, "--option", option, *extra])
    assert e.value.code == f"circuitgrad {cmd[0]}: {p}: {message}"


def test_draw_into_a_missing_directory_is_a_usage_error(capsys):
    assert main(["draw", IRIS, "-o", "/missing/dir/x.svg"]) == 2
    assert capsys.readouterr().err == "circuitgrad draw: -o /missing/dir/x.svg: no such directory /missing/dir\n"


def test_draw_expand_of_an_unknown_definition_is_a_usage_error(tmp_path, capsys):
    assert main(["draw", IRIS, "-o", str(tmp_path / "x.svg"), "--expand", "nonexistent"]) == 2
    assert capsys.readouterr().err == (
        "circuitgrad draw: --expand: no definition named 'nonexistent' in this diagram; its definitions are "
        "bias, dense0, dense1, linear, relu (by name, by path such as 'dense0/bias', or '*' for all)\n")
    assert not (tmp_path / "x.svg").exists()


@pytest.mark.parametrize("flag, fold", [("--fold", True), ("--no-fold", False)])
def test_draw_step_fold_flags_choose_the_layout(tmp_path, capsys, flag, fold):
    out = tmp_path / "step.svg"
    assert main(["draw", IRIS, "--step", flag, "-o", str(out)]) == 0
    spec = modelfile.load(IRIS, {})
    assert out.read_text(encoding="utf-8") == cg.draw(spec.compile(), fold=fold)
    assert cg.draw(spec.compile(), fold=True) != cg.draw(spec.compile(), fold=False)


def test_fold_without_step_is_a_usage_error(tmp_path, capsys):
    assert main(["draw", IRIS, "--no-fold", "-o", str(tmp_path / "x.svg")]) == 2
    assert capsys.readouterr().err == ("circuitgrad draw: --fold and --no-fold choose the layout of a training "
                                       "step: add --step\n")


@pytest.mark.parametrize("option, message", [
    ("hidden=banana", "option hidden must be a list of integers (model()'s default is (16,)), got 'banana'"),
    ("hidden=[16, 'x']", "option hidden must be a list of integers (model()'s default is (16,)), got [16, 'x']"),
    ("batch=2.5", "option batch must be an integer (model()'s default is 8), got 2.5"),
    ("lr=fast", "option lr must be a number (model()'s default is 0.05), got 'fast'"),
])
def test_an_option_of_the_wrong_type_names_the_option_and_the_type(capsys, option, message):
    pytest.importorskip("sklearn")
    assert main(["cost", IRIS, "--option", option]) == 2
    assert capsys.readouterr().err == f"circuitgrad cost: {IRIS}: {message}\n"


def test_options_of_the_right_type_pass():
    pytest.importorskip("sklearn")
    spec = modelfile.load(IRIS, {"hidden": [8, 4], "lr": 1, "momentum": 0})
    assert spec.model.name == "mlp(8,4-8-4-3)"


# ------------------------------------------------------------------ exit codes: 2 usage, 1 failure
def _cli(*args: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "circuitgrad.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


COMMANDS = [["cost"], ["draw"], ["show"], ["zk", "prove"], ["fpga", "simulate"], ["fpga", "synth"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_exit_status_2_for_a_wrong_command_line_and_1_for_a_failure(tmp_path, cmd):
    """The same convention in every command (README: CLI conventions): a missing model file and a bad option
    value are usage errors (2); a model file that does not load is a failure (1). One line, no traceback."""
    syn = str(tmp_path / "syn.py")
    open(syn, "w").write("def model(:\n")
    good = _write(tmp_path, SMALL)
    out = ["--out", str(tmp_path / "out")] if cmd[0] in ("zk",) else []
    for args, status, line in (
            ([str(tmp_path / "none.py")], 2, f"no such model file: {tmp_path / 'none.py'}"),
            ([good, "--option", "batch=two"], 2, f"{good}: option batch must be an integer (model()'s default is "
                                                 f"2), got 'two'"),
            ([good, "--batch", "0"], 2, "--batch must be at least 1, got 0"),
            ([syn], 1, f"{syn}, line 1: SyntaxError: invalid syntax")):
        res = _cli(*cmd, *args, *out)
        assert (res.returncode, res.stderr) == (status, f"circuitgrad {cmd[0]}: {line}\n"), args


def test_exit_status_of_tool_specific_usage_errors(tmp_path):
    good = _write(tmp_path, SMALL)
    for args, line in ((["zk", "prove", good, "--steps", "0"], "zk: --steps must be at least 1, got 0"),
                       (["zk", "verify", good, str(tmp_path / "none")],
                        f"zk: {tmp_path / 'none'}: not a proof directory (zk prove --out writes one)"),
                       (["zk", "prove", good, "--ptau", str(tmp_path / "none.ptau")],
                        f"zk: --ptau {tmp_path / 'none.ptau'}: no such file"),
                       (["fpga", "simulate", good, "--steps", "0"], "fpga: --steps must be at least 1, got 0"),
                       (["fpga", "simulate", good, "--macs", "0"], "fpga: --macs must be at least 1, got 0"),
                       (["fpga", "synth", good, "--seeds", "0"], "fpga: --seeds must be at least 1, got 0"),
                       (["fpga", "synth", good, "--pnr-timeout", "0"],
                        "fpga: --pnr-timeout must be a positive number of minutes, got 0.0"),
                       (["cost", good, "--target", "gpu", "--device", "a100"],
                        "cost: --device a100: unknown GPU device; choose one of h100, h200"),
                       (["cost", good, "--target", "zk", "--dtype", "float32"],
                        "cost: --target zk computes in fixed point, not --dtype float32"),
                       (["draw", good, "--dtype", "float64", "--width", "16"],
                        "draw: --width and --frac choose a fixed-point dtype, not --dtype float64")):
        res = _cli(*args)
        assert (res.returncode, res.stderr) == (2, f"circuitgrad {line}\n"), args
    res = _cli("cost", "iris", "--foo")                      # argparse's own usage errors: also 2
    assert res.returncode == 2 and "unrecognized arguments: --foo" in res.stderr


def test_exit_status_1_for_a_model_that_does_not_compile(tmp_path):
    p = _write(tmp_path, "def model(batch=2):\n    return cg.ModelSpec(nn.mlp(batch, [2, 2]), nn.mse, nn.sgd(1e-6))\n")
    res = _cli("cost", p, "--target", "fpga")
    assert res.returncode == 1 and res.stderr.startswith("circuitgrad cost: compile_model: learning rate 1e-06 "
                                                         "rounds to 0 in fixed(16,8)")
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1


# ------------------------------------------------------------------ what once reached a traceback
def test_a_data_value_out_of_fixed_point_range_is_one_line(tmp_path):
    """A data() value that fixed(16,8) cannot hold was a FixedPointOverflow traceback (zk prove, fpga simulate)."""
    p = _write(tmp_path, SMALL.replace("x[0, 0] = np.nan", "x[0, 1] = 1e6"))
    for cmd, extra in ((["zk", "prove"], ["--out", str(tmp_path / "proofs")]), (["fpga", "simulate"], [])):
        res = _cli(*cmd, p, "--option", "nan=True", *extra)
        assert (res.returncode, res.stderr) == (1, f"circuitgrad {cmd[0]}: {p}: data() batch 0: input x: values in "
                                                   f"[0, 1e+06] do not fit in fixed(16,8) (range [-128.0, "
                                                   f"127.99609375])\n")


@pytest.mark.parametrize("body, line", [
    ("import sys\nsys.exit(3)\n", "import: SystemExit: 3"),
    ("d = {}\nd['x']\n", "import: KeyError: 'x'"),
    ("def model(batch=2):\n    raise RuntimeError('no such\\ndevice')\n", "model(): RuntimeError: no such device"),
    ("def model(batch=2):\n    raise SystemExit(4)\n", "model(): SystemExit: 4"),
    ("def model(batch=2):\n    return 1 / 0\n", "model(): ZeroDivisionError: division by zero"),
])
@pytest.mark.parametrize("cmd", [["cost"], ["zk", "prove"]], ids=" ".join)
def test_a_model_file_that_raises_or_exits_is_one_line_and_status_1(tmp_path, cmd, body, line):
    """Anything a model file raises at import or in model() (not only SyntaxError/ImportError), sys.exit(3)
    included, is a failure of one line with status 1, never a traceback or the file's own exit status."""
    p = _write(tmp_path, body)
    out = ["--out", str(tmp_path / "out")] if cmd[0] == "zk" else []
    res = _cli(*cmd, p, *out)
    assert (res.returncode, res.stderr) == (1, f"circuitgrad {cmd[0]}: {p}: {line}\n")


@pytest.mark.parametrize("args, line", [
    (["cost", "iris", "--option", "hidden"], "cost: --option takes KEY=VALUE with KEY a Python name, got 'hidden'"),
    (["cost", "iris", "--option", "=3"], "cost: --option takes KEY=VALUE with KEY a Python name, got '=3'"),
    (["fpga", "simulate", "iris", "--width", "200"], "fpga: --width 200: fixed width must be in 2..32, got 200"),
    (["show", "iris", "--dtype", "fixed", "--width", "4", "--frac", "8"],
     "show: --width 4 --frac 8: fixed frac must be in 1..width-1 = 1..3, got 8"),
    (["zk", "prove", "iris", "--frac", "20", "--out", "unused"],
     "zk: --frac 20: fixed frac must be in 1..width-1 = 1..15, got 20"),
])
def test_bad_option_and_fixed_point_flag_values_are_usage_errors(tmp_path, args, line):
    res = _cli(*args, cwd=str(tmp_path))
    assert (res.returncode, res.stderr) == (2, f"circuitgrad {line}\n")
    assert not (tmp_path / "unused").exists()
