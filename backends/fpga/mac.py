"""The lanes and the accumulator: stages 1 to 3 of the sequencer's pipeline.

::

              stage 1 (D more stages when exp is built)       stage 2                            stage 3
    a, b ───► a·(b | 1) ────────┐
    lane l ─► a_l·(b_l | 1 | 0) ┴─ Σ (adder tree) ─► p2 ─┬─► acc = first ? p2 + seed : acc + p2 ─┐
                                                         └─► mx = max(mx, p2) (argmax: mi = k) ──┼─► result ─► out_value
    a, b ───► elementwise units (add, neg, …) ─┬─► ew2 ──────────────────────────────────────────┘
    a − b ──► exp unit (pipelined, D = 4) ─────┘

One (element, k) pair arrives per cycle with its metadata (``valid``, ``last``, ``first``, ``addr``,
``kind``, ``rescale``, ``has_b``, ``pc``, the live-lane ``mask`` and ``k``). Each lane multiplies ``a`` by
``b``, by 1 (a sum without ``b``) or by 0 (a lane past ``K``); the selection is on the W-bit multiplier
input, not on the 2W-bit product. Stage 2 accumulates exactly (or keeps the running max in a W-bit
register of its own); on the pair marked ``last`` stage 3 holds the finished result for one cycle.
"""
from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import SeqConfig
from .units import ELEMENTWISE, EW_WIDTH, elementwise, exp_unit

__all__ = ["MacPipeline"]


class MacPipeline(wiring.Component):
    """Products, elementwise units, the exp pipeline, the accumulator and the running max.

    Ports (stage 1, the cycle after issue): ``valid``, ``last`` (the element's last k), ``first`` (its first
    k), ``addr`` (where the result goes), ``kind``, ``rescale``, ``has_b``, ``pc``, ``mask`` (live lanes),
    the operands ``a``, ``b`` of lane 0 and, with several lanes, ``lane_a``, ``lane_b`` (lanes 1 …), all In;
    and ``k`` (In, for an argmax), given at issue, a cycle before the rest, and registered here.

    Stage 3 (Out): ``out_valid``, ``out_addr``, ``out_pc`` and ``out_value`` (the result, before the
    word's width is taken), and for the range check ``out_acc`` (the accumulator), ``out_ew`` (the
    elementwise result), ``out_reduce`` (a ``mac``), ``out_rescale`` (a rescaled ``mac``), ``out_max``
    (a ``max`` or ``argmax``).
    """

    def __init__(self, cfg: SeqConfig):
        self.cfg = cfg
        W, L = cfg.W, cfg.lanes
        kind, pc, addr = range(len(cfg.codes)), range(cfg.n_ops + 1), range(cfg.depth)
        members = {
            "valid": In(1), "last": In(1), "first": In(1), "addr": In(addr), "kind": In(kind), "rescale": In(1),
            "has_b": In(1), "pc": In(pc), "mask": In(L), "k": In(range(cfg.kmax + 1)),
            "a": In(signed(W)), "b": In(signed(W)),
            "out_valid": Out(1), "out_addr": Out(addr), "out_pc": Out(pc), "out_value": Out(signed(cfg.acc_w)),
            "out_acc": Out(signed(cfg.acc_w)), "out_ew": Out(signed(EW_WIDTH(cfg.dt))),
            "out_reduce": Out(1), "out_rescale": Out(1), "out_max": Out(1),
        }
        if L > 1:
            members |= {"lane_a": In(signed(W)).array(L - 1), "lane_b": In(signed(W)).array(L - 1)}
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        stage = self._stage1(m)
        self._stages_2_3(m, self._delay_line(m, stage))
        return m

    def _ew_unit(self, m: Module, kind, a, b) -> Signal:
        """The elementwise units on operands ``a``, ``b`` for the micro-op kind ``kind``."""
        cfg = self.cfg
        ew = Signal(signed(EW_WIDTH(cfg.dt)), name="ew")
        with m.Switch(kind):
            for name in ELEMENTWISE:
                if name in cfg.used:
                    with m.Case(cfg.codes[name]):
                        m.d.comb += ew.eq(elementwise(m, name, a, b, cfg.dt, f"s_{name}"))
        return ew

    def _stage1(self, m: Module) -> list:
        """The lane products (summed) and, without the exp unit, the elementwise result: the list of
        stage-1 values ``[valid, last, first, addr, kind, rescale, pc, lane sum, ew (, k)]``."""
        cfg = self.cfg
        W, L, dt = cfg.W, cfg.lanes, cfg.dt
        a, b = self.a, self.b
        # with the exp pipeline built (D > 0), the other units work on registered operands one stage
        # later, inside the same delay line: the block-RAM read then ends in a register (no cycle added)
        if cfg.ew_stages:
            ew = Signal(signed(EW_WIDTH(dt)), name="ew_early")        # unused placeholder for stage 1
        else:
            ew = self._ew_unit(m, self.kind, a, b)
        # each lane multiplies a by b, by 1 (a sum without b) or by 0 (a lane past K): the selection is
        # on the W-bit multiplier input, not on the 2W-bit product
        if L == 1:
            lane_val = a * Mux(self.has_b, b, 1)
        else:                                               # lane sum; a max uses lane 0 only
            vals = [a * Mux(self.has_b, b, 1)]
            for lane in range(1, L):
                vals.append(self.lane_a[lane - 1] * Mux(self.mask[lane], Mux(self.has_b, self.lane_b[lane - 1], 1), 0))
            total = Signal(signed(2 * W + L.bit_length()), name="lane_sum")
            while len(vals) > 1:                            # balanced adder tree (shallow for yosys)
                vals = [vals[i] + vals[i + 1] if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
            m.d.comb += total.eq(vals[0])
            lane_val = total
        lane_sig = Signal(signed(2 * W + L.bit_length()), name="lane_val")
        m.d.comb += lane_sig.eq(lane_val)
        stage = [self.valid, self.last, self.first, self.addr, self.kind, self.rescale, self.pc, lane_sig, ew]
        if cfg.has_argmax:                                  # an argmax keeps the index of its maximum
            k1 = Signal(range(cfg.kmax + 1), name="k1")
            m.d.sync += k1.eq(self.k)
            stage.append(k1)
        return stage

    def _delay_line(self, m: Module, stage: list) -> list:
        """With the exp unit built, ``D`` registers on every stage-1 value; the exp result joins at the end
        (and the other elementwise units at the first register, on registered operands)."""
        cfg = self.cfg
        if cfg.ew_stages:
            a_r, b_r = Signal.like(self.a, name="a_r"), Signal.like(self.b, name="b_r")
            m.d.sync += [a_r.eq(self.a), b_r.eq(self.b)]
        exp_out = exp_unit(m, self.a - self.b, cfg.dt) if "exp" in cfg.used else None   # registered inside: D = 4
        for d in range(cfg.ew_stages):                                            # delay everything else to match
            nxt = [Signal.like(x, name=f"{x.name}_d{d}") for x in stage]
            m.d.sync += [n_.eq(x) for n_, x in zip(nxt, stage)]
            stage = nxt
            if d == 0:                           # a_r, b_r are this stage's operands: the units join here
                stage[8] = self._ew_unit(m, stage[4], a_r, b_r)
        if exp_out is not None:
            stage[8] = Mux(stage[4] == cfg.codes["exp"], exp_out, stage[8])
        return stage

    def _stages_2_3(self, m: Module, stage: list) -> None:
        """Stage 2 accumulates (or keeps the running max), stage 3 holds the finished result."""
        cfg = self.cfg
        W, f, codes = cfg.W, cfg.f, cfg.codes
        vD, lastD, firstD, outD, kindD, rescD, pcD, laneD, ewD = stage[:9]
        v2, last2, first2 = Signal(), Signal(), Signal()
        out2 = Signal(range(cfg.depth))
        kind2, resc2, pc2 = Signal.like(self.kind), Signal(), Signal.like(self.pc)
        p2 = Signal(signed(2 * W + cfg.lanes.bit_length()))
        ew2 = Signal(signed(EW_WIDTH(cfg.dt)))
        acc = Signal(signed(cfg.acc_w), reset_less=True)    # seeded on first2: no reset, one control set per tile
        seed2 = Signal()                        # the seed's select, decoded a stage early
        m.d.sync += seed2.eq(rescD & (kindD == codes["mac"]))
        m.d.sync += [v2.eq(vD), last2.eq(lastD), first2.eq(firstD), out2.eq(outD),
                     kind2.eq(kindD), resc2.eq(rescD), pc2.eq(pcD), p2.eq(laneD), ew2.eq(ewD)]

        # the running max has a W-bit register of its own (p2 = a·1 and the max both fit W bits), so its
        # comparison drives W multiplexers, not the accumulator's enable
        mx = Signal(signed(W), reset_less=True)
        mi = Signal(range(cfg.kmax + 1), reset_less=True)        # argmax: the first index of the maximum
        k2 = Signal(range(cfg.kmax + 1), name="k2")
        if cfg.has_argmax:
            m.d.sync += k2.eq(stage[9])
        is_argmax2 = (kind2 == codes["argmax"]) if cfg.has_argmax else 0
        if cfg.has_max:
            with m.If(v2 & ((kind2 == codes["max"]) | is_argmax2)):
                take = first2 | (p2[:W].as_signed() > mx)          # strictly greater: the first maximum stays
                m.d.sync += mx.eq(Mux(take, p2[:W], mx))
                if cfg.has_argmax:
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
        red3, rs3, mx3, am3 = self.out_reduce, self.out_rescale, self.out_max, Signal()
        m.d.sync += [self.out_valid.eq(v2 & last2), self.out_addr.eq(out2), self.out_pc.eq(pc2),
                     self.out_ew.eq(ew2), red3.eq(kind2 == codes["mac"]),
                     mx3.eq(((kind2 == codes["max"]) | is_argmax2) if cfg.has_max else 0),
                     am3.eq(is_argmax2), rs3.eq(resc2 & (kind2 == codes["mac"]))]
        m.d.comb += [self.out_acc.eq(acc),
                     self.out_value.eq(Mux(red3, Mux(rs3, acc >> f, acc), Mux(mx3, Mux(am3, mi, mx), self.out_ew)))]
