"""The picture: Abbott's conventions (which mark each operation gets) and the SVG text.

* **Marks** (:func:`prim_class`, :func:`box_class`): contractions (matrix products, sums over
  axes), linear maps (dashed) and nonlinear operations; the axes an operation is broadcast over
  (:func:`prim_broadcast`, :func:`box_broadcast`), drawn passing over its top.
* **Sizes** of the nodes (:func:`node_size`, estimated DejaVu Sans metrics: :func:`text_width`;
  in folded drawings long names on several lines: :func:`name_lines`, :func:`pill_lines`,
  :func:`tag_lines`), and how large a picture's text prints at a paper's width (:func:`print_points`).
* **SVG** (:func:`render`) of a placed :class:`~circuitgrad.drawing.graph.Circuit`: plain SVG 1.1 (``rect``,
  ``path``, ``line``, ``circle``, ``text``/``tspan``, ``g``, ``title``), one fixed font family, every
  number printed with one decimal: the same geometry gives the same bytes.  All text from the
  model (definition names, parameter labels) is XML-escaped.
"""
from __future__ import annotations

from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from ..types import Index

if TYPE_CHECKING:                                   # pragma: no cover
    from ..schedule import Program
    from .graph import Circuit, Geometry, Node

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
SLOT = 18          # vertical distance between two ports of a node (a wire label fits between two wires)
BAND = 18          # broadcast band above a node
MARGIN = 16
SMALL = 11         # the smallest text: wire labels, shapes, broadcast axes, the legend
LINE = 14          # from one line of a name to the next
#: (fill, stroke) of each kind of operation
COLOURS = {
    "contraction": ("#dbeafe", "#1d4ed8"),
    "linear": ("#dcfce7", "#15803d"),
    "nonlinear": ("#ffedd5", "#c2410c"),
    "plain": ("#f3f4f6", "#4b5563"),
}
PARAM = ("#fef3c7", "#b45309")
BROADCAST = "#7c3aed"
WIRE = "#374151"
DASH = "5,3"


# ----------------------------------------------------------------------------------- conventions
def _pointwise(op) -> bool:
    """A one-operand map applied to every element alike (copies too): drawn as acting on each broadcast slice."""
    return op.kind == "copy" or (op.kind == "elementwise" and len(op.source) == 1 and not op.positional)


def _binary(op) -> bool:
    """An elementwise map of two operands (Add, Mul, Div)."""
    return op.kind == "elementwise" and len(op.source) == 2


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def static_vars(prog: Program, static_inputs: list[bool]) -> list[bool]:
    """Which variables are parameter-like: computed from parameters and constants alone."""
    st = [False] * len(prog.types)
    for v, s in zip(prog.inputs, static_inputs):
        st[v] = s
    for a in prog.instrs:
        s = all(st[x] for x in a.args)
        for r in a.results:
            st[r] = s
    return st


def static_lead(prog: Program, static: list[bool]) -> list[int]:
    """For static variables: along how many leading axes the value is constant (broadcast)."""
    sl = [0] * len(prog.types)
    for a in prog.instrs:
        n, op = a.op.name, a.op
        if not all(static[x] for x in a.args):
            continue
        if n == "Constant":
            v = op.T.ndim
        elif n == "Broadcast":
            new = op.T.ndim - op.S.ndim
            v = new
            while v < op.T.ndim and (op.S.shape[v - new] == 1 or v - new < sl[a.args[0]]):
                v += 1
        elif a.args and (_pointwise(op) or _binary(op)):
            v = min(sl[x] for x in a.args)
        else:
            v = 0
        for r in a.results:
            sl[r] = v
    return sl


def _lead_len(shape: tuple[int, ...], target: int) -> int | None:
    """The smallest ``j ≥ 1`` with ``prod(shape[:j]) == target``."""
    p = 1
    for j, d in enumerate(shape):
        p *= d
        if p == target:
            return j + 1
        if p > target:
            return None
    return None


def _step(prog: Program, i: int, lead: dict[int, int], static: list[bool], sl: list[int]) -> int | None:
    """How many leading axes of the results are still the broadcast axes (None: they are mixed)."""
    a = prog.instrs[i]
    op, n, T = a.op, a.op.name, prog.types
    acts = [x for x in a.args if not static[x]]
    if any(x not in lead for x in acts) or len({lead[x] for x in acts}) != 1:
        return None
    L = lead[acts[0]]
    x = acts[0]
    nd = T[x].ndim
    ok_static = all(sl[s] >= L for s in a.args if static[s])
    if _pointwise(op) or n == "OneHot":
        return L
    if _binary(op):
        return L if ok_static else None
    if op.kind == "rowwise":
        return L if L <= nd - 1 - bool(getattr(op, "causal", False)) else None
    if n == "CausalMask" or n == "BatchMatMul":
        return L if L <= nd - 2 and ok_static else None
    if n == "MatMul":
        return 1 if x == a.args[0] and static[a.args[1]] and L == 1 else None
    if n == "Reshape":
        return _lead_len(op.shape, _prod(T[x].shape[:L]))
    if n == "Permute":
        return L if op.axes[:L] == tuple(range(L)) else None
    if n in ("Broadcast", "SumTo"):
        big, small = (op.T, op.S)
        if big.ndim != small.ndim or any(big.shape[j] != small.shape[j] for j in range(L)):
            return None
        return L
    if n in ("Slice", "Pad"):                          # the index is into op.T (the input of a Slice)
        return L if all(op.index[j] == (0, op.T.shape[j], 1) for j in range(L)) else None
    if n in ("Unfold", "Fold"):
        return L if L <= 1 else None
    return None


def _mapped(prog: Program, instrs: list[int], ins: list[int], outs: list[int], static: list[bool],
            sl: list[int]) -> tuple:
    """The leading axes that the operations ``instrs`` (reading ``ins``, giving ``outs``) map over."""
    T = prog.types
    acts = [v for v in dict.fromkeys(ins) if not static[v]]
    outs = [v for v in dict.fromkeys(outs) if not static[v]]
    if not acts or not outs:
        return ()
    shapes = [T[v].shape[:T[v].ndim - (0 if isinstance(T[v].dtype, Index) else 1)] for v in acts + outs]
    P: tuple[int, ...] = shapes[0]
    for s in shapes[1:]:
        k = 0
        while k < min(len(P), len(s)) and P[k] == s[k]:
            k += 1
        P = P[:k]
    for k in range(len(P), 0, -1):
        lead = {v: _lead_len(T[v].shape, _prod(P[:k])) for v in acts}
        if any(j is None for j in lead.values()):
            continue
        for i in instrs:
            if all(static[x] for x in prog.instrs[i].args):
                continue
            j = _step(prog, i, lead, static, sl)
            if j is None:
                break
            for r in prog.instrs[i].results:
                lead[r] = j
        else:
            if all(v in lead for v in outs):
                return P[:k]
    return ()


def prim_broadcast(prog: Program, i: int, static: list[bool], sl: list[int], prod: dict[int, int]) -> str:
    """``"2×8"``: the axes primitive ``i`` is broadcast over (a matrix product of a flattened
    ``[2, 8, d]`` activation by a weight shows the axes before flattening)."""
    a = prog.instrs[i]
    axes = _mapped(prog, [i], list(a.args), list(a.results), static, sl)
    if a.op.name == "MatMul" and axes:
        j = prod.get(a.args[0])
        if j is not None and prog.instrs[j].op.name == "Reshape":
            s = prog.types[prog.instrs[j].args[0]].shape
            if len(s) > 2 and _prod(s[:-1]) == axes[0] and s[-1] == a.op.A.shape[1]:
                axes = s[:-1]
    return "×".join(str(d) for d in axes)


def box_broadcast(prog: Program, instrs: list[int], static: list[bool], sl: list[int],
                  uses: dict[int, list[int]]) -> str:
    """The axes a collapsed definition maps over (all its operations keep them apart)."""
    inside = set(instrs)
    made = {r for i in instrs for r in prog.instrs[i].results}
    ins = [x for i in instrs for x in prog.instrs[i].args if x not in made]
    outs = set(prog.outputs)
    res = [r for i in instrs for r in prog.instrs[i].results
           if r in outs or any(u not in inside for u in uses.get(r, []))]
    return "×".join(str(d) for d in _mapped(prog, instrs, ins, res, static, sl))


def _contracted(prog: Program, i: int) -> str:
    op = prog.instrs[i].op
    if op.name == "MatMul":
        return str(op.A.shape[1])
    if op.name == "BatchMatMul":
        return str(op.A.shape[-1])
    new = op.T.ndim - op.S.ndim
    sizes = list(op.T.shape[:new]) + [d for d, s in zip(op.T.shape[new:], op.S.shape) if s == 1 and d != 1]
    return "×".join(str(d) for d in sizes) or "1"


def prim_class(prog: Program, i: int, static: list[bool]) -> tuple[str, bool, str]:
    """``(style, linear, sub-label)`` of primitive ``i``: contraction / linear / nonlinear."""
    a = prog.instrs[i]
    n = a.op.name
    if a.op.kind == "contraction":
        return "contraction", any(static[x] for x in a.args), "·" + _contracted(prog, i)
    if a.op.kind == "reduce":
        return "contraction", True, "Σ" + _contracted(prog, i)
    if a.op.linear:                                    # linear maps of their operand: Abbott's dashed marks
        return "linear", True, f"×{a.op.c:g}" if n == "Scale" else ""
    if (n == "Mul" and any(static[x] for x in a.args)) or (n == "Div" and static[a.args[1]]):
        return "linear", True, ""
    return "nonlinear", False, ""


def box_class(prog: Program, instrs: list[int], static: list[bool]) -> tuple[str, bool, str]:
    """A collapsed definition is a contraction when its only work is contractions (and reshapes),
    linear when all its operations are."""
    work = [i for i in instrs if prog.instrs[i].op.kind not in ("source", "copy")]
    cls = [prim_class(prog, i, static) for i in work]
    linear = all(c[1] for c in cls)
    if any(c[0] == "contraction" for c in cls) and all(
            c[0] == "contraction" or prog.instrs[i].op.kind == "view" for i, c in zip(work, cls)):
        subs = list(dict.fromkeys(c[2] for c in cls if c[0] == "contraction"))
        return "contraction", linear, subs[0] + "".join("," + s[1:] for s in subs[1:])
    return ("linear", True, "") if linear else ("nonlinear", False, "")


# ----------------------------------------------------------------------------------- drawing
#: advance widths of DejaVu Sans (Book and Bold), in thousandths of the font size, of printable ASCII
#: and the few other characters diagrams use (from the fonts' hmtx tables)
_GLYPHS = "".join(map(chr, range(32, 127))) + "×Σ·…′ᵀ²³√∘⊗→←∇"
_WIDTH = dict(zip(_GLYPHS, (
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337, 636, 636, 636, 636, 636, 636,
    636, 636, 636, 636, 337, 337, 838, 838, 838, 531, 1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656,
    557, 863, 748, 787, 603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500, 500, 613,
    635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612, 635, 635, 411, 521, 392, 634, 592, 818,
    592, 592, 525, 636, 337, 636, 838, 838, 632, 318, 1000, 227, 385, 401, 401, 637, 626, 838, 838, 838, 669)))
_WIDTH_BOLD = dict(zip(_GLYPHS, (
    348, 456, 521, 838, 696, 1002, 872, 306, 457, 457, 523, 838, 380, 415, 380, 365, 696, 696, 696, 696, 696, 696,
    696, 696, 696, 696, 400, 400, 838, 838, 838, 580, 1000, 774, 762, 734, 830, 683, 683, 821, 837, 372, 372, 775,
    637, 995, 837, 850, 733, 850, 770, 720, 682, 812, 774, 1103, 771, 724, 725, 457, 365, 457, 838, 500, 500, 675,
    716, 593, 716, 678, 435, 716, 712, 343, 343, 665, 343, 1042, 712, 687, 716, 716, 493, 595, 478, 712, 652, 924,
    645, 652, 582, 712, 365, 712, 838, 838, 683, 380, 1000, 264, 430, 438, 438, 667, 626, 838, 838, 838, 697)))
#: width of any other character (a wide one: an estimate errs on the side of room)
_OTHER = 1000
#: the ink of a line of text reaches this far above and below its baseline, in font sizes (DejaVu Sans:
#: capitals and digits 0.73, brackets 0.76 above; descenders and brackets 0.24 below)
ASCENT, DESCENT = 0.76, 0.24


def text_width(s: str, size: float, bold: bool = False) -> float:
    """The width of ``s`` in DejaVu Sans (bold: DejaVu Sans Bold) at ``size`` px: the sum of the
    characters' advance widths (:data:`_WIDTH`, :data:`_WIDTH_BOLD`; 1 em for a character not listed).
    The other fonts of :data:`FONT` (Helvetica, Arial) are narrower."""
    table = _WIDTH_BOLD if bold else _WIDTH
    return sum(table.get(ch, _OTHER) for ch in s) * size / 1000


def text_box(x: float, y: float, s: str, size: float, anchor: str = "start", bold: bool = False
             ) -> tuple[float, float, float, float]:
    """``(x, y, w, h)``: the box the text ``s`` drawn at ``(x, y)`` (its baseline, ``text-anchor``
    ``anchor``) covers: :func:`text_width` wide, from :data:`ASCENT` above to :data:`DESCENT` below the
    baseline."""
    w = text_width(s, size, bold)
    x0 = x - (w / 2 if anchor == "middle" else w if anchor == "end" else 0.0)
    return x0, y - ASCENT * size, w, (ASCENT + DESCENT) * size


#: a box name longer than this many characters is drawn on two lines, broken after an ``_`` (folded drawings)
WRAP = 14


def name_lines(nd: Node) -> list[str]:
    """The lines of a node's name: one, or (``nd.wrap``, longer than :data:`WRAP`) broken after
    ``_``, each line at most as long as the longest part or 10 characters."""
    s = nd.label
    if not nd.wrap or len(s) <= WRAP:
        return [s]
    parts = [p + "_" for p in s.split("_")]
    parts[-1] = parts[-1][:-1]
    limit = max(10, max(len(p) for p in parts))
    lines = [""]
    for p in parts:
        if lines[-1] and len(lines[-1]) + len(p) > limit:
            lines.append("")
        lines[-1] += p
    return lines


def tag_lines(nd: Node) -> list[str]:
    """An input or output tag's text: one line, or (``nd.wrap``, longer than :data:`WRAP`) two,
    broken at the space that makes the longer line shortest (``77 new`` / ``optimizer states``)."""
    s = nd.label
    cuts = [i for i, ch in enumerate(s) if ch == " "]
    if not nd.wrap or len(s) <= WRAP or not cuts:
        return [s]
    k = min(cuts, key=lambda i: (max(i, len(s) - i - 1), i))
    return [s[:k], s[k + 1:]]


def pill_lines(nd: Node) -> list[str]:
    """A parameter or constant pill's text: ``[name, shape]`` on one line, or on two (``nd.wrap``);
    a tuple pill (``16 parameters``) on two when wrapped: ``["16", "parameters"]``."""
    if nd.wrap and nd.many and " " in nd.label:
        return nd.label.split(" ", 1)
    return [nd.label, nd.sub]


def print_points(svg: str, width: float = 504.0) -> float:
    """How tall, in points, the smallest text of the picture ``svg`` (SVG text) prints when the
    picture is scaled to ``width`` points (504 pt = 7 in, a paper's full text width): the smallest
    ``font-size`` times ``width`` over the picture's width."""
    import xml.etree.ElementTree as ET
    root = ET.fromstring(svg)
    sizes = [float(e.get("font-size")) for e in root.iter() if e.get("font-size")]
    return min(sizes, default=0.0) * width / float(root.get("width"))


def node_size(nd: Node) -> tuple[float, float, float]:
    """``(w, h, band)`` of a node."""
    if nd.kind == "copy":
        return 8.0, 8.0, 0.0
    if nd.kind in ("param", "const") and nd.wrap and (nd.sub or nd.many):      # the shape under the name
        top, low = pill_lines(nd)
        return (max(text_width(top, 11, True), text_width(low, 11 if nd.many else 10, nd.many)) + 20,
                34.0 if nd.n_out <= 1 else max(34.0, (nd.n_out + 1) * SLOT), 0.0)
    if nd.kind in ("param", "const"):
        return (text_width(nd.label, 11, True) + text_width(nd.sub, SMALL) + 22,
                22.0 if nd.n_out <= 1 else (nd.n_out + 1) * SLOT, 0.0)
    slots = max(nd.n_in, nd.n_out, 1)
    if nd.kind in ("input", "output"):           # ports SLOT apart: room for a wire label between two
        lines = tag_lines(nd)
        return (max(text_width(t, 11) for t in lines) + 16,
                max(22.0 + LINE * (len(lines) - 1), 22.0 if slots == 1 else (slots + 1) * SLOT), 0.0)
    lines = name_lines(nd)
    w = max([text_width(t, 11, nd.kind == "box") for t in lines] + [text_width(nd.sub, SMALL)]) + (
        (20 if nd.wrap else 26) if nd.kind == "box" else 18)
    body = max((34.0 if nd.sub else 28.0) + LINE * (len(lines) - 1), (slots + 1) * SLOT)
    band = BAND if nd.bcast else 0.0
    w = max(w, text_width(nd.bcast, SMALL) + 6 if nd.bcast else 0)
    return w, body + band, band


def _a(s: str) -> str:
    """An attribute value, escaped (quotes included)."""
    return escape(s, {'"': "&quot;"})


def _t(s: str) -> str:
    return escape(s)


def _f(x: float) -> str:
    return f"{x:.1f}"


def _title(s: str) -> str:
    return f"<title>{_t(s)}</title>"


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "middle", bold: bool = False,
          fill: str = "#111827") -> str:
    w = ' font-weight="bold"' if bold else ""
    return (f'<text x="{_f(x)}" y="{_f(y)}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{w}>'
            f"{_t(s)}</text>")


def _band(x: float, y: float, w: float, axes: str) -> list[str]:
    """Broadcast axes passing over the top of an operation: one thin line per axis, labelled."""
    n = min(len(axes.split("×")), 3)
    out = [_text(x + w / 2, y + 9, axes, SMALL, fill=BROADCAST)]
    for j in range(n):
        ly = y + 12 + 2.5 * j
        out.append(f'<path d="M{_f(x - 8)},{_f(ly + 5)} Q{_f(x - 8)},{_f(ly)} {_f(x - 2)},{_f(ly)} '
                   f'H{_f(x + w + 2)} Q{_f(x + w + 8)},{_f(ly)} {_f(x + w + 8)},{_f(ly + 5)}" fill="none" '
                   f'stroke="{BROADCAST}" stroke-width="0.9"/>')
    return out


def _node(nd: Node, x: float, y: float, w: float, h: float, band: float) -> list[str]:
    cls = f"node {nd.kind}" + (f" {nd.style}" if nd.kind in ("box", "prim") else "") + (
        " linear-map" if nd.dashed else "") + (" again" if nd.again else "")
    out = [f'<g class="{cls}">', _title(nd.title)]
    if nd.kind == "copy":
        out.append(f'<circle cx="{_f(x + w / 2)}" cy="{_f(y + h / 2)}" r="4" fill="#111827"/>')
    elif nd.kind in ("param", "const"):
        fill, stroke = PARAM if nd.kind == "param" else ("#ffffff", "#6b7280")
        out.append(f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}" rx="{_f(min(h / 2, 11))}" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="1.2"/>')
        if nd.wrap and (nd.sub or nd.many):                  # two lines: one text, a tspan each
            top, low = pill_lines(nd)
            mx, y1, y2 = _f(x + w / 2), _f(y + h / 2 - 3), _f(y + h / 2 - 3 + LINE)
            second = 'font-weight="bold"' if nd.many else f'font-size="{SMALL}" fill="#4b5563"'
            space = " " if nd.many else ""                     # "16 parameters" reads as one text
            out.append(f'<text x="{mx}" y="{y1}" font-size="11" text-anchor="middle" fill="#111827">'
                       f'<tspan x="{mx}" y="{y1}" font-weight="bold">{_t(top)}{space}</tspan>'
                       f'<tspan x="{mx}" y="{y2}" {second}>{_t(low)}</tspan></text>')
        else:
            out.append(f'<text x="{_f(x + 10)}" y="{_f(y + h / 2 + 4)}" font-size="11" fill="#111827">'
                       f'<tspan font-weight="bold">{_t(nd.label)}</tspan>'
                       f'<tspan font-size="{SMALL}" fill="#4b5563"> {_t(nd.sub)}</tspan></text>')
    elif nd.kind in ("input", "output"):
        out.append(f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}" rx="3" '
                   f'fill="#f9fafb" stroke="#6b7280" stroke-width="1"/>')
        lines = tag_lines(nd)
        if len(lines) == 1:
            out.append(_text(x + w / 2, y + h / 2 + 4, nd.label))
        else:
            out.append(f'<text x="{_f(x + w / 2)}" y="{_f(y + h / 2 + 4 - LINE / 2)}" font-size="11" text-anchor="middle" '
                       f'fill="#111827">' + "".join(f'<tspan x="{_f(x + w / 2)}" y="{_f(y + h / 2 + 4 - LINE / 2 + LINE * j)}">'
                                                    f'{_t(t)}{" " * (j + 1 < len(lines))}</tspan>'
                                                    for j, t in enumerate(lines)) + "</text>")
    else:
        fill, stroke = COLOURS.get(nd.style, COLOURS["plain"])
        box = nd.kind == "box"
        dash = f' stroke-dasharray="{DASH}"' if nd.dashed else ""
        body = h - band
        out.append(f'<rect x="{_f(x)}" y="{_f(y + band)}" width="{_f(w)}" height="{_f(body)}" '
                   f'rx="{10 if box else 4}" fill="{fill}" stroke="{stroke}" '
                   f'stroke-width="{1.8 if box else 1.2}"{dash}/>')
        mid = y + band + body / 2
        lines = name_lines(nd)
        first = mid + (-2 if nd.sub else 4) - LINE / 2 * (len(lines) - 1)
        if len(lines) == 1:
            out.append(_text(x + w / 2, first, nd.label, 11, bold=box))
        else:                                          # one text (the whole name), a line per tspan
            weight = ' font-weight="bold"' if box else ""
            out.append(f'<text x="{_f(x + w / 2)}" y="{_f(first)}" font-size="11" text-anchor="middle" '
                       f'fill="#111827"{weight}>'
                       + "".join(f'<tspan x="{_f(x + w / 2)}" y="{_f(first + LINE * j)}">{_t(t)}</tspan>'
                                 for j, t in enumerate(lines)) + "</text>")
        if nd.sub:
            out.append(_text(x + w / 2, first + 14 + LINE * (len(lines) - 1), nd.sub, SMALL, fill=stroke))
        if nd.bcast:
            out += _band(x, y, w, nd.bcast)
    out.append("</g>")
    return out


LEGEND = [
    ("contraction", "contraction (·n: over n, Σn: sum)"),
    ("linear", "linear map (dashed)"),
    ("nonlinear", "nonlinear"),
    ("box", "definition (collapsed)"),
    ("param", "parameter"),
    ("copy", "copy"),
    ("bcast", "broadcast axes"),
    ("tuple", "tuple of arrays"),
]


def _sample(kind: str, x: float, y: float) -> list[str]:
    """A 36×22 sample of a legend entry at ``(x, y)``."""
    if kind in COLOURS:
        fill, stroke = COLOURS[kind]
        dash = f' stroke-dasharray="{DASH}"' if kind == "linear" else ""
        glyph = "·" if kind == "contraction" else ""
        return [f'<rect x="{_f(x)}" y="{_f(y)}" width="36" height="22" rx="4" fill="{fill}" stroke="{stroke}" '
                f'stroke-width="1.2"{dash}/>', _text(x + 18, y + 16, glyph, 14, bold=True)]
    if kind == "box":
        return [f'<rect x="{_f(x)}" y="{_f(y)}" width="36" height="22" rx="10" fill="#f3f4f6" stroke="#4b5563" '
                f'stroke-width="1.8"/>']
    if kind == "param":
        return [f'<rect x="{_f(x)}" y="{_f(y + 2)}" width="36" height="18" rx="9" fill="{PARAM[0]}" '
                f'stroke="{PARAM[1]}" stroke-width="1.2"/>', _text(x + 18, y + 15, "W", SMALL, bold=True)]
    if kind == "copy":
        return [f'<path d="M{_f(x)},{_f(y + 11)} H{_f(x + 18)} L{_f(x + 36)},{_f(y + 3)} M{_f(x + 18)},'
                f'{_f(y + 11)} L{_f(x + 36)},{_f(y + 19)}" fill="none" stroke="{WIRE}" stroke-width="1.4"/>',
                f'<circle cx="{_f(x + 18)}" cy="{_f(y + 11)}" r="3.5" fill="#111827"/>']
    if kind == "bcast":
        return _band(x + 6, y - 4, 24, "B") + [
            f'<rect x="{_f(x + 6)}" y="{_f(y + 12)}" width="24" height="10" rx="2" fill="#ffedd5" stroke="#c2410c"/>']
    return [f'<line x1="{_f(x)}" y1="{_f(y + 11)}" x2="{_f(x + 36)}" y2="{_f(y + 11)}" stroke="{WIRE}" '
            f'stroke-width="5"/>', f'<line x1="{_f(x)}" y1="{_f(y + 11)}" x2="{_f(x + 36)}" y2="{_f(y + 11)}" '
            f'stroke="#ffffff" stroke-width="2"/>']


def _legend(c: Circuit, width: float, y0: float) -> tuple[list[str], float]:
    """The legend below the diagram; returns its elements and its bottom."""
    entries = list(LEGEND)
    extra = [f"wires: axis sizes, dtype {c.dtype}"]
    if c.reverse:
        extra.append("R[f]: the reverse pass of definition f")
    out = ['<g class="legend">', _text(MARGIN, y0 + 12, "Legend (Abbott 2024 neural circuit diagrams)", 11,
                                       "start", True)]
    x, y = MARGIN, y0 + 22
    for kind, label in entries + [("", e) for e in extra]:
        w = (44 if kind else 0) + text_width(label, SMALL) + 18
        if x + w > width - MARGIN and x > MARGIN:
            x, y = MARGIN, y + 30
        if kind:
            out += _sample(kind, x, y)
        out.append(_text(x + (44 if kind else 0), y + 15, label, SMALL, "start", fill="#374151"))
        x += w
    out.append("</g>")
    return out, y + 30


def render(c: Circuit, g: Geometry) -> str:
    """The SVG text of circuit ``c`` placed by ``g``."""
    title = c.title if len(c.title) <= 150 else c.title[:149] + "…"
    width = max(g.width, 760.0, text_width(title, 15, True) + 2 * MARGIN)
    legend, bottom = _legend(c, width, g.height)
    height = bottom + MARGIN
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{_f(width)}" height="{_f(height)}" '
           f'viewBox="0 0 {_f(width)} {_f(height)}" font-family="{_a(FONT)}">',
           f'<rect x="0" y="0" width="{_f(width)}" height="{_f(height)}" fill="#ffffff"/>',
           _text(MARGIN, 26, title, 15, "start", True)]
    depth = {}
    for f, fr in enumerate(c.frames):
        depth[f] = 0 if fr.parent is None else depth[fr.parent] + 1
    for f in sorted(range(len(c.frames)), key=lambda f: (depth[f], f)):
        x, y, w, h = g.frames[f]
        shade = ("#f5f7ff", "#eef1fb", "#e6eaf7", "#dfe4f3")[min(depth[f], 3)]
        out += ['<g class="frame">', _title(c.frames[f].title),
                f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}" rx="12" fill="{shade}" '
                f'stroke="#6b7280" stroke-width="1"/>',
                _text(*g.ftitles[f], c.frames[f].label, 11, "start", True, "#374151"), "</g>"]
    for k, w in enumerate(c.wires):
        out += [f'<g class="wire{" tuple" if w.arrays > 1 else ""}">', _title(w.title)]
        for d in g.paths[k]:
            if w.arrays > 1:
                out.append(f'<path d="{d}" fill="none" stroke="{WIRE}" stroke-width="5"/>')
                out.append(f'<path d="{d}" fill="none" stroke="#ffffff" stroke-width="2"/>')
            else:
                out.append(f'<path d="{d}" fill="none" stroke="{WIRE}" stroke-width="1.4"/>')
        out.append("</g>")
    for x, y in g.dots:
        out.append(f'<circle class="copy" cx="{_f(x)}" cy="{_f(y)}" r="3.5" fill="#111827"/>')
    for n, nd in enumerate(c.nodes):
        x, y, w, h = g.nodes[n]
        out += _node(nd, x, y, w, h, g.band[n])
    for x, y, s, _ in g.labels:
        tw = text_width(s, SMALL)
        out.append(f'<rect x="{_f(x - 1)}" y="{_f(y - 9)}" width="{_f(tw + 2)}" height="11" fill="#ffffff" '
                   f'fill-opacity="0.8"/>')
        out.append(_text(x, y, s, SMALL, "start", fill="#1f2937"))
    out += legend
    out.append("</svg>")
    return "\n".join(out) + "\n"
