"""The CUDA C of the streaming attention kernels (:mod:`.attention`): a thread per row, its row and
accumulators in registers, streaming the other rows (which a warp's lanes read together).

The two kinds differ only in the weight of a score ``s`` and the row statistic ``L`` the forward saves::

                 weight p(s)        forward, per query row                   ds (before the scale c)
    softmax      exp(s − L)         running max m and sum l (online);        p·(dp − D)
                                    L = m + log l
    spherical    L·s                Q = Σ s² (no max, no rescaling);         L·(dp − L·s·D)
                                    L = 1/√(Q + ε)

with ``dp = dO_i·v_j`` and ``D = rowsum(dO∘O)``: the backward recomputes every weight from ``L``.
"""
from __future__ import annotations

import re

import numpy as np

from .attention import AttentionForward, AttentionGradK, AttentionGradKV, AttentionGradQ, Attention
from .cuda import ctype, literal, mathfn
from .kernel import Kernel, with_extents
from .plan import Launch, Plan
from .storage import STORE

__all__ = ["attention_kernel", "warp_kernel", "stored_bf16", "copies", "signature", "source", "read_strides", "text", "Text", "VEC", "BLOCK"]

#: threads per block: a thread holds two or three rows in registers (168 to 255 at dh = 64), so six blocks of
#: 64 fit an SM where one of 256 would, and causal rows' unequal work spreads over more blocks
BLOCK = 64
#: elements per vector load of a streamed row, and its CUDA type (16 bytes)
VEC = {"float": (4, "float4"), "double": (2, "double2")}


def attention_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """The streaming attention kernel of an ``attention`` step: a thread per row."""
    (a,) = step.instrs
    assert not stored_bf16(step, plan), "a thread per row reads float32 (only tensor-core products read bf16)"
    c = ctype(plan.program.types[a.results[0]])
    src, rows, _ = source(a.op, name, c, read_strides(step, plan, name))
    return with_extents(Kernel(name, src, list(step.inputs), list(step.outputs), rows, [a.op.name],
                               frozenset(step.inputs), tuple(c for _ in step.inputs), block=BLOCK), plan)


def warp_kernel(step: Launch, plan: Plan, name: str, source, warps_per_block: int) -> Kernel:
    """The kernel of an ``attention`` step whose ``source(op, name, strides, narrow)`` gives ``(CUDA source,
    warps, _)`` of a warp an item (:mod:`.attention_quad`, :mod:`.attention_mma`), ``warps_per_block`` warps a
    block; ``narrow``: the inputs stored as bfloat16 (:mod:`.storage`)."""
    (a,) = step.instrs
    narrow = stored_bf16(step, plan)
    extra = {"rounded": copies(step, plan)} if step.then is not None else {}
    src, warps, _ = source(a.op, name, read_strides(step, plan, name), narrow, **extra)
    ops = [a.op.name] + ([step.then.instrs[0].op.name] if step.then is not None else [])   # and its copies' rounding
    return with_extents(Kernel(name, src, list(step.inputs), list(step.outputs), warps, ops,
                               frozenset(step.inputs), tuple(STORE if n in narrow else "float" for n in a.op.ins.split()),
                               lanes=32, block=32 * warps_per_block), plan)


def stored_bf16(step: Launch, plan: Plan) -> frozenset[str]:
    """The names of the ``attention`` step's inputs whose memory holds bfloat16 bits (:mod:`.storage`)."""
    (a,) = step.instrs
    return frozenset(n for n, x in zip(a.op.ins.split(), a.args) if plan.read(plan.src(x))[0] in plan.narrow)


def copies(step: Launch, plan: Plan) -> dict[str, str]:
    """The results (and inputs it reads whole, :meth:`~.attention.Attention.copies`) of an ``attention`` step that
    its kernel also writes rounded to bfloat16 (``step.then``, :func:`~.rounding.into_attention`), in the order of
    its outputs: the C type of each copy by the result's or input's name (``unsigned short``, bfloat16 bits,
    where :mod:`.storage` stores it so; else ``float``)."""
    (a,) = step.instrs
    names = {plan.src(x): n for x, n in zip(a.args, a.op.ins.split()) if n in a.op.copies()}
    names.update((plan.src(v), n) for v, n in zip(a.results, a.op.outs.split()))
    of = {r.results[0]: plan.src(r.args[0]) for r in (step.then.instrs if step.then is not None else [])}
    return {names[of[v]]: STORE if v in plan.narrow else "float" for v in step.outputs[len(a.results):]}


def signature(op: Attention, ctype: str, narrow: frozenset[str] = frozenset(),
              rounded: dict[str, str] | None = None) -> tuple[str, str, list[str]]:
    """``op``'s kernel parameters (its inputs ``const``, then each output ``<name>_out``, then each rounded copy
    ``<name>_rnd`` of C type ``rounded[name]``), the arguments passing them on, and their names; an input in
    ``narrow`` holds bfloat16 bits (``unsigned short``, :mod:`.storage`)."""
    ins, outs, rounded = op.ins.split(), op.outs.split(), rounded or {}
    copied = [f"{n}_rnd" for n in rounded]
    names = ins + [f"{n}_out" for n in outs] + copied
    params = ([f"const {STORE if n in narrow else ctype}* __restrict__ {n}" for n in ins]
              + [f"{ctype}* __restrict__ {n}_out" for n in outs]
              + [f"{c}* __restrict__ {n}" for n, c in zip(copied, rounded.values())])
    return ", ".join(params), ", ".join(names), ins + outs + copied


def read_strides(step: Launch, plan: Plan, name: str) -> dict[str, tuple[int, ...]]:
    """The strides (elements, by input name) of the ``attention`` step's operands that are views: each is read
    where it lies (a strided view's strides), the others are contiguous."""
    (a,) = step.instrs
    strides = {}
    for n, x in zip(a.op.ins.split(), a.args):
        _, stages = plan.read(plan.src(x))
        if stages:
            ((shape, st),) = stages
            assert shape == plan.program.types[x].shape and st[-1] == 1, f"{name}: {n} is not a row-major view"
            strides[n] = tuple(st)
    return strides


def text(op: Attention, ctype: str, strides: dict[str, tuple[int, ...]] | None = None) -> "Text":
    """What ``op``'s kernel body is written with (:class:`Text`), its operands read through ``strides``."""
    return Text(op, ctype, _strides(op, strides))


def source(op: Attention, name: str, ctype: str,
           strides: dict[str, tuple[int, ...]] | None = None) -> tuple[str, int, list[str]]:
    """``(CUDA source, rows, parameter names)`` of ``op``'s kernel: a thread per row of ``[..., S]``.

    ``strides`` (elements, by input name: ``q``, ``k``, ``v``, ``O``, ``dO``) reads an operand where it lies, a
    strided view such as the ``[B, S, H, dh] → [B, H, S, dh]`` permutation of a projection; others are
    contiguous."""
    w = text(op, ctype, strides)
    rows = int(np.prod(w.lead)) * w.S
    sig, args, names = signature(op, ctype)
    if isinstance(op, AttentionForward):
        body = _forward(op, w) if op.norm == "softmax" else _forward_spherical(op, w)
    elif isinstance(op, AttentionGradQ):
        body = _grad_q(op, w)
    else:
        assert not isinstance(op, AttentionGradKV), "a thread per row holds dk or dv, not both (attention.kv_together)"
        body = _grad_kv(op, w)
    src = ("#ifndef CG_VEC_LOAD\n#define CG_VEC_LOAD(p)\n#endif\n"     # checked only by the host execution mode
           "#ifndef CG_ROW\n#define CG_ROW(i, n, what) (i)\n#endif\n"
           f"__host__ __device__ inline void {name}_body(long long t, {sig}) {{\n{body}}}\n"
           f"extern \"C\" __global__ void {name}({sig}) {{\n"
           f"    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
           f"    if (t < {rows}LL) {name}_body(t, {args});\n"
           f"}}\n")
    return src, rows, names


def _strides(op: Attention, given: dict[str, tuple[int, ...]] | None) -> dict[str, tuple[int, ...]]:
    """The strides each operand is read with (``given``, else contiguous), each output (``<name>_out``) is
    written with (its logical strides in the order it is written), and each rounded copy (``<name>_rnd``,
    :func:`copies`): an output's as the output, an input's (:meth:`~.attention.Attention.copies`) contiguous."""
    strides = dict(given or {})
    contiguous = tuple(int(np.prod(op.T.shape[a + 1:])) for a in range(op.T.ndim))
    for n in op.ins.split():
        if n not in "LD":
            strides.setdefault(n, contiguous)
    for n in op.copies():
        strides[f"{n}_rnd"] = contiguous
    for k, n in enumerate(op.outs.split()):          # an output written in another order: its logical strides
        ax = op.axes(k)
        if n not in "LD":
            phys = [int(np.prod([op.T.shape[a] for a in ax[j + 1:]])) for j in range(len(ax))] if ax else None
            strides[f"{n}_out"] = strides[f"{n}_rnd"] = (
                contiguous if ax is None else tuple(phys[ax.index(j)] for j in range(op.T.ndim)))
    return strides


class Text:
    """What an attention kernel's body is written with: the element type ``T``, the scale ``c`` as a literal,
    ``exp`` and ``log`` for ``T``, the loop over the head dimension, a pointer to each operand's row, and the
    kind's weight and score gradient (the module's table)."""

    def __init__(self, op: Attention, ctype: str, strides: dict[str, tuple[int, ...]]):
        *self.lead, self.S, self.dh = op.T.shape
        self.T, self.c, self.strides, self.norm = ctype, literal(op.c, ctype), strides, op.norm
        self.exp, self.log, self.sqrt = mathfn("exp", ctype), mathfn("log", ctype), mathfn("sqrt", ctype)
        self.eps = literal(op.eps, ctype)
        self.loop = f"for (int d = 0; d < {self.dh}; ++d)"
        self.end = "row + 1" if op.causal else f"{self.S}LL"       # past the last key a query row sees
        # streamed rows are read VEC elements at a time (float4, double2) when every row starts on a multiple of
        # VEC elements; the pointers' 16-byte alignment is checked at run time (a view may start anywhere)
        self.width, self.V = VEC[ctype]
        ins = [n for n in op.ins.split() if n not in "LD"]
        self.vec = self.dh % self.width == 0 and all(st % self.width == 0 for n in ins for st in strides[n][:-1])
        aligned = " | ".join(f"(unsigned long long){n}" for n in ins)
        # causal query rows see row + 1 keys: the longest are numbered first, so their blocks start first and
        # the short ones fill the tail (key rows, for dk and dv, are longest first as they are)
        last = self.S - 1
        row = (f"{last}LL - t % {self.S}LL" if op.causal and isinstance(op, (AttentionForward, AttentionGradQ))
               else f"t % {self.S}LL")
        self.mine = f'bh * {self.S}LL + CG_ROW(row, {self.S}LL, "L/D")'         # this row's entry of L and D
        #: the run-time check of the operands' alignment (``vec``), where the rows allow 16-byte loads
        self.aligned = f"    const bool vec = (({aligned}) & 15ULL) == 0;   // 16-byte loads\n" if self.vec else ""
        self.head = f"    const long long bh = t / {self.S}LL, row = {row};\n" + self.aligned

    def each(self, body: str, rows: tuple[str, ...]) -> str:
        """``body`` for every ``d < dh``, where ``$d`` is ``d`` and ``$x`` element ``d`` of the streamed row ``x``
        (a pointer): with vector loads of the rows where they are aligned, in the same order of operations."""
        def put(d: str, read) -> str:
            return re.sub(r"\$(\w+)", lambda m: d if m.group(1) == "d" else read(m.group(1)), body)
        scalar = f"{self.loop} {{ {put('d', lambda x: f'{x}[d]')} }}"
        if not self.vec:
            return scalar
        checks = " ".join(f"CG_VEC_LOAD({x});" for x in rows)      # the host execution mode's alignment check
        loads = " ".join(f"const {self.V} {x}_v = ((const {self.V}*){x})[e];" for x in rows)
        parts = " ".join(put(f"({self.width} * e + {c})", lambda x, f=f: f"{x}_v.{f}")
                         for c, f in enumerate("xyzw"[:self.width]))
        return (f"if (vec) {{ {checks} for (int e = 0; e < {self.dh // self.width}; ++e) {{ {loads} {parts} }} }} "
                f"else {{ {scalar} }}")

    def at(self, n: str, i: str) -> str:
        """A pointer to row ``i`` of the current matrix ``bh`` of operand ``n`` (the host execution mode checks
        ``0 ≤ i < S``: ``CG_ROW``)."""
        return _row(n, self.strides[n], self.lead, "bh", self.row(i, n))

    def row(self, i: str, n: str) -> str:
        """Row index ``i`` of operand ``n``, checked by the host execution mode (``CG_ROW``)."""
        return f'CG_ROW({i}, {self.S}LL, "{n}")'

    def stat(self, n: str, i: str) -> str:
        """Entry ``i`` (a row) of the current matrix's row statistic ``n`` (``L`` or ``D``, or an output)."""
        return f"{n}[bh * {self.S}LL + {self.row(i, n)}]"

    def weight(self, s: str, L: str) -> str:
        """The weight of score ``s`` in a row whose statistic is ``L``."""
        return f"{self.exp}({s} - {L})" if self.norm == "softmax" else f"({L} * {s})"

    def ds(self, s: str, dp: str, L: str, D: str) -> str:
        """The score's gradient (before the scale ``c``) from ``dp = dO_i·v_j`` and ``D = rowsum(dO∘O)``."""
        return self.ds_p(self.weight(s, L), dp, L, D)

    def ds_p(self, p: str, dp: str, L: str, D: str) -> str:
        """:meth:`ds` from the score's weight ``p`` (:meth:`weight`), the same operations in the same order."""
        if self.norm == "softmax":
            return f"{p} * ({dp} - {D})"
        return f"{L} * ({dp} - {p} * {D})"


def _row(name: str, strides: tuple[int, ...], lead: list[int], bh: str, i: str) -> str:
    """A pointer to row ``i`` of matrix ``bh`` of input ``name`` (``[..., S, dh]``, read where it lies through
    ``strides``, in elements, its last one 1)."""
    parts, div = [], 1
    for n, st in reversed(list(zip(lead, strides[:-2]))):
        if n != 1 and st != 0:
            parts.append(f"((({bh}) / {div}LL) % {n}LL) * {st}LL")
        div *= n
    parts.append(f"({i}) * {strides[-2]}LL")
    return f"({name} + {' + '.join(parts)})"


def _forward(op: AttentionForward, w: Text) -> str:
    """A query row: the online softmax over the keys it sees (running maximum ``m`` and sum ``l``), ``O`` and
    ``L``."""
    T, c, dh, loop, at, exp = w.T, w.c, w.dh, w.loop, w.at, w.exp
    return (w.head +
            f"    {T} qr[{dh}], acc[{dh}];\n"
            f"    {{ const {T}* qi = {at('q', 'row')}; {loop} qr[d] = qi[d] * ({T}){c}; }}\n"
            f"    {T} m = 0, l = 1;\n"
            f"    {{ const {T}* k0 = {at('k', '0')}; const {T}* v0 = {at('v', '0')};\n"
            f"      {T} s = 0; {loop} s += qr[d] * k0[d]; m = s;\n"
            f"      {loop} acc[d] = v0[d]; }}\n"
            f"    for (long long j = 1; j < {w.end}; ++j) {{\n"
            f"        const {T}* kj = {at('k', 'j')}; const {T}* vj = {at('v', 'j')};\n"
            f"        {T} s = 0; {w.each('s += qr[$d] * $kj;', ('kj',))}\n"
            f"        if (s > m) {{ const {T} r = {exp}(m - s); l *= r; {loop} acc[d] *= r; m = s; }}\n"
            f"        const {T} p = {exp}(s - m); l += p;\n"
            f"        {w.each('acc[$d] += p * $vj;', ('vj',))}\n"
            f"    }}\n"
            f"    {{ {T}* oi = {at('O_out', 'row')}; {loop} oi[d] = acc[d] / l; }}\n"
            f"    L_out[{w.mine}] = m + {w.log}(l);\n")


def _forward_spherical(op: AttentionForward, w: Text) -> str:
    """A query row: the sum of its squared scores ``Q`` and ``Σ s·v`` over the keys it sees (no maximum, no
    rescaling), then ``L = 1/√(Q + ε)`` and ``O = L·Σ s·v``."""
    T, c, dh, loop, at = w.T, w.c, w.dh, w.loop, w.at
    return (w.head +
            f"    {T} qr[{dh}], acc[{dh}];\n"
            f"    {{ const {T}* qi = {at('q', 'row')}; {loop} {{ qr[d] = qi[d] * ({T}){c}; acc[d] = 0; }} }}\n"
            f"    {T} Q = 0;\n"
            f"    for (long long j = 0; j < {w.end}; ++j) {{\n"
            f"        const {T}* kj = {at('k', 'j')}; const {T}* vj = {at('v', 'j')};\n"
            f"        {T} s = 0; {w.each('s += qr[$d] * $kj;', ('kj',))}\n"
            f"        Q += s * s;\n"
            f"        {w.each('acc[$d] += s * $vj;', ('vj',))}\n"
            f"    }}\n"
            f"    const {T} r = ({T})1 / {w.sqrt}(Q + ({T}){w.eps});\n"
            f"    {{ {T}* oi = {at('O_out', 'row')}; {loop} oi[d] = acc[d] * r; }}\n"
            f"    L_out[{w.mine}] = r;\n")


def _grad_q(op: AttentionGradQ, w: Text) -> str:
    """A query row: ``dq`` over the keys it sees, the weights recomputed from ``L``, and ``D = rowsum(dO∘O)``."""
    T, c, dh, loop, at = w.T, w.c, w.dh, w.loop, w.at
    return (w.head +
            f"    {T} qr[{dh}], dor[{dh}], acc[{dh}];\n"
            f"    {T} Dt = 0;\n"
            f"    {{ const {T}* qi = {at('q', 'row')}; const {T}* doi = {at('dO', 'row')};\n"
            f"      const {T}* oi = {at('O', 'row')};\n"
            f"      {loop} {{ qr[d] = qi[d] * ({T}){c}; dor[d] = doi[d]; Dt += dor[d] * oi[d]; acc[d] = 0; }} }}\n"
            f"    const {T} Lt = L[{w.mine}];\n"
            f"    for (long long j = 0; j < {w.end}; ++j) {{\n"
            f"        const {T}* kj = {at('k', 'j')}; const {T}* vj = {at('v', 'j')};\n"
            f"        {T} s = 0, dp = 0; {w.each('s += qr[$d] * $kj; dp += dor[$d] * $vj;', ('kj', 'vj'))}\n"
            f"        const {T} ds = {w.ds('s', 'dp', 'Lt', 'Dt')};\n"
            f"        {w.each('acc[$d] += ds * $kj;', ('kj',))}\n"
            f"    }}\n"
            f"    {{ {T}* out = {at('dq_out', 'row')}; {loop} out[d] = acc[d] * ({T}){c}; }}\n"
            f"    D_out[{w.mine}] = Dt;\n")


def _grad_kv(op: Attention, w: Text) -> str:
    """A key row ``j`` (``dk`` or ``dv``): the query rows ``i`` it is visible to, the weights recomputed from
    ``L``."""
    T, c, dh, loop, at, S = w.T, w.c, w.dh, w.loop, w.at, w.S
    start = "row" if op.causal else "0LL"
    grad_k = isinstance(op, AttentionGradK)
    regs = f"{T} kr[{dh}], acc[{dh}]" + (f", vr[{dh}]" if grad_k else "")
    init = (f"    {{ const {T}* kj = {at('k', 'row')};" + (f" const {T}* vj = {at('v', 'row')};" if grad_k else "")
            + f"\n      {loop} {{ kr[d] = kj[d] * ({T}){c}; acc[d] = 0;"
            + (" vr[d] = vj[d];" if grad_k else "") + " } }\n")
    if grad_k:
        step = (f"        {T} s = 0, dp = 0; {w.each('s += $qi * kr[$d]; dp += $doi * vr[$d];', ('qi', 'doi'))}\n"
                f"        const {T} Li = {w.stat('L', 'i')}, Di = {w.stat('D', 'i')};\n"
                f"        const {T} ds = {w.ds('s', 'dp', 'Li', 'Di')};\n"
                f"        {w.each('acc[$d] += ds * $qi;', ('qi',))}\n")
        out = f"    {{ {T}* out = {at('dk_out', 'row')}; {loop} out[d] = acc[d] * ({T}){c}; }}\n"
    else:
        step = (f"        {T} s = 0; {w.each('s += $qi * kr[$d];', ('qi',))}\n"
                f"        const {T} p = {w.weight('s', w.stat('L', 'i'))};\n"
                f"        {w.each('acc[$d] += p * $doi;', ('doi',))}\n")
        out = f"    {{ {T}* out = {at('dv_out', 'row')}; {loop} out[d] = acc[d]; }}\n"
    return (w.head + f"    {regs};\n" + init +
            f"    for (long long i = {start}; i < {S}LL; ++i) {{\n"
            f"        const {T}* qi = {at('q', 'i')}; const {T}* doi = {at('dO', 'i')};\n"
            + step + "    }\n" + out)
