"""The GPU GPT benchmark's own code paths, without a GPU: ``--dry`` (circuitgrad on ``cupy-emulated``, tiny,
against the NumPy backend) in a subprocess, and the no-GPU exit (the script is run, never imported)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from circuitgrad.backends import gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench/gpu_gpt.py")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_dry_run_writes_every_circuitgrad_row(tmp_path):
    out = tmp_path / "rows.json"
    r = run("--dry", "--json", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    rows = {row["implementation"]: row for row in report["rows"]}
    assert list(rows) == ["circuitgrad NumPy fp32", "circuitgrad fp32", "circuitgrad TF32", "circuitgrad bf16",
                          "circuitgrad fp32 + CUDA graph", "circuitgrad TF32 + CUDA graph",
                          "circuitgrad bf16 + CUDA graph"]
    assert all(row["model"] == "dry" and row["d"] == 16 and row["layers"] == 1 for row in rows.values())
    ref, fp32 = rows["circuitgrad NumPy fp32"], rows["circuitgrad fp32"]
    assert ref["status"] == fp32["status"] == "ok"
    assert fp32["ms"] > 0 and fp32["launches"] > 0 and fp32["compile_s"] > 0 and fp32["first_step_s"] > 0
    assert fp32["ratio"] == pytest.approx(fp32["ms"] / ref["ms"])
    # three AdamW steps from the same weights on the same batch: the emulated kernels' float32 against NumPy's
    assert fp32["loss_reference"] == ref["loss"]
    assert fp32["loss_rel_diff"] == pytest.approx(abs(fp32["loss"] - ref["loss"]) / ref["loss"])
    assert fp32["loss_goal"] == 1e-5 and fp32["loss_ok"] is True
    for name in ("circuitgrad TF32", "circuitgrad bf16"):   # products from operands rounded to 10 or 7 bits
        row = rows[name]
        assert row["status"] == "ok", row.get("error")
        assert row["loss_goal"] == 1e-2 and row["loss_ok"] is True and row["loss"] != fp32["loss"]
    for name in ("circuitgrad fp32 + CUDA graph", "circuitgrad TF32 + CUDA graph",
                 "circuitgrad bf16 + CUDA graph"):   # graphs need a device
        assert rows[name]["status"] == "not available", rows[name].get("error")
    assert "| dry   | circuitgrad NumPy fp32 " in r.stdout
    assert "not available" in r.stdout


def test_without_a_gpu_it_says_why_and_exits_0(tmp_path):
    if gpu.available()[0]:
        pytest.skip("a GPU is here: the script measures")
    out = tmp_path / "rows.json"
    r = run("--json", str(out))
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line.startswith("bench/gpu_gpt.py: no GPU here (") and line.endswith("); nothing measured")
    assert json.loads(out.read_text()) == {"status": "no-device", "message": line, "rows": []}


def test_unknown_model_is_refused():
    r = run("--dry", "--models", "tinygpt,d1024")
    assert r.returncode == 2
    assert "--models: unknown d1024; choose from tinygpt, d384, d768" in r.stderr
