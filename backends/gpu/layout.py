"""Layouts: how a view's elements are found in the contiguous array it views (see :mod:`~.plan`, "Layouts").

A layout is ``(base, stages)``. ``base`` is a C-contiguous array and each stage ``(shape, strides)`` maps
a linear element index ``t`` to ``Σ_d ((t / Π shape[d+1:]) % shape[d]) · strides[d]``; the stages apply
in order, and no stage is the identity::

    element t of the view --> stage 1 --> stage 2 --> ... --> offset in base
"""
from __future__ import annotations

import numpy as np

from circuitgrad import primitives as P
from circuitgrad.schedule import Apply

__all__ = ["Stage", "Layout", "resolve", "located", "contiguous_strides", "nocopy_reshape", "view_stages", "operand", "gather_index",
           "read_through", "viewable", "fortran", "transposed"]

Stage = tuple[tuple[int, ...], tuple[int, ...]]       # (shape, strides in elements)
Layout = tuple[int, tuple[Stage, ...]]               # (base variable, stages)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def _identity(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    return all(n == 1 or s == c for n, s, c in zip(shape, strides, contiguous_strides(shape)))


def nocopy_reshape(shape: tuple[int, ...], strides: tuple[int, ...],
                   new: tuple[int, ...]) -> tuple[int, ...] | None:
    """The strides of ``new`` viewing the same elements, or None when a reshape must copy (NumPy's rule)."""
    if 0 in shape or 0 in new:
        return contiguous_strides(new)
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    out = [0] * len(new)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(new) and oi < len(old):
        np_, op = new[ni], old[oi][0]
        while np_ != op:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for ok in range(oi, oj - 1):
            if old[ok][1] != old[ok + 1][0] * old[ok + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for nk in range(nj - 1, ni, -1):
            out[nk - 1] = out[nk] * new[nk]
        ni, oi = nj, oj
        nj, oj = nj + 1, oj + 1
    last = out[ni - 1] if ni >= 1 else 1
    for nk in range(ni, len(new)):
        out[nk] = last
    return tuple(out)


def view_stages(op: P.Primitive, stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    """The stages of ``op``'s result, given the stages of its operand."""
    (in_t,), (out_t,) = op.source, op.target
    if isinstance(op, P.Reshape):
        if stages:
            shape, strides = stages[0]
            st = nocopy_reshape(shape, strides, out_t.shape)
            if st is not None:
                stages = ((out_t.shape, st),) + stages[1:]
    else:
        if isinstance(op, P.Transpose):
            picks = [1, 0]
        elif isinstance(op, P.Permute):
            picks = list(op.axes)
        else:  # Broadcast: added and stretched axes read with stride 0
            lead = out_t.ndim - in_t.ndim
            picks = [None if k < lead or (in_t.shape[k - lead] == 1 and out_t.shape[k] != 1) else k - lead
                     for k in range(out_t.ndim)]
        if stages and stages[0][0] == in_t.shape:
            base, rest = stages[0][1], stages[1:]
        else:
            base, rest = contiguous_strides(in_t.shape), stages
        stages = ((out_t.shape, tuple(0 if d is None else base[d] for d in picks)),) + rest
    if stages and _identity(*stages[0]):
        stages = stages[1:]
    return stages


def operand(a: Apply, layout: Layout) -> Layout:
    """The layout of an elementwise instruction's operand, indexed by the instruction's result.

    The same as the operand's own layout, except for ``OneHot``: element ``i`` of ``[..., n]`` reads
    id ``i / n``, a broadcast of the ids along a new last axis.
    """
    if not isinstance(a.op, P.OneHot):
        return layout
    base, stages = layout
    S = a.op.S
    S1 = S.with_shape(S.shape + (1,))
    stages = view_stages(P.Reshape(S, S1.shape), stages)
    return base, view_stages(P.Broadcast(S1, S.with_shape(a.op.T.shape)), stages)


def gather_index(n: int, stages: tuple[Stage, ...]) -> np.ndarray:
    """The base offsets of elements ``0 … n-1`` of a view (the index arithmetic the kernels do)."""
    idx = np.arange(n, dtype=np.int64)
    for shape, strides in stages:
        off = np.zeros_like(idx)
        for d, (m, s) in enumerate(zip(shape, strides)):
            if m != 1 and s != 0:
                off += (idx // int(np.prod(shape[d + 1:], dtype=np.int64))) % m * s
        idx = off
    return idx


def offset_bound(n: int, stages: tuple[Stage, ...]) -> int | None:
    """An upper bound of the largest base offset elements ``0 … n-1`` of a view read (exact for one stage over
    its whole shape), without gathering them; ``None`` where a stride is negative."""
    top = n - 1
    for shape, strides in stages:
        if any(s < 0 for s in strides):
            return None
        bound, inner = 0, 1
        for m, s in reversed(list(zip(shape, strides))):
            bound += min(m - 1, top // inner) * s
            inner *= m
        top = bound
    return top


def read_through(base: np.ndarray, shape: tuple[int, ...], stages: tuple[Stage, ...]) -> np.ndarray:
    """The view ``(base, stages)`` of ``shape``, gathered with NumPy."""
    flat = np.asarray(base).reshape(-1)
    if not stages:
        return flat.reshape(shape)
    return flat[gather_index(int(np.prod(shape, dtype=np.int64)), stages)].reshape(shape)


def viewable(shape: tuple[int, ...], stages: tuple[Stage, ...]) -> bool:
    """One strided array over the base (what NumPy and CuPy views can be)."""
    return not stages or (len(stages) == 1 and stages[0][0] == shape)


def transposed(shape: tuple[int, ...], stages: tuple[Stage, ...]) -> bool:
    """A batch of column-major matrices (a contiguous batch with its last two axes swapped): one strided
    batched cuBLAS call reads it without a copy."""
    if len(shape) < 3 or len(stages) != 1 or stages[0][0] != shape:
        return False
    strides = stages[0][1]
    swap = lambda t: tuple(t[:-2]) + (t[-1], t[-2])  # noqa: E731
    return _identity(swap(shape), swap(strides))


def fortran(shape: tuple[int, ...], stages: tuple[Stage, ...]) -> bool:
    """A column-major matrix (a transposed contiguous one): cuBLAS reads it without a copy."""
    if len(shape) != 2 or len(stages) != 1 or stages[0][0] != shape:
        return False
    return _identity(shape[::-1], stages[0][1][::-1])


def resolve(folded: dict[int, int], v: int) -> int:
    """The variable ``v`` really is: copies (and repeated gathers), recorded in ``folded``, resolved."""
    while v in folded:
        v = folded[v]
    return v


def located(folded: dict[int, int], layouts: dict[int, Layout], v: int) -> Layout:
    """``(base, stages)``: where a kernel finds the elements of ``v`` (``stages == ()``: ``base`` itself)."""
    s = resolve(folded, v)
    return layouts.get(s, (s, ()))
