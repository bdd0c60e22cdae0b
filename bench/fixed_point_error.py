"""Measured error of the fixed-point rules against float64, over grids of inputs.

    python bench/fixed_point_error.py [--formats 32,16 16,8] [--points 1000000] [--seed 0]

Each primitive runs through the reference interpreter (``cg.run_fixed``, range
checks included) on raw inputs; the reference is float64 on the *dequantized*
inputs, so the numbers are the rule's own error (input quantization excluded).
"max rel" is taken over the outputs with ``|reference| ≥ 1/16`` (below that
the absolute error is the meaningful one).  Elementwise grids: at ``fixed(16, 8)``
every representable input of the domain; wider formats a linear grid of
``--points`` raw values plus as many geometric ones (dense near 0).  The
table pastes into docs/FIXED_POINT.md.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import primitives as P  # noqa: E402
from circuitgrad.tracing import apply  # noqa: E402
from circuitgrad.fixedpoint import dequantize  # noqa: E402
from circuitgrad.interpret import FLOAT_RULES  # noqa: E402


def run_op(op: P.Primitive, *raw: np.ndarray) -> np.ndarray:
    d = cg.trace(lambda *a: apply(op, *a), op.source, name=op.name)
    (y,) = cg.run_fixed(cg.schedule(d), list(raw))
    return y


def reference(op: P.Primitive, *raw: np.ndarray, dt) -> np.ndarray:
    (y,) = FLOAT_RULES[type(op)](op, *(dequantize(x, dt) for x in raw))
    return y


def raw_grid(lo: int, hi: int, points: int) -> np.ndarray:
    """Every raw value in ``[lo, hi]`` when there are at most ``4·points``, else a linear plus a geometric grid."""
    if hi - lo + 1 <= 4 * points:
        return np.arange(lo, hi + 1, dtype=np.int64)
    lin = np.linspace(lo, hi, points).round().astype(np.int64)
    pos = np.unique(np.geomspace(1, max(abs(lo), abs(hi)), points).round().astype(np.int64))
    geo = np.concatenate([pos[pos <= hi], -pos[-pos >= lo]]) if lo < 0 else pos[pos <= hi]
    return np.unique(np.concatenate([lin, geo, [lo, hi]]))


REL_FLOOR = 1 / 16


def errors(got: np.ndarray, want: np.ndarray, dt) -> tuple[float, float]:
    g = dequantize(got, dt)
    err = np.abs(g - want)
    big = np.abs(want) >= REL_FLOOR
    rel = float((err[big] / np.abs(want[big])).max()) if big.any() else float("nan")
    return float(err.max()), rel


def measure(dt, points: int, rng: np.random.Generator) -> list[tuple]:
    one = dt.one
    top = dt.hi / one
    rows = []

    def unary(name, op_cls, raw, domain):
        T = cg.NdArrayType(raw.shape, dt)
        op = op_cls(T)
        got = run_op(op, raw)
        rows.append((name, str(dt), domain, raw.size, *errors(got, reference(op, raw, dt=dt), dt)))

    # Exp: every input whose result fits (the approximation overshoots by < 0.3 %), split at 0
    xmax = int((math.log(top) - 0.004) * one)
    unary("Exp", P.Exp, raw_grid(-16 * one, 0, points), "[-16, 0]")
    unary("Exp", P.Exp, raw_grid(0, xmax, points), f"[0, {xmax / one:.3g}]")
    unary("Log", P.Log, raw_grid(1, dt.hi, points), f"(0, {top:.6g}]")
    unary("Sqrt", P.Sqrt, raw_grid(0, dt.hi, points), f"[0, {top:.6g}]")

    # Div: random numerators, divisors log-uniform in magnitude with either sign; quotients that fit
    n = 4 * points
    a = rng.integers(dt.lo, dt.hi + 1, size=n)
    b = np.rint(np.exp(rng.uniform(0, math.log(dt.hi), size=n))).astype(np.int64) * rng.choice([-1, 1], size=n)
    ok = np.abs(a / b) < 0.99 * top
    a, b = a[ok], b[ok]
    T = cg.NdArrayType(a.shape, dt)
    got = run_op(P.Div(T), a, b)
    rows.append(("Div", str(dt), "quotients in range", a.size, *errors(got, dequantize(a, dt) / dequantize(b, dt), dt)))

    # BatchMatMul: [8, 16, 32] @ [8, 32, 16], entries uniform in [-1, 1]
    A = cg.NdArrayType((8, 16, 32), dt)
    B = cg.NdArrayType((8, 32, 16), dt)
    x = rng.integers(-one, one + 1, size=A.shape)
    y = rng.integers(-one, one + 1, size=B.shape)
    op = P.BatchMatMul(A, B)
    rows.append(("BatchMatMul", str(dt), "[8,16,32]@[8,32,16] in [-1, 1]", 8 * 16 * 16,
                 *errors(run_op(op, x, y), reference(op, x, y, dt=dt), dt)))

    # Softmax, causal and not: rows of 16 entries uniform in [-8, 8]
    for causal in (False, True):
        T = cg.NdArrayType((256, 16, 16), dt)
        x = rng.integers(-8 * one, 8 * one + 1, size=T.shape)
        op = P.Softmax(T, causal=causal)
        rows.append((f"Softmax(causal={causal})", str(dt), "[256,16,16] in [-8, 8]", x.size,
                     *errors(run_op(op, x), reference(op, x, dt=dt), dt)))

    T = cg.NdArrayType((4096, 10), dt)
    x = rng.integers(-8 * one, 8 * one + 1, size=T.shape)
    op = P.LogSumExp(T)
    rows.append(("LogSumExp", str(dt), "[4096,10] in [-8, 8]", 4096,
                 *errors(run_op(op, x), reference(op, x, dt=dt), dt)))

    # exact data movement and selection (ties included: values on a coarse grid)
    T = cg.NdArrayType((64, 8, 12), dt)
    x = rng.integers(-8, 8, size=T.shape) * (one // 4)
    for name, op in (("ArgMaxMask", P.ArgMaxMask(T)), ("Permute", P.Permute(T, (2, 0, 1))),
                     ("CausalMask", P.CausalMask(T))):
        rows.append((name, str(dt), "[64,8,12], ties", x.size, *errors(run_op(op, x), reference(op, x, dt=dt), dt)))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", nargs="+", default=["32,16", "16,8"], help="width,frac pairs")
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    rows = []
    for spec in args.formats:
        w, f = (int(v) for v in spec.split(","))
        rows += measure(cg.fixed(w, f), args.points, rng)
    fmt = lambda v: "exact" if v == 0 else ("—" if v != v else f"{v:.3g}")
    print(table(["primitive", "dtype", "inputs", "points", "max abs error", "max rel error (where abs(ref) ≥ 1/16)"],
                [(n, d, dom, pts, fmt(ea), fmt(er)) for n, d, dom, pts, ea, er in rows]))


if __name__ == "__main__":
    main()
