"""The GPU step benchmark's own code paths, without a GPU: ``--dry`` (circuitgrad on ``cupy-emulated``, tiny,
against the NumPy backend) in a subprocess, and the no-GPU exit; its PyTorch steps on the CPU against circuitgrad's
NumPy steps (the script's functions, imported from its file)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad.backends import gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench/gpu_step.py")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_dry_run_writes_every_circuitgrad_row(tmp_path):
    out = tmp_path / "rows.json"
    r = run("--dry", "--json", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    assert [m for m in report["models"]] == ["dry", "dry-mlp", "dry-cnn"]
    assert {m["kind"] for m in report["models"].values()} == {"gpt", "mlp", "cnn"}
    for model in report["models"]:
        rows = {row["implementation"]: row for row in report["rows"] if row["model"] == model}
        assert list(rows) == ["circuitgrad NumPy fp32", "circuitgrad fp32", "circuitgrad TF32", "circuitgrad bf16",
                              "circuitgrad fp32 + CUDA graph", "circuitgrad TF32 + CUDA graph",
                              "circuitgrad bf16 + CUDA graph"]
        assert all(row["kind"] == report["models"][model]["kind"] for row in rows.values())
        ref, fp32 = rows["circuitgrad NumPy fp32"], rows["circuitgrad fp32"]
        assert ref["status"] == fp32["status"] == "ok"
        assert fp32["ms"] > 0 and fp32["launches"] > 0 and fp32["compile_s"] > 0 and fp32["first_step_s"] > 0
        assert fp32["ratio"] == pytest.approx(fp32["ms"] / ref["ms"])
        # three steps from the same weights on the same batch: the emulated kernels' float32 against NumPy's
        assert fp32["loss_reference"] == ref["loss"]
        assert fp32["loss_rel_diff"] == pytest.approx(abs(fp32["loss"] - ref["loss"]) / ref["loss"])
        assert fp32["loss_goal"] == 1e-5 and fp32["loss_ok"] is True, model
        for name in ("circuitgrad TF32", "circuitgrad bf16"):   # products from operands rounded to 10 or 7 bits
            row = rows[name]
            assert row["status"] == "ok", row.get("error")
            assert row["loss_goal"] == 1e-2 and row["loss_ok"] is True and row["loss"] != fp32["loss"], (model, name)
        for name in ("circuitgrad fp32 + CUDA graph", "circuitgrad TF32 + CUDA graph",
                     "circuitgrad bf16 + CUDA graph"):   # graphs need a device
            assert rows[name]["status"] == "not available", rows[name].get("error")
    assert "| dry     | circuitgrad NumPy fp32 " in r.stdout and "| dry-cnn | circuitgrad NumPy fp32 " in r.stdout
    assert "not available" in r.stdout


def _script():
    """bench/gpu_step.py as a module (its functions; its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location("gpu_step_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.torch
@pytest.mark.parametrize("model", ["dry", "dry-mlp", "dry-cnn", "mlp", "cnn"])
def test_the_pytorch_steps_are_circuitgrads(model):
    """Three steps of each model's PyTorch peer (``torch_step``: the model on circuitgrad's parameter names and
    its optimizer), in float64 on the CPU, reach circuitgrad's NumPy parameters and loss from the same weights
    and batch: within float64 rounding, far below the benchmark's 1e-5 (a wrong layer, layout, loss or
    optimizer constant is off by orders more)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    bench = _script()
    cfg = {**bench.DRY, **bench.MODELS}[model]
    sp = bench.spec(cfg)
    step = sp.compile(dtype=cg.float64, backend="numpy")
    x, y = bench.batch(cfg, step)
    params = step.init_params(seed=0)
    tp = {k: torch.tensor(np.asarray(params[k], dtype=np.float64), requires_grad=True) for k in step.param_names}
    logits_of, opt = bench.torch_step(cfg, tp)
    tx, ty = torch.tensor(x if cfg["kind"] == "gpt" else x.astype(np.float64)), torch.tensor(y)

    def loss():
        logits = logits_of(tx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ty.reshape(-1))
    for _ in range(bench.STEPS):
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()
        params = step.step(params, x, y)
    # a float64 gradient element's rounding: at most its few hundred O(1) terms times 2^-53, 1e-14 here; AdamW moves
    # a parameter whose gradient is that noise (a GPT's key bias: softmax ignores it) by lr·g/eps a step
    noise = 1e-14
    atol = bench.STEPS * (bench.LR / bench.EPS if cfg["kind"] == "gpt" else 1.0) * noise
    for k in step.param_names:
        np.testing.assert_allclose(tp[k].detach().numpy(), params[k], rtol=1e-9, atol=atol, err_msg=k)
    ours = step.loss({k: params[k] for k in step.param_names + step.state_names}, x, y)
    with torch.no_grad():
        assert float(loss()) == pytest.approx(ours, rel=1e-10)


def test_without_a_gpu_it_says_why_and_exits_0(tmp_path):
    if gpu.available()[0]:
        pytest.skip("a GPU is here: the script measures")
    out = tmp_path / "rows.json"
    r = run("--json", str(out))
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line.startswith("bench/gpu_step.py: no GPU here (") and line.endswith("); nothing measured")
    assert json.loads(out.read_text()) == {"status": "no-device", "message": line, "rows": []}


def test_unknown_model_is_refused():
    r = run("--dry", "--models", "tinygpt,d1024")
    assert r.returncode == 2
    assert "--models: unknown d1024; choose from tinygpt, d384, d768, mlp, cnn, mlp4096" in r.stderr
