"""The GPU backend: training steps as fused CUDA kernels and cuBLAS calls, through CuPy.

    step = cg.compile_model(model, loss=..., optimizer=..., backend="cupy")

:mod:`~.plan` groups the SSA program into launches (its passes in :mod:`~.passes`, views' layouts in
:mod:`~.layout`); each launch's kernel is written by its shape's module (:mod:`~.elementwise`, :mod:`~.row`,
:mod:`~.gather`, :mod:`~.reduction`, :mod:`~.attention`) in the CUDA C of :mod:`~.cuda` and :mod:`~.warp`;
:mod:`~.runtime` writes the Python glue that launches them, and :mod:`~.profiler` times each launch against the
cost model's prediction (:mod:`~.cost`). :mod:`~.host` runs all of it on the CPU: ``backend="cupy-emulated"``
(:mod:`~.host.emulate`), and ``backend="cupy"`` itself against a CuPy stand-in whose kernels nvcc compiles for
the CPU (:mod:`~.host.run`).
See ``docs/GPU.md``.
"""
from __future__ import annotations

from typing import Sequence

from circuitgrad import primitives as P
from circuitgrad.schedule import Program

from . import install, module
from .cuda import CUDA_EXPRESSIONS
from .gather import GATHER_KERNELS
from .host.emulate import emulated_kernel
from .plan import Plan, plan
from .profiler import Launch, Profile, profile
from .row import ROW_KERNELS
from .runtime import VIEWS, GpuFunction, build

__all__ = ["GPU_RULES", "UNSUPPORTED", "available", "installed", "compile_function", "plan", "Plan", "GpuFunction", "profile",
           "Profile", "Launch"]

#: how the backend runs each primitive: elementwise ones by a CUDA expression in a fused kernel, row-wise ones
#: and gathers by a kernel of their own, views by a CuPy view (or the layout its consumers read), matrix products
#: by cuBLAS, sums by a reduction kernel; copies and constants by the plan (``tests/test_conformance.py`` checks
#: each entry against the primitive's kind)
GPU_RULES: dict = {**CUDA_EXPRESSIONS, **{p: "row kernel" for p in ROW_KERNELS},
               **{p: "gather kernel" for p in GATHER_KERNELS}, **VIEWS,
               P.MatMul: "cuBLAS", P.BatchMatMul: "cuBLAS (batched)", P.SumTo: "reduction kernel",
               P.Copy: "plan (shared buffers)", P.Constant: "plan (folded or uploaded once)"}
UNSUPPORTED: dict = {}


def available() -> tuple[bool, str]:
    """``(True, device name)`` when CuPy and a CUDA device are usable, else ``(False, why)``."""
    try:
        import cupy
    except ImportError:
        return False, f"CuPy is not installed ({install.INSTALL})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError without a driver, or a wheel for a newer CUDA than the driver's
        return False, install.mismatch(cupy) or f"no usable CUDA device ({type(e).__name__}: {e})"
    if n == 0:
        return False, "no CUDA device found"
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return True, name


def installed() -> str | None:
    """The CuPy and CUDA this machine has (``circuitgrad info``), or ``None`` without CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    return install.describe(cupy)


def compile_function(prog: Program, arg_names: Sequence[str], name: str, emulate: bool = False,
                     donate_pairs: dict[int, int] | None = None, precision: str = "fp32",
                     graph: bool = False, attention_3xtf32: bool = False) -> GpuFunction:
    """Compile one program for the GPU (``emulate=True``: NumPy arrays and CPU-emulated kernels).

    ``precision="tf32"``/``"bf16"``: float32 products on the tensor cores (:mod:`~.blas`); ``graph=True``: the function replayed as one
    CUDA graph from its second call (see :mod:`~.graph`; not with ``emulate=True``); ``attention_3xtf32``: under
    ``"fp32"``, streaming attention's products as 3xTF32 on the tensor cores (:mod:`~.attention_mma`)."""
    if emulate:
        import numpy
        if graph:
            raise ValueError("graph=True needs backend='cupy' (a device, or the host execution mode "
                             "circuitgrad.backends.gpu.host.run): 'cupy-emulated' has no streams to capture")
        return build(prog, arg_names, name, numpy, emulated_kernel, donate_pairs, precision,
                     attention_3xtf32=attention_3xtf32)
    ok, why = available()
    if not ok:
        raise RuntimeError(f"backend='cupy' needs CuPy and a CUDA GPU: {why}")
    import cupy
    return build(prog, arg_names, name, cupy, None, donate_pairs, precision, graph, launchers=_launchers(cupy),
                 attention_3xtf32=attention_3xtf32)


def _launchers(cupy):
    """Each kernel's launcher: from one NVRTC module (:mod:`~.module`), or the host run's ``RawKernel`` each."""
    if getattr(cupy, "hostrun", False):
        return lambda p, ks: {i: cupy.RawKernel(k.source, k.name) for i, k in ks.items()}
    return module.launchers(cupy)
