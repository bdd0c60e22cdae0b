"""Fusion: an elementwise region of one input is a function of that input, proved by table lookups.

A *region* is a maximal set of elementwise instructions (Mul, Scale, Add, Neg, Heaviside, Sigmoid, Tanh)
whose operands are each a constant or a value computed from one variable ``x`` (the region's *root*) by
instructions of the region, all of ``x``'s shape. Every value of a region is then, entry by entry, a function
``f`` of the same entry of ``x``: GELU and the parts of its derivative that do not depend on the incoming
gradient, for instance::

    x ──┬─ x·x ── ·x ── ·0.0447 ── +x ── ·0.798 ── tanh ──┬─ +1 ──┬─ ·(x/2) ── y      (to the next layer)
        └─ ·0.5 ──────────────────────────────────────────┼───────┴──────────────── 1 + tanh   (to the backward pass)
                                                          └─ 1 − tanh² ─────────────────────── (to the backward pass)

Instead of each instruction's gadget, the circuit proves each value that leaves the region (its *exports*)
by one lookup of the packed pair ``(x + 2^(w−1)) + 2^w·(y + 2^(w−1))`` into the table of ``f`` (:mod:`.tables`),
and a range check of ``y``. The table is the fixed-point interpreter's own rules run on every ``x`` of the
format (:data:`circuitgrad.fixedpoint.FIXED_RULES`), so the witness is the same bit for bit; an ``x`` for which
any value of the region leaves the format is not in the table, as the per-instruction circuit has no
witness there either (its range checks fail), so both circuits accept the same steps.

Why it is sound: ``x`` is in the format (every value of a circuit is: range-checked or proven,
:mod:`.intervals`) and so is ``y`` (its range check), so the packed value is an integer in ``[0, 2^(2w))``
that determines both, with ``2w < log2 p``; it is in the table only if ``y = f(x)``. The logUp argument proves
membership (:mod:`~circuitgrad.backends.zk.systems.ligero.lookup`). Identical regions (one per layer) share their tables.

A region is fused only where it pays (``fuse="auto"``): the rows its instructions cost, against two lookups
per export and entry, and the tables' entries (those ``x`` of the format where the region is defined) once.
Formats wider than :data:`MAX_BITS` are not fused.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.fixedpoint import FIXED_RULES, FixedPointOverflow, constant_raw
from circuitgrad.schedule import Program
from circuitgrad.types import Fixed

from . import gadgets as G
from .gadgets import ONE
from .tables import MAX_FUNCTION_TABLES

__all__ = ["Region", "Plan", "plan", "ELEMENTWISE", "MAX_BITS", "FUSE"]

#: the instructions a region may hold, with the committed cells each costs per entry when lowered alone with
#: lookup range checks (for deciding what pays; :mod:`.lower` has the exact gadgets): about 4 per constraint
#: (``a``, ``b``, ``c`` and a wire) and :data:`LOOKUP_CELLS` per lookup
LOOKUP_CELLS = 6                 # v and its σL ≈ 5 inverses; a table entry costs as much (m and its σL terms)
ELEMENTWISE = {P.Mul: 4 + 2 * LOOKUP_CELLS, P.Scale: 4 + 2 * LOOKUP_CELLS, P.Add: LOOKUP_CELLS,
               P.Neg: LOOKUP_CELLS, P.Heaviside: 8 + 2 * LOOKUP_CELLS, P.Sigmoid: 40 + 8 * LOOKUP_CELLS,
               P.Tanh: 40 + 8 * LOOKUP_CELLS}
#: what an export costs per entry: its wire, the packed pair's lookup and its range check
EXPORT_CELLS = 1 + 2 * LOOKUP_CELLS
#: formats up to this width are fused (a table has ``2^w`` entries)
MAX_BITS = 20
#: data movement that keeps a constant constant
_MOVES = (P.Broadcast, P.Reshape, P.Transpose, P.Permute)


@dataclass
class Region:
    """One region: its root variable, its instructions (program order) and the variables it exports."""
    root: int
    instrs: list[int] = field(default_factory=list)
    exports: list[int] = field(default_factory=list)
    values: dict = field(default_factory=dict)      # export → its value on every x of the format (int64)
    valid: np.ndarray | None = None                 # which x of the format the region is defined on

    def signature(self, prog: Program, consts: dict) -> tuple:
        """The region's computation up to variable names: regions with equal signatures share their tables."""
        local = {self.root: 0}
        sig = []
        for i in self.instrs:
            a = prog.instrs[i]
            args = tuple(("c", consts[x]) if x in consts else local[x] for x in a.args)
            for r in a.results:
                local[r] = len(local)
            sig.append((a.op.name, getattr(a.op, "c", None), args))
        return tuple(sig), tuple(local[e] for e in self.exports)


@dataclass
class Plan:
    """The regions of a program that are fused, by instruction: what :func:`.circuit.compile_program` skips,
    and where each export's lookup goes."""
    dt: Fixed
    regions: list[Region] = field(default_factory=list)
    fused: dict = field(default_factory=dict)       # instruction index → its region
    tables: dict = field(default_factory=dict)      # (region signature, export position) → packed table

    def lower(self, L, i: int, a, env: dict) -> None:
        """Bind the exports among instruction ``i``'s results: a wire per entry, its packed pair looked up in
        the function's table, and its range check."""
        region = self.fused[i]
        b, dt = L.b, self.dt
        h, w = 1 << (dt.width - 1), dt.width
        x = np.ascontiguousarray(env[region.root]).reshape(-1)
        for r in a.results:
            if r not in region.values:
                continue
            y = b.alloc(x.size)
            key = b.function_table(self.tables[id(region), r], f"{a.path or 'program'}: {a.op.name}#{i}")
            b.table_lookup([(x, 1), (y, 1 << w), (ONE, h + (h << w))], "fused", key)
            values, valid, ctx = region.values[r], region.valid, b.context

            def fill(W, x=x, values=values, valid=valid, ctx=ctx):
                k = W[x] + h
                if k.size and not valid[k].all():
                    bad = int(W[x][~valid[k]][0])
                    raise FixedPointOverflow(f"{ctx}: an elementwise region leaves {dt} at input "
                                             f"{bad / dt.one:.6g}")
                return values[k]
            b.fill(y, fill)
            G.range_check(b, y, dt, "fused.range")
            env[r] = y.reshape(np.shape(env[region.root]))


def _evaluate(prog: Program, region: Region, consts: dict, dt: Fixed) -> None:
    """Run the region's instructions on every ``x`` of the format: each export's values and the validity."""
    x = np.arange(dt.lo, dt.hi + 1, dtype=np.int64)
    env = {region.root: x}
    valid = np.ones(len(x), dtype=bool)
    for i in region.instrs:
        a = prog.instrs[i]
        args = [np.int64(consts[v]) if v in consts else env[v] for v in a.args]
        for r, y in zip(a.results, FIXED_RULES[type(a.op)](a.op, *args)):
            y = np.broadcast_to(np.asarray(y, dtype=np.int64), x.shape)
            valid &= (y >= dt.lo) & (y <= dt.hi)
            env[r] = np.where(valid, y, 0)         # keep invalid entries small (they are never used)
    region.valid = valid
    region.values = {e: env[e] for e in region.exports}


def _regions(prog: Program, dt: Fixed) -> tuple[list[Region], dict]:
    consts: dict[int, int] = {}
    root: dict[int, int] = {}
    owner: dict[int, Region] = {}
    found: dict[int, Region] = {}
    for i, a in enumerate(prog.instrs):
        op = a.op
        if isinstance(op, P.Constant):
            consts[a.results[0]] = constant_raw(op, dt)
            continue
        if isinstance(op, _MOVES) and a.args[0] in consts:
            consts[a.results[0]] = consts[a.args[0]]
            continue
        if type(op) not in ELEMENTWISE:
            continue
        live = [x for x in a.args if x not in consts]
        roots = {root.get(x, x) for x in live}
        if len(roots) != 1:
            continue
        r0 = roots.pop()
        shape = prog.types[r0].shape
        if any(prog.types[v].shape != shape for v in list(a.args) + list(a.results)):
            continue
        region = found.setdefault(r0, Region(r0))
        region.instrs.append(i)
        owner[i] = region
        for v in a.results:
            root[v] = r0
    uses = prog.uses()
    outputs = set(prog.outputs)
    for region in found.values():
        inside = set(region.instrs)
        for i in region.instrs:
            for v in prog.instrs[i].results:
                if v in outputs or any(u not in inside for u in uses.get(v, [])):
                    region.exports.append(v)
    return list(found.values()), consts


#: ``fuse=`` of :func:`plan`: regions where they pay, every region, or none
FUSE = ("auto", "always", "never")


def plan(prog: Program, dt: Fixed, field_bits: float, lookups: bool, fuse: str = "auto") -> Plan:
    """The regions of ``prog`` to fuse in ``dt``: with ``fuse="auto"`` those worth it, with ``"always"`` every
    one; none without lookups, with ``"never"``, for formats wider than :data:`MAX_BITS`, or where packed pairs
    would not fit below the field's modulus."""
    if fuse not in FUSE:
        raise ValueError(f"fuse must be one of {list(FUSE)}, got {fuse!r}")
    out = Plan(dt)
    if fuse == "never" or not lookups or dt.width > MAX_BITS or 2 * dt.width + 1 >= field_bits:
        return out
    regions, consts = _regions(prog, dt)
    groups: dict[tuple, list[Region]] = {}
    for region in regions:
        if region.exports:
            groups.setdefault(region.signature(prog, consts), []).append(region)
    entries, tables = 1 << dt.width, 0
    for sig, members in groups.items():
        first = members[0]
        size = sum(int(np.prod(prog.types[r.root].shape, dtype=np.int64)) for r in members)
        saved = (sum(ELEMENTWISE[type(prog.instrs[i].op)] for i in first.instrs)
                 - EXPORT_CELLS * len(first.exports)) * size
        if fuse == "auto" and saved <= LOOKUP_CELLS * len(first.exports) * entries >> 4:
            continue                                          # the tables would cost more than they save
        if tables + len(first.exports) > MAX_FUNCTION_TABLES:
            continue                                          # no more tables than a proof may claim
        _evaluate(prog, first, consts, dt)
        if not first.valid.any() or (fuse == "auto" and
                                     saved <= LOOKUP_CELLS * len(first.exports) * int(first.valid.sum())):
            continue                                          # defined nowhere (its gadgets report it), or too dear
        packed = []
        for e in first.exports:
            k = np.flatnonzero(first.valid)
            packed.append(np.sort(k + (first.values[e][k] + (entries >> 1)) * entries))
        tables += len(first.exports)
        for region in members:
            if region is not first:
                region.valid = first.valid
                region.values = dict(zip(region.exports, (first.values[e] for e in first.exports)))
            for e, t in zip(region.exports, packed):
                out.tables[id(region), e] = t
            out.regions.append(region)
            for i in region.instrs:
                out.fused[i] = region
    return out
