"""Which visible node each instruction of a program belongs to: the definition path of every
instruction (:func:`effective_paths`, plumbing included), the passes through a definition
(:func:`phases`: a layer and its reverse map) and the split that keeps the visible graph acyclic
(:func:`acyclic`).  Used by :mod:`.builder`; imports no other drawing module.
"""
from __future__ import annotations

import os

from ..schedule import Program


def lca(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The longest common prefix (segment by segment)."""
    return tuple(os.path.commonprefix(paths))


def split_path(path: str) -> tuple[str, ...]:
    """A definition path as its segments (``""``: none)."""
    return tuple(path.split("/")) if path else ()


def effective_paths(prog: Program) -> list[tuple[str, ...]]:
    """Each instruction's definition path; plumbing (path ``""``: copies, gradient sums) goes to the
    innermost definition holding its defined neighbours (where the wire it sums lives), else to
    that of its plumbing neighbours."""
    prod = prog.producers()
    uses = prog.uses()
    own = [split_path(a.path) for a in prog.instrs]
    eff: list[tuple[str, ...] | None] = [p if p else None for p in own]
    todo = [i for i, p in enumerate(own) if not p]

    def near(i: int) -> list[int]:
        a = prog.instrs[i]
        return [prod[x] for x in a.args if x in prod] + [u for r in a.results for u in uses.get(r, [])]
    for i in todo:
        nb = [own[j] for j in near(i) if own[j]]
        if nb:
            eff[i] = lca(nb)
    for sweep in range(4):
        for i in (todo if sweep % 2 == 0 else todo[::-1]):
            if eff[i] is None:
                nb = [eff[j] for j in near(i) if eff[j] is not None]
                if nb:
                    eff[i] = lca(nb)
    return [p if p is not None else () for p in eff]


# ----------------------------------------------------------------------------------- passes
def phases(prog: Program, member: list[list[tuple]], static: list[bool]) -> list[dict[tuple, int]]:
    """``phase[i][k]`` for each group ``k`` instruction ``i`` belongs to: how many times a path of
    operations into ``i`` has left ``k`` and come back.  Operations on parameters alone take the
    phase of their consumers."""
    prod, uses = prog.producers(), prog.uses()
    n = len(prog.instrs)
    st = [all(static[x] for x in a.args) for a in prog.instrs]
    phase: list[dict[tuple, int]] = [{} for _ in range(n)]
    anc: list[dict[tuple, int]] = [{} for _ in range(n)]
    for i, a in enumerate(prog.instrs):
        if st[i]:
            continue
        preds = [prod[x] for x in a.args if x in prod and not st[prod[x]]]
        acc: dict[tuple, int] = {}
        for j in preds:
            for k, q in anc[j].items():
                if q > acc.get(k, -1):
                    acc[k] = q
        for k in member[i]:
            ph = 0
            for j in preds:
                if k in phase[j]:
                    ph = max(ph, phase[j][k])
                elif k in anc[j]:
                    ph = max(ph, anc[j][k] + 1)
            phase[i][k] = ph
            acc[k] = max(acc.get(k, -1), ph)
        anc[i] = acc
    for i in range(n - 1, -1, -1):
        if st[i]:
            for k in member[i]:
                cs = [phase[u][k] for r in prog.instrs[i].results for u in uses.get(r, []) if k in phase[u]]
                phase[i][k] = min(cs) if cs else 0
    return phase


def acyclic(prog: Program, keys: list[tuple]) -> list[tuple]:
    """``keys`` (the visible node of each instruction), with the nodes on or after a cycle of the
    quotient graph split by the number of node changes along the longest path into each operation."""
    prod = prog.producers()
    ids = {k: j for j, k in enumerate(dict.fromkeys(keys))}
    succ: dict[int, set[int]] = {}
    indeg = [0] * len(ids)
    for i, a in enumerate(prog.instrs):
        for x in a.args:
            if x in prod and ids[keys[prod[x]]] != ids[keys[i]]:
                s, d = ids[keys[prod[x]]], ids[keys[i]]
                if d not in succ.setdefault(s, set()):
                    succ[s].add(d)
                    indeg[d] += 1
    ready = [j for j in range(len(ids)) if indeg[j] == 0]
    done = set()
    while ready:
        j = ready.pop()
        done.add(j)
        for d in sorted(succ.get(j, ())):
            indeg[d] -= 1
            if indeg[d] == 0:
                ready.append(d)
    if len(done) == len(ids):
        return keys
    lev = [0] * len(keys)
    for i, a in enumerate(prog.instrs):
        lev[i] = max([lev[prod[x]] + (keys[prod[x]] != keys[i]) for x in a.args if x in prod], default=0)
    return [k if ids[k] in done else k + (("pass", lev[i]),) for i, k in enumerate(keys)]
