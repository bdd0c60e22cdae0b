"""The sequencer: an Amaranth component that runs a :class:`~.microcode.Microcode`.

::

    control: FSM, issue, one-port operand fetch (this module)
      │ pc            │ load, advance             │ load, step                      │ who writes
      ▼               ▼                           ▼                                 ▼
    decode ─fields─► address gen. ─addresses─► memory ─a, b─► lanes, accumulate ─► range check ─► writeback ─► memory
    (.decode)        (.addrgen)              (.banks)      │  (.mac)              (.writeback)   (.writeback)
                                                           └─a, b─► divider (.divider) ──result──────┘

One (output element, k) pair is issued per cycle (``macs`` k values at once with ``macs`` lanes). Issue
drives the read addresses; the words come back ``READ_LATENCY`` (2) cycles later through a register per
block RAM, are registered as the lanes' operands, multiplied (or go through an elementwise unit; the exp
pipelined units take their kind's ``latency`` more), accumulated exactly, and on the last ``k`` rescaled, range-checked and
written. Every micro-op drains its pipeline before the next one reads, so the cycle count is exactly
:func:`~.timing.cycles`.

Timing: every stage starts and ends in a register. Issue is enabled by a register (``run``), every
loop test reads a register (``k_last``, ``i0_last``, ``i1_last``: set from down-counters), the fields
are decoded from ``pc`` in two registered stages well before the load and the running micro-op's kind
is held in registers through its drain, the block RAMs' outputs are registered beside them, the multipliers have
registered inputs and outputs, and the accumulator adds plain registers.

Ports:
* ``start`` (In): pulse high for one cycle to run the program.
* ``busy``, ``done`` (Out).
* ``overflow`` (Out): sticky; ``fault`` holds the pc of the first overflowing micro-op.
* host memory port, usable while idle: ``host_addr``, ``host_wdata``, ``host_we``, ``host_rdata``
  (``host_rdata`` is the word ``READ_LATENCY`` cycles after its address; do not read and write in the
  same cycle: see ``synth.rtlil_text``).

Every micro-op kind (:class:`~.kinds.Kind`) is built, on the unit its row of :data:`~.kinds.FACTS` names:
``mac`` (with or without ``b``), ``max`` and ``argmax`` reduce over ``k``; ``add``, ``neg``, ``heaviside``,
``eq``, ``log`` and ``copy`` are combinational units between two registers, ``exp``, ``sigmoid`` and ``tanh``
are pipelined (their ``latency``) and ``divf``, ``div`` and ``sqrt`` run on a sequential restoring divider.
A micro-op of any other kind cannot be made (``MicroOp`` refuses it).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from amaranth import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .addrgen import AddressGen
from .banks import BankedMemory
from .config import SeqConfig
from .decode import Decoder
from .divider import SeqDivider
from .mac import MacPipeline
from .microcode import Microcode
from .writeback import RangeCheck, Writeback

from .kinds import KIND_CODES, Kind
from .timing import DRAIN_MAX, READ_LATENCY, const_b, cycles, div_bits, sqrt_bits  # noqa: F401

__all__ = ["Sequencer", "cycles", "div_bits", "sqrt_bits", "READ_LATENCY"]


def _config(mc: Microcode, read_ports: int, macs: int) -> SeqConfig:
    """The static parameters every piece of the sequencer sizes itself by."""
    return SeqConfig(dt=mc.dtype, depth=max(1, mc.depth), n_ops=len(mc.ops), lanes=macs, one_port=read_ports == 1,
                     kmax=max([u.K for u in mc.ops] + [1]),
                     nmax=max([int(np.prod(u.out.shape, dtype=np.int64)) for u in mc.ops] + [1]),
                     used=frozenset(u.kind for u in mc.ops), codes=KIND_CODES, div_bits=div_bits(mc),
                     sqrt_bits=sqrt_bits(mc), rom_bram=mc.spram_blocks > 0)


class _Shared:
    """The pieces and the registers that the controller's states share."""

    def __init__(self, cfg: SeqConfig, dec: Decoder, agen: AddressGen, mac: MacPipeline, div: SeqDivider | None,
                 wb: Writeback, data_a):
        self.cfg, self.dec, self.agen, self.mac, self.div, self.wb, self.data_a = cfg, dec, agen, mac, div, wb, data_a
        self.fields = dec.fields
        self.pc = Signal(range(cfg.n_ops + 1), name="pc")
        self.last_op = Signal(name="last_op")
        self.run = Signal(name="run")                # the controller is in RUN: issue's enable, a register
        self.load = Signal(name="load")              # … in LOAD: the address generator's load
        self.issue = Signal(name="issue")            # a pair is issued this cycle (run, and b's phase with one port)
        self.drain = Signal(range(DRAIN_MAX + 1), name="drain")          # drain cycles left after this one
        self.adv_pc = Signal(name="adv_pc")          # the drain's first cycle: pc moves on
        self.v1 = Signal(name="v1")                  # a pair was issued last cycle (see MacPipeline.valid)
        self.ph = Signal(name="ph")                  # one port, two operands: 1 while b is being read
        self.ph0 = [Signal(name=f"ph0_d{i + 1}") for i in range(READ_LATENCY)]    # … a was read i + 1 cycles ago
        self.a_hold = Signal(signed(cfg.W), name="a_hold")       # … and a, as it arrived
        self.b_const = Signal(signed(cfg.W), name="b_const")     # one port: the constant b, read at load
        self.div_out = Signal(range(cfg.depth), name="div_out")  # where the divider writes
        self.div_last = Signal(name="div_last")      # the divider's element is the micro-op's last
        # the running micro-op, held from its load to the end of its drain (the fields move on with pc)
        self.op_kind = Signal(range(len(cfg.codes)), name="op_kind")
        self.op_pc = Signal(range(cfg.n_ops + 1), name="op_pc")
        self.op_rescale, self.op_has_b = Signal(name="op_rescale"), Signal(name="op_has_b")
        self.op_tp, self.op_cb = Signal(name="op_two_phase"), Signal(name="op_const_b")
        self.op_drain = Signal(range(DRAIN_MAX + 1), name="op_drain")


class Sequencer(wiring.Component):
    """Runs ``mc`` on ``macs`` MAC lanes (see the module docstring for the ports and timing).

    ``bank_words``: words per memory bank (one block RAM each; ``synth`` passes the target's); ``None``
    keeps each copy of the memory in one bank. Results and cycles do not depend on it. ``spram_cells``:
    the program's SPRAM blocks (``mc.spram_blocks``) as ``SB_SPRAM256KA`` instances (synthesis) rather than
    their model (simulation).
    """

    def __init__(self, mc: Microcode, read_ports: int = 2, macs: int = 1, bank_words: int | None = None,
                 spram_cells: bool = False):
        if read_ports not in (1, 2):
            raise ValueError(f"read_ports must be 1 or 2, got {read_ports}")
        if macs < 1 or (macs > 1 and read_ports != 2):
            raise ValueError(f"macs must be ≥ 1, and macs > 1 needs read_ports=2 (got macs={macs}, "
                             f"read_ports={read_ports})")
        if mc.spram_blocks and macs > 1:
            raise ValueError(f"a program with SPRAM runs on one MAC lane (its blocks have one port), got macs={macs}")
        self.read_ports, self.macs = read_ports, macs
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
        # with several lanes, one copy of the memory per read port (written together), which maps each
        # onto plain one-write/one-read block RAM without yosys replicating a 2L-port memory
        copies, reads = (1, read_ports) if macs == 1 else (2 * macs, 1)
        self.mems = [BankedMemory(self.W, self.depth, init, reads, bank_words, mc.ram_words, mc.spram_blocks, spram_cells)
                     for _ in range(copies)]
        self.mem = self.mems[0]

    def poke(self, ctx, addr: int, value: int) -> None:
        """Set a memory word in simulation (every copy)."""
        for mem in self.mems:
            data, word = mem.locate(addr)
            ctx.set(data[word], int(value))

    def peek(self, ctx, addr: int) -> int:
        """A memory word in simulation."""
        data, word = self.mem.locate(addr)
        return ctx.get(data[word])

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg = _config(self.mc, self.read_ports, self.macs)
        lanes, wr = self._memory_ports(m)
        (addr_a, data_a), port_b = lanes[0]
        m.submodules.decode = dec = Decoder(self.mc, cfg, [const_b(u) for u in self.mc.ops])
        m.submodules.addrgen = agen = AddressGen(cfg)
        m.submodules.mac = mac = MacPipeline(cfg)
        m.submodules.check = check = RangeCheck(cfg)
        m.submodules.writeback = wb = Writeback(cfg)
        div = None
        if cfg.has_div:
            m.submodules.divider = div = SeqDivider(cfg)
        s = _Shared(cfg, dec, agen, mac, div, wb, data_a)
        fl, codes = s.fields, cfg.codes
        wiring.connect(m, dec.fields, agen.fields)
        m.d.comb += dec.pc.eq(s.pc)
        if cfg.has_max:
            m.d.comb += agen.one_lane.eq(cfg.decodes(fl.kind, lambda f: f.one_lane))
        with m.If(agen.load):                       # hold the micro-op's kind until its drain ends
            m.d.sync += [s.op_kind.eq(fl.kind), s.op_pc.eq(s.pc), s.op_rescale.eq(fl.rescale),
                         s.op_has_b.eq(fl.has_b), s.op_tp.eq(fl.two_phase), s.op_cb.eq(fl.const_b),
                         s.op_drain.eq(fl.drain)]

        m.d.sync += [s.adv_pc.eq(0), s.load.eq(0)]   # (set by the controller on its way into DRAIN, LOAD)
        m.d.comb += agen.load.eq(s.load)
        fsm = self._control(m, s)
        with m.If(s.adv_pc):
            with m.If(s.pc == cfg.n_ops - 1):
                m.d.sync += s.last_op.eq(1)
            with m.Else():
                m.d.sync += s.pc.eq(s.pc + 1)
        idle = fsm.ongoing("IDLE")
        m.d.comb += [self.busy.eq(~idle), self.host_rdata.eq(data_a)]
        self._issue(m, s)
        loading = s.load if cfg.one_port else 0                        # with two ports a load reads nothing
        self._collision_taps(m, lanes, wr, agen, reading=loading | fsm.ongoing("RUN"),
                             reading_b=fsm.ongoing("RUN") & fl.has_b)
        # lane 0's a port is shared with the host while idle (and reads the constant b at load with one port);
        # every other read port reads in every state: a read has no side effect
        if cfg.one_port:
            m.d.comb += addr_a.eq(Mux(idle, self.host_addr, Mux(s.load, fl.b.base,
                                                                Mux(fl.two_phase & s.ph, agen.ptr_b, agen.ptr_a))))
        else:
            m.d.comb += addr_a.eq(Mux(idle, self.host_addr, agen.ptr_a))
            for lane, ((ra, _), (rb, _)) in enumerate(lanes):
                if lane:
                    m.d.comb += ra.eq(agen.lane_a[lane])
                m.d.comb += rb.eq(agen.lane_b[lane])

        # the operands of lane 0: with one read port, a (two-phase) or b (a constant) come from a register
        a_in, b_in = Signal(signed(cfg.W), name="a_in"), Signal(signed(cfg.W), name="b_in")
        if cfg.one_port:
            with m.If(s.ph0[-1]):                   # the a of a two-phase pair arrives, its b a cycle later
                m.d.sync += s.a_hold.eq(data_a)
            m.d.comb += [a_in.eq(Mux(s.op_tp, s.a_hold, data_a)), b_in.eq(Mux(s.op_cb, s.b_const, data_a))]
        else:
            m.d.comb += [a_in.eq(data_a), b_in.eq(port_b[1])]
        m.d.comb += [mac.valid.eq(s.v1), mac.k.eq(agen.k), mac.a.eq(a_in), mac.b.eq(b_in),
                     mac.kind.eq(s.op_kind), mac.rescale.eq(s.op_rescale), mac.has_b.eq(s.op_has_b),
                     mac.pc.eq(s.op_pc)]
        for lane, ((_, da), (_, db)) in enumerate(lanes[1:]):
            m.d.comb += [mac.lane_a[lane].eq(da), mac.lane_b[lane].eq(db)]
        if div is not None:
            m.d.comb += [div.a.eq(mac.op_a), div.b.eq(mac.op_b)]     # registered: the load's negation starts there
            if Kind.SQRT in cfg.used:
                m.d.comb += div.is_sqrt.eq(s.op_kind == codes[Kind.SQRT])
            if Kind.DIV in cfg.used:
                m.d.comb += div.is_rdiv.eq(s.op_kind == codes[Kind.DIV])

        m.d.comb += [check.acc.eq(mac.out_acc), check.ew.eq(mac.out_ew), check.reduce.eq(mac.out_reduce),
                     check.rescale.eq(mac.out_rescale), check.is_max.eq(mac.out_max), check.valid.eq(mac.out_valid),
                     check.pc.eq(mac.out_pc)]
        self._writeback(m, s, check, wr)
        return m

    def _memory_ports(self, m: Module) -> tuple[list, SimpleNamespace]:
        """Add the memories: ``([((addr a, data a), (addr b, data b)) per lane], write port)`` (``(addr b,
        data b)`` is None with one port). Every copy of the memory is written from one write port."""
        for i, mem in enumerate(self.mems):
            m.submodules[f"mem{i}" if i else "mem"] = mem
        if self.macs == 1:
            a = (self.mem.raddr[0], self.mem.rdata[0])
            lanes = [(a, None if self.read_ports == 1 else (self.mem.raddr[1], self.mem.rdata[1]))]
        else:
            ports = [(mem.raddr[0], mem.rdata[0]) for mem in self.mems]
            lanes = [(ports[2 * i], ports[2 * i + 1]) for i in range(self.macs)]
        wr = SimpleNamespace(addr=Signal.like(self.mem.waddr, name="wr_addr"),
                             data=Signal.like(self.mem.wdata, name="wr_data"), en=Signal(name="wr_en"))
        for mem in self.mems:
            m.d.comb += [mem.waddr.eq(wr.addr), mem.wdata.eq(wr.data), mem.we.eq(wr.en)]
        return lanes, wr

    def _collision_taps(self, m: Module, lanes: list, wr: SimpleNamespace, agen: AddressGen, reading,
                        reading_b) -> None:
        """Set ``self.ports`` for the simulation's collision check (synth declares same-cycle read/write
        undefined): ``([(read port, its data is used), …], the write landing this cycle)``, each a namespace
        with its ``addr`` (and ``en``). ``reading``: the states whose reads are used; ``reading_b``: … and read ``b``;
        a lane's read is used while it is live."""
        port_used = [Signal(name=f"used{i}") for i in range(2 * self.macs)]
        live = agen.live
        for lane in range(self.macs):
            m.d.comb += [port_used[2 * lane].eq(reading & (live[lane] if lane else 1)),
                         port_used[2 * lane + 1].eq(reading_b & live[lane])]
        self.ports = ([(SimpleNamespace(addr=p[0]), port_used[2 * lane + i]) for lane, ports in enumerate(lanes)
                       for i, p in enumerate(ports) if p is not None], self.mem.write_taps)

    def _goto(self, m: Module, s: _Shared, state: str) -> None:
        """Next state ``state``; ``run`` and ``load`` are registers that say the controller is in RUN or LOAD
        (so no state decode sits on the address generator's enables). Every transition into or out of RUN
        goes through here; ``load`` is cleared every cycle unless set here."""
        m.next = state
        m.d.sync += s.run.eq(int(state == "RUN"))
        if state == "LOAD":
            m.d.sync += s.load.eq(1)

    def _to_drain(self, m: Module, s: _Shared) -> None:
        """The micro-op's last pair is issued (or its divider's last element written): drain, and move ``pc``
        on in the drain's first cycle (from the register ``adv_pc``, so no state decode sits on ``pc``'s
        enable) so that the next micro-op's fields are decoded by its load."""
        self._goto(m, s, "DRAIN")
        m.d.sync += [s.drain.eq(s.op_drain), s.adv_pc.eq(1)]

    def _control(self, m: Module, s: _Shared):
        """The controller: one FSM that loads each micro-op, issues its pairs, runs the divider and drains.

        ::

            IDLE ─start─► BEGIN ─► LOAD ─► (LOADB0 ─► LOADB1) ─► RUN ⟲ a pair per cycle (two with one port, two operands)
                                    ▲                             │ └─ divider element: DIV_WAIT ─► DIV_LOAD ─►
                                    │                             │    DIV_ITER | SQRT_ITER ⟲ ─► DIV_ROUND ─► DIV_WRITE ─► RUN (or DRAIN)
                                    │                             ▼ last pair (pc + 1)
                                    └──────── next op ◄──── DRAIN ⟲ (the micro-op's decoded drain)
                                                              │ last op
                                                              ▼
                                                  IDLE ◄─ DONE ◄─ CHECK

        ``LOADB0``, ``LOADB1`` read a constant ``b`` once (one read port only); ``CHECK`` waits for the range
        check of the last write (``CHECK_LATENCY``), so that ``overflow`` is final when ``done`` rises; ``pc`` rests at 0 while idle, so
        op 0's fields (``DECODE_LATENCY`` cycles after ``pc``) are ready by its load. Returns the FSM.
        """
        cfg, fl, agen = s.cfg, s.fields, s.agen
        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += s.wb.host.eq(1)
                with m.If(self.start):
                    m.d.comb += s.wb.clear.eq(1)
                    m.d.sync += [s.pc.eq(0), self.done.eq(0), s.last_op.eq(0)]
                    m.next = "BEGIN" if cfg.n_ops else "DONE"
            with m.State("BEGIN"):                              # the decoded fields of op 0 settle
                self._goto(m, s, "LOAD")
            with m.State("LOAD"):
                m.d.sync += s.ph.eq(0)
                if cfg.one_port:
                    with m.If(fl.const_b):                      # the constant operand is being read
                        m.next = "LOADB0"
                    with m.Else():
                        self._goto(m, s, "RUN")
                else:
                    self._goto(m, s, "RUN")
            if cfg.one_port:
                with m.State("LOADB0"):
                    m.next = "LOADB1"
                with m.State("LOADB1"):
                    m.d.sync += s.b_const.eq(s.data_a)
                    self._goto(m, s, "RUN")
            with m.State("RUN"):
                with m.If(s.issue):
                    if cfg.has_div:
                        with m.If(self._is_div(s)):          # a divider element (the last one too)
                            self._goto(m, s, "DIV_WAIT")
                        with m.Elif(agen.last):
                            self._to_drain(m, s)
                    else:
                        with m.If(agen.last):
                            self._to_drain(m, s)
            if s.div is not None:
                self._divider_states(m, s)
            with m.State("DRAIN"):
                m.d.sync += s.drain.eq(s.drain - 1)
                with m.If(s.drain == 0):
                    with m.If(s.last_op):
                        m.next = "CHECK"
                    with m.Else():
                        self._goto(m, s, "LOAD")
            with m.State("CHECK"):                             # the range check of the last write lands
                m.next = "DONE"
            with m.State("DONE"):
                m.d.sync += [self.done.eq(1), s.pc.eq(0)]           # op 0's fields are decoded while idle
                m.next = "IDLE"
        return fsm

    def _is_div(self, s: _Shared):
        """The running micro-op is the sequential unit's (a decoded field: valid while it issues)."""
        cfg = s.cfg
        return s.fields.sequential if cfg.has_div else 0

    def _issue(self, m: Module, s: _Shared) -> None:
        """Issue one (element, k) pair whenever ``run`` allows: its metadata goes to the MAC pipeline (the
        cycle after issue), the address generator steps on; a divider element's address is kept."""
        cfg, fl, agen, mac = s.cfg, s.fields, s.agen, s.mac
        issue = s.issue
        m.d.comb += issue.eq(s.run & (~fl.two_phase | s.ph) if cfg.one_port else s.run)
        m.d.comb += agen.advance.eq(issue)
        m.d.sync += [s.v1.eq(issue & ~self._is_div(s)), mac.mask.eq(agen.live), mac.last.eq(agen.k_last),
                     mac.first.eq(agen.k_first), mac.addr.eq(agen.out_addr)]
        with m.If(issue):
            m.d.sync += [s.div_out.eq(agen.out_addr), s.div_last.eq(agen.i1_last & agen.i0_last)]
        if cfg.one_port:
            with m.If(s.run & fl.two_phase):               # phase 0 reads a, phase 1 reads b and issues
                m.d.sync += s.ph.eq(~s.ph)
            m.d.sync += [s.ph0[0].eq(s.run & fl.two_phase & ~s.ph)] + [
                nxt.eq(prev) for prev, nxt in zip(s.ph0, s.ph0[1:])]

    def _divider_states(self, m: Module, s: _Shared) -> None:
        """The states that run the sequential divider on one element: wait for the read, load, a bit per
        cycle, write."""
        div, has_sqrt = s.div, Kind.SQRT in s.cfg.used
        with m.State("DIV_WAIT"):                       # the operands reach the operand registers
            m.next = "DIV_WAIT1"                        # READ_LATENCY + 1 cycles after issue
        with m.State("DIV_WAIT1"):
            m.next = "DIV_LOAD"
        with m.State("DIV_LOAD"):
            m.d.comb += div.load.eq(1)
            m.next = "SQRT_ITER" if has_sqrt else "DIV_ITER"
            if has_sqrt:
                with m.If(~div.is_sqrt):
                    m.next = "DIV_ITER"
        with m.State("DIV_ITER"):
            m.d.comb += div.step_div.eq(1)
            with m.If(div.last):
                m.next = "DIV_ROUND"
        if has_sqrt:
            with m.State("SQRT_ITER"):
                m.d.comb += div.step_sqrt.eq(1)
                with m.If(div.last):
                    m.next = "DIV_ROUND"
        with m.State("DIV_ROUND"):                      # the rounding's comparison is registered
            m.d.comb += div.round.eq(1)
            m.next = "DIV_WRITE"
        with m.State("DIV_WRITE"):
            m.d.comb += s.wb.div_write.eq(1)
            with m.If(s.div_last):
                self._to_drain(m, s)
            with m.Else():
                self._goto(m, s, "RUN")

    def _writeback(self, m: Module, s: _Shared, check: RangeCheck, wr: SimpleNamespace) -> None:
        """Connect the writeback: the host, the divider and the pipeline share the write port."""
        wb, mac = s.wb, s.mac
        m.d.comb += [wb.host_addr.eq(self.host_addr), wb.host_wdata.eq(self.host_wdata), wb.host_we.eq(self.host_we),
                     wb.div_addr.eq(s.div_out), wb.pc.eq(s.pc),
                     wb.valid.eq(mac.out_valid), wb.addr.eq(mac.out_addr), wb.data.eq(mac.out_value[:s.cfg.W]),
                     wb.bad.eq(check.bad), wb.data_pc.eq(check.bad_pc),
                     wr.addr.eq(wb.wr_addr), wr.data.eq(wb.wr_data), wr.en.eq(wb.wr_en),
                     self.overflow.eq(wb.overflow), self.fault.eq(wb.fault)]
        if s.div is not None:
            m.d.comb += [wb.div_data.eq(s.div.result), wb.div_bad.eq(s.div.bad)]
