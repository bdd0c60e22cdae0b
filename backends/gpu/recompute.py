"""Values made again for the backward pass's products, instead of kept from the forward pass.

A training step's forward pass makes values that products read twice: at once (the layer's next product) and
again in the backward pass (the weight's gradient ``xᵀ·dy``). Kept in between, such a value is held through the
rest of the forward pass and part of the backward: a GPT's layer-norm and GELU outputs are most of its
activations. Where a value is elementwise work on values alive at the later product anyway, :func:`recompute`
makes it again just before that product, from a copy of its instructions, so it is freed after the earlier
readers::

    h --[gelu]--> y --> y·W (forward)            h --[gelu]--> y  --> y·W (forward)
                  |                     becomes
                  '---------> yᵀ·dz (backward)   h --[gelu]--> y' --> y'ᵀ·dz (backward)

``h`` is alive until the backward pass anyway (the GELU's derivative reads it), so the copy keeps no value
longer: the step holds ``y`` for the layer's product alone. The copy computes the same operations on the
same operands, so the products read the same bits. It costs one more launch, and a read of its inputs: the
plan fuses a value's copies together and with nothing else (fused with other work, they would run at its
earlier position, or it at theirs), and recomputes inside them what the forward kernel does not store
(:func:`~.passes.choose_unstored`). This is what
PyTorch's ``torch.compile`` does to elementwise work between its forward and backward graphs.

A value is made again when:

* an elementwise instruction makes it, of at least :data:`BYTES` bytes (smaller models are bound by launches,
  not by memory), and it is not an output of the step;
* its readers, through views and copies, fall in two runs with a product between them that does not read it
  (the forward and the backward pass), and the later run are all products;
* its instructions, traced back to values alive at the later run's first reader anyway (the step's inputs, or
  values something reads from there on), are at most :data:`LIMIT` elementwise, view or copy instructions;
* none of those inputs is a donated parameter whose update may run before the later run (written in place, it
  would change what the copy reads, so the step would not donate it), and none is a value made again, or a view
  or copy of one.
"""
from __future__ import annotations

import math
from dataclasses import replace

from circuitgrad.schedule import Apply, Program

__all__ = ["recompute", "BYTES", "LIMIT"]

#: the smallest value made again (bytes of its float type); smaller ones are kept
BYTES = 4 << 20
#: the most instructions a value is made again from
LIMIT = 32

_PASS_THROUGH = ("view", "copy")


def recompute(prog: Program, updates: dict[int, int] | None = None) -> tuple[Program, dict[Apply, int]]:
    """``prog`` with the values described above made again for their later products, and the instructions added,
    each with the number of the value it helps make again (the plan fuses them with copies of the same value
    alone). ``updates``: donated input -> the output written into it."""
    a = _Analysis(prog, updates or {})
    remade: set[int] = set()
    plans = []
    for ins in prog.instrs:
        if ins.op.kind != "elementwise" or len(ins.results) != 1:
            continue
        r = ins.results[0]
        if a.bytes(r) < BYTES:
            continue
        found = a.candidate(r)
        if found is None:
            continue
        at, late, views, cone, leaves = found
        if any(a.base(v) in remade for v in leaves):
            continue                       # it would read, and keep, a value made again (or a view of one)
        remade.add(r)
        plans.append((r, at, late, views, cone))
    if not plans:
        return prog, {}
    types = list(prog.types)
    insert: dict[int, list[Apply]] = {}
    rewrite: dict[int, dict[int, int]] = {}
    added: dict[Apply, int] = {}
    for n, (r, at, late, views, cone) in enumerate(plans):
        new: dict[int, int] = {}
        copies = []
        for j in sorted(cone + views):
            old = prog.instrs[j]
            for v in old.results:
                new[v] = len(types)
                types.append(prog.types[v])
            copies.append(replace(old, args=tuple(new.get(x, x) for x in old.args),
                                  results=tuple(new[v] for v in old.results)))
            added[copies[-1]] = n
        insert.setdefault(at, []).extend(copies)
        for k in late:
            rewrite.setdefault(k, {}).update(new)
    instrs: list[Apply] = []
    for k, ins in enumerate(prog.instrs):
        instrs += insert.get(k, [])
        m = rewrite.get(k)
        instrs.append(ins if m is None else replace(ins, args=tuple(m.get(x, x) for x in ins.args)))
    out = Program(types, list(prog.inputs), list(prog.outputs), instrs, prog.name, list(prog.layers))
    return out, added


class _Analysis:
    """Who reads what, and where, in one program."""

    def __init__(self, prog: Program, updates: dict[int, int]):
        self.prog, self.updates = prog, updates
        self.producer = prog.producers()
        self.uses = {v: sorted(set(ks)) for v, ks in prog.uses().items()}
        self.inputs, self.outputs = set(prog.inputs), set(prog.outputs)
        self._leaves: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
        self._ready: dict[int, int] = {}

    def bytes(self, v: int) -> int:
        t = self.prog.types[v]
        return math.prod(t.shape) * t.dtype.numpy_dtype().itemsize

    def leaves(self, v: int) -> list[tuple[int, tuple[int, ...]]]:
        """``(reader, views)``: each instruction reading ``v`` through views and copies, and those views' indices;
        a reader ``-1`` where a view of ``v`` is an output."""
        if v not in self._leaves:
            out: list[tuple[int, tuple[int, ...]]] = [(-1, ())] if v in self.outputs else []
            for k in self.uses.get(v, []):
                ins = self.prog.instrs[k]
                if ins.op.kind in _PASS_THROUGH:
                    out += [(j, (k,) + path) for r in ins.results for j, path in self.leaves(r)]
                else:
                    out.append((k, ()))
            self._leaves[v] = out
        return self._leaves[v]

    def alive(self, v: int, at: int) -> bool:
        """``v`` is in memory at instruction ``at`` whatever is made again: an input whose update in place cannot run
        before ``at``, or a value something reads from ``at`` on."""
        if v in self.inputs:
            return v not in self.updates or self.ready(self.updates[v]) >= at
        return any(k >= at or k < 0 for k, _ in self.leaves(v))

    def base(self, v: int) -> int:
        """The variable ``v`` views or copies (``v`` itself if it is neither)."""
        while (j := self.producer.get(v)) is not None and self.prog.instrs[j].op.kind in _PASS_THROUGH:
            v = self.prog.instrs[j].args[0]
        return v

    def ready(self, v: int) -> int:
        """The last instruction other than elementwise work, views, copies and sources that ``v`` depends on through
        such work: the kernel making ``v`` runs after it, wherever the plan groups it (-1: none, it may run first)."""
        if v in self._ready:
            return self._ready[v]
        todo = [v]
        while todo:                        # depth first, without recursion: elementwise chains run across layers
            u = todo[-1]
            j = self.producer.get(u)
            ins = self.prog.instrs[j] if j is not None else None
            if ins is None or ins.op.kind not in ("elementwise", "source", *_PASS_THROUGH):
                self._ready[u] = -1 if j is None else j
                todo.pop()
                continue
            missing = [x for x in ins.args if x not in self._ready]
            if missing:
                todo.extend(missing)
                continue
            self._ready[u] = max((self._ready[x] for x in ins.args), default=-1)
            todo.pop()
        return self._ready[v]

    def candidate(self, r: int):
        """``(at, late readers, their views, instructions to copy, values the copy reads)`` for ``r``, or None."""
        leaves = self.leaves(r)
        if any(k < 0 for k, _ in leaves):
            return None
        order = sorted({k for k, _ in leaves})
        split = next((n for n in range(1, len(order)) if self._product_between(order[n - 1], order[n], r)), None)
        if split is None:
            return None
        at = order[split]
        late = order[split:]
        if any(self.prog.instrs[k].op.kind != "contraction" for k in late):
            return None
        views = sorted({j for k, path in leaves if k >= at for j in path})
        cone: list[int] = []
        reads: set[int] = set()
        if not self._trace(r, at, cone, reads, top=True):
            return None
        return at, late, views, cone, reads

    def _product_between(self, lo: int, hi: int, r: int) -> bool:
        readers = {k for k, _ in self.leaves(r)}
        return any(self.prog.instrs[k].op.kind == "contraction" and k not in readers for k in range(lo + 1, hi))

    def _trace(self, v: int, at: int, cone: list[int], reads: set[int], top: bool = False) -> bool:
        """Add to ``cone`` the instructions making ``v`` from values alive at ``at`` (added to ``reads``)."""
        if not top and self.alive(v, at):
            reads.add(v)
            return True
        j = self.producer.get(v)
        if j is None:
            return False
        if j in cone:
            return True
        ins = self.prog.instrs[j]
        if ins.op.kind not in ("elementwise", *_PASS_THROUGH) and not (ins.op.kind == "source" and not ins.args):
            return False
        cone.append(j)
        if len(cone) > LIMIT:
            return False
        return all(self._trace(x, at, cone, reads) for x in ins.args)
