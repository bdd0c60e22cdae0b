"""One lane's pipeline: the product, the units and the accumulator, from the operands to the result.

::

     R (issue + 2)      stage 1            stage 2 (latency(kind) later)          2b (acc's high half)   stage 3
    a, b ──────────► a₁, b|1 ──► a₁·b₁ ────────► p2 ─┬─► acc = first ? p2 + seed : acc + p2 ─┐
                                                       └─► mx = max(mx, p2) (argmax: mi = k) ──┼─► result ─► out_value
                        a₁, b₁ ──► elementwise units (add, neg, …) ─► add2, neg2, … ┐ (kind) │
                        a₁ − b₁ ─► exp unit (EXP_STAGES registers) ──► exp2 ────────┤        │
                        a₁ ──────► sigmoid, tanh (SIGMOID_STAGES) ───► tanh2 ───────┴─► ew3 ───┘

The metadata of one (element, k) pair (``valid``, ``last``, ``first``, ``addr``) arrives a cycle before its
operands (the sequencer delays it to match: the cycle after issue with one lane, ``LANE_LATENCY`` later with
several), and waits a cycle for them (stage R). Stage 1 registers the operands; the multiplier's input is
``b`` or 1 (a sum without ``b``), selected before that register, so the multiplier has registered inputs and a
registered output (the DSP blocks' own registers). With several lanes the sequencer builds one pipeline per
lane, each with its own accumulator and units (``Sequencer``). The micro-op's ``kind``,
``rescale``, ``has_b`` and ``pc`` are constant through the micro-op and its drain. Only a kind with a
pipelined unit waits for it (``kinds.FACTS[kind].latency``: exp, sigmoid, tanh): its metadata takes a delay line of
that many registers, every other kind reaches stage 2 the cycle after stage 1. Stage 2 accumulates exactly, the low half of the
sum first and the high half a cycle later (stage 2b), or keeps the running max in a W-bit register of
its own; on the pair marked ``last`` stage 3 holds the finished result.
"""
from __future__ import annotations

from amaranth import Cat, ClockSignal, Instance, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import DATA, SeqConfig
from .kinds import Kind, Unit, facts
from .units import EW_WIDTH, elementwise, pipelined

__all__ = ["MacPipeline", "ACC_SPLIT", "delay"]

#: operand bits of the ECP5's MULT18X18D (signed 18 × 18 → 36)
DSP_WIDTH = 18


def delay(m: Module, values: dict, n: int = 1) -> list:
    """``values`` (name → value) through ``n`` registers each (the last named ``name``, earlier ones
    ``{name}_d{i}``). A value of several bits (an address, a word, an index) is data, which a one-bit flag
    beside it (a valid, a write enable) qualifies: its registers have no reset (:data:`.config.DATA`), the flag's do."""
    items = list(values.items())
    for i in range(n):
        regs = [Signal(v.shape(), name=name if i == n - 1 else f"{name}_d{i}", reset_less=len(v) > 1)
                for name, v in items]
        m.d.sync += [r.eq(v) for r, (_, v) in zip(regs, items)]
        items = [(name, r) for (name, _), r in zip(items, regs)]
    return [v for _, v in items]


class MacPipeline(wiring.Component):
    """The product, elementwise units, the exp pipeline, the accumulator and the running max of one lane.

    Ports (In): ``valid``, ``last`` (the element's last k), ``first`` (its first k), ``addr`` (where the result
    goes); a cycle before them, ``k`` (for an argmax); the cycle after them, the operands ``a``, ``b``;
    constant through the micro-op, ``kind``, ``rescale``, ``has_b`` and ``pc``. ``registered_product`` (the
    sequencer's lanes) registers the product before stage 2: one more stage. ``dsp_cells`` (synthesis for the
    ECP5, words of at most 18 bits) builds that registered product as a ``MULT18X18D`` with its own input and
    output registers, so that neither the route to the DSP block nor the one from it shares a cycle with the
    multiplier; its value and timing are the model's.

    Stage 3 (Out): ``out_valid``, ``out_addr``, ``out_pc`` and ``out_value`` (the result, before the
    word's width is taken), and for the range check ``out_acc`` (the accumulator), ``out_ew`` (the
    elementwise result), ``out_reduce`` (a ``mac``), ``out_rescale`` (a rescaled ``mac``), ``out_max``
    (a ``max`` or ``argmax``); and ``op_a``, ``op_b``, the operand registers (``b`` is 1 without one),
    which the divider loads from.
    """

    def __init__(self, cfg: SeqConfig, registered_product: bool = False, dsp_cells: bool = False):
        self.cfg, self.registered_product = cfg, registered_product
        self.dsp_cells = dsp_cells and registered_product and cfg.W <= DSP_WIDTH
        W = cfg.W
        kind, pc, addr = range(len(cfg.codes)), range(cfg.n_ops + 1), range(cfg.depth)
        members = {
            "valid": In(1), "last": In(1), "first": In(1), "addr": In(addr), "kind": In(kind), "rescale": In(1),
            "has_b": In(1), "pc": In(pc), "k": In(range(cfg.kmax + 1)),
            "a": In(signed(W)), "b": In(signed(W)),
            "out_valid": Out(1), "out_addr": Out(addr), "out_pc": Out(pc), "out_value": Out(signed(cfg.acc_w)),
            "out_acc": Out(signed(cfg.acc_w)), "out_ew": Out(signed(EW_WIDTH(cfg.dt))),
            "out_reduce": Out(1), "out_rescale": Out(1), "out_max": Out(1),
            "op_a": Out(signed(W)), "op_b": Out(signed(W)),
        }
        super().__init__(members)

    def elaborate(self, platform) -> Module:
        m = Module()
        meta = self._stage_r(m)
        meta, a1, b1 = self._stage1(m, meta)
        product = a1 * b1
        if self.registered_product:
            # the product is registered at the multiplier (stage P), the metadata and operands a cycle later beside
            # it: with lanes spread over the chip, the route to a DSP block and on to p2 is no longer one cycle
            p = Signal(signed(2 * self.cfg.W), name="product", **DATA)
            if self.dsp_cells:
                m.d.comb += p.eq(self._dsp_product(m))
            else:
                m.d.sync += p.eq(product)
            meta, (a1, b1), product = self._delay(m, meta, "p"), self._delay(m, [a1, b1], "p"), p
        self._stages_2_3(m, *self._to_stage2(m, meta, a1, b1, product), a1)
        return m

    def _dsp_product(self, m: Module):
        """``a · (b or 1)`` two cycles later, as ``p`` in the model: an ECP5 ``MULT18X18D`` whose input registers
        stand for ``a₁, b₁`` (they are kept in the fabric too, for the other units) and whose output register is
        ``p``."""
        a, b, y = Signal(signed(DSP_WIDTH)), Signal(signed(DSP_WIDTH)), Signal(2 * DSP_WIDTH)
        m.d.comb += [a.eq(self.a), b.eq(Mux(self.has_b, self.b, 1))]
        regs = {f"p_{r}": "CLK0" for r in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK")}
        pins = {**{f"i_A{i}": a[i] for i in range(DSP_WIDTH)}, **{f"i_B{i}": b[i] for i in range(DSP_WIDTH)},
                **{f"i_C{i}": 0 for i in range(DSP_WIDTH)}, **{f"o_P{i}": y[i] for i in range(2 * DSP_WIDTH)}}
        m.submodules.dsp = Instance("MULT18X18D", **regs, p_GSR="DISABLED", **pins,
                                    i_SIGNEDA=1, i_SIGNEDB=1, i_SOURCEA=0, i_SOURCEB=0,
                                    i_CLK0=ClockSignal(), i_CE0=1, i_RST0=0)
        return y[:2 * self.cfg.W].as_signed()

    @staticmethod
    def _delay(m: Module, values: list, tag: str) -> list:
        """``values`` (signals) registered once (``{name}_{tag}``)."""
        return delay(m, {f"{v.name}_{tag}": v for v in values})

    def _stage_r(self, m: Module) -> list:
        """The metadata, a cycle later, beside the operands: ``[valid, last, first, addr(, k)]``."""
        meta = [self.valid, self.last, self.first, self.addr]
        if self.cfg.has_argmax:                             # k is given at issue: two registers to stage R
            k1 = Signal(range(self.cfg.kmax + 1), name="k", **DATA)
            m.d.sync += k1.eq(self.k)
            meta.append(k1)
        return self._delay(m, meta, "r")

    def _stage1(self, m: Module, meta: list):
        """The operand registers: ``(metadata, a₁, b₁)``; ``b₁`` is ``b`` or 1."""
        W = self.cfg.W
        a1, b1 = Signal(signed(W), name="a1", **DATA), Signal(signed(W), name="b1", **DATA)
        m.d.sync += [a1.eq(self.a), b1.eq(Mux(self.has_b, self.b, 1))]
        m.d.comb += [self.op_a.eq(a1), self.op_b.eq(b1)]
        return self._delay(m, meta, "1"), a1, b1

    def _ew_units(self, m: Module, a, b) -> list:
        """The combinational elementwise units the program uses, on operands ``a``, ``b``: ``[(kind, value)]``."""
        cfg = self.cfg
        return [(k, elementwise(m, k, a, b, cfg.dt, f"s_{k}")) for k in Kind
                if k in cfg.used and facts(k).unit is Unit.ELEMENTWISE]

    def _to_stage2(self, m: Module, meta: list, a1, b1, product):
        """What stage 2 registers: ``(metadata, product, [(kind, elementwise unit's result)])``; the metadata
        and result of a pipelined unit's kind (its ``latency``, :data:`~.kinds.FACTS`) come that many cycles later."""
        cfg = self.cfg
        W = cfg.W
        lane_val = Signal(signed(2 * W + 1), name="lane_val")
        m.d.comb += lane_val.eq(product)
        units = self._ew_units(m, a1, b1)
        # the pipelined units: kind → result (b₁ is 1 without b: such a unit reads 0)
        piped = {k: pipelined(m, k, a1, Mux(self.has_b, b1, 0), cfg.dt) for k in Kind
                 if k in cfg.used and facts(k).latency}
        if not piped:
            return meta, lane_val, units
        # the metadata waits in a delay line, tapped at each pipelined unit's latency; the kind's flag picks
        # the tap. Only such a kind's pairs enter it: a pair of the micro-op before is never valid there
        taps = sorted({facts(k).latency for k in piped})
        flags = {d: Signal(name=f"late{d}") for d in taps}
        m.d.sync += [flags[d].eq(Cat(*[self.kind == cfg.codes[x] for x in piped if facts(x).latency == d]).any())
                     for d in taps]
        late = [Signal(name="valid_late")] + meta[1:]
        m.d.comb += late[0].eq(meta[0] & Cat(*flags.values()).any())
        out = meta
        for d in range(1, taps[-1] + 1):
            late = self._delay(m, late, f"e{d - 1}")
            if d in flags:
                out = [Mux(flags[d], x_late, x) for x, x_late in zip(out, late)]
        sel = [Signal.like(x, name=f"{x.name}_s2") for x in meta]
        m.d.comb += [o.eq(x) for o, x in zip(sel, out)]
        return sel, lane_val, units + list(piped.items())

    def _stages_2_3(self, m: Module, meta: list, lane_val, units: list, a1) -> None:
        """Stage 2 accumulates (or keeps the running max) and holds each elementwise unit's result in a
        register of its own; stage 3 holds the finished result (the unit's, chosen by the kind)."""
        cfg = self.cfg
        W, f, codes = cfg.W, cfg.f, cfg.codes
        v2, last2, first2, out2, *k2 = self._delay(m, meta, "2")
        p2 = Signal(signed(2 * W + 1), name="p2", **DATA)
        m.d.sync += p2.eq(lane_val)
        # each unit's result is registered apart, and the kind chooses among the registers at stage 3:
        # no multiplexer sits after a unit's carry chain (it was the iCE40's critical path)
        ew3 = []
        for name, value in units:
            u2, on = Signal(signed(EW_WIDTH(cfg.dt)), name=f"{name}2", **DATA), Signal(name=f"is_{name}")
            m.d.sync += [u2.eq(value), on.eq(self.kind == codes[name])]
            ew3.append(Mux(on, u2, 0))
        while len(ew3) > 1:                                 # an OR tree of the chosen unit's result
            ew3 = [ew3[i] | ew3[i + 1] if i + 1 < len(ew3) else ew3[i] for i in range(0, len(ew3), 2)]
        # the kind's flags, registered: the micro-op's kind is set at its load, long before its first pair
        # reaches stage 2, so every select below comes straight from a register
        is_mac, is_max, is_argmax, seed_on = (Signal(name=x) for x in ("is_mac", "is_max", "is_argmax", "seed_on"))
        def sums(f):
            return f.unit is Unit.ACCUMULATOR
        m.d.sync += [is_mac.eq(cfg.decodes(self.kind, sums)), seed_on.eq(self.rescale & cfg.decodes(self.kind, sums)),
                     is_argmax.eq(cfg.decodes(self.kind, lambda f: f.index) if cfg.has_argmax else 0),
                     is_max.eq(cfg.decodes(self.kind, lambda f: f.unit is Unit.MAX) if cfg.has_max else 0)]

        # the running max has a W-bit register of its own (p2 = a·1 and the max both fit W bits), so its
        # comparison drives W multiplexers, not the accumulator's enable
        mx = Signal(signed(W), name="mx")
        mi = Signal(range(cfg.kmax + 1), name="mi", **DATA)      # argmax: the first index of the maximum
        if cfg.has_max:
            # which pairs may take the max is registered beside p2, so only the comparison (strictly greater:
            # the first maximum stays) sits before the registers' enable
            on, first_on = Signal(name="max_on"), Signal(name="max_first")
            m.d.sync += [on.eq(meta[0] & is_max), first_on.eq(meta[0] & meta[2] & is_max)]
            # x_k takes the max iff x_k > max(m_(k−2), x_(k−1)) (strictly: the first maximum stays). Both
            # comparisons are made a cycle early, on stage 1's operand (a max multiplies by 1, so p2 is a₁ a
            # cycle later) against the max kept so far, m_(k−2), and against p2, x_(k−1), and registered: no
            # comparator sits before the max's enable. Values are compared with their sign bit flipped
            # (offset binary), so each comparison is an unsigned one, one carry chain.
            def biased(x):
                return Cat(x[:W - 1], ~x[W - 1])
            mb = Signal(W, name="max_biased", **DATA)
            above_max, above_prev = Signal(name="above_max"), Signal(name="above_prev")
            m.d.sync += [above_max.eq((biased(a1) > mb) | first2), above_prev.eq(biased(a1) > biased(p2))]
            m.d.comb += mx.eq(Cat(mb[:W - 1], ~mb[W - 1]))
            pb = biased(p2)
            with m.If(first_on | (on & above_max & above_prev)):
                m.d.sync += mb.eq(pb)
                if cfg.has_argmax:
                    m.d.sync += mi.eq(k2[0])
        # the accumulator in two halves, the high one a cycle behind: its carry in is the low half's carry
        # out, so each carry chain is half the sum's width (the whole chain was the iCE40's critical path).
        # The rounding constant of the rescale seeds the sum, so the final rescale is a plain shift. Two
        # adders and a mux after them, not a mux before one: the adders' operands are then plain registers,
        # so each carry shares its logic cell with its sum (iCE40 split the chain otherwise)
        S = ACC_SPLIT(cfg)
        seed = Mux(seed_on, 1 << (f - 1), 0)
        lo, carry = Signal(S, name="acc_lo", **DATA), Signal(name="acc_carry", **DATA)
        with m.If(v2):
            m.d.sync += Cat(lo, carry).eq(Mux(first2, p2[:S] + seed, lo + p2[:S]))
        v2b, last2b, first2b, out2b = self._delay(m, [v2, last2, first2, out2], "2b")
        p2h = Signal(signed(len(p2) - S), name="p2_hi", **DATA)
        hi = Signal(signed(cfg.acc_w - S), name="acc_hi", **DATA)
        m.d.sync += p2h.eq(p2[S:])
        with m.If(v2b):
            m.d.sync += hi.eq(Mux(first2b, p2h + carry, hi + p2h + carry))
        lo_d, mx_d, mi_d = (Signal.like(x, name=f"{x.name}_d", **DATA) for x in (lo, mx, mi))
        ew_d = Signal(signed(EW_WIDTH(cfg.dt)), name="ew_d", **DATA)
        m.d.sync += [lo_d.eq(lo), mx_d.eq(mx), mi_d.eq(mi), ew_d.eq(ew3[0] if ew3 else 0)]
        acc = Signal(signed(cfg.acc_w), name="acc")
        m.d.comb += acc.eq(Cat(lo_d, hi))
        # stage 3 reads the finished sum from the accumulator's registers themselves (the next element's
        # first accumulation overwrites them only at the end of that cycle), so no adder sits before it
        red3, rs3, mx3, am3 = self.out_reduce, self.out_rescale, self.out_max, Signal()
        m.d.sync += [self.out_valid.eq(v2b & last2b), self.out_addr.eq(out2b), self.out_ew.eq(ew_d)]
        m.d.comb += [self.out_pc.eq(self.pc), red3.eq(is_mac), mx3.eq(is_max), am3.eq(is_argmax),
                     rs3.eq(seed_on), self.out_acc.eq(acc),
                     self.out_value.eq(Mux(red3, Mux(rs3, acc >> f, acc),
                                           Mux(mx3, Mux(am3, mi_d, mx_d), self.out_ew)))]


def ACC_SPLIT(cfg: SeqConfig) -> int:
    """Bits of the accumulator's low half (the high half adds a cycle later, with the low half's carry)."""
    return (cfg.acc_w + 1) // 2
