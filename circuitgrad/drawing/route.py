"""The wires of a placed :class:`~circuitgrad.drawing.layered.Layout`: :func:`geometry` turns the
placement into a :class:`~circuitgrad.drawing.graph.Geometry` (node and frame rectangles) and
:func:`route` draws each wire as SVG path data: from its port straight through the labels' run,
a Bézier across the band where wires bend, along a trunk through the columns it spans, on to its
destination ports (copy dots where it splits).
"""
from __future__ import annotations

from .graph import Geometry, Wire
from .layered import TOP, TRUNK, Layout
from .svg import MARGIN


def geometry(lay: Layout) -> Geometry:
    """The geometry of a placed layout: node and frame rectangles, and every wire routed (:func:`route`)."""
    c = lay.c
    rects = []
    for n in range(len(c.nodes)):
        w, h, _ = lay.size[n]
        cc = lay.col[n]
        rects.append((lay.colx[cc] + (lay.colw[cc] - w) * lay.align(n), lay.y[("n", n)], w, h))
    frames = []
    for f in range(len(c.frames)):
        c0, c1 = lay.fspan[f]
        x0 = lay.colx[c0] - lay.lext[f]
        x1 = lay.colx[c1] + lay.colw[c1] + lay.lab[c1] + lay.rext[f]    # its labels inside
        frames.append((x0, lay.ftop[f], x1 - x0, lay.fheight[f]))
    g = Geometry(lay.width, 0.0, rects, [s[2] for s in lay.size], frames,
                 ftitles=[(x + 8, y + 13) for x, y, _, _ in frames])
    for k, w in enumerate(c.wires):
        g.paths.append(route(lay, k, w, rects, g))
    bottom = max([r[1] + r[3] for r in rects] + [fr[1] + fr[3] for fr in frames]
                 + [lay.y[("t", t)] + TRUNK for t in range(len(lay.trunk))], default=TOP)
    g.height = bottom + MARGIN
    return g


def route(lay: Layout, k: int, w: Wire, rects: list, g: Geometry) -> list[str]:
    """SVG path data of wire ``k``: port to column edge, a Bézier across the gap, on to the port."""
    xl = lay.colx.__getitem__

    def xr(cc: int) -> float:            # where wires leaving column cc start to bend
        return lay.colx[cc] + lay.colw[cc] + lay.lab[cc]

    def conn(x1: float, y1: float, b1: float, b2: float, y2: float, x2: float) -> str:
        dx = (b2 - b1) / 2
        return (f"M{x1:.1f},{y1:.1f} H{b1:.1f} C{b1 + dx:.1f},{y1:.1f} {b2 - dx:.1f},{y2:.1f} "
                f"{b2:.1f},{y2:.1f} H{x2:.1f}")
    sx, sy, sw, sh = rects[w.src]
    cs = lay.col[w.src]
    copy = lay.c.nodes[w.src].kind == "copy"
    px, py = (sx + sw / 2 if copy else sx + sw), sy + lay.port_y(w.src, w.src_slot, True)
    t = lay.trunk_of.get(k)
    paths = []
    near = [d for d, _ in w.dsts if lay.col[d] == cs + 1]
    if t is not None:
        _, c0, c1 = lay.trunk[t]
        ty = lay.y[("t", t)] + TRUNK / 2
        paths.append(conn(px, py, xr(cs), xl(c0), ty, xl(c0)) + f" H{xr(c1):.1f}")
        for cc in range(c0, c1 + 1):
            hits = [d for d, _ in w.dsts if lay.col[d] == cc + 1]
            if hits and (cc < c1 or len(hits) > 1):
                g.dots.append((xr(cc), ty))
    if len(near) + (t is not None) > 1 and not copy:
        g.dots.append((xr(cs), py))
    for d, s in w.dsts:
        dx, dy, _, _ = rects[d]
        qy = dy + lay.port_y(d, s, False)
        qx = dx + (rects[d][2] / 2 if lay.c.nodes[d].kind == "copy" else 0)
        cd = lay.col[d]
        if cd == cs + 1 or t is None:
            paths.append(conn(px, py, xr(cs), xl(cd), qy, qx))
        else:
            ty = lay.y[("t", t)] + TRUNK / 2
            paths.append(conn(xr(cd - 1), ty, xr(cd - 1), xl(cd), qy, qx))
    g.labels.append((px + 4, py - (5 if w.arrays > 1 else 4), w.label, k))   # above the wire (a tuple: wider)
    return paths
