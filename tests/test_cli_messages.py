"""Every error of the core commands (info, show, cost, draw) and of the model-file loading every command
shares is one line naming the real cause and the flag, with status 2 for a wrong command line and 1 for a
failure (README: CLI conventions)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import modelfile
from circuitgrad.cli import main
from circuitgrad.command import missing_extra

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IRIS = os.path.join(ROOT, "examples", "iris.py")

GOOD = """import numpy as np
import circuitgrad as cg
from circuitgrad import nn

def model(batch=2, dtype=cg.float32):
    return cg.ModelSpec(nn.mlp(batch, [2, 2], dtype=dtype), nn.mse, nn.sgd(0.125), dtype,
                        data=lambda seed: [(np.zeros((batch, 2)), np.zeros((batch, 2)))])
"""


def _run(argv: list[str], capsys) -> tuple[int, str]:
    """The exit status and stderr of ``circuitgrad ARGV`` (the backends end a failure with ``sys.exit(line)``)."""
    try:
        status = main(argv)
    except SystemExit as e:
        if isinstance(e.code, str):
            return 1, e.code + "\n"
        status = e.code
    return status, capsys.readouterr().err


@pytest.fixture
def files(tmp_path):
    """A directory, a text file, a Python file without model(), one whose model() returns no ModelSpec, a good
    model file, and a directory to draw into."""
    (tmp_path / "notes.txt").write_text("not Python\n")
    (tmp_path / "nomodel.py").write_text("x = 1\n")
    (tmp_path / "returns_int.py").write_text("def model():\n    return 3\n")
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "figures").mkdir()
    return tmp_path


# (argv with {d} for the fixture's directory, status, the line after "circuitgrad CMD: ")
CASES = [
    (["cost", "{d}"], 2, "{d} is a directory, not a model file (a .py file that defines model(**options))"),
    (["show", "{d}/notes.txt"], 2,
     "{d}/notes.txt: not a Python file; a model file is a .py file that defines model(**options)"),
    (["draw", "{d}/nomodel.py", "-o", "{d}/x.svg"], 2,
     "{d}/nomodel.py must define model(**options) returning cg.ModelSpec (see circuitgrad/modelfile.py or "
     "examples/iris.py)"),
    (["zk", "prove", "{d}/nomodel.py", "--out", "{d}/proofs"], 2,
     "{d}/nomodel.py must define model(**options) returning cg.ModelSpec (see circuitgrad/modelfile.py or "
     "examples/iris.py)"),
    (["fpga", "simulate", "{d}/notes.txt"], 2,
     "{d}/notes.txt: not a Python file; a model file is a .py file that defines model(**options)"),
    (["zk", "prove", "{d}", "--out", "{d}/proofs"], 2,
     "{d} is a directory, not a model file (a .py file that defines model(**options))"),
    (["cost", "{d}/none.py"], 2, "no such model file: {d}/none.py"),
    (["cost", "{d}/good.py", "--depth", "0"], 2, "--depth must be at least 1, got 0"),
    (["cost", "{d}/good.py", "--macs", "0"], 2, "--macs must be at least 1, got 0"),
    (["draw", "{d}/good.py", "--depth", "0", "-o", "{d}/x.svg"], 2, "--depth must be at least 1, got 0"),
    (["draw", "{d}/good.py", "-o", "{d}/figures"], 2,
     "-o {d}/figures is a directory; -o names the SVG file to write, e.g. -o {d}/figures/good.svg"),
    (["draw", "iris", "-o", "{d}/figures"], 2,
     "-o {d}/figures is a directory; -o names the SVG file to write, e.g. -o {d}/figures/iris.svg"),
    (["draw", "{d}/good.py", "-o", ""], 2, "-o needs the SVG file to write, e.g. -o model.svg"),
    (["draw", "{d}/good.py", "-o", "{d}/missing/x.svg"], 2, "-o {d}/missing/x.svg: no such directory {d}/missing"),
    (["draw", "{d}/good.py", "--fold", "-o", "{d}/x.svg"], 2,
     "--fold and --no-fold choose the layout of a training step: add --step"),
    (["show", "{d}/good.py", "--option", "batch"], 2, "--option takes KEY=VALUE with KEY a Python name, got 'batch'"),
    (["show", "{d}/good.py", "--option", "heads=2"], 2,
     "{d}/good.py: model() takes no option heads; it accepts batch, dtype"),
    (["show", "{d}/good.py", "--lr", "0"], 2, "--lr must be a finite number > 0, got 0.0"),
    (["cost", "{d}/returns_int.py"], 1, "{d}/returns_int.py: model() must return cg.ModelSpec, got int"),
    (["draw", "{d}/returns_int.py", "-o", "{d}/x.svg"], 1,
     "{d}/returns_int.py: model() must return cg.ModelSpec, got int"),
]


@pytest.mark.parametrize("argv, status, line", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_each_error_is_one_line_with_its_status(files, capsys, argv, status, line):
    d = str(files)
    argv = [a.format(d=d) for a in argv]
    assert _run(argv, capsys) == (status, f"circuitgrad {argv[0]}: {line.format(d=d)}\n")
    assert not (files / "x.svg").exists() and not (files / "proofs").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc takes no new files on Linux only")
def test_draw_to_a_file_that_cannot_be_written_is_a_failure(files, capsys):
    assert _run(["draw", str(files / "good.py"), "-o", "/proc/x.svg"], capsys) == (
        1, "circuitgrad draw: -o /proc/x.svg: cannot write it: No such file or directory\n")


def test_info_takes_no_arguments(capsys):
    with pytest.raises(SystemExit) as e:
        main(["info", "extra"])
    assert e.value.code == 2
    assert capsys.readouterr().err.endswith("circuitgrad: error: unrecognized arguments: extra\n")


# ------------------------------------------------------------------ a missing extra
def test_missing_extra_names_the_extra_to_install():
    assert missing_extra(ModuleNotFoundError("No module named 'cairosvg'", name="cairosvg")) == (
        "No module named 'cairosvg': pip install 'circuitgrad[draw]'")
    assert missing_extra(ModuleNotFoundError("No module named 'galois.typing'", name="galois.typing")) == (
        "No module named 'galois.typing': pip install 'circuitgrad[zk]'")
    assert missing_extra(ImportError("Amaranth is missing: pip install 'circuitgrad[fpga]'")) == (
        "Amaranth is missing: pip install 'circuitgrad[fpga]'")
    assert missing_extra(ModuleNotFoundError("No module named 'nosuch'", name="nosuch")) == "No module named 'nosuch'"


def test_a_missing_module_in_a_core_command_is_one_line_naming_the_extra(files, capsys, monkeypatch):
    import circuitgrad.drawing

    def draw(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'cairosvg'", name="cairosvg")
    monkeypatch.setattr(circuitgrad.drawing, "draw", draw)
    assert _run(["draw", str(files / "good.py"), "-o", str(files / "x.svg")], capsys) == (
        1, "circuitgrad draw: No module named 'cairosvg': pip install 'circuitgrad[draw]'\n")


@pytest.mark.parametrize("cmd", [["show"], ["cost"], ["zk", "prove"], ["fpga", "simulate"]], ids=" ".join)
def test_an_example_without_scikit_learn_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch, cmd):
    """The examples' data needs the [examples] extra: every command that loads one says so in one line."""
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sklearn", None)           # import sklearn now fails
    out = ["--out", str(tmp_path / "p")] if cmd[0] == "zk" else []
    assert _run([*cmd, IRIS, *out], capsys) == (
        1, f"circuitgrad {cmd[0]}: {IRIS}: model(): MissingExtra: datasets.load (the example data sets) needs "
           f"scikit-learn: pip install 'circuitgrad[examples]'\n")


# ------------------------------------------------------------------ --init: a checkpoint of another model
def _checkpoint(path, example: str) -> str:
    """The fixed(16, 8) parameters of ``example`` as a checkpoint (what ``zk prove`` writes as final.npz)."""
    spec = modelfile.load(example, {"dtype": cg.fixed(16, 8)})
    np.savez(path, **spec.compile().init_params(seed=0))
    return str(path)


@pytest.mark.parametrize("given, model, got, want", [
    ("digits", "iris", [64, 64], [4, 16]),          # larger than iris's W0 needs: read from the member's header
    ("iris", "digits", [4, 16], [64, 64]),          # smaller: read, then checked
])
def test_init_with_a_checkpoint_of_another_model_names_the_shapes_and_the_flag(tmp_path, capsys, given, model,
                                                                               got, want):
    pytest.importorskip("sklearn")
    ckpt = _checkpoint(tmp_path / f"{given}.npz", given)
    status, err = _run(["zk", "prove", model, "--init", ckpt, "--steps", "1", "--out", str(tmp_path / "p")], capsys)
    assert (status, err) == (1, f"circuitgrad zk: {ckpt}: parameter W0 has shape {got} in this checkpoint, but the "
                                f"model needs {want}: it is a checkpoint of another model or of other options "
                                f"(--batch, --hidden, --option); --init takes one of this model, such as the "
                                f"final.npz that zk prove writes for it\n")


def test_info_with_a_backend_that_cannot_load_is_one_line(capsys, monkeypatch):
    from circuitgrad.targets import TARGETS

    def available():
        raise ModuleNotFoundError("No module named 'amaranth'", name="amaranth")
    monkeypatch.setattr(TARGETS["fpga"].module(), "available", available, raising=False)
    assert _run(["info"], capsys) == (1, "circuitgrad info: No module named 'amaranth': pip install 'circuitgrad[fpga]'\n")


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """``circuitgrad info | head -1``: the closed pipe is neither a traceback nor an error line, and the status
    is 141, a standard tool's killed by SIGPIPE (not 0: a command cut short did not finish). The reader here
    (``true``) exits before the command writes, so every write meets a closed pipe."""
    import subprocess
    r = subprocess.run(f"set -o pipefail; '{sys.executable}' -m circuitgrad.cli info | true", shell=True,
                       capture_output=True, text=True, timeout=120, executable="/bin/bash")
    assert (r.returncode, r.stderr) == (141, "")
