"""The sequencer's instruction set: affine views of one data memory, micro-ops, and the view algebra.

A :class:`View` is ``shape`` elements at ``base + Σ_d o_d·strides_d`` (``+ k·kstride`` for a
reduction index ``k``). Layout primitives (transpose, permute, slices, broadcasts, most reshapes) only
change a view; :func:`reshape_view` says when a reshape needs a copy, and :func:`legalise` splits a
micro-op whose views do not fold to the sequencer's two loop counters into several micro-ops.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from circuitgrad.types import Fixed

from .kinds import Kind

#: words of one single-port RAM block (the iCE40 UP5K's SB_SPRAM256KA: 16K × 16 bits)
SPRAM_WORDS = 16384
#: bits of one SPRAM word; a wider word takes several blocks side by side
SPRAM_WIDTH = 16


def spram_cells(width: int) -> int:
    """The ``SB_SPRAM256KA`` blocks side by side that hold one SPRAM block of ``width``-bit words."""
    return -(-width // SPRAM_WIDTH)

__all__ = ["SPRAM_WORDS", "SPRAM_WIDTH", "spram_cells", "View", "MicroOp", "Microcode", "contiguous", "reshape_view", "broadcast_view", "permute_view",
           "slice_view", "fold", "legalise", "view_2d", "align", "interleave"]


@dataclass(frozen=True)
class View:
    """``shape`` elements at ``base + Σ o_d·strides_d`` (``kstride`` for the reduction index)."""
    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    kstride: int = 0

    def addresses(self, k: int = 0) -> np.ndarray:
        idx = np.full(self.shape, self.base + k * self.kstride, dtype=np.int64)
        for d, s in enumerate(self.strides):
            if s:
                sh = [1] * len(self.shape)
                sh[d] = self.shape[d]
                idx = idx + (np.arange(self.shape[d], dtype=np.int64) * s).reshape(sh)
        return idx

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class MicroOp:
    """One loop of the sequencer: ``out[o] = kind(a[o, k], b[o, k])`` over the output's elements ``o`` (and ``k < K``
    for a kind that reduces). ``kind`` may be given by name; one that is not a :class:`~.kinds.Kind` is refused."""
    kind: Kind
    out: View
    a: View
    b: View | None = None
    K: int = 1
    rescale: bool = False
    source: str = ""          # the SSA instruction it implements, for error messages

    def __post_init__(self):
        try:
            self.kind = Kind(self.kind)
        except ValueError as e:
            raise ValueError(f"{self.source or 'micro-op'}: {e}") from None


@dataclass
class Microcode:
    """Micro-ops, the memory size and initial contents, and where inputs and outputs live."""
    dtype: Fixed
    ops: list[MicroOp]
    depth: int
    init: dict[int, int]                  # address -> constant value
    inputs: list[View]
    outputs: list[View]
    names: dict[str, View] = field(default_factory=dict)
    spram_blocks: int = 0                 # single-port RAM blocks of SPRAM_WORDS words at the top of the addresses
    bram_words: int | None = None         # words in block RAM, at the bottom (``depth`` without SPRAM)
    spram_words: int = 0                  # words the program uses in its SPRAM blocks

    @property
    def ram_words(self) -> int:
        """Words in block RAM: addresses ``0 … ram_words − 1``."""
        return self.depth if self.bram_words is None else self.bram_words

    @property
    def spram_base(self) -> int:
        """The first SPRAM address: block ``j`` holds ``spram_base + j·SPRAM_WORDS …`` (``depth`` without SPRAM)."""
        return self.depth - self.spram_blocks * SPRAM_WORDS

    @property
    def words(self) -> int:
        """Memory words the program uses: block RAM and SPRAM."""
        return self.ram_words + self.spram_words


def contiguous(base: int, shape: tuple[int, ...]) -> View:
    """Row-major ``shape`` at ``base`` (size-1 axes get stride 0)."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc if d != 1 else 0)
        acc *= d
    return View(base, tuple(shape), tuple(reversed(strides)))


def _nests(outer: tuple[int, int], inner: tuple[int, int]) -> bool:
    """Axis ``outer = (n, s)`` followed by ``inner`` flattens to one axis of stride ``inner``'s."""
    return outer[1] == inner[1] * inner[0]


def reshape_view(view: View, shape: tuple[int, ...]) -> View | None:
    """``view`` reshaped (row-major) to ``shape`` without moving data, or ``None`` when that needs a copy.

    As NumPy's no-copy reshape: the old and new axes are matched in groups of equal size, and the old
    axes of a group must nest (each stride the next one's stride times its size).
    """
    old = [(n, s) for n, s in zip(view.shape, view.strides) if n != 1]
    new = [int(d) for d in shape]
    strides = [0] * len(new)
    if any(d == 0 for d in new) or any(n == 0 for n, _ in old):
        return View(view.base, tuple(new), tuple(strides))
    i, j = 0, 0
    while j < len(new) and i < len(old):
        if new[j] == 1:
            j += 1
            continue
        i0, j0 = i, j
        po, pn = old[i][0], new[j]
        while po != pn:
            if po < pn:
                i += 1
                po *= old[i][0]
            else:
                j += 1
                pn *= new[j]
        if any(not _nests(old[t], old[t + 1]) for t in range(i0, i)):
            return None
        st = old[i][1]
        for jj in range(j, j0 - 1, -1):
            strides[jj] = st if new[jj] != 1 else 0
            st *= new[jj]
        i, j = i + 1, j + 1
    return View(view.base, tuple(new), tuple(strides))


def broadcast_view(view: View, shape: tuple[int, ...]) -> View:
    """``view`` broadcast to ``shape`` as NumPy broadcasts (new leading axes and size-1 axes: stride 0)."""
    lead = len(shape) - len(view.shape)
    strides = [0] * lead + [s if d != 1 else 0 for s, d in zip(view.strides, view.shape)]
    return View(view.base, tuple(shape), tuple(strides), view.kstride)


def permute_view(view: View, axes: tuple[int, ...]) -> View:
    """``np.transpose`` of ``view``."""
    return View(view.base, tuple(view.shape[a] for a in axes), tuple(view.strides[a] for a in axes), view.kstride)


def slice_view(view: View, index: tuple[tuple[int, int, int], ...]) -> View:
    """``view[a₀:b₀:c₀, …]`` (``0 ≤ a ≤ b ≤ n``, ``c ≥ 1``)."""
    base = view.base + sum(a * s for (a, _, _), s in zip(index, view.strides))
    shape = tuple(len(range(a, b, c)) for a, b, c in index)
    return View(base, shape, tuple(s * c for (_, _, c), s in zip(index, view.strides)), view.kstride)


def fold(shape: tuple[int, ...], views: list[View]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge adjacent axes that nest in every one of ``views`` (all indexed by ``shape``); drop size-1 axes.

    Returns the merged shape and each view's strides for it.
    """
    axes = [(n, [v.strides[d] for v in views]) for d, n in enumerate(shape) if n != 1]
    merged: list[tuple[int, list[int]]] = []
    for n, st in axes:
        if merged and all(_nests((merged[-1][0], so), (n, si)) for so, si in zip(merged[-1][1], st)):
            merged[-1] = (merged[-1][0] * n, st)
        else:
            merged.append((n, st))
    return tuple(n for n, _ in merged), [tuple(st[i] for _, st in merged) for i in range(len(views))]


def legalise(u: MicroOp, rank: int = 2) -> list[MicroOp]:
    """``u`` as micro-ops whose views have at most ``rank`` axes (the sequencer's loop counters).

    Axes that nest in the output and in every operand merge; the leading axis of what is left is split
    into one micro-op per index until ``rank`` axes remain. Every element is computed once, by the same
    arithmetic, so the split is exact; each extra micro-op costs the sequencer's fixed per-op cycles.
    """
    views = [u.out, u.a] + ([u.b] if u.b is not None else [])
    if any(len(v.shape) != len(u.out.shape) for v in views):
        raise NotImplementedError(f"{u.source}: operand views {views} do not match the output shape {u.out.shape}")
    shape, strides = fold(u.out.shape, views)
    new = [View(v.base, shape, st, v.kstride) for v, st in zip(views, strides)]
    if len(shape) <= rank:
        return [replace(u, out=new[0], a=new[1], b=new[2] if u.b is not None else None)]
    out = []
    for i in range(shape[0]):
        part = [View(v.base + i * v.strides[0], shape[1:], v.strides[1:], v.kstride) for v in new]
        out += legalise(replace(u, out=part[0], a=part[1], b=part[2] if u.b is not None else None), rank)
    return out


def view_2d(v: View) -> tuple[int, int, int, int, int, int]:
    """``(base, n0, n1, s0, s1, kstride)`` with the view padded or folded to two dimensions."""
    shape, strides = list(v.shape), list(v.strides)
    while len(shape) < 2:
        shape.insert(0, 1)
        strides.insert(0, 0)
    while len(shape) > 2:                      # fold leading axes when they nest
        n0, n1 = shape[0], shape[1]
        s0, s1 = strides[0], strides[1]
        if n0 != 1 and s0 != s1 * n1:
            raise NotImplementedError(f"view {v} does not fold to two dimensions")
        shape[:2] = [n0 * n1]
        strides[:2] = [s1 if n1 != 1 else s0]
    return v.base, shape[0], shape[1], strides[0], strides[1], v.kstride


def align(v: View, out: View) -> tuple[int, ...]:
    """Strides of operand ``v`` indexed by the output's coordinates (same rank, or fewer reduced axes)."""
    if len(v.strides) == len(out.shape):
        return v.strides
    raise NotImplementedError(f"operand view {v} does not match output shape {out.shape}")


def interleave(lanes: int) -> int:
    """Banks the memory is interleaved across for ``lanes`` lanes (address ``a`` in bank ``a mod P``): the power
    of two at or above ``lanes`` (1 for one lane)."""
    return 1 << max(0, lanes - 1).bit_length()
