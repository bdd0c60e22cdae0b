"""Packaging: ``backends/`` ships inside the distribution as ``circuitgrad.backends``."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest

import circuitgrad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_backends_importable_under_circuitgrad():
    from circuitgrad.backends import fpga, gpu, zk
    for m in (gpu, fpga, zk):
        assert m.__name__.startswith("circuitgrad.backends.")


# run by the fresh environment's Python, from a folder outside the checkout
SMOKE = """
import sys
import numpy as np
import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
step = cg.compile_model(nn.mlp(2, [2, 2, 2]), nn.softmax_cross_entropy, nn.sgd(0.125), dtype=cg.fixed(16, 8))
circuit = zk.compile(step, field=zk.LIGERO51)
wit = circuit.witness(step.init_params(0), [[0.5, 1.0], [1.0, 0.0]], np.eye(2)[[0, 1]])
proof = zk.prove(circuit, wit, system="ligero")
assert zk.verify(proof, circuit, wit.public)
for name, m in sorted(sys.modules.items()):
    if name.split(".")[0] == "circuitgrad":
        print(name, m.__file__)
"""


def _source_packages() -> dict[str, list[str]]:
    """Every package folder of the source tree (it has an ``__init__.py``) -> its modules' paths in a wheel."""
    out = {}
    for root, name in (("circuitgrad", "circuitgrad"), ("backends", "circuitgrad/backends"),
                       ("examples", "circuitgrad/examples")):
        for folder, _, files in os.walk(os.path.join(ROOT, root)):
            if "__init__.py" in files:
                dest = name + folder[len(os.path.join(ROOT, root)):].replace(os.sep, "/")
                out[folder] = [f"{dest}/{f}" for f in files if f.endswith(".py")]
    return out


@pytest.mark.slow
def test_wheel_ships_every_package_and_runs_from_a_fresh_environment(tmp_path):
    """Build the wheel, install it into a new virtual environment, run the CLI and a Ligero proof from it."""
    pytest.importorskip("setuptools")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), ROOT], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = _source_packages()
    assert len(packages) >= 7                      # circuitgrad, backends, gpu, fpga, zk, zk.systems.ligero, examples
    for folder, modules in packages.items():
        missing = [m for m in modules if m not in names]
        assert not missing, f"{os.path.relpath(folder, ROOT)} is not fully in the wheel: {missing}"
    assert not any(n.startswith("backends/") for n in names)     # no top-level 'backends' package

    # A fresh environment holding only the wheel; its dependencies (numpy, ...) come from this
    # environment's site-packages through a .pth path line. Path lines add a folder to sys.path
    # but do not run that folder's own .pth files, so an editable circuitgrad here stays inactive.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = str(bindir / "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True)
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    here = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    with open(os.path.join(purelib, "_circuitgrad_test_deps.pth"), "w") as f:
        f.write("".join(p + "\n" for p in sorted(here)))

    run = tmp_path / "run"                                       # outside the checkout
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    res = subprocess.run([str(bindir / "circuitgrad"), "--help"], cwd=run, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "usage: circuitgrad" in res.stdout
    res = subprocess.run([python, "-c", SMOKE], cwd=run, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    loaded = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    assert "circuitgrad.backends.zk.systems.ligero" in loaded
    for name, path in loaded.items():                           # the installed copy, not the checkout
        assert os.path.realpath(path).startswith(os.path.realpath(purelib) + os.sep), (name, path)

    # the README's commands name the examples by short name: the model files ship in the wheel
    installed = os.path.join(purelib, "circuitgrad", "examples")
    for args, first in ((["show", "tinygpt", "--option", "d=8", "--option", "heads=2", "--option", "layers=1",
                          "--option", "seq=4", "--batch", "1"],
                         "# gpt(B=1,S=4,vocab=96,d=8,heads=2,layers=1,softmax): the training step compiled for float32"),
                        (["cost", "iris", "--target", "fpga", "--batch", "2"], "step on fpga (ecp5-85k)")):
        res = subprocess.run([str(bindir / "circuitgrad"), *args], cwd=run, env=env, capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines()[0].startswith(first), res.stdout
    res = subprocess.run([python, "-c", "from circuitgrad import modelfile; print(modelfile.resolve('iris'))"],
                         cwd=run, env=env, capture_output=True, text=True, check=True)
    assert os.path.realpath(res.stdout.strip()) == os.path.realpath(os.path.join(installed, "iris.py"))


def test_installing_keeps_the_users_numpy(tmp_path):
    """The wheel's requirements admit NumPy 1.26 and 2.x, and pip, asked to install the wheel into this
    environment (whatever NumPy it has), installs nothing but circuitgrad: no NumPy downgrade, and no dependency
    (as open-hypergraphs 0.1.3 was, pinning numpy~=1.26.4) that brings its own NumPy pin."""
    Requirement = pytest.importorskip("packaging.requirements").Requirement
    pytest.importorskip("setuptools")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), ROOT], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    meta = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    lines = zipfile.ZipFile(wheel).read(meta).decode().splitlines()
    core = [Requirement(line.split(": ", 1)[1]) for line in lines if line.startswith("Requires-Dist: ")
            and "extra ==" not in line]
    assert sorted(r.name for r in core) == ["numpy", "scipy", "tqdm"]
    numpy_req = next(r for r in core if r.name == "numpy")
    assert all(numpy_req.specifier.contains(v) for v in ("1.26.4", "2.0.0", "2.5.5", "3.0.0"))
    report = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "-q", "--report",
                          str(report), str(wheel)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    import json
    planned = [i["metadata"]["name"] for i in json.loads(report.read_text())["install"]]
    assert planned == ["circuitgrad"], planned


def test_cli_info(capsys):
    from circuitgrad.cli import main
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    import numpy
    import platform
    import scipy
    assert out.splitlines()[0] == (f"circuitgrad {circuitgrad.__version__} on Python {platform.python_version()}, "
                                   f"NumPy {numpy.__version__}, SciPy {scipy.__version__}")
    assert out.splitlines()[1].startswith("primitives (31): Copy, Parameter, Constant, ")
    assert "target cpu: float32/float64 NumPy code generation; fixed point by the reference interpreter; 30 rules; " \
           "runs on this machine" in out
    assert "target fpga: an Amaranth sequencer and its microcode; 29 rules (unsupported: LogSumExp); runs on" in out
    assert "target gpu: fused CUDA kernels and cuBLAS through CuPy; 30 rules; " in out          # every primitive but Parameter
    assert "; 29 rules (unsupported: LogSumExp); runs on this machine" in out.split("target zk: ")[1]   # every primitive but Parameter


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
    assert "target fpga: an Amaranth sequencer and its microcode; 29 rules" in res.stdout
