"""``backends/gpu/passes.py``: the plan's passes one at a time, on small programs whose result is known."""
from __future__ import annotations

import numpy as np

import circuitgrad as cg
from circuitgrad import ops
from circuitgrad.backends.gpu.passes import PlanState, fold_constants, group_elementwise, place_views

T = cg.NdArrayType((4, 8), cg.float32)


def _state(fn, types) -> PlanState:
    return PlanState(cg.schedule(cg.trace(fn, types, name="f")), set())


def test_constants_fold_uniform_ones_to_literals():
    st = _state(lambda x: x * ops.constant(T, 2.0) + ops.constant(T, 1.0) * 3.0, [T])
    fold_constants(st)
    assert sorted(st.constants.values()) == [1.0, 2.0, 3.0]               # 1·3 folded, both uniform: literals
    assert all(isinstance(v, np.ndarray) and v.flags.c_contiguous for v in st.values.values())


def test_elementwise_work_of_one_size_is_one_group():
    st = _state(lambda x, y: ops.exp(x * y) + ops.tanh(y), [T, T])
    fold_constants(st)
    place_views(st)
    group_elementwise(st)
    live = [g for g in st.groups if g]
    assert len(live) == 1 and len(live[0]) == len(st.prog.instrs)


def test_a_product_splits_the_elementwise_work_around_it():
    W = cg.NdArrayType((8, 8), cg.float32)
    st = _state(lambda x, w: ops.tanh(ops.exp(x) @ w), [T, W])
    fold_constants(st)
    place_views(st)
    group_elementwise(st)
    kinds = {type(st.prog.instrs[i].op).__name__ for g in st.groups if g for i in g}
    assert "MatMul" not in kinds                                          # cuBLAS, never in a fused group
    assert len([g for g in st.groups if g]) == 2                          # exp before, tanh after
