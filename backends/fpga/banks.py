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
path in one register in the fabric, which the placer puts by its block (the datapath registers have no
reset, :data:`.config.DATA`, so nothing stops it); the multiplexer's long wires then have a cycle of their
own, from those registers to the operand registers. (The ECP5 block's own output register is not used: a
``DP16KD`` with ``REGMODE_B = "OUTREG"`` moved the long wire into the multiplexer's cycle, 95.5 MHz against
104.9 on the 784-32-10 step, nextpnr seed 1.) A write is registered too (``WRITE_LATENCY``): the word,
the address and each bank's enable (its high address bits) are registers, so no multiplexer or decoder
sits before a block RAM's write port. Each bank is a whole block (``bank_words`` words: 256 on iCE40, 1024
on ECP5), so the banks map one-to-one onto block RAMs; a memory of one bank (``bank_words=None``, what the
simulation uses) has no multiplexer.
"""
from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .config import DATA
from .isa import SPRAM_WORDS
from .spram import SinglePortRAM

__all__ = ["BankedMemory"]


class BankedMemory(wiring.Component):
    """``depth`` signed ``width``-bit words in banks of ``bank_words``, with ``reads`` read ports.

    Ports: ``raddr`` (In, one per read port) and ``rdata`` (Out, the word ``READ_LATENCY`` = 2 cycles
    after its address); ``waddr``, ``wdata``, ``we`` (In: written at the end of the next cycle). A read of
    a word in the cycle it is written is undefined (see ``synth.rtlil_text``); ``write_taps`` (the
    address and enable of the write landing this cycle) lets the simulation check that none happens.

    With ``spram_blocks``, the top ``spram_blocks × SPRAM_WORDS`` addresses are single-port RAM blocks
    (:class:`~.spram.SinglePortRAM`) and block RAM holds the first ``ram_words``: a block's address is the
    write's when one lands in it, else read port 0's when it reads there, else port 1's; its word is
    registered beside it like a bank's, with the same latency.

    ``cells``: the device family whose primitives synthesis instantiates (``None``: the Amaranth model, what
    the simulation runs): any family builds the SPRAM blocks as ``SB_SPRAM256KA`` (only the UP5K has them).
    The banks are Amaranth memories, which yosys maps to block RAM (or LUT RAM, :func:`.devices.in_lutram`).
    """

    def __init__(self, width: int, depth: int, init: Sequence[int], reads: int, bank_words: int | None = None,
                 ram_words: int | None = None, spram_blocks: int = 0, cells: str | None = None):
        self.width, self.depth = width, max(1, depth)
        self.ram_words = max(1, self.depth if ram_words is None else ram_words)
        bw = self.ram_words if bank_words is None or bank_words >= self.ram_words else bank_words
        if bw & (bw - 1) and bw != self.ram_words:
            raise ValueError(f"bank_words must be a power of two, got {bank_words}")
        self.bank_words = bw
        self.n_banks = -(-self.ram_words // bw)
        self.aw = max(1, (self.depth - 1).bit_length())
        self.lo = max(1, (bw - 1).bit_length()) if self.n_banks > 1 else self.aw
        init = list(init) + [0] * (self.n_banks * bw - len(init))
        self.banks = [memory.Memory(shape=signed(width), depth=bw, init=init[i * bw:(i + 1) * bw])
                      for i in range(self.n_banks)]
        self.spram_base = self.depth - spram_blocks * SPRAM_WORDS
        self.sprams = [SinglePortRAM(width, cells is not None) for _ in range(spram_blocks)]
        self._reads = [[bank.read_port() for bank in self.banks] for _ in range(reads)]
        self._writes = [bank.write_port() for bank in self.banks]
        self.write_taps = SimpleNamespace(addr=Signal(unsigned(self.aw), name="w_addr_full"), en=Signal(name="w_en"))
        super().__init__({"raddr": In(unsigned(self.aw)).array(reads), "rdata": Out(signed(width)).array(reads),
                          "waddr": In(unsigned(self.aw)), "wdata": In(signed(width)), "we": In(1)})

    def locate(self, addr: int):
        """The simulation's storage of address ``addr``: ``(memory data, word)``."""
        addr = int(addr)
        if addr >= self.spram_base and self.sprams:
            j, word = divmod(addr - self.spram_base, SPRAM_WORDS)
            return self.sprams[j].data, word
        bank, word = divmod(addr, self.bank_words)
        return self.banks[bank].data, word

    def read_ports(self) -> list:
        """Every block-RAM read port, with the read port of this memory it serves: ``[(port, r), …]``."""
        return [(p, r) for r, ports in enumerate(self._reads) for p in ports]

    def elaborate(self, platform) -> Module:
        m = Module()
        for i, bank in enumerate(self.banks):
            m.submodules[f"bank{i}"] = bank
        nb, lo, ns = self.n_banks, self.lo, len(self.sprams)
        top = self.spram_base >> 14                # an SPRAM address's bits 14 and up: top + its block
        sp_regs = self._spram(m, top) if ns else []
        addr, data = Signal(lo, name="w_addr", **DATA), Signal(signed(self.width), name="w_data", **DATA)
        w_en = [Signal(name=f"w_en{i}") for i in range(nb)]
        for r, ports in enumerate(self._reads):
            regs = [Signal(signed(self.width), name=f"r{r}_bank{i}", **DATA) for i in range(nb)]
            for port, reg in zip(ports, regs):
                m.d.comb += port.addr.eq(self.raddr[r][:lo])
                m.d.sync += reg.eq(port.data)
            if nb == 1 and not ns:
                m.d.comb += self.rdata[r].eq(regs[0])
                continue
            sel1 = Signal(range(nb), name=f"r{r}_sel1", **DATA)
            sel2 = Signal(range(nb), name=f"r{r}_sel2", **DATA)
            m.d.sync += [sel1.eq(self.raddr[r][lo:] if nb > 1 else 0), sel2.eq(sel1)]
            chosen = Signal(signed(self.width), name=f"r{r}_bram")
            with m.Switch(sel2):
                for i, reg in enumerate(regs):
                    with (m.Case(i) if i < nb - 1 else m.Default()):
                        m.d.comb += chosen.eq(reg)
            if not ns:
                m.d.comb += self.rdata[r].eq(chosen)
                continue
            sp1 = Signal(range(ns + 1), name=f"r{r}_sp1")        # 0: block RAM, j + 1: SPRAM block j
            sp2 = Signal(range(ns + 1), name=f"r{r}_sp2")
            hi = self.raddr[r][14:]
            m.d.sync += [sp1.eq(0), sp2.eq(sp1)]
            for j in range(ns):
                with m.If(hi == top + j):
                    m.d.sync += sp1.eq(j + 1)
            with m.Switch(sp2):
                with m.Case(0):
                    m.d.comb += self.rdata[r].eq(chosen)
                for j, reg in enumerate(sp_regs):
                    with m.Case(j + 1):
                        m.d.comb += self.rdata[r].eq(reg)
        m.d.sync += [addr.eq(self.waddr[:lo]), data.eq(self.wdata), self.write_taps.addr.eq(self.waddr),
                     self.write_taps.en.eq(self.we)]
        in_ram = (self.waddr[14:] < top) if ns else 1
        for i, en in enumerate(w_en):
            m.d.sync += en.eq(self.we & ((self.waddr[lo:] == i) if nb > 1 else in_ram))
        for port, en in zip(self._writes, w_en):
            m.d.comb += [port.addr.eq(addr), port.data.eq(data), port.en.eq(en)]
        return m

    def _spram(self, m: Module, top: int) -> list[Signal]:
        """Wire the SPRAM blocks (their writes registered as the banks' are); their output registers."""
        w_addr, w_data = Signal(14, name="w_addr_sp"), Signal(signed(self.width), name="w_data_sp")
        m.d.sync += [w_addr.eq(self.waddr[:14]), w_data.eq(self.wdata)]
        regs = []
        for j, sp in enumerate(self.sprams):
            m.submodules[f"spram{j}"] = sp
            en = Signal(name=f"w_en_sp{j}")
            m.d.sync += en.eq(self.we & (self.waddr[14:] == top + j))
            read = self.raddr[0][:14]
            for r in range(1, len(self._reads)):
                read = Mux(self.raddr[0][14:] == top + j, self.raddr[0][:14], self.raddr[r][:14])
            m.d.comb += [sp.addr.eq(Mux(en, w_addr, read)), sp.wdata.eq(w_data), sp.we.eq(en)]
            reg = Signal(signed(self.width), name=f"sp{j}")
            m.d.sync += reg.eq(sp.rdata)
            regs.append(reg)
        return regs
