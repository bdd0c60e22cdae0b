"""The folded layout of a training step (or any diagram with a reverse pass): the lens picture.

The layered layout (:mod:`.layout`) puts a training step in one long row: the forward pass, the
loss, the reverse passes (``R[f]``) and the optimizer, left to right.  Folding cuts that row between
two columns where every wire runs straight: once where the reverse pass begins (after the loss),
and, when there is an optimizer, once more just before its column of sources.  The part after the
first cut is turned half a turn (180°) under the part before it, like a folded paper strip, and the
part after the second cut is turned again under the left end of that: the forward pass runs left to
right on top, the reverse pass right to left under it, the optimizer left to right at the bottom.
The wires that crossed a cut turn around as nested U-turns: round the right end (the loss's
gradient, the activations each forward definition saved for its reverse map, the parameters its
reverse map reads) and round the left end (the gradients on their way to the optimizer).

A half turn keeps everything the layout guarantees (no two nodes overlap, no wire bends under a
label, no wire crosses a node), since it is a rigid motion of each row; only the text is not turned:
the nodes of the middle row are laid out with their ports (and broadcast band) flipped so that after
the turn they read as usual, each of its wire labels is put back above its wire just left of its
source (the row runs right to left), and the name of a frame goes to its lower left corner (where
the turn puts the frame's empty title band).

:func:`optimizer_sources` gives the optimizer its own parameter pill (when the circuit is built);
:func:`choose` picks the cuts (the first where the folded picture is narrowest, from just before the
loss's column to just before the first column holding a reverse pass; no cut inside a frame);
:func:`apply` folds the :class:`~circuitgrad.drawing.graph.Geometry`.
"""
from __future__ import annotations

from .graph import Geometry, Node
from .layered import TOP, Layout
from .svg import MARGIN, SMALL, text_width

ROWGAP = 30        # between two rows
UTURN = 6          # between two nested U-turns (a tuple: 5 px wide) (4 between two single wires)
UFIRST = 6         # the innermost U-turn's distance from the cut
LABEL = SMALL      # wire labels: font size


def _edge(lay: Layout, b: int) -> float:
    """Where wires leaving column ``b`` start to bend: the cut after column ``b``."""
    return lay.colx[b] + lay.colw[b] + lay.lab[b]


def _right(lay: Layout) -> float:
    """The right end of the unfolded row's content."""
    return lay.width - MARGIN


def choose(lay: Layout) -> list[int] | None:
    """The columns after which the row is folded: ``[b]`` (two rows) or ``[b, o]`` (three: the
    optimizer, from column ``o + 1`` on, under the reverse pass); None where there is no place to fold
    (a single column, or every cut inside a frame)."""
    c = lay.c
    if lay.ncols < 2:
        return None
    free = [b for b in range(lay.ncols - 1)
            if not any(lo <= b <= hi for lo, hi in lay.fspan)]
    ok = free
    if not ok:
        return None
    rev = [lay.col[n] for n, nd in enumerate(c.nodes) if nd.phase > 0]
    if rev:
        first = min(rev)
        fwd = max([lay.col[n] for n, nd in enumerate(c.nodes)
                   if nd.phase == 0 and not lay.st[n] and nd.kind != "output" and lay.col[n] < first], default=0)
        ok = [b for b in ok if fwd - 1 <= b < first]
        if not ok:                                     # the loss inside a frame: better one row
            return None
    o = lay.optcol - 2 if lay.optcol is not None else None     # its sources: a column of their own
    end = _right(lay)

    def reach(b: int) -> float:
        """About how far the U-turns at a cut after column ``b`` reach: a wire crossing it, 5 px."""
        n = sum(1 for w in c.wires if lay.col[w.src] <= b < max(lay.col[d] for d, _ in w.dsts))
        return UFIRST + 5 * max(n - 1, 0)

    def cost(b: int) -> tuple:
        """The width of the folded picture (before margins), as far as columns tell."""
        x1 = _edge(lay, b)
        if o is not None and o > b and o in free:
            x2 = _edge(lay, o)
            left = 2 * x1 - x2                          # row 1's left end; row 2 starts there
            return max(x1 + reach(b), left + end - x2) - min(0.0, left - reach(o)), b
        return max(x1 + reach(b), x1) - min(0.0, 2 * x1 - end), b
    b = min(ok, key=cost)
    return [b, o] if o is not None and o > b and o in free else [b]


# ----------------------------------------------------------------------------------- sources
def optimizer_sources(nodes: list, src_node: dict[int, int], uses: dict[int, list[tuple[int, int | None]]],
                      opt: set[int], nvars: int) -> dict[int, int]:
    """Give the optimizer its own sources: a parameter (or constant) that feeds the forward pass and
    the optimizer ``opt`` (the nodes that compute the new parameters and optimizer states) is drawn
    a second time for the optimizer, all such parameters of one optimizer as one tuple source
    (``38 parameters``, the names in its tooltip), so that no parameter wire runs the length of the
    step to the optimizer.  Edits ``nodes``, ``src_node`` and ``uses`` (the optimizer's uses of each
    such variable move to a new variable) and returns ``{new variable: variable}``."""
    alias: dict[int, int] = {}
    group: dict[tuple, list[tuple[int, int | None]]] = {}
    for v in sorted(uses):
        n = src_node.get(v)
        if n is None or nodes[n].kind not in ("param", "const") or not nodes[n].static:
            continue
        mine = [u for u in uses[v] if u[0] in opt]
        rest = [u for u in uses[v] if u[0] not in opt]
        if not mine or not rest:
            continue
        for d, sl in mine:
            key = (d, nodes[n].kind, nodes[n].label if nodes[n].kind == "const" else "")
            group.setdefault(key, []).append((v, sl))
        uses[v] = rest
    for (d, kind, label), vsl in sorted(group.items(), key=lambda kv: kv[0]):
        base = len(nodes)
        vs = [v for v, _ in vsl]
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
        for v, sl in vsl:
            nv = nvars + len(alias)
            alias[nv] = v
            src_node[nv] = base
            uses[nv] = [(d, sl)]
    return alias


# ----------------------------------------------------------------------------------- paths
def _parse(d: str) -> list[tuple[str, list[float]]]:
    """``M``, ``H`` and ``C`` commands of a path (as :func:`.route.route` writes them)."""
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
    """Where each point of the unfolded row goes: row 0 (left of the first cut ``x1``) stays, row 1
    (between the cuts) is turned half a turn about ``x1`` and moved down by ``d1``, row 2 (right of
    the second cut ``x2``) is turned again (so moved: upright) to start under row 1's left end and
    moved down by ``d2``.  The wires crossing a cut turn around: ``ext1`` (right of ``x1``) and
    ``ext2`` (left of row 1's left end) give each crossing height its U-turn's reach."""

    def __init__(self, x1: float, x2: float | None, d1: float, d2: float,
                 ext1: dict[float, float], ext2: dict[float, float]):
        self.x1, self.x2, self.d1, self.d2, self.ext1, self.ext2 = x1, x2, d1, d2, ext1, ext2
        self.left = 2 * x1 - x2 if x2 is not None else 0.0       # row 1's left end (turned x2)

    def region(self, x: float, eps: float = 0.01) -> int:
        return 0 if x <= self.x1 + eps else 1 if self.x2 is None or x <= self.x2 + eps else 2

    def pt(self, x: float, y: float, r: int) -> tuple[float, float]:
        if r == 0:
            return x, y
        if r == 1:
            return 2 * self.x1 - x, self.d1 - y
        return x - self.x2 + self.left, y + self.d2

    def hx(self, x: float, r: int) -> float:
        return self.pt(x, 0.0, r)[0]

    def uturn(self, y: float, r: int) -> str:
        """From the cut after row ``r - 1`` at (unfolded) height ``y`` round to row ``r``."""
        if r == 1:
            xa, ya, yb, e, sgn = self.x1, y, self.d1 - y, self.ext1[round(y, 1)], 1.0
        else:
            xa, ya, yb, e, sgn = self.left, self.d1 - y, y + self.d2, self.ext2[round(y, 1)], -1.0
        rr = min(6.0, (yb - ya) / 2)
        xe = xa + sgn * e
        xc = xe - sgn * rr
        k = 0.45 * rr
        return (f" H{_f(xc)} C{_f(xe - sgn * k)},{_f(ya)} {_f(xe)},{_f(ya + k)} {_f(xe)},{_f(ya + rr)}"
                f" C{_f(xe)},{_f(ya + rr)} {_f(xe)},{_f(yb - rr)} {_f(xe)},{_f(yb - rr)}"
                f" C{_f(xe)},{_f(yb - k)} {_f(xe - sgn * k)},{_f(yb)} {_f(xc)},{_f(yb)} H{_f(xa)}")

    def path(self, d: str) -> str:
        """A wire's path, folded: each part moved with its row, a U-turn where it crosses a cut
        (always on a straight run: a horizontal segment, or a bend starting at the cut)."""
        out: list[str] = []
        cx = cy = 0.0
        r = 0
        for cmd, a in _parse(d):
            if cmd == "M":
                cx, cy = a
                r = self.region(cx)
                x, y = self.pt(cx, cy, r)
                out.append(f"M{_f(x)},{_f(y)}")
                continue
            end = a[0] if cmd == "H" else a[4]
            while self.region(end) > r:
                cut = self.x1 if r == 0 else self.x2
                if cmd == "C" and cx < cut - 0.01:
                    raise AssertionError("fold: a wire bends across a cut")
                if cx < cut - 0.01:
                    out.append(f" H{_f(self.hx(cut, r))}")
                r += 1
                out.append(self.uturn(cy, r))
            if cmd == "H":
                out.append(f" H{_f(self.hx(a[0], r))}")
                cx = a[0]
            else:
                pts = [self.pt(a[j], a[j + 1], r) for j in (0, 2, 4)]
                out.append(" C" + " ".join(f"{_f(x)},{_f(y)}" for x, y in pts))
                cx, cy = a[4], a[5]
        return "".join(out).strip()


def _crossings(g: Geometry, cut: float, wide: list[bool]) -> dict[float, bool]:
    """The heights at which wires cross the cut at ``cut`` (and whether a tuple crosses there)."""
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
                if cx <= cut + eps and end > cut + eps:
                    ys[round(cy, 1)] = ys.get(round(cy, 1), False) or wide[k]
                    break
                if cmd == "H":
                    cx = a[0]
                else:
                    cx, cy = a[4], a[5]
    return ys


def _reach(ys: dict[float, bool], outer_high: bool) -> dict[float, float]:
    """Each crossing height's U-turn reach: nested, UTURN apart (2 less between two single wires)."""
    ext: dict[float, float] = {}
    e, prev = UFIRST, None
    for y in sorted(ys, reverse=outer_high):
        if prev is not None:
            e += UTURN if ys[y] or ys[prev] else UTURN - 2
        ext[y], prev = e, y
    return ext


def apply(lay: Layout, g: Geometry, cuts: list[int]) -> Geometry:
    """Fold geometry ``g`` after the columns ``cuts`` (one or two)."""
    c = lay.c
    x1 = float(_f(_edge(lay, cuts[0])))               # as the paths print it
    x2 = float(_f(_edge(lay, cuts[1]))) if len(cuts) > 1 else None
    probe = _Fold(x1, x2, 0.0, 0.0, {}, {})
    row = [0 if lay.col[n] <= cuts[0] else 1 if len(cuts) == 1 or lay.col[n] <= cuts[1] else 2
           for n in range(len(c.nodes))]
    frow = [0 if lay.fspan[f][1] <= cuts[0] else 1 if len(cuts) == 1 or lay.fspan[f][1] <= cuts[1] else 2
            for f in range(len(c.frames))]
    # the (unfolded) heights each row spans
    lo: dict[int, list[float]] = {0: [], 1: [], 2: []}
    for n, (x, y, w, h) in enumerate(g.nodes):
        lo[row[n]] += [y, y + h]
    for f, (x, y, w, h) in enumerate(g.frames):
        lo[frow[f]] += [y, y + h]
    for paths in g.paths:
        for d in paths:
            for x, y in _points(d):
                lo[probe.region(x)].append(y)
    for x, y, s, k in g.labels:
        lo[probe.region(x)] += [y - LABEL, y + 3]
    ups = max(lo[0], default=0.0)
    d1 = ups + ROWGAP + max(lo[1], default=0.0) + LABEL          # row 1 turned: its top below ups
    d2 = d1 - min(lo[1], default=0.0) + ROWGAP + LABEL - min(lo[2], default=0.0)
    wide = [w.arrays > 1 for w in c.wires]
    ext1 = _reach(_crossings(g, x1, wide), True)                  # the highest wire outermost
    ext2 = _reach(_crossings(g, x2, wide), False) if x2 is not None else {}   # the lowest outermost
    fo = _Fold(x1, x2, d1, d2, ext1, ext2)
    nodes = list(g.nodes)
    for n, (x, y, w, h) in enumerate(g.nodes):
        if row[n] == 1:
            nodes[n] = (2 * x1 - x - w, d1 - y - h, w, h)
        elif row[n] == 2:
            nodes[n] = (*fo.pt(x, y, 2), w, h)
    frames, ftitles = list(g.frames), list(g.ftitles)
    for f, (x, y, w, h) in enumerate(g.frames):
        if frow[f] == 1:
            frames[f] = (2 * x1 - x - w, d1 - y - h, w, h)
            ftitles[f] = (frames[f][0] + 8, frames[f][1] + h - 9)
        elif frow[f] == 2:
            frames[f] = (*fo.pt(x, y, 2), w, h)
            ftitles[f] = fo.pt(*g.ftitles[f], 2)
    paths = [[fo.path(d) for d in ps] for ps in g.paths]
    dots = [fo.pt(x, y, fo.region(x, -0.06)) for x, y in g.dots]   # a dot on a cut: after the U-turn
    labels = []
    for x, y, s, k in g.labels:
        r = fo.region(x)
        if r != 1:
            labels.append((*fo.pt(x, y, r), s, k))
            continue
        lift = 5 if c.wires[k].arrays > 1 else 4
        px, py = fo.pt(x - 4, y + lift, 1)                # the port, turned: the label left of it, above
        labels.append((px - 4 - text_width(s, LABEL), py - lift, s, k))
    out = Geometry(0.0, 0.0, nodes, g.band, frames, paths, dots, labels, ftitles, folded=True)
    # move the content to the margin on the left and under the title at the top
    pts = [p for ps in out.paths for d in ps for p in _points(d)]
    xs = [x for x, _, _, _ in nodes + frames + labels] + [x for x, _ in pts]
    ys = [y for _, y, _, _ in nodes + frames] + [y - LABEL for _, y, _, _ in labels] + [y for _, y in pts]
    dx, dy = MARGIN - min(xs, default=MARGIN), TOP - min(ys, default=TOP)
    out.nodes = [(x + dx, y + dy, w, h) for x, y, w, h in out.nodes]
    out.frames = [(x + dx, y + dy, w, h) for x, y, w, h in out.frames]
    out.ftitles = [(x + dx, y + dy) for x, y in out.ftitles]
    out.dots = [(x + dx, y + dy) for x, y in out.dots]
    out.labels = [(x + dx, y + dy, s, k) for x, y, s, k in out.labels]
    out.paths = [[_shift(d, dx, dy) for d in ps] for ps in out.paths]
    right = ([x + w for x, _, w, _ in out.nodes + out.frames] + [x + dx for x, _ in pts]
             + [x + text_width(s, LABEL) for x, _, s, _ in out.labels])
    bottom = [y + h for _, y, _, h in out.nodes + out.frames] + [y + dy for _, y in pts] + [
        y + 3 for _, y, _, _ in out.labels]
    out.width = max(right) + MARGIN
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
