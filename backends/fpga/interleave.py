"""The lanes' data memory: one copy interleaved across ``P`` banks, with crossbars between lanes and banks.

::

    lane l's a address ─┐                                 ┌─► bank j = address mod P, read port 0 (a)
    lane l's b address ─┼─► bank = low bits ─► crossbar ──┼─► … read port 1 (b)      (banks.BankedMemory)
    lane l's write ─────┘      (one-hot)                  └─► … its write port
    bank j's words ──► (READ_LATENCY later) the bank each lane addressed ──► lane l's a, b

Address ``a`` lives in bank ``a mod P``, word ``a div P``. Each lane reads ``a`` and ``b`` and writes one word per
cycle; the micro-op's plan (:func:`~.timing.lane_plan`) keeps the lanes of one group in distinct banks, or on one
word for a read (a stride of 0), so each bank serves one address per port. A bank's address is the OR of the
addresses of the lanes that select it (equal where several do), so the crossbar is AND-OR logic without
priority. Each bank is a :class:`~.banks.BankedMemory` of two read ports (yosys keeps one copy per port) and
its block RAMs; every lane is live only where it computes an element (``used``), so an idle lane's address
never reaches a bank.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .banks import BankedMemory
from .isa import interleave

__all__ = ["InterleavedMemory"]


def _low(addr, bits: int):
    """``addr``'s low ``bits`` bits (zero-extended when it is narrower)."""
    return Cat(addr, Const(0, bits))[:bits]


class InterleavedMemory(wiring.Component):
    """``depth`` signed ``width``-bit words interleaved across ``interleave(lanes)`` banks, for ``lanes`` lanes.

    Ports, one of each per lane: ``a_addr``, ``a_used``, ``b_addr``, ``b_used`` (In) and ``a_data``, ``b_data``
    (Out, the word ``READ_LATENCY`` = 2 cycles after its address); ``w_addr``, ``w_data``, ``w_en`` (In: written
    at the end of the next cycle). ``write_taps``: each lane's write landing this cycle (address and enable), for
    the simulation's collision check.
    """

    def __init__(self, width: int, depth: int, init: Sequence[int], lanes: int, bank_words: int | None = None):
        self.width, self.depth, self.lanes = width, max(1, depth), lanes
        self.P = interleave(lanes)
        self.lo = (self.P - 1).bit_length()
        self.aw = max(1, (self.depth - 1).bit_length())
        per = -(-self.depth // self.P)
        init = list(init) + [0] * (per * self.P - len(init))
        self.banks = [BankedMemory(width, per, init[j::self.P], 2, bank_words) for j in range(self.P)]
        self.write_taps = [SimpleNamespace(addr=Signal(unsigned(self.aw), name=f"w_addr_full{lane}"),
                                           en=Signal(name=f"w_en_full{lane}")) for lane in range(lanes)]
        addr, word = In(unsigned(self.aw)).array(lanes), signed(width)
        super().__init__({"a_addr": addr, "a_used": In(1).array(lanes), "a_data": Out(word).array(lanes),
                          "b_addr": addr, "b_used": In(1).array(lanes), "b_data": Out(word).array(lanes),
                          "w_addr": addr, "w_data": In(word).array(lanes), "w_en": In(1).array(lanes)})

    def locate(self, addr: int):
        """The simulation's storage of address ``addr``: ``(memory data, word)``."""
        bank, word = addr % self.P, addr // self.P
        return self.banks[bank].locate(word)

    def read_ports(self) -> list:
        """Every block-RAM read port, with the read port of its bank it serves: ``[(port, r), …]``."""
        return [p for bank in self.banks for p in bank.read_ports()]

    def elaborate(self, platform) -> Module:
        m = Module()
        for j, bank in enumerate(self.banks):
            m.submodules[f"bank{j}"] = bank
        L, P, lo = self.lanes, self.P, self.lo
        for port, (addrs, used, datas) in enumerate(((self.a_addr, self.a_used, self.a_data),
                                                     (self.b_addr, self.b_used, self.b_data))):
            x = "ab"[port]
            for j, bank in enumerate(self.banks):
                hits = [used[lane] & (_low(addrs[lane], lo) == j) for lane in range(L)]
                word = reduce(lambda acc, t: acc | t, [Mux(h, addrs[lane] >> lo, 0) for lane, h in enumerate(hits)])
                m.d.comb += bank.raddr[port].eq(word)
            for lane in range(L):
                sel1 = Signal(range(P), name=f"{x}{lane}_bank1")
                sel2 = Signal(range(P), name=f"{x}{lane}_bank2")
                m.d.sync += [sel1.eq(_low(addrs[lane], lo)), sel2.eq(sel1)]
                with m.Switch(sel2):
                    for j, bank in enumerate(self.banks):
                        with (m.Case(j) if j < P - 1 else m.Default()):
                            m.d.comb += datas[lane].eq(bank.rdata[port])
        for j, bank in enumerate(self.banks):
            hits = [self.w_en[lane] & (_low(self.w_addr[lane], lo) == j) for lane in range(L)]
            m.d.comb += [
                bank.waddr.eq(reduce(lambda a, b: a | b, [Mux(h, self.w_addr[lane] >> lo, 0) for lane, h in enumerate(hits)])),
                bank.wdata.eq(reduce(lambda a, b: a | b, [Mux(h, self.w_data[lane], 0) for lane, h in enumerate(hits)])),
                bank.we.eq(reduce(lambda a, b: a | b, hits))]
        for lane, tap in enumerate(self.write_taps):
            m.d.sync += [tap.addr.eq(self.w_addr[lane]), tap.en.eq(self.w_en[lane])]
        return m
