"""Merkle commitments to the columns of an encoded matrix, defined over fixed blocks of rows.

    root = H(NODE ‖ left ‖ right)
     ├── node = H(NODE ‖ leaf 0 ‖ leaf 1)
     │      ├── leaf 0 = H(LEAF ‖ salt₀ ‖ d₀,₀ ‖ d₁,₀ ‖ … )      d_b,j = H(BLOCK ‖ rows 256b … 256b+255 of column j)
     │      └── leaf 1 = H(LEAF ‖ salt₁ ‖ d₀,₁ ‖ d₁,₁ ‖ … )
     └── …

A column's leaf hashes the digests of its blocks of :data:`ROW_BLOCK` rows (the last block may be shorter),
not the column itself. So a prover can commit a block of rows, keep its ``n`` block digests and drop the rows,
and the root does not depend on how the rows were grouped for computation or which process computed them:
only the rows' numbering fixes the blocks.

Every hash input starts with a domain tag of 8 bytes (``BLOCK_TAG``, ``LEAF_TAG``, ``NODE_TAG``), so that no
input of one kind is ever the input of another, whatever the number of rows. Leaves are salted with 16
pseudorandom bytes each (the prover's secret seed through SHAKE-256). An unopened column's leaf hash then
reveals nothing about its values, which the zero-knowledge
argument needs. An opening of several columns sends each sibling hash once (the union of the authentication
paths, minus the nodes the verifier can compute).
"""
from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["HASH", "DIGEST", "ROW_BLOCK", "BLOCK_TAG", "LEAF_TAG", "NODE_TAG", "block_digests", "leaves_of",
           "leaves", "node", "Tree", "verify_opening"]

HASH = "sha256"
DIGEST = 32
#: rows of a column hashed together (the last block of a matrix may be shorter)
ROW_BLOCK = 256
#: the domain tags that start every block's, leaf's and inner node's hash input (8 bytes each, distinct)
BLOCK_TAG = b"CG-BLCK:"
LEAF_TAG = b"CG-LEAF:"
NODE_TAG = b"CG-NODE:"


def node(left: bytes, right: bytes) -> bytes:
    """An inner node's hash ``H(NODE_TAG ‖ left ‖ right)``."""
    return hashlib.sha256(NODE_TAG + left + right).digest()


def block_digests(rows: np.ndarray) -> np.ndarray:
    """``H(BLOCK_TAG ‖ column j of rows)`` for every column of one block of at most :data:`ROW_BLOCK` rows
    (shape ``(r, n)``): an ``(n, 32)`` array of digests.

    Every ``BLOCK_TAG ‖ column_j`` of a slab of columns is laid out in one contiguous buffer (the
    transposition done in cache-sized pieces) and each digest hashes a slice of it without copying.
    """
    r, n = rows.shape
    if not 0 < r <= ROW_BLOCK:
        raise ValueError(f"a block has 1 to {ROW_BLOCK} rows, got {r}")
    w = 8 * (1 + r)
    sha = hashlib.sha256
    tag = np.frombuffer(BLOCK_TAG, dtype="<i8")[0]
    out = np.empty((n, DIGEST), dtype=np.uint8)
    slab = max(1, _BLOCK_CELLS // (1 + r))
    for a in range(0, n, slab):
        b = min(n, a + slab)
        buf = np.empty((b - a, 1 + r), dtype="<i8")
        buf[:, 0] = tag
        buf[:, 1:] = rows[:, a:b].T
        mv = memoryview(buf).cast("B")
        out[a:b] = np.frombuffer(b"".join(sha(mv[i:i + w]).digest() for i in range(0, (b - a) * w, w)),
                                 dtype=np.uint8).reshape(b - a, DIGEST)
    return out


def leaves_of(digests: np.ndarray, salts: list[bytes]) -> list[bytes]:
    """Leaf hashes ``H(LEAF_TAG ‖ salt_j ‖ d₀,j ‖ d₁,j ‖ …)`` from the block digests ``(n, blocks, 32)``."""
    n = digests.shape[0]
    if len(salts) != n:
        raise ValueError(f"{len(salts)} salts for {n} columns")
    d = np.ascontiguousarray(digests, dtype=np.uint8).reshape(n, -1)
    return [hashlib.sha256(LEAF_TAG + s + row.tobytes()).digest() for s, row in zip(salts, d)]


def leaves(columns: np.ndarray, salts: list[bytes]) -> list[bytes]:
    """Leaf hashes of whole columns, ``columns`` of shape ``(n, m)`` (one row per column, as the verifier holds
    the opened ones): the block digests of every :data:`ROW_BLOCK` rows, then :func:`leaves_of`."""
    cols = np.ascontiguousarray(columns, dtype="<i8")
    n, m = cols.shape
    if m == 0:
        return leaves_of(np.zeros((n, 0, DIGEST), dtype=np.uint8), salts)
    digests = np.stack([block_digests(cols[:, a:a + ROW_BLOCK].T) for a in range(0, m, ROW_BLOCK)], axis=1)
    return leaves_of(digests, salts)


#: cells of the leaf buffer hashed at once (32 MiB)
_BLOCK_CELLS = 1 << 22


class Tree:
    """A binary Merkle tree over ``2^d`` leaves; ``levels[0]`` are the leaves, ``levels[-1] = [root]``."""

    def __init__(self, leaf_hashes: list[bytes]):
        n = len(leaf_hashes)
        if n & (n - 1) or n == 0:
            raise ValueError(f"Merkle tree needs a power-of-two number of leaves, got {n}")
        self.levels = [list(leaf_hashes)]
        while len(self.levels[-1]) > 1:
            lv = self.levels[-1]
            self.levels.append([node(lv[i], lv[i + 1]) for i in range(0, len(lv), 2)])

    @property
    def root(self) -> bytes:
        return self.levels[-1][0]

    def open(self, indices: list[int]) -> list[bytes]:
        """Sibling hashes the verifier needs to recompute the root from the leaves at ``indices``."""
        known = sorted(set(indices))
        out = []
        for lv in self.levels[:-1]:
            ks = set(known)
            out += [lv[i ^ 1] for i in known if i ^ 1 not in ks]
            known = sorted({i >> 1 for i in known})
        return out


def verify_opening(root: bytes, n_leaves: int, indices: list[int], leaf_hashes: list[bytes],
                   siblings: list[bytes]) -> bool:
    """True when ``leaf_hashes`` at ``indices`` and ``siblings`` (as :meth:`Tree.open`) give ``root``."""
    if len(set(indices)) != len(indices) or len(leaf_hashes) != len(indices):
        return False
    if any(not 0 <= i < n_leaves for i in indices):
        return False
    nodes = dict(zip(indices, leaf_hashes))
    sib = iter(siblings)
    size = n_leaves
    try:
        while size > 1:
            nxt = {}
            for i in sorted(nodes):
                j = i ^ 1
                if j in nodes:
                    if i & 1:
                        continue
                    nxt[i >> 1] = node(nodes[i], nodes[j])
                else:
                    s = next(sib)
                    nxt[i >> 1] = node(nodes[i], s) if i % 2 == 0 else node(s, nodes[i])
            nodes = nxt
            size //= 2
    except StopIteration:
        return False
    return next(sib, None) is None and nodes.get(0) == root
