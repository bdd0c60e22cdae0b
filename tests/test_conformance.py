"""Every rule table against the closed primitive set: nothing drifts silently."""
from __future__ import annotations

import importlib

import pytest

from circuitgrad import primitives as P
from circuitgrad.codegen import NUMPY_RULES
from circuitgrad.fixedpoint import FIXED_RULES
from circuitgrad.interpret import FLOAT_RULES
from circuitgrad.optic import REVERSE_RULES
from circuitgrad.targets import TARGETS


@pytest.mark.parametrize("name,table,exempt", [
    ("reverse derivative", REVERSE_RULES, set()),
    ("float interpreter", FLOAT_RULES, set()),
    ("fixed-point interpreter", FIXED_RULES, set()),
    ("numpy backend", NUMPY_RULES, {P.Parameter}),      # parameters are unbound before code generation
])
def test_core_tables_cover_every_primitive(name, table, exempt):
    missing = sorted(c.__name__ for c in set(P.PRIMITIVES) - set(table) - exempt)
    assert missing == [], f"{name} lacks rules for {missing}"
    assert set(table) <= set(P.PRIMITIVES), f"{name} has rules for unknown primitives"


@pytest.mark.parametrize("name", list(TARGETS))
def test_target_rule_tables(name):
    """Every target of the registry: the primitives it lacks are exactly those it declares UNSUPPORTED (with a
    reason); parameters are unbound before any target runs a program."""
    t = TARGETS[name]
    rules, unsupported = t.rule_table(), t.unsupported()
    missing = sorted(c.__name__ for c in set(P.PRIMITIVES) - set(rules) - {P.Parameter})
    declared = sorted(c.__name__ for c in unsupported)
    assert missing == declared, f"target {name} lacks rules for {missing}; declared unsupported: {declared}"
    assert all(isinstance(why, str) and why for why in unsupported.values())
    assert set(rules) <= set(P.PRIMITIVES)


def test_registry_names_every_backend_package():
    """Each target's modules import, its cost module has ``estimate``, its command ``add_parser``, and every
    package under backends/ is some target's."""
    import os

    import circuitgrad.backends as B
    for t in TARGETS.values():
        assert callable(t.module("cost").estimate)
        assert t.command is None or callable(t.module("command").add_parser)
    root = os.path.dirname(B.__file__)
    packages = {f"circuitgrad.backends.{d}" for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "__init__.py"))}
    assert packages == {t.package for t in TARGETS.values() if t.package.startswith("circuitgrad.backends.")}


def test_every_primitive_states_its_facts():
    """A primitive's facts live on its class: every pass reads them there (KINDS, linear, commutative, ...)."""
    for c in P.PRIMITIVES:
        assert getattr(c, "kind", None) in P.KINDS, f"{c.__name__} has no kind among {sorted(P.KINDS)}"
        for flag in ("linear", "commutative", "positional", "pure"):
            assert isinstance(getattr(c, flag), bool), f"{c.__name__}.{flag} is not a bool"
        assert not c.commutative or issubclass(c, P.Binary), f"{c.__name__}: commutative but not binary"
        assert not c.positional or c.kind == "elementwise", f"{c.__name__}: positional but {c.kind}"


def _of_kind(kind):
    return {c for c in P.PRIMITIVES if c.kind == kind}


def _names(cs):
    return sorted(c.__name__ for c in cs)


@pytest.mark.parametrize("kind, table", [
    ("elementwise", "circuitgrad.backends.gpu.cuda:CUDA_EXPRESSIONS"),
    ("rowwise", "circuitgrad.backends.gpu.row:ROW_KERNELS"),
    ("gather", "circuitgrad.backends.gpu.gather:GATHER_KERNELS"),
    ("view", "circuitgrad.backends.gpu.runtime:VIEWS"),
])
def test_gpu_kernel_tables_match_the_kinds(kind, table):
    """Each kind the GPU plan launches has its own table of kernels: a primitive of that kind without an entry has
    no kernel, and an entry for a primitive of another kind would never be launched."""
    mod, name = table.split(":")
    have = set(getattr(importlib.import_module(mod), name))
    want = _of_kind(kind)
    assert have == want, (f"{table}: missing {_names(want - have)}, "
                          f"not of kind {kind!r}: {_names(have - want)}")


def test_gpu_rules_name_how_each_primitive_runs():
    from circuitgrad.backends import gpu
    assert all(v is not None for v in gpu.GPU_RULES.values()), "a GPU rule is None: the table would pass any key"


@pytest.mark.parametrize("table, exempt", [
    ("circuitgrad.costmodel.work:WORK_RULES", set()),
    ("circuitgrad.backends.zk.circuits.lower:ZK_RULES", {P.Parameter, P.LogSumExp}),
])
def test_other_tables_cover_every_primitive(table, exempt):
    mod, name = table.split(":")
    rules = getattr(importlib.import_module(mod), name)
    missing = _names(set(P.PRIMITIVES) - set(rules) - exempt)
    assert missing == [], f"{table} lacks rules for {missing}"
    assert set(rules) <= set(P.PRIMITIVES), f"{table} has rules for unknown primitives"


def test_partial_tables_hold_only_what_they_can():
    """In-place NumPy forms exist only for elementwise primitives, and the ZK special-function rules do not
    silently override the core lowering rules."""
    from circuitgrad import codegen
    from circuitgrad.backends.zk.circuits import lower, special
    assert set(codegen._INPLACE) <= _of_kind("elementwise"), _names(set(codegen._INPLACE) - _of_kind("elementwise"))
    both = set(lower.CORE_RULES) & set(special.SPECIAL_RULES)
    assert not both, f"the ZK lowering has two rules for {_names(both)}"


def test_a_primitive_missing_from_a_table_is_named(monkeypatch):
    """The checks above fail, naming the primitive and the table, when a primitive is registered without its
    rules (what ``docs/ARCHITECTURE.md``, "A new primitive", lists)."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Frobnicate(P.Primitive):
        kind = "elementwise"
    monkeypatch.setattr(P, "PRIMITIVES", tuple(P.PRIMITIVES) + (Frobnicate,))
    with pytest.raises(AssertionError) as e:
        test_core_tables_cover_every_primitive("reverse derivative", REVERSE_RULES, set())
    assert "reverse derivative lacks rules for ['Frobnicate']" in str(e.value)
    for name in TARGETS:
        with pytest.raises(AssertionError) as e:
            test_target_rule_tables(name)
        assert f"target {name} lacks rules for ['Frobnicate'" in str(e.value)
    with pytest.raises(AssertionError) as e:
        test_other_tables_cover_every_primitive("circuitgrad.costmodel.work:WORK_RULES", set())
    assert "Frobnicate" in str(e.value)
