"""The warp's tensor-core products as the attention kernels write them (:mod:`.attention_mma`): PTX ``mma.sync``
on a device, and on the host (the host execution mode) the same product of the warp's whole tiles.

:data:`PRELUDE` is what a tensor-core kernel's source starts with: the lane macros (:data:`.warp.LANES`), then
``cg_mma`` (``m16n8k8`` on TF32 values), ``cg_mma3`` (3xTF32), ``cg_mma16`` (``m16n8k16`` on bfloat16 pairs),
the roundings ``cg_tf32`` and ``cg_bf16r``, ``cg_pack_rn`` (two floats rounded and packed by one
``cvt.rn.bf16x2.f32``), the stored-bfloat16 loads ``cg_ld4p``, ``cg_ld8p`` and ``cg_pair`` (one ``PRMT``), the
stores of two pairs ``cg_st4p``, and
``cg_ex2``, the base-2 softmax weight (:attr:`.attention.Attention.exp2`), and ``cg_pow2``, the online softmax's
exact rescaling. On the host ``CG_MMA`` (``CG_MMA16``,
``CG_MMA3``) gathers the lanes' fragments into whole tiles by PTX's layout, multiplies them and scatters the
result back.
"""
from __future__ import annotations

from . import blas
from .warp import LANES

__all__ = ["PRELUDE"]

#: 3xTF32's split, one text for the device's ``cg_mma3`` and the host's ``cg_mma3_warp`` (each with its ``cg_tf32``)
_SPLIT = ("inline void cg_split(float* hi, float* lo, const float* x, int n) {   // TF32 part, remainder's TF32 part\n"
          "    for (int e = 0; e < n; ++e) { hi[e] = cg_tf32(x[e]); lo[e] = cg_tf32(x[e] - hi[e]); }\n}")

#: two bfloat16 values (rounded already: their low halves zero) in a register, the first in its low half; one
#: text for the device and the host (each with its ``cg_bits``)
_PACK = "inline unsigned cg_pack(float lo, float hi) { return (cg_bits(lo) >> 16) | (cg_bits(hi) & 0xFFFF0000u); }"

#: the helpers every tensor-core attention kernel uses, once per compilation unit (after :data:`.warp.LANES`)
_MMA = r"""#ifndef CG_MMA_PRELUDE
#define CG_MMA_PRELUDE
#ifndef CG_VEC_LOAD8
#define CG_VEC_LOAD8(p)
#endif
#ifndef CG_VEC_STORE
#define CG_VEC_STORE(p, bytes)
#endif
// four consecutive bfloat16 values stored as their bits (storage.py), rounded already: as two registers of
// pairs, each pair's first value in the low half; one 8-byte load when vec
__host__ __device__ inline void cg_ld4p(unsigned* d, const unsigned short* p, bool vec) {
    if (vec) {
        CG_VEC_LOAD8(p);
#ifdef __CUDA_ARCH__
        const uint2 v = *(const uint2*)p; d[0] = v.x; d[1] = v.y;
#else
        memcpy(d, p, 8);                // the same two registers: little-endian, as the device
#endif
    } else { d[0] = p[0] | ((unsigned)p[1] << 16); d[1] = p[2] | ((unsigned)p[3] << 16); }
}
// eight consecutive bfloat16 values stored as their bits, as four registers of pairs: one 16-byte load when
// vec16, else two cg_ld4p
__host__ __device__ inline void cg_ld8p(unsigned* d, const unsigned short* p, bool vec16, bool vec) {
    if (vec16) {
        CG_VEC_LOAD(p);
#ifdef __CUDA_ARCH__
        const uint4 v = *(const uint4*)p; d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;
#else
        memcpy(d, p, 16);
#endif
    } else { cg_ld4p(d, p, vec); cg_ld4p(d + 2, p + 4, vec); }
}
// the low (hi = 0) or high halves of two registers of pairs as one pair, a's first: one PRMT on a device
__host__ __device__ inline unsigned cg_pair(unsigned a, unsigned b, int hi) {
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, hi ? 0x7632 : 0x5410);
#else
    return hi ? (a >> 16) | (b & 0xFFFF0000u) : (a & 0xFFFFu) | (b << 16);
#endif
}
// two registers of bfloat16 pairs (four values, the first in a's low half) stored at p as their bits: one 8-byte
// store when vec, else one by one; as floats, cg_st4p's overload of float* (the device's and the host's)
__host__ __device__ inline void cg_st4p(unsigned short* p, unsigned a, unsigned b, bool vec) {
    if (vec) {
        CG_VEC_STORE(p, 8);
#ifdef __CUDA_ARCH__
        *(uint2*)p = make_uint2(a, b);
#else
        const unsigned d[2] = {a, b}; memcpy(p, d, 8);
#endif
    } else {
        p[0] = (unsigned short)(a & 0xFFFFu); p[1] = (unsigned short)(a >> 16);
        p[2] = (unsigned short)(b & 0xFFFFu); p[3] = (unsigned short)(b >> 16);
    }
}
// 2^(a·c2 − b) of the tf32 and bf16 softmax kernels, which work in base 2 (attention.Attention.exp2, ex2): on a
// device one FFMA and ex2.approx (CuPy compiles with -ftz=true)
__host__ __device__ inline float cg_ex2(float a, float c2, float b) { return exp2f(fmaf(a, c2, -b)); }
// 2^d for a whole d <= 0 (a rescaling of the online softmax), exactly; 0 below float32's normal range
__host__ __device__ inline float cg_pow2(float d) {
    const unsigned b = d < -126.0f ? 0u : (unsigned)(127 + (int)d) << 23;
#ifdef __CUDA_ARCH__
    return __uint_as_float(b);
#else
    float x; memcpy(&x, &b, 4); return x;
#endif
}
#ifdef __CUDA_ARCH__
__device__ inline float cg_tf32(float x) { unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return __uint_as_float(r); }
__device__ CG_SPLIT
__device__ inline float cg_bf16r(float x) { const unsigned b = __float_as_uint(x); return __uint_as_float(((unsigned)BF16_BITS) << 16); }
// D += A B: one m16n8k8 TF32 product of the warp (A: 4 registers, B: 2, C and D: 4 a lane)
__device__ inline void cg_mma(float* d, const float* a, const float* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
                   "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
}
// D += A B in three TF32 products of each operand's TF32 part and remainder (3xTF32, as CUTLASS's
// OpMultiplyAddFastF32): a float32 product to about 2^-21 of its terms; the small terms first
__device__ inline void cg_mma3(float* d, const float* a, const float* b) {
    float ah[4], al[4], bh[2], bl[2];
    cg_split(ah, al, a, 4); cg_split(bh, bl, b, 2);
    cg_mma(d, al, bh); cg_mma(d, ah, bl); cg_mma(d, ah, bh);
}
__device__ inline unsigned cg_bits(float x) { return __float_as_uint(x); }
__device__ CG_PACK
// two floats rounded to bfloat16 (nearest even) and packed, the first in the low half, in one instruction
// (cvt.rn.bf16x2.f32 d, a, b puts a in d's upper half); the host rounds each (cg_bf16r), then packs
__device__ inline unsigned cg_pack_rn(float lo, float hi) {
    unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
// D += A B: one m16n8k16 bfloat16 product of the warp (A: 4 registers of two values, B: 2; C and D: 4 floats)
__device__ inline void cg_mma16(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ inline void cg_st4p(float* p, unsigned a, unsigned b, bool vec) {   // one 16-byte store when vec
    const float4 x = make_float4(__uint_as_float(a << 16), __uint_as_float(a & 0xFFFF0000u),
                                 __uint_as_float(b << 16), __uint_as_float(b & 0xFFFF0000u));
    if (vec) *(float4*)p = x; else { p[0] = x.x; p[1] = x.y; p[2] = x.z; p[3] = x.w; }
}
#define CG_MMA(D, A, B) do { const int I = 0; cg_mma(D, A, B); } while (0)
#define CG_MMA3(D, A, B) do { const int I = 0; cg_mma3(D, A, B); } while (0)
#define CG_MMA16(D, A, B) do { const int I = 0; cg_mma16(D, A, B); } while (0)
#else
inline float cg_tf32(float x) {             // cvt.rna.tf32.f32; a NaN the quiet NaN of its sign (blas.round_tf32)
    const unsigned b = cg_bits(x);
    return cg_float((b & 0x7FFFFFFFu) > 0x7F800000u ? (b & 0x80000000u) | 0x7FC00000u : (b + 0x1000u) & 0xFFFFE000u);
}
CG_SPLIT
inline float cg_bf16r(float x) { const unsigned b = cg_bits(x); return cg_float(((unsigned)BF16_BITS) << 16); }
// D = A B + C of the warp on the host, over the first K columns of A (16 × K) and rows of B (K × 8), with C and D
// in the lanes' registers by PTX's layout (the same for m16n8k8 and m16n8k16).
inline void cg_mma_tiles(float* d[32], const float A[16][16], const float B[16][8], int K) {
    float C[16][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        C[g][2 * t] = d[l][0]; C[g][2 * t + 1] = d[l][1]; C[g + 8][2 * t] = d[l][2]; C[g + 8][2 * t + 1] = d[l][3];
    }
    for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j) {
            float s = C[i][j];
            for (int k = 0; k < K; ++k) s += A[i][k] * B[k][j];
            C[i][j] = s;
        }
    for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        d[l][0] = C[g][2 * t]; d[l][1] = C[g][2 * t + 1]; d[l][2] = C[g + 8][2 * t]; d[l][3] = C[g + 8][2 * t + 1];
    }
}
// The warp's m16n8k8 TF32 mma.sync on the host: the lanes' fragments gathered into whole tiles (PTX's layout).
inline void cg_mma_warp(float* d[32], const float* a[32], const float* b[32]) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        A[g][t] = a[l][0]; A[g + 8][t] = a[l][1]; A[g][t + 4] = a[l][2]; A[g + 8][t + 4] = a[l][3];
        B[t][g] = b[l][0]; B[t + 4][g] = b[l][1];
    }
    cg_mma_tiles(d, A, B, 8);
}
CG_PACK
inline unsigned cg_pack_rn(float lo, float hi) { return cg_pack(cg_bf16r(lo), cg_bf16r(hi)); }
inline float cg_lo(unsigned p) { return cg_float(p << 16); }
inline float cg_hi(unsigned p) { return cg_float(p & 0xFFFF0000u); }
inline void cg_st4p(float* p, unsigned a, unsigned b, bool vec) {
    if (vec) CG_VEC_STORE(p, 16);
    p[0] = cg_lo(a); p[1] = cg_hi(a); p[2] = cg_lo(b); p[3] = cg_hi(b);
}
// The warp's m16n8k16 bfloat16 mma.sync on the host (PTX's layout: A's registers hold (g, 2t | 2t+1),
// (g+8, 2t | 2t+1), (g, 2t+8 | 2t+9), (g+8, 2t+8 | 2t+9), B's (2t | 2t+1, g), (2t+8 | 2t+9, g), low half first).
inline void cg_mma16_warp(float* d[32], const unsigned* a[32], const unsigned* b[32]) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        for (int h = 0; h < 2; ++h) {
            A[g][2 * t + 8 * h] = cg_lo(a[l][2 * h]); A[g][2 * t + 8 * h + 1] = cg_hi(a[l][2 * h]);
            A[g + 8][2 * t + 8 * h] = cg_lo(a[l][2 * h + 1]); A[g + 8][2 * t + 8 * h + 1] = cg_hi(a[l][2 * h + 1]);
            B[2 * t + 8 * h][g] = cg_lo(b[l][h]); B[2 * t + 8 * h + 1][g] = cg_hi(b[l][h]);
        }
    }
    cg_mma_tiles(d, A, B, 16);
}
// 3xTF32 on the host: each lane's operands split as on the device, then the warp's three products in turn
inline void cg_mma3_warp(float* d[32], const float* a[32], const float* b[32]) {
    float ah[32][4], al[32][4], bh[32][2], bl[32][2];
    const float *pah[32], *pal[32], *pbh[32], *pbl[32];
    for (int l = 0; l < 32; ++l) {
        cg_split(ah[l], al[l], a[l], 4); cg_split(bh[l], bl[l], b[l], 2);
        pah[l] = ah[l]; pal[l] = al[l]; pbh[l] = bh[l]; pbl[l] = bl[l];
    }
    cg_mma_warp(d, pal, pbh); cg_mma_warp(d, pah, pbl); cg_mma_warp(d, pah, pbh);
}
#define CG_MMA(D, A, B) do { float* cg_d[32]; const float* cg_a[32]; const float* cg_b[32]; \
    for (int I = 0; I < 32; ++I) { cg_d[I] = D; cg_a[I] = A; cg_b[I] = B; } cg_mma_warp(cg_d, cg_a, cg_b); } while (0)
#define CG_MMA16(D, A, B) do { float* cg_d[32]; const unsigned* cg_a[32]; const unsigned* cg_b[32]; \
    for (int I = 0; I < 32; ++I) { cg_d[I] = D; cg_a[I] = A; cg_b[I] = B; } cg_mma16_warp(cg_d, cg_a, cg_b); } while (0)
#define CG_MMA3(D, A, B) do { float* cg_d[32]; const float* cg_a[32]; const float* cg_b[32]; \
    for (int I = 0; I < 32; ++I) { cg_d[I] = D; cg_a[I] = A; cg_b[I] = B; } cg_mma3_warp(cg_d, cg_a, cg_b); } while (0)
#endif
#endif
""".replace("BF16_BITS", blas.BF16_BITS).replace("CG_SPLIT", _SPLIT).replace("CG_PACK", _PACK)
#: what a tensor-core kernel's source starts with
PRELUDE = LANES + _MMA
