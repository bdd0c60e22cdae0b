"""The public surface: ``circuitgrad.__all__`` holds what a user calls; internals stay in their modules."""
from __future__ import annotations

import os
import re

import circuitgrad as cg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: importable from their modules, not from the package root
INTERNALS = {"Primitive": "primitives", "PRIMITIVES": "primitives", "monogamous": "diagram", "blas": "blas",
             "unbind_parameters": "diagram", "lens": "optic", "Program": "schedule", "Apply": "schedule",
             "retype": "schedule", "Var": "tracing"}


def test_every_exported_name_exists_and_no_internal_is_exported():
    assert [n for n in cg.__all__ if not hasattr(cg, n)] == []
    assert len(set(cg.__all__)) == len(cg.__all__)
    assert sorted(set(INTERNALS) & set(cg.__all__)) == []


def test_internals_stay_importable_from_their_modules():
    import importlib
    for name, module in INTERNALS.items():
        m = importlib.import_module(f"circuitgrad.{module}")
        assert m.__name__ == f"circuitgrad.{name}" if name == module else hasattr(m, name), (name, module)


def test_the_readme_and_the_examples_call_only_the_public_surface():
    """What a user is shown (``cg.name`` in the README's code and in the examples) is exported."""
    texts = [open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()]
    texts += [open(os.path.join(ROOT, "examples", f), encoding="utf-8").read()
              for f in sorted(os.listdir(os.path.join(ROOT, "examples"))) if f.endswith(".py")]
    used = {m for t in texts for m in re.findall(r"\bcg\.([A-Za-z_]\w*)", t)}
    assert len(used) >= 5, used
    assert sorted(used - set(cg.__all__) - {"__version__"}) == []


def test_no_code_reads_an_internal_through_the_package_root():
    """``cg.retype`` or ``cg.blas`` works only while some other import has loaded it: code names the module."""
    import ast
    import glob
    bad = []
    for f in sorted(glob.glob(os.path.join(ROOT, "**", "*.py"), recursive=True)):
        if f"{os.sep}." in f or f"{os.sep}build{os.sep}" in f:
            continue
        tree = ast.parse(open(f, encoding="utf-8").read())
        roots = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
                 if a.name == "circuitgrad"}
        bad += [f"{os.path.relpath(f, ROOT)}:{n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in roots
                and n.attr in INTERNALS]
    assert bad == []
