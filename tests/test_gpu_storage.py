"""Values stored as bfloat16 under ``precision="bf16"`` (:mod:`circuitgrad.backends.gpu.storage`): which values,
that the step computes the same bits as with every value stored in float32, and what the memory model counts."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.backends.gpu import blas, memory, runtime, storage
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.backends.gpu.host.emulate import emulated_kernel
from circuitgrad.rewrite import simplify
from conftest import ptxas_spills

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
        assert v not in returned
        assert made[v].kind == "fused" or v in made[v].then.outputs          # a fused kernel or a sum's epilogue
        assert _readers(p, v) == {"matmul"}, v
    # each a product operand's rounded copy (gpu.rounding), of the one-hot tokens, the layer norms' gain-and-shift,
    # the GELU's product, ...
    rounded = [a for s in p.steps for a in s.work for v in p.narrow if v in a.results]
    assert {a.op.name for a in rounded} == {"RoundBF16"}
    makers = {b.op.name for s in p.steps for b in s.work for a in rounded if a.args[0] in b.results}
    assert {"OneHot", "Add", "Mul"} <= makers
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


def _with_and_without_stored(prog, xs, backend: str, monkeypatch) -> tuple[list, list]:
    """``prog`` at ``bf16`` on ``xs`` (``backend``: emulated, or ``cupy`` in the host mode), as built and with
    nothing stored as bfloat16: ``(functions, outputs)``, the stored one first."""
    from circuitgrad.backends import gpu
    names = [f"a{i}" for i in range(len(xs))]
    fs, outs = [], []
    for narrow in (True, False):
        with monkeypatch.context() as m:
            if not narrow:
                m.setattr(storage, "bf16_operands", lambda p: frozenset())
            if backend == "cupy":
                with hostrun.device() as cp:
                    f = gpu.compile_function(prog, names, "f", precision="bf16")
                    outs.append([o.get() for o in f.run(*[cp.asarray(x) for x in xs])])
            else:
                f = gpu.compile_function(prog, names, "f", emulate=True, precision="bf16")
                outs.append([np.asarray(o) for o in f.run(*xs)])
        fs.append(f)
    assert not fs[1].plan.narrow
    return fs, outs


@pytest.mark.parametrize("backend", ["cupy-emulated", "cupy"])
def test_a_stored_value_read_through_a_strided_view_has_two_byte_strides(backend, monkeypatch, rng):
    """``tanh(a).reshape(8, 6).T @ w``: the stored value reaches the product as ``as_strided`` of its bfloat16
    base, whose strides count two bytes an element (four would read past the buffer)."""
    if backend == "cupy" and not ok:
        pytest.skip(why)
    A, W = cg.NdArrayType((4, 12), cg.float32), cg.NdArrayType((8, 5), cg.float32)
    prog = cg.schedule(cg.trace(lambda a, w: ops.transpose(ops.reshape(ops.tanh(a), (8, 6))) @ w, [A, W], name="f"))
    a, w = rng.normal(size=A.shape).astype(np.float32), rng.normal(size=W.shape).astype(np.float32)
    (f, _), ((stored,), (plain,)) = _with_and_without_stored(prog, [a, w], backend, monkeypatch)
    assert f.plan.narrow
    assert "as_strided" in f.python and "(2, 12)" in f.python, f.python
    np.testing.assert_array_equal(stored, plain)
    want = blas.round_bf16(np, np.tanh(a).reshape(8, 6).T.copy()).astype(np.float64) @ blas.round_bf16(np, w)
    np.testing.assert_allclose(stored, want, rtol=1e-5, atol=1e-6)


def test_the_cost_of_another_precision_is_that_of_the_step_built_so(monkeypatch):
    """``cg.cost(step, precision=...)`` costs the function the backend builds at that precision: bf16 stores what
    products alone read in two bytes, whatever precision the model was compiled with."""
    fp, bf = _compile(), _compile(precision="bf16")
    for asked in ("bf16", "fp32"):
        a, b = cg.cost(fp, target="gpu", precision=asked), cg.cost(bf, target="gpu", precision=asked)
        assert a.total.values["bytes"] == b.total.values["bytes"] and a.detail["peak_bytes"] == b.detail["peak_bytes"]
    # another function: its products' operands rounded once and stored in two bytes (gpu.rounding, storage)
    assert cg.cost(fp, target="gpu", precision="bf16").detail["peak_bytes"] != cg.cost(fp, target="gpu").detail["peak_bytes"]



# ------------------------------------------------------------------ attention's operands
def _attention_gpt():
    """A GPT whose heads (dh = 16) take the tensor-core attention kernels."""
    return nn.gpt(4, 16, 13, d=32, heads=2, layers=1)


def _attention_step(backend="cupy-emulated", **kw):
    return cg.compile_model(_attention_gpt(), loss=nn.softmax_cross_entropy, optimizer=nn.adamw(0.01),
                            backend=backend, donate=True, **kw)


def _no_attention_operands(plan):
    """:func:`storage.bf16_operands` as if attention kernels read every operand in float32."""
    att = {plan.read(plan.src(x))[0] for s in plan.steps if s.kind == "attention" for x in s.inputs}
    return frozenset(v for v in _BF16_OPERANDS(plan) if v not in att)


_BF16_OPERANDS = storage.bf16_operands


def test_a_tensor_core_attention_reads_q_k_v_stored_as_bfloat16():
    """Under ``bf16`` the attention kernels' products round q, k and v as cuBLAS's round theirs: the fused kernel
    that makes them stores them so, and the three attention kernels read ``unsigned short``; so does the dk and dv
    kernel its ``dO``, a copy the dq kernel writes as it reads ``dO``. ``O``, ``L``, ``D`` and the dq kernel's ``dO``
    (which ``D = rowsum(dO∘O)`` reads in float32) stay float32; tf32 stores nothing narrow."""
    f = _attention_step(precision="bf16").fn("step").compiled
    p = f.plan
    att = [s for s in p.steps if s.kind == "attention"]
    assert [type(s.instrs[0].op).__name__ for s in att] == ["AttentionForward", "AttentionGradQ", "AttentionGradKV"]

    def stored(s, n):
        return n in "q k v".split() or (n == "dO" and s is att[2])
    qkv = {p.read(p.src(x))[0] for s in att for n, x in zip(s.instrs[0].op.ins.split(), s.inputs) if stored(s, n)}
    others = {p.read(p.src(x))[0] for s in att for n, x in zip(s.instrs[0].op.ins.split(), s.inputs)
              if not stored(s, n)}
    assert len(qkv) == 4 and qkv <= p.narrow and not others & p.narrow
    (dO,) = qkv & {p.read(p.src(v))[0] for v in att[1].outputs}        # the dq kernel's copy
    assert att[2].inputs[att[2].instrs[0].op.ins.split().index("dO")] == dO
    for s in att:
        k = f.kernels[p.steps.index(s)]
        names = s.instrs[0].op.ins.split()
        assert k.in_types == tuple("unsigned short" if stored(s, n) else "float" for n in names)
        assert all(f"const unsigned short* __restrict__ {n}," in k.source for n in ("q", "k", "v"))
    assert not _attention_step(precision="tf32").fn("step").compiled.plan.narrow


@needs_host
def test_stored_attention_operands_give_the_same_bits(rng, monkeypatch):
    """The GPT step with q, k, v stored as bfloat16 equals, bit for bit, the step that stores them in float32,
    emulated and run on the host in both lane orders (the kernels read the pairs the products would round)."""
    x, y = rng.integers(0, 13, size=(4, 16)), rng.integers(0, 13, size=(4, 16))
    p = _attention_step().init_params(seed=0)
    fresh = lambda: {k: v.copy() for k, v in p.items()}        # noqa: E731
    runs = {}
    for narrow in (True, False):
        with monkeypatch.context() as m:
            if not narrow:
                m.setattr(storage, "bf16_operands", _no_attention_operands)
            runs["emulated", narrow] = _attention_step(precision="bf16").step(fresh(), x, y)
            for order in hostrun.ORDERS:
                with hostrun.device(order) as cp:
                    step = _attention_step(backend="cupy", precision="bf16")
                    ks = step.fn("step").compiled.kernels.values()
                    assert any("unsigned short" in k.in_types for k in ks if k.ops[0].startswith("Attention")) == narrow
                    got = step.step({k: cp.asarray(v) for k, v in p.items()}, x, y)
                    runs[order, narrow] = {k: v.get() for k, v in got.items()}
    for key in ("emulated", *hostrun.ORDERS):
        for k in p:
            np.testing.assert_array_equal(runs[key, True][k], runs[key, False][k], err_msg=f"{key} {k}")


#: the inputs each attention kernel reads only as bf16 products' operands (not D's dO: dq sums D from it)
OPERANDS = {"AttentionForward": "q k v", "AttentionGradQ": "q k v", "AttentionGradV": "q k dO",
            "AttentionGradK": "q k v dO", "AttentionGradKV": "q k v dO"}


def _operands(T, rng) -> dict:
    """Inputs of every attention op over ``T``, bfloat16 values (low halves zero); O, L and D computed."""
    from circuitgrad.backends.gpu import attention
    x = {n: blas.round_bf16(np, rng.normal(size=T.shape).astype(np.float32)) for n in ("q", "k", "v", "dO")}
    x["O"], x["L"] = attention.AttentionForward(T, True, 0.25, mma="bf16").evaluate(x["q"], x["k"], x["v"])
    _, x["D"] = attention.AttentionGradQ(T, True, 0.25, mma="bf16").evaluate(*(x[n] for n in "q k v O L dO".split()))
    return x


def _run_kernel(cp, op, src: str, name: str, warps: int, args) -> list[np.ndarray]:
    """``op``'s kernel ``name`` in ``src`` (``warps`` warps, 128 threads a block) on ``args`` in ``cp``'s
    memory: its outputs, fetched."""
    outs = [cp.empty(op.T.shape[:-1] if n in "LD" else op.T.shape, dtype=np.float32) for n in op.outs.split()]
    cp.RawKernel(src, name)((-(-warps * 32 // 128),), (128,), (*args, *outs))
    return [o.get() for o in outs]


@pytest.mark.parametrize("cls", list(OPERANDS))
def test_an_operand_is_read_only_as_it_rounds(cls, rng):
    """Each input ``Attention.operands`` names is read only as a bfloat16 product operand: low halves under
    0x8000 added to bfloat16 values round away, and change no bit of the op's outputs (its NumPy reference, and
    its kernel on the host); the same added to dO, which dq's ``D = rowsum(dO∘O)`` reads in float32, does."""
    from circuitgrad.backends.gpu import attention, attention_mma
    T = cg.NdArrayType((1, 2, 32, 16), cg.float32)
    op = getattr(attention, cls)(T, True, 0.25, mma="bf16")
    assert op.bf16_inputs() == set(OPERANDS[cls].split())
    x = _operands(T, rng)

    def fuzz(a):            # the same bfloat16 value, float32 bits below it
        low = rng.integers(1, 0x8000, size=a.shape, dtype=np.uint32)
        return (a.view(np.uint32) | low).view(np.float32)
    names = op.ins.split()
    changed = {n: {**x, n: fuzz(x[n])} for n in names if n in ("q", "k", "v", "dO")}
    want = op.evaluate(*(x[n] for n in names))
    src, warps, _ = attention_mma.source(op, "k")

    def kernel(xs):
        with hostrun.device() as cp:
            return _run_kernel(cp, op, src, "k", warps, [cp.asarray(xs[n]) for n in names])
    on_host = kernel(x) if ok else None
    for n, xs in changed.items():
        same = [op.evaluate(*(xs[m] for m in names))] + ([kernel(xs)] if ok else [])
        base = [want] + ([on_host] if ok else [])
        diff = [any(not np.array_equal(a, b) for a, b in zip(g, w)) for g, w in zip(same, base)]
        assert diff == [n not in op.bf16_inputs()] * len(diff), (n, diff)
    assert ("dO" in changed and "dO" not in op.bf16_inputs()) == (cls == "AttentionGradQ")


def stored_against_plain(cp, cls: str, dh: int, rng) -> tuple[list, list]:
    """A bf16 attention kernel (``cls``, causal softmax over ``(1, 2, 32, dh)``) reading its bfloat16-stored
    operands as bits, in ``cp``'s memory (the host mode's or a device's): its outputs from aligned operands, then
    with each stored operand alone 2 bytes past 8-byte alignment (the loads' fallback); and the outputs of the
    same kernel reading the operands' float32 values and rounding them."""
    from circuitgrad.backends.gpu import attention, attention_mma
    T = cg.NdArrayType((1, 2, 32, dh), cg.float32)
    op = getattr(attention, cls)(T, True, 0.25, mma="bf16")
    x = _operands(T, rng)
    bits = {n: storage.to_bf16_bits(x[n]) for n in ("q", "k", "v", "dO")}        # the values as stored
    names, narrow = op.ins.split(), op.bf16_inputs()
    assert narrow == set(OPERANDS[cls].split())
    plain_src, warps, _ = attention_mma.source(op, "plain")
    stored_src, _, _ = attention_mma.source(op, "stored", narrow=narrow)
    assert re.search(r"cg_ld[48]p\(x, &", stored_src) and not re.search(r"cg_ld[48]p\(x, &", plain_src)
    assert ("cg_ld8p(x, &" in stored_src) == (dh % 32 == 0)         # eight values of a row, one 16-byte load

    def run(src, name, args):
        return _run_kernel(cp, op, src, name, warps, args)

    def shifted(b):                 # two bytes past 8-byte alignment: the kernel's loads take the fallback
        buf = cp.zeros(b.size + 1, dtype=b.dtype)
        buf[1:] = cp.asarray(b.ravel())
        return buf[1:].reshape(b.shape)
    want = run(plain_src, "plain", [cp.asarray(x[n]) for n in names])
    aligned = [cp.asarray(bits[n] if n in narrow else x[n]) for n in names]
    assert all(a.data.ptr % 16 == 0 for a in aligned)
    got = [run(stored_src, "stored", aligned)]
    for i, n in enumerate(names):
        if n in narrow:
            got.append(run(stored_src, "stored", [shifted(bits[n]) if j == i else a for j, a in enumerate(aligned)]))
    assert len(got) == 1 + len(narrow)
    return got, want


@needs_host
@pytest.mark.parametrize("dh", [16, 32, 48, 64])
@pytest.mark.parametrize("cls", list(OPERANDS))
def test_the_kernels_read_stored_bits_as_the_pairs_they_would_round(cls, dh, rng):
    """A bf16 kernel reading its operands as bfloat16 bits gives the bits of the same kernel reading their
    float32 values and rounding them: from 16- and 8-byte loads, and one by one with an operand 2 bytes off
    8-byte alignment. Products over dh read eight values of a row at a time where dh is a multiple of 32, else
    four; the weights' products read v (dO, q, k) eight at a time at dh = 64, four at dh = 32, one by one at 16
    and 48."""
    with hostrun.device() as cp:
        got, want = stored_against_plain(cp, cls, dh, rng)
    for g in got:
        for a, b in zip(g, want):
            np.testing.assert_array_equal(a, b)


@needs_host
def test_stored_rows_off_a_multiple_of_eight_take_8_byte_loads(rng):
    """A stored operand whose rows start four elements past a multiple of eight (row stride dh + 4) is read in
    8-byte loads (``vec16`` false: a 16-byte load of its rows would be misaligned, which the host mode
    checks), with the same bits as the kernel reading float32 values."""
    from circuitgrad.backends.gpu import attention, attention_mma
    dh = 64
    T = cg.NdArrayType((1, 2, 32, dh), cg.float32)
    op = attention.AttentionForward(T, True, 0.25, mma="bf16")
    x = _operands(T, rng)
    rs = dh + 4
    src, warps, _ = attention_mma.source(op, "s", strides={"k": (2 * 32 * rs, 32 * rs, rs, 1)}, narrow=frozenset("qkv"))
    assert "const bool vec16 = vec && false;" in src
    plain, _, _ = attention_mma.source(op, "p")
    with hostrun.device() as cp:
        kb = np.zeros((1, 2, 32, rs), np.uint16)
        kb[..., :dh] = storage.to_bf16_bits(x["k"])
        want = _run_kernel(cp, op, plain, "p", warps, [cp.asarray(x[n]) for n in "qkv"])
        got = _run_kernel(cp, op, src, "s", warps, [cp.asarray(storage.to_bf16_bits(x["q"])), cp.asarray(kb.ravel()),
                                                    cp.asarray(storage.to_bf16_bits(x["v"]))])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_kernels_reading_stored_operands_compile_for_sm90(tmp_path):
    """At a real head size the kernels that read q, k, v (and dO) as bfloat16 bits compile with no spills, read
    them 16 bytes (eight values) at a time (``ld.global.v4.u32``) and convert a small part of what the float32 readers do (the
    weights and, in dq, dO: the products' other operands)."""
    from circuitgrad.backends.gpu import attention, attention_mma
    T = cg.NdArrayType((4, 6, 256, 64), cg.float32)
    strided = {n: (256 * 384, 64, 384, 1) for n in ("q", "k", "v")}      # a [B, S, H, dh] projection
    ptx = {}
    for narrowed in (False, True):
        code = ""
        for cls in (attention.AttentionForward, attention.AttentionGradQ, attention.AttentionGradKV):
            for norm in attention.NORMS:
                op = cls(T, True, 0.125, norm=norm, eps=1e-6 if norm == "spherical" else 0.0, mma="bf16")
                code += attention_mma.source(op, f"k_{norm}_{cls.__name__}", strided,
                                             op.bf16_inputs() if narrowed else frozenset())[0]
        spills = ptxas_spills(code, tmp_path)
        assert len(spills) == 6 and set(spills.values()) == {0}, spills
        ptx[narrowed] = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-o", "-", str(tmp_path / "att.cu")],
                                       capture_output=True, text=True, check=True).stdout
    assert ptx[True].count("ld.global.v4.u32") >= 6 * 2 and "ld.global.v4.u32" not in ptx[False]
    assert ptx[True].count("cvt.rn.bf16x2.f32") * 4 < ptx[False].count("cvt.rn.bf16x2.f32")


_MISALIGNED = """
import numpy as np
import circuitgrad as cg
from circuitgrad.backends.gpu import attention, attention_mma, storage
from circuitgrad.backends.gpu.host import run as hostrun
T = cg.NdArrayType((1, 1, 16, 16), cg.float32)
op = attention.AttentionForward(T, True, 0.25, mma="bf16")
src = attention_mma.source(op, "f", narrow=op.bf16_inputs())[0]
assert src.count("const bool vec = ((") == 1
src = src.replace("const bool vec = ((", "const bool vec = true || ((")      # the alignment check left out
bits = storage.to_bf16_bits(np.ones(T.shape, np.float32))
with hostrun.device() as cp:
    buf = cp.zeros(bits.size + 1, dtype=np.uint16)
    buf[1:] = cp.asarray(bits.ravel())
    q = buf[1:].reshape(T.shape)
    O, L = cp.empty(T.shape, dtype=np.float32), cp.empty(T.shape[:-1], dtype=np.float32)
    cp.RawKernel(src, "f")((1,), (128,), (q, cp.asarray(bits), cp.asarray(bits), O, L))
print("ran")
"""


@needs_host
def test_the_host_mode_refuses_a_misaligned_8_byte_load(tmp_path):
    """Four stored values are one 8-byte load only where the run-time check finds them aligned: a kernel that
    skipped the check would fault on a device, and the host mode aborts (in a fresh process)."""
    r = subprocess.run([sys.executable, "-c", _MISALIGNED], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode != 0 and "ran" not in r.stdout
    assert "circuitgrad hostrun: an 8-byte load of p from 0x" in r.stderr, r.stderr[-2000:]
    assert ", not 8-byte aligned: on a device, a misaligned address error\n" in r.stderr


def _tanh_product(a, w):
    t = ops.tanh(a)
    return t @ w, ops.exp(t)


def _halved_attention(q, k, v):
    h = q * 0.5
    return ops.attention(h, k * 0.5, v * 0.5, causal=True), ops.tanh(h)


@pytest.mark.parametrize("backend", ["cupy-emulated", "cupy"])
@pytest.mark.parametrize("fn, shapes", [(_tanh_product, [(4, 12), (12, 5)]), (_halved_attention, [(1, 2, 32, 16)] * 3)],
                         ids=["product", "attention"])
def test_a_stored_value_read_by_the_kernel_that_makes_it_is_its_float32_there(fn, shapes, backend, monkeypatch, rng):
    """A value stored as bfloat16 that the kernel making it also reads (``exp(tanh(a))`` beside ``tanh(a) @ w``;
    ``tanh(q/2)`` beside attention of ``q/2``) is read there as the kernel computed it, unrounded: the function's
    outputs are the bits of the function that stores nothing narrow, emulated and on the host."""
    if backend == "cupy" and not ok:
        pytest.skip(why)
    types = [cg.NdArrayType(s, cg.float32) for s in shapes]
    prog = simplify(cg.schedule(cg.trace(fn, types, name="f")))
    xs = [rng.normal(size=s).astype(np.float32) for s in shapes]
    (f, _), outs = _with_and_without_stored(prog, xs, backend, monkeypatch)
    assert len(f.plan.narrow) == (2 if fn is _tanh_product else 3)     # tanh(a)'s rounded copy and w's; q, k, v
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
