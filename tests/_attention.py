"""One causal attention head as a fixed-point program, and its ZK constraints split into the attention weights'
and the rest (``tests/test_attention_cost.py``; ``bench/attention_targets.py`` tabulates them); attention and its
reverse derivative as one program, as a training step runs them (the GPU tests)."""
from __future__ import annotations

import circuitgrad as cg
from circuitgrad import ops
from circuitgrad import primitives as P
from circuitgrad.backends import zk
from circuitgrad.rewrite import simplify
from circuitgrad.schedule import Program, retype


def head(kind: str, S: int, dh: int, dt: cg.Fixed, reverse: bool) -> Program:
    T = cg.NdArrayType((S, dh))
    d = cg.trace(lambda q, k, v: ops.attention(q, k, v, causal=True, kind=kind), [T, T, T], name=f"{kind}-head")
    if reverse:
        d = cg.rdiff(d)
    return simplify(retype(cg.schedule(d), dt))       # as compile_model does


def step(kind: str, T: cg.NdArrayType, causal: bool = True) -> Program:
    """``O, dq, dk, dv``: attention of ``kind`` over ``q, k, v`` (each of type ``T``) and the reverse derivative
    from the output's cotangent ``do``; its inputs ``q, k, v, do``."""
    d = cg.trace(lambda q, k, v: ops.attention(q, k, v, causal=causal, kind=kind), [T] * 3, name=f"{kind}_attention")
    R = cg.rdiff(d)

    def both(q, k, v, do):
        o = d(q, k, v)
        return (*(o if isinstance(o, tuple) else (o,)), *R(q, k, v, do))
    return simplify(cg.schedule(cg.trace(both, [T] * 4, name="fb")))


def shared(prog: Program, i: int) -> bool:
    """Instruction ``i`` is one of the products both kinds share (``q·kᵀ``, ``a·v`` and their reverse maps),
    not a contraction of the weights' own (a row's sum of squares or of ``a·da``: results ``[..., 1, 1]``)."""
    a = prog.instrs[i]
    return isinstance(a.op, (P.MatMul, P.BatchMatMul)) and prog.types[a.results[0]].shape[-2:] != (1, 1)


def constraints(prog: Program, dt: cg.Fixed, range_checks: str = "bits") -> tuple[int, int]:
    """(all constraints, those of the attention weights: every instruction but the shared products and
    the input/output checks). With ``range_checks="lookup"``, lookups count as well (constraints + lookups)."""
    c = zk.compile_program(prog, dt, range_checks=range_checks)
    r = c.r1cs
    common = 0
    for tags, rows in [(r.tags, r.block_rows), (r.lookup_tags, r.lookup_block_rows)]:
        for tag, n in zip(tags, (rows[1:] - rows[:-1])):
            where = tag.split(":", 1)[0]
            if where.startswith(("input", "output")) or ("#" in where and shared(prog, int(where.split("#")[1]))):
                common += int(n)
    total = r.n_constraints + r.n_lookups
    return total, total - common
