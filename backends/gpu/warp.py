"""Kernels whose threads cooperate as a warp (the row kernels of :mod:`~.row`, the sums of :mod:`~.reduction`):
the shuffle butterfly, and its replay on the host.

A device combines the lanes' partials with ``__shfl_xor_sync``; the host cannot run 32 lanes at once, so each
such kernel also has a host-only ``<name>_body(item, …)`` (under ``#ifndef __CUDA_ARCH__``) that runs the lanes
one after another, in ``<name>_lane`` order (:func:`host_lane`), and replays every shuffle exactly with the same
combine function the device calls (:func:`combine`). The host execution mode calls it through
``<name>__host_warp`` (``#ifdef CG_HOSTRUN``, :func:`host_replay`); :mod:`~.host.check` through its loop over items.

The attention kernels (:mod:`~.attention_quad`, :mod:`~.attention_mma`) instead write the warp's code once over
registers that are arrays over its lanes (:data:`LANES`): a device runs it per lane, the host once for the warp.
"""
from __future__ import annotations

__all__ = ["WARP", "FULL", "LANES", "lanes", "host_lane", "combine", "host_replay", "lanes_kernel"]

WARP = 32
FULL = "0xffffffffu"            # the mask of a whole warp's lanes

#: a warp run once on the host: ``CG_LANES { … }`` is a block of statements of one lane (``lane``, ``I``), its
#: registers arrays over lanes indexed by ``I`` (``x[CG_NL]``: one on a device, 32 on the host, where the block
#: loops over the lanes in the host mode's order); ``CG_QUAD(v, OP)`` reduces ``v`` over each quad of lanes by
#: ``__shfl_xor_sync`` (the host replaying the butterfly step by step), ``CG_QUAD_SAME(v)`` checks on the host
#: that a quad's copies agree; ``CG_ANY(flags)`` whether any lane's flag is set (``__any_sync``: a branch the
#: warp takes whole); ``cg_ld4`` reads four floats, 16 bytes at once when ``vec``. Statements outside
#: ``CG_LANES`` are the warp's, the same in every lane (loops, shuffles).
LANES = r"""#ifndef CG_LANES_PRELUDE
#define CG_LANES_PRELUDE
#define CG_LOWEST (-3.402823466e38f)
#ifndef CG_VEC_LOAD
#define CG_VEC_LOAD(p)
#endif
#ifndef CG_ROW
#define CG_ROW(i, n, what) (i)
#endif
// four consecutive elements, in one 16-byte load when vec (the pointers checked aligned) else one by one
__host__ __device__ inline void cg_ld4(float* d, const float* p, bool vec) {
    if (vec) { CG_VEC_LOAD(p); const float4 v = *(const float4*)p; d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w; }
    else { d[0] = p[0]; d[1] = p[1]; d[2] = p[2]; d[3] = p[3]; }
}
__host__ __device__ inline float cg_add(float a, float b) { return a + b; }
// the lane distances of a quad's butterfly (CG_QUAD), one text for the device's shuffles and the host's replay
#define CG_QUAD_STEPS for (int cg_m = 1; cg_m <= 2; cg_m <<= 1)
#ifdef __CUDA_ARCH__
#define CG_NL 1
#define CG_LANES for (int cg_once = 1, lane = (int)(threadIdx.x & 31), I = 0; cg_once; cg_once = 0, (void)lane, (void)I)
// v (a lane's register, an expression in I) reduced by OP over its quad (lanes 4g ... 4g + 3) in a butterfly,
// which leaves the same bits in the quad's four lanes (OP commutative)
#define CG_QUAD(v, OP) do { const int I = 0; CG_QUAD_STEPS v = OP(v, __shfl_xor_sync(0xffffffffu, v, cg_m)); } while (0)
#define CG_QUAD_SAME(v)
// whether any lane's flag (a bool array over lanes) is set: the same in every lane, a branch the warp takes whole
#define CG_ANY(v) __any_sync(0xffffffffu, (v)[0])
#else
#include <string.h>
inline unsigned cg_bits(float x) { unsigned b; memcpy(&b, &x, 4); return b; }
inline float cg_float(unsigned b) { float x; memcpy(&x, &b, 4); return x; }
inline int cg_lane(int l) {                // the host execution mode's thread order: lanes 31 ... 0 in reverse
#ifdef CG_HOSTRUN
    return cg_reverse ? 31 - l : l;
#else
    return l;
#endif
}
#define CG_NL 32
#define CG_LANES for (int cg_l0 = 0, lane = 0, I = 0; cg_l0 < 32 && ((lane = I = cg_lane(cg_l0)), 1); ++cg_l0)
inline bool cg_any(const bool* v) { bool any = false; for (int I = 0; I < 32; ++I) any = any || v[I]; return any; }
#define CG_ANY(v) cg_any(v)
// the quad's butterfly over the lanes' registers, step by step as the device's shuffles
#define CG_QUAD(v, OP) do { CG_QUAD_STEPS { float cg_x[32]; \
    for (int I = 0; I < 32; ++I) cg_x[I] = v; \
    for (int I = 0; I < 32; ++I) v = OP(cg_x[I], cg_x[I ^ cg_m]); } } while (0)
// a statistic every lane of a quad keeps a copy of (the quad's reduction): the copies' bits must agree (NaNs
// aside: the sum of two NaNs takes one's sign, which the butterfly's order picks)
#include <stdio.h>
#include <stdlib.h>
#define CG_QUAD_SAME(v) do { float cg_x[32]; for (int I = 0; I < 32; ++I) cg_x[I] = v; \
    for (int I = 0; I < 32; I += 4) for (int j = 1; j < 4; ++j) if (cg_bits(cg_x[I + j]) != cg_bits(cg_x[I]) && !(cg_x[I + j] != cg_x[I + j] && cg_x[I] != cg_x[I])) { \
        fprintf(stderr, "circuitgrad hostrun: the lanes of quad %d hold different %s: %a in lane %d, %a in lane %d\n", \
                I / 4, #v, (double)cg_x[I], I, (double)cg_x[I + j], I + j); abort(); } } while (0)
#endif
#endif
"""


def lanes(name: str, stmt: str, pad: str = "    ") -> str:
    """Host code: ``stmt`` for the warp's 32 lanes ``l``, one after another, in ``<name>_lane`` order."""
    return f"{pad}for (int l0 = 0; l0 < {WARP}; ++l0) {{ const int l = {name}_lane(l0); {stmt} }}\n"


def host_lane(name: str) -> str:
    """The host-only ``<name>_lane(l)``: a warp's lane ``l`` in the host mode's thread order (31 … 0 in reverse),
    so a kernel's host replay visits its lanes as the host execution mode orders threads."""
    return (f"inline int {name}_lane(int l) {{\n"
            "#ifdef CG_HOSTRUN\n"
            f"    return cg_reverse ? {WARP - 1} - l : l;\n"
            "#else\n"
            "    return l;\n"
            "#endif\n"
            "}\n")


def combine(name: str, tag: str, regs: list[tuple[str, str]], body: str) -> tuple[str, str, str]:
    """One warp reduction from ONE combine template: ``(helper, device loop, host replay)``.

    ``helper`` is the combine function, emitted once: ``<name>_comb_<tag>(T& r…, T r_o…)`` folds the partner's
    partial ``r_o`` into ``r`` (``body``). The device loop shuffles each register with lane ``lane ^ o`` (o = 16
    … 1) and calls it; the host replay calls the same function for every lane ``l`` with lane ``l ^ o``'s value
    (double-buffered, as the shuffle reads every lane's value before any lane combines), lanes in the order of
    ``<name>_lane`` (reversed in the host mode's ``reverse`` order). ``regs``: (register, C type)."""
    fn = f"{name}_comb_{tag}"
    sig = ", ".join([f"{t}& {r}" for r, t in regs] + [f"{t} {r}_o" for r, t in regs])
    helper = f"__host__ __device__ inline void {fn}({sig}) {{ {body} }}\n"
    shf = "".join(f"        const {t} {r}_o = __shfl_xor_sync({FULL}, {r}, o);\n" for r, t in regs)
    device = (f"    for (int o = {WARP // 2}; o > 0; o >>= 1) {{\n" + shf
              + f"        {fn}({', '.join(r for r, _ in regs)}, {', '.join(f'{r}_o' for r, _ in regs)});\n    }}\n")
    host = (f"    for (int o = {WARP // 2}; o > 0; o >>= 1) {{\n"
            + lanes(name, "".join(f"{r}2[l] = {r}[l]; " for r, _ in regs)
                    + f"{fn}({', '.join(f'{r}2[l]' for r, _ in regs)}, {', '.join(f'{r}[l ^ o]' for r, _ in regs)});",
                    "        ")
            + lanes(name, "".join(f"{r}[l] = {r}2[l]; " for r, _ in regs), "        ")
            + "    }\n")
    return helper, device, host


def host_replay(name: str, comment: str, item: str, sig: str, host: str, warp: str) -> str:
    """The host-only part of a warp kernel's source: ``<name>_lane``, ``<name>_body(long long <item>, <sig>)``
    (statements ``host``: the lanes in turn and the shuffles replayed) and, for the host execution mode,
    ``<name>__host_warp(block, warp, <sig>)`` (statements ``warp``). ``comment``: ``//`` lines saying how."""
    return ("#ifndef __CUDA_ARCH__\n" + comment + host_lane(name)
            + f"inline void {name}_body(long long {item}, {sig}) {{\n" + host + "}\n"
            "#ifdef CG_HOSTRUN\n"
            f"void {name}__host_warp(unsigned long long block, unsigned warp, {sig}) {{\n" + warp + "}\n"
            "#endif\n#endif\n")


def lanes_kernel(name: str, sig: str, args: str, body: str, warps: int, comment: str) -> str:
    """The kernel of a warp per item written with :data:`LANES`: ``<name>_warp(item, <sig>)`` (statements
    ``body``), the ``__global__`` entry (a warp an item, ``warps`` of them, whatever the block's size), and for the
    host ``<name>_body`` and ``<name>__host_warp`` (the launch's ``blockDim.x / 32`` warps a block), which run
    the warp once. ``comment``: ``//`` lines saying how the host runs it."""
    return (f"__host__ __device__ inline void {name}_warp(long long item, {sig}) {{\n{body}}}\n"
            f"extern \"C\" __global__ void {name}({sig}) {{\n"
            "#ifdef __CUDA_ARCH__\n"
            f"    const long long item = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;\n"
            f"    if (item < {warps}LL) {name}_warp(item, {args});\n"
            "#endif\n"
            f"}}\n"
            "#ifndef __CUDA_ARCH__\n"
            + comment +
            f"inline void {name}_body(long long item, {sig}) {{ {name}_warp(item, {args}); }}\n"
            "#ifdef CG_HOSTRUN\n"
            f"void {name}__host_warp(unsigned long long block, unsigned warp, {sig}) {{\n"
            f"    const long long item = (long long)block * (blockDim.x / {WARP}) + warp;\n"
            f"    if (item < {warps}LL) {name}_body(item, {args});\n"
            f"}}\n"
            "#endif\n#endif\n")
