"""Run generated CUDA kernels on the CPU: the same ``__host__ __device__`` bodies, compiled by nvcc.

``nvcc`` compiles every kernel of a plan into one shared library. The
``extern "C"`` host entry points loop over the elements (or rows) and call
the same ``*_body`` function that the ``__global__`` wrapper calls on the
GPU (for a row kernel, which runs a warp per row, the body is a host-only
replay of the warp's lanes and shuffles over the same per-lane functions).
``ctypes`` then runs them on NumPy arrays. This checks the generated C code
itself on a machine without a GPU, not only the fusion plan.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from ..kernel import Kernel

__all__ = ["nvcc", "compile_host", "HostKernels", "signature", "Param"]


def nvcc() -> str | None:
    """Path of nvcc, or None."""
    return shutil.which("nvcc") or (os.path.exists("/usr/local/cuda/bin/nvcc") and "/usr/local/cuda/bin/nvcc") or None


#: C type of a kernel parameter's element -> NumPy dtype
_CTYPES = {"float": np.float32, "double": np.float64, "long long": np.int64, "long long int": np.int64,
           "int": np.int32, "unsigned int": np.uint32, "unsigned": np.uint32, "unsigned long long": np.uint64,
           "short": np.int16, "unsigned short": np.uint16, "signed char": np.int8, "char": np.int8, "unsigned char": np.uint8,
           "bool": np.bool_, "long": np.int64, "int64_t": np.int64, "int32_t": np.int32}


class Param:
    """One parameter of a kernel: its declaration, element C type and dtype, and whether it is a pointer."""

    def __init__(self, decl: str):
        self.decl = " ".join(decl.split())
        words = self.decl.replace("*", " * ").split()
        self.name = words[-1]
        self.pointer = "*" in words
        self.ctype = " ".join(w for w in words[:-1] if w not in ("const", "__restrict__", "volatile", "*"))
        if self.ctype not in _CTYPES:
            raise ValueError(f"kernel parameter `{self.decl}`: no NumPy dtype for C type {self.ctype!r}")
        self.dtype = np.dtype(_CTYPES[self.ctype])
        #: the declaration without its name or ``__restrict__`` (``const float*``)
        self.cast = " ".join(self.decl.rsplit(self.name, 1)[0].replace("__restrict__", "").split())


def signature(code: str, name: str) -> list[Param]:
    """The parameters of ``extern "C" __global__ void <name>(...)`` in ``code``."""
    m = re.search(r"__global__\s+void\s+" + re.escape(name) + r"\s*\(([^)]*)\)", code)
    if m is None:
        raise ValueError(f"no __global__ function {name!r} in the kernel source")
    body = m.group(1).strip()
    return [Param(p) for p in body.split(",")] if body and body != "void" else []


def _host_entry(k: Kernel, c: str) -> str:
    """``host_<name>(...)``: the kernel's own parameters, each output and input with its own C type (as the
    kernel's signature declares it), and a loop over the elements (or rows) that calls ``<name>_body``.

    A row kernel (one warp per row, ``k.lanes == 32``) has a host-only ``<name>_body(row, ...)`` that runs the
    warp's 32 lanes in turn and replays its shuffles exactly, so the loop over rows runs the warp's own math."""
    params = signature(k.source, k.name)
    decls = [f"{p.cast} {p.name}" for p in params]
    # host code only (a row kernel's ``_body`` exists only there: nvcc's device pass must not see the call)
    return (f"#ifndef __CUDA_ARCH__\n"
            f'extern "C" void host_{k.name}({", ".join(decls)}) {{\n'
            f"    for (long long i = 0; i < {k.n}LL; ++i) {k.name}_body(i, {', '.join(p.name for p in params)});\n}}\n"
            f"#endif\n")


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
    """Compile ``kernels`` (device and host code) with nvcc into a shared library.

    ``ctype`` is unused (kept for callers): every host entry takes each parameter with the C type the kernel
    declares for it.
    """
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
