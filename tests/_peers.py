"""The peers that tests compare against, loaded so that a missing one skips its tests and a broken one says why.

``pytest.importorskip`` skips on ``ImportError`` only; a PyTorch whose install was cut short raises ``OSError``
(``libtorch_global_deps.so: cannot open shared object file``) and would be a collection error of the whole
module. ``scripts/test.sh`` reinstalls such a torch, or removes it."""
from __future__ import annotations

import types

import pytest


def torch() -> types.ModuleType:
    """PyTorch, or a skip of the calling test (or module) that names why it is unavailable."""
    try:
        return pytest.importorskip("torch")
    except OSError as e:
        pytest.skip(f"PyTorch is installed but does not load ({e}): reinstall it (scripts/test.sh does)",
                    allow_module_level=True)


def open_hypergraphs() -> types.ModuleType:
    """``open_hypergraphs.numpy``, the reference the core's own open hypergraphs are checked against, or a skip.

    It pins NumPy 1.26, so it is not a dependency: ``scripts/test.sh`` installs it without its pins."""
    try:
        return pytest.importorskip("open_hypergraphs.numpy")
    except Exception as e:                                  # a release that no longer loads on this NumPy
        pytest.skip(f"open-hypergraphs is installed but does not load ({type(e).__name__}: {e})",
                    allow_module_level=True)
