"""The memory plan: where every tensor of a micro-op program lives, in block RAM or single-port RAM.

::

    addresses   0 … ram_words − 1             block RAM: constants, tables, what SPRAM cannot hold
                spram_base + j·16384 + …      SPRAM block j (iCE40 UP5K: four 16K × 16 SB_SPRAM256KA)

A *region* is one allocation of the lowering (a tensor, a constant, a table). It lives from the first
micro-op that touches it to the last one; inputs and constants live throughout (the host loads them, the
bitstream initializes them), outputs from their first write to the end (the host reads them). Regions
whose lifetimes do not overlap share addresses, best fit.

A training step's updated parameters and optimizer state are *written back* over their inputs. An output is
computed in its input's memory when nothing reads the input once the output is first written, or only
an elementwise update in place does (each word read by the element that overwrites it; with SPRAM only
for regions of at most ``SMALL`` words, since such a region stays in block RAM); otherwise a ``copy``
micro-op stores it at the end.

Block RAM has a copy per read port, so a micro-op reads two words and writes one in any cycle. A single-port
RAM block does one access per cycle, and the sequencer overlaps a micro-op's reads and writes, so the plan
places a region in SPRAM only where no micro-op touches that block through two of its streams (``a``,
``b``, ``out``): a region read or written twice by one micro-op (``x·x``, an update in place) stays in block
RAM, as do constants (SPRAM has no initial contents). Largest regions first, each in the first block with
no conflicting region and room for it. The cycle model does not change: SPRAM reads take the same two
cycles as block RAM. ``simulate(..., check_collisions=True)`` checks cycle by cycle that no used read
meets another access of its block.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from circuitgrad.types import Fixed

from .isa import SPRAM_WORDS, MicroOp, Microcode, View, legalise

__all__ = ["legal", "plan_memory", "SMALL"]

#: with SPRAM, a written-back region of at most this many words is still updated in place (and stays in block
#: RAM): a copy would cost a micro-op, more than the block RAM it frees
SMALL = 64


def legal(ops: Sequence[MicroOp]) -> list[MicroOp]:
    """``ops`` legalised to the sequencer's two loop counters (:func:`~.isa.legalise`), empty blocks dropped."""
    return [part for u in ops for part in legalise(u) if part.out.size]      # an empty block moves nothing


def _spans(ops: list[MicroOp], region: Callable[[View], int]) -> tuple[dict[int, int], dict[int, int]]:
    """The first and last micro-op touching each region."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for j, u in enumerate(ops):
        for v in (u.out, u.a, u.b):
            if v is not None:
                r = region(v)
                first.setdefault(r, j)
                last[r] = j
    return first, last


def _whole(v: View, start: int, size: int) -> bool:
    """Whether ``v`` is the region ``[start, start + size)`` in row-major order."""
    return v.size == size and np.array_equal(v.addresses().reshape(-1), np.arange(start, start + size))


def _in_place(ops: list[MicroOp], region: Callable[[View], int], regions: list[tuple[int, int]], back: MicroOp,
              overlap: bool = True) -> bool:
    """Whether the output that ``back`` (a write-back copy) stores can be computed in its input's memory.

    It can when every micro-op that reads the input has finished before the output is first written, or
    (``overlap``) when the micro-ops in between are elementwise updates in place (``K = 1``, reading the
    input through the view they write, each word once): every word is then read by the element that
    overwrites it.
    """
    r_in, r_out = region(back.out), region(back.a)
    (s_in, n), (s_out, n_out) = regions[r_in], regions[r_out]
    if n != n_out or not _whole(back.out, s_in, n) or not _whole(back.a, s_out, n):
        return False
    reads = [j for j, u in enumerate(ops) if any(v is not None and region(v) == r_in for v in (u.a, u.b))]
    writes = [j for j, u in enumerate(ops) if region(u.out) == r_out]
    if not writes or any(region(u.out) == r_in for u in ops):
        return False
    if not overlap and reads and reads[-1] >= writes[0]:
        return False
    done = np.zeros(n, dtype=bool)                # output words already written over the input
    for j in range(writes[0], (reads[-1] if reads else -1) + 1):
        u = ops[j]
        mine = [v for v in (u.a, u.b) if v is not None and region(v) == r_in]
        if not mine:
            if region(u.out) == r_out:
                done[u.out.addresses().reshape(-1) - s_out] = True
            continue
        if region(u.out) != r_out or u.K != 1 or any(replace(v, base=v.base - s_in + s_out) != u.out for v in mine):
            return False
        words = u.out.addresses().reshape(-1) - s_out
        if done[words].any():
            return False
        done[words] = True
    return True


def _lay_out(members: Sequence[int], pinned: Sequence[int], sizes: Sequence[int], first: dict[int, int],
             last: dict[int, int]) -> tuple[dict[int, int], int]:
    """Offsets of ``pinned`` (at the bottom, in order) and ``members`` (best fit by first use) in one memory,
    and its size.

    Every region gets the smallest free block it fits (best fit: first fit let a 16-word dot product split
    a 256-word block and pushed a head's memory past 2048 words, one more address bit everywhere), or the
    free block on top, grown, at its first micro-op. A block is free once its last reader has finished: the
    drain between micro-ops guarantees that, while a micro-op that reads a region cannot be writing it.
    """
    new: dict[int, int] = {}
    top = 0
    for r in pinned:
        new[r] = top
        top += sizes[r]
    free: list[list[int]] = []                  # [start, size] blocks, kept sorted and merged
    live: list[int] = []
    for r in sorted(members, key=lambda r: (first[r], r)):
        for d in [d for d in live if last[d] < first[r]]:
            live.remove(d)
            free.append([new[d], sizes[d]])
            free.sort()
            merged = [free[0]]
            for blk in free[1:]:
                if merged[-1][0] + merged[-1][1] == blk[0]:
                    merged[-1][1] += blk[1]
                else:
                    merged.append(blk)
            free = merged
        size = sizes[r]
        blk = min((b for b in free if b[1] >= size), key=lambda b: (b[1], b[0]), default=None)
        if blk is None and free and free[-1][0] + free[-1][1] == top:        # grow the free block on top
            blk = free[-1]
            top += size - blk[1]
            blk[1] = size
        if blk is None:
            new[r] = top
            top += size
        else:
            new[r] = blk[0]
            blk[0] += size
            blk[1] -= size
            free = [b for b in free if b[1]]
        live.append(r)
    return new, top


def _spram_blocks(ops: list[MicroOp], unit: Callable[[View], int], units: Sequence[int], fixed: set[int],
                  pinned: set[int], sizes: Sequence[int], first: dict[int, int], last: dict[int, int],
                  blocks: int) -> dict[int, int]:
    """The SPRAM block of each region placed there (see the module docstring): largest first, each in the
    first block where no micro-op also touches another of the block's regions and the block's layout fits."""
    if not blocks:
        return {}
    twice: set[int] = set(fixed)
    meets: dict[int, set[int]] = {r: set() for r in units}
    for u in ops:
        touched = [unit(v) for v in (u.out, u.a, u.b) if v is not None]
        twice |= {r for r in touched if touched.count(r) > 1}
        for r in touched:
            meets[r] |= set(touched) - {r}
    where: dict[int, int] = {}
    members: list[list[int]] = [[] for _ in range(blocks)]
    for r in sorted((r for r in units if r not in twice and sizes[r] <= SPRAM_WORDS), key=lambda r: (-sizes[r], r)):
        for j in range(blocks):
            if any(where.get(o) == j for o in meets[r]):
                continue
            now = members[j] + [r]
            _, top = _lay_out([m for m in now if m not in pinned], [m for m in now if m in pinned], sizes, first, last)
            if top <= SPRAM_WORDS:
                where[r] = j
                members[j].append(r)
                break
    return where


def plan_memory(dt: Fixed, ops: list[MicroOp], regions: list[tuple[int, int]], init: dict[int, int],
                ins: list[View], outs: list[View], backs: Sequence[MicroOp] = (), spram: int = 0) -> Microcode:
    """Re-lay ``ops``' memory (``regions``: the lowering's ``(start, size)`` allocations, in address order) as
    the module docstring says; ``backs`` are the write-back copies, ``spram`` the SPRAM blocks it may use."""
    starts = np.array([r[0] for r in regions], dtype=np.int64)
    sizes = [r[1] for r in regions]

    def region(v: View) -> int:
        return int(np.searchsorted(starts, v.base, side="right")) - 1

    consts = {region(View(a, (), ())) for a in init}
    pinned = sorted({region(v) for v in ins} | consts)
    alias: dict[int, int] = {}                  # output region -> the input region it is computed in
    copies = []
    for c in backs:
        r_out = region(c.a)
        overlap = not spram or sizes[r_out] <= SMALL       # with SPRAM, a large region is worth moving out of block RAM
        if r_out not in alias and r_out not in pinned and _in_place(ops, region, regions, c, overlap=overlap):
            alias[r_out] = region(c.out)
        else:
            copies.append(c)
    ops = ops + legal(copies)
    first, last = _spans(ops, region)
    for v in outs:
        last[region(v)] = len(ops)              # read by the host after the run
    units = [r for r in sorted(set(first) | set(pinned)) if r not in alias]

    def unit(v: View) -> int:
        r = region(v)
        return alias.get(r, r)

    where = _spram_blocks(ops, unit, units, consts, set(pinned), sizes, first, last, spram)
    used = sorted(set(where.values()))
    homes = [[r for r in units if r not in where]] + [[r for r in units if where.get(r) == j] for j in used]
    offsets: dict[int, int] = {}
    tops = []
    for members in homes:
        new, top = _lay_out([r for r in members if r not in pinned], [r for r in pinned if r in members], sizes,
                            first, last)
        offsets.update(new)
        tops.append(top)
    base = SPRAM_WORDS * max(1, -(-tops[0] // SPRAM_WORDS)) if used else 0
    home_base = [0] + [base + i * SPRAM_WORDS for i in range(len(used))]
    home = {r: i for i, members in enumerate(homes) for r in members}
    new = {r: home_base[home[r]] + offsets[r] for r in units}
    for r_out, r_in in alias.items():
        new[r_out] = new[r_in]

    def move(v: View | None) -> View | None:
        if v is None:
            return None
        r = region(v)
        return replace(v, base=new[r] + v.base - regions[r][0])

    ops2 = [replace(u, out=move(u.out), a=move(u.a), b=move(u.b)) for u in ops]
    init2 = {new[region(View(a, (), ()))] + a - regions[region(View(a, (), ()))][0]: val for a, val in init.items()}
    ins2, outs2 = [move(v) for v in ins], [move(v) for v in outs]
    if not used:
        return Microcode(dt, ops2, tops[0], init2, ins2, outs2)
    return Microcode(dt, ops2, base + len(used) * SPRAM_WORDS, init2, ins2, outs2, spram_blocks=len(used),
                     bram_words=tops[0], spram_words=sum(tops[1:]))
