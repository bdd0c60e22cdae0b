"""The second vocabulary (attention, layer norm, GELU, max, …): forward and reverse derivative against
NumPy references, central finite differences (float64, relative error < 1e-6) and PyTorch autograd."""
from __future__ import annotations

import numpy as np
import pytest
import _peers
from _tolerance import assert_matmul_close, assert_programs_close
from conftest import evaluate, rel_err, vjp_fd

import circuitgrad as cg
from circuitgrad import ops
from circuitgrad.primitives import TypeMismatch

F = cg.float64
B, H, S, DH = 2, 2, 5, 4


def T(*shape):
    return cg.NdArrayType(shape, F)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attention(q, k, v, causal=False, kind="softmax"):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    keep = np.tri(s.shape[-2], s.shape[-1], dtype=bool) if causal else np.ones(s.shape[-2:], dtype=bool)
    if kind == "softmax":
        a = _softmax(np.where(keep, s, -np.inf))
    else:
        s = np.where(keep, s, 0.0)
        a = s / np.sqrt((s * s).sum(-1, keepdims=True) + ops.ATTENTION_EPS)
    return a @ v


def _layer_norm(x, eps=1e-5):
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps)


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _windows(x, k, stride, padding=(0, 0)):
    """``[B, C, Ho, Wo, kh, kw]`` by NumPy's sliding windows (independent of Unfold)."""
    x = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    w = np.lib.stride_tricks.sliding_window_view(x, k, axis=(2, 3))
    return w[:, :, ::stride[0], ::stride[1]]


def _conv(x, w, stride=(1, 1), padding=(0, 0)):
    return np.einsum("bchwij,ocij->bohw", _windows(x, w.shape[2:], stride, padding), w)


QKV = [T(B, H, S, DH)] * 3
#: (name, traced function, input types, float64 reference)
CASES = [
    ("attention-softmax", lambda q, k, v: ops.attention(q, k, v), QKV, _attention),
    ("attention-softmax-causal", lambda q, k, v: ops.attention(q, k, v, causal=True), QKV,
     lambda q, k, v: _attention(q, k, v, causal=True)),
    ("attention-spherical", lambda q, k, v: ops.attention(q, k, v, kind="spherical"), QKV,
     lambda q, k, v: _attention(q, k, v, kind="spherical")),
    ("attention-spherical-causal", lambda q, k, v: ops.attention(q, k, v, causal=True, kind="spherical"), QKV,
     lambda q, k, v: _attention(q, k, v, causal=True, kind="spherical")),
    ("layer_norm", lambda x: ops.layer_norm(x), [T(3, 6)], _layer_norm),
    ("gelu", ops.gelu, [T(3, 6)], _gelu),
    ("max-last", lambda x: ops.max(x), [T(3, 6)], lambda x: x.max(-1)),
    ("max-axis0", lambda x: ops.max(x, 0), [T(3, 6)], lambda x: x.max(0)),
    ("matmul-weight", lambda x, w: x @ w, [T(2, 3, 4), T(4, 5)], lambda x, w: x @ w),
    ("matmul-broadcast", lambda a, b: a @ b, [T(2, 3, 4), T(1, 4, 5)], lambda a, b: a @ b),
    ("transpose-3d", lambda x: x.T, [T(2, 3, 4)], lambda x: np.swapaxes(x, -1, -2)),
    ("rsqrt", lambda x: ops.rsqrt(x * x + 1.0), [T(3, 4)], lambda x: 1 / np.sqrt(x * x + 1)),
    ("log-exp", lambda x: ops.log(ops.exp(x) + 1.0), [T(3, 4)], lambda x: np.log(np.exp(x) + 1)),
    ("conv2d", lambda x, w: ops.conv2d(x, w), [T(2, 3, 6, 5), T(4, 3, 3, 3)], _conv),
    ("conv2d-stride-padding", lambda x, w: ops.conv2d(x, w, stride=(2, 1), padding=(1, 2)),
     [T(2, 2, 7, 5), T(3, 2, 3, 2)], lambda x, w: _conv(x, w, (2, 1), (1, 2))),
    ("max_pool2d", lambda x: ops.max_pool2d(x, 2), [T(2, 3, 4, 6)],
     lambda x: _windows(x, (2, 2), (2, 2)).max((-1, -2))),
    ("max_pool2d-overlap", lambda x: ops.max_pool2d(x, 3, stride=2), [T(2, 2, 7, 6)],
     lambda x: _windows(x, (3, 3), (2, 2)).max((-1, -2))),
    ("avg_pool2d", lambda x: ops.avg_pool2d(x, 2), [T(2, 3, 4, 6)],
     lambda x: _windows(x, (2, 2), (2, 2)).mean((-1, -2))),
    ("avg_pool2d-padded", lambda x: ops.avg_pool2d(x, 3, stride=2, padding=1), [T(2, 2, 6, 5)],
     lambda x: _windows(x, (3, 3), (2, 2), (1, 1)).mean((-1, -2))),
    ("slice", lambda x: x[1:, ::2, -1] * 1.0, [T(3, 5, 4)], lambda x: x[1:, ::2, -1]),
    ("concat", lambda a, b: ops.concat([a, b, a], axis=1), [T(2, 3, 4), T(2, 1, 4)],
     lambda a, b: np.concatenate([a, b, a], axis=1)),
    ("pad", lambda x: ops.pad(x, [(1, 0), (0, 2)]), [T(3, 4)], lambda x: np.pad(x, [(1, 0), (0, 2)])),
]


def _diagram(fn, types):
    return cg.trace(fn, types)


@pytest.mark.parametrize("fn,types,ref", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_forward_against_numpy(fn, types, ref, rng):
    xs = [rng.normal(size=t.shape) for t in types]
    (got,) = evaluate(_diagram(fn, types), *xs)
    # the NumPy reference computes the same formula (its own order of sums, x/n for x·(1/n)): within the bound
    assert_programs_close([got], [ref(*xs)], cg.schedule(_diagram(fn, types)), xs)


@pytest.mark.parametrize("fn,types,ref", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_reverse_derivative_against_finite_differences(fn, types, ref, rng):
    xs = [rng.normal(size=t.shape) for t in types]
    d = _diagram(fn, types)
    dy = rng.normal(size=d.target_types[0].shape)
    got = evaluate(cg.rdiff(d), *xs, dy)
    want = vjp_fd(lambda *a: (ref(*a),), xs, [dy])
    for g, w in zip(got, want):
        assert rel_err(g, w) < 1e-6


def test_building_errors_name_the_operation_and_both_types():
    with pytest.raises(TypeMismatch, match=r"^in <lambda>: attention: q, k, v must be \[\.\.\., S, dh\], \[\.\.\., T, dh\], "
                                           r"\[\.\.\., T, dv\], got \(float64\[2, 5, 4\], float64\[2, 5, 3\], "
                                           r"float64\[2, 5, 4\]\)$"):
        cg.trace(lambda q, k, v: ops.attention(q, k, v), [T(2, 5, 4), T(2, 5, 3), T(2, 5, 4)])
    with pytest.raises(TypeMismatch, match=r"^in <lambda>: MatMul: inner dimensions differ \(4 != 3\) in "):
        cg.trace(lambda x, w: x @ w, [T(2, 3, 4), T(3, 5)])
    with pytest.raises(TypeMismatch, match=r"^in <lambda>: BatchMatMul: leading axes do not broadcast in "):
        cg.trace(lambda a, b: a @ b, [T(2, 3, 4), T(3, 4, 5)])
    with pytest.raises(ValueError, match=r"^attention: kind must be 'softmax' or 'spherical', got 'linear'$"):
        cg.trace(lambda q, k, v: ops.attention(q, k, v, kind="linear"), QKV)


CONV_ERRORS = [
    ("channels", lambda x, w: ops.conv2d(x, w), [T(2, 3, 6, 6), T(4, 2, 3, 3)],
     "in <lambda>: conv2d: input [B, C, H, W] and weights [O, C, kh, kw] must agree on C and dtype, got "
     "(float64[2, 3, 6, 6], float64[4, 2, 3, 3])"),
    ("image-rank", lambda x, w: ops.conv2d(x, w), [T(3, 6, 6), T(4, 3, 3, 3)],
     "in <lambda>: conv2d: input [B, C, H, W] and weights [O, C, kh, kw] must agree on C and dtype, got "
     "(float64[3, 6, 6], float64[4, 3, 3, 3])"),
    ("kernel-too-big", lambda x, w: ops.conv2d(x, w), [T(1, 1, 2, 2), T(1, 1, 3, 3)],
     "in <lambda>: conv2d: Unfold: kernel [3, 3] with padding [0, 0] does not fit float64[1, 1, 2, 2] "
     "(weights float64[1, 1, 3, 3])"),
    ("stride-zero", lambda x, w: ops.conv2d(x, w, stride=0), [T(1, 1, 4, 4), T(1, 1, 3, 3)],
     "in <lambda>: conv2d: Unfold: stride must be an int ≥ 1 or a pair of them, got 0 (weights float64[1, 1, 3, 3])"),
    ("pool-rank", lambda x: ops.max_pool2d(x, 2), [T(4, 4)],
     "in <lambda>: max_pool2d: input must be a traced [B, C, H, W] wire, got float64[4, 4]"),
    ("pool-padding", lambda x: ops.max_pool2d(x, 3, 2, padding=1), [T(1, 1, 4, 4)],
     "in <lambda>: max_pool2d: padding must be 0, got 1 (PyTorch pads with -inf, which fixed point cannot hold; "
     "pad with ops.pad where zeros are meant)"),
    ("concat", lambda a, b: ops.concat([a, b], 1), [T(2, 3), T(3, 3)],
     "in <lambda>: concat: operands must agree on every axis but 1, got (float64[2, 3], float64[3, 3])"),
]


@pytest.mark.parametrize("fn,types,message", [c[1:] for c in CONV_ERRORS], ids=[c[0] for c in CONV_ERRORS])
def test_convolution_errors_name_the_operation_and_both_types(fn, types, message):
    with pytest.raises(TypeMismatch) as e:
        cg.trace(fn, types)
    assert str(e.value) == message


# ------------------------------------------------------------------ PyTorch
def _torch_cases(torch):
    F_ = torch.nn.functional
    return {
        "attention-softmax": lambda q, k, v: F_.scaled_dot_product_attention(q, k, v),
        "attention-softmax-causal": lambda q, k, v: F_.scaled_dot_product_attention(q, k, v, is_causal=True),
        "layer_norm": lambda x: F_.layer_norm(x, (x.shape[-1],), eps=1e-5),
        "gelu": lambda x: F_.gelu(x, approximate="tanh"),
        "max-last": lambda x: torch.max(x, dim=-1).values,
        "max-axis0": lambda x: torch.max(x, dim=0).values,
        "conv2d": lambda x, w: F_.conv2d(x, w),
        "conv2d-stride-padding": lambda x, w: F_.conv2d(x, w, stride=(2, 1), padding=(1, 2)),
        "max_pool2d": lambda x: F_.max_pool2d(x, 2),
        "max_pool2d-overlap": lambda x: F_.max_pool2d(x, 3, stride=2),
        "avg_pool2d": lambda x: F_.avg_pool2d(x, 2),
        "avg_pool2d-padded": lambda x: F_.avg_pool2d(x, 3, stride=2, padding=1),
        "concat": lambda a, b: torch.cat([a, b, a], dim=1),
    }


TORCH_CASES = ["attention-softmax", "attention-softmax-causal", "avg_pool2d", "avg_pool2d-padded", "concat",
               "conv2d", "conv2d-stride-padding", "gelu", "layer_norm", "max-axis0", "max-last", "max_pool2d",
               "max_pool2d-overlap"]


@pytest.mark.torch
@pytest.mark.parametrize("name", TORCH_CASES)
def test_against_pytorch_autograd(name, rng):
    torch = _peers.torch()
    assert sorted(_torch_cases(torch)) == TORCH_CASES
    _, fn, types, _ = next(c for c in CASES if c[0] == name)
    xs = [rng.normal(size=t.shape) for t in types]
    d = _diagram(fn, types)
    (y,) = evaluate(d, *xs)
    dy = rng.normal(size=y.shape)
    grads = evaluate(cg.rdiff(d), *xs, dy)
    txs = [torch.tensor(x, requires_grad=True) for x in xs]
    ty = _torch_cases(torch)[name](*txs)
    ty.backward(torch.tensor(dy))
    # torch's kernels evaluate the same expressions: each side within our program's error bound
    assert_programs_close([y], [ty.detach().numpy()], cg.schedule(d), xs)
    assert_programs_close(grads, [t.grad.numpy() for t in txs], cg.schedule(cg.rdiff(d)), xs + [dy])


@pytest.mark.parametrize("fn,types,ref", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_numpy_backend_equals_the_interpreter(fn, types, ref, rng):
    """The generated NumPy code (in-place sums of pads, copied slices, im2col) computes what the interpreter does,
    forward and reverse, and leaves its inputs untouched."""
    from circuitgrad.codegen import compile_program
    d = _diagram(fn, types)
    for prog in (cg.schedule(d), cg.schedule(cg.rdiff(d))):
        xs = [rng.normal(size=prog.types[v].shape) for v in prog.inputs]
        kept = [x.copy() for x in xs]
        f, _ = compile_program(prog)
        got = f(*xs)
        assert_programs_close(got, cg.run(prog, kept), prog, kept)     # GEMMs, in-place sums: another order
        assert all(np.array_equal(x, k) for x, k in zip(xs, kept))


def test_sums_of_pads_are_added_in_place():
    """A concatenation's gradient and overlapping pooling windows allocate one array, not one per pad; the
    disjoint blocks of a concatenation are stored, overlapping ones added."""
    from circuitgrad.codegen import generate
    d = cg.trace(lambda a, b: ops.concat([a, b, a], axis=1) * 2.0, [T(2, 3, 4), T(2, 1, 4)])
    src, _ = generate(cg.schedule(d))
    assert src.count("set_into(") == 2 and src.count("add_into(") == 0 and src.count("pad(") == 1
    d = cg.trace(lambda a: ops.concat([a[:, 0:3], a[:, 1:4]], axis=1), [T(2, 4)])      # overlapping slices
    src, _ = generate(cg.schedule(cg.rdiff(d)))
    assert src.count("set_into(") == 0 and src.count("add_into(") == 1 and src.count("pad(") == 1


def test_adding_a_constant_zero_is_free(rng):
    """``x + 0`` (the zero gradients of a pooling's unused windows) reuses ``x`` when it dies there; a
    negation added once becomes one subtraction."""
    from circuitgrad.codegen import compile_program
    d = cg.trace(lambda x, y: (x * 2.0 + ops.constant(x.type, 0.0)) + -y, [T(2, 3), T(2, 3)])
    f, src = compile_program(cg.schedule(d))
    body = [ln for ln in src.splitlines() if ln.startswith("    v") or ln.startswith("    return")]
    assert [ln.split("#")[1].split(" ->")[0].strip() for ln in body if "#" in ln] == ["Scale", "Add", "Add"]
    assert body[1].split("#")[0].split() == ["v5", "=", "v2"]                  # x + 0 is x
    assert body[2].split("#")[0].split() == ["v6", "=", "np.subtract(v5,", "v1,", "out=v5)"]
    x, y = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    np.testing.assert_array_equal(f(x, y)[0], x * 2.0 - y)


def test_embedding_lookup_is_a_gather(rng):
    """``OneHot(ids) @ E`` is generated as a row gather of ``E`` (no GEMM) and computes what the interpreter
    does, forward and reverse (whose one-hot transpose stays a GEMM)."""
    from circuitgrad.codegen import compile_program
    from circuitgrad.types import NdArrayType, float64, index
    d = cg.trace(lambda ids, E: ops.one_hot(ids, float64) @ E, [NdArrayType((3, 5), index(7)), T(7, 4)])
    for prog, gathers in ((cg.schedule(d), 1), (cg.schedule(cg.rdiff(d)), 0)):
        f, src = compile_program(prog)
        assert src.count("np.take(") == gathers and src.count("matmul(") == 1 - gathers
        xs = [rng.integers(0, 7, size=prog.types[v].shape) if prog.types[v].dtype == index(7)
              else rng.normal(size=prog.types[v].shape) for v in prog.inputs]
        got, want = f(*xs), cg.run(prog, xs)
        if gathers:     # (y,): a one-hot row has one term 1·E[id] (exact) and exact zeros: gather ≡ GEMM, bit for bit
            np.testing.assert_array_equal(got[0], want[0])
        else:           # (d ids, dE): no derivative for ids (integers); dE = OneHotᵀ·dY sums up to 15 rows of
            ids, _, dy = xs     # dY in whatever order each GEMM kernel picks: 2·γ₁₅·Σ|terms| apart at most
            np.testing.assert_array_equal(got[0], want[0])
            assert_matmul_close(got[1], want[1], np.eye(7)[ids].reshape(15, 7).T, dy.reshape(15, 4))
