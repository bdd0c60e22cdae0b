"""The streaming attention kernels on the CUDA cores, a quad of lanes per row (float32, ``dh`` a multiple of 16,
``S`` of 8): the recurrences of :mod:`.attention_source`, each row's work split four ways.

A thread per row (:mod:`.attention_source`) sums each score over ``dh`` in one chain of dependent
multiply-adds and holds two or three rows of ``dh`` (the ``dq`` and ``dk`` kernels spill at ``dh = 64``).
Here a warp takes 8 rows, lane ``l`` row ``g = l >> 2`` and the columns ``16m + 4t … 16m + 4t + 3`` of it
(``t = l & 3``), a quarter of each row in registers; a quad's four lanes read 64 contiguous bytes of a streamed
row (16 bytes each), and the warp's 8 quads read the same row::

    lane (g, t):  qr, acc … : columns 16m + 4t + e of row r0 + g       (m < dh/16, e < 4)
    s = Σ qr·k_j:            a lane's dh/4 products, then its quad's four partials (CG_QUAD, a butterfly
                             that leaves the same bits in the four lanes), then each lane updates its columns

The softmax forward keeps the online recurrence (running maximum ``m`` and sum ``l``, every lane a copy), the
spherical one the running sum of squares; the backward recomputes each weight from ``L``. Loops run over the
keys (queries) any row of the warp sees, so every lane meets every shuffle; a row skips the keys it does not
see. On the host (the host execution mode) the warp runs once, as the tensor-core kernels' does
(:data:`.warp.LANES`: ``CG_LANES``, ``CG_QUAD``, ``CG_QUAD_SAME``).
"""
from __future__ import annotations

import numpy as np

from .attention import Attention, AttentionForward, AttentionGradK, AttentionGradQ, AttentionGradV, quad
from .attention_source import Text, signature, text, warp_kernel
from .kernel import Kernel
from .plan import Launch, Plan
from .warp import LANES, lanes_kernel

__all__ = ["attention_kernel", "source", "fits", "ROWS", "WARPS"]

ROWS = 8       #: rows a warp takes (a quad each)
WARPS = 4      #: warps a block


def fits(op: Attention) -> bool:
    """Whether ``op`` runs here: CUDA-core products (no ``mma``) over a type :func:`.attention.quad` takes, and
    not ``dk`` or ``dv`` alone (where a quad fits, :func:`.attention.fuse` asks for both in one kernel unless told
    ``together=False``; then they take a thread per row)."""
    return not op.mma and quad(op.T) and not isinstance(op, (AttentionGradK, AttentionGradV))


def attention_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """The kernel of an ``attention`` step that :func:`fits`: a quad of lanes per row."""
    return warp_kernel(step, plan, name, source, WARPS)


def source(op: Attention, name: str, strides: dict[str, tuple[int, ...]] | None = None,
           narrow: frozenset[str] = frozenset()) -> tuple[str, int, list[str]]:
    """``(CUDA source, warps, parameter names)`` of ``op``'s kernel: a warp per 8 rows, a quad per row (every
    input float32: ``narrow``, the inputs stored as bfloat16, is empty on the CUDA cores)."""
    assert fits(op) and not narrow, (op, narrow)
    w = text(op, "float", strides)
    warps = int(np.prod(w.lead)) * (w.S // ROWS)
    sig, args, names = signature(op, "float")
    q = _Quad(op, w)
    if isinstance(op, AttentionForward):
        body = _forward(q) if op.norm == "softmax" else _forward_spherical(q)
    elif isinstance(op, AttentionGradQ):
        body = _grad_q(q)
    else:
        body = _grad_kv(q)
    comment = "// the host runs the warp once: its lanes in turn (CG_LANES) and the quads' shuffles whole (CG_QUAD)\n"
    return LANES + lanes_kernel(name, sig, args, q.head() + body, warps, comment), warps, names


class _Quad:
    """What a kernel body is written with: :class:`~.attention_source.Text`'s formulas, and a lane's part of a
    row (``NE = dh/4`` registers ``x[I][4m + e]`` for columns ``16m + 4t + e``)."""

    def __init__(self, op: Attention, w: Text):
        self.op, self.w, self.S, self.dh = op, w, w.S, w.dh
        self.ne = w.dh // 4
        self.causal = op.causal
        self.queries = isinstance(op, (AttentionForward, AttentionGradQ))

    def head(self) -> str:
        """The warp's matrix ``bh`` and first row ``r0`` (causal query rows longest first), and ``vec``."""
        tiles = self.S // ROWS
        tile = f"{tiles - 1}LL - item % {tiles}LL" if self.causal and self.queries else f"item % {tiles}LL"
        return (f"    const long long bh = item / {tiles}LL, r0 = {ROWS}LL * ({tile});\n"
                + (self.w.aligned or "    const bool vec = false;\n"))

    def regs(self, *names: str) -> str:
        """The declaration of a lane's part of a row for each of ``names``."""
        return "float " + ", ".join(f"{n}[CG_NL][{self.ne}]" for n in names) + ";"

    def load(self, dst: str, n: str, row: str, scale: str = "") -> str:
        """``dst[I][…]`` = the lane's columns of row ``row`` of operand ``n`` (times ``scale``)."""
        times = f" for (int e = 0; e < {self.ne}; ++e) {dst}[I][e] = {dst}[I][e] * {scale};" if scale else ""
        return (f"{{ const float* p = {self.w.at(n, row)}; for (int m = 0; m < {self.dh // 16}; ++m) "
                f"cg_ld4(&{dst}[I][4 * m], p + 16 * m + 4 * t, vec);{times} }}")

    def dot(self, out: str, terms: list[tuple[str, str]]) -> str:
        """``out[I] = Σ a·b`` over the lane's columns for each ``(a, b)`` of ``terms`` (register arrays); one
        chain each, in column order."""
        return " ".join(f"{{ float x = 0; for (int e = 0; e < {self.ne}; ++e) x += {a}[I][e] * {b}[I][e]; "
                        f"{o}[I] = x; }}" for o, (a, b) in zip(out.split(), terms))

    def lanes(self, body: str) -> str:
        """``body`` for each lane, with ``g``, ``t`` and its row ``row``."""
        return (f"        CG_LANES {{ const int g = lane >> 2, t = lane & 3; const long long row = r0 + g; "
                f"(void)t; (void)row; {body} }}\n")

    def end(self) -> str:
        """Past the last key that a query row of the warp sees."""
        return f"r0 + {ROWS}LL" if self.causal else f"{self.S}LL"

    def sees(self, j: str) -> str:
        """Whether query row ``row`` sees key ``j`` (a key row ``row``: whether query ``j`` sees it)."""
        if not self.causal:
            return "true"
        return f"{j} <= row" if self.queries else f"{j} >= row"

    def store(self, acc: str, n: str, value: str = "{x}") -> str:
        """The lane's columns ``x`` of ``acc`` into row ``row`` of output ``n``, as ``value`` of ``x``."""
        x = value.format(x=f"{acc}[I][4 * m + e]")
        return self.lanes(f"float* o = {self.w.at(f'{n}_out', 'row')}; for (int m = 0; m < {self.dh // 16}; ++m) "
                          f"for (int e = 0; e < 4; ++e) o[16 * m + 4 * t + e] = {x};")

    def stat(self, n: str, value: str) -> str:
        """Row statistic ``n`` (``L`` or ``D``) of row ``row``, written by the quad's first lane."""
        return self.lanes(f"if (t == 0) {self.w.stat(f'{n}_out', 'row')} = {value};")


def _forward(q: _Quad) -> str:
    """A query row: the online softmax over the keys it sees (running maximum ``m`` and sum ``l``), ``O`` and
    ``L``; key 0 (which every row sees) starts the recurrence, as :mod:`.attention_source`'s does."""
    w, c, exp = q.w, q.w.c, q.w.exp
    return (f"    {q.regs('qr', 'acc', 'kv', 'vv')} float s[CG_NL], m[CG_NL], l[CG_NL];\n"
            + q.lanes(q.load("qr", "q", "row", f"(float){c}") + " " + q.load("kv", "k", "0LL") + " "
                      + q.dot("s", [("qr", "kv")]))
            + "    CG_QUAD(s[I], cg_add);\n"
            + q.lanes(q.load("acc", "v", "0LL") + " m[I] = s[I]; l[I] = 1;")
            + f"    for (long long j = 1; j < {q.end()}; ++j) {{\n"
            + q.lanes(q.load("kv", "k", "j") + " " + q.dot("s", [("qr", "kv")]))
            + "        CG_QUAD(s[I], cg_add);\n"
            + q.lanes(f"if ({q.sees('j')}) {{ " + q.load("vv", "v", "j") + " const float x = s[I];\n"
                      f"            if (x > m[I]) {{ const float r = {exp}(m[I] - x); l[I] *= r; "
                      f"for (int e = 0; e < {q.ne}; ++e) acc[I][e] *= r; m[I] = x; }}\n"
                      f"            const float p = {exp}(x - m[I]); l[I] += p; "
                      f"for (int e = 0; e < {q.ne}; ++e) acc[I][e] += p * vv[I][e]; }}")
            + "    }\n"
            + "    CG_QUAD_SAME(m[I]); CG_QUAD_SAME(l[I]);\n"
            + q.store("acc", "O", "{x} / l[I]")
            + q.stat("L", f"m[I] + {w.log}(l[I])"))


def _forward_spherical(q: _Quad) -> str:
    """A query row: the sum of its squared scores ``Q`` and ``Σ s·v`` over the keys it sees, then
    ``L = 1/√(Q + ε)`` and ``O = L·Σ s·v``."""
    w, c = q.w, q.w.c
    return (f"    {q.regs('qr', 'acc', 'kv', 'vv')} float s[CG_NL], Q[CG_NL], r[CG_NL];\n"
            + q.lanes(q.load("qr", "q", "row", f"(float){c}") + f" for (int e = 0; e < {q.ne}; ++e) acc[I][e] = 0; "
                      "Q[I] = 0;")
            + f"    for (long long j = 0; j < {q.end()}; ++j) {{\n"
            + q.lanes(q.load("kv", "k", "j") + " " + q.dot("s", [("qr", "kv")]))
            + "        CG_QUAD(s[I], cg_add);\n"
            + q.lanes(f"if ({q.sees('j')}) {{ " + q.load("vv", "v", "j") + " const float x = s[I]; Q[I] += x * x; "
                      f"for (int e = 0; e < {q.ne}; ++e) acc[I][e] += x * vv[I][e]; }}")
            + "    }\n"
            + "    CG_QUAD_SAME(Q[I]);\n"
            + q.lanes(f"r[I] = (float)1 / {w.sqrt}(Q[I] + (float){w.eps});")
            + q.store("acc", "O", "{x} * r[I]")
            + q.stat("L", "r[I]"))


def _grad_q(q: _Quad) -> str:
    """A query row: ``D = rowsum(dO∘O)`` (a lane's columns, then its quad's), then ``dq`` over the keys it sees,
    each weight recomputed from ``L``."""
    w, c = q.w, q.w.c
    return (f"    {q.regs('qr', 'dor', 'acc', 'kv', 'vv')} float s[CG_NL], dp[CG_NL], Lt[CG_NL], Dt[CG_NL];\n"
            + q.lanes(q.load("qr", "q", "row", f"(float){c}") + " " + q.load("dor", "dO", "row") + " "
                      + q.load("kv", "O", "row") + " " + q.dot("Dt", [("dor", "kv")])
                      + f" for (int e = 0; e < {q.ne}; ++e) acc[I][e] = 0; Lt[I] = {w.stat('L', 'row')};")
            + "    CG_QUAD(Dt[I], cg_add);\n    CG_QUAD_SAME(Dt[I]);\n"
            + f"    for (long long j = 0; j < {q.end()}; ++j) {{\n"
            + q.lanes(q.load("kv", "k", "j") + " " + q.load("vv", "v", "j") + " "
                      + q.dot("s dp", [("qr", "kv"), ("dor", "vv")]))
            + "        CG_QUAD(s[I], cg_add); CG_QUAD(dp[I], cg_add);\n"
            + q.lanes(f"if ({q.sees('j')}) {{ const float ds = {w.ds('s[I]', 'dp[I]', 'Lt[I]', 'Dt[I]')}; "
                      f"for (int e = 0; e < {q.ne}; ++e) acc[I][e] += ds * kv[I][e]; }}")
            + "    }\n"
            + q.store("acc", "dq", f"{{x}} * (float){c}")
            + q.stat("D", "Dt[I]"))


def _grad_kv(q: _Quad) -> str:
    """A key row's ``dk`` and ``dv`` (:class:`~.attention.AttentionGradKV`): the query rows it is visible to,
    one score ``s``, one ``dp`` and one weight ``p`` (recomputed from ``L``) a query for both."""
    w, c, S = q.w, q.w.c, q.S
    start = "r0" if q.causal else "0LL"
    init = (q.load("kr", "k", "row", f"(float){c}") + " " + q.load("vr", "v", "row")
            + "".join(f" for (int e = 0; e < {q.ne}; ++e) {a}[I][e] = 0;" for a in ("ak", "av")))
    # the weight once, and the score's gradient from it (Text.ds_p: the same operations as Text.ds)
    update = (f"const float Li = {w.stat('L', 'i')}, Di = {w.stat('D', 'i')}; "
              f"const float p = {w.weight('s[I]', 'Li')}; const float ds = {w.ds_p('p', 'dp[I]', 'Li', 'Di')}; "
              f"for (int e = 0; e < {q.ne}; ++e) ak[I][e] += ds * qv[I][e]; "
              f"for (int e = 0; e < {q.ne}; ++e) av[I][e] += p * gv[I][e];")
    return (f"    {q.regs('kr', 'qv', 'gv', 'vr', 'ak', 'av')} float s[CG_NL], dp[CG_NL];\n"
            + q.lanes(init)
            + f"    for (long long i = {start}; i < {S}LL; ++i) {{\n"
            + q.lanes(q.load("qv", "q", "i") + " " + q.load("gv", "dO", "i") + " "
                      + q.dot("s dp", [("qv", "kr"), ("gv", "vr")]))
            + "        CG_QUAD(s[I], cg_add); CG_QUAD(dp[I], cg_add);\n"
            + q.lanes(f"if ({q.sees('i')}) {{ {update} }}")
            + "    }\n"
            + q.store("ak", "dk", f"{{x}} * (float){c}")
            + q.store("av", "dv"))
