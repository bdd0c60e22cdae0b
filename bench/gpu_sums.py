"""Generated sum kernels (``SumTo``) against CuPy's ``.sum``, alone and in the GPT d=384 step, on a GPU.

    python bench/gpu_sums.py            # writes bench_sums.json into $OUT (default: the current folder)

Each sum of ``CASES`` is timed with CUDA events (50 launches after 3) for the kernel's automatic geometry and
other (G outputs, W warps) choices, beside CuPy's ``.sum`` of the same view, with its error against a float64
sum and whether two runs agree bit for bit. Then the d=384, 6-layer GPT AdamW step (16 × 256 tokens) is
compiled twice, with the sum kernels and with CuPy's ``.sum`` in their place (``runtime.kernels`` filtered,
and no sums making their terms or sharing a kernel, for that one build), and profiled by ``gpu.profile``. Without a GPU it says why and exits with 0. Figures:
docs/BENCHMARKS.md, "Sum kernels against CuPy's ``.sum``".
"""
import json
import os
import sys
import time

import numpy as np

import circuitgrad as cg
from circuitgrad import nn, primitives as P
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import reduction, runtime
from circuitgrad.backends.gpu.plan import plan as make_plan

ok, why = gpu.available()
if not ok:
    print(f"bench/gpu_sums.py: no GPU here ({why}); nothing measured")
    sys.exit(0)
import cupy as cp  # noqa: E402

OUT = os.environ.get("OUT", ".")
res = {"kernels": [], "gpt": {}}

def prog(shape, out, transpose=False):
    def f(a):
        x = a.builder.apply(P.Transpose(a.type), a)[0] if transpose else a
        return x.builder.apply(P.SumTo(x.type, x.type.with_shape(out)), x)[0]
    return cg.schedule(cg.trace(f, [cg.NdArrayType(shape, cg.float32)], name="s"))

def timeit(fn, n=50):
    for _ in range(3):
        fn()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    s.record()
    for _ in range(n):
        fn()
    e.record()
    e.synchronize()
    return cp.cuda.get_elapsed_time(s, e) / n * 1e3   # us

CASES = [((4096, 384), (384,), False), ((4096, 1536), (1536,), False), ((4096, 96), (96,), False),
         ((4096, 384), (4096, 1), False), ((24576, 256), (24576, 1), False), ((384, 4096), (1, 384), True),
         ((4096, 3072), (3072,), False)]
for shape, out, tr in CASES[int(os.environ.get("SKIP", "0")):]:
    p = make_plan(prog(shape, out, tr))
    step = next(s for s in p.steps if s.kind == "reduce")
    auto = reduction.geometry(step, p)
    x = cp.asarray(np.random.default_rng(0).normal(size=shape).astype(np.float32))
    xv = x.T if tr else x
    axes = tuple(i for i in range(len(out)) if out[i] == 1) if len(out) == xv.ndim else (0,)
    want = xv.astype(cp.float64).sum(axis=axes).reshape(out)
    t_cupy = timeit(lambda: xv.sum(axis=axes, keepdims=True))
    col = auto.g > 1
    variants = [(None, None)] + ([(8, 1), (8, 4), (8, 8), (4, 8), (2, 8), (1, 8)] if col else [(1, 1), (1, 2), (1, 4), (1, 8)])
    for g, w in variants:
        r = reduction.reduce_source(step, p, "k", "float", g, w)
        k = cp.RawKernel(r.source, "k")
        y = cp.empty(out, dtype=cp.float32)
        grid = -(-r.groups * r.lanes // 256)
        k((grid,), (256,), (x, y))
        err = float(cp.max(cp.abs(y - want) / (cp.abs(xv).astype(cp.float64).sum(axis=axes).reshape(out) + 1e-30)))
        y2 = cp.empty_like(y)
        k((grid,), (256,), (x, y2))
        same = bool(cp.all(y == y2))
        t = timeit(lambda: k((grid,), (256,), (x, y)))
        row = dict(shape=shape, out=out, transposed=tr, g=r.g, warps=r.warps, auto=g is None, us=round(t, 2),
                   cupy_us=round(t_cupy, 2), GBs=round(x.nbytes / t / 1e3, 1), rel_err=err, deterministic=same)
        print(row, flush=True)
        res["kernels"].append(row)

# ---- d384 GPT step: reduction kernels vs CuPy .sum
B, S, V = 16, 256, 96
def build(sum_kernels: bool):
    orig = runtime.kernels
    plan_module = sys.modules["circuitgrad.backends.gpu.plan"]
    passes = plan_module.choose_summed, plan_module.group_sums, plan_module.fuse_epilogues
    if not sum_kernels:
        runtime.kernels = lambda p, **kw: {i: k for i, k in orig(p, **kw).items() if p.steps[i].kind != "reduce"}
        # CuPy's .sum takes one stored operand: no sums making their terms, sharing a kernel or with an epilogue
        plan_module.choose_summed = plan_module.group_sums = lambda st: None
        plan_module.fuse_epilogues = lambda p, updates=None: p.steps
    try:
        m = cg.compile_model(nn.gpt(B, S, V, d=384, heads=6, layers=6), loss=nn.softmax_cross_entropy,
                             optimizer=nn.sgd(0.1) if os.environ.get("OPT") == "sgd" else nn.adamw(1e-3), backend="cupy", donate=True)
        m.fn("step")
    finally:
        runtime.kernels = orig
        plan_module.choose_summed, plan_module.group_sums, plan_module.fuse_epilogues = passes
    return m
rng = np.random.default_rng(0)
xs, ys = rng.integers(0, V, size=(B, S)), rng.integers(0, V, size=(B, S))
outs = {}
for name, flag in (("sum_kernels", True), ("cupy_sum", False)):
    t0 = time.time()
    m = build(flag)
    f = m.fn("step").compiled
    p0 = m.init_params(seed=0)
    args = m.arguments("step", {k: cp.asarray(v) for k, v in p0.items()}, xs, ys)
    o = m.step({k: cp.array(v, copy=True) for k, v in p0.items()}, xs, ys)
    cp.cuda.Device().synchronize()
    outs[name] = {k: cp.asnumpy(v) for k, v in o.items()}
    if os.environ.get("NOPROF"):
        continue
    prof = gpu.profile(f, *args, repeats=10, warmup=3, device="h200")
    kinds = {g["kind"]: g for g in prof.by("kind")}
    res["gpt"][name] = dict(launches=f.launches, wall_ms=prof.wall_s * 1e3, span_ms=prof.span_s * 1e3,
                            by_kind={k: {kk: vv for kk, vv in v.items() if isinstance(vv, (int, float, str))} for k, v in kinds.items()},
                            has_sum=".sum(" in f.python, setup_s=time.time() - t0)
    print(name, json.dumps(res["gpt"][name], default=str)[:1500], flush=True)
a0, b0 = outs["sum_kernels"], outs["cupy_sum"]
d = sorted(((float(np.max(np.abs(a0[k] - b0[k]))), float(np.max(np.abs(b0[k] - cp.asnumpy(p0[k])))), k) for k in a0), reverse=True)
res["gpt"]["max_abs_diff_vs_cupy_sum"] = d
print("largest |new - old| per parameter, with |old update|:", d[:8])
print("median", d[len(d) // 2])
json.dump(res, open(os.path.join(OUT, "bench_sums.json"), "w"), indent=1, default=str)
