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
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert report["status"] == "ok"             # "partial" until the last rows are in (saved after each group)
    kinds = ("softmax", "spherical")
    assert [(x["kind"], x["implementation"], x["what"]) for x in rows] == [
        (k, f"circuitgrad {p}", w) for k in kinds for p in ("fp32", "3xtf32", "tf32", "bf16")
        for w in ("forward", "forward+backward")] + [
        (k, f"circuitgrad {p}{v}", "forward+backward") for k in kinds
        for p, v in (("fp32", ", dk dv apart"), ("tf32", ", dk dv apart"), ("bf16", ", dk dv apart"),
                     ("bf16", ", q k v stored"), ("tf32", ", loops unrolled 2x"), ("bf16", ", loops unrolled 2x"))]
    assert all("error" not in x and x["ms"] > 0 and x["launches"] > 0 for x in rows)
    # dk and dv in one kernel by default (but under 3xTF32), in two in the rows that time them apart
    for x in rows:
        if x["what"] == "forward+backward":
            kv = ["AttentionGradKV"] if x["precision"] != "3xtf32" and "apart" not in x["implementation"] \
                else ["AttentionGradV", "AttentionGradK"]
            assert x["ops"] == ["AttentionForward", "AttentionGradQ"] + kv, x["implementation"]
            # every launch timed and predicted: the attention kernels, and where q, k, v are made inside the
            # program the fused kernels that make them (stored as bfloat16) and that scale their gradients
            stored = "stored" in x["implementation"]
            # bf16: dO rounded for dk and dv (stored) by the dq kernel as it reads it; here dO is an argument, so
            # where a kernel of its size comes first (q, k, v made inside), its rounding joins that one
            bf16 = x["precision"] == "bf16"
            ops = [o + " + RoundBF16" * (bf16 and not stored and o == "AttentionGradQ") for o in x["ops"]]
            assert [k["what"].split(": ")[-1] for k in x["kernels"]] == \
                ["Scale + Scale + Scale" + " + RoundBF16" * bf16] * stored + ops + ["Scale + Scale + Scale"] * stored
            assert x["stored"] == 3 * stored + bf16
            assert all(k["ms"] > 0 and k["predicted_ms"] > 0 for k in x["kernels"])
        else:
            assert "kernels" not in x
    # the dry shape (S = dh = 16) takes the tensor-core kernels but in plain float32
    assert {x["precision"]: x["mma"] for x in rows} == {
        "fp32": ["cuda cores"], "3xtf32": ["3xtf32"], "tf32": ["tf32"], "bf16": ["bf16"]}
    # the reverse derivative recomputes the forward: more launches than the forward alone
    for k in ("softmax", "spherical"):
        fwd, both = (x for x in rows if x["kind"] == k and x["implementation"] == "circuitgrad fp32")
        assert both["launches"] > fwd["launches"]
    assert "forward+backward, launch by launch" in r.stdout


def test_without_a_gpu_it_says_why_and_exits_0(tmp_path):
    if gpu.available()[0]:
        return
    out = tmp_path / "att.json"
    r = subprocess.run([sys.executable, SCRIPT, "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    assert r.stdout.startswith("bench/gpu_attention.py: no GPU here (")
    assert json.loads(out.read_text())["status"] == "no-device"
