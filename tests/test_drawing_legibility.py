"""Diagrams that do not mislead and print legibly: both residual adds of a
transformer block outside their sublayer, the attention core named as attention (and causal), the
parameter names users see, unknown ``expand`` names refused, no two text boxes overlapping, and a
training step folded (the lens picture) so that it prints at a paper's width with readable text."""
import collections
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.drawing import circuit, draw
from circuitgrad.drawing.layout import LABEL
from circuitgrad.drawing.svg import print_points, text_box, text_width
from circuitgrad.primitives import op_of, path_of

SVG = "{http://www.w3.org/2000/svg}"


def edge_paths(d) -> collections.Counter:
    return collections.Counter((path_of(l), type(op_of(l)).__name__) for l in d.H.x.table)


# ----------------------------------------------------------------------------------- residuals
def test_both_residual_adds_of_a_block_sit_outside_their_sublayer():
    block = nn.transformer_block(2, 4, 8, heads=2)
    at = edge_paths(block)
    assert at[("block", "Add")] == 2                         # x + attention(ln1 x), x + mlp(ln2 x)
    assert at[("block/attention", "Add")] == 0 and at[("block/mlp", "Add")] == 0
    c = circuit(cg.schedule(block), expand=("attention", "mlp"))
    adds = [nd for nd in c.nodes if nd.kind == "prim" and nd.label == "Add"]
    assert len(adds) == 2 and all(nd.frame is None for nd in adds)   # drawn alike: in the block
    assert {c.frames[f].label for f in range(len(c.frames))} == {"attention", "mlp"}


def test_the_block_computes_what_it_did():
    """Only the provenance moved: ``x + attention(ln1(x))``, then ``+ mlp(ln2(x))``."""
    B, S, d, h = 2, 4, 8, 2
    block = nn.transformer_block(B, S, d, heads=h)
    att = nn.attention(B, S, d, heads=h, causal=True)
    f = cg.compile_model(block, loss=nn.mse, optimizer=nn.sgd(0.1), dtype=cg.float64)
    params = f.init_params(seed=3)
    rng = np.random.default_rng(0)
    for k in params:
        params[k] = rng.normal(size=np.shape(params[k]))
    x = rng.normal(size=(B, S, d))
    y = f.predict(params, x)
    # the same block by hand from the parts
    def ln(z, g, b):
        m = z.mean(-1, keepdims=True)
        v = ((z - m) ** 2).mean(-1, keepdims=True)
        return (z - m) / np.sqrt(v + 1e-5) * g + b
    fa = cg.compile_model(att, loss=nn.mse, optimizer=nn.sgd(0.1), dtype=cg.float64)
    pa = {n: params[n] for n in fa.param_names}
    x1 = x + fa.predict(pa, ln(x, params["ln1_g0"], params["ln1_b0"]))
    z = ln(x1, params["ln2_g0"], params["ln2_b0"]) @ params["fc_W0"] + params["fc_b0"]
    z = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    want = x1 + z @ params["proj_W0"] + params["proj_b0"]
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------------- attention core
@pytest.mark.parametrize("kind", ["softmax", "spherical"])
@pytest.mark.parametrize("causal", [True, False])
def test_the_attention_core_is_named_attention_and_says_when_it_is_causal(kind, causal):
    name = f"{'causal_' if causal else ''}{kind}_attention"
    assert ops.attention_name(kind, causal) == name
    att = nn.attention(2, 4, 8, heads=2, causal=causal, kind=kind)
    core = {t for (p, t) in edge_paths(att) if p == f"attention/{name}"}
    assert {"BatchMatMul", "Scale"} <= core                  # QKᵀ, the scale and ·V: the whole core
    assert ("Softmax" in core) == (kind == "softmax") and ("Rsqrt" in core) == (kind == "spherical")
    assert ("CausalMask" in core or "Softmax" in core) if causal else "CausalMask" not in core
    svg = draw(att, expand=("attention",))
    assert f">{name}<" in svg and f">{kind}<" not in svg


def test_a_gpt_draws_causal_softmax_attention():
    gpt = nn.gpt(2, 4, 8, d=8, heads=2, layers=1)
    svg = draw(gpt, expand=("attention",))
    assert ">causal_softmax_attention<" in svg and ">softmax<" not in svg


# ----------------------------------------------------------------------------------- parameter names
def pills(svg: str) -> list[str]:
    """The names on the parameter pills (``<g class="node param">``; a tuple pill: its tooltip's names)."""
    out = []
    for g in ET.fromstring(svg).iter(f"{SVG}g"):
        if g.get("class") == "node param":
            name = "".join(g.find(f"{SVG}text").find(f"{SVG}tspan").itertext())
            whole = "".join(g.find(f"{SVG}text").itertext())     # a tuple pill: on two lines when folded
            out += ([line.split(" : ")[0] for line in g.find(f"{SVG}title").text.split("\n")]
                    if whole.strip().endswith(" parameters") else [name])
    return out


@pytest.mark.parametrize("make", [lambda: nn.mlp(8, [4, 16, 3]), lambda: nn.gpt(2, 4, 8, d=8, heads=2, layers=2),
                                  lambda: cg.sequential([nn.conv2d(2, 1, 4, 4, 3, kernel=3, padding=1),
                                                         nn.relu(2, 3, 4, 4), nn.flatten(2, 3, 4, 4),
                                                         nn.dense(2, 48, 5)])])
def test_parameter_pills_carry_the_names_of_the_parameter_dict(make):
    model = make()
    names = cg.compile_model(model, loss=nn.mse, optimizer=nn.sgd(0.1)).param_names
    shown = pills(draw(model, depth=9))                      # every parameter its own pill
    assert sorted(shown) == sorted(names)
    mlp = pills(draw(nn.mlp(8, [4, 16, 3])))
    assert sorted(mlp) == ["W0", "W1", "b0", "b1"]


def test_a_training_step_names_its_parameters_as_its_dict_does():
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.mse, optimizer=nn.sgd(0.1))
    assert sorted(pills(draw(step))) == ["W0", "W1", "b0", "b1"]
    gpt = _bench_step()
    assert sorted(pills(draw(gpt))) == sorted(pills(draw(gpt, fold=False))) == sorted(gpt.param_names)


# ----------------------------------------------------------------------------------- expand
def test_an_unknown_expand_name_is_refused_with_the_names_there_are():
    mlp = nn.mlp(8, [4, 16, 3])
    with pytest.raises(ValueError) as e:
        draw(mlp, expand=("nonexistent",))
    assert str(e.value) == ("draw: expand: no definition named 'nonexistent' in this diagram; its definitions "
                            "are bias, dense0, dense1, linear, relu (by name, by path such as 'dense0/bias', "
                            "or '*' for all)")
    with pytest.raises(ValueError, match="no definition named 'dense9', 'mlp/x' in this diagram"):
        draw(mlp, expand=("dense0", "dense9", "mlp/x"))
    with pytest.raises(ValueError, match="no definition named 'softmax' in this diagram"):
        draw(nn.gpt(2, 4, 8, d=8, heads=2, layers=1), expand="softmax")
    # names, paths (relative or full), the root and '*' are all fine
    for ok in (("dense0",), ("mlp/dense0",), ("dense0/linear",), ("mlp",), ("*",), ()):
        draw(mlp, expand=ok)
    step = cg.compile_model(mlp, loss=nn.mse, optimizer=nn.sgd(0.1))
    draw(step, expand=("sgd", "mse", "dense1"))
    with pytest.raises(ValueError, match="no definition named 'adamw'"):
        draw(step, expand=("adamw",))


# ----------------------------------------------------------------------------------- legibility
def text_boxes(svg: str) -> list[tuple[tuple[float, float, float, float], str]]:
    """The box of every ``text`` element of an SVG (:func:`circuitgrad.drawing.svg.text_box`: DejaVu
    Sans advance widths per character, ``ASCENT`` above and ``DESCENT`` below the baseline), ``tspan``
    runs with their own size and weight."""
    out = []
    for t in ET.fromstring(svg).iter(f"{SVG}text"):
        size, bold = float(t.get("font-size")), t.get("font-weight") == "bold"
        if any(span.get("y") is not None for span in t):     # a name on several lines: a box per line
            for span in t:
                x, y, w, h = text_box(float(span.get("x")), float(span.get("y")), span.text or "",
                                      float(span.get("font-size", size)), t.get("text-anchor", "start"),
                                      span.get("font-weight", "bold" if bold else "") == "bold")
                out.append(((x, y, w, h), span.text or ""))
            continue
        runs = [(t.text or "", size, bold)]
        for span in t:
            runs.append((span.text or "", float(span.get("font-size", size)),
                         span.get("font-weight", "bold" if bold else "") == "bold"))
            runs.append((span.tail or "", size, bold))
        text = "".join(r[0] for r in runs)
        if not text.strip():
            continue
        width = sum(text_width(r, z, b) for r, z, b in runs)
        size = max(z for r, z, b in runs if r)               # the tallest run sets the line's height
        x, y, _, h = text_box(float(t.get("x")), float(t.get("y")), "", size)
        anchor = t.get("text-anchor", "start")
        x -= width / 2 if anchor == "middle" else width if anchor == "end" else 0.0
        out.append(((x, y, width, h), text))
    return out


def overlap(a, b, gap: float = 0.0) -> bool:
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    return ax < bx + bw + gap and bx < ax + aw + gap and ay < by + bh + gap and by < ay + ah + gap


def _cnn():
    return cg.sequential([nn.conv2d(4, 1, 8, 8, 8, kernel=3, padding=1), nn.relu(4, 8, 8, 8),
                          nn.max_pool2d(4, 8, 8, 8, 2), nn.flatten(4, 8, 4, 4), nn.dense(4, 128, 10)], name="cnn")


def _gpt():
    return nn.gpt(2, 8, 16, d=16, heads=2, layers=2)


LEGIBLE = {
    "mlp": (lambda: nn.mlp(8, [4, 16, 3]), {}),
    "cnn": (_cnn, {}),
    "gpt": (_gpt, {}),
    "gpt_step": (lambda: cg.compile_model(_gpt(), loss=nn.softmax_cross_entropy, optimizer=nn.adamw(3e-3)), {}),
    "mlp_step": (lambda: cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.mse, optimizer=nn.momentum(0.1)), {}),
    "block": (lambda: nn.transformer_block(2, 8, 16, heads=2), {"expand": ("attention", "mlp")}),
    "gpt_step_flat": (lambda: cg.compile_model(_gpt(), loss=nn.softmax_cross_entropy, optimizer=nn.adamw(3e-3)),
                      {"fold": False}),
    "cnn_step": (lambda: cg.compile_model(_cnn(), loss=nn.softmax_cross_entropy, optimizer=nn.adamw(3e-3)), {}),
    "rdiff_folded": (lambda: cg.rdiff(nn.mlp(8, [4, 16, 3])), {"fold": True}),
    "gpt_step_attention": (lambda: cg.compile_model(nn.gpt(2, 4, 8, d=8, heads=2, layers=1),
                                                    loss=nn.softmax_cross_entropy, optimizer=nn.adamw(3e-3)),
                           {"expand": ("attention",)}),
}


@pytest.fixture(scope="module")
def drawn():
    cache = {}

    def get(name):
        if name not in cache:
            make, kw = LEGIBLE[name]
            f = make()
            cache[name] = (f, kw, draw(f, **kw))
        return cache[name]
    return get


@pytest.mark.parametrize("name", list(LEGIBLE))
def test_no_two_text_boxes_overlap(drawn, name):
    """Every two texts of the picture (names, shapes, broadcast axes, wire labels, frame titles, the
    legend) are at least 2 px apart."""
    boxes = text_boxes(drawn(name)[2])
    assert len(boxes) >= 10
    bad = [(s, t) for i, (a, s) in enumerate(boxes) for b, t in boxes[i + 1:] if overlap(a, b, gap=2.0)]
    assert not bad


def _points(d: str, step: float = 1.0) -> list[tuple[float, float]]:
    """Points along SVG path data made of ``M``, ``H`` and ``C`` commands, at most ``step`` apart."""
    toks = d.replace(",", " ").split()
    pts, i, x, y = [], 0, 0.0, 0.0
    while i < len(toks):
        cmd = toks[i][0]
        if cmd == "M":
            x, y = float(toks[i][1:]), float(toks[i + 1])
            pts.append((x, y))
            i += 2
        elif cmd == "H":
            x1 = float(toks[i][1:])
            n = max(1, int(abs(x1 - x) / step))
            pts += [(x + (x1 - x) * k / n, y) for k in range(1, n + 1)]
            x, i = x1, i + 1
        elif cmd == "C":
            c = [float(toks[i][1:])] + [float(v) for v in toks[i + 1:i + 6]]
            (x1, y1, x2, y2, x3, y3) = c
            n = max(2, int((abs(x3 - x) + abs(y3 - y)) / step) * 2)
            for k in range(1, n + 1):
                u = k / n
                a, b, cc, dd = (1 - u) ** 3, 3 * u * (1 - u) ** 2, 3 * u * u * (1 - u), u ** 3
                pts.append((a * x + b * x1 + cc * x2 + dd * x3, a * y + b * y1 + cc * y2 + dd * y3))
            x, y, i = x3, y3, i + 6
        else:
            raise AssertionError(f"unexpected path command {toks[i]!r}")
    return pts


@pytest.mark.parametrize("name", list(LEGIBLE))
def test_no_wire_runs_under_another_wires_label_or_through_a_node(drawn, name):
    """A wire's label sits on a straight run of its own wire, clear of every other wire (stroke
    included): where wires bend and cross there is no label.  No wire runs through a frame's name,
    nor through a node it does not connect."""
    f, kw, _ = drawn(name)
    c, g = geometry(f, kw)
    wide = [2.5 if w.arrays > 1 else 0.7 for w in c.wires]
    pts = [[p for d in g.paths[k] for p in _points(d)] for k in range(len(c.wires))]

    def crosses(k: int, box) -> bool:
        bx, by, bw, bh = box
        r = wide[k]
        return any(bx - r < x < bx + bw + r and by - r < y < by + bh + r for x, y in pts[k])
    texts = [(text_box(x, y, s, LABEL), s, k) for x, y, s, k in g.labels]
    texts += [(text_box(x, y, c.frames[f].label, 11, bold=True), c.frames[f].label, None)
              for f, (x, y) in enumerate(g.ftitles)]
    bad = [(s, c.wires[k].label) for box, s, own in texts for k in range(len(c.wires)) if k != own and crosses(k, box)]
    assert not bad
    through = [(w.label, c.nodes[n].label) for k, w in enumerate(c.wires) for n, (x, y, nw, nh) in enumerate(g.nodes)
               if n != w.src and n not in {d for d, _ in w.dsts} and crosses(k, (x + 1, y + 1, nw - 2, nh - 2))]
    assert not through


def geometry(f, kw):
    """What ``draw(f, **kw)`` draws, placed (a training step: folded, as by default)."""
    from circuitgrad.drawing import placed
    return placed(f, **kw)


# ----------------------------------------------------------------------------------- folded steps
def _bench_step():
    """The training step of ``bench/diagrams.py`` (``docs/diagrams/gpt_step.svg``)."""
    return cg.compile_model(nn.gpt(2, 8, 16, d=16, heads=2, layers=2), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(3e-3))


def test_print_points_is_the_smallest_text_at_the_printed_width():
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="1008" height="100"><text font-size="12">a</text>'
           '<text font-size="10">b</text></svg>')
    assert print_points(svg) == 5.0 and print_points(svg, width=1008) == 10.0


def test_the_gpt_training_step_prints_at_a_papers_width():
    """At 7 in (504 pt) wide, the folded GPT step's smallest text (11 px) is at least 4.2 pt, more
    than twice what the single row gives (1.8 pt; before the fold: 1.5 pt, 3278 px wide with 10 px
    text); 5 pt would need the picture at most ~1100 px wide, which the eight labelled columns of the
    forward pass and the loss do not fit in."""
    step = _bench_step()
    folded, flat = draw(step), draw(step, fold=False)
    assert draw(step, fold=True) == folded                  # folded is the default for a training step
    assert print_points(folded) >= 4.2
    assert print_points(flat) < 1.85 and print_points(folded) >= 2.2 * print_points(flat)
    root = ET.fromstring(folded)
    assert float(root.get("width")) <= 1320 and float(root.get("height")) <= 1.0 * float(root.get("width"))


@pytest.mark.parametrize("name", ["gpt_step", "mlp_step", "cnn_step"])
def test_a_folded_step_is_the_lens_picture(drawn, name):
    """The forward pass left to right on top, the loss at its right end, every reverse pass below it
    running right to left (R[f] of a later f further right), the optimizer under them at the left."""
    f, kw, _ = drawn(name)
    c, g = geometry(f, kw)
    x = {nd.label: g.nodes[n][0] for n, nd in enumerate(c.nodes)}
    box = {nd.label: g.nodes[n] for n, nd in enumerate(c.nodes) if nd.kind == "box"}
    fwd = [n for n, nd in enumerate(c.nodes) if nd.kind == "box" and nd.phase == 0 and not nd.label.startswith(
        ("adamw", "momentum", "sgd"))]
    rev = [n for n, nd in enumerate(c.nodes) if nd.phase > 0]
    assert fwd and rev
    top_bottom = max(g.nodes[n][1] + g.nodes[n][3] for n in fwd)
    assert all(g.nodes[n][1] > top_bottom for n in rev)      # the reverse row under the forward row
    loss = next(lbl for lbl in box if "entropy" in lbl or lbl == "mse")
    assert x[loss] == max(x[c.nodes[n].label] for n in fwd)   # the loss at the right end
    names = [c.nodes[n].label for n in fwd if f"R[{c.nodes[n].label}]" in x]
    assert len(names) >= 2
    mid = {nd.label: g.nodes[n][0] + g.nodes[n][2] / 2 for n, nd in enumerate(c.nodes)}
    order = sorted(names, key=lambda k: mid[k])               # forward order left to right ...
    assert all(mid[f"R[{a}]"] <= mid[f"R[{b}]"] + 0.5 for a, b in zip(order, order[1:]))   # ... reverse: right to left
    opt = next(lbl for lbl in box if lbl in ("adamw", "momentum", "sgd"))
    rev_bottom = max(g.nodes[n][1] + g.nodes[n][3] for n in rev)
    assert box[opt][1] > rev_bottom and mid[opt] < max(mid[c.nodes[n].label] for n in rev)


def test_the_optimizer_gets_its_own_parameter_source_when_folded():
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.mse, optimizer=nn.momentum(0.1))
    svg = draw(step)
    again = [g for g in ET.fromstring(svg).iter(f"{SVG}g") if g.get("class") == "node param again"]
    assert len(again) == 1
    assert again[0].find(f"{SVG}title").text.startswith("the parameters again, for the optimizer")
    assert all(n in "".join(again[0].itertext()) for n in ("W0", "b0", "W1", "b1"))
    assert 'class="node param again"' not in draw(step, fold=False)


@pytest.mark.parametrize("expand", [("mse",), ("adamw",), ("dense0", "mse"), ("*",)])
def test_a_step_with_frames_folds_where_it_can_and_is_one_row_where_it_cannot(expand):
    """No cut goes through a frame: the optimizer expanded still gets its row (its frame after an
    empty column), and where the loss sits in frames from end to end (everything expanded) the step
    is drawn in one row, exactly as ``fold=False`` draws it."""
    from circuitgrad.drawing import placed
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.mse, optimizer=nn.adamw(3e-3))
    c, g = placed(step, expand=expand)
    assert g.folded == (expand != ("*",))
    if not g.folded:
        assert draw(step, expand=expand) == draw(step, expand=expand, fold=False)
    for f, (x, y, w, h) in enumerate(g.frames):          # frames hold their parts
        for n, nd in enumerate(c.nodes):
            if nd.frame == f:
                nx, ny, nw, nh = g.nodes[n]
                assert x <= nx and nx + nw <= x + w and y <= ny and ny + nh <= y + h
    opt = [n for n, nd in enumerate(c.nodes) if nd.optimizer]
    rev = [n for n, nd in enumerate(c.nodes) if nd.phase > 0]
    if g.folded:                                          # the optimizer's row under the reverse pass
        assert min(g.nodes[n][1] for n in opt) > max(g.nodes[n][1] + g.nodes[n][3] for n in rev)


def test_fold_is_a_bool_or_none():
    mlp = nn.mlp(8, [4, 16, 3])
    for bad in ("yes", 1, 0.5):
        with pytest.raises(TypeError, match="draw: fold must be True, False or None, got"):
            draw(mlp, fold=bad)
    assert draw(mlp) == draw(mlp, fold=False)                 # a model is not folded unless asked
    assert draw(mlp, fold=True) != draw(mlp)


def test_a_folded_step_does_not_depend_on_the_hash_seed():
    import os
    import subprocess
    import sys
    code = ("import sys; import circuitgrad as cg; from circuitgrad import nn; from circuitgrad.drawing import draw; "
            "sys.stdout.write(draw(cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.mse, "
            "optimizer=nn.adamw(3e-3)), expand=('adamw',)))")
    outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.mse, optimizer=nn.adamw(3e-3))
    assert outs[0] == outs[1] == draw(step, expand=("adamw",))
