"""Microcode: a fixed-point SSA program as loops over one data memory.

The FPGA sequencer runs *micro-ops*. Each one loops over the elements of its
output tensor, and optionally over a reduction index ``k``. Every operand is
an affine *view* of the data memory:

    address(o, k) = base + Σ_d o_d · stride_d + k · kstride

Transposes, broadcasts, reshapes and copies therefore cost nothing: they
only change strides. A constant is one memory word read with stride 0.

Micro-op kinds:

| kind | computes (raw fixed point, the semantics of ``circuitgrad.fixedpoint``) |
|---|---|
| ``mac`` | ``out[o] = rescale(Σ_k a[o,k]·b[o,k])`` (MatMul, Mul, Scale); without ``b``: ``Σ_k a[o,k]`` (SumTo, exact) |
| ``add`` / ``neg`` / ``heaviside`` / ``sigmoid`` / ``tanh`` | elementwise |
| ``max`` | ``out[o] = max_k a[o,k]`` (softmax row maximum) |
| ``exp`` | ``out[o] = exp_fixed(a[o] − b[o])`` |
| ``divf`` | ``out[o] = ⌊a[o]·2^f / b[o]⌋`` |
| ``copy`` | ``out[o] = a[o]`` (write-back of updated parameters) |

Every result is range checked against the fixed-point width, as in the
interpreter. :func:`execute` is a NumPy model of exactly this arithmetic; the
Amaranth design is tested against it, and it against the interpreter.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.fixedpoint import FixedPointOverflow, const, constant_raw, exp_fixed, rescale, sigmoid_fixed
from circuitgrad.schedule import Program
from circuitgrad.types import Fixed

__all__ = ["View", "MicroOp", "Microcode", "compile_program", "execute", "UNSUPPORTED", "RULES"]


@dataclass(frozen=True)
class View:
    """``shape`` elements at ``base + Σ o_d·strides_d`` (``kstride`` for the reduction index)."""
    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    kstride: int = 0

    def addresses(self, k: int = 0) -> np.ndarray:
        idx = np.full(self.shape, self.base + k * self.kstride, dtype=np.int64)
        for d, s in enumerate(self.strides):
            if s:
                sh = [1] * len(self.shape)
                sh[d] = self.shape[d]
                idx = idx + (np.arange(self.shape[d], dtype=np.int64) * s).reshape(sh)
        return idx


def _contiguous(base: int, shape: tuple[int, ...]) -> View:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc if d != 1 else 0)
        acc *= d
    return View(base, tuple(shape), tuple(reversed(strides)))


@dataclass
class MicroOp:
    kind: str
    out: View
    a: View
    b: View | None = None
    K: int = 1
    rescale: bool = False
    source: str = ""          # the SSA instruction it implements, for error messages


@dataclass
class Microcode:
    """Micro-ops, the memory size and initial contents, and where inputs and outputs live."""
    dtype: Fixed
    ops: list[MicroOp]
    depth: int
    init: dict[int, int]                  # address -> constant value
    inputs: list[View]
    outputs: list[View]
    names: dict[str, View] = field(default_factory=dict)


def _view_of(env: dict, v: int) -> View:
    return env[v]


def _reshape(view: View, shape: tuple[int, ...], where: str) -> View:
    c = _contiguous(0, view.shape)
    if view.strides == c.strides:
        return _contiguous(view.base, shape)
    if all(s == 0 for s in view.strides):
        return View(view.base, tuple(shape), (0,) * len(shape))
    raise NotImplementedError(f"{where}: reshape of a strided view is not supported by the FPGA backend")


def _broadcast(view: View, shape: tuple[int, ...]) -> View:
    lead = len(shape) - len(view.shape)
    strides = [0] * lead + [s if d != 1 else 0 for s, d in zip(view.strides, view.shape)]
    return View(view.base, tuple(shape), tuple(strides))


def _red(view: View, axes: tuple[int, ...], where: str) -> tuple[View, int]:
    """Split ``view`` into an outer view (summed axes removed) and a flattened reduction (kstride, K)."""
    keep = [d for d in range(len(view.shape)) if d not in axes]
    dims = [(view.shape[d], view.strides[d]) for d in axes]
    K = int(np.prod([n for n, _ in dims], dtype=np.int64))
    # the summed axes must flatten to one stride: inner stride × inner size == outer stride
    nz = [(n, s) for n, s in dims if n != 1]
    for (n_out, s_out), (n_in, s_in) in zip(nz[:-1], nz[1:]):
        if s_out != s_in * n_in:
            raise NotImplementedError(f"{where}: reducing over non-contiguous axes is not supported")
    ks = nz[-1][1] if nz else 0
    return View(view.base, tuple(view.shape[d] for d in keep), tuple(view.strides[d] for d in keep), ks), K


def compile_program(prog: Program, dt: Fixed, write_back: int = 0, reuse: bool = True) -> Microcode:
    """Lay out ``prog``'s tensors in one memory and emit its micro-ops.

    ``write_back = n`` appends ``copy`` micro-ops that store the first ``n``
    outputs into the memory of the first ``n`` inputs. This is how a
    training step updates its parameters and optimizer state *in on-chip
    memory*, so the next step only needs a new batch. The copies run last,
    because an update may be computed before a gradient that still reads
    the old value.

    ``reuse`` (default) lets intermediate tensors share memory when their lifetimes do
    not overlap (:func:`_reuse_memory`).
    """
    env: dict[int, View] = {}
    top = 0
    init: dict[int, int] = {}
    consts: dict[int, int] = {}
    ops: list[MicroOp] = []
    regions: list[tuple[int, int]] = []          # (start, size) of every allocation, in address order

    def alloc(shape) -> View:
        nonlocal top
        v = _contiguous(top, tuple(shape))
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

    for v in prog.inputs:
        env[v] = alloc(prog.types[v].shape)
    for i, a in enumerate(prog.instrs):
        op, where = a.op, f"{a.op.name}#{i}"
        args = [_view_of(env, x) for x in a.args]
        shape_out = op.target[0].shape if op.target else ()
        rule = RULES.get(type(op))
        if rule is None:
            raise NotImplementedError(f"FPGA backend: no rule for {op.name} ({UNSUPPORTED.get(type(op), '')})")
        outs = rule(op, args, alloc, constant, ops, where, dt, shape_out)
        for r, o in zip(a.results, outs):
            env[r] = o
    for v_in, v_out in list(zip(prog.inputs, prog.outputs))[:write_back]:
        src, dst = env[v_out], env[v_in]
        if prog.types[v_in].shape != prog.types[v_out].shape:
            raise ValueError(f"write-back: output {prog.types[v_out]} does not match input {prog.types[v_in]}")
        ops.append(MicroOp("copy", dst, src, source=f"write-back of input {prog.inputs.index(v_in)}"))
    ins, outs = [env[v] for v in prog.inputs], [env[v] for v in prog.outputs]
    if not reuse:
        return Microcode(dt, ops, top, init, ins, outs)
    return _reuse_memory(dt, ops, regions, init, ins, outs)


def _reuse_memory(dt: Fixed, ops: list[MicroOp], regions: list[tuple[int, int]], init: dict[int, int],
                  ins: list[View], outs: list[View]) -> Microcode:
    """Re-lay the memory so that regions whose lifetimes do not overlap share addresses.

    A region lives from the first micro-op that touches it to the last one. Inputs, outputs and
    constants are pinned at the bottom and live throughout. Every other region gets the first free
    block (first fit) at its first micro-op. A block is free once its last reader has finished: the
    drain between micro-ops guarantees that, while a micro-op that reads a region cannot be
    writing it.
    """
    starts = np.array([r[0] for r in regions], dtype=np.int64)

    def region(v: View) -> int:
        return int(np.searchsorted(starts, v.base, side="right")) - 1

    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for j, u in enumerate(ops):
        for v in (u.out, u.a, u.b):
            if v is not None:
                r = region(v)
                first.setdefault(r, j)
                last[r] = j
    pinned = sorted({region(v) for v in ins + outs} | {region(View(a, (), ())) for a in init})
    new: dict[int, int] = {}
    top = 0
    for r in pinned:
        new[r] = top
        top += regions[r][1]
    free: list[list[int]] = []                  # [start, size] blocks, kept sorted and merged
    live: list[int] = []
    for r in sorted((r for r in first if r not in new), key=lambda r: (first[r], r)):
        for d in [d for d in live if last[d] < first[r]]:
            live.remove(d)
            free.append([new[d], regions[d][1]])
            free.sort()
            merged = [free[0]]
            for blk in free[1:]:
                if merged[-1][0] + merged[-1][1] == blk[0]:
                    merged[-1][1] += blk[1]
                else:
                    merged.append(blk)
            free = merged
        size = regions[r][1]
        blk = next((b for b in free if b[1] >= size), None)
        if blk is None:
            new[r] = top
            top += size
        else:
            new[r] = blk[0]
            blk[0] += size
            blk[1] -= size
            free = [b for b in free if b[1]]
        live.append(r)

    def move(v: View | None) -> View | None:
        if v is None:
            return None
        r = region(v)
        return replace(v, base=new[r] + v.base - regions[r][0])

    ops2 = [replace(u, out=move(u.out), a=move(u.a), b=move(u.b)) for u in ops]
    init2 = {new[region(View(a, (), ()))] + a - regions[region(View(a, (), ()))][0]: val for a, val in init.items()}
    return Microcode(dt, ops2, top, init2, [move(v) for v in ins], [move(v) for v in outs])


# ----------------------------------------------------------------- rules
def _ew(kind: str):
    def rule(op, args, alloc, constant, ops, where, dt, shape):
        out = alloc(shape)
        ops.append(MicroOp(kind, out, args[0], args[1] if len(args) > 1 else None, source=where))
        return (out,)
    return rule


def _mac_mul(op, args, alloc, constant, ops, where, dt, shape):
    out = alloc(shape)
    ops.append(MicroOp("mac", out, args[0], args[1], 1, True, where))
    return (out,)


def _mac_scale(op, args, alloc, constant, ops, where, dt, shape):
    out = alloc(shape)
    c = constant(const(op.c, dt, "Scale constant"))
    ops.append(MicroOp("mac", out, args[0], View(c, shape, (0,) * len(shape)), 1, True, where))
    return (out,)


def _matmul(op, args, alloc, constant, ops, where, dt, shape):
    a, b = args
    out = alloc(shape)
    av = View(a.base, shape, (a.strides[0], 0), a.strides[1])
    bv = View(b.base, shape, (0, b.strides[1]), b.strides[0])
    ops.append(MicroOp("mac", out, av, bv, op.A.shape[1], True, where))
    return (out,)


def _sum_to(op, args, alloc, constant, ops, where, dt, shape):
    lead, kept = op.axes()
    red, K = _red(args[0], lead + kept, where)
    out = alloc(shape)
    red = View(red.base, shape, _reshape_strides(red, shape), red.kstride)
    ops.append(MicroOp("mac", out, red, None, K, False, where))
    return (out,)


def _reshape_strides(view: View, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of ``view`` (size-1 axes of the reduction dropped) re-expressed for ``shape``."""
    nz = [(n, s) for n, s in zip(view.shape, view.strides) if n != 1]
    out, it = [], iter(nz)
    for d in shape:
        out.append(next(it)[1] if d != 1 else 0)
    return tuple(out)


def _per_row(v: View, shape: tuple[int, ...]) -> View:
    """A per-row vector ``v`` (shape ``shape[:-1]``) broadcast along the last axis of ``shape``."""
    return _broadcast(View(v.base, v.shape + (1,), v.strides + (0,)), shape)


def _softmax(op, args, alloc, constant, ops, where, dt, shape):
    if op.causal:
        raise NotImplementedError(f"FPGA backend: causal softmax ({where}) reaches the FPGA in issue 13")
    x = args[0]
    rows = shape[:-1]
    red, K = _red(x, (len(shape) - 1,), where)
    m = alloc(rows)
    ops.append(MicroOp("max", m, red, None, K, False, where + ":max"))
    e = alloc(shape)
    ops.append(MicroOp("exp", e, x, _per_row(m, shape), source=where + ":exp"))
    ered, _ = _red(e, (len(shape) - 1,), where)
    s = alloc(rows)
    ops.append(MicroOp("mac", s, ered, None, K, False, where + ":sum"))
    out = alloc(shape)
    ops.append(MicroOp("divf", out, e, _per_row(s, shape), source=where + ":divide"))
    return (out,)


def _constant(op, args, alloc, constant, ops, where, dt, shape):
    c = constant(constant_raw(op, dt))
    return (View(c, shape, (0,) * len(shape)),)


RULES = {
    P.Copy: lambda op, args, *_: (args[0],) * op.n,
    P.Transpose: lambda op, args, *_: (View(args[0].base, args[0].shape[::-1], args[0].strides[::-1]),),
    P.Reshape: lambda op, args, alloc, constant, ops, where, dt, shape: (_reshape(args[0], shape, where),),
    P.Broadcast: lambda op, args, alloc, constant, ops, where, dt, shape: (_broadcast(args[0], shape),),
    P.Constant: _constant,
    P.Add: _ew("add"),
    P.Neg: _ew("neg"),
    P.Heaviside: _ew("heaviside"),
    P.Sigmoid: _ew("sigmoid"),
    P.Tanh: _ew("tanh"),
    P.Mul: _mac_mul,
    P.Scale: _mac_scale,
    P.MatMul: _matmul,
    P.SumTo: _sum_to,
    P.Softmax: _softmax,
}

#: primitives without an FPGA rule, and why
_LATER = ("the transformer and convolution vocabulary (issue 12) reaches the FPGA backend in issue 13; until then "
          "compile_model runs it in float and fixed point on the CPU")
UNSUPPORTED = {
    P.LogSumExp: "appears only in loss values, never in a training step (its reverse derivative is softmax)",
    **{p: _LATER for p in P.SECOND_VOCABULARY},
}


# ------------------------------------------------------------- execution
def _elementwise(kind: str, a: np.ndarray, b: np.ndarray | None, dt: Fixed) -> np.ndarray:
    if kind == "add":
        return a + b
    if kind == "neg":
        return -a
    if kind == "heaviside":
        return np.where(a > 0, dt.one, 0)
    if kind == "sigmoid":
        return sigmoid_fixed(a, dt)
    if kind == "tanh":
        return 2 * sigmoid_fixed(2 * a, dt) - dt.one
    if kind == "exp":
        return exp_fixed(a - b, dt)
    if kind == "divf":
        return (a << dt.frac) // b
    if kind == "copy":
        return a
    raise ValueError(kind)


def execute(mc: Microcode, inputs: list[np.ndarray], check: bool = True) -> tuple[list[np.ndarray], np.ndarray]:
    """Run the microcode on a NumPy memory; returns ``(outputs, memory)``."""
    dt = mc.dtype
    mem = np.zeros(mc.depth, dtype=np.int64)
    for addr, val in mc.init.items():
        mem[addr] = val
    for view, x in zip(mc.inputs, inputs):
        mem[view.addresses()] = np.asarray(x, dtype=np.int64)
    for u in mc.ops:
        if u.kind in ("mac", "max"):
            acc = None
            for k in range(u.K):
                t = mem[u.a.addresses(k)]
                if u.kind == "mac" and u.b is not None:
                    t = t * mem[u.b.addresses(k)]
                acc = t if acc is None else (acc + t if u.kind == "mac" else np.maximum(acc, t))
            y = rescale(acc, dt.frac) if u.rescale else acc
        else:
            y = _elementwise(u.kind, mem[u.a.addresses()], mem[u.b.addresses()] if u.b is not None else None, dt)
        if check and y.size and (y.min() < dt.lo or y.max() > dt.hi):
            raise FixedPointOverflow(f"{u.source} overflowed {dt} on the FPGA: result range "
                                     f"[{int(y.min()) / dt.one:.6g}, {int(y.max()) / dt.one:.6g}]")
        mem[u.out.addresses()] = y
    return [mem[v.addresses()] for v in mc.outputs], mem
