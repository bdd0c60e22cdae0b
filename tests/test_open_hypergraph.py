"""The core's own finite functions, open hypergraphs and functors (no extra needed).

Two groups: laws and errors that need nothing, and a table of operations checked against the
``open-hypergraphs`` package (0.1.3), the reference the core's implementation follows: every operation must
give the very same tables (the schedule and the generated code depend on wire and operation numbering), on
random inputs and on the reverse derivatives of real models.
"""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.finite_function import DTYPE, FiniteFunction as FF, IndexedCoproduct as IC, segmented_arange
from circuitgrad.functor import Optic
from circuitgrad.open_hypergraph import Hypergraph as HG, OpenHypergraph as OH
import _peers


def ff(target, xs) -> FF:
    return FF(target, np.asarray(xs, dtype=DTYPE))


# ----------------------------------------------------------------- no reference needed
def test_finite_function_composes_tensors_and_copairs():
    f, g = ff(3, [0, 2]), ff(2, [1, 0, 1])
    assert (f >> g).table.tolist() == [1, 1] and (f >> g).type == (2, 2)
    assert (f @ g).table.tolist() == [0, 2, 4, 3, 4] and (f @ g).target == 5
    assert (f + ff(3, [1])).table.tolist() == [0, 2, 1]
    assert FF.twist(2, 3).table.tolist() == [3, 4, 0, 1, 2]
    assert FF.transpose(2, 3).table.tolist() == [0, 3, 1, 4, 2, 5]
    assert segmented_arange(np.array([2, 3, 0, 1], dtype=DTYPE)).tolist() == [0, 1, 0, 1, 2, 0]


@pytest.mark.parametrize("make,msg", [
    (lambda: ff(2, [0, 2]), "table max value must be less than target 2 but was 2"),
    (lambda: FF(3, np.zeros(2, np.int64)), "table.dtype must be uint32 for a finite target, not int64"),
    (lambda: FF(3, np.zeros((2, 1), DTYPE)), "table must be a 1D array, but had shape (2, 1)"),
    (lambda: ff(3, [0]) >> ff(2, [0]), "cannot compose finite functions (1, 3) >> (1, 2): 3 != 1"),
    (lambda: ff(3, [0]).coequalizer(ff(4, [0])),
     "cannot coequalize finite functions of different types: (1, 3) != (1, 4)"),
    (lambda: IC(FF(None, np.array([2], DTYPE)), ff(3, [0])),
     "an indexed coproduct's segments sum to 2 but it has 1 values"),
    (lambda: OH(ff(2, [0]), ff(3, [0]), HG.discrete(ff(1, [0, 0]), FF.initial(1))),
     "an open hypergraph's boundary must land in its 2 wires, not 2 and 3"),
])
def test_malformed_arrays_are_refused_with_the_reason(make, msg):
    with pytest.raises(ValueError) as e:
        make()
    assert str(e.value) == msg


def test_coequalizer_identifies_exactly_the_glued_wires():
    q = ff(5, [0, 1, 3]).coequalizer(ff(5, [1, 2, 3]))
    assert q.target == 3 and q.table.tolist() == [0, 0, 0, 1, 2]
    with pytest.raises(ValueError, match="is not constant on the classes"):
        q.coequalizer_universal(ff(9, [0, 1, 2, 3, 4]))


def test_identity_is_a_unit_of_composition_up_to_the_same_tables():
    f = nn.dense(4, 3, 2)
    i = cg.identity(f.source_types)
    for g in (i >> f, f >> cg.identity(f.target_types)):
        assert g.source_types == f.source_types and g.target_types == f.target_types
        assert g.H.X == f.H.X and g.H.W == f.H.W
        assert np.array_equal(np.sort(g.H.x.table), np.sort(f.H.x.table))


# ------------------------------------------------------------ against open-hypergraphs
def _random_ff(rng, n, target) -> FF:
    return FF(target, rng.integers(0, max(target, 1), n).astype(DTYPE) if target else np.zeros(0, DTYPE))


def _random_oh(rng, sigma0=4, sigma1=3, W=None, source=None) -> OH:
    """A random open hypergraph; ``source``: the labels its source wires must have."""
    W = int(rng.integers(1, 12)) if W is None else W
    w = _random_ff(rng, W, sigma0)
    X = int(rng.integers(0, 6))
    ar, coar = (rng.integers(0, 4, X).astype(DTYPE) for _ in range(2))
    H = HG(IC(FF(None, ar), _random_ff(rng, int(ar.sum()), W)), IC(FF(None, coar), _random_ff(rng, int(coar.sum()), W)),
           w, _random_ff(rng, X, sigma1))
    if source is not None:        # prepend fresh wires with the required labels as the source
        n = len(source)
        H = HG(H.s.map_values(FF.inj1(n, W)), H.t.map_values(FF.inj1(n, W)), source + w, H.x)
        s, W = FF.inj0(n, W), n + W
    else:
        s = _random_ff(rng, int(rng.integers(0, 4)), W)
    return OH(s, _random_ff(rng, int(rng.integers(0, 4)), W), H)


def _ref(x, r):
    """The reference package's object with the same tables as ``x``."""
    if isinstance(x, FF):
        return r.FiniteFunction(x.target, x.table.copy())
    if isinstance(x, IC):
        return r.IndexedCoproduct(_ref(x.sources, r), _ref(x.values, r))
    if isinstance(x, HG):
        return r.Hypergraph(_ref(x.s, r), _ref(x.t, r), _ref(x.w, r), _ref(x.x, r))
    return r.OpenHypergraph(_ref(x.s, r), _ref(x.t, r), _ref(x.H, r))


def _tables(x) -> list:
    """Every table and target of ``x`` (ours or the reference's), in a fixed order."""
    if hasattr(x, "H"):
        return _tables(x.s) + _tables(x.t) + _tables(x.H)
    if hasattr(x, "w") and hasattr(x, "x"):
        return _tables(x.s) + _tables(x.t) + _tables(x.w) + _tables(x.x)
    if hasattr(x, "sources"):
        return _tables(x.sources) + _tables(x.values)
    return [(x.target, x.table.dtype.str, x.table.tolist())]


def _same(ours, theirs) -> None:
    assert _tables(ours) == _tables(theirs)


OPERATIONS = {
    "compose": lambda rng, r: (lambda f: (lambda g: ((f >> g), _ref(f, r) >> _ref(g, r)))(
        _random_oh(rng, source=f.target)))(_random_oh(rng)),
    "tensor": lambda rng, r: (lambda f, g: (f @ g, _ref(f, r) @ _ref(g, r)))(_random_oh(rng), _random_oh(rng)),
    "tensor_list": lambda rng, r: (lambda ds: (OH.tensor_list(ds), r.OpenHypergraph.tensor_list(
        [_ref(d, r) for d in ds])))([_random_oh(rng) for _ in range(int(rng.integers(1, 4)))]),
    "dagger": lambda rng, r: (lambda f: (f.dagger(), _ref(f, r).dagger()))(_random_oh(rng)),
    "twist": lambda rng, r: (lambda a, b: (OH.twist(a, b, FF.initial(3)), r.OpenHypergraph.twist(
        _ref(a, r), _ref(b, r), r.FiniteFunction.initial(3))))(_random_ff(rng, 2, 4), _random_ff(rng, 3, 4)),
    "permute": lambda rng, r: (lambda f: (lambda w, x: (f.permute(w, x), _ref(f, r).permute(_ref(w, r), _ref(x, r))))(
        FF(f.H.W, rng.permutation(f.H.W).astype(DTYPE)), FF(f.H.X, rng.permutation(f.H.X).astype(DTYPE))))(
        _random_oh(rng)),
    "coequalizer": lambda rng, r: (lambda a, b: (a.coequalizer(b), _ref(a, r).coequalizer(_ref(b, r))))(
        _random_ff(rng, 6, 9), _random_ff(rng, 6, 9)),
    "injections": lambda rng, r: (lambda s: (lambda a: (s.injections(a), _ref(s, r).injections(_ref(a, r))))(
        _random_ff(rng, 7, 5)))(FF(None, rng.integers(0, 4, 5).astype(DTYPE))),
    "map_indexes": lambda rng, r: (lambda c: (lambda x: (c.map_indexes(x), _ref(c, r).map_indexes(_ref(x, r))))(
        _random_ff(rng, 6, 4)))(IC(FF(None, np.array([2, 0, 3, 1], DTYPE)), _random_ff(rng, 6, 8))),
    "flatmap": lambda rng, r: (lambda x, y: (x.flatmap(y), _ref(x, r).flatmap(_ref(y, r))))(
        IC(FF(None, np.array([2, 0, 3], DTYPE)), _random_ff(rng, 5, 5)),
        IC(FF(None, np.array([1, 2, 0, 1, 3], DTYPE)), _random_ff(rng, 7, 4))),
    "transpose": lambda rng, r: (FF.transpose(3, 4), r.FiniteFunction.transpose(3, 4)),
    "coequalize_vertices": lambda rng, r: (lambda f: (lambda q: (f.H.coequalize_vertices(q), _ref(f.H, r)
        .coequalize_vertices(_ref(q, r))))(FF(f.H.W, np.arange(f.H.W, dtype=DTYPE))))(_random_oh(rng)),
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
@pytest.mark.parametrize("seed", range(20))
def test_operation_gives_the_reference_tables(name, seed):
    r = _peers.open_hypergraphs()
    ours, theirs = OPERATIONS[name](np.random.default_rng(seed), r)
    _same(ours, theirs)


def _reference_optic(r):
    """circuitgrad's reverse derivative written on the reference package's Optic, with the same rules."""
    from circuitgrad import optic as O
    from circuitgrad.diagram import labels

    class Pick(r.FrobeniusFunctor):
        def __init__(self, pick):
            self.pick = pick

        def map_objects(self, objects):
            return r.IndexedCoproduct(r.FiniteFunction(None, np.ones(len(objects), DTYPE)), objects)

        def map_operations(self, x, sources, targets):
            return _ref(O._tensor([getattr(O.rule_for(lab), self.pick) for lab in x.table]), r)

    class Ref(r.Optic):
        F, R = Pick("fwd"), Pick("rev")

        def residual(self, x, A, B):
            rs = [O.rule_for(lab).residual for lab in x.table]
            return _ref(IC(FF(None, np.array([len(q) for q in rs], DTYPE)), labels(t for q in rs for t in q)), r)
    return Ref()


@pytest.mark.parametrize("model", [
    lambda: nn.dense(4, 3, 2) >> nn.relu(4, 2),
    lambda: cg.sequential([nn.dense(8, 5, 6), nn.relu(8, 6), nn.dense(8, 6, 3)]),
    lambda: nn.transformer_block(2, 4, 8, heads=2),
    lambda: nn.gpt(2, 4, 11, d=8, heads=2, layers=2),
])
def test_reverse_derivative_is_the_references_functor(model):
    """The lens of real models: our Optic and the reference's, with the same rules, give the same diagram."""
    r = _peers.open_hypergraphs()
    from circuitgrad.diagram import monogamous
    from circuitgrad.optic import lens, _OPTIC
    f = model()
    g = monogamous(f)
    ref = _reference_optic(r)
    theirs = ref.adapt(ref.map_arrow(_ref(g, r)), _ref(g.source, r), _ref(g.target, r))
    _same(lens(f), theirs)
    assert isinstance(_OPTIC, Optic)
