"""The lanes' data memory: one copy interleaved across ``P`` banks, with crossbars between lanes and banks.

::

    lane l's a address ─┐   register: address,              ┌─► bank j = address mod P, read port 0 (a)
    lane l's b address ─┼─► its bank (one-hot) ─► crossbar ─┼─► … read port 1 (b)      (banks.BankedMemory)
    lane l's write ─────┘                                   └─► … its write port (registered again)
    crossbar ──► register ──► bank j ──► (READ_LATENCY later) the bank each lane addressed ──► lane l's a, b

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
from .config import DATA
from .isa import interleave
from .mac import delay
from .timing import LANE_LATENCY, READ_LATENCY

__all__ = ["InterleavedMemory", "HOST_LATENCY"]

#: cycles from the host's address to its word (``host_data``): the block RAM's two, then the bank's word register
HOST_LATENCY = READ_LATENCY + 1


def _low(addr, bits: int):
    """``addr``'s low ``bits`` bits (zero-extended when it is narrower)."""
    return Cat(addr, Const(0, bits))[:bits]


class InterleavedMemory(wiring.Component):
    """``depth`` signed ``width``-bit words interleaved across ``interleave(lanes)`` banks, for ``lanes`` lanes.

    Ports, one of each per lane: ``a_addr``, ``a_used``, ``b_addr``, ``b_used`` (In) and ``a_data``, ``b_data``
    (Out, the word ``LANE_LATENCY + READ_LATENCY`` = 5 cycles after its address: each lane's address, whether it is
    used and the bank it selects are registered first, each bank's address after the crossbar, and each bank's
    word before the lanes choose); ``w_addr``,
    ``w_data``, ``w_en`` (In: registered with their bank, then as a bank's write: written at the end of the second
    cycle after). ``host`` and ``host_addr`` (In): while ``host`` is high, every bank's ``a`` port reads
    ``host_addr``'s word, past the address registers; ``host_data`` (Out) is its word ``HOST_LATENCY`` (3) cycles
    later, from the banks' registered words (a block's word chosen within its bank and then among the banks is
    too long a path for one cycle).
    ``read_taps`` (each stream's registered address and used bit, per lane) and ``write_taps`` (each lane's write
    landing this cycle) are for the simulation's collision check. ``cells``: the banks' primitives, as in
    :class:`~.banks.BankedMemory`.
    """

    def __init__(self, width: int, depth: int, init: Sequence[int], lanes: int, bank_words: int | None = None,
                 cells: str | None = None):
        self.width, self.depth, self.lanes = width, max(1, depth), lanes
        self.P = interleave(lanes)
        self.lo = (self.P - 1).bit_length()
        self.aw = max(1, (self.depth - 1).bit_length())
        per = -(-self.depth // self.P)
        init = list(init) + [0] * (per * self.P - len(init))
        self.banks = [BankedMemory(width, per, init[j::self.P], 2, bank_words, cells=cells) for j in range(self.P)]
        self.write_taps = [SimpleNamespace(addr=Signal(unsigned(self.aw), name=f"w_addr_full{lane}"),
                                           en=Signal(name=f"w_en_full{lane}")) for lane in range(lanes)]
        self.read_taps: list = []
        addr, word = In(unsigned(self.aw)).array(lanes), signed(width)
        super().__init__({"a_addr": addr, "a_used": In(1).array(lanes), "a_data": Out(word).array(lanes),
                          "b_addr": addr, "b_used": In(1).array(lanes), "b_data": Out(word).array(lanes),
                          "w_addr": addr, "w_data": In(word).array(lanes), "w_en": In(1).array(lanes),
                          "host": In(1), "host_addr": In(unsigned(self.aw)), "host_data": Out(word)})

    def locate(self, addr: int):
        """The simulation's storage of address ``addr``: ``(memory data, word)``."""
        bank, word = addr % self.P, addr // self.P
        return self.banks[bank].locate(word)

    def read_ports(self) -> list:
        """Every block-RAM read port, with the read port of its bank it serves: ``[(port, r), …]``."""
        return [p for bank in self.banks for p in bank.read_ports()]

    def _register(self, m: Module, name: str, addr, on) -> tuple:
        """``addr``, its word in its bank, and whether it is on and selects bank ``j`` (one bit per bank), registered."""
        reg = Signal(unsigned(self.aw), name=f"{name}_addr", **DATA)
        hits = Signal(self.P, name=f"{name}_hits")
        m.d.sync += [reg.eq(addr), hits.eq(Mux(on, Const(1, self.P) << _low(addr, self.lo), 0))]
        return reg, hits

    def elaborate(self, platform) -> Module:
        m = Module()
        for j, bank in enumerate(self.banks):
            m.submodules[f"bank{j}"] = bank
        L, P, lo = self.lanes, self.P, self.lo
        self.read_taps.clear()
        for port, (addrs, used, datas) in enumerate(((self.a_addr, self.a_used, self.a_data),
                                                     (self.b_addr, self.b_used, self.b_data))):
            x = "ab"[port]
            regs = [self._register(m, f"{x}{lane}", addrs[lane], used[lane]) for lane in range(L)]
            for lane, (reg, hits) in enumerate(regs):    # the collision check sees a read as its bank does
                tap, on = Signal.like(reg, name=f"{x}{lane}_tap", **DATA), Signal(name=f"{x}{lane}_tap_on")
                m.d.sync += [tap.eq(reg), on.eq(hits.any())]
                self.read_taps.append((SimpleNamespace(addr=tap, stream=x), on))
            for j, bank in enumerate(self.banks):       # each bank's address, registered after the crossbar
                addr = Signal.like(bank.raddr[port], name=f"{x}_bank{j}_addr", **DATA)
                m.d.sync += addr.eq(_select([(hits[j], reg >> lo) for reg, hits in regs]))
                if port == 0:                           # the host reads through port a, past the registers
                    m.d.comb += bank.raddr[0].eq(Mux(self.host, self.host_addr >> lo, addr))
                else:
                    m.d.comb += bank.raddr[port].eq(addr)
            words = []                              # each bank's word, registered before the lanes choose
            for j, bank in enumerate(self.banks):
                word = Signal(signed(self.width), name=f"{x}_bank{j}_word", **DATA)
                m.d.sync += word.eq(bank.rdata[port])
                words.append(word)
            for lane, (reg, _) in enumerate(regs):      # its bank, through bank address, read, registers, word
                sel, = delay(m, {f"{x}{lane}_bank": _low(reg, lo)}, READ_LATENCY + LANE_LATENCY - 1)
                with m.Switch(sel):
                    for j, word in enumerate(words):
                        with (m.Case(j) if j < P - 1 else m.Default()):
                            m.d.comb += datas[lane].eq(word)
                if port == 0 and lane == 0:           # the host's read: its bank's registered word
                    host, = delay(m, {"host_bank": _low(self.host_addr, lo)}, HOST_LATENCY)
                    with m.Switch(host):
                        for j, word in enumerate(words):
                            with (m.Case(j) if j < P - 1 else m.Default()):
                                m.d.comb += self.host_data.eq(word)
        writes = []
        for lane in range(L):
            reg, hits = self._register(m, f"w{lane}", self.w_addr[lane], self.w_en[lane])
            data = Signal(signed(self.width), name=f"w{lane}_data", **DATA)
            m.d.sync += data.eq(self.w_data[lane])
            writes.append((reg, hits, data))
            tap = self.write_taps[lane]
            m.d.sync += [tap.addr.eq(reg), tap.en.eq(hits.any())]
        for j, bank in enumerate(self.banks):
            m.d.comb += [bank.waddr.eq(_select([(h[j], r >> lo) for r, h, _ in writes])),
                         bank.wdata.eq(_select([(h[j], d) for _, h, d in writes])),
                         bank.we.eq(_select([(h[j], 1) for _, h, _ in writes]))]
        return m


def _select(choices: list) -> object:
    """The OR of the values whose select bit is set (at most one is, or they are equal): AND-OR logic, no
    priority."""
    return reduce(lambda acc, t: acc | t, [Mux(on, value, 0) for on, value in choices])
