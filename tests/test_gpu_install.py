"""Which CuPy wheel, CUDA runtime and driver: what ``circuitgrad info`` and ``gpu.available()`` say (no GPU needed:
a stand-in CuPy module gives the versions)."""
from __future__ import annotations

import sys
import types

import pytest

from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import install
from circuitgrad.targets import TARGETS


def fake_cupy(runtime: int | None, driver: int | None, devices: int = 1) -> types.ModuleType:
    def version(v):
        def get():
            if v is None:
                raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")
            return v
        return get

    def count():
        if devices < 0:
            raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")
        return devices
    rt = types.SimpleNamespace(runtimeGetVersion=version(runtime), driverGetVersion=version(driver),
                               getDeviceCount=count,
                               getDeviceProperties=lambda i: {"name": b"NVIDIA H200"})
    return types.SimpleNamespace(__version__="14.2.0", cuda=types.SimpleNamespace(runtime=rt))


@pytest.fixture
def cupy(monkeypatch):
    def put(*a, **k):
        m = fake_cupy(*a, **k)
        monkeypatch.setitem(sys.modules, "cupy", m)
        monkeypatch.setattr(install, "wheel", lambda: "cupy-cuda13x")
        return m
    return put


@pytest.mark.parametrize("v,want", [(13000, "13.0"), (12040, "12.4"), (12090, "12.9"), (11080, "11.8")])
def test_cuda_versions_read_as_people_write_them(v, want):
    assert install.cuda_version(v) == want


def test_info_names_the_cupy_wheel_runtime_and_driver(cupy):
    cupy(13000, 13000)
    assert gpu.available() == (True, "NVIDIA H200")
    assert TARGETS["gpu"].runtime() == "CuPy 14.2.0 (cupy-cuda13x), CUDA runtime 13.0, driver CUDA 13.0"


def test_a_cuda13_wheel_on_a_cuda12_driver_names_the_extra_that_fits(cupy):
    cupy(13000, 12040, devices=-1)
    assert gpu.available() == (False, "cupy-cuda13x is built for CUDA 13.0 but the driver supports CUDA 12.4: "
                                      "pip install 'circuitgrad[cuda12]' instead")


def test_no_driver_at_all_says_so(cupy):
    cupy(13000, None, devices=-1)
    assert gpu.available() == (False, "no usable CUDA device (RuntimeError: cudaErrorInsufficientDriver: CUDA driver "
                                      "version is insufficient)")
    assert TARGETS["gpu"].runtime() == "CuPy 14.2.0 (cupy-cuda13x), CUDA runtime 13.0, driver none"


def test_without_cupy_the_line_names_both_extras(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert gpu.available() == (False, "CuPy is not installed (pip install 'circuitgrad[cuda13]' for a CUDA 13 "
                                      "driver, 'circuitgrad[cuda12]' for CUDA 12 (nvidia-smi prints the driver's "
                                      "CUDA Version))")
    assert TARGETS["gpu"].runtime() is None


def test_both_cuda_extras_are_declared():
    import pathlib
    import tomllib
    extras = tomllib.loads((pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["cuda12"] == ["cupy-cuda12x>=13"] and extras["cuda13"] == ["cupy-cuda13x>=13.6"]


def test_a_driver_older_than_cuda12_is_told_to_update_not_to_install_an_extra_that_does_not_exist(cupy):
    cupy(12040, 11080, devices=-1)
    assert gpu.available() == (False, "cupy-cuda13x is built for CUDA 12.4 but the driver supports CUDA 11.8: "
                                      "circuitgrad's CuPy extras need a CUDA 12 or 13 driver: update the driver")
