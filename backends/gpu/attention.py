"""Streaming softmax attention: a step's attention core, forward and reverse derivative, as four kernels that
never hold the ``S×S`` scores in memory.

The compiler finds the core by its definition (``ops.attention``'s ``softmax_attention`` path) and checks
its shape: the forward ``P = softmax(c·q kᵀ)``, ``O = P v`` and the reverse derivative the backward pass
derives from it (``dP = dO vᵀ``, ``dS = c·P∘(dP − rowsum(dP∘P))``, ``dq = dS k``, ``dk = dSᵀ q``,
``dv = Pᵀ dO``), or the forward alone (a ``predict``), every intermediate read by nothing else. :func:`fuse`
then replaces it::

    q k v ──► AttentionForward ──► O, L                     L = logsumexp of each query's scores
    q k v O L dO ──► AttentionGradQ ──► dq, D               D = rowsum(dO∘O) = rowsum(dP∘P)
    q k L dO ──► AttentionGradV ──► dv
    q k v L dO D ──► AttentionGradK ──► dk

Each kernel is a thread per row (query row for the forward and ``dq``, key row for ``dk`` and ``dv``), its
row and accumulators in registers, streaming the other rows (which a warp's lanes read together): the
forward keeps a running maximum and sum (online softmax, FlashAttention's recurrence), the backward
recomputes ``P`` from ``L``. This is the streaming form that "FlashAttention on a Napkin" derives from the
diagram (``costmodel/napkin.py`` counts its transfers). It applies where ``dh ≤ 64`` (a row in registers);
elsewhere, and for spherical attention, the step keeps today's kernels.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.pattern import Graph, Pat, X, match
from circuitgrad.schedule import Apply, Program
from circuitgrad.types import Float, NdArrayType

from .cuda import ctype, literal, mathfn
from .kernel import Kernel, with_extents
from .plan import Launch, Plan

__all__ = ["AttentionForward", "AttentionGradQ", "AttentionGradV", "AttentionGradK", "OPS", "MAX_DH", "fuse",
           "source", "attention_kernel", "costs"]

#: the largest head dimension fused (a row and its accumulators live in a thread's registers)
MAX_DH = 64


@dataclass(frozen=True)
class _Attention(P.Primitive):
    """Causal or full softmax attention over ``q, k, v : T = [..., S, dh]`` with scores ``c·q kᵀ``."""
    T: NdArrayType
    causal: bool
    c: float
    #: per output, the axes it is written in (``np.transpose`` of the logical ``[..., S, dh]``), or ``None``: a
    #: ``[B, H, S, dh]`` result its reader permutes back to ``[B, S, H, dh]`` is written so, with no copy
    order: tuple = ()
    kind: ClassVar[str] = "attention"
    ins: ClassVar[str] = ""
    outs: ClassVar[str] = ""

    @property
    def R(self) -> NdArrayType:
        """A value per row: ``[..., S]``."""
        return self.T.with_shape(self.T.shape[:-1])

    def axes(self, k: int) -> tuple | None:
        """The order output ``k`` is written in (``None``: as it is)."""
        return self.order[k] if k < len(self.order) else None

    @property
    def source(self):
        return tuple(self.R if n in "LD" else self.T for n in self.ins.split())

    @property
    def target(self):
        out = []
        for k, n in enumerate(self.outs.split()):
            ax = self.axes(k)
            out.append(self.R if n in "LD" else self.T if ax is None else
                       self.T.with_shape(tuple(self.T.shape[a] for a in ax)))
        return tuple(out)

    def evaluate(self, *args):
        """The outputs, with NumPy (the reference of the kernel), each in the order it is written."""
        results = self.logical(*args)
        return tuple(r if self.axes(k) is None else np.transpose(r, self.axes(k)) for k, r in enumerate(results))

    def _p(self, q, k, L):
        """The probabilities, recomputed from the saved logsumexp ``L`` (0 above the diagonal when causal)."""
        s = self.c * np.matmul(q, np.swapaxes(k, -1, -2))
        p = np.exp(s - L[..., None])
        if self.causal:
            n = s.shape[-1]
            p = np.where(np.tril(np.ones((n, n), dtype=bool)), p, 0)
        return p


class AttentionForward(_Attention):
    """``q, k, v → O, L``."""
    ins, outs = "q k v", "O L"

    def logical(self, q, k, v):
        s = self.c * np.matmul(q, np.swapaxes(k, -1, -2))
        if self.causal:
            n = s.shape[-1]
            s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
        m = s.max(axis=-1)
        e = np.exp(s - m[..., None])
        l_ = e.sum(axis=-1)
        return np.matmul(e / l_[..., None], v), m + np.log(l_)


class AttentionGradQ(_Attention):
    """``q, k, v, O, L, dO → dq, D``."""
    ins, outs = "q k v O L dO", "dq D"

    def logical(self, q, k, v, O, L, dO):
        p = self._p(q, k, L)
        D = (dO * O).sum(axis=-1)
        ds = p * (np.matmul(dO, np.swapaxes(v, -1, -2)) - D[..., None])
        return self.c * np.matmul(ds, k), D


class AttentionGradV(_Attention):
    """``q, k, L, dO → dv``."""
    ins, outs = "q k L dO", "dv"

    def logical(self, q, k, L, dO):
        return (np.matmul(np.swapaxes(self._p(q, k, L), -1, -2), dO),)


class AttentionGradK(_Attention):
    """``q, k, v, L, dO, D → dk``."""
    ins, outs = "q k v L dO D", "dk"

    def logical(self, q, k, v, L, dO, D):
        p = self._p(q, k, L)
        ds = p * (np.matmul(dO, np.swapaxes(v, -1, -2)) - D[..., None])
        return (self.c * np.matmul(np.swapaxes(ds, -1, -2), q),)


OPS = (AttentionForward, AttentionGradQ, AttentionGradV, AttentionGradK)


def costs(op: _Attention) -> tuple[float, float, float]:
    """``(flops, matmul flops, transcendentals)`` of one launch: the products it does (half when causal)."""
    *lead, S, dh = op.T.shape
    pairs = float(np.prod(lead)) * S * S * (0.5 if op.causal else 1.0)
    products = {AttentionForward: 2, AttentionGradQ: 3, AttentionGradV: 2, AttentionGradK: 3}[type(op)]
    return pairs * (2 * dh * products + 4), pairs * 2 * dh * products, pairs


# ------------------------------------------------------------------ finding the core
class _NoMatch(Exception):
    pass


def _swap(op) -> bool:
    n = op.T.ndim
    return isinstance(op, P.Permute) and op.axes == tuple(range(n - 2)) + (n - 1, n - 2)


def _inside(a: Apply) -> bool:
    return a.path.endswith("softmax_attention")


#: the forward core as the definition builds it: ``softmax(c · q @ swap(k))``, every instruction from
#: ``ops.softmax_attention``
CORE = Pat(P.Softmax, Pat(P.Scale, Pat(P.BatchMatMul, X("q"), Pat(P.Permute, X("k"), name="kT",
                                                                  when=lambda a: _inside(a) and _swap(a.op)),
                                       name="S", when=_inside), name="scale", when=_inside),
           name="softmax", when=_inside)


class _Match:
    """One attention core of ``prog`` around the softmax instruction ``at`` (raises :class:`_NoMatch`)."""

    def __init__(self, prog: Program, at: int, producers: dict, uses: dict):
        self.prog, self.producers, self.uses = prog, producers, uses
        graph = Graph({v: prog.instrs[i] for v, i in producers.items()}, {})
        b = match(CORE, prog.instrs[at], graph)
        if b is None:
            raise _NoMatch
        sm, scale, S = b["softmax"], b["scale"], b["S"]
        q, k, kT = b["q"], b["k"], b["kT"].results[0]
        self.taken: set[int] = {at} | {producers[x.results[0]] for x in (scale, S, b["kT"])}
        P_ = sm.results[0]
        T = prog.types[q]
        if prog.types[k] != T or not isinstance(T.dtype, Float) or T.shape[-1] > MAX_DH or T.ndim < 3:
            raise _NoMatch
        self.c, self.causal, self.T = scale.op.c, sm.op.causal, T
        fwd = self.use(P_, P.BatchMatMul, lambda a: a.args[0] == P_)
        v, self.O = fwd.args[1], fwd.results[0]
        if prog.types[v] != T:
            raise _NoMatch
        forward = set(self.taken)
        try:
            self._backward(prog, q, k, v, kT, P_, T)
        except _NoMatch:                            # the forward alone (inference): its intermediates unread
            self.taken, self.backward_at = forward, None
            self.dq = self.dk = self.dv = self.dO = None
        outside = {self.O, self.dq, self.dk, self.dv}
        for i in self.taken:                        # every intermediate is read inside the core only
            for res in prog.instrs[i].results:
                if res in outside:
                    continue
                if res in prog.outputs or any(u not in self.taken for u in uses.get(res, [])):
                    raise _NoMatch
        self.q, self.k, self.v = q, k, v
        # the new instructions go where their operands are defined: the forward after the softmax and q, k, v;
        # the backward after the forward and where dO is first read
        self.forward_at = max([at] + [producers.get(x, -1) + 1 for x in (q, k, v)])
        if self.backward_at is not None:
            self.backward_at = max(self.backward_at, self.forward_at)

    def _backward(self, prog: Program, q: int, k: int, v: int, kT: int, P_: int, T: NdArrayType) -> None:
        """The reverse derivative's part of the core (raises :class:`_NoMatch`)."""
        PT = self.use(P_, P.Permute, lambda a: _swap(a.op)).results[0]
        dv_mm = self.use(PT, P.BatchMatMul, lambda a: a.args[0] == PT)
        dO, self.dv = dv_mm.args[1], dv_mm.results[0]
        vT = self.use(v, P.Permute, lambda a: _swap(a.op)).results[0]
        dP = self.use(vT, P.BatchMatMul, lambda a: a.args == (dO, vT)).results[0]
        m1 = self.use(dP, P.Mul, lambda a: set(a.args) == {dP, P_}).results[0]
        r = self.use(m1, P.SumTo).results[0]
        if prog.types[r].shape != T.shape[:-2] + (T.shape[-2], 1):
            raise _NoMatch
        b = self.use(r, P.Broadcast).results[0]
        n = self.use(b, P.Neg).results[0]
        a = self.use(n, P.Add, lambda x: set(x.args) == {dP, n}).results[0]
        m2 = self.use(a, P.Mul, lambda x: set(x.args) == {P_, a}).results[0]
        ds_i = self.use(m2, P.Scale, lambda x: x.op.c == self.c)
        ds = ds_i.results[0]
        kTT = self.use(kT, P.Permute, lambda x: _swap(x.op)).results[0]
        self.dq = self.use(ds, P.BatchMatMul, lambda x: x.args == (ds, kTT)).results[0]
        qT = self.use(q, P.Permute, lambda x: _swap(x.op)).results[0]
        dkT = self.use(ds, P.BatchMatMul, lambda x: x.args == (qT, ds)).results[0]
        self.dk = self.use(dkT, P.Permute, lambda x: _swap(x.op)).results[0]
        self.dO = dO
        self.backward_at = min(i for i in self.taken if dO in prog.instrs[i].args)    # dO is defined by then

    def take(self, i: int, cls, ok=lambda a: True) -> Apply:
        a = self.prog.instrs[i]
        if not isinstance(a.op, cls) or not ok(a) or not a.path.endswith("softmax_attention"):
            raise _NoMatch
        self.taken.add(i)
        return a

    def use(self, v: int, cls, ok=lambda a: True) -> Apply:
        """The one reader of ``v`` of class ``cls`` that satisfies ``ok``."""
        found = [i for i in self.uses.get(v, []) if isinstance(self.prog.instrs[i].op, cls)
                 and ok(self.prog.instrs[i])]
        if len(found) != 1:
            raise _NoMatch
        return self.take(found[0], cls)


def fuse(prog: Program) -> Program:
    """``prog`` with every softmax attention core that qualifies replaced by the four streaming kernels'
    instructions (the same program when none does)."""
    producers, uses = prog.producers(), prog.uses()
    matches = []
    for i, a in enumerate(prog.instrs):
        if isinstance(a.op, P.Softmax) and a.path.endswith("softmax_attention"):
            try:
                matches.append(_Match(prog, i, producers, uses))
            except _NoMatch:
                continue
    if not matches:
        return prog
    types = list(prog.types)
    replaced: set[int] = set()
    at: dict[int, list[Apply]] = {}
    for m in matches:
        replaced |= m.taken
        L, D = len(types), len(types) + 1
        R = m.T.with_shape(m.T.shape[:-1])
        types += [R, R]
        path = prog.instrs[m.forward_at].path

        def written(x: int, *rest: int) -> tuple[tuple, tuple, list]:
            """The order ``x`` is written in (its one reader's permutation, the last axis kept), the results
            with ``x`` replaced by the written array, and the view that gives ``x`` back."""
            readers = [u for u in uses.get(x, []) if u not in m.taken]
            ax = prog.instrs[readers[0]].op.axes if len(readers) == 1 and \
                isinstance(prog.instrs[readers[0]].op, P.Permute) else None
            if ax is None or ax[-1] != m.T.ndim - 1 or ax == tuple(range(m.T.ndim)):
                return (None,), (x, *rest), []
            phys = len(types)
            types.append(m.T.with_shape(tuple(m.T.shape[a] for a in ax)))
            inv = tuple(ax.index(j) for j in range(m.T.ndim))
            return (ax,), (phys, *rest), [Apply(P.Permute(types[phys], inv), (phys,), (x,), path)]
        o_ax, o_res, o_view = written(m.O, L)
        op = dict(T=m.T, causal=m.causal, c=m.c)
        at.setdefault(m.forward_at, []).extend(
            [Apply(AttentionForward(**op, order=o_ax), (m.q, m.k, m.v), o_res, path)] + o_view)
        if m.backward_at is None:
            continue
        q_ax, q_res, q_view = written(m.dq, D)
        v_ax, v_res, v_view = written(m.dv)
        k_ax, k_res, k_view = written(m.dk)
        at.setdefault(m.backward_at, []).extend(
            [Apply(AttentionGradQ(**op, order=q_ax), (m.q, m.k, m.v, m.O, L, m.dO), q_res, path)] + q_view +
            [Apply(AttentionGradV(**op, order=v_ax), (m.q, m.k, L, m.dO), v_res, path)] + v_view +
            [Apply(AttentionGradK(**op, order=k_ax), (m.q, m.k, m.v, L, m.dO, D), k_res, path)] + k_view)
    instrs = []
    for i, a in enumerate(prog.instrs):
        instrs.extend(at.get(i, []))
        if i not in replaced:
            instrs.append(a)
    defined = set(prog.inputs)
    for a in instrs:                      # every operand defined before it is read, else keep the program
        if any(x not in defined for x in a.args):
            return prog
        defined.update(a.results)
    return dataclasses.replace(prog, types=types, instrs=instrs)


# ------------------------------------------------------------------ kernels
def attention_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """The streaming attention kernel of an ``attention`` step: a thread per row."""
    (a,) = step.instrs
    c = ctype(plan.program.types[a.results[0]])
    strides = {}
    for n, x in zip(a.op.ins.split(), a.args):      # operands read where they lie: a strided view's strides
        _, stages = plan.read(plan.src(x))
        if stages:
            ((shape, st),) = stages
            assert shape == plan.program.types[x].shape and st[-1] == 1, f"{name}: {n} is not a row-major view"
            strides[n] = tuple(st)
    src, rows, _ = source(a.op, name, c, strides)
    return with_extents(Kernel(name, src, list(step.inputs), list(step.outputs), rows, [a.op.name],
                               frozenset(step.inputs), tuple(c for _ in step.inputs)), plan)


def source(op: _Attention, name: str, ctype: str,
           strides: dict[str, tuple[int, ...]] | None = None) -> tuple[str, int, list[str]]:
    """``(CUDA source, rows, parameter names)`` of ``op``'s kernel: a thread per row of ``[..., S]``.

    ``strides`` (elements, by input name: ``q``, ``k``, ``v``, ``O``, ``dO``) reads an operand where it lies, a
    strided view such as the ``[B, S, H, dh] → [B, H, S, dh]`` permutation of a projection; others are
    contiguous."""
    w = _Text(op, ctype, _strides(op, strides))
    rows = int(np.prod(w.lead)) * w.S
    ins, outs = op.ins.split(), op.outs.split()
    params = [f"const {ctype}* __restrict__ {n}" for n in ins] + [f"{ctype}* __restrict__ {n}_out" for n in outs]
    if isinstance(op, AttentionForward):
        body = _forward(op, w)
    elif isinstance(op, AttentionGradQ):
        body = _grad_q(op, w)
    else:
        body = _grad_kv(op, w)
    args = ", ".join(ins + [f"{n}_out" for n in outs])
    src = (f"__host__ __device__ inline void {name}_body(long long t, {', '.join(params)}) {{\n{body}}}\n"
           f"extern \"C\" __global__ void {name}({', '.join(params)}) {{\n"
           f"    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
           f"    if (t < {rows}LL) {name}_body(t, {args});\n"
           f"}}\n")
    return src, rows, ins + outs


def _strides(op: _Attention, given: dict[str, tuple[int, ...]] | None) -> dict[str, tuple[int, ...]]:
    """The strides each operand is read with (``given``, else contiguous) and each output (``<name>_out``) is
    written with (its logical strides in the order it is written)."""
    strides = dict(given or {})
    contiguous = tuple(int(np.prod(op.T.shape[a + 1:])) for a in range(op.T.ndim))
    for n in op.ins.split():
        if n not in "LD":
            strides.setdefault(n, contiguous)
    for k, n in enumerate(op.outs.split()):          # an output written in another order: its logical strides
        ax = op.axes(k)
        if n not in "LD":
            phys = [int(np.prod([op.T.shape[a] for a in ax[j + 1:]])) for j in range(len(ax))] if ax else None
            strides[f"{n}_out"] = contiguous if ax is None else tuple(phys[ax.index(j)] for j in range(op.T.ndim))
    return strides


class _Text:
    """What an attention kernel's body is written with: the element type ``T``, the scale ``c`` as a literal,
    ``exp`` and ``log`` for ``T``, the loop over the head dimension, and a pointer to each operand's row."""

    def __init__(self, op: _Attention, ctype: str, strides: dict[str, tuple[int, ...]]):
        *self.lead, self.S, self.dh = op.T.shape
        self.T, self.c, self.strides = ctype, literal(op.c, ctype), strides
        self.exp, self.log = mathfn("exp", ctype), mathfn("log", ctype)
        self.loop = f"for (int d = 0; d < {self.dh}; ++d)"
        self.head = f"    const long long bh = t / {self.S}LL, row = t % {self.S}LL;\n"

    def at(self, n: str, i: str) -> str:
        """A pointer to row ``i`` of the current matrix ``bh`` of operand ``n``."""
        return _row(n, self.strides[n], self.lead, "bh", i)


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


def _forward(op: AttentionForward, w: _Text) -> str:
    """A query row: the online softmax over the keys it sees (running maximum ``m`` and sum ``l``), ``O`` and
    ``L``."""
    T, c, dh, loop, at, exp = w.T, w.c, w.dh, w.loop, w.at, w.exp
    end = "row + 1" if op.causal else f"{w.S}LL"
    return (w.head +
            f"    {T} qr[{dh}], acc[{dh}];\n"
            f"    {{ const {T}* qi = {at('q', 'row')}; {loop} qr[d] = qi[d] * ({T}){c}; }}\n"
            f"    {T} m = 0, l = 1;\n"
            f"    {{ const {T}* k0 = {at('k', '0')}; const {T}* v0 = {at('v', '0')};\n"
            f"      {T} s = 0; {loop} s += qr[d] * k0[d]; m = s;\n"
            f"      {loop} acc[d] = v0[d]; }}\n"
            f"    for (long long j = 1; j < {end}; ++j) {{\n"
            f"        const {T}* kj = {at('k', 'j')}; const {T}* vj = {at('v', 'j')};\n"
            f"        {T} s = 0; {loop} s += qr[d] * kj[d];\n"
            f"        if (s > m) {{ const {T} r = {exp}(m - s); l *= r; {loop} acc[d] *= r; m = s; }}\n"
            f"        const {T} p = {exp}(s - m); l += p;\n"
            f"        {loop} acc[d] += p * vj[d];\n"
            f"    }}\n"
            f"    {{ {T}* oi = {at('O_out', 'row')}; {loop} oi[d] = acc[d] / l; }}\n"
            f"    L_out[t] = m + {w.log}(l);\n")


def _grad_q(op: AttentionGradQ, w: _Text) -> str:
    """A query row: ``dq`` over the keys it sees, ``P`` recomputed from ``L``, and ``D = rowsum(dO∘O)``."""
    T, c, dh, loop, at, exp = w.T, w.c, w.dh, w.loop, w.at, w.exp
    end = "row + 1" if op.causal else f"{w.S}LL"
    return (w.head +
            f"    {T} qr[{dh}], dor[{dh}], acc[{dh}];\n"
            f"    {T} Dt = 0;\n"
            f"    {{ const {T}* qi = {at('q', 'row')}; const {T}* doi = {at('dO', 'row')};\n"
            f"      const {T}* oi = {at('O', 'row')};\n"
            f"      {loop} {{ qr[d] = qi[d] * ({T}){c}; dor[d] = doi[d]; Dt += dor[d] * oi[d]; acc[d] = 0; }} }}\n"
            f"    const {T} Lt = L[t];\n"
            f"    for (long long j = 0; j < {end}; ++j) {{\n"
            f"        const {T}* kj = {at('k', 'j')}; const {T}* vj = {at('v', 'j')};\n"
            f"        {T} s = 0, dp = 0; {loop} {{ s += qr[d] * kj[d]; dp += dor[d] * vj[d]; }}\n"
            f"        const {T} ds = {exp}(s - Lt) * (dp - Dt);\n"
            f"        {loop} acc[d] += ds * kj[d];\n"
            f"    }}\n"
            f"    {{ {T}* out = {at('dq_out', 'row')}; {loop} out[d] = acc[d] * ({T}){c}; }}\n"
            f"    D_out[t] = Dt;\n")


def _grad_kv(op: _Attention, w: _Text) -> str:
    """A key row ``j`` (``dk`` or ``dv``): the query rows ``i`` it is visible to, ``P`` recomputed from ``L``."""
    T, c, dh, loop, at, exp, S = w.T, w.c, w.dh, w.loop, w.at, w.exp, w.S
    start = "row" if op.causal else "0LL"
    grad_k = isinstance(op, AttentionGradK)
    regs = f"{T} kr[{dh}], acc[{dh}]" + (f", vr[{dh}]" if grad_k else "")
    init = (f"    {{ const {T}* kj = {at('k', 'row')};" + (f" const {T}* vj = {at('v', 'row')};" if grad_k else "")
            + f"\n      {loop} {{ kr[d] = kj[d] * ({T}){c}; acc[d] = 0;"
            + (" vr[d] = vj[d];" if grad_k else "") + " } }\n")
    if grad_k:
        step = (f"        {T} s = 0, dp = 0; {loop} {{ s += qi[d] * kr[d]; dp += doi[d] * vr[d]; }}\n"
                f"        const {T} ds = {exp}(s - L[bh * {S}LL + i]) * (dp - D[bh * {S}LL + i]);\n"
                f"        {loop} acc[d] += ds * qi[d];\n")
        out = f"    {{ {T}* out = {at('dk_out', 'row')}; {loop} out[d] = acc[d] * ({T}){c}; }}\n"
    else:
        step = (f"        {T} s = 0; {loop} s += qi[d] * kr[d];\n"
                f"        const {T} p = {exp}(s - L[bh * {S}LL + i]);\n"
                f"        {loop} acc[d] += p * doi[d];\n")
        out = f"    {{ {T}* out = {at('dv_out', 'row')}; {loop} out[d] = acc[d]; }}\n"
    return (w.head + f"    {regs};\n" + init +
            f"    for (long long i = {start}; i < {S}LL; ++i) {{\n"
            f"        const {T}* qi = {at('q', 'i')}; const {T}* doi = {at('dO', 'i')};\n"
            + step + "    }\n" + out)
