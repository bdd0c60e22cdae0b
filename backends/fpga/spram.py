"""One block of single-port RAM: the iCE40 UP5K's ``SB_SPRAM256KA`` (16K × 16 bits), or its model.

::

    addr, wdata, we ──► SB_SPRAM256KA × ⌈width/16⌉ ──► rdata      (one access a cycle: a read or a write)

A read's word is on ``rdata`` the cycle after its address (the block's output register). A write cycle
leaves ``rdata`` undefined (yosys' ``cells_sim.v`` sets it to x): the model holds the last word read,
and the sequencer never uses it (``simulate(..., check_collisions=True)`` checks). The contents are
undefined at power-up and have no initial values, so only what the host or the program writes is read.
"""
from __future__ import annotations

from amaranth import ClockSignal, Const, Instance, Module, Signal, signed, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .isa import SPRAM_WIDTH, SPRAM_WORDS, spram_cells

__all__ = ["SinglePortRAM"]


class SinglePortRAM(wiring.Component):
    """``SPRAM_WORDS`` signed ``width``-bit words with one port.

    Ports: ``addr`` (In), ``wdata``, ``we`` (In: written at the end of the cycle), ``rdata`` (Out: the word
    addressed in the previous cycle, unless that cycle wrote). ``cells=True`` instantiates
    ``SB_SPRAM256KA`` (synthesis for the iCE40 UP5K); ``False`` builds its model from an Amaranth memory
    (simulation; ``data`` is that memory's contents).
    """

    def __init__(self, width: int, cells: bool = False):
        self.width, self.cells = width, cells
        self.memory = None if cells else memory.Memory(shape=signed(width), depth=SPRAM_WORDS, init=[])
        super().__init__({"addr": In(unsigned(14)), "wdata": In(signed(width)), "we": In(1),
                          "rdata": Out(signed(width))})

    @property
    def data(self):
        """The model's words (simulation only)."""
        return self.memory.data

    def elaborate(self, platform) -> Module:
        m = Module()
        if not self.cells:
            m.submodules.memory = self.memory
            rd, wr = self.memory.read_port(), self.memory.write_port()
            m.d.comb += [rd.addr.eq(self.addr), rd.en.eq(~self.we), self.rdata.eq(rd.data),
                         wr.addr.eq(self.addr), wr.data.eq(self.wdata), wr.en.eq(self.we)]
            return m
        n = spram_cells(self.width)
        wide_in = Signal(n * SPRAM_WIDTH)
        wide_out = Signal(n * SPRAM_WIDTH)
        m.d.comb += [wide_in.eq(self.wdata), self.rdata.eq(wide_out[:self.width])]
        for i in range(n):
            bits = slice(i * SPRAM_WIDTH, (i + 1) * SPRAM_WIDTH)
            m.submodules[f"spram{i}"] = Instance(
                "SB_SPRAM256KA", i_ADDRESS=self.addr, i_DATAIN=wide_in[bits], i_MASKWREN=Const(0b1111, 4),
                i_WREN=self.we, i_CHIPSELECT=Const(1, 1), i_CLOCK=ClockSignal(), i_STANDBY=Const(0, 1),
                i_SLEEP=Const(0, 1), i_POWEROFF=Const(1, 1), o_DATAOUT=wide_out[bits])
        return m
