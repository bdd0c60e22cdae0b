"""The GPU backend on the second vocabulary (Exp, Log, Sqrt, Div, ArgMaxMask, Permute, BatchMatMul,
CausalMask, causal Softmax, OneHot, Slice, Pad, Unfold, Fold), without a GPU:

* every kernel of each case's forward and reverse-derivative programs, compiled by nvcc for the
  device and for the host, computes on the host what the float interpreter computes (float32 and
  float64);
* the emulated CuPy path (the generated glue, kernels emulated through the same layouts) computes
  what the interpreter computes;
* training steps of attention models equal the NumPy backend's;
* the layout arithmetic (strides, reshapes without copies) agrees with NumPy's own views;
* the launch plan of an attention block: batched cuBLAS products and fused row kernels.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad import primitives as P
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu.host import check as hostcheck
from circuitgrad.backends.gpu.runtime import kernels
from circuitgrad.backends.gpu import plan as plan_mod          # the function
from circuitgrad.backends.gpu.plan import _view_stages, _viewable, nocopy_reshape, read_through
from circuitgrad.interpret import FLOAT_RULES
from circuitgrad.rewrite import simplify
from circuitgrad.schedule import Program, retype
from _tolerance import assert_programs_close, assert_within, gamma, kernel_instrs, local_error_bounds
from conftest import all_values

F = cg.float64


def T(*shape: int) -> cg.NdArrayType:
    return cg.NdArrayType(shape, F)


IDS = cg.NdArrayType((2, 4), cg.index(7))

#: (name, function, input types, domain): ``positive`` inputs in [0.5, 3], ``away`` (last input away
#: from 0), ``ties`` (small integers: repeated maxima)
CASES = [
    ("exp", ops.exp, [T(2, 3, 4)], None),
    ("log", ops.log, [T(2, 3, 4)], "positive"),
    ("sqrt", ops.sqrt, [T(3, 5)], "positive"),
    ("div", lambda a, b: a / b, [T(3, 5), T(3, 5)], "away"),
    ("div-broadcast", ops.div, [T(2, 3, 4), T(3, 1)], "away"),
    ("rsqrt", lambda x: ops.rsqrt(x * x + 1.0), [T(4, 6)], None),
    ("power", lambda x: ops.power(x, 3), [T(4, 6)], None),
    ("causal-mask", ops.causal_mask, [T(2, 3, 4, 5)], None),
    ("causal-mask-tall", lambda x: ops.causal_mask(x) * 3.0, [T(5, 3)], None),
    ("softmax", ops.softmax, [T(2, 3, 5)], None),
    ("softmax-causal", lambda x: ops.softmax(x, causal=True), [T(2, 3, 4, 4)], None),
    ("softmax-causal-tall", lambda x: ops.softmax(x, causal=True), [T(2, 5, 3)], None),
    ("softmax-causal-wide", lambda x: ops.softmax(x, causal=True), [T(3, 6)], None),
    ("logsumexp", ops.logsumexp, [T(2, 3, 5)], None),
    ("max", lambda x: ops.max(x, -1), [T(2, 3, 5)], None),
    ("max-axis1", lambda x: ops.max(x, 1), [T(2, 3, 5)], None),
    ("max-ties", lambda x: ops.max(x, -1), [T(4, 6)], "ties"),
    ("permute", lambda x: ops.permute(x, (2, 0, 1)) * 2.0, [T(2, 3, 4)], None),
    ("permute-out", lambda x: ops.permute(x, (1, 2, 0)), [T(2, 3, 4)], None),
    ("permute-reshape", lambda x, y: ops.reshape(ops.permute(x, (0, 2, 1, 3)), (2, 4, 6)) * y,
     [T(2, 3, 4, 2), T(2, 4, 6)], None),
    ("permute-reshape-permute",                  # a two-stage layout: the reshape cannot be a strided view
     lambda x, y: ops.permute(ops.reshape(ops.permute(x, (0, 2, 1, 3)), (2, 4, 6)), (2, 0, 1)) * y,
     [T(2, 3, 4, 2), T(6, 2, 4)], None),
    ("permute-softmax", lambda x: ops.softmax(ops.permute(x, (0, 2, 1))), [T(2, 3, 4)], None),
    ("broadcast-permute", lambda x, b: ops.permute(x + b, (1, 0, 2)), [T(2, 3, 4), T(3, 1)], None),
    ("batch-matmul", ops.matmul, [T(2, 3, 4, 5), T(2, 3, 5, 2)], None),
    ("batch-matmul-broadcast", ops.matmul, [T(2, 3, 4, 5), T(3, 5, 2)], None),
    ("batch-matmul-transposed", lambda a, b: ops.matmul(a, ops.transpose(b)), [T(2, 4, 5), T(2, 3, 5)], None),
    ("mean", lambda x: ops.mean(x, 1), [T(2, 3, 4)], None),
    ("layer-norm", ops.layer_norm, [T(2, 3, 8)], None),
    ("gelu", ops.gelu, [T(2, 3, 8)], None),
    ("attention", ops.attention, [T(2, 3, 4, 8)] * 3, None),
    ("attention-causal", lambda q, k, v: ops.attention(q, k, v, causal=True), [T(2, 3, 4, 8)] * 3, None),
    ("attention-spherical", lambda q, k, v: ops.attention(q, k, v, kind="spherical"), [T(2, 3, 4, 8)] * 3, None),
    ("attention-spherical-causal", lambda q, k, v: ops.attention(q, k, v, causal=True, kind="spherical"),
     [T(2, 3, 4, 8)] * 3, None),
    ("one-hot", lambda ids, e: ops.one_hot(ids, F) @ e, [IDS, T(7, 3)], None),
    ("slice", lambda x: x[:, 1:, ::2] * 2.0, [T(2, 3, 5)], None),
    ("slice-int", lambda x: x[1, ..., 1] + 1.0, [T(2, 3, 5)], None),
    ("pad", lambda x: ops.pad(x, [(0, 1), (2, 0), (1, 1)]) * 2.0, [T(2, 3, 4)], None),
    ("concat", lambda a, b: ops.concat([a, b * 2.0, a], 1), [T(2, 3, 4), T(2, 1, 4)], None),
    ("conv2d", lambda x, w: ops.conv2d(x, w, stride=1, padding=1), [T(2, 3, 5, 4), T(4, 3, 3, 3)], None),
    ("conv2d-strided", lambda x, w: ops.conv2d(x, w, stride=(2, 1), padding=(0, 2)),
     [T(2, 2, 7, 5), T(3, 2, 3, 2)], None),
    ("unfold-overlap", lambda x: ops.unfold(x, 3, stride=2, padding=1) * 2.0, [T(1, 2, 6, 6)], None),
    ("max-pool", lambda x: ops.max_pool2d(x, 2), [T(2, 3, 4, 6)], None),
    ("max-pool-overlap", lambda x: ops.max_pool2d(x, 3, 2), [T(2, 2, 7, 7)], None),
    ("avg-pool-padded", lambda x: ops.avg_pool2d(x, 3, 2, 1), [T(2, 2, 6, 5)], None),
]
IDS_OF = [c[0] for c in CASES]


def _programs(case, dtype) -> list[Program]:
    """The forward program and the reverse derivative's, in ``dtype``."""
    name, fn, types, _ = case
    d = cg.trace(fn, types, name=name)
    progs = [simplify(cg.schedule(d)), simplify(cg.schedule(cg.rdiff(d)))]
    return [retype(p, dtype) if dtype != F else p for p in progs]


def _inputs(prog: Program, domain: str | None, rng) -> list[np.ndarray]:
    out = []
    n = len(prog.inputs)
    for k, v in enumerate(prog.inputs):
        t = prog.types[v]
        if isinstance(t.dtype, cg.Index):
            out.append(rng.integers(0, t.dtype.n, size=t.shape))
            continue
        if domain == "positive":
            x = rng.uniform(0.5, 3.0, size=t.shape)
        elif domain == "away" and k == n - 1 - (n > 2):       # the divisor (before the cotangent, if any)
            x = rng.choice([-1.0, 1.0], size=t.shape) * rng.uniform(0.5, 2.0, size=t.shape)
        elif domain == "ties":
            x = rng.integers(-2, 3, size=t.shape).astype(np.float64)
        else:
            x = rng.normal(size=t.shape)
        out.append(x.astype(t.dtype.numpy_dtype()))
    return out


@pytest.fixture(scope="module", params=[cg.float32, F], ids=["f32", "f64"])
def host_kernels(request):
    """Every kernel of every case (forward and reverse), compiled by one nvcc call per dtype."""
    if hostcheck.nvcc() is None:
        pytest.skip("nvcc not installed")
    dtype = request.param
    built = {}
    everything = []
    for i, case in enumerate(CASES):
        for j, prog in enumerate(_programs(case, dtype)):
            p = plan_mod(prog)
            ks = kernels(p, prefix=f"c{i}_{j}")
            built[(case[0], j)] = (prog, p, ks)
            everything.extend(ks.values())
    host = hostcheck.compile_host(everything, "float" if dtype == cg.float32 else "double")
    return dtype, built, host


@pytest.mark.parametrize("case", CASES, ids=IDS_OF)
def test_kernels_match_the_interpreter_on_the_host(case, host_kernels, rng):
    dtype, built, host = host_kernels
    for j in range(2):
        prog, p, ks = built[(case[0], j)]
        env = all_values(prog, _inputs(prog, case[3], rng))
        for i, k in ks.items():
            ins = [np.ascontiguousarray(env[v], dtype=prog.types[v].dtype.numpy_dtype()) for v in k.inputs]
            outs = [np.full(prog.types[v].shape, np.nan, dtype=dtype.numpy_dtype()) for v in k.outputs]
            host(k.name, *ins, *outs)
            # the kernel's own instructions from exact inputs: C's libm and NumPy's, each within its bound
            bounds = local_error_bounds(prog, kernel_instrs(prog, p.steps[i]), env, k.outputs)
            assert_within(outs, [env[v] for v in k.outputs], bounds,
                          err_msg=f"{case[0]}: {k.name} ({' + '.join(k.ops)})")


def test_every_new_primitive_reaches_a_kernel_or_a_step():
    """The cases exercise each primitive of the second vocabulary in the generated code."""
    seen = Counter()
    for case in CASES:
        for prog in _programs(case, F):
            p = plan_mod(prog)
            for s in p.steps:
                for a in s.work:
                    seen[a.op.name] += 1
    for name in ("Exp", "Log", "Sqrt", "Div", "ArgMaxMask", "Permute", "BatchMatMul", "CausalMask", "Softmax",
                 "OneHot", "Slice", "Pad", "Unfold", "Fold"):
        assert seen[name], name


@pytest.mark.parametrize("dtype", [cg.float32, F], ids=["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=IDS_OF)
def test_emulated_gpu_path_matches_the_interpreter(case, dtype, rng):
    for prog in _programs(case, dtype):
        f = gpu.compile_function(prog, [f"a{k}" for k in range(len(prog.inputs))], "f", emulate=True)
        xs = _inputs(prog, case[3], rng)
        want = cg.run(prog, xs)
        got = f.run(*xs)
        assert len(got) == len(want)
        assert_programs_close(got, want, prog, xs, err_msg=case[0])     # cuBLAS' stand-in, fused groups


def test_softmax_causal_kernel_gives_exact_zeros_and_argmax_takes_the_first_maximum():
    if hostcheck.nvcc() is None:
        pytest.skip("nvcc not installed")
    x = np.array([[1.0, 5.0, 5.0, -1.0], [np.nan, 2.0, np.nan, 0.0], [3.0, 3.0, 3.0, 3.0],
                  [-np.inf, -2.0, -np.inf, -2.0]])
    progs = [cg.schedule(cg.trace(lambda a: ops.softmax(a, causal=True), [T(4, 4)], name="s")),
             cg.schedule(cg.trace(lambda a: ops.max(a, -1), [T(4, 4)], name="m"))]
    ks = [k for i, prog in enumerate(progs) for k in kernels(plan_mod(prog), prefix=f"z{i}").values()]
    host = hostcheck.compile_host(ks, "double")
    (row_s,) = [k for k in ks if k.ops == ["Softmax(causal)"]]
    (row_m,) = [k for k in ks if k.ops == ["ArgMaxMask"]]
    y = np.full((4, 4), np.nan)
    host(row_s.name, np.nan_to_num(x, nan=0.0, neginf=-50.0), y)
    assert np.all(y[np.triu_indices(4, 1)] == 0.0)                   # masked: exactly 0
    # s = Σ e_j (γ₃), y_j = e_j / s (u; the same exp(x_j − m) above and below cancels), NumPy's Σ y_j (γ₃)
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=gamma(7), atol=0)
    m = np.full((4, 4), np.nan)
    host(row_m.name, x, m)
    np.testing.assert_array_equal(m, np.eye(4)[[1, 0, 0, 1]])       # first maximum; a NaN counts as one
    np.testing.assert_array_equal(m, FLOAT_RULES[P.ArgMaxMask](P.ArgMaxMask(T(4, 4)), x)[0])


# ------------------------------------------------------------------ layouts
@pytest.mark.parametrize("seed", range(40))
def test_layouts_agree_with_numpy_views(seed):
    """Random chains of permutations, broadcasts and reshapes: the plan's stages address the elements
    NumPy's views hold, with NumPy's strides, and a reshape stays one strided view exactly when NumPy's
    reshape is a view."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 4, size=rng.integers(2, 5)))
    base = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    x, t, stages = base, cg.NdArrayType(shape, F), ()
    for _ in range(5):
        choice = rng.integers(0, 3)
        viewable = _viewable(t.shape, stages) and np.shares_memory(x, base)     # both sides: one view of base
        if choice == 0:
            axes = tuple(int(a) for a in rng.permutation(x.ndim))
            op, x = P.Permute(t, axes), np.transpose(x, axes)
        elif choice == 1 and x.ndim < 5:
            new = tuple(int(rng.integers(2, 4)) if d == 1 and rng.random() < 0.7 else d for d in x.shape)
            new = ((2,) if rng.random() < 0.3 else ()) + new
            op, x = P.Broadcast(t, t.with_shape(new)), np.broadcast_to(x, new)
        else:
            op = P.Reshape(t, _factor(x.size, rng))
            x = x.reshape(op.shape)
        stages = _view_stages(op, stages)
        t = op.target[0]
        np.testing.assert_array_equal(read_through(base, t.shape, stages), x)
        if viewable:
            assert _viewable(t.shape, stages) == np.shares_memory(x, base)
        if stages and _viewable(t.shape, stages) and np.shares_memory(x, base):
            ((_, strides),) = stages
            assert all(n == 1 or s * 8 == st for n, s, st in zip(x.shape, strides, x.strides))


def _factor(n: int, rng) -> tuple[int, ...]:
    out, k = [], n
    for p in (2, 3, 5, 7):
        while k % p == 0:
            out.append(p)
            k //= p
    if k > 1:
        out.append(k)
    rng.shuffle(out)
    merged = []
    for f in out:
        if merged and rng.random() < 0.4:
            merged[-1] *= f
        else:
            merged.append(f)
    return tuple(merged) or (1,)


def test_nocopy_reshape_is_numpys_rule():
    a = np.zeros((2, 3, 4))
    t = np.transpose(a, (1, 0, 2))                              # strides (4, 12, 1) in elements
    assert nocopy_reshape((3, 2, 4), (4, 12, 1), (3, 8)) is None           # t.reshape(3, 8) copies
    assert nocopy_reshape((3, 2, 4), (4, 12, 1), (3, 2, 2, 2)) == (4, 12, 2, 1)
    assert t.reshape(3, 2, 2, 2).strides == tuple(8 * s for s in (4, 12, 2, 1))
    assert nocopy_reshape((2, 3, 4), (12, 4, 1), (6, 4)) == (4, 1)
    assert nocopy_reshape((4, 1), (1, 0), (1, 4, 1)) == (4, 1, 1)


# ------------------------------------------------------------- plan shapes
def _block(B=2, H=3, S=4, dh=8):
    """The attention model of the brief: layer norm, heads, softmax and spherical causal attention, GELU,
    max, exp/log/sqrt/div, over [B, S, H·dh]."""
    D = H * dh

    def block(x):
        h = ops.layer_norm(x)

        def heads(t):
            return ops.permute(ops.reshape(t, (B, S, H, dh)), (0, 2, 1, 3))
        q = heads(h @ ops.param(cg.NdArrayType((D, D)), "Wq"))
        k = heads(h @ ops.param(cg.NdArrayType((D, D)), "Wk"))
        v = heads(h @ ops.param(cg.NdArrayType((D, D)), "Wv"))
        a = ops.attention(q, k, v, causal=True) + ops.attention(q, k, v, causal=True, kind="spherical")
        x = x + ops.reshape(ops.permute(a, (0, 2, 1, 3)), (B, S, D))
        x = x + ops.gelu(ops.layer_norm(x) @ ops.param(cg.NdArrayType((D, D)), "W1"))
        z = ops.log(ops.exp(x * 0.1) + 1.0)
        w = z / ops.sqrt(z * z + 1.0)
        return ops.mean(w, -1) + ops.max(x, -1)
    return cg.trace(block, [cg.NdArrayType((B, S, D))], name="block")


MODELS = [
    ("attention-block", _block, nn.mse, lambda: nn.momentum(0.05), None),
    ("gpt-softmax", lambda: nn.gpt(2, 4, 11, d=12, heads=3, layers=1), nn.softmax_cross_entropy,
     lambda: nn.adamw(1e-2), 11),
    ("gpt-spherical", lambda: nn.gpt(2, 4, 11, d=12, heads=3, layers=1, attention="spherical"),
     nn.softmax_cross_entropy, lambda: nn.adam(1e-2), 11),
    ("cnn", lambda: cg.sequential([nn.conv2d(3, 2, 6, 6, 4, kernel=3, padding=1), nn.relu(3, 4, 6, 6),
                                   nn.max_pool2d(3, 4, 6, 6, 2), nn.conv2d(3, 4, 3, 3, 5, kernel=2, stride=1),
                                   nn.avg_pool2d(3, 5, 2, 2, 2), nn.flatten(3, 5, 1, 1), nn.dense(3, 5, 4)]),
     nn.mse, lambda: nn.clip_grad_norm(nn.adamw(1e-2), 0.5), None),
]


@pytest.mark.parametrize("name,make,loss,opt,vocab", MODELS, ids=[m[0] for m in MODELS])
def test_training_steps_through_the_gpu_code_path_equal_numpy(name, make, loss, opt, vocab, rng):
    ref = cg.compile_model(make(), loss=loss, optimizer=opt(), dtype=F)
    emu = cg.compile_model(make(), loss=loss, optimizer=opt(), dtype=F, backend="cupy-emulated")
    p = q = ref.init_params(seed=3)
    shape_x, shape_y = ref.x_type.shape, ref.y_type.shape
    for _ in range(3):
        if vocab:
            x, y = rng.integers(0, vocab, size=shape_x), rng.integers(0, vocab, size=shape_x)
        else:
            x, y = rng.normal(size=shape_x), rng.normal(size=shape_y)
        p, q = ref.step(p, x, y), emu.step(q, x, y)
        for k in p:
            # atol: Adam normalises gradients that are exactly 0 (a key bias under softmax) to rounding noise
            np.testing.assert_allclose(q[k], p[k], rtol=1e-9, atol=1e-9, err_msg=k)
    np.testing.assert_allclose(emu.loss(q, x, y), ref.loss(p, x, y), rtol=1e-10)
    np.testing.assert_allclose(emu.predict(q, x), ref.predict(p, x), rtol=1e-10, atol=1e-12)


def _kinds(f) -> Counter:
    return Counter(s.kind for s in gpu.plan(f.program).steps if s.launches)


def test_attention_maps_to_one_streaming_kernel_or_batched_cublas_and_row_kernels():
    """Causal softmax attention over given q, k, v: one streaming kernel (``gpu.attention``) where a row fits the
    registers (dh ≤ 64); else two batched products, one fused scale and one causal row kernel, kᵀ no copy (a
    batch with its last two axes swapped: cuBLAS reads it transposed)."""
    for dh, kinds, launches in ((8, {"attention": 1}, 1), (80, {"matmul": 2, "fused": 1, "rowwise": 1}, 4)):
        Tq = cg.NdArrayType((2, 3, 4, dh), cg.float32)
        d = cg.trace(lambda q, k, v: ops.attention(q, k, v, causal=True), [Tq] * 3, name="att")
        f = gpu.compile_function(cg.schedule(d), ["q", "k", "v"], "att", emulate=True)
        assert Counter(s.kind for s in f.plan.steps if s.launches) == Counter(kinds), dh
        assert f.launches == launches
        assert ("Softmax(causal)" in f.python) == (dh > 64)


def test_launches_of_attention_blocks():
    """Per-step launch counts of the standard blocks (see docs/GPU.md); they only go down."""
    att = cg.compile_model(nn.attention(2, 4, 24, heads=3, causal=True), loss=nn.mse, optimizer=nn.sgd(0.1),
                           backend="cupy-emulated")
    assert att.fn("predict").launches <= 14
    assert att.launches_per_step <= 40
    blk = cg.compile_model(nn.transformer_block(2, 4, 24, heads=3), loss=nn.mse, optimizer=nn.adamw(1e-3),
                           backend="cupy-emulated")
    kinds = _kinds(blk.fn("step"))
    assert kinds["matmul"] == 24                    # 8 forward (2 batched), 16 backward (4 batched)
    assert kinds["rowwise"] == 1                    # the causal softmax (its backward is fused + reduce)
    assert blk.launches_per_step <= 75


def test_small_groups_are_recomputed_where_they_are_read():
    """Layer norm: the row statistics' scale and 1/sqrt(var + eps) cost no launch of their own, nor do the squares
    ``(x − mean)²``, made where they are summed, nor the normalisation, the epilogue of the variance's sum."""
    d = cg.trace(ops.layer_norm, [cg.NdArrayType((8, 16), cg.float32)], name="ln")
    f = gpu.compile_function(cg.schedule(d), ["x"], "ln", emulate=True)
    assert _kinds(f) == Counter({"reduce": 1})
    assert [[m.kind for m in s.chain] for s in f.plan.steps if s.kind == "reduce"] == [["reduce", "reduce", "fused"]]
    assert "const long long i = o" in f.cuda_source          # the block that recomputes at the read's index
    x = np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32)
    (got,) = f.run(x)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)   # the same formula, in NumPy
    assert_programs_close([got], [want], cg.schedule(d), [x])


def test_a_layer_norms_normalised_input_is_recomputed_in_the_backward_not_stored(rng):
    """The forward kernel that normalises (and recomputes 1/sqrt(var + eps) itself) writes only the layer's
    output; the backward kernels that read ``(x - mean)·r`` (the gain's gradient sums it, times the output's
    gradient) recompute it, ``r`` in a block of its own. The step still equals NumPy's, and every parameter and
    moment is still updated in place."""
    model = nn.dense(8, 16, 32) >> nn.layer_norm(8, 32) >> nn.dense(8, 32, 4)
    ref = cg.compile_model(model, loss=nn.mse, optimizer=nn.adamw(1e-2), dtype=F)
    step = cg.compile_model(model, loss=nn.mse, optimizer=nn.adamw(1e-2), dtype=F, backend="cupy-emulated",
                            donate=True)
    f = step.fn("step").compiled
    members = [m for s in f.plan.steps for m in s.chain]          # a sum kernel's stages and epilogue too
    fused = [m for m in members if m.kind == "fused"]
    written = {r for s in fused for r in s.outputs}
    launched = {id(a) for s in fused for a in s.instrs}
    hosts = fused + [m for m in members if m.kind == "reduce"]
    again = [(a, s) for s in hosts for a in s.remat if id(a) in launched]
    normalised = [a for a, s in again if isinstance(a.op, P.Mul) and f.program.types[a.results[0]].shape == (8, 32)
                  and any(isinstance(b.op, P.Rsqrt) for b in s.remat)]
    assert normalised and not any(a.results[0] in written for a in normalised)
    assert all(s.outputs for s in fused)                 # a kernel whose results are all recomputed is not launched
    p = ref.init_params(seed=0)
    x, y = rng.normal(size=(8, 16)), rng.normal(size=(8, 4))
    want = ref.step(p, x, y)
    mine = {k: np.array(v) for k, v in p.items()}
    got = step.step(mine, x, y)
    assert all(got[k] is mine[k] for k in step.arg_names["step"] if k in got and k in mine and k != "adam_t")
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_horizontal_fusion_updates_same_shaped_parameters_in_one_kernel():
    m = nn.mlp(4, [6, 6, 6, 6])                                    # three 6x6 weights, three biases of 6
    step = cg.compile_model(m, loss=nn.mse, optimizer=nn.momentum(0.1), backend="cupy-emulated")
    fused = [s for s in gpu.plan(step.fn("step").program).steps if s.kind == "fused"]
    assert max(len(s.outputs) for s in fused) >= 4                 # two updates (parameter and velocity) each


def test_a_parameter_read_transposed_is_not_updated_in_place(rng):
    """Donation writes element i of a parameter while the kernel reads it at other indices: refused."""
    W = cg.NdArrayType((4, 4), F)
    prog = cg.schedule(cg.trace(lambda w: w + ops.transpose(w), [W], name="s"))
    f = gpu.compile_function(prog, ["w"], "step", emulate=True, donate_pairs={prog.outputs[0]: prog.inputs[0]})
    assert "# donated buffer" not in f.python
    w = rng.normal(size=(4, 4))
    (got,) = f.run(w.copy())
    np.testing.assert_allclose(got, w + w.T, rtol=1e-15)
    prog = cg.schedule(cg.trace(lambda w: w * 0.5 + 1.0, [W], name="s"))
    f = gpu.compile_function(prog, ["w"], "step", emulate=True, donate_pairs={prog.outputs[0]: prog.inputs[0]})
    assert "# donated buffer" in f.python


def test_a_permutation_of_a_copying_reshape_is_read_in_two_stages(rng):
    (case,) = [c for c in CASES if c[0] == "permute-reshape-permute"]
    prog = _programs(case, F)[0]
    f = gpu.compile_function(prog, ["x", "y"], "f", emulate=True)
    assert f.launches == 1 and "_0 = " in f.cuda_source          # a temporary: the first stage's offset
    x, y = rng.normal(size=(2, 3, 4, 2)), rng.normal(size=(6, 2, 4))
    (got,) = f.run(x, y)
    np.testing.assert_array_equal(got, np.transpose(np.transpose(x, (0, 2, 1, 3)).reshape(2, 4, 6), (2, 0, 1)) * y)


def test_views_read_by_kernels_are_index_arithmetic_not_copies():
    Tx = cg.NdArrayType((2, 3, 4), F)
    d = cg.trace(lambda x, y: ops.permute(x, (2, 0, 1)) * y, [Tx, cg.NdArrayType((4, 2, 3), F)], name="p")
    f = gpu.compile_function(cg.schedule(d), ["x", "y"], "p", emulate=True)
    assert f.launches == 1 and "transpose" not in f.python
    # element (a, b, c) of the permuted [4, 2, 3] is x[b, c, a]: offset 12·b + 4·c + a
    assert "in0[(i % 3LL) * 4LL + ((i / 3LL) % 2LL) * 12LL + ((i / 6LL) % 4LL)]" in f.cuda_source


def test_kernel_arguments_stay_within_cudas_limit():
    """Horizontal fusion of many same-sized updates stops at POINTERS pointer arguments (4 KB of arguments)."""
    from circuitgrad.backends.gpu.plan import POINTERS
    step = cg.compile_model(nn.mlp(2, [4] * 40), loss=nn.mse, optimizer=nn.adam(1e-3), backend="cupy-emulated")
    p = gpu.plan(step.fn("step").program)
    counts = [len(k.inputs) + len(k.outputs) for k in kernels(p).values()]
    assert max(counts) <= POINTERS and max(counts) > 100


def test_whole_gpt_step_kernel_by_kernel_on_the_host(rng):
    """Every kernel of a 2-layer GPT training step (AdamW), float32, on the host against the interpreter."""
    if hostcheck.nvcc() is None:
        pytest.skip("nvcc not installed")
    step = cg.compile_model(nn.gpt(2, 4, 11, d=12, heads=3, layers=2), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(1e-2), dtype=cg.float32)
    prog = step.fn("step").program
    p = plan_mod(prog)
    ks = kernels(p, prefix="gpt")
    host = hostcheck.compile_host(list(ks.values()), "float")
    xs = []
    for v in prog.inputs:
        t = prog.types[v]
        if isinstance(t.dtype, cg.Index):
            xs.append(rng.integers(0, t.dtype.n, size=t.shape))
        else:
            xs.append(np.abs(rng.normal(size=t.shape)).astype(np.float32) + 0.1)   # Adam's v and t positive
    env = all_values(prog, xs)
    for i, k in ks.items():
        ins = [np.ascontiguousarray(env[v], dtype=prog.types[v].dtype.numpy_dtype()) for v in k.inputs]
        outs = [np.full(prog.types[v].shape, np.nan, dtype=np.float32) for v in k.outputs]
        host(k.name, *ins, *outs)
        bounds = local_error_bounds(prog, kernel_instrs(prog, p.steps[i]), env, k.outputs)
        assert_within(outs, [env[v] for v in k.outputs], bounds, err_msg=f"{k.name} ({' + '.join(k.ops)})")


def _random_program(seed: int):
    """A random mix of the vocabulary over [2, 3, 4]-sized tensors: views, reductions, row operations, products."""
    rng = np.random.default_rng(seed)
    shapes = [(2, 3, 4), (2, 3, 4), (3, 4)]

    def fn(*xs):
        pool = list(xs)
        for _ in range(int(rng.integers(4, 10))):
            x = pool[int(rng.integers(len(pool)))]
            same = [y for y in pool if y.shape == x.shape and y is not x]
            y = same[int(rng.integers(len(same)))] if same else x
            k = int(rng.integers(12))
            if k == 0:
                z = ops.exp(x * 0.1) + ops.log(y * y + 1.0)
            elif k == 1:
                z = ops.tanh(x) / ops.sqrt(y * y + 1.0)
            elif k == 2 and x.type.ndim > 1:
                z = ops.permute(x, tuple(int(a) for a in rng.permutation(x.type.ndim)))
            elif k == 3:
                z = ops.reshape(x, _factor(x.type.size, rng))
            elif k == 4 and x.type.ndim > 1:
                axis = int(rng.integers(x.type.ndim))
                s = ops.sum(x, axis)
                z = x * ops.broadcast_to(ops.reshape(s, x.shape[:axis] + (1,) + x.shape[axis + 1:]), x.shape)
            elif k == 5 and x.type.ndim > 1:
                z = ops.softmax(x, causal=bool(rng.integers(2))) * y
            elif k == 6 and x.type.ndim > 1:
                z = ops.causal_mask(x) + y
            elif k == 7 and x.type.ndim > 1:
                z = ops.max(x, int(rng.integers(x.type.ndim)))
            elif k == 8 and x.type.ndim > 1:
                z = ops.matmul(x, ops.transpose(y)) * 0.5
            elif k == 9 and x.type.ndim > 1:
                z = ops.layer_norm(x) + ops.gelu(y)
            elif k == 10:
                z = ops.broadcast_to(ops.mean(x, -1), (2,) + x.shape[:-1]) if x.type.ndim < 4 else x * 2.0
            else:
                z = x * y + 1.0
            pool.append(z)
        return pool[-1], pool[-2] * 1.0
    return cg.trace(fn, [T(*s) for s in shapes], name=f"random{seed}")


@pytest.mark.parametrize("seed", range(30))
def test_random_programs_through_the_emulated_path(seed, rng):
    d = _random_program(seed)
    for prog in (simplify(cg.schedule(d)), simplify(cg.schedule(cg.rdiff(d)))):
        f = gpu.compile_function(prog, [f"a{k}" for k in range(len(prog.inputs))], "f", emulate=True)
        xs = [rng.normal(size=prog.types[v].shape) for v in prog.inputs]
        assert_programs_close(f.run(*xs), cg.run(prog, xs), prog, xs)
