"""The streaming attention kernels on the tensor cores (``precision="tf32"`` or ``"bf16"``): a warp per 16 rows.

The kernels of :mod:`.attention_source` (same operands, outputs and recurrences; dk and dv in one under tf32
and bf16, :class:`~.attention.AttentionGradKV`), with every product
a PTX ``mma.sync`` with float32 accumulation: ``m16n8k8`` on TF32 operands (``cvt.rna.tf32`` under ``"tf32"``;
3xTF32 under ``"fp32"`` when asked), ``m16n8k16`` on bfloat16 pairs under ``"bf16"`` (each pair rounded and
packed by one ``cvt.rn.bf16x2.f32``; an operand stored as bfloat16, :mod:`.storage`, read as the pairs it
holds: 8-byte loads, no conversion). Each operand element is
rounded as the unfused definition's product rounds it, so the fused step multiplies what the definition
multiplies. A warp takes 16 rows (query rows: forward and ``dq``; key rows: ``dk`` and ``dv``) and streams the
other side 8 rows at a time (16 under ``"bf16"``, one product's K)::

    scores  S[16×8] = c·(Q[16×dh] Kᵀ[dh×8])        mma over dh, Q's fragments held in registers
    weights P[16×8] from S where the mma left it     a row's statistics reduced over its quad of lanes
    output  O[16×dh] += P[16×8] V[8×dh]             mma per 8 columns, accumulators held in registers

A causal kernel takes the steps that hold the diagonal in a loop of their own (:func:`_steps`): the other
steps, which every row sees whole, test no mask. Nothing goes through shared memory. The weights are computed
in S's accumulator (C) layout and used there as the A operand of the next product, the B operand taking V's rows in the matching order, which permutes the
product's sum, not its terms (FlashAttention-2's trick). ``m16n8k16``: two C tiles are one A operand as they
lie. ``m16n8k8``: A's column ``t`` holds the tile's key ``2t`` and its column ``t + 4`` key ``2t + 1``
(:data:`A_OF_C`). A row's scores lie in the four lanes of a quad: its maximum and sums meet by
``__shfl_xor_sync`` (``CG_QUAD``).

The softmax forward takes two passes over the keys (the row statistic ``L``, then ``O = Σ exp(s − L)·v``) and
the spherical one likewise (``L = 1/√(Σ s² + ε)``, then ``O = Σ (L·s)·v``): the weights are final before they
are rounded for the product, as the definition's are, and no accumulator fragment is rescaled.

Fragment layouts are PTX ISA's (lane ``l``: ``g = l >> 2``, ``t = l & 3``). ``m16n8k8.tf32``: A holds ``(g, t),
(g+8, t), (g, t+4), (g+8, t+4)``; B ``(t, g), (t+4, g)``. ``m16n8k16.bf16``, two values a register, the first
in its low half: A ``(g, 2t|2t+1), (g+8, 2t|2t+1), (g, 2t+8|2t+9), (g+8, 2t+8|2t+9)``; B ``(2t|2t+1, g),
(2t+8|2t+9, g)``. Both: C ``(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)``. On the host (the host execution mode,
:mod:`.host.check`) the warp runs once: ``CG_LANES`` loops over its 32 lanes, a register is an array over lanes,
``CG_MMA`` (``CG_MMA16``) gathers the lanes' fragments into whole tiles with the same layout, multiplies them
and scatters the result back, and ``CG_QUAD`` steps the shuffles' butterfly over the lanes' registers (and
``CG_QUAD_SAME`` checks that a quad's lanes keep the same bits of each statistic).
"""
from __future__ import annotations

import numpy as np

from . import blas
from .attention import LOG2E, Attention, AttentionForward, AttentionGradK, AttentionGradKV, AttentionGradQ, AttentionGradV
from .attention_source import Text, signature, text, warp_kernel
from .kernel import Kernel
from .plan import Launch, Plan
from .storage import STORE
from .warp import LANES, lanes_kernel

__all__ = ["attention_kernel", "source", "ROWS", "KEYS", "WARPS", "PRELUDE", "UNROLL"]

#: how many times the compiler unrolls each loop over the other side's steps (``#pragma unroll`` on the device;
#: 1: as written). More lets it issue a step's loads before the previous step's products finish, at the cost of
#: registers: a tuning knob, measured by ``bench/gpu_attention.py`` (its ``unrolled`` rows) until a device run
#: decides the default. The host runs the loops as written either way.
UNROLL = 1
ROWS = 16      #: rows a warp takes (the mma tile's M)
KEYS = 8       #: rows of the other side an mma tile of scores takes (its N); a step takes one tile, or two (bf16)
WARPS = 4      #: warps a block
#: a C fragment's elements: (row, column) in the tile of lane ``(g, t)``'s registers 0 … 3 (PTX's layout)
C = (("g", "2 * t"), ("g", "2 * t + 1"), ("g + 8", "2 * t"), ("g + 8", "2 * t + 1"))
#: the C element that each A register takes, for a product of weights computed where their scores lie (A's
#: registers hold ``(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)``: columns ``t`` and ``t + 4`` stand for the
#: tile's columns ``2t`` and ``2t + 1``, which permutes the product's sum, not its terms)
A_OF_C = (0, 2, 1, 3)

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
// the low (hi = 0) or high halves of two registers of pairs as one pair, a's first: one PRMT on a device
__host__ __device__ inline unsigned cg_pair(unsigned a, unsigned b, int hi) {
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, hi ? 0x7632 : 0x5410);
#else
    return hi ? (a >> 16) | (b & 0xFFFF0000u) : (a & 0xFFFFu) | (b << 16);
#endif
}
// exp(x) of the tf32 and bf16 kernels (attention.Attention.exp): 2^(x·log2 e), on a device one multiplication
// and ex2.approx (CuPy compiles with -ftz=true), where expf reduces the range in several more instructions
__host__ __device__ inline float cg_exp(float x) { return exp2f(x * LOG2E_F); }
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
""".replace("BF16_BITS", blas.BF16_BITS).replace("LOG2E_F", f"{float(LOG2E):.9g}f").replace("CG_SPLIT", _SPLIT).replace("CG_PACK", _PACK)
#: what a tensor-core kernel's source starts with
PRELUDE = LANES + _MMA


def attention_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """The tensor-core kernel of an ``attention`` step whose op has :attr:`~.attention.Attention.mma`: a warp per
    16 rows."""
    return warp_kernel(step, plan, name, source, WARPS)


def source(op: Attention, name: str, strides: dict[str, tuple[int, ...]] | None = None,
           narrow: frozenset[str] = frozenset(), rounded: dict[str, str] | None = None) -> tuple[str, int, list[str]]:
    """``(CUDA source, warps, parameter names)`` of ``op``'s tensor-core kernel: a warp per 16 rows; the inputs
    in ``narrow`` hold bfloat16 bits (:mod:`.storage`), read as the products' operands they already are; each
    output named in ``rounded`` is also written rounded to bfloat16 (``<name>_rnd``, of C type ``rounded[name]``:
    ``unsigned short`` for its bits, or ``float``; :func:`~.rounding.into_attention`)."""
    assert op.mma in ("tf32", "bf16", "3xtf32"), op.mma
    assert narrow <= op.bf16_inputs(), (narrow, op)
    rounded = rounded or {}
    assert set(rounded) <= set(op.outs.split()) - set("LD"), (rounded, op)
    w = text(op, "float", strides)
    if op.exp2:                     # weights rounded to 11 or 8 bits: exp as 2^(x·log2 e)
        w.exp = "cg_exp"
    assert w.S % ROWS == 0 and w.dh % 16 == 0, op.T
    for n in rounded:               # a copy lies as its result does
        w.strides[f"{n}_rnd"] = w.strides[f"{n}_out"]
    warps = int(np.prod(w.lead)) * (w.S // ROWS)
    sig, args, names = signature(op, "float", narrow, rounded)
    body = {AttentionForward: _forward, AttentionGradQ: _grad_q, AttentionGradV: _grad_kv, AttentionGradKV: _grad_kv,
            AttentionGradK: _grad_kv}[type(op)](op, _Tile(op, w, narrow, rounded))
    comment = ("// the host runs the warp once: its lanes in turn (CG_LANES), its products (CG_MMA) and reductions\n"
               "// across a quad (CG_QUAD) whole\n")
    return PRELUDE + lanes_kernel(name, sig, args, body, warps, comment), warps, names


class _Tile:
    """What a tensor-core kernel's body is written with: :class:`~.attention_source.Text`'s formulas, the
    rounding of an operand, and the fragment loads and stores of the PTX layout (in a ``CG_LANES`` block, where
    ``g = lane >> 2`` and ``t = lane & 3``). A step of a kernel's loop takes :attr:`keys` rows of the other side:
    :attr:`tiles` 16 × 8 tiles of scores (``s[I][u]``), then one product of their weights: two tiles and
    ``m16n8k16`` under ``"bf16"``, else one and ``m16n8k8``."""

    def __init__(self, op: Attention, w: Text, narrow: frozenset[str] = frozenset(),
                 rounded: dict[str, str] | None = None):
        self.op, self.w, self.S, self.dh, self.narrow, self.rounded = op, w, w.S, w.dh, narrow, rounded or {}
        # operands rounded as they are read (tf32, bf16), or split at each product (3xtf32: float32 products)
        self.rnd = {"tf32": "cg_tf32", "bf16": "cg_bf16r", "3xtf32": ""}[op.mma]
        self.k16 = op.mma == "bf16"                 # m16n8k16 on bfloat16 pairs, else m16n8k8 on TF32 values
        self.mma = {"tf32": "CG_MMA", "3xtf32": "CG_MMA3", "bf16": "CG_MMA16"}[op.mma]
        self.nk = w.dh // 8                         # 8-column tiles of an output row
        self.steps = w.dh // (16 if self.k16 else 8)  # products over dh
        self.tiles = 2 if self.k16 else 1           # tiles of scores a step (one product's K: 16 or 8)
        self.keys = KEYS * self.tiles               # rows of the other side a step takes

    def rows(self, *names: str) -> str:
        """The declaration of a warp's A fragments of 16 rows × dh (:meth:`a_rows`)."""
        return ("unsigned " if self.k16 else "float ") + ", ".join(f"{n}[CG_NL][{self.steps}][4]" for n in names)

    def ptr(self, n: str) -> str:
        """``const float* <N> = `` matrix ``bh`` of operand ``n`` (``unsigned short``: bfloat16 bits), with its
        row stride ``rs_<n>``."""
        return (f"    const {STORE if n in self.narrow else 'float'}* {n.upper()}_ = {self.w.at(n, '0')}; "
                f"const long long rs_{n} = {self.w.strides[n][-2]}LL;\n")

    def at(self, n: str, r: str, c: str) -> str:
        """Element ``(r, c)`` of operand ``n``'s matrix ``bh``."""
        return f"{n.upper()}_[({self.w.row(r, n)}) * rs_{n} + ({c})]"

    def aligned(self) -> str:
        """``vec``: whether the operands' rows are read 16 bytes at a time (every row starts on a multiple of four
        elements, and the pointers are 16-byte aligned at run time)."""
        return self.w.aligned or "    const bool vec = false;\n"

    def r(self, x: str) -> str:
        """``x`` rounded as the products' operands are."""
        return f"{self.rnd}({x})"

    def pack(self, lo: str, hi: str) -> str:
        """Two values rounded to bfloat16 in one register, ``lo`` in its low half (``cg_pack_rn``: one
        instruction on a device)."""
        return f"cg_pack_rn({lo}, {hi})"

    def a_rows(self, frag: str, n: str, r0: str) -> str:
        """The A fragments (16 rows × dh) of operand ``n``'s rows ``r0…``, rounded. Lane ``(g, t)`` reads columns
        ``16m + 4t … 16m + 4t + 3`` of rows ``g`` and ``g + 8``, one 16-byte load a row: a permutation of ``dh``
        that :meth:`product`'s B fragments share. They are A's columns ``t`` and ``t + 4`` of products ``2m`` and
        ``2m + 1`` (``m16n8k8``), or its columns ``2t, 2t + 1, 2t + 8, 2t + 9`` of product ``m`` (``m16n8k16``)."""
        r, p = self.r, self.pack
        if n in self.narrow:        # stored rounded: a row's four values are two pairs as they lie
            return (f"for (int m = 0; m < {self.dh // 16}; ++m) {{ unsigned x[2], y[2]; "
                    f"cg_ld4p(x, &{self.at(n, f'{r0} + g', '16 * m + 4 * t')}, vec); "
                    f"cg_ld4p(y, &{self.at(n, f'{r0} + g + 8', '16 * m + 4 * t')}, vec);\n"
                    f"            {frag}[m][0] = x[0]; {frag}[m][1] = y[0]; {frag}[m][2] = x[1]; {frag}[m][3] = y[1]; }}")
        load = (f"for (int m = 0; m < {self.dh // 16}; ++m) {{ float x[4], y[4]; "
                f"cg_ld4(x, &{self.at(n, f'{r0} + g', '16 * m + 4 * t')}, vec); "
                f"cg_ld4(y, &{self.at(n, f'{r0} + g + 8', '16 * m + 4 * t')}, vec);\n")
        if self.k16:
            return (load + f"            {frag}[m][0] = {p('x[0]', 'x[1]')}; {frag}[m][1] = {p('y[0]', 'y[1]')}; "
                    f"{frag}[m][2] = {p('x[2]', 'x[3]')}; {frag}[m][3] = {p('y[2]', 'y[3]')}; }}")
        return (load + f"            {frag}[2 * m][0] = {r('x[0]')}; {frag}[2 * m][1] = {r('y[0]')}; "
                f"{frag}[2 * m][2] = {r('x[1]')}; {frag}[2 * m][3] = {r('y[1]')};\n"
                f"            {frag}[2 * m + 1][0] = {r('x[2]')}; {frag}[2 * m + 1][1] = {r('y[2]')}; "
                f"{frag}[2 * m + 1][2] = {r('x[3]')}; {frag}[2 * m + 1][3] = {r('y[3]')}; }}")

    def product(self, out: str, a: str, other: str, base: str) -> str:
        """``out[u][16×8] += a[16×dh] · other[base + 8u … + 8]ᵀ`` for each of the step's tiles ``u``: the scores (or ``dp``) of a
        step, over dh in :meth:`a_rows`'s column order (lane ``(g, t)`` reads row ``g``'s columns ``16m + 4t …``)."""
        code = ""
        for u in range(self.tiles):
            load = f"float x[4]; cg_ld4(x, &{self.at(other, f'{base} + {8 * u} + g', '16 * m + 4 * t')}, vec);"
            if other in self.narrow:
                code += (f"        for (int m = 0; m < {self.dh // 16}; ++m) {{ unsigned b[CG_NL][2];\n"
                         f"            CG_LANES {{ const int g = lane >> 2, t = lane & 3; "
                         f"cg_ld4p(b[I], &{self.at(other, f'{base} + {8 * u} + g', '16 * m + 4 * t')}, vec); }}\n"
                         f"            {self.mma}({out}[I][{u}], {a}[I][m], b[I]); }}\n")
            elif self.k16:
                code += (f"        for (int m = 0; m < {self.dh // 16}; ++m) {{ unsigned b[CG_NL][2];\n"
                         f"            CG_LANES {{ const int g = lane >> 2, t = lane & 3; {load} "
                         f"b[I][0] = {self.pack('x[0]', 'x[1]')}; b[I][1] = {self.pack('x[2]', 'x[3]')}; }}\n"
                         f"            {self.mma}({out}[I][{u}], {a}[I][m], b[I]); }}\n")
            else:
                r = self.r
                code += (f"        for (int m = 0; m < {self.dh // 16}; ++m) {{ float b[CG_NL][2][2];\n"
                         f"            CG_LANES {{ const int g = lane >> 2, t = lane & 3; {load} "
                         f"b[I][0][0] = {r('x[0]')}; b[I][0][1] = {r('x[1]')}; b[I][1][0] = {r('x[2]')}; "
                         f"b[I][1][1] = {r('x[3]')}; }}\n"
                         f"            {self.mma}({out}[I][{u}], {a}[I][2 * m], b[I][0]);\n"
                         f"            {self.mma}({out}[I][{u}], {a}[I][2 * m + 1], b[I][1]); }}\n")
        return code

    def scale(self, frag: str, c: str) -> str:
        """A step's scores (two C fragments) times ``c``."""
        return f"for (int u = 0; u < {self.tiles}; ++u) for (int e = 0; e < 4; ++e) {frag}[I][u][e] = {frag}[I][u][e] * {c};"

    def scores(self, *names: str) -> str:
        """The declaration of a step's C fragments (:attr:`tiles` of them)."""
        return "float " + ", ".join(f"{n}[CG_NL][{self.tiles}][4]" for n in names)

    def weights_decl(self, name: str) -> str:
        """The declaration of a step's weights as an A operand (:meth:`weights`)."""
        return f"unsigned {name}[CG_NL][4]" if self.k16 else f"float {name}[CG_NL][{self.tiles}][4]"

    def weights(self, frag: str, value) -> str:
        """A step's weights (16 × 16), rounded, as A operands, from the C fragments of its scores where they lie.
        ``value(u, e)`` is the weight of element ``e`` of tile ``u`` (in row ``r``, column ``c`` of the step).
        ``m16n8k16``: C's elements are A's, in order (tile ``u``'s as A's columns ``8u + 2t``, ``8u + 2t + 1``).
        ``m16n8k8``: a product a tile, A's register ``a`` taking C's element ``A_OF_C[a]``, so that A's column
        ``t`` is the tile's column ``2t``, its column ``t + 4`` column ``2t + 1`` (:meth:`accumulate` reads B's
        rows alike)."""
        def one(u: int, e: int, x: str, rnd: str = self.rnd) -> str:
            return f"{{ const int r = {C[e][0]}, c = {8 * u} + {C[e][1]}; {x} = {rnd}({value(u, e)}); }}"
        if self.k16:                # C's elements 2h (low) and 2h + 1 (high) of tile u: A's register 2u + h
            return " ".join(f"{{ float lo, hi; {one(u, 2 * h, 'lo', '')} {one(u, 2 * h + 1, 'hi', '')} "
                            f"{frag}[I][{2 * u + h}] = {self.pack('lo', 'hi')}; }}"
                            for u in range(self.tiles) for h in range(2))
        return " ".join(f"{{ float x; {one(u, e, 'x')} {frag}[I][{u}][{a}] = x; }}"
                        for u in range(self.tiles) for a, e in enumerate(A_OF_C))

    def accumulate(self, acc: str, a: str, n: str, base: str) -> str:
        """``acc[16×dh] += a[16×16] · n[base…base+16, :]``, ``a`` from :meth:`weights` (its columns ``8u + 2t`` and
        ``8u + 2t + 1`` are rows ``8u + 2t`` and ``8u + 2t + 1`` of ``n``): column ``j`` of tile ``nt`` is column
        ``j·dh/8 + nt`` of the output (:meth:`store`), so lane ``(g, t)``'s B values of every tile are the ``dh/8``
        consecutive columns from ``g·dh/8`` of those rows (16-byte loads when ``dh/8`` is a multiple of four)."""
        nt, r = self.nk, self.r
        put = ("b[I][h + e][{u}] = " + self.pack("x[e]", "y[e]") + ";" if self.k16 else
               f"b[I][h + e][0] = {r('x[e]')}; b[I][h + e][1] = {r('y[e]')};")
        # stored rounded (bfloat16 bits): the two rows' values are a pair's halves as they lie, four of a row in
        # two registers of pairs (cg_ld4p), and the rows' e-th halves one register (cg_pair: a byte permutation)
        elem = "unsigned short" if n in self.narrow else "float"
        if n in self.narrow:
            put = "b[I][h + e][{u}] = (unsigned)x[e] | ((unsigned)y[e] << 16);"
            pairs = "b[I][h + e][{u}] = cg_pair(x[e >> 1], y[e >> 1], e & 1);"

        def load(u: int) -> str:
            rows = (f"{base} + {8 * u} + 2 * t", f"{base} + {8 * u} + 2 * t + 1")
            if nt % 4 == 0 and n in self.narrow:
                return (f"for (int h = 0; h < {nt}; h += 4) {{ unsigned x[2], y[2]; "
                        f"cg_ld4p(x, &{self.at(n, rows[0], f'g * {nt} + h')}, vec); "
                        f"cg_ld4p(y, &{self.at(n, rows[1], f'g * {nt} + h')}, vec); "
                        f"for (int e = 0; e < 4; ++e) {{ {pairs.format(u=u)} }} }}")
            if nt % 4 == 0:
                return (f"for (int h = 0; h < {nt}; h += 4) {{ {elem} x[4], y[4]; "
                        f"cg_ld4(x, &{self.at(n, rows[0], f'g * {nt} + h')}, vec); "
                        f"cg_ld4(y, &{self.at(n, rows[1], f'g * {nt} + h')}, vec); "
                        f"for (int e = 0; e < 4; ++e) {{ {put.format(u=u)} }} }}")
            return (f"for (int h = 0; h < {nt}; ++h) {{ const int e = 0; "
                    f"const {elem} x[1] = {{{self.at(n, rows[0], f'g * {nt} + h')}}}, "
                    f"y[1] = {{{self.at(n, rows[1], f'g * {nt} + h')}}}; {put.format(u=u)} }}")
        if self.k16:
            return (f"        {{ unsigned b[CG_NL][{nt}][2];\n"
                    f"          CG_LANES {{ const int g = lane >> 2, t = lane & 3; {load(0)} {load(1)} }}\n"
                    f"          for (int nt = 0; nt < {nt}; ++nt) {self.mma}({acc}[I][nt], {a}[I], b[I][nt]); }}\n")
        return "".join(f"        {{ float b[CG_NL][{nt}][2];\n"
                       f"          CG_LANES {{ const int g = lane >> 2, t = lane & 3; {load(u)} }}\n"
                       f"          for (int nt = 0; nt < {nt}; ++nt) {self.mma}({acc}[I][nt], {a}[I][{u}], b[I][nt]); }}\n"
                       for u in range(self.tiles))

    def store(self, acc: str, n: str, r0: str) -> str:
        """The accumulators (16 × dh) into output ``n``'s rows from ``r0`` (tile ``nt``'s column ``j`` is column
        ``j·dh/8 + nt``, as :meth:`accumulate` reads), and rounded into its copy where :attr:`rounded` names it."""
        code = self._store(acc, n, r0, "out", "float", "{}")
        if n in self.rounded:           # bfloat16's bits, or the rounded float
            kind = self.rounded[n]
            code += self._store(acc, n, r0, "rnd", kind, "cg_bf16r({})" if kind == "float"
                                else f"({kind})(cg_bits(cg_bf16r({{}})) >> 16)")
        return code

    def _store(self, acc: str, n: str, r0: str, suffix: str, ctype: str, value: str) -> str:
        """:meth:`store`'s writes of ``value`` (a format of the accumulator) into ``<n>_<suffix>``."""
        out = f"{n}_{suffix}"
        return (f"    {{ {ctype}* OUT_ = {self.w.at(out, '0')}; const long long rs = {self.w.strides[out][-2]}LL;\n"
                f"      CG_LANES {{ const int g = lane >> 2, t = lane & 3;\n"
                f"        for (int nt = 0; nt < {self.nk}; ++nt) {{ "
                + " ".join(f"OUT_[({self.w.row(f'{r0} + {r}', out)}) * rs + ({c}) * {self.nk} + nt] = "
                           f"{value.format(f'{acc}[I][nt][{e}]')};" for e, (r, c) in enumerate(C))
                + " } } }\n")


def _head(op: Attention, t: _Tile, queries: bool) -> str:
    """The warp's matrix ``bh`` and first row ``r0`` (causal query tiles longest first), and ``vec``."""
    tiles = t.S // ROWS
    tile = (f"{tiles - 1}LL - item % {tiles}LL" if op.causal and queries else f"item % {tiles}LL")
    return f"    const long long bh = item / {tiles}LL, r0 = {ROWS}LL * ({tile});\n" + t.aligned()


def _zero(t: _Tile, *frags: str) -> str:
    """``CG_LANES`` zeroing a step's C fragments (:attr:`_Tile.tiles` of 4 registers a lane)."""
    return (f"        CG_LANES {{ for (int u = 0; u < {t.tiles}; ++u) for (int e = 0; e < 4; ++e) {{ "
            + " ".join(f"{f}[I][u][e] = 0;" for f in frags) + " } }\n")


def _steps(op: Attention, t: _Tile, var: str, queries: bool, body: str, comment: str = "") -> str:
    """The loop over the other side's steps of ``t.keys`` rows, ``body`` its text, in which ``masked`` says
    whether the causal mask is tested. Causal: the steps holding the diagonal (one under bf16, two under tf32 and
    3xTF32) are one loop,
    the steps every row sees entirely another, whose tests the compiler drops; in one loop's order (keys up to
    the diagonal for query rows, queries from it for key rows), so every sum runs as before."""
    k = f"{t.keys}LL"
    if not op.causal:
        ranges = [("0LL", f"{t.S // t.keys}LL", "false")]
    else:
        diagonal = (f"r0 / {k}", f"(r0 + {ROWS}LL) / {k}", "true")
        ranges = ([("0LL", f"r0 / {k}", "false"), diagonal] if queries else
                  [diagonal, (f"(r0 + {ROWS}LL) / {k}", f"{t.S // t.keys}LL", "false")])
    note = f"      // {comment}" if comment else ""
    unroll = f"#ifdef __CUDA_ARCH__\n#pragma unroll {UNROLL}\n#endif\n" if UNROLL > 1 else ""
    return "".join(f"{unroll}    for (long long {var} = {lo}; {var} < {hi}; ++{var}) {{{note}\n"
                   f"        const bool masked = {m}; (void)masked;\n" + body + "    }\n" for lo, hi, m in ranges)


def _per_row(what: str, names: list[str], expr: str) -> str:
    """For the lane's two rows ``h`` (``g``, ``g + 8``): ``expr`` computing ``n[I][h]``, each reduced over the quad,
    whose lanes hold the other columns of the rows (``CG_QUAD`` with ``what``: ``fmaxf`` or ``cg_add``)."""
    return (f"        CG_LANES {{ const int g = lane >> 2, t = lane & 3; (void)g; (void)t;\n"
            f"            for (int h = 0; h < 2; ++h) {{ {expr} }} }}\n"
            + "".join(f"        CG_QUAD({n}[I][{h}], {what});\n" for n in names for h in range(2)))


def _forward(op: AttentionForward, t: _Tile) -> str:
    """16 query rows: the row statistic over the keys they see (pass 1), then ``O = Σ p(s)·v`` (pass 2). A lane
    keeps the statistics of its rows ``g`` and ``g + 8`` (``st[h]``: running maximum and sum, or sum of
    squares), its quad reducing each step's columns; the weights never leave the registers."""
    w, nk = t.w, t.nk
    exp, log, c = w.exp, w.log, w.c
    soft = op.norm == "softmax"
    each = (f"for (int u = 0; u < {t.tiles}; ++u) for (int j = 0; j < 2; ++j) {{ const float x = s[I][u][2 * h + j]; "
            f"if (!masked || jt * {t.keys}LL + 8 * u + 2 * t + j <= r0 + g + 8 * h) ")   # the row's scores it sees
    if soft:        # online softmax: the step's maximum, then its sum of exp(s − m) with the sum so far rescaled
        stats = (_per_row("fmaxf", ["red"], f"float m = CG_LOWEST; {each}m = fmaxf(m, x); }} red[I][h] = m;")
                 + _per_row("cg_add", ["red"],
                            f"const float m = fmaxf(st[I][h][0], red[I][h]); float l = 0; {each}l += {exp}(x - m); }} "
                            f"old[I][h] = st[I][h][1] * {exp}(st[I][h][0] - m); st[I][h][0] = m; red[I][h] = l;")
                 + "        CG_LANES { for (int h = 0; h < 2; ++h) st[I][h][1] = old[I][h] + red[I][h]; }\n")
        init, final = "st[I][h][0] = CG_LOWEST; st[I][h][1] = 0;", f"st[I][h][0] + {log}(st[I][h][1])"
    else:           # the sum of squared scores
        stats = (_per_row("cg_add", ["red"], f"float q = 0; {each}q += x * x; }} red[I][h] = q;")
                 + "        CG_LANES { for (int h = 0; h < 2; ++h) st[I][h][1] = st[I][h][1] + red[I][h]; }\n")
        init, final = "st[I][h][1] = 0;", f"1.0f / {w.sqrt}(st[I][h][1] + {w.eps})"
    weight = lambda u, e: (f"((!masked || jt * {t.keys}LL + c <= r0 + r) ? "  # noqa: E731
                           f"{w.weight(f's[I][{u}][{e}]', f'Lr[I][{e >> 1}]')} : 0.0f)")
    scores = (f"        {t.scores('s')};\n" + _zero(t, "s") + t.product("s", "qa", "k", f"jt * {t.keys}LL"))
    return (_head(op, t, True) + t.ptr("q") + t.ptr("k") + t.ptr("v") +
            f"    {t.rows('qa')}; float acc[CG_NL][{nk}][4], st[CG_NL][2][2], Lr[CG_NL][2];\n"
            f"    CG_LANES {{ const int g = lane >> 2, t = lane & 3;\n"
            f"        {t.a_rows('qa[I]', 'q', 'r0')}\n"
            f"        for (int nt = 0; nt < {nk}; ++nt) acc[I][nt][0] = acc[I][nt][1] = acc[I][nt][2] = acc[I][nt][3] = 0;\n"
            f"        for (int h = 0; h < 2; ++h) {{ {init} }} }}\n"
            + _steps(op, t, "jt", True, scores +
                     f"        float red[CG_NL][2]{', old[CG_NL][2]' if soft else ''};\n"
                     f"        CG_LANES {{ {t.scale('s', c)} }}\n" + stats, "pass 1: the rows' statistics") +
            f"    CG_LANES {{ for (int h = 0; h < 2; ++h) Lr[I][h] = {final}; }}\n"
            f"    CG_QUAD_SAME(Lr[I][0]); CG_QUAD_SAME(Lr[I][1]);\n"
            + _steps(op, t, "jt", True, scores +
                     f"        {t.weights_decl('pa')};\n"
                     f"        CG_LANES {{ const int g = lane >> 2, t = lane & 3; {t.scale('s', c)} "
                     f"{t.weights('pa', weight)} }}\n"
                     + t.accumulate("acc", "pa", "v", f"jt * {t.keys}LL"), "pass 2: O += p(s) v")
            + t.store("acc", "O", "r0") +
            f"    CG_LANES {{ const int g = lane >> 2, t = lane & 3; "
            f"if (t == 0) {{ {w.stat('L_out', 'r0 + g')} = Lr[I][0]; {w.stat('L_out', 'r0 + g + 8')} = Lr[I][1]; }} }}\n")


def _grad_q(op: AttentionGradQ, t: _Tile) -> str:
    """16 query rows: ``D = rowsum(dO∘O)`` (a lane's columns, then its quad's), then ``dq = Σ (c·ds)·k`` over
    the keys they see."""
    w, nk = t.w, t.nk
    grad = lambda u, e: (f"((!masked || jt * {t.keys}LL + c <= r0 + r) ? {w.c} * "  # noqa: E731
                         f"({w.ds(f's[I][{u}][{e}]', f'dp[I][{u}][{e}]', f'Lr[I][{e >> 1}]', f'Dr[I][{e >> 1}]')}) : 0.0f)")
    row = "r0 + g + 8 * h"
    D = (f"Lr[I][h] = {w.stat('L', row)}; float x = 0; for (int m = 0; m < {t.dh // 16}; ++m) {{ "
         f"float o[4], d[4]; cg_ld4(d, &{t.at('dO', row, '16 * m + 4 * t')}, vec); "
         f"cg_ld4(o, &{t.at('O', row, '16 * m + 4 * t')}, vec); for (int e = 0; e < 4; ++e) x += d[e] * o[e]; }} "
         f"Dr[I][h] = x;")
    return (_head(op, t, True) + t.ptr("q") + t.ptr("k") + t.ptr("v") + t.ptr("O") + t.ptr("dO") +
            f"    {t.rows('qa', 'da')}; float acc[CG_NL][{nk}][4], Lr[CG_NL][2], Dr[CG_NL][2];\n"
            f"    CG_LANES {{ const int g = lane >> 2, t = lane & 3;\n"
            f"        {t.a_rows('qa[I]', 'q', 'r0')}\n        {t.a_rows('da[I]', 'dO', 'r0')}\n"
            f"        for (int nt = 0; nt < {nk}; ++nt) acc[I][nt][0] = acc[I][nt][1] = acc[I][nt][2] = acc[I][nt][3] = 0; }}\n"
            + _per_row("cg_add", ["Dr"], D) +
            f"    CG_QUAD_SAME(Dr[I][0]); CG_QUAD_SAME(Dr[I][1]);\n"
            f"    CG_LANES {{ const int g = lane >> 2, t = lane & 3; "
            f"if (t == 0) {{ {w.stat('D_out', 'r0 + g')} = Dr[I][0]; {w.stat('D_out', 'r0 + g + 8')} = Dr[I][1]; }} }}\n"
            + _steps(op, t, "jt", True,
                     f"        {t.scores('s', 'dp')}; {t.weights_decl('ga')};\n"
                     + _zero(t, "s", "dp")
                     + t.product("s", "qa", "k", f"jt * {t.keys}LL")
                     + t.product("dp", "da", "v", f"jt * {t.keys}LL") +
                     f"        CG_LANES {{ const int g = lane >> 2, t = lane & 3; {t.scale('s', w.c)} "
                     f"{t.weights('ga', grad)} }}\n"
                     + t.accumulate("acc", "ga", "k", f"jt * {t.keys}LL"))
            + t.store("acc", "dq", "r0"))


def _grad_kv(op: Attention, t: _Tile) -> str:
    """16 key rows: ``dk = Σ (c·ds)·q``, ``dv = Σ p·dO`` or both (:class:`~.attention.AttentionGradKV`: one
    score and one ``dp`` tile for both) over the query rows that see them, 16 at a time (the tiles hold ``Sᵀ``: a
    key per row, a query per column; a lane reads ``L`` and ``D`` of its four queries)."""
    w, nk = t.w, t.nk
    grad_k = isinstance(op, (AttentionGradK, AttentionGradKV))
    grad_v = not isinstance(op, AttentionGradK)
    seen = f"(!masked || r0 + r <= it * {t.keys}LL + c)"
    weight = lambda u, e: f"({seen} ? {w.weight(f's[I][{u}][{e}]', f'Lq[{u}][{e & 1}]')} : 0.0f)"  # noqa: E731
    both = grad_k and grad_v        # each weight once (pw), and the score's gradient from it (Text.ds_p)
    ds = (lambda u, e: w.ds_p(f"pw[{u}][{e}]", f"dp[I][{u}][{e}]", f"Lq[{u}][{e & 1}]", f"Dq[{u}][{e & 1}]")) if both \
        else (lambda u, e: w.ds(f"s[I][{u}][{e}]", f"dp[I][{u}][{e}]", f"Lq[{u}][{e & 1}]", f"Dq[{u}][{e & 1}]"))
    grad = lambda u, e: f"({seen} ? {w.c} * ({ds(u, e)}) : 0.0f)"  # noqa: E731
    pw = ""
    if both:
        pw = f"float pw[{t.tiles}][4]; " + " ".join(
            f"{{ const int r = {C[e][0]}, c = {8 * u} + {C[e][1]}; pw[{u}][{e}] = {weight(u, e)}; }}"
            for u in range(t.tiles) for e in range(4))
        weight = lambda u, e: f"pw[{u}][{e}]"  # noqa: E731
    query = f"it * {t.keys}LL + 8 * u + 2 * t + j"
    stats = (f"float Lq[{t.tiles}][2]{f', Dq[{t.tiles}][2]' if grad_k else ''}; "
             f"for (int u = 0; u < {t.tiles}; ++u) for (int j = 0; j < 2; ++j) "
             f"{{ Lq[u][j] = {w.stat('L', query)}; " + (f"Dq[u][j] = {w.stat('D', query)}; " if grad_k else "") + "}")
    accs = (["acc"] if grad_k else []) + (["accv"] if grad_v else [])
    frags = (["ga"] if grad_k else []) + (["pa"] if grad_v else [])
    regs = t.rows("ka", *(["va"] if grad_k else [])) + "".join(f"; float {a}[CG_NL][{nk}][4]" for a in accs)
    loads = t.a_rows("ka[I]", "k", "r0") + ("\n        " + t.a_rows("va[I]", "v", "r0")
                                                          if grad_k else "")
    dp = (t.product("dp", "va", "dO", f"it * {t.keys}LL") if grad_k else "")
    zero = " ".join(f"{a}[I][nt][0] = {a}[I][nt][1] = {a}[I][nt][2] = {a}[I][nt][3] = 0;" for a in accs)
    weights = " ".join(t.weights(f, v) for f, v in zip(frags, ([grad] if grad_k else []) + ([weight] if grad_v else [])))
    base = f"it * {t.keys}LL"
    return (_head(op, t, False) + t.ptr("q") + t.ptr("k") + (t.ptr("v") if grad_k else "") + t.ptr("dO") +
            f"    {regs};\n"
            f"    CG_LANES {{ const int g = lane >> 2, t = lane & 3;\n"
            f"        {loads}\n"
            f"        for (int nt = 0; nt < {nk}; ++nt) {{ {zero} }} }}\n"
            + _steps(op, t, "it", False,
                     f"        {t.scores('s', *(['dp'] if grad_k else []))}; "
                     + "; ".join(t.weights_decl(f) for f in frags) + ";\n"
                     + _zero(t, "s", *(["dp"] if grad_k else []))
                     + t.product("s", "ka", "q", base) + dp +
                     f"        CG_LANES {{ const int g = lane >> 2, t = lane & 3; {t.scale('s', w.c)} {stats}\n"
                     f"            {pw}{weights} }}\n"
                     + (t.accumulate("acc", "ga", "q", base) if grad_k else "")
                     + (t.accumulate("accv", "pa", "dO", base) if grad_v else ""))
            + (t.store("acc", "dk", "r0") if grad_k else "")
            + (t.store("accv", "dv", "r0") if grad_v else ""))
