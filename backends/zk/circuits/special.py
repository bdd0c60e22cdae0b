"""Lowering of the special functions: exp, softmax, log, square root, division, argmax and one-hot.

Each rule pins down the fixed-point interpreter's exact result
(:mod:`circuitgrad.fixedpoint`) with the non-deterministic values it needs
(quotients, remainders, roots, maxima, shift amounts, selectors), every one
of them constrained. ``w`` is the width, ``f`` the fractional bits, ``K`` the
length of a softmax or argmax row. Constraints per output element:

| primitive | constraints | non-deterministic values pinned |
|---|---|---|
| Div | about ``4w + 2f + 8`` | sign of ``b``, quotient, remainder ``−|b| ≤ 2·sign(b)·r < |b|`` |
| Rsqrt | Sqrt's then Div's | ``Div(1, Sqrt(a))``, exactly the fixed-point definition |
| Sqrt | about ``(w + f)/2 + (w + f) + 3`` | root ``q ≥ 0`` with ``q² ≤ a·2^f < (q + 1)²`` |
| Exp | about ``3w + 6f + 30`` | ``t = z·log2 e``, ``k = ⌊t/2^f⌋``, fraction bits, shifts, ``⌊p/2^−k⌋`` |
| Softmax | about ``w + 4f + 150`` per element, plus 1 per row | row maximum (one-hot selector), exp, division |
| Log | about ``4w + 4f + 30`` | bit length ``n`` (one-hot), ``⌊s·2^f/2^n⌋``, polynomial, ``ln 2`` rescale |
| ArgMaxMask | about ``w + 5`` | the first maximum (one-hot, earlier entries strictly smaller) |
| OneHot | ``n + 2`` per id | the row (``0`` or ``2^f`` entries, one set, at the id) |

A causal softmax computes only the kept entries (``j ≤ i``); its masked
outputs are the constant-0 wire, so they cost nothing.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.fixedpoint import FIXED_RULES, EXP2_C1, LN2_EXTRA_BITS, LOG2_C1, LOG2_E, bit_length, const
from circuitgrad.interpret import causal_keep

from . import gadgets as G
from .gadgets import ONE, lc_value

if TYPE_CHECKING:                                        # pragma: no cover
    from .lower import Lowering

__all__ = ["SPECIAL_RULES"]


def _flat(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1)


def _power_of_two(b, bits: np.ndarray, kind: str) -> np.ndarray:
    """Wires ``2^n`` for ``n = Σ bits[:, i]·2^i``: one product per bit after the first."""
    powv = [(ONE, 1), (bits[:, 0], 1)]
    for i in range(1, bits.shape[1]):
        powv = [(G.product(b, powv, [(ONE, 1), (bits[:, i], (1 << (1 << i)) - 1)], kind), 1)]
    if len(powv) == 2:                                   # one bit: 2^n = 1 + bit, as a wire
        z = b.alloc(bits.shape[0])
        b.constrain(powv, [(ONE, 1)], [(z, 1)], kind)
        b.fill(z, lambda W, t=powv: lc_value(W, t))
        return z
    return powv[0][0]


def exp_unit(L: "Lowering", z_terms: list, n: int, kind: str, nonpositive: bool = False) -> np.ndarray:
    """Wires ``exp_fixed(z)`` (see :func:`circuitgrad.fixedpoint.exp_fixed`) for ``z = Σ z_terms``,
    ``|z| < 2^w`` (``n`` elements). ``nonpositive``: the caller has constrained ``z ≤ 0`` (softmax)."""
    b, dt, f, w = L.b, L.dt, L.dt.frac, L.dt.width
    half = 1 << (f - 1)
    zv = lambda W: lc_value(W, z_terms)  # noqa: E731
    # t = rescale(z·log2 e)
    Cl = const(LOG2_E, dt)
    t = b.alloc(n)
    b.fill(t, lambda W: (zv(W) * Cl + half) >> f)
    G.rescale(b, [(wi, Cl * np.asarray(c)) for wi, c in z_terms], [(ONE, 1)], t, dt, lambda W: zv(W) * Cl,
              f"{kind}.log2e", qbits=w + 3)
    # t = 2^f·k + r,  r ∈ [0, 2^f)
    kk = b.alloc(n)
    b.fill(kk, lambda W: W[t] >> f)
    r_terms = [(t, 1), (kk, -(1 << f))]
    G.fits(b, r_terms, 0, f, f"{kind}.frac")
    # p = one + rescale(r·(c1 + rescale(c2·r)))
    c1, c2 = const(EXP2_C1, dt), const(1.0 - EXP2_C1, dt)
    rv = lambda W: W[t] - (W[kk] << f)  # noqa: E731
    u = b.alloc(n)
    b.fill(u, lambda W: (rv(W) * c2 + half) >> f)
    G.rescale(b, [(wi, c * c2) for wi, c in r_terms], [(ONE, 1)], u, dt, lambda W: rv(W) * c2, f"{kind}.exp2")
    v = b.alloc(n)
    b.fill(v, lambda W: (rv(W) * (c1 + W[u]) + half) >> f)
    G.rescale(b, r_terms, [(u, 1), (ONE, c1)], v, dt, lambda W: rv(W) * (c1 + W[u]), f"{kind}.exp2")
    kb = w - f + 4                                       # |k| < 2^(w + 2 − f)
    if nonpositive:
        down = [(kk, -1)]
        kp = None
    else:                                                # k = kp − kn with kp = [k ≥ 1]·k
        g = G.at_least(b, [(kk, 1)], 1, kb, f"{kind}.sign")
        kp = G.product(b, [(g, 1)], [(kk, 1)], f"{kind}.sign")
        down = [(kp, 1), (kk, -1)]
    # downward shift n = min(kn, C): p < 2^(f+2), so every shift ≥ f + 2 gives 0 (bit-exact clamp)
    C = min(62, f + 2)
    nb = C.bit_length()
    gc = G.at_least(b, down, C, kb, f"{kind}.clamp")
    gk = G.product(b, [(gc, 1)], [(ONE, C)] + [(wi, -np.asarray(c)) for wi, c in down], f"{kind}.clamp")
    nbits = G.decompose(b, down + [(gk, 1)], 0, nb, f"{kind}.shift")
    pw = _power_of_two(b, nbits, f"{kind}.pow")
    # e = floor(p / 2^n):  e·2^n = p − rem,  0 ≤ rem < 2^n
    e = b.alloc(n)
    b.fill(e, lambda W: (dt.one + W[v]) >> np.minimum(lc_value(W, down), C))
    rem = b.alloc(n)
    b.fill(rem, lambda W: (dt.one + W[v]) - W[e] * W[pw])
    b.constrain([(e, 1)], [(pw, 1)], [(v, 1), (ONE, dt.one), (rem, -1)], f"{kind}.shift")
    G.fits(b, [(rem, 1)], 0, C, f"{kind}.shift.rem")
    G.fits(b, [(pw, 1), (rem, -1)], -1, C, f"{kind}.shift.rem")
    G.fits(b, [(e, 1)], 0, f + 2, f"{kind}.exp.range")
    if kp is None:
        return e
    # upward shift by kp < 2^nbp: kp ≥ w − 1 − f already overflows the dtype, so nbp bits suffice
    nbp = max(1, (w - f).bit_length())
    pbits = G.decompose(b, [(kp, 1)], 0, nbp, f"{kind}.up", "upward shift")
    up = _power_of_two(b, pbits, f"{kind}.up.pow")
    return G.product(b, [(e, 1)], [(up, 1)], f"{kind}.up")


def _exp(L: "Lowering", op: P.Exp, x):
    out = L.output(op, (x,))
    e = exp_unit(L, [(_flat(x), 1)], x.size, "exp")
    o = _flat(out)
    L.b.constrain([(e, 1)], [(ONE, 1)], [(o, 1)], "exp")
    G.range_check(L.b, o, L.dt, "exp.range")
    return (out,)


# -------------------------------------------------------------- softmax
def _softmax(L: "Lowering", op: P.Softmax, x):
    b, dt, f, w = L.b, L.dt, L.dt.frac, L.dt.width
    K = x.shape[-1]
    X = x.reshape(-1, K)
    R = X.shape[0]
    keep = np.broadcast_to(causal_keep(x.shape), x.shape).reshape(R, K) if op.causal else np.ones((R, K), bool)
    idx = np.flatnonzero(keep)                           # the entries softmax computes
    row = idx // K
    N = idx.size
    out = L.output(op, (x,), where=idx)
    # row maximum over kept entries: m ≥ x_k, and m = x_k where the one-hot selector s_k = 1
    m = b.alloc(R)
    b.fill(m, lambda W: np.where(keep, W[X], np.iinfo(np.int64).min).max(axis=1))
    mk = m[row]
    xf = X.reshape(-1)[idx]
    G.fits(b, [(mk, 1), (xf, -1)], 0, w + 1, "softmax.max", "row maximum")
    sel = b.alloc(N)
    b.fill(sel, lambda W: (np.arange(K)[None, :] == np.where(keep, W[X], np.iinfo(np.int64).min)
                           .argmax(axis=1)[:, None]).reshape(-1)[idx].astype(np.int64))
    b.constrain([(sel, 1)], [(sel, 1), (ONE, -1)], [], "softmax.max.select")
    selD = np.zeros((R, K), dtype=np.int64)
    selD.reshape(-1)[idx] = sel
    b.constrain([(selD[:, k], keep[:, k]) for k in range(K)], [(ONE, 1)], [(ONE, 1)], "softmax.max.select")
    b.constrain([(sel, 1)], [(mk, 1), (xf, -1)], [], "softmax.max.select")
    e = exp_unit(L, [(xf, 1), (mk, -1)], N, "softmax", nonpositive=True)
    # s = floor(e·2^f / S),  S = Σ_row e
    E = np.zeros((R, K), dtype=np.int64)
    E.reshape(-1)[idx] = e
    S_terms = [(E[row, k], keep[row, k]) for k in range(K)]
    s = _flat(out).reshape(-1)[idx]
    rem2 = b.alloc(N)
    b.fill(rem2, lambda W: (W[e] << f) - W[s] * lc_value(W, S_terms))
    b.constrain([(s, 1)], S_terms, [(e, 1 << f), (rem2, -1)], "softmax.divide")
    db = f + 3 + max(1, math.ceil(math.log2(K)))
    G.fits(b, [(rem2, 1)], 0, db, "softmax.divide.rem")
    G.fits(b, S_terms + [(rem2, -1)], -1, db, "softmax.divide.rem")
    G.range_check(b, s, dt, "softmax.range")
    return (out,)


# ------------------------------------------------------- division, root
def _div(L: "Lowering", op: P.Div, a, c):
    """``q = round_half_up(a·2^f / c)``: with ``σ = 2·[c > 0] − 1`` and ``r = a·2^f − q·c``,
    ``ρ = 2σr + |c|`` lies in ``[0, 2|c|)`` (which also forces ``c ≠ 0``)."""
    b, dt, f, w = L.b, L.dt, L.dt.frac, L.dt.width
    out = L.output(op, (a, c))
    shape = op.target[0].shape
    fa, fc, q = (_flat(np.broadcast_to(v, shape)) for v in (a, c, out))
    pos = G.positive(b, fc, w, "div.sign")
    absc = G.product(b, [(pos, 2), (ONE, -1)], [(fc, 1)], "div.abs")
    qc = G.product(b, [(q, 1)], [(fc, 1)], "div.product")
    r = [(fa, 1 << f), (qc, -1)]
    sr = G.product(b, [(pos, 2), (ONE, -1)], r, "div.remainder")
    rho = [(sr, 2), (absc, 1)]
    G.fits(b, rho, 0, w + 1, "div.remainder.low", "remainder")
    G.fits(b, [(absc, 2)] + [(wi, -c) for wi, c in rho], -1, w + 1, "div.remainder.high", "remainder")
    G.range_check(b, q, dt, "div.range")
    return (out,)


def root_bits(dt) -> int:
    """Bits of a square root's result: ``q < 2^((w − 1 + f)/2)``."""
    return (dt.width + dt.frac) // 2


def _sqrt(L: "Lowering", op: P.Sqrt, a):
    """``q = ⌊√(a·2^f)⌋``: ``q ≥ 0`` (bits), ``a·2^f − q² ≥ 0`` and ``(q + 1)² − 1 − a·2^f ≥ 0``."""
    b, dt, f = L.b, L.dt, L.dt.frac
    out = L.output(op, (a,))
    fa, q = _flat(a), _flat(out)
    nq = root_bits(dt)
    G.fits(b, [(q, 1)], 0, nq, "sqrt.root", "square root")
    qq = G.product(b, [(q, 1)], [(q, 1)], "sqrt.square")
    gap = nq + 2                                         # both gaps are at most 2q < 2^(nq + 1)
    G.fits(b, [(fa, 1 << f), (qq, -1)], 0, gap, "sqrt.below", "square root gap")
    G.fits(b, [(qq, 1), (q, 2), (fa, -(1 << f))], 0, gap, "sqrt.above", "square root gap")
    return (out,)


def _rsqrt(L: "Lowering", op: P.Rsqrt, a):
    """``Div(1, Sqrt(a))``, as the fixed-point semantics define it: the two gadgets above in turn (the
    divisor, a root of a positive value, is ≥ 1, which the division's sign check also forces). A witness
    for an operand ≤ 0 is refused by Rsqrt's own rule, so that the error names Rsqrt."""
    L.b.fill(np.zeros(0, dtype=np.int64), lambda W: FIXED_RULES[P.Rsqrt](op, W[a])[0].reshape(-1)[:0])
    (root,) = _sqrt(L, P.Sqrt(op.T), a)
    one = np.full(op.T.shape, L.constant(L.dt.one), dtype=np.int64)
    return _div(L, P.Div(op.T), one, root)


# ------------------------------------------------------------------ log
def _log(L: "Lowering", op: P.Log, s):
    """``log_fixed``: ``n`` one-hot over ``[0, w − 1)`` with ``2^n ≤ s < 2^(n+1)``;
    ``mant = ⌊s·2^f / 2^n⌋``; ``u = mant − 2^f``; the polynomial; ``rescale(L·ln 2, f + 8)``."""
    b, dt, f, w = L.b, L.dt, L.dt.frac, L.dt.width
    out = L.output(op, (s,))
    fs, o = _flat(s), _flat(out)
    n = fs.size
    span = w - 1
    h = b.alloc((n, span))
    hf = h.reshape(-1)

    def bitlen(W):
        return bit_length(np.maximum(W[fs], 1))
    b.fill(hf, lambda W: (np.arange(span)[None, :] == bitlen(W)[:, None]).astype(np.int64).reshape(-1))
    b.constrain([(hf, 1)], [(hf, 1), (ONE, -1)], [], "log.length")
    b.constrain([(h[:, i], 1) for i in range(span)], [(ONE, 1)], [(ONE, 1)], "log.length")
    pw = [(h[:, i], 1 << i) for i in range(span)]
    G.fits(b, [(fs, 1)] + [(wi, -c) for wi, c in pw], 0, w, "log.length.low", "bit length")
    G.fits(b, [(wi, 2 * c) for wi, c in pw] + [(fs, -1)], -1, w, "log.length.high", "bit length")
    # mant·2^n = s·2^f − rem,  0 ≤ rem < 2^n
    mant = b.alloc(n)
    b.fill(mant, lambda W: (W[fs] << f) >> bitlen(W))
    rem = b.alloc(n)
    b.fill(rem, lambda W: (W[fs] << f) - (W[mant] << bitlen(W)))
    b.constrain([(mant, 1)], pw, [(fs, 1 << f), (rem, -1)], "log.mantissa")
    G.fits(b, [(rem, 1)], 0, w, "log.mantissa.rem")
    G.fits(b, [(wi, c) for wi, c in pw] + [(rem, -1)], -1, w, "log.mantissa.rem")
    # u = mant − one ∈ [0, 2^f);  log2m = rescale(u·(C1 − rescale((C1 − 1)·u)))
    G.fits(b, [(mant, 1)], -dt.one, f, "log.mantissa.range")
    c1, c2 = const(LOG2_C1, dt), const(LOG2_C1 - 1.0, dt)
    u = [(mant, 1), (ONE, -dt.one)]
    uv = lambda W: W[mant] - dt.one  # noqa: E731
    half = 1 << (f - 1)
    a1 = b.alloc(n)
    b.fill(a1, lambda W: (uv(W) * c2 + half) >> f)
    G.rescale(b, [(mant, c2), (ONE, -dt.one * c2)], [(ONE, 1)], a1, dt, lambda W: uv(W) * c2, "log.poly")
    lm = b.alloc(n)
    b.fill(lm, lambda W: (uv(W) * (c1 - W[a1]) + half) >> f)
    G.rescale(b, u, [(ONE, c1), (a1, -1)], lm, dt, lambda W: uv(W) * (c1 - W[a1]), "log.poly")
    # result = rescale(((n − f)·2^f + log2m) · ln2, f + 8)
    g = f + LN2_EXTRA_BITS
    ln2 = math.floor(math.log(2.0) * (1 << g) + 0.5)
    Lt = [(h[:, i], (i - f) << f) for i in range(span)] + [(lm, 1)]
    G.rescale(b, [(wi, np.asarray(c) * ln2) for wi, c in Lt], [(ONE, 1)], o, dt,
              lambda W: lc_value(W, Lt) * ln2, "log.ln2", frac=g)
    return (out,)


# ------------------------------------------------------ argmax, one-hot
def _argmax_mask(L: "Lowering", op: P.ArgMaxMask, x):
    """``one`` at the first maximum: a one-hot selector ``s``, ``m = x`` where ``s = 1``, and
    ``m − x_j − 1 + Σ_{i ≤ j} s_i ≥ 0``: entries before the selected one are strictly smaller."""
    b, dt, w = L.b, L.dt, L.dt.width
    out = L.output(op, (x,))
    K = x.shape[-1]
    X = x.reshape(-1, K)
    R = X.shape[0]
    m = b.alloc(R)
    b.fill(m, lambda W: W[X].max(axis=1))
    sel = b.alloc((R, K))
    sf = sel.reshape(-1)
    b.fill(sf, lambda W: np.eye(K, dtype=np.int64)[W[X].argmax(axis=1)].reshape(-1))
    b.constrain([(sf, 1)], [(sf, 1), (ONE, -1)], [], "argmax.select")
    b.constrain([(sel[:, k], 1) for k in range(K)], [(ONE, 1)], [(ONE, 1)], "argmax.select")
    mk = np.repeat(m, K)
    xf = X.reshape(-1)
    b.constrain([(sf, 1)], [(mk, 1), (xf, -1)], [], "argmax.select")
    prefix = [(np.repeat(sel[:, i], K), (np.arange(K) >= i).astype(np.int64)[None, :].repeat(R, 0).reshape(-1))
              for i in range(K)]
    G.fits(b, [(mk, 1), (xf, -1)] + prefix, -1, w + 1, "argmax.first", "row maximum")
    o = _flat(out)
    b.constrain([(sf, dt.one)], [(ONE, 1)], [(o, 1)], "argmax")
    return (out,)


def _one_hot(L: "Lowering", op: P.OneHot, ids):
    """Rows with entries in ``{0, 2^f}``, summing to ``2^f``, whose weighted sum ``Σ k·row_k`` is
    ``2^f·id``: sound over any ``p > n²·2^f``."""
    b, one = L.b, L.dt.one
    out = L.output(op, (ids,))
    K = op.S.dtype.n
    rows = out.reshape(-1, K)
    o = rows.reshape(-1)
    b.constrain([(o, 1)], [(o, 1), (ONE, -one)], [], "one_hot.entries")
    b.constrain([(rows[:, k], 1) for k in range(K)], [(ONE, 1)], [(ONE, one)], "one_hot.sum")
    b.constrain([(rows[:, k], k) for k in range(1, K)], [(ONE, 1)], [(_flat(ids), one)], "one_hot.position")
    return (out,)


SPECIAL_RULES = {
    P.Exp: _exp,
    P.Softmax: _softmax,
    P.Div: _div,
    P.Sqrt: _sqrt,
    P.Rsqrt: _rsqrt,
    P.Log: _log,
    P.ArgMaxMask: _argmax_mask,
    P.OneHot: _one_hot,
}
