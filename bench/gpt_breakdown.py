"""Where a GPT training step spends its time, in circuitgrad and in PyTorch (CPU eager).

    python bench/gpt_breakdown.py [--steps 30] [--attention softmax]

The benchmark GPT of ``bench/gpt_cpu.py`` (d=128, 4 heads, 2 layers, S=64, B=16, vocab 96, AdamW).
Two tables of milliseconds per step, each under its own profiler (both inflate the total):

* **circuitgrad**: every line of the generated step timed, summed by definition (the provenance path of
  each instruction: ``attention``, ``layer_norm``, ``gelu``, ``adamw``, …), matrix products apart
  (``GEMM (attention)`` holds the q/k/v/o projections and the batched score products, ``GEMM (mlp)``
  the two MLP projections; ``mlp`` alone is their bias adds and bias gradients);
* **pytorch**: ``torch.profiler``'s self CPU time, summed by ATen operator.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "peers")]
from _util import machine, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import codegen, nn  # noqa: E402

B, S, V, D, H, L = 16, 64, 96, 128, 4, 2
_REGIONS = ("attention", "layer_norm", "ln1", "ln2", "gelu", "mlp", "adamw", "softmax_cross_entropy", "embedding",
            "head")


def _region(line: str) -> str:
    m = re.search(r"# (\w+)[^@]*?(?:@ (\S+))?$", line)
    op, path = (m.group(1), m.group(2) or "") if m else ("?", "")
    parts = path.split("/")
    name = next((p for p in reversed(parts) if p in _REGIONS), "other")
    name = {"ln1": "layer_norm", "ln2": "layer_norm"}.get(name, name)
    return f"GEMM ({name})" if "MatMul" in op else name


def circuitgrad_breakdown(step, args, steps: int) -> dict[str, float]:
    """Milliseconds per step of each region, every line of the generated step timed."""
    f = step.fn("step")
    src, consts = codegen.generate(f.program, step.arg_names["step"], "step")
    out, regions = [], []
    for ln in src.splitlines():
        if ln.startswith("    ") and not ln.strip().startswith(("return", "del")):
            out += [ln, f"    _T[{len(regions)}] += _pc() - _t0; _t0 = _pc()"]
            regions.append(_region(ln.strip()))
        else:
            out += [ln] + (["    _t0 = _pc()"] if ln.startswith("def ") else [])
    ns = dict(codegen._HELPERS)
    ns.update(consts)
    T = [0.0] * len(regions)
    ns.update(_T=T, _pc=time.perf_counter)
    exec("\n".join(out), ns)             # the generated step, instrumented (this script's own source)
    for _ in range(3):
        ns["step"](*args)
    T[:] = [0.0] * len(T)
    for _ in range(steps):
        ns["step"](*args)
    acc: dict[str, float] = collections.Counter()
    for t, r in zip(T, regions):
        acc[r] += t * 1e3 / steps
    return dict(acc)


def torch_breakdown(params: dict, x, y, attention: str, steps: int) -> dict[str, float]:
    import torch
    import torch_gpt
    from torch.profiler import ProfilerActivity, profile
    F = torch.nn.functional
    p = {k: torch.tensor(np.asarray(v), requires_grad=True) for k, v in params.items() if not k.startswith("adam")}
    opt = torch.optim.AdamW(list(p.values()), lr=3e-3)
    tx, ty = torch.tensor(x), torch.tensor(y).reshape(-1)

    def step():
        opt.zero_grad()
        F.cross_entropy(torch_gpt.gpt(tx, p, L, H, attention).reshape(-1, V), ty).backward()
        opt.step()
    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    acc: dict[str, float] = collections.Counter()
    for e in prof.key_averages():
        if e.key.startswith("aten::"):
            acc[e.key] += e.self_cpu_time_total / 1e3 / steps
    return dict(acc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--attention", choices=["softmax", "spherical"], default="softmax")
    a = ap.parse_args()
    print(f"machine: {machine()}")
    step = cg.compile_model(nn.gpt(B, S, V, d=D, heads=H, layers=L, attention=a.attention),
                            loss=nn.softmax_cross_entropy, optimizer=nn.adamw(3e-3))
    params = step.init_params(seed=0)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, V, (B, S)), rng.integers(0, V, (B, S))
    args = [*step._params(params, "step"), step._x(x, "step"), step._targets(y, "step")]
    ours = circuitgrad_breakdown(step, args, a.steps)
    print("\n## circuitgrad: the generated step, every line timed (ms per step)\n")
    rows = sorted(ours.items(), key=lambda kv: -kv[1])
    print(table(["region", "ms", "share"], [[k, f"{v:.2f}", f"{v / sum(ours.values()):.0%}"] for k, v in rows]
                + [["total", f"{sum(ours.values()):.2f}", ""]]))
    try:
        theirs = torch_breakdown(params, x, y, a.attention, a.steps)
    except ImportError:
        print("PyTorch is not installed: its table is skipped")
        return
    print("\n## pytorch: torch.profiler self CPU time by ATen operator (ms per step)\n")
    rows = sorted(theirs.items(), key=lambda kv: -kv[1])
    top, rest = rows[:12], sum(v for _, v in rows[12:])
    print(table(["operator", "ms", "share"], [[k, f"{v:.2f}", f"{v / sum(theirs.values()):.0%}"] for k, v in top]
                + [["(others)", f"{rest:.2f}", f"{rest / sum(theirs.values()):.0%}"],
                   ["total", f"{sum(theirs.values()):.2f}", ""]]))


if __name__ == "__main__":
    main()
