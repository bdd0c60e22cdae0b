"""Decode: the per-micro-op fields of the program, selected by ``pc`` into registers.

::

    pc ──► [ switch over every micro-op: constants ] ──► registers ──► fields
                                                                       (kind, flags, loop bounds,
                                                                        a/b/o bases and strides)

The program lives here as constants: each micro-op's kind, flags, loop bounds (as last indices, n − 1)
and, for each of the operands ``a``, ``b`` and the output ``o``, an address base, row and column strides
and the pointer step of the reduction. The fields are registered, so the decode (a mux over every op)
stays off the address adders' path; ``pc`` advances in the first drain cycle, so they are ready by the
next load. The last op is the default case: every ``pc`` value decodes, so the registers need no enable.
"""
from __future__ import annotations

from collections.abc import Sequence

from amaranth import Module, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .config import SeqConfig
from .microcode import Microcode, View

__all__ = ["Decoder", "fields_signature", "address_signature", "view_2d", "align"]


def view_2d(v: View) -> tuple[int, int, int, int, int, int]:
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


def align(v: View, out: View) -> tuple[int, ...]:
    """Strides of operand ``v`` indexed by the output's coordinates (same rank, or fewer reduced axes)."""
    if len(v.strides) == len(out.shape):
        return v.strides
    raise NotImplementedError(f"operand view {v} does not match output shape {out.shape}")


def address_signature(aw: int) -> wiring.Signature:
    """One operand's address fields: ``base``, row stride ``s0``, column stride ``s1``, the reduction's
    stride ``ks`` and its pointer step ``kinc`` (``ks`` times the lanes' k step, modulo ``2^aw``)."""
    return wiring.Signature({x: Out(unsigned(aw)) for x in ("base", "s0", "s1", "ks", "kinc")})


def fields_signature(cfg: SeqConfig) -> wiring.Signature:
    """The decoded fields of one micro-op (as the decoder drives them).

    * ``kind``: the micro-op kind's code; ``rescale``, ``has_b``;
    * ``two_phase``: one read port, two memory operands (read ``a``, then ``b``); ``const_b``: one read
      port, ``b`` a single constant word (read once at load);
    * the reduction: ``K``, its step ``kstep`` (the lanes, or 1 for a max), ``ksteps_last`` (the steps it
      takes, less one) and ``kone`` (one step does it all);
    * the element loops: last indices ``n0_last``, ``n1_last`` and ``n0_one``, ``n1_one`` (one row, one column);
    * ``a``, ``b``, ``o``: :func:`address_signature`.
    """
    addr = address_signature(cfg.aw)
    return wiring.Signature({
        "kind": Out(range(len(cfg.codes))), "rescale": Out(1), "has_b": Out(1),
        "two_phase": Out(1), "const_b": Out(1),
        "K": Out(range(cfg.kmax + 1)), "kstep": Out(range(cfg.lanes + 1)), "ksteps_last": Out(range(cfg.kmax + 1)),
        "kone": Out(1),
        "n0_last": Out(range(cfg.nmax + 1)), "n1_last": Out(range(cfg.nmax + 1)), "n0_one": Out(1), "n1_one": Out(1),
        "a": Out(addr), "b": Out(addr), "o": Out(addr),
    })


class Decoder(wiring.Component):
    """Registers the fields of micro-op ``pc`` of ``mc`` (see the module docstring).

    ``const_b[i]``: micro-op ``i``'s ``b`` is one constant word (read once at load with one read port).

    Ports: ``pc`` (In); ``fields`` (Out, :func:`fields_signature`), valid one cycle after ``pc``.
    """

    def __init__(self, mc: Microcode, cfg: SeqConfig, const_b: Sequence[bool]):
        self.mc, self.cfg, self.const_b = mc, cfg, list(const_b)
        super().__init__({"pc": In(range(cfg.n_ops + 1)), "fields": Out(fields_signature(cfg))})

    def elaborate(self, platform) -> Module:
        m = Module()
        cfg, fl, n_ops = self.cfg, self.fields, self.cfg.n_ops
        mod = 1 << cfg.aw
        with m.Switch(self.pc):
            for i, u in enumerate(self.mc.ops):
                with (m.Case(i) if i < n_ops - 1 else m.Default()):
                    ob, on0, on1, os0, os1, _ = view_2d(u.out)
                    ab, _, _, as0, as1, aks = view_2d(View(u.a.base, u.out.shape, align(u.a, u.out), u.a.kstride))
                    bv = u.b if u.b is not None else View(0, u.out.shape, (0,) * len(u.out.shape))
                    bb, _, _, bs0, bs1, bks = view_2d(View(bv.base, u.out.shape, align(bv, u.out), bv.kstride))
                    cb = cfg.one_port and self.const_b[i]
                    m.d.sync += [fl.two_phase.eq(int(cfg.one_port and u.b is not None and not cb)),
                                 fl.const_b.eq(int(cb))]
                    step = 1 if u.kind in ("max", "argmax") else cfg.lanes
                    m.d.sync += [fl.kind.eq(cfg.codes[u.kind]), fl.rescale.eq(int(u.rescale)),
                                 fl.has_b.eq(int(u.b is not None)),
                                 fl.K.eq(u.K), fl.kstep.eq(step), fl.ksteps_last.eq(max(-(-u.K // step) - 1, 0)),
                                 fl.kone.eq(int(u.K <= step)),
                                 fl.n0_last.eq(on0 - 1), fl.n1_last.eq(on1 - 1), fl.n0_one.eq(int(on0 == 1)),
                                 fl.n1_one.eq(int(on1 == 1))]
                    for x, vals in ((fl.o, (ob, os0, os1, 0, 0)), (fl.a, (ab, as0, as1, aks, aks * step % mod)),
                                    (fl.b, (bb, bs0, bs1, bks, bks * step % mod))):
                        m.d.sync += [x.base.eq(vals[0]), x.s0.eq(vals[1]), x.s1.eq(vals[2]), x.ks.eq(vals[3]),
                                     x.kinc.eq(vals[4])]
        return m
