"""Functor laws of the reverse derivative, as property tests, over the whole vocabulary.

``R[f >> g](a, dc) = R[f](a, R[g](f(a), dc))`` and
``R[f @ g](a1, a2, db1, db2) = (R[f](a1, db1), R[g](a2, db2))``.

``UNARY`` holds shape-preserving maps of matrices that between them apply every primitive a matrix takes (the
fast-growing ones on a tanh, so that no chain of them overflows);
``BATCHED`` those of ``[2, 3, 3]`` stacks (BatchMatMul, Permute, CausalMask, causal Softmax) and of
``[1, 1, 4, 4]`` images (Unfold and Fold, through a convolution). ``test_every_primitive_is_exercised``
checks that the maps, with their reverse derivatives, cover every primitive but Parameter and the
integer ones.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import circuitgrad as cg
from circuitgrad import ops
from circuitgrad.diagram import monogamous
from conftest import evaluate

F = cg.float64

UNARY = {
    "sigmoid": ops.sigmoid, "tanh": ops.tanh, "softmax": ops.softmax, "relu": ops.relu,
    "square": lambda x: x * x, "scale": lambda x: ops.scale(x, -1.5), "shift": lambda x: x + 0.5,
    "neg": ops.neg, "sin-ish": lambda x: x * ops.tanh(x) + x,
    "exp": lambda x: ops.exp(ops.tanh(x)), "log": lambda x: ops.log(x * x + 1.0),
    "sqrt": lambda x: ops.sqrt(x * x + 1.0), "rsqrt": lambda x: ops.rsqrt(x * x + 1.0),
    "div": lambda x: x / (x * x + 1.0), "pad-slice": lambda x: ops.pad(x, ((1, 0), (0, 2)))[1:, :-2],
    "row-sum": lambda x: x + ops.sum(x, axis=-1)[:, None], "row-max": lambda x: x - ops.max(x, -1)[:, None],
    "logsumexp": lambda x: x - ops.logsumexp(x)[:, None], "transpose": lambda x: ops.scale(x.T, 2.0).T,
    "gram": lambda x: ops.scale(ops.tanh(x) @ (x.T @ ops.tanh(x)), 0.1), "layer_norm": ops.layer_norm,
    "gelu": ops.gelu,
}

#: shape-preserving maps of the other shapes the vocabulary needs: (shape, map)
BATCHED = {
    "bmm": ((2, 3, 3), lambda x: ops.scale(x @ x, 0.5)),
    "permute": ((2, 3, 3), lambda x: ops.permute(x, (0, 2, 1)) * x),
    "causal_mask": ((2, 3, 3), lambda x: ops.causal_mask(x) * x),
    "causal_softmax": ((2, 3, 3), lambda x: ops.softmax(x, causal=True)),
    "conv": ((1, 1, 4, 4), lambda x: ops.conv2d(x, ops.constant(cg.NdArrayType((1, 1, 3, 3), F), 0.25),
                                                padding=1)),
}


def _chain(names, shape):
    T = cg.NdArrayType(shape, F)

    def fn(x):
        for n in names:
            x = UNARY[n](x)
        return x
    return cg.trace(fn, [T], name="+".join(names) or "id")


def _matrix_layer(shape, k):
    """x ↦ tanh(x @ W) with W a second input: a two-input morphism."""
    T = cg.NdArrayType(shape, F)
    W = cg.NdArrayType((shape[1], k), F)
    return cg.trace(lambda x, w: ops.tanh(x @ w), [T, W], name="tanh(x@W)")


names = st.lists(st.sampled_from(sorted(UNARY)), min_size=0, max_size=4)
shapes = st.tuples(st.integers(1, 3), st.integers(1, 4))
seeds = st.integers(0, 2**31 - 1)


@settings(max_examples=40, deadline=None)
@given(names, names, shapes, seeds)
def test_rdiff_of_composite_is_chain_rule(fs, gs, shape, seed):
    _assert_chain_rule(_chain(fs, shape), _chain(gs, shape), shape, np.random.default_rng(seed))


def _assert_chain_rule(f, g, shape, rng) -> None:
    """``R[f >> g](a, dc) = R[f](a, R[g](f(a), dc))`` at a random point."""
    a, dc = rng.normal(size=shape), rng.normal(size=shape)
    (lhs,) = evaluate(cg.rdiff(f >> g), a, dc)
    (fa,) = evaluate(f, a)
    (db,) = evaluate(cg.rdiff(g), fa, dc)
    (rhs,) = evaluate(cg.rdiff(f), a, db)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(names, shapes, st.integers(1, 3), seeds)
def test_rdiff_of_tensor_is_tensor_of_rdiffs(fs, shape, k, seed):
    rng = np.random.default_rng(seed)
    f, g = _chain(fs, shape), _matrix_layer(shape, k)
    a1, a2, w = rng.normal(size=shape), rng.normal(size=shape), rng.normal(size=(shape[1], k))
    db1, db2 = rng.normal(size=shape), rng.normal(size=(shape[0], k))
    lhs = evaluate(cg.rdiff(f @ g), a1, a2, w, db1, db2)
    rhs = evaluate(cg.rdiff(f), a1, db1) + evaluate(cg.rdiff(g), a2, w, db2)
    assert len(lhs) == len(rhs) == 3
    for l, r in zip(lhs, rhs):
        np.testing.assert_allclose(l, r, rtol=1e-10, atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(names, names, shapes, seeds)
def test_sequential_equals_repeated_compose(fs, gs, shape, seed):
    rng = np.random.default_rng(seed)
    f, g, h = _chain(fs, shape), _chain(gs, shape), _chain(fs[::-1], shape)
    a = rng.normal(size=shape)
    (x,) = evaluate(f >> g >> h, a)
    (y,) = evaluate(cg.sequential([f, g, h]), a)
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("f_name, g_name", [(f, g) for f in sorted(BATCHED) for g in sorted(BATCHED)
                                             if BATCHED[f][0] == BATCHED[g][0]])
def test_chain_rule_on_batched_maps(f_name, g_name):
    (shape, f_fn), (_, g_fn) = BATCHED[f_name], BATCHED[g_name]
    T = cg.NdArrayType(shape, F)
    f, g = cg.trace(f_fn, [T], name=f_name), cg.trace(g_fn, [T], name=g_name)
    _assert_chain_rule(f, g, shape, np.random.default_rng(0))


def test_every_primitive_is_exercised():
    """The maps above and their reverse derivatives apply every primitive but Parameter (unbound before any
    derivative) and OneHot (of integer ids, which have no derivative)."""
    from circuitgrad import primitives as P
    from circuitgrad.primitives import op_of
    seen = set()
    diagrams = [cg.trace(fn, [cg.NdArrayType((3, 4), F)], name=n) for n, fn in UNARY.items()]
    diagrams += [cg.trace(fn, [cg.NdArrayType(shape, F)], name=n) for n, (shape, fn) in BATCHED.items()]
    diagrams.append(_matrix_layer((3, 4), 2))
    for d in diagrams:
        for x in (d, monogamous(cg.rdiff(d))):        # monogamous: a wire read twice gets a Copy
            seen |= {type(op_of(l)) for l in x.H.x.table}
    missing = sorted(c.__name__ for c in set(P.PRIMITIVES) - seen - {P.Parameter, P.OneHot})
    assert missing == []


STRUCTURAL = [
    # name, diagram builder, inputs -> expected reverse derivative
    ("identity", lambda T, U: cg.identity([T]), lambda a, da: [da]),
    ("copy", lambda T, U: cg.trace(lambda a: (a, a), [T]), lambda a, d1, d2: [d1 + d2]),
    ("twist", lambda T, U: cg.trace(lambda a, b: (b, a), [T, U]), lambda a, b, db, da: [da, db]),
    ("discard", lambda T, U: cg.trace(lambda a, b: a, [T, U]), lambda a, b, da: [da, np.zeros(2)]),
]


@pytest.mark.parametrize("name,make,want", STRUCTURAL, ids=[s[0] for s in STRUCTURAL])
def test_rdiff_of_structural_morphisms(name, make, want):
    T, U = cg.NdArrayType((3,), F), cg.NdArrayType((2,), F)
    d = make(T, U)
    r = cg.rdiff(d)
    assert r.target_types == d.source_types
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=t.shape) for t in r.source_types]
    got = evaluate(r, *xs)
    for g, w in zip(got, want(*xs)):
        np.testing.assert_array_equal(g, w)
