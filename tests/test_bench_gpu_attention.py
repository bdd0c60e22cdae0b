"""bench/gpu_attention.py without a GPU: its ``--dry`` run (cupy-emulated, tiny) and its no-device message."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from circuitgrad.backends import gpu

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench/gpu_attention.py")


def test_dry_run_times_both_attentions_in_every_precision(tmp_path):
    out = tmp_path / "att.json"
    r = subprocess.run([sys.executable, SCRIPT, "--dry", "--json", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(x["kind"], x["implementation"], x["what"]) for x in rows] == [
        (k, f"circuitgrad {p}", w) for k in ("softmax", "spherical") for p in ("fp32", "3xtf32", "tf32", "bf16")
        for w in ("forward", "forward+backward")]
    assert all("error" not in x and x["ms"] > 0 and x["launches"] > 0 for x in rows)
    # the dry shape (S = dh = 16) takes the tensor-core kernels but in plain float32
    assert {p: x["mma"] for x in rows for p in [x["implementation"].split()[-1]]} == {
        "fp32": ["cuda cores"], "3xtf32": ["3xtf32"], "tf32": ["tf32"], "bf16": ["bf16"]}
    # the reverse derivative recomputes the forward: more launches than the forward alone
    for k in ("softmax", "spherical"):
        fwd, both = (x for x in rows if x["kind"] == k and x["implementation"] == "circuitgrad fp32")
        assert both["launches"] > fwd["launches"]


def test_without_a_gpu_it_says_why_and_exits_0(tmp_path):
    if gpu.available()[0]:
        return
    out = tmp_path / "att.json"
    r = subprocess.run([sys.executable, SCRIPT, "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert r.stdout.startswith("bench/gpu_attention.py: no GPU here (")
    assert json.loads(out.read_text())["status"] == "no-device"
