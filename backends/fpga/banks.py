"""The sequencer's data memory: one copy, split into banks of one block RAM each, with a register per bank.

::

                 address ─┬─ low bits ──► bank 0 … bank n−1 (block RAMs, synchronous read)
                          │                  │         │
                          │                  ▼         ▼
                          │               reg 0 …   reg n−1        (each beside its block RAM)
                          └─ high bits ─► reg ─► reg ─► select ──► data   (READ_LATENCY = 2 cycles)
    address, word, enable ─► registers (one enable per bank) ─► the banks' write ports  (WRITE_LATENCY = 1)

A block RAM's clock-to-output is most of a fast clock period (5.8 ns on ECP5), and a memory of many
blocks adds a multiplexer and long wires after it. Registering each block's output beside it ends that
path in one register; the multiplexer then runs from registers to the operand registers. A write is
registered too (``WRITE_LATENCY``): the word, the address and each bank's enable (its high address bits)
are registers, so no multiplexer or decoder sits before a block RAM's write port. Each bank is a whole block (``bank_words`` words: 256 on iCE40,
1024 on ECP5), so the banks map one-to-one onto block RAMs; a memory of one bank (``bank_words=None``,
what the simulation uses) has no multiplexer.
"""
from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["BankedMemory"]


class BankedMemory(wiring.Component):
    """``depth`` signed ``width``-bit words in banks of ``bank_words``, with ``reads`` read ports.

    Ports: ``raddr`` (In, one per read port) and ``rdata`` (Out, the word ``READ_LATENCY`` = 2 cycles
    after its address); ``waddr``, ``wdata``, ``we`` (In: written at the end of the next cycle). A read of
    a word in the cycle it is written is undefined (see ``synth.rtlil_text``); ``write_taps`` (the
    address and enable of the write landing this cycle) lets the simulation check that none happens.
    """

    def __init__(self, width: int, depth: int, init: Sequence[int], reads: int, bank_words: int | None = None):
        self.width, self.depth = width, max(1, depth)
        bw = self.depth if bank_words is None or bank_words >= self.depth else bank_words
        if bw & (bw - 1) and bw != self.depth:
            raise ValueError(f"bank_words must be a power of two, got {bank_words}")
        self.bank_words = bw
        self.n_banks = -(-self.depth // bw)
        self.aw = max(1, (self.depth - 1).bit_length())
        self.lo = max(1, (bw - 1).bit_length()) if self.n_banks > 1 else self.aw
        init = list(init) + [0] * (self.n_banks * bw - len(init))
        self.banks = [memory.Memory(shape=signed(width), depth=bw, init=init[i * bw:(i + 1) * bw])
                      for i in range(self.n_banks)]
        self._reads = [[bank.read_port() for bank in self.banks] for _ in range(reads)]
        self._writes = [bank.write_port() for bank in self.banks]
        self.write_taps = SimpleNamespace(addr=Signal(unsigned(self.aw), name="w_addr_full"), en=Signal(name="w_en"))
        super().__init__({"raddr": In(unsigned(self.aw)).array(reads), "rdata": Out(signed(width)).array(reads),
                          "waddr": In(unsigned(self.aw)), "wdata": In(signed(width)), "we": In(1)})

    def locate(self, addr: int) -> tuple[int, int]:
        """``(bank, word in the bank)`` of address ``addr``."""
        return divmod(int(addr), self.bank_words)

    def read_ports(self) -> list:
        """Every block-RAM read port, with the read port of this memory it serves: ``[(port, r), …]``."""
        return [(p, r) for r, ports in enumerate(self._reads) for p in ports]

    def elaborate(self, platform) -> Module:
        m = Module()
        for i, bank in enumerate(self.banks):
            m.submodules[f"bank{i}"] = bank
        nb, lo = self.n_banks, self.lo
        for r, ports in enumerate(self._reads):
            regs = [Signal(signed(self.width), name=f"r{r}_bank{i}") for i in range(nb)]
            for port, reg in zip(ports, regs):
                m.d.comb += port.addr.eq(self.raddr[r][:lo])
                m.d.sync += reg.eq(port.data)
            if nb == 1:
                m.d.comb += self.rdata[r].eq(regs[0])
                continue
            sel1 = Signal(range(nb), name=f"r{r}_sel1")
            sel2 = Signal(range(nb), name=f"r{r}_sel2")
            m.d.sync += [sel1.eq(self.raddr[r][lo:]), sel2.eq(sel1)]
            with m.Switch(sel2):
                for i, reg in enumerate(regs):
                    with (m.Case(i) if i < nb - 1 else m.Default()):
                        m.d.comb += self.rdata[r].eq(reg)
        addr, data = Signal(lo, name="w_addr"), Signal(signed(self.width), name="w_data")
        m.d.sync += [addr.eq(self.waddr[:lo]), data.eq(self.wdata), self.write_taps.addr.eq(self.waddr),
                     self.write_taps.en.eq(self.we)]
        for i, port in enumerate(self._writes):
            en = Signal(name=f"w_en{i}")
            m.d.sync += en.eq(self.we & ((self.waddr[lo:] == i) if nb > 1 else 1))
            m.d.comb += [port.addr.eq(addr), port.data.eq(data), port.en.eq(en)]
        return m
