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
| Add, Neg, SumTo | ``w + 2`` (one linear constraint + range check) |
| Mul | ``f + w + 2`` (the product is folded into the rescale) |
| Scale | ``f + w + 2`` (the constant folds into the linear combination) |
| MatMul | ``(n − 1) + f + w + 2``: one per extra multiply-accumulate, one rescale |
| Constant | 1 per distinct value in the whole circuit |
| Heaviside | ``2w + 4`` |
| Sigmoid / Tanh | about ``7w + 3f + 20`` (PLAN: sign, |x|, 3 comparisons, 3 scaled pieces, selects) |
| Softmax | about ``w + 4f + 150`` per element, plus 1 per row (max with a one-hot selector, exp, variable shift, division) |
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.fixedpoint import EXP2_C1, FIXED_RULES, SIGMOID_PIECES, FixedPointOverflow, const, constant_raw
from circuitgrad.types import Fixed

from . import gadgets as G
from .gadgets import ONE
from .r1cs import Builder

__all__ = ["RULES", "UNSUPPORTED", "Lowering", "required_bits"]


class Lowering:
    """State of one lowering: the builder, the dtype and the constant wires."""

    def __init__(self, b: Builder, dt: Fixed):
        self.b, self.dt = b, dt
        self.constants: dict[int, int] = {}

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

    def output(self, op: P.Primitive, ins: tuple, index: int = 0) -> np.ndarray:
        """Output wires of ``op`` whose witness is the interpreter's result (range-checked)."""
        shape = op.target[index].shape
        out = self.b.alloc(shape)
        rule = FIXED_RULES[type(op)]
        dt, ctx = self.dt, self.b.context

        def fill(W):
            y = rule(op, *(W[x] for x in ins))[index]
            if np.size(y) and (int(np.min(y)) < dt.lo or int(np.max(y)) > dt.hi):
                raise FixedPointOverflow(f"{ctx} overflowed {dt}: result range [{int(np.min(y)) / dt.one:.6g}, "
                                         f"{int(np.max(y)) / dt.one:.6g}] exceeds [{dt.lo / dt.one:.6g}, "
                                         f"{dt.hi / dt.one:.6g}]")
            return np.asarray(y).astype(np.int64).reshape(-1)
        self.b.fill(out, fill)
        return out


def _flat(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1)


# ------------------------------------------------------------ linear ops
def _linear_rule(terms_of: Callable) -> Callable:
    def rule(L: Lowering, op, *ins):
        out = L.output(op, ins)
        terms = terms_of(op, *(_flat(np.broadcast_to(x, op.target[0].shape)) for x in ins))
        o = _flat(out)
        L.b.constrain(terms, [(ONE, 1)], [(o, 1)], "linear")
        G.range_check(L.b, o, L.dt, "linear.range")
        return (out,)
    return rule


def _sum_to(L: Lowering, op: P.SumTo, x):
    out = L.output(op, (x,))
    lead, kept = op.axes()
    summed = lead + kept
    others = tuple(i for i in range(x.ndim) if i not in summed)
    k = int(np.prod([x.shape[i] for i in summed], dtype=np.int64))
    xt = np.transpose(x, others + summed).reshape(-1, k)
    o = _flat(out)
    L.b.constrain([(xt[:, j], 1) for j in range(k)], [(ONE, 1)], [(o, 1)], "linear")
    G.range_check(L.b, o, L.dt, "linear.range")
    return (out,)


def _constant(L: Lowering, op: P.Constant):
    w = L.constant(constant_raw(op, L.dt))
    return (np.full(op.T.shape, w, dtype=np.int64),)


# -------------------------------------------------------- multiplicative
def _mul(L: Lowering, op: P.Mul, a, b):
    q = L.output(op, (a, b))
    fa, fb = _flat(a), _flat(b)
    G.rescale(L.b, [(fa, 1)], [(fb, 1)], _flat(q), L.dt, lambda W: W[fa] * W[fb], "mul")
    return (q,)


def _scale(L: Lowering, op: P.Scale, a):
    q = L.output(op, (a,))
    c = const(op.c, L.dt, "Scale constant")
    fa = _flat(a)
    G.rescale(L.b, [(fa, c)], [(ONE, 1)], _flat(q), L.dt, lambda W: W[fa] * c, "scale")
    return (q,)


def _matmul(L: Lowering, op: P.MatMul, a, b):
    q = L.output(op, (a, b))
    m, n = a.shape
    p = b.shape[1]
    A = np.broadcast_to(a[:, None, :], (m, p, n)).reshape(-1, n)   # a[i, k] for output (i, j)
    B = np.broadcast_to(b.T[None, :, :], (m, p, n)).reshape(-1, n)  # b[k, j]
    extra = [(G.product(L.b, [(A[:, k], 1)], [(B[:, k], 1)], "matmul.mac"), 1) for k in range(1, n)]
    G.rescale(L.b, [(A[:, 0], 1)], [(B[:, 0], 1)], _flat(q), L.dt,
              lambda W: (W[a] @ W[b]).reshape(-1), "matmul.rescale", minus=extra)
    return (q,)


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


# -------------------------------------------------------------- softmax
def _softmax(L: Lowering, op: P.Softmax, x):
    if op.causal:
        raise NotImplementedError("zk.compile: causal softmax (attention) reaches the ZK backend in issue 13")
    b, dt, f, w = L.b, L.dt, L.dt.frac, L.dt.width
    out = L.output(op, (x,))
    K = x.shape[-1]
    X = x.reshape(-1, K)
    R = X.shape[0]
    # row maximum: m ≥ x_k for every k, and m = x_k where the one-hot selector s_k = 1
    m = b.alloc(R)
    b.fill(m, lambda W: W[X].max(axis=1))
    mk = np.repeat(m, K)
    xf = _flat(X)
    G.decompose(b, [(mk, 1), (xf, -1)], 0, w + 1, "softmax.max", "row maximum")
    sel = b.alloc((R, K))
    b.fill(sel, lambda W: np.eye(K, dtype=np.int64)[W[X].argmax(axis=1)].reshape(-1))
    sf = _flat(sel)
    b.constrain([(sf, 1)], [(sf, 1), (ONE, -1)], [], "softmax.max.select")
    b.constrain([(sel[:, k], 1) for k in range(K)], [(ONE, 1)], [(ONE, 1)], "softmax.max.select")
    b.constrain([(sf, 1)], [(mk, 1), (xf, -1)], [], "softmax.max.select")
    # t = rescale(z·log2 e),  z = x − m ≤ 0
    Cl = const(math.log2(math.e), dt)
    t = b.alloc(R * K)
    half = 1 << (f - 1)
    b.fill(t, lambda W: ((W[xf] - W[mk]) * Cl + half) >> f)
    G.rescale(b, [(xf, Cl), (mk, -Cl)], [(ONE, 1)], t, dt, lambda W: (W[xf] - W[mk]) * Cl, "softmax.log2e",
              qbits=w + 3)
    # t = 2^f·k + r,  r ∈ [0, 2^f)
    kk = b.alloc(R * K)
    b.fill(kk, lambda W: W[t] >> f)
    r = G.decompose(b, [(t, 1), (kk, -(1 << f))], 0, f, "softmax.frac")
    r_terms = [(r[:, i], 1 << i) for i in range(f)]
    # p = one + rescale(r·(c1 + rescale(c2·r)))
    c1, c2 = const(EXP2_C1, dt), const(1.0 - EXP2_C1, dt)
    rv = lambda W: W[t] - (W[kk] << f)  # noqa: E731
    u = b.alloc(R * K)
    b.fill(u, lambda W: (rv(W) * c2 + half) >> f)
    G.rescale(b, [(wi, c * c2) for wi, c in r_terms], [(ONE, 1)], u, dt, lambda W: rv(W) * c2, "softmax.exp2")
    v = b.alloc(R * K)
    b.fill(v, lambda W: (rv(W) * (c1 + W[u]) + half) >> f)
    G.rescale(b, r_terms, [(u, 1), (ONE, c1)], v, dt, lambda W: rv(W) * (c1 + W[u]), "softmax.exp2")
    # shift n = min(−k, C), pow = 2^n. The interpreter clamps at 62, but p < 2^(f+2), so every shift of
    # at least f + 2 gives 0: clamping at C = f + 2 is bit-exact and keeps 2^n far below the field size.
    C = min(62, f + 2)
    nb = C.bit_length()
    kb = w - f + 4
    g = G.at_least(b, [(kk, -1)], C, kb, "softmax.clamp")
    gk = G.product(b, [(g, 1)], [(ONE, C), (kk, 1)], "softmax.clamp")
    nbits = G.decompose(b, [(kk, -1), (gk, 1)], 0, nb, "softmax.shift")
    powv = [(ONE, 1), (nbits[:, 0], 1)]
    for i in range(1, nb):
        powv = [(G.product(b, powv, [(ONE, 1), (nbits[:, i], (1 << (1 << i)) - 1)], "softmax.pow"), 1)]
    (pw, _), = powv
    # e = floor(p / pow):  e·pow = p − rem,  0 ≤ rem < pow
    e = b.alloc(R * K)
    b.fill(e, lambda W: (dt.one + W[v]) >> np.minimum(-W[kk], C))
    rem = b.alloc(R * K)
    b.fill(rem, lambda W: (dt.one + W[v]) - W[e] * W[pw])
    b.constrain([(e, 1)], [(pw, 1)], [(v, 1), (ONE, dt.one), (rem, -1)], "softmax.shift")
    G.decompose(b, [(rem, 1)], 0, C, "softmax.shift.rem")
    G.decompose(b, [(pw, 1), (rem, -1)], -1, C, "softmax.shift.rem")
    G.decompose(b, [(e, 1)], 0, f + 2, "softmax.exp.range")
    # s = floor(e·2^f / S),  S = Σ_row e
    E = e.reshape(R, K)
    S_terms = [(np.repeat(E[:, k], K), 1) for k in range(K)]
    s = _flat(out)
    rem2 = b.alloc(R * K)
    b.fill(rem2, lambda W: (W[e] << f) - W[s] * np.repeat(W[E].sum(axis=1), K))
    b.constrain([(s, 1)], S_terms, [(e, 1 << f), (rem2, -1)], "softmax.divide")
    db = f + 3 + max(1, math.ceil(math.log2(K)))
    G.decompose(b, [(rem2, 1)], 0, db, "softmax.divide.rem")
    G.decompose(b, S_terms + [(rem2, -1)], -1, db, "softmax.divide.rem")
    G.range_check(b, s, dt, "softmax.range")
    return (out,)


def required_bits(prog, dt: Fixed) -> int:
    """Bits a prime needs (``p > 2^bits``) so that no constraint of ``prog``'s circuit can wrap around.

    Every constraint relates integers bounded by the range checks. A congruence
    ``x ≡ y (mod p)`` with ``|x| + |y| < p`` forces ``x = y``. The largest such sums are:
    a matmul's ``Σₙ aᵢbᵢ`` against ``2^f·q + r`` (``2w + log2 n`` bits); a PLAN piece or a
    softmax rescale (``w + f + 3``); the softmax division ``s·Σe`` (``w + f + 3 + log2 K``);
    its shift ``e·2^n`` (``2f + 4``). Two bits of margin are added.
    """
    w, f = dt.width, dt.frac
    n_max, k_max = 1, 1
    for a in prog.instrs:
        if isinstance(a.op, P.MatMul):
            n_max = max(n_max, prog.types[a.args[0]].shape[-1])
        elif isinstance(a.op, P.SumTo):
            n_max = max(n_max, int(np.prod(a.op.T.shape)) // max(1, int(np.prod(a.op.S.shape))))
        elif isinstance(a.op, P.Softmax):
            k_max = max(k_max, prog.types[a.args[0]].shape[-1])
    lg = lambda v: math.ceil(math.log2(v)) if v > 1 else 0  # noqa: E731
    return max(2 * w + lg(n_max), w + f + 3 + lg(k_max), 2 * f + 4) + 2


#: lowering rule per primitive (LogSumExp appears only in loss values, never in a step)
RULES: dict[type, Callable] = {
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
    P.Softmax: _softmax,
}

#: primitives deliberately without a rule, and why (the conformance test checks this list)
_LATER = ("the transformer and convolution vocabulary (issue 12) reaches the ZK backend in issue 13; until then "
          "compile_model runs it in float and fixed point on the CPU")
UNSUPPORTED: dict[type, str] = {
    P.LogSumExp: "appears only in loss values, never in a training step (its reverse derivative is softmax)",
    **{p: _LATER for p in P.SECOND_VOCABULARY},
}
