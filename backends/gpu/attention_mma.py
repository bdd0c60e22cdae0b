"""The streaming attention kernels on the tensor cores (``precision="tf32"`` or ``"bf16"``): a warp per 16 rows.

The kernels of :mod:`.attention_source` (same operands, outputs and recurrences; dk and dv in one under tf32
and bf16, :class:`~.attention.AttentionGradKV`), with every product
a PTX ``mma.sync`` with float32 accumulation: ``m16n8k8`` on TF32 operands (``cvt.rna.tf32`` under ``"tf32"``;
3xTF32 under ``"fp32"`` when asked), ``m16n8k16`` on bfloat16 pairs under ``"bf16"`` (each pair rounded and
packed by one ``cvt.rn.bf16x2.f32``; an operand stored as bfloat16, :mod:`.storage`, read as the pairs it
holds, no conversion: eight values, two products' operands, a 16-byte load where ``dh`` is a multiple of 32).
Each operand element is rounded as the unfused definition's product rounds it, so the fused step multiplies
what the definition multiplies. A warp takes 16 rows (query rows: forward and ``dq``; key rows: ``dk`` and ``dv``) and streams the
other side 8 rows at a time (16 under ``"bf16"``, one product's K)::

    scores  S[16×8] = c·(Q[16×dh] Kᵀ[dh×8])        mma over dh, Q's fragments held in registers
    weights P[16×8] from S where the mma left it     a row's statistics reduced over its quad of lanes
                                                     (softmax in base 2 under tf32, bf16: Attention.exp2)
    output  O[16×dh] += P[16×8] V[8×dh]             mma per 8 columns, accumulators held in registers

A causal kernel takes the steps that hold the diagonal in a loop of their own (:func:`_steps`): the other
steps, which every row sees whole, test no mask. Nothing goes through shared memory. The weights are computed
in S's accumulator (C) layout and used there as the A operand of the next product, the B operand taking V's rows in the matching order, which permutes the
product's sum, not its terms (FlashAttention-2's trick). ``m16n8k16``: two C tiles are one A operand as they
lie. ``m16n8k8``: A's column ``t`` holds the tile's key ``2t`` and its column ``t + 4`` key ``2t + 1``
(:data:`A_OF_C`). A row's scores lie in the four lanes of a quad: its maximum and sums meet by
``__shfl_xor_sync`` (``CG_QUAD``).

The forward takes one pass over the keys. Softmax in base 2 (:func:`_online`): weights at a whole power of two
per row, rounded unnormalised, the output divided by their sum at the end; the power of two moves in a branch
the warp rarely takes, and rescaling by it is exact, so no rounding depends on the steps' order. Spherical
(:func:`_one_pass`): the scores themselves, the output scaled by ``L = 1/√(Σ s² + ε)`` at the end. Softmax
not in base 2 (3xTF32, or ``c ≤ 0``) takes two passes (``L``, then ``O = Σ exp(s − L)·v``).

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

from .attention import LN2, LOG2E, Attention, AttentionForward, AttentionGradK, AttentionGradKV, AttentionGradQ, AttentionGradV
from .attention_source import Text, signature, text, warp_kernel
from .cuda import literal
from .kernel import Kernel
from .plan import Launch, Plan
from .mma import PRELUDE
from .storage import STORE
from .warp import lanes_kernel

__all__ = ["attention_kernel", "source", "ROWS", "KEYS", "WARPS", "PRELUDE", "UNROLL"]

#: how many times the compiler unrolls each loop over the other side's steps (``#pragma unroll`` on the device;
#: 1: as written). More lets it issue a step's loads before the previous step's products finish, at the cost of
#: registers: a tuning knob, measured by ``bench/gpu_attention.py`` (its ``unrolled`` rows) until a device run
#: decides the default. The host runs the loops as written either way.
UNROLL = 1
ROWS = 16      #: rows a warp takes (the mma tile's M)
KEYS = 8       #: rows of the other side an mma tile of scores takes (its N); a step takes one tile, or two (bf16)
#: the online softmax moves a row's power of two ``M`` only where a lane's weights of a step sum to more than
#: ``2^RESCALE`` (at the latest where a score passes ``M`` by this, base 2): weights up to ``2⁸``, and a
#: rescaling rarely after the first step (FlashAttention-4's threshold)
RESCALE = 8
WARPS = 4      #: warps a block
#: a C fragment's elements: (row, column) in the tile of lane ``(g, t)``'s registers 0 … 3 (PTX's layout)
C = (("g", "2 * t"), ("g", "2 * t + 1"), ("g + 8", "2 * t"), ("g + 8", "2 * t + 1"))
#: the C element that each A register takes, for a product of weights computed where their scores lie (A's
#: registers hold ``(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)``: columns ``t`` and ``t + 4`` stand for the
#: tile's columns ``2t`` and ``2t + 1``, which permutes the product's sum, not its terms)
A_OF_C = (0, 2, 1, 3)

def attention_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """The tensor-core kernel of an ``attention`` step whose op has :attr:`~.attention.Attention.mma`: a warp per
    16 rows."""
    return warp_kernel(step, plan, name, source, WARPS)


def source(op: Attention, name: str, strides: dict[str, tuple[int, ...]] | None = None,
           narrow: frozenset[str] = frozenset(), rounded: dict[str, str] | None = None) -> tuple[str, int, list[str]]:
    """``(CUDA source, warps, parameter names)`` of ``op``'s tensor-core kernel: a warp per 16 rows; the inputs
    in ``narrow`` hold bfloat16 bits (:mod:`.storage`), read as the products' operands they already are; each
    output named in ``rounded`` is also written rounded to bfloat16 (``<name>_rnd``, of C type ``rounded[name]``:
    ``unsigned short`` for its bits, or ``float``; :func:`~.rounding.into_attention`), and so is each input named
    there that the kernel reads whole (:meth:`~.attention.Attention.copies`: ``dq``'s ``dO``, under bf16)."""
    assert op.mma in ("tf32", "bf16", "3xtf32"), op.mma
    assert narrow <= op.bf16_inputs(), (narrow, op)
    rounded = rounded or {}
    assert set(rounded) <= set(op.outs.split()) - set("LD") | op.copies(), (rounded, op)
    w = text(op, "float", strides)          # its strides name each copy's (<name>_rnd)
    assert w.S % ROWS == 0 and w.dh % 16 == 0, op.T
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
        self.base2 = op.exp2                        # softmax in base 2: weights 2^(a·c2 − L·log2 e) of raw scores a
        #                                             (the backward's; the forward's at a power of two, _online)
        # columns of a row a lane reads for the products over dh (:meth:`a_rows`): 8 (two m16n8k16 products, one
        # 16-byte load of a stored bfloat16 row) where dh allows, else 4
        self.W = 8 if self.k16 and self.dh % 32 == 0 else 4
        # stored operands' rows start on multiples of eight elements: 16-byte loads when the pointers are aligned
        self.row8 = all(st % 8 == 0 for n in narrow for st in w.strides[n][:-1])
        self.c2 = literal(op.c2, "float")

    def scaled(self, frag: str) -> str:
        """A step's scores ``frag`` times ``c``, where the weights need them so (not in base 2: the scale is ``c2``)."""
        return "" if self.base2 else self.scale(frag, self.w.c)

    def held(self, L: str) -> str:
        """A row's statistic ``L`` as the weights take it: ``L·log₂ e`` in base 2."""
        return f"{L} * {literal(LOG2E, 'float')}" if self.base2 else L

    def weight(self, s: str, L: str) -> str:
        """The weight of score ``s`` (raw in base 2) in a row whose statistic is held as ``L`` (:meth:`held`)."""
        return f"cg_ex2({s}, {self.c2}, {L})" if self.base2 else self.w.weight(s, L)

    def ds(self, s: str, dp: str, L: str, D: str) -> str:
        """The score's gradient before the scale ``c`` (:meth:`.attention_source.Text.ds`), its weight by
        :meth:`weight`."""
        return self.w.ds_p(self.weight(s, L), dp, L, D)

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
        vec = self.w.aligned or "    const bool vec = false;\n"
        if self.narrow and self.k16:
            vec += f"    const bool vec16 = vec && {'true' if self.row8 else 'false'};   // stored rows, 16 bytes\n"
        return vec

    def ld_pairs(self, d: str, n: str, r: str, c: str, count: int) -> str:
        """``count`` (4 or 8) consecutive values of stored operand ``n``'s row ``r`` from column ``c`` into registers
        of pairs ``d``."""
        return (f"cg_ld8p({d}, &{self.at(n, r, c)}, vec16, vec);" if count == 8 else
                f"cg_ld4p({d}, &{self.at(n, r, c)}, vec);")

    def r(self, x: str) -> str:
        """``x`` rounded as the products' operands are."""
        return f"{self.rnd}({x})"

    def pack(self, lo: str, hi: str) -> str:
        """Two values rounded to bfloat16 in one register, ``lo`` in its low half (``cg_pack_rn``: one
        instruction on a device)."""
        return f"cg_pack_rn({lo}, {hi})"

    def a_rows(self, frag: str, n: str, r0: str) -> str:
        """The A fragments (16 rows × dh) of operand ``n``'s rows ``r0…``, rounded. Lane ``(g, t)`` reads columns
        ``4Wm + Wt … 4Wm + Wt + W − 1`` of rows ``g`` and ``g + 8`` (:attr:`W`): a permutation of ``dh`` that
        :meth:`product`'s B fragments share. ``m16n8k8`` (W = 4): A's columns ``t`` and ``t + 4`` of products ``2m``
        and ``2m + 1``; ``m16n8k16``: each four its columns ``2t, 2t + 1, 2t + 8, 2t + 9`` of one product (W = 8:
        products ``2m`` and ``2m + 1``, a stored row's eight values one 16-byte load)."""
        r, p = self.r, self.pack
        if self.k16:                # W columns of rows g and g + 8: W / 4 products, W / 2 pairs of each row
            W = self.W
            if n in self.narrow:    # stored rounded: the values are pairs as they lie
                load = (f"unsigned x[{W // 2}], y[{W // 2}]; {self.ld_pairs('x', n, f'{r0} + g', f'{4 * W} * m + {W} * t', W)} "
                        f"{self.ld_pairs('y', n, f'{r0} + g + 8', f'{4 * W} * m + {W} * t', W)}")
                x, y = (lambda i: f"x[{i}]"), (lambda i: f"y[{i}]")
            else:
                load = (f"float x[{W}], y[{W}]; " + " ".join(
                    f"cg_ld4({v}{f' + {o}' if o else ''}, &{self.at(n, f'{r0} + g' + (' + 8' if v == 'y' else ''), f'{4 * W} * m + {W} * t + {o}')}, vec);"
                    for v in "xy" for o in range(0, W, 4)))
                x, y = (lambda i: p(f"x[{2 * i}]", f"x[{2 * i + 1}]")), (lambda i: p(f"y[{2 * i}]", f"y[{2 * i + 1}]"))
            put = " ".join(f"{frag}[{i}][0] = {x(2 * j)}; {frag}[{i}][1] = {y(2 * j)}; "
                           f"{frag}[{i}][2] = {x(2 * j + 1)}; {frag}[{i}][3] = {y(2 * j + 1)};"
                           for j in range(W // 4) for i in [f"{W // 4} * m + {j}" if W > 4 else "m"])
            return f"for (int m = 0; m < {self.dh // (4 * W)}; ++m) {{ {load}\n            {put} }}"
        load = (f"for (int m = 0; m < {self.dh // 16}; ++m) {{ float x[4], y[4]; "
                f"cg_ld4(x, &{self.at(n, f'{r0} + g', '16 * m + 4 * t')}, vec); "
                f"cg_ld4(y, &{self.at(n, f'{r0} + g + 8', '16 * m + 4 * t')}, vec);\n")
        return (load + f"            {frag}[2 * m][0] = {r('x[0]')}; {frag}[2 * m][1] = {r('y[0]')}; "
                f"{frag}[2 * m][2] = {r('x[1]')}; {frag}[2 * m][3] = {r('y[1]')};\n"
                f"            {frag}[2 * m + 1][0] = {r('x[2]')}; {frag}[2 * m + 1][1] = {r('y[2]')}; "
                f"{frag}[2 * m + 1][2] = {r('x[3]')}; {frag}[2 * m + 1][3] = {r('y[3]')}; }}")

    def product(self, out: str, a: str, other: str, base: str) -> str:
        """``out[u][16×8] += a[16×dh] · other[base + 8u … + 8]ᵀ`` for each of the step's tiles ``u``: the scores (or ``dp``) of a
        step, over dh in :meth:`a_rows`'s column order (lane ``(g, t)`` reads row ``g``'s columns ``4Wm + Wt …``)."""
        code = ""
        for u in range(self.tiles):
            load = f"float x[4]; cg_ld4(x, &{self.at(other, f'{base} + {8 * u} + g', '16 * m + 4 * t')}, vec);"
            if self.k16:            # W columns of the row: W / 4 products, W / 2 pairs
                W = self.W
                row, col = f"{base} + {8 * u} + g", f"{4 * W} * m + {W} * t"
                if other in self.narrow:
                    get = self.ld_pairs("b[I]", other, row, col, W)
                else:
                    get = (f"float x[{W}]; " + " ".join(f"cg_ld4(x{f' + {o}' if o else ''}, &{self.at(other, row, f'{col} + {o}' if o else col)}, vec);"
                                                        for o in range(0, W, 4))
                           + " " + " ".join(f"b[I][{i}] = {self.pack(f'x[{2 * i}]', f'x[{2 * i + 1}]')};" for i in range(W // 2)))
                code += (f"        for (int m = 0; m < {self.dh // (4 * W)}; ++m) {{ unsigned b[CG_NL][{W // 2}];\n"
                         f"            CG_LANES {{ const int g = lane >> 2, t = lane & 3; {get} }}\n"
                         + "".join(f"            {self.mma}({out}[I][{u}], {a}[I][{f'{W // 4} * m + {j}' if W > 4 else 'm'}], "
                                   f"b[I]{f' + {2 * j}' if j else ''});\n" for j in range(W // 4))
                         + "        }\n")
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
        consecutive columns from ``g·dh/8`` of those rows (16-byte loads when ``dh/8`` is a multiple of four, of eight
        for stored rows)."""
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
            if nt % 4 == 0 and n in self.narrow:    # eight values (16 bytes) of each row at a time where nt allows
                H = 8 if nt % 8 == 0 else 4
                return (f"for (int h = 0; h < {nt}; h += {H}) {{ unsigned x[{H // 2}], y[{H // 2}]; "
                        f"{self.ld_pairs('x', n, rows[0], f'g * {nt} + h', H)} "
                        f"{self.ld_pairs('y', n, rows[1], f'g * {nt} + h', H)} "
                        f"for (int e = 0; e < {H}; ++e) {{ {pairs.format(u=u)} }} }}")
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

    def copy_rows(self, frag: str, n: str, r0: str) -> str:
        """Input ``n``'s rows ``r0…`` as :meth:`a_rows` read them into ``frag`` (bfloat16 pairs, rounded) stored into
        its copy ``<n>_rnd`` (``unsigned short``: the bits; ``float``: the rounded values), in a ``CG_LANES``
        block: lane ``(g, t)``'s registers ``(W/4)·m + j`` hold columns ``4Wm + Wt + 4j …`` of rows ``g`` (0, 2) and
        ``g + 8`` (1, 3), each four one store (``cg_st4p``)."""
        assert self.k16, self.op
        out, W = f"{n}_rnd", self.W
        put = " ".join(f"cg_st4p(&OUT_[({self.w.row(f'{r0} + g' + (' + 8' if h else ''), out)}) * rs + "
                       f"{4 * W} * m + {W} * t + {4 * j}], {i}[{h}], {i}[{2 + h}], vst);"
                       for j in range(W // 4) for h in range(2)
                       for i in [f"{frag}[{f'{W // 4} * m + {j}' if W > 4 else 'm'}]"])
        # four values a store (8 bytes of bits, 16 of floats): aligned where the copy's matrix starts on 16 bytes,
        # its rows and a lane's columns starting on multiples of 4 elements (dh is a multiple of 16)
        return (f"    {{ {self.rounded[n]}* OUT_ = {self.w.at(out, '0')}; const long long rs = {self.w.strides[out][-2]}LL;\n"
                f"      const bool vst = ((unsigned long long)OUT_ & 15ULL) == 0;\n"
                f"      CG_LANES {{ const int g = lane >> 2, t = lane & 3;\n"
                f"        for (int m = 0; m < {self.dh // (4 * W)}; ++m) {{ {put} }} }} }}\n")

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
    """16 query rows, their output and row statistic: :func:`_online` (softmax in base 2), :func:`_one_pass`
    (spherical), else (softmax not in base 2: 3xTF32, ``c ≤ 0``) two passes over the keys, the row statistic
    ``L`` (each step's maximum and sum reduced over the quad), then ``O = Σ exp(s − L)·v``. A lane keeps the
    statistics of its rows ``g`` and ``g + 8`` (``st[h]``); the weights never leave the registers."""
    if op.norm == "spherical":
        return _one_pass(op, t)
    if t.base2:
        return _online(op, t)
    w, exp = t.w, t.w.exp
    each = _each(t)
    stats = (_per_row("fmaxf", ["red"], f"float m = CG_LOWEST; {each}m = fmaxf(m, x); }} red[I][h] = m;")
             + _per_row("cg_add", ["red"],
                        f"const float m = fmaxf(st[I][h][0], red[I][h]); float l = 0; {each}l += {exp}(x - m); }} "
                        f"old[I][h] = st[I][h][1] * {exp}(st[I][h][0] - m); st[I][h][0] = m; red[I][h] = l;")
             + "        CG_LANES { for (int h = 0; h < 2; ++h) st[I][h][1] = old[I][h] + red[I][h]; }\n")
    weight = lambda u, e: f"({_seen(t)} ? {t.weight(f's[I][{u}][{e}]', f'Lr[I][{e >> 1}]')} : 0.0f)"  # noqa: E731
    scale = f"        CG_LANES {{ {t.scaled('s')} }}\n"
    return (_start(op, t, "st[I][h][0] = CG_LOWEST; st[I][h][1] = 0;")
            + _steps(op, t, "jt", True, _scores(t) + "        float red[CG_NL][2], old[CG_NL][2];\n" + scale + stats,
                     "pass 1: the rows' statistics")
            + f"    CG_LANES {{ for (int h = 0; h < 2; ++h) Lr[I][h] = st[I][h][0] + {w.log}(st[I][h][1]); }}\n"
            + "    CG_QUAD_SAME(Lr[I][0]); CG_QUAD_SAME(Lr[I][1]);\n"
            + _steps(op, t, "jt", True, _scores(t) +
                     f"        {t.weights_decl('pa')};\n"
                     f"        CG_LANES {{ const int g = lane >> 2, t = lane & 3; {t.scaled('s')} "
                     f"{t.weights('pa', weight)} }}\n"
                     + t.accumulate("acc", "pa", "v", f"jt * {t.keys}LL"), "pass 2: O += p(s) v")
            + _finish(t))


def _online(op: AttentionForward, t: _Tile) -> str:
    """Softmax in base 2 (:attr:`~.attention.Attention.exp2`), one pass over the keys (online softmax). A row
    holds a whole power of two ``M`` (``st[h][0]``): its weights are ``e = 2^(a·c₂ − M)`` of raw scores ``a``,
    accumulated unnormalised into ``O`` and summed into the lane's ``l`` (``st[h][1]``). Where a lane's step sums
    more than ``2^RESCALE`` for a row (a score passed ``M`` by more than ``RESCALE``; the first step always), the
    warp takes the branch (``CG_ANY``) that reduces the step's maxima over each quad, moves ``M`` up to
    ``⌈max·c₂⌉``, multiplies ``O`` and ``l`` by ``2^(M_old − M)`` exactly (``cg_pow2``) and computes the step's
    weights again. A power of two commutes with rounding, so a weight is rounded as ``2^(a·c₂ − M)`` at the
    final ``M`` would be, whichever step moved it (to the float32 rounding of the exponent):
    :meth:`~.attention.AttentionForward.logical`. After the loop the quad adds its lanes' ``l``; ``O = acc / l``,
    ``L = (M + log₂ l)·ln 2``."""
    c2, nk, each = t.c2, t.nk, _each(t)
    value = lambda u, e: f"({_seen(t)} ? cg_ex2(s[I][{u}][{e}], {c2}, st[I][{e >> 1}][0]) : 0.0f)"  # noqa: E731
    pe = (" ".join(f"{{ const int r = {C[e][0]}, c = {8 * u} + {C[e][1]}; pe[I][{u}][{e}] = {value(u, e)}; }}"
                   for u in range(t.tiles) for e in range(4))
          + " " + " ".join(f"ls[I][{h}] = " + " + ".join(f"pe[I][{u}][{2 * h + j}]" for u in range(t.tiles) for j in range(2))
                           + ";" for h in range(2)))
    lanes = "CG_LANES { const int g = lane >> 2, t = lane & 3; (void)g; (void)t;"
    weights = (f"        float pe[CG_NL][{t.tiles}][4], ls[CG_NL][2]; bool grow[CG_NL]; {t.weights_decl('pa')};\n"
               f"        {lanes} {pe}\n"
               f"            grow[I] = ls[I][0] > {2 ** RESCALE}.0f || ls[I][1] > {2 ** RESCALE}.0f; }}\n"
               # the warp's branch, rarely taken (bench/gpu_sass.py counts it apart)
               f"        if (CG_ANY(grow)) {{ float mx[CG_NL][2];\n"
               f"            {lanes} for (int h = 0; h < 2; ++h) {{ float m = CG_LOWEST; {each}m = fmaxf(m, x); }} mx[I][h] = m; }} }}\n"
               f"            CG_QUAD(mx[I][0], fmaxf); CG_QUAD(mx[I][1], fmaxf);\n"
               f"            {lanes} for (int h = 0; h < 2; ++h) {{\n"
               f"                const float M = fmaxf(st[I][h][0], ceilf(mx[I][h] * {c2})), f = cg_pow2(st[I][h][0] - M);\n"
               f"                st[I][h][0] = M; st[I][h][1] *= f;\n"
               f"                for (int nt = 0; nt < {nk}; ++nt) {{ acc[I][nt][2 * h] *= f; acc[I][nt][2 * h + 1] *= f; }} }}\n"
               f"                {pe} }}\n"
               f"        }}\n"
               f"        {lanes} st[I][0][1] += ls[I][0]; st[I][1][1] += ls[I][1]; "
               f"{t.weights('pa', lambda u, e: f'pe[I][{u}][{e}]')} }}\n")
    return (_start(op, t, "st[I][h][0] = CG_LOWEST; st[I][h][1] = 0;")
            + _steps(op, t, "jt", True, _scores(t) + weights
                     + t.accumulate("acc", "pa", "v", f"jt * {t.keys}LL"), "one pass: O += 2^(a c2 - M) v")
            + "    CG_QUAD(st[I][0][1], cg_add); CG_QUAD(st[I][1][1], cg_add);\n"
            + "    CG_QUAD_SAME(st[I][0][0]); CG_QUAD_SAME(st[I][1][0]);\n"
            + f"    CG_LANES {{ for (int h = 0; h < 2; ++h) {{ Lr[I][h] = (st[I][h][0] + log2f(st[I][h][1])) * "
              f"{literal(LN2, 'float')}; st[I][h][1] = 1.0f / st[I][h][1]; }}\n"
            + _scaled_acc(t, "st[I][{h}][1]") + " }\n"
            + _finish(t))


def _one_pass(op: AttentionForward, t: _Tile) -> str:
    """Spherical attention, one pass over the keys: the weights are the scores ``s = c·a`` as they are, rounded
    for the product, and the lane's sum of their squares; after the loop the quad adds the sums, ``L = 1/√(Σ s² +
    ε)`` and ``O = L·acc`` (:meth:`~.attention.AttentionForward.logical`)."""
    w, each = t.w, _each(t)
    value = lambda u, e: f"({_seen(t)} ? s[I][{u}][{e}] : 0.0f)"  # noqa: E731
    return (_start(op, t, "st[I][h][1] = 0;")
            + _steps(op, t, "jt", True, _scores(t) +
                     f"        {t.weights_decl('pa')};\n"
                     f"        CG_LANES {{ const int g = lane >> 2, t = lane & 3; {t.scaled('s')}\n"
                     f"            for (int h = 0; h < 2; ++h) {{ float q = 0; {each}q += x * x; }} st[I][h][1] += q; }}\n"
                     f"            {t.weights('pa', value)} }}\n"
                     + t.accumulate("acc", "pa", "v", f"jt * {t.keys}LL"), "one pass: O += s v")
            + "    CG_QUAD(st[I][0][1], cg_add); CG_QUAD(st[I][1][1], cg_add);\n"
            + f"    CG_LANES {{ for (int h = 0; h < 2; ++h) Lr[I][h] = 1.0f / {w.sqrt}(st[I][h][1] + {w.eps});\n"
            + _scaled_acc(t, "Lr[I][{h}]") + " }\n"
            + _finish(t))


def _seen(t: _Tile) -> str:
    """Whether query row ``r0 + r`` sees key ``jt·keys + c`` of the step (in a weight's ``{ const int r, c }``
    block, :meth:`_Tile.weights`)."""
    return f"(!masked || jt * {t.keys}LL + c <= r0 + r)"


def _each(t: _Tile) -> str:
    """The head of a loop over the step's scores ``x`` of a lane's row ``h`` that the row sees (its body follows,
    closed by ``}``)."""
    return (f"for (int u = 0; u < {t.tiles}; ++u) for (int j = 0; j < 2; ++j) {{ const float x = s[I][u][2 * h + j]; "
            f"if (!masked || jt * {t.keys}LL + 8 * u + 2 * t + j <= r0 + g + 8 * h) ")


def _scores(t: _Tile) -> str:
    """A step's scores ``s`` (raw: ``q·k``)."""
    return f"        {t.scores('s')};\n" + _zero(t, "s") + t.product("s", "qa", "k", f"jt * {t.keys}LL")


def _scaled_acc(t: _Tile, f: str) -> str:
    """Statements of a ``CG_LANES`` block: the accumulators of row ``h`` times ``f`` (a format of ``h``)."""
    return (f"        for (int nt = 0; nt < {t.nk}; ++nt) for (int e = 0; e < 4; ++e) "
            f"acc[I][nt][e] *= {f.format(h='e >> 1')};")


def _start(op: AttentionForward, t: _Tile, init: str) -> str:
    """The forward's head: the warp's query rows as A fragments, the accumulators zeroed, each row's statistics
    ``st[h]`` set by ``init``."""
    return (_head(op, t, True) + t.ptr("q") + t.ptr("k") + t.ptr("v") +
            f"    {t.rows('qa')}; float acc[CG_NL][{t.nk}][4], st[CG_NL][2][2], Lr[CG_NL][2];\n"
            f"    CG_LANES {{ const int g = lane >> 2, t = lane & 3;\n"
            f"        {t.a_rows('qa[I]', 'q', 'r0')}\n"
            f"        for (int nt = 0; nt < {t.nk}; ++nt) acc[I][nt][0] = acc[I][nt][1] = acc[I][nt][2] = acc[I][nt][3] = 0;\n"
            f"        for (int h = 0; h < 2; ++h) {{ {init} }} }}\n")


def _finish(t: _Tile) -> str:
    """The forward's tail: ``O`` (and its rounded copy) from the accumulators, ``L`` from ``Lr``, which a quad's
    lanes hold alike."""
    w = t.w
    return ("    CG_QUAD_SAME(Lr[I][0]); CG_QUAD_SAME(Lr[I][1]);\n"
            + t.store("acc", "O", "r0") +
            f"    CG_LANES {{ const int g = lane >> 2, t = lane & 3; "
            f"if (t == 0) {{ {w.stat('L_out', 'r0 + g')} = Lr[I][0]; {w.stat('L_out', 'r0 + g + 8')} = Lr[I][1]; }} }}\n")


def _grad_q(op: AttentionGradQ, t: _Tile) -> str:
    """16 query rows: ``D = rowsum(dO∘O)`` (a lane's columns, then its quad's), then ``dq = Σ (c·ds)·k`` over
    the keys they see."""
    w, nk = t.w, t.nk
    grad = lambda u, e: (f"((!masked || jt * {t.keys}LL + c <= r0 + r) ? {w.c} * "  # noqa: E731
                         f"({t.ds(f's[I][{u}][{e}]', f'dp[I][{u}][{e}]', f'Lr[I][{e >> 1}]', f'Dr[I][{e >> 1}]')}) : 0.0f)")
    row = "r0 + g + 8 * h"
    D = (f"Lr[I][h] = {t.held(w.stat('L', row))}; float x = 0; for (int m = 0; m < {t.dh // 16}; ++m) {{ "
         f"float o[4], d[4]; cg_ld4(d, &{t.at('dO', row, '16 * m + 4 * t')}, vec); "
         f"cg_ld4(o, &{t.at('O', row, '16 * m + 4 * t')}, vec); for (int e = 0; e < 4; ++e) x += d[e] * o[e]; }} "
         f"Dr[I][h] = x;")
    return (_head(op, t, True) + t.ptr("q") + t.ptr("k") + t.ptr("v") + t.ptr("O") + t.ptr("dO") +
            f"    {t.rows('qa', 'da')}; float acc[CG_NL][{nk}][4], Lr[CG_NL][2], Dr[CG_NL][2];\n"
            f"    CG_LANES {{ const int g = lane >> 2, t = lane & 3;\n"
            f"        {t.a_rows('qa[I]', 'q', 'r0')}\n        {t.a_rows('da[I]', 'dO', 'r0')}\n"
            f"        for (int nt = 0; nt < {nk}; ++nt) acc[I][nt][0] = acc[I][nt][1] = acc[I][nt][2] = acc[I][nt][3] = 0; }}\n"
            + (t.copy_rows("da[I]", "dO", "r0") if "dO" in t.rounded else "")    # dk and dv's operand, rounded
            + _per_row("cg_add", ["Dr"], D) +
            f"    CG_QUAD_SAME(Dr[I][0]); CG_QUAD_SAME(Dr[I][1]);\n"
            f"    CG_LANES {{ const int g = lane >> 2, t = lane & 3; "
            f"if (t == 0) {{ {w.stat('D_out', 'r0 + g')} = Dr[I][0]; {w.stat('D_out', 'r0 + g + 8')} = Dr[I][1]; }} }}\n"
            + _steps(op, t, "jt", True,
                     f"        {t.scores('s', 'dp')}; {t.weights_decl('ga')};\n"
                     + _zero(t, "s", "dp")
                     + t.product("s", "qa", "k", f"jt * {t.keys}LL")
                     + t.product("dp", "da", "v", f"jt * {t.keys}LL") +
                     f"        CG_LANES {{ const int g = lane >> 2, t = lane & 3; {t.scaled('s')} "
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
    weight = lambda u, e: f"({seen} ? {t.weight(f's[I][{u}][{e}]', f'Lq[{u}][{e & 1}]')} : 0.0f)"  # noqa: E731
    both = grad_k and grad_v        # each weight once (pw), and the score's gradient from it (Text.ds_p)
    ds = (lambda u, e: w.ds_p(f"pw[{u}][{e}]", f"dp[I][{u}][{e}]", f"Lq[{u}][{e & 1}]", f"Dq[{u}][{e & 1}]")) if both \
        else (lambda u, e: t.ds(f"s[I][{u}][{e}]", f"dp[I][{u}][{e}]", f"Lq[{u}][{e & 1}]", f"Dq[{u}][{e & 1}]"))
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
             f"{{ Lq[u][j] = {t.held(w.stat('L', query))}; " + (f"Dq[u][j] = {w.stat('D', query)}; " if grad_k else "") + "}")
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
                     f"        CG_LANES {{ const int g = lane >> 2, t = lane & 3; {t.scaled('s')} {stats}\n"
                     f"            {pw}{weights} }}\n"
                     + (t.accumulate("acc", "ga", "q", base) if grad_k else "")
                     + (t.accumulate("accv", "pa", "dO", base) if grad_v else ""))
            + (t.store("acc", "dk", "r0") if grad_k else "")
            + (t.store("accv", "dv", "r0") if grad_v else ""))
