"""``circuitgrad/cache.py``: a cached value is used only when its key matches and it parses; anything missing,
damaged, foreign or stale is measured again and written back (cached files are untrusted input)."""
from __future__ import annotations

import json
import os

import pytest

from circuitgrad.cache import cache_dir, cached


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CIRCUITGRAD_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _rate(d: dict) -> float | None:
    v = d["rate"]
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


def test_measured_once_then_read(cache):
    calls = []

    def measure():
        calls.append(1)
        return 2.5
    args = ("rates.json", {"version": 1}, _rate, measure, lambda v: {"rate": v})
    assert cached(*args) == 2.5 and cached(*args) == 2.5
    assert len(calls) == 1
    assert json.loads((cache / "rates.json").read_text()) == {"rate": 2.5, "version": 1}
    assert cached(*args, refresh=True) == 2.5 and len(calls) == 2


@pytest.mark.parametrize("content", [
    "{not json", "[1, 2]", '{"rate": 1.0, "version": 0}', '{"rate": -3, "version": 1}', '{"rate": "x", "version": 1}',
    '{"version": 1}', "",
], ids=["damaged", "not-an-object", "stale-key", "refused-by-parse", "wrong-type", "missing-field", "empty"])
def test_anything_that_does_not_parse_is_measured_again(cache, content):
    os.makedirs(cache, exist_ok=True)
    (cache / "rates.json").write_text(content)
    assert cached("rates.json", {"version": 1}, _rate, lambda: 7.0, lambda v: {"rate": v}) == 7.0
    assert json.loads((cache / "rates.json").read_text()) == {"rate": 7.0, "version": 1}


def test_cache_dir_is_created_under_the_variable(cache):
    path = cache_dir("tools", "node")
    assert path == os.path.join(str(cache), "tools", "node") and os.path.isdir(path)
