"""Lowering: one rule per primitive, from fixed-point SSA instructions to constraints.

A tensor is an ``int64`` array of wire indices with the tensor's shape, so
data movement (``Copy``, ``Transpose``, ``Reshape``, ``Broadcast``) costs no
constraints. Every rule takes the output values from the fixed-point
interpreter's own rule (:data:`circuitgrad.fixedpoint.FIXED_RULES`), which
keeps the witness bit-exact with the specification. The rule then adds the
constraints that pin those values down, along with every auxiliary value
(bits, remainders, quotients, signs).

Costs per output element (``w`` width, ``f`` fractional bits, ``n`` inner dimension):

| primitive | constraints |
|---|---|
| Add, Neg, SumTo | ``w + 1`` (a range check of the combination, which has no wire: its terms go into the rows that read it; none where :mod:`.intervals` proves it in range; a wire and one constraint more where it feeds a matrix product or has more than 8 terms) |
| Mul | ``f + w + 2`` (the product is folded into the rescale) |
| Scale | ``f + w + 2`` (the constant folds into the linear combination) |
| MatMul | ``(n − 1) + f + w + 2``: one per extra multiply-accumulate, one rescale; with ``contractions="argument"``, ``f + w + 2``: the exact product is one wire per output, proved by the contraction argument |
| Constant | 1 per distinct value in the whole circuit |
| Heaviside | ``2w + 4`` |
| Sigmoid / Tanh | about ``7w + 3f + 20`` (PLAN: sign, |x|, 3 comparisons, 3 scaled pieces, selects) |
| BatchMatMul | as MatMul, per leading index |
| Permute, Slice, CausalMask, Pad, Unfold | 0 (wire renaming; masked and padded entries are the constant-0 wire) |
| Fold | as a sum, per pixel (of the column entries that Unfold reads from it) |

A product, scale, sum or multiply-accumulate with the constant-0 wire is folded away (no constraint).
The special functions (Exp, Softmax, Div, Sqrt, Rsqrt, Log, ArgMaxMask, OneHot) are in :mod:`.special`.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.fixedpoint import FIXED_RULES, SIGMOID_PIECES, FixedPointOverflow, const, constant_raw
from circuitgrad.interpret import causal_keep, slices, unfold
from circuitgrad.types import Fixed

from . import gadgets as G
from .gadgets import ONE
from .r1cs import Builder
from .special import SPECIAL_RULES

__all__ = ["ZK_RULES", "CORE_RULES", "UNSUPPORTED", "Lowering", "required_bits", "widest_contraction"]


class Lowering:
    """State of one lowering: the builder, the dtype and the constant wires."""

    def __init__(self, b: Builder, dt: Fixed):
        self.b, self.dt = b, dt
        self.constants: dict[int, int] = {}
        #: the instruction being lowered has a result that interval analysis proves in range (:mod:`.intervals`):
        #: a linear rule then adds no range check
        self.proven = False
        #: the result reaches a matrix product's operand: it gets a wire and a range check of its own (a
        #: contraction needs wires, and ``required_bits`` bounds a product's sum with no margin)
        self.wired = False

    def constant(self, raw: int) -> int:
        """A wire equal to the raw constant ``raw`` (one constraint per distinct value)."""
        w = self.constants.get(raw)
        if w is None:
            w = int(self.b.alloc(1, f"const[{raw}]")[0])
            ctx, self.b.context = self.b.context, "constants"
            self.b.constrain([(w, 1), (ONE, -raw)], [(ONE, 1)], [], "constant")
            self.b.context = ctx
            self.b.fill(np.array([w]), lambda W, v=raw: np.array([v], dtype=np.int64))
            self.constants[raw] = w
        return w

    @property
    def zero(self) -> int:
        """The constant-0 wire (masked, padded and out-of-image entries)."""
        return self.constant(0)

    def output(self, op: P.Primitive, ins: tuple, index: int = 0, where: np.ndarray | None = None,
               wires: np.ndarray | None = None) -> np.ndarray:
        """Output wires of ``op`` whose witness is the interpreter's result (range-checked).

        ``where`` (flat indices): only those entries get wires; the others are the constant-0 wire,
        which the caller's rule must justify (a causal mask's masked entries). ``wires``: the indices to use
        instead of fresh wires (combinations, :meth:`.r1cs.Builder.combination`), one per entry of ``where``.
        """
        shape = op.target[index].shape
        n = int(np.prod(shape, dtype=np.int64)) if where is None else len(where)
        new = self.b.alloc(n) if wires is None else np.asarray(wires, dtype=np.int64)
        if where is None:
            out = new.reshape(shape)
            sel = slice(None)
        else:
            out = np.full(shape, self.zero, dtype=np.int64)
            out.reshape(-1)[where] = new
            sel = where
        rule = FIXED_RULES[type(op)]
        dt, ctx = self.dt, self.b.context

        def fill(W):
            y = np.asarray(rule(op, *(W[x] for x in ins))[index]).reshape(-1)[sel]
            if np.size(y) and (int(np.min(y)) < dt.lo or int(np.max(y)) > dt.hi):
                raise FixedPointOverflow(f"{ctx} overflowed {dt}: result range [{int(np.min(y)) / dt.one:.6g}, "
                                         f"{int(np.max(y)) / dt.one:.6g}] exceeds [{dt.lo / dt.one:.6g}, "
                                         f"{dt.hi / dt.one:.6g}]")
            return np.asarray(y).astype(np.int64).reshape(-1)
        self.b.fill(out if where is None else out.reshape(-1)[where], fill)
        return out


def _flat(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1)


# ------------------------------------------------------------ linear ops
def _linear_rule(terms_of: Callable) -> Callable:
    """``o = Σ cᵢ·xᵢ``: one constraint and a range check per element, except where the operands are the
    constant-0 wire (masked or padded entries): there the result is the 0 wire, or the one other
    operand when its coefficient is 1 (``x + 0 = x``), at no cost."""
    def rule(L: Lowering, op, *ins):
        shape = op.target[0].shape
        terms = terms_of(op, *(_flat(np.broadcast_to(x, shape)) for x in ins))
        z = L.constants.get(0)
        if z is None:
            live, alias = None, None
        else:
            nonzero = np.stack([w != z for w, _ in terms])
            count = nonzero.sum(axis=0)
            ones = np.array([np.all(np.asarray(c) == 1) for _, c in terms])
            alias = (count == 1) & ones[nonzero.argmax(axis=0)]
            live = np.flatnonzero((count > 1) | ((count == 1) & ~alias))
        out = _sum_out(L, op, ins, terms if live is None else [(w[live], c) for w, c in terms], live)
        if live is not None:
            o = _flat(out)
            for w, _ in terms:                       # x + 0 = x: the output is the operand's wire
                pick = alias & (w != z)
                o[pick] = w[pick]
        return (out,)
    return rule


def _sum_out(L: Lowering, op, ins: tuple, terms: list, live: np.ndarray | None = None,
             kind: str = "linear") -> np.ndarray:
    """The output of ``o = Σ terms`` (at the entries ``live``, the others the 0 wire): a combination with no wire
    and no constraint where it has at most :data:`.r1cs.COMBINATION_TERMS` terms, else a wire and one
    constraint; then a range check, unless interval analysis proves the result in range (``L.proven``)."""
    m = max((np.size(w) for w, _ in terms), default=0)
    if m == 0:
        return L.output(op, ins, where=live)
    v = None if L.wired else L.b.combination(terms)
    out = L.output(op, ins, where=live, wires=v)
    o = _flat(out) if live is None else _flat(out)[live]
    if v is None:
        L.b.constrain(terms, [(ONE, 1)], [(o, 1)], kind)
    if L.wired or not L.proven:
        G.range_check(L.b, o, L.dt, f"{kind}.range")
    return out


def _sum_to(L: Lowering, op: P.SumTo, x):
    lead, kept = op.axes()
    summed = lead + kept
    others = tuple(i for i in range(x.ndim) if i not in summed)
    k = int(np.prod([x.shape[i] for i in summed], dtype=np.int64))
    xt = np.transpose(x, others + summed).reshape(-1, k)
    return (_sum_out(L, op, (x,), [(xt[:, j], 1) for j in range(k)]),)


def _constant(L: Lowering, op: P.Constant):
    w = L.constant(constant_raw(op, L.dt))
    return (np.full(op.T.shape, w, dtype=np.int64),)


# -------------------------------------------------------- multiplicative
def _dead(L: Lowering, *wires: np.ndarray) -> np.ndarray | None:
    """Where some operand is the constant-0 wire (None: nowhere)."""
    z = L.constants.get(0)
    if z is None:
        return None
    dead = np.zeros(wires[0].shape, dtype=bool)
    for w in wires:
        dead |= w == z
    return dead if dead.any() else None


def _live(L: Lowering, *flats: np.ndarray) -> np.ndarray | None:
    """Indices of the elements where no operand is the constant-0 wire (None: all of them)."""
    dead = _dead(L, *flats)
    return None if dead is None else np.flatnonzero(~dead)


def _mul(L: Lowering, op: P.Mul, a, b):
    """A product with a 0-wire factor is the 0 wire (no constraint): masked attention weights."""
    shape = op.target[0].shape
    fa, fb = (_flat(np.broadcast_to(x, shape)) for x in (a, b))
    live = _live(L, fa, fb)
    q = L.output(op, (a, b), where=live)
    fq = _flat(q)
    if live is not None:
        fa, fb, fq = fa[live], fb[live], fq[live]
    if not fq.size:
        return (q,)
    G.rescale(L.b, [(fa, 1)], [(fb, 1)], fq, L.dt, lambda W: W[fa] * W[fb], "mul")
    return (q,)


def _scale(L: Lowering, op: P.Scale, a):
    c = const(op.c, L.dt, "Scale constant")
    fa = _flat(a)
    live = _live(L, fa)
    q = L.output(op, (a,), where=live)
    fq = _flat(q)
    if live is not None:
        fa, fq = fa[live], fq[live]
    if not fq.size:
        return (q,)
    G.rescale(L.b, [(fa, c)], [(ONE, 1)], fq, L.dt, lambda W: W[fa] * c, "scale")
    return (q,)


def _matmul(L: Lowering, op: P.MatMul | P.BatchMatMul, a, b):
    if L.b.contractions == "argument":
        return _contraction(L, op, a, b)
    q = L.output(op, (a, b))
    *lead, m, n = a.shape
    p = b.shape[-1]
    full = (*lead, m, p, n)
    A = np.broadcast_to(a[..., :, None, :], full).reshape(-1, n)                 # a[..., i, k] for (i, j)
    B = np.broadcast_to(np.swapaxes(b, -1, -2)[..., None, :, :], full).reshape(-1, n)   # b[..., k, j]
    dead = _dead(L, A, B)                         # products with a 0-wire factor are left out
    nz = np.ones(A.shape, dtype=bool) if dead is None else ~dead
    extra = []
    for k in range(1, n):
        rows = nz[:, k]
        if rows.all():
            extra.append((G.product(L.b, [(A[:, k], 1)], [(B[:, k], 1)], "matmul.mac"), 1))
        elif rows.any():
            wk = np.zeros(len(rows), dtype=np.int64)
            wk[rows] = G.product(L.b, [(A[rows, k], 1)], [(B[rows, k], 1)], "matmul.mac")
            extra.append((wk, rows.astype(np.int64)))
    G.rescale(L.b, [(A[:, 0], 1)], [(B[:, 0], 1)], _flat(q), L.dt,
              lambda W: (W[a] @ W[b]).reshape(-1), "matmul.rescale", minus=extra)
    return (q,)


def _contraction(L: Lowering, op: P.MatMul | P.BatchMatMul, a, b):
    """``c = a·b`` exactly, by the native prover's contraction argument (no constraint per multiply-accumulate),
    then one rescale per output: ``c = 2^f·q − 2^(f−1) + r``."""
    q = L.output(op, (a, b))        # its sums cannot wrap: zk.compile checked required_bits for the longest
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, (*lead, *a.shape[-2:]))
    b = np.broadcast_to(b, (*lead, *b.shape[-2:]))
    c = L.b.alloc(q.shape)
    L.b.fill(c, lambda W: np.matmul(W[a], W[b]).reshape(-1))
    L.b.contract(a, b, c, "matmul.contraction")
    G.rescale(L.b, [(_flat(c), 1)], [(ONE, 1)], _flat(q), L.dt, lambda W: W[_flat(c)], "matmul.rescale")
    return (q,)


# --------------------------------------------------------------- layout
def _masked(L: Lowering, op: P.CausalMask, x):
    """Masked entries become the constant-0 wire: no constraint."""
    return (np.where(causal_keep(x.shape), x, L.zero),)


def _slice(L: Lowering, op: P.Slice, x):
    return (x[slices(op.index)],)


def _pad(L: Lowering, op: P.Pad, x):
    out = np.full(op.T.shape, L.zero, dtype=np.int64)
    out[slices(op.index)] = x
    return (out,)


def _unfold(L: Lowering, op: P.Unfold, x):
    """The interpreter's own gather, on wire indices shifted so that padding reads the 0 wire."""
    z = L.zero
    return (unfold(x - z, op.kernel, op.stride, op.padding) + z,)


def _fold(L: Lowering, op: P.Fold, cols):
    """Each pixel is the sum of the column entries that :class:`Unfold` would read from it (as any sum,
    :func:`_sum_out`)."""
    npix = int(np.prod(op.T.shape))
    src = unfold(np.arange(1, npix + 1, dtype=np.int64).reshape(op.T.shape), op.kernel, op.stride,
                 op.padding).reshape(-1)                 # pixel + 1 read by each column entry (0: padding)
    c = _flat(cols)
    hit = np.flatnonzero(src)
    pix = src[hit] - 1
    order = np.argsort(pix, kind="stable")
    pix, hit = pix[order], hit[order]
    count = np.bincount(pix, minlength=npix)
    rank = np.arange(len(pix)) - np.repeat(np.cumsum(count) - count, count)
    table = np.zeros((npix, max(1, int(count.max(initial=0)))), dtype=np.int64)
    coef = np.zeros_like(table)
    table[pix, rank], coef[pix, rank] = c[hit], 1
    return (_sum_out(L, op, (cols,), [(table[:, j], coef[:, j]) for j in range(table.shape[1])], kind="fold"),)


# ---------------------------------------------------------- comparisons
def _heaviside(L: Lowering, op: P.Heaviside, x):
    out = L.output(op, (x,))
    h = G.positive(L.b, _flat(x), L.dt.width, "heaviside.sign")
    o = _flat(out)
    L.b.constrain([(h, L.dt.one)], [(ONE, 1)], [(o, 1)], "heaviside")
    G.range_check(L.b, o, L.dt, "heaviside.range")
    return (out,)


def _plan(L: Lowering, x_terms: list, nbits: int, kind: str) -> list:
    """PLAN sigmoid of ``v = Σ x_terms`` (``|v| < 2^(nbits−1)``), as linear-combination terms."""
    b, dt, f = L.b, L.dt, L.dt.frac
    s = G.at_least(b, x_terms, 0, nbits, f"{kind}.sign")                      # v ≥ 0
    ax = G.product(b, [(s, 2), (ONE, -1)], x_terms, f"{kind}.abs")           # |v|
    (t5, _, _), *pieces = SIGMOID_PIECES
    c5 = G.at_least(b, [(ax, 1)], const(t5, dt), nbits, f"{kind}.compare")
    qs, cs, offs = [], [], []
    for lower, slope, offset in pieces:
        C = const(slope, dt)
        q = b.alloc(np.size(ax))
        b.fill(q, lambda W, C=C: ((W[ax] * C) + (1 << (f - 1))) >> f)
        G.rescale(b, [(ax, C)], [(ONE, 1)], q, dt, lambda W, C=C: W[ax] * C, f"{kind}.piece", qbits=nbits + 1)
        qs.append(q)
        offs.append(const(offset, dt))
        cs.append(G.at_least(b, [(ax, 1)], const(lower, dt), nbits, f"{kind}.compare") if lower else None)
    (q1, q2, q3), (o1, o2, o3), (c2, c1, _) = qs, offs, cs
    d1 = G.product(b, [(c1, 1)], [(q2, 1), (q3, -1), (ONE, o2 - o3)], f"{kind}.select")
    d2 = G.product(b, [(c2, 1)], [(q1, 1), (q2, -1), (ONE, o1 - o2)], f"{kind}.select")
    d3 = G.product(b, [(c5, 1)], [(q1, -1), (ONE, dt.one - o1)], f"{kind}.select")
    y = [(q3, 1), (ONE, o3), (d1, 1), (d2, 1), (d3, 1)]                      # σ(|v|)
    e = G.product(b, [(s, 1)], [(w, 2 * np.asarray(c)) for w, c in y] + [(ONE, -dt.one)], f"{kind}.select")
    out = [(ONE, dt.one)] + [(w, -np.asarray(c)) for w, c in y] + [(e, 1)]   # s ? y : one − y
    return out


def _sigmoid(L: Lowering, op: P.Sigmoid, x):
    out = L.output(op, (x,))
    terms = _plan(L, [(_flat(x), 1)], L.dt.width + 1, "sigmoid")
    o = _flat(out)
    L.b.constrain(terms, [(ONE, 1)], [(o, 1)], "sigmoid")
    G.range_check(L.b, o, L.dt, "sigmoid.range")
    return (out,)


def _tanh(L: Lowering, op: P.Tanh, x):
    out = L.output(op, (x,))
    terms = _plan(L, [(_flat(x), 2)], L.dt.width + 2, "tanh")
    o = _flat(out)
    L.b.constrain([(w, 2 * np.asarray(c)) for w, c in terms] + [(ONE, -L.dt.one)], [(ONE, 1)], [(o, 1)], "tanh")
    G.range_check(L.b, o, L.dt, "tanh.range")
    return (out,)


def required_bits(prog, dt: Fixed) -> int:
    """Bits a prime needs (``p > 2^bits``) so that no constraint of ``prog``'s circuit can wrap around.

    Every constraint relates integers bounded by the range checks. A congruence
    ``x ≡ y (mod p)`` with ``|x| + |y| < p`` forces ``x = y``. The largest such sums are:
    a matmul's ``Σₙ aᵢbᵢ`` against ``2^f·q + r`` (exactly: ``S = n·2^(2w−2) + 2^(w+f−1) + 2^f``, and
    ``p > 2^⌈log2(S + 1)⌉`` exceeds it: about ``2w − 2 + log2 n`` bits, no margin added); a sum of ``n``
    values (``w + log2 n``); a PLAN piece or a
    softmax rescale (``w + f + 3``); the softmax division ``s·Σe`` (``w + f + 3 + log2 K``);
    its shift ``e·2^n`` (``2f + 4``); a division's ``2σr + |c|`` (``2w + 1``); an exp's upward shift
    ``e·2^k`` (``2w − f + 1``); a log's ``L·ln 2`` (``2f + 15``); a one-hot row's ``Σ k·row_k``
    (``f + 2·log2 n``); a fold's sum of ``c`` entries (``w + log2 c``). Two bits of margin are added.
    """
    w, f = dt.width, dt.frac
    lg = lambda v: math.ceil(math.log2(v)) if v > 1 else 0  # noqa: E731
    n_max, k_max, s_max = 1, 1, 1
    need = [2 * f + 4]
    for a in prog.instrs:
        op = a.op
        if isinstance(op, (P.MatMul, P.BatchMatMul)):
            n_max = max(n_max, prog.types[a.args[0]].shape[-1])
        elif isinstance(op, P.SumTo):
            s_max = max(s_max, int(np.prod(op.T.shape)) // max(1, int(np.prod(op.S.shape))))
        elif isinstance(op, P.Softmax):
            k_max = max(k_max, prog.types[a.args[0]].shape[-1])
        elif isinstance(op, (P.Div, P.Rsqrt)):
            need.append(2 * w + 1)
        elif isinstance(op, P.Exp):
            need.append(2 * w - f + 1)
        elif isinstance(op, P.Log):
            need.append(2 * f + 15)
        elif isinstance(op, P.OneHot):
            need.append(f + 2 * lg(op.S.dtype.n))
        elif isinstance(op, P.Fold):
            need.append(w + lg(math.ceil(op.kernel[0] / op.stride[0]) * math.ceil(op.kernel[1] / op.stride[1])))
    # the products, exactly: |Σₙ aᵢbᵢ| ≤ n·2^(2w−2) against |2^f·q − 2^(f−1) + r| < 2^(w+f−1) + 2^f, and p must
    # exceed their sum S (p > 2^⌈log2(S + 1)⌉ > S); the other terms are bounds by bit counts, with two bits of margin
    products = lg(n_max * (1 << (2 * w - 2)) + (1 << (w + f - 1)) + (1 << f) + 1)
    return max(products, max(w + lg(s_max) + 1, w + f + 3 + lg(k_max), *need) + 2)


def widest_contraction(prog) -> str:
    """The instruction whose exact sums are longest (``""`` without products), for error messages."""
    best = max(((prog.types[a.args[0]].shape[-1], i, a.op.name) for i, a in enumerate(prog.instrs)
                if isinstance(a.op, (P.MatMul, P.BatchMatMul))), default=None)
    return "" if best is None else f"{best[2]}#{best[1]} sums {best[0]} products"


#: the lowering rules written here; those of the special functions are in :mod:`.special` (the two are disjoint:
#: ``tests/test_conformance.py``)
CORE_RULES: dict[type, Callable] = {
    P.Copy: lambda L, op, x: (x,) * op.n,
    P.Transpose: lambda L, op, x: (x.T,),
    P.Reshape: lambda L, op, x: (x.reshape(op.shape),),
    P.Broadcast: lambda L, op, x: (np.broadcast_to(x, op.T.shape),),
    P.Constant: _constant,
    P.Add: _linear_rule(lambda op, a, b: [(a, 1), (b, 1)]),
    P.Neg: _linear_rule(lambda op, a: [(a, -1)]),
    P.SumTo: _sum_to,
    P.Mul: _mul,
    P.Scale: _scale,
    P.MatMul: _matmul,
    P.Heaviside: _heaviside,
    P.Sigmoid: _sigmoid,
    P.Tanh: _tanh,
    P.Permute: lambda L, op, x: (np.transpose(x, op.axes),),
    P.BatchMatMul: _matmul,
    P.CausalMask: _masked,
    P.Slice: _slice,
    P.Pad: _pad,
    P.Unfold: _unfold,
    P.Fold: _fold,
}

#: lowering rule per primitive (LogSumExp appears only in loss values, never in a step)
ZK_RULES: dict[type, Callable] = {**CORE_RULES, **SPECIAL_RULES}

#: primitives deliberately without a rule, and why (the conformance test checks this list)
UNSUPPORTED: dict[type, str] = {
    P.LogSumExp: "appears only in loss values, never in a training step (its reverse derivative is softmax)",
}
