"""Building diagrams: composition, tensor, tracing, normal forms; errors asserted exactly."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad import primitives as P
from circuitgrad.diagram import FF, monogamous, OH, unbind_parameters
from conftest import evaluate

f32 = cg.float32
T23 = cg.NdArrayType((2, 3))


def test_compose_shape_mismatch_names_both_operations_and_types():
    with pytest.raises(cg.TypeMismatch) as e:
        nn.dense(8, 4, 16) >> nn.dense(8, 3, 2)
    assert str(e.value) == ("cannot compose dense(8,4,16) >> dense(8,3,2): dense(8,4,16) outputs "
                            "(float32[8, 16]) but dense(8,3,2) expects (float32[8, 3])")


def test_compose_dtype_mismatch():
    with pytest.raises(cg.TypeMismatch) as e:
        nn.dense(8, 4, 16, cg.float64) >> nn.relu(8, 16)
    assert str(e.value) == ("cannot compose dense(8,4,16) >> relu(8,16): dense(8,4,16) outputs "
                            "(float64[8, 16]) but relu(8,16) expects (float32[8, 16])")


def test_sequential_mismatch_names_position():
    with pytest.raises(cg.TypeMismatch) as e:
        cg.sequential([nn.relu(2, 3), nn.relu(2, 3), nn.sigmoid(2, 4)])
    assert str(e.value) == ("cannot compose relu(2,3) >> sigmoid(2,4) (positions 1, 2): relu(2,3) outputs "
                            "(float32[2, 3]) but sigmoid(2,4) expects (float32[2, 4])")


@pytest.mark.parametrize("fn,types,msg", [
    (lambda x, y: x @ y, [T23, cg.NdArrayType((4, 5))],
     "in bad: MatMul: inner dimensions differ (3 != 4) in (float32[2, 3], float32[4, 5])"),
    (lambda x, y: x + y, [T23, cg.NdArrayType((2, 3), cg.float64)],
     "in bad: Add: dtypes differ, got (float32[2, 3], float64[2, 3])"),
    (lambda x, y: x * y, [T23, cg.NdArrayType((4,))],
     "in bad: Mul: shapes do not broadcast, got (float32[2, 3], float32[4])"),
    (lambda x: ops.reshape(x, (4, 2)), [T23], "in bad: Reshape: cannot reshape float32[2, 3] to [4, 2]"),
])
def test_primitive_type_errors(fn, types, msg):
    with pytest.raises(cg.TypeMismatch) as e:
        cg.trace(fn, types, name="bad")
    assert str(e.value) == msg


def test_tensor_and_identity_types():
    d = nn.relu(2, 3) @ cg.identity([cg.NdArrayType((5,))])
    assert d.source_types == (T23, cg.NdArrayType((5,)))
    assert d.target_types == (T23, cg.NdArrayType((5,)))


def test_trace_broadcasts_and_numbers(rng):
    d = cg.trace(lambda x, b: 2.0 * (x + b) - 1.0, [cg.NdArrayType((2, 3), cg.float64),
                                                    cg.NdArrayType((3,), cg.float64)])
    x, b = rng.normal(size=(2, 3)), rng.normal(size=3)
    (y,) = evaluate(d, x, b)
    np.testing.assert_allclose(y, 2 * (x + b) - 1)


def test_monogamous_inserts_copies_and_discards():
    T = cg.NdArrayType((3,), cg.float64)
    d = cg.trace(lambda x, y: (x * x, x), [T, T])        # x used 3 times, y never
    m = monogamous(d)
    copies = [P.op_of(l) for l in m.H.x.table if isinstance(P.op_of(l), P.Copy)]
    assert sorted(c.n for c in copies) == [0, 3]
    cons = np.concatenate([m.H.s.values.table, m.t.table])
    assert np.all(np.bincount(cons, minlength=m.H.W) == 1)


def _two_producers():
    T = cg.NdArrayType((3,))
    d = cg.trace(lambda x: ops.neg(x), [T], name="neg")
    # glue the output wire onto the input wire: the input now has 2 producers (and a cycle)
    return cg.Diagram.of(OH(FF(d.H.W, np.array([0, 0], dtype=np.uint32)), d.t, d.H), "broken")


def test_ill_formed_diagram_rejected():
    with pytest.raises(cg.IllFormedDiagram) as e:
        cg.schedule(_two_producers())
    assert str(e.value) == ("broken: wire 0 of type float32[3] has 2 producers; a wire must be produced "
                            "exactly once (by an operation or as a source)")


def test_cycle_rejected():
    T = cg.NdArrayType((3,))
    d = cg.trace(lambda x: ops.neg(ops.sigmoid(x)), [T], name="loop")
    # feed the output back into the input: drop the source, identify output with input
    q = FF(d.H.W, np.array([0], dtype=np.uint32)).coequalizer(FF(d.H.W, d.t.table))
    H = d.H.coequalize_vertices(q)
    looped = cg.Diagram.of(OH(FF(H.W, np.zeros(0, np.uint32)), FF(H.W, np.zeros(0, np.uint32)), H), "loop")
    with pytest.raises(cg.IllFormedDiagram) as e:
        cg.schedule(looped)
    assert str(e.value).startswith("loop: the diagram has a cycle through operation ")


def test_unbind_parameters_order_and_types():
    d, ps = unbind_parameters(nn.dense(2, 3, 4))
    assert [p.label for p in ps] == ["W", "b"]
    assert d.source_types == (cg.NdArrayType((3, 4)), cg.NdArrayType((4,)), T23)


def test_running_unbound_parameter_is_an_error():
    with pytest.raises(cg.UnboundParameter) as e:
        cg.run(cg.schedule(nn.bias(2, 3)), [np.zeros((2, 3), np.float32)])
    assert str(e.value) == ("Parameter 'b' of type float32[3] has no value: bind parameters with "
                            "circuitgrad.compile_model or diagram.unbind_parameters before running")


@pytest.mark.parametrize("seed", range(5))
def test_coequalizer_is_the_connected_components_one(seed):
    """diagram.coequalizer (NumPy label propagation) numbers the classes exactly as FiniteFunction.coequalizer
    (SciPy's connected components, by each class's smallest wire), on random gluings of every size up to the
    cut-over."""
    from circuitgrad.diagram import DTYPE, SPARSE_ABOVE, coequalizer
    rng = np.random.default_rng(seed)
    for W, n in [(0, 0), (1, 0), (5, 0), (3, 3), *((int(rng.integers(1, 300)), int(rng.integers(0, 400)))
                                                     for _ in range(200)), (4000, SPARSE_ABOVE)]:
        a, b = (FF(W, rng.integers(0, W, n).astype(DTYPE)) for _ in range(2))
        want, got = a.coequalizer(b), coequalizer(a, b)
        assert (got.target, got.table.dtype) == (want.target, want.table.dtype)
        assert np.array_equal(got.table, want.table), (W, n)
    chain = FF(100, np.arange(99, dtype=DTYPE)), FF(100, np.arange(1, 100, dtype=DTYPE))   # one long class
    assert coequalizer(*chain).target == 1


def test_a_layer_built_twice_is_the_same_diagram_with_parameters_of_its_own():
    """nn layers are traced once per arguments and copied with fresh parameters: the copy has the wires and
    operations a new trace builds, and parameters no other layer shares."""
    from circuitgrad.diagram import fresh_parameters
    from circuitgrad.primitives import op_of, path_of
    a, b = nn.dense(8, 4, 3), nn.dense(8, 4, 3)
    traced = fresh_parameters(nn.dense.__wrapped__(8, 4, 3))       # the layer traced anew
    for d in (b, traced):
        for f in ("s", "t"):
            assert np.array_equal(getattr(a, f).table, getattr(d, f).table)
        assert np.array_equal(a.H.w.table, d.H.w.table)
        ops_a = [(type(op_of(l)).__name__, path_of(l)) for l in a.H.x.table]
        assert ops_a == [(type(op_of(l)).__name__, path_of(l)) for l in d.H.x.table]
    params = [op_of(l) for d in (a, b) for l in d.H.x.table if isinstance(op_of(l), P.Parameter)]
    assert len(params) == 4 and len({p.uid for p in params}) == 4
    s = cg.compile_model(cg.sequential([a, nn.dense(8, 3, 3)]), loss=nn.mse, optimizer=nn.sgd(0.1))
    assert s.param_names == ["W0", "b0", "W1", "b1"]
    listed = nn.conv2d(1, 1, 4, 4, 2, kernel=[3, 3])                # a list argument: traced anew, not cached
    assert listed.source_types == nn.conv2d(1, 1, 4, 4, 2, kernel=(3, 3)).source_types
