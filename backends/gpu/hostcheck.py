"""Run generated CUDA kernels on the CPU: the same ``__host__ __device__`` bodies, compiled by nvcc.

``nvcc`` compiles every kernel of a plan into one shared library. The
``extern "C"`` host entry points loop over the elements (or rows) and call
the same ``*_body`` function that the ``__global__`` wrapper calls on the
GPU. ``ctypes`` then runs them on NumPy arrays. This checks the generated
C code itself on a machine without a GPU, not only the fusion plan.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile

import numpy as np

from .cuda import Kernel

__all__ = ["nvcc", "compile_host", "HostKernels"]


def nvcc() -> str | None:
    """Path of nvcc, or None."""
    return shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc") or None


def _host_entry(k: Kernel, c: str) -> str:
    n_in, n_out = len(k.inputs), len(k.outputs)
    types = k.in_types or (c,) * n_in
    params = [f"const {t}* in{i}" for i, t in enumerate(types)] + [f"{c}* out{i}" for i in range(n_out)]
    names = [f"in{i}" for i in range(n_in)] + [f"out{i}" for i in range(n_out)]
    return (f'extern "C" void host_{k.name}({", ".join(params)}) {{\n'
            f"    for (long long i = 0; i < {k.n}LL; ++i) {k.name}_body(i, {', '.join(names)});\n}}\n")


class HostKernels:
    """The kernels of one source file, callable on the CPU."""

    def __init__(self, lib: ctypes.CDLL, kernels: dict[str, Kernel], tmpdir: tempfile.TemporaryDirectory):
        self.lib, self.kernels, self._tmp = lib, kernels, tmpdir

    def __call__(self, name: str, *arrays: np.ndarray) -> None:
        fn = getattr(self.lib, f"host_{name}")
        fn(*[ctypes.c_void_p(np.ascontiguousarray(a).ctypes.data) if a.flags.c_contiguous
             else _fail(name) for a in arrays])


def _fail(name: str):
    raise ValueError(f"host kernel {name}: arrays must be C-contiguous")


def compile_host(kernels: list[Kernel], ctype: str, arch: str = "sm_80") -> HostKernels:
    """Compile ``kernels`` (device and host code) with nvcc into a shared library."""
    exe = nvcc()
    if exe is None:
        raise FileNotFoundError("nvcc not found: install the CUDA toolkit to compile generated kernels")
    tmp = tempfile.TemporaryDirectory()
    src = os.path.join(tmp.name, "kernels.cu")
    with open(src, "w") as fh:
        fh.write("#include <math.h>\n")
        for k in kernels:
            fh.write(k.source + "\n" + _host_entry(k, ctype) + "\n")
    lib = os.path.join(tmp.name, "kernels.so")
    res = subprocess.run([exe, "-shared", "-Xcompiler", "-fPIC", f"-arch={arch}", "-o", lib, src],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"nvcc failed on generated kernels:\n{res.stderr[-2000:]}")
    return HostKernels(ctypes.CDLL(lib), {k.name: k for k in kernels}, tmp)
