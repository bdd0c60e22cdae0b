"""The folded layout of a training step (or any diagram with a reverse pass): the lens picture.

The layered layout (:mod:`.layout`) puts a training step in one long row: the forward pass, the
loss, the reverse passes (``R[f]``) and the optimizer, left to right.  Folding cuts that row once,
between two columns where the reverse pass begins (after the loss), and turns the part right of the
cut half a turn (180°) under the part left of it, like folding a paper strip: the forward pass runs
left to right on top, the reverse pass right to left underneath, and the wires that crossed the cut
(the loss's gradient, the activations each forward definition saves for its reverse map, the
parameters on their way to the optimizer) turn around at the right end as nested U-turns, the
outermost for the highest wire.  A half turn keeps everything the layout guarantees (no two nodes
overlap, no wire bends under a label, no wire crosses a node), since it is a rigid motion of each
half; only the text is not turned: the nodes of the lower half are laid out with their ports (and
broadcast band) flipped so that after the turn they read as usual, each wire label is put back
above its wire just left of its source (the lower row runs right to left), and the name of a frame
goes to its lower left corner (where the turn puts the frame's empty title band).

:func:`choose` picks the cut (the place that makes the wider half narrowest, from just after the
last column of the forward pass to just before the first column holding a reverse pass; no cut
inside a frame); :func:`apply` folds the :class:`~circuitgrad.drawing.layout.Geometry`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .svg import MARGIN, text_width
from .layout import TOP

if TYPE_CHECKING:                                   # pragma: no cover
    from .layout import Geometry, _Layout

ROWGAP = 30        # between the two rows
UTURN = 7          # between two nested U-turns
UFIRST = 8         # the innermost U-turn's distance from the cut
LABEL = 10


def _edge(lay: _Layout, b: int) -> float:
    """Where wires leaving column ``b`` start to bend: the cut after column ``b``."""
    return lay.colx[b] + lay.colw[b] + lay.lab[b]


def _right(lay: _Layout) -> float:
    """The right end of the unfolded row's content."""
    return lay.width - MARGIN


def choose(lay: _Layout) -> int | None:
    """The column after which the row is folded: None where there is no place to fold it (a single
    column, or every cut inside a frame)."""
    c = lay.c
    if lay.ncols < 2:
        return None
    ok = [b for b in range(lay.ncols - 1)
          if not any(lo <= b <= hi for lo, hi in lay.fspan)]
    if not ok:
        return None
    rev = [lay.col[n] for n, nd in enumerate(c.nodes) if nd.phase > 0]
    if rev:
        first = min(rev)
        fwd = max([lay.col[n] for n, nd in enumerate(c.nodes)
                   if nd.phase == 0 and not lay.st[n] and nd.kind != "output" and lay.col[n] < first], default=0)
        near = [b for b in ok if fwd - 1 <= b < first]
        ok = near or ok
    return min(ok, key=lambda b: (max(_edge(lay, b), _right(lay) - _edge(lay, b)), b))


# ----------------------------------------------------------------------------------- sources
def optimizer_sources(nodes: list, src_node: dict[int, int], uses: dict[int, list[tuple[int, int | None]]],
                      opt: set[int], nvars: int) -> dict[int, int]:
    """Give the optimizer its own sources: a parameter (or constant) that feeds the forward pass and
    the optimizer ``opt`` (the nodes that compute the new parameters and optimizer states) is drawn
    a second time for the optimizer, all such parameters of one optimizer as one tuple source
    (``38 parameters``, the names in its tooltip), so that no parameter wire runs the length of the
    step to the optimizer.  Edits ``nodes``, ``src_node`` and ``uses`` (the optimizer's uses of each
    such variable move to a new variable) and returns ``{new variable: variable}``."""
    from . import Node
    alias: dict[int, int] = {}
    group: dict[tuple, list[int]] = {}
    for v in sorted(uses):
        n = src_node.get(v)
        if n is None or nodes[n].kind not in ("param", "const") or not nodes[n].static:
            continue
        mine = [u for u in uses[v] if u[0] in opt]
        rest = [u for u in uses[v] if u[0] not in opt]
        if not mine or not rest:
            continue
        for d, _ in mine:
            key = (d, nodes[n].kind, nodes[n].label if nodes[n].kind == "const" else "")
            group.setdefault(key, []).append(v)
        uses[v] = rest
    for (d, kind, label), vs in sorted(group.items()):
        base = len(nodes)
        if kind == "const":
            old = nodes[src_node[vs[0]]]
            nodes.append(Node("const", old.label, old.title, static=True, order=old.order, sub=old.sub, again=True))
        else:
            names = [nodes[n].title if nodes[n].many else nodes[n].title.split(" (")[0]
                     for n in dict.fromkeys(src_node[v] for v in vs)]
            nodes.append(Node("param", f"{len(vs)} parameters" if len(vs) > 1 else nodes[src_node[vs[0]]].label,
                              "the parameters again, for the optimizer (as at the forward pass):\n"
                              + "\n".join(names), static=True, many=len(vs) > 1,
                              order=min(nodes[src_node[v]].order for v in vs),
                              sub="" if len(vs) > 1 else nodes[src_node[vs[0]]].sub, again=True))
        for v in vs:
            nv = nvars + len(alias)
            alias[nv] = v
            src_node[nv] = base
            uses[nv] = [(d, None)]
    return alias


# ----------------------------------------------------------------------------------- paths
def _parse(d: str) -> list[tuple[str, list[float]]]:
    """``M``, ``H`` and ``C`` commands of a path (as :meth:`_Layout.route` writes them)."""
    toks = d.replace(",", " ").split()
    out, i = [], 0
    while i < len(toks):
        cmd = toks[i][0]
        n = {"M": 2, "H": 1, "C": 6}[cmd]
        out.append((cmd, [float(toks[i][1:])] + [float(v) for v in toks[i + 1:i + n]]))
        i += n
    return out


def _f(x: float) -> str:
    return f"{x:.1f}"


class _Fold:
    def __init__(self, xf: float, depth: float, ext: dict[float, float]):
        self.xf, self.depth, self.ext = xf, depth, ext

    def pt(self, x: float, y: float) -> tuple[float, float]:
        """A point of the lower half, turned."""
        return 2 * self.xf - x, self.depth - y

    def uturn(self, y: float) -> str:
        """From ``(xf, y)`` around the right end to the turned point ``(xf, depth - y)``."""
        xf, e = self.xf, self.ext[round(y, 1)]
        y2 = self.depth - y
        r = min(6.0, (y2 - y) / 2)
        xe = xf + e
        return (f" H{_f(xe - r)} C{_f(xe - 0.45 * r)},{_f(y)} {_f(xe)},{_f(y + 0.45 * r)} {_f(xe)},{_f(y + r)}"
                f" C{_f(xe)},{_f(y + r)} {_f(xe)},{_f(y2 - r)} {_f(xe)},{_f(y2 - r)}"
                f" C{_f(xe)},{_f(y2 - 0.45 * r)} {_f(xe - 0.45 * r)},{_f(y2)} {_f(xe - r)},{_f(y2)} H{_f(xf)}")

    def path(self, d: str) -> str:
        """A wire's path, folded: its part right of the cut turned, a U-turn where it crosses."""
        xf, eps = self.xf, 0.01
        out: list[str] = []
        cx = cy = 0.0
        right = False
        for cmd, a in _parse(d):
            if cmd == "M":
                cx, cy = a
                right = cx > xf + eps
                x, y = self.pt(cx, cy) if right else (cx, cy)
                out.append(f"M{_f(x)},{_f(y)}")
                continue
            end = a[0] if cmd == "H" else a[4]
            if not right and end > xf + eps:                # crossing the cut (always on a straight run)
                if cmd == "C" and cx < xf - eps:
                    raise AssertionError("fold: a wire bends across the cut")
                if cx < xf - eps:
                    out.append(f" H{_f(xf)}")
                out.append(self.uturn(cy))
                right = True
            if cmd == "H":
                x = 2 * xf - a[0] if right else a[0]
                out.append(f" H{_f(x)}")
                cx = a[0]
            else:
                pts = [self.pt(a[j], a[j + 1]) if right else (a[j], a[j + 1]) for j in (0, 2, 4)]
                out.append(" C" + " ".join(f"{_f(x)},{_f(y)}" for x, y in pts))
                cx, cy = a[4], a[5]
        return "".join(out).strip()


def _crossings(g: Geometry, xf: float, wide: list[bool]) -> dict[float, bool]:
    """The heights at which wires cross the cut (and whether a tuple crosses there)."""
    ys: dict[float, bool] = {}
    eps = 0.01
    for k, paths in enumerate(g.paths):
        for d in paths:
            cx = cy = 0.0
            for cmd, a in _parse(d):
                if cmd == "M":
                    cx, cy = a
                    continue
                end = a[0] if cmd == "H" else a[4]
                if cx <= xf + eps and end > xf + eps:
                    ys[round(cy, 1)] = ys.get(round(cy, 1), False) or wide[k]
                    break
                if cmd == "H":
                    cx = a[0]
                else:
                    cx, cy = a[4], a[5]
    return ys


def apply(lay: _Layout, g: Geometry, b: int) -> Geometry:
    """Fold geometry ``g`` after column ``b``."""
    from .layout import Geometry
    c = lay.c
    xf = float(_f(_edge(lay, b)))                     # as the paths print it
    low = [n for n in range(len(c.nodes)) if lay.col[n] > b]
    top = [n for n in range(len(c.nodes)) if lay.col[n] <= b]
    lowf = [f for f in range(len(c.frames)) if lay.fspan[f][0] > b]
    # heights: the upper half's bottom, the lower half's extent (before the turn)
    upper = [g.nodes[n][1] + g.nodes[n][3] for n in top] + [g.frames[f][1] + g.frames[f][3]
                                                           for f in range(len(c.frames)) if f not in lowf]
    lower_lo, lower_hi = [], []
    for n in low:
        lower_lo.append(g.nodes[n][1])
        lower_hi.append(g.nodes[n][1] + g.nodes[n][3])
    for f in lowf:
        lower_lo.append(g.frames[f][1])
        lower_hi.append(g.frames[f][1] + g.frames[f][3])
    for paths in g.paths:
        for d in paths:
            cx = 0.0
            for cmd, a in _parse(d):
                pts = [(a[0], a[1])] if cmd == "M" else [(a[0], None)] if cmd == "H" else [(a[4], a[5])]
                for x, y in pts:
                    if y is not None:
                        (lower_lo if x > xf else upper).append(y)
                        if x > xf:
                            lower_hi.append(y)
    for x, y, s, k in g.labels:
        if x <= xf:
            upper.append(y + 3)
    ups = max(upper, default=0.0)
    depth = ups + ROWGAP + max(lower_hi, default=0.0) + LABEL     # turned: the lower half's top is below ups
    ys = _crossings(g, xf, [w.arrays > 1 for w in c.wires])
    ext: dict[float, float] = {}                       # the lowest innermost, the highest outermost
    e, prev = UFIRST, None
    for y in sorted(ys, reverse=True):
        if prev is not None:
            e += UTURN if ys[y] or ys[prev] else UTURN - 3
        ext[y], prev = e, y
    fo = _Fold(xf, depth, ext)
    nodes = list(g.nodes)
    for n in low:
        x, y, w, h = nodes[n]
        nodes[n] = (2 * xf - x - w, depth - y - h, w, h)
    frames = list(g.frames)
    ftitles = list(g.ftitles)
    for f in lowf:
        x, y, w, h = frames[f]
        frames[f] = (2 * xf - x - w, depth - y - h, w, h)
        ftitles[f] = (frames[f][0] + 8, frames[f][1] + h - 9)
    paths = [[fo.path(d) for d in ps] for ps in g.paths]
    dots = [fo.pt(x, y) if x >= xf - 0.06 else (x, y) for x, y in g.dots]
    labels = []
    for x, y, s, k in g.labels:
        if x <= xf:
            labels.append((x, y, s, k))
            continue
        w = c.wires[k]
        lift = 5 if w.arrays > 1 else 4
        px, py = fo.pt(x - 4, y + lift)                   # the port, turned
        labels.append((px - 4 - text_width(s, LABEL), py - lift, s, k))
    out = Geometry(0.0, 0.0, nodes, g.band, frames, paths, dots, labels, ftitles)
    # move the content to the margin on the left and below the title at the top
    xs = [x for x, _, _, _ in nodes] + [x for x, _, _, _ in frames] + [x for x, _, _, _ in labels]
    shift = max(0.0, MARGIN - min(xs, default=MARGIN))
    ys = ([y for _, y, _, _ in out.nodes + out.frames] + [y - LABEL for _, y, _, _ in out.labels]
          + [y for ps in out.paths for d in ps for _, y in _points(d)])
    lift = min(ys, default=TOP) - TOP
    if shift or lift:
        out.nodes = [(x + shift, y - lift, w, h) for x, y, w, h in out.nodes]
        out.frames = [(x + shift, y - lift, w, h) for x, y, w, h in out.frames]
        out.ftitles = [(x + shift, y - lift) for x, y in out.ftitles]
        out.dots = [(x + shift, y - lift) for x, y in out.dots]
        out.labels = [(x + shift, y - lift, s, k) for x, y, s, k in out.labels]
        out.paths = [[_shift(d, shift, -lift) for d in ps] for ps in out.paths]
        depth -= lift
        ups -= lift
    far = xf + (max(ext.values()) if ext else 0.0) + 3
    out.width = shift + max(far, max((x + w for x, _, w, _ in nodes + frames), default=0.0),
                            max((x + text_width(s, LABEL) for x, _, s, _ in labels), default=0.0)) + MARGIN
    bottom = [y + h for _, y, _, h in out.nodes + out.frames] + [depth - v for v in lower_lo] + [ups]
    out.height = max(bottom) + MARGIN
    return out


def _shift(d: str, dx: float, dy: float) -> str:
    out = []
    for cmd, a in _parse(d):
        if cmd == "H":
            out.append(f"H{_f(a[0] + dx)}")
        elif cmd == "M":
            out.append(f"M{_f(a[0] + dx)},{_f(a[1] + dy)}")
        else:
            out.append("C" + " ".join(f"{_f(a[j] + dx)},{_f(a[j + 1] + dy)}" for j in (0, 2, 4)))
    return " ".join(out)


def _points(d: str) -> list[tuple[float, float]]:
    """The points a path's commands name (enough for its extent: its curves stay within them)."""
    pts, y = [], 0.0
    for cmd, a in _parse(d):
        if cmd == "H":
            pts.append((a[0], y))
        elif cmd == "M":
            y = a[1]
            pts.append((a[0], y))
        else:
            pts += [(a[0], a[1]), (a[2], a[3]), (a[4], a[5])]
            y = a[5]
    return pts
