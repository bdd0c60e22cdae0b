"""Provenance: the definition path at which each operation is created.

Tracing keeps a stack of definition names; an operation applied inside
``trace(f, …, name="block")`` and ``scope("attention")`` is created at
``block/attention``, and calling that diagram inside ``gpt`` moves it to
``gpt/block/attention``.  The path is part of the edge label
(:func:`circuitgrad.primitives.intern_op`), so it survives ``>>``, ``@``,
:func:`circuitgrad.rdiff` (the reverse map of an operation inherits its path)
and :func:`circuitgrad.schedule` (``Apply.path``)::

    gpt ─┬─ embedding
         ├─ block0 ─┬─ ln1
         │          ├─ attention ─┬─ q, k, v, o
         │          │             └─ causal_softmax_attention    Softmax, BatchMatMul, …
         │          └─ mlp
         └─ head
"""
from __future__ import annotations

import contextlib
import functools
from typing import Callable

__all__ = ["segment", "current_path", "scope", "definition", "current_builder"]

#: the definition path of the operations being traced, innermost last (see :func:`scope`)
SCOPE: list[str] = []
#: the builders of the diagrams being traced, innermost last (:class:`circuitgrad.tracing.Builder`)
BUILDERS: list = []


def current_builder():
    """The builder of the innermost diagram being traced (``RuntimeError`` outside a trace)."""
    if not BUILDERS:
        raise RuntimeError("no diagram is being traced: call this inside circuitgrad.trace(...)")
    return BUILDERS[-1]


def segment(name: str) -> str:
    """The path segment of a definition named ``name``: ``"dense(8,4,16)"`` → ``"dense"``."""
    return name.split("(", 1)[0].strip().replace("/", "|") or "diagram"


def current_path() -> str:
    """The definition path where an operation applied now is created (``"gpt/block1/attention"``)."""
    return "/".join(SCOPE)


@contextlib.contextmanager
def scope(name: str):
    """Operations applied inside are created at ``current_path()/name``::

        with scope("attention"):
            y = ops.softmax(s) @ v        # Softmax and MatMul at …/attention

    A scope directly inside one of the same name is that scope (``nn.layer_norm`` calling
    ``ops.layer_norm`` is one definition, ``…/layer_norm``).
    """
    seg = segment(name)
    if SCOPE and SCOPE[-1] == seg:
        yield
        return
    SCOPE.append(seg)
    try:
        yield
    finally:
        SCOPE.pop()


def definition(name: str | None = None) -> Callable[[Callable], Callable]:
    """Decorator: every call of the function is a definition (a :func:`scope`) named ``name``."""
    def wrap(fn: Callable) -> Callable:
        seg = name or fn.__name__

        @functools.wraps(fn)
        def defined(*args, **kwargs):
            with scope(seg):
                return fn(*args, **kwargs)
        return defined
    return wrap
