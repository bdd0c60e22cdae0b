"""Optional dependencies of the ZK backend (the ``[zk]`` extra): one line naming what is missing and how to
install it, both from the API and from ``circuitgrad zk``.

    dask = require("distributed", "proving on a Dask cluster")   # or MissingExtra: '... needs Dask: pip install ...'
"""
from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingExtra", "require", "available", "INSTALL"]

#: the command that installs every optional dependency of the ZK backend
INSTALL = "pip install 'circuitgrad[zk]'"

#: the modules of the ``[zk]`` extra, by the name a user knows them by
_NAMES = {"distributed": "Dask", "cloudpickle": "Dask", "galois": "galois"}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message is one line: what needs it, its name, the install
    command. An ImportError, so that code catching that one still does."""


def require(module: str, what: str) -> ModuleType:
    """``module`` imported, or :class:`MissingExtra`: ``"{what} needs Dask: pip install 'circuitgrad[zk]'"``."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(f"{what} needs {_NAMES.get(module, module)}: {INSTALL}") from e


def available(module: str) -> bool:
    """Whether ``module`` imports (it is imported, as :func:`require` would)."""
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False
