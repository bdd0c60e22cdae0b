"""The sequencer's arithmetic units, each exactly the integer arithmetic of ``circuitgrad.fixedpoint``.

* :func:`exp_unit`: ``exp(a − b)`` for either sign, pipelined in eight stages (one multiply, add or shift each);
* :func:`sigmoid_unit`: ``sigmoid`` or ``tanh``, pipelined in four stages (the sequencer's);
* :func:`elementwise`: the combinational units (:data:`COMBINATIONAL`: the kinds whose ``kinds.FACTS`` row says
  ``combinational``), shared by the sequencer and the unrolled datapath; :func:`pipelined`: the sequencer's
  pipelined units by kind (:data:`PIPELINED`);
* :func:`outside`: the range check on the bits above a result's width.

A unit whose operand lies outside its domain (``log`` of a value ≤ 0) returns a value no width holds,
so the range check raises the sequencer's overflow flag, as the interpreter raises an error.
"""
from __future__ import annotations

import math
from typing import Callable

from amaranth import C, Cat, Module, Mux, Signal, Value, signed, unsigned

from circuitgrad.fixedpoint import EXP2_C1, LN2_EXTRA_BITS, LOG2_C1, SIGMOID_PIECES, const

from .kinds import Kind

__all__ = ["COMBINATIONAL", "PIPELINED", "elementwise", "pipelined", "exp_unit", "sigmoid_unit", "outside", "EW_WIDTH"]


def EW_WIDTH(dt) -> int:
    """Bits of an elementwise result: the width, two guard bits and a sign (what the range check reads)."""
    return dt.width + 3


def exp_unit(m: Module, a, b, dt):
    """``exp(a − b)`` for either sign, exactly as ``fixedpoint.exp_fixed``, valid ``EXP_STAGES`` (8) cycles
    after ``a``, ``b``.

    One multiply or one add per stage, so each stage is one DSP block or one carry chain between two
    registers: ``z = a − b``; ``z·log2 e``; ``t = rescale(·)``, whose top bits are ``k`` and low bits
    ``r``; ``r·c₂`` (with ``−k`` and the left shift's clamp); ``s = c₁ + rescale(r·c₂)`` (one adder: ``c₁``
    rides in the rounding constant); ``r·s``; ``p = 1 + rescale(r·s)`` (the 1 folded in the same way).
    The result is ``p >> −k`` (in two steps, by ``−k mod 8`` and then by the rest) or ``p << k``.

    ``k > 0`` shifts left by at most ``W − f``: ``p ≥ 2^f``, so that already exceeds every W-bit value
    and the range check reports it, as the interpreter's does.
    """
    f, W = dt.frac, dt.width
    half = 1 << (f - 1)

    def reg(value, name: str, shape=None) -> Signal:
        return _register(m, value, f"exp_{name}", shape)

    z = reg(a - b, "z", signed(W + 1))                                     # 1
    m1 = reg(z * const(math.log2(math.e), dt), "m1")                         # 2
    t = reg((m1 + half) >> f, "t", signed(W + 4))                            # 3
    k1 = t >> f
    r1 = t[:f]                                                               # t − (k << f): its low f bits, ≥ 0
    m2 = reg(r1 * const(1.0 - EXP2_C1, dt), "m2")                            # 4, with r, −k and the clamp
    r = reg(r1, "r", signed(f + 2))
    nk = reg(-k1, "nk", signed(W + 5))
    # the left shift min(k, W − f) (used only when k > 0) is clamped from k itself (t's top bits): from −k it
    # was a negation and a comparison in series, once the iCE40's critical path (31 ns)
    lsk = reg(Mux(k1 > W - f, W - f, k1), "lshift_k", range(W - f + 1))
    s_ = reg((m2 + (half + (const(EXP2_C1, dt) << f))) >> f, "s", signed(f + 5))   # 5: c₁ + rescale(r·c₂)
    r5, nk5, ls5 = reg(r, "r5"), reg(nk, "nk5"), reg(lsk, "lshift5")
    m3 = reg(r5 * s_, "m3")                                                  # 6
    # the reference shifts right by min(−k, 62); p < 2^(f+2) ≤ 2^62, so every shift ≥ f + 2 gives 0 and
    # the clamp may be 63, chosen by an OR of the high bits of −k instead of a comparison
    assert f + 2 <= 63
    n = reg(Mux(nk5[6:].any(), 63, nk5[:6]), "shift", unsigned(6))
    up = reg(nk5 < 0, "up", 1)                                               # k > 0
    ls = reg(ls5, "lshift")
    p = reg((m3 + (half + (dt.one << f))) >> f, "p", signed(f + 4))          # 7: 1 + rescale(r·s)
    n7, up7, ls7 = reg(n, "shift7"), reg(up, "up7"), reg(ls, "lshift7")
    # the shift in two steps, by n mod 8 and then by 8·(n div 8) (floors compose): p << k fits W + 3 bits
    q = reg(Mux(up7, p << ls7, p >> n7[:3]), "q", signed(EW_WIDTH(dt)))     # 8
    nh, up8 = reg(n7[3:], "shift8"), reg(up7, "up8")
    out = Signal(signed(EW_WIDTH(dt)), name="exp_out")
    m.d.comb += out.eq(Mux(up8, q, q >> Cat(C(0, 3), nh)))
    return out


def _register(m: Module, value, name: str, shape=None) -> Signal:
    """``value`` in a register of its own (of ``value``'s shape unless ``shape`` is given)."""
    out = Signal(shape if shape is not None else Value.cast(value).shape(), name=name)
    m.d.sync += out.eq(value)
    return out


def sigmoid_unit(m: Module, a, dt, tanh: bool = False):
    """``sigmoid(a)`` (or ``tanh(a)``), exactly as :func:`elementwise`'s, pipelined: valid ``SIGMOID_STAGES`` (4)
    cycles after ``a``.

    One register after each step: ``|x|`` and the sign (``x = 2a`` for tanh); the three pieces' products
    and the comparisons with the breakpoints; the chosen piece ``y``; the result, ``y`` or ``1 − y`` by the
    sign (for tanh ``2·that − 1``, that is ``±(2y − 1)``). Each step is one carry chain or one multiply
    between two registers.
    """
    f, name = dt.frac, "tanh" if tanh else "sigmoid"

    def reg(value, what: str, shape=None) -> Signal:
        return _register(m, value, f"{name}_{what}", shape)

    x = a * 2 if tanh else a
    ax, pos1 = reg(Mux(x < 0, -x, x), "abs", unsigned(dt.width + 2)), reg(x >= 0, "pos1", 1)     # 1
    (t5, _, _), *pieces = SIGMOID_PIECES
    prods = [(reg(ax * const(slope, dt), f"p{i}"), const(offset, dt))                           # 2
             for i, (_, slope, offset) in enumerate(pieces)]
    above = [reg(ax >= t, f"above{i}", 1)
             for i, t in enumerate([const(t5, dt)] + [const(lower, dt) for lower, _, _ in pieces[:2]])]
    pos2 = reg(pos1, "pos2", 1)
    vals = [(p + ((1 << (f - 1)) + (off << f))) >> f for p, off in prods]        # rescale(p) + offset, one adder
    y = reg(Mux(above[0], dt.one, Mux(above[1], vals[0], Mux(above[2], vals[1], vals[2]))), "y",    # 3
            signed(dt.width + 3))
    pos3 = reg(pos2, "pos3", 1)
    if tanh:                                             # 2·(y or 1 − y) − 1 = ±(2y − 1)
        return reg(Mux(pos3, y * 2 - dt.one, dt.one - y * 2), "out", signed(EW_WIDTH(dt)))    # 4
    return reg(Mux(pos3, y, dt.one - y), "out", signed(EW_WIDTH(dt)))


#: the combinational unit of each kind that has one: ``unit(m, a, b, dt, name)`` (``name`` prefixes its signals)
COMBINATIONAL: dict[Kind, Callable] = {
    Kind.ADD: lambda m, a, b, dt, name: a + b,
    Kind.NEG: lambda m, a, b, dt, name: -a,
    Kind.HEAVISIDE: lambda m, a, b, dt, name: Mux(a > 0, dt.one, 0),
    Kind.SIGMOID: lambda m, a, b, dt, name: _sigmoid(m, a, dt, name),
    Kind.TANH: lambda m, a, b, dt, name: _sigmoid(m, a * 2, dt, name) * 2 - dt.one,
    Kind.EQ: lambda m, a, b, dt, name: Mux(a == b, dt.one, 0),
    Kind.LOG: lambda m, a, b, dt, name: _log(m, a, dt, name),
    Kind.COPY: lambda m, a, b, dt, name: a,
}

#: the sequencer's pipelined unit of each kind that has one (valid ``FACTS[kind].latency`` cycles after ``a``,
#: ``b``): ``unit(m, a, b, dt)``
PIPELINED: dict[Kind, Callable] = {
    Kind.EXP: lambda m, a, b, dt: exp_unit(m, a, b, dt),
    Kind.SIGMOID: lambda m, a, b, dt: sigmoid_unit(m, a, dt),
    Kind.TANH: lambda m, a, b, dt: sigmoid_unit(m, a, dt, tanh=True),
}


def elementwise(m: Module, kind: str, a, b, dt, name: str):
    """The value of elementwise micro-op ``kind`` on operands ``a``, ``b`` (``name`` prefixes its signals).

    Shared by the sequencer's unit and the unrolled datapath, as ``microcode.elementwise_model`` is their
    NumPy model.
    """
    unit = COMBINATIONAL.get(Kind(kind))
    if unit is None:
        raise NotImplementedError(f"no elementwise unit for {kind!r}")
    return unit(m, a, b, dt, name)


def pipelined(m: Module, kind: str, a, b, dt):
    """The sequencer's pipelined unit of ``kind`` on operands ``a``, ``b``: its result, ``latency`` cycles later."""
    unit = PIPELINED.get(Kind(kind))
    if unit is None:
        raise NotImplementedError(f"no pipelined unit for {kind!r}")
    return unit(m, a, b, dt)


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
