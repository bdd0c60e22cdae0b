"""Microcode: a fixed-point SSA program as loops over one data memory.

The FPGA sequencer runs *micro-ops*. Each one loops over the elements of its
output tensor, and optionally over a reduction index ``k``. Every operand is
an affine *view* of the data memory:

    address(o, k) = base + Σ_d o_d · stride_d + k · kstride

Transposes, permutations, slices, broadcasts and most reshapes therefore cost
nothing: they only change strides (a reshape that no strides express is one
``copy``). A constant is one memory word read with stride 0.

Micro-op kinds (``mac``, ``max``, ``argmax``, ``exp``, ``add``, ``neg``, ``heaviside``, ``sigmoid``,
``tanh``, ``eq``, ``log``, ``copy``, ``divf``, ``div``, ``sqrt``) are the enum :class:`~.kinds.Kind`; what each
computes, its operands, unit and timing are its row of :data:`~.kinds.FACTS`.

Layout rules live in :mod:`.rules`; views and the micro-op record in :mod:`.isa`. After lowering,
:func:`~.isa.legalise` splits every micro-op into ones whose views fold to two axes, the sequencer's
loop counters (a batched matmul runs one micro-op per batch index unless its operands nest).

Every result is range checked against the fixed-point width, as in the
interpreter. :func:`execute` is a NumPy model of exactly this arithmetic; the
Amaranth design is tested against it, and it against the interpreter.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from circuitgrad.fixedpoint import (FixedPointOverflow, div_fixed, exp_fixed, log_fixed, rescale, sigmoid_fixed,
                                    sqrt_fixed)
from circuitgrad.schedule import Program
from circuitgrad.types import Fixed

from .isa import MicroOp, Microcode, View, contiguous
from .kinds import Kind, facts
from .memory_plan import legal, plan_memory
from .rules import FPGA_RULES, UNSUPPORTED, Context

__all__ = ["View", "MicroOp", "Microcode", "compile_program", "execute", "UNSUPPORTED", "FPGA_RULES",
           "ELEMENTWISE_MODELS", "REDUCTION_MODELS", "DOMAINS", "elementwise_model"]


def compile_program(prog: Program, dt: Fixed, write_back: int = 0, reuse: bool = True, spram: int = 0) -> Microcode:
    """Lay out ``prog``'s tensors in one memory and emit its micro-ops.

    ``write_back = n`` stores the first ``n`` outputs into the memory of the
    first ``n`` inputs. This is how a training step updates its parameters
    and optimizer state *in on-chip memory*, so the next step only needs a
    new batch. An output is computed in its input's memory when nothing reads
    the input after the output is first written (or only an elementwise update
    in place does); otherwise a ``copy`` micro-op at the end stores it, because
    an update may be computed before a gradient that still reads the old value.

    ``reuse`` (default) lets intermediate tensors share memory when their lifetimes do
    not overlap, and ``spram`` is the number of single-port RAM blocks it may place tensors in
    (:func:`~.memory_plan.plan_memory`).
    """
    env: dict[int, View] = {}
    top = 0
    init: dict[int, int] = {}
    consts: dict[int, int] = {}
    ops: list[MicroOp] = []
    regions: list[tuple[int, int]] = []          # (start, size) of every allocation, in address order

    def alloc(shape) -> View:
        nonlocal top
        v = contiguous(top, tuple(shape))
        size = max(1, int(np.prod(shape, dtype=np.int64)))
        regions.append((top, size))
        top += size
        return v

    def constant(raw: int) -> int:
        nonlocal top
        if raw not in consts:
            consts[raw] = top
            init[top] = raw
            regions.append((top, 1))
            top += 1
        return consts[raw]

    tables: dict[bytes, View] = {}

    def table(values: np.ndarray) -> View:
        values = np.asarray(values, dtype=np.int64)
        key = values.tobytes() + str(values.shape).encode()
        if key not in tables:
            tables[key] = alloc(values.shape)
            init.update(zip(tables[key].addresses().reshape(-1).tolist(), values.reshape(-1).tolist()))
        return tables[key]

    for v in prog.inputs:
        env[v] = alloc(prog.types[v].shape)
    for i, a in enumerate(prog.instrs):
        op, where = a.op, f"{a.op.name}#{i}"
        args = [env[x] for x in a.args]
        shape_out = op.target[0].shape if op.target else ()
        rule = FPGA_RULES.get(type(op))
        if rule is None:
            raise NotImplementedError(f"FPGA backend: no rule for {op.name} ({UNSUPPORTED.get(type(op), '')})")
        outs = rule(Context(alloc, constant, table, ops, where, dt, shape_out), op, *args)
        for r, o in zip(a.results, outs):
            env[r] = o
    backs = []
    for v_in, v_out in list(zip(prog.inputs, prog.outputs))[:write_back]:
        src, dst = env[v_out], env[v_in]
        if prog.types[v_in].shape != prog.types[v_out].shape:
            raise ValueError(f"write-back: output {prog.types[v_out]} does not match input {prog.types[v_in]}")
        backs.append(MicroOp(Kind.COPY, dst, src, source=f"write-back of input {prog.inputs.index(v_in)}"))
    ops = legal(ops)
    ins, outs = [env[v] for v in prog.inputs], [env[v] for v in prog.outputs]
    if not reuse:
        return Microcode(dt, ops + legal(backs), top, init, ins, outs)
    return plan_memory(dt, ops, regions, init, ins, outs, backs, spram)


# ------------------------------------------------------------- execution
#: the NumPy model of each kind that reads one element of each operand: ``model(a, b, dt)``
ELEMENTWISE_MODELS: dict[Kind, Callable] = {
    Kind.ADD: lambda a, b, dt: a + b,
    Kind.NEG: lambda a, b, dt: -a,
    Kind.HEAVISIDE: lambda a, b, dt: np.where(a > 0, dt.one, 0),
    Kind.SIGMOID: lambda a, b, dt: sigmoid_fixed(a, dt),
    Kind.TANH: lambda a, b, dt: 2 * sigmoid_fixed(2 * a, dt) - dt.one,
    Kind.EXP: lambda a, b, dt: exp_fixed(a - b, dt),
    Kind.DIVF: lambda a, b, dt: (a << dt.frac) // np.maximum(b, 1),
    Kind.DIV: lambda a, b, dt: div_fixed(a, np.where(b == 0, 1, b), dt),
    Kind.SQRT: lambda a, b, dt: sqrt_fixed(np.maximum(a, 0), dt),
    Kind.LOG: lambda a, b, dt: log_fixed(np.maximum(a, 1), dt),
    Kind.EQ: lambda a, b, dt: np.where(a == b, dt.one, 0),
    Kind.COPY: lambda a, b, dt: a,
}

#: the operand values each kind's unit refuses (the sequencer raises its overflow flag on them; ``FACTS[kind].refuses``
#: says which in words)
DOMAINS: dict[Kind, Callable] = {
    Kind.DIVF: lambda a, b: (b <= 0) | (a < 0),
    Kind.DIV: lambda a, b: b == 0,
    Kind.SQRT: lambda a, b: a < 0,
    Kind.LOG: lambda a, b: a <= 0,
}


def elementwise_model(kind: str, a: np.ndarray, b: np.ndarray | None, dt: Fixed) -> np.ndarray:
    """The NumPy model of elementwise micro-op ``kind`` on raw operands ``a``, ``b`` (see :data:`ELEMENTWISE_MODELS`)."""
    model = ELEMENTWISE_MODELS.get(Kind(kind))
    if model is None:
        raise ValueError(f"{kind!r} reduces over k: it has no elementwise model")
    return model(a, b, dt)


def _reduce(u: MicroOp, read: Callable, dt: Fixed, combine: Callable) -> np.ndarray:
    """``combine`` over ``k`` of ``a[o, k]`` (times ``b[o, k]`` when ``combine`` is a sum and ``b`` is given),
    rescaled if ``u.rescale``."""
    acc = None
    for k in range(u.K):
        t = read(u.a, k)
        if combine is np.add and u.b is not None:
            t = t * read(u.b, k)
        acc = t if acc is None else combine(acc, t)
    return rescale(acc, dt.frac) if u.rescale else acc


def _argmax(u: MicroOp, read: Callable, dt: Fixed) -> np.ndarray:
    vals = [read(u.a, k) for k in range(u.K)]
    best, idx = vals[0], np.zeros(vals[0].shape, dtype=np.int64)
    for k, t in enumerate(vals[1:], 1):
        idx = np.where(t > best, k, idx)          # strictly greater: the first maximum stays
        best = np.maximum(best, t)
    return idx


#: the NumPy model of each kind that reduces over ``k``: ``model(u, read, dt)``, ``read(view, k)`` the words at ``k``
REDUCTION_MODELS: dict[Kind, Callable] = {
    Kind.MAC: lambda u, read, dt: _reduce(u, read, dt, np.add),
    Kind.MAX: lambda u, read, dt: _reduce(u, read, dt, np.maximum),
    Kind.ARGMAX: _argmax,
}


def execute(mc: Microcode, inputs: list[np.ndarray], check: bool = True) -> tuple[list[np.ndarray], np.ndarray]:
    """Run the microcode on a NumPy memory; returns ``(outputs, memory)``."""
    dt = mc.dtype
    mem = np.zeros(mc.depth, dtype=np.int64)
    for addr, val in mc.init.items():
        mem[addr] = val
    for view, x in zip(mc.inputs, inputs):
        mem[view.addresses()] = np.asarray(x, dtype=np.int64)

    def read(view: View, k: int = 0) -> np.ndarray:
        return mem[view.addresses(k)]

    for u in mc.ops:
        f = facts(u.kind)
        if f.reduces:
            y = REDUCTION_MODELS[u.kind](u, read, dt)
        else:
            a, b = read(u.a), read(u.b) if u.b is not None else None
            if check and u.kind in DOMAINS and np.any(DOMAINS[u.kind](a, b)):
                raise FixedPointOverflow(f"{u.source} had {f.refuses} on the FPGA")
            y = ELEMENTWISE_MODELS[u.kind](a, b, dt)
        if check and y.size and not f.index and (y.min() < dt.lo or y.max() > dt.hi):   # an index is no value
            raise FixedPointOverflow(f"{u.source} overflowed {dt} on the FPGA: result range "
                                     f"[{int(y.min()) / dt.one:.6g}, {int(y.max()) / dt.one:.6g}]")
        mem[u.out.addresses()] = y
    return [mem[v.addresses()] for v in mc.outputs], mem
