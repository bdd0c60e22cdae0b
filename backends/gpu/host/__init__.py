"""Host emulation: the GPU backend's generated code run on the CPU, without a device.

* :mod:`~.emulate`: ``backend="cupy-emulated"``, the generated glue on NumPy with each kernel launch evaluated
  by NumPy through the plan's layouts.
* :mod:`~.run`: the host execution mode, ``backend="cupy"`` itself against a CuPy stand-in
  (``with host.device(order="reverse"):``), its kernels the generated CUDA C compiled for the CPU by nvcc and
  launched one thread at a time (:mod:`~.launch`: ``RawKernel`` and guarded device memory; :mod:`~.capture`:
  streams, stream capture and CUDA graphs).
* :mod:`~.check`: a plan's kernels compiled with nvcc into one library and called element by element (the tests
  compare them with NumPy).

See ``docs/GPU.md``, "Host execution mode".
"""
from __future__ import annotations

from .check import compile_host, nvcc
from .emulate import emulated_kernel
from .run import ORDERS, DeviceArray, IllegalAddress, LaunchError, available, device

__all__ = ["device", "available", "DeviceArray", "IllegalAddress", "LaunchError", "ORDERS", "emulated_kernel",
           "compile_host", "nvcc"]
