"""NVRTC, the compiler a device's ``cupy.RawModule`` runs, called without a device (ctypes): the tests compile
the backend's modules with it for sm_90, so that code NVRTC refuses (a host header, a host-only function) fails
here and not on the first device a session is lent. NVRTC comes from the ``nvidia-cuda-nvrtc`` wheel (which
``scripts/test.sh`` installs when it can) or a CUDA toolkit's ``lib64``; without either, :func:`load` says why."""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
import re
from dataclasses import dataclass, field

__all__ = ["load", "compile_source", "Compiled", "CUPY_OPTIONS"]

_LIB: ctypes.CDLL | None = None


def _candidates() -> list[str]:
    """Directories that may hold ``libnvrtc.so``: the NVIDIA wheels' (``nvidia/cu13/lib``, ``nvidia/cuda_nvrtc/lib``),
    then ``$CUDA_HOME``'s and ``/usr/local/cuda``'s ``lib64``."""
    dirs = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        dirs += sorted(glob.glob(os.path.join(root, "cu*", "lib"))) + [os.path.join(root, "cuda_nvrtc", "lib")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            dirs.append(os.path.join(home, "lib64"))
    return dirs


def load() -> tuple[ctypes.CDLL | None, str]:
    """``(library, "")``, or ``(None, why)`` where no NVRTC loads. Its builtins library is loaded first (global),
    so that NVRTC finds it without ``LD_LIBRARY_PATH``."""
    global _LIB
    if _LIB is not None:
        return _LIB, ""
    tried = []
    for d in _candidates():
        libs = sorted(glob.glob(os.path.join(d, "libnvrtc.so*")))
        if not libs:
            continue
        for b in sorted(glob.glob(os.path.join(d, "libnvrtc-builtins.so*"))):
            try:
                ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass
        try:
            _LIB = ctypes.CDLL(libs[0])
            return _LIB, ""
        except OSError as e:
            tried.append(f"{libs[0]}: {e}")
    found = ctypes.util.find_library("nvrtc")
    if found:
        try:
            _LIB = ctypes.CDLL(found)
            return _LIB, ""
        except OSError as e:
            tried.append(f"{found}: {e}")
    return None, "NVRTC not found (pip install nvidia-cuda-nvrtc, or a CUDA toolkit)" + (
        f"; could not load {'; '.join(tried)}" if tried else "")


@dataclass
class Compiled:
    """What NVRTC said of one source: its status (0: compiled), its log, and ptxas's figures per kernel."""
    status: int
    log: str
    registers: dict[str, int] = field(default_factory=dict)
    spill_bytes: dict[str, int] = field(default_factory=dict)
    cubin: bytes = b""          #: the compiled module (ELF) where it compiled

    @property
    def ok(self) -> bool:
        return self.status == 0


#: what CuPy's ``RawModule`` adds to a module's options (CuPy 13, 14: ``-std=c++14`` where none is given, and
#: ``-ftz=true`` always, last: float32 subnormals flush to zero on a device)
CUPY_OPTIONS = ("-std=c++14", "-ftz=true")


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with NVRTC status {status}")


def compile_source(code: str, arch: str = "sm_90", lineinfo: bool = False) -> Compiled:
    """``code`` compiled by NVRTC for ``arch`` to a cubin with :data:`CUPY_OPTIONS`, ptxas verbose: registers per
    kernel (entry function) and spill-store bytes per function (kernels and any function not inlined), and the
    cubin itself (with the source's line of each instruction when ``lineinfo``: ``bench/gpu_sass.py``)."""
    lib, why = load()
    if lib is None:
        raise RuntimeError(why)
    prog = ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), b"circuitgrad.cu", 0, None, None),
           "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in (f"--gpu-architecture={arch}", *CUPY_OPTIONS, "--ptxas-options=-v",
                                     *(["--generate-line-info"] if lineinfo else []))]
        status = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
        n = ctypes.c_size_t()
        _check(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)), "nvrtcGetProgramLogSize")
        buf = ctypes.create_string_buffer(max(1, n.value))
        _check(lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        cubin = b""
        if status == 0:
            _check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "nvrtcGetCUBINSize")
            data = ctypes.create_string_buffer(n.value)
            _check(lib.nvrtcGetCUBIN(prog, data), "nvrtcGetCUBIN")
            cubin = data.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    out = Compiled(status, buf.value.decode(errors="replace"), cubin=cubin)
    entry = function = None
    for line in out.log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            entry = m.group(1)
        elif m := re.search(r"Function properties for (\w+)", line):
            function = m.group(1)
        elif (m := re.search(r"(\d+) bytes spill stores", line)) and function:
            out.spill_bytes[function] = int(m.group(1))
        elif (m := re.search(r"Used (\d+) registers", line)) and entry:
            out.registers[entry] = int(m.group(1))
    return out
