"""The README's Python snippets run as written."""
from __future__ import annotations

import os
import re

import pytest

pytest.importorskip("sklearn")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_python_blocks_run(capsys, tmp_path, monkeypatch):
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
