"""Lookup tables: what each lookup block's table key means.

A lookup block names its table by an integer *key*:

| key | table | entries |
|---|---|---|
| ``1 … MAX_TABLE_BITS`` (22) | the range ``[0, 2^b)`` | ``2^b`` |
| ``FUNCTION_TABLE + j`` | the circuit's function table ``j`` (:attr:`.r1cs.R1CS.function_tables`) | its own |

A function table is a sorted array of distinct packed pairs ``(x + 2^(w−1)) + 2^w·(y + 2^(w−1))``, one per
input ``x`` of a ``w``-bit fixed-point format for which a fused elementwise region computes ``y = f(x)``
(:mod:`.fusion`): every entry lies in ``[0, 2^(2w))``. Both kinds are laid end to end in key order by the
logUp argument (:mod:`~circuitgrad.backends.zk.systems.ligero.lookup`). This module is the one place that maps a key and a looked-up value
to "inside" and to an entry's index, for the builder's checks, the prover's multiplicities and the verifier.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["FUNCTION_TABLE", "MAX_TABLE_BITS", "MAX_FUNCTION_TABLES", "entries", "size", "top", "outside", "index",
           "describe", "collision"]

#: the widest range table, ``[0, 2^MAX_TABLE_BITS)``: four million entries, which pays only for circuits with
#: about as many values of that width
MAX_TABLE_BITS = 22
#: the key of function table ``j`` is ``FUNCTION_TABLE + j``
FUNCTION_TABLE = 32
#: the most function tables a circuit has (the compiler fuses no more regions; proofs claim no more entries)
MAX_FUNCTION_TABLES = 64


def _check(key: int, functions: Sequence[np.ndarray]) -> None:
    if not (1 <= key <= MAX_TABLE_BITS or 0 <= key - FUNCTION_TABLE < len(functions)):
        raise ValueError(f"lookup table key {key} names no table (ranges 1 to {MAX_TABLE_BITS}, functions "
                         f"{FUNCTION_TABLE} to {FUNCTION_TABLE + len(functions) - 1})")


def entries(key: int, functions: Sequence[np.ndarray] = ()) -> np.ndarray:
    """The table's values, ascending (``int64``)."""
    _check(key, functions)
    return np.arange(1 << key, dtype=np.int64) if key < FUNCTION_TABLE else functions[key - FUNCTION_TABLE]


def size(key: int, functions: Sequence[np.ndarray] = ()) -> int:
    """The table's number of entries."""
    _check(key, functions)
    return 1 << key if key < FUNCTION_TABLE else len(functions[key - FUNCTION_TABLE])


def top(key: int, functions: Sequence[np.ndarray] = ()) -> int:
    """The table's largest value (``2^b − 1`` for a range)."""
    _check(key, functions)
    return (1 << key) - 1 if key < FUNCTION_TABLE else int(functions[key - FUNCTION_TABLE][-1])


def collision(alpha: int, keys: Sequence[int], functions: Sequence[np.ndarray] = ()) -> str | None:
    """Which of the tables ``keys`` has the value ``alpha`` (a logUp challenge must be none of their entries:
    ``g·(α − t) = m`` would not bind ``g``), described; None if none has it."""
    ranges = [k for k in keys if k < FUNCTION_TABLE]
    if ranges and alpha < 1 << max(ranges):
        return f"a table [0, {1 << max(ranges)})"
    for k in keys:
        if k >= FUNCTION_TABLE and not outside(np.array([k]), np.array([alpha]), functions)[0]:
            return describe(k, functions)
    return None


def outside(keys: np.ndarray, v: np.ndarray, functions: Sequence[np.ndarray] = ()) -> np.ndarray:
    """Which values ``v`` (field elements in ``[0, p)``, ``int64`` or Python ints) are not in their lookups'
    tables ``keys``."""
    keys = np.asarray(keys, dtype=np.int64)
    v = np.asarray(v)
    out = np.zeros(len(keys), dtype=bool)
    for key in np.unique(keys):
        sel = keys == key
        vv = v[sel]
        big = vv > top(int(key), functions)        # also every value past int64 (a Python-int array)
        small = np.where(big, 0, vv).astype(np.int64)
        if key < FUNCTION_TABLE:
            out[sel] = big | (small < 0)
        else:
            t = functions[key - FUNCTION_TABLE]
            i = np.minimum(np.searchsorted(t, small), len(t) - 1)
            out[sel] = big | (t[i] != small)
    return out


def index(keys: np.ndarray, v: np.ndarray, functions: Sequence[np.ndarray] = ()) -> np.ndarray:
    """Each value's entry index within its own table (values known to be inside, :func:`outside`)."""
    keys = np.asarray(keys, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    if not len(keys) or keys.max() < FUNCTION_TABLE:
        return v
    out = v.copy()
    for key in np.unique(keys[keys >= FUNCTION_TABLE]):
        sel = keys == key
        out[sel] = np.searchsorted(entries(int(key), functions), v[sel])
    return out


def describe(key: int, functions: Sequence[np.ndarray] = ()) -> str:
    """``[0, 4096)`` or ``function table 2 (1,048,576 entries)``."""
    if key < FUNCTION_TABLE:
        return f"[0, {1 << key})"
    return f"function table {key - FUNCTION_TABLE} ({size(key, functions):,} entries)"
