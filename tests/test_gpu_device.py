"""On a GPU (marked ``gpu``; skipped without CuPy and a CUDA device): every primitive and layer
agrees with the NumPy backend within float32 tolerance, and digits trains to the same accuracy;
the second vocabulary's cases (tests/test_gpu_kernels.py) agree with the float interpreter, and
attention models (a block with both attentions, GPTs) step as the NumPy backend does."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import train_mlp

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import gpu

ok, why = gpu.available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no GPU: {why}")]

LAYERS = [
    ("relu", lambda B: nn.mlp(B, [6, 16, 4])),
    ("sigmoid", lambda B: nn.mlp(B, [6, 16, 4], activation=nn.sigmoid)),
    ("tanh", lambda B: nn.mlp(B, [6, 16, 4], activation=nn.tanh)),
    ("softmax", lambda B: nn.mlp(B, [6, 16, 4]) >> nn.softmax(B, 4)),
]


@pytest.mark.parametrize("name,make", LAYERS, ids=[n for n, _ in LAYERS])
@pytest.mark.parametrize("key", ["predict", "loss", "gradients", "step"])
def test_gpu_agrees_with_numpy(name, make, key, rng):
    B = 16
    ref = cg.compile_model(make(B), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.1))
    dev = cg.compile_model(make(B), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.1), backend="cupy")
    p = ref.init_params(seed=0)
    x = rng.normal(size=(B, 6)).astype(np.float32)
    y = np.eye(4, dtype=np.float32)[rng.integers(0, 4, size=B)]
    args = [p[k] for k in ref.param_names] + ([p[k] for k in ref.state_names] if key == "step" else [])
    args += [x] + ([y] if key != "predict" else [])
    want = ref.fn(key).run(*args)
    got = dev.fn(key).run(*[dev.xp.asarray(a) for a in args])
    for g, w in zip(got, want):
        np.testing.assert_allclose(dev.to_host(g), w, rtol=2e-5, atol=2e-6)


def test_digits_trains_to_the_numpy_accuracy():
    accs = [train_mlp("digits", 32, [64, 64, 10], 20, backend)[1] for backend in ("numpy", "cupy")]
    assert abs(accs[0] - accs[1]) <= 0.01 and accs[1] >= 0.95


# ------------------------------------------- the second vocabulary on the device
from test_gpu_kernels import CASES, _block, _inputs, _programs  # noqa: E402


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_second_vocabulary_agrees_with_the_interpreter(case, rng):
    """Exp, Log, Sqrt, Div, ArgMaxMask, Permute, BatchMatMul, CausalMask, causal Softmax, OneHot, Slice, Pad,
    Unfold, Fold (forward and reverse-derivative programs), float32 on the device against the float interpreter."""
    import cupy
    for prog in _programs(case, cg.float32):
        f = gpu.compile_function(prog, [f"a{k}" for k in range(len(prog.inputs))], "f")
        xs = _inputs(prog, case[3], rng)
        want = cg.run(prog, xs)
        got = f.run(*[cupy.asarray(x) for x in xs])
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(cupy.asnumpy(g), w, rtol=1e-4, atol=1e-5, err_msg=case[0])


ATTENTION_MODELS = [
    ("attention-block", _block, nn.mse, None),
    ("gpt-softmax", lambda: nn.gpt(4, 8, 13, d=24, heads=3, layers=2), nn.softmax_cross_entropy, 13),
    ("gpt-spherical", lambda: nn.gpt(4, 8, 13, d=24, heads=3, layers=2, attention="spherical"),
     nn.softmax_cross_entropy, 13),
    ("cnn", lambda: cg.sequential([nn.conv2d(4, 1, 8, 8, 8, kernel=3, padding=1), nn.relu(4, 8, 8, 8),
                                   nn.max_pool2d(4, 8, 8, 8, 2), nn.flatten(4, 8, 4, 4), nn.dense(4, 128, 10)]),
     nn.mse, None),
]


@pytest.mark.parametrize("name,make,loss,vocab", ATTENTION_MODELS, ids=[m[0] for m in ATTENTION_MODELS])
def test_attention_models_agree_with_numpy(name, make, loss, vocab, rng):
    """Predictions, loss and three training steps (momentum: Adam would normalise the rounding noise of
    gradients that are exactly 0, such as a key bias under softmax) within float32 tolerance (looser than
    the MLPs': spherical attention divides by the norm of a causal row, a single score in row 0)."""
    ref = cg.compile_model(make(), loss=loss, optimizer=nn.momentum(0.05))
    dev = cg.compile_model(make(), loss=loss, optimizer=nn.momentum(0.05), backend="cupy")
    p = ref.init_params(seed=0)
    q = {k: dev.xp.asarray(v) for k, v in p.items()}
    for _ in range(3):
        if vocab:
            x, y = rng.integers(0, vocab, size=ref.x_type.shape), rng.integers(0, vocab, size=ref.x_type.shape)
        else:
            x = rng.normal(size=ref.x_type.shape).astype(np.float32)
            y = rng.normal(size=ref.y_type.shape).astype(np.float32)
        np.testing.assert_allclose(dev.to_host(dev.predict(q, x)), ref.predict(p, x), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(dev.loss(q, x, y), ref.loss(p, x, y), rtol=1e-4)
        p, q = ref.step(p, x, y), dev.step(q, x, y)
        for k in p:
            np.testing.assert_allclose(dev.to_host(q[k]), p[k], rtol=1e-3, atol=1e-4, err_msg=k)


# ------------------------------------------- row kernels: one warp per row
from _tolerance import assert_programs_close  # noqa: E402
from test_gpu_cuda_rows import DT, OPS, WIDTHS, _prog, _shape, _special  # noqa: E402


@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("k", WIDTHS)
@pytest.mark.parametrize("op", list(OPS))
def test_row_kernels_shuffle_on_the_device(op, k, dtype, rng):
    """Softmax (causal or not), log-sum-exp and argmax, a warp per row with ``__shfl_xor_sync``: rows shorter
    and longer than a warp against NumPy (float bounds of tests/_tolerance.py; argmax exactly, ties, NaNs and
    infinities included, as NumPy's first maximum)."""
    import cupy
    npdt = DT[dtype].numpy_dtype()
    x = (3 * rng.normal(size=_shape(op, k))).astype(npdt)
    prog = _prog(op, x.shape, DT[dtype])
    f = gpu.compile_function(prog, ["a0"], "f")
    (got,) = f.run(cupy.asarray(x))
    assert_programs_close([cupy.asnumpy(got)], cg.run(prog, [x]), prog, [x], err_msg=f"{op} k={k}")
    if op == "argmax":
        s = _special(k, rng).astype(npdt)
        g = gpu.compile_function(_prog(op, s.shape, DT[dtype]), ["a0"], "g")
        (got,) = g.run(cupy.asarray(s))
        np.testing.assert_array_equal(cupy.asnumpy(got), np.eye(k, dtype=npdt)[np.argmax(s, axis=-1)])


def test_profile_times_every_launch_with_events(rng):
    """gpu.profile on the device: one CUDA-event interval per launch, each positive, summing to the event span,
    and the caller's (donated) arrays left alone."""
    B = 32
    step = cg.compile_model(nn.mlp(B, [64, 128, 10]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.1),
                            backend="cupy", donate=True)
    p = step.init_params(seed=0)
    x = step.xp.asarray(rng.normal(size=(B, 64)).astype(np.float32))
    y = step.xp.asarray(np.eye(10, dtype=np.float32)[rng.integers(0, 10, size=B)])
    args = [p[k] for k in step.param_names + step.state_names] + [x, y]
    before = [step.to_host(a) for a in args]
    prof = gpu.profile(step.fn("step").compiled, *args, repeats=5, warmup=2)
    assert len(prof.launches) == step.launches_per_step
    assert all(x.measured_s > 0 for x in prof.launches)
    for i, span in enumerate(prof.spans):      # consecutive events tile each call's span (0.5 µs resolution each)
        assert abs(sum(v[i] for v in prof.samples.values()) - span) <= 1e-6 * len(prof.launches)
    assert prof.device == gpu.available()[1]
    assert all(np.array_equal(step.to_host(a), b) for a, b in zip(args, before))


# ------------------------------------------- cuBLAS through ctypes, TF32, CUDA graphs
BLAS_LAYOUTS = [
    ("row-major", lambda r: (r.normal(size=(3, 64, 40)), r.normal(size=(3, 40, 24)))),
    ("transposed", lambda r: (np.swapaxes(r.normal(size=(3, 40, 64)), 1, 2), np.swapaxes(r.normal(size=(3, 24, 40)), 1, 2))),
    ("2-d", lambda r: (r.normal(size=(64, 40)), r.normal(size=(40, 24)))),
    ("2-d transposed", lambda r: (r.normal(size=(40, 64)).T, r.normal(size=(24, 40)).T)),
    ("4-d", lambda r: (r.normal(size=(2, 3, 64, 40)), r.normal(size=(2, 3, 40, 24)))),
    ("strided copy", lambda r: (r.normal(size=(3, 64, 80))[:, :, ::2], r.normal(size=(3, 40, 24)))),
]


@pytest.mark.parametrize("name,make", BLAS_LAYOUTS, ids=[n for n, _ in BLAS_LAYOUTS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blas_products_on_our_handle_agree_with_cupy_matmul(name, make, dtype, rng):
    import cupy
    from circuitgrad.backends.gpu import blas
    a, b = (cupy.asarray(v.astype(dtype)) for v in make(rng))
    if name.startswith("2-d transposed") or name == "transposed":   # views of device arrays, as the glue passes
        a, b = (cupy.ascontiguousarray(v.swapaxes(-1, -2)).swapaxes(-1, -2) for v in (a, b))
    want = cupy.matmul(a, b).get()
    got = blas.matmul(cupy, "fp32", capturable=True)(a, b).get()
    eps = np.finfo(dtype).eps
    bound = a.shape[-1] * eps * np.matmul(np.abs(a.get()), np.abs(b.get()))
    assert np.all(np.abs(got - want) <= 2 * bound), name


@pytest.mark.parametrize("capturable", [False, True], ids=["cupy", "our-handle"])
def test_tf32_products_round_their_operands(capturable, rng):
    import cupy
    from circuitgrad.backends.gpu import blas
    a, b = rng.normal(size=(256, 512)).astype(np.float32), rng.normal(size=(512, 128)).astype(np.float32)
    got = blas.matmul(cupy, "tf32", capturable)(cupy.asarray(a), cupy.asarray(b)).get()
    exact = a.astype(np.float64) @ b
    scale = np.abs(a).astype(np.float64) @ np.abs(b)
    err = np.abs(got - exact) / scale
    assert err.max() < 2 * 2 ** -11 + 512 * 2 ** -23        # TF32 operands (10-bit mantissa), float32 sums
    assert err.max() > 4 * 2 ** -23 * 8                       # and not float32 products


@pytest.mark.parametrize("precision,capturable", [("fp32", False), ("tf32", False), ("bf16", False), ("fp32", True)])
def test_our_handle_is_made_where_own_handle_says(precision, capturable, monkeypatch, rng):
    """bench/gpu_step.py adds the handle's workspace to the peak of each later row that uses it (own_handle)."""
    import cupy
    from circuitgrad.backends.gpu import blas
    monkeypatch.setattr(blas, "_HANDLES", {})
    a = cupy.asarray(rng.normal(size=(32, 32)).astype(np.float32))
    blas.matmul(cupy, precision, capturable)(a, a)
    assert blas.handle_made(cupy.cuda.Device().id) == blas.own_handle(precision, capturable)


def test_a_graph_step_replays_the_eager_steps(rng):
    """tinygpt-like GPT: four steps eagerly and as a CUDA graph (captured at step 2) on four batches agree to float32
    rounding, and the graph's parameters keep their addresses."""
    import cupy
    make = lambda: nn.gpt(8, 32, 96, d=64, heads=4, layers=2)  # noqa: E731
    kw = dict(loss=nn.softmax_cross_entropy, optimizer=nn.adamw(1e-3), backend="cupy", donate=True)
    eager, graphed = cg.compile_model(make(), **kw), cg.compile_model(make(), graph=True, **kw)
    p = eager.init_params(seed=0)
    qa = {k: cupy.asarray(v) for k, v in p.items()}
    qb = {k: cupy.asarray(v) for k, v in p.items()}
    ptrs = []
    for _ in range(4):
        x, y = rng.integers(0, 96, size=(8, 32)), rng.integers(0, 96, size=(8, 32))
        qa, qb = eager.step(qa, x, y), graphed.step(qb, x, y)
        ptrs.append({k: v.data.ptr for k, v in qb.items()})
    assert graphed.fn("step").compiled.graphed.captured and ptrs[1] == ptrs[2] == ptrs[3]
    for k in qa:
        np.testing.assert_allclose(qb[k].get(), qa[k].get(), rtol=1e-4, atol=1e-6, err_msg=k)
    assert abs(graphed.loss(qb, x, y) - eager.loss(qa, x, y)) < 1e-4


@pytest.mark.parametrize("name,make", BLAS_LAYOUTS[:5], ids=[n for n, _ in BLAS_LAYOUTS[:5]])
def test_bf16_products_are_the_products_of_rounded_operands(name, make, rng):
    """bfloat16 operands (rounded to nearest even by the generated cast), float32 accumulation and result."""
    import cupy
    from circuitgrad.backends.gpu import blas
    a, b = (v.astype(np.float32) for v in make(rng))
    got = blas.matmul(cupy, "bf16")(cupy.asarray(a), cupy.asarray(b))
    assert got.dtype == np.float32
    ra, rb = (blas.round_bf16(np, np.ascontiguousarray(v)).astype(np.float64) for v in (a, b))
    bound = a.shape[-1] * 2 ** -23 * np.matmul(np.abs(ra), np.abs(rb)) + 1e-30
    assert np.all(np.abs(got.get() - np.matmul(ra, rb)) <= 2 * bound), name


def test_a_bf16_graph_step_trains_as_the_float32_step(rng):
    import cupy
    make = lambda: nn.gpt(8, 32, 96, d=64, heads=4, layers=2)  # noqa: E731
    kw = dict(loss=nn.softmax_cross_entropy, optimizer=nn.adamw(1e-3), backend="cupy", donate=True)
    fp, bf = cg.compile_model(make(), **kw), cg.compile_model(make(), precision="bf16", graph=True, **kw)
    p = fp.init_params(seed=0)
    qa = {k: cupy.asarray(v) for k, v in p.items()}
    qb = {k: cupy.asarray(v) for k, v in p.items()}
    for _ in range(4):
        x, y = rng.integers(0, 96, size=(8, 32)), rng.integers(0, 96, size=(8, 32))
        qa, qb = fp.step(qa, x, y), bf.step(qb, x, y)
    la, lb = fp.loss(qa, x, y), bf.loss(qb, x, y)
    assert np.isfinite(lb) and abs(lb - la) <= 1e-2 * abs(la)


def test_bf16_stored_values_give_the_bits_of_float32_stored_ones(rng, monkeypatch):
    """On the device: values only products read (the bf16 attention kernels' q, k, v among them), stored as
    bfloat16 by their kernels (``gpu.storage``), give the products the same operands as storing them in float32
    and casting before each product. cuBLAS may then read
    an operand transposed instead of as a cast copy, so the accumulation order (not the operands) can differ:
    float32 tolerance, as the graph step's test."""
    import cupy
    from circuitgrad.backends.gpu import storage
    kw = dict(loss=nn.softmax_cross_entropy, optimizer=nn.adamw(1e-3), backend="cupy", donate=True, precision="bf16")
    make = lambda: nn.gpt(8, 32, 96, d=64, heads=4, layers=2)  # noqa: E731
    stored = cg.compile_model(make(), **kw)
    with monkeypatch.context() as m:
        m.setattr(storage, "bf16_operands", lambda p: frozenset())
        plain = cg.compile_model(make(), **kw)
    assert stored.fn("step").compiled.plan.narrow and not plain.fn("step").compiled.plan.narrow
    p = stored.init_params(seed=0)
    x, y = rng.integers(0, 96, size=(8, 32)), rng.integers(0, 96, size=(8, 32))
    qa = stored.step({k: cupy.asarray(v) for k, v in p.items()}, x, y)
    qb = plain.step({k: cupy.asarray(v) for k, v in p.items()}, x, y)
    for k in qa:
        np.testing.assert_allclose(qa[k].get(), qb[k].get(), rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("dh", [32, 64])
@pytest.mark.parametrize("cls", ["AttentionForward", "AttentionGradQ", "AttentionGradKV"])
def test_attention_reads_stored_q_k_v_as_the_pairs_it_would_round(cls, dh, rng):
    """On the device: a bf16 attention kernel reading q, k, v (and dO) as bfloat16 bits (16- and 8-byte loads,
    and their fallback) gives the bits of the kernel reading float32 and rounding each pair by
    ``cvt.rn.bf16x2.f32``."""
    import cupy
    from test_gpu_storage import stored_against_plain
    got, want = stored_against_plain(cupy, cls, dh, rng)
    for g in got:
        for a, b in zip(g, want):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("store", ["unsigned short", "float"])
@pytest.mark.parametrize("dh", [16, 64])
def test_attention_kernels_copies_are_their_results_rounded(store, dh, rng):
    """On the device: the bf16 attention kernels' copies of their results, and the dq kernel's of dO (8- or
    16-byte stores, and one by one where the copy is misaligned), are those values rounded to bfloat16."""
    import cupy
    from test_gpu_rounding import copies_against_plain
    copies_against_plain(cupy, store, dh, rng)


@pytest.mark.parametrize("precision", ["3xtf32", "tf32", "bf16"])
@pytest.mark.parametrize("kind, causal", [("softmax", True), ("softmax", False), ("spherical", True)])
def test_tensor_core_attention_computes_its_reference(kind, causal, precision, rng):
    """The tensor-core attention kernels (``mma.sync``, PTX's fragment layout) on the device against their NumPy
    reference, within the rounding bound of ``tests/test_gpu_attention_mma.py``: a wrong layout is far outside."""
    import cupy
    from test_gpu_attention_mma import _build, _options, _program, _tolerance
    T = cg.NdArrayType((1, 3, 112, 64), cg.float32)        # 21 warps: the last block partial
    prog = _program(kind, causal, T)
    xs = [rng.normal(size=T.shape).astype(np.float32) for _ in range(4)]
    names = ["q", "k", "v", "do"]
    want = _build(prog, names, precision).run(*xs)
    f = gpu.compile_function(prog, names, "fb", **_options(precision))
    assert sum("mma.sync" in k.source for k in f.kernels.values()) == 4
    got = [o.get() for o in f.run(*[cupy.asarray(x) for x in xs])]
    for g, w, tol in zip(got, want, _tolerance(kind, causal, precision, *xs)):
        assert np.all(np.abs(g - w) <= tol), float(np.max(np.abs(g - w) - tol))


@pytest.mark.parametrize("kind, causal", [("softmax", True), ("softmax", False), ("spherical", True)])
def test_quad_attention_computes_its_reference(kind, causal, rng):
    """The float32 CUDA-core attention kernels, a quad of lanes per row (``__shfl_xor_sync`` within each quad),
    on the device against their NumPy reference, within the bound of ``tests/test_gpu_attention_quad.py``."""
    import cupy
    from test_gpu_attention_mma import _build, _program, _tolerance
    T = cg.NdArrayType((1, 3, 136, 64), cg.float32)        # S a multiple of 8, not 16; 51 warps: a partial block
    prog = _program(kind, causal, T)
    xs = [rng.normal(size=T.shape).astype(np.float32) for _ in range(4)]
    names = ["q", "k", "v", "do"]
    want = _build(prog, names, "fp32").run(*xs)
    f = gpu.compile_function(prog, names, "fb")
    assert sum("CG_QUAD(s[I], cg_add);" in k.source for k in f.kernels.values()) == 4
    got = [o.get() for o in f.run(*[cupy.asarray(x) for x in xs])]
    for g, w, tol in zip(got, want, _tolerance(kind, causal, "3xtf32", *xs)):
        assert np.all(np.abs(g - w) <= tol), float(np.max(np.abs(g - w) - tol))


def test_cvt_rn_bf16x2_rounds_and_packs_as_the_host():
    """The bf16 attention kernels' ``cg_pack_rn`` (one ``cvt.rn.bf16x2.f32``, its first source in the upper
    half) rounds to nearest even and packs as the host execution mode does."""
    import cupy
    from test_gpu_mma_prelude import PACK_KERNEL, pack_cases, pack_expected
    lo, hi = pack_cases()
    out = cupy.zeros(lo.size, dtype=cupy.uint32)
    cupy.RawKernel(PACK_KERNEL, "pack_rn")((2,), (128,), (cupy.asarray(lo), cupy.asarray(hi), out, np.int32(lo.size)))
    np.testing.assert_array_equal(out.get(), pack_expected(lo, hi))


def test_the_attention_kernels_weights_are_exp_to_their_bound():
    """The tf32 and bf16 softmax kernels' ``cg_ex2`` (an FFMA and ``ex2.approx`` under CuPy's ``-ftz=true``) is
    ``exp`` to the bound the host's is checked to, results below float32's normals aside."""
    import cupy
    from test_gpu_mma_prelude import EXP_C, EXP_KERNEL, exp_cases, exp_within_bound
    from circuitgrad.backends.gpu.attention import LOG2E, AttentionForward
    a, L, x = exp_cases()
    op = AttentionForward(cg.NdArrayType((16, 64), cg.float32), True, EXP_C, mma="bf16")
    out = cupy.zeros(a.size, dtype=cupy.float32)
    cupy.RawKernel(EXP_KERNEL, "exp_w")(((a.size + 127) // 128,), (128,), (
        cupy.asarray(a), cupy.asarray(L * LOG2E), op.c2, out, np.int32(a.size)))
    assert np.all(exp_within_bound(x, L, out.get()))


def test_the_online_softmax_rescales_by_exact_powers_of_two_on_the_device():
    """``cg_pow2`` (the exponent's bits, ``__uint_as_float``) as the host's: ``2^d`` exactly, 0 below −126."""
    import cupy
    from test_gpu_mma_prelude import pow2_cases, run_pow2
    np.testing.assert_array_equal(run_pow2(cupy), pow2_cases()[1])


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_the_online_softmax_rescales_on_the_device(precision):
    """Scores that pass their rows' power of two after the first steps (``tests/test_gpu_attention_mma.py``'s
    cases, ``JUMPS``): the device's forward, its rescaling branch taken by the warp as a whole (``__any_sync``),
    against the reference, ``O`` and ``L``."""
    import cupy
    from test_gpu_attention_mma import JUMPS, _L_bound, _tolerance, rescaling_case
    from circuitgrad.backends.gpu import attention_mma
    for case in JUMPS:
        op, q, k, v = rescaling_case(precision, case)
        want, wL = op.evaluate(q, k, v)
        src = attention_mma.source(op, "grow")[0]
        O, L = cupy.empty(q.shape, dtype=cupy.float32), cupy.empty(q.shape[:-1], dtype=cupy.float32)
        cupy.RawKernel(src, "grow")((1,), (128,), (cupy.asarray(q), cupy.asarray(k), cupy.asarray(v), O, L))
        tol = _tolerance("softmax", True, precision, q, k, v, v)[0]
        assert np.all(np.abs(O.get() - want) <= tol), case
        assert np.all(np.abs(L.get() - wL) <= _L_bound(wL, 32)), case


def test_a_pair_takes_two_registers_halves_on_the_device():
    """The bf16 kernels' ``cg_pair`` (``__byte_perm`` with selectors 0x5410 and 0x7632) as the host's."""
    import cupy
    from test_gpu_mma_prelude import PAIR_KERNEL, pair_expected
    a, b = np.random.default_rng(3).integers(0, 2 ** 32, size=(2, 256), dtype=np.uint32)
    out = cupy.zeros(2 * a.size, dtype=cupy.uint32)
    cupy.RawKernel(PAIR_KERNEL, "pair")((2,), (128,), (cupy.asarray(a), cupy.asarray(b), out, np.int32(a.size)))
    np.testing.assert_array_equal(out.get(), pair_expected(a, b))
