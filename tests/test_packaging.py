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


def test_core_and_cli_work_without_optional_backend_dependencies():
    """The demo installs only circuitgrad[examples]: nothing may import amaranth, cupy or galois eagerly."""
    code = ("import sys\n"
            "for m in ('amaranth', 'cupy', 'galois', 'torch'):\n"
            "    sys.modules[m] = None\n"
            "from circuitgrad.cli import main\n"
            "assert main(['info']) == 0\n"
            "from circuitgrad.backends import fpga, gpu, zk\n"
            "import circuitgrad as cg\n"
            "from circuitgrad import nn\n"
            "s = cg.compile_model(nn.mlp(2, [2, 2]), nn.mse, nn.sgd(0.125), dtype=cg.fixed(16, 8))\n"
            "assert fpga.compile(s).cycles > 0\n"
            "assert zk.compile(s).check(zk.compile(s).witness(s.init_params(0), [[0.5, 1], [1, 0]], [[0, 1], [1, 0]]))\n"
            "try:\n"
            "    fpga.compile(s).component()\n"
            "except ImportError as e:\n"
            "    assert 'pip install' in str(e)\n"
            "else:\n"
            "    raise AssertionError('expected ImportError')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "backend fpga: 15 rules" in res.stdout
