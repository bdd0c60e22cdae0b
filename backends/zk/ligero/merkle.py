"""Merkle commitments to the columns of an encoded matrix, with batched openings.

    root = H(NODE ‖ left ‖ right)
     ├── node = H(NODE ‖ leaf 0 ‖ leaf 1)
     │      ├── leaf 0 = H(LEAF ‖ salt₀ ‖ column 0)
     │      └── leaf 1 = H(LEAF ‖ salt₁ ‖ column 1)
     └── …

Every hash input starts with a domain tag of 8 bytes, ``LEAF_TAG`` for a leaf and ``NODE_TAG`` for an
inner node, so that no leaf input is ever the input of a node or the other way round, whatever the
number of rows (a 6-row column is as long as two child hashes). Leaves are salted with 16 random bytes
each. An unopened column's leaf hash then reveals nothing about its values, which the zero-knowledge
argument needs. An opening of several columns sends each sibling hash once (the
union of the authentication paths, minus the nodes the verifier can compute).
"""
from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["HASH", "DIGEST", "LEAF_TAG", "NODE_TAG", "leaves", "node", "Tree", "verify_opening"]

HASH = "sha256"
DIGEST = 32
#: the domain tags that start every leaf's and every inner node's hash input (8 bytes each, distinct)
LEAF_TAG = b"CG-LEAF:"
NODE_TAG = b"CG-NODE:"


def node(left: bytes, right: bytes) -> bytes:
    """An inner node's hash ``H(NODE_TAG ‖ left ‖ right)``."""
    return hashlib.sha256(NODE_TAG + left + right).digest()


def leaves(columns: np.ndarray, salts: list[bytes]) -> list[bytes]:
    """Leaf hashes ``H(LEAF_TAG ‖ salt_j ‖ column_j)`` for ``columns`` of shape ``(n, m)`` (one row per column).

    Every ``LEAF_TAG ‖ salt_j ‖ column_j`` of a block of columns is laid out in one contiguous buffer (the
    transposition done in cache-sized pieces), and each leaf hashes a slice of it without copying. The
    blocks bound the buffer (``_BLOCK_CELLS``), whatever the matrix's size.
    """
    n = columns.shape[0]
    if columns.ndim != 2 or len(salts) != n or any(len(s) != 16 for s in salts):
        return [hashlib.sha256(LEAF_TAG + s + c.tobytes()).digest()
                for s, c in zip(salts, np.ascontiguousarray(columns, dtype="<i8"))]
    m = columns.shape[1]
    w = 8 * (3 + m)
    sha = hashlib.sha256
    salt = np.frombuffer(b"".join(salts), dtype="<i8").reshape(n, 2)
    tag = np.frombuffer(LEAF_TAG, dtype="<i8")[0]
    block = max(1, _BLOCK_CELLS // (3 + m))
    step = max(1, (1 << 16) // max(1, m))
    out = []
    for a in range(0, n, block):
        b = min(n, a + block)
        buf = np.empty((b - a, 3 + m), dtype="<i8")
        buf[:, 0] = tag
        buf[:, 1:3] = salt[a:b]
        for j in range(a, b, step):
            buf[j - a:min(j + step, b) - a, 3:] = columns[j:min(j + step, b)]
        mv = memoryview(buf).cast("B")
        out += [sha(mv[i:i + w]).digest() for i in range(0, (b - a) * w, w)]
    return out


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
