"""Which CuPy is installed, for which CUDA, against which driver: the one line ``circuitgrad info`` prints.

CuPy ships one wheel per CUDA major version (``cupy-cuda12x``, ``cupy-cuda13x``); circuitgrad's extras
``[cuda12]`` and ``[cuda13]`` install them. A wheel built for a newer CUDA than the driver supports imports
fine and fails at the first device call, so :func:`mismatch` names the extra that fits the driver.
"""
from __future__ import annotations

from importlib import metadata
from types import ModuleType

__all__ = ["INSTALL", "wheel", "cuda_version", "describe", "mismatch"]

#: what to install when CuPy is missing (the driver's CUDA version is the "CUDA Version" nvidia-smi prints)
INSTALL = ("pip install 'circuitgrad[cuda13]' for a CUDA 13 driver, 'circuitgrad[cuda12]' for CUDA 12 "
           "(nvidia-smi prints the driver's CUDA Version)")

_WHEELS = ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")


def wheel() -> str:
    """The distribution that provides ``cupy`` (``cupy-cuda13x``…), or ``"cupy"`` when none is recorded."""
    for name in _WHEELS:
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
    return "cupy"


def cuda_version(v: int) -> str:
    """CUDA's integer version as people write it: ``13000 → "13.0"``, ``12040 → "12.4"``."""
    return f"{v // 1000}.{v % 1000 // 10}"


def _versions(cupy: ModuleType) -> tuple[int | None, int | None]:
    rt = cupy.cuda.runtime
    out = []
    for name in ("runtimeGetVersion", "driverGetVersion"):
        try:
            out.append(int(getattr(rt, name)()))
        except Exception:          # no driver at all (CUDARuntimeError), or a CuPy without the call
            out.append(None)
    return out[0], out[1]


def describe(cupy: ModuleType) -> str:
    """``"CuPy 14.2.0 (cupy-cuda13x), CUDA runtime 13.0, driver CUDA 13.0"``; ``driver none`` without one."""
    runtime, driver = _versions(cupy)
    rt = cuda_version(runtime) if runtime else "unknown"
    dr = f"CUDA {cuda_version(driver)}" if driver else "none"
    return f"CuPy {cupy.__version__} ({wheel()}), CUDA runtime {rt}, driver {dr}"


def mismatch(cupy: ModuleType) -> str | None:
    """Why this CuPy cannot run on this driver (a wheel for a newer CUDA major), with the extra to install."""
    runtime, driver = _versions(cupy)
    if runtime is None or driver is None or runtime // 1000 <= driver // 1000:
        return None
    fits = (f"pip install 'circuitgrad[cuda{driver // 1000}]' instead" if driver // 1000 in (12, 13) else
            "circuitgrad's CuPy extras need a CUDA 12 or 13 driver: update the driver")
    return f"{wheel()} is built for CUDA {cuda_version(runtime)} but the driver supports CUDA {cuda_version(driver)}: {fits}"
