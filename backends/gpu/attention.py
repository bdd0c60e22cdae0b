"""Streaming attention: a step's softmax or spherical attention core, forward and reverse derivative, as three
or four kernels that never hold the ``S×S`` scores in memory.

The compiler finds the core by its definition (``ops.attention``'s ``softmax_attention`` or
``spherical_attention`` path) and checks its shape: the forward ``A = norm(c·q kᵀ)``, ``O = A v`` and the
reverse derivative the backward pass derives from it, or the forward alone (a ``predict``), every intermediate
read by nothing else. With ``dA = dO vᵀ`` and ``D = rowsum(dA∘A) = rowsum(dO∘O)``:

    softmax     A = softmax(s)                 dS = c·A∘(dA − D)
    spherical   A = r·s, r = 1/√(Σ s² + ε)     dS = c·r·(dA − A∘D)       (masked entries of s are 0)

and ``dq = dS k``, ``dk = dSᵀ q``, ``dv = Aᵀ dO``. :func:`fuse` then replaces it::

    q k v ──► AttentionForward ──► O, L          L: logsumexp (softmax) or r (spherical) of each query's scores
    q k v O L dO ──► AttentionGradQ ──► dq, D    D = rowsum(dO∘O)
    q k L dO ──► AttentionGradV ──► dv
    q k v L dO D ──► AttentionGradK ──► dk
    q k v L dO D ──► AttentionGradKV ──► dk, dv  in their stead where the kernel holds both (kv_together)

Each kernel takes a row at a time (query row for the forward and ``dq``, key row for ``dk`` and ``dv``), its
row and accumulators in registers, streaming the other rows: a quad of lanes per row in float32 where ``dh`` is a
multiple of 16 and ``S`` of 8 (:mod:`.attention_quad`), else a thread (:mod:`.attention_source`). The softmax forward
keeps a running maximum and sum (online softmax, FlashAttention's recurrence), the spherical one a running sum
of squares (FlashSign's: no maximum, no rescaling), and the backward recomputes ``A`` from ``L``. This is the
streaming form that "FlashAttention on a Napkin" derives from the diagram (``costmodel/napkin.py`` counts its
transfers). It applies where ``dh ≤ 64`` (a row in registers); elsewhere the step keeps today's kernels.
Where ``S`` and ``dh`` are multiples of 16 (:func:`tensor_cores`) the float32 kernels multiply on the tensor cores, a
warp per 16 rows (:mod:`.attention_mma`): operands rounded as the definition's products round them under
``"tf32"`` and ``"bf16"``, and, when asked, 3xTF32 products under ``"fp32"`` (``mma``).
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

from . import blas

__all__ = ["Attention", "AttentionForward", "AttentionGradQ", "AttentionGradV", "AttentionGradK", "AttentionGradKV",
           "OPS", "MAX_DH", "NORMS", "LOG2E", "LN2", "fuse", "costs", "tensor_cores", "quad", "kv_together", "MMA"]

#: the largest head dimension fused (a row and its accumulators live in a thread's registers)
MAX_DH = 64
#: the normalisations of the scores the kernels stream (``ops.attention``'s kinds)
NORMS = ("softmax", "spherical")
#: log₂ e and ln 2 in float32: under ``"tf32"`` and ``"bf16"`` the tensor-core softmax kernels work in base 2
#: (:attr:`Attention.exp2`)
LOG2E = np.float32(1.4426950408889634)
LN2 = np.float32(0.6931471805599453)


@dataclass(frozen=True)
class Attention(P.Primitive):
    """Causal or full attention over ``q, k, v : T = [..., S, dh]`` with scores ``s = c·q kᵀ``, normalised by
    ``norm`` (:data:`NORMS`; ``eps``: spherical attention's ε)."""
    T: NdArrayType
    causal: bool
    c: float
    #: per output, the axes it is written in (``np.transpose`` of the logical ``[..., S, dh]``), or ``None``: a
    #: ``[B, H, S, dh]`` result its reader permutes back to ``[B, S, H, dh]`` is written so, with no copy
    order: tuple = ()
    norm: str = "softmax"
    eps: float = 0.0
    #: ``""``: products on the CUDA cores, in the element type; on the tensor cores (:mod:`.attention_mma`):
    #: ``"tf32"`` or ``"bf16"``, every product's operands rounded so, as the unfused definition's are, or
    #: ``"3xtf32"``, float32 products as three TF32 ones of each operand's TF32 part and remainder
    mma: str = ""
    kind: ClassVar[str] = "attention"
    ins: ClassVar[str] = ""
    outs: ClassVar[str] = ""
    #: the inputs read only as products' operands (never ``O``, ``L``, ``D``, nor ``dO`` where ``D = rowsum(dO∘O)``
    #: is summed from it)
    operands: ClassVar[str] = ""
    #: the inputs the tensor-core kernel reads whole (every row once) and can also write rounded to bfloat16 as
    #: it reads them (:meth:`copies`): ``dO`` for the ``dk``/``dv`` kernels' products
    copied: ClassVar[str] = ""

    def copies(self) -> frozenset[str]:
        """The inputs whose bfloat16 copies the kernel writes as it reads them (:func:`~.rounding.into_attention`):
        :attr:`copied` under ``mma="bf16"``, whose kernels read them as bfloat16 pairs; else none."""
        return frozenset(self.copied.split()) if self.mma == "bf16" else frozenset()

    def bf16_inputs(self) -> frozenset[str]:
        """The inputs every read of which rounds to bfloat16 (the products' operands under ``mma="bf16"``): a
        value that only such reads and other products read may be stored rounded (:mod:`.storage`)."""
        return frozenset(self.operands.split()) if self.mma == "bf16" else frozenset()

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

    @property
    def exp2(self) -> bool:
        """Whether the kernel's softmax works in base 2: the tensor-core kernels under ``"tf32"`` and ``"bf16"``,
        whose weights are rounded to 11 or 8 significant bits before their product. A weight ``exp(c·a − L)`` of a
        raw score ``a = q·k`` is then ``2^(a·c₂ − L·log₂ e)`` with ``c₂ = c·log₂ e`` (:attr:`c2`): one fused
        multiply-add and the device's ``ex2`` (``cg_ex2`` of :mod:`.attention_mma`), where ``c·a``, ``− L``,
        ``·log₂ e`` and ``expf``'s range reduction took several instructions. Relative error at most
        ``(2|x| + 3|L|)·2⁻²⁴ + 2⁻²¹`` (``x = c·a − L``; the roundings of ``c₂``, ``L·log₂ e`` and the sum, ``ex2``'s
        2 units and its result's), ``2⁻¹⁴`` for scores and statistics up to 100, far below a bfloat16 or TF32 unit
        roundoff (``2⁻⁸``, ``2⁻¹¹``). The statistic ``L`` they save stays the natural logsumexp."""
        return self.mma in ("tf32", "bf16") and self.norm == "softmax" and self.c > 0    # max of a: of c·a

    @property
    def c2(self) -> np.float32:
        """``c·log₂ e`` rounded once to float32 (``c`` as a float32 kernel holds it): the base-2 kernels' scale."""
        return np.float32(float(np.float32(self.c)) * float(np.log2(np.e)))

    @staticmethod
    def ex2(a, c2, b):
        """``2^(a·c2 − b)`` in float32 as the base-2 kernels compute it: ``fmaf`` (here in float64, where ``a·c2``
        is exact: rounded twice, which may differ from one rounding by a unit in rare ties), then ``exp2``."""
        y = (a.astype(np.float64) * np.float64(c2) - np.asarray(b, np.float64)).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            return np.exp2(y)

    def _mm(self, a, b):
        """``a @ b`` as the kernel multiplies: operands rounded to :attr:`mma`'s type (none on the CUDA cores)."""
        if not self.mma or a.dtype != np.float32:
            return np.matmul(a, b)
        if self.mma == "3xtf32":                 # small terms first, as the kernel adds them
            (ah, al), (bh, bl) = (_split(np.ascontiguousarray(x)) for x in (a, b))
            return np.matmul(al, bh) + np.matmul(ah, bl) + np.matmul(ah, bh)
        rnd = blas.round_tf32 if self.mma == "tf32" else blas.round_bf16
        return np.matmul(rnd(np, np.ascontiguousarray(a)), rnd(np, np.ascontiguousarray(b)))

    def _scores(self, q, k, raw: bool = False):
        """``c·q kᵀ`` (``q kᵀ`` when ``raw``) and the mask of the scores kept (``None``: all of them)."""
        s = self._mm(q, np.swapaxes(k, -1, -2))
        s = s if raw else self.c * s
        n = s.shape[-1]
        return s, (np.tril(np.ones((n, n), dtype=bool)) if self.causal else None)

    def _p(self, q, k, L):
        """The weights, recomputed from the saved row statistic ``L`` (0 above the diagonal when causal)."""
        if self.exp2:
            a, keep = self._scores(q, k, raw=True)
            p = self.ex2(a, self.c2, (L * LOG2E)[..., None])
        else:
            s, keep = self._scores(q, k)
            p = np.exp(s - L[..., None]) if self.norm == "softmax" else s * L[..., None]
        return p if keep is None else np.where(keep, p, 0)

    def _ds(self, q, k, v, L, dO, D):
        """The scores' gradient before the scale ``c`` (0 above the diagonal when causal)."""
        p, dp = self._p(q, k, L), self._mm(dO, np.swapaxes(v, -1, -2))
        if self.norm == "softmax":
            return p * (dp - D[..., None])
        ds = L[..., None] * (dp - p * D[..., None])
        return ds if not self.causal else np.where(np.tril(np.ones(ds.shape[-2:], dtype=bool)), ds, 0)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``a`` as its TF32 part and the TF32 remainder (``a − hi`` is exact in float32)."""
    hi = blas.round_tf32(np, a)
    return hi, blas.round_tf32(np, a - hi)


class AttentionForward(Attention):
    """``q, k, v → O, L``."""
    ins, outs = "q k v", "O L"
    operands = "q k v"

    def logical(self, q, k, v):
        if self.exp2:
            return self._base2(q, k, v)
        s, keep = self._scores(q, k)
        if self.norm == "spherical":
            s = s if keep is None else np.where(keep, s, 0)
            r = 1 / np.sqrt((s * s).sum(axis=-1) + self.eps)
            if self.mma:                # the tensor-core kernel's one pass: the scores rounded, the sum scaled
                return self._mm(s, v) * r[..., None], r
            return self._mm(s * r[..., None], v), r
        if keep is not None:
            s = np.where(keep, s, -np.inf)
        m = s.max(axis=-1)
        e = np.exp(s - m[..., None])
        l_ = e.sum(axis=-1)
        if self.mma:                    # not in base 2 (3xTF32, c ≤ 0): exp(s − L), normalised, two passes
            L = m + np.log(l_)
            return self._mm(np.exp(s - L[..., None]), v), L
        return np.matmul(e / l_[..., None], v), m + np.log(l_)

    def _base2(self, q, k, v):
        """The base-2 softmax forward (:attr:`~Attention.exp2`) in one pass (online softmax): a row's weights
        ``e = 2^(a·c₂ − M)`` of its raw scores ``a`` (``c > 0``) at a whole power of two ``M = ⌈max a·c₂⌉``, rounded
        for their product unnormalised, ``O = (e @ v) / Σ e`` and ``L = (M + log₂ Σ e)·ln 2``. The kernel may hold a
        smaller ``M`` (by up to ``RESCALE``): its weights are these times a power of two, which rounding commutes
        with, to the float32 rounding of ``a·c₂ − M``."""
        a, keep = self._scores(q, k, raw=True)
        if keep is not None:
            a = np.where(keep, a, -np.inf)
        M = np.ceil((a.max(axis=-1) * self.c2).astype(np.float32))
        e = self.ex2(a, self.c2, M[..., None])
        l_ = e.sum(axis=-1, dtype=np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (self._mm(e, v) * (np.float32(1) / l_)[..., None],
                    ((M + np.log2(l_)) * LN2).astype(np.float32))


class AttentionGradQ(Attention):
    """``q, k, v, O, L, dO → dq, D``."""
    ins, outs = "q k v O L dO", "dq D"
    operands = "q k v"
    copied = "dO"

    def logical(self, q, k, v, O, L, dO):
        D = (dO * O).sum(axis=-1)
        if self.mma:                    # the definition scales dS before its products
            return self._mm(self.c * self._ds(q, k, v, L, dO, D), k), D
        return self.c * np.matmul(self._ds(q, k, v, L, dO, D), k), D


def _dv(op: Attention, q, k, L, dO):
    """``dv = Aᵀ dO``."""
    return op._mm(np.swapaxes(op._p(q, k, L), -1, -2), dO)


def _dk(op: Attention, q, k, v, L, dO, D):
    """``dk = c·dSᵀ q``."""
    if op.mma:
        return op._mm(np.swapaxes(op.c * op._ds(q, k, v, L, dO, D), -1, -2), q)
    return op.c * np.matmul(np.swapaxes(op._ds(q, k, v, L, dO, D), -1, -2), q)


class AttentionGradV(Attention):
    """``q, k, L, dO → dv``."""
    ins, outs = "q k L dO", "dv"
    operands = "q k dO"

    def logical(self, q, k, L, dO):
        return (_dv(self, q, k, L, dO),)


class AttentionGradK(Attention):
    """``q, k, v, L, dO, D → dk``."""
    ins, outs = "q k v L dO D", "dk"
    operands = "q k v dO"

    def logical(self, q, k, v, L, dO, D):
        return (_dk(self, q, k, v, L, dO, D),)


class AttentionGradKV(Attention):
    """``q, k, v, L, dO, D → dk, dv`` in one pass over the queries: each score, weight and ``dp`` computed once
    for both (where :func:`kv_together`)."""
    ins, outs = "q k v L dO D", "dk dv"
    operands = "q k v dO"

    def logical(self, q, k, v, L, dO, D):
        return _dk(self, q, k, v, L, dO, D), _dv(self, q, k, L, dO)


OPS = (AttentionForward, AttentionGradQ, AttentionGradV, AttentionGradK, AttentionGradKV)


def costs(op: Attention) -> tuple[float, float, float]:
    """``(flops, matmul flops, transcendentals)`` of one launch: the products it does (half when causal; the
    tensor-core softmax forward not in base 2, 3xTF32's, computes the scores twice); an exponential per score
    (softmax; two in that forward's passes), a square root per row (spherical's forward)."""
    *lead, S, dh = op.T.shape
    rows = float(np.prod(lead)) * S
    pairs = rows * S * (0.5 if op.causal else 1.0)
    forward = isinstance(op, AttentionForward)
    twice = forward and bool(op.mma) and op.norm == "softmax" and not op.exp2   # two passes: scores, exp twice
    products = {AttentionForward: 3 if twice else 2, AttentionGradQ: 3, AttentionGradV: 2,
                AttentionGradK: 3, AttentionGradKV: 4}[type(op)]
    special = (pairs * (2 if twice else 1) if op.norm == "softmax" else rows if forward else 0.0)
    return pairs * (2 * dh * products + 4), pairs * 2 * dh * products, special


# ------------------------------------------------------------------ finding the core
class _NoMatch(Exception):
    pass


def _swap(op) -> bool:
    n = op.T.ndim
    return isinstance(op, P.Permute) and op.axes == tuple(range(n - 2)) + (n - 1, n - 2)


def _inside(norm: str):
    """Whether an instruction comes from the definition of ``norm``'s attention (causal or not)."""
    return lambda a: a.path.endswith(f"{norm}_attention")


#: the forward core of softmax attention as the definition builds it: ``softmax(c · q @ swap(k))``, every
#: instruction from ``ops.softmax_attention``
_IN = _inside("softmax")
CORE = Pat(P.Softmax, Pat(P.Scale, Pat(P.BatchMatMul, X("q"), Pat(P.Permute, X("k"), name="kT",
                                                                  when=lambda a: _IN(a) and _swap(a.op)),
                                       name="S", when=_IN), name="scale", when=_IN),
           name="softmax", when=_IN)


class _Core:
    """One attention core of ``prog`` around the instruction ``at`` (raises :class:`_NoMatch`): the forward
    (:meth:`forward` sets ``q, k, v, kT, O`` and the kind's fields), then the reverse derivative where there is
    one (:meth:`backward` sets ``dO, dq, dk, dv``), every intermediate read inside the core only."""
    norm: ClassVar[str] = ""
    eps: float = 0.0

    def __init__(self, prog: Program, at: int, producers: dict, uses: dict):
        self.prog, self.producers, self.uses = prog, producers, uses
        self.inside = _inside(self.norm)
        self.taken: set[int] = {at}
        self.forward(at)
        T = self.T
        if any(prog.types[x] != T for x in (self.q, self.k, self.v)) or not isinstance(T.dtype, Float) \
                or T.shape[-1] > MAX_DH or T.ndim < 3:
            raise _NoMatch
        forward = set(self.taken)
        try:
            self.backward()
            self.backward_at = min(i for i in self.taken if self.dO in prog.instrs[i].args)   # dO defined by then
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
        # the new instructions go where their operands are defined: the forward after the core's first
        # instruction and q, k, v; the backward after the forward and where dO is first read
        self.forward_at = max([at] + [producers.get(x, -1) + 1 for x in (self.q, self.k, self.v)])
        if self.backward_at is not None:
            self.backward_at = max(self.backward_at, self.forward_at)

    @property
    def T(self) -> NdArrayType:
        return self.prog.types[self.q]

    def take(self, i: int, cls, ok=lambda a: True, anywhere: bool = False) -> Apply:
        """Instruction ``i``, of class ``cls``, satisfying ``ok`` and from the definition (or ``anywhere``: the
        reverse derivative's sums of fanned-out gradients carry no path), as part of the core."""
        a = self.prog.instrs[i]
        if not isinstance(a.op, cls) or not ok(a) or not (anywhere or self.inside(a)):
            raise _NoMatch
        self.taken.add(i)
        return a

    def use(self, v: int, cls, ok=lambda a: True, anywhere: bool = False) -> Apply:
        """The one reader of ``v`` of class ``cls`` that satisfies ``ok``."""
        found = [i for i in set(self.uses.get(v, [])) if isinstance(self.prog.instrs[i].op, cls)
                 and ok(self.prog.instrs[i])]
        if len(found) != 1:
            raise _NoMatch
        return self.take(found[0], cls, anywhere=anywhere)

    def made(self, v: int, cls, ok=lambda a: True) -> Apply:
        """The instruction that produces ``v``, of class ``cls``."""
        if v not in self.producers:
            raise _NoMatch
        return self.take(self.producers[v], cls, ok)

    def masked(self, v: int) -> int:
        """``v`` through the causal mask the definition applies to it (as it is, for full attention)."""
        return self.use(v, P.CausalMask).results[0] if self.causal else v

    def unmasked(self, v: int) -> int:
        """What the causal mask that makes ``v`` reads (``v``, for full attention)."""
        return self.made(v, P.CausalMask).args[0] if self.causal else v


class _Softmax(_Core):
    """``softmax(c·q kᵀ) v`` and its reverse derivative."""
    norm = "softmax"

    def forward(self, at: int) -> None:
        prog = self.prog
        graph = Graph({v: prog.instrs[i] for v, i in self.producers.items()}, {})
        b = match(CORE, prog.instrs[at], graph)
        if b is None:
            raise _NoMatch
        sm, scale, S = b["softmax"], b["scale"], b["S"]
        self.q, self.k, self.kT = b["q"], b["k"], b["kT"].results[0]
        self.taken |= {self.producers[x.results[0]] for x in (scale, S, b["kT"])}
        self.P = sm.results[0]
        self.c, self.causal = scale.op.c, sm.op.causal
        fwd = self.use(self.P, P.BatchMatMul, lambda a: a.args[0] == self.P)
        self.v, self.O = fwd.args[1], fwd.results[0]

    def backward(self) -> None:
        P_, q, v, kT = self.P, self.q, self.v, self.kT
        T = self.T
        PT = self.use(P_, P.Permute, lambda a: _swap(a.op)).results[0]
        dv_mm = self.use(PT, P.BatchMatMul, lambda a: a.args[0] == PT)
        dO, self.dv = dv_mm.args[1], dv_mm.results[0]
        vT = self.use(v, P.Permute, lambda a: _swap(a.op)).results[0]
        dP = self.use(vT, P.BatchMatMul, lambda a: a.args == (dO, vT)).results[0]
        m1 = self.use(dP, P.Mul, lambda a: set(a.args) == {dP, P_}).results[0]
        r = self.use(m1, P.SumTo).results[0]
        if self.prog.types[r].shape != T.shape[:-2] + (T.shape[-2], 1):
            raise _NoMatch
        b = self.use(r, P.Broadcast).results[0]
        n = self.use(b, P.Neg).results[0]
        a = self.use(n, P.Add, lambda x: set(x.args) == {dP, n}).results[0]
        m2 = self.use(a, P.Mul, lambda x: set(x.args) == {P_, a}).results[0]
        ds = self.use(m2, P.Scale, lambda x: x.op.c == self.c).results[0]
        self._products(ds, q, kT)
        self.dO = dO

    def _products(self, ds: int, q: int, kT: int) -> None:
        """``dq = dS k`` and ``dk = (qᵀ dS)ᵀ``, from the scores' gradient ``ds``."""
        kTT = self.use(kT, P.Permute, lambda x: _swap(x.op)).results[0]
        self.dq = self.use(ds, P.BatchMatMul, lambda x: x.args == (ds, kTT)).results[0]
        qT = self.use(q, P.Permute, lambda x: _swap(x.op)).results[0]
        dkT = self.use(ds, P.BatchMatMul, lambda x: x.args == (qT, ds)).results[0]
        self.dk = self.use(dkT, P.Permute, lambda x: _swap(x.op)).results[0]


class _Spherical(_Softmax):
    """``(r·s) v`` with ``s = c·q kᵀ`` (masked entries 0) and ``r = 1/√(Σ s² + ε)``, and its reverse
    derivative, found from the square root's instruction ``at``. ::

        q ─┐                         ┌─ s∘s ─ Σ ─ + ε ─ rsqrt ─ r ─┐
           ├─ q kᵀ ─ mask ─ ·c ─ s ──┤                              ├─ s∘r ─ mask ─ A ─ A v ─ O
        k ─┘                         └──────────────────────────────┘
    """
    norm = "spherical"

    def forward(self, at: int) -> None:
        shape = self.prog.types
        add = self.made(self.prog.instrs[at].args[0], P.Add)
        self.r = self.prog.instrs[at].results[0]
        consts = [x for x in add.args if x in self.producers
                  and isinstance(self.prog.instrs[self.producers[x]].op, P.Constant)]
        if len(consts) != 1 or len(add.args) != 2:
            raise _NoMatch
        eps = self.prog.instrs[self.producers[consts[0]]].op
        if not getattr(eps, "epsilon", False) or np.ndim(eps.value) != 0:
            raise _NoMatch
        self.eps = float(eps.value)
        (row,) = [x for x in add.args if x != consts[0]]
        summed = self.made(self.made(row, P.Reshape).args[0], P.SumTo)
        sq = self.made(summed.args[0], P.Mul)
        if sq.args[0] != sq.args[1]:
            raise _NoMatch
        s = self.s = sq.args[0]
        scale = self.made(s, P.Scale)
        self.c = scale.op.c
        made = self.producers.get(scale.args[0])
        self.causal = made is not None and isinstance(self.prog.instrs[made].op, P.CausalMask)
        qk = self.made(self.unmasked(scale.args[0]), P.BatchMatMul)
        self.q, self.kT = qk.args
        self.k = self.made(self.kT, P.Permute, lambda a: _swap(a.op)).args[0]
        if shape[self.r].shape != self.T.shape[:-1] or not self.per_row(summed.results[0]):
            raise _NoMatch
        rb = self.rb = self.along_rows(self.use(self.r, P.Reshape).results[0])
        sr = self.use(rb, P.Mul, lambda a: set(a.args) == {s, rb}).results[0]
        self.A = self.masked(sr)
        fwd = self.use(self.A, P.BatchMatMul, lambda a: a.args[0] == self.A)
        self.v, self.O = fwd.args[1], fwd.results[0]

    def per_row(self, v: int) -> bool:
        """``v`` holds a value per query row, ``[..., S, 1]`` (a sum over the keys, not over the queries)."""
        return self.prog.types[v].shape == self.T.shape[:-1] + (1,)

    def along_rows(self, v: int) -> int:
        """The broadcast of the per-row ``v`` over each row's scores (raises :class:`_NoMatch` otherwise)."""
        if not self.per_row(v):
            raise _NoMatch
        b = self.use(v, P.Broadcast).results[0]
        if self.prog.types[b] != self.prog.types[self.s]:
            raise _NoMatch
        return b

    def backward(self) -> None:
        A, s, r, rb = self.A, self.s, self.r, self.rb
        AT = self.use(A, P.Permute, lambda a: _swap(a.op)).results[0]
        dv_mm = self.use(AT, P.BatchMatMul, lambda a: a.args[0] == AT)
        dO, self.dv = dv_mm.args[1], dv_mm.results[0]
        vT = self.use(self.v, P.Permute, lambda a: _swap(a.op)).results[0]
        dA = self.masked(self.use(vT, P.BatchMatMul, lambda a: a.args == (dO, vT)).results[0])
        direct = self.use(dA, P.Mul, lambda a: set(a.args) == {dA, rb}).results[0]        # r·dA
        total = self.use(self.use(dA, P.Mul, lambda a: set(a.args) == {dA, s}).results[0], P.SumTo).results[0]
        if not self.per_row(total):
            raise _NoMatch
        x = self.use(self.use(total, P.Reshape).results[0], P.Scale, lambda a: a.op.c == -0.5).results[0]
        for _ in range(3):                                                 # −½·Σ(dA∘s)·r³
            x = self.use(x, P.Mul, lambda a, x=x: set(a.args) == {x, r}).results[0]
        x = self.along_rows(self.use(x, P.Reshape).results[0])
        x = self.use(x, P.Mul, lambda a, x=x: set(a.args) == {x, s}).results[0]
        twice = self.use(x, P.Add, lambda a: a.args == (x, x), anywhere=True).results[0]   # s∘s fans s out
        g = self.use(twice, P.Add, lambda a: set(a.args) == {twice, direct}, anywhere=True).results[0]
        ds = self.masked(self.use(g, P.Scale, lambda a: a.op.c == self.c).results[0])
        self._products(ds, self.q, self.kT)
        self.dO = dO


#: the cores by the instruction each is found from
CORES = {P.Softmax: _Softmax, P.Rsqrt: _Spherical}


#: the tensor-core products of each precision (:attr:`Attention.mma`); ``"fp32"`` has none (the CUDA cores), and
#: ``"3xtf32"`` asks for float32 products as three TF32 ones, as PyTorch's float32 attention (CUTLASS's
#: ``OpMultiplyAddFastF32``; ``runtime.build(..., attention_3xtf32=True)``)
MMA = {"tf32": "tf32", "bf16": "bf16", "3xtf32": "3xtf32"}


def tensor_cores(T: NdArrayType, precision: str | None) -> str:
    """The :attr:`Attention.mma` of a core over ``T`` under ``precision`` (:data:`MMA`) where its products go to
    the tensor cores (float32, ``S`` and ``dh`` multiples of 16: whole tiles), else ``""``."""
    *_, S, dh = T.shape
    fits = T.dtype == Float(32) and S % 16 == 0 and dh % 16 == 0
    return MMA.get(precision, "") if fits else ""


def quad(T: NdArrayType) -> bool:
    """Whether CUDA-core kernels over ``T`` take a quad of lanes a row (:mod:`.attention_quad`): float32, ``dh`` a
    multiple of 16 (a lane's 16-byte groups), ``S`` of 8 (whole warps of rows); else a thread a row."""
    *_, S, dh = T.shape
    return T.dtype == Float(32) and dh % 16 == 0 and S % 8 == 0


def kv_together(T: NdArrayType, mma: str) -> bool:
    """Whether ``dk`` and ``dv`` come from one kernel (:class:`AttentionGradKV`): on the tensor cores under
    ``"tf32"`` and ``"bf16"`` (3xTF32's ``dk`` alone fills the registers), and a quad a row on the CUDA cores (a
    thread would hold four rows)."""
    return mma in ("tf32", "bf16") or (not mma and quad(T))


def fuse(prog: Program, precision: str | None = "fp32", together: bool = True) -> Program:
    """``prog`` with every softmax or spherical attention core that qualifies replaced by the streaming
    kernels' instructions (the same program when none does); their products go to the tensor cores where the
    shape allows, as ``precision`` says (:func:`tensor_cores`; ``None``: a device without TF32 ``mma``).
    ``dk`` and ``dv`` come from one kernel where :func:`kv_together` says so; ``together=False``: from a kernel
    each even there (the choice that only a device's timing settles; ``bench/gpu_attention.py`` times both)."""
    producers, uses = prog.producers(), prog.uses()
    matches: list[_Core] = []
    for i, a in enumerate(prog.instrs):
        core = CORES.get(type(a.op))
        if core is not None and _inside(core.norm)(a):
            try:
                matches.append(core(prog, i, producers, uses))
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
        op = dict(T=m.T, causal=m.causal, c=m.c, norm=m.norm, eps=m.eps, mma=tensor_cores(m.T, precision))
        at.setdefault(m.forward_at, []).extend(
            [Apply(AttentionForward(**op, order=o_ax), (m.q, m.k, m.v), o_res, path)] + o_view)
        if m.backward_at is None:
            continue
        q_ax, q_res, q_view = written(m.dq, D)
        v_ax, v_res, v_view = written(m.dv)
        k_ax, k_res, k_view = written(m.dk)
        grad_q = [Apply(AttentionGradQ(**op, order=q_ax), (m.q, m.k, m.v, m.O, L, m.dO), q_res, path)] + q_view
        if together and kv_together(m.T, op["mma"]):
            grad_kv = [Apply(AttentionGradKV(**op, order=k_ax + v_ax), (m.q, m.k, m.v, L, m.dO, D),
                             k_res + v_res, path)] + k_view + v_view
        else:
            grad_kv = ([Apply(AttentionGradV(**op, order=v_ax), (m.q, m.k, L, m.dO), v_res, path)] + v_view +
                       [Apply(AttentionGradK(**op, order=k_ax), (m.q, m.k, m.v, L, m.dO, D), k_res, path)] + k_view)
        at.setdefault(m.backward_at, []).extend(grad_q + grad_kv)
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
