"""The data the drawing modules pass along: the visible graph (:class:`Circuit` of :class:`Node`,
:class:`Wire` and :class:`Frame`, built by :mod:`.builder`) and where it is placed (:class:`Geometry`,
computed by :mod:`.layout`, drawn by :mod:`.svg`).  Data only: this module imports no other
drawing module.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Node:
    """A visible node: ``kind`` is input, output, param, const, box (a collapsed definition), prim or copy."""
    kind: str
    label: str
    title: str
    frame: int | None = None
    order: int = 0                   # first instruction: ties are broken by program order
    style: str = "plain"             # contraction, linear, nonlinear (boxes and primitives)
    dashed: bool = False             # a linear map
    sub: str = ""                    # second line: shape of a parameter, contracted size ("·16", "Σ16")
    bcast: str = ""                  # axes broadcast over (drawn passing over the top), "2×8"
    static: bool = False             # a parameter-like source: placed next to its consumer
    fixed_slots: bool = False        # port order is the argument order (primitives)
    many: bool = False               # stands for several sources or outputs
    optimizer: bool = False          # computes the new parameters (folded: a row of its own)
    again: bool = False              # a source drawn a second time (the optimizer's parameters, folded)
    wrap: bool = False               # a long name on two lines (folded drawings: narrower columns)
    phase: int = 0                   # 1 and more: a second pass (R[f]), or inside the frame of one
    n_in: int = 0
    n_out: int = 0


@dataclass
class Wire:
    """One array (or a tuple of ``arrays``) from ``src`` port ``src_slot`` to ``dsts`` ``(node, slot)``."""
    src: int
    src_slot: int
    dsts: list[tuple[int, int]]
    label: str
    title: str
    arrays: int = 1


@dataclass
class Frame:
    """An expanded definition, drawn around its parts."""
    label: str
    title: str
    parent: int | None


@dataclass
class Circuit:
    """The visible graph: what :mod:`.layout` places and :mod:`.svg` draws."""
    title: str
    nodes: list[Node]
    wires: list[Wire]
    frames: list[Frame]
    dtype: str
    reverse: bool = False            # some node is the second pass of a definition (``R[f]``)


@dataclass
class Geometry:
    """Positions: node and frame rectangles ``(x, y, w, h)``, wire paths, copy dots, wire labels."""
    width: float
    height: float
    nodes: list[tuple[float, float, float, float]]
    band: list[float]                                   # broadcast band height of each node
    frames: list[tuple[float, float, float, float]]
    paths: list[list[str]] = field(default_factory=list)     # SVG path data of each wire
    dots: list[tuple[float, float]] = field(default_factory=list)
    labels: list[tuple[float, float, str, int]] = field(default_factory=list)
    ftitles: list[tuple[float, float]] = field(default_factory=list)   # baseline start of each frame's name
    folded: bool = False                                                 # by :func:`.fold.apply`
