"""The range check and the writeback: the end of the sequencer's pipeline.

::

    host (idle) ─────────────┐
    divider result ──────────┼──► write port (one of three, the pipeline last)
    pipeline result (stage 3)┘
    stage-3 result ──► range check (two registers) ──► bad ─┐
    divider's bad ──────────────────────────────────────────┴──► sticky overflow, fault = pc of the first
"""
from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import SeqConfig
from .units import EW_WIDTH

__all__ = ["RangeCheck", "Writeback", "CHECK_LATENCY"]

#: cycles from a result at stage 3 to :class:`RangeCheck`'s verdict on it
CHECK_LATENCY = 2


class RangeCheck(wiring.Component):
    """Was the stage-3 result outside the word's range? Pipelined: ``bad`` comes ``CHECK_LATENCY`` (2) cycles
    after its inputs.

    In range ⇔ every bit from ``W − 1`` up is a copy of the sign (``lo = −2^(W−1)``, ``hi = 2^(W−1) − 1``):
    reductions on register bits, no comparators. The first cycle registers, for each group of four of
    those bits, whether any and whether all are set; the second combines the groups. A rescaled sum is
    checked from bit ``f + W − 1`` of the accumulator (the bits the shift keeps), a max never overflows.

    Ports (In): ``acc``, ``ew`` (the accumulator and the elementwise result), ``reduce`` (a ``mac``),
    ``rescale`` (a rescaled ``mac``), ``is_max`` (a ``max`` or ``argmax``), ``valid`` (a result is
    written) and ``pc`` (its micro-op). Out: ``bad`` (that result overflowed) and ``bad_pc``, two cycles
    later.
    """

    def __init__(self, cfg: SeqConfig):
        self.cfg = cfg
        pc = range(cfg.n_ops + 1)
        super().__init__({"acc": In(signed(cfg.acc_w)), "ew": In(signed(EW_WIDTH(cfg.dt))), "reduce": In(1),
                          "rescale": In(1), "is_max": In(1), "valid": In(1), "pc": In(pc),
                          "bad": Out(1), "bad_pc": Out(pc)})

    def elaborate(self, platform) -> Module:
        m = Module()
        W, f, acc = self.cfg.W, self.cfg.f, self.acc

        def grouped(bits, name: str):
            """Registered any/all of each group of four ``bits``; the value of :func:`outside` a cycle later."""
            n = len(bits)
            anys = Signal((n + 3) // 4, name=f"{name}_any")
            alls = Signal((n + 3) // 4, name=f"{name}_all")
            for i in range(0, n, 4):
                m.d.sync += [anys[i // 4].eq(bits[i:i + 4].any()), alls[i // 4].eq(bits[i:i + 4].all())]
            return anys.any() & ~alls.all()

        wide, rescaled, ew = grouped(acc[W - 1:], "acc"), grouped(acc[f + W - 1:], "accf"), grouped(self.ew[W - 1:], "ew")
        red, rs, mx, v1, pc1 = Signal(), Signal(), Signal(), Signal(), Signal.like(self.pc)
        m.d.sync += [red.eq(self.reduce), rs.eq(self.rescale), mx.eq(self.is_max), v1.eq(self.valid), pc1.eq(self.pc)]
        m.d.sync += [self.bad.eq(v1 & Mux(red, Mux(rs, rescaled, wide), Mux(mx, 0, ew))), self.bad_pc.eq(pc1)]
        return m


class Writeback(wiring.Component):
    """Chooses who writes the memory this cycle, and keeps the sticky overflow flag.

    Ports (In): ``host`` (the host owns the port: the sequencer is idle) with ``host_addr``,
    ``host_wdata``, ``host_we``; ``div_write`` (the divider writes) with ``div_addr``, ``div_data``,
    ``div_bad`` (the cycle after the write) and ``pc`` (the running micro-op); ``valid`` (the pipeline writes) with ``addr``, ``data``,
    ``bad`` and ``data_pc`` (from :class:`RangeCheck`: a result written two cycles ago overflowed, and its
    micro-op); ``clear`` (a run starts: clear the flag).

    Ports (Out): the write port ``wr_addr``, ``wr_data``, ``wr_en``; ``overflow`` (sticky) and ``fault`` (the
    pc of the first micro-op that overflowed). The pipeline's flag is set ``CHECK_LATENCY + 1`` cycles
    after its write's request, the divider's three (the sequencer waits for them before ``done``), so the
    checks are off the write path.
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
        with m.If(self.clear):
            m.d.sync += [self.overflow.eq(0), self.fault.eq(0)]
        # the divider's check comes the cycle after its write (``SeqDivider.bad``), and is registered once more
        w1, pc1 = Signal(name="div_wrote"), Signal.like(self.pc, name="div_pc1")
        div_bad, div_pc = Signal(name="div_bad_r"), Signal.like(self.pc, name="div_pc_r")
        m.d.sync += [w1.eq(self.div_write), pc1.eq(self.pc), div_bad.eq(w1 & self.div_bad), div_pc.eq(pc1)]
        with m.If(div_bad & ~self.overflow):
            m.d.sync += [self.overflow.eq(1), self.fault.eq(div_pc)]
        with m.If(self.bad & ~self.overflow):
            m.d.sync += [self.overflow.eq(1), self.fault.eq(self.data_pc)]
        return m
