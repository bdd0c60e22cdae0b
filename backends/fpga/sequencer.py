"""The sequencer: an Amaranth component that runs a :class:`~.microcode.Microcode`.

::

    control: FSM, issue, one-port operand fetch (this module)
      │ pc            │ load, advance             │ load, step                      │ who writes
      ▼               ▼                           ▼                                 ▼
    decode ─fields─► address gen. ─addresses─► memory ─a, b─► lanes, accumulate ─► range check ─► writeback ─► memory
    (.decode)        (.addrgen)              (.banks)      │  (.mac)              (.writeback)   (.writeback)
                                                           └─a, b─► divider (.divider) ──result──────┘

One (output element, k) pair is issued per cycle (a group of up to ``macs`` elements with ``macs`` lanes, each
lane a pipeline, range check, writeback and divider of its own on the interleaved memory, its addresses
``LANE_LATENCY`` cycles after issue: ``_lanes``). Issue
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
  (``host_rdata`` is the word ``host_latency`` cycles after its address, which is held meanwhile:
  ``READ_LATENCY``, with lanes ``interleave.HOST_LATENCY``; do not read and write in the same cycle: see
  ``synth.rtlil_text``).

Every micro-op kind (:class:`~.kinds.Kind`) is built, on the unit its row of :data:`~.kinds.FACTS` names:
``mac`` (with or without ``b``), ``max`` and ``argmax`` reduce over ``k``; ``add``, ``neg``, ``heaviside``,
``eq``, ``log`` and ``copy`` are combinational units between two registers, ``exp``, ``sigmoid`` and ``tanh``
are pipelined (their ``latency``) and ``divf``, ``div`` and ``sqrt`` run on a sequential restoring divider.
A micro-op of any other kind cannot be made (``MicroOp`` refuses it).
"""
from __future__ import annotations

from dataclasses import replace
from functools import reduce
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
from .interleave import HOST_LATENCY, InterleavedMemory
from .mac import MacPipeline, delay
from .microcode import Microcode
from .writeback import RangeCheck, Writeback

from .kinds import KIND_CODES, Kind, lane_zero
from .timing import DRAIN_MAX, LANE_LATENCY, READ_LATENCY, const_b, cycles, div_bits, sqrt_bits  # noqa: F401

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
        self.clear = Signal(name="clear")            # BEGIN: the lanes' overflow flags clear (registered: they
                                                     # are spread over the chip, and no write lands before RUN)
        self.v1 = Signal(name="v1")                  # a pair was issued last cycle (see MacPipeline.valid)
        self.ph = Signal(name="ph")                  # one port, two operands: 1 while b is being read
        self.ph0 = [Signal(name=f"ph0_d{i + 1}") for i in range(READ_LATENCY)]    # … a was read i + 1 cycles ago
        self.a_hold = Signal(signed(cfg.W), name="a_hold")       # … and a, as it arrived
        self.b_const = Signal(signed(cfg.W), name="b_const")     # one port: the constant b, read at load
        self.div_out = Signal(range(cfg.depth), name="div_out")  # where the divider writes (one lane)
        self.wb_addr: list = []                      # … each lane's divider
        self.last1, self.first1 = Signal(name="last1"), Signal(name="first1")    # several lanes: issue's k_last, k_first
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
    keeps each copy of the memory in one bank. Results and cycles do not depend on it. ``cells``: the device
    family whose primitives synthesis instantiates, with the timing of the model they replace (``None``: the
    Amaranth models, what the simulation runs): SPRAM blocks as ``SB_SPRAM256KA``; for ``"ecp5"``, the
    lanes' products as ``MULT18X18D`` with their own registers (:class:`~.mac.MacPipeline`).
    """

    def __init__(self, mc: Microcode, read_ports: int = 2, macs: int = 1, bank_words: int | None = None,
                 cells: str | None = None):
        if read_ports not in (1, 2):
            raise ValueError(f"read_ports must be 1 or 2, got {read_ports}")
        if macs < 1 or (macs > 1 and read_ports != 2):
            raise ValueError(f"macs must be ≥ 1, and macs > 1 needs read_ports=2 (got macs={macs}, "
                             f"read_ports={read_ports})")
        if mc.spram_blocks and macs > 1:
            raise ValueError(f"a program with SPRAM runs on one MAC lane (its blocks have one port), got macs={macs}")
        self.read_ports, self.macs, self.cells = read_ports, macs, cells
        self.host_latency = READ_LATENCY if macs == 1 else HOST_LATENCY
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
        # with several lanes, one memory interleaved across banks that the lanes share (``interleave``)
        if macs == 1:
            self.mem = BankedMemory(self.W, self.depth, init, read_ports, bank_words, mc.ram_words, mc.spram_blocks,
                                    cells)
        else:
            self.mem = InterleavedMemory(self.W, self.depth, init, macs, bank_words, cells)
        self.mems = [self.mem]

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
        L = cfg.lanes
        lane_cfg = replace(cfg, lanes=1)                 # each lane's pipeline, check, writeback and divider
        # … lanes past 0 without the units that take DSP blocks (those kinds run on lane 0: timing.lane_plan)
        other_cfg = replace(lane_cfg, used=frozenset(k for k in cfg.used if not lane_zero(k)))
        m.submodules.mem = self.mem
        m.submodules.decode = dec = Decoder(self.mc, cfg, [const_b(u) for u in self.mc.ops])
        m.submodules.addrgen = agen = AddressGen(cfg)
        macs, checks, wbs, divs = [], [], [], []
        for lane in range(L):
            sfx = str(lane) if L > 1 else ""
            m.submodules[f"mac{sfx}"] = mac = MacPipeline(other_cfg if lane else lane_cfg, registered_product=L > 1,
                                                            dsp_cells=self.cells == "ecp5")
            m.submodules[f"check{sfx}"] = check = RangeCheck(lane_cfg)
            m.submodules[f"writeback{sfx}"] = wb = Writeback(lane_cfg)
            macs.append(mac), checks.append(check), wbs.append(wb)
            if cfg.has_div:
                m.submodules[f"divider{sfx}"] = div = SeqDivider(lane_cfg)
                divs.append(div)
        data_a = self.mem.rdata[0] if L == 1 else self.mem.a_data[0]
        s = _Shared(cfg, dec, agen, macs[0], divs[0] if divs else None, wbs[0], data_a)
        fl, codes = s.fields, cfg.codes
        wiring.connect(m, dec.fields, agen.fields)
        m.d.comb += dec.pc.eq(s.pc)
        with m.If(agen.load):                       # hold the micro-op's kind until its drain ends
            m.d.sync += [s.op_kind.eq(fl.kind), s.op_pc.eq(s.pc), s.op_rescale.eq(fl.rescale),
                         s.op_has_b.eq(fl.has_b), s.op_tp.eq(fl.two_phase), s.op_cb.eq(fl.const_b),
                         s.op_drain.eq(fl.drain)]

        m.d.sync += [s.adv_pc.eq(0), s.load.eq(0), s.clear.eq(0)]   # (set by the controller on its way into
        m.d.comb += s.wb.clear.eq(s.clear)                               #  DRAIN, LOAD, BEGIN)
        m.d.comb += agen.load.eq(s.load)
        fsm = self._control(m, s)
        with m.If(s.adv_pc):
            with m.If(s.pc == cfg.n_ops - 1):
                m.d.sync += s.last_op.eq(1)
            with m.Else():
                m.d.sync += s.pc.eq(s.pc + 1)
        idle = fsm.ongoing("IDLE")
        m.d.comb += self.busy.eq(~idle)
        self._issue(m, s)
        if L == 1:
            self._one_lane(m, s, fsm, idle)
        else:
            self._lanes(m, s, idle, macs, wbs, divs)
        for mac in macs:
            m.d.comb += [mac.kind.eq(s.op_kind), mac.rescale.eq(s.op_rescale), mac.has_b.eq(s.op_has_b),
                         mac.pc.eq(s.op_pc)]
        for mac, div in zip(macs, divs):
            m.d.comb += [div.a.eq(mac.op_a), div.b.eq(mac.op_b)]     # registered: the load's negation starts there
            if Kind.SQRT in cfg.used:
                m.d.comb += div.is_sqrt.eq(s.op_kind == codes[Kind.SQRT])
            if Kind.DIV in cfg.used:
                m.d.comb += div.is_rdiv.eq(s.op_kind == codes[Kind.DIV])
        for lane, (mac, check, wb) in enumerate(zip(macs, checks, wbs)):
            m.d.comb += [check.acc.eq(mac.out_acc), check.ew.eq(mac.out_ew), check.reduce.eq(mac.out_reduce),
                         check.rescale.eq(mac.out_rescale), check.is_max.eq(mac.out_max),
                         check.valid.eq(mac.out_valid), check.pc.eq(mac.out_pc)]
            self._writeback(m, s, lane, mac, check, wb, divs[lane] if divs else None)
        self._flags(m, wbs)
        return m

    def _one_lane(self, m: Module, s: _Shared, fsm, idle) -> None:
        """One lane: its read ports straight from the address generator (port a from the host while idle)."""
        cfg, fl, agen, mac = s.cfg, s.fields, s.agen, s.mac
        mem = self.mem
        addr_a, data_a = mem.raddr[0], mem.rdata[0]
        m.d.comb += self.host_rdata.eq(data_a)
        loading = s.load if cfg.one_port else 0                        # with two ports a load reads nothing
        reading, reading_b = loading | fsm.ongoing("RUN"), fsm.ongoing("RUN") & fl.has_b
        # synth declares same-cycle read/write undefined: the simulation checks these taps
        reads = [(SimpleNamespace(addr=addr_a), reading)]
        if cfg.one_port:
            m.d.comb += addr_a.eq(Mux(idle, self.host_addr, Mux(s.load, fl.b.base,
                                                                Mux(fl.two_phase & s.ph, agen.ptr_b, agen.ptr_a))))
        else:
            m.d.comb += [addr_a.eq(Mux(idle, self.host_addr, agen.ptr_a)), mem.raddr[1].eq(agen.ptr_b)]
            reads.append((SimpleNamespace(addr=mem.raddr[1]), reading_b))
        self.ports = (reads, mem.write_taps)

        # the operands: with one read port, a (two-phase) or b (a constant) come from a register
        a_in, b_in = Signal(signed(cfg.W), name="a_in"), Signal(signed(cfg.W), name="b_in")
        if cfg.one_port:
            with m.If(s.ph0[-1]):                   # the a of a two-phase pair arrives, its b a cycle later
                m.d.sync += s.a_hold.eq(data_a)
            m.d.comb += [a_in.eq(Mux(s.op_tp, s.a_hold, data_a)), b_in.eq(Mux(s.op_cb, s.b_const, data_a))]
        else:
            m.d.comb += [a_in.eq(data_a), b_in.eq(mem.rdata[1])]
        m.d.comb += [mac.valid.eq(s.v1), mac.k.eq(agen.k), mac.a.eq(a_in), mac.b.eq(b_in)]
        m.d.sync += [mac.last.eq(agen.k_last), mac.first.eq(agen.k_first), mac.addr.eq(agen.out_addr)]
        with m.If(s.issue):
            m.d.sync += s.div_out.eq(agen.out_addr)
        s.wb_addr = [s.div_out]
        m.d.comb += [mem.waddr.eq(s.wb.wr_addr), mem.wdata.eq(s.wb.wr_data), mem.we.eq(s.wb.wr_en)]

    def _lanes(self, m: Module, s: _Shared, idle, macs: list, wbs: list, divs: list) -> None:
        """Several lanes on the interleaved memory, which registers each lane's addresses (``LANE_LATENCY``), so
        the metadata waits a cycle more; each lane writes its own results and runs its own divider in step with
        lane 0's (whose controls the FSM drives)."""
        agen, mem = s.agen, self.mem
        # the host's port is the banks' address while idle: registered, as it reaches every bank (the first read
        # of a run reaches the banks cycles after the run leaves IDLE)
        m.d.sync += mem.host.eq(idle)
        m.d.comb += [mem.host_addr.eq(self.host_addr), self.host_rdata.eq(mem.host_data)]

        # the metadata waits LANE_LATENCY cycles more than with one lane, the issued k as long
        v, last, first = delay(m, {"v_l": s.v1, "last_l": s.last1, "first_l": s.first1}, LANE_LATENCY)
        k = delay(m, {"k_l": agen.k}, LANE_LATENCY)[0]
        s.wb_addr = []
        for lane, mac in enumerate(macs):
            used = Signal(name=f"used{lane}")
            m.d.comb += [used.eq(s.issue & agen.live[lane]),
                         mem.a_addr[lane].eq(agen.lane_a[lane]), mem.b_addr[lane].eq(agen.lane_b[lane]),
                         mem.a_used[lane].eq(used), mem.b_used[lane].eq(used & s.op_has_b)]
            # the lane's element travels with its metadata: registered at issue, then as long as it
            addr, live = delay(m, {f"out{lane}_": agen.lane_o[lane], f"live{lane}_": agen.live[lane]}, 1 + LANE_LATENCY)
            m.d.comb += [mac.valid.eq(v & live), mac.last.eq(last), mac.first.eq(first), mac.addr.eq(addr),
                         mac.k.eq(k), mac.a.eq(mem.a_data[lane]), mac.b.eq(mem.b_data[lane])]
            wb = wbs[lane]
            m.d.comb += [mem.w_addr[lane].eq(wb.wr_addr), mem.w_data[lane].eq(wb.wr_data), mem.w_en[lane].eq(wb.wr_en)]
            # the divider's element: where it goes and whether this lane computes one
            out, live = Signal.like(agen.lane_o[lane], name=f"div_out{lane}"), Signal(name=f"div_live{lane}")
            with m.If(s.issue):
                m.d.sync += [out.eq(agen.lane_o[lane]), live.eq(agen.live[lane])]
            s.wb_addr.append(out)
            if lane:
                m.d.comb += [wb.clear.eq(wbs[0].clear), wb.div_write.eq(wbs[0].div_write & live)]
        for div in divs[1:]:
            m.d.comb += [div.load.eq(divs[0].load), div.step_div.eq(divs[0].step_div),
                         div.step_sqrt.eq(divs[0].step_sqrt), div.round.eq(divs[0].round)]
        self.ports = (mem.read_taps, mem.write_taps)       # (the memory's registered reads: filled as it elaborates)

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
                with m.If(self.start):                          # (pc is 0 here: DONE and reset leave it so)
                    m.d.sync += [s.clear.eq(1), self.done.eq(0), s.last_op.eq(0)]
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
        cfg, fl, agen = s.cfg, s.fields, s.agen
        issue = s.issue
        m.d.comb += issue.eq(s.run & (~fl.two_phase | s.ph) if cfg.one_port else s.run)
        m.d.comb += agen.advance.eq(issue)
        m.d.sync += s.v1.eq(issue & ~self._is_div(s))
        if cfg.lanes > 1:
            m.d.sync += [s.last1.eq(agen.k_last), s.first1.eq(agen.k_first)]
        with m.If(issue):
            m.d.sync += s.div_last.eq(agen.i1_last & agen.i0_last)
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
        waits = [f"DIV_WAIT{2 + i}" for i in range(LANE_LATENCY if s.cfg.lanes > 1 else 0)]
        for state, nxt in zip(["DIV_WAIT1"] + waits, waits + ["DIV_LOAD"]):
            with m.State(state):                        # … and LANE_LATENCY more with several lanes
                m.next = nxt
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

    def _writeback(self, m: Module, s: _Shared, lane: int, mac: MacPipeline, check: RangeCheck, wb: Writeback,
                   div: SeqDivider | None) -> None:
        """Connect lane ``lane``'s writeback: the host (lane 0), its divider and its pipeline share its write port."""
        m.d.comb += [wb.div_addr.eq(s.wb_addr[lane]), wb.pc.eq(s.pc),
                     wb.valid.eq(mac.out_valid), wb.addr.eq(mac.out_addr), wb.data.eq(mac.out_value[:s.cfg.W]),
                     wb.bad.eq(check.bad), wb.data_pc.eq(check.bad_pc)]
        if lane == 0:
            m.d.comb += [wb.host_addr.eq(self.host_addr), wb.host_wdata.eq(self.host_wdata), wb.host_we.eq(self.host_we)]
        if div is not None:
            m.d.comb += [wb.div_data.eq(div.result), wb.div_bad.eq(div.bad)]

    def _flags(self, m: Module, wbs: list) -> None:
        """``overflow``: any lane's; ``fault``: the first micro-op that overflowed (the least pc of the lanes that did)."""
        m.d.comb += self.overflow.eq(reduce(lambda a, b: a | b, [wb.overflow for wb in wbs]))
        fault = [(wb.overflow, wb.fault) for wb in wbs]
        while len(fault) > 1:
            nxt = []
            for (o1, f1), (o2, f2) in zip(fault[::2], fault[1::2]):
                take2 = o2 & (~o1 | (f2 < f1))
                nxt.append((o1 | o2, Mux(take2, f2, f1)))
            fault = nxt + ([fault[-1]] if len(fault) % 2 else [])
        m.d.comb += self.fault.eq(fault[0][1])
