"""The layered (Sugiyama-style) placement of a :class:`~circuitgrad.drawing.graph.Circuit`:
:class:`Layout` gives every node its column, its order in the column, its height and the columns
their x (steps 1 to 4 of :mod:`.layout`); :func:`optimizer_columns` moves a training step's optimizer
to the end when the picture is folded.  The wires are routed by :mod:`.route`, the row folded by
:mod:`.fold`.  Owns the spacing constants.
"""
from __future__ import annotations

import heapq
import os
from typing import TYPE_CHECKING, Callable

from .svg import MARGIN, SMALL, node_size, text_width

if TYPE_CHECKING:                                   # pragma: no cover
    from .graph import Circuit

PAD = 10           # frame padding
FRAME_TITLE = 16   # frame title band
TRUNK = 4          # height of a trunk (a wire running through columns)
GAP = 14           # vertical gap between two items of a column
TOP = 44           # room for the title
SWEEPS = 6
OUTER = 0.2       # weight of a connection leaving the frame, inside a frame
SIDE = 0.05       # weight of a parameter's pull on a data node
PASSES = 12
BEND = 24          # the run of a gap between columns where wires bend (after the labels' straight run)
LABEL = SMALL      # wire labels: font size


class Layout:
    """The layered placement of a circuit, step by step (see :func:`.layout.layout` for the order)."""

    def __init__(self, c: Circuit):
        self.c = c
        N = len(c.nodes)
        self.size = [node_size(nd) for nd in c.nodes]
        self.preds: list[list[int]] = [[] for _ in range(N)]
        self.succs: list[list[int]] = [[] for _ in range(N)]
        self.wout: list[list[int]] = [[] for _ in range(N)]
        self.win: list[list[tuple[int, int]]] = [[] for _ in range(N)]
        for k, w in enumerate(c.wires):
            self.wout[w.src].append(k)
            for d, s in w.dsts:
                self.win[d].append((k, s))
                if d not in self.succs[w.src]:
                    self.succs[w.src].append(d)
                    self.preds[d].append(w.src)
        self.chain: dict[int | None, list[int]] = {None: []}
        for f, fr in enumerate(c.frames):
            self.chain[f] = self.chain[fr.parent] + [f]
        self.inpos = [list(range(nd.n_in)) for nd in c.nodes]
        self.outpos = [list(range(nd.n_out)) for nd in c.nodes]
        self.flip: set[int] = set()        # nodes turned upside down by a fold: broadcast band below
        self.fold = False
        self.optcol: int | None = None     # folded: the optimizer's first column (its sources just left)

    # ------------------------------------------------------------------------------ columns
    def columns(self) -> None:
        c, N = self.c, len(self.c.nodes)
        indeg = [len(p) for p in self.preds]
        heap = [n for n in range(N) if indeg[n] == 0]
        heapq.heapify(heap)
        topo = []
        while heap:
            n = heapq.heappop(heap)
            topo.append(n)
            for s in self.succs[n]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, s)
        st, col = [False] * N, [0] * N
        out = [nd.kind == "output" for nd in c.nodes]
        for n in topo:
            st[n] = not out[n] and (c.nodes[n].static if not self.preds[n] else all(st[p] for p in self.preds[n]))
            if not st[n] and not out[n]:
                col[n] = max([col[p] + 1 for p in self.preds[n] if not st[p]], default=0)
        optcol = None
        if self.fold:              # folded: the optimizer after everything else, a data input next to its
            col, optcol = optimizer_columns(self, col, st, out, topo)   # first consumer (labels: by the loss)
            for n in range(N):
                if c.nodes[n].kind == "input" and not st[n] and self.succs[n]:
                    col[n] = min(col[s] for s in self.succs[n]) - 1
        last = max([col[n] for n in range(N) if not st[n] and not out[n]], default=0) + 1
        col = [last if out[n] else col[n] for n in range(N)]
        for n in reversed(topo):
            if st[n]:
                col[n] = min([col[s] for s in self.succs[n]], default=1) - 1
        self.st = st
        low = min(col, default=0)
        self.col = [x - low for x in col]
        self.ncols = max(self.col, default=0) + 1
        self.optcol = optcol - low if optcol is not None else None

    def trunks(self) -> None:
        """A trunk for each wire that spans more than one column: ``(wire, first col, last col)``."""
        self.trunk: list[tuple[int, int, int]] = []
        self.trunk_of: dict[int, int] = {}
        self.tframe: list[int | None] = []
        for k, w in enumerate(self.c.wires):
            cs = self.col[w.src]
            cmax = max(self.col[d] for d, _ in w.dsts)
            if cmax > cs + 1:
                self.trunk_of[k] = len(self.trunk)
                self.trunk.append((k, cs + 1, cmax - 1))
                common = os.path.commonprefix([self.chain[self.c.nodes[n].frame]
                                               for n in [w.src] + [d for d, _ in w.dsts]])
                self.tframe.append(common[-1] if common else None)

    # ------------------------------------------------------------------------------ ordering
    def elements(self) -> None:
        """Per column: node elements ``("n", n)`` and trunk cells ``("t", t)``; edges between columns."""
        N = len(self.c.nodes)
        self.cols: list[list[tuple[str, int]]] = [[] for _ in range(self.ncols)]
        self.left: dict[tuple, list[tuple]] = {}
        self.right: dict[tuple, list[tuple]] = {}
        key: dict[tuple, tuple] = {}
        for n in range(N):
            e = ("n", n)
            self.cols[self.col[n]].append(e)
            key[e] = (self.c.nodes[n].order, n)
        for t, (k, c0, c1) in enumerate(self.trunk):
            src = self.c.wires[k].src
            for cc in range(c0, c1 + 1):
                e = ("t", t, cc)
                self.cols[cc].append(e)
                key[e] = (self.c.nodes[src].order, N + t)

        def link(a: tuple, b: tuple) -> None:
            self.right.setdefault(a, []).append(b)
            self.left.setdefault(b, []).append(a)
        for k, w in enumerate(self.c.wires):
            t = self.trunk_of.get(k)
            cs = self.col[w.src]
            if t is not None:
                _, c0, c1 = self.trunk[t]
                link(("n", w.src), ("t", t, c0))
                for cc in range(c0, c1):
                    link(("t", t, cc), ("t", t, cc + 1))
            for d, _ in w.dsts:
                cd = self.col[d]
                link(("n", w.src) if cd == cs + 1 else ("t", t, cd - 1), ("n", d))
        for col in self.cols:
            col.sort(key=lambda e: key[e])
        self.pos: dict[tuple, int] = {}
        for col in self.cols:
            self.hsort(col, lambda e: 0.0)

    def frame_of(self, e: tuple) -> int | None:
        return self.c.nodes[e[1]].frame if e[0] == "n" else self.tframe[e[1]]

    def hsort(self, col: list[tuple], bary: Callable[[tuple], float]) -> None:
        """Sort a column by ``bary`` keeping each frame's elements together (ties: current order)."""
        for i, e in enumerate(col):
            self.pos.setdefault(e, i)

        def rec(es: list[tuple], depth: int) -> list[tuple]:
            groups: dict[object, list[tuple]] = {}
            for e in es:
                ch = self.chain[self.frame_of(e)]
                groups.setdefault(ch[depth] if len(ch) > depth else e, []).append(e)
            items = sorted(groups.items(), key=lambda kv: (sum(bary(e) for e in kv[1]) / len(kv[1]),
                                                           min(self.pos[e] for e in kv[1])))
            out: list[tuple] = []
            for g, members in items:
                out += rec(members, depth + 1) if isinstance(g, int) else members
            return out
        col[:] = rec(list(col), 0)
        for i, e in enumerate(col):
            self.pos[e] = i

    def sweep(self) -> None:
        for _ in range(SWEEPS):
            for rng, nb in ((range(1, self.ncols), self.left), (range(self.ncols - 2, -1, -1), self.right)):
                for cc in rng:
                    def bary(e: tuple, nb=nb) -> float:
                        ns = nb.get(e, [])
                        return sum(self.pos[x] for x in ns) / len(ns) if ns else float(self.pos[e])
                    self.hsort(self.cols[cc], bary)

    # ------------------------------------------------------------------------------ rows
    def spans(self) -> None:
        """Column span of every frame, the items of every block (frame or root)."""
        F = len(self.c.frames)
        self.fspan: list[list[int]] = [[10 ** 9, -1] for _ in range(F)]
        self.items: dict[int | None, list[tuple]] = {None: []}
        for f in range(F):
            self.items[f] = []
            self.items[self.c.frames[f].parent].append(("f", f))
        for n, nd in enumerate(self.c.nodes):
            self.items[nd.frame].append(("n", n))
        for t in range(len(self.trunk)):
            self.items[self.tframe[t]].append(("t", t))
        for e, lo, hi in ([(("n", n), self.col[n], self.col[n]) for n in range(len(self.c.nodes))]
                          + [(("t", t), c0, c1) for t, (_, c0, c1) in enumerate(self.trunk)]):
            for f in self.chain[self.frame_of(e)]:
                self.fspan[f][0] = min(self.fspan[f][0], lo)
                self.fspan[f][1] = max(self.fspan[f][1], hi)

    def span(self, it: tuple) -> tuple[int, int]:
        if it[0] == "n":
            return self.col[it[1]], self.col[it[1]]
        if it[0] == "t":
            return self.trunk[it[1]][1], self.trunk[it[1]][2]
        return self.fspan[it[1]][0], self.fspan[it[1]][1]

    def first_pos(self, it: tuple) -> int:
        c0 = self.span(it)[0]
        if it[0] == "n":
            return self.pos[it]
        if it[0] == "t":
            return self.pos[("t", it[1], c0)]
        return min(self.pos[e] for e in self.cols[c0] if it[1] in self.chain[self.frame_of(e)])

    def port_y(self, n: int, slot: int, out: bool) -> float:
        """A port's height below its node's top."""
        w, h, band = self.size[n]
        nd = self.c.nodes[n]
        if nd.kind == "copy" or (nd.kind in ("param", "const") and nd.n_out <= 1):
            return h / 2
        k = (self.outpos if out else self.inpos)[n]
        cnt = max(len(k), 1)
        body = h - band
        return (0.0 if n in self.flip else band) + body * ((k[slot] if slot < len(k) else slot) + 1) / (cnt + 1)

    def targets(self, it: tuple, y: dict[tuple, float]) -> list[tuple[float, float, tuple]]:
        """``(offset below the item's top, neighbour's absolute height, neighbour)`` of each connection."""
        out = []
        c = self.c
        if it[0] == "n":
            n = it[1]
            for k in self.wout[n]:
                w, t = c.wires[k], self.trunk_of.get(k)
                oy = self.port_y(n, w.src_slot, True)
                if t is not None:
                    out.append((oy, y[("t", t)] + TRUNK / 2, ("t", t)))
                for d, s in w.dsts:
                    if self.col[d] == self.col[n] + 1:
                        out.append((oy, y[("n", d)] + self.port_y(d, s, False), ("n", d)))
            for k, s in self.win[n]:
                w, t = c.wires[k], self.trunk_of.get(k)
                iy = self.port_y(n, s, False)
                if t is not None and self.col[n] > self.col[w.src] + 1:
                    out.append((iy, y[("t", t)] + TRUNK / 2, ("t", t)))
                else:
                    out.append((iy, y[("n", w.src)] + self.port_y(w.src, w.src_slot, True), ("n", w.src)))
        elif it[0] == "t":
            k, c0, c1 = self.trunk[it[1]]
            w = c.wires[k]
            sy = y[("n", w.src)] + self.port_y(w.src, w.src_slot, True)
            out += [(TRUNK / 2, sy, ("n", w.src))] * 2
            for d, s in w.dsts:
                if self.col[d] > c0:
                    out.append((TRUNK / 2, y[("n", d)] + self.port_y(d, s, False), ("n", d)))
        return out

    def pull(self, it: tuple, other: tuple) -> float:
        """Parameter-like sources hang off the data path: they pull a data node less."""
        static = [e[0] == "n" and self.st[e[1]] for e in (it, other)]
        return SIDE if static[1] and not static[0] else 1.0

    def inside(self, e: tuple, f: int) -> bool:
        return f in self.chain[self.frame_of(e)]

    def place(self, f: int | None, cur: dict[tuple, float], ftop: dict[int | None, float]
              ) -> tuple[float, dict[tuple, float]]:
        """Place block ``f``: ``(height, offsets of all its leaves and frames below its top)``.
        ``cur`` (absolute heights) is updated as items are placed, so that later ones follow."""
        off = FRAME_TITLE + PAD if f is not None else 0.0
        sub = {it[1]: self.place(it[1], cur, ftop) for it in self.items[f] if it[0] == "f"}
        def late(it: tuple) -> int:    # 0: data nodes and frames (stacked), 1: parameter-like, 2: trunks
            return 2 if it[0] == "t" else int(it[0] == "n" and self.st[it[1]])
        items = sorted(self.items[f], key=lambda it: (late(it), self.span(it)[0], self.first_pos(it), it))
        origin = ftop.get(f, 0.0) + off
        sky: dict[int, float] = {}
        top: dict[tuple, float] = {}
        busy: list[tuple[int, int, float, float, bool]] = []
        def desire(it: tuple) -> tuple[float, float | None, float]:
            """``(height, wanted top in block coordinates or None, weight)``."""
            if it[0] == "f":
                h, rel = sub[it[1]]
                pairs = [(rel[e] + o, oy, 1.0) for e in rel if e[0] != "f"
                         for o, oy, other in self.targets(e, cur) if not self.inside(other, it[1])]
            else:
                h = TRUNK if it[0] == "t" else self.size[it[1]][1]
                pairs = [(o, oy, (1.0 if f is None or self.inside(other, f) else OUTER) * self.pull(it, other))
                         for o, oy, other in self.targets(it, cur)]
            weight = sum(p[2] for p in pairs)
            if not pairs or weight <= 0:
                return h, None, 1e-3
            return h, sum((oy - o) * k for o, oy, k in pairs) / weight - origin, weight

        def commit(it: tuple, y0: float, h: float) -> None:
            lo, hi = self.span(it)
            top[it] = (y0, h)
            for cc in range(lo, hi + 1):
                sky[cc] = max(sky.get(cc, y0 + h), y0 + h)
            busy.append((lo, hi, y0, y0 + h, it[0] == "t"))
            if it[0] == "f":
                for e, v in sub[it[1]][1].items():
                    (ftop if e[0] == "f" else cur)[e[1] if e[0] == "f" else e] = origin + y0 + v
                ftop[it[1]] = origin + y0
            else:
                cur[it] = origin + y0

        stacked = [it for it in items if not late(it)]
        for c0 in sorted({self.span(it)[0] for it in stacked}):
            group = [it for it in stacked if self.span(it)[0] == c0]
            wants = [desire(it) for it in group]
            base = [max([sky[cc] + GAP for cc in range(self.span(it)[0], self.span(it)[1] + 1) if cc in sky],
                        default=None) for it in group]
            d = [w if w is not None else (b if b is not None else 0.0) for (_, w, _), b in zip(wants, base)]
            ys = _stack(d, [k for _, _, k in wants], [h + GAP for h, _, _ in wants])
            prev = None
            for it, y0, (h, _, _), b in zip(group, ys, wants, base):
                y0 = max([y0] + ([b] if b is not None else []) + ([prev] if prev is not None else []))
                commit(it, y0, h)
                prev = y0 + h + GAP
        for it in items:
            if late(it):
                h, want, _ = desire(it)
                lo, hi = self.span(it)
                y0 = self.lane(want, [(a, b, t) for l2, h2, a, b, t in busy if l2 <= hi and lo <= h2], h,
                               6.0 if it[0] == "t" else GAP)
                commit(it, y0, h)
        low = min((y0 for y0, _ in top.values()), default=0.0) if f is not None else 0.0
        rel: dict[tuple, float] = {}
        for it, (y0, h) in top.items():
            rel[it] = y0 + off - low
            if it[0] == "f":
                rel.update({e: rel[it] + v for e, v in sub[it[1]][1].items()})
        bottom = max((rel[it] + h for it, (_, h) in top.items()), default=0.0)
        self.fheight[f] = bottom + PAD if f is not None else bottom
        return self.fheight[f], rel

    @staticmethod
    def lane(want: float | None, busy: list[tuple[float, float, bool]], h: float, gap: float) -> float:
        """The free height nearest ``want`` for an item of height ``h`` among the intervals ``busy``
        (``gap`` from nodes, 5 from trunks)."""
        bad = sorted((a - h - (5 if t else gap), b + (5 if t else gap)) for a, b, t in busy)
        merged: list[list[float]] = []
        for a, b in bad:
            if merged and a < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        if want is None:
            return merged[-1][1] if merged else 0.0
        for a, b in merged:
            if a < want < b:
                return a if want - a <= b - want else b
        return want

    def rows(self) -> None:
        y = {e[:2]: i * 40.0 for col in self.cols for i, e in enumerate(col)
             if e[0] == "n" or e[2] == self.trunk[e[1]][1]}
        ftop: dict[int | None, float] = {None: TOP}
        self.fheight: dict[int | None, float] = {}
        for f in range(len(self.c.frames)):
            ftop[f] = min([v for e, v in y.items() if self.inside(e, f)], default=0.0)
        for _ in range(PASSES):
            _, rel = self.place(None, y, ftop)
            low = min(rel.values(), default=0.0)
            y = {e: TOP + v - low for e, v in rel.items() if e[0] != "f"}
            ftop = {None: TOP, **{e[1]: TOP + v - low for e, v in rel.items() if e[0] == "f"}}
            self.reorder_ports(y)
        self.y, self.ftop = y, ftop

    def reorder_ports(self, y: dict[tuple, float]) -> None:
        """Ports of boxes and outputs in the order of the heights of the other ends."""
        ins: dict[int, list[tuple[float, int]]] = {}
        outs: dict[int, list[tuple[float, int]]] = {}
        for k, w in enumerate(self.c.wires):
            t = self.trunk_of.get(k)
            ends = []
            for d, s in w.dsts:
                far = t is not None and self.col[d] > self.col[w.src] + 1
                sy = y[("t", t)] if far else y[("n", w.src)] + self.port_y(w.src, w.src_slot, True)
                ins.setdefault(d, []).append((sy, s))
                ends.append(y[("t", t)] if t is not None and not far else y[("n", d)])
            outs.setdefault(w.src, []).append((sum(ends) / len(ends), w.src_slot))
        for table, pos in ((ins, self.inpos), (outs, self.outpos)):
            for n, lst in table.items():
                if not self.c.nodes[n].fixed_slots and len(pos[n]) == len(lst):
                    for rank, (_, s) in enumerate(sorted(lst)):
                        pos[n][s] = rank

    # ------------------------------------------------------------------------------ x and wires
    def xs(self) -> None:
        c = self.c
        F = len(c.frames)
        self.colw = [12.0] * self.ncols
        for n in range(len(c.nodes)):
            self.colw[self.col[n]] = max(self.colw[self.col[n]], self.size[n][0])
        self.lext = [0.0] * F
        self.rext = [0.0] * F
        for f in sorted(range(F), key=lambda f: -len(self.chain[f])):
            self.lext[f] += PAD
            self.rext[f] += PAD
            p = c.frames[f].parent
            if p is not None:
                if self.fspan[p][0] == self.fspan[f][0]:
                    self.lext[p] = max(self.lext[p], self.lext[f])
                if self.fspan[p][1] == self.fspan[f][1]:
                    self.rext[p] = max(self.rext[p], self.rext[f])
        need_l = [0.0] * (self.ncols + 1)
        need_r = [0.0] * (self.ncols + 1)
        for f in range(F):
            need_l[self.fspan[f][0]] = max(need_l[self.fspan[f][0]], self.lext[f])
            need_r[self.fspan[f][1]] = max(need_r[self.fspan[f][1]], self.rext[f])
        # the labels' run: right of each column, every wire leaving it runs straight (its label on
        # it), so that no wire bends or crosses under a label; the bends come after, in BEND
        lab = [0.0] * self.ncols
        for w in c.wires:
            cs = self.col[w.src]
            slack = (self.colw[cs] - self.size[w.src][0]) * (1 - self.align(w.src))
            lab[cs] = max(lab[cs], text_width(w.label, LABEL) + 7 - slack)
        self.lab = lab
        for f in sorted(range(F), key=lambda f: -len(self.chain[f])):
            c0, c1 = self.fspan[f]
            have = (sum(self.colw[c0:c1 + 1]) + sum(lab[c0:c1 + 1]) + BEND * (c1 - c0) + self.lext[f]
                    + self.rext[f])
            want = text_width(c.frames[f].label, 11, True) + 16
            if want > have:
                self.colw[c1] += want - have
        self.colx = [0.0] * self.ncols
        x = MARGIN + need_l[0]
        for cc in range(self.ncols):
            self.colx[cc] = x
            if cc + 1 < self.ncols:
                x += self.colw[cc] + lab[cc] + need_r[cc] + BEND + need_l[cc + 1]
        self.width = (x + self.colw[-1] + lab[-1] + need_r[self.ncols - 1] + MARGIN if self.ncols
                      else 2 * MARGIN)

    def align(self, n: int) -> float:
        """Where a node sits in its column: 0.5 (centred); folded, a source (an input, a parameter
        or a constant) at its left (0: its wires' labels may start inside the column)."""
        return 0.0 if self.fold and self.c.nodes[n].kind in ("input", "param", "const") else 0.5


def optimizer_columns(lay: Layout, col: list[int], st: list[bool], out: list[bool], topo: list[int]
                      ) -> tuple[list[int], int | None]:
    """Columns with the optimizer (its nodes, the frame around them, what they alone feed) moved
    after everything else, with a column between for its sources (and, after a frame, an empty one:
    a place to cut): ``(columns, the optimizer's first column)``, or ``(col, None)`` without one.
    Parameter-like nodes are not placed yet (``col`` holds the others'); they follow."""
    c = lay.c
    opt = [n for n in range(len(col)) if c.nodes[n].optimizer and not st[n]]
    if not opt:
        return col, None
    tops = {lay.chain[c.nodes[n].frame][0] for n in opt if c.nodes[n].frame is not None}
    region = {n for n in range(len(col)) if not st[n] and not out[n] and (
        c.nodes[n].optimizer or (c.nodes[n].frame is not None and lay.chain[c.nodes[n].frame][0] in tops))}
    for n in topo:
        if not st[n] and not out[n] and any(p in region for p in lay.preds[n]):
            region.add(n)
    rest = [n for n in range(len(col)) if not st[n] and not out[n] and n not in region]
    last = max((col[n] for n in rest), default=-1)
    first = min(col[n] for n in region)
    new = [x + max(0, last + 1 - first) if n in region else x for n, x in enumerate(col)]
    # what the optimizer computes from its states and constants alone goes as late as it can (just
    # left of its consumers), but may still start left of the rest: the row starts at the leftmost
    end = max((new[n] for n in range(len(col)) if not st[n] and not out[n]), default=0) + 1
    tmp = [end if out[n] else new[n] for n in range(len(col))]
    for n in reversed(topo):
        if st[n]:
            tmp[n] = min([tmp[s] for s in lay.succs[n]], default=1) - 1
    lo = min([new[n] for n in region] + [tmp[n] for n in range(len(col)) if st[n] and c.nodes[n].frame
                                          is not None and lay.chain[c.nodes[n].frame][0] in tops])
    gap = any(c.nodes[n].frame is not None for n in rest if col[n] == last)   # an empty column after
    more = max(0, last + 2 + gap - lo)                                        # a frame: a place to cut
    return [x + more if n in region else x for n, x in enumerate(new)], lo + more


def _stack(want: list[float], weight: list[float], sep: list[float]) -> list[float]:
    """Tops nearest (weighted least squares) to ``want`` keeping item ``i + 1`` at least ``sep[i]``
    below item ``i``: isotonic regression by pooling adjacent violators."""
    off = [0.0]
    for s in sep[:-1]:
        off.append(off[-1] + s)
    blocks: list[list[float]] = []                     # [value, weight, count]
    for z, w in zip((d - o for d, o in zip(want, off)), weight):
        blocks.append([z, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (v1, w1, n1), (v2, w2, n2) = blocks[-2], blocks.pop()
            blocks[-1] = [(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
    out = [v for v, _, n in blocks for _ in range(int(n))]
    return [z + o for z, o in zip(out, off)]
