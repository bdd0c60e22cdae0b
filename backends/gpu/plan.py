"""Fusion planning: an SSA program as a short list of GPU launches.

Elementwise primitives (``Add, Neg, Mul, Scale, Heaviside, Sigmoid, Tanh``)
with the same output shape are fused into one kernel. Inputs that are
broadcast or scalar constants are read through index arithmetic and
literals, so they are never materialised. The remaining instructions become
``matmul`` (cuBLAS), ``reduce`` (SumTo), ``rowwise`` (Softmax, LogSumExp)
and ``view`` (Transpose, Reshape, Copy: no launch) steps.

Grouping rule. An instruction joins the group of one of its producers when
the output shapes match, and every input it takes from outside the group was
produced before the group's first instruction. The whole group then runs at
the position of its first instruction. Every input is ready by then, and
every consumer comes later, so the order stays topological.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.interpret import FLOAT_RULES
from circuitgrad.schedule import Apply, Program

__all__ = ["ELEMENTWISE", "Launch", "Plan", "plan"]

ELEMENTWISE = (P.Add, P.Neg, P.Mul, P.Scale, P.Heaviside, P.Sigmoid, P.Tanh)


@dataclass
class Launch:
    """One step of the plan.

    ``kind`` is ``fused``, ``matmul``, ``reduce``, ``rowwise``, ``view`` or ``const``.
    ``instrs`` are the SSA instructions it executes (in order); ``inputs`` the
    variables it reads from memory; ``outputs`` the variables it writes.
    """
    kind: str
    instrs: list[Apply]
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    @property
    def launches(self) -> int:
        """Kernel launches this step costs (views and hoisted constants cost none)."""
        return 0 if self.kind in ("view", "const") else 1


@dataclass
class Plan:
    program: Program
    steps: list[Launch]
    folded: dict[int, int]         # Broadcast/Copy result variable -> the variable it reads
    constants: dict[int, float]    # uniform constant variables (inlined as literals)
    values: dict[int, np.ndarray] = field(default_factory=dict)   # every compile-time constant

    @property
    def launches(self) -> int:
        return sum(s.launches for s in self.steps)

    def src(self, v: int) -> int:
        """The variable ``v`` really reads: folded copies and broadcasts resolved."""
        while v in self.folded:
            v = self.folded[v]
        return v


def plan(prog: Program) -> Plan:
    """The fusion plan of ``prog`` (see the module docstring)."""
    producer, uses = prog.producers(), prog.uses()
    outputs = set(prog.outputs)
    # constant folding: every instruction whose arguments are all known is evaluated now
    values: dict[int, np.ndarray] = {}
    for a in prog.instrs:
        if all(x in values for x in a.args) and not isinstance(a.op, (P.Parameter, P.Copy)):
            for r, v in zip(a.results, FLOAT_RULES[type(a.op)](a.op, *(values[x] for x in a.args))):
                values[r] = np.asarray(v, dtype=prog.types[r].dtype.numpy_dtype())
    constants = {v: float(val.reshape(-1)[0]) for v, val in values.items()
                 if val.size and np.all(val == val.reshape(-1)[0])}
    folded: dict[int, int] = {}

    def src(v: int) -> int:
        while v in folded:
            v = folded[v]
        return v

    group_of: dict[int, int] = {}          # instruction index -> group id
    groups: list[list[int]] = []
    start: list[int] = []
    for i, a in enumerate(prog.instrs):
        if a.results and all(r in values for r in a.results):
            continue
        if isinstance(a.op, P.Copy):
            for r in a.results:
                folded[r] = a.args[0]
            continue
        if isinstance(a.op, P.Broadcast) and all(
                isinstance(prog.instrs[j].op, ELEMENTWISE) for j in uses.get(a.results[0], [])) \
                and a.results[0] not in outputs:
            folded[a.results[0]] = a.args[0]
            continue
        if not isinstance(a.op, ELEMENTWISE):
            continue
        shape = prog.types[a.results[0]].shape
        chosen = None
        for x in a.args:
            j = producer.get(src(x))
            if j is None or j not in group_of:
                continue
            g = group_of[j]
            if prog.types[prog.instrs[j].results[0]].shape != shape:
                continue
            ok = all((producer.get(src(y)) in groups[g]) or producer.get(src(y), -1) < start[g]
                     or src(y) in constants for y in a.args)
            if ok:
                chosen = g
                break
        if chosen is None:
            chosen = len(groups)
            groups.append([])
            start.append(i)
        groups[chosen].append(i)
        group_of[i] = chosen

    # producer inlining: a group whose results feed only one later group of the same shape joins it
    for g in range(len(groups) - 1, -1, -1):
        if not groups[g]:
            continue
        results = [r for j in groups[g] for r in prog.instrs[j].results]
        consumers = {group_of.get(k) for r in results for k in _uses_through(r, uses, folded, prog)}
        if len(consumers) != 1 or any(src(o) in results for o in outputs):
            continue
        (h,) = consumers
        if h is None or h == g or start[h] < start[g]:
            continue
        if prog.types[prog.instrs[groups[h][0]].results[0]].shape != \
                prog.types[prog.instrs[groups[g][0]].results[0]].shape:
            continue
        for j in groups[g]:
            group_of[j] = h
        groups[h] = sorted(groups[g] + groups[h])     # runs at start[h]: g's inputs are older still
        groups[g] = []

    steps: list[Launch] = []
    emitted: set[int] = set()
    for i, a in enumerate(prog.instrs):
        if i in emitted or isinstance(a.op, P.Copy) or (isinstance(a.op, P.Broadcast) and a.results[0] in folded):
            continue
        if a.results and all(r in values for r in a.results):
            if any(k not in emitted for r in a.results for k in uses.get(r, [])) or \
                    any(r in outputs for r in a.results):
                steps.append(Launch("const", [a], [], list(a.results)))
            continue
        if i in group_of:
            if i != start[group_of[i]]:
                continue                              # emitted with its group, at the group's start
            members = groups[group_of[i]]
            emitted.update(members)
            inside = {r for j in members for r in prog.instrs[j].results}
            ins: list[int] = []
            for j in members:
                for x in prog.instrs[j].args:
                    s = src(x)
                    if s not in inside and s not in ins and s not in constants:
                        ins.append(s)
            outs = [r for j in members for r in prog.instrs[j].results
                    if r in outputs or any(k not in members for k in uses.get(r, []))
                    or any(src(r) == src(o) for o in outputs)]
            steps.append(Launch("fused", [prog.instrs[j] for j in members], ins, outs))
            continue
        kind = {P.MatMul: "matmul", P.SumTo: "reduce", P.Softmax: "rowwise", P.LogSumExp: "rowwise",
                P.Transpose: "view", P.Reshape: "view", P.Broadcast: "view"}.get(type(a.op))
        if kind is None:
            raise NotImplementedError(f"GPU backend: no rule for {a.op}")
        steps.append(Launch(kind, [a], [src(x) for x in a.args], list(a.results)))
    return Plan(prog, steps, folded, constants, values)


def _uses_through(v: int, uses: dict[int, list[int]], folded: dict[int, int], prog: Program) -> list[int]:
    """Instructions that read ``v`` directly or through folded aliases (copies, broadcasts)."""
    out = []
    for k in uses.get(v, []):
        a = prog.instrs[k]
        if any(r in folded for r in a.results):
            for r in a.results:
                out.extend(_uses_through(r, uses, folded, prog))
        else:
            out.append(k)
    return out
