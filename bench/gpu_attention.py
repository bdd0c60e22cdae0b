"""Attention alone on a GPU: circuitgrad's softmax and spherical attention against PyTorch's SDPA.

    python bench/gpu_attention.py [--batch 4] [--heads 8] [--seq 1024] [--dh 64] [--json out.json]
    python bench/gpu_attention.py --dry        # no GPU: the script's own paths on cupy-emulated, tiny

Causal attention over ``q, k, v : [B, H, S, dh]`` (``ops.attention``): the forward program, and forward plus
backward (``O`` and the reverse derivative's ``dq, dk, dv`` from ``q, k, v`` and the output's cotangent, as a
training step computes them; both run as the streaming kernels of ``gpu.attention``, on the tensor cores
(``gpu.attention_mma``) where ``S`` and ``dh`` are multiples of 16 and the precision is tf32, bf16 or 3xtf32),
compiled by the GPU backend (``gpu.compile_function``) in float32 (on the CUDA cores, and as 3xTF32 with
``attention_3xtf32``: SDPA float32's own method) and with ``precision="tf32"`` and ``"bf16"``; PyTorch's ``scaled_dot_product_attention`` (``is_causal=True``) forward, and forward plus
``backward``, in float32 and bfloat16, on the same inputs in the same process. Columns: median ms of
``--repeats`` calls after ``--warmup`` (CUDA events), the ratio to SDPA in the same precision class
(float32 rows against SDPA fp32, tf32 and bf16 rows against SDPA bf16), kernel launches, and peak MB
(circuitgrad: ``gpu.memory.peak`` of the program, i.e. predicted; PyTorch: ``max_memory_allocated``).

Variants are timed after the defaults (forward+backward): each precision that computes dk and dv in one
kernel (:func:`~circuitgrad.backends.gpu.attention.kv_together`: fp32 on quads, tf32, bf16) with the two in
separate kernels (``, dk dv apart``; float32's then take a thread per row, whose dk spills at dh = 64), which
only a device decides, bf16 attention of ``q/2, k/2, v/2`` (``, q k v stored``: a fused kernel makes
them, so they are stored as bfloat16 as a GPT's are, and the attention kernels read two bytes an element), and
tf32 and bf16 with the tensor-core kernels' loops unrolled twice (``, loops unrolled 2x``). Every forward+backward row's
launches are profiled one by one (``gpu.profile``: measured beside the cost model's prediction), so that the
note can say where the time goes. Without a GPU (and without ``--dry``) the script says why and exits with 0.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import ops  # noqa: E402
from circuitgrad.backends import gpu  # noqa: E402
from circuitgrad.backends.gpu import attention, attention_mma, memory  # noqa: E402
from circuitgrad.rewrite import simplify  # noqa: E402

KINDS = ("softmax", "spherical")
#: circuitgrad's rows: float32 (CUDA cores), float32 as 3xTF32 on the tensor cores (``attention_3xtf32``, SDPA
#: float32's own method), TF32, bf16
PRECISIONS = ("fp32", "3xtf32", "tf32", "bf16")
#: the variants timed after the defaults (forward+backward): each precision that computes dk and dv in one kernel
#: with the two apart (``attention.fuse(..., together=False)``), and bf16 with q, k, v made inside the program
#: (``stored``: as a GPT's, stored as bfloat16, ``gpu.storage``), and the tensor-core kernels with their loops over
#: the other side's steps unrolled twice (``unrolled``: ``attention_mma.UNROLL = 2``, which only a device decides)
VARIANTS = [("fp32", "apart"), ("tf32", "apart"), ("bf16", "apart"), ("bf16", "stored"), ("tf32", "unrolled"),
            ("bf16", "unrolled")]
#: how each variant's rows are named
NAMED = {"": "", "apart": ", dk dv apart", "stored": ", q k v stored", "unrolled": ", loops unrolled 2x"}


def programs(kind: str, shape: tuple[int, ...], stored: bool = False) -> dict:
    """``{"forward": Program, "forward+backward": Program}`` of causal attention of ``kind`` on ``shape``
    (``stored``: of ``q/2, k/2, v/2``, which one fused kernel makes, as a GPT's projections make its q, k, v)."""
    T = cg.NdArrayType(shape, cg.float32)
    half = (lambda x: x * 0.5) if stored else (lambda x: x)
    d = cg.trace(lambda q, k, v: ops.attention(half(q), half(k), half(v), causal=True, kind=kind), [T] * 3,
                 name=f"{kind}_attention")
    R = cg.rdiff(d)

    def both(q, k, v, do):                 # what a training step computes: O, and the gradients from dO
        o = d(q, k, v)
        return (*(o if isinstance(o, tuple) else (o,)), *R(q, k, v, do))
    fb = cg.trace(both, [T] * 4, name=f"{kind}_attention_step")
    return {"forward": simplify(cg.schedule(d)), "forward+backward": simplify(cg.schedule(fb))}


def timed(fn, repeats: int, warmup: int, events) -> float:
    """Median milliseconds of ``fn()`` (``events``: a pair factory and a synchronize, or ``None`` on the CPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if events is None:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
            continue
        start, stop = events()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(__import__("cupy").cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def kernels(f, args, a, device: str) -> list[dict]:
    """Each launch of ``f`` on ``args``: what it runs, measured and predicted ms (``gpu.profile``)."""
    prof = gpu.profile(f, *args, repeats=a.repeats, warmup=a.warmup, device=device)
    return [{"what": x.what, "ms": x.measured_s * 1e3, "predicted_ms": x.predicted_s * 1e3} for x in prof.launches]


def ours(kind: str, shape, precision: str, a, emulate: bool, variant: str = "", device: str = "h100") -> list[dict]:
    """circuitgrad's rows of ``kind`` at ``precision`` (a ``variant`` of :data:`VARIANTS`: forward+backward
    alone)."""
    rows = []
    rng = np.random.default_rng(0)
    base = "fp32" if precision == "3xtf32" else precision
    for what, prog in programs(kind, shape, stored=variant == "stored").items():
        if variant and what == "forward":
            continue
        if variant == "apart":      # fused here as compile_function would fuse it, dk and dv a kernel each
            prog = attention.fuse(prog, precision, together=False)
        unroll = attention_mma.UNROLL
        attention_mma.UNROLL = 2 if variant == "unrolled" else unroll   # read as the kernels' source is written
        try:
            f = gpu.compile_function(prog, [f"a{i}" for i in range(len(prog.inputs))], "attention",
                                     emulate=emulate, precision=base, attention_3xtf32=precision == "3xtf32")
        finally:
            attention_mma.UNROLL = unroll
        xp = f.namespace["xp"]
        args = [xp.asarray(rng.normal(size=prog.types[v].shape).astype(np.float32)) for v in prog.inputs]
        events = None
        if not emulate:
            import cupy

            def events():
                return cupy.cuda.Event(), cupy.cuda.Event()
        row = {"kind": kind, "what": what, "precision": precision,
               "implementation": f"circuitgrad {precision}{NAMED[variant]}", "stored": len(f.plan.narrow),
               "ms": timed(lambda: f.run(*args), a.repeats, a.warmup, events), "launches": f.launches,
               "peak_mb": memory.peak(f) / 2 ** 20,
               "mma": sorted({x.op.mma or "cuda cores" for x in f.program.instrs if isinstance(x.op, attention.OPS)}),
               "ops": [type(x.op).__name__ for x in f.program.instrs if isinstance(x.op, attention.OPS)]}
        if what == "forward+backward":
            row["kernels"] = kernels(f, args, a, device)
        rows.append(row)
    return rows


def sdpa(kind: str, shape, dtype: str, a) -> list[dict]:
    """PyTorch's fused attention (softmax only: PyTorch has no spherical attention kernel)."""
    import torch
    import torch.nn.functional as F
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=dt, generator=g) for _ in range(4))
    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def both():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(do)

    def events():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def elapsed(fn):
        for _ in range(a.warmup):
            fn()
        times = []
        for _ in range(a.repeats):
            s, e = events()
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)
    rows = []
    for what, fn in (("forward", forward), ("forward+backward", both)):
        torch.cuda.reset_peak_memory_stats()
        ms = elapsed(fn)
        rows.append({"kind": kind, "what": what, "implementation": f"PyTorch SDPA {dtype}", "ms": ms,
                     "peak_mb": torch.cuda.max_memory_allocated() / 2 ** 20})
    return rows


def ratios(rows: list[dict]) -> None:
    """Each circuitgrad row against SDPA of its precision class (fp32 and 3xtf32 against fp32; tf32 and bf16 against
    bf16), same task."""
    ref = {(r["what"], r["implementation"].split()[-1]): r["ms"] for r in rows if r["implementation"].startswith("PyTorch")}
    for r in rows:
        if "precision" in r:
            cls = "fp32" if r["precision"] in ("fp32", "3xtf32") else "bf16"
            if (r["what"], cls) in ref:
                r["ratio"] = r["ms"] / ref[(r["what"], cls)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--dh", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", help="write the rows here as JSON")
    ap.add_argument("--dry", action="store_true", help="no GPU: cupy-emulated at B=1, H=2, S=16, dh=16, one repeat")
    a = ap.parse_args(argv)
    ok, why = gpu.available()
    if not ok and not a.dry:
        print(f"bench/gpu_attention.py: no GPU here ({why}); nothing measured")
        if a.json:
            with open(a.json, "w") as fh:
                json.dump({"status": "no-device", "rows": []}, fh)
        return 0
    if a.dry:
        a.batch, a.heads, a.seq, a.dh, a.repeats, a.warmup = 1, 2, 16, 16, 1, 0
    shape = (a.batch, a.heads, a.seq, a.dh)
    device = "h200" if "H200" in why else "h100"        # the cost model's profile for the predictions
    rows: list[dict] = []

    def save(status: str) -> None:          # after each group of rows: a run cut short keeps what it measured
        if a.json:
            with open(a.json, "w") as fh:
                json.dump({"status": status, "shape": shape, "rows": rows}, fh, indent=1, default=str)
    # the defaults and SDPA first, the variants after them
    tasks = [(k, p, "") for k in KINDS for p in PRECISIONS] + [(k, p, v) for k in KINDS for p, v in VARIANTS]
    for i, (kind, precision, variant) in enumerate(tasks):
        try:
            rows.extend(ours(kind, shape, precision, a, emulate=a.dry, variant=variant, device=device))
        except Exception as e:          # report, go on
            rows.append({"kind": kind, "what": "-", "implementation": f"circuitgrad {precision}{NAMED[variant]}",
                         "error": f"{type(e).__name__}: {e}"})
        if kind == "softmax" and precision == PRECISIONS[-1] and not variant and not a.dry:
            for dtype in ("fp32", "bf16"):
                try:
                    rows.extend(sdpa(kind, shape, dtype, a))
                except Exception as e:
                    rows.append({"kind": kind, "what": "-", "implementation": f"PyTorch SDPA {dtype}",
                                 "error": f"{type(e).__name__}: {e}"})
        ratios(rows)
        save("partial" if i + 1 < len(tasks) else "ok")
    print(f"causal attention, B={a.batch} H={a.heads} S={a.seq} dh={a.dh}; median of {a.repeats} after "
          f"{a.warmup}; device: {why if ok else 'cupy-emulated on the CPU'}")
    body = [[r["kind"], r["what"], r["implementation"],
             f"{r['ms']:.3f}" if "ms" in r else r.get("error", "-"),
             f"{r['ratio']:.2f}" if "ratio" in r else "-", str(r.get("launches", "-")),
             f"{r['peak_mb']:.0f}" if "peak_mb" in r else "-"] for r in rows]
    print(table(["attention", "pass", "implementation", "ms", "× SDPA", "launches", "peak MB"], body))
    steps = [[r["kind"], r["implementation"], k["what"], f"{k['ms']:.3f}", f"{k['predicted_ms']:.3f}"]
             for r in rows for k in r.get("kernels", [])]
    print("\nforward+backward, launch by launch (gpu.profile; predicted: the cost model's "
          f"{device} profile)\n" + table(["attention", "implementation", "launch", "ms", "predicted ms"], steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
