"""The Ligero prover in passes over blocks of rows, in memory that does not grow with the circuit.

    pass 1   commit   rows → encode → block digests of every column          (each round: round 2 after its
                                                                             challenges)
    pass 2   tests    rows → u += r·coeffs,  q += Σ rᵢ(η)·Uᵢ(η),  p += rq·(a∘b − c, …)      (sums over rows)
    pass 3   open     rows → the t opened columns

Every pass is a sum or a concatenation over rows, and every row is a function of the witness, the
challenges and the proof's secret seed (:class:`.encoding.Encoding`). So the proof's bytes do not depend on
how the rows are grouped, and a block of encoded rows lives only while it is used. When the whole encoded
matrix fits in ``keep`` bytes it is kept from pass 1 for the others (a small circuit is not encoded three
times); otherwise passes 2 and 3 recompute the rows they need. Peak memory is then the witness, the
prepared circuit and a few blocks of ``BLOCK_CELLS`` cells.
"""
from __future__ import annotations

import copy
import os
import resource
import secrets
import sys
import time
from typing import Callable, Sequence

import numpy as np

from circuitgrad import allocator

from ...circuits import gf
from . import merkle, ntt as transforms
from .circuitdata import Prepared
from .coefficients import BLOCK_CELLS, materialized, together
from .encoding import Encoding, prf
from .params import Params
from .proofio import LigeroProof
from .protocol import Layout, layout, test_challenges, transcript, zh_on_coset
from . import contraction

__all__ = ["prove_prepared", "plan", "Passes", "Local", "KEEP_BYTES", "VALUES_BYTES", "kept_bytes", "memory",
           "peak_rss", "Watermark"]

#: the largest encoded matrix (bytes: its values on D and its coefficients) the prover keeps from the commitment
#: for the tests and the openings
KEEP_BYTES = 1 << 30
#: the largest matrix of row values (before encoding, a quarter of the encoding) kept when the encoding is not
VALUES_BYTES = 1 << 29


def kept_bytes(lay: Layout, p: Params) -> int:
    """What keeping the encoded matrix takes: every row's values on ``D`` and its coefficients."""
    return 8 * lay.total * (p.n + p.K)


def plan(lay: Layout, p: Params, keep: int | None = None, split: bool = False) -> tuple[bool, bool]:
    """``(kept, values_kept)``: whether a proof keeps the encoded matrix from the commitment (it fits ``keep``
    bytes, default :data:`KEEP_BYTES`, and the rows are not split among workers), and otherwise whether it keeps
    the rows' values (they fit :data:`VALUES_BYTES` and ``keep`` when given)."""
    limit = KEEP_BYTES if keep is None else keep
    kept = not split and kept_bytes(lay, p) <= limit
    values = not kept and not split and 8 * lay.total * p.k <= (VALUES_BYTES if keep is None
                                                                 else min(VALUES_BYTES, keep))
    return kept, values


def memory(lay: Layout, p: Params, nonzeros: int, lookup_terms: int, keep: int | None = None) -> int:
    """The memory a proof adds to its process (bytes): what :func:`prove_prepared` reports as
    ``timings["memory"]``, predicted from the circuit's sizes. ``nonzeros``: of ``A``, ``B``, ``C``;
    ``lookup_terms``: of ``L``.

    * on the NumPy path (when the compiled kernels are not in use) the prepared
      circuit's transposed matrix, 20 bytes a term (the terms sorted by wire, each with its row and its
      coefficient in ``[0, p)``); the compiled kernels scatter from the R1CS's own rows and hold none;
    * the linear test's coefficients on ``z`` (a row of the padded wires for each repetition computed at once:
      :func:`.coefficients.materialized`) and the witness, a few copies;
    * the kept matrix (:func:`kept_bytes`) when it fits ``keep`` (default :data:`KEEP_BYTES`); otherwise the
      rows recomputed in pass 2, up to 48 MiB of them at once, half a copy of the witness (its rows as
      they are encoded again), and the rows' values
      when they fit :data:`VALUES_BYTES`;
    * the round-2 rows kept whole (``g``, the Freivalds vectors) and the multiplicities;
    * one unit of encoded rows in flight (whole Merkle row blocks, at least one), and 16 MiB of smaller
      temporaries. Calibrated on the benchmark circuits, kept and streamed: 0.81–1.07 of the measured peak from
      digits to tinygpt (docs/BENCHMARKS.md, "The cost model against measurements").
    """
    kept, values_kept = plan(lay, p, keep)
    transposed = gf.compiled() is None
    wires = lay.mz * p.k
    unit = min(lay.total, max(1, BLOCK_CELLS // (p.n * merkle.ROW_BLOCK)) * merkle.ROW_BLOCK) * p.n * 8
    held = 8 * ((lay.lk.sl * lay.lk.mm + lay.cs.rows) * p.k + lay.lk.size)
    at_once = together(p.sigma, 8 * wires)                      # repetitions whose coefficients on z are held
    out = 20 * (nonzeros + lookup_terms) * transposed + 8 * at_once * wires + 24 * wires + held + unit + (16 << 20)
    if kept:
        return int(out + kept_bytes(lay, p))
    return int(out + min(unit, 48 << 20) + 12 * wires + (8 * lay.total * p.k if values_kept else 0))


def peak_rss() -> int:
    """This process's peak resident memory so far, in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _rss() -> int | None:
    """This process's resident memory now (Linux), or None."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Watermark:
    """The peak resident memory of a piece of work above the process's memory when it started: made at the start,
    :meth:`added` at the end (Linux: the high-water mark, reset by ``/proc/self/clear_refs``; elsewhere None)."""

    def __init__(self) -> None:
        self.start = _rss()
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        except OSError:
            self.start = None

    def added(self) -> int | None:
        if self.start is None:
            return None
        try:
            with open("/proc/self/status") as fh:
                hwm = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM"))
        except (OSError, StopIteration, ValueError):
            return None
        return max(0, hwm - self.start)


class _Randomness:
    """Masking randomness: the OS's CSPRNG, or a seeded generator for reproducible tests."""

    def __init__(self, rng: np.random.Generator | None):
        self.rng = rng

    def bytes(self, n: int) -> bytes:
        return secrets.token_bytes(n) if self.rng is None else self.rng.bytes(n)

    def field(self, shape: tuple) -> np.ndarray:
        count = int(np.prod(shape))
        return gf.from_bytes128(self.bytes(16 * count)).reshape(shape)


def _masks(p: Params, rnd: _Randomness) -> np.ndarray:
    """The ``3σ`` mask rows' coefficients (width ``2K − 1``): a random polynomial of degree < K (proximity), one
    of degree < K + k − 1 with ``Σ_H = 0`` (linear), and ``(X^k − 1)·s`` (quadratic)."""
    sg, K, k = p.sigma, p.K, p.k
    out = np.zeros((3 * sg, 2 * K - 1), dtype=np.int64)
    out[:sg, :K] = rnd.field((sg, K))
    lin = rnd.field((sg, p.lin_len))
    lin[:, 0] = gf.neg(gf.sum_mod(lin[:, k::k], axis=1))            # Σ_H mask = k·Σ_{j≡0 (k)} = 0
    out[sg:2 * sg, :p.lin_len] = lin
    s = rnd.field((sg, p.quad_len))
    quad = out[2 * sg:]
    quad[:, :p.quad_len] = gf.neg(s)
    quad[:, k:] = gf.add(quad[:, k:], s)
    return out


def _units(a: int, b: int, n: int, align: int = merkle.ROW_BLOCK):
    """``a … b`` in units of whole Merkle row blocks (counted from ``a``), as many as ``BLOCK_CELLS`` allows."""
    step = max(1, BLOCK_CELLS // (n * align)) * align
    return ((i, min(i + step, b)) for i in range(a, b, step))


def _chunks(m: int, n: int, per_row: int):
    """``0 … m`` in chunks of rows such that ``per_row`` rows of ``n`` cells per chunk row fit ``BLOCK_CELLS``."""
    step = max(1, BLOCK_CELLS // (n * max(1, per_row)))
    return ((i, min(i + step, m)) for i in range(0, m, step))


class _Sums:
    """Pass 2's running sums (one per call, so that threads sharing a :class:`Passes` do not mix theirs)."""

    def __init__(self, p: Params, r: np.ndarray, lin: list, rq: np.ndarray):
        self.r, self.lin, self.rq, self.ghat = r, lin, rq, [{} for _ in lin]
        self.u = np.zeros((p.sigma, p.K), dtype=np.int64)
        self.q = np.zeros((p.sigma, p.n), dtype=np.int64)
        self.pq = np.zeros((p.sigma, p.n), dtype=np.int64)

    def quad(self, at: int, products: np.ndarray) -> None:
        if len(products):
            self.pq = gf.add(self.pq, gf.matmul(self.rq[:, at:at + len(products)], products))


class Passes:
    def __init__(self, pc: Prepared, lay: Layout, p: Params, enc: Encoding, keep: bool, say):
        self.pc, self.lay, self.p, self.enc, self.say = pc, lay, p, enc, say
        self.U = np.empty((lay.total, p.n), dtype=np.int64) if keep else None          # kept: the encoding
        self.C = np.empty((lay.total, p.K), dtype=np.int64) if keep else None          # and the coefficients

    def _encode(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo … hi`` on ``D`` (their coefficients kept as well when the matrix is)."""
        if self.C is None:
            return self.enc.evals(lo, hi)
        out = np.empty((hi - lo, self.p.n), dtype=np.int64)
        for a, b in self.enc.pieces(lo, hi):
            c = None if self.enc.is_mask(a, b) else self.enc.coeffs(a, b)
            if c is not None:
                self.C[a:b] = c
            out[a - lo:b - lo] = self.enc.evals(a, b, c)
        self.U[lo:hi] = out
        return out

    # -- pass 1 -------------------------------------------------------------------------------------------------

    def digests(self, a: int, b: int, start: int) -> np.ndarray:
        """The block digests ``(n, blocks, 32)`` of rows ``a … b``, whose Merkle row blocks count from ``start``
        (the first row of their round's matrix; ``a − start`` a multiple of :data:`.merkle.ROW_BLOCK`)."""
        n, RB = self.p.n, merkle.ROW_BLOCK
        if (a - start) % RB:
            raise ValueError(f"rows {a}… do not start a Merkle row block of the matrix at {start}")
        out = np.empty((n, -(-(b - a) // RB), merkle.DIGEST), dtype=np.uint8)
        last, trim = time.monotonic(), allocator.Trimmer()
        for lo, hi in _units(a, b, n):
            U = self._encode(lo, hi)
            for x in range(lo, hi, RB):
                out[:, (x - a) // RB] = merkle.block_digests(U[x - lo:min(x + RB, hi) - lo])
            del U
            trim()
            if time.monotonic() - last > 10:
                self.say(f"committed rows {hi - a}/{b - a}")
                last = time.monotonic()
        return out

    # -- pass 2 -------------------------------------------------------------------------------------------------

    def jobs(self) -> list[tuple[str, int, int]]:
        """Pass 2's work as ``(group, lo, hi)``: chunks of rows whose products the quadratic test needs together."""
        lay, n = self.lay, self.p.n
        lk, cs = lay.lk, lay.cs
        out = [("z", lo, hi) for lo, hi in _chunks(lay.mz, n, 1)]
        out += [("abc", lo, hi) for lo, hi in _chunks(lay.mq, n, 3)]
        if lk.n:
            out += [("vh", lo, hi) for lo, hi in _chunks(lk.mv, n, 1 + lk.sl)]
            out += [("mg", lo, hi) for lo, hi in _chunks(lk.mm, n, 1 + lk.sl)]
        if cs.n:
            out += [("xy", lo, hi) for lo, hi in _chunks(cs.mx, n, 3)]
        return out

    def tests(self, r: np.ndarray, lin: list, rq: np.ndarray, part: int = 0,
              parts: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The sums over the witness rows of jobs ``part, part + parts, …`` (all of them by default):
        ``Σ rᵢ·pᵢ`` (coefficients), ``Σ rᵢ(η)·pᵢ(η)`` and ``Σ rqᵢ·(products)ᵢ`` on ``D``, for each repetition."""
        lay, p = self.lay, self.p
        acc = _Sums(p, r, lin, rq)
        mz, mq, c = lay.mz, lay.mq, lay.mz + 3 * lay.mq
        lk, cs, r2 = lay.lk, lay.cs, lay.rows
        trim = allocator.Trimmer()
        jobs = self.jobs()[part::parts]
        self._z_rows(acc, [(lo, hi) for group, lo, hi in jobs if group == "z"], trim)
        for group, lo, hi in jobs:
            trim()
            if group == "z":
                continue
            elif group == "abc":                                          # a, b, c and a∘b − c
                A, B, C = (self._rows(acc, mz + i * mq + lo, mz + i * mq + hi) for i in range(3))
                acc.quad(lo, gf.sub(gf.mul(A, B), C))
            elif group == "vh":                                           # v, h_s and h_s∘(α_s − v) − 1
                V = self._rows(acc, c + lo, c + hi)
                for s, alpha in enumerate(self.enc.alphas.tolist()):
                    H = self._rows(acc, r2 + s * lk.mv + lo, r2 + s * lk.mv + hi)
                    acc.quad(mq + s * lk.mv + lo, gf.sub(gf.mul(H, gf.sub(alpha, V)), 1))
            elif group == "mg":                                           # m, g_s
                self._rows(acc, c + lk.mv + lo, c + lk.mv + hi)
                for s in range(lk.sl):
                    at = r2 + lk.sl * lk.mv + s * lk.mm
                    self._rows(acc, at + lo, at + hi)
            else:                                                         # x_s, y_s, π_s and x_s∘y_s − π_s
                base = r2 + lk.second
                for s in range(cs.sigma):
                    X, Y, P = (self._rows(acc, base + (3 * s + i) * cs.mx + lo, base + (3 * s + i) * cs.mx + hi)
                               for i in range(3))
                    acc.quad(mq + lk.sl * lk.mv + s * cs.mx + lo, gf.sub(gf.mul(X, Y), P))
        return acc.u, acc.q, acc.pq

    def _encoded(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``a … b``: their coefficients and their values on D (kept, or computed again)."""
        coeffs = self.C[a:b] if self.C is not None else self.enc.coeffs(a, b)
        return coeffs, (self.U[a:b] if self.U is not None else self.enc.evals(a, b, coeffs))

    def _z_rows(self, acc: "_Sums", chunks: list, trim) -> None:
        """The rows of ``z`` (the first ``mz``) in ``chunks``: their proximity sum, and each repetition's linear sum,
        its coefficients on ``z`` computed for it (:func:`.coefficients.materialized`: every repetition at once
        when they fit, else a group at a time, streamed rows encoded again for each group) and dropped after."""
        if not chunks:
            return
        first = True
        for group, reps in materialized([R for R, _ in acc.lin]):         # σ ≥ 1 (Params.validate)
            Rz = [R.window(0, self.lay.mz) for R in reps]
            for lo, hi in chunks:
                coeffs, U = self._encoded(lo, hi)
                if first:
                    acc.u = gf.add(acc.u, gf.matmul(acc.r[:, lo:hi], coeffs))
                for j, R in zip(group, Rz):
                    part = R.window(lo, hi).combine(U, np.arange(hi - lo), self.p.n, acc.ghat[j])
                    acc.q[j] = gf.add(acc.q[j], part)
                del coeffs, U
                trim()
            first = False
            del Rz, reps

    def _rows(self, acc: "_Sums", a: int, b: int) -> np.ndarray:
        """Add rows ``a … b`` (witness rows of either round) to the proximity and linear sums; their values on D."""
        if a >= b:
            return np.zeros((0, self.p.n), dtype=np.int64)
        coeffs, U = self._encoded(a, b)
        w = a if a < self.lay.mw else self.lay.mw + a - self.lay.rows      # position among the witness rows
        acc.u = gf.add(acc.u, gf.matmul(acc.r[:, w:w + b - a], coeffs))
        for j, (R, _) in enumerate(acc.lin):
            part = R.window(w, w + b - a).combine(U, np.arange(b - a), self.p.n, acc.ghat[j])
            acc.q[j] = gf.add(acc.q[j], part)
        return U

    # -- pass 3 -------------------------------------------------------------------------------------------------

    def columns(self, a: int, b: int, idx: list, powers: np.ndarray) -> np.ndarray:
        """Rows ``a … b`` at the opened columns ``idx``."""
        if self.U is not None:
            return self.U[a:b][:, idx]
        out = np.empty((b - a, len(idx)), dtype=np.int64)
        trim = allocator.Trimmer()
        for lo, hi in _chunks(b - a, len(idx) + self.p.K, 1):
            out[lo:hi] = self.enc.at(a + lo, a + hi, powers)
            trim()
        return out


class Local:
    """Runs the passes of a proof in this process: the reference that a split across workers must match
    (``backends/zk/systems/cluster.py`` has the Dask one, ``Split``, with the same methods)."""

    def start(self, pr: Passes) -> None:
        self.pr = pr

    def second(self, alphas: np.ndarray, draws: list) -> None:
        self.pr.enc.start_second(alphas, draws)

    def digests(self, a: int, b: int) -> np.ndarray:
        return self.pr.digests(a, b, a)

    def tests(self, snapshot, challenges: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.pr.tests(*challenges)

    def columns(self, a: int, b: int, idx: list, powers: np.ndarray) -> np.ndarray:
        return self.pr.columns(a, b, idx, powers)


def prove_prepared(pc: Prepared, values: np.ndarray, p: Params, statement: str = "", public_outputs: int = 0,
                   rng: np.random.Generator | None = None, log: Callable[[str], None] | None = None,
                   columns: Sequence[int] | None = None, digest: bytes | None = None,
                   keep: int | None = None, split=None) -> LigeroProof:
    """Prove that ``values`` satisfies the prepared circuit (no satisfiability check: see ``zk.prove``).

    ``digest`` (default: the constraint system's) is what the proof is bound to; ``zk.prove`` passes
    the circuit's digest, which covers its statement as well.

    ``rng`` draws the masking randomness and the seed of every row's masking coefficients (default: the OS's
    CSPRNG). A seeded NumPy generator is for reproducible tests only: it is not cryptographic, and zero
    knowledge rests on the masks being unpredictable. ``keep`` (bytes, default :data:`KEEP_BYTES`): the
    largest encoded matrix kept between the passes, and the largest matrix of row values kept when it is not
    (:func:`plan`); above it the rows are recomputed (the same proof).
    ``columns`` fixes the opened columns instead of the transcript's choice; only the zero-knowledge test
    uses it, and such a proof does not verify. ``split`` runs the passes elsewhere (a
    ``cluster.Split``: rows shared among Dask workers); the proof's bytes are the same.
    """
    p.validate()
    say = log or (lambda s: None)
    rnd = _Randomness(rng)
    timings, t0 = {}, time.perf_counter()
    lay = layout(pc, p)
    if pc.n_lookups and p.lookup_sigma < 1:
        raise ValueError(f"ligero: the circuit has {pc.n_lookups} lookups, so lookup_sigma must be at least 1")
    if pc.contraction_cells and p.contraction_sigma < 1:
        raise ValueError(f"ligero: the circuit has {len(pc.r1cs.contractions)} contractions, so contraction_sigma "
                         f"must be at least 1")
    k, n, t, sg = p.k, p.n, p.t, p.sigma
    z = gf.reduce(np.asarray(values))
    if len(z) != pc.n_wires:
        raise ValueError(f"ligero: the witness has {len(z)} values, the circuit {pc.n_wires} wires")
    seed = rnd.bytes(32)
    masks = _masks(p, rnd)
    enc = Encoding(pc, z, lay, p, seed, masks)
    ex = split or Local()
    kept, values_kept = plan(lay, p, keep, split is not None)
    if values_kept:
        enc.keep_values()
    ex.start(Passes(pc, lay, p, enc, kept, say))
    salts = [prf(seed, b"salt1", j, 16) for j in range(n)]
    tree = merkle.Tree(merkle.leaves_of(ex.digests(0, lay.rows), salts))
    allocator.trim(allocator.TRIM_AT_LEAST)         # each phase's temporaries back to the kernel
    timings["commit"] = time.perf_counter() - t0
    say(f"committed {lay.rows} rows × {n} columns" + (" (kept)" if kept else ""))
    proof = LigeroProof(p, digest or pc.digest, z[1:1 + pc.n_public].copy(), public_outputs, statement, tree.root,
                        None, None, None, None, None, None, lookups=pc.n_lookups,
                        contractions=pc.contraction_cells, lookup_table=pc.lookup_table)
    T = transcript(proof.header(), proof.public)       # P → V: the header and the public values
    T.absorb("root", tree.root)                         # P → V: the round-1 commitment
    alphas, draws = np.zeros(0, dtype=np.int64), []
    if lay.second:                                  # round 2: h, g and x, y, π after the challenges
        t0 = time.perf_counter()
        if lay.lk.n:
            alphas = T.field("lookup.alpha", lay.lk.sl)                 # V → P: the lookup challenges
        if lay.cs.n:
            draws = contraction.challenges(T, pc.contraction, lay.cs)   # V → P: the Freivalds challenges
        ex.second(alphas, draws)
        salts2 = [prf(seed, b"salt2", j, 16) for j in range(n)]
        tree2 = merkle.Tree(merkle.leaves_of(ex.digests(lay.rows, lay.total), salts2))
        T.absorb("root2", tree2.root)                   # P → V: the round-2 commitment
        proof.root2 = tree2.root
        allocator.trim(allocator.TRIM_AT_LEAST)
        timings["lookup" if not lay.cs.n else "round2"] = time.perf_counter() - t0
        if lay.lk.n:
            say(f"committed {lay.lk.second} lookup rows ({pc.n_lookups} lookups, {lay.lk.sl} challenges)")
        if lay.cs.n:
            say(f"committed {lay.cs.rows} contraction rows ({len(pc.r1cs.contractions)} contractions, "
                f"{pc.contraction_cells} cells, {lay.cs.sigma} draws)")
    t0 = time.perf_counter()
    snapshot = copy.deepcopy(T)
    challenges = test_challenges(pc, lay, T, alphas, draws)     # V → P: the three tests' challenges
    u, qd, pq = ex.tests(snapshot, challenges)
    del challenges                                  # the logUp tables' coefficients (0.6 GiB on tinygpt) are done with
    mask_evals = enc.evals(lay.mw, lay.rows)
    proof.u = gf.add(u, masks[:sg, :p.K])
    proof.q = transforms.coset_interp(gf.add(qd, mask_evals[sg:2 * sg]))[:, :p.lin_len]
    zh_inv = gf.batch_inv(zh_on_coset(p))
    p0 = gf.add(pq, mask_evals[2 * sg:])
    proof.h = transforms.coset_interp(gf.mul(p0, np.tile(zh_inv, k)))[:, :p.quad_len]
    for name in ("u", "q", "h"):                    # P → V: the tests' polynomials
        T.absorb(name, getattr(proof, name).astype("<i8").tobytes())
    allocator.trim(allocator.TRIM_AT_LEAST)
    timings["tests"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    idx = list(columns) if columns is not None else T.indices("columns", t, n)   # V → P: the columns to open
    w = gf.root_of_unity(n)
    eta = np.array([gf.GENERATOR * pow(w, j, gf.P) % gf.P for j in idx], dtype=np.int64)
    powers = gf.powers(eta, 2 * p.K)
    proof.columns = ex.columns(0, lay.rows, idx, powers)       # P → V: the opened columns and their paths
    proof.salts = [salts[i] for i in idx]
    proof.siblings = tree.open(idx)
    if lay.second:
        proof.columns2 = ex.columns(lay.rows, lay.total, idx, powers)
        proof.salts2 = [salts2[i] for i in idx]
        proof.siblings2 = tree2.open(idx)
    timings["open"] = time.perf_counter() - t0
    timings["peak_rss"] = peak_rss()
    proof.timings = timings
    return proof
