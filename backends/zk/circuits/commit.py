"""Commitments: hiding, binding commitments to parameters, and a Merkle root of a dataset.

Both use the Poseidon2 sponge of :mod:`.poseidon2` over the circuit's field, so that a step circuit
recomputes them in a few hundred constraints per permutation.

* **Packing.** Raw ``w``-bit fixed-point values are packed ``k = ⌊(log2 p − 1)/w⌋`` to a field
  element (three 16-bit values in 51 bits): ``Σ_j (v_j + 2^{w−1})·2^{w·j}``, injective on the
  range every circuit wire is checked to, and a linear combination in the circuit (one
  constraint per packed element). The sponge then absorbs ``k`` times fewer elements.
* **Parameter commitment.** ``C = H_commit(pack(v_1, …, v_n), r_1, …, r_c)``: the raw fixed-point
  values of the parameters and optimizer state, in the circuit's input order, packed, followed by
  ``c`` (the sponge's capacity) field elements of fresh randomness from the OS's CSPRNG. Binding:
  two openings of one ``C`` are a collision of the sponge. Hiding: ``C`` is the sponge of ``c·log2 p ≥ 200`` unknown random bits (see docs/ZK.md).
* **Dataset root.** Each row is the model's input row followed by its target row, in raw fixed
  point; its leaf is ``H_leaf(pack(row))``. The leaves are padded with ``H_empty()`` to ``3^depth`` and
  hashed three at a time, ``H_node(a ‖ b ‖ c)``: three digests of ``c = 4`` elements fill the rate of
  12 exactly, so a node is one permutation (a binary tree would need ``log2/log3 = 1.58×`` as many
  levels, each costing the same permutation).

The four domains (commit, leaf, node, empty) have distinct sponge initial states, so no value of one
kind can be passed off as another.
"""
from __future__ import annotations

import secrets
from typing import Sequence

import numpy as np

from .field import Field
from .poseidon2 import poseidon2

__all__ = ["ARITY", "DOMAINS", "commit", "check_randomness", "depth_for", "fresh_randomness", "pack", "per_element",
           "DataTree", "Digest"]

#: children per Merkle node
ARITY = 3
#: sponge domains
DOMAINS = {"commit": 1, "leaf": 2, "node": 3, "empty": 4}

Digest = tuple  # of ``capacity`` canonical field elements


def depth_for(rows: int) -> int:
    """Levels of the ternary Merkle tree of ``rows`` rows (at least one)."""
    if not isinstance(rows, (int, np.integer)) or isinstance(rows, bool) or rows < 1:
        raise ValueError(f"data_rows must be a positive number of dataset rows, got {rows!r}")
    d = 1
    while ARITY ** d < rows:
        d += 1
    return d


def per_element(width: int, field: Field) -> int:
    """How many ``width``-bit values :func:`pack` puts in one element of ``field`` (at least one)."""
    return max(1, (field.p.bit_length() - 1) // width)


def pack(raw: np.ndarray, width: int, field: Field) -> np.ndarray:
    """Signed ``width``-bit raw values (last axis) → field elements, :func:`per_element` values each.

    ``(..., L)`` → ``(..., ⌈L/k⌉)``: value ``j`` of a group is offset to ``[0, 2^width)`` and shifted
    by ``width·j``; a short last group is padded with offset zeros (the length is fixed by the
    statement). Values outside the range are refused: the packing is injective only on it.
    """
    a = np.asarray(raw, dtype=np.int64)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if a.size and (a.min() < lo or a.max() > hi):
        raise ValueError(f"a committed value does not fit in {width} bits")
    k = per_element(width, field)
    L = a.shape[-1]
    u = np.zeros(a.shape[:-1] + (-(-L // k) * k,), dtype=np.int64)
    u[..., :L] = a - lo
    g = u.reshape(a.shape[:-1] + (-1, k))
    return (g << (width * np.arange(k, dtype=np.int64))).sum(axis=-1) % np.int64(field.p)


def fresh_randomness(field: Field) -> Digest:
    """``capacity`` field elements from the OS's CSPRNG: the blinding of one commitment."""
    h = poseidon2(field)
    return tuple(secrets.randbelow(field.p) for _ in range(h.capacity))


def check_randomness(r, field: Field) -> tuple:
    """``r`` as the blinding of one commitment: ``capacity`` canonical field elements (else ValueError)."""
    h = poseidon2(field)
    r = tuple(int(v) for v in np.asarray(r, dtype=object).reshape(-1))
    if len(r) != h.capacity or not all(0 <= v < h.p for v in r):
        raise ValueError(f"commitment randomness must be {h.capacity} field elements in [0, p), got "
                         f"{len(r)} values{'' if len(r) != h.capacity else ' not all in range'}")
    return r


def commit(values: Sequence[np.ndarray], randomness: Sequence[int], width: int, field: Field) -> Digest:
    """The commitment to ``values`` (raw ``width``-bit fixed-point arrays, in order) with ``randomness``."""
    h = poseidon2(field)
    flat = pack(np.concatenate([np.asarray(v, dtype=np.int64).reshape(-1) for v in values]), width, field)
    r = check_randomness(randomness, field)
    return tuple(h.hash([int(x) for x in flat] + list(r), DOMAINS["commit"]))


class DataTree:
    """The ternary Merkle tree of a dataset's rows (raw fixed point, one row per sample).

    ``root`` and ``n`` (the rows) are what a verifier is given; :meth:`path` opens one row. ``bits`` is
    the width of a raw value, ``row_size`` the values in a row.
    """

    def __init__(self, rows: np.ndarray, width: int, field: Field):
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 2 or rows.shape[0] < 1:
            raise ValueError(f"a dataset is a 2-D array of rows (samples × values), got shape {list(rows.shape)}")
        self.field, self.h, self.bits = field, poseidon2(field), width
        self.rows = rows
        self.n, self.row_size = rows.shape
        self.depth = depth_for(self.n)
        leaves = self.h.hash_batch(pack(rows, width, field), DOMAINS["leaf"])
        empty = np.array(self.h.hash([], DOMAINS["empty"]), dtype=np.int64)
        pad = ARITY ** self.depth - self.n
        level = np.concatenate([leaves, np.broadcast_to(empty, (pad, self.h.capacity))]) if pad else leaves
        self._levels = [level]                  # leaves (padded) up to the root, each (nodes, capacity)
        while len(level) > 1:
            level = self.h.hash_batch(level.reshape(-1, ARITY * self.h.capacity), DOMAINS["node"])
            self._levels.append(level)
        self._index = {r.tobytes(): i for i, r in enumerate(rows)}

    @property
    def root(self) -> Digest:
        return tuple(int(v) for v in self._levels[-1][0])

    def index_of(self, row: np.ndarray) -> int:
        """The position of ``row`` (raw) in the dataset; ValueError when it is not a row of it."""
        k = self._index.get(np.ascontiguousarray(np.asarray(row, dtype=np.int64)).tobytes())
        if k is None:
            raise ValueError("this batch has a row that is not in the committed dataset")
        return k

    def path(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """The opening of row ``index``: siblings ``(depth, ARITY − 1, capacity)`` and positions ``(depth,)``.

        At level ``k`` the node's children are its siblings in order with the current digest inserted at
        ``positions[k]``.
        """
        if not 0 <= index < self.n:
            raise IndexError(f"row {index} is outside the dataset's {self.n} rows")
        sib = np.zeros((self.depth, ARITY - 1, self.h.capacity), dtype=np.int64)
        pos = np.zeros(self.depth, dtype=np.int64)
        i = index
        for k in range(self.depth):
            group = self._levels[k][i - i % ARITY: i - i % ARITY + ARITY]
            pos[k] = i % ARITY
            sib[k] = np.delete(group, pos[k], axis=0)
            i //= ARITY
        return sib, pos

    def verify_path(self, row: np.ndarray, siblings: np.ndarray, positions: np.ndarray) -> bool:
        """Recompute the root from ``row`` and its opening (the circuit's check, natively)."""
        cur = np.array(self.h.hash([int(v) for v in pack(row, self.bits, self.field)], DOMAINS["leaf"]),
                       dtype=np.int64)
        for sib, p in zip(siblings, positions):
            children = np.insert(np.asarray(sib, dtype=np.int64), int(p), cur, axis=0)
            cur = np.array(self.h.hash([int(v) for v in children.reshape(-1)], DOMAINS["node"]), dtype=np.int64)
        return tuple(int(v) for v in cur) == self.root
