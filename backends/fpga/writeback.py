"""The range check and the writeback: the end of the sequencer's pipeline.

::

    host (idle) ─────────────┐
    divider result ──────────┼──► write port (one of three, the pipeline last)
    pipeline result (stage 3)┘
    stage-3 result ──► range check ──► bad ─(a cycle later)─┐
    divider's bad ──────────────────────────────────────────┴──► sticky overflow, fault = pc of the first
"""
from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import SeqConfig
from .units import EW_WIDTH, outside

__all__ = ["RangeCheck", "Writeback"]


class RangeCheck(wiring.Component):
    """Is the stage-3 result outside the word's range?

    In range ⇔ every bit from ``W − 1`` up is a copy of the sign (``lo = −2^(W−1)``, ``hi = 2^(W−1) − 1``):
    two reductions on register bits, no comparators. A rescaled sum is checked from bit ``f + W − 1`` of
    the accumulator (the bits the shift keeps), a max never overflows.

    Ports: ``acc``, ``ew`` (In: the accumulator and the elementwise result), ``reduce`` (In: a ``mac``),
    ``rescale`` (In: a rescaled ``mac``), ``is_max`` (In: a ``max`` or ``argmax``); ``bad`` (Out).
    """

    def __init__(self, cfg: SeqConfig):
        self.cfg = cfg
        super().__init__({"acc": In(signed(cfg.acc_w)), "ew": In(signed(EW_WIDTH(cfg.dt))), "reduce": In(1),
                          "rescale": In(1), "is_max": In(1), "bad": Out(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        W, f, acc = self.cfg.W, self.cfg.f, self.acc
        m.d.comb += self.bad.eq(Mux(self.reduce, Mux(self.rescale, outside(acc[f + W - 1:]), outside(acc[W - 1:])),
                                    Mux(self.is_max, 0, outside(self.ew[W - 1:]))))
        return m


class Writeback(wiring.Component):
    """Chooses who writes the memory this cycle, and keeps the sticky overflow flag.

    Ports (In): ``host`` (the host owns the port: the sequencer is idle) with ``host_addr``,
    ``host_wdata``, ``host_we``; ``div_write`` (the divider writes) with ``div_addr``, ``div_data``,
    ``div_bad`` and ``pc`` (the running micro-op); ``valid`` (the pipeline writes) with ``addr``, ``data``,
    ``bad`` (from :class:`RangeCheck`) and ``data_pc`` (its micro-op); ``clear`` (a run starts: clear the flag).

    Ports (Out): the write port ``wr_addr``, ``wr_data``, ``wr_en``; ``overflow`` (sticky) and ``fault`` (the
    pc of the first micro-op that overflowed). The pipeline's flag is set one cycle after its write (the
    drain before ``done`` leaves room for it), so the check is off the write path.
    """

    def __init__(self, cfg: SeqConfig):
        self.cfg = cfg
        addr, word, pc = range(cfg.depth), signed(cfg.W), range(cfg.n_ops + 1)
        super().__init__({
            "host": In(1), "host_addr": In(addr), "host_wdata": In(word), "host_we": In(1),
            "div_write": In(1), "div_addr": In(addr), "div_data": In(word), "div_bad": In(1), "pc": In(pc),
            "valid": In(1), "addr": In(addr), "data": In(word), "bad": In(1), "data_pc": In(pc), "clear": In(1),
            "wr_addr": Out(addr), "wr_data": Out(word), "wr_en": Out(1), "overflow": Out(1), "fault": Out(pc),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        wr = (self.wr_addr, self.wr_data, self.wr_en)
        with m.If(self.host):
            m.d.comb += [p.eq(v) for p, v in zip(wr, (self.host_addr, self.host_wdata, self.host_we))]
        with m.If(self.div_write):
            m.d.comb += [p.eq(v) for p, v in zip(wr, (self.div_addr, self.div_data, 1))]
        with m.If(self.valid):
            m.d.comb += [p.eq(v) for p, v in zip(wr, (self.addr, self.data, 1))]
        bad4, pc4 = Signal(), Signal.like(self.data_pc)
        m.d.sync += [bad4.eq(self.valid & self.bad), pc4.eq(self.data_pc)]
        with m.If(self.clear):
            m.d.sync += [self.overflow.eq(0), self.fault.eq(0)]
        with m.If(self.div_write & self.div_bad & ~self.overflow):
            m.d.sync += [self.overflow.eq(1), self.fault.eq(self.pc)]
        with m.If(bad4 & ~self.overflow):
            m.d.sync += [self.overflow.eq(1), self.fault.eq(pc4)]
        return m
