"""A function's kernels as one NVRTC module, each distinct kernel once, named by its content.

    code, names = module.source(kernels)       # names[i]: the module's name for plan step i's kernel

Kernels that differ only in their names and the numbering of their local values (the same fused kernel
in every layer of a GPT) become one kernel, ``cg_<hash of its source>``. All of
a function's kernels go to NVRTC in one call (``cupy.RawModule``), on the first launch, instead of one
call per kernel; CuPy caches the compiled module on disk by its source, so a second process, or another
model with the same kernels in the same order, does not compile again.

Under the host execution mode (:mod:`~.host.run`) kernels are built by the stand-in's ``RawKernel``; the
source assembled here is checked by ``nvcc`` in the tests.
"""
from __future__ import annotations

import hashlib
import re
from typing import Callable

from .kernel import Kernel

__all__ = ["source", "launchers", "renamed", "canonical"]


def renamed(k: Kernel, name: str) -> str:
    """``k``'s source with its name (and its helpers', ``<name>_body`` …) replaced by ``name``."""
    return re.sub(re.escape(k.name) + r"(?![0-9A-Za-z])", name, k.source)


#: the generated code's local names: SSA values (``v12``, ``r7_3``) and partials (``w3``)
LOCAL = re.compile(r"\b[rvw]\d+(?:_\d+)?\b")


def canonical(code: str) -> str:
    """``code`` with its local names numbered in order of appearance (``cg_t0``, ``cg_t1``, …), so that the same
    kernel in two layers (the same code over other SSA numbers) reads the same."""
    seen: dict[str, str] = {}
    return LOCAL.sub(lambda m: seen.setdefault(m.group(0), f"cg_t{len(seen)}"), code)


def source(kernels: dict[int, Kernel]) -> tuple[str, dict[int, str]]:
    """One module's source and each step's kernel name in it; kernels equal but for their names and local
    names appear once."""
    names: dict[int, str] = {}
    parts: dict[str, str] = {}
    for i, k in kernels.items():
        body = canonical(renamed(k, "CG_KERNEL"))
        name = "cg_" + hashlib.sha256(body.encode()).hexdigest()[:16]
        if name not in parts:
            parts[name] = body.replace("CG_KERNEL", name)
        names[i] = name
    return "\n".join(parts.values()) + "\n", names


class _Lazy:
    """A module's kernel, fetched (and the module compiled, once) on its first launch."""
    __slots__ = ("module", "name", "fn")

    def __init__(self, module, name: str):
        self.module, self.name, self.fn = module, name, None

    def __call__(self, grid, block, args, **kwargs):
        if self.fn is None:
            self.fn = self.module.get_function(self.name)
        return self.fn(grid, block, args, **kwargs)


def launchers(cupy) -> Callable:
    """``launchers(plan, kernels)`` for :func:`~.runtime.build`: every kernel from one ``cupy.RawModule``."""
    def make(plan, kernels: dict[int, Kernel]) -> dict[int, _Lazy]:
        code, names = source(kernels)
        mod = cupy.RawModule(code=code)
        fns: dict[str, _Lazy] = {}
        return {i: fns.setdefault(n, _Lazy(mod, n)) for i, n in names.items()}
    return make
