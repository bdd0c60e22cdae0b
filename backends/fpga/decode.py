"""Decode: the per-micro-op fields of the program, selected by ``pc`` into registers.

::

    pc ─┬─ low bits ──► [ table of micro-ops 0 … 15 ]  ──► register ─┐
        │             [ table of micro-ops 16 … 31 ] ──► register ─┼─► choose ──► fields (registers)
        └─ high bits ─────────────────────────────────► register ─┘   (kind, flags, loop bounds,
                                                                        a/b/o bases and strides)

The program lives here as constants: each micro-op's kind, flags, loop bounds (as last indices, n − 1)
and, for each of the operands ``a``, ``b`` and the output ``o``, an address base, row and column strides
and the pointer step of the reduction, packed into one word per micro-op. The decode takes two cycles
(``DECODE_LATENCY``) and stays off the address adders' path: ``pc`` advances in the first drain cycle, and
rests at 0 while the sequencer is idle, so the fields are ready by the next load. Each word's bits that
are the same for every micro-op of a table become constants.
"""
from __future__ import annotations

from collections.abc import Sequence

from amaranth import Cat, Module, Signal, unsigned
from amaranth.lib import memory
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import DATA, ROM_BLOCK, ROM_FIELDS, SeqConfig
from .microcode import Microcode
from .kinds import facts
from .timing import DRAIN, DRAIN_MAX, LANE_DRAIN, lane_plan, views_2d

__all__ = ["Decoder", "fields_signature", "address_signature", "GROUP", "DECODE_LATENCY"]

#: micro-ops per table of the decoder (pc's low bits address one)
GROUP = 16
#: cycles from ``pc`` to its fields: the tables' registers, then the fields'
DECODE_LATENCY = 2


def address_signature(aw: int, lanes: bool = False) -> wiring.Signature:
    """One operand's address fields: ``base``, row stride ``s0``, column stride ``s1`` (with several lanes, the
    step from one group of columns to the next), the reduction's stride ``ks`` and its pointer step ``kinc``
    (``ks`` times the lanes' k step with one lane, ``ks`` with several); with several lanes, ``ls``, the stride
    from one lane to the next."""
    names = ("base", "s0", "s1", "ks", "kinc") + (("ls",) if lanes else ())
    return wiring.Signature({x: Out(unsigned(aw)) for x in names})


def fields_signature(cfg: SeqConfig) -> wiring.Signature:
    """The decoded fields of one micro-op (as the decoder drives them).

    * ``kind``: the micro-op kind's code (``kinds.FACTS[kind].code``); ``rescale``, ``has_b``; ``sequential``: the
      divider computes it; ``drain``: the drain's cycles after the first (``DRAIN``, its unit's latency, and one
      more with one read port or ``LANE_DRAIN`` more with several lanes);
    * ``two_phase``: one read port, two memory operands (read ``a``, then ``b``); ``const_b``: one read
      port, ``b`` a single constant word (read once at load);
    * the reduction: ``K``, its step ``kstep`` (1), ``ksteps_last`` (the steps it takes, less one) and ``kone``
      (one step does it all);
    * the element loops: last indices ``n0_last``, ``n1_last`` and ``n0_one``, ``n1_one`` (one row, one column);
      with several lanes, the columns are groups of lanes (:func:`~.timing.lane_plan`, rows and columns swapped
      where it runs over the rows), ``width`` the elements of a row, ``lstep`` the lanes of a group and ``lmask``
      a bit for each of them;
    * ``a``, ``b``, ``o``: :func:`address_signature`.
    """
    L = cfg.lanes
    addr = address_signature(cfg.aw, L > 1)
    lanes = {"width": Out(range(cfg.nmax + 1)), "lstep": Out(range(L + 1)), "lmask": Out(L)} if L > 1 else {}
    return wiring.Signature({
        "kind": Out(range(len(cfg.codes))), "rescale": Out(1), "has_b": Out(1), "sequential": Out(1),
        "drain": Out(range(DRAIN_MAX + 1)),
        "two_phase": Out(1), "const_b": Out(1),
        "K": Out(range(cfg.kmax + 1)), "kstep": Out(range(2)), "ksteps_last": Out(range(cfg.kmax + 1)),
        "kone": Out(1),
        "n0_last": Out(range(cfg.nmax + 1)), "n1_last": Out(range(cfg.nmax + 1)), "n0_one": Out(1), "n1_one": Out(1),
        **lanes, "a": Out(addr), "b": Out(addr), "o": Out(addr),
    })


class Decoder(wiring.Component):
    """Registers the fields of micro-op ``pc`` of ``mc`` (see the module docstring).

    ``const_b[i]``: micro-op ``i``'s ``b`` is one constant word (read once at load with one read port).

    Ports: ``pc`` (In); ``fields`` (Out, :func:`fields_signature`), valid ``DECODE_LATENCY`` (2) cycles after
    ``pc``.
    """

    def __init__(self, mc: Microcode, cfg: SeqConfig, const_b: Sequence[bool]):
        self.mc, self.cfg, self.const_b = mc, cfg, list(const_b)
        super().__init__({"pc": In(range(cfg.n_ops + 1)), "fields": Out(fields_signature(cfg))})

    def words(self) -> list[dict[tuple, int]]:
        """Each micro-op's fields, by their path in :func:`fields_signature` (``("a", "base")``, ``("kind",)``)."""
        cfg, mod, L = self.cfg, 1 << self.cfg.aw, self.cfg.lanes
        rows = []
        for i, u in enumerate(self.mc.ops):
            (ob, on0, on1, os0, os1, _), (ab, _, _, as0, as1, aks), (bb, _, _, bs0, bs1, bks) = views_2d(u)
            plan = lane_plan(u, L)
            if plan.swap:                          # the lanes run over the rows: rows and columns swap
                on0, on1, os0, os1, as0, as1, bs0, bs1 = on1, on0, os1, os0, as1, as0, bs1, bs0
            p, groups = plan.lanes, -(-on1 // plan.lanes)
            cb = cfg.one_port and self.const_b[i]
            f = facts(u.kind)
            row = {("two_phase",): int(cfg.one_port and u.b is not None and not cb), ("const_b",): int(cb),
                   ("kind",): cfg.codes[u.kind], ("rescale",): int(u.rescale), ("has_b",): int(u.b is not None),
                   ("sequential",): int(f.sequential),
                   ("drain",): DRAIN - 1 + cfg.one_port + LANE_DRAIN * (L > 1) + f.latency,
                   ("K",): u.K, ("kstep",): 1, ("ksteps_last",): max(u.K - 1, 0),
                   ("kone",): int(u.K <= 1), ("n0_last",): on0 - 1, ("n1_last",): groups - 1,
                   ("n0_one",): int(on0 == 1), ("n1_one",): int(groups == 1)}
            if L > 1:
                row |= {("width",): on1, ("lstep",): p, ("lmask",): (1 << p) - 1}
            for x, vals in (("o", (ob, os0, os1 * p, 0, 0, os1)), ("a", (ab, as0, as1 * p, aks, aks, as1)),
                            ("b", (bb, bs0, bs1 * p, bks, bks, bs1))):
                names = ("base", "s0", "s1", "ks", "kinc", "ls")[:5 + (L > 1)]
                row |= {(x, name): v % mod for name, v in zip(names, vals)}
            rows.append(row)
        return rows

    def elaborate(self, platform) -> Module:
        m = Module()
        # the program as read-only tables of packed words, one per group of GROUP micro-ops (pc's low bits
        # address it), each registered; the group's register is then chosen by pc's high bits, registered
        # with it. Each table is a function of at most five bits (two LUT levels), and the choice a small
        # multiplexer: a table over all of pc was the iCE40's critical path (five LUTs and their wires)
        members = [(path, value) for path, _, value in self.fields.signature.flatten(self.fields)]
        rows = self.words()
        if self.cfg.rom_bram:
            self._bases(m, rows, [(path, value) for path, value in members if path in ROM_FIELDS])
            members = [(path, value) for path, value in members if path not in ROM_FIELDS]
        width = sum(len(v) for _, v in members)
        words = _pack(rows, members) or [0]
        lo = min(GROUP.bit_length() - 1, max(1, (len(words) - 1).bit_length()))
        groups = [words[i:i + (1 << lo)] for i in range(0, len(words), 1 << lo)]
        staged = []
        for g, chunk in enumerate(groups):
            rom = memory.Memory(shape=unsigned(width), depth=len(chunk), init=chunk)
            m.submodules[f"rom{g}"] = rom
            port = rom.read_port(domain="comb")
            reg = Signal(unsigned(width), name=f"rom{g}_word", **DATA)   # constant bits become constants
            m.d.comb += port.addr.eq(self.pc[:lo])
            m.d.sync += reg.eq(port.data)
            staged.append(reg)
        _unpack(m, _choose(m, staged, self.pc[lo:], "word", "group"), members)
        return m

    def _bases(self, m: Module, rows: list[dict], members: list) -> None:
        """The fields ``members`` from block RAM: their packed words cut into ``ROM_BLOCK`` slices (one block RAM
        each), read synchronously at ``pc`` (the block's register stands for a table's), the slice of ``pc``'s
        high bits chosen a cycle later and registered into the fields: ``DECODE_LATENCY`` as from the LUTs."""
        depth, bits = ROM_BLOCK
        width = sum(len(v) for _, v in members)
        packed = _pack(rows or [{path: 0 for path, _ in members}], members)
        lo = max(1, (min(len(packed), depth) - 1).bit_length())
        chunks = [packed[i:i + depth] for i in range(0, len(packed), depth)]
        outs = []
        for c, chunk in enumerate(chunks):
            parts = []
            for s in range(0, width, bits):
                w = min(bits, width - s)
                rom = memory.Memory(shape=unsigned(w), depth=len(chunk), init=[(v >> s) & ((1 << w) - 1) for v in chunk],
                                    attrs={"ram_style": "block"})     # one block RAM each, as cost.brams counts
                m.submodules[f"bases{c}_{s // bits}"] = rom
                port = rom.read_port()                       # synchronous: a block RAM with its output register
                m.d.comb += port.addr.eq(self.pc[:lo])
                parts.append(port.data)
            outs.append(Cat(*parts))
        _unpack(m, _choose(m, outs, self.pc[lo:], "bases", "bases_chunk"), members)


def _pack(rows: list[dict], members: list) -> list[int]:
    """Each row's ``members`` fields packed into one word, the first field in the low bits."""
    words = []
    for row in rows:
        word, at = 0, 0
        for path, value in members:
            word |= (row[path] & ((1 << len(value)) - 1)) << at
            at += len(value)
        words.append(word)
    return words


def _choose(m: Module, sources: list, high, name: str, select: str) -> Signal:
    """One of ``sources`` (equal widths) chosen by ``high`` (pc's high bits), registered first as ``select``."""
    word = Signal(unsigned(len(sources[0])), name=name)
    if len(sources) == 1:
        m.d.comb += word.eq(sources[0])
        return word
    sel = Signal(range(len(sources)), name=select)
    m.d.sync += sel.eq(high)
    with m.Switch(sel):
        for i, src in enumerate(sources):
            with (m.Case(i) if i < len(sources) - 1 else m.Default()):
                m.d.comb += word.eq(src)
    return word


def _unpack(m: Module, word, members: list) -> None:
    """Register ``word``'s packed fields into ``members``."""
    at = 0
    for _, value in members:
        m.d.sync += value.eq(word[at:at + len(value)])
        at += len(value)
