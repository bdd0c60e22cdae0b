"""NumPy backend: an SSA program compiled to readable Python source.

One rule per primitive turns an instruction into a NumPy expression; the
generator hoists constants out of the function, names inputs after the
parameters, and deletes each variable after its last use so large
intermediate arrays are freed early.  The result is plain Python you can
read (``compiled.source``), step through and profile.  ``matmul`` is
:func:`circuitgrad.blas.matmul` (MKL's GEMM when installed, else NumPy).
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from . import allocator, blas
from . import primitives as P
from .interpret import (FLOAT_RULES, argmax_mask, causal_mask, logsumexp, one_hot, sigmoid, softmax, fold,
                        add_into, pad, set_into, unfold)
from .pattern import Graph, Pat, X, match
from .schedule import Program

__all__ = ["NUMPY_RULES", "generate", "compile_program", "compile_function", "CompiledFunction", "ident"]


def _dt(T) -> str:
    return f"np.{T.dtype.numpy_dtype().name}"


def _num(c: float) -> str:
    """A Python literal for the constant ``c`` (``float('nan')``/``float('inf')`` when not finite)."""
    return repr(c) if math.isfinite(c) else f"float({repr(c)!r})"


def _sum_to(op: P.SumTo, a: str) -> str:
    lead, kept = op.axes()
    axes = lead + kept
    if not axes:
        return a
    if _ends(sorted(axes), op.T.ndim) is not None:
        return f"sum_axes({a}, {tuple(sorted(axes))!r}, {op.S.shape!r})"
    s = f"{a}.sum(axis={axes!r}, keepdims=True)"
    return f"{s}.reshape({op.S.shape!r})"


def _ends(axes: Sequence[int], nd: int) -> tuple[int, int] | None:
    """``(i, j)`` when the sorted ``axes`` are ``0..i-1`` and ``j..nd-1`` (either block may be empty)."""
    i = 0
    while i < len(axes) and axes[i] == i:
        i += 1
    rest = axes[i:]
    return (i, nd - len(rest)) if list(rest) == list(range(nd - len(rest), nd)) else None


@functools.cache
def _ones(n: int, dtype: np.dtype) -> np.ndarray:
    return np.ones(n, dtype=dtype)


def sum_axes(x: np.ndarray, axes: tuple[int, ...], shape: tuple[int, ...]) -> np.ndarray:
    """``x`` summed over ``axes``, a leading and a trailing block of axes, as matrix-vector products with ones.

    NumPy's reductions over a short trailing axis run one small loop per row: for the ``[16, 64, 128]``
    rows of a layer norm ``x.sum(-1)`` takes 45 µs and ``x @ ones`` 14 µs (BLAS GEMV, :func:`blas.matvec`).
    Floats in a C-contiguous array only; anything else is ``x.sum``.
    """
    ends = _ends(axes, x.ndim)
    if x.dtype.kind != "f" or not x.flags.c_contiguous or ends is None:
        return x.sum(axis=axes, keepdims=True).reshape(shape)
    i, j = ends
    m = math.prod(x.shape[:i])
    if j < x.ndim:                      # the trailing block: row sums
        n = math.prod(x.shape[j:])
        x = blas.matvec(x.reshape(-1, n), _ones(n, x.dtype))
    if i:                               # the leading block: column sums
        x = blas.matvec(x.reshape(m, -1), _ones(m, x.dtype), transpose=True)
    return x.reshape(shape)


def _scale(op: P.Scale, a: str) -> str:
    if op.c == -1.0:
        return f"-{a}"
    return f"{a} * {_dt(op.T)}({_num(op.c)})"


#: rule per primitive: ``(op, *argument names) -> expression`` (one result).
NUMPY_RULES: dict[type, Callable[..., str]] = {
    P.Copy: lambda op, a: a,
    P.Constant: lambda op: f"np.full({op.T.shape!r}, {_num(op.value)}, dtype={_dt(op.T)})",
    P.Add: lambda op, a, b: f"{a} + {b}",
    P.Neg: lambda op, a: f"-{a}",
    P.Mul: lambda op, a, b: f"{a} * {b}",
    P.Scale: _scale,
    P.MatMul: lambda op, a, b: f"matmul({a}, {b})",
    P.Transpose: lambda op, a: f"{a}.T",
    P.Reshape: lambda op, a: f"{a}.reshape({op.shape!r})",
    P.Broadcast: lambda op, a: f"np.broadcast_to({a}, {op.T.shape!r})",
    P.SumTo: _sum_to,
    P.Heaviside: lambda op, a: f"({a} > 0).astype({_dt(op.T)})",
    P.Sigmoid: lambda op, a: f"sigmoid({a})",
    P.Tanh: lambda op, a: f"np.tanh({a})",
    P.Softmax: lambda op, a: f"softmax({a}, causal=True)" if op.causal else f"softmax({a})",
    P.LogSumExp: lambda op, a: f"logsumexp({a})",
    P.Exp: lambda op, a: f"np.exp({a})",
    P.Log: lambda op, a: f"np.log({a})",
    P.Sqrt: lambda op, a: f"np.sqrt({a})",
    P.Rsqrt: lambda op, a: f"1 / np.sqrt({a})",
    P.Div: lambda op, a, b: f"{a} / {b}",
    P.ArgMaxMask: lambda op, a: f"argmax_mask({a})",
    P.Permute: lambda op, a: f"np.transpose({a}, {op.axes!r})",
    P.BatchMatMul: lambda op, a, b: f"np.matmul({a}, {b})",
    P.CausalMask: lambda op, a: f"causal_mask({a})",
    P.OneHot: lambda op, a: f"one_hot({a}, {op.S.dtype.n}, {_dt(op.T)})",
    # a copy: strided views make every later elementwise pass several times slower
    P.Slice: lambda op, a: f"{a}[{', '.join(f'{i}:{j}:{k}' for i, j, k in op.index)}].copy()",
    P.Pad: lambda op, a: f"pad({a}, {op.T.shape!r}, {op.index!r})",
    P.Unfold: lambda op, a: f"unfold({a}, {op.kernel!r}, {op.stride!r}, {op.padding!r})",
    P.Fold: lambda op, a: f"fold({a}, {op.T.shape!r}, {op.kernel!r}, {op.stride!r}, {op.padding!r})",
}

#: kinds of op whose result may share memory with their argument; every other op's result is freshly allocated
#: (safe to overwrite once dead), but a source's (hoisted: parameters and constants are never overwritten)
_VIEW_KINDS = ("view", "copy")
#: in-place forms: (op, *names, out) -> statement expression
_INPLACE = {
    P.Add: lambda op, a, b, out: f"np.add({a}, {b}, out={out})",
    P.Mul: lambda op, a, b, out: f"np.multiply({a}, {b}, out={out})",
    P.Neg: lambda op, a, out: f"np.negative({a}, out={out})",
    P.Scale: lambda op, a, out: f"np.multiply({a}, {_dt(op.T)}({_num(op.c)}), out={out})",
    P.Div: lambda op, a, b, out: f"np.divide({a}, {b}, out={out})",
    P.Exp: lambda op, a, out: f"np.exp({a}, out={out})",
}

_HELPERS = {"np": np, "matmul": blas.matmul, "sigmoid": sigmoid, "softmax": softmax, "logsumexp": logsumexp,
            "argmax_mask": argmax_mask, "causal_mask": causal_mask, "one_hot": one_hot,
            "pad": pad, "unfold": unfold, "fold": fold, "add_into": add_into, "set_into": set_into,
            "sum_axes": sum_axes}


def ident(name: str) -> str:
    """``name`` as a Python identifier: every non-word character an underscore, a leading digit prefixed."""
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else f"_{s}"


@dataclass
class _Rewrites:
    """What :func:`_analyse` found (instruction indices ``i, j``; variables ``r``)."""
    fold: dict[int, float] = field(default_factory=dict)        # MatMul i: scale folded into it
    alias: set[int] = field(default_factory=set)                # Scale j: an alias of its folded MatMul
    lazy: set[int] = field(default_factory=set)                 # Broadcast j: left to NumPy
    pads: dict[int, int] = field(default_factory=dict)          # Pad j: deferred to its Add
    gathers: dict[int, int] = field(default_factory=dict)       # MatMul i: the ids of its row gather
    negs: dict[int, int] = field(default_factory=dict)          # Neg result r: its argument, subtracted


#: an embedding lookup: a one-hot matrix of the ids (rows reshaped, nothing else) times a table
_GATHER = Pat(P.MatMul, Pat(P.Reshape, Pat(P.OneHot, X("ids")), when=lambda r: r.op.shape[1:] == r.op.T.shape[-1:]),
              X())
#: a scaled matrix product whose product is read only by the scale
_SCALED_MATMUL = Pat(P.Scale, Pat(P.MatMul, once=True, name="matmul"))


def _analyse(program: Program) -> _Rewrites:
    """Float-only rewrites the generator applies (they change rounding, not values).

    * ``Scale(MatMul(a, b), c)`` with a single use: scale the smaller operand
      instead of the result (saves a pass over the larger array).
    * ``Broadcast`` whose every consumer is an ``Add``/``Mul`` whose other operand
      already has the full shape: left to NumPy's implicit broadcasting.

    * ``Add(x, Pad(y))`` with the pad used once: ``y`` added into ``x``'s block in place
      (``add_into``) when ``x`` can be overwritten, so a sum of pads (a concatenation, the
      gradient of overlapping slices) allocates one array.

    * ``MatMul(Reshape(OneHot(ids)), E)`` (an embedding lookup): the rows of ``E`` gathered,
      ``np.take(E, ids.reshape(-1), axis=0)``, instead of a GEMM with the one-hot matrix.

    * ``Add(x, Neg(y))`` with the negation used once: ``x - y`` (exact; one pass instead of two).
    """
    producer, consumers = program.producers(), program.uses()
    outs = set(program.outputs)
    g, index = Graph.of(program), {id(a): i for i, a in enumerate(program.instrs)}
    rw = _Rewrites()
    fold, alias, lazy, pads, gathers, negs = rw.fold, rw.alias, rw.lazy, rw.pads, rw.gathers, rw.negs
    for j, a in enumerate(program.instrs):
        if (b := match(_GATHER, a, g)) is not None:
            gathers[j] = b["ids"]
        if (b := match(_SCALED_MATMUL, a, g)) is not None:
            fold[index[id(b["matmul"])]] = a.op.c
            alias.add(j)
        elif isinstance(a.op, P.Broadcast):
            (r,) = a.results
            ok = r not in outs and bool(consumers.get(r))
            for k in consumers.get(r, ()):
                c = program.instrs[k]
                others = [x for x in c.args if x != r]
                ok = ok and isinstance(c.op, (P.Add, P.Mul)) and len(others) == 1 and \
                    program.types[others[0]].shape == a.op.T.shape and \
                    not (others[0] in producer and producer[others[0]] in lazy)
            if ok:
                lazy.add(j)
        elif isinstance(a.op, P.Pad):
            (r,) = a.results
            use = consumers.get(r, [])
            if r not in outs and len(use) == 1 and isinstance(program.instrs[use[0]].op, P.Add) and \
                    len(set(program.instrs[use[0]].args)) == 2:
                pads[j] = use[0]
        elif isinstance(a.op, P.Neg):
            (r,) = a.results
            use = consumers.get(r, [])
            if r not in outs and len(use) == 1 and isinstance(program.instrs[use[0]].op, P.Add) and \
                    len(set(program.instrs[use[0]].args)) == 2:
                negs[r] = a.args[0]
    for i in fold.keys() & gathers.keys():
        del gathers[i]
    deferred = {program.instrs[j].results[0] for j in pads}
    for a in program.instrs:            # one subtraction per Add, never with a deferred pad
        if isinstance(a.op, P.Add) and (any(x in deferred for x in a.args) or all(x in negs for x in a.args)):
            for x in a.args[:1] if not any(x in deferred for x in a.args) else a.args:
                negs.pop(x, None)
    return rw


def generate(program: Program, arg_names: Sequence[str] | None = None, fn_name: str | None = None
             ) -> tuple[str, dict[str, object]]:
    """``(source, constants)``: the Python source of ``program`` and its hoisted constants.

    Instructions whose arguments are all constants are evaluated once, at
    generation time, and hoisted with the other constants.
    """
    fn_name = ident(fn_name or program.name)
    names = [f"v{i}" for i in range(len(program.types))]
    if arg_names:
        for v, n in zip(program.inputs, arg_names):
            names[v] = ident(n)
    rw = _analyse(program)
    fold, alias, lazy, pads, gathers, negs = rw.fold, rw.alias, rw.lazy, rw.pads, rw.gathers, rw.negs

    buf = _Buffers.plan(program, rw)
    cval: dict[int, np.ndarray] = {}
    consts: dict[str, object] = {}
    const_lines: list[str] = []
    body: list[str] = []
    for i, a in enumerate(program.instrs):
        rule = NUMPY_RULES.get(type(a.op))
        if rule is None:
            raise NotImplementedError(f"NumPy backend: no rule for {a.op}")
        ty = ", ".join(str(program.types[r]) for r in a.results)
        if not a.results:
            continue
        if all(x in cval for x in a.args) and not isinstance(a.op, P.Copy):
            vals = FLOAT_RULES[type(a.op)](a.op, *(cval[x] for x in a.args))
            for r, v in zip(a.results, vals):
                c = names[r] = f"C{len(consts)}"
                consts[c] = cval[r] = np.array(v, dtype=program.types[r].dtype.numpy_dtype())
                const_lines.append(f"# {c} = {rule(a.op, *(names[x] for x in a.args))}    {ty}")
            continue
        expr = same = None
        if i in pads and a.args[0] not in cval:
            continue                                   # emitted by its Add
        if isinstance(a.op, P.Neg) and a.results[0] in negs:
            continue                                   # subtracted by its Add
        if isinstance(a.op, P.Add) and any(x in buf.padded for x in a.args):
            expr = _add_pad(a, program, names, buf.padded, lambda x: buf.writable(x, i), buf.written)
        elif i in alias or i in lazy:
            expr = names[a.args[0]]
        elif (same := _plus_zero(a, program, cval, lambda x: buf.dies(x, i))) is not None:
            expr = names[same]                         # x + 0: x itself, which dies here
        elif isinstance(a.op, P.Add) and any(x in negs for x in a.args):
            x, y = (a.args[0], negs[a.args[1]]) if a.args[1] in negs else (a.args[1], negs[a.args[0]])
            shape = program.types[a.results[0]].shape
            out = next((o for o in (x, y) if buf.writable(o, i) and shape and program.types[o].shape == shape), None)
            expr = f"{names[x]} - {names[y]}" if out is None else \
                f"np.subtract({names[x]}, {names[y]}, out={names[out]})"
        elif i in gathers and gathers[i] not in cval:
            expr = f"np.take({names[a.args[1]]}, {names[gathers[i]]}.reshape(-1), axis=0)"
        elif i in fold:
            x, y = a.args
            c = f"{_dt(a.op.A)}({_num(fold[i])})"
            if program.types[x].size <= program.types[y].size:
                expr = f"matmul({names[x]} * {c}, {names[y]})"
            else:
                expr = f"matmul({names[x]}, {names[y]} * {c})"
        elif type(a.op) in _INPLACE and program.types[a.results[0]].shape:    # 0-d results are scalars
            shape = program.types[a.results[0]].shape
            for x in a.args:
                if buf.writable(x, i) and program.types[x].shape == shape:
                    expr = _INPLACE[type(a.op)](a.op, *(names[y] for y in a.args), names[x])
                    break
        if expr is None:
            expr = rule(a.op, *(names[x] for x in a.args))
        buf.wrote(i, a, same)
        lhs = " = ".join(names[r] for r in a.results)
        note = " (folded into the matmul)" if i in alias else " (implicit)" if i in lazy else ""
        body.append(f"    {lhs} = {expr}".ljust(56) + f"  # {a.op.name}{note} -> {ty}"
                    + (f"  @ {a.path}" if a.path else ""))
        dead = [names[x] for x in buf.dead(i, a) if x not in cval]
        if dead:
            body.append(f"    del {', '.join(dead)}")
    args = ", ".join(names[v] for v in program.inputs)
    ret = ", ".join(names[v] for v in program.outputs)
    src = "\n".join(const_lines + [f"def {fn_name}({args}):"] + (body or ["    pass"])
                    + [f"    return ({ret}{',' if len(program.outputs) == 1 else ''})"]) + "\n"
    return src, consts


@dataclass
class _Buffers:
    """Buffer planning: which variables own their memory, which a view may still alias, where each dies
    (its last read), and so which buffer an instruction may overwrite and which ``del`` follow it."""
    program: Program
    rw: _Rewrites
    last_use: dict[int, int]
    keep: set[int]                                          # inputs and outputs: never overwritten or freed
    padded: dict[int, object]                               # a deferred pad's result -> its instruction
    fresh: set[int] = field(default_factory=set)            # variables that own their buffer
    viewed: set[int] = field(default_factory=set)           # variables that a view may still alias
    written: dict[int, list] = field(default_factory=dict)  # sums of pads: the blocks written so far

    @classmethod
    def plan(cls, program: Program, rw: _Rewrites) -> "_Buffers":
        b = cls(program, rw, {}, set(program.outputs) | set(program.inputs),
                {program.instrs[j].results[0]: program.instrs[j] for j in rw.pads})
        for i, a in enumerate(program.instrs):
            for x in b.reads(i, a):
                b.last_use[x] = max(b.last_use.get(x, -1), rw.pads.get(i, i))   # a deferred pad reads at its Add
        return b

    def reads(self, i: int, a) -> list[int]:
        """The variables instruction ``i`` reads once its folded negations are subtractions."""
        negs, gathers = self.rw.negs, self.rw.gathers
        if isinstance(a.op, P.Neg) and a.results[0] in negs:
            return []
        return [negs.get(x, x) for x in a.args] + ([gathers[i]] if i in gathers else [])

    def dies(self, x: int, i: int) -> bool:
        """``x`` is read for the last time by instruction ``i`` and is no input or output."""
        return self.last_use.get(x) == i and x not in self.keep

    def writable(self, x: int, i: int) -> bool:
        """Instruction ``i`` may write its result into ``x``'s buffer: ``x`` owns it, no view aliases it, and
        ``x`` dies there."""
        return x in self.fresh and x not in self.viewed and self.dies(x, i)

    def wrote(self, i: int, a, same: int | None) -> None:
        """Instruction ``i`` was emitted (``same``: the operand its result is, for ``x + 0``)."""
        if same is not None:
            self.fresh.update(a.results if same in self.fresh else ())
            self.viewed.update(a.results if same in self.viewed else ())
        elif a.op.kind not in _VIEW_KINDS + ("source",) and not (i in self.rw.alias and a.args[0] not in self.fresh):
            self.fresh.update(a.results)
        if a.op.kind in _VIEW_KINDS or i in self.rw.alias:
            self.viewed.update(a.args)

    def dead(self, i: int, a) -> list[int]:
        """The variables to ``del`` after instruction ``i`` (a pad's operand dies with its Add), in order."""
        pads = self.rw.pads
        read = [y for x in self.reads(i, a)
                for y in ((self.padded[x].args[0],) if x in self.padded and i not in pads else (x,))]
        return [x for x in dict.fromkeys(read) if self.dies(x, i)]


def _add_pad(a, program: Program, names: list[str], padded: dict, writable: Callable[[int], bool],
             written: dict[int, list]) -> str:
    """The expression of ``Add(x, Pad(y))`` (either order): ``y`` added into ``x`` in place when ``x`` may be
    overwritten, else into a new pad (of the other operand when both are deferred pads).

    ``written`` holds, for each sum of pads built so far, the blocks it has written (it is zero
    elsewhere): a block disjoint from them is stored (``set_into``) instead of added, as in the gradient
    of a pooling whose windows tile the image.
    """
    x, y = a.args if a.args[1] in padded else a.args[::-1]
    p = padded[y]
    blocks = None
    if x in padded:
        q = padded[x]
        into = f"pad({names[q.args[0]]}, {q.op.T.shape!r}, {q.op.index!r})"
        blocks = [q.op.index]
    elif writable(x):
        into = names[x]
        blocks = written.get(x)
    else:                       # a copy (of an implicit broadcast, too: ``x`` may be the smaller array)
        into = f"np.broadcast_to({names[x]}, {p.op.T.shape!r}).copy()"
    if blocks is not None and all(_disjoint(p.op.index, b) for b in blocks):
        written[a.results[0]] = blocks + [p.op.index]
        return f"set_into({into}, {names[p.args[0]]}, {p.op.index!r})"
    return f"add_into({into}, {names[p.args[0]]}, {p.op.index!r})"


def _plus_zero(a, program: Program, cval: dict[int, np.ndarray], dying: Callable[[int], bool]) -> int | None:
    """``x`` when ``a`` is ``x + 0`` (a constant zero of ``x``'s shape) and ``x`` dies there, else None."""
    if not isinstance(a.op, P.Add) or len(set(a.args)) != 2:
        return None
    for z, x in (a.args, a.args[::-1]):
        if z in cval and x not in cval and dying(x) and not np.any(cval[z]) and \
                program.types[x].shape == program.types[a.results[0]].shape:
            return x
    return None


def _disjoint(i, j) -> bool:
    """Whether two strided blocks (``(start, stop, step)`` per axis) share no element."""
    return any(not set(range(*a)) & set(range(*b)) for a, b in zip(i, j))


@dataclass(frozen=True)
class CompiledFunction:
    """A program compiled to Python/NumPy: what :class:`~circuitgrad.targets.Runtime` ``numpy`` returns."""
    run: Callable
    source: str
    launches: int | None = None


def compile_function(program: Program, arg_names: Sequence[str] | None = None,
                     fn_name: str | None = None) -> CompiledFunction:
    """:func:`compile_program` as the ``numpy`` runtime's entry point (``circuitgrad/targets.py``)."""
    return CompiledFunction(*compile_program(program, arg_names, fn_name))


def compile_program(program: Program, arg_names: Sequence[str] | None = None,
                    fn_name: str | None = None) -> tuple[Callable, str]:
    """Compile ``program`` to a Python function; returns ``(function, source)``.

    Also sets the process's allocator for the step's arrays once (:func:`circuitgrad.allocator.tune`).
    """
    allocator.tune()
    src, consts = generate(program, arg_names, fn_name)
    namespace: dict[str, object] = dict(_HELPERS)
    namespace.update(consts)
    code = compile(src, f"<circuitgrad:{program.name}>", "exec")
    exec(code, namespace)
    fn = namespace[ident(fn_name or program.name)]
    return fn, src
