"""A function's kernels as NVRTC modules, each distinct kernel once, named by its content.

    code, names = module.source(kernels)       # names[i]: the module's name for plan step i's kernel
    codes, where = module.split(kernels, 4)    # at most 4 modules: where[i] = (module, name)

Kernels that differ only in their names and the numbering of their local values (the same fused kernel
in every layer of a GPT) become one kernel, ``cg_<hash of its source>``. A function's distinct kernels go to
NVRTC as :data:`JOBS` modules of about equal source (:func:`split`), compiled side by side on the first launch
(:func:`compile_all`: NVRTC releases the GIL), instead of one call per kernel or one long call; CuPy caches
each compiled module on disk by its source, so a second process with the same kernels does not compile again.

Under the host execution mode (:mod:`~.host.run`) kernels are built by the stand-in's ``RawKernel``; the
source assembled here is checked by ``nvcc`` in the tests.
"""
from __future__ import annotations

import hashlib
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from .kernel import Kernel

__all__ = ["source", "split", "compile_all", "launchers", "renamed", "canonical", "JOBS"]

#: modules a function's kernels are compiled as, side by side: one a core, at most 8
JOBS = max(1, min(8, os.cpu_count() or 1))


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


def _distinct(kernels: dict[int, Kernel]) -> tuple[dict[str, str], dict[int, str]]:
    """Each distinct kernel's source by its name (in order of first appearance), and each step's kernel name."""
    names: dict[int, str] = {}
    parts: dict[str, str] = {}
    for i, k in kernels.items():
        body = canonical(renamed(k, "CG_KERNEL"))
        name = "cg_" + hashlib.sha256(body.encode()).hexdigest()[:16]
        if name not in parts:
            parts[name] = body.replace("CG_KERNEL", name)
        names[i] = name
    return parts, names


def source(kernels: dict[int, Kernel]) -> tuple[str, dict[int, str]]:
    """One module's source and each step's kernel name in it; kernels equal but for their names and local
    names appear once."""
    parts, names = _distinct(kernels)
    return "\n".join(parts.values()) + "\n", names


def split(kernels: dict[int, Kernel], modules: int = JOBS) -> tuple[list[str], dict[int, tuple[int, str]]]:
    """The distinct kernels (as :func:`source`) as at most ``modules`` modules of about equal source: the
    largest kernel first, each into the module with the least so far (the first of equals), a module's kernels
    in order of first appearance. Returns the modules' sources and, per step, ``(module, kernel name)``."""
    parts, names = _distinct(kernels)
    order = list(parts)
    bins: list[list[str]] = [[] for _ in range(max(1, min(modules, len(order))))]
    size = [0] * len(bins)
    for n in sorted(order, key=lambda n: -len(parts[n])):       # sorted is stable: equals keep their order
        b = size.index(min(size))
        bins[b].append(n)
        size[b] += len(parts[n])
    at = {n: b for b, ns in enumerate(bins) for n in ns}
    codes = ["\n".join(parts[n] for n in order if at[n] == b) + "\n" for b in range(len(bins))]
    return codes, {i: (at[n], n) for i, n in names.items()}


def compile_all(cupy, mods: list) -> None:
    """Compile ``cupy.RawModule`` objects side by side, a thread each (NVRTC releases the GIL), each thread on the
    caller's device, so that the modules load where the kernels will run; a compile error is raised here.
    Without ``RawModule.compile`` (CuPy before 10) they compile at their first ``get_function``."""
    if not mods or not hasattr(mods[0], "compile"):
        return
    device = cupy.cuda.Device().id

    def one(mod) -> None:
        with cupy.cuda.Device(device):
            mod.compile()
    if len(mods) == 1:
        one(mods[0])
        return
    with ThreadPoolExecutor(len(mods)) as pool:
        for f in [pool.submit(one, m) for m in mods]:
            f.result()


class _Modules:
    """A function's modules, compiled together on the first launch of any of its kernels."""
    __slots__ = ("cupy", "mods", "compiled")

    def __init__(self, cupy, mods: list):
        self.cupy, self.mods, self.compiled = cupy, mods, False

    def function(self, m: int, name: str):
        if not self.compiled:
            compile_all(self.cupy, self.mods)
            self.compiled = True
        return self.mods[m].get_function(name)


class _Lazy:
    """A module's kernel, fetched (and the function's modules compiled, once) on its first launch."""
    __slots__ = ("modules", "m", "name", "fn")

    def __init__(self, modules: _Modules, m: int, name: str):
        self.modules, self.m, self.name, self.fn = modules, m, name, None

    def __call__(self, grid, block, args, **kwargs):
        if self.fn is None:
            self.fn = self.modules.function(self.m, self.name)
        return self.fn(grid, block, args, **kwargs)


def launchers(cupy, modules: int = JOBS) -> Callable:
    """``launchers(plan, kernels)`` for :func:`~.runtime.build`: every kernel from one of at most ``modules``
    ``cupy.RawModule`` objects (:func:`split`), compiled side by side on the first launch."""
    def make(plan, kernels: dict[int, Kernel]) -> dict[int, _Lazy]:
        codes, where = split(kernels, modules)
        group = _Modules(cupy, [cupy.RawModule(code=c) for c in codes])
        fns: dict[str, _Lazy] = {}
        return {i: fns.setdefault(n, _Lazy(group, m, n)) for i, (m, n) in where.items()}
    return make
