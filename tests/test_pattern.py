"""``circuitgrad/pattern.py``: patterns over a program's producer tree, the matcher of the rewriters."""
from __future__ import annotations

import numpy as np

import circuitgrad as cg
from circuitgrad import ops
from circuitgrad import primitives as P
from circuitgrad.pattern import Graph, Pat, Rules, X, match, read_counts
from circuitgrad.schedule import schedule

T = cg.NdArrayType((2, 3), cg.float32)


def _program(f, n=1):
    return schedule(cg.trace(f, [T] * n, name="f"), "f")


def _at(p, cls):
    return next(a for a in p.instrs if isinstance(a.op, cls))


def test_a_pattern_binds_the_instructions_and_variables_it_matched():
    p = _program(lambda x: -(x * 3.0))
    neg = _at(p, P.Neg)
    b = match(Pat(P.Neg, Pat(P.Scale, X("x"), name="s")), neg, Graph.of(p))
    assert b is not None and b["s"] is _at(p, P.Scale) and b["x"] == p.inputs[0]
    assert match(Pat(P.Neg, Pat(P.Mul)), neg, Graph.of(p)) is None          # another producer
    assert match(Pat(P.Add), neg, Graph.of(p)) is None                      # another instruction
    assert match(Pat(P.Neg, Pat(P.Scale)), neg, Graph.of(p), args=[p.inputs[0]]) is None   # an input has none


def test_once_counts_every_read_and_the_outputs():
    def both(x):
        s = x * 3.0
        return -s, s                                       # the Scale is read by the Neg and is an output
    shared = _program(both)
    alone = _program(lambda x: -(x * 3.0))
    pat = Pat(P.Neg, Pat(P.Scale, once=True))
    assert match(pat, _at(alone, P.Neg), Graph.of(alone)) is not None
    assert len([a for a in shared.instrs if isinstance(a.op, P.Scale)]) == 1
    assert read_counts(shared)[_at(shared, P.Scale).results[0]] == 2
    assert match(pat, _at(shared, P.Neg), Graph.of(shared)) is None
    assert read_counts(alone)[alone.outputs[0]] == 1


def test_commute_tries_the_swapped_arguments_and_binds_the_matching_order():
    p = _program(lambda x, y: ops.exp(x) + y, 2)
    add, g = _at(p, P.Add), Graph.of(p)
    straight = Pat(P.Add, X("y"), Pat(P.Exp, X("x")))
    assert match(straight, add, g) is None
    b = match(Pat(P.Add, X("y"), Pat(P.Exp, X("x")), commute=True), add, g)
    assert b == {"y": p.inputs[1], "x": p.inputs[0]}


def test_when_guards_a_match_and_rules_take_the_first_that_acts():
    p = _program(lambda x: x * 1.0 + x * 2.0)
    g = Graph.of(p)
    scales = [a for a in p.instrs if isinstance(a.op, P.Scale)]
    unit = Pat(P.Scale, X("x"), when=lambda a: a.op.c == 1.0)
    assert [match(unit, a, g) is not None for a in scales] == [c == 1.0 for c in (a.op.c for a in scales)]
    rules = Rules([(Pat(P.Scale), lambda a, b: None),                  # declines: the next rule is tried
                   (unit, lambda a, b: ("unit", b["x"])),
                   (Pat(P.Scale), lambda a, b: ("other", a.op.c))])
    assert sorted(rules.first(a, g) for a in scales) == [("other", 2.0), ("unit", p.inputs[0])]
    assert rules.first(_at(p, P.Add), g) is None


def test_the_simplifier_and_the_generator_use_the_tables():
    """The rewrites still happen through the shared patterns: ``-(x·c)`` becomes one Scale, ``x·1`` vanishes."""
    from circuitgrad.rewrite import simplify
    p = simplify(_program(lambda x: -(x * 3.0) + x * 1.0))
    assert [type(a.op).__name__ for a in p.instrs] == ["Scale", "Add"]
    assert np.isclose(_at(p, P.Scale).op.c, -3.0)
