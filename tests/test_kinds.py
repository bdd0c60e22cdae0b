"""Primitive kinds (``circuitgrad.primitives.Kind``): every primitive's kind is a member; a kind is still the
string it was (``op.kind == "elementwise"``, dicts keyed by name), and it prints, formats and reprs as that
string on every Python the package supports, so generated code and messages do not change."""
from __future__ import annotations

import enum

import pytest

from circuitgrad import primitives as P
from circuitgrad.primitives import KINDS, Kind

NAMES = ("source", "copy", "elementwise", "rowwise", "view", "gather", "contraction", "reduce")


def test_the_kinds_are_the_enum_and_kinds_is_derived_from_it():
    assert tuple(Kind) == tuple(Kind(n) for n in NAMES) and [k.value for k in Kind] == list(NAMES)
    assert list(KINDS) == list(Kind) and all(KINDS[k] == k.description and k.description for k in Kind)
    assert issubclass(Kind, str) and issubclass(Kind, enum.Enum)


@pytest.mark.parametrize("cls", P.PRIMITIVES, ids=lambda c: c.__name__)
def test_every_primitives_kind_is_a_member(cls):
    assert isinstance(cls.kind, Kind) and cls.kind in Kind
    assert cls.kind in KINDS and cls.kind.value in KINDS        # by member and by name


def test_string_comparisons_and_lookups_still_hold():
    assert P.Add.kind == "elementwise" and "elementwise" == P.Add.kind and P.Add.kind != "view"
    assert P.MatMul.kind in ("contraction", "reduce") and P.Reshape.kind not in ("source", "copy")
    assert {"view": 1}[P.Transpose.kind] == 1 and {P.Transpose.kind: 1}["view"] == 1
    assert hash(P.SumTo.kind) == hash("reduce") and Kind("rowwise") is P.Softmax.kind
    assert sorted({P.Copy.kind, "view", P.Parameter.kind}) == ["copy", "source", "view"]


def test_formatting_gives_the_plain_value():
    k = P.Softmax.kind
    assert (str(k), f"{k}", f"{k:>9}", "%s" % k, format(k), repr(k)) == (
        "rowwise", "rowwise", "  rowwise", "rowwise", "rowwise", "'rowwise'")
    assert f"{[k]}" == "['rowwise']" and "-".join([k, P.Add.kind]) == "rowwise-elementwise"
    assert k + "_kernel" == "rowwise_kernel" and type(k + "") is str


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match=r"^'attention' is not a valid Kind$"):
        Kind("attention")
