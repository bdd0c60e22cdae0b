"""The targets, in one table: what ``compile_model``, ``cg.cost``, ``circuitgrad info``, the command line and
the conformance tests read.

The core never imports a backend statically. It names each target's modules here, and
:meth:`Target.module` imports one by that name when it is first asked for. A backend does
not register itself on import. Adding a target means adding a row here, next to its package under
``backends/``; a target that trains models adds its :class:`Runtime` s to the row, and ``compile_model``
reads everything it needs about a backend from them (it names none)::

    core (circuitgrad/*)  ──names──▶  targets.TARGETS  ──import on demand──▶  backends/<target>/
          ▲                                                                          │
          └──────────────────────── imports (down only) ─────────────────────────────┘
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

__all__ = ["Runtime", "Target", "TARGETS", "DEFAULT_BACKEND", "target", "backend_target", "runtime", "backends"]


@dataclass(frozen=True)
class Runtime:
    """One ``compile_model(backend=name)``: how a target runs a compiled step.

    ``compile`` names ``function(program, arg_names, name, **arguments, **options)``, which returns an object with
    ``run(*arrays)``, ``source`` and ``launches`` (kernel launches per call, or ``None``). ``options`` are the
    ``compile_model`` options it takes beyond the dtype (``donate``, ``precision``, ``graph``); the others keep
    their defaults. ``device``: it needs its target's ``available()``, and ``backend="auto"`` picks it when that
    holds. ``fixed``: it runs fixed-point programs (the reference interpreter)."""
    name: str
    compile: str                           # "module:function"
    array_module: str = "numpy"            # the arrays its functions take and return
    needs: str = ""                        # what a device runtime needs, for the error when it is absent
    options: tuple[str, ...] = ()
    arguments: tuple[tuple[str, object], ...] = ()   # fixed keyword arguments of ``compile``
    device: bool = False
    fixed: bool = False

    def compile_function(self, program, arg_names, name: str, **options):
        """``program`` compiled by this runtime (``options`` only those it takes)."""
        module, attr = self.compile.split(":")
        fn = getattr(importlib.import_module(module), attr)
        return fn(program, arg_names, name, **dict(self.arguments), **options)

    def xp(self) -> ModuleType:
        """The array module of its functions' arguments and results."""
        return importlib.import_module(self.array_module)


@dataclass(frozen=True)
class Target:
    """One target: its package and the modules each part of the library asks it for."""
    name: str                              # cg.cost(target=...), circuitgrad info
    package: str                           # the code that runs it: its UNSUPPORTED and, where it has one,
                                           # available() and installed()
    rules: str                             # "module:TABLE": how it runs each primitive
    cost: str                              # estimate(f, device=, function=, depth=, **options)
    runtimes: tuple[Runtime, ...] = ()     # the compile_model(backend=...) it runs
    command: str | None = None             # add_parser(subparsers): its ``circuitgrad`` subcommand
    summary: str = ""
    title: str = ""                        # in messages: "the GPU"

    @property
    def backends(self) -> tuple[str, ...]:
        """The names ``compile_model(backend=...)`` takes for it."""
        return tuple(r.name for r in self.runtimes)

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
    Target("cpu", "circuitgrad.codegen", "circuitgrad.codegen:NUMPY_RULES", "circuitgrad.costmodel.cpu",
           (Runtime("numpy", "circuitgrad.codegen:compile_function", fixed=True),),
           summary="float32/float64 NumPy code generation; fixed point by the reference interpreter"),
    Target("gpu", "circuitgrad.backends.gpu", "circuitgrad.backends.gpu:GPU_RULES", "circuitgrad.backends.gpu.cost",
           (Runtime("cupy", "circuitgrad.backends.gpu:compile_function", "cupy", "CuPy and a CUDA GPU",
                    ("donate", "precision", "graph"), device=True),
            Runtime("cupy-emulated", "circuitgrad.backends.gpu:compile_function", options=("donate", "precision"),
                    arguments=(("emulate", True),))),
           summary="fused CUDA kernels and cuBLAS through CuPy", title="the GPU"),
    Target("fpga", "circuitgrad.backends.fpga", "circuitgrad.backends.fpga:FPGA_RULES", "circuitgrad.backends.fpga.cost",
           command="circuitgrad.backends.fpga.cli", summary="an Amaranth sequencer and its microcode"),
    Target("zk", "circuitgrad.backends.zk", "circuitgrad.backends.zk:ZK_RULES", "circuitgrad.backends.zk.cost",
           command="circuitgrad.backends.zk.cli", summary="arithmetic circuits over prime fields, proved by Ligero "
                                                          "or snarkjs"),
)}


def target(name: str) -> Target:
    """The target called ``name`` (``ValueError`` naming the targets otherwise)."""
    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")
    return TARGETS[name]


#: ``compile_model``'s backend when none is named: the reference target's
DEFAULT_BACKEND = "numpy"


def backends() -> tuple[str, ...]:
    """Every name ``compile_model(backend=...)`` takes, in the table's order, then ``"auto"``."""
    return tuple(b for t in TARGETS.values() for b in t.backends) + ("auto",)


def backend_target(backend: str) -> Target:
    """The target that runs ``compile_model(backend=backend)``."""
    for t in TARGETS.values():
        if backend in t.backends:
            return t
    raise ValueError(f"no target runs backend {backend!r}")


def runtime(backend: str) -> Runtime:
    """The runtime of ``compile_model(backend=backend)`` (``ValueError`` when no target runs it)."""
    return next(r for r in backend_target(backend).runtimes if r.name == backend)
