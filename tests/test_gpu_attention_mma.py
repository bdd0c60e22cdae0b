"""Streaming attention on the tensor cores (:mod:`circuitgrad.backends.gpu.attention_mma`): the float32
kernels (dk and dv in one but under 3xTF32) take a warp per 16 rows and multiply with ``mma.sync``, their operands rounded as the unfused
definition's products round them under ``precision="tf32"`` or ``"bf16"``, or float32 products as 3xTF32
under ``"fp32"`` when asked (``attention_3xtf32=True``). Checked here: where they apply; the NumPy
reference of what they compute against the unfused definition at the same precision; the generated CUDA C run
on the host (both thread orders, and by ``host.check``) against that reference; a GPT step; sm_90 compilation.

Tolerances come from the arithmetic: a product operand computed by two code paths (a weight ``exp(s − L)``, a
score gradient) may round to neighbouring TF32 (bfloat16) values, one unit ``u = 2⁻¹⁰`` (``2⁻⁷``) apart relative
to it, so an output may differ by ``u·(|X||Y|)`` of its product, plus float32 accumulation in another order."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys

import numpy as np
import pytest

import _attention
from conftest import ptxas_spills

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import attention, attention_mma, blas
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.backends.gpu.runtime import build
from circuitgrad.backends.gpu.host.emulate import emulated_kernel

ok, why = hostrun.available()
#: the unit an operand's rounding may differ by, relative to it: TF32, bfloat16; under fp32 (3xTF32) the part
#: of a product the split leaves out (the remainder's own TF32 rounding and the remainders' product)
UNIT = {"tf32": 2.0 ** -10, "bf16": 2.0 ** -7, "3xtf32": 2.0 ** -21}
#: the tensor-core products tested: 3xTF32 is float32 precision with ``attention_3xtf32=True``
PRECISIONS = ["3xtf32", "tf32", "bf16"]


def _options(precision: str) -> dict:
    """The compile options of a tested ``precision``."""
    return dict(precision="fp32", attention_3xtf32=True) if precision == "3xtf32" else dict(precision=precision)


def _build(prog, names, precision: str, **kw):
    """``prog`` on ``cupy-emulated`` at ``precision`` (its kernels by their NumPy reference)."""
    o = _options(precision)
    return build(prog, names, "fb", np, emulated_kernel, None, o["precision"],
                 attention_3xtf32=o.get("attention_3xtf32", False), **kw)
CASES = [(kind, causal) for kind in attention.NORMS for causal in (True, False)]
#: the kernels of forward and backward at each tested precision: dk and dv in one but under 3xTF32
_KERNELS = {p: ["AttentionForward", "AttentionGradQ"] + (["AttentionGradV", "AttentionGradK"] if p == "3xtf32"
                                                         else ["AttentionGradKV"]) for p in PRECISIONS}


def _program(kind: str, causal: bool, T: cg.NdArrayType):
    """``O, dq, dk, dv`` of attention over ``q, k, v`` and the output's cotangent ``do``."""
    return _attention.step(kind, T, causal)


def _tolerance(kind: str, causal: bool, precision: str, q, k, v, do) -> list[np.ndarray]:
    """How far each output (``O, dq, dk, dv``) may be from another evaluation at ``precision``, from the
    definition in float64 (``c = 1/√dh``, masked entries 0): a product operand computed by two code paths rounds
    to neighbouring values (one unit ``u`` of it: ``u·|X||Y|`` of the product ``X Y``), and ``D`` is
    ``rowsum(dO∘O)`` in the kernels but ``rowsum(dA∘A)`` in the definition, each from rounded operands (up to
    ``4u·Σ|dO|(|P||v|)`` a row, which the score gradient carries through ``c·P``); plus float32 accumulation in
    another order (``2⁻¹⁶`` of the product). The scores themselves differ by up to ``E = (2u + dh·2⁻²⁴)·c·|q||k|ᵀ``
    (each adds dh terms), which is not one unit of a score that cancels: the weights carry it (``|δP|``, to first order) into every
    output, and through the score gradient into dq and dk."""
    q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
    c, u = 1 / np.sqrt(q.shape[-1]), UNIT[precision]
    S = q.shape[-2]
    keep = np.tril(np.ones((S, S), bool)) if causal else np.ones((S, S), bool)
    s = np.where(keep, c * q @ np.swapaxes(k, -1, -2), 0)
    dA = np.where(keep, do @ np.swapaxes(v, -1, -2), 0)
    a = np.abs
    T = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    E = np.where(keep, (2 * u + q.shape[-1] * 2.0 ** -24) * c * a(q) @ T(a(k)), 0)   # the scores' difference
    rows = lambda x: x.sum(-1, keepdims=True)  # noqa: E731
    if kind == "softmax":
        e = np.where(keep, np.exp(s - np.where(keep, s, -np.inf).max(-1, keepdims=True)), 0)
        P = e / e.sum(-1, keepdims=True)
        D = rows(dA * P)
        ds, carry = c * P * (dA - D), c * P
        dP = P * (E + rows(P * E))                                           # P = exp(s − L)
        dds = c * (dP * a(dA - D) + P * rows(a(dA) * dP))
    else:
        r = 1 / np.sqrt((s * s).sum(-1, keepdims=True) + ops.ATTENTION_EPS)
        P = s * r
        D = rows(dA * P)
        ds, carry = c * r * (dA - P * D), c * r * a(P)
        dr = r ** 3 * rows(a(s) * E)                                         # r = (Σ s² + ε)^(−1/2)
        dP = r * E + a(s) * dr
        dds = c * (dr * a(dA - P * D) + r * (dP * a(D) + a(P) * rows(a(dA) * dP)))
    flips = [a(P) @ a(v), a(ds) @ a(k), T(a(ds)) @ a(q), T(a(P)) @ a(do)]
    dD = 4 * u * (a(do) * flips[0]).sum(-1, keepdims=True)
    via_D = [0, (carry * dD) @ a(k), T(carry * dD) @ a(q), 0]
    via_s = [dP @ a(v), dds @ a(k), T(dds) @ a(q), T(dP) @ a(do)]
    return [(2 * u + 2.0 ** -16) * f + w + e for f, w, e in zip(flips, via_D, via_s)]


def _inputs(T, rng):
    return [rng.normal(size=T.shape).astype(np.float32) for _ in range(4)]


@pytest.mark.parametrize("shape, dtype, precision, want", [
    ((2, 4, 32, 64), cg.float32, "tf32", "tf32"),
    ((2, 4, 32, 64), cg.float32, "bf16", "bf16"),
    ((2, 4, 32, 64), cg.float32, "fp32", ""),          # float32 products on the CUDA cores by default
    ((2, 4, 32, 64), cg.float32, "3xtf32", "3xtf32"),  # or as three TF32 ones, when asked
    ((2, 4, 32, 64), cg.float64, "tf32", ""),          # float64 has no tensor-core product here
    ((2, 4, 32, 64), cg.float64, "fp32", ""),
    ((2, 4, 24, 64), cg.float32, "tf32", ""),          # S not a multiple of 16: no whole tiles of rows
    ((2, 4, 32, 24), cg.float32, "tf32", ""),          # dh not a multiple of 16
    ((1, 16, 16), cg.float32, "bf16", "bf16"),
])
def test_tensor_cores_where_the_precision_and_the_shape_allow(shape, dtype, precision, want):
    assert attention.tensor_cores(cg.NdArrayType(shape, dtype), precision) == want


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind, causal", CASES)
def test_the_fused_kernels_multiply_what_the_definition_multiplies(kind, causal, precision, rng):
    """The NumPy reference of the tensor-core kernels (``Attention.evaluate`` with ``mma``) against the unfused
    definition at the same precision (cuBLAS's emulated products, operands rounded; float32 products under
    fp32): equal within one rounding unit of the weights."""
    T = cg.NdArrayType((2, 2, 32, 16), cg.float32)
    prog, xs = _program(kind, causal, T), _inputs(T, rng)
    names = ["q", "k", "v", "do"]
    fused = _build(prog, names, precision)
    assert {a.op.mma for a in fused.program.instrs if isinstance(a.op, attention.OPS)} == {attention.MMA[precision]}
    unfused = _build(prog, names, precision, fuse_attention=False)
    got, want = fused.run(*xs), unfused.run(*xs)
    for g, w, tol in zip(got, want, _tolerance(kind, causal, precision, *xs)):
        assert np.all(np.abs(g - w) <= tol), float(np.max(np.abs(g - w) - tol))


def test_the_reference_rounds_each_product_operand():
    """A mutation check of the reference: with no rounding the result moves by more than float32 rounding."""
    T = cg.NdArrayType((1, 1, 16, 8), cg.float32)
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=T.shape).astype(np.float32) for _ in range(3))
    fp32 = attention.AttentionForward(T, True, 0.5)
    tf32 = attention.AttentionForward(T, True, 0.5, mma="tf32")
    (o32, _), (o_tc, _) = fp32.evaluate(q, k, v), tf32.evaluate(q, k, v)
    assert np.max(np.abs(o32 - o_tc)) > 1e-4
    # online softmax in base 2: the weights 2^(a·c₂ − M) at a whole power of two M ≥ max a·c₂, rounded as they
    # are, and the sum divided by theirs at the end
    a = blas.round_tf32(np, q).astype(np.float64) @ np.swapaxes(blas.round_tf32(np, k), -1, -2)
    a = np.where(np.tril(np.ones((16, 16), bool)), a, -np.inf)
    c2 = 0.5 * np.log2(np.e)
    e = np.exp2(a * c2 - np.ceil(a.max(-1, keepdims=True) * c2)).astype(np.float32)
    want = (blas.round_tf32(np, e) @ blas.round_tf32(np, v)) / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(o_tc, want, rtol=0, atol=1e-6)
    unnormalised = blas.round_tf32(np, (e / e.sum(-1, keepdims=True)).astype(np.float32)) @ blas.round_tf32(np, v)
    assert np.max(np.abs(unnormalised - o_tc)) > 1e-5        # rounding the normalised weights is another sum


def test_3xtf32_products_are_float32_products():
    """Three TF32 products of each operand's TF32 part and remainder: within ``2⁻²¹`` of the terms of the exact
    product, as float32's own product is; leaving out a cross term is ``2⁻¹¹`` away."""
    T = cg.NdArrayType((1, 1, 16, 64), cg.float32)
    rng = np.random.default_rng(3)
    a, b = (rng.normal(size=(16, 64)).astype(np.float32) for _ in range(2))
    op = attention.AttentionForward(T, False, 0.125, mma="3xtf32")
    exact, terms = a.astype(np.float64) @ b.T.astype(np.float64), np.abs(a).astype(np.float64) @ np.abs(b.T)
    got = op._mm(a, b.T)
    assert np.all(np.abs(got - exact) <= (2.0 ** -21 + 64 * 2.0 ** -24) * terms)
    (ah, al), (bh, bl) = attention._split(a), attention._split(np.ascontiguousarray(b.T))
    assert np.all(al == blas.round_tf32(np, al)) and np.all(ah == blas.round_tf32(np, a))
    assert np.all(np.abs(a.astype(np.float64) - ah - al) <= 2.0 ** -21 * np.abs(a))
    two = ah @ bh + ah @ bl                          # a cross term left out
    assert np.max(np.abs(two - exact) / terms) > 2.0 ** -14


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind, causal", CASES)
def test_the_generated_kernels_compute_their_reference(kind, causal, precision, rng):
    """The kernels' CUDA C (dk and dv in one but under 3xTF32), compiled for the host and run a warp at a time (lanes in both orders, each
    ``mma.sync`` gathered into whole tiles by PTX's fragment layout), against their NumPy reference (the GPT
    step below reads strided views: ``[B, S, H, dh]`` projections as ``[B, H, S, dh]``)."""
    T = cg.NdArrayType((2, 3, 32, 32), cg.float32)
    prog, xs = _program(kind, causal, T), _inputs(T, rng)
    names = ["q", "k", "v", "do"]
    want = _build(prog, names, precision).run(*xs)
    tols = _tolerance(kind, causal, precision, *xs)
    for order in hostrun.ORDERS:
        with hostrun.device(order) as cp:
            f = gpu.compile_function(prog, names, "fb", **_options(precision))
            ks = [k for k in f.kernels.values() if k.ops[0].startswith("Attention")]
            assert [k.ops[0] for k in ks] == _KERNELS[precision]
            assert all(k.lanes == 32 and k.n == 2 * 3 * 2 and "mma.sync" in k.source for k in ks)
            got = [o.get() for o in f.run(*[cp.asarray(x) for x in xs])]
        for g, w, tol in zip(got, want, tols):
            assert np.all(np.abs(g - w) <= tol), (order, float(np.max(np.abs(g - w) - tol)))
            assert np.max(np.abs(g - w)) < 1e-3 * np.max(np.abs(w))      # not all of the allowance


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dh", [64, 48])
def test_the_kernels_at_the_head_sizes_of_real_models(dh, precision, rng):
    """dh = 64 (GPT-2's) takes every loop a real model does (the B loads of the weights' product in several
    16-byte groups); dh = 48 (dh/8 not a multiple of four) loads those one by one. Each kernel
    against its reference, causal softmax."""
    T = cg.NdArrayType((1, 2, 32, dh), cg.float32)
    prog, xs = _program("softmax", True, T), _inputs(T, rng)
    names = ["q", "k", "v", "do"]
    want = _build(prog, names, precision).run(*xs)
    with hostrun.device() as cp:
        f = gpu.compile_function(prog, names, "fb", **_options(precision))
        ks = [k for k in f.kernels.values() if k.ops[0].startswith("Attention")]
        assert [k.ops[0] for k in ks] == _KERNELS[precision] and all("mma.sync" in k.source for k in ks)
        got = [o.get() for o in f.run(*[cp.asarray(x) for x in xs])]
    for g, w, tol in zip(got, want, _tolerance("softmax", True, precision, *xs)):
        assert np.all(np.abs(g - w) <= tol), float(np.max(np.abs(g - w) - tol))
        assert np.max(np.abs(g - w)) < 1e-3 * np.max(np.abs(w))


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("precision", PRECISIONS)
def test_scores_far_below_zero(precision):
    """Every score about −400 (``exp`` of it is 0 in float32): the running maximum starts at the lowest float,
    not at 0, so the row statistic stays finite and the weights uniform over the keys a row sees."""
    T = cg.NdArrayType((1, 1, 32, 16), cg.float32)
    op = attention.AttentionForward(T, True, 0.25, mma=precision)
    q = np.full(T.shape, 10.0, np.float32)
    k, v = -q, np.random.default_rng(4).normal(size=T.shape).astype(np.float32)
    want, L = op.evaluate(q, k, v)
    assert np.all(np.isfinite(want)) and np.allclose(L, -400 + np.log(np.arange(1, 33)))
    src = attention_mma.source(op, "low")[0]
    with hostrun.device() as cp:
        O, Lg = cp.empty(T.shape, dtype=np.float32), cp.empty(T.shape[:-1], dtype=np.float32)
        cp.RawKernel(src, "low")((1,), (32 * attention_mma.WARPS,), (cp.asarray(q), cp.asarray(k), cp.asarray(v), O, Lg))
        got, gotL = O.get(), Lg.get()
    assert np.all(np.isfinite(got)) and np.max(np.abs(gotL - L)) <= 4 * 2.0 ** -24 * 400
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(v))


def _run_alone(tmp_path, src: str, name: str, q, k, v, stat: bool = False) -> tuple:
    """A forward kernel's ``src`` run on the host in a fresh process (a host-mode abort ends that process):
    the process, and its output ``O`` if it ran (and its row statistic ``L`` when ``stat``)."""
    (tmp_path / "k.cu").write_text(src)
    np.savez(tmp_path / "in.npz", q=q, k=k, v=v)
    code = f"""
import numpy as np
from circuitgrad.backends.gpu.host import run as hostrun
src, x = open({str(tmp_path / "k.cu")!r}).read(), np.load({str(tmp_path / "in.npz")!r})
with hostrun.device() as cp:
    O, L = cp.empty(x["q"].shape, dtype=np.float32), cp.empty(x["q"].shape[:-1], dtype=np.float32)
    cp.RawKernel(src, {name!r})((1,), (128,), (*(cp.asarray(x[n]) for n in "qkv"), O, L))
    np.save({str(tmp_path / "O.npy")!r}, O.get())
    np.save({str(tmp_path / "L.npy")!r}, L.get())
"""
    (tmp_path / "O.npy").unlink(missing_ok=True)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    out = [np.load(tmp_path / f"{n}.npy") if r.returncode == 0 else None for n in ("O", "L")]
    return (r, *out) if stat else (r, out[0])


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("mma, old, count", [
    ("3xtf32", "        CG_QUAD(red[I][1], cg_add);\n", 2),  # each step's, in the loops over whole and diagonal steps
    ("tf32", " CG_QUAD(st[I][1][1], cg_add);", 1),            # base 2: the lanes' sums merged once, after the loop
])
def test_the_host_mode_finds_a_quad_whose_lanes_disagree(tmp_path, mma, old, count):
    """Each lane of a quad keeps its own copy of its rows' statistics, which the quad's reductions leave equal
    (a device would compute with the copies as they are): the host mode checks the copies' bits and aborts,
    naming the statistic, when a reduction is left out."""
    T = cg.NdArrayType((1, 1, 32, 16), cg.float32)
    src = attention_mma.source(attention.AttentionForward(T, True, 0.25, mma=mma), "quad")[0]
    q, k, v = (np.random.default_rng(i).normal(size=T.shape).astype(np.float32) for i in range(3))
    assert _run_alone(tmp_path, src, "quad", q, k, v)[0].returncode == 0
    assert src.count(old) == count
    r, _ = _run_alone(tmp_path, src.replace(old, ""), "quad", q, k, v)
    assert r.returncode != 0 and "circuitgrad hostrun: the lanes of quad 0 hold different Lr[I][1]: " in r.stderr, \
        r.stderr[-2000:]


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("mma", ["tf32", "bf16"])
def test_nans_of_both_signs_in_a_row_are_nan_not_a_quad_disagreeing(mma, tmp_path):
    """A row whose scores hold NaNs of both signs: the sum of two NaNs takes one's sign (on x86 the first's), so
    a quad's lanes, adding in their butterfly's orders, may keep NaNs of different signs. The host mode's check
    that a quad's copies agree takes any two NaNs as the same (a device computes on with either): the rows that
    see both keys are NaN, the others as without them."""
    T = cg.NdArrayType((1, 1, 32, 16), cg.float32)
    src = attention_mma.source(attention.AttentionForward(T, True, 0.25, mma=mma), "signs")[0]
    q, k, v = (np.random.default_rng(i).normal(size=T.shape).astype(np.float32) for i in range(3))
    k[0, 0, 5, 3], k[0, 0, 9, 3] = -np.nan, np.nan
    assert np.signbit(k[0, 0, 5, 3]) and not np.signbit(k[0, 0, 9, 3])
    r, got = _run_alone(tmp_path, src, "signs", q, k, v)
    assert r.returncode == 0, r.stderr[-2000:]
    assert np.all(np.isnan(got[0, 0, 5:])) and not np.any(np.isnan(got[0, 0, :5]))


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("precision", PRECISIONS)
def test_16_byte_loads_and_their_fallback_give_the_same_bits(precision, rng):
    """Rows are read four elements at a time, as one 16-byte load when the operands are 16-byte aligned, else one
    by one: operands at a 4-byte offset take the fallback and give the same bits (the host mode checks every
    16-byte load's alignment)."""
    T = cg.NdArrayType((1, 2, 32, 32), cg.float32)
    prog, xs = _program("softmax", True, T), _inputs(T, rng)
    with hostrun.device() as cp:
        f = gpu.compile_function(prog, ["q", "k", "v", "do"], "fb", **_options(precision))
        ks = [k for k in f.kernels.values() if k.ops[0].startswith("Attention")]
        assert [k.ops[0] for k in ks] == _KERNELS[precision] and all("const bool vec = ((" in k.source for k in ks)
        same_bits_shifted(cp, f, xs)


def same_bits_shifted(cp, f, xs) -> None:
    """``f`` on ``xs`` 16-byte aligned (16-byte loads) and 4 bytes past (loads one by one): the same bits."""
    shifted = []
    for x in xs:
        buf = cp.zeros(x.size + 1, dtype=x.dtype)
        buf[1:] = cp.asarray(x.ravel())
        shifted.append(buf[1:].reshape(x.shape))
    aligned = [cp.asarray(x) for x in xs]
    assert all(a.data.ptr % 16 == 0 for a in aligned) and all(b.data.ptr % 16 == 4 for b in shifted)
    got = [[o.get() for o in f.run(*args)] for args in (aligned, shifted)]
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)


#: a forward kernel's source edited (old text, new text), or its generator patched (a module attribute)
MUTATIONS = {
    "A fragments with the middle registers swapped (rows 8-15 and a pair's second column crossed)":
        ("tf32", "qa[I][2 * m][1] = cg_tf32(y[0]); qa[I][2 * m][2] = cg_tf32(x[1]);",
         "qa[I][2 * m][1] = cg_tf32(x[1]); qa[I][2 * m][2] = cg_tf32(y[0]);"),
    "a step's maximum of rows g + 8 left to each lane (no quad reduction)": ("tf32", " CG_QUAD(mx[I][1], fmaxf);", ""),
    "each step's maximum of rows g + 8 left to each lane (3xTF32)":
        ("3xtf32", "        CG_QUAD(red[I][1], fmaxf);\n", ""),
    "a quad's butterfly one step short (device and host)": ("tf32", "for (int cg_m = 1; cg_m <= 2; cg_m <<= 1)",
                                                            "for (int cg_m = 1; cg_m <= 1; cg_m <<= 1)"),
    "weights in the scores' register order (A_OF_C the identity)": ("tf32", "A_OF_C", (0, 1, 2, 3)),
    "bf16 A registers of rows g + 8 and of columns 2t + 8 swapped":
        ("bf16", "qa[I][m][1] = cg_pack_rn(y[0], y[1]); qa[I][m][2] = cg_pack_rn(x[2], x[3]);",
         "qa[I][m][2] = cg_pack_rn(y[0], y[1]); qa[I][m][1] = cg_pack_rn(x[2], x[3]);"),
    "bf16 B operand's key 2t + 9 read from key 2t + 8": ("bf16", 'y[1] = {V_[(CG_ROW(jt * 16LL + 8 + 2 * t + 1, 32LL, "v"))',
                                                          'y[1] = {V_[(CG_ROW(jt * 16LL + 8 + 2 * t, 32LL, "v"))'),
    "keys read past S in the last tile of queries": ("tf32", "jt < (r0 + 16LL) / 8LL; ++jt) {      // one pass",
                                                     "jt < (r0 + 24LL) / 8LL; ++jt) {      // one pass"),
    "bf16 weights of keys 2t + 8 and 2t + 9 crossed": ("bf16", "pa[I][2] = cg_pack_rn(lo, hi);", "pa[I][2] = cg_pack_rn(hi, lo);"),
}

#: the mutations of text that both loops over the keys have (the diagonal step's, and the steps seen whole)
IN_BOTH_LOOPS = {"each step's maximum of rows g + 8 left to each lane (3xTF32)",
                 "a step's maximum of rows g + 8 left to each lane (no quad reduction)",
                 "bf16 B operand's key 2t + 9 read from key 2t + 8", "bf16 weights of keys 2t + 8 and 2t + 9 crossed"}


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("mutation, precision", [(None, "tf32"), (None, "bf16"), *((m, None) for m in MUTATIONS)])
def test_a_wrong_fragment_layout_or_quad_reduction_fails(mutation, precision, monkeypatch, tmp_path):
    """The host's ``mma.sync`` reads the lanes' registers by PTX's layout and its quad reductions step as the
    device's shuffles: the kernel as generated computes its reference within the rounding bound
    (:func:`_tolerance`); each mutation (of the kernel, or of the
    quad's ``__shfl_xor_sync`` butterfly) gives wrong outputs, or leaves a quad's copies of a statistic
    differing, which the host mode aborts on (in a fresh process)."""
    precision, old, new = MUTATIONS.get(mutation, (precision, None, None))
    T = cg.NdArrayType((1, 1, 32, 16), cg.float32)
    op = attention.AttentionForward(T, True, 0.25, mma=precision)
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=T.shape).astype(np.float32) for _ in range(3))
    want, _ = op.evaluate(q, k, v)
    if old == "A_OF_C":
        monkeypatch.setattr(attention_mma, "A_OF_C", new)
    src = attention_mma.source(op, "lay")[0]
    if old != "A_OF_C" and old is not None:     # in every loop that has it (the diagonal's, the others')
        assert src.count(old) == (2 if mutation in IN_BOTH_LOOPS else 1)
        src = src.replace(old, new)
    r, got = _run_alone(tmp_path, src, "lay", q, k, v)
    tol = _tolerance("softmax", True, precision, q, k, v, v)[0]     # scores summed in another order than BLAS's
    if mutation is None:
        assert r.returncode == 0 and np.all(np.abs(got - want) <= tol), r.stderr[-2000:]
    elif got is None:         # the host mode found a quad's copies of a statistic differing, or a row past S read
        assert ("circuitgrad hostrun: the lanes of quad " in r.stderr
                or "circuitgrad hostrun: row 32 of k, which has 32 rows: on a device, an access outside the operand"
                in r.stderr), r.stderr[-2000:]
    else:
        assert np.max(np.abs(got - want) - tol) > 1e-2


#: inputs whose rows move their power of two after their first steps (causal, ``[1, 1, 32, 16]``, ``c = 1/4``):
#: keys that score ``a·c₂ = jump``, the others 0
JUMPS = {
    "keys 16-31 seen by the second tile's rows": [(slice(16, 32), 7 * 1.4426950408889634)],   # s = 7
    "keys 24-31 seen by its rows g + 8 alone": [(slice(24, 32), 200.0)],
    "key 5, which rows 0-4 do not see": [(slice(5, 6), 200.0)],
    "key 5, then key 20 (rows 16-19 fall back to 0 as 20-31 move)": [(slice(5, 6), 200.0), (slice(20, 21), 260.0)],
}


def rescaling_case(precision: str, case: str = "keys 16-31 seen by the second tile's rows"):
    """``(op, q, k, v)`` of a :data:`JUMPS` case."""
    T = cg.NdArrayType((1, 1, 32, 16), cg.float32)
    op = attention.AttentionForward(T, True, 0.25, mma=precision)
    q = np.ones(T.shape, np.float32)
    k = np.zeros(T.shape, np.float32)
    for keys, jump in JUMPS[case]:
        k[..., keys, :] = jump / (float(op.c2) * 16)
    return op, q, k, np.random.default_rng(6).normal(size=T.shape).astype(np.float32)


#: mutations of the online softmax's rescaling (in both loops): the text and what it becomes
RESCALING = {
    "the output not rescaled where a row's power of two moves": ("acc[I][nt][2 * h] *= f; acc[I][nt][2 * h + 1] *= f;", ""),
    "the sum not rescaled where a row's power of two moves": ("st[I][h][1] *= f;", ""),
    "the step's sums of rows g + 8 not tested": (" || ls[I][1] > 256.0f", ""),
    "a power of two that may fall": ("const float M = fmaxf(st[I][h][0], ceilf(mx[I][h] * ", "const float M = (ceilf(mx[I][h] * "),
    "the step's maximum over keys the row does not see":
        ("mx[I][h] = m; } }", "mx[I][h] = fmaxf(m, fmaxf(s[I][0][2 * h], s[I][0][2 * h + 1])); } }"),
}


def _L_bound(L: np.ndarray, n: int) -> np.ndarray:
    """How far the row statistic ``L = (M + log₂ Σ e)·ln 2`` may be from the reference's: each weight within
    ``2⁻²¹ + 16·2⁻²⁴`` relative of its own (``cg_ex2``'s bound at exponents down to −8), ``n`` additions of
    float32: ``Σ e`` within their sum relative, so ``ln Σ e`` within it absolute; then ``M +`` and ``·ln 2`` round
    (``2·2⁻²⁴·|L|``)."""
    return 2.0 ** -21 + (16 + n) * 2.0 ** -24 + 2 * 2.0 ** -24 * np.abs(L)


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
@pytest.mark.parametrize("mutation", [None, *RESCALING])
def test_the_online_softmax_rescales_by_powers_of_two(mutation, precision, tmp_path):
    """Rows whose scores jump after their first steps (each of :data:`JUMPS`) move their power of two by more
    than ``RESCALE``, so the warp rescales what it has summed. The kernel computes its reference (which takes
    the final power of two at once): ``O`` within the rounding bound, ``L`` within :func:`_L_bound`, in every
    case. Each mutation of the rescaling gets one case at least wrong (``O`` or ``L`` outside its bound, or
    NaN where the reference has none)."""
    right = {}
    for case in JUMPS:
        op, q, k, v = rescaling_case(precision, case)
        want, wL = op.evaluate(q, k, v)
        assert np.all(np.isfinite(want)) and np.all(np.isfinite(wL))
        src = attention_mma.source(op, "grow")[0]
        if mutation is not None:
            old, new = RESCALING[mutation]
            assert src.count(old) == 2
            src = src.replace(old, new)
        r, got, gL = _run_alone(tmp_path, src, "grow", q, k, v, stat=True)
        assert r.returncode == 0, r.stderr[-2000:]
        tol = _tolerance("softmax", True, precision, q, k, v, v)[0]
        right[case] = bool(np.all(np.abs(got - want) <= tol) and np.all(np.abs(gL - wL) <= _L_bound(wL, 32)))
    if mutation is None:
        assert all(right.values()), right
    else:
        assert not all(right.values()), right


#: mutations of the bf16 kernels' reads of eight columns of a row (dh a multiple of 32: two products' operands, a
#: stored row's 16-byte load): the text, what it becomes, how many times the forward kernel has it
WIDE = {
    "A's second product takes the first's columns": ("qa[I][2 * m + 1][0] = cg_pack_rn(x[4], x[5]);",
                                                     "qa[I][2 * m + 1][0] = cg_pack_rn(x[0], x[1]);", 1),
    "B's second product takes the first's registers": ("b[I] + 2);", "b[I]);", 4),
    "B's first four columns read from 4t instead of 8t": ("rs_k + (32 * m + 8 * t)]", "rs_k + (32 * m + 4 * t)]", 4),
}


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("mutation", [None, *WIDE])
def test_eight_columns_a_lane_take_two_products_in_one_order(mutation, tmp_path):
    """Under bf16 with dh = 64 a lane reads columns ``32m + 8t … + 7`` of a row for the products over dh: A and B
    take them in the same order (a permutation of dh), so the kernel computes its reference within the rounding
    bound (:func:`_tolerance`); each mutation of the order on one side is far outside it."""
    T = cg.NdArrayType((1, 1, 32, 64), cg.float32)
    op = attention.AttentionForward(T, True, 0.125, mma="bf16")
    rng = np.random.default_rng(5)
    q, k, v = (rng.normal(size=T.shape).astype(np.float32) for _ in range(3))
    want, _ = op.evaluate(q, k, v)
    src = attention_mma.source(op, "wide")[0]
    if mutation is not None:
        old, new, count = WIDE[mutation]
        assert src.count(old) == count
        src = src.replace(old, new)
    r, got = _run_alone(tmp_path, src, "wide", q, k, v)
    assert r.returncode == 0, r.stderr[-2000:]
    tol = _tolerance("softmax", True, "bf16", q, k, v, v)[0]     # scores summed in another order than BLAS's
    if mutation is None:
        assert np.all(np.abs(got - want) <= tol)
    else:
        assert np.max(np.abs(got - want) - tol) > 1e-2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_host_checker_runs_a_warp_per_item(rng):
    """``host.check`` compiles the kernel whole (device and host code, sm_80) and calls its host ``_body`` once
    per warp."""
    from circuitgrad.backends.gpu.host import check
    from circuitgrad.backends.gpu.kernel import Kernel
    T = cg.NdArrayType((1, 2, 32, 16), cg.float32)
    op = attention.AttentionForward(T, True, 0.25, mma="bf16")
    src, warps, names = attention_mma.source(op, "chk")
    lib = check.compile_host([Kernel("chk", src, [], [], warps, ["AttentionForward"], lanes=32)], "float")
    q, k, v = (rng.normal(size=T.shape).astype(np.float32) for _ in range(3))
    O, L = np.full(T.shape, np.nan, np.float32), np.full(T.shape[:-1], np.nan, np.float32)
    lib("chk", q, k, v, O, L)
    want_o, want_l = op.evaluate(q, k, v)
    np.testing.assert_allclose(L, want_l, rtol=1e-6, atol=1e-6)
    tol = _tolerance("softmax", True, "bf16", q, k, v, v)[0]
    assert np.all(np.abs(O - want_o) <= tol)


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_a_gpt_step_in_tf32_runs_the_tensor_core_kernels(rng):
    """A GPT step whose attention qualifies (S = 16, dh = 16) under ``precision="tf32"``: host-run kernels against
    the emulated step, every parameter within four TF32 units of the step's largest update (a gradient's error is
    a unit of its products' ``|X||Y|``, which the largest update bounds at this learning rate)."""
    make = lambda: nn.gpt(2, 16, 13, d=32, heads=2, layers=2)  # noqa: E731
    kw = dict(loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1), precision="tf32")
    ref = cg.compile_model(make(), backend="cupy-emulated", **kw)
    p = ref.init_params(seed=0)
    x, y = rng.integers(0, 13, size=(2, 16)), rng.integers(0, 13, size=(2, 16))
    want = ref.step({k: v.copy() for k, v in p.items()}, x, y)
    with hostrun.device() as cp:
        dev = cg.compile_model(make(), backend="cupy", donate=True, **kw)
        steps = dev.fn("step").compiled.plan.steps
        assert sum(s.kind == "attention" and bool(s.instrs[0].op.mma) for s in steps) == 6      # dk, dv together
        got = {k: v.get() for k, v in dev.step({k: cp.asarray(v) for k, v in p.items()}, x, y).items()}
    largest = max(np.max(np.abs(want[k] - p[k])) for k in want)        # the step's largest update
    for k in want:
        assert np.max(np.abs(got[k] - want[k])) <= 4 * UNIT["tf32"] * largest, k


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_kernels_compile_for_sm90_with_mma_and_no_spills(tmp_path):
    T = cg.NdArrayType((4, 6, 256, 64), cg.float32)
    strided = {"q": (256 * 384, 64, 384, 1), "k": (256 * 384, 64, 384, 1)}     # a [B, S, H, dh] projection
    code = ""
    for norm in attention.NORMS:
        for cls in attention.OPS:
            for mma in ("tf32", "bf16", "3xtf32"):
                if cls is attention.AttentionGradKV and not attention.kv_together(T, mma):
                    continue
                op = cls(T, True, 0.125, norm=norm, eps=1e-6 if norm == "spherical" else 0.0, mma=mma)
                code += attention_mma.source(op, f"k_{norm}_{cls.__name__}_{mma}", strided)[0]
    spills = ptxas_spills(code, tmp_path)
    assert len(spills) == 28, spills
    # nothing spills but, perhaps, the 3xTF32 dq and dk kernels (two rows of fragments and the accumulators, each
    # product splitting its operands in two): at most 128 bytes (none with nvcc 13.0)
    heavy = {n for n in spills if n.endswith("3xtf32") and ("GradQ" in n or "GradK" in n)}
    assert all(v == 0 for n, v in spills.items() if n not in heavy) and max(spills[n] for n in heavy) <= 128, spills
    p = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-o", "-", str(tmp_path / "att.cu")], capture_output=True,
                       text=True)
    assert p.stdout.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") >= 16          # tf32, 3xtf32
    # bf16: per kernel at least dh/16 products for the scores (two tiles) and dh/8 for the weights' product
    assert p.stdout.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") >= 8 * (2 * 64 // 16 + 64 // 8)
    # and round and pack their operands two at a time, one instruction (each kernel's B loads at least)
    assert p.stdout.count("cvt.rn.bf16x2.f32") >= 8 * 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("mma", ["tf32", "bf16"])
def test_dk_and_dv_together_take_each_exponential_once(mma, tmp_path):
    """The fused dk and dv kernel computes each weight ``exp(s − L)`` once, for dv's product and for dk's score
    gradient: its sm_90 PTX has as many exponentials as the dv kernel's, which computes only the weights."""
    T = cg.NdArrayType((2, 2, 64, 64), cg.float32)
    count = {}
    for cls in (attention.AttentionGradV, attention.AttentionGradKV):
        (tmp_path / "k.cu").write_text(attention_mma.source(cls(T, True, 0.125, mma=mma), "k")[0])
        p = subprocess.run(["nvcc", "-arch=sm_90", "-ptx", "-w", "-o", "-", str(tmp_path / "k.cu")],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr[-2000:]
        count[cls] = p.stdout.count("ex2.approx")
    assert count[attention.AttentionGradV] > 0 and count[attention.AttentionGradKV] == count[attention.AttentionGradV]



_ONE_SHIFTED = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
import circuitgrad as cg
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import attention, attention_mma
from circuitgrad.backends.gpu.host import run as hostrun
from test_gpu_attention_mma import _program, _inputs
T = cg.NdArrayType((1, 2, 32, 32), cg.float32)
prog, xs = _program("softmax", True, T), _inputs(T, np.random.default_rng(3))
if {mutate!r}:              # the dq kernel's check leaves out its operand dO
    source = attention_mma.source

    def left_out(op, name, strides=None, narrow=frozenset()):
        src, warps, names = source(op, name, strides, narrow)
        if isinstance(op, attention.AttentionGradQ):
            assert src.count(" | (unsigned long long)dO)") == 1
            src = src.replace(" | (unsigned long long)dO)", ")")
        return src, warps, names
    attention_mma.source = left_out
with hostrun.device() as cp:
    f = gpu.compile_function(prog, ["q", "k", "v", "do"], "fb", precision="tf32")
    def shifted(x):
        buf = cp.zeros(x.size + 1, dtype=x.dtype)
        buf[1:] = cp.asarray(x.ravel())
        return buf[1:].reshape(x.shape)
    aligned = [cp.asarray(x) for x in xs]
    want = [o.get() for o in f.run(*aligned)]
    for i in range(4):
        args = [shifted(x) if j == i else a for j, (x, a) in enumerate(zip(xs, aligned))]
        got = [o.get() for o in f.run(*args)]
        print(i, all(np.array_equal(a, b) for a, b in zip(got, want)), flush=True)
"""


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("mutate", [False, True])
def test_each_operand_misaligned_alone_takes_the_fallback(mutate, tmp_path):
    """The run-time alignment check covers every operand a kernel reads 16 bytes at a time: each operand at a
    4-byte offset alone gives the aligned run's bits. A check that left out one operand (``dO`` in ``dq``'s)
    would make a device fault: the host mode aborts on that load (in a fresh process, which the abort ends)."""
    code = _ONE_SHIFTED.format(tests=str(__import__("pathlib").Path(__file__).parent), mutate=mutate)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    if not mutate:
        assert r.returncode == 0 and r.stdout.split("\n")[:4] == [f"{i} True" for i in range(4)], r.stderr[-2000:]
    else:
        assert r.returncode != 0 and r.stdout.split("\n")[:3] == ["0 True", "1 True", "2 True"], r.stdout
        assert "a 16-byte load of" in r.stderr and "not 16-byte aligned: on a device, a misaligned address error" \
            in r.stderr, r.stderr[-2000:]


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_spherical_epsilon_is_in_the_kernels(rng):
    """Scores far below ``√ε``: ``ε`` sets the normalisation, so a kernel that dropped it would be far off."""
    T = cg.NdArrayType((1, 2, 32, 16), cg.float32)
    prog, xs = _program("spherical", True, T), _inputs(T, rng)
    xs[0] *= 1e-6
    names = ["q", "k", "v", "do"]
    want = build(prog, names, "fb", np, emulated_kernel, None, "tf32").run(*xs)
    with hostrun.device() as cp:
        got = [o.get() for o in gpu.compile_function(prog, names, "fb", precision="tf32").run(
            *[cp.asarray(x) for x in xs])]
    for g, w, tol in zip(got, want, _tolerance("spherical", True, "tf32", *xs)):
        assert np.all(np.abs(g - w) <= tol)
    s = 0.25 * xs[0][0, 0] @ xs[1][0, 0].T
    assert (np.tril(s) ** 2).sum(-1).max() < 1e-3 * ops.ATTENTION_EPS        # ε dominates every row


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_the_kernels_round_their_operands(precision, rng):
    """The kernels are ten times further (in norm) from the float32 products' result (3xTF32) than from their
    reference: a kernel that skipped rounding would be near float32."""
    T = cg.NdArrayType((1, 2, 32, 32), cg.float32)
    prog, xs = _program("softmax", True, T), _inputs(T, rng)
    names = ["q", "k", "v", "do"]
    want = _build(prog, names, precision).run(*xs)
    fp32 = _build(prog, names, "3xtf32").run(*xs)
    with hostrun.device() as cp:
        got = [o.get() for o in gpu.compile_function(prog, names, "fb", **_options(precision)).run(
            *[cp.asarray(x) for x in xs])]
    for g, w, f in zip(got, want, fp32):            # a few operands may round the other way: norms, not maxima
        assert np.linalg.norm(g - f) > 10 * np.linalg.norm(g - w)


@pytest.mark.parametrize("mma, exp", [("tf32", "cg_ex2("), ("bf16", "cg_ex2("), ("3xtf32", "expf(")])
def test_the_kernels_take_exp_as_their_reference_does(mma, exp):
    """Under tf32 and bf16, whose weights are rounded to 11 or 8 significant bits, every weight of a softmax
    kernel (and each term of the forward's sums) is ``cg_ex2`` of a raw score, ``2^(a·c₂ − L·log₂ e)``, as
    :attr:`~.attention.Attention.exp2` says and its reference computes (the scores are never scaled by ``c``);
    under 3xTF32 (float32 products) ``expf`` of ``c·a − L``; spherical attention has no exponential."""
    T = cg.NdArrayType((1, 2, 32, 64), cg.float32)
    other = "expf(" if exp == "cg_ex2(" else "cg_ex2("
    for cls in (attention.AttentionForward, attention.AttentionGradQ, attention.AttentionGradKV):
        op = cls(T, True, 0.125, mma=mma)
        assert op.exp2 == (exp == "cg_ex2(")
        src, _, _ = attention_mma.source(op, "k")
        body = src[src.index("inline void k_warp("):]
        assert body.count(exp) >= (2 if cls is attention.AttentionForward else 1) and other not in body, cls
        assert ("* 0.125f;" in body) == (exp == "expf("), cls
        spherical = dataclasses.replace(op, norm="spherical", eps=1e-6)
        assert not spherical.exp2 and "cg_ex2(" not in attention_mma.source(spherical, "k")[0].split("k_warp(")[1]


def test_a_device_older_than_sm80_keeps_the_cuda_core_kernels(monkeypatch):
    """TF32 ``mma.sync`` needs sm_80: on an older device (its compute capability from CuPy) the attention
    kernels stay a thread per row, whatever the precision."""
    import types
    from circuitgrad.backends.gpu import runtime
    for cc, want in (("75", False), ("80", True), ("90", True)):
        xp = types.SimpleNamespace(cuda=types.SimpleNamespace(Device=lambda cc=cc: types.SimpleNamespace(
            compute_capability=cc)))
        assert runtime.tensor_cores(xp) is want
    assert runtime.tensor_cores(np)
    T = cg.NdArrayType((1, 2, 32, 16), cg.float32)
    prog = _program("softmax", True, T)
    monkeypatch.setattr(runtime, "tensor_cores", lambda xp: False)
    f = build(prog, ["q", "k", "v", "do"], "fb", np, emulated_kernel, None, "tf32")
    ks = [k for k in f.kernels.values() if k.ops[0].startswith("Attention")]
    assert len(ks) == 3 and not any("mma.sync" in k.source for k in ks)           # the quad kernels
    assert {a.op.mma for a in f.program.instrs if isinstance(a.op, attention.OPS)} == {""}


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_nan_stays_a_nan(precision):
    """A NaN operand rounds to a NaN (``cvt.rna`` keeps it one; adding to its bits would carry into a zero or an
    infinity): the outputs hold NaNs where the unfused definition's do."""
    T = cg.NdArrayType((1, 1, 32, 16), cg.float32)
    prog = _program("softmax", True, T)
    rng = np.random.default_rng(4)
    xs = _inputs(T, rng)
    xs[2][0, 0, 5, 3] = np.float32(np.nan)
    nan_bits = np.array([0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001], np.uint32).view(np.float32)
    assert np.isnan(blas.round_tf32(np, nan_bits)).all()
    names = ["q", "k", "v", "do"]
    want = _build(prog, names, precision, fuse_attention=False).run(*xs)
    with hostrun.device() as cp:
        got = [o.get() for o in gpu.compile_function(prog, names, "fb", **_options(precision)).run(
            *[cp.asarray(x) for x in xs])]
    assert np.isnan(want[0]).sum() == 32             # O's column 3 (a masked weight is 0, and 0·NaN a NaN)
    for g, w in zip(got, want):
        assert np.array_equal(np.isnan(g), np.isnan(w))


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_unrolled_loops_give_the_same_bits_on_the_host(monkeypatch, rng):
    """``UNROLL`` only adds a device pragma: the host compiles the same loops, so a GPT step's bits are unchanged
    (and the source with the pragma compiles for the host)."""
    x, y = rng.integers(0, 13, size=(2, 16)), rng.integers(0, 13, size=(2, 16))
    runs = []
    for unroll in (1, 2):
        monkeypatch.setattr(attention_mma, "UNROLL", unroll)
        with hostrun.device() as cp:
            step = cg.compile_model(nn.gpt(2, 16, 13, d=32, heads=2, layers=1), loss=nn.softmax_cross_entropy,
                                    optimizer=nn.adamw(1e-3), backend="cupy", donate=True, precision="bf16")
            src = step.fn("step").compiled.cuda_source
            assert ("#pragma unroll 2" in src) == (unroll == 2)
            p = {k: cp.asarray(v) for k, v in step.init_params(seed=0).items()}
            runs.append({k: v.get() for k, v in step.step(p, x, y).items()})
    assert all(np.array_equal(runs[0][k], runs[1][k]) for k in runs[0])
