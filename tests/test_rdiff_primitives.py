"""Every primitive: forward vs an independent float64 NumPy reference, and its
reverse derivative vs central finite differences (relative error < 1e-6)."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import primitives as P
from circuitgrad.tracing import apply
from _tolerance import assert_programs_close
from conftest import evaluate, rel_err, vjp_fd

F = cg.float64
T = cg.NdArrayType((3, 4), F)
V = cg.NdArrayType((4,), F)
T3 = cg.NdArrayType((2, 3, 4), F)
IDS = cg.NdArrayType((3, 4), cg.index(5))


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


IMG = cg.NdArrayType((2, 3, 5, 4), F)
GEOMETRY = dict(kernel=(3, 2), stride=(2, 1), padding=(1, 2))


def _blocks(shape, kernel, stride, padding):
    """Naive im2col positions: ``(b, c, row, column, pixel)`` for every kernel entry of every block, inside
    the image (the padding is skipped)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    B, C, H, W = shape
    ho, wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    for b in range(B):
        for c in range(C):
            for i in range(kh):
                for j in range(kw):
                    for y in range(ho):
                        for z in range(wo):
                            r, q = y * sh - ph + i, z * sw - pw + j
                            if 0 <= r < H and 0 <= q < W:
                                yield (b, (c * kh + i) * kw + j, y * wo + z), (b, c, r, q)


def _unfold_loops(x, kernel, stride, padding):
    """Naive im2col: one column per block position, rows (c, i, j), zeros outside the image."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    B, C, H, W = x.shape
    out = np.zeros((B, C * kh * kw, ((H + 2 * ph - kh) // sh + 1) * ((W + 2 * pw - kw) // sw + 1)))
    for col, pixel in _blocks(x.shape, kernel, stride, padding):
        out[col] = x[pixel]
    return out


def _fold_loops(cols, shape, kernel, stride, padding):
    """Naive col2im: every column entry added to the pixel it came from."""
    out = np.zeros(shape)
    for col, pixel in _blocks(shape, kernel, stride, padding):
        out[pixel] += cols[col]
    return out


#: (operation, float64 reference) for every primitive (Parameter is tested in test_compile)
CASES = [
    (P.Copy(T, 3), lambda x: (x, x, x)),
    (P.Copy(T, 0), lambda x: ()),
    (P.Constant(T, 2.5), lambda: (np.full((3, 4), 2.5),)),
    (P.Add(T), lambda a, b: (a + b,)),
    (P.Neg(T), lambda a: (-a,)),
    (P.Mul(T), lambda a, b: (a * b,)),
    (P.Scale(T, -0.75), lambda a: (-0.75 * a,)),
    (P.MatMul(cg.NdArrayType((3, 4), F), cg.NdArrayType((4, 5), F)), lambda a, b: (a @ b,)),
    (P.Transpose(T), lambda a: (a.T,)),
    (P.Reshape(T, (2, 6)), lambda a: (a.reshape(2, 6),)),
    (P.Broadcast(V, T), lambda a: (np.tile(a, (3, 1)),)),
    (P.Broadcast(cg.NdArrayType((3, 1), F), T), lambda a: (np.repeat(a, 4, axis=1),)),
    (P.SumTo(T, V), lambda a: (a.sum(0),)),
    (P.SumTo(T, cg.NdArrayType((3, 1), F)), lambda a: (a.sum(1, keepdims=True),)),
    (P.SumTo(T, cg.NdArrayType((), F)), lambda a: (np.array(a.sum()),)),
    (P.Heaviside(T), lambda a: (np.where(a > 0, 1.0, 0.0),)),
    (P.Sigmoid(T), lambda a: (_sig(a),)),
    (P.Tanh(T), lambda a: (np.tanh(a),)),
    (P.Softmax(T), lambda a: (_softmax(a),)),
    (P.LogSumExp(T), lambda a: (np.log(np.exp(a).sum(-1)),)),
    (P.Softmax(T, causal=True), lambda a: (_softmax(np.where(np.tri(3, 4, dtype=bool), a, -np.inf)),)),
    (P.Exp(T), lambda a: (np.exp(a),)),
    (P.Log(T), lambda a: (np.log(a),)),
    (P.Sqrt(T), lambda a: (np.sqrt(a),)),
    (P.Rsqrt(T), lambda a: (1 / np.sqrt(a),)),
    (P.Div(T), lambda a, b: (a / b,)),
    (P.ArgMaxMask(T), lambda a: (np.eye(4)[a.argmax(-1)],)),
    (P.Permute(T3, (2, 0, 1)), lambda a: (a.transpose(2, 0, 1),)),
    (P.BatchMatMul(T3, cg.NdArrayType((2, 4, 5), F)), lambda a, b: (np.einsum("bij,bjk->bik", a, b),)),
    (P.CausalMask(T3), lambda a: (a * np.tri(3, 4),)),
    (P.OneHot(IDS, cg.NdArrayType((3, 4, 5), F)), lambda s: (np.eye(5)[s],)),
    (P.Slice(T3, ((1, 2, 1), (0, 3, 2), (1, 4, 1))), lambda a: (a[1:2, 0:3:2, 1:4],)),
    (P.Pad(cg.NdArrayType((1, 2, 3), F), T3, ((1, 2, 1), (0, 3, 2), (1, 4, 1))),
     lambda a: (np.pad(a[:, [0, 0, 1], :] * np.array([1, 0, 1])[None, :, None], ((1, 0), (0, 0), (1, 0))),)),
    (P.Unfold(IMG, **GEOMETRY), lambda x: (_unfold_loops(x, **GEOMETRY),)),
    (P.Fold(IMG, **GEOMETRY), lambda c: (_fold_loops(c, IMG.shape, **GEOMETRY),)),
    (P.Fold(cg.NdArrayType((1, 2, 6, 6), F), kernel=3, stride=2),          # overlapping blocks, a margin left
     lambda c: (_fold_loops(c, (1, 2, 6, 6), (3, 3), (2, 2), (0, 0)),)),
]

#: operations defined on part of the line: inputs drawn from their domain
DOMAIN = {
    P.Log: lambda rng, t: rng.uniform(0.5, 3.0, size=t.shape),
    P.Sqrt: lambda rng, t: rng.uniform(0.5, 3.0, size=t.shape),
    P.Rsqrt: lambda rng, t: rng.uniform(0.5, 3.0, size=t.shape),
    P.Div: lambda rng, t: rng.choice([-1.0, 1.0], size=t.shape) * rng.uniform(0.5, 2.0, size=t.shape),
    P.OneHot: lambda rng, t: rng.integers(0, t.dtype.n, size=t.shape),
}


def test_cases_cover_every_primitive():
    covered = {type(op) for op, _ in CASES} | {P.Parameter}
    assert covered == set(P.PRIMITIVES)


def _diagram(op):
    return cg.trace(lambda *a: apply(op, *a), op.source, name=op.name)


def _inputs(op, rng):
    draw = DOMAIN.get(type(op))
    return [draw(rng, t) if draw and (i == len(op.source) - 1 or type(op) is not P.Div) else rng.normal(size=t.shape)
            for i, t in enumerate(op.source)]


@pytest.mark.parametrize("op,ref", CASES, ids=[f"{op.name}-{i}" for i, (op, _) in enumerate(CASES)])
def test_forward(op, ref, rng):
    xs = _inputs(op, rng)
    got = evaluate(_diagram(op), *xs)
    want = ref(*xs)
    assert len(got) == len(want) == len(op.target)
    for g, w, t in zip(got, want, op.target):
        assert g.shape == t.shape
    # the NumPy reference computes the same formula (its own order of sums): within the same bound
    assert_programs_close(got, want, cg.schedule(_diagram(op)), xs)


@pytest.mark.parametrize("op,ref", CASES, ids=[f"{op.name}-{i}" for i, (op, _) in enumerate(CASES)])
def test_reverse_derivative_vs_finite_differences(op, ref, rng):
    if isinstance(op, P.OneHot):
        pytest.skip("integer ids have no derivative: see test_one_hot_ids_get_no_derivative")
    xs = _inputs(op, rng)
    dys = [rng.normal(size=t.shape) for t in op.target]
    r = cg.rdiff(_diagram(op))
    assert r.source_types == op.source + op.target
    assert r.target_types == op.source
    got = evaluate(r, *xs, *dys)
    want = vjp_fd(lambda *a: ref(*a), xs, dys)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert rel_err(g, w) < 1e-6 or (np.linalg.norm(w) == 0 and np.linalg.norm(g) == 0)


def test_heaviside_derivative_is_exactly_zero(rng):
    op = P.Heaviside(T)
    (g,) = evaluate(cg.rdiff(_diagram(op)), rng.normal(size=(3, 4)), rng.normal(size=(3, 4)))
    assert np.all(g == 0)


def test_one_hot_ids_get_no_derivative(rng):
    op = P.OneHot(IDS, cg.NdArrayType((3, 4, 5), F))
    r = cg.rdiff(_diagram(op))
    assert r.target_types == (IDS,)
    (g,) = cg.run(cg.schedule(r), [rng.integers(0, 5, size=(3, 4)), rng.normal(size=(3, 4, 5))])
    assert g.shape == (3, 4) and np.all(g == 0)
