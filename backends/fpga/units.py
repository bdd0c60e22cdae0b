"""The sequencer's arithmetic units, each exactly the integer arithmetic of ``circuitgrad.fixedpoint``.

* :func:`exp_unit`: ``exp(z)`` for either sign, pipelined in four stages (one multiply each);
* :func:`elementwise`: the combinational units (``add``, ``neg``, ``heaviside``, ``sigmoid``, ``tanh``,
  ``eq``, ``log``, ``copy``), shared by the sequencer and the unrolled datapath;
* :func:`outside`: the range check on the bits above a result's width.

A unit whose operand lies outside its domain (``log`` of a value ≤ 0) returns a value no width holds,
so the range check raises the sequencer's overflow flag, as the interpreter raises an error.
"""
from __future__ import annotations

import math

from amaranth import Module, Mux, Signal, signed, unsigned

from circuitgrad.fixedpoint import EXP2_C1, LN2_EXTRA_BITS, LOG2_C1, SIGMOID_PIECES, const

__all__ = ["ELEMENTWISE", "elementwise", "exp_unit", "outside", "EW_WIDTH"]


def EW_WIDTH(dt) -> int:
    """Bits of an elementwise result: the width, two guard bits and a sign (what the range check reads)."""
    return dt.width + 3


def exp_unit(m: Module, z, dt):
    """``exp(z)`` for ``z`` of either sign, exactly as ``fixedpoint.exp_fixed``, in five stages.

    Four registers (:func:`~.timing.ew_stages`): ``z = a − b`` is registered straight after the
    memory read; then ``t = rescale(z·log2 e)``; then ``u = rescale(r·c₂)`` and ``k``; then
    ``p = 1 + rescale(r·(c₁ + u))`` (one adder: the 1 rides in the rounding constant) and the clamped
    shifts; then ``p >> −k`` or ``p << k``. The result is valid four cycles after ``z``.

    ``k > 0`` shifts left by at most ``W − f``: ``p ≥ 2^f``, so that already exceeds every W-bit value
    and the range check reports it, as the interpreter's does.
    """
    f, W = dt.frac, dt.width
    half = 1 << (f - 1)
    zr = Signal(signed(W + 1), name="exp_z")          # registered operand: the block-RAM read ends here
    m.d.sync += zr.eq(z)
    t = Signal(signed(W + 4), name="exp_t")
    m.d.sync += t.eq((zr * const(math.log2(math.e), dt) + half) >> f)
    nk = Signal(signed(W + 5), name="exp_nk")         # −k
    r = Signal(signed(f + 2), name="exp_r")
    u = Signal(signed(f + 4), name="exp_u")
    k1 = t >> f
    r1 = t - (k1 << f)
    # the left shift min(k, W − f) (used only when k > 0) is clamped here, from k itself (t's top bits), and
    # carried a stage: from −k a stage later it was a negation and a comparison in series, the iCE40's
    # critical path (31 ns)
    lsk = Signal(range(W - f + 1), name="exp_lshift_k")
    m.d.sync += [nk.eq(-k1), r.eq(r1), u.eq((r1 * const(1.0 - EXP2_C1, dt) + half) >> f),
                 lsk.eq(Mux(k1 > W - f, W - f, k1))]
    p = Signal(signed(f + 4), name="exp_p")          # 1 + v, the 1 folded into v's rounding constant
    n = Signal(unsigned(6), name="exp_shift")
    up = Signal(name="exp_up")                       # k > 0
    ls = Signal(range(W - f + 1), name="exp_lshift")
    # the reference shifts right by min(−k, 62); p < 2^(f+2) ≤ 2^62, so every shift ≥ f + 2 gives 0 and
    # the clamp may be 63, chosen by an OR of the high bits of −k instead of a comparison
    assert f + 2 <= 63
    m.d.sync += [p.eq((r * (const(EXP2_C1, dt) + u) + (half + (dt.one << f))) >> f),
                 n.eq(Mux(nk[6:].any(), 63, nk[:6])), up.eq(nk < 0), ls.eq(lsk)]
    out = Signal(signed(EW_WIDTH(dt)), name="exp_out")
    m.d.comb += out.eq(Mux(up, p << ls, p >> n))
    return out


#: the elementwise micro-op kinds of :func:`elementwise` (exp is pipelined apart; divisions and square
#: roots are sequential)
ELEMENTWISE = ("add", "neg", "heaviside", "sigmoid", "tanh", "eq", "log", "copy")


def elementwise(m: Module, kind: str, a, b, dt, name: str):
    """The value of elementwise micro-op ``kind`` on operands ``a``, ``b`` (``name`` prefixes its signals).

    Shared by the sequencer's unit and the unrolled datapath, as ``microcode.elementwise_model`` is their
    NumPy model.
    """
    if kind == "add":
        return a + b
    if kind == "neg":
        return -a
    if kind == "heaviside":
        return Mux(a > 0, dt.one, 0)
    if kind == "sigmoid":
        return _sigmoid(m, a, dt, name)
    if kind == "tanh":
        return _sigmoid(m, a * 2, dt, name) * 2 - dt.one
    if kind == "eq":
        return Mux(a == b, dt.one, 0)
    if kind == "log":
        return _log(m, a, dt, name)
    if kind == "copy":
        return a
    raise NotImplementedError(f"no elementwise unit for {kind!r}")


def outside(bits):
    """``bits`` (from bit W − 1 of a value up) are not all copies of the sign: the value overflows W bits."""
    return bits.any() & ~bits.all()


def _rescale(x, f: int):
    return (x + (1 << (f - 1))) >> f


def _log(m: Module, a, dt, name: str):
    """``log_fixed(a)`` (combinational): bit length, normalising shift, the polynomial, ``× ln 2``.

    ``n`` is the index of ``a``'s top bit; ``a << (W − 1 − n)`` puts it at bit ``W − 1``, and its top
    ``f + 1`` bits are the mantissa ``⌊a·2^(f−n)⌋ ∈ [2^f, 2^(f+1))`` of the reference (exact for
    ``n < f`` as well). ``a ≤ 0`` gives ``2^(W+1)``: out of range, so the overflow flag is raised.
    """
    f, W = dt.frac, dt.width
    top = 0
    for i in range(W - 1):                       # priority encoder: the highest set bit wins
        top = Mux(a[i], i, top)
    n = Signal(signed(W.bit_length() + 1), name=f"{name}_n")      # 0 ≤ n < W − 1, signed for n − f
    sh = Signal(range(W), name=f"{name}_shift")
    m.d.comb += [n.eq(top), sh.eq(W - 1 - top)]
    norm = Signal(unsigned(2 * W), name=f"{name}_norm")
    m.d.comb += norm.eq(a[:W - 1] << sh)
    u = Signal(signed(f + 2), name=f"{name}_u")
    m.d.comb += u.eq(norm[W - 1 - f:W] - dt.one)
    v = Signal(signed(f + 4), name=f"{name}_v")
    m.d.comb += v.eq(_rescale(const(LOG2_C1 - 1.0, dt) * u, f))
    log2m = Signal(signed(f + 4), name=f"{name}_log2m")
    m.d.comb += log2m.eq(_rescale(u * (const(LOG2_C1, dt) - v), f))
    L = Signal(signed(f + 8 + W.bit_length()), name=f"{name}_L")
    m.d.comb += L.eq(((n - f) << f) + log2m)
    g = f + LN2_EXTRA_BITS
    ln2 = math.floor(math.log(2.0) * (1 << g) + 0.5)
    out = Signal(signed(EW_WIDTH(dt)), name=f"{name}_out")
    m.d.comb += out.eq(Mux(a > 0, _rescale(L * ln2, g), 1 << (W + 1)))
    return out


def _sigmoid(m: Module, x, dt, name: str):
    """PLAN sigmoid of signed ``x`` (combinational), exactly as ``fixedpoint.sigmoid_fixed``."""
    f = dt.frac
    ax = Signal(unsigned(dt.width + 2), name=f"{name}_abs")
    m.d.comb += ax.eq(Mux(x < 0, -x, x))
    y = Signal(signed(dt.width + 3), name=f"{name}_y")
    (t5, _, _), *pieces = SIGMOID_PIECES
    vals = []
    for lower, slope, offset in pieces:
        c = const(slope, dt)
        vals.append((const(lower, dt), ((ax * c + (1 << (f - 1))) >> f) + const(offset, dt)))
    (l1, p1), (l2, p2), (_, p3) = vals
    m.d.comb += y.eq(Mux(ax >= const(t5, dt), dt.one, Mux(ax >= l1, p1, Mux(ax >= l2, p2, p3))))
    out = Signal(signed(dt.width + 3), name=f"{name}_out")
    m.d.comb += out.eq(Mux(x >= 0, y, dt.one - y))
    return out
