"""Streaming attention on the CUDA cores, a quad of lanes per row (:mod:`circuitgrad.backends.gpu.attention_quad`):
where it applies (float32, ``dh`` a multiple of 16, ``S`` of 8; else a thread per row), the generated CUDA C run
on the host (a warp at a time, both lane orders, the quads' shuffles replayed) against the kernels' float32
reference, a GPT step, 16-byte loads and their fallback, mutations of the quad reduction, and sm_80/sm_90
compilation with no spills.

Tolerances are those of ``tests/test_gpu_attention_mma.py`` with float32 operands: a weight or score gradient
computed by two code paths (summed in another order) may differ by a few float32 units (within ``2⁻²¹`` of it),
plus float32 accumulation in another order."""
from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import ptxas_spills
from test_gpu_attention_mma import CASES, _build, _inputs, _program, _tolerance, same_bits_shifted

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import attention, attention_quad
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.rewrite import simplify

ok, why = hostrun.available()
NAMES = ["q", "k", "v", "do"]


@pytest.mark.parametrize("shape, dtype, mma, want", [
    ((2, 4, 32, 64), cg.float32, "", True),
    ((2, 4, 24, 16), cg.float32, "", True),             # S a multiple of 8, not of 16
    ((1, 8, 48), cg.float32, "", True),
    ((2, 4, 32, 64), cg.float32, "tf32", False),        # the tensor cores' kernels
    ((2, 4, 32, 64), cg.float64, "", False),            # float64: a thread per row
    ((2, 4, 12, 64), cg.float32, "", False),            # S not a multiple of 8
    ((2, 4, 32, 24), cg.float32, "", False),            # dh not a multiple of 16
    ((2, 4, 32, 8), cg.float32, "", False),
])
def test_a_quad_per_row_where_the_shape_allows(shape, dtype, mma, want):
    assert attention_quad.fits(attention.AttentionForward(cg.NdArrayType(shape, dtype), True, 0.5, mma=mma)) == want


def test_dk_or_dv_alone_keeps_a_thread_per_row():
    """Where a quad fits, ``fuse`` asks for dk and dv in one kernel; either alone keeps a thread per row."""
    T = cg.NdArrayType((2, 4, 32, 64), cg.float32)
    assert {cls for cls in attention.OPS if not attention_quad.fits(cls(T, True, 0.5))} == {
        attention.AttentionGradK, attention.AttentionGradV}


def _attention_kernels(f) -> list:
    return [k for k in f.kernels.values() if k.ops[0].startswith("Attention")]


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("shape", [(2, 3, 24, 16), (1, 2, 16, 64), (1, 1, 8, 48)])
@pytest.mark.parametrize("kind, causal", CASES)
def test_the_generated_kernels_compute_their_reference(kind, causal, shape, rng):
    """The three kernels' CUDA C (dk and dv in one), compiled for the host and run a warp at a time (lanes in
    both orders, the quads' ``__shfl_xor_sync`` butterflies replayed), against their float32 NumPy reference: S = 24 makes 3
    warps a matrix (a block of 4 spans two), dh = 64 and 48 take four and three 16-byte groups a lane."""
    T = cg.NdArrayType(shape, cg.float32)
    prog, xs = _program(kind, causal, T), _inputs(T, rng)
    want = _build(prog, NAMES, "fp32").run(*xs)
    tols = _tolerance(kind, causal, "3xtf32", *xs)
    for order in hostrun.ORDERS:
        with hostrun.device(order) as cp:
            f = gpu.compile_function(prog, NAMES, "fb")
            ks = _attention_kernels(f)
            warps = int(np.prod(shape[:-2])) * shape[-2] // attention_quad.ROWS
            assert [k.ops[0] for k in ks] == ["AttentionForward", "AttentionGradQ", "AttentionGradKV"]
            assert all(k.lanes == 32 and k.n == warps and k.block == 32 * attention_quad.WARPS
                                        and "CG_QUAD(s[I], cg_add);" in k.source for k in ks)
            got = [o.get() for o in f.run(*[cp.asarray(x) for x in xs])]
        for g, w, tol in zip(got, want, tols):
            assert np.all(np.abs(g - w) <= tol), (order, float(np.max(np.abs(g - w) - tol)))
            assert np.max(np.abs(g - w)) < 1e-4 * np.max(np.abs(w))      # not all of the allowance


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_other_shapes_keep_a_thread_per_row(rng):
    """dh = 8: the thread-per-row kernels (:mod:`.attention_source`), 64 threads a block."""
    T = cg.NdArrayType((1, 2, 16, 8), cg.float32)
    with hostrun.device():
        f = gpu.compile_function(_program("softmax", True, T), NAMES, "fb")
        ks = _attention_kernels(f)
    assert len(ks) == 4 and all(k.lanes == 1 and "CG_QUAD" not in k.source for k in ks)


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("kind", attention.NORMS)
def test_16_byte_loads_and_their_fallback_give_the_same_bits(kind, rng):
    """A lane reads its columns of a row four at a time, as one 16-byte load when the operands are 16-byte
    aligned, else one by one: operands at a 4-byte offset take the fallback and give the same bits."""
    T = cg.NdArrayType((1, 2, 16, 32), cg.float32)
    prog, xs = _program(kind, True, T), _inputs(T, rng)
    with hostrun.device() as cp:
        f = gpu.compile_function(prog, NAMES, "fb")
        assert all("const bool vec = ((" in k.source for k in _attention_kernels(f))
        same_bits_shifted(cp, f, xs)


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_dk_and_dv_written_in_different_orders(precision, rng):
    """One kernel writes dk and dv, each in the order its reader wants: here k is a ``[B, S, H, dh]`` projection
    read as ``[B, H, S, dh]`` (dk written back in the projection's order) and v is given as it is (dv too). The
    fused step, emulated and run on the host, against the unfused one."""
    from circuitgrad.tracing import permute
    B, S, H, dh = 2, 16, 2, 16
    Q, P = cg.NdArrayType((B, H, S, dh), cg.float32), cg.NdArrayType((B, S, H, dh), cg.float32)
    d = cg.trace(lambda q, k, v: ops.attention(q, permute(k, (0, 2, 1, 3)), v, causal=True), [Q, P, Q], name="att")
    R = cg.rdiff(d)
    prog = simplify(cg.schedule(cg.trace(lambda q, k, v, do: (*d(q, k, v), *R(q, k, v, do)), [Q, P, Q, Q],
                                         name="fb")))
    xs = [rng.normal(size=t.shape).astype(np.float32) for t in (Q, P, Q, Q)]
    fused, unfused = _build(prog, NAMES, precision), _build(prog, NAMES, precision, fuse_attention=False)
    (kv,) = [a.op for a in fused.program.instrs if isinstance(a.op, attention.AttentionGradKV)]
    assert kv.axes(0) == (0, 2, 1, 3) and kv.axes(1) is None
    want = unfused.run(*xs)
    with hostrun.device() as cp:
        got = [o.get() for o in gpu.compile_function(prog, NAMES, "fb", precision=precision).run(
            *[cp.asarray(x) for x in xs])]
    k = np.ascontiguousarray(np.transpose(xs[1], (0, 2, 1, 3)))
    tols = _tolerance("softmax", True, "3xtf32" if precision == "fp32" else precision, xs[0], k, xs[2], xs[3])
    tols[2] = np.transpose(tols[2], (0, 2, 1, 3))          # dk in the projection's order
    for g, e, w, tol in zip(got, fused.run(*xs), want, tols):
        assert g.shape == w.shape and np.all(np.abs(g - w) <= tol) and np.all(np.abs(e - w) <= tol)


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_a_gpt_step_runs_the_quad_kernels(rng):
    """A float32 GPT step whose attention qualifies (S = 16, dh = 16): its projections read as strided
    ``[B, H, S, dh]`` views and its outputs written back permuted; host-run kernels against the NumPy backend."""
    make = lambda: nn.gpt(2, 16, 13, d=32, heads=2, layers=2)  # noqa: E731
    kw = dict(loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1))
    ref = cg.compile_model(make(), dtype=cg.float32, **kw)
    p = ref.init_params(seed=0)
    x, y = rng.integers(0, 13, size=(2, 16)), rng.integers(0, 13, size=(2, 16))
    want = ref.step({k: v.copy() for k, v in p.items()}, x, y)
    with hostrun.device() as cp:
        dev = cg.compile_model(make(), backend="cupy", donate=True, **kw)
        f = dev.fn("step").compiled
        assert sum("CG_QUAD(s[I], cg_add);" in k.source for k in _attention_kernels(f)) == 6
        got = {k: v.get() for k, v in dev.step({k: cp.asarray(v) for k, v in p.items()}, x, y).items()}
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-5, err_msg=k)


#: a kernel's source edited: (kernel, old text, new text)
MUTATIONS = {
    "a score left to each lane (no quad reduction)": ("AttentionForward", "        CG_QUAD(s[I], cg_add);\n", ""),
    "a quad's butterfly one step short": ("AttentionForward", "for (int cg_m = 1; cg_m <= 2; cg_m <<= 1)",
                                          "for (int cg_m = 1; cg_m <= 1; cg_m <<= 1)"),
    "a lane's columns of v read from its neighbour's": ("AttentionForward", "cg_ld4(&vv[I][4 * m], p + 16 * m + 4 * t,",
                                                        "cg_ld4(&vv[I][4 * m], p + 16 * m + 4 * (t ^ 1),"),
    "every key seen by every row": ("AttentionForward", "if (j <= row)", "if (true)"),
    "dq: D left to each lane": ("AttentionGradQ", "    CG_QUAD(Dt[I], cg_add);\n", ""),
    "dk and dv: a query that does not see the key counted": ("AttentionGradKV", "if (i >= row)", "if (true)"),
    "dk and dv: dp left to each lane": ("AttentionGradKV", " CG_QUAD(dp[I], cg_add);", ""),
    "dk and dv: dv accumulates q instead of dO": ("AttentionGradKV", "av[I][e] += p * gv[I][e];",
                                                  "av[I][e] += p * qv[I][e];"),
    "dk and dv: dk accumulates dO instead of q": ("AttentionGradKV", "ak[I][e] += ds * qv[I][e];",
                                                  "ak[I][e] += ds * gv[I][e];"),
    "keys read past the warp's last row (past S in the last warp)": ("AttentionForward", "j < r0 + 8LL",
                                                                     "j < r0 + 9LL"),
    "dk and dv: queries read from the warp's row before its first": ("AttentionGradKV", "i = r0;", "i = r0 - 1;"),
}


def _run_alone(tmp_path, src: str, name: str, ins: list[np.ndarray], outs: list[tuple]) -> tuple:
    """A kernel's ``src`` run on the host in a fresh process (a host-mode abort ends that process), one block:
    the process, and its outputs (of shapes ``outs``) if it ran."""
    np.savez(tmp_path / "in.npz", *ins)
    (tmp_path / "k.cu").write_text(src)
    code = f"""
import numpy as np
from circuitgrad.backends.gpu.host import run as hostrun
src, x = open({str(tmp_path / "k.cu")!r}).read(), np.load({str(tmp_path / "in.npz")!r})
with hostrun.device() as cp:
    outs = [cp.full(s, np.nan, dtype=np.float32) for s in {outs!r}]
    cp.RawKernel(src, {name!r})((1,), (128,), (*(cp.asarray(x[f"arr_{{i}}"]) for i in range({len(ins)})), *outs))
    np.savez({str(tmp_path / "out.npz")!r}, *(o.get() for o in outs))
"""
    (tmp_path / "out.npz").unlink(missing_ok=True)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return r, None
    got = np.load(tmp_path / "out.npz")
    return r, [got[f"arr_{i}"] for i in range(len(outs))]


def _operands(T, rng) -> dict:
    """Every kernel's operands by name (``q, k, v, dO`` random; ``O, L, D`` their reference values)."""
    x = {n: rng.normal(size=T.shape).astype(np.float32) for n in ("q", "k", "v", "dO")}
    x["O"], x["L"] = attention.AttentionForward(T, True, 0.25).evaluate(x["q"], x["k"], x["v"])
    _, x["D"] = attention.AttentionGradQ(T, True, 0.25).evaluate(*(x[n] for n in ("q", "k", "v", "O", "L", "dO")))
    return x


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("mutation", [None, *MUTATIONS])
def test_a_wrong_reduction_or_layout_fails(mutation, tmp_path):
    """Each kernel as generated computes its reference; each mutation (of a quad's reduction, of a lane's
    columns, of the causal mask, of a loop's bounds) gives wrong outputs, or leaves a quad's copies of a statistic
    differing, or reads a row outside its operand, which the host mode aborts on (each run in a fresh process).
    Causal softmax, 16 rows of 32."""
    T = cg.NdArrayType((1, 1, 16, 32), cg.float32)
    x = _operands(T, np.random.default_rng(2))
    kernels = [cls for cls in attention.OPS if attention_quad.fits(cls(T, True, 0.25))]
    assert len(kernels) == 3
    for cls in kernels if mutation is None else [getattr(attention, MUTATIONS[mutation][0])]:
        op = cls(T, True, 0.25)
        ins = [x[n] for n in op.ins.split()]
        want = op.evaluate(*ins)
        src = attention_quad.source(op, "mut")[0]
        shapes = [T.shape if n not in "LD" else T.shape[:-1] for n in op.outs.split()]
        if mutation is not None:
            _, old, new = MUTATIONS[mutation]
            assert src.count(old) == 1
            src = src.replace(old, new)
        r, got = _run_alone(tmp_path, src, "mut", ins, shapes)
        if mutation is None:
            assert r.returncode == 0, r.stderr[-2000:]
            for g, w in zip(got, want):
                assert np.max(np.abs(g - w)) < 1e-5 * max(1.0, float(np.max(np.abs(w)))), cls
        elif got is None:       # a quad's copies of a statistic differ, or a row outside its operand is read
            assert ("circuitgrad hostrun: the lanes of quad " in r.stderr
                    or ", which has 16 rows: on a device, an access outside the operand" in r.stderr), r.stderr[-2000:]
        else:
            assert max(float(np.max(np.abs(g - w))) for g, w in zip(got, want)) > 1e-2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_kernels_compile_with_no_spills(arch, tmp_path):
    """At dh = 64 a lane holds a quarter of each of its rows (the thread-per-row dq and dk kernels spill)."""
    T = cg.NdArrayType((4, 6, 256, 64), cg.float32)
    strided = {"q": (256 * 384, 64, 384, 1), "k": (256 * 384, 64, 384, 1)}     # a [B, S, H, dh] projection
    code = ""
    for norm in attention.NORMS:
        for causal in (True, False):
            for cls in (attention.AttentionForward, attention.AttentionGradQ, attention.AttentionGradKV):
                op = cls(T, causal, 0.125, norm=norm, eps=1e-6 if norm == "spherical" else 0.0)
                code += attention_quad.source(op, f"k_{norm}_{cls.__name__}_{causal}", strided)[0]
    spills = ptxas_spills(code, tmp_path, arch)
    assert len(spills) == 12 and set(spills.values()) == {0}, spills


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("block", [32, 64, 256])
def test_a_warp_kernel_gives_the_same_bits_with_any_whole_warps_a_block(block, rng):
    """A device numbers a warp by its threads (``(blockIdx.x·blockDim.x + threadIdx.x) >> 5``), so a warp
    kernel computes the same with 32, 64 or 256 threads a block as with the 128 it is launched with; the host
    mode numbers its warps by the launch's block size too. The quad and tensor-core forward kernels, 18 and 9
    warps: the last block partial at 64 and 256."""
    from circuitgrad.backends.gpu import attention_mma
    T = cg.NdArrayType((1, 3, 48, 16), cg.float32)
    q, k, v = (rng.normal(size=T.shape).astype(np.float32) for _ in range(3))
    for mod, mma in ((attention_quad, ""), (attention_mma, "tf32")):
        src, warps, _ = mod.source(attention.AttentionForward(T, True, 0.25, mma=mma), "f")
        got = {}
        with hostrun.device() as cp:
            for threads in (128, block):
                O, L = cp.empty(T.shape, dtype=np.float32), cp.empty(T.shape[:-1], dtype=np.float32)
                cp.RawKernel(src, "f")((-(-warps * 32 // threads),), (threads,),
                                       (cp.asarray(q), cp.asarray(k), cp.asarray(v), O, L))
                got[threads] = (O.get(), L.get())
        for a, b in zip(got[128], got[block]):
            assert np.all(np.isfinite(a))
            np.testing.assert_array_equal(a, b)
