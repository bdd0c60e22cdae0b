"""Gadgets: vectorised constraint patterns with exact, documented costs.

Every gadget works on ``m`` elements at once. Wire arguments are 1-D
``int64`` arrays of wire indices, and linear combinations are lists of
``(wires, coeffs)`` terms. Costs are counted in constraints per element.
``w`` is the fixed-point width and ``f`` the number of fractional bits.

| gadget | constraints | pins down |
|---|---|---|
| :func:`decompose` (``n`` bits) | ``n + 1`` | every bit (booleanity), and their sum equals the value |
| :func:`range_check` | ``w + 1`` | value in ``[−2^(w−1), 2^(w−1))`` |
| :func:`rescale` | ``1 + f + (w + 1)`` | quotient ``q``, remainder bits ``r < 2^f``, ``q`` in range |
| :func:`positive` | ``w + 2`` | sign bit of ``x − 1`` |
| :func:`at_least` (``n`` bits) | ``n + 2`` | comparison bit ``v ≥ T`` |
| :func:`product` | ``1`` | ``z = x·y`` |
| :func:`linear` | ``1 + (w + 1)`` | ``o = Σ cᵢ xᵢ + k``, range-checked |

With ``range_checks="lookup"`` (:class:`.r1cs.Builder`), :func:`fits` proves
``v ∈ [0, 2^n)`` with lookups instead of ``n + 1`` constraints. With ``B`` the
builder's ``table_bits`` (chosen per circuit, 8 to 22: :func:`best_table_bits`): ``v = l₀ + 2^B·l₁ + …``
with ``⌈n/B⌉ − 1`` limb wires and one lookup per limb. The lowest limb is
``v − Σ 2^(Bj)·l_j``, so it needs no wire; every limb but the top one is looked
up in ``[0, 2^B)``, the top one in the table of its own width ``r = n − B(⌈n/B⌉ − 1)``.
No constraint at all: with ``B = 20`` a 20-bit range check is one lookup and no
wire, and a 10-bit remainder one lookup into ``[0, 2^10)``. The
gadgets that need a bit (:func:`positive`, :func:`at_least`) take it as one
boolean wire above a ``fits`` of the rest; only the shift amounts of ``exp``
keep their bits.

Every non-deterministic value (bits, remainders, quotients, signs) is fixed
by these constraints. ``tests/test_zk_gadgets.py`` mutates each one and
checks that some constraint breaks.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from circuitgrad.fixedpoint import FixedPointOverflow
from circuitgrad.types import Fixed

from .r1cs import MAX_TABLE_BITS, Builder

__all__ = ["lc_value", "decompose", "fits", "lookup_plan", "lookup_cells", "best_table_bits", "top_bit", "range_check", "rescale", "positive", "at_least", "product", "linear",
           "ONE"]

ONE = 0  # the constant wire
#: below this many bits a bit decomposition is as cheap as lookups
_LOOKUP_MIN_BITS = 3


def lc_value(W: np.ndarray, terms: Sequence[tuple], const: int = 0) -> np.ndarray:
    """Value of a linear combination (int64, wrapping: exact whenever the true value fits)."""
    v = None
    for w, c in terms:
        t = W[np.asarray(w)] * np.asarray(c, dtype=np.int64)
        v = t if v is None else v + t
    return v + const if v is not None else np.int64(const)


def decompose(b: Builder, terms: Sequence[tuple], const: int, nbits: int, kind: str,
              what: str = "value") -> np.ndarray:
    """Bits ``(m, nbits)`` of ``v = Σ terms + const``, which must lie in ``[0, 2^nbits)``."""
    m = max(np.size(w) for w, _ in terms)
    bits = b.alloc((m, nbits))
    flat = bits.reshape(-1)
    b.constrain([(flat, 1)], [(flat, 1), (ONE, -1)], [], f"{kind}.bits")
    b.constrain([(bits[:, i], 1 << i) for i in range(nbits)], [(ONE, 1)],
                list(terms) + [(ONE, const)], f"{kind}.sum")
    context = b.context

    def fill(W):
        v = lc_value(W, terms, const)
        if v.size and (v.min() < 0 or v.max() >= (1 << nbits)):
            raise FixedPointOverflow(f"{context}: {what} out of range for {kind}: "
                                     f"[{int(v.min()) - const}, {int(v.max()) - const}] does not fit")
        return ((v[:, None] >> np.arange(nbits)) & 1).reshape(-1)
    b.fill(flat, fill)
    return bits


def _checked(v: np.ndarray, nbits: int, const: int, context: str, what: str, kind: str) -> np.ndarray:
    if v.size and (v.min() < 0 or v.max() >= (1 << nbits)):
        raise FixedPointOverflow(f"{context}: {what} out of range for {kind}: "
                                 f"[{int(v.min()) - const}, {int(v.max()) - const}] does not fit")
    return v


def fits(b: Builder, terms: Sequence[tuple], const: int, nbits: int, kind: str, what: str = "value") -> None:
    """Constrain ``v = Σ terms + const ∈ [0, 2^nbits)``: bits, or limbs looked up in tables of their width."""
    if b.range_checks == "bits" or nbits < _LOOKUP_MIN_BITS:
        decompose(b, terms, const, nbits, kind, what)
        return
    m = max(np.size(w) for w, _ in terms)
    b.range_requests[nbits] = b.range_requests.get(nbits, 0) + m
    bits = b.table_bits
    c = -(-nbits // bits)                                 # limbs
    low = list(terms) + [(ONE, const)]                    # v − Σ_{j≥1} 2^(Bj)·l_j
    context = b.context
    value = lambda W: _checked(lc_value(W, terms, const), nbits, const, context, what, kind)  # noqa: E731
    r = nbits - bits * (c - 1)                            # bits of the top limb
    if c > 1:
        limbs = b.alloc((m, c - 1))
        low += [(limbs[:, j - 1], -(1 << (bits * j))) for j in range(1, c)]
        if c > 2:
            b.lookup([(limbs[:, :-1].reshape(-1), 1)], f"{kind}.limbs")
        b.lookup([(limbs[:, -1], 1)], f"{kind}.top", r)
        b.fill(limbs, lambda W: ((value(W)[:, None] >> (bits * np.arange(1, c))) & ((1 << bits) - 1)).reshape(-1))
    else:                                                 # no wire to fill: only the witness-time range guard
        b.fill(np.zeros(0, dtype=np.int64), lambda W: value(W)[:0])
    b.lookup(low, f"{kind}.limbs", min(bits, nbits))


def lookup_plan(requests: dict[int, int], bits: int) -> tuple[int, int, tuple[int, ...]]:
    """What :func:`fits` costs with limbs of ``bits`` for ``requests`` (``nbits → values checked``): lookups,
    limb wires, and the table widths it needs."""
    lookups = wires = 0
    widths = set()
    for n, m in requests.items():
        c = -(-n // bits)
        lookups += m * c
        wires += m * (c - 1)
        widths.add(min(n, bits))
        if c > 1:
            widths.add(n - bits * (c - 1))
    return lookups, wires, tuple(sorted(widths))


def lookup_cells(requests: dict[int, int], bits: int, field_bits: float) -> int:
    """The cells the native prover commits for the range checks ``requests`` (``nbits → values``) with limbs of
    ``bits``: limb wires, plus ``1 + σL`` cells per lookup (``v``, the inverses ``h``) and per table entry (the
    multiplicities ``m``, the terms ``g``), ``σL`` the logUp challenges for 100 bits."""
    lookups, wires, widths = lookup_plan(requests, bits)
    table = sum(1 << w for w in widths)
    sl = max(1, math.ceil(101 / (field_bits - math.log2(lookups + table)))) if lookups else 0
    return wires + (1 + sl) * (lookups + table)


def best_table_bits(requests: dict[int, int], field_bits: float,
                    choices: Sequence[int] = range(8, MAX_TABLE_BITS + 1)) -> int:
    """The limb width that minimises :func:`lookup_cells` for the range checks ``requests``: a table of ``2^b``
    entries costs its ``(1 + σL)·2^b`` cells once, against one lookup fewer per value wider than ``b``, so wide
    tables pay only in circuits with about as many such values. Ties go to the narrower limbs."""
    return min(choices, key=lambda b: (lookup_cells(requests, b, field_bits), b))


def top_bit(b: Builder, terms: Sequence[tuple], const: int, nbits: int, kind: str) -> np.ndarray:
    """The bit wires ``v ≥ 2^(nbits−1)`` for ``v = Σ terms + const ∈ [0, 2^nbits)``."""
    if b.range_checks == "bits" or nbits - 1 < _LOOKUP_MIN_BITS:
        return decompose(b, terms, const, nbits, kind)[:, nbits - 1]
    m = max(np.size(w) for w, _ in terms)
    t = b.alloc(m)
    b.constrain([(t, 1)], [(t, 1), (ONE, -1)], [], f"{kind}.bit")
    context = b.context
    b.fill(t, lambda W: _checked(lc_value(W, terms, const), nbits, const, context, "value", kind) >> (nbits - 1))
    fits(b, list(terms) + [(t, -(1 << (nbits - 1)))], const, nbits - 1, kind)
    return t


def range_check(b: Builder, x: np.ndarray, dt: Fixed, kind: str = "range") -> None:
    """Constrain ``x ∈ [lo, hi]`` of ``dt`` (``x + 2^(w−1)`` fits ``w`` bits)."""
    fits(b, [(x, 1)], 1 << (dt.width - 1), dt.width, kind, f"result of {b.context}")


def rescale(b: Builder, A: Sequence[tuple], B: Sequence[tuple], q: np.ndarray, dt: Fixed,
            low: Callable[[np.ndarray], np.ndarray], kind: str = "rescale", minus: Sequence[tuple] = (),
            qbits: int | None = None, frac: int | None = None) -> np.ndarray:
    """Constrain ``q = round_half_up((⟨A⟩·⟨B⟩ + Σ minus) / 2^f)`` and ``q`` in range (``frac``
    overrides ``f``).

    ``A·B = 2^f·q − 2^(f−1) + r − Σ minus`` with ``r = Σ rᵢ 2^i`` (``f`` bits).
    ``low(W)`` gives the full numerator modulo ``2^64`` (wrapping int64),
    which is enough to compute ``r``: only its low ``f`` bits matter.
    ``q`` is range-checked to ``dt`` (or to ``qbits`` signed bits).
    Returns the remainder wires: bits ``(m, f)``, or with lookups one wire per element ``(m, 1)``.
    """
    f = dt.frac if frac is None else frac
    m = np.size(q)
    half, mask = 1 << (f - 1), (1 << f) - 1
    if b.range_checks == "lookup":                        # one remainder wire, looked up
        r = b.alloc((m, 1))
        r_terms = [(r[:, 0], 1)]
        b.fill(r, lambda W: (low(W) + half) & mask)
        fits(b, r_terms, 0, f, f"{kind}.remainder")
    else:
        r = b.alloc((m, f))
        flat = r.reshape(-1)
        b.constrain([(flat, 1)], [(flat, 1), (ONE, -1)], [], f"{kind}.remainder")
        r_terms = [(r[:, i], 1 << i) for i in range(f)]
        b.fill(flat, lambda W: ((((low(W) + half) & mask)[:, None] >> np.arange(f)) & 1).reshape(-1))
    b.constrain(A, B, [(q, 1 << f), (ONE, -half)] + r_terms + [(w, -np.asarray(c)) for w, c in minus], kind)
    if qbits is None:
        range_check(b, q, dt, f"{kind}.range")
    else:
        fits(b, [(q, 1)], 1 << (qbits - 1), qbits, f"{kind}.range", f"result of {b.context}")
    return r


def positive(b: Builder, x: np.ndarray, nbits: int, kind: str = "sign") -> np.ndarray:
    """Bit wires ``x > 0`` for ``x ∈ [−2^(nbits−1), 2^(nbits−1))``: the top bit of ``x − 1 + 2^nbits``."""
    return top_bit(b, [(x, 1)], (1 << nbits) - 1, nbits + 1, kind)


def at_least(b: Builder, terms: Sequence[tuple], threshold: int, nbits: int, kind: str = "compare") -> np.ndarray:
    """Bit wires ``v ≥ threshold`` for ``v = Σ terms`` with ``|v − threshold| < 2^nbits``."""
    return top_bit(b, terms, (1 << nbits) - threshold, nbits + 1, kind)


def product(b: Builder, x: Sequence[tuple], y: Sequence[tuple], kind: str = "product") -> np.ndarray:
    """A wire ``z = ⟨x⟩·⟨y⟩`` per element (one constraint each)."""
    m = max(np.size(w) for w, _ in list(x) + list(y))
    z = b.alloc(m)
    b.constrain(x, y, [(z, 1)], kind)
    b.fill(z, lambda W: lc_value(W, x) * lc_value(W, y))
    return z


def linear(b: Builder, terms: Sequence[tuple], const: int, dt: Fixed, value: Callable | None = None,
           kind: str = "linear") -> np.ndarray:
    """A range-checked wire ``o = Σ terms + const``."""
    m = max(np.size(w) for w, _ in terms)
    o = b.alloc(m)
    b.constrain(list(terms) + [(ONE, const)], [(ONE, 1)], [(o, 1)], kind)
    b.fill(o, value or (lambda W: lc_value(W, terms, const)))
    range_check(b, o, dt, f"{kind}.range")
    return o
