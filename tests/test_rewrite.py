"""The peephole rewrites of :mod:`circuitgrad.rewrite`: each one fires where it should, nowhere else, and
the program keeps its values (float and fixed point)."""
import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import ops
from circuitgrad import primitives as P
from circuitgrad.rewrite import simplify
from circuitgrad.schedule import Apply, Program, retype

T = cg.NdArrayType((3, 4))
DT = cg.fixed(16, 8)


def _program(f, n: int = 2, reverse: bool = False) -> Program:
    d = cg.trace(f, [T] * n, name="f")
    return cg.schedule(cg.rdiff(d) if reverse else d)


def _same_values(p: Program, q: Program, seed: int = 0, fixed: Program | None = None) -> None:
    """Equal float values; equal fixed-point values, or ``q``'s equal to those of ``fixed`` where the rewrite
    rounds differently (``−(x·c)`` → ``x·(−c)``: floor rounding is not odd, so its semantics are the
    rewritten program's)."""
    rng = np.random.default_rng(seed)
    xs = [rng.uniform(-1, 1, p.types[v].shape) for v in p.inputs]
    for a, b in zip(cg.run(p, xs), cg.run(q, xs)):
        np.testing.assert_array_equal(a, b)
    pf, qf = retype(fixed or p, DT), retype(q, DT)
    raw = [cg.quantize(x, DT) for x in xs]
    for a, b in zip(cg.run_fixed(pf, raw), cg.run_fixed(qf, raw)):
        np.testing.assert_array_equal(a, b)


CSE_CASES = [
    # (name, function, reverse?, primitive counted, count before, count after)
    ("square's reverse: dy·x twice", lambda x: (x * x,), True, "Mul", 2, 1),
    ("x·y and y·x", lambda x, y: (x * y + y * x,), False, "Mul", 2, 1),
    ("x+y and y+x", lambda x, y: ((x + y) * (y + x),), False, "Add", 2, 1),
    ("x/y and y/x stay", lambda x, y: (x / y + y / x,), False, "Div", 2, 2),
    ("x−y and y−x stay", lambda x, y: ((x - y) * (y - x),), False, "Neg", 2, 2),
    ("tanh(x) twice", lambda x, y: (ops.tanh(x) + ops.tanh(x),), False, "Tanh", 2, 1),
    ("x·0.5 and x·0.25 stay", lambda x, y: (ops.scale(x, 0.5) + ops.scale(x, 0.25),), False, "Scale", 2, 2),
]


@pytest.mark.parametrize("name,f,reverse,prim,before,after", CSE_CASES, ids=[c[0] for c in CSE_CASES])
def test_common_subexpressions(name, f, reverse, prim, before, after):
    n = f.__code__.co_argcount
    p = _program(f, n, reverse)
    q = simplify(p)
    assert p.count().get(prim, 0) == before
    assert q.count().get(prim, 0) == after
    _same_values(p, q)


def test_parameters_of_one_type_are_never_merged():
    a, b = P.Parameter(T, "a"), P.Parameter(T, "b")
    p = Program([T, T, T], [], [2], [Apply(a, (), (0,)), Apply(b, (), (1,)), Apply(P.Add(T), (0, 1), (2,))])
    assert simplify(p).count() == {"Parameter": 2, "Add": 1}


def test_equal_constants_are_merged():
    p = _program(lambda x: (ops.add(x, 2.0) * ops.add(x, 2.0),), 1)
    assert p.count()["Constant"] == 2
    q = simplify(p)
    assert q.count()["Constant"] == 1 and q.count()["Add"] == 1
    _same_values(p, q)


def test_a_duplicate_of_a_scale_folded_into_a_negation_keeps_its_value():
    """``s = x·c``, ``t = x·c`` (merged into ``s``), ``−s``: folding ``−s`` into ``x·(−c)`` must not take
    ``t``'s value with it (``s`` now has two uses, so the fold is off)."""
    sc, neg, add = P.Scale(T, 0.5), P.Neg(T), P.Add(T)
    p = Program([T] * 5, [0], [4], [Apply(sc, (0,), (1,)), Apply(sc, (0,), (2,)), Apply(neg, (1,), (3,)),
                                   Apply(add, (3, 2), (4,))])
    q = simplify(p)
    assert q.count() == {"Scale": 1, "Neg": 1, "Add": 1}
    _same_values(p, q)


def test_a_scale_folded_into_a_negation_is_not_reused_by_a_later_duplicate():
    sc, neg, add = P.Scale(T, 0.5), P.Neg(T), P.Add(T)
    p = Program([T] * 5, [0], [4], [Apply(sc, (0,), (1,)), Apply(neg, (1,), (2,)), Apply(sc, (0,), (3,)),
                                   Apply(add, (2, 3), (4,))])
    q = simplify(p)
    assert sorted(a.op.c for a in q.instrs if isinstance(a.op, P.Scale)) == [-0.5, 0.5]
    ref = Program([T] * 4, [0], [3], [Apply(P.Scale(T, -0.5), (0,), (1,)), Apply(sc, (0,), (2,)),
                                      Apply(add, (1, 2), (3,))])
    _same_values(p, q, fixed=ref)


@pytest.mark.parametrize("name,f,count,fixed", [
    ("x + 0", lambda x: (ops.add(x, 0.0),), {}, None),
    ("−(−x)", lambda x: (-(-x),), {}, None),
    ("−(x·c)", lambda x: (-ops.scale(x, 0.5),), {"Scale": 1}, lambda x: (ops.scale(x, -0.5),)),
    ("x·1", lambda x: (ops.scale(x, 1.0),), {}, None),
])
def test_peepholes(name, f, count, fixed):
    p = _program(f, 1)
    q = simplify(p)
    assert q.count() == count
    _same_values(p, q, fixed=fixed and _program(fixed, 1))


# ------------------------------------------------ contraction (fixed point)
def _fixed(f, shapes) -> Program:
    return simplify(retype(cg.schedule(cg.trace(f, [cg.NdArrayType(s) for s in shapes], name="f")), DT))


@pytest.mark.parametrize("shape,contraction", [((3, 4), "BatchMatMul"), ((2, 3, 5), "BatchMatMul"), ((6,), "MatMul")])
def test_a_product_summed_along_the_last_axis_is_one_rounded_contraction(shape, contraction, rng):
    p = _fixed(lambda x, y: (ops.sum(x * y, -1),), [shape, shape])
    assert "Mul" not in p.count() and "SumTo" not in p.count() and p.count()[contraction] == 1
    x, y = (rng.integers(-3 * DT.one, 3 * DT.one, size=shape) for _ in range(2))
    (got,) = cg.run_fixed(p, [x, y])
    exact = (x * y).sum(-1)                                   # the products' exact sum, then one rounding
    assert np.array_equal(got.reshape(exact.shape), (exact + (1 << (DT.frac - 1))) >> DT.frac)


@pytest.mark.parametrize("name,f,shapes", [
    ("float", None, None),
    ("product used twice", lambda x, y: (ops.sum(x * y, -1), x * y), [(3, 4), (3, 4)]),
    ("sum over the first axis", lambda x, y: (ops.sum(x * y, 0),), [(3, 4), (3, 4)]),
])
def test_no_contraction_where_the_pattern_does_not_hold(name, f, shapes):
    if name == "float":
        T2 = cg.NdArrayType((3, 4))
        p = simplify(cg.schedule(cg.trace(lambda x, y: (ops.sum(x * y, -1),), [T2, T2])))
    else:
        p = _fixed(f, shapes)
    assert p.count()["Mul"] == 1 and "BatchMatMul" not in p.count()
