"""Provenance: every operation knows the definition that created it, through tracing, ``>>``, ``@``,
``sequential``, ``rdiff``, scheduling, rewriting, the generated source and error messages."""
import collections

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad import primitives as P
from circuitgrad.primitives import op_of, path_of
from circuitgrad.provenance import scope

T = cg.NdArrayType((4, 3), cg.float64)


def paths(d) -> collections.Counter:
    return collections.Counter(path_of(l) for l in d.H.x.table)


def test_trace_scopes_and_nesting():
    def f(x):
        with scope("outer"):
            y = ops.exp(x)
            with scope("inner"):
                y = y * y
        return y + x
    d = cg.trace(f, [T], name="f(4,3)")
    ops_at = {(type(op_of(l)).__name__, path_of(l)) for l in d.H.x.table}
    assert ops_at == {("Exp", "f/outer"), ("Mul", "f/outer/inner"), ("Add", "f")}


def test_a_scope_inside_one_of_the_same_name_is_that_scope():
    def f(x):
        with scope("layer_norm"):
            return ops.layer_norm(x)
    assert set(paths(cg.trace(f, [T], name="m"))) == {"m/layer_norm"}


def test_calling_a_diagram_puts_its_paths_under_the_caller():
    inner = cg.trace(lambda x: ops.tanh(x), [T], name="inner(4,3)")
    outer = cg.trace(lambda x: inner(ops.exp(x))[0], [T], name="outer")
    assert paths(outer) == {"outer": 1, "outer/inner": 1}
    assert paths(inner) == {"inner": 1}                  # the called diagram is unchanged


def test_trace_path_override_and_transparent_trace():
    inner = cg.trace(lambda x: ops.tanh(x), [T], name="inner")
    assert set(paths(cg.trace(lambda x: ops.exp(x), [T], name="long(1,2)", path="short"))) == {"short"}
    wrapper = cg.trace(lambda x: inner(ops.exp(x))[0], [T], name="wrapper", path="")
    assert paths(wrapper) == {"": 1, "inner": 1}


def test_composition_and_tensor_keep_paths_sequential_numbers_repeats():
    a = cg.trace(lambda x: ops.exp(x), [T], name="a")
    b = cg.trace(lambda x: ops.tanh(x), [T], name="b")
    assert set(paths(a >> b)) == {"a", "b"}
    assert set(paths(a @ b)) == {"a", "b"}
    assert set(paths(cg.sequential([a, b, a]))) == {"a0", "b", "a1"}
    assert set(paths(cg.sequential([a, b], name="net(3)"))) == {"net/a", "net/b"}
    mlp = nn.mlp(4, [3, 5, 2])
    assert set(paths(mlp)) == {"mlp/dense0/linear", "mlp/dense0/bias", "mlp/relu",
                               "mlp/dense1/linear", "mlp/dense1/bias"}


def test_gpt_paths_name_blocks_and_their_parts():
    g = nn.gpt(2, 8, 16, d=16, heads=2, layers=2)
    got = set(paths(g))
    assert "" not in got
    for k in (0, 1):
        for part in ("ln1/layer_norm", "attention/q", "attention/k", "attention/v", "attention/o",
                     "attention/causal_softmax_attention", "ln2/layer_norm", "mlp/fc", "mlp/gelu", "mlp/proj"):
            assert f"gpt/block{k}/{part}" in got, part
    assert {"gpt/embedding", "gpt/positional_embedding", "gpt/layer_norm", "gpt/head"} <= got
    sm = {type(op_of(l)) for l in g.H.x.table if path_of(l) == "gpt/block1/attention/causal_softmax_attention"}
    assert P.Softmax in sm and P.BatchMatMul in sm
    sph = nn.gpt(2, 8, 16, d=16, heads=2, layers=1, attention="spherical")
    assert {P.Rsqrt, P.CausalMask} <= {type(op_of(l)) for l in sph.H.x.table
                                        if path_of(l) == "gpt/block/attention/causal_spherical_attention"}   # one block: not numbered


def test_reverse_maps_inherit_the_path_of_their_operation():
    m = nn.mlp(4, [3, 5, 2])
    model_paths = set(paths(m))
    R = cg.rdiff(m)
    by_path = collections.defaultdict(set)
    for l in R.H.x.table:
        by_path[path_of(l)].add(type(op_of(l)))
    # the only operations without a definition: copies of a wire read twice, and the sums of their gradients
    assert set(by_path) <= model_paths | {""}
    assert by_path[""] <= {P.Copy, P.Add}
    # the reverse map of ``x @ W`` (two products with transposes) sits at the linear layer
    assert {P.MatMul, P.Transpose} <= by_path["mlp/dense0/linear"]
    assert P.Heaviside in by_path["mlp/relu"]


def test_schedule_rewrite_and_source_carry_paths():
    g = nn.gpt(2, 8, 16, d=16, heads=2, layers=2)
    step = cg.compile_model(g, loss=nn.softmax_cross_entropy, optimizer=nn.adamw(1e-3))
    prog = step.programs["step"]
    at = collections.Counter(a.path for a in prog.instrs)
    assert at["adamw"] > 0 and at["softmax_cross_entropy"] > 0
    softmax = [a for a in prog.instrs if a.path == "gpt/block1/attention/causal_softmax_attention"]
    # forward and reverse map of the block's softmax attention: the Softmax and its derivative's products
    assert {P.Softmax, P.BatchMatMul, P.Mul} <= {type(a.op) for a in softmax}
    unplaced = {type(a.op).__name__ for a in prog.instrs if not a.path}
    assert unplaced <= {"Copy", "Constant", "Add"}, unplaced   # plumbing and the seed 1.0 of the loss
    assert "@ gpt/block1/attention/causal_softmax_attention" in step.source
    assert "@ gpt/block1/attention/causal_softmax_attention" in str(prog)


def test_provenance_does_not_change_values():
    m = nn.mlp(4, [3, 5, 2])
    f = cg.compile_model(m, loss=nn.mse, optimizer=nn.sgd(0.1), dtype=cg.float64)
    params = f.init_params(seed=1)
    x, y = np.random.default_rng(0).normal(size=(4, 3)), np.zeros((4, 2))
    a = f.step(params, x, y)
    # the same network composed without sequential's names: equal values, different paths
    m2 = nn.dense(4, 3, 5) >> nn.relu(4, 5) >> nn.dense(4, 5, 2)
    assert set(paths(m2)) != set(paths(m))
    f2 = cg.compile_model(m2, loss=nn.mse, optimizer=nn.sgd(0.1), dtype=cg.float64)
    b = f2.step(dict(zip(f2.param_names, params.values())), x, y)
    for u, v in zip(a.values(), b.values()):
        np.testing.assert_array_equal(u, v)


def test_shape_errors_inside_a_definition_name_the_trace():
    def f(x):
        with scope("attention"):
            return ops.matmul(x, x)
    with pytest.raises(cg.TypeMismatch, match=r"^in f: "):
        cg.trace(f, [T], name="f")
