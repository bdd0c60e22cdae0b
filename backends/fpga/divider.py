"""The sequential unit: restoring division (``divf``, ``div``) and square root (``sqrt``), a bit per cycle.

::

    load ──► num = |a|·2^f, den = |b|, rem = quo = 0, count = bits − 1
    step_div  (bits cycles):  trial = rem·2 + next bit of num;   take = trial ≥ den
    step_sqrt (bits cycles):  trial = rem·4 + next 2 bits of num; take = trial ≥ quo·4 + 1
                              rem = take ? trial − … : trial;    quo = quo·2 + take
    ──► result = ±(quo + round), bad = operand outside the domain or result outside the word

The three kinds share their registers: a numerator (or radicand) shifted out from the top, a remainder,
the quotient (or root) shifted in, and a count. ``divf`` is ``⌊(a·2^f) / b⌋`` for ``a ≥ 0``, ``b > 0``;
``div`` is signed and rounds half up (away from zero for a positive quotient); ``sqrt`` is
``⌊√(a·2^f)⌋`` for ``a ≥ 0``. The controller holds ``load`` for one cycle, then ``step_div`` or
``step_sqrt`` until ``last``, then ``round`` for one cycle, then writes ``result``.
"""
from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import DATA, SeqConfig
from .kinds import Kind
from .units import outside

__all__ = ["SeqDivider"]


class SeqDivider(wiring.Component):
    """The restoring divider and square root (see the module docstring).

    Ports: ``load``, ``step_div``, ``step_sqrt``, ``round`` (In, one at a time: ``round`` follows the last
    step and registers the rounding); ``a``, ``b`` (In, the operands at ``load``); ``is_sqrt``, ``is_rdiv`` (In at ``load``: the kind is ``sqrt``, or the signed rounded ``div``; only
    read when the program uses that kind); ``last`` (Out: the step now running is the last);
    ``result`` (Out, the word written) and ``bad`` (Out, the cycle after the result: an operand outside
    the domain, or that result outside the word's range).
    """

    def __init__(self, cfg: SeqConfig):
        self.cfg = cfg
        W = cfg.W
        super().__init__({
            "load": In(1), "step_div": In(1), "step_sqrt": In(1), "round": In(1), "a": In(signed(W)), "b": In(signed(W)),
            "is_sqrt": In(1), "is_rdiv": In(1), "last": Out(1), "result": Out(signed(W)), "bad": Out(1),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg = self.cfg
        W, f, nb, sb = cfg.W, cfg.f, cfg.div_bits, cfg.sqrt_bits
        num = Signal(unsigned(max(nb + 1, 2 * sb)), **DATA)       # all four set at each load
        den = Signal(unsigned(W), **DATA)
        rem = Signal(unsigned(max(W + 1, sb + 2)), **DATA)
        quo = Signal(unsigned(max(nb, sb)), **DATA)
        dcount = Signal(range(max(nb, sb) + 1))
        neg = Signal()                   # div: the quotient's sign
        bad_in = Signal()                # an operand outside the unit's domain (a zero divisor, a negative radicand)
        # the kind, registered at load: no decode of the micro-op's kind sits before the result or its check
        is_sqrt, is_rdiv = Signal(name="div_is_sqrt"), Signal(name="div_is_rdiv")
        with m.If(self.load):
            m.d.sync += [is_sqrt.eq(self.is_sqrt if Kind.SQRT in cfg.used else 0),
                         is_rdiv.eq(self.is_rdiv if Kind.DIV in cfg.used else 0)]
        a_in, b_in = self.a, self.b

        with m.If(self.load):
            a_neg, b_neg = a_in < 0, b_in < 0
            m.d.sync += [num.eq(Mux(a_neg, -a_in, a_in) << f), den.eq(Mux(b_neg, -b_in, b_in)),
                         rem.eq(0), quo.eq(0), neg.eq(a_neg ^ b_neg),
                         bad_in.eq(Mux(self.is_sqrt, a_neg, (b_in == 0) | (~self.is_rdiv & (a_neg | b_neg)))),
                         dcount.eq(Mux(self.is_sqrt, sb - 1, nb - 1))]
        with m.Elif(self.step_div):           # restoring division of |a|·2^f by |b|, one bit per cycle
            trial = Cat(num[nb - 1], rem)                  # (rem << 1) | next numerator bit
            take = trial >= den
            m.d.sync += [rem.eq(Mux(take, trial - den, trial)), quo.eq(Cat(take, quo)),
                         num.eq(num << 1), dcount.eq(dcount - 1)]
        if Kind.SQRT in cfg.used:
            with m.Elif(self.step_sqrt):      # restoring square root of a·2^f, two radicand bits per cycle
                trial_r = Cat(num[2 * sb - 2:2 * sb], rem)     # (rem << 2) | next two bits
                cand = Cat(Const(1, 2), quo)                    # (root << 2) | 1
                take = trial_r >= cand
                m.d.sync += [rem.eq(Mux(take, trial_r - cand, trial_r)), quo.eq(Cat(take, quo)),
                             num.eq(num << 2), dcount.eq(dcount - 1)]
        m.d.comb += self.last.eq(dcount == 0)

        # div rounds half up: the magnitude gains 1 when 2·rem ≥ |b| (> |b| for a negative quotient); the
        # comparison is registered in the round cycle. The result is then one adder: ±(quo + up) is
        # quo + up, or ~quo + (1 − up) for a negative quotient (−x = ~x + 1)
        up = Signal(name="div_up")
        with m.If(self.round):
            m.d.sync += up.eq(Mux(neg, Cat(0, rem) > den, Cat(0, rem) >= den) & is_rdiv)
        negq = Signal(name="div_negq")
        m.d.comb += negq.eq(neg & is_rdiv)
        q = Signal(signed(max(nb, sb) + 2), name="div_q")
        res = Signal(signed(max(nb, sb) + 2), name="div_res")
        m.d.comb += [q.eq(quo), res.eq(Mux(negq, ~q, q) + Mux(negq, ~up, up))]     # 1 − up is ~up on one bit
        # in range ⇔ every bit from W − 1 up is a copy of the sign: reductions, not two comparators, on the
        # result registered (so ``bad`` is valid the cycle after the write, not after the adder)
        res_r = Signal.like(res, name="div_res_r", **DATA)
        m.d.sync += res_r.eq(res)
        m.d.comb += [self.result.eq(res[:W]), self.bad.eq(bad_in | outside(res_r[W - 1:]))]
        return m
