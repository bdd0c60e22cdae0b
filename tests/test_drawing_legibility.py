"""Diagrams that do not mislead and print legibly (issue 27, items 7 and 9): both residual adds of a
transformer block outside their sublayer, the attention core named as attention (and causal), the
parameter names users see, unknown ``expand`` names refused, and no two text boxes overlapping."""
import collections
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.drawing import circuit, draw
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
            out += ([line.split(" : ")[0] for line in g.find(f"{SVG}title").text.split("\n")]
                    if name.endswith(" parameters") else [name])
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
