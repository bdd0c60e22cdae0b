"""Optional dependencies of the ZK backend (the ``[zk]`` extra), named as a user knows them: one line naming
what is missing and how to install it, both from the API and from ``circuitgrad zk`` (:mod:`circuitgrad.extras`).

    dask = require("distributed", "proving on a Dask cluster")   # or MissingExtra: '... needs Dask: pip install ...'
"""
from __future__ import annotations

from types import ModuleType

from circuitgrad import extras
from circuitgrad.extras import MissingExtra, available

__all__ = ["MissingExtra", "require", "available", "INSTALL"]

#: the command that installs every optional dependency of the ZK backend
INSTALL = extras.install("zk")

#: the modules of the ``[zk]`` extra, by the name a user knows them by
_NAMES = {"distributed": "Dask", "cloudpickle": "Dask", "galois": "galois"}


def require(module: str, what: str) -> ModuleType:
    """``module`` imported, or :class:`MissingExtra`: ``"{what} needs Dask: pip install 'circuitgrad[zk]'"``."""
    return extras.require(module, what, _NAMES.get(module, module), "zk")
