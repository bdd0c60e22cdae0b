"""Neural circuit diagrams (Abbott, TMLR 2024) of circuitgrad models, as SVG.

:func:`draw` takes a model (any :class:`~circuitgrad.Diagram`), a compiled model (its training step)
or a scheduled :class:`~circuitgrad.Program` and returns an SVG picture::

    svg = draw(nn.gpt(2, 8, 16, d=16, heads=2, layers=2), "gpt.svg")
    svg = draw(nn.transformer_block(2, 8, 16, heads=2), expand=("attention",))

The operations are grouped by the definition that created them (``Apply.path``): the definitions
``depth`` levels below the root are boxes, those named in ``expand`` (and their ancestors) frames
around their parts.  This package module owns the entry points (:func:`draw`, :func:`placed`,
:func:`parameter_names`) and re-exports the rest.  The modules, each importing only those listed
before it:

* :mod:`.graph`: the data (:class:`Circuit`: nodes, wires, frames; :class:`~.graph.Geometry`);
* :mod:`.svg`: the marks of each operation, the sizes of the nodes and the SVG text;
* :mod:`.grouping`: the definition path and pass of each instruction;
* :mod:`.layered`: columns, order, rows and x of the nodes;
* :mod:`.route`: the wires' paths;
* :mod:`.fold`: a training step folded into the lens picture (forward on top, reverse underneath,
  the optimizer below);
* :mod:`.builder`: the visible graph of a program (:func:`circuit`);
* :mod:`.layout`: the steps of the layout in order (:func:`~.layout.layout`).
"""
from __future__ import annotations

import os
from typing import Sequence

from ..compile import CompiledModel, number_labels
from ..diagram import Diagram, kinds
from ..primitives import Parameter, op_of, path_of
from ..schedule import Program, schedule
from . import layout, svg
from .builder import UnknownDefinition, circuit
from .graph import Circuit, Frame, Geometry, Node, Wire
from .grouping import lca, split_path
# defined or imported here before the split into modules: still importable from here
from .builder import BUNDLE as BUNDLE, shape_label as shape_label
from .fold import optimizer_sources as optimizer_sources
from .grouping import acyclic as acyclic, phases as phases
from .svg import (box_broadcast as box_broadcast, box_class as box_class, prim_broadcast as prim_broadcast,
                  prim_class as prim_class, static_lead as static_lead, static_vars as static_vars)

__all__ = ["draw", "placed", "circuit", "parameter_names", "Circuit", "Node", "Wire", "Frame", "UnknownDefinition"]


# ----------------------------------------------------------------------------------- the entry
def _model_root(d: Diagram) -> str:
    paths = [split_path(path_of(int(l))) for l in d.H.x.table]
    paths = [x for x in paths if x]
    return "/".join(lca(paths)) if paths else ""


def parameter_names(d: Diagram) -> dict:
    """``{Parameter: name}``: the names of the parameters of ``d`` in the parameter dict of
    ``cg.compile_model(d, …)`` (``W0``, ``b0``, ``W1``, …: the label and its count, in edge order)."""
    params = [op_of(l) for l in d.H.x.table[kinds(d, Parameter)]]
    return dict(zip(params, number_labels(params)))


def _names(n: int, stem: str) -> list[str]:
    return [stem] if n == 1 else [f"{stem}{k}" for k in range(n)]


def draw(f, path: str | os.PathLike | None = None, expand: Sequence[str] = (), depth: int = 1,
         title: str | None = None, fold: bool | None = None) -> str:
    """The neural circuit diagram of ``f`` as SVG text (also written to ``path`` when given).

    ``f``: a :class:`~circuitgrad.Diagram` (a model, ``cg.rdiff(model)``, any traced diagram), a
    :class:`~circuitgrad.CompiledModel` (its training step: forward, reverse and optimizer) or a
    :class:`~circuitgrad.Program`.  The definitions ``depth`` levels below the root are drawn as
    boxes; a definition named in ``expand`` (its own name, such as ``"attention"``, or its path,
    such as ``"gpt/block0"``) is drawn as a frame around its parts, ``"*"`` expands everything; a
    name that matches no definition is a ``ValueError`` that lists the definitions there are.
    Parameters are named as in the parameter dict of ``cg.compile_model`` (``W0``, ``b0``, …).
    ``fold``: fold the row where the reverse pass begins (:mod:`.fold`: the forward pass on top, the
    reverse pass and the optimizer underneath, right to left); None (the default) folds training
    steps (a ``CompiledModel``) only, False never folds.
    """
    c, g = placed(f, expand, depth, title, fold)
    text = svg.render(c, g)
    if path is not None:
        with open(os.fspath(path), "w", encoding="utf-8") as fh:
            fh.write(text)
    return text


def placed(f, expand: Sequence[str] = (), depth: int = 1, title: str | None = None,
           fold: bool | None = None) -> tuple[Circuit, Geometry]:
    """``(circuit, geometry)``: what :func:`draw` draws, placed (same arguments)."""
    if isinstance(expand, str):
        expand = (expand,)
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
        raise ValueError(f"draw: depth must be an int of at least 1, got {depth!r}")
    if fold is not None and not isinstance(fold, bool):
        raise TypeError(f"draw: fold must be True, False or None, got {type(fold).__name__}")
    fold = isinstance(f, CompiledModel) if fold is None else fold
    c, g = _placed(f, expand, depth, title, fold)
    if fold and not g.folded:                          # no place to fold it: the plain row
        c, g = _placed(f, expand, depth, title, False)
    return c, g


def _placed(f, expand: Sequence[str], depth: int, title: str | None, fold: bool
            ) -> tuple[Circuit, Geometry]:
    if isinstance(f, CompiledModel):
        prog = f.programs["step"]
        pn, sn = list(f.param_names), list(f.state_names)
        names = f.arg_names.get("step", pn + sn + ["x", "y"])
        kinds = ["parameter"] * len(pn) + ["state"] * len(sn) + ["data"] * (len(prog.inputs) - len(pn) - len(sn))
        okinds = ["parameter"] * len(pn) + ["state"] * len(sn)
        if len(okinds) != len(prog.outputs) or len(kinds) != len(prog.inputs) or len(names) != len(kinds):
            names, kinds, onames, okinds = None, None, None, None
        else:
            onames = [n.replace("/", "_") + "'" for n in pn + sn]
        c = circuit(prog, title or f"training step of {f.model.name}", names, kinds, onames, okinds,
                    _model_root(f.model), expand, depth, fold=fold)
    elif isinstance(f, Diagram):
        prog = schedule(f)
        c = circuit(prog, title or getattr(f, "name", "diagram"), _names(len(prog.inputs), "x"), None,
                    _names(len(prog.outputs), "y"), None, "", expand, depth, parameter_names(f), fold)
    elif isinstance(f, Program):
        c = circuit(f, title or f.name, None, None, None, None, "", expand, depth, fold=fold)
    else:
        raise TypeError(f"draw: f must be a Diagram, a CompiledModel or a Program, got {type(f).__name__}")
    return c, layout.layout(c, fold=fold)

