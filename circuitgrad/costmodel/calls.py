"""The fixed cost of each instruction as the NumPy backend runs it: the calls of its generated line.

A small instruction costs what its Python line costs, whatever its size: a NumPy ufunc about half a
microsecond, an MKL GEMM through ctypes or a GEMV reduction (``sum_axes``) ten times that, a ``softmax``
several ufuncs. :func:`expressions` reads, for every instruction of a program, the expression the code
generator emits for it (:func:`circuitgrad.codegen.generate`, the code the step runs), or None where it emits
none (constants folded at generation time, a padding or negation merged into its sum); :func:`calls` names
the calls in one expression. The calibration (:mod:`.cpu`) measures each kind of call on tiny operands
(:data:`PROBES`), so an instruction's fixed cost is the sum over its calls.
"""
from __future__ import annotations

import ast
import re
from typing import Callable

import numpy as np

from .. import blas, codegen, interpret
from ..schedule import Program

__all__ = ["PROBES", "calls", "expressions"]

_LINE = re.compile(r"^    (?:\w+(?: = \w+)*) = (.*?)\s+# (.*?) -> (.*?)(?:  @ (.*))?$")


def expressions(p: Program) -> list[str | None]:
    """The expression of each instruction of ``p`` in its generated NumPy code (None: no line of its own).

    A program the NumPy code generator does not compile (fixed point) is costed one ufunc per instruction."""
    try:
        source, _ = codegen.generate(p)
    except (NotImplementedError, TypeError, ValueError, KeyError):
        return ["np.add(x, y)" if a.op.kind not in ("view", "copy", "source") else "x" for a in p.instrs]
    out: list[str | None] = [None] * len(p.instrs)
    j = 0
    for line in source.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        expr, name, types, path = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        while j < len(p.instrs):
            a = p.instrs[j]
            j += 1
            if name.split(" (")[0] == a.op.name and a.path == path and \
                    types == ", ".join(str(p.types[r]) for r in a.results):
                out[j - 1] = expr
                break
    return out


def calls(expr: str) -> list[str]:
    """The kinds of call (keys of :data:`PROBES`) that evaluating ``expr`` makes."""
    out = []
    for node in ast.walk(ast.parse(expr, mode="eval")):
        if isinstance(node, (ast.BinOp, ast.Compare)) or \
                isinstance(node, ast.UnaryOp) and not isinstance(node.operand, ast.Constant):
            out.append("ufunc")
        elif isinstance(node, ast.Subscript):
            out.append("index")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                causal = any(k.arg == "causal" for k in node.keywords)
                out.append(f"{f.id}_causal" if causal and f.id == "softmax" else f.id)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "np":
                out.append(_NP.get(f.attr, "scalar" if f.attr.startswith(("float", "int")) else "ufunc"))
            elif isinstance(f, ast.Attribute):
                out.append(f.attr if f.attr in PROBES else "ufunc")
    return [k if k in PROBES else "helper" for k in out]


#: NumPy functions the generated code calls that are not elementwise ufuncs
_NP = {"matmul": "batched_matmul", "broadcast_to": "broadcast_to", "transpose": "transpose", "take": "take",
       "full": "full", "subtract": "ufunc"}


def _probes() -> dict[str, Callable[[], object]]:
    a, b = np.ones((2, 8, 8), np.float32), np.ones((8, 8), np.float32)
    v, ids, img = np.ones(8, np.float32), np.zeros(8, np.int64), np.ones((1, 1, 4, 4), np.float32)
    cols = interpret.unfold(img, (3, 3), (1, 1), (1, 1))
    return {
        "ufunc": lambda: np.add(b, b), "scalar": lambda: np.float32(0.5), "index": lambda: b[0:4:1, 0:8:1],
        "reshape": lambda: b.reshape((64,)), "copy": lambda: b.copy(), "astype": lambda: b.astype(np.float32),
        "sum": lambda: b.sum(axis=(0,), keepdims=True), "full": lambda: np.full((8,), 1.0, dtype=np.float32),
        "broadcast_to": lambda: np.broadcast_to(v, (8, 8)), "transpose": lambda: np.transpose(a, (0, 2, 1)),
        "take": lambda: np.take(b, ids, axis=0), "matmul": lambda: blas.matmul(b, b),
        "batched_matmul": lambda: np.matmul(a, a), "sum_axes": lambda: codegen.sum_axes(b, (0,), (8,)),
        "softmax": lambda: interpret.softmax(b), "softmax_causal": lambda: interpret.softmax(b, causal=True),
        "logsumexp": lambda: interpret.logsumexp(b), "sigmoid": lambda: interpret.sigmoid(b),
        "argmax_mask": lambda: interpret.argmax_mask(b), "causal_mask": lambda: interpret.causal_mask(b),
        "one_hot": lambda: interpret.one_hot(ids, 8, np.float32), "pad": lambda: interpret.pad(v, (16,), ((4, 12, 1),)),
        "unfold": lambda: interpret.unfold(img, (3, 3), (1, 1), (1, 1)),
        "fold": lambda: interpret.fold(cols, (1, 1, 4, 4), (3, 3), (1, 1), (1, 1)),
        "add_into": lambda: interpret.add_into(b.copy(), v, ((0, 1, 1), (0, 8, 1))),
        "set_into": lambda: interpret.set_into(b.copy(), v, ((0, 1, 1), (0, 8, 1))),
        "helper": lambda: interpret.sigmoid(b),
    }


#: the kinds of call, each with a function that makes one such call on tiny operands (built at import)
PROBES: dict[str, Callable[[], object]] = {k: f for k, f in _probes().items()}
