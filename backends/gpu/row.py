"""Row kernels: ``Softmax`` (causal or not), ``LogSumExp`` and ``ArgMaxMask`` over the last axis, a warp per row.

Lane ``l`` of the warp owns columns ``l, l + 32, …`` (coalesced reads and writes). Each lane computes its
partial (max; sum of ``exp(x - m)``; first maximum and its index), the warp combines the partials with
``__shfl_xor_sync`` for o = 16, 8, 4, 2, 1 (a butterfly: every lane ends with the same value), and each lane
writes its columns. The per-lane code is ``__host__ __device__``, and so is each combine
(:func:`~.warp.combine`: one function that the device's shuffle loop and the host replay both call);
``<name>_body(row, …)`` (host only) runs the 32 lanes one after another and replays the butterfly exactly
(``v'[l] = comb(v[l], v[l ^ o])``), so the host result is bitwise the device's given the same ``exp``/``log``.
The host execution mode calls it through ``<name>__host_warp``, lanes 31 … 0 in its ``reverse`` order
(``<name>_lane``), so that a lane whose partial depended on another's would differ between the orders;
:mod:`~.host.check` calls it through its loop over rows.
"""
from __future__ import annotations

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.types import NdArrayType

from .cuda import ctype, mathfn, pointer
from .kernel import Kernel, with_extents
from .plan import Launch, Plan
from .warp import WARP, combine, host_replay, lanes

__all__ = ["ROW_KERNELS", "row_kernel"]

#: the primitives with a row kernel (exactly those of kind ``"rowwise"``; ``tests/test_conformance.py`` checks)
ROW_KERNELS = (P.Softmax, P.LogSumExp, P.ArgMaxMask)

HD = "__host__ __device__ inline"


def row_kernel(step: Launch, plan: Plan, name: str) -> Kernel:
    """One warp per row of the last axis: softmax (causal: row ``q`` keeps ``j <= q``), log-sum-exp, argmax."""
    a = step.instrs[0]
    t = plan.program.types[a.args[0]]
    c = ctype(t)
    rows = int(np.prod(t.shape[:-1], dtype=np.int64))
    if type(a.op) not in ROW_KERNELS:
        raise NotImplementedError(f"GPU backend: no row kernel for {a.op.name}")
    parts = _argmax(name, c, t.shape[-1]) if isinstance(a.op, P.ArgMaxMask) else _normalise(name, a.op, t, c)
    helpers, device, host = parts
    src = helpers + _warp_per_row(name, ", ".join([pointer(c, "x", const=True), pointer(c, "y")]), rows, device,
                                  host)
    return with_extents(Kernel(name, src, list(step.inputs), list(step.outputs), rows,
                               [a.op.name + ("(causal)" if getattr(a.op, "causal", False) else "")], frozenset(),
                               (c,), lanes=WARP), plan)


def _warp_per_row(name: str, sig: str, rows: int, device: str, host: str) -> str:
    """The ``__global__`` kernel (a warp per row ``i``, lane ``lane``; statements ``device``) and its host replay
    (statements ``host``, for row ``i``)."""
    return (f"extern \"C\" __global__ void {name}({sig}) {{\n"
            f"    // one warp per row (blockDim.x is a multiple of 32): a warp past the last row returns as a whole\n"
            f"    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    const long long i = t / {WARP};\n"
            f"    const int lane = (int)(t % {WARP});\n"
            f"    if (i >= {rows}LL) return;\n"
            + device + "}\n"
            + host_replay(name,
                          "// host only: the warp's 32 lanes one after another (31 … 0 in the host mode's reverse "
                          "order: a lane's\n"
                          "// partial must not depend on another's), and the butterfly replayed with the device's "
                          "combine\n",
                          "i", sig, host,
                          f"    const long long i = (long long)(block * blockDim.x / {WARP}) + warp;\n"
                          f"    if (i < {rows}LL) {name}_body(i, x, y);\n"))


def _argmax(name: str, c: str, k: int) -> tuple[str, str, str]:
    """``(helpers, device statements, host statements)`` of ``ArgMaxMask`` over rows of ``k``: a one at the row's
    first maximum.

    NumPy's argmax: the first maximum, a NaN counts as the maximum (the first NaN). ``better`` orders (value,
    index) pairs totally (NaN above every number, then value, then the smaller index first), so the combine is
    associative and commutative: any grouping picks NumPy's pair, on every lane."""
    X = f"x[i * {k}LL + j]"
    helpers = (
        f"{HD} bool {name}_better({c} v, int j, {c} m, int b) {{\n"
        f"    return v != v ? (m != m ? j < b : true) : (m != m ? false : (v > m || (v == m && j < b)));\n}}\n"
        f"{HD} void {name}_part(long long i, int lane, const {c}* __restrict__ x, {c}& m, int& b) {{\n"
        f"    m = x[i * {k}LL]; b = 0;          // column 0 belongs to every lane: no identity needed\n"
        f"    for (int j = lane; j < {k}; j += {WARP}) {{\n"
        f"        const {c} v = {X};\n"
        f"        if ({name}_better(v, j, m, b)) {{ m = v; b = j; }}\n"
        f"    }}\n}}\n"
        f"{HD} void {name}_write(long long i, int lane, {c}* __restrict__ y, int b) {{\n"
        f"    for (int j = lane; j < {k}; j += {WARP}) y[i * {k}LL + j] = j == b ? ({c})1 : ({c})0;\n}}\n")
    comb, dev, rep = combine(name, "mb", [("m", c), ("b", "int")],
                             f"if ({name}_better(m_o, b_o, m, b)) {{ m = m_o; b = b_o; }}")
    device = (f"    {c} m; int b;\n"
              f"    {name}_part(i, lane, x, m, b);\n"
              + dev
              + f"    {name}_write(i, lane, y, b);\n")
    host = (f"    {c} m[{WARP}] = {{}}, m2[{WARP}] = {{}}; int b[{WARP}] = {{}}, b2[{WARP}] = {{}};\n"
            + lanes(name, f"{name}_part(i, l, x, m[l], b[l]);")
            + rep
            + lanes(name, f"{name}_write(i, l, y, b[l]);"))
    return helpers + comb, device, host


def _normalise(name: str, op: P.Primitive, t: NdArrayType, c: str) -> tuple[str, str, str]:
    """``(helpers, device statements, host statements)`` of ``Softmax`` or ``LogSumExp`` over the last axis of
    ``t``: the row's maximum ``m``, then the sum ``s`` of ``exp(x - m)``, each combined over the warp, then the
    row written (``exp(x - m) / s``, or ``m + log(s)``)."""
    helpers = _max_and_sum(name, op, t, c) + _write(name, op, t.shape[-1], c)
    comb_m, dev_m, rep_m = combine(name, "max", [("m", c)], f"m = {name}_max2(m, m_o);")
    comb_s, dev_s, rep_s = combine(name, "sum", [("s", c)], "s = s + s_o;")
    device = (f"    {c} m = {name}_max(i, lane, x);\n"
              + dev_m
              + f"    {c} s = {name}_sum(i, lane, x, m);\n"
              + dev_s
              + f"    {name}_write(i, lane, x, y, m, s);\n")
    host = (f"    {c} m[{WARP}] = {{}}, m2[{WARP}] = {{}}, s[{WARP}] = {{}}, s2[{WARP}] = {{}};\n"
            + lanes(name, f"m[l] = {name}_max(i, l, x);")
            + rep_m
            + lanes(name, f"s[l] = {name}_sum(i, l, x, m[l]);")
            + rep_s
            + lanes(name, f"{name}_write(i, l, x, y, m[l], s[l]);"))
    return helpers + comb_m + comb_s, device, host


def _max_and_sum(name: str, op: P.Primitive, t: NdArrayType, c: str) -> str:
    """The per-lane helpers: ``<name>_n(i)`` (the columns row ``i`` reads: ``j <= q`` for a causal softmax),
    ``<name>_max`` and ``<name>_sum`` (the lane's partials) and ``<name>_max2`` (their combine)."""
    k = t.shape[-1]
    X = f"x[i * {k}LL + j]"
    if isinstance(op, P.Softmax) and op.causal:
        s = t.shape[-2]
        # row i is query q = i % s: keys j <= q only; the others get exactly 0
        n = f"(int)((i % {s}LL) + 1 < {k}LL ? (i % {s}LL) + 1 : {k}LL)"
    else:
        n = f"{k}"
    # the maximum propagates a NaN (then every output is NaN, as NumPy's); column 0 is every lane's start
    return (f"{HD} {c} {name}_max2({c} a, {c} b) {{ return (a > b || a != a) ? a : b; }}\n"
            f"{HD} int {name}_n(long long i) {{ return {n}; }}\n"
            f"{HD} {c} {name}_max(long long i, int lane, const {c}* __restrict__ x) {{\n"
            f"    const int n = {name}_n(i);\n"
            f"    {c} m = x[i * {k}LL];\n"
            f"    for (int j = lane; j < n; j += {WARP}) m = {name}_max2(m, {X});\n"
            f"    return m;\n}}\n"
            f"{HD} {c} {name}_sum(long long i, int lane, const {c}* __restrict__ x, {c} m) {{\n"
            f"    const int n = {name}_n(i);\n"
            f"    {c} s = 0;\n"
            f"    for (int j = lane; j < n; j += {WARP}) s += {mathfn('exp', c)}({X} - m);\n"
            f"    return s;\n}}\n")


def _write(name: str, op: P.Primitive, k: int, c: str) -> str:
    """``<name>_write``: a softmax writes the lane's columns (0 past the row's ``n``), a log-sum-exp's lane 0 the
    row's value."""
    head = (f"{HD} void {name}_write(long long i, int lane, const {c}* __restrict__ x, {c}* __restrict__ y, "
            f"{c} m, {c} s) {{\n")
    if isinstance(op, P.Softmax):
        return (head +
                f"    const int n = {name}_n(i);\n"
                f"    for (int j = lane; j < {k}; j += {WARP}) y[i * {k}LL + j] = j < n ? "
                f"{mathfn('exp', c)}(x[i * {k}LL + j] - m) / s : ({c})0;\n"
                f"}}\n")
    return head + f"    if (lane == 0) y[i] = m + {mathfn('log', c)}(s);\n}}\n"
