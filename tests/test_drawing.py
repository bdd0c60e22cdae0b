"""circuitgrad.drawing: neural circuit diagrams (Abbott 2024) of models, traced diagrams, compiled
training steps and programs, as SVG that parses, rasterises and shows what the program holds."""
import collections
import io
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.drawing import circuit, draw, parameter_names
from circuitgrad.drawing.layout import layout
from circuitgrad.diagram import monogamous
from circuitgrad.schedule import Program

SVG = "{http://www.w3.org/2000/svg}"


# ----------------------------------------------------------------------------------- models
@pytest.fixture(scope="module")
def models():
    mlp = nn.mlp(8, [4, 16, 3])
    cnn = cg.sequential([nn.conv2d(8, 1, 8, 8, 16, kernel=3, padding=1), nn.relu(8, 16, 8, 8),
                         nn.max_pool2d(8, 16, 8, 8, 2), nn.flatten(8, 16, 4, 4), nn.dense(8, 256, 10)])
    gpt = nn.gpt(2, 8, 16, d=16, heads=2, layers=2)
    step = cg.compile_model(nn.gpt(2, 8, 16, d=16, heads=2, layers=2), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(3e-3))
    return {"mlp": mlp, "cnn": cnn, "gpt": gpt, "step": step, "rdiff": cg.rdiff(mlp)}


NAMES = ["mlp", "cnn", "gpt", "step", "rdiff"]


def program(f) -> Program:
    return f.programs["step"] if isinstance(f, cg.CompiledModel) else cg.schedule(f)


def common(paths: list[list[str]]) -> list[str]:
    out = paths[0]
    for p in paths[1:]:
        k = 0
        while k < min(len(out), len(p)) and out[k] == p[k]:
            k += 1
        out = out[:k]
    return out


def expected_boxes(f, depth: int = 1) -> set[str]:
    """The definitions ``depth`` levels below the root, from ``Apply.path`` alone (for a compiled
    model the model's own definition is dissolved, so its parts sit beside the loss and optimizer)."""
    prog = program(f)
    paths = [a.path.split("/") for a in prog.instrs if a.path and a.op.name != "Parameter"]
    root = common(paths)
    strip: list[str] = []
    if isinstance(f, cg.CompiledModel):
        strip = common([a.path.split("/") for a in f.programs["predict"].instrs if a.path])
    out = set()
    for p in paths:
        rel = p[len(root):]
        if strip and rel[:len(strip)] == strip:
            rel = rel[len(strip):]
        if len(rel) >= depth:
            out.add(rel[depth - 1])
    return out


def texts(svg: str) -> list[str]:
    """All visible text (``text`` and ``tspan`` contents) of an SVG."""
    root = ET.fromstring(svg)
    return ["".join(e.itertext()) for e in root.iter(f"{SVG}text")]


def png_pixels(svg: str) -> np.ndarray:
    import cairosvg
    import matplotlib.image
    png = cairosvg.svg2png(bytestring=svg.encode())
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    return matplotlib.image.imread(io.BytesIO(png), format="png")


def overlap(a, b) -> bool:
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    return ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah


# ----------------------------------------------------------------------------------- rendering
class TestRendering:
    @pytest.mark.parametrize("name", NAMES)
    def test_svg_parses_and_rasterises_to_a_picture(self, models, name):
        svg = draw(models[name])
        root = ET.fromstring(svg)
        assert root.tag == f"{SVG}svg" and root.get("version") == "1.1"
        w, h = float(root.get("width")), float(root.get("height"))
        assert root.get("viewBox") == f"0 0 {root.get('width')} {root.get('height')}" and w > 300 and h > 150
        assert root.get("font-family") == "DejaVu Sans, Helvetica, Arial, sans-serif"
        allowed = {"svg", "rect", "path", "line", "circle", "polygon", "text", "tspan", "g", "title", "defs", "marker"}
        assert {e.tag.replace(SVG, "") for e in root.iter()} <= allowed
        px = png_pixels(svg)
        grey = px[..., :3].mean(axis=-1)
        assert abs(px.shape[0] - h) <= 1 and abs(px.shape[1] - w) <= 1
        assert (grey < 0.3).sum() > 500                    # dark strokes and text
        assert (grey > 0.95).mean() > 0.5                  # on a white page

    @pytest.mark.parametrize("name", NAMES)
    def test_fonts_are_at_least_11px(self, models, name):
        root = ET.fromstring(draw(models[name]))
        sizes = [float(e.get("font-size")) for e in root.iter() if e.get("font-size")]
        assert sizes and min(sizes) >= 11

    def test_a_program_is_drawn_and_anything_else_is_refused(self, models):
        svg = draw(cg.schedule(models["mlp"]))
        assert ">dense0<" in svg and ">v0<" in svg         # inputs named as SSA variables
        for bad, what in ((42, "int"), ("model.py", "str"), (nn, "module"), (None, "NoneType")):
            with pytest.raises(TypeError) as e:
                draw(bad)
            assert str(e.value) == f"draw: f must be a Diagram, a CompiledModel or a Program, got {what}"

    def test_depth_must_be_positive_and_expand_may_be_one_name(self, models):
        with pytest.raises(ValueError, match="depth must be an int of at least 1, got 0"):
            draw(models["mlp"], depth=0)
        assert draw(models["gpt"], expand="attention") == draw(models["gpt"], expand=("attention",))

    def test_path_writes_the_file(self, models, tmp_path):
        svg = draw(models["mlp"], tmp_path / "mlp.svg")
        assert (tmp_path / "mlp.svg").read_text(encoding="utf-8") == svg
        draw(models["cnn"], str(tmp_path / "cnn.svg"), title="digits")
        assert ">digits<" in (tmp_path / "cnn.svg").read_text(encoding="utf-8")

    def test_output_is_deterministic(self, models):
        assert draw(models["gpt"]) == draw(models["gpt"])
        assert draw(models["step"]) == draw(models["step"])
        # a second, separately built model (new parameter ids) gives the same bytes
        again = nn.gpt(2, 8, 16, d=16, heads=2, layers=2)
        assert draw(again, expand=("attention",)) == draw(models["gpt"], expand=("attention",))

    def test_output_does_not_depend_on_the_hash_seed(self, models):
        import os
        import subprocess
        import sys
        code = ("import circuitgrad as cg; from circuitgrad import nn; from circuitgrad.drawing import draw; "
                "import sys; sys.stdout.write(draw(cg.rdiff(nn.mlp(8, [4, 16, 3])), expand=('*',)))")
        outs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
        assert outs[0] == outs[1] == draw(models["rdiff"], expand=("*",))

    def test_labels_from_user_code_are_escaped(self):
        T = cg.NdArrayType((4, 3), cg.float32)

        def f(x):
            return x @ ops.param(cg.NdArrayType((3, 2), cg.float32), "a<&>b")
        svg = draw(cg.trace(f, [T], name='odd"name<1>'))
        assert "a&lt;&amp;&gt;b" in svg and "a<&>b" not in svg
        shown = texts(svg)                              # parses, and reads back as written
        assert 'odd"name<1>' in shown and "a<&>b0 3×2" in shown


# ----------------------------------------------------------------------------------- content
class TestContent:
    @pytest.mark.parametrize("name", NAMES)
    def test_every_definition_box_is_labelled(self, models, name):
        svg = draw(models[name])
        want = expected_boxes(models[name])
        assert len(want) >= 3
        shown = set(texts(svg))                        # a long name on two lines is one text
        missing = [b for b in sorted(want) if b not in shown]
        assert not missing

    def test_the_boxes_of_a_gpt_and_of_its_training_step(self, models):
        assert expected_boxes(models["gpt"]) == {"embedding", "positional_embedding", "block0", "block1",
                                                 "layer_norm", "head"}
        step = draw(models["step"])
        assert expected_boxes(models["step"]) >= {"block0", "adamw", "softmax_cross_entropy"}
        for reverse in ("R[block0]", "R[block1]", "R[head]", "R[embedding]"):
            assert f">{reverse}<" in step               # the backward flow, pass by pass
        assert {"38 new parameters", "16 parameters"} <= set(texts(step))   # on two lines when folded

    def test_depth_two_shows_the_parts_of_each_block(self, models):
        svg = draw(models["gpt"], depth=2)
        want = expected_boxes(models["gpt"], depth=2)
        assert {"attention", "mlp", "ln1", "ln2"} <= want
        assert all(f">{b}<" in svg for b in want)
        assert ">block0<" in svg                       # now a frame, with its name

    @pytest.mark.parametrize("name", ["mlp", "cnn", "gpt", "rdiff", "step"])
    def test_expanding_everything_shows_every_primitive(self, models, name):
        prog = program(models[name])
        svg = draw(models[name], expand=("*",))
        count = collections.Counter(a.op.name for a in prog.instrs)
        assert len(count) >= 5
        assert [n for n in count if n not in svg] == []
        shown = collections.Counter(t for t in texts(svg))
        for n in count:                                # drawn primitives carry their name
            if n not in ("Parameter", "Constant", "Copy"):
                assert shown[n] == count[n], n
        assert draw(models[name], depth=99) == svg

    def test_expand_attention_shows_its_parts_and_not_the_mlps(self, models):
        plain = draw(models["gpt"])
        svg = draw(models["gpt"], expand=("attention",))
        for part in ("q", "k", "v", "o", "causal_softmax_attention"):
            assert f">{part}<" in svg and f">{part}<" not in plain
        for part in ("fc", "gelu", "proj"):
            assert f">{part}<" not in svg
        assert ">mlp<" in svg and ">attention<" in svg and ">block1<" in svg
        assert ">causal_softmax_attention<" not in draw(models["gpt"], expand=("gpt/block0",))
        by_path = draw(models["gpt"], expand=("gpt/block0/attention",))
        assert by_path.count(">causal_softmax_attention<") == 1          # one block's attention only

    def test_parameters_are_labelled_sources(self, models):
        svg = draw(models["mlp"])
        labels = [a.op.label for a in cg.schedule(models["mlp"]).instrs if a.op.name == "Parameter"]
        assert sorted(labels) == ["W", "W", "b", "b"]
        assert svg.count('<g class="node param">') == 4
        for name in ("W0", "b0", "W1", "b1"):            # the names of the parameter dict
            assert svg.count(f'bold">{name}</tspan>') == 1
        assert "> 4×16<" in svg and "> 16×3<" in svg    # with their shapes
        gpt = draw(models["gpt"])
        for a in cg.schedule(models["gpt"]).instrs:
            if a.op.name == "Parameter":
                assert a.op.label + "0" in gpt
        step = draw(models["step"])
        assert all(n in step for n in models["step"].param_names)

    def test_wires_are_labelled_with_their_shapes(self, models):
        prog = cg.schedule(models["mlp"])
        prod = prog.producers()
        hidden = {prog.types[x] for a in prog.instrs if a.path == "mlp/relu" for x in a.args
                  if x in prod and prog.instrs[prod[x]].path.startswith("mlp/dense0")}
        assert [str(t) for t in hidden] == ["float32[8, 16]"]
        svg = draw(models["mlp"])
        assert ">8×16<" in svg and ">8×4<" in svg and ">8×3<" in svg
        assert "dtype float32" in svg
        assert ">2×8×16<" in draw(models["gpt"]) and ">index(16) 2×8<" in draw(models["gpt"])
        assert ">8×16×8×8<" in draw(models["cnn"])


# ----------------------------------------------------------------------------------- conventions
class TestConventions:
    def test_contractions_linear_and_nonlinear_operations_are_marked(self, models):
        svg = draw(models["gpt"], expand=("*",))
        root = ET.fromstring(svg)
        kinds = collections.defaultdict(set)
        for g in root.iter(f"{SVG}g"):
            if "node prim" in (g.get("class") or ""):
                name = "".join(g.find(f"{SVG}text").itertext())
                kinds[name].add(g.get("class"))
        assert kinds["MatMul"] == {"node prim contraction linear-map"}          # by a weight: linear
        assert kinds["BatchMatMul"] == {"node prim contraction"}                # q·k, p·v: bilinear
        assert kinds["SumTo"] == {"node prim contraction linear-map"}
        assert kinds["Softmax"] == {"node prim nonlinear"} and kinds["Tanh"] == {"node prim nonlinear"}
        for lin in ("Reshape", "Permute", "Broadcast", "Scale", "Add", "Neg"):
            assert kinds[lin] == {"node prim linear linear-map"}, lin
        assert kinds["Mul"] == {"node prim linear linear-map", "node prim nonlinear"}   # by a gain / x·x
        assert '>·16<' in svg and '>·8<' in svg and ">Σ16<" in svg                    # contracted sizes
        assert 'stroke-dasharray="5,3"' in svg
        legend = texts(svg)
        for entry in ("contraction (·n: over n, Σn: sum)", "linear map (dashed)", "nonlinear", "parameter",
                      "copy", "broadcast axes", "tuple of arrays", "wires: axis sizes, dtype float32"):
            assert entry in legend
        mlp = draw(models["mlp"])
        assert '<g class="node box contraction' not in mlp and '<g class="node box linear linear-map">' in mlp
        assert '<g class="node box nonlinear">' in mlp                                # relu
        linear = draw(models["mlp"], depth=2)
        assert linear.count('<g class="node box contraction linear-map">') == 2      # dense/linear: x·W

    def test_broadcast_axes_pass_over_the_operations(self, models):
        att = draw(nn.attention(2, 8, 16, heads=2, causal=True), expand=("*",))
        root = ET.fromstring(att)
        bands = collections.defaultdict(set)
        for g in root.iter(f"{SVG}g"):
            if "node prim" in (g.get("class") or ""):
                t = [("".join(e.itertext()), e.get("fill")) for e in g.iter(f"{SVG}text")]
                bands[t[0][0]] |= {s for s, fill in t[1:] if fill == "#7c3aed"}
        assert bands["BatchMatMul"] == {"2×2"}          # over batch and heads
        assert bands["MatMul"] == {"2×8"}               # a [2, 8, 16] activation by a [16, 16] weight
        assert bands["Softmax"] == {"2×2"}              # causal: not over the query positions either
        plain = draw(nn.attention(2, 8, 16, heads=2, causal=False), expand=("*",))
        assert '<title>Softmax : (float32[2, 2, 8, 8])' in plain and ">2×2×8<" in plain
        mlp = ET.fromstring(draw(models["mlp"]))
        over = {"".join(g.find(f"{SVG}text").itertext()): ["".join(e.itertext()) for e in g.iter(f"{SVG}text")][1:]
                for g in mlp.iter(f"{SVG}g") if "node box" in (g.get("class") or "")}
        assert over == {"dense0": ["8"], "relu": ["8"], "dense1": ["8"]}
        gpt = ET.fromstring(draw(models["gpt"]))
        over = {"".join(g.find(f"{SVG}text").itertext()): ["".join(e.itertext()) for e in g.iter(f"{SVG}text")][1:]
                for g in gpt.iter(f"{SVG}g") if "node box" in (g.get("class") or "")}
        assert over["embedding"] == ["2×8"] and over["head"] == ["2×8"]
        assert over["positional_embedding"] == ["2"]     # the positions differ along the sequence
        assert over["block0"] == []                      # attention mixes the sequence

    def test_copies_are_dots_and_tuples_are_double_wires(self, models):
        svg = draw(models["mlp"], expand=("*",))
        assert svg.count('<circle class="copy"') >= 1    # relu's input feeds Heaviside and Mul
        step = draw(models["step"])
        assert '<g class="wire tuple">' in step and ">24 arrays<" in step
        assert step.count('<circle class="copy"') >= 5

    def test_an_explicit_copy_is_a_dot(self):
        T = cg.NdArrayType((4, 3), cg.float32)
        d = monogamous(cg.trace(lambda x: x * x + x, [T], name="sq"))
        assert [a.op.name for a in cg.schedule(d).instrs][0] == "Copy"
        svg = draw(d, expand=("*",))
        node = svg.split('<g class="node copy">', 1)[1].split("</g>", 1)[0]
        assert "<title>Copy : " in node and "<circle" in node
        assert svg.count("<title>v") >= 4              # each of its three outputs is a wire

    def test_paths_are_in_tooltips(self, models):
        svg = draw(models["gpt"])
        assert "<title>gpt/block0: " in svg and "<title>gpt/embedding: " in svg
        step = draw(models["step"])
        assert "<title>gpt/block0 (pass 2: its reverse map, in a derivative)" in step
        assert "R[f]: the reverse pass of definition f" in texts(step)


# ----------------------------------------------------------------------------------- layout
def geometry(f, **kw):
    prog = program(f)
    if isinstance(f, cg.CompiledModel):
        c = circuit(prog, "step", expand=kw.get("expand", ()), depth=kw.get("depth", 1))
    else:
        c = circuit(prog, in_names=["x"] * len(prog.inputs), out_names=["y"] * len(prog.outputs),
                    expand=kw.get("expand", ()), depth=kw.get("depth", 1), param_names=parameter_names(f))
    return c, layout(c)


class TestLayout:
    @pytest.mark.parametrize("name,kw", [("mlp", {}), ("gpt", {}), ("step", {}), ("cnn", {"expand": ("*",)}),
                                         ("gpt", {"expand": ("attention",)}), ("mlp", {"expand": ("*",)})])
    def test_no_two_nodes_overlap_and_frames_hold_their_parts(self, models, name, kw):
        c, g = geometry(models[name], **kw)
        rects = g.nodes
        assert len(rects) == len(c.nodes) >= 5
        for i in range(len(rects)):
            for j in range(i + 1, len(rects)):
                assert not overlap(rects[i], rects[j]), (c.nodes[i].label, c.nodes[j].label)
        for n, nd in enumerate(c.nodes):
            f = nd.frame
            while f is not None:
                fx, fy, fw, fh = g.frames[f]
                x, y, w, h = rects[n]
                assert fx <= x and x + w <= fx + fw and fy <= y and y + h <= fy + fh, (nd.label, c.frames[f].label)
                f = c.frames[f].parent
        for a in range(len(c.frames)):                  # sibling frames do not overlap
            for b in range(a + 1, len(c.frames)):
                if c.frames[a].parent == c.frames[b].parent:
                    assert not overlap(g.frames[a], g.frames[b])
        assert all(x >= 0 and y >= 0 and x + w <= g.width and y + h <= g.height for x, y, w, h in rects)

    def test_columns_follow_the_data(self, models):
        c, g = geometry(models["gpt"])
        x = {nd.label: g.nodes[n][0] for n, nd in enumerate(c.nodes)}
        order = ["x", "embedding", "positional_embedding", "block0", "block1", "layer_norm", "head", "y"]
        assert [x[k] for k in order] == sorted(x[k] for k in order)
        assert x["tok_E0"] < x["embedding"] and x["head_W0"] < x["head"]   # parameters left of their consumer
        assert len(c.nodes) <= 20                                          # readable at a glance

    def test_a_wire_starts_and_ends_at_its_ports(self, models):
        c, g = geometry(models["mlp"])
        for k, w in enumerate(c.wires):
            sx, sy, sw, sh = g.nodes[w.src]
            start = g.paths[k][0].split()[0]
            x0, y0 = (float(v) for v in start[1:].split(","))
            assert abs(x0 - (sx + sw)) < 0.2 and sy <= y0 <= sy + sh
            for (d, _), p in zip(w.dsts, g.paths[k][-len(w.dsts):]):
                dx, dy, _, dh = g.nodes[d]
                assert p.endswith(f"H{dx:.1f}")
