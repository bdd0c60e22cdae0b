"""The sequencer: an Amaranth component that runs a :class:`~.microcode.Microcode`.

::

          ┌──────────── program (one micro-op per pc, as constants) ───────────┐
          │  loop counters o0, o1, k  ──► address generators  a, b, out        │
          ▼                                                                     │
    ┌───────────┐ read A ┌──────────────────────────────┐  write   ┌──────────┐ │
    │  data     ├───────►│ stage 1: MAC (a·b, Σ_k),     ├─────────►│  data    │ │
    │  memory   │ read B │ rescale, elementwise unit,   │          │  memory  │ │
    │ lib.memory├───────►│ range check → overflow flag  │          │          │ │
    └───────────┘        └──────────────────────────────┘          └──────────┘ │

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
from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .microcode import Microcode, View
from .units import ELEMENTWISE, EW_WIDTH, elementwise, exp_unit, outside

__all__ = ["Sequencer", "cycles", "div_bits", "sqrt_bits", "check_supported", "HW_KINDS"]

from .timing import (HW_KINDS, _KIND, SEQUENTIAL, _const_b, check_supported, cycles, div_bits,  # noqa: F401
                     ew_stages, sqrt_bits)


def _2d(v: View) -> tuple[int, int, int, int, int, int]:
    """``(base, n0, n1, s0, s1, kstride)`` with the view padded or folded to two dimensions."""
    shape, strides = list(v.shape), list(v.strides)
    while len(shape) < 2:
        shape.insert(0, 1)
        strides.insert(0, 0)
    while len(shape) > 2:                      # fold leading axes when they nest
        n0, n1 = shape[0], shape[1]
        s0, s1 = strides[0], strides[1]
        if n0 != 1 and s0 != s1 * n1:
            raise NotImplementedError(f"view {v} does not fold to two dimensions")
        shape[:2] = [n0 * n1]
        strides[:2] = [s1 if n1 != 1 else s0]
    return v.base, shape[0], shape[1], strides[0], strides[1], v.kstride


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

    def elaborate(self, platform):
        m = Module()
        mc, W, dt = self.mc, self.W, self.mc.dtype
        f = dt.frac
        for i, mem in enumerate(self.mems):
            m.submodules[f"mem{i}" if i else "mem"] = mem
        one = self.read_ports == 1
        L = self.macs
        if L == 1:
            rd_a = self.mem.read_port()
            rd_b = None if one else self.mem.read_port()
            lanes = [(rd_a, rd_b)]
        else:
            ports = [mem.read_port() for mem in self.mems]
            lanes = [(ports[2 * i], ports[2 * i + 1]) for i in range(L)]
            rd_a, rd_b = lanes[0]
        writes = [mem.write_port() for mem in self.mems]
        wr = writes[0]
        # kept for the simulation's collision check (synth declares same-cycle read/write undefined):
        # the read ports, the write port, and whether the data being read will be used
        reading, reading_b = Signal(), Signal()
        live = Signal(L)                 # lanes whose k is inside the reduction (a max uses lane 0 only)
        port_used = [Signal(name=f"used{i}") for i in range(2 * L)]
        self.ports = ([(p, port_used[2 * lane + i]) for lane, ports in enumerate(lanes) for i, p in enumerate(ports)
                       if p is not None], wr)
        for other in writes[1:]:
            m.d.comb += [other.addr.eq(wr.addr), other.data.eq(wr.data), other.en.eq(wr.en)]

        n_ops = len(mc.ops)
        D = ew_stages(mc)                 # extra pipeline stages between operand read and accumulate
        kmax = max([u.K for u in mc.ops] + [1])
        nmax = max([int(np.prod(u.out.shape, dtype=np.int64)) for u in mc.ops] + [1])
        pc = Signal(range(n_ops + 1))
        last_op = Signal()
        # per-op fields, decoded from pc
        kind = Signal(range(len(_KIND)))
        rescale = Signal()
        has_b = Signal()
        two_phase = Signal()       # one read port, two memory operands: read a, then b
        const_b = Signal()         # one read port, b is a single constant word: read once at load
        ph = Signal()
        a_hold = Signal(signed(W))
        b_const = Signal(signed(W))
        tp1 = Signal()
        cb1 = Signal()
        a_in = Signal(signed(W))
        b_in = Signal(signed(W))
        # the reduction advances k by kstep (L, or 1 for a max or one lane); ``k_last`` is a register
        # (set from k + kstep ≥ klast as k advances), so no comparison sits on the loop-control path.
        # Bounds are decoded as last indices (n − 1), and the pointer steps ks·kstep as constants.
        K = Signal(range(kmax + 1))
        kstep = Signal(range(L + 1))
        klast = Signal(range(kmax + 1))
        kone = Signal()              # the whole reduction is one step
        k_last = Signal()
        k_left = Signal(range(kmax + 1))          # K − k: lane l is live while k_left > l (no per-lane adder)
        n0_one, n1_one = Signal(), Signal()       # the same for the element loops: registered last flags
        i0_last, i1_last = Signal(), Signal()
        n0_last = Signal(range(nmax + 1))
        n1_last = Signal(range(nmax + 1))
        # address arithmetic is modulo 2^aw: every address the memory sees is below depth, and + and ·
        # commute with the reduction, so aw = the address width is exact (masked lanes may wrap harmlessly)
        aw = max(1, (self.depth - 1).bit_length())
        fields = {}
        for name in ("a", "b", "o"):
            fields[name] = [Signal(unsigned(aw), name=f"{name}_{x}") for x in ("base", "s0", "s1", "ks", "kinc")]
        # per-op fields are decoded from pc into registers: the decode (a mux over every op) stays
        # off the address adders' path; pc advances in DRAIN1, so they are ready by LOAD
        # (the last op is the default case: every pc value decodes, so the registers need no enable)
        with m.Switch(pc):
            for i, u in enumerate(mc.ops):
                with (m.Case(i) if i < n_ops - 1 else m.Default()):
                    ob, on0, on1, os0, os1, _ = _2d(u.out)
                    ab, _, _, as0, as1, aks = _2d(View(u.a.base, u.out.shape, _align(u.a, u.out), u.a.kstride))
                    bv = u.b if u.b is not None else View(0, u.out.shape, (0,) * len(u.out.shape))
                    bb, _, _, bs0, bs1, bks = _2d(View(bv.base, u.out.shape, _align(bv, u.out), bv.kstride))
                    cb = one and _const_b(u)
                    m.d.sync += [two_phase.eq(int(one and u.b is not None and not cb)), const_b.eq(int(cb))]
                    step = 1 if u.kind in ("max", "argmax") else L
                    m.d.sync += [kind.eq(_KIND[u.kind]), rescale.eq(int(u.rescale)), has_b.eq(int(u.b is not None)),
                                 K.eq(u.K), kstep.eq(step), klast.eq(max(u.K - step, 0)), kone.eq(int(u.K <= step)),
                                 n0_last.eq(on0 - 1), n1_last.eq(on1 - 1), n0_one.eq(int(on0 == 1)),
                                 n1_one.eq(int(on1 == 1))]
                    mod = 1 << aw
                    for name, vals in (("o", (ob, os0, os1, 0, 0)), ("a", (ab, as0, as1, aks, aks * step % mod)),
                                       ("b", (bb, bs0, bs1, bks, bks * step % mod))):
                        m.d.sync += [s.eq(v) for s, v in zip(fields[name], vals)]

        i0 = Signal(range(nmax + 1))
        i1 = Signal(range(nmax + 1))
        k = Signal(range(kmax + 1))
        row = {x: Signal(unsigned(aw), name=f"row_{x}") for x in "abo"}
        col = {x: Signal(unsigned(aw), name=f"col_{x}") for x in "abo"}
        ptr = {x: Signal(unsigned(aw), name=f"ptr_{x}") for x in "ab"}

        # stage-1 metadata (valid one cycle after issue)
        v1 = Signal()
        last1 = Signal()
        first1 = Signal()
        out1 = Signal(range(self.depth))
        kind1 = Signal.like(kind)
        resc1 = Signal()
        hasb1 = Signal()
        pc1 = Signal.like(pc)
        mask1 = Signal(L)
        acc_w = 2 * W + max(1, kmax.bit_length()) + 1 + max(0, (L - 1).bit_length())
        acc = Signal(signed(acc_w), reset_less=True)    # seeded on first2: no reset, one control set per tile
        # the sequential units (divf, div, sqrt) share their registers: a numerator (or radicand) shifted
        # out from the top, a remainder, the quotient (or root) shifted in, and a count
        nb, sb = div_bits(mc), sqrt_bits(mc)
        div_out = Signal(range(self.depth))
        div_last = Signal()
        num = Signal(unsigned(max(nb + 1, 2 * sb)))
        den = Signal(unsigned(W))
        rem = Signal(unsigned(max(W + 1, sb + 2)))
        quo = Signal(unsigned(max(nb, sb)))
        dcount = Signal(range(max(nb, sb) + 1))
        neg = Signal()                   # div: the quotient's sign
        bad_in = Signal()                # an operand outside the unit's domain (a zero divisor, a negative radicand)

        # a max reduction runs on lane 0 alone (k advances by 1): lanes carry no comparators
        # units a program never uses are not built (yosys cannot see which kinds the decode produces)
        used = {u.kind for u in mc.ops}
        has_max, has_argmax = bool(used & {"max", "argmax"}), "argmax" in used
        has_div = bool(used & SEQUENTIAL)
        is_max = Signal()
        m.d.comb += is_max.eq(((kind == _KIND["max"]) | (kind == _KIND["argmax"])) if has_max else 0)
        m.d.comb += [live[lane].eq((k_left > lane) & (~is_max if lane else 1)) for lane in range(L)]
        for lane in range(L):
            m.d.comb += [port_used[2 * lane].eq(reading & (live[lane] if lane else 1)),
                         port_used[2 * lane + 1].eq(reading_b & live[lane])]

        def issue():
            """Issue one (element, k) pair and advance the loop counters and addresses."""
            is_div = Cat(*[kind == _KIND[x] for x in sorted(SEQUENTIAL & used)]).any() if has_div else 0
            m.d.sync += mask1.eq(live)
            m.d.sync += [v1.eq(~is_div), last1.eq(k_last), first1.eq(k == 0), out1.eq(col["o"]),
                         kind1.eq(kind), resc1.eq(rescale), hasb1.eq(has_b), pc1.eq(pc),
                         div_out.eq(col["o"]), div_last.eq(i1_last & i0_last)]
            with m.If(~k_last):
                m.d.sync += [k.eq(k + kstep), k_last.eq(k + kstep >= klast), k_left.eq(k_left - kstep),
                             ptr["a"].eq(ptr["a"] + fields["a"][4]), ptr["b"].eq(ptr["b"] + fields["b"][4])]
            with m.Else():
                m.d.sync += [k.eq(0), k_last.eq(kone), k_left.eq(K)]
                with m.If(~i1_last):
                    m.d.sync += [i1.eq(i1 + 1), i1_last.eq(i1 + 1 == n1_last)]
                    for x in "abo":
                        m.d.sync += col[x].eq(col[x] + fields[x][2])
                    for x in "ab":
                        m.d.sync += ptr[x].eq(col[x] + fields[x][2])
                with m.Else():
                    m.d.sync += [i1.eq(0), i1_last.eq(n1_one)]
                    for x in "abo":
                        m.d.sync += [row[x].eq(row[x] + fields[x][1]), col[x].eq(row[x] + fields[x][1])]
                    for x in "ab":
                        m.d.sync += ptr[x].eq(row[x] + fields[x][1])
                    with m.If(i0_last):
                        m.next = "DRAIN1"
                    with m.Else():
                        m.d.sync += [i0.eq(i0 + 1), i0_last.eq(i0 + 1 == n0_last)]
            m.d.sync += [tp1.eq(two_phase), cb1.eq(const_b)]
            with m.If(two_phase):                              # phase 1: b is being read, a arrived
                m.d.sync += [ph.eq(0), a_hold.eq(rd_a.data)]
            if has_div:
                with m.If(is_div):
                    m.next = "DIV_LOAD"

        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += [rd_a.addr.eq(self.host_addr), self.host_rdata.eq(rd_a.data),
                             wr.addr.eq(self.host_addr), wr.data.eq(self.host_wdata), wr.en.eq(self.host_we)]
                with m.If(self.start):
                    m.d.sync += [pc.eq(0), self.overflow.eq(0), self.fault.eq(0), self.done.eq(0), last_op.eq(0)]
                    m.next = "BEGIN" if n_ops else "DONE"
            with m.State("BEGIN"):                              # the decoded fields of op 0 settle
                m.next = "LOAD"
            with m.State("LOAD"):
                m.d.sync += [i0.eq(0), i1.eq(0), k.eq(0), k_last.eq(kone), k_left.eq(K), i0_last.eq(n0_one), i1_last.eq(n1_one)]
                for x in "abo":
                    base = fields[x][0]
                    m.d.sync += [row[x].eq(base), col[x].eq(base)]
                    if x != "o":
                        m.d.sync += ptr[x].eq(base)
                m.d.sync += ph.eq(0)
                if one:
                    m.d.comb += rd_a.addr.eq(fields["b"][0])      # the constant operand, if any
                    with m.If(const_b):
                        m.next = "LOADB"
                    with m.Else():
                        m.next = "RUN"
                else:
                    m.next = "RUN"
            with m.State("LOADB"):
                m.d.sync += b_const.eq(rd_a.data)
                m.next = "RUN"
            with m.State("RUN"):
                if one:
                    m.d.comb += rd_a.addr.eq(Mux(two_phase & ph, ptr["b"], ptr["a"]))
                else:
                    m.d.comb += rd_a.addr.eq(ptr["a"])
                with m.If(two_phase & ~ph):                        # phase 0: a is being read
                    m.d.sync += [ph.eq(1), v1.eq(0)]
                with m.Else():
                    issue()
            # sequential restoring divider: q = ⌊(a·2^f) / b⌋ for a ≥ 0, b > 0, one bit per cycle
            if has_div:
                is_sqrt = (kind == _KIND["sqrt"]) if "sqrt" in used else 0
                is_rdiv = (kind == _KIND["div"]) if "div" in used else 0
                with m.State("DIV_LOAD"):
                    a_neg, b_neg = a_in < 0, b_in < 0
                    m.d.sync += [num.eq(Mux(a_neg, -a_in, a_in) << f), den.eq(Mux(b_neg, -b_in, b_in)),
                                 rem.eq(0), quo.eq(0), neg.eq(a_neg ^ b_neg),
                                 bad_in.eq(Mux(is_sqrt, a_neg, (b_in == 0) | (~is_rdiv & (a_neg | b_neg)))),
                                 dcount.eq(Mux(is_sqrt, sb - 1, nb - 1))]
                    m.next = "SQRT_ITER" if "sqrt" in used else "DIV_ITER"
                    if "sqrt" in used:
                        with m.If(~is_sqrt):
                            m.next = "DIV_ITER"
                with m.State("DIV_ITER"):           # restoring division of |a|·2^f by |b|, one bit per cycle
                    trial = Cat(num[nb - 1], rem)                  # (rem << 1) | next numerator bit
                    take = trial >= den
                    m.d.sync += [rem.eq(Mux(take, trial - den, trial)), quo.eq(Cat(take, quo)),
                                 num.eq(num << 1), dcount.eq(dcount - 1)]
                    with m.If(dcount == 0):
                        m.next = "DIV_WRITE"
                if "sqrt" in used:
                    with m.State("SQRT_ITER"):      # restoring square root of a·2^f, two radicand bits per cycle
                        trial_r = Cat(num[2 * sb - 2:2 * sb], rem)     # (rem << 2) | next two bits
                        cand = Cat(Const(1, 2), quo)                    # (root << 2) | 1
                        take = trial_r >= cand
                        m.d.sync += [rem.eq(Mux(take, trial_r - cand, trial_r)), quo.eq(Cat(take, quo)),
                                     num.eq(num << 2), dcount.eq(dcount - 1)]
                        with m.If(dcount == 0):
                            m.next = "DIV_WRITE"
                with m.State("DIV_WRITE"):
                    # div rounds half up: the magnitude gains 1 when 2·rem ≥ |b| (> |b| for a negative quotient)
                    up = Mux(neg, Cat(0, rem) > den, Cat(0, rem) >= den) & is_rdiv
                    mag = Signal(unsigned(max(nb, sb) + 1), name="div_mag")
                    res = Signal(signed(max(nb, sb) + 2), name="div_res")
                    m.d.comb += [mag.eq(quo + up), res.eq(Mux(neg & is_rdiv, -mag, mag))]
                    m.d.comb += [wr.addr.eq(div_out), wr.data.eq(res[:W]), wr.en.eq(1)]
                    with m.If((bad_in | (res > dt.hi) | (res < dt.lo)) & ~self.overflow):
                        m.d.sync += [self.overflow.eq(1), self.fault.eq(pc)]
                    with m.If(div_last):
                        m.next = "DRAIN1"
                    with m.Else():
                        m.next = "RUN"
            with m.State("DRAIN1"):
                m.d.sync += v1.eq(0)
                with m.If(pc == n_ops - 1):
                    m.d.sync += last_op.eq(1)
                with m.Else():
                    m.d.sync += pc.eq(pc + 1)
                m.next = "DRAIN2"
            with m.State("DRAIN2"):
                m.next = "DRAIN_EW0" if D else "DRAIN3"
            for i in range(D):                                  # the pipelined elementwise stages drain too
                with m.State(f"DRAIN_EW{i}"):
                    m.next = f"DRAIN_EW{i + 1}" if i + 1 < D else "DRAIN3"
            with m.State("DRAIN3"):
                with m.If(last_op):
                    m.next = "DONE"
                with m.Else():
                    m.next = "LOAD"
            with m.State("DONE"):
                m.d.sync += [self.done.eq(1), v1.eq(0)]
                m.next = "IDLE"
        m.d.comb += [self.busy.eq(~fsm.ongoing("IDLE")), reading.eq(fsm.ongoing("LOAD") | fsm.ongoing("RUN")),
                     reading_b.eq(fsm.ongoing("RUN") & has_b)]
        # every read port but rd_a (which the host shares while idle) reads in every state: a read has no
        # side effect, and no state multiplexer then sits on those addresses
        if not one:
            for lane, (ra, rb) in enumerate(lanes):
                if lane:
                    m.d.comb += ra.addr.eq(ptr["a"] + fields["a"][3] * lane)
                m.d.comb += rb.addr.eq(ptr["b"] + fields["b"][3] * lane)

        # ------------------------------------------------- stage 1: operands → product / unit
        if one:
            m.d.comb += [a_in.eq(Mux(tp1, a_hold, rd_a.data)), b_in.eq(Mux(cb1, b_const, rd_a.data))]
        else:
            m.d.comb += [a_in.eq(rd_a.data), b_in.eq(rd_b.data)]
        a, b = a_in, b_in
        v2, last2, first2 = Signal(), Signal(), Signal()
        out2 = Signal(range(self.depth))
        kind2, resc2, pc2 = Signal.like(kind), Signal(), Signal.like(pc)
        p2 = Signal(signed(2 * W + L.bit_length()))
        ew2 = Signal(signed(EW_WIDTH(dt)))

        def ew_unit(kind_s, a, b):
            """The elementwise units on operands ``a``, ``b`` for the micro-op kind ``kind_s``."""
            ew = Signal(signed(EW_WIDTH(dt)), name="ew")
            with m.Switch(kind_s):
                for name in ELEMENTWISE:
                    if name in used:
                        with m.Case(_KIND[name]):
                            m.d.comb += ew.eq(elementwise(m, name, a, b, dt, f"s_{name}"))
            return ew

        # with the exp pipeline built (D > 0), the other units work on registered operands one stage
        # later, inside the same delay line: the block-RAM read then ends in a register (no cycle added)
        if D:
            a_r, b_r = Signal.like(a_in, name="a_r"), Signal.like(b_in, name="b_r")
            m.d.sync += [a_r.eq(a), b_r.eq(b)]
            ew = Signal(signed(EW_WIDTH(dt)), name="ew_early")        # unused placeholder for stage 1
        else:
            ew = ew_unit(kind1, a, b)
        # each lane multiplies a by b, by 1 (a sum without b) or by 0 (a lane past K): the selection is
        # on the W-bit multiplier input, not on the 2W-bit product
        if L == 1:
            lane_val = a * Mux(hasb1, b, 1)
        else:                                               # lane sum; a max uses lane 0 only
            vals = [a * Mux(hasb1, b, 1)]
            for lane, (ra, rb) in enumerate(lanes[1:], 1):
                vals.append(ra.data * Mux(mask1[lane], Mux(hasb1, rb.data, 1), 0))
            total = Signal(signed(2 * W + L.bit_length()), name="lane_sum")
            while len(vals) > 1:                            # balanced adder tree (shallow for yosys)
                vals = [vals[i] + vals[i + 1] if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
            m.d.comb += total.eq(vals[0])
            lane_val = total
        lane_sig = Signal(signed(2 * W + L.bit_length()), name="lane_val")
        valid1 = Signal()
        m.d.comb += [lane_sig.eq(lane_val), valid1.eq(v1 & ~fsm.ongoing("IDLE"))]
        stage = [valid1, last1, first1, out1, kind1, resc1, pc1, lane_sig, ew]
        k1 = Signal(range(kmax + 1), name="k1")      # an argmax keeps the index of its maximum
        if has_argmax:
            m.d.sync += k1.eq(k)
            stage.append(k1)
        exp_out = exp_unit(m, a - b, dt) if "exp" in used else None      # registered inside: D = 4 stages
        for d in range(D):                                             # delay everything else to match
            nxt = [Signal.like(x, name=f"{x.name}_d{d}") for x in stage]
            m.d.sync += [n_.eq(x) for n_, x in zip(nxt, stage)]
            stage = nxt
            if d == 0:                           # a_r, b_r are this stage's operands: the units join here
                stage[8] = ew_unit(stage[4], a_r, b_r)
        vD, lastD, firstD, outD, kindD, rescD, pcD, laneD, ewD = stage[:9]
        kD = stage[9] if has_argmax else None
        if exp_out is not None:
            ewD = Mux(kindD == _KIND["exp"], exp_out, ewD)
        seed2 = Signal()                        # the seed's select, decoded a stage early
        m.d.sync += seed2.eq(rescD & (kindD == _KIND["mac"]))
        m.d.sync += [v2.eq(vD), last2.eq(lastD), first2.eq(firstD), out2.eq(outD),
                     kind2.eq(kindD), resc2.eq(rescD), pc2.eq(pcD), p2.eq(laneD), ew2.eq(ewD)]

        # ------------------------------------------- stage 2: accumulate (or max), rescale
        # the running max has a W-bit register of its own (p2 = a·1 and the max both fit W bits), so its
        # comparison drives W multiplexers, not the accumulator's enable
        mx = Signal(signed(W), reset_less=True)
        mi = Signal(range(kmax + 1), reset_less=True)            # argmax: the first index of the maximum
        k2 = Signal.like(k1)
        if has_argmax:
            m.d.sync += k2.eq(kD)
        if has_max:
            with m.If(v2 & ((kind2 == _KIND["max"]) | ((kind2 == _KIND["argmax"]) if has_argmax else 0))):
                take = first2 | (p2[:W].as_signed() > mx)          # strictly greater: the first maximum stays
                m.d.sync += mx.eq(Mux(take, p2[:W], mx))
                if has_argmax:
                    m.d.sync += mi.eq(Mux(take, k2, mi))
        # the rounding constant of the rescale seeds the sum, so the final rescale is a plain shift
        # (one carry chain between stage 2 and stage 3, not two). Two adders and a mux after them, not a
        # mux before one: the adder's operands are then plain registers, so each carry shares its logic
        # cell with its sum (iCE40 split the chain otherwise)
        seed = Mux(seed2, 1 << (f - 1), 0)
        with m.If(v2):
            m.d.sync += acc.eq(Mux(first2, p2 + seed, acc + p2))
        # stage 3 reads the finished sum from the accumulator register itself (the next element's first
        # accumulation overwrites it only at the end of that cycle), so no adder sits before stage 3
        v3, red3, rs3, mx3, am3 = Signal(), Signal(), Signal(), Signal(), Signal()
        out3 = Signal(range(self.depth))
        pc3 = Signal.like(pc)
        ew3 = Signal.like(ew2)
        m.d.sync += [v3.eq(v2 & last2), out3.eq(out2), pc3.eq(pc2), ew3.eq(ew2),
                     red3.eq(kind2 == _KIND["mac"]),
                     mx3.eq(((kind2 == _KIND["max"]) | ((kind2 == _KIND["argmax"]) if has_argmax else 0))
                            if has_max else 0),
                     am3.eq((kind2 == _KIND["argmax"]) if has_argmax else 0),
                     rs3.eq(resc2 & (kind2 == _KIND["mac"]))]
        res3 = Signal(signed(acc_w))
        m.d.comb += res3.eq(Mux(red3, Mux(rs3, acc >> f, acc), Mux(mx3, Mux(am3, mi, mx), ew3)))

        # ------------------------------------------------------ stage 3: range check, write
        # in range ⇔ every bit from W − 1 up is a copy of the sign (dt.lo = −2^(W−1), dt.hi = 2^(W−1) − 1):
        # two reductions on register bits, no comparators; the sticky flag is set one cycle later (the
        # drain before done leaves room for it), so the check is off the write path
        bad = Signal()
        m.d.comb += bad.eq(Mux(red3, Mux(rs3, outside(acc[f + W - 1:]), outside(acc[W - 1:])),
                               Mux(mx3, 0, outside(ew3[W - 1:]))))
        bad4, pc4 = Signal(), Signal.like(pc)
        m.d.sync += [bad4.eq(v3 & bad), pc4.eq(pc3)]
        with m.If(v3):
            m.d.comb += [wr.addr.eq(out3), wr.data.eq(res3[:W]), wr.en.eq(1)]
        with m.If(bad4 & ~self.overflow):
            m.d.sync += [self.overflow.eq(1), self.fault.eq(pc4)]
        return m


def _align(v: View, out: View) -> tuple[int, ...]:
    """Strides of operand ``v`` indexed by the output's coordinates (same rank, or fewer reduced axes)."""
    if len(v.strides) == len(out.shape):
        return v.strides
    raise NotImplementedError(f"operand view {v} does not match output shape {out.shape}")
