"""The sequencer: an Amaranth component that runs a :class:`~.microcode.Microcode`.

::

    control: FSM, issue, one-port operand fetch (this module)
      │ pc            │ load, advance             │ load, step                      │ who writes
      ▼               ▼                           ▼                                 ▼
    decode ─fields─► address gen. ─addresses─► memory ─a, b─► lanes, accumulate ─► range check ─► writeback ─► memory
    (.decode)        (.addrgen)              (lib.memory)  │  (.mac)              (.writeback)   (.writeback)
                                                           └─a, b─► divider (.divider) ──result──────┘

One (output element, k) pair is issued per cycle (``macs`` k values at once
with ``macs`` lanes). Issue drives the read addresses; the data comes back
one cycle later and goes through the product or the elementwise unit (``D``
more stages when the exp unit is built). It is then accumulated exactly, and
on the last ``k`` rescaled, range-checked and written. Every micro-op drains
its pipeline before the next one reads, so the cycle count is exactly
:func:`~.timing.cycles`.

Timing: every loop test reads a register (``k_last``, ``i0_last``,
``i1_last``, ``k_left``), the per-op fields are decoded from ``pc`` into
registers one cycle ahead, and the accumulator adds plain registers (the
seed is chosen after the adder), so each carry chain stays in one piece.

Ports:
* ``start`` (In): pulse high for one cycle to run the program.
* ``busy``, ``done`` (Out).
* ``overflow`` (Out): sticky; ``fault`` holds the pc of the first overflowing micro-op.
* host memory port, usable while idle: ``host_addr``, ``host_wdata``, ``host_we``, ``host_rdata``
  (do not read and write in the same cycle: see ``synth.rtlil_text``).

Every micro-op kind is built: ``mac`` (with or without ``b``) and ``max``
reduce over ``k``; ``add``, ``neg``, ``heaviside``, ``sigmoid`` and ``tanh``
are combinational units, ``exp`` is pipelined and ``divf`` is a sequential
restoring divider. :func:`check_supported` rejects unknown kinds before any
simulation or synthesis starts.
"""
from __future__ import annotations

import numpy as np
from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .addrgen import AddressGen
from .config import SeqConfig
from .decode import Decoder
from .divider import SeqDivider
from .mac import MacPipeline
from .microcode import Microcode
from .writeback import RangeCheck, Writeback

__all__ = ["Sequencer", "cycles", "div_bits", "sqrt_bits", "check_supported", "HW_KINDS"]

from .timing import (HW_KINDS, KIND_CODES, SEQUENTIAL, const_b, check_supported, cycles, div_bits,  # noqa: F401
                     ew_stages, sqrt_bits)


def _config(mc: Microcode, read_ports: int, macs: int) -> SeqConfig:
    """The static parameters every piece of the sequencer sizes itself by."""
    return SeqConfig(dt=mc.dtype, depth=max(1, mc.depth), n_ops=len(mc.ops), lanes=macs, one_port=read_ports == 1,
                     ew_stages=ew_stages(mc), kmax=max([u.K for u in mc.ops] + [1]),
                     nmax=max([int(np.prod(u.out.shape, dtype=np.int64)) for u in mc.ops] + [1]),
                     used=frozenset(u.kind for u in mc.ops), codes=KIND_CODES, div_bits=div_bits(mc),
                     sqrt_bits=sqrt_bits(mc))


class _Shared:
    """The pieces and the registers that the controller's states share."""

    def __init__(self, cfg: SeqConfig, dec: Decoder, agen: AddressGen, mac: MacPipeline, div: SeqDivider | None,
                 wb: Writeback, rd_a: memory.ReadPort):
        self.cfg, self.dec, self.agen, self.mac, self.div, self.wb, self.rd_a = cfg, dec, agen, mac, div, wb, rd_a
        self.fields = dec.fields
        self.pc = Signal(range(cfg.n_ops + 1), name="pc")
        self.last_op = Signal(name="last_op")
        self.v1 = Signal(name="v1")                  # a pair is in stage 1 (see MacPipeline.valid)
        self.ph = Signal(name="ph")                  # one port, two operands: 1 while b is being read
        self.a_hold = Signal(signed(cfg.W), name="a_hold")       # … and a, read the cycle before
        self.b_const = Signal(signed(cfg.W), name="b_const")     # one port: the constant b, read at load
        self.tp1 = Signal(name="tp1")                # stage 1 of a two-phase pair: a comes from a_hold
        self.cb1 = Signal(name="cb1")                # stage 1 with a constant b: b comes from b_const
        self.div_out = Signal(range(cfg.depth), name="div_out")  # where the divider writes
        self.div_last = Signal(name="div_last")      # the divider's element is the micro-op's last


class Sequencer(wiring.Component):
    """Runs ``mc`` on one MAC unit (see the module docstring for the ports and timing)."""

    def __init__(self, mc: Microcode, read_ports: int = 2, macs: int = 1):
        if read_ports not in (1, 2):
            raise ValueError(f"read_ports must be 1 or 2, got {read_ports}")
        if macs < 1 or (macs > 1 and read_ports != 2):
            raise ValueError(f"macs must be ≥ 1, and macs > 1 needs read_ports=2 (got macs={macs}, "
                             f"read_ports={read_ports})")
        self.read_ports, self.macs = read_ports, macs
        try:
            check_supported(mc)
        except NotImplementedError:
            self._MustUse__silence = True      # never elaborated: no "unused" warning
            raise
        self.mc = mc
        self.W = mc.dtype.width
        self.depth = max(1, mc.depth)
        n = len(mc.ops)
        super().__init__({
            "start": In(1), "busy": Out(1), "done": Out(1), "overflow": Out(1), "fault": Out(range(n + 1)),
            "host_addr": In(range(self.depth)), "host_wdata": In(signed(self.W)), "host_we": In(1),
            "host_rdata": Out(signed(self.W)),
        })
        init = [0] * self.depth
        for addr, val in mc.init.items():
            init[addr] = val
        # one read port per memory beyond the first lane: lanes get explicit copies (written together),
        # which maps each onto plain one-write/one-read block RAM without yosys replicating a 2L-port memory
        copies = 1 if macs == 1 else 2 * macs
        self.mems = [memory.Memory(shape=signed(self.W), depth=self.depth, init=init) for _ in range(copies)]
        self.mem = self.mems[0]

    def poke(self, ctx, addr: int, value: int) -> None:
        """Set a memory word in simulation (every copy)."""
        for mem in self.mems:
            ctx.set(mem.data[int(addr)], int(value))

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg = _config(self.mc, self.read_ports, self.macs)
        lanes, wr = self._memory_ports(m)
        rd_a, rd_b = lanes[0]
        m.submodules.decode = dec = Decoder(self.mc, cfg, [const_b(u) for u in self.mc.ops])
        m.submodules.addrgen = agen = AddressGen(cfg)
        m.submodules.mac = mac = MacPipeline(cfg)
        m.submodules.check = check = RangeCheck(cfg)
        m.submodules.writeback = wb = Writeback(cfg)
        div = None
        if cfg.has_div:
            m.submodules.divider = div = SeqDivider(cfg)
        s = _Shared(cfg, dec, agen, mac, div, wb, rd_a)
        kind, codes = s.fields.kind, cfg.codes
        wiring.connect(m, dec.fields, agen.fields)
        m.d.comb += dec.pc.eq(s.pc)
        if cfg.has_max:
            m.d.comb += agen.one_lane.eq((kind == codes["max"]) | (kind == codes["argmax"]))

        fsm = self._control(m, s)

        idle = fsm.ongoing("IDLE")
        m.d.comb += self.busy.eq(~idle)
        self._collision_taps(m, lanes, wr, agen, reading=fsm.ongoing("LOAD") | fsm.ongoing("RUN"),
                             reading_b=fsm.ongoing("RUN") & s.fields.has_b)
        # every read port but rd_a (which the host shares while idle) reads in every state: a read has no
        # side effect, and no state multiplexer then sits on those addresses
        if not cfg.one_port:
            for lane, (ra, rb) in enumerate(lanes):
                if lane:
                    m.d.comb += ra.addr.eq(agen.lane_a[lane])
                m.d.comb += rb.addr.eq(agen.lane_b[lane])

        # the operands of lane 0: with one read port, a (two-phase) or b (a constant) come from a register
        a_in, b_in = Signal(signed(cfg.W), name="a_in"), Signal(signed(cfg.W), name="b_in")
        if cfg.one_port:
            m.d.comb += [a_in.eq(Mux(s.tp1, s.a_hold, rd_a.data)), b_in.eq(Mux(s.cb1, s.b_const, rd_a.data))]
        else:
            m.d.comb += [a_in.eq(rd_a.data), b_in.eq(rd_b.data)]
        m.d.comb += [mac.valid.eq(s.v1 & ~idle), mac.k.eq(agen.k), mac.a.eq(a_in), mac.b.eq(b_in)]
        for lane, (ra, rb) in enumerate(lanes[1:]):
            m.d.comb += [mac.lane_a[lane].eq(ra.data), mac.lane_b[lane].eq(rb.data)]
        if div is not None:
            m.d.comb += [div.a.eq(a_in), div.b.eq(b_in)]
            if "sqrt" in cfg.used:
                m.d.comb += div.is_sqrt.eq(kind == codes["sqrt"])
            if "div" in cfg.used:
                m.d.comb += div.is_rdiv.eq(kind == codes["div"])

        m.d.comb += [check.acc.eq(mac.out_acc), check.ew.eq(mac.out_ew), check.reduce.eq(mac.out_reduce),
                     check.rescale.eq(mac.out_rescale), check.is_max.eq(mac.out_max)]
        self._writeback(m, s, check, wr)
        return m

    def _memory_ports(self, m: Module) -> tuple[list, memory.WritePort]:
        """Add the memories; ``([(read a, read b) per lane], write port)`` (``read b`` is None with one
        port). Every copy of the memory is written with the first copy's write port."""
        for i, mem in enumerate(self.mems):
            m.submodules[f"mem{i}" if i else "mem"] = mem
        if self.macs == 1:
            lanes = [(self.mem.read_port(), None if self.read_ports == 1 else self.mem.read_port())]
        else:
            ports = [mem.read_port() for mem in self.mems]
            lanes = [(ports[2 * i], ports[2 * i + 1]) for i in range(self.macs)]
        writes = [mem.write_port() for mem in self.mems]
        wr = writes[0]
        for other in writes[1:]:
            m.d.comb += [other.addr.eq(wr.addr), other.data.eq(wr.data), other.en.eq(wr.en)]
        return lanes, wr

    def _collision_taps(self, m: Module, lanes: list, wr: memory.WritePort, agen: AddressGen, reading,
                        reading_b) -> None:
        """Set ``self.ports`` for the simulation's collision check (synth declares same-cycle read/write
        undefined): ``([(read port, its data is used), …], write port)``. ``reading``: the states whose
        reads are used; ``reading_b``: … and read ``b``; a lane's read is used while it is live."""
        port_used = [Signal(name=f"used{i}") for i in range(2 * self.macs)]
        live = agen.live
        for lane in range(self.macs):
            m.d.comb += [port_used[2 * lane].eq(reading & (live[lane] if lane else 1)),
                         port_used[2 * lane + 1].eq(reading_b & live[lane])]
        self.ports = ([(p, port_used[2 * lane + i]) for lane, ports in enumerate(lanes) for i, p in enumerate(ports)
                       if p is not None], wr)

    def _control(self, m: Module, s: _Shared):
        """The controller: one FSM that loads each micro-op, issues its pairs, runs the divider and drains.

        ::

            IDLE ─start─► BEGIN ─► LOAD ─► (LOADB) ─► RUN ⟲ a pair per cycle (two with one port, two operands)
                                    ▲                  │ └─ divider element: DIV_LOAD ─► DIV_ITER | SQRT_ITER ⟲
                                    │                  │                     ─► DIV_WRITE ─► RUN (or DRAIN1)
                                    │                  ▼ last pair
                                    └── next op ◄─ DRAIN3 ◄─ (DRAIN_EW0 … 3) ◄─ DRAIN2 ◄─ DRAIN1 (pc + 1)
                                                     │ last op
                                                     ▼
                                         IDLE ◄─ DONE

        ``LOADB`` reads a constant ``b`` once (one read port only); ``BEGIN`` lets the fields of op 0 settle,
        and ``DRAIN1`` advances ``pc``, so the next op's fields are ready by its ``LOAD``. Returns the FSM.
        """
        cfg, fl, rd_a, agen = s.cfg, s.fields, s.rd_a, s.agen
        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += [rd_a.addr.eq(self.host_addr), self.host_rdata.eq(rd_a.data), s.wb.host.eq(1)]
                with m.If(self.start):
                    m.d.comb += s.wb.clear.eq(1)
                    m.d.sync += [s.pc.eq(0), self.done.eq(0), s.last_op.eq(0)]
                    m.next = "BEGIN" if cfg.n_ops else "DONE"
            with m.State("BEGIN"):                              # the decoded fields of op 0 settle
                m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += agen.load.eq(1)
                m.d.sync += s.ph.eq(0)
                if cfg.one_port:
                    m.d.comb += rd_a.addr.eq(fl.b.base)         # the constant operand, if any
                    with m.If(fl.const_b):
                        m.next = "LOADB"
                    with m.Else():
                        m.next = "RUN"
                else:
                    m.next = "RUN"
            with m.State("LOADB"):
                m.d.sync += s.b_const.eq(rd_a.data)
                m.next = "RUN"
            with m.State("RUN"):
                if cfg.one_port:
                    m.d.comb += rd_a.addr.eq(Mux(fl.two_phase & s.ph, agen.ptr_b, agen.ptr_a))
                else:
                    m.d.comb += rd_a.addr.eq(agen.ptr_a)
                with m.If(fl.two_phase & ~s.ph):                # phase 0: a is being read
                    m.d.sync += [s.ph.eq(1), s.v1.eq(0)]
                with m.Else():
                    self._issue(m, s)
            if s.div is not None:
                self._divider_states(m, s)
            with m.State("DRAIN1"):
                m.d.sync += s.v1.eq(0)
                with m.If(s.pc == cfg.n_ops - 1):
                    m.d.sync += s.last_op.eq(1)
                with m.Else():
                    m.d.sync += s.pc.eq(s.pc + 1)
                m.next = "DRAIN2"
            D = cfg.ew_stages
            with m.State("DRAIN2"):
                m.next = "DRAIN_EW0" if D else "DRAIN3"
            for i in range(D):                                  # the pipelined elementwise stages drain too
                with m.State(f"DRAIN_EW{i}"):
                    m.next = f"DRAIN_EW{i + 1}" if i + 1 < D else "DRAIN3"
            with m.State("DRAIN3"):
                with m.If(s.last_op):
                    m.next = "DONE"
                with m.Else():
                    m.next = "LOAD"
            with m.State("DONE"):
                m.d.sync += [self.done.eq(1), s.v1.eq(0)]
                m.next = "IDLE"
        return fsm

    def _issue(self, m: Module, s: _Shared) -> None:
        """Issue one (element, k) pair: its metadata goes to stage 1 (the MAC's inputs), the address
        generator steps on; the micro-op's last pair drains, a divider element starts the divider."""
        cfg, fl, agen, mac = s.cfg, s.fields, s.agen, s.mac
        codes, used = cfg.codes, cfg.used
        is_div = Cat(*[fl.kind == codes[x] for x in sorted(SEQUENTIAL & used)]).any() if cfg.has_div else 0
        m.d.sync += mac.mask.eq(agen.live)
        m.d.sync += [s.v1.eq(~is_div), mac.last.eq(agen.k_last), mac.first.eq(agen.k == 0), mac.addr.eq(agen.out_addr),
                     mac.kind.eq(fl.kind), mac.rescale.eq(fl.rescale), mac.has_b.eq(fl.has_b), mac.pc.eq(s.pc),
                     s.div_out.eq(agen.out_addr), s.div_last.eq(agen.i1_last & agen.i0_last)]
        m.d.comb += agen.advance.eq(1)
        with m.If(agen.last):
            m.next = "DRAIN1"
        m.d.sync += [s.tp1.eq(fl.two_phase), s.cb1.eq(fl.const_b)]
        with m.If(fl.two_phase):                              # phase 1: b is being read, a arrived
            m.d.sync += [s.ph.eq(0), s.a_hold.eq(s.rd_a.data)]
        if cfg.has_div:
            with m.If(is_div):
                m.next = "DIV_LOAD"

    def _divider_states(self, m: Module, s: _Shared) -> None:
        """The states that run the sequential divider on one element: load, a bit per cycle, write."""
        div, has_sqrt = s.div, "sqrt" in s.cfg.used
        with m.State("DIV_LOAD"):
            m.d.comb += div.load.eq(1)
            m.next = "SQRT_ITER" if has_sqrt else "DIV_ITER"
            if has_sqrt:
                with m.If(~div.is_sqrt):
                    m.next = "DIV_ITER"
        with m.State("DIV_ITER"):
            m.d.comb += div.step_div.eq(1)
            with m.If(div.last):
                m.next = "DIV_WRITE"
        if has_sqrt:
            with m.State("SQRT_ITER"):
                m.d.comb += div.step_sqrt.eq(1)
                with m.If(div.last):
                    m.next = "DIV_WRITE"
        with m.State("DIV_WRITE"):
            m.d.comb += s.wb.div_write.eq(1)
            with m.If(s.div_last):
                m.next = "DRAIN1"
            with m.Else():
                m.next = "RUN"

    def _writeback(self, m: Module, s: _Shared, check: RangeCheck, wr: memory.WritePort) -> None:
        """Connect the writeback: the host, the divider and the pipeline share the write port."""
        wb, mac = s.wb, s.mac
        m.d.comb += [wb.host_addr.eq(self.host_addr), wb.host_wdata.eq(self.host_wdata), wb.host_we.eq(self.host_we),
                     wb.div_addr.eq(s.div_out), wb.pc.eq(s.pc),
                     wb.valid.eq(mac.out_valid), wb.addr.eq(mac.out_addr), wb.data.eq(mac.out_value[:s.cfg.W]),
                     wb.bad.eq(check.bad), wb.data_pc.eq(mac.out_pc),
                     wr.addr.eq(wb.wr_addr), wr.data.eq(wb.wr_data), wr.en.eq(wb.wr_en),
                     self.overflow.eq(wb.overflow), self.fault.eq(wb.fault)]
        if s.div is not None:
            m.d.comb += [wb.div_data.eq(s.div.result), wb.div_bad.eq(s.div.bad)]
