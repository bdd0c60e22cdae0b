"""The examples train to the accuracy the README promises (float32 and exact fixed point)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("sklearn")
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("script,dtype,minimum", [
    ("iris.py", "float32", 0.95),
    ("iris.py", "fixed", 0.93),
    ("digits.py", "float32", 0.95),
    ("digits.py", "fixed", 0.90),
    ("digits_cnn.py", "float32", 0.97),
    ("digits_cnn.py", "fixed", 0.95),
])
def test_example_accuracy(script, dtype, minimum):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), "--dtype", dtype, "--quiet"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"accuracy=([0-9.]+)", last)
    assert m, out
    assert float(m.group(1)) >= minimum
    if dtype == "fixed":
        assert "compiled for fixed(32,16)" in out


@pytest.mark.parametrize("attention", ["softmax", "spherical"])
def test_digits_vit_accuracy(attention):
    """The digits as sequences of rows through transformer blocks reach 0.95 with either attention."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "digits_vit.py"), "--attention", attention,
                          "--quiet"], capture_output=True, text=True, timeout=600, check=True).stdout
    m = re.fullmatch(r"accuracy=([0-9.]+)", out.strip().splitlines()[-1])
    assert m, out
    assert float(m.group(1)) >= 0.95


@pytest.mark.parametrize("dtype,attention", [("float32", "softmax"), ("float32", "spherical"), ("fixed", "softmax")])
def test_tinygpt_learns_and_prints_val_loss_last(dtype, attention):
    """A small tinygpt run beats the uniform guess over 96 characters (ln 96 = 4.56 nats) and ends with val_loss=."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "tinygpt.py"), "--dtype", dtype,
                          "--attention", attention, "--steps", "200", "--d", "32", "--heads", "2", "--layers", "1",
                          "--seq", "32", "--batch", "8", "--chars", "200000", "--sample", "20", "--quiet"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    lines = out.strip().splitlines()
    assert lines[-2].startswith("sample: 'def ")
    m = re.fullmatch(r"val_loss=([0-9.]+)", lines[-1])
    assert m, out
    assert float(m.group(1)) < 3.5
