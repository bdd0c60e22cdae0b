"""The README's Python snippets run as written."""
from __future__ import annotations

import os
import re
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*path: str) -> str:
    return open(os.path.join(ROOT, *path), encoding="utf-8").read()


def test_readme_python_blocks_run(capsys, tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    monkeypatch.chdir(tmp_path)                       # snippets write files (step.proof)
    src = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", src, re.S)
    assert len(blocks) >= 2
    ns: dict = {}
    for b in blocks:
        exec(compile(b, "README.md", "exec"), ns)
    out = capsys.readouterr().out
    assert re.search(r"^accuracy 0\.9\d*|^accuracy 1\.0", out, re.M)
    assert len(ns["gate"].source_types) == 2 and len(ns["gate"].target_types) == 1


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
