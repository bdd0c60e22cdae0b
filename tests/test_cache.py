"""``circuitgrad/cache.py``: the per-user cache directory (what is cached there and when it is measured again:
``tests/test_calibration.py``)."""
from __future__ import annotations

import os

from circuitgrad.cache import cache_dir


def test_cache_dir_is_created_under_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("CIRCUITGRAD_CACHE", str(tmp_path / "cache"))
    path = cache_dir("tools", "node")
    assert path == os.path.join(str(tmp_path / "cache"), "tools", "node") and os.path.isdir(path)
