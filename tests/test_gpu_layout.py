"""``backends/gpu/layout.py``: a view's layout, as the kernels compute it (``gather_index``), reads the elements NumPy's
own views read; a reshape avoids a copy exactly when NumPy's does."""
from __future__ import annotations

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import primitives as P
from circuitgrad.backends.gpu.layout import (contiguous_strides, fortran, nocopy_reshape, read_through, view_stages,
                                             viewable)

F = cg.float32


def _T(shape):
    return cg.NdArrayType(tuple(shape), F)


def _chain(rng, shape, steps):
    """A random chain of views (transpose, permute, broadcast, reshape), applied to layouts and to NumPy."""
    base = rng.normal(size=shape)
    ref, stages = base, ()
    for _ in range(steps):
        nd = ref.ndim
        pick = rng.integers(4)
        if pick == 0 and nd == 2:
            op, ref = P.Transpose(_T(ref.shape)), ref.T
        elif pick == 1 and nd >= 2:
            axes = tuple(int(a) for a in rng.permutation(nd))
            op, ref = P.Permute(_T(ref.shape), axes), np.transpose(ref, axes)
        elif pick == 2:
            new = (2,) + ref.shape
            op, ref = P.Broadcast(_T(ref.shape), _T(new)), np.broadcast_to(ref, new)
        else:
            new = (int(np.prod(ref.shape)),) if nd > 1 else (1,) + ref.shape
            op, ref = P.Reshape(_T(ref.shape), new), ref.reshape(new)
        stages = view_stages(op, stages)
    return base, ref, stages


@pytest.mark.parametrize("seed", range(40))
def test_a_chain_of_views_reads_what_numpy_reads(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 4, size=int(rng.integers(1, 4))))
    base, ref, stages = _chain(rng, shape, int(rng.integers(1, 5)))
    assert np.array_equal(read_through(base, ref.shape, stages), ref)


@pytest.mark.parametrize("shape, axes, new", [
    ((3, 4), (1, 0), (12,)), ((3, 4), (1, 0), (4, 3)), ((2, 3, 4), (0, 2, 1), (2, 12)),
    ((2, 3, 4), (1, 0, 2), (3, 8)), ((2, 3, 4), (1, 0, 2), (6, 4)), ((4, 1, 3), (2, 1, 0), (3, 4)),
])
def test_a_reshape_copies_exactly_when_numpy_must(shape, axes, new):
    a = np.transpose(np.arange(int(np.prod(shape))).reshape(shape), axes)
    strides = tuple(s // a.itemsize for s in a.strides)
    v = a.view()
    try:
        v.shape = new                                      # NumPy refuses when the reshape needs a copy
        numpy_copies = False
    except AttributeError:
        numpy_copies = True
    ours = nocopy_reshape(a.shape, strides, new)
    assert (ours is None) == numpy_copies
    if ours is not None:
        assert np.array_equal(read_through(a.base if a.base is not None else a, new, ((new, ours),)), a.reshape(new))


def test_strides_and_matrix_layouts():
    assert contiguous_strides((2, 3, 4)) == (12, 4, 1) and contiguous_strides(()) == ()
    assert fortran((3, 2), (((3, 2), (1, 3)),)) and not fortran((3, 2), (((3, 2), (2, 1)),))
    assert viewable((3, 2), ()) and viewable((3, 2), (((3, 2), (1, 3)),))
    assert not viewable((6,), (((3, 2), (1, 3)), ((6,), (1,))))


def test_the_offset_bound_is_exact_for_one_stage_and_never_below_the_gathered_maximum(rng):
    from circuitgrad.backends.gpu.layout import gather_index, offset_bound
    cases = [(((4, 5), (5, 1)),), (((4, 5), (1, 4)),), (((2, 3, 4), (0, 4, 1)),),
             (((6, 4), (4, 1)), ((4, 6), (1, 4))), (((3, 8), (8, 1)), ((2, 12), (12, 1)), ((24,), (2,)))]
    for stages in cases:
        n = int(np.prod(stages[0][0]))
        for m in (n, n - 1, 1):
            exact = int(gather_index(m, stages).max())
            bound = offset_bound(m, stages)
            assert bound >= exact, (stages, m)
            if len(stages) == 1 and m == n:
                assert bound == exact, stages
    assert offset_bound(4, (((4,), (-1,)),)) is None
