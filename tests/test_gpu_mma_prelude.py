"""The host's emulation of the tensor-core instructions the attention kernels use
(:data:`circuitgrad.backends.gpu.attention_mma.PRELUDE`), against PTX ISA's own tables transcribed here: the
``mma.sync`` fragment layouts (m16n8k8 TF32, 3xTF32, m16n8k16 bfloat16) and ``cvt.rn.bf16x2.f32``'s rounding and
packing. ``tests/test_gpu_device.py`` runs the same packing cases on a device."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad.backends.gpu import attention_mma, blas
from circuitgrad.backends.gpu.host import run as hostrun

ok, why = hostrun.available()


#: ``cg_pack_rn`` of each pair of ``lo[i], hi[i]`` (``cvt.rn.bf16x2.f32`` on a device)
PACK_KERNEL = attention_mma.PRELUDE + """
extern "C" __global__ void pack_rn(const float* lo, const float* hi, unsigned* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = cg_pack_rn(lo[i], hi[i]);
}
#ifdef CG_HOSTRUN
// the prelude names warp shuffles: the host mode runs this kernel a warp (of blocks of 128) at a time
void pack_rn__host_warp(unsigned long long block, unsigned warp, const float* lo, const float* hi, unsigned* out,
                        int n) {
    for (int l = 0; l < 32; ++l) { const long long i = (long long)block * 128 + warp * 32 + l;
                                   if (i < n) out[i] = cg_pack_rn(lo[i], hi[i]); }
}
#endif
"""


def pack_cases() -> tuple[np.ndarray, np.ndarray]:
    """Pairs of float32 values (no NaN): halfway cases rounding to even both ways, the largest floats (to
    infinity), infinities, signed zeros, subnormals (a halfway one), and random values."""
    bits = np.array([0x3F808000, 0x3F818000, 0x3F807FFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F800000,
                     0xFF800000, 0x00000000, 0x80000000, 0x00000001, 0x00008000, 0x00018000, 0x807FFFFF,
                     0x3EAAAAAB, 0xC2F6E979], dtype=np.uint32)
    rand = np.random.default_rng(5).normal(size=240).astype(np.float32) * np.float32(1e3)
    x = np.concatenate([bits.view(np.float32), rand])
    return x, np.roll(x, 7)


def pack_expected(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Each pair rounded to bfloat16 (``blas.round_bf16``: nearest even), ``lo`` in the low half."""
    b = lambda x: blas.round_bf16(np, x).view(np.uint32)  # noqa: E731
    return (b(lo) >> np.uint32(16)) | (b(hi) & np.uint32(0xFFFF0000))


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_the_host_rounds_and_packs_pairs_as_cvt_rn_bf16x2():
    """The host's ``cg_pack_rn`` (each value rounded, then packed) against ``blas.round_bf16`` on every case;
    ``tests/test_gpu_device.py`` checks the device's one instruction against the same."""
    lo, hi = pack_cases()
    with hostrun.device() as cp:
        out = cp.zeros(lo.size, dtype=cp.uint32)
        cp.RawKernel(PACK_KERNEL, "pack_rn")((2,), (128,), (cp.asarray(lo), cp.asarray(hi), out, np.int32(lo.size)))
        got = out.get()
    np.testing.assert_array_equal(got, pack_expected(lo, hi))
    assert got[0] & 0xFFFF == 0x3F80 and got[1] & 0xFFFF == 0x3F82      # halfway: to the even neighbour


#: ``cg_pair(a[i], b[i], hi)`` for hi = 0 (``out[2i]``) and 1 (``out[2i + 1]``)
PAIR_KERNEL = attention_mma.PRELUDE + """
extern "C" __global__ void pair(const unsigned* a, const unsigned* b, unsigned* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[2 * i] = cg_pair(a[i], b[i], 0); out[2 * i + 1] = cg_pair(a[i], b[i], 1); }
}
#ifdef CG_HOSTRUN
void pair__host_warp(unsigned long long block, unsigned warp, const unsigned* a, const unsigned* b, unsigned* out,
                     int n) {
    for (int l = 0; l < 32; ++l) { const long long i = (long long)block * 128 + warp * 32 + l;
                                   if (i < n) { out[2 * i] = cg_pair(a[i], b[i], 0); out[2 * i + 1] = cg_pair(a[i], b[i], 1); } }
}
#endif
"""


def pair_expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each register's low halves (a's first), then its high halves: the pairs of two rows' bfloat16 values."""
    lo, hi = np.uint32(0xFFFF), np.uint32(16)
    return np.stack([(a & lo) | ((b & lo) << hi), (a >> hi) | ((b >> hi) << hi)], axis=1).ravel()


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_a_pair_takes_two_registers_halves():
    """``cg_pair`` (a ``__byte_perm`` on a device): the low halves of two registers, or their high halves, as one
    register, the first's half low; ``tests/test_gpu_device.py`` checks the device's selectors."""
    a, b = np.random.default_rng(3).integers(0, 2 ** 32, size=(2, 256), dtype=np.uint32)
    with hostrun.device() as cp:
        out = cp.zeros(2 * a.size, dtype=cp.uint32)
        cp.RawKernel(PAIR_KERNEL, "pair")((2,), (128,), (cp.asarray(a), cp.asarray(b), out, np.int32(a.size)))
        np.testing.assert_array_equal(out.get(), pair_expected(a, b))


#: ``cg_ex2(a[i], c2, b[i])``: the tf32 and bf16 softmax kernels' weight ``2^(a·c2 − b)`` of a raw score ``a``
EXP_KERNEL = attention_mma.PRELUDE + """
extern "C" __global__ void exp_w(const float* a, const float* b, float c2, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = cg_ex2(a[i], c2, b[i]);
}
#ifdef CG_HOSTRUN
void exp_w__host_warp(unsigned long long block, unsigned warp, const float* a, const float* b, float c2, float* out,
                      int n) {
    for (int l = 0; l < 32; ++l) { const long long i = (long long)block * 128 + warp * 32 + l;
                                   if (i < n) out[i] = cg_ex2(a[i], c2, b[i]); }
}
#endif
"""
#: the scale of the exp cases (``1/√dh``, dh = 64) and the softmax op whose base-2 weights they are
EXP_C = 0.125


def exp_cases() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw scores ``a`` and row statistics ``L`` (natural logsumexp; ``c·a − L`` at most about 0), the weight's
    argument ``x = c·a − L`` in float64: scores and statistics of either sign up to ±100, both large and
    cancelling, ``x`` far below the smallest normal's, a masked score's −inf and NaN."""
    rng = np.random.default_rng(11)
    n = 6000
    L = np.concatenate([rng.normal(0, 3, n // 2), rng.uniform(-100, 100, n // 2)])
    x = np.concatenate([-rng.exponential(4.0, n // 2), -rng.uniform(0, 110, n // 2)])
    a = ((x + L) / EXP_C).astype(np.float32)
    edges_a = np.float32([800.0, -800.0, 0.0, -np.inf, np.nan, 1.0])
    edges_L = np.float32([100.0, -100.0, 0.0, 1.0, 0.0, np.nan])
    a, L = np.concatenate([a, edges_a]), np.concatenate([L.astype(np.float32), edges_L])
    return a, L, EXP_C * a.astype(np.float64) - L.astype(np.float64)


def exp_within_bound(x: np.ndarray, L: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Whether each ``got`` is ``exp(x)`` to the base-2 kernels' bound (:attr:`~.attention.Attention.exp2`):
    ``c₂ = c·log₂ e`` and ``L·log₂ e`` rounded to float32 (and log₂ e itself), then the fused multiply-add's
    rounding, shift ``2^y`` by up to ``(2|x| + 3|L|)·2⁻²⁴`` relative; ``2^y`` adds 2 units (CUDA's ``exp2f``,
    ``ex2.approx``) and its result's rounding one, ``2⁻²¹``; where ``exp(x)`` is below the smallest normal float32,
    a value from 0 to it (a device flushes to zero); NaN for NaN."""
    want = np.exp(x)
    tiny = np.finfo(np.float32).tiny
    with np.errstate(invalid="ignore"):
        close = np.abs(got - want) <= want * ((2 * np.abs(x) + 3 * np.abs(L)) * 2.0 ** -24 + 2.0 ** -21)
        flushed = (want < tiny) & (got >= 0) & (got <= tiny)
    return np.where(np.isnan(x), np.isnan(got), close | flushed)


def _weights(op, a: np.ndarray, L: np.ndarray) -> np.ndarray:
    """``cg_ex2`` of the cases as a kernel calls it (the statistic held as ``L·log₂ e``), on the host."""
    from circuitgrad.backends.gpu.attention import LOG2E
    b = L * LOG2E
    with hostrun.device() as cp:
        out = cp.zeros(a.size, dtype=cp.float32)
        cp.RawKernel(EXP_KERNEL, "exp_w")(((a.size + 127) // 128,), (128,),
                                          (cp.asarray(a), cp.asarray(b), op.c2, out, np.int32(a.size)))
        return out.get()


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_the_kernels_weights_are_exp_to_their_bound_and_the_references():
    """The host's ``cg_ex2`` over the range the kernels use: within :func:`exp_within_bound` of ``exp`` (``2^y``
    without the ``log₂ e``, or ``c₂`` off by a unit of its 12th bit, fails it), and within a unit of the
    reference's (``Attention.ex2``, which the emulation and the tests' expectations use);
    ``tests/test_gpu_device.py`` checks the device's."""
    from circuitgrad.backends.gpu import attention
    from circuitgrad.backends.gpu.attention import LOG2E
    a, L, x = exp_cases()
    op = attention.AttentionForward(cg.NdArrayType((16, 64), cg.float32), True, EXP_C, mma="bf16")
    got = _weights(op, a, L)
    assert np.all(exp_within_bound(x, L, got))
    assert got[-3] == 0.0 and np.isnan(got[-2]) and np.isnan(got[-1])    # masked: 0; NaN stays
    ref = op.ex2(a, op.c2, L * LOG2E)
    assert ref.dtype == np.float32 and np.all(exp_within_bound(x, L, ref))
    finite = ~np.isnan(x)
    assert np.all(np.abs(got[finite].view(np.int32).astype(np.int64) - ref[finite].view(np.int32)) <= 1)
    # the bound is tight enough to catch a scale rounded to fewer bits
    coarse = op.ex2(a, np.float32(op.c2 * (1 + 2.0 ** -12)), L * LOG2E)
    assert not np.all(exp_within_bound(x, L, coarse))
    assert not np.all(exp_within_bound(x, L, np.exp2(x).astype(np.float32)))


POW2_KERNEL = attention_mma.PRELUDE + """
extern "C" __global__ void pow2(const float* d, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = cg_pow2(d[i]);
}
#ifdef CG_HOSTRUN
void pow2__host_warp(unsigned long long block, unsigned warp, const float* d, float* out, int n) {
    for (int l = 0; l < 32; ++l) { const long long i = (long long)block * 128 + warp * 32 + l;
                                   if (i < n) out[i] = cg_pow2(d[i]); }
}
#endif
"""


def pow2_cases() -> tuple[np.ndarray, np.ndarray]:
    """The online softmax's rescalings ``2^d`` (``d`` whole, at most 0: the old power of two less the new one)
    and what they are exactly: float32's normal powers of two, 0 below them (the lowest float as the old
    power of two, before a row's first step, gives 0)."""
    d = np.concatenate([-np.arange(0, 140), [np.finfo(np.float32).min]]).astype(np.float32)
    want = np.where(d >= -126, np.ldexp(np.float32(1), np.maximum(d, -126).astype(np.int32)), 0).astype(np.float32)
    return d, want


def run_pow2(cp) -> np.ndarray:
    """``cg_pow2`` of :func:`pow2_cases` by ``cp`` (CuPy or the host execution mode)."""
    d, _ = pow2_cases()
    out = cp.full(d.size, np.nan, dtype=cp.float32)
    cp.RawKernel(POW2_KERNEL, "pow2")(((d.size + 127) // 128,), (128,), (cp.asarray(d), out, np.int32(d.size)))
    return out.get()


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_the_online_softmax_rescales_by_exact_powers_of_two():
    """``cg_pow2(d)`` is ``2^d`` exactly for whole ``d`` from 0 down to −126, and 0 below (a rescaling that
    rounds would make the online forward's result depend on its steps); ``tests/test_gpu_device.py`` checks the
    device's."""
    with hostrun.device() as cp:
        got = run_pow2(cp)
    np.testing.assert_array_equal(got, pow2_cases()[1])


#: PTX ISA, "Matrix Fragments for mma.m16n8k8" with .tf32, transcribed on its own (g = lane >> 2, t = lane % 4):
#: (row, column) of each register of A (16 × 8), B (8 × 8, row = k) and C/D (16 × 8)
PTX_A = lambda g, t: [(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]  # noqa: E731
PTX_B = lambda g, t: [(t, g), (t + 4, g)]  # noqa: E731
PTX_C = lambda g, t: [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]  # noqa: E731


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("split", [False, True], ids=["mma", "3xtf32"])
def test_the_host_mma_reads_lanes_by_the_ptx_layout(split, tmp_path, rng):
    """The host's ``mma.sync`` (``cg_mma_warp``, ``cg_mma3_warp``) against a transcription of PTX's fragment
    table made here: lanes loaded by the table give ``D = A B + C``, whatever the generator does."""
    import ctypes
    fn = "cg_mma3_warp" if split else "cg_mma_warp"
    (tmp_path / "m.cpp").write_text(
        "#define __host__\n#define __device__\n#include <math.h>\nstruct float4 { float x, y, z, w; };\n"
        + attention_mma.PRELUDE +
        'extern "C" void run(const float* a, const float* b, float* d) {\n'
        "    float* dp[32]; const float* ap[32]; const float* bp[32];\n"
        "    for (int l = 0; l < 32; ++l) { dp[l] = d + 4 * l; ap[l] = a + 4 * l; bp[l] = b + 2 * l; }\n"
        f"    {fn}(dp, ap, bp);\n}}\n")
    r = subprocess.run(["nvcc", "-x", "c++", "-shared", "-Xcompiler", "-fPIC", "-o", str(tmp_path / "m.so"),
                        str(tmp_path / "m.cpp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    lib = ctypes.CDLL(str(tmp_path / "m.so"))
    A, B, C = (rng.normal(size=n).astype(np.float32) for n in ((16, 8), (8, 8), (16, 8)))
    if not split:                                # TF32 operands: their products are exact in float32
        A, B = blas.round_tf32(np, A), blas.round_tf32(np, B)
    a, b, d = np.zeros((32, 4), np.float32), np.zeros((32, 2), np.float32), np.zeros((32, 4), np.float32)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a[lane] = [A[i, j] for i, j in PTX_A(g, t)]
        b[lane] = [B[i, j] for i, j in PTX_B(g, t)]
        d[lane] = [C[i, j] for i, j in PTX_C(g, t)]
    lib.run(*(ctypes.c_void_p(x.ctypes.data) for x in (a, b, d)))
    D = np.zeros((16, 8))
    for lane in range(32):
        for (i, j), x in zip(PTX_C(lane >> 2, lane & 3), d[lane]):
            D[i, j] = x
    want = A.astype(np.float64) @ B + C
    terms = np.abs(A).astype(np.float64) @ np.abs(B) + np.abs(C)
    assert np.all(np.abs(D - want) <= (2.0 ** -21 * split + 9 * 2.0 ** -24) * terms)


#: PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (.bf16), transcribed on its own: A's
#: element i (0 … 7; two a register, the lower i in the low half) at row g for i in {0, 1, 4, 5}, else g + 8,
#: column 2t + (i & 1), plus 8 for i ≥ 4; B's element i (0 … 3) at row 2t + (i & 1), plus 8 for i ≥ 2, column g
PTX16_A = lambda g, t: [(g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >= 4)) for i in range(8)]  # noqa: E731
PTX16_B = lambda g, t: [(2 * t + (i & 1) + 8 * (i >= 2), g) for i in range(4)]  # noqa: E731


def _bf16_pairs(x: np.ndarray) -> np.ndarray:
    """bfloat16 values (float32 with zero low halves), in pairs, as registers: the first of a pair low."""
    bits = x.view(np.uint32) >> 16
    return (bits[..., 0::2] | (bits[..., 1::2] << 16)).astype(np.uint32)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_host_bf16_mma_reads_lanes_by_the_ptx_layout(tmp_path, rng):
    """The host's ``m16n8k16`` bfloat16 ``mma.sync`` (``cg_mma16_warp``) against PTX's fragment table
    transcribed here, with each register's two values packed low first: ``D = A B + C``."""
    import ctypes
    (tmp_path / "m.cpp").write_text(
        "#define __host__\n#define __device__\n#include <math.h>\nstruct float4 { float x, y, z, w; };\n"
        + attention_mma.PRELUDE +
        'extern "C" void run(const unsigned* a, const unsigned* b, float* d) {\n'
        "    float* dp[32]; const unsigned* ap[32]; const unsigned* bp[32];\n"
        "    for (int l = 0; l < 32; ++l) { dp[l] = d + 4 * l; ap[l] = a + 4 * l; bp[l] = b + 2 * l; }\n"
        "    cg_mma16_warp(dp, ap, bp);\n}\n")
    r = subprocess.run(["nvcc", "-x", "c++", "-shared", "-Xcompiler", "-fPIC", "-o", str(tmp_path / "m.so"),
                        str(tmp_path / "m.cpp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    lib = ctypes.CDLL(str(tmp_path / "m.so"))
    A, B = (blas.round_bf16(np, rng.normal(size=n).astype(np.float32)) for n in ((16, 16), (16, 8)))
    C = rng.normal(size=(16, 8)).astype(np.float32)
    a = np.stack([_bf16_pairs(np.array([A[i, j] for i, j in PTX16_A(lane >> 2, lane & 3)], np.float32))
                  for lane in range(32)])
    b = np.stack([_bf16_pairs(np.array([B[i, j] for i, j in PTX16_B(lane >> 2, lane & 3)], np.float32))
                  for lane in range(32)])
    d = np.stack([np.array([C[i, j] for i, j in PTX_C(lane >> 2, lane & 3)], np.float32) for lane in range(32)])
    assert a.shape == (32, 4) and b.shape == (32, 2)
    lib.run(*(ctypes.c_void_p(x.ctypes.data) for x in (a, b, d)))
    D = np.zeros((16, 8))
    for lane in range(32):
        for (i, j), x in zip(PTX_C(lane >> 2, lane & 3), d[lane]):
            D[i, j] = x
    want = A.astype(np.float64) @ B + C          # bfloat16 products are exact; 16 float32 additions
    terms = np.abs(A).astype(np.float64) @ np.abs(B) + np.abs(C)
    assert np.all(np.abs(D - want) <= 17 * 2.0 ** -24 * terms)
    assert np.max(np.abs(D - want)) < 1e-4 * np.max(terms)
