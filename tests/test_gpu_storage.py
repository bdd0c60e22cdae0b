"""Values stored as bfloat16 under ``precision="bf16"`` (:mod:`circuitgrad.backends.gpu.storage`): which values,
that the step computes the same bits as with every value stored in float32, and what the memory model counts."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.backends.gpu import blas, memory, runtime, storage
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.backends.gpu.host.emulate import emulated_kernel

ok, why = hostrun.available()
needs_host = pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")


def _gpt():
    return nn.gpt(4, 8, 13, d=24, heads=3, layers=2)


def _compile(backend="cupy-emulated", **kw):
    return cg.compile_model(_gpt(), loss=nn.softmax_cross_entropy, optimizer=nn.adamw(0.01), backend=backend,
                            donate=True, **kw)


def _batch(rng):
    return rng.integers(0, 13, size=(4, 8)), rng.integers(0, 13, size=(4, 8))


def _readers(p, v):
    """The kinds of the steps that read ``v``'s memory, following views to their readers."""
    kinds, todo = set(), [v]
    while todo:
        b = todo.pop()
        for s in p.steps:
            if any(p.src(x) == b for x in s.inputs):
                if s.kind == "view":
                    todo.extend(s.outputs)
                else:
                    kinds.add(s.kind)
    return kinds


def test_only_values_that_products_alone_read_are_stored_as_bfloat16():
    f = _compile(precision="bf16").fn("step").compiled
    p = f.plan
    assert len(p.narrow) >= 3 * 2            # per layer: both layer norms' outputs and the GELU's
    made = {v: s for s in p.steps for v in s.outputs}
    returned = {p.src(v) for v in p.program.outputs}
    for v in p.narrow:
        assert made[v].kind == "fused" and v not in returned
        assert _readers(p, v) == {"matmul"}, v
    ops = {a.op.name for s in p.steps for a in s.instrs for v in p.narrow if v in a.results}
    assert {"OneHot", "Add", "Mul"} <= ops      # the one-hot tokens, the layer norms' gain-and-shift, the GELU
    for kw in ({}, {"precision": "tf32"}):
        assert not _compile(**kw).fn("step").compiled.plan.narrow


def test_a_stored_value_is_written_as_bfloat16_bits_by_its_kernel():
    f = _compile(precision="bf16").fn("step").compiled
    narrowed = [k for k in f.kernels.values() if set(k.outputs) & f.plan.narrow]
    assert narrowed
    for k in narrowed:
        assert f"unsigned short {k.name}_bf16(float x)" in k.source
        assert "unsigned short* __restrict__ out" in k.source
    assert "dtype=xp.uint16" in f.python


def test_the_step_is_the_same_bits_as_with_every_value_in_float32(rng, monkeypatch):
    """Rounding a value once where it is made, or at each product that reads it, gives the same operands: the
    step's results are bit for bit those of the step that stores everything in float32."""
    x, y = _batch(rng)
    stored = _compile(precision="bf16")
    with monkeypatch.context() as m:
        m.setattr(storage, "bf16_operands", lambda p: frozenset())
        plain = _compile(precision="bf16")
    assert stored.fn("step").compiled.plan.narrow and not plain.fn("step").compiled.plan.narrow
    p = stored.init_params(seed=0)
    fresh = lambda: {k: v.copy() for k, v in p.items()}        # noqa: E731  (donate=True updates in place)
    a, b = stored.step(fresh(), x, y), plain.step(fresh(), x, y)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    fp = _compile().step(fresh(), x, y)
    assert max(np.abs(fp[k] - a[k]).max() for k in a) > 0       # bf16 products do change the step


@needs_host
def test_the_generated_kernels_store_the_same_bits_on_the_host(rng, monkeypatch):
    """The CUDA C of the kernels (compiled for the host): the stored bits round as ``blas.round_bf16`` does, so the
    step equals, bit for bit, the host-run step that stores everything in float32."""
    x, y = _batch(rng)
    p = _compile().init_params(seed=0)
    out = []
    with hostrun.device() as cp:
        for narrow in (True, False):
            with monkeypatch.context() as m:
                if not narrow:
                    m.setattr(storage, "bf16_operands", lambda p: frozenset())
                step = _compile(backend="cupy", precision="bf16")
            assert bool(step.fn("step").compiled.plan.narrow) == narrow
            got = step.step({k: cp.asarray(v) for k, v in p.items()}, x, y)
            out.append({k: v.get() for k, v in got.items()})
    for k in out[0]:
        np.testing.assert_array_equal(out[0][k], out[1][k], err_msg=k)


@needs_host
def test_the_store_helper_rounds_to_nearest_even():
    one = np.float32(1.0).view(np.uint32)
    ties = np.array([one + 0x8000, one + 0x18000, one + 0x7FFF, one + 0x8001], np.uint32).view(np.float32)
    nans = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFF800001, 0x7FC00000], np.uint32).view(np.float32)
    x = np.concatenate([ties, -ties, np.float32([0.0, -0.0, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-40]), nans,
                        np.random.default_rng(0).normal(size=4000).astype(np.float32)])
    want = storage.to_bf16_bits(x)
    assert list(want[:4]) == [0x3F80, 0x3F82, 0x3F80, 0x3F81]        # ties to even, below and above a tie
    # a NaN is the quiet NaN of its sign (the NaN a device computes, 0x7FFFFFFF, would round to -0.0)
    assert list(want[15:20]) == [0x7FC0, 0xFFC0, 0x7FC0, 0xFFC0, 0x7FC0]
    assert list(want[12:14]) == [0x7F80, 0xFF80]                       # 3.4e38 rounds up to infinity
    widened = (want.astype(np.uint32) << np.uint32(16)).view(np.float32)
    np.testing.assert_array_equal(widened.view(np.uint32), blas.round_bf16(np, x).view(np.uint32))
    src = storage.store_helper("t") + (
        'extern "C" __global__ void t(const float* __restrict__ x, unsigned short* __restrict__ y) {\n'
        "    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        f"    if (i < {x.size}LL) y[i] = t_bf16(x[i]);\n}}\n")
    with hostrun.device() as cp:
        y = cp.empty(x.shape, dtype=cp.uint16)
        cp.RawKernel(src, "t")(((x.size + 255) // 256,), (256,), (cp.asarray(x), y))
        np.testing.assert_array_equal(y.get(), want)


def test_widening_the_bits_gives_the_rounded_value():
    x = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)
    np.testing.assert_array_equal(blas.widen_bf16(np, storage.to_bf16_bits(x)), blas.round_bf16(np, x))
    with pytest.raises(TypeError) as e:
        blas.matmul(np, "tf32")(storage.to_bf16_bits(x), x.T)
    assert str(e.value) == "matmul: a bfloat16 operand (uint16 bits) under precision 'tf32'"


def test_the_memory_model_counts_the_bfloat16_copies_of_a_product():
    """One product under ``bf16``: both float32 operands, their two-byte copies for the product's duration, and the
    float32 result (each rounded up to CuPy's 512-byte blocks)."""
    A, B = cg.NdArrayType((64, 32), cg.float32), cg.NdArrayType((32, 48), cg.float32)
    prog = cg.schedule(cg.trace(lambda a, b: a @ b, [A, B], name="product"))
    blocks = lambda n: -(-n // memory.ROUND) * memory.ROUND       # noqa: E731
    fp = runtime.build(prog, ["a", "b"], "product", np, emulated_kernel)
    bf = runtime.build(prog, ["a", "b"], "product", np, emulated_kernel, precision="bf16")
    ins, out = blocks(64 * 32 * 4) + blocks(32 * 48 * 4), blocks(64 * 48 * 4)
    assert memory.peak(fp) == ins + out
    assert memory.peak(bf) == ins + blocks(64 * 32 * 2) + blocks(32 * 48 * 2) + out


def test_storing_bfloat16_lowers_the_peak_and_the_bytes_moved(monkeypatch):
    stored = _compile(precision="bf16")
    with monkeypatch.context() as m:
        m.setattr(storage, "bf16_operands", lambda p: frozenset())
        plain = _compile(precision="bf16")
    f, g = stored.fn("step").compiled, plain.fn("step").compiled
    assert memory.peak(f) < memory.peak(g)
    saved = sum(f.program.types[v].size * 2 for v in f.plan.narrow)
    a, b = cg.cost(stored, target="gpu"), cg.cost(plain, target="gpu")
    assert b.total.values["bytes"] - a.total.values["bytes"] >= saved       # each is written once and read at least once


@pytest.mark.parametrize("backend", ["cupy-emulated", "cupy"])
def test_a_stored_value_read_through_a_strided_view_has_two_byte_strides(backend, monkeypatch, rng):
    """``tanh(a).reshape(8, 6).T @ w``: the stored value reaches the product as ``as_strided`` of its bfloat16
    base, whose strides count two bytes an element (four would read past the buffer)."""
    if backend == "cupy" and not ok:
        pytest.skip(why)
    A, W = cg.NdArrayType((4, 12), cg.float32), cg.NdArrayType((8, 5), cg.float32)
    prog = cg.schedule(cg.trace(lambda a, w: ops.transpose(ops.reshape(ops.tanh(a), (8, 6))) @ w, [A, W], name="f"))
    a, w = rng.normal(size=A.shape).astype(np.float32), rng.normal(size=W.shape).astype(np.float32)
    from circuitgrad.backends import gpu
    outs = []
    for narrow in (True, False):
        with monkeypatch.context() as m:
            if not narrow:
                m.setattr(storage, "bf16_operands", lambda p: frozenset())
            if backend == "cupy":
                with hostrun.device() as cp:
                    f = gpu.compile_function(prog, ["a", "w"], "f", precision="bf16")
                    outs.append(f.run(cp.asarray(a), cp.asarray(w))[0].get())
            else:
                f = gpu.compile_function(prog, ["a", "w"], "f", emulate=True, precision="bf16")
                outs.append(np.asarray(f.run(a, w)[0]))
        assert bool(f.plan.narrow) == narrow
        if narrow:
            assert "as_strided" in f.python and "(2, 12)" in f.python, f.python
    np.testing.assert_array_equal(outs[0], outs[1])
    want = blas.round_bf16(np, np.tanh(a).reshape(8, 6).T.copy()).astype(np.float64) @ blas.round_bf16(np, w)
    np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-6)


def test_the_cost_of_another_precision_is_that_of_the_step_built_so(monkeypatch):
    """``cg.cost(step, precision=...)`` costs the function the backend builds at that precision: bf16 stores what
    products alone read in two bytes, whatever precision the model was compiled with."""
    fp, bf = _compile(), _compile(precision="bf16")
    for asked in ("bf16", "fp32"):
        a, b = cg.cost(fp, target="gpu", precision=asked), cg.cost(bf, target="gpu", precision=asked)
        assert a.total.values["bytes"] == b.total.values["bytes"] and a.detail["peak_bytes"] == b.detail["peak_bytes"]
    assert cg.cost(fp, target="gpu", precision="bf16").detail["peak_bytes"] < cg.cost(fp, target="gpu").detail["peak_bytes"]

