"""The targets, in one table: what ``compile_model``, ``cg.cost``, ``circuitgrad info``, the command line and
the conformance tests read.

The core never imports a backend statically. It names each target's modules here, and
:meth:`Target.module` imports one by that name when it is first asked for. A backend does
not register itself on import. Adding a target means adding a row here, next to its package under
``backends/``::

    core (circuitgrad/*)  ──names──▶  targets.TARGETS  ──import on demand──▶  backends/<target>/
          ▲                                                                          │
          └──────────────────────── imports (down only) ─────────────────────────────┘
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

__all__ = ["Target", "TARGETS", "target", "backend_target"]


@dataclass(frozen=True)
class Target:
    """One target: its package and the modules each part of the library asks it for."""
    name: str                              # cg.cost(target=...), circuitgrad info
    package: str                           # the code that runs it: its UNSUPPORTED and, where it has one,
                                           # available() and installed()
    rules: str                             # "module:TABLE": how it runs each primitive
    cost: str                              # estimate(f, device=, function=, depth=, **options)
    backends: tuple[str, ...] = ()         # compile_model(backend=...) names it runs
    command: str | None = None             # add_parser(subparsers): its ``circuitgrad`` subcommand
    summary: str = ""

    def module(self, part: str = "package") -> ModuleType:
        """The target's ``package``, ``cost`` or ``command`` module, imported now if it was not yet."""
        name = getattr(self, part)
        if not isinstance(name, str):
            raise ValueError(f"target {self.name!r} has no {part} module")
        return importlib.import_module(name)

    def rule_table(self) -> dict:
        """Its table of rules keyed by primitive class."""
        module, attr = self.rules.split(":")
        return getattr(importlib.import_module(module), attr)

    def unsupported(self) -> dict:
        """The primitives it declares it cannot run, each with the reason (``{}`` when it runs them all)."""
        return dict(getattr(self.module(), "UNSUPPORTED", {}))

    def available(self) -> tuple[bool, str]:
        """``(True, what runs it)`` or ``(False, why not)`` on this machine (only the GPU can be absent)."""
        check = getattr(self.module(), "available", None)
        return check() if check is not None else (True, "this machine")

    def runtime(self) -> str | None:
        """The runtime library it found and its version (CuPy and CUDA for the GPU), where it has one."""
        describe = getattr(self.module(), "installed", None)     # (gpu.runtime is a submodule: not that name)
        return describe() if describe is not None else None


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("cpu", "circuitgrad.codegen", "circuitgrad.codegen:NUMPY_RULES", "circuitgrad.costmodel.cpu", ("numpy",),
           summary="float32/float64 NumPy code generation; fixed point by the reference interpreter"),
    Target("gpu", "circuitgrad.backends.gpu", "circuitgrad.backends.gpu:RULES", "circuitgrad.backends.gpu.cost",
           ("cupy", "cupy-emulated"),
           summary="fused CUDA kernels and cuBLAS through CuPy"),
    Target("fpga", "circuitgrad.backends.fpga", "circuitgrad.backends.fpga:RULES", "circuitgrad.backends.fpga.cost",
           command="circuitgrad.backends.fpga.cli", summary="an Amaranth sequencer and its microcode"),
    Target("zk", "circuitgrad.backends.zk", "circuitgrad.backends.zk:RULES", "circuitgrad.backends.zk.cost",
           command="circuitgrad.backends.zk.cli", summary="arithmetic circuits over prime fields, proved by Ligero "
                                                          "or snarkjs"),
)}


def target(name: str) -> Target:
    """The target called ``name`` (``ValueError`` naming the targets otherwise)."""
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")
    return TARGETS[name]


def backend_target(backend: str) -> Target:
    """The target that runs ``compile_model(backend=backend)``."""
    for t in TARGETS.values():
        if backend in t.backends:
            return t
    raise ValueError(f"no target runs backend {backend!r}")
