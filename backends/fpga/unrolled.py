"""The unrolled datapath: ``predict`` as a pipeline with the parameters built in as constants.

::

    x ──stream──► [reg] ──► op 0 ──► [reg] ──► op 1 ──► [reg] ── … ──► y ──stream──►
                              (every element of an op at once; one batch per cycle)

Each micro-op of the program becomes logic for all of its elements, and its
results are registered: one batch enters per cycle, and its result comes out
``len(ops) + 1`` cycles later. The parameters are constants, so every weight
multiply is a constant multiply in LUTs (shifts and adds, no DSP). Zero
weights vanish, and a ReLU's mask multiply is a multiplexer.

The arithmetic is the fixed-point interpreter's: exact sums, one rescale with
round half up, and a range check of every result. A failed range check
travels down the pipeline with its batch and sets the sticky ``overflow``.

This is hls4ml's ``io_parallel`` style, and FINN's unrolled one. It suits tiny
layers, whose constant multiplies fit the device. The design must be rebuilt
when the weights change, and it cannot train: use the sequencer for that.
"""

import numpy as np
from amaranth import Cat, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from circuitgrad.fixedpoint import FixedPointOverflow

from .kinds import Kind, Unit, facts
from .units import elementwise, outside
from .microcode import Microcode, elementwise_model

__all__ = ["Unrolled", "UnrolledTop", "UNROLLED_KINDS", "check_unrollable"]

#: micro-op kinds the unrolled datapath builds (``kinds.FACTS[kind].unrolled``): the MAC and the combinational
#: units (no maximum, pipelined exp or sequential unit)
UNROLLED_KINDS = tuple(k for k in Kind if facts(k).unrolled)


def check_unrollable(mc: Microcode) -> None:
    """Refuse programs with an operation the unrolled datapath does not build, naming it."""
    for u in mc.ops:
        if u.kind not in UNROLLED_KINDS:
            raise NotImplementedError(f"the unrolled FPGA datapath has no {u.kind!r} unit (needed by {u.source}); "
                                      f"it builds {', '.join(UNROLLED_KINDS)}: use the sequencer (fpga.compile)")


class Unrolled(wiring.Component):
    """``mc`` as a pipeline; ``consts`` maps the addresses of the built-in parameters to raw values.

    Ports: ``x`` (In, a stream of whole input batches, ``ArrayLayout(signed(W), n_in)``), ``y`` (Out,
    the outputs), ``y_overflow`` (Out: the batch now on ``y`` had a result out of range), ``overflow``
    (Out, sticky: some batch that left had one).
    """

    def __init__(self, mc: Microcode, consts: dict[int, int]):
        check_unrollable(mc)
        self.mc, self.consts = mc, dict(consts)
        self.W = mc.dtype.width
        self.x_addrs = [int(a) for a in mc.inputs[-1].addresses().reshape(-1)]
        self.y_addrs = [int(a) for v in mc.outputs for a in v.addresses().reshape(-1)]
        self.latency = len(mc.ops) + 1
        super().__init__({
            "x": In(stream.Signature(data.ArrayLayout(signed(self.W), len(self.x_addrs)))),
            "y": Out(stream.Signature(data.ArrayLayout(signed(self.W), len(self.y_addrs)))),
            "y_overflow": Out(1),
            "overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        mc, dt, W = self.mc, self.mc.dtype, self.W
        f, half = dt.frac, 1 << (dt.frac - 1)
        n = len(mc.ops)
        valid = [Signal(name=f"valid{s}") for s in range(n + 1)]
        ovf = [Signal(name=f"ovf{s}") for s in range(n + 1)]
        regs: list = []                         # (register, value): all load together when the pipeline advances
        env: dict[int, object] = {a: int(v) for a, v in mc.init.items()}
        env.update({a: int(v) for a, v in self.consts.items()})
        born: dict[int, int] = {}               # address → the stage its register belongs to
        masks: dict[int, Signal] = {}           # heaviside results as 1-bit masks (value = mask ? one : 0)
        late: dict[tuple, Signal] = {}          # (address or ~address for a mask, its birth, stage) → delayed copy

        def reg(value, name: str, shape) -> Signal:
            r = Signal(shape, name=name)
            regs.append((r, value))
            return r

        def at(addr: int, stage: int, mask: bool = False):
            """The word (or mask) at ``addr`` as stage ``stage`` sees it: a constant, or a delayed register."""
            v = masks[addr] if mask else env[addr]
            if isinstance(v, int) or stage == born[addr]:
                return v
            key, b = ~addr if mask else addr, born[addr]        # an address reused later is born again
            for t in range(b + 1, stage + 1):
                if (key, b, t) not in late:
                    late[(key, b, t)] = reg(late.get((key, b, t - 1), v), f"{'h' if mask else 'm'}{addr}_s{t}",
                                            v.shape())
            return late[(key, b, stage)]

        for i, a in enumerate(self.x_addrs):
            env[a], born[a] = reg(self.x.payload[i], f"x{i}", signed(W)), 0
        for s, u in enumerate(mc.ops):
            f_u, flags = facts(u.kind), []
            sums = f_u.unit is Unit.ACCUMULATOR
            for e, oa in enumerate(int(a) for a in u.out.addresses().reshape(-1)):
                idx = np.unravel_index(e, u.out.shape)
                a_addr = [int(u.a.addresses(k)[idx]) for k in range(u.K)]
                b_addr = [int(u.b.addresses(k)[idx]) for k in range(u.K)] if u.b is not None else None
                checked, mask = True, None
                if sums and u.rescale and u.K == 1 and b_addr and (b_addr[0] in masks or a_addr[0] in masks):
                    x, h = (a_addr[0], b_addr[0]) if b_addr[0] in masks else (b_addr[0], a_addr[0])
                    r, checked = Mux(at(h, s, mask=True), at(x, s), 0), False     # rescale(x·one) = x: a mux
                elif sums:
                    terms = []
                    for k in range(u.K):
                        x, w = at(a_addr[k], s), (at(b_addr[k], s) if b_addr else 1)
                        if isinstance(x, int) and isinstance(w, int):
                            terms.append(x * w)
                        elif isinstance(w, int) or isinstance(x, int):      # constant multiply: CSD shift-adds
                            sig, c = (x, w) if isinstance(w, int) else (w, x)
                            terms += [(sig, sh, d) for sh, d in _csd(c)]
                        else:
                            terms.append(x * w)
                    if u.rescale:                   # the rounding constant joins the tree's constant
                        r = _tree(terms + [half]) >> f
                    else:
                        r = _tree(terms)
                elif f_u.mask:
                    x = at(a_addr[0], s)
                    mask = int(x > 0) if isinstance(x, int) else (x > 0)
                    r, checked = Mux(mask, dt.one, 0) if not isinstance(mask, int) else dt.one * mask, False
                    if dt.one > dt.hi and not isinstance(mask, int):     # fixed(W, W−1): 1.0 itself overflows
                        flags.append(mask)
                else:
                    x, y = at(a_addr[0], s), (at(b_addr[0], s) if b_addr else None)
                    if isinstance(x, int) and (y is None or isinstance(y, int)):
                        r = int(elementwise_model(u.kind, np.array([x]), None if y is None else np.array([y]), dt)[0])
                    else:
                        r, checked = elementwise(m, u.kind, x, y, dt, f"{u.kind}{s}_{e}"), not f_u.fits
                masks.pop(oa, None)                 # a reused address no longer holds an earlier op's mask
                if isinstance(r, int):                                      # folded at build time
                    if not dt.lo <= r <= dt.hi:
                        raise FixedPointOverflow(f"{u.source}: the constant result {r / dt.one:.6g} overflows {dt}")
                    env[oa] = r
                    continue
                if checked:
                    flags.append(_out_of_range(r, W))
                env[oa], born[oa] = reg(r, f"op{s}_{e}", signed(W)), s + 1
                if mask is not None:
                    masks[oa] = reg(mask, f"h{oa}", 1)
            regs += [(valid[s + 1], valid[s]), (ovf[s + 1], _any([ovf[s]] + flags))]
        outs = [at(a, n) for a in self.y_addrs]
        regs += [(valid[0], self.x.valid), (ovf[0], 0)]
        advance = Signal()                      # the whole pipeline moves unless its output is stalled
        m.d.comb += [advance.eq(~self.y.valid | self.y.ready), self.x.ready.eq(advance), self.y.valid.eq(valid[n])]
        m.d.comb += [self.y.payload[j].eq(v) for j, v in enumerate(outs)]
        m.d.comb += self.y_overflow.eq(ovf[n])
        with m.If(advance):
            m.d.sync += [r.eq(v) for r, v in regs]
        with m.If(self.y.valid & self.y.ready & ovf[n]):
            m.d.sync += self.overflow.eq(1)
        return m


def _csd(c: int) -> list[tuple[int, int]]:
    """The canonical signed digits of ``c``: ``[(shift, ±1)]`` with ``c = Σ ±2^shift``, no two adjacent.

    A constant multiply then costs one adder per digit beyond the first; CSD has the fewest
    nonzero digits of any signed-binary form (about a third of the bits, against half for binary).
    """
    out, sh = [], 0
    while c:
        if c & 1:
            d = 2 - (c & 3)                 # +1 if c ≡ 1 (mod 4), −1 if c ≡ 3
            out.append((sh, d))
            c -= d
        c >>= 1
        sh += 1
    return out


def _tree(terms: list):
    """The exact sum of ``terms`` as adder trees.

    A term is a constant (folded), a value, or ``(value, shift, ±1)`` for ``±value·2^shift``. Shifted
    terms are summed per shift first, in narrow adders, and the per-shift sums are then combined;
    the subtracted terms of a shift get a tree of their own and one subtraction, not a negation each.
    """
    const = sum(t for t in terms if isinstance(t, int))
    groups: dict[int, tuple[list, list]] = {}
    for t in terms:
        if isinstance(t, int):
            continue
        v, sh, d = t if isinstance(t, tuple) else (t, 0, 1)
        groups.setdefault(sh, ([], []))[0 if d > 0 else 1].append(v)

    def balanced(vals):
        while len(vals) > 1:
            vals = [vals[i] + vals[i + 1] if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
        return vals[0] if vals else None

    parts = []
    for sh in sorted(groups):
        p, n = balanced(groups[sh][0]), balanced(groups[sh][1])
        part = p if n is None else (-n if p is None else p - n)
        parts.append(part << sh if sh else part)
    total = balanced(parts)
    if total is None:
        return const
    return total + const if const else total


def _out_of_range(r, W: int):
    """``r`` outside the signed W-bit range: its bits from W − 1 up are not all copies of the sign."""
    v = Value.cast(r)
    if not v.shape().signed:
        v = Cat(v, 0).as_signed()
    if len(v) < W:
        return 0
    return outside(v[W - 1:])


def _any(flags: list) :
    out = flags[0]
    for fl in flags[1:]:
        out = out | fl
    return out


class UnrolledTop(wiring.Component):
    """:class:`Unrolled` behind the same serial pins as :class:`~.synth.Top`.

    Shift the input batch (all words, last word first, most significant bit first) into ``sin``
    while ``shift`` is high, then pulse ``start``. ``done`` pulses when the result is in the output
    register; later ``shift`` cycles bring it out of ``sout``, first word first. ``write`` and
    ``read`` are unused (the parameters are built in).
    """

    def __init__(self, core: Unrolled):
        from .synth import SERIAL_PINS
        self.core = core
        super().__init__(SERIAL_PINS)

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        W = core.W
        sr = Signal(W * len(core.x_addrs))
        out = Signal(W * len(core.y_addrs))
        with m.If(self.shift):
            m.d.sync += [sr.eq((sr << 1) | self.sin), out.eq(out << 1)]
        m.d.comb += [core.x.payload.eq(sr), core.x.valid.eq(self.start), core.y.ready.eq(1),
                     self.overflow.eq(core.overflow), self.sout.eq(out[-1])]
        m.d.sync += self.done.eq(core.y.valid)
        with m.If(core.y.valid):                   # first word in the top bits: it leaves sout first
            m.d.sync += out.eq(Cat(*reversed([core.y.payload[j] for j in range(len(core.y_addrs))])))
        return m
