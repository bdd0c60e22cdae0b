"""Every example that trains takes ``--backend numpy|cupy|auto`` (``examples/_train.py``).

``--backend cupy`` on a machine without CuPy ends in one line on stderr with status 1 (a valid command line
this machine cannot run, README "CLI conventions"); ``auto`` falls back to NumPy; ``numpy`` trains. CuPy is
made unimportable by a stub package first on ``PYTHONPATH``, so the tests mean the same with CuPy installed.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINING_EXAMPLES = ["iris.py", "digits.py", "digits_cnn.py", "digits_vit.py", "tinygpt.py", "gpu_mlp.py"]
WHY = ("CuPy is not installed (pip install 'circuitgrad[cuda13]' for a CUDA 13 driver, 'circuitgrad[cuda12]' for "
       "CUDA 12 (nvidia-smi prints the driver's CUDA Version))")
TINY_GPT = ["--steps", "2", "--d", "16", "--heads", "2", "--layers", "1", "--seq", "8", "--batch", "2",
            "--chars", "20000", "--sample", "3", "--quiet"]


@pytest.fixture(scope="module")
def no_cupy(tmp_path_factory):
    """An environment in which ``import cupy`` raises ImportError."""
    d = tmp_path_factory.mktemp("nocupy")
    (d / "cupy").mkdir()
    (d / "cupy" / "__init__.py").write_text("raise ImportError(\"No module named 'cupy'\")\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(d)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run(script, *args, env):
    return subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), *args],
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("script", TRAINING_EXAMPLES)
def test_backend_cupy_without_cupy_is_one_line_and_status_1(script, no_cupy):
    r = run(script, "--backend", "cupy", "--quiet", env=no_cupy)
    assert r.returncode == 1, r.stderr
    assert r.stdout == ""
    assert r.stderr == (f"{script}: error: --backend cupy needs CuPy and a CUDA device: {WHY}; "
                        f"use --backend numpy or auto\n")


@pytest.mark.parametrize("script", TRAINING_EXAMPLES)
def test_every_training_example_lists_the_three_backends(script):
    r = run(script, "--help", env=dict(os.environ))
    assert r.returncode == 0
    assert "--backend {numpy,cupy,auto}" in r.stdout


def test_backend_cupy_with_fixed_point_is_a_usage_error(no_cupy):
    r = run("tinygpt.py", "--dtype", "fixed", "--backend", "cupy", "--quiet", env=no_cupy)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == ("tinygpt.py: error: --backend cupy computes in float32/float64; --dtype fixed "
                                         "trains on the NumPy interpreter (use --backend numpy)")


@pytest.mark.parametrize("backend", ["numpy", "auto"])
def test_tinygpt_trains_on_numpy_and_auto_falls_back_to_it(backend, no_cupy):
    r = run("tinygpt.py", "--backend", backend, *TINY_GPT, env=no_cupy)
    assert r.returncode == 0, r.stderr
    assert "compiled for float32 on numpy" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("val_loss=")


def test_gpu_mlp_auto_falls_back_to_numpy(no_cupy):
    r = run("gpu_mlp.py", "--sizes", "8", "4", "--batch", "4", "--steps", "2", "--quiet", env=no_cupy)
    assert r.returncode == 0, r.stderr
    assert "backend numpy" in r.stdout and r.stdout.strip().splitlines()[-1].startswith("throughput=")


def test_digits_trains_with_backend_numpy(no_cupy):
    pytest.importorskip("sklearn")
    r = run("digits.py", "--backend", "numpy", "--epochs", "1", "--quiet", env=no_cupy)
    assert r.returncode == 0, r.stderr
    assert "on numpy" in r.stdout and r.stdout.strip().splitlines()[-1].startswith("accuracy=")
