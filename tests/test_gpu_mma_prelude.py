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


#: ``cg_exp`` of each ``x[i]``: the tf32 and bf16 attention kernels' exp (``2^(x·log₂ e)``)
EXP_KERNEL = attention_mma.PRELUDE + """
extern "C" __global__ void exp_w(const float* x, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = cg_exp(x[i]);
}
#ifdef CG_HOSTRUN
void exp_w__host_warp(unsigned long long block, unsigned warp, const float* x, float* out, int n) {
    for (int l = 0; l < 32; ++l) { const long long i = (long long)block * 128 + warp * 32 + l;
                                   if (i < n) out[i] = cg_exp(x[i]); }
}
#endif
"""


def exp_cases() -> np.ndarray:
    """Arguments of the kernels' exp: ``s − L`` and ``s − m`` (at most 0, any size), zeros, the end of the range,
    a positive one, the rescale of a running maximum still at its start (``CG_LOWEST − m``, whose product with
    log₂ e overflows to −inf), a masked score (−inf) and NaN."""
    rng = np.random.default_rng(11)
    edges = [0.0, -0.0, -1e-8, -87.0, -103.0, 1.5, -3.4028235e38, -np.inf, np.nan]
    return np.concatenate([-rng.exponential(4.0, 4000), -rng.uniform(0, 100, 2000), edges]).astype(np.float32)


def exp_within_bound(x: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Whether each ``got`` is ``exp(x)`` to the kernels' bound: ``x·log₂ e`` rounded (and log₂ e itself, a
    float32) shifts the exponent by up to ``1.22·|x|·2⁻²⁴`` relative, ``2^y`` adds 2 units (CUDA's ``exp2f``,
    ``ex2.approx``) and its result's rounding one: ``|x|·2⁻²³ + 2⁻²¹`` of ``exp(x)``; where ``exp(x)`` is below
    the smallest normal float32, a value from 0 to it (a device flushes to zero); NaN for NaN."""
    x64 = x.astype(np.float64)
    want = np.exp(x64)
    tiny = np.finfo(np.float32).tiny
    with np.errstate(invalid="ignore"):
        close = np.abs(got - want) <= want * (np.abs(x64) * 2.0 ** -23 + 2.0 ** -21)
    flushed = (want < tiny) & (got >= 0) & (got <= tiny)
    return np.where(np.isnan(x64), np.isnan(got), close | flushed)


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_the_kernels_exp_is_exp_to_its_bound_and_the_references():
    """The host's ``cg_exp`` over the range the kernels use: within :func:`exp_within_bound` of ``exp`` (a
    ``2^x`` without the ``log₂ e``, or ``exp`` of ``x/2``, fails it), and within a unit of the reference's
    (``Attention.exp``, which the emulation and the tests' expectations use); ``tests/test_gpu_device.py`` checks
    the device's."""
    from circuitgrad.backends.gpu import attention
    x = exp_cases()
    with hostrun.device() as cp:
        out = cp.zeros(x.size, dtype=cp.float32)
        cp.RawKernel(EXP_KERNEL, "exp_w")(((x.size + 127) // 128,), (128,), (cp.asarray(x), out, np.int32(x.size)))
        got = out.get()
    assert np.all(exp_within_bound(x, got))
    assert list(got[-3:-1]) == [0.0, 0.0] and np.isnan(got[-1])    # CG_LOWEST − m and −inf: 0; NaN stays
    op = attention.AttentionForward(cg.NdArrayType((16, 16), cg.float32), True, 0.25, mma="bf16")
    ref = op.exp(x)
    assert ref.dtype == np.float32 and np.all(exp_within_bound(x, ref))
    finite = ~np.isnan(x)
    assert np.all(np.abs(got[finite].view(np.int32).astype(np.int64) - ref[finite].view(np.int32)) <= 1)
    # the float32 kernels keep exp: the reference of a CUDA-core or 3xTF32 kernel is NumPy's
    for mma in ("", "3xtf32"):
        np.testing.assert_array_equal(attention.AttentionForward(op.T, True, 0.25, mma=mma).exp(x), np.exp(x))


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
