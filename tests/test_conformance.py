"""Every rule table against the closed primitive set: nothing drifts silently."""
from __future__ import annotations

import importlib

import pytest

from circuitgrad import primitives as P
from circuitgrad.codegen import NUMPY_RULES
from circuitgrad.fixedpoint import FIXED_RULES
from circuitgrad.interpret import FLOAT_RULES
from circuitgrad.optic import RULES


@pytest.mark.parametrize("name,table,exempt", [
    ("reverse derivative", RULES, set()),
    ("float interpreter", FLOAT_RULES, set()),
    ("fixed-point interpreter", FIXED_RULES, set()),
    ("numpy backend", NUMPY_RULES, {P.Parameter}),      # parameters are unbound before code generation
])
def test_core_tables_cover_every_primitive(name, table, exempt):
    missing = sorted(c.__name__ for c in set(P.PRIMITIVES) - set(table) - exempt)
    assert missing == [], f"{name} lacks rules for {missing}"
    assert set(table) <= set(P.PRIMITIVES), f"{name} has rules for unknown primitives"


@pytest.mark.parametrize("backend", ["gpu", "fpga", "zk"])
def test_backend_rule_tables(backend):
    """Lists the primitives each backend lacks; only the ones it declares UNSUPPORTED (with a reason) may be."""
    mod = importlib.import_module(f"circuitgrad.backends.{backend}")
    missing = sorted(c.__name__ for c in set(P.PRIMITIVES) - set(mod.RULES) - {P.Parameter})
    if not mod.RULES:
        pytest.skip(f"{backend} backend not implemented yet: lacks all of {missing}")
    declared = sorted(c.__name__ for c in mod.UNSUPPORTED)
    assert missing == declared, f"{backend} backend lacks rules for {missing}; declared unsupported: {declared}"
    assert all(isinstance(why, str) and why for why in mod.UNSUPPORTED.values())
    assert set(mod.RULES) <= set(P.PRIMITIVES)
