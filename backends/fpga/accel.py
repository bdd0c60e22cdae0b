"""The accelerator: a sequencer with ``lib.stream`` interfaces for batches and results.

::

    batch ──stream──► [RECV: write x, then y, into their regions] ──► [RUN: sequencer] ──► [SEND] ──stream──► result

* ``batch`` (In, ``stream.Signature(signed(W))``): the words of the batch in
  row-major order. For a training step these are ``x`` followed by
  ``y``; for predict, just ``x``.
* ``result`` (Out, ``stream.Signature(signed(W))``): the program's streamed
  outputs after each run, in row-major order. For predict these are the
  predictions. A training step sends nothing: its parameters stay in
  on-chip memory (write-back), and the host port reads them when wanted.
* ``busy``, ``overflow``, and the sequencer's host memory port, which
  loads parameters once and reads them back.
"""
from amaranth import Module, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .sequencer import Sequencer
from .microcode import Microcode

__all__ = ["Accelerator"]


class Accelerator(wiring.Component):
    """Streams batches in and results out around a :class:`~.sequencer.Sequencer`."""

    def __init__(self, mc: Microcode, batch_inputs: list[int], streamed_outputs: list[int], read_ports: int = 2):
        self.seq = Sequencer(mc, read_ports)
        self.in_addrs = [int(a) for i in batch_inputs for a in mc.inputs[i].addresses().reshape(-1)]
        self.out_addrs = [int(a) for i in streamed_outputs for a in mc.outputs[i].addresses().reshape(-1)]
        W = mc.dtype.width
        depth = self.seq.depth
        super().__init__({
            "batch": In(stream.Signature(signed(W))),
            "result": Out(stream.Signature(signed(W))),
            "busy": Out(1), "overflow": Out(1),
            "host_addr": In(range(depth)), "host_wdata": In(signed(W)), "host_we": In(1),
            "host_rdata": Out(signed(W)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.seq = seq = self.seq
        n_in, n_out = len(self.in_addrs), len(self.out_addrs)
        count = Signal(range(max(n_in, n_out) + 2))
        addr = Signal.like(seq.host_addr)
        m.d.comb += self.overflow.eq(seq.overflow)
        with m.Switch(count):                              # address ROMs of the batch and result regions
            for i, a in enumerate(self.in_addrs):
                with m.Case(i):
                    m.d.comb += addr.eq(a)
        out_addr = Signal.like(seq.host_addr)
        with m.Switch(count):
            for i, a in enumerate(self.out_addrs):
                with m.Case(i):
                    m.d.comb += out_addr.eq(a)
        latency = seq.host_latency
        pending = Signal(range(latency + 1))               # cycles the read of result[count] has been on its way
        with m.FSM():
            with m.State("RECV"):
                m.d.comb += [seq.host_addr.eq(self.host_addr), seq.host_wdata.eq(self.host_wdata),
                             seq.host_we.eq(self.host_we), self.host_rdata.eq(seq.host_rdata),
                             self.batch.ready.eq(1)]
                with m.If(self.batch.valid):
                    m.d.comb += [seq.host_addr.eq(addr), seq.host_wdata.eq(self.batch.payload), seq.host_we.eq(1)]
                    with m.If(count == n_in - 1):
                        m.d.sync += count.eq(0)
                        m.next = "START"
                    with m.Else():
                        m.d.sync += count.eq(count + 1)
            with m.State("START"):
                m.d.comb += [seq.start.eq(1), self.busy.eq(1)]
                m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                with m.If(seq.done):
                    m.next = "SEND" if n_out else "RECV"
            with m.State("SEND"):
                m.d.comb += [self.busy.eq(1), seq.host_addr.eq(out_addr)]
                m.d.comb += [self.result.payload.eq(seq.host_rdata), self.result.valid.eq(pending == latency)]
                with m.If(pending != latency):
                    m.d.sync += pending.eq(pending + 1)    # the read of result[count] is on its way
                with m.Elif(self.result.ready):
                    m.d.sync += pending.eq(0)
                    with m.If(count == n_out - 1):
                        m.d.sync += count.eq(0)
                        m.next = "RECV"
                    with m.Else():
                        m.d.sync += count.eq(count + 1)
        return m
