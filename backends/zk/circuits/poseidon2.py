"""Poseidon2 over our prime fields: the permutation, a fixed-length sponge, and their R1CS gadgets.

The permutation is Poseidon2 (Grassi, Khovratovich, Schofnegger, "Poseidon2: A Faster Version of the
Poseidon Hash Function", AFRICACRYPT 2023, eprint 2023/323; linear layers: Sect. 5, ``M4`` from App. B)
exactly as its reference implementation HorizenLabs/poseidon2 (commit 055bde3) defines it:
``poseidon2()`` in ``poseidon2_rust_params.sage`` and ``Poseidon2::permutation`` in
``plain_implementations/src/poseidon2/poseidon2.rs``::

    x ← M_E·x
    R_F/2 full rounds:     x ← M_E·(x + c_r)^d              (S-box on every element)
    R_P partial rounds:    x_0 ← (x_0 + ĉ_r)^d;  x ← M_I·x
    R_F/2 full rounds:     x ← M_E·(x + c_r)^d

``M_E`` is ``circ(2, 1)``, ``circ(2, 1, 1)``, ``M4 = [[5,7,1,3],[4,6,1,1],[1,3,5,7],[1,1,4,6]]`` (``t = 4``)
or ``circ(2·M4, M4, …, M4)`` (``t = 8, 12, 16, …``). ``M_I = J + diag(μ)`` (``J`` all ones) with ``μ`` the
reference's ``MAT_DIAG{t}_M_1`` (``μ_i·x_i + Σx`` in ``matmul_internal``): ``(1, 2)``, ``(1, 1, 2)`` for
``t = 2, 3``, else drawn from the Grain LFSR and checked. ``external_constants`` are the ``R_F`` full
rows of the reference's ``RC{t}`` (first half, then second half), ``internal_constants`` the first
entry of each partial row (the rest are 0). :mod:`.poseidon2_params` derives all of it for any prime
(a port of the script; its docstring says how). BN254 ``t = 3``, Goldilocks ``t = 12`` and BabyBear
``t = 24`` reproduce the published constants and known answers (``tests/test_poseidon2.py``).
Our LIGERO51 instance: ``t = 16, d = 3, R_F = 8, R_P = 34``, capacity 4.

**Sponge** (:meth:`Poseidon2.hash`; ours, the reference defines only the permutation). The rate is the
first ``r = t − c`` elements of the state, the capacity the last ``c``. The initial state is zero but
for the capacity: ``state[r] = L`` (the input length) and ``state[r + 1] = domain``, or with ``c = 1``
the one element ``L + 2^64·domain``; so lengths and domains never share an initial state, and padding
the last chunk with zeros is safe. The ``L`` canonical elements are added into the rate ``r`` at a
time, each chunk followed by a permutation (at least one: ``L = 0`` permutes the initial state). The
digest is the first ``c`` elements of the final state.

**Gadgets** (LIGERO51 only: witness values are int64). Only the S-boxes cost constraints, ``x^d`` by the
binary addition chain (``d = 3``: ``x·x = x2, x2·x = y``; ``d = 5``: ``x2, x4 = x2·x2, y = x4·x``): a
permutation costs ``len(chain)·(R_F·t + R_P)`` (LIGERO51: 324, 27 per absorbed element). The state is
kept as linear combinations, dense coefficient vectors over the last S-box outputs (in partial rounds:
the last full round's outputs and every partial output so far), so round constants and both matrices
fold into the coefficients, and no S-box input is a wire. The last product of the last layer is
constrained against the output wires ``o`` as ``(M_E^{-1}·o)_j``, so ``o = M_E·y`` costs nothing. The
sponge gadget builds all its permutations at once (one block per S-box step for every instance and
chunk); its witness runs them in order.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Sequence

import numpy as np

from . import poseidon2_params as PP
from . import gf
from .field import BN254, LIGERO51, Field
from .r1cs import Builder

__all__ = ["Poseidon2", "instance", "poseidon2", "permute_gadget", "hash_gadget", "sbox_chain"]

ONE = 0  # the constant wire


def sbox_chain(d: int) -> list[tuple[int, int]]:
    """The products computing ``x^d``: step ``s`` makes value ``s + 1`` from values ``i, j`` (value 0 is ``x``)."""
    steps, squares = [], [0]
    for _ in range(1, d.bit_length()):
        steps.append((squares[-1], squares[-1]))
        squares.append(len(steps))
    acc = squares[-1]
    for k in range(d.bit_length() - 2, -1, -1):
        if d >> k & 1:
            steps.append((acc, squares[k]))
            acc = len(steps)
    return steps


@dataclass(frozen=True)
class Poseidon2:
    """One Poseidon2 instance with a fixed-length sponge (see the module docstring)."""
    p: int
    t: int
    d: int
    rounds_f: int
    rounds_p: int
    external_constants: tuple[tuple[int, ...], ...]     # rounds_f rows of t
    internal_constants: tuple[int, ...]                 # rounds_p
    internal_diag: tuple[int, ...]                      # μ: M_I = J + diag(μ), the reference's MAT_DIAG_M_1
    capacity: int                                        # sponge capacity in field elements

    def __post_init__(self):
        if len(self.external_constants) != self.rounds_f or any(len(r) != self.t for r in self.external_constants):
            raise ValueError(f"external_constants must be {self.rounds_f} rows of {self.t}")
        if len(self.internal_constants) != self.rounds_p or len(self.internal_diag) != self.t:
            raise ValueError("internal_constants must have rounds_p entries and internal_diag t")
        if self.rounds_f % 2 or math.gcd(self.d, self.p - 1) != 1:
            raise ValueError("rounds_f must be even and gcd(d, p − 1) = 1")
        if not 1 <= self.capacity <= self.t - self.capacity:
            raise ValueError(f"capacity must be in 1..t/2 (the digest is read from the rate), got {self.capacity}")

    @property
    def rate(self) -> int:
        return self.t - self.capacity

    @property
    def constraints_per_permutation(self) -> int:
        return len(sbox_chain(self.d)) * (self.rounds_f * self.t + self.rounds_p)

    @cached_property
    def external_matrix(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(r) for r in PP.external_matrix(self.t))

    @cached_property
    def internal_matrix(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple((1 + (self.internal_diag[i] if i == j else 0)) % self.p for j in range(self.t))
                     for i in range(self.t))

    # ---------------------------------------------------------------- native, Python ints
    def permute(self, state: Sequence[int]) -> list[int]:
        """The permutation of ``t`` field elements (reduced mod ``p``), as the reference computes it."""
        p, d = self.p, self.d
        if len(state) != self.t:
            raise ValueError(f"Poseidon2.permute: the state has {self.t} elements, got {len(state)}")
        E, mu = self.external_matrix, self.internal_diag
        ext = lambda x: [sum(e * v for e, v in zip(row, x)) % p for row in E]  # noqa: E731
        x = ext([operator.index(v) % p for v in state])
        h = self.rounds_f // 2
        for c in self.external_constants[:h]:
            x = ext([pow(v + k, d, p) for v, k in zip(x, c)])
        for c in self.internal_constants:
            x[0] = pow(x[0] + c, d, p)
            s = sum(x)
            x = [(s + m * v) % p for m, v in zip(mu, x)]
        for c in self.external_constants[h:]:
            x = ext([pow(v + k, d, p) for v, k in zip(x, c)])
        return x

    def _iv(self, length: int, domain: int) -> list[int]:
        length, domain = operator.index(length), operator.index(domain)
        state = [0] * self.t
        if self.capacity >= 2:
            if not (0 <= length < self.p and 0 <= domain < self.p):
                raise ValueError(f"Poseidon2 sponge: length and domain must be in [0, p), got {length}, {domain}")
            state[self.rate], state[self.rate + 1] = length, domain
        else:
            v = length + (domain << 64)
            if not (0 <= length < 1 << 64 and domain >= 0 and v < self.p):
                raise ValueError(f"Poseidon2 sponge: length {length} must be below 2^64 and length + 2^64·domain "
                                 f"below p (domain {domain})")
            state[self.rate] = v
        return state

    def hash(self, values: Sequence[int], domain: int = 0) -> list[int]:
        """The sponge of ``L`` canonical field elements: ``capacity`` elements."""
        vals = []
        for i, v in enumerate(values):
            v = operator.index(v)
            if not 0 <= v < self.p:
                raise ValueError(f"Poseidon2.hash: values[{i}] = {v} is not a canonical field element "
                                 f"(0 <= v < p = {self.p})")
            vals.append(v)
        state, r = self._iv(len(vals), domain), self.rate
        for k in range(max(1, -(-len(vals) // r))):
            for j, v in enumerate(vals[k * r:(k + 1) * r]):
                state[j] = (state[j] + v) % self.p
            state = self.permute(state)
        return state[:self.capacity]

    # ---------------------------------------------------------------- native, vectorised (LIGERO51)
    def _need_gf(self, what: str) -> None:
        if self.p != gf.P:
            raise ValueError(f"Poseidon2.{what} works in LIGERO51 (p = {gf.P}); this instance has p = {self.p}")

    @cached_property
    def _np(self) -> dict:
        E = np.array(self.external_matrix, dtype=np.int64)
        return {"E": E, "Einv": np.array(PP.inverse(self.external_matrix, self.p), dtype=np.int64),
                "rc": np.array(self.external_constants, dtype=np.int64),
                "ic": np.array(self.internal_constants, dtype=np.int64),
                "mu": np.array(self.internal_diag, dtype=np.int64)}

    def _run(self, X: np.ndarray, record: list | None = None) -> np.ndarray:
        """The permutation of the rows of ``X`` (canonical int64). With ``record``, appends every S-box
        intermediate (the gadget's wires, in its order: the chain values of each layer, all but the last
        layer's result) and then the output."""
        P, c = np.int64(gf.P), self._np
        E, chain, h = c["E"], sbox_chain(self.d), self.rounds_f // 2

        def ext(X):
            return np.mod(X @ E.T, P)                    # |M_E| row sums ≤ 16·(t/4 + 1): exact in int64

        def sbox(x, last=False):
            v = [x]
            for i, j in chain:
                v.append(gf.mul(v[i], v[j]))
            if record is not None:
                record.extend(v[1:-1] if last else v[1:])
            return v[-1]

        X = ext(np.asarray(X, dtype=np.int64))
        for r in range(h):
            X = ext(sbox(gf.add(X, c["rc"][r])))
        for r in range(self.rounds_p):
            X = X.copy()
            X[:, 0] = sbox(gf.add(X[:, 0], c["ic"][r]))
            X = gf.add(gf.mul(X, c["mu"]), np.mod(X.sum(axis=1), P)[:, None])
        for r in range(h, self.rounds_f):
            X = ext(sbox(gf.add(X, c["rc"][r]), last=r == self.rounds_f - 1))
        if record is not None:
            record.append(X)
        return X

    def permute_batch(self, states: np.ndarray) -> np.ndarray:
        """:meth:`permute` of every row of ``(n, t)`` canonical int64 elements (LIGERO51)."""
        self._need_gf("permute_batch")
        X = np.asarray(states)
        if X.ndim != 2 or X.shape[1] != self.t:
            raise ValueError(f"Poseidon2.permute_batch: states must have shape (n, {self.t}), got {list(X.shape)}")
        _check_canonical(X, self.p, "permute_batch: states")
        return self._run(X.astype(np.int64))

    def hash_batch(self, values: np.ndarray, domain: int = 0) -> np.ndarray:
        """:meth:`hash` of every row of ``(n, L)`` canonical elements: ``(n, capacity)`` (LIGERO51)."""
        self._need_gf("hash_batch")
        V = np.asarray(values)
        if V.ndim != 2:
            raise ValueError(f"Poseidon2.hash_batch: values must have shape (n, L), got {list(V.shape)}")
        _check_canonical(V, self.p, "hash_batch: values")
        V = V.astype(np.int64)
        n, L = V.shape
        r = self.rate
        X = np.broadcast_to(np.array(self._iv(L, domain), dtype=np.int64), (n, self.t)).copy()
        for k in range(max(1, -(-L // r))):
            chunk = V[:, k * r:(k + 1) * r]
            X[:, :chunk.shape[1]] = gf.add(X[:, :chunk.shape[1]], chunk)
            X = self._run(X)
        return X[:, :self.capacity]


def _check_canonical(V: np.ndarray, p: int, what: str) -> None:
    if V.dtype.kind not in "iuO":
        raise TypeError(f"Poseidon2.{what} must be integers, got {V.dtype}")
    bad = np.argwhere((V < 0) | (V >= p))
    if len(bad):
        idx = tuple(int(i) for i in bad[0])
        raise ValueError(f"Poseidon2.{what}[{', '.join(map(str, idx))}] = {V[idx]} is not a canonical field "
                         f"element (0 <= v < p = {p})")


# ------------------------------------------------------------------------------------------ instances
@lru_cache(maxsize=None)
def _derive(p: int, t: int, d: int, security_bits: int) -> tuple:
    R_F, R_P = PP.round_numbers(p, t, d, security_bits)
    grain = PP.Grain(p.bit_length(), t, R_F, R_P)
    full, partial = PP.round_constants(grain, p, t, R_F, R_P)
    mu = PP.internal_diagonal(grain, p, t)
    PP.inverse(PP.external_matrix(t), p)                 # M_E must be invertible mod p
    return R_F, R_P, tuple(tuple(r) for r in full), tuple(partial), tuple(mu)


@lru_cache(maxsize=None)
def instance(p: int, t: int, d: int | None = None, security_bits: int = 128, capacity: int | None = None) -> Poseidon2:
    """Poseidon2 over ``F_p`` with state width ``t``, derived as the reference script derives it.

    ``d`` defaults to the smallest ``d ≥ 3`` with ``gcd(d, p − 1) = 1``. ``capacity`` defaults to the
    smallest ``c`` with ``c·(bits(p) − 1) ≥ security_bits`` (1 for 254-bit fields, the reference's
    ``t = 3`` sponge). The first call for ``(p, t, d, security_bits)`` takes up to a few seconds for
    ``t ≥ 4`` (the internal matrix's checks); later calls are cached.
    """
    p, t = int(p), int(t)
    if not PP.is_prime(p) or p < 5:
        raise ValueError(f"Poseidon2 needs a prime field with p ≥ 5, got p = {p}")
    PP.external_matrix(t)                                 # t = 2, 3 or a multiple of 4
    d = PP.sbox_degree(p) if d is None else int(d)
    if d < 3 or math.gcd(d, p - 1) != 1:
        raise ValueError(f"x^{d} is not a permutation of F_p (need d ≥ 3 and gcd(d, p − 1) = 1)")
    if capacity is None:
        capacity = -(-security_bits // (p.bit_length() - 1))
    R_F, R_P, full, partial, mu = _derive(p, t, d, int(security_bits))
    return Poseidon2(p, t, d, R_F, R_P, full, partial, mu, int(capacity))


def poseidon2(field: Field) -> Poseidon2:
    """Our instance for a circuit field: BN254 ``t = 3, d = 5``, capacity 1 (the reference's published
    instance); LIGERO51 ``t = 16, d = 3``, capacity 4 (rate 12; ``4·51/2 = 102``-bit collision resistance)."""
    if field.p == BN254.p:
        return instance(BN254.p, 3, capacity=1)
    if field.p == LIGERO51.p:
        return instance(LIGERO51.p, 16, capacity=4)
    raise ValueError(f"no Poseidon2 instance is chosen for {field}; use poseidon2.instance(p, t, ...)")


# -------------------------------------------------------------------------------------------- gadgets
def _full(a, shape) -> np.ndarray:
    """``a`` broadcast to ``shape`` and flattened, as a fresh array (the builder keeps the terms until
    ``finish``, so they must not be views of arrays that change later)."""
    return np.array(np.broadcast_to(a, shape), dtype=np.int64).reshape(-1)


def _layer_terms(basis: list, coef: np.ndarray, const: np.ndarray, m: int) -> list:
    """The ``k = len(const)`` linear combinations ``coef·basis + const`` for ``m`` instances: terms over
    ``m·k`` rows (instance-major)."""
    k = len(const)
    terms = []
    for i, (w, c) in enumerate(basis):
        col = coef[:, i]
        if not col.any():
            continue
        cc = gf.mul(np.reshape(c, (-1, 1)), col[None, :]) if np.ndim(c) else gf.mul(col, int(c))[None, :]
        ww = np.reshape(w, (-1, 1)) if np.ndim(w) else np.int64(w)
        terms.append((_full(ww, (m, k)), _full(cc, (m, k))))
    if const.any():
        terms.append((ONE, _full(const[None, :], (m, k))))
    return terms


def _build(b: Builder, basis: list, coef: np.ndarray, const: np.ndarray, params: Poseidon2, m: int,
           out: np.ndarray, kind: str) -> list:
    """Constraints of ``m`` permutations of the state ``coef·basis + const`` (``coef (t, nb)``, field
    elements) with output wires ``out (m, t)``; returns the wires it allocated, in :meth:`Poseidon2._run`'s
    record order."""
    P, t, c, chain = np.int64(gf.P), params.t, params._np, sbox_chain(params.d)
    E, Einv = c["E"], c["Einv"]
    allocated = []

    def sbox(basis, coef, const, last, tag):
        k = len(const)
        vals = [_layer_terms(basis, coef, const, m)]
        for s, (i, j) in enumerate(chain):
            if last and s == len(chain) - 1:             # x^(d-1)·x = M_E^{-1}·out
                C = [(_full(out[:, q][:, None], (m, k)), _full(Einv[:, q][None, :], (m, k))) for q in range(t)]
                b.constrain(vals[i], vals[j], C, tag)
                return None
            w = b.alloc((m, k))
            allocated.append(w)
            b.constrain(vals[i], vals[j], [(w.reshape(-1), 1)], tag)
            vals.append([(w.reshape(-1), 1)])
        return w

    def full(const_r, last):
        y = sbox(basis, coef, gf.add(const, const_r), last, f"{kind}.full")
        return [(y[:, j], 1) for j in range(t)] if y is not None else None

    coef, const = np.mod(E @ coef, P), np.mod(E @ const, P)
    h = params.rounds_f // 2
    for r in range(h):
        basis, coef, const = full(c["rc"][r], False), E.copy(), np.zeros(t, dtype=np.int64)
    for r in range(params.rounds_p):
        const = const.copy()
        const[0] = gf.add(const[0], c["ic"][r])
        y = sbox(basis, coef[:1], const[:1], False, f"{kind}.partial")
        basis = basis + [(y[:, 0], 1)]
        coef = np.concatenate([coef, np.zeros((t, 1), dtype=np.int64)], axis=1)
        coef[0] = 0
        coef[0, -1] = 1
        const[0] = 0
        coef = gf.add(gf.mul(c["mu"][:, None], coef), np.mod(coef.sum(axis=0), P)[None, :])
        const = gf.add(gf.mul(c["mu"], const), np.mod(const.sum(), P))
    for r in range(h, params.rounds_f):
        basis, coef, const = full(c["rc"][r], r == params.rounds_f - 1), E.copy(), np.zeros(t, dtype=np.int64)
    return allocated


def _need(b: Builder, params: Poseidon2) -> None:
    if params.p != gf.P or b.field.p != gf.P:
        raise ValueError(f"the Poseidon2 gadgets work over LIGERO51 (int64 witness values); the builder is over "
                         f"{b.field} and the instance over p = {params.p}")


def _values(W: np.ndarray, basis: list, coef: np.ndarray, const: np.ndarray) -> np.ndarray:
    """The canonical values ``(m, t)`` of the state ``coef·basis + const``."""
    X = const[None, :]
    for i, (w, c) in enumerate(basis):
        v = gf.mul(gf.reduce(W[w]), gf.reduce(c))
        X = gf.add(X, gf.mul(np.reshape(v, (-1, 1)), coef[:, i][None, :]))
    return X


def permute_gadget(b: Builder, state, params: Poseidon2, kind: str = "poseidon2") -> np.ndarray:
    """Wires ``S + (t,)`` of the permutation of ``state``: wires ``S + (t,)``, or ``t`` linear combinations
    (lists of ``(wires, coeffs)`` terms, wires and coefficient arrays broadcast to a common shape ``S``).

    Costs ``params.constraints_per_permutation`` constraints per instance (the S-boxes only)."""
    _need(b, params)
    t = params.t
    if isinstance(state, np.ndarray):
        if state.ndim < 1 or state.shape[-1] != t:
            raise ValueError(f"permute_gadget: state wires must have shape S + ({t},), got {list(state.shape)}")
        S = state.shape[:-1]
        m = math.prod(S)
        flat = state.reshape(m, t).astype(np.int64)
        basis = [(flat[:, j], 1) for j in range(t)]
        coef, const = np.eye(t, dtype=np.int64), np.zeros(t, dtype=np.int64)
    else:
        if len(state) != t:
            raise ValueError(f"permute_gadget: the state has {t} entries, got {len(state)}")
        S = np.broadcast_shapes(*(np.shape(x) for lc in state for term in lc for x in term))
        m = math.prod(S)
        basis, rows = [], []
        for j, lc in enumerate(state):
            for w, c in lc:
                basis.append((np.broadcast_to(w, S).reshape(-1).astype(np.int64) if np.ndim(w) else int(w),
                              gf.reduce(np.broadcast_to(c, S).reshape(-1)) if np.ndim(c) else int(c) % gf.P))
                rows.append(j)
        coef = np.zeros((t, len(basis)), dtype=np.int64)
        coef[rows, np.arange(len(basis))] = 1
        const = np.zeros(t, dtype=np.int64)
    out = b.alloc((m, t))
    allocated = _build(b, basis, coef, const, params, m, out, kind)

    def fill(W):
        record = []
        params._run(np.broadcast_to(_values(W, basis, coef, const), (m, t)), record)
        return np.concatenate([v.reshape(-1) for v in record])
    b.fill(np.concatenate([w.reshape(-1) for w in allocated] + [out.reshape(-1)]), fill)
    return out.reshape(S + (t,))


def hash_gadget(b: Builder, values_wires: np.ndarray, params: Poseidon2, domain: int = 0) -> np.ndarray:
    """Digest wires ``S + (capacity,)`` of :meth:`Poseidon2.hash` of the wires ``S + (L,)`` (their values
    taken mod ``p``). All ``⌈L / rate⌉`` permutations (at least one) are built at once."""
    _need(b, params)
    V = np.asarray(values_wires, dtype=np.int64)
    if V.ndim < 1:
        raise ValueError("hash_gadget: values_wires must have shape S + (L,)")
    S, L = V.shape[:-1], V.shape[-1]
    m, t, r = math.prod(S), params.t, params.rate
    V = V.reshape(m, L)
    K = max(1, -(-L // r))
    iv = np.array(params._iv(L, domain), dtype=np.int64)
    out = b.alloc((m * K, t))
    o = out.reshape(m, K, t)
    basis = []
    for j in range(t):                                    # the previous output (k ≥ 1) or the IV (k = 0)
        w = np.zeros((m, K), dtype=np.int64)
        w[:, 1:] = o[:, :-1, j]
        cf = np.ones((m, K), dtype=np.int64)
        cf[:, 0] = iv[j]
        basis.append((w.reshape(-1), cf.reshape(-1)))
    padded = np.zeros((m, K * r), dtype=np.int64)         # wire 0 with coefficient 0 pads the last chunk
    padded[:, :L] = V
    valid = (np.arange(K * r) < L).astype(np.int64)
    for j in range(r):
        basis.append((padded[:, j::r].reshape(-1), np.broadcast_to(valid[j::r], (m, K)).reshape(-1)))
    coef = np.concatenate([np.eye(t, dtype=np.int64), np.eye(t, r, dtype=np.int64)], axis=1)
    allocated = _build(b, basis, coef, np.zeros(t, dtype=np.int64), params, m * K, out, "poseidon2.hash")

    def fill(W):
        X = np.broadcast_to(iv, (m, t)).copy()
        records = []
        for k in range(K):
            chunk = gf.reduce(W[V[:, k * r:(k + 1) * r]])
            X = X.copy()                                  # the previous output is recorded: keep it
            X[:, :chunk.shape[1]] = gf.add(X[:, :chunk.shape[1]], chunk)
            records.append([])
            X = params._run(X, records[-1])
        return np.concatenate([np.stack([rec[i] for rec in records], axis=1).reshape(-1)
                               for i in range(len(records[0]))])
    b.fill(np.concatenate([w.reshape(-1) for w in allocated] + [out.reshape(-1)]), fill)
    return o[:, K - 1, :params.capacity].reshape(S + (params.capacity,))
