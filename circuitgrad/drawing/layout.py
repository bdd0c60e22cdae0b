"""Where everything goes: :func:`layout` places a :class:`~circuitgrad.drawing.graph.Circuit` (an
acyclic graph of visible nodes: see :func:`~circuitgrad.drawing.grouping.phases`) and returns its
:class:`~circuitgrad.drawing.graph.Geometry`, running the steps below in order: 1 to 4 are
:class:`~circuitgrad.drawing.layered.Layout`'s (the wires routed by :mod:`.route`), 5 is :mod:`.fold`'s.

1. **Columns**: longest path from the inputs over the visible graph; parameter-like sources (and
   what is computed from them alone) as late as possible, next to their consumer; outputs last.
   A wire spanning several columns gets a *trunk*: a straight horizontal run through them.
2. **Order** in each column: barycenter sweeps (left to right, right to left), sorted
   hierarchically so that the parts of an expanded definition stay together; ties keep program order.
3. **Rows**: each frame is placed as one block, its parts first.  Inside a block, column by column,
   the data nodes and frames starting there are stacked in their order as near as they can be to
   the weighted mean height of their neighbours (least squares: pooling adjacent violators), below
   what is already there; then parameters and trunks take the free height nearest to theirs.
   A dozen passes, each starting from the last.  No two items of a column overlap.
4. **x**: each column as wide as its widest node, then a straight run as long as the longest wire
   label leaving it (the labels sit there, each on its own wire), then a band of width ``BEND``
   where the wires bend and cross: no wire crosses another under a label.
5. **Fold** (training steps, :mod:`.fold`): the row cut where the reverse pass begins (and before
   the optimizer), the parts turned under each other: the lens picture.

Everything is sorted by explicit keys: the same circuit gives the same geometry.
"""
from __future__ import annotations

from . import fold as folding
from .graph import Circuit, Geometry
from .layered import BEND, FRAME_TITLE, GAP, LABEL, OUTER, PAD, PASSES, SIDE, SWEEPS, TOP, TRUNK, Layout
from .route import geometry

__all__ = ["layout", "Geometry", "Layout", "PAD", "FRAME_TITLE", "TRUNK", "GAP", "TOP", "SWEEPS", "OUTER", "SIDE",
           "PASSES", "BEND", "LABEL"]


def layout(c: Circuit, fold: bool = False) -> Geometry:
    """The geometry of circuit ``c``; ``fold``: the row folded where the reverse pass begins and
    before the optimizer (:mod:`.fold`), when there is a place to fold it."""
    lay = Layout(c)
    lay.fold = fold
    lay.columns()
    lay.trunks()
    lay.elements()
    lay.sweep()
    lay.spans()
    lay.xs()
    cut = folding.choose(lay) if fold else None
    if cut is not None:
        lay.flip = {n for n in range(len(c.nodes)) if cut[0] < lay.col[n] <= (cut[1:] or [lay.ncols])[0]}
    lay.rows()
    g = geometry(lay)
    return folding.apply(lay, g, cut) if cut is not None else g
