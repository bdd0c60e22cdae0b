"""Training steps on a GPU: circuitgrad (fp32, TF32, bf16, CUDA graphs) against PyTorch, GPTs at real sizes,
MLPs and a CNN.

    python bench/gpu_step.py [--models tinygpt,d384,d768,mlp,cnn,mlp4096] [--quick] [--no-compile] [--budget 210]
                             [--json out.json]
    python bench/gpu_step.py --dry [--json out.json]     # no GPU needed: the script's own code paths, tiny

Models (``--models``): the GPT of ``nn.gpt`` as ``examples/tinygpt.py`` builds it (vocabulary 96, causal softmax
attention, AdamW lr 3e-3, eps 1e-8, weight decay 0.01): tinygpt (d=128, 2 layers, 4 heads, batch 16 × 64), d384
(6 layers, 6 heads, 16 × 256) and d768 (2 layers, 12 heads, 8 × 512), trained on tinygpt's first window of the
standard library's source; ``nn.mlp`` (ReLU, SGD lr 0.01) 784-256-256-10 at batch 128 (mlp) and 4096-4096-4096
at batch 1024 (mlp4096), and the digits CNN of ``examples/digits_cnn.py`` (conv 3×3 1→16, ReLU, max pool 2,
dense 256→10, momentum SGD 0.05/0.9) at batch 32 (cnn), on a batch of normal pixels and uniform labels.
Softmax cross-entropy throughout. Every implementation starts from the same weights (``init_params(seed=0)``)
and trains on the same batch: circuitgrad's step (``backend="cupy"``, ``donate=True``) with
``precision="fp32"``, ``"tf32"`` and ``"bf16"`` (bfloat16 products, float32 elsewhere), each also with
``graph=True`` (a CUDA graph replayed each step); PyTorch eager (``tests/peers/torch_gpt.py``,
``tests/peers/torch_models.py``; ``torch.optim``'s AdamW or SGD) in fp32, TF32 (``allow_tf32`` for cuBLAS and
cuDNN), bf16 autocast, and ``torch.compile`` (default mode) of the bf16 forward and loss (backward through its
compiled graph, the optimizer eager); for the MLPs and the CNN also ``torch.compile`` in fp32. Columns:

* ms / step: the median of ``--repeats`` steps after ``--warmup`` (each step followed by a device-wide
  synchronize, timed with ``perf_counter``), and its ratio to PyTorch eager fp32 on the same model;
* peak MB: PyTorch's ``max_memory_allocated`` over the first three steps (after
  ``reset_peak_memory_stats``). CuPy has no peak counter: circuitgrad's rows allocate from a fresh
  ``cupy.cuda.MemoryPool`` behind ``cupy.cuda.set_allocator``, whose wrapper records the pool's
  ``used_bytes()`` after each allocation, during the first three steps (the timed steps run on the same pool
  unwrapped: a Python call per allocation would slow them). A CUDA graph's buffers live in a pool of its
  own (``graphed.pool``), added as reserved at its capture. Both count the row's live arrays (weights,
  optimizer state, the batch), the step's temporaries and workspaces allocated through the allocator (the
  bf16/graph products' 32 MiB cuBLAS workspace, in every row that uses it: the first allocates it), not
  ``cupy.matmul``'s cuBLAS workspace or CUDA's context;
* predicted MB: the cost model's peak of the same step (``gpu.memory.peak``: the arguments and the step's
  intermediates at their peak, without the cuBLAS workspace or a graph's copies of its arguments);
* kernels / step: circuitgrad's ``launches_per_step`` (with ``graph=True`` replayed as one graph launch);
  compile s and first step s: ``compile_model``'s seconds and the first step's (kernels compiled by NVRTC on
  first use; a graph is captured at the second step), synchronized; for ``torch.compile`` the first call's
  seconds (the compilation);
* loss after 3: ``step.loss`` after three steps from the same start (in the row's own precision), and its
  relative difference from PyTorch eager fp32's; the goal is 1e-5 for fp32 rows and 1e-2 for TF32 and bf16.

A row that fails is reported (``not available`` where ``compile_model`` does not take ``precision``/``graph``)
and the rest go on. ``--budget`` seconds bound the run: rows after it are skipped, and ``torch.compile``
rows need ``--compile-reserve`` seconds left (its first call is interrupted at the budget). ``--dry`` runs
the circuitgrad rows on ``cupy-emulated`` for a GPT (d=16, 1 layer, batch 2 × 8), an MLP and a CNN, tiny, one
repeat, against the NumPy backend (no PyTorch). Without a GPU (and without ``--dry``) the script says why and
exits with 0. On an H200 the GPT rows took 190 s with a cold NVRTC cache (most of it circuitgrad's compiles and
torch.compile).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import statistics
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (HERE, os.path.join(ROOT, "examples"), os.path.join(ROOT, "tests", "peers")):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _util import table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad.backends import gpu  # noqa: E402

#: the benchmark's models (``--models``; ``kind``: how each is built, :data:`KINDS`), and ``--dry``'s; ``compile_fp32``:
#: with a ``torch.compile`` fp32 row
MODELS = {"tinygpt": dict(kind="gpt", d=128, layers=2, heads=4, batch=16, seq=64),
          "d384": dict(kind="gpt", d=384, layers=6, heads=6, batch=16, seq=256),
          "d768": dict(kind="gpt", d=768, layers=2, heads=12, batch=8, seq=512),
          "mlp": dict(kind="mlp", sizes=[784, 256, 256, 10], batch=128, compile_fp32=True),
          "cnn": dict(kind="cnn", channels=16, batch=32, compile_fp32=True),
          "mlp4096": dict(kind="mlp", sizes=[4096, 4096, 4096], batch=1024, compile_fp32=True)}
DRY = {"dry": dict(kind="gpt", d=16, layers=1, heads=2, batch=2, seq=8),
       "dry-mlp": dict(kind="mlp", sizes=[12, 16, 5], batch=4), "dry-cnn": dict(kind="cnn", channels=4, batch=8)}
LR, EPS, WEIGHT_DECAY, CHARS, STEPS = 3e-3, 1e-8, 0.01, 200_000, 3
MLP_LR, CNN_LR, CNN_MOMENTUM = 0.01, 0.05, 0.9
#: circuitgrad's variants: extra keyword arguments of ``compile_model``
OURS = [("circuitgrad fp32", {}), ("circuitgrad TF32", {"precision": "tf32"}),
        ("circuitgrad bf16", {"precision": "bf16"}),
        ("circuitgrad fp32 + CUDA graph", {"graph": True}),
        ("circuitgrad TF32 + CUDA graph", {"precision": "tf32", "graph": True}),
        ("circuitgrad bf16 + CUDA graph", {"precision": "bf16", "graph": True})]
TORCH = [("PyTorch eager TF32", "tf32"), ("PyTorch eager bf16 autocast", "bf16"),
         ("torch.compile bf16 autocast", "compile"), ("torch.compile fp32", "compile-fp32")]
REFERENCE, DRY_REFERENCE = "PyTorch eager fp32", "circuitgrad NumPy fp32"
GOALS = {"fp32": 1e-5, "reduced": 1e-2}


def goal(implementation: str) -> float:
    """The loss's relative-difference goal: fp32 rows 1e-5, TF32 and bf16 rows 1e-2."""
    return GOALS["reduced"] if ("TF32" in implementation or "bf16" in implementation) else GOALS["fp32"]


def _error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def batch(cfg: dict, step) -> tuple[np.ndarray, np.ndarray]:
    """The batch of ``step`` (the model compiled): inputs and integer class labels (a GPT's: tinygpt's first
    training window at this batch and sequence length, int64 ids and targets; else normal pixels of its input
    type and uniform labels of its classes, seed 0)."""
    if cfg["kind"] == "gpt":
        import tinygpt
        train, _ = tinygpt.split(tinygpt.corpus(CHARS))
        starts = tinygpt.batch_starts(len(train), cfg["seq"], cfg["batch"], 1, 0)[0]
        return tinygpt.windows(train, starts, cfg["seq"])
    rng = np.random.default_rng(0)
    return (rng.normal(size=step.x_type.shape).astype(np.float32),
            rng.integers(0, step.y_type.shape[-1], size=step.x_type.shape[0]))


def spec(cfg: dict) -> cg.ModelSpec:
    """circuitgrad's model, loss and optimizer."""
    from circuitgrad import nn
    if cfg["kind"] == "gpt":
        import tinygpt
        return tinygpt.model(cfg["batch"], cfg["seq"], cfg["d"], cfg["heads"], cfg["layers"], "softmax", LR,
                             chars=CHARS)
    if cfg["kind"] == "mlp":
        return cg.ModelSpec(nn.mlp(cfg["batch"], cfg["sizes"]), nn.softmax_cross_entropy, nn.sgd(MLP_LR))
    import digits_cnn
    return cg.ModelSpec(digits_cnn.cnn(cfg["batch"], cfg["channels"]), nn.softmax_cross_entropy,
                        nn.momentum(CNN_LR, CNN_MOMENTUM))


def torch_step(cfg: dict, tp: dict):
    """The same model in PyTorch on the parameters ``tp`` (circuitgrad's names): ``(logits_of(x), optimizer)``."""
    import torch
    if cfg["kind"] == "gpt":
        import torch_gpt
        return (lambda x: torch_gpt.gpt(x, tp, cfg["layers"], cfg["heads"], "softmax", eps=cg.ops.ATTENTION_EPS),
                torch.optim.AdamW(list(tp.values()), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY))
    import torch_models
    if cfg["kind"] == "mlp":
        return (lambda x: torch_models.mlp(x, tp, len(cfg["sizes"]) - 1),
                torch.optim.SGD(list(tp.values()), lr=MLP_LR))
    return (lambda x: torch_models.cnn(x, tp),
            torch.optim.SGD(list(tp.values()), lr=CNN_LR, momentum=CNN_MOMENTUM))


def median_ms(fn, repeats: int, warmup: int, sync) -> float:
    """Median milliseconds of ``repeats`` calls after ``warmup``, each followed by ``sync()``."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


class PeakPool:
    """A fresh CuPy memory pool behind ``cupy.cuda.set_allocator``; while ``tracking``, each allocation records
    the pool's ``used_bytes()`` (CuPy keeps no peak). ``peak`` is in bytes; ``None`` without CuPy."""

    def __init__(self, emulated: bool):
        self.emulated, self.peak, self.tracking = emulated, None, False

    def __enter__(self):
        if self.emulated:
            return self
        import cupy
        self.cupy, self.pool = cupy, cupy.cuda.MemoryPool()
        self.previous = cupy.cuda.get_allocator()
        self.peak = 0

        def malloc(n):
            m = self.pool.malloc(n)
            if self.tracking:
                self.peak = max(self.peak, self.pool.used_bytes())
            return m
        self.malloc = malloc
        cupy.cuda.set_allocator(malloc)
        return self

    def track(self, on: bool) -> None:
        """Start (from the bytes in use now) or stop recording; stopped, the pool is called unwrapped."""
        if self.emulated:
            return
        if on:
            self.peak = self.pool.used_bytes()
        self.tracking = on
        self.cupy.cuda.set_allocator(self.malloc if on else self.pool.malloc)

    def used(self) -> int:
        return 0 if self.emulated else self.pool.used_bytes()

    def __exit__(self, *exc):
        if not self.emulated:
            self.cupy.cuda.Device().synchronize()
            self.cupy.cuda.set_allocator(self.previous)
            gc.collect()
            self.pool.free_all_blocks()
        return False


def ours_row(sp, init: dict, x, y, options: dict, backend: str, a) -> dict:
    """One circuitgrad variant on a fresh memory pool (freed after): see :func:`ours_measure`."""
    with PeakPool(backend != "cupy") as mem:
        return ours_measure(sp, init, x, y, options, backend, a, mem)


def ours_measure(sp, init: dict, x, y, options: dict, backend: str, a, mem: PeakPool) -> dict:
    """Compile, three steps (the first timed alone, memory tracked), the loss, then the timed steps."""
    handled = False     # products on the backend's cuBLAS handle, made (with its workspace) in an earlier row's pool
    if backend == "cupy":
        import cupy
        sync = cupy.cuda.Device().synchronize
        handled = (gpu.blas.handle_made(cupy.cuda.Device().id)
                   and gpu.blas.own_handle(options.get("precision", "fp32"), bool(options.get("graph"))))
    else:
        def sync():
            return None
    row: dict = {}
    t = time.perf_counter()
    step = sp.compile(backend=backend, **(dict(options, donate=True) if backend != "numpy" else {}))
    sync()
    row["compile_s"] = time.perf_counter() - t
    xd, yd = step.xp.asarray(x), step.xp.asarray(y)
    run = step.fn("step").run
    names = step.param_names + step.state_names
    n = len(names)
    state = {"a": step.arguments("step", {k: step.xp.array(v) for k, v in init.items()}, xd, yd)}

    def one():
        out = run(*state["a"])
        state["a"] = list(out) + state["a"][n:]
    mem.track(True)
    sync()
    t = time.perf_counter()
    one()
    sync()
    row["first_step_s"] = time.perf_counter() - t
    before = mem.used()             # in use when the second step (a graph's capture) starts
    for _ in range(STEPS - 1):
        one()
    sync()
    mem.track(False)
    pool = getattr(getattr(step.fn("step").compiled, "graphed", None), "pool", None)
    if mem.peak is not None:        # a CUDA graph's buffers live in a pool of its own, reserved for it
        row["peak_mb"] = (max(mem.peak, before + (pool.total_bytes() if pool is not None else 0))
                          + (gpu.blas.WORKSPACE if handled else 0)) / 2 ** 20
    row["loss"] = step.loss(dict(zip(names, state["a"][:n])), xd, yd)
    row["ms"] = median_ms(one, a.repeats, a.warmup, sync)
    row["launches"] = step.launches_per_step
    from circuitgrad.backends.gpu import GpuFunction, memory
    compiled = step.fn("step").compiled
    if isinstance(compiled, GpuFunction):   # the cost model's prediction of the same step's peak (gpu.memory.peak)
        row["predicted_mb"] = memory.peak(compiled) / 2 ** 20
    return row


def torch_row(cfg: dict, init: dict, param_names: list, x, y, mode: str, a, deadline: float) -> dict:
    """One PyTorch mode (``fp32``, ``tf32``, ``bf16``, ``compile`` (bf16), ``compile-fp32``), TF32 on only for
    ``tf32`` (cuDNN's flag is on by default: an fp32 row's convolutions would run in TF32); the flags restored
    and the row's memory freed after."""
    import torch
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
        if mode.startswith("compile"):
            torch._dynamo.reset()       # no shapes of another model: no dynamic-shape recompilation
        return torch_measure(cfg, init, param_names, x, y, mode, a, deadline)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
        if mode.startswith("compile"):
            torch._dynamo.reset()
        gc.collect()
        torch.cuda.empty_cache()


def torch_measure(cfg: dict, init: dict, param_names: list, x, y, mode: str, a, deadline: float) -> dict:
    """The same weights and batch in PyTorch (:func:`torch_step`): three steps (the first timed alone;
    ``torch.compile``'s first call interrupted at the deadline), the loss, the timing."""
    import torch
    import torch.nn.functional as F
    tp = {k: torch.tensor(np.asarray(init[k], dtype=np.float32), device="cuda", requires_grad=True)
          for k in param_names}
    tx, ty = torch.tensor(x, device="cuda"), torch.tensor(y, device="cuda")
    logits_of, opt = torch_step(cfg, tp)
    bf16 = mode in ("bf16", "compile")

    def loss_of(inputs, targets):
        with torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            logits = logits_of(inputs)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
    forward = torch.compile(loss_of) if mode.startswith("compile") else loss_of

    def one():
        opt.zero_grad(set_to_none=True)
        forward(tx, ty).backward()
        opt.step()
    row: dict = {}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    with _alarm(deadline - time.monotonic() if mode.startswith("compile") else None):
        one()
        torch.cuda.synchronize()
    row["first_step_s"] = time.perf_counter() - t
    for _ in range(STEPS - 1):
        one()
    torch.cuda.synchronize()
    row["peak_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    with torch.no_grad():
        row["loss"] = float(loss_of(tx, ty))
    row["ms"] = median_ms(one, a.repeats, a.warmup, torch.cuda.synchronize)
    return row


@contextlib.contextmanager
def _alarm(seconds: float | None):
    """``TimeoutError`` in the main thread after ``seconds`` (``None``: no limit)."""
    if seconds is None or not hasattr(signal, "setitimer"):
        yield
        return

    def fire(*_):
        raise TimeoutError(f"the first call ran past the budget ({seconds:.0f} s left when it started)")
    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(1.0, seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def unavailable(e: BaseException) -> bool:
    """``compile_model`` does not take ``precision``/``graph`` yet, or not on this backend (``graph`` on
    ``cupy-emulated``)."""
    text = str(e)
    keyword = "unexpected keyword argument" in text and ("precision" in text or "graph" in text)
    return (isinstance(e, TypeError) and keyword) \
        or (isinstance(e, ValueError) and "needs backend='cupy'" in text)


def attempt(model: str, implementation: str, fn, deadline: float, reserve: float = 0.0) -> dict:
    """``fn()``'s row, or the row of its failure (``not available``: ``precision``/``graph`` not taken yet)."""
    row = {"model": model, "implementation": implementation}
    left = deadline - time.monotonic()
    if left <= reserve:
        return dict(row, status="skipped", error=f"{max(0.0, left):.0f} s of the budget left"
                                                  + (f" (this row needs {reserve:.0f} s)" if reserve else ""))
    t = time.perf_counter()
    try:
        row.update(fn())
        row["status"] = "ok"
    except Exception as e:      # report and go on: one row's failure costs that row
        row.update(status="not available" if unavailable(e) else "failed", error=_error(e))
        if row["status"] == "failed":
            traceback.print_exc()
    row["seconds"] = time.perf_counter() - t
    print(f"gpu_step: {model}: {implementation}: {row['status']}"
          + (f" {row['ms']:.3f} ms/step" if row.get("ms") is not None else f" ({row.get('error', '')})")
          + f" [{row['seconds']:.1f} s]", file=sys.stderr, flush=True)
    return row


def model_rows(model: str, cfg: dict, a, deadline: float, have_torch: bool) -> list[dict]:
    """Every implementation's row for one model (the reference first)."""
    sp = spec(cfg)
    host = sp.compile(backend="numpy")
    x, y = batch(cfg, host)
    init = {k: np.asarray(v) for k, v in host.init_params(seed=0).items()}
    rows = []
    if a.dry:
        rows.append(attempt(model, DRY_REFERENCE, lambda: ours_row(sp, init, x, y, {}, "numpy", a), deadline))
    elif have_torch:
        rows.append(attempt(model, REFERENCE, lambda: torch_row(cfg, init, host.param_names, x, y, "fp32", a,
                                                                deadline), deadline))
    backend = "cupy-emulated" if a.dry else "cupy"
    for label, options in OURS:
        rows.append(attempt(model, label, lambda o=options: ours_row(sp, init, x, y, o, backend, a), deadline))
    if have_torch and not a.dry:
        for label, mode in TORCH:
            if mode == "compile-fp32" and not cfg.get("compile_fp32"):
                continue
            if mode.startswith("compile") and a.no_compile:
                rows.append({"model": model, "implementation": label, "status": "skipped", "error": "--no-compile"})
                continue
            rows.append(attempt(model, label, lambda m=mode: torch_row(cfg, init, host.param_names, x, y, m, a,
                                                                       deadline),
                                deadline, a.compile_reserve if mode.startswith("compile") else 0.0))
    ref = next((r for r in rows if r["implementation"] in (REFERENCE, DRY_REFERENCE) and r["status"] == "ok"), None)
    for r in rows:
        r.update(cfg)
        r["loss_goal"] = goal(r["implementation"])
        if ref is not None and r["status"] == "ok":
            r["ratio"] = r["ms"] / ref["ms"]
            r["loss_reference"] = ref["loss"]
            r["loss_rel_diff"] = abs(r["loss"] - ref["loss"]) / abs(ref["loss"])
            r["loss_ok"] = bool(r["loss_rel_diff"] <= r["loss_goal"])
    return rows


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def render(rows: list[dict]) -> str:
    """The Markdown table, and one line per row that did not run."""
    out, notes, last = [], [], None
    for r in rows:
        name = r["model"] if r["model"] != last else ""
        last = r["model"]
        if r["status"] != "ok":
            out.append([name, r["implementation"], r["status"]] + ["-"] * 8)
            notes.append(f"{r['model']} / {r['implementation']}: {r['status']}: {r.get('error', '')}")
            continue
        diff = (f"{r['loss_rel_diff']:.1e} ({'ok' if r['loss_ok'] else 'over'} {r['loss_goal']:.0e})"
                if "loss_rel_diff" in r else "-")
        launches = _fmt(r.get("launches"), "d")
        if r.get("launches") is not None and "graph" in r["implementation"]:
            launches += " (1 graph)"
        out.append([name, r["implementation"], f"{r['ms']:.3f}", _fmt(r.get("ratio"), ".2f"),
                     _fmt(r.get("peak_mb"), ".0f"), _fmt(r.get("predicted_mb"), ".0f"), launches, _fmt(r.get("compile_s"), ".2f"),
                     _fmt(r.get("first_step_s"), ".2f"), f"{r['loss']:.5f}", diff])
    text = table(["model", "implementation", "ms / step", "× fp32 ref", "peak MB", "predicted MB", "kernels / step",
                  "compile s",
                  "first step s", "loss after 3", "rel. diff (goal)"], out)
    return text + ("\n\n" + "\n".join(notes) if notes else "")


def environment(a, why: str) -> dict:
    env = {"device": why, "numpy": np.__version__, "python": sys.version.split()[0], "dry": a.dry,
           "repeats": a.repeats, "warmup": a.warmup, "budget_s": a.budget}
    for mod in ("cupy", "torch"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:
            env[mod] = None
    return env


def write_json(path: str | None, report: dict) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(report, fh, indent=2, default=str)
            fh.write("\n")


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    ap.add_argument("--repeats", type=int, default=None, help="timed steps per row (default 30, --quick 8)")
    ap.add_argument("--warmup", type=int, default=None, help="steps before timing (default 5, --quick 2)")
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--no-compile", action="store_true", help="no torch.compile rows")
    ap.add_argument("--budget", type=float, default=210.0, help="seconds for all rows (default: %(default)s)")
    ap.add_argument("--compile-reserve", type=float, default=45.0,
                    help="seconds a torch.compile row needs left to start (default: %(default)s)")
    ap.add_argument("--json", help="write the rows here as JSON")
    ap.add_argument("--dry", action="store_true", help="no GPU: circuitgrad on cupy-emulated, tiny, no PyTorch")
    a = ap.parse_args(argv)
    a.repeats = a.repeats if a.repeats is not None else (1 if a.dry else 8 if a.quick else 30)
    a.warmup = a.warmup if a.warmup is not None else (0 if a.dry else 2 if a.quick else 5)
    names = [m.strip() for m in a.models.split(",") if m.strip()]
    bad = [m for m in names if m not in MODELS]
    if bad or not names:
        ap.error(f"--models: unknown {', '.join(bad) or '(none given)'}; choose from {', '.join(MODELS)}")
    a.model_names = names
    return a


def main(argv=None) -> int:
    a = parse(argv)
    ok, why = gpu.available()
    if not ok and not a.dry:
        msg = f"bench/gpu_step.py: no GPU here ({why}); nothing measured"
        print(msg)
        write_json(a.json, {"status": "no-device", "message": msg, "rows": []})
        return 0
    have_torch = False
    if not a.dry:
        try:
            import torch
            have_torch = torch.cuda.is_available()
        except ImportError:
            pass
        if not have_torch:
            print("gpu_step: no PyTorch with CUDA: circuitgrad rows only", file=sys.stderr)
    models = DRY if a.dry else {m: MODELS[m] for m in a.model_names}
    deadline = time.monotonic() + a.budget
    rows: list[dict] = []
    t0 = time.perf_counter()
    for model, cfg in models.items():
        try:
            rows += model_rows(model, cfg, a, deadline, have_torch)
        except Exception as e:      # the model itself (its batch, its NumPy compile): its rows are one failure
            traceback.print_exc()
            rows.append({"model": model, "implementation": "(all)", "status": "failed", "error": _error(e)})
    env = environment(a, "cupy-emulated on the CPU" if a.dry else why)
    print(f"Training step, median of {a.repeats} after {a.warmup} warm-up (synchronized each step); "
          f"device: {env['device']}; CuPy {env['cupy']}, PyTorch {env['torch']}; {time.perf_counter() - t0:.0f} s")
    print(render(rows))
    write_json(a.json, {"status": "ok", "environment": env, "models": models, "rows": rows,
                        "seconds": time.perf_counter() - t0})
    return 0


if __name__ == "__main__":
    sys.exit(main())
