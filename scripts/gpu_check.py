"""One-call device check of the CuPy backend, run by ``scripts/gpu-check.sh``; see docs/GPU.md.

    python scripts/gpu_check.py [--report gpu-check.json] [--budget 280]

Phases, in this order, each in its own process with its own time budget (a kernel that poisons the CUDA
context, or hangs, costs one phase, not the report):

1. ``device``: CuPy imports, ``cupy.cuda.runtime.getDeviceCount()`` finds a device, a one-line kernel
   compiles with NVRTC and runs. Without it nothing else runs: the report says why, status 1.
2. ``nvrtc``: every kernel of ``examples/tinygpt.py``'s ``step`` (``donate=True``), ``predict`` and ``loss``
   is compiled with NVRTC, each function's kernels as the backend's modules (``cupy.RawModule``, side by
   side) first; only a function whose modules fail is compiled kernel by kernel (``cupy.RawKernel(...).compile()``), so a compile error
   shows in isolation, with its log. The time left compiles the kernels alone, as the backend does, filling
   CuPy's kernel cache for the later phases. Its budget is ``10 s + 0.25 s`` per kernel (the device phase
   counts them); every later phase gets its nominal share of what is left, so the whole stays in ``--budget``.
3. ``device-tests``: ``pytest tests/test_gpu_device.py`` (the tests skip without a device: all skipped is
   a failure here).
4. ``tinygpt-vs-numpy``: three AdamW steps of tinygpt with ``donate=True`` (the example's learning-rate
   schedule through ``nn.set_learning_rate``) on the device, against the NumPy backend in float32, each
   array after each step. The tolerance comes from float32 arithmetic as this run incurs it: the NumPy
   float32 run's distance from a float64 run of the same steps, ``s = ‖np32 − np64‖₂``, measures the
   rounding error of one float32 evaluation whose sums are pairwise (NumPy's, MKL's blocked GEMM). Another
   order (a sequential or differently blocked sum, FMAs, CUDA's ``expf``) may round worse: a random walk
   of ``n`` roundings grows as ``√n·u`` in sequence and as ``√(log₂ n)·u`` pairwise. With ``n = B·S`` (every
   gradient sums over all tokens), each array must satisfy
   ``‖dev − np32‖₂ ≤ 2·√(n / log₂ n)·s + 2u‖np64‖₂`` (two evaluations, each within its error of the
   exact value; ``u = 2⁻²⁴``: one rounding of every element): 20·s for tinygpt (n = 1024). A wrong
   kernel is off by the size of the values, not by rounding. The first-order bounds of
   ``tests/_tolerance.py`` (``error_bounds``) are infinite for this program: through two attention layers
   they grow past the layer norm's variance, and ``Rsqrt`` of an interval containing 0 bounds nothing.
5. ``timing``: ms per training step (median of ``repeats`` after ``warmup``, each call followed by a
   device synchronize), circuitgrad's step against PyTorch eager on the same GPT
   (``tests/peers/torch_gpt.py``, the model ``bench/gpt_cpu.py`` compares on the CPU), timed round robin.

The report (JSON) has ``status`` (``pass``, ``fail``, ``no-device``, or ``incomplete`` where everything that
ran passed but something was missing, such as PyTorch with CUDA), a one-line ``message``, the device, and one
entry per phase (``status``: pass, fail, error, timeout, skipped; its seconds and budget; its details).
Exit status 0 unless a phase failed or there is no device (1). The parent process uses only the standard
library, so a report is written even where NumPy or circuitgrad do not import.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.abspath(__file__)

#: (phase, nominal budget in seconds); scaled down when ``--budget`` is smaller than their sum
PHASES = [("device", 25), ("nvrtc", 45), ("device-tests", 120), ("tinygpt-vs-numpy", 40), ("timing", 50)]
#: the nvrtc phase's budget, from the kernel count the device phase reports: NVRTC compiles a kernel alone in
#: about 0.22 s with a cold cache (about 200 in 45 s); the phases after it share what is left, in proportion
NVRTC_BASE_S, NVRTC_PER_KERNEL_S = 10.0, 0.25
#: the benchmark GPT of examples/tinygpt.py (its defaults; the corpus cut to 200k characters)
CONFIG = dict(batch=16, seq=64, d=128, heads=4, layers=2, attention="softmax", lr=3e-3, chars=200_000,
              schedule_steps=2500, steps=3, warmup=5, repeats=20)


# ------------------------------------------------------------------------------------------- shared helpers
def _paths() -> None:
    for p in (os.path.join(ROOT, "examples"), os.path.join(ROOT, "tests", "peers"), os.path.join(ROOT, "tests")):
        if p not in sys.path:
            sys.path.insert(0, p)


def _spec(cfg: dict):
    _paths()
    import tinygpt
    return tinygpt.model(cfg["batch"], cfg["seq"], cfg["d"], cfg["heads"], cfg["layers"], cfg["attention"],
                         cfg["lr"], chars=cfg["chars"])


def _windows(cfg: dict, steps: int):
    """The first ``steps`` training windows of tinygpt's batch order (inputs and targets: int64 ids)."""
    _paths()
    import tinygpt
    train, _ = tinygpt.split(tinygpt.corpus(cfg["chars"]))
    plan = tinygpt.batch_starts(len(train), cfg["seq"], cfg["batch"], steps, 0)
    return [tinygpt.windows(train, s, cfg["seq"]) for s in plan]


def _rate(cfg: dict, k: int) -> float:
    _paths()
    import tinygpt
    return tinygpt.schedule(k, cfg["schedule_steps"], cfg["lr"])


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip().splitlines()[0][:500] if str(e).strip() else type(e).__name__


def _tail(text: str, n: int = 3000) -> str:
    return text if len(text) <= n else "…" + text[-n:]


# ------------------------------------------------------------------------------------------------- phases
def phase_device(cfg: dict) -> dict:
    """CuPy, a device, NVRTC and a launch; the versions of what the other phases use."""
    out: dict = {"python": platform.python_version(), "machine": platform.machine()}
    for key, mod in (("numpy", "numpy"), ("circuitgrad", "circuitgrad.backends.gpu"), ("pytest", "pytest"),
                     ("torch", "torch")):
        try:
            out[key] = getattr(__import__(mod), "__version__", "installed")
        except Exception as e:
            out[key] = None
            out.setdefault("missing", []).append(f"{mod} ({_error(e)})")
    try:
        import cupy
    except Exception as e:
        return dict(out, status="fail", message=f"CuPy is not importable ({_error(e)}); "
                                                f"install it with pip install -e '.[cuda13]' (or "
                                                f"'.[cuda12]' for a CUDA 12 driver)")
    out["cupy"] = cupy.__version__
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return dict(out, status="fail",
                    message=f"no CUDA device: cupy.cuda.runtime.getDeviceCount() failed ({_error(e)})")
    if n == 0:
        return dict(out, status="fail", message="no CUDA device: cupy.cuda.runtime.getDeviceCount() returned 0")
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    out.update(device=name, devices=n, compute_capability=f"{props['major']}.{props['minor']}",
               memory_gib=round(props["totalGlobalMem"] / 2 ** 30, 1),
               cuda_runtime=cupy.cuda.runtime.runtimeGetVersion(), cuda_driver=cupy.cuda.runtime.driverGetVersion())
    try:
        k = cupy.RawKernel('extern "C" __global__ void cg_probe(float* x) { x[threadIdx.x] += 1.0f; }', "cg_probe")
        x = cupy.zeros(32, dtype=cupy.float32)
        k((1,), (32,), (x,))
        total = float(x.sum())
    except Exception as e:
        return dict(out, status="fail", message=f"a one-line kernel did not compile or run on {name}: {_error(e)}")
    if total != 32.0:
        return dict(out, status="fail", message=f"a one-line kernel ran on {name} but wrote {total}, not 32")
    if out.get("circuitgrad") is None or out.get("numpy") is None:
        return dict(out, status="fail", message=f"found {name}, but {', '.join(out['missing'])}")
    try:                                        # sizes the nvrtc phase's budget (generated on the CPU, < 1 s)
        out["tinygpt_kernels"] = sum(len(ks) for ks in tinygpt_kernels(cfg).values())
    except Exception as e:
        out["tinygpt_kernels"] = None
        out.setdefault("missing", []).append(f"tinygpt's kernels ({_error(e)})")
    return dict(out, status="pass", message=f"{name} (compute capability {out['compute_capability']}), "
                                            f"CuPy {cupy.__version__}")


def tinygpt_kernels(cfg: dict) -> dict:
    """``{function: [(plan, index, Kernel)]}`` of tinygpt's ``step`` (``donate=True``), ``predict`` and ``loss``,
    generated on the CPU (``cupy-emulated`` plans and writes the same kernels as ``cupy``)."""
    from circuitgrad.backends import gpu
    captured: dict = {}
    original = gpu.compile_function

    def capture(*args, **kwargs):
        g = original(*args, **kwargs)
        captured[args[2] if len(args) > 2 else kwargs.get("name")] = g
        return g
    gpu.compile_function = capture
    try:
        step = _spec(cfg).compile(backend="cupy-emulated", donate=True)
        for key in ("predict", "loss"):
            step.fn(key)
    finally:
        gpu.compile_function = original
    return {key: [(g.plan, i, k) for i, k in g.kernels.items()] for key, g in captured.items()}


def _compile_alone(cupy, k) -> None:
    """``k`` compiled on its own with NVRTC (to isolate an error of its function's module)."""
    raw = cupy.RawKernel(k.source, k.name)
    if hasattr(raw, "compile"):
        raw.compile()
    else:                   # CuPy before 10: reading .kernel compiles
        raw.kernel


def _compile_module(cupy, ks: list) -> int:
    """One function's kernels as the backend compiles them: NVRTC modules side by side, each distinct kernel
    once (``circuitgrad.backends.gpu.module``); compiling them fills CuPy's kernel cache for the phases after
    this. Returns how many modules."""
    from circuitgrad.backends.gpu import module
    codes, where = module.split({n: k for n, (_, _, k) in enumerate(ks)})
    mods = [cupy.RawModule(code=c) for c in codes]
    if hasattr(mods[0], "compile"):
        module.compile_all(cupy, mods)
    else:                   # CuPy before 10: get_function compiles
        for m, name in {m: n for m, n in where.values()}.items():
            mods[m].get_function(name)
    return len(mods)


def phase_nvrtc(cfg: dict) -> dict:
    """tinygpt's kernels compiled with NVRTC: each function's kernels as modules, as the backend compiles them
    (seconds), and only a function whose modules fail compiled kernel by kernel (until ``budget − 3`` s), so that
    each error shows in isolation with its log."""
    import cupy
    t0 = time.monotonic()
    deadline = t0 + float(cfg.get("budget", NVRTC_BASE_S + 200 * NVRTC_PER_KERNEL_S)) - 3
    kernels = tinygpt_kernels(cfg)
    n = sum(len(ks) for ks in kernels.values())
    modules, rows, failed, unchecked = [], [], [], []
    for key, ks in kernels.items():
        t = time.perf_counter()
        try:
            if not hasattr(cupy, "RawModule"):
                raise RuntimeError("no cupy.RawModule: kernels compiled one by one")
            parts = _compile_module(cupy, ks)
            modules.append({"function": key, "kernels": len(ks), "modules": parts, "ok": True,
                            "seconds": round(time.perf_counter() - t, 2)})
            continue
        except Exception as e:
            modules.append({"function": key, "kernels": len(ks), "ok": False, "error": _error(e),
                            "seconds": round(time.perf_counter() - t, 2)})
        for p, i, k in ks:                      # isolate the failure: each kernel alone
            if time.monotonic() > deadline:
                unchecked.append(k.name)
                continue
            t = time.perf_counter()
            try:
                _compile_alone(cupy, k)
                rows.append({"function": key, "kernel": k.name, "ok": True,
                             "ms": round((time.perf_counter() - t) * 1e3, 1)})
            except Exception as e:
                log = str(e).strip().splitlines()
                failed.append({"function": key, "kernel": k.name, "error": _error(e), "log": log[:40],
                               "ops": list(getattr(k, "ops", []))})
    ok_modules = [m for m in modules if m["ok"]]
    compiled = sum(m["kernels"] for m in ok_modules) + len(rows)
    out = {"kernels": n, "compiled": compiled, "failed": failed, "modules": modules, "unchecked": unchecked,
           "slowest": sorted(rows, key=lambda r: -r["ms"])[:5]}
    if failed or unchecked:
        first = (f"first: {failed[0]['kernel']}: {failed[0]['error']}" if failed else
                 f"{len(unchecked)} not isolated before the phase's deadline")
        bad = len(failed) if failed else len(unchecked)
        return dict(out, status="fail", message=f"{bad} of {n} tinygpt kernels do not compile with NVRTC; {first}")
    if len(ok_modules) < len(modules):
        m = next(m for m in modules if not m["ok"])
        return dict(out, status="fail", message=f"the {m['function']} modules do not compile with NVRTC, though "
                                                f"each of its kernels does alone: {m['error']}")
    return dict(out, status="pass", message=f"all {n} tinygpt kernels compile with NVRTC "
                                            f"({sum(m['modules'] for m in modules)} modules, "
                                            f"{time.monotonic() - t0:.0f} s)")


def phase_device_tests(cfg: dict) -> dict:
    """``pytest tests/test_gpu_device.py``, stopped ``budget − 5`` s in; counts from its JUnit XML."""
    import xml.etree.ElementTree as ET
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "junit.xml")
        cmd = [sys.executable, "-m", "pytest", "-v", "-rs", "--tb=short", "-p", "no:cacheprovider",
               f"--junitxml={xml}", os.path.join("tests", "test_gpu_device.py")]
        try:
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(5, cfg["budget"] - 5))
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return {"status": "timeout", "message": f"pytest ran past {cfg['budget'] - 5:.0f} s",
                    "output_tail": _tail(out)}
        if not os.path.exists(xml):
            return {"status": "error", "message": f"pytest exited with {r.returncode} and no report",
                    "output_tail": _tail(r.stdout + r.stderr)}
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        cases = suite.findall("testcase")
    counts = {"tests": len(cases), "failed": 0, "errors": 0, "skipped": 0}
    failures = []
    for c in cases:
        for tag, key in (("failure", "failed"), ("error", "errors"), ("skipped", "skipped")):
            el = c.find(tag)
            if el is not None:
                counts[key] += 1
                if tag != "skipped":
                    failures.append({"test": f"{c.get('classname')}::{c.get('name')}",
                                     "message": (el.get("message") or "").splitlines()[0][:300] if el.get("message")
                                     else "", "detail": _tail(el.text or "", 1500)})
                elif counts["skipped"] == 1:
                    counts["first_skip"] = (el.get("message") or "")[:300]
    counts["passed"] = counts["tests"] - counts["failed"] - counts["errors"] - counts["skipped"]
    out = dict(counts, failures=failures[:20], pytest_status=r.returncode)
    if counts["failed"] or counts["errors"]:
        return dict(out, status="fail", message=f"{counts['failed'] + counts['errors']} of {counts['tests']} device "
                                                f"tests fail; first: {failures[0]['test']}")
    if counts["tests"] == 0 or counts["passed"] == 0:
        return dict(out, status="fail", message=f"no device test ran ({counts.get('first_skip', 'none collected')})")
    return dict(out, status="pass", message=f"{counts['passed']} device tests pass, {counts['skipped']} skipped")


def tolerance_factor(cfg: dict) -> float:
    """``2·√(n / log₂ n)``, ``n = B·S``: how much worse than NumPy's pairwise sums another order may round,
    twice (two evaluations)."""
    import math
    n = max(2, cfg["batch"] * cfg["seq"])
    return 2 * math.sqrt(n / math.log2(n))


def compare(dev, ref, ref64, factor: float) -> dict:
    """``dev`` against ``ref`` (float32) per array: ``‖dev − ref‖₂ ≤ factor·‖ref − ref64‖₂ + 2u‖ref64‖₂``."""
    import numpy as np
    u = float(np.finfo(np.float32).eps) / 2
    rows = {}
    for name, want in ref.items():
        got, exact = np.asarray(dev[name]), np.asarray(ref64[name], dtype=np.float64)
        if not np.all(np.isfinite(got)):
            rows[name] = {"ratio": float("inf"), "nonfinite": int((~np.isfinite(got)).sum())}
            continue
        if np.issubdtype(np.asarray(want).dtype, np.integer):
            rows[name] = {"ratio": 0.0 if np.array_equal(got, want) else float("inf"), "exact": True}
            continue
        g, w = got.astype(np.float64), np.asarray(want, dtype=np.float64)
        diff, noise = float(np.linalg.norm(g - w)), float(np.linalg.norm(w - exact))
        tol = factor * noise + 2 * u * float(np.linalg.norm(exact))
        ratio = diff / tol if tol > 0 else (0.0 if diff == 0 else float("inf"))
        rows[name] = {"diff": diff, "tol": tol, "ratio": ratio, "max_abs_diff": float(np.max(np.abs(g - w), initial=0.0))}
    return rows


def phase_tinygpt(cfg: dict, backend: str = "cupy") -> dict:
    """Three AdamW steps of tinygpt (``donate=True``) on ``backend`` against NumPy float32 (and float64)."""
    import numpy as np

    import circuitgrad as cg
    from circuitgrad import nn
    spec = _spec(cfg)
    ref = spec.compile(backend="numpy")
    ref64 = spec.compile(dtype=cg.float64, backend="numpy")
    dev = spec.compile(backend=backend, donate=True)
    p = ref.init_params(seed=0)
    p64 = {k: np.asarray(v, dtype=np.float64) for k, v in p.items()}
    q = {k: dev.xp.array(v) for k, v in p.items()}          # a copy: the device step may write into it
    steps, worst_overall = [], 0.0
    donated = None
    factor = tolerance_factor(cfg)
    for k, (x, y) in enumerate(_windows(cfg, cfg["steps"])):
        lr = _rate(cfg, k)
        p, p64, q = (nn.set_learning_rate(a, lr) for a in (p, p64, q))
        before = dict(q)
        p, p64, q = ref.step(p, x, y), ref64.step(p64, x, y), dev.step(q, x, y)
        donated = sum(q[n] is before[n] for n in dev.param_names)
        rows = compare({n: dev.to_host(v) for n, v in q.items()}, p, p64, factor)
        name, row = max(rows.items(), key=lambda kv: kv[1]["ratio"])
        worst_overall = max(worst_overall, row["ratio"])
        bad = sorted(n for n, r in rows.items() if r["ratio"] > 1)
        steps.append({"step": k, "lr": lr, "worst": name, "worst_ratio": row["ratio"], "worst_row": row,
                      "over_tolerance": bad})
    x, y = _windows(cfg, 1)[0]
    loss_dev, loss_ref = dev.loss(q, x, y), ref.loss(p, x, y)
    out = {"backend": dev.backend, "steps": steps, "arrays": len(p), "donated_in_place": donated,
           "parameters": len(dev.param_names), "loss_device": loss_dev, "loss_numpy": loss_ref,
           "tolerance": f"‖dev − np32‖₂ ≤ {factor:.3g}·‖np32 − np64‖₂ + 2u‖np64‖₂ per array",
           "worst_ratio": worst_overall}
    bad = [(s["step"], s["over_tolerance"]) for s in steps if s["over_tolerance"]]
    if bad or not np.isfinite(loss_dev):
        first = bad[0] if bad else (None, [])
        return dict(out, status="fail",
                    message=(f"after step {first[0]}, {len(first[1])} arrays differ from NumPy beyond the float32 "
                             f"tolerance (first {first[1][0]}, {steps[first[0]]['worst_ratio']:.3g}× it)")
                    if bad else f"the device loss is {loss_dev}")
    return dict(out, status="pass", message=f"{cfg['steps']} AdamW steps agree with NumPy (worst "
                                            f"{worst_overall:.2f}× the tolerance), loss {loss_dev:.4f} vs "
                                            f"{loss_ref:.4f}")


def _timed(fns: dict, sync: dict, warmup: int, repeats: int) -> dict:
    """Median seconds per call of each function, round robin, each call followed by its synchronize."""
    for k, fn in fns.items():
        for _ in range(warmup):
            fn()
        sync[k]()
    times: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            sync[k]()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def phase_timing(cfg: dict) -> dict:
    """ms per step: circuitgrad (CuPy, ``donate=True``, the rate set each step) against PyTorch eager."""
    import cupy
    import numpy as np

    import circuitgrad as cg
    from circuitgrad import nn
    step = _spec(cfg).compile(backend="cupy", donate=True)
    x, y = _windows(cfg, 1)[0]
    xd, yd = cupy.asarray(x), cupy.asarray(y)
    p0 = step.init_params(seed=0)
    state = {"p": p0}
    notes = []
    lr = _rate(cfg, 0)
    try:
        nn.set_learning_rate(p0, lr)
        with_rate = True
    except Exception as e:
        with_rate = False
        notes.append(f"nn.set_learning_rate failed on the device ({_error(e)}): the step is timed without it")

    def ours():
        p = nn.set_learning_rate(state["p"], lr) if with_rate else state["p"]
        state["p"] = step.step(p, xd, yd)
    fns = {"circuitgrad": ours}
    sync = {"circuitgrad": cupy.cuda.Device().synchronize}
    torch_info: dict = {}
    try:
        import torch
        torch_info["version"] = torch.__version__
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device (a CPU-only build?)")
        import torch_gpt
        F = torch.nn.functional
        host = {k: step.to_host(v) for k, v in p0.items() if not k.startswith("adam")}
        tp = {k: torch.tensor(np.asarray(v, dtype=np.float32), device="cuda", requires_grad=True)
              for k, v in host.items()}
        opt = torch.optim.AdamW(list(tp.values()), lr=lr, eps=1e-8, weight_decay=0.01)
        tx, ty = torch.tensor(x, device="cuda"), torch.tensor(y, device="cuda")

        def theirs():
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            logits = torch_gpt.gpt(tx, tp, cfg["layers"], cfg["heads"], cfg["attention"], eps=cg.ops.ATTENTION_EPS)
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ty.reshape(-1)).backward()
            opt.step()
        fns["pytorch eager"] = theirs
        sync["pytorch eager"] = torch.cuda.synchronize
    except Exception as e:
        torch_info["missing"] = _error(e)
        notes.append(f"no PyTorch row: {_error(e)}")
    med = _timed(fns, sync, cfg["warmup"], cfg["repeats"])
    ms = {k: round(v * 1e3, 3) for k, v in med.items()}
    out = {"ms_per_step": ms, "warmup": cfg["warmup"], "repeats": cfg["repeats"], "launches_per_step":
           step.launches_per_step, "rate_set_each_step": with_rate, "pytorch": torch_info, "notes": notes,
           "model": {k: cfg[k] for k in ("batch", "seq", "d", "heads", "layers", "attention")}}
    if "pytorch eager" in ms:
        out["ratio_to_pytorch"] = round(ms["circuitgrad"] / ms["pytorch eager"], 3)
        msg = (f"{ms['circuitgrad']:.3f} ms per step, PyTorch eager {ms['pytorch eager']:.3f} ms "
               f"({out['ratio_to_pytorch']:.2f}×)")
        return dict(out, status="pass", message=msg)
    return dict(out, status="incomplete", message=f"{ms['circuitgrad']:.3f} ms per step; {notes[-1]}")


PHASE_FUNCTIONS = {"device": phase_device, "nvrtc": phase_nvrtc, "device-tests": phase_device_tests,
                   "tinygpt-vs-numpy": phase_tinygpt, "timing": phase_timing}


# ------------------------------------------------------------------------------------------- orchestration
def run_phase(name: str, budget: float, cfg: dict) -> dict:
    """One phase in a child process: its result, or ``timeout``/``error`` with the tail of its output."""
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "phase.json")
        cmd = [sys.executable, HERE, "--phase", name, "--phase-out", result, "--config",
               json.dumps(dict(cfg, budget=budget))]
        t = time.perf_counter()
        try:
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=budget)
            output = r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            output = "".join(s.decode() if isinstance(s, bytes) else (s or "") for s in (e.stdout, e.stderr))
            return {"status": "timeout", "message": f"{name} ran past its {budget:.0f} s budget",
                    "seconds": round(time.perf_counter() - t, 1), "output_tail": _tail(output)}
        seconds = round(time.perf_counter() - t, 1)
        if os.path.exists(result):
            with open(result) as fh:
                out = json.load(fh)
        else:
            out = {"status": "error", "message": f"{name} exited with {r.returncode} and wrote no result"}
        out["seconds"] = seconds
        if out["status"] != "pass" and output.strip():
            out["output_tail"] = _tail(output)
        return out


def nvrtc_budget(kernels: int) -> float:
    """Seconds for the nvrtc phase: enough to compile every kernel alone with a cold cache."""
    return round(NVRTC_BASE_S + NVRTC_PER_KERNEL_S * kernels, 1)


def check(report: str, budget: float, cfg: dict | None = None, phases=None) -> int:
    """Run the phases within ``budget`` seconds, write ``report``, print a summary; the exit status."""
    cfg = dict(CONFIG, **(cfg or {}))
    phases = PHASES if phases is None else phases
    t0 = time.monotonic()
    nominal = dict(phases)
    rep: dict = {"status": None, "message": None, "budget_s": budget, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                 time.gmtime()), "host": platform.node(), "config": cfg, "phases": []}
    stop = None
    for j, (name, _) in enumerate(phases):
        left = budget - (time.monotonic() - t0)
        # this phase's share of what is left, in proportion to the nominal budgets of the phases still to run
        rest = sum(nominal[n] for n, _ in phases[j:])
        b = round(min(nominal[name], left * nominal[name] / rest), 1) if rest > 0 else 0.0
        if stop is not None or b < 3:
            entry = {"status": "skipped", "message": stop or "the budget is spent"}
        else:
            entry = run_phase(name, b, cfg)
        entry = {"name": name, "budget_s": b, **entry}
        rep["phases"].append(entry)
        print(f"gpu-check: {name}: {entry['status']}: {entry.get('message', '')}", flush=True)
        if name == "device":
            for k in ("device", "compute_capability", "cupy", "cuda_runtime", "cuda_driver", "torch", "numpy",
                      "tinygpt_kernels"):
                if k in entry:
                    rep[k] = entry[k]
            if entry.get("tinygpt_kernels") and "nvrtc" in nominal:
                nominal["nvrtc"] = nvrtc_budget(entry["tinygpt_kernels"])
            if entry["status"] != "pass":
                stop = "no usable device (see the device phase)"
    rep["elapsed_s"] = round(time.monotonic() - t0, 1)
    statuses = {p["name"]: p["status"] for p in rep["phases"]}
    device = rep["phases"][0] if rep["phases"] and rep["phases"][0]["name"] == "device" else None
    if device is not None and device["status"] != "pass":
        rep["status"] = "no-device"
        rep["message"] = f"gpu-check: {device.get('message', device['status'])}"
    elif any(s in ("fail", "error", "timeout") for s in statuses.values()):
        rep["status"] = "fail"
        bad = [f"{n} ({s})" for n, s in statuses.items() if s in ("fail", "error", "timeout")]
        rep["message"] = f"gpu-check: failed: {', '.join(bad)}"
    elif any(s != "pass" for s in statuses.values()):
        rep["status"] = "incomplete"
        rep["message"] = "gpu-check: incomplete: " + ", ".join(f"{n} ({s})" for n, s in statuses.items()
                                                                 if s != "pass")
    else:
        rep["status"] = "pass"
        rep["message"] = f"gpu-check: pass on {rep.get('device', 'the device')} in {rep['elapsed_s']:.0f} s"
    with open(report, "w") as fh:
        json.dump(rep, fh, indent=2, default=str)
        fh.write("\n")
    print(f"{rep['message']} (report: {report})", file=sys.stderr if rep["status"] in ("fail", "no-device")
          else sys.stdout, flush=True)
    return 1 if rep["status"] in ("fail", "no-device") else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", default="gpu-check.json", help="where the JSON report goes (default: %(default)s)")
    ap.add_argument("--budget", type=float, default=280.0, help="seconds for all phases (default: %(default)s)")
    ap.add_argument("--phase", choices=list(PHASE_FUNCTIONS), help=argparse.SUPPRESS)
    ap.add_argument("--phase-out", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    cfg = dict(CONFIG, **json.loads(a.config)) if a.config else dict(CONFIG)
    if a.phase:                     # a child: one phase, its result as JSON in --phase-out
        os.chdir(ROOT)
        try:
            out = PHASE_FUNCTIONS[a.phase](cfg)
        except Exception as e:
            out = {"status": "error", "message": f"{a.phase}: {_error(e)}", "traceback": _tail(traceback.format_exc())}
        with open(a.phase_out, "w") as fh:
            json.dump(out, fh, default=str)
        return 0
    if a.budget <= 0:
        ap.error(f"--budget must be more than 0 seconds, got {a.budget:g}")
    d = os.path.dirname(os.path.abspath(a.report))
    if not os.path.isdir(d):
        ap.error(f"--report {a.report}: the directory {d} does not exist")
    return check(a.report, a.budget, cfg)


if __name__ == "__main__":
    sys.exit(main())
