"""The README's Python snippets run as written."""
from __future__ import annotations

import os
import re
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*path: str) -> str:
    return open(os.path.join(ROOT, *path), encoding="utf-8").read()


def test_readme_python_blocks_run_and_print_what_they_show(capsys, tmp_path, monkeypatch):
    """Every Python block runs as written, and where a line shows its output (``print(x)  # prints: TEXT``)
    the block prints TEXT as a line of its own."""
    pytest.importorskip("sklearn")
    monkeypatch.chdir(tmp_path)                       # snippets write files (step.proof)
    src = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", src, re.S)
    assert len(blocks) >= 2
    ns: dict = {}
    out, shown = "", 0
    for b in blocks:
        exec(compile(b, "README.md", "exec"), ns)
        printed = capsys.readouterr().out
        for text in re.findall(r"^print\(.*# prints: (.*)$", b, re.M):
            assert text in printed.splitlines(), (text, printed[:2000])
            shown += 1
        out += printed
    assert shown >= 1
    assert re.search(r"^accuracy 0\.9\d*|^accuracy 1\.0", out, re.M)
    assert len(ns["gate"].source_types) == 2 and len(ns["gate"].target_types) == 1


def test_readme_type_mismatch_is_the_error_the_code_raises():
    """The error the README shows for composing two dense layers of mismatched widths, as raised."""
    from circuitgrad import nn
    section = _read("README.md").split("Shape and dtype mismatches fail", 1)[1]
    (shown,) = re.findall(r"```\n(TypeMismatch: .*?)\n```", section, re.S)[:1]
    left, right = re.match(r"TypeMismatch: cannot compose dense\(([\d,]+)\) >> dense\(([\d,]+)\)", shown).groups()
    with pytest.raises(Exception) as e:
        nn.dense(*map(int, left.split(","))) >> nn.dense(*map(int, right.split(",")))
    assert f"{type(e.value).__name__}: {e.value}" == shown


def test_readme_extras_table_has_a_row_for_every_extra():
    extras = tomllib.loads(_read("pyproject.toml"))["project"]["optional-dependencies"]
    first_cells = re.findall(r"^\| (`\[\w+\]`[^|]*)\|", _read("README.md"), re.M)   # `[cuda13]` or `[cuda12]`
    named = {e for cell in first_cells for e in re.findall(r"`\[(\w+)\]`", cell)}
    assert [e for e in extras if e not in named] == []


def test_readme_names_every_extra():
    extras = tomllib.loads(_read("pyproject.toml"))["project"]["optional-dependencies"]
    readme = _read("README.md")
    assert [e for e in extras if f"`[{e}]`" not in readme] == []


def test_readme_performance_figures_come_from_benchmarks():
    """Every number in the README's Performance section occurs in docs/BENCHMARKS.md (the measured source)."""
    number = re.compile(r"(?<![\w.])\d+(?:\.\d+)*(?!\w)")
    section = _read("README.md").split("\n## Performance\n", 1)[1].split("\n## ", 1)[0]
    measured = set(number.findall(_read("docs", "BENCHMARKS.md")))
    assert [n for n in number.findall(section) if n not in measured] == []


def test_readme_commands_do_not_write_into_build():
    """setuptools builds in build/; the README's commands write to out/ and proofs/."""
    assert "build/" not in _read("README.md")


def _template() -> str:
    """The README's model-file template: the Python block of the model-files section."""
    section = _read("README.md").split("\n## Model files: what the command-line tools build\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", section, re.S) if "def model(" in b]
    return block


@pytest.mark.slow
def test_readme_model_file_template_works_with_every_command_private_runs_included(tmp_path, capsys, monkeypatch):
    """The template as printed, saved as a file, is a model file for cost, draw, show,
    fpga simulate and zk prove/verify --private (it defines dataset=, which a private run commits to)."""
    pytest.importorskip("sklearn")
    from circuitgrad.cli import main
    monkeypatch.chdir(tmp_path)
    open("mymodel.py", "w", encoding="utf-8").write(_template())
    small = ["--batch", "2", "--hidden", "2"]
    assert main(["cost", "mymodel.py", *small, "--target", "gpu"]) == 0
    assert main(["draw", "mymodel.py", *small, "--step", "-o", "step.svg"]) == 0
    assert main(["show", "mymodel.py", *small]) == 0
    assert main(["fpga", "simulate", "mymodel.py", *small, "--steps", "1"]) == 0
    assert "bit-exact with the interpreter: True" in capsys.readouterr().out
    assert main(["zk", "prove", "mymodel.py", *small, "--private", "--workers", "1", "--steps", "1",
                 "--out", "run"]) == 0
    out = capsys.readouterr().out
    assert "dataset: 112 rows, root " in out
    c0 = next(line.split()[-1] for line in out.splitlines() if line.startswith("starting commitment c0 "))
    assert main(["zk", "verify", "mymodel.py", "run", *small, "--private", "--c0", c0]) == 0
    assert "all 1 proofs verify and chain" in capsys.readouterr().out


def test_readme_states_the_cli_conventions():
    section = _read("README.md").split("\n## CLI conventions\n", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| ")}
    assert {"0", "1", "2"} <= set(rows)
    assert "usage" in rows["2"] and "verification failed" in rows["1"]
