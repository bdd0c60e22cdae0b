"""Packaging: ``backends/`` ships inside the distribution as ``circuitgrad.backends``."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

import circuitgrad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_backends_importable_under_circuitgrad():
    from circuitgrad.backends import fpga, gpu, zk
    for m in (gpu, fpga, zk):
        assert m.__name__.startswith("circuitgrad.backends.")


@pytest.mark.slow
def test_wheel_maps_backends_into_circuitgrad(tmp_path):
    pytest.importorskip("setuptools")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), ROOT], check=True, capture_output=True)
    (wheel,) = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    assert "circuitgrad/backends/zk/__init__.py" in names
    assert "circuitgrad/backends/fpga/__init__.py" in names
    assert "circuitgrad/backends/gpu/__init__.py" in names
    assert not any(n.startswith("backends/") for n in names)     # no top-level 'backends' package


def test_cli_info(capsys):
    from circuitgrad.cli import main
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"circuitgrad {circuitgrad.__version__}"
    assert "backend fpga: 15 rules (unsupported: LogSumExp)" in out
    assert "backend gpu: 16 rules; " in out
    assert "backend zk: 15 rules (unsupported: LogSumExp)" in out
