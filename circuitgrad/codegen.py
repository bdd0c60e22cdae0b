"""NumPy backend: an SSA program compiled to readable Python source.

One rule per primitive turns an instruction into a NumPy expression; the
generator hoists constants out of the function, names inputs after the
parameters, and deletes each variable after its last use so large
intermediate arrays are freed early.  The result is plain Python you can
read (``compiled.source``), step through and profile.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np

from . import primitives as P
from .interpret import _logsumexp, _sigmoid, _softmax
from .schedule import Program

__all__ = ["NUMPY_RULES", "generate", "compile_program"]


def _dt(T) -> str:
    return f"np.{T.dtype.numpy_dtype().name}"


def _sum_to(op: P.SumTo, a: str) -> str:
    lead, kept = op.axes()
    axes = lead + kept
    if not axes:
        return a
    s = f"{a}.sum(axis={axes!r}, keepdims=True)"
    return f"{s}.reshape({op.S.shape!r})"


def _scale(op: P.Scale, a: str) -> str:
    if op.c == -1.0:
        return f"-{a}"
    return f"{a} * {_dt(op.T)}({op.c!r})"


#: rule per primitive: ``(op, *argument names) -> expression`` (one result).
NUMPY_RULES: dict[type, Callable[..., str]] = {
    P.Copy: lambda op, a: a,
    P.Constant: lambda op: f"np.full({op.T.shape!r}, {op.value!r}, dtype={_dt(op.T)})",
    P.Add: lambda op, a, b: f"{a} + {b}",
    P.Neg: lambda op, a: f"-{a}",
    P.Mul: lambda op, a, b: f"{a} * {b}",
    P.Scale: _scale,
    P.MatMul: lambda op, a, b: f"{a} @ {b}",
    P.Transpose: lambda op, a: f"{a}.T",
    P.Reshape: lambda op, a: f"{a}.reshape({op.shape!r})",
    P.Broadcast: lambda op, a: f"np.broadcast_to({a}, {op.T.shape!r})",
    P.SumTo: _sum_to,
    P.Heaviside: lambda op, a: f"({a} > 0).astype({_dt(op.T)})",
    P.Sigmoid: lambda op, a: f"sigmoid({a})",
    P.Tanh: lambda op, a: f"np.tanh({a})",
    P.Softmax: lambda op, a: f"softmax({a})",
    P.LogSumExp: lambda op, a: f"logsumexp({a})",
}

#: ops whose result is a freshly allocated array (safe to overwrite once dead)
_FRESH = (P.MatMul, P.Add, P.Mul, P.Neg, P.Scale, P.Heaviside, P.Sigmoid, P.Tanh, P.Softmax, P.SumTo,
          P.LogSumExp)
#: ops whose result may share memory with their argument
_VIEWS = (P.Copy, P.Transpose, P.Reshape, P.Broadcast)
#: in-place forms: (op, *names, out) -> statement expression
_INPLACE = {
    P.Add: lambda op, a, b, out: f"np.add({a}, {b}, out={out})",
    P.Mul: lambda op, a, b, out: f"np.multiply({a}, {b}, out={out})",
    P.Neg: lambda op, a, out: f"np.negative({a}, out={out})",
    P.Scale: lambda op, a, out: f"np.multiply({a}, {_dt(op.T)}({op.c!r}), out={out})",
}

_HELPERS = {"np": np, "sigmoid": _sigmoid, "softmax": _softmax, "logsumexp": _logsumexp}


def _ident(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else f"_{s}"


def generate(program: Program, arg_names: Sequence[str] | None = None, fn_name: str | None = None
             ) -> tuple[str, dict[str, object]]:
    """``(source, constants)``: the Python source of ``program`` and its hoisted constants."""
    fn_name = _ident(fn_name or program.name)
    names = [f"v{i}" for i in range(len(program.types))]
    if arg_names:
        for v, n in zip(program.inputs, arg_names):
            names[v] = _ident(n)
    last_use: dict[int, int] = {}
    for i, a in enumerate(program.instrs):
        for x in a.args:
            last_use[x] = i
    keep = set(program.outputs) | set(program.inputs)
    fresh: set[int] = set()       # variables that own their buffer
    viewed: set[int] = set()      # variables that a view may still alias
    consts: dict[str, object] = {}
    const_lines: list[str] = []
    body: list[str] = []
    for i, a in enumerate(program.instrs):
        rule = NUMPY_RULES.get(type(a.op))
        if rule is None:
            raise NotImplementedError(f"NumPy backend: no rule for {a.op}")
        ty = ", ".join(str(program.types[r]) for r in a.results)
        if isinstance(a.op, P.Constant):
            c = f"C{len(consts)}"
            consts[c] = np.full(a.op.T.shape, a.op.value, dtype=a.op.T.dtype.numpy_dtype())
            const_lines.append(f"# {c} = {rule(a.op)}")
            names[a.results[0]] = c
            continue
        if not a.results:
            continue
        expr = None
        if type(a.op) in _INPLACE:
            shape = program.types[a.results[0]].shape
            for x in a.args:
                if (x in fresh and x not in viewed and last_use.get(x) == i and x not in keep
                        and program.types[x].shape == shape):
                    expr = _INPLACE[type(a.op)](a.op, *(names[y] for y in a.args), names[x])
                    break
        if expr is None:
            expr = rule(a.op, *(names[x] for x in a.args))
        if isinstance(a.op, _FRESH):
            fresh.update(a.results)
        if isinstance(a.op, _VIEWS):
            viewed.update(a.args)
        lhs = " = ".join(names[r] for r in a.results)
        body.append(f"    {lhs} = {expr}".ljust(56) + f"  # {a.op.name} -> {ty}")
        dead = [names[x] for x in dict.fromkeys(a.args)
                if last_use.get(x) == i and x not in keep and names[x][0] != "C"]
        if dead:
            body.append(f"    del {', '.join(dead)}")
    args = ", ".join(names[v] for v in program.inputs)
    ret = ", ".join(names[v] for v in program.outputs)
    src = "\n".join(const_lines + [f"def {fn_name}({args}):"] + (body or ["    pass"])
                    + [f"    return ({ret}{',' if len(program.outputs) == 1 else ''})"]) + "\n"
    return src, consts


def compile_program(program: Program, arg_names: Sequence[str] | None = None,
                    fn_name: str | None = None) -> tuple[Callable, str]:
    """Compile ``program`` to a Python function; returns ``(function, source)``."""
    src, consts = generate(program, arg_names, fn_name)
    namespace: dict[str, object] = dict(_HELPERS)
    namespace.update(consts)
    code = compile(src, f"<circuitgrad:{program.name}>", "exec")
    exec(code, namespace)
    fn = namespace[_ident(fn_name or program.name)]
    return fn, src
