"""Address generation: the loop counters of a micro-op and the incremental addresses they drive.

::

    for i0 in rows:                     row_x  += s0_x          (x = a, b, o)
        for i1 in columns:              col_x  += s1_x          (a group of lanes' columns with several lanes)
            for k in 0, 1, …:           ptr_x  += kinc_x        (x = a, b)
                issue (col_o, ptr_a, ptr_b)
                lanes: lane_x[l] = ptr_x + l·ls_x (the memory registers it: LANE_LATENCY)

Nothing adds on the loop-control path: ``k_last``, ``i0_last`` and ``i1_last`` are registers, set from
down-counters of the steps, columns and rows left (``c == 1``: a comparison of a register with a
constant) as they advance; ``k_first`` is a register too. With several lanes, ``lanes_left`` (the row's
elements from this group on) says which lanes are live (lane ``l`` while ``lanes_left > l`` and the micro-op
uses it) without a per-lane adder, and each lane's offset ``l·ls_x`` is a register set at load from shifts of
the decoded ``ls_x`` (no multiplier). Every address step is an add of a decoded constant, modulo ``2^aw``.
"""
from __future__ import annotations

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import SeqConfig
from .decode import fields_signature

__all__ = ["AddressGen"]


class AddressGen(wiring.Component):
    """The loop counters and address registers of the running micro-op.

    Ports:

    * ``fields`` (In, :func:`~.decode.fields_signature`): the decoded micro-op;
    * ``load`` (In): start the micro-op (every counter to 0, every address to its base);
    * ``advance`` (In): the pair at the current position is issued: step to the next one;
    * ``k`` (Out): the reduction index; ``k_first``, ``k_last``, ``i0_last``, ``i1_last`` (Out): this is the
      first k, the last k, row, column (group of columns); ``last`` (Out): the micro-op's last pair;
    * ``out_addr``, ``ptr_a``, ``ptr_b`` (Out): the output address and lane 0's operand addresses;
    * with several lanes, ``lane_a``, ``lane_b``, ``lane_o`` (Out, one per lane) every lane's addresses at the
      current position and ``live`` (Out, a bit per lane) the lanes that compute an element there.
    """

    def __init__(self, cfg: SeqConfig):
        self.cfg = cfg
        aw, L = cfg.aw, cfg.lanes
        members = {
            "fields": In(fields_signature(cfg)), "load": In(1), "advance": In(1),
            "k": Out(range(cfg.kmax + 1)), "k_first": Out(1), "k_last": Out(1),
            "i0_last": Out(1), "i1_last": Out(1), "last": Out(1),
            "out_addr": Out(unsigned(aw)), "ptr_a": Out(unsigned(aw)), "ptr_b": Out(unsigned(aw)),
        }
        if L > 1:
            members |= {x: Out(unsigned(aw)).array(L) for x in ("lane_a", "lane_b", "lane_o")} | {"live": Out(L)}
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg, fl = self.cfg, self.fields
        aw, L = cfg.aw, cfg.lanes
        step = {"a": fl.a, "b": fl.b, "o": fl.o}
        c0 = Signal(range(cfg.nmax + 1), name="rows_left")           # rows left after this one
        c1 = Signal(range(cfg.nmax + 1), name="cols_left")           # columns left after this one
        kc = Signal(range(cfg.kmax + 1), name="steps_left")          # k steps left after this one
        k, k_first, k_last = self.k, self.k_first, self.k_last
        i0_last, i1_last = self.i0_last, self.i1_last
        row = {x: Signal(unsigned(aw), name=f"row_{x}") for x in "abo"}
        col = {"a": Signal(unsigned(aw), name="col_a"), "b": Signal(unsigned(aw), name="col_b"), "o": self.out_addr}
        ptr = {"a": self.ptr_a, "b": self.ptr_b}

        def next_element():                            # k starts again
            m.d.sync += [k.eq(0), k_first.eq(1), kc.eq(fl.ksteps_last), k_last.eq(fl.kone)]

        with m.If(self.load):
            next_element()
            m.d.sync += [c0.eq(fl.n0_last), c1.eq(fl.n1_last), i0_last.eq(fl.n0_one), i1_last.eq(fl.n1_one)]
            for x in "abo":
                base = step[x].base
                m.d.sync += [row[x].eq(base), col[x].eq(base)]
                if x != "o":
                    m.d.sync += ptr[x].eq(base)
        with m.Elif(self.advance):
            with m.If(~k_last):                            # the next k of this element
                m.d.sync += [k.eq(k + fl.kstep), k_first.eq(0), kc.eq(kc - 1), k_last.eq(kc == 1),
                             ptr["a"].eq(ptr["a"] + fl.a.kinc), ptr["b"].eq(ptr["b"] + fl.b.kinc)]
            with m.Else():
                next_element()
                with m.If(~i1_last):                       # the next column
                    m.d.sync += [c1.eq(c1 - 1), i1_last.eq(c1 == 1)]
                    for x in "abo":
                        m.d.sync += col[x].eq(col[x] + step[x].s1)
                    for x in "ab":
                        m.d.sync += ptr[x].eq(col[x] + step[x].s1)
                with m.Else():                             # the next row
                    m.d.sync += [c1.eq(fl.n1_last), i1_last.eq(fl.n1_one)]
                    for x in "abo":
                        m.d.sync += [row[x].eq(row[x] + step[x].s0), col[x].eq(row[x] + step[x].s0)]
                    for x in "ab":
                        m.d.sync += ptr[x].eq(row[x] + step[x].s0)
                    with m.If(~i0_last):
                        m.d.sync += [c0.eq(c0 - 1), i0_last.eq(c0 == 1)]
        m.d.comb += self.last.eq(k_last & i1_last & i0_last)
        if L > 1:
            self._lanes(m, col["o"], ptr)
        return m

    def _lanes(self, m: Module, out, ptr: dict) -> None:
        """The lanes' addresses and live bits at the current position: ``x + off_x[l]`` for each stream, with
        ``off_x[l] = l·ls_x`` (registers set at load from shifts of ``ls_x``), and ``lanes_left`` (this group's
        elements of the row on) against each lane. The memory registers them (``interleave.InterleavedMemory``)."""
        cfg, fl = self.cfg, self.fields
        aw, L = cfg.aw, cfg.lanes
        left = Signal(range(cfg.nmax + 1), name="lanes_left")
        with m.If(self.load):
            m.d.sync += left.eq(fl.width)
        with m.Elif(self.advance & self.k_last):
            m.d.sync += left.eq(Mux(self.i1_last, fl.width, left - fl.lstep))
        m.d.comb += [self.live[lane].eq(fl.lmask[lane] & (left > lane)) for lane in range(L)]
        for x, base in (("o", out), ("a", ptr["a"]), ("b", ptr["b"])):
            stride = getattr(fl, x).ls
            for lane in range(L):
                target = getattr(self, f"lane_{x}")[lane]
                if lane == 0:
                    m.d.comb += target.eq(base)
                    continue
                off = Signal(unsigned(aw), name=f"off_{x}{lane}")
                with m.If(self.load):               # l·ls as shifts of ls (l < L): no multiplier
                    m.d.sync += off.eq(sum(stride << b for b in range(lane.bit_length()) if lane >> b & 1))
                m.d.comb += target.eq(base + off)
