"""The Ligero argument for R1CS (Ames, Hazay, Ishai, Venkitasubramaniam, CCS 2017).

The prover commits to one matrix whose rows are Reed–Solomon codewords::

    rows  [ z (wires) | a = Az | b = Bz | c = Cz | σ proximity masks | σ linear masks | σ quadratic masks ]
           └──── k values per row on H, t random coefficients × (X^k − 1) ────┘

Row ``i`` holds the polynomial ``pᵢ = interp_H(xᵢ) + (X^k − 1)·ρᵢ`` with
``deg ρᵢ < t``, evaluated on the coset ``D = 3·⟨ω_n⟩``. Every column ``j`` is
hashed with a salt into a Merkle tree. Three tests follow, each repeated
``σ`` times, with challenges drawn from the Fiat–Shamir transcript. The
transcript covers the header (parameters, field, circuit digest), the public
values and every message.

* **Proximity**: ``u = Σ rᵢ pᵢ + mask`` has degree < K.
* **Linear**: ``a − Az = b − Bz = c − Cz = 0`` and ``z[:1+n_pub] = (1, public)``.
  With random ``r`` the prover sends ``q = Σ rᵢ(X)·pᵢ(X) + mask``. Here ``rᵢ(X)``
  interpolates row ``i`` of the combined coefficient vector on H, and the
  verifier checks ``Σ_{h∈H} q(h) = Σ r_pub·public``.
* **Quadratic**: ``a∘b = c``. The prover sends
  ``h = (Σ rᵢ (pₐᵢ pᵦᵢ − p꜀ᵢ) + mask) / (X^k − 1)``, which is a polynomial
  only if every product vanishes on H.

A circuit with lookups (``range_checks="lookup"``) adds the rows ``v | m`` to
this commitment and a second commitment ``h | g`` after the lookup challenges
(:mod:`.lookup`): the linear and quadratic tests then cover the lookup
constraints too, over the rows of both commitments, and the verifier opens
the same ``t`` columns of both.

A circuit with contractions (``contractions="argument"``: exact matrix products
``C = A·B`` of committed values) adds the rows ``x_s | y_s | π_s`` of
Freivalds' check to that second commitment, after its challenges ``u_s, v_s``
(:mod:`.contraction`); again the linear and quadratic tests cover their
constraints. Without lookups the second commitment holds them alone.

The verifier then opens ``t`` columns and checks every test's polynomial
against the opened values. The masks are a random polynomial of degree
< K; a random polynomial of degree < K + k − 1 with ``Σ_H = 0``; and
``(X^k − 1)·s``. They make every sent polynomial uniform given what it must
satisfy. The ``t`` masking coefficients per row make the ``t`` opened
evaluations of each witness row uniform (``D ∩ H = ∅``).
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import numpy as np

from ...circuits import gf, tables
from . import coefficients, contraction, lookup, merkle
from .circuitdata import Prepared
from .coefficients import Rows
from .params import DEFAULT_SOUNDNESS, Params, choose, meets, soundness_bits
from .proofio import PROTOCOL, LigeroProof
from .transcript import Transcript

__all__ = ["LigeroProof", "verify_prepared", "expected_params", "Reject", "PROTOCOL", "Layout", "layout", "transcript",
           "test_challenges", "quad_rows", "zh_on_coset"]

#: the most repetitions a verifier accepts (``choose`` picks 3 for 100 bits)
MAX_SIGMA = 8


class Reject(Exception):
    """Why a proof does not verify."""


@dataclass
class Layout:
    """Row ranges of the two committed matrices, stacked: round 1 (witness, lookup values, masks), round 2
    (lookup inverses, then the contractions' Freivalds rows)."""
    k: int
    mz: int
    mq: int
    sigma: int
    lk: lookup.Shape
    cs: contraction.Shape = contraction.Shape(0, 1, 0)

    @property
    def mw(self) -> int:
        """Witness rows of round 1."""
        return self.mz + 3 * self.mq + self.lk.first

    def block(self, name: str) -> slice:
        mz, mq, s, mw, mv = self.mz, self.mq, self.sigma, self.mw, self.lk.mv
        c = mz + 3 * mq
        return {"z": slice(0, mz), "a": slice(mz, mz + mq), "b": slice(mz + mq, mz + 2 * mq),
                "c": slice(mz + 2 * mq, c), "v": slice(c, c + mv), "prox": slice(mw, mw + s),
                "lin": slice(mw + s, mw + 2 * s), "quad": slice(mw + 2 * s, mw + 3 * s),
                "h": slice(self.rows, self.rows + self.lk.sl * mv), "round2": slice(self.rows, self.total),
                "cx": slice(self.rows + self.lk.second, self.total)}[name]

    @property
    def w(self) -> np.ndarray:
        """Every witness row of both rounds (the rows the proximity and linear tests combine)."""
        return np.r_[0:self.mw, self.rows:self.total]

    @property
    def rows(self) -> int:
        """Rows of the round-1 matrix."""
        return self.mw + 3 * self.sigma

    @property
    def second(self) -> int:
        """Rows of the round-2 matrix."""
        return self.lk.second + self.cs.rows

    @property
    def total(self) -> int:
        return self.rows + self.second


def layout(pc: Prepared, p: Params) -> Layout:
    cells = pc.contraction_cells
    return Layout(p.k, -(-pc.n_wires // p.k), max(1, -(-pc.n_constraints // p.k)), p.sigma,
                   lookup.shape(pc, p.k, p.lookup_sigma),
                   contraction.Shape(cells, p.k, p.contraction_sigma if cells else 0))


def transcript(header: dict, public: np.ndarray) -> Transcript:
    T = Transcript(PROTOCOL.encode())
    T.absorb("header", json.dumps(header, sort_keys=True).encode())
    T.absorb("public", np.ascontiguousarray(public, dtype="<i8").tobytes())
    return T


def _linear_tests(pc: Prepared, lay: Layout, T: Transcript, sigma: int,
                  alphas: np.ndarray, draws: list) -> list[tuple[Rows, np.ndarray]]:
    """The ``σ`` repetitions of the linear test: for each, the coefficient rows over the witness rows of both
    rounds (``lay.w`` order, ``k`` columns) and the public coefficients.

    The coefficients on ``a``, ``b``, ``c`` (and on the lookup values and Freivalds vectors) are rank-one
    blocks ``β ⊗ γ`` with one ``γ`` per repetition (:mod:`.coefficients`); those on ``z`` follow from them,
    ``−(Aᵀr_a + Bᵀr_b + Cᵀr_c + Lᵀr_v)`` plus the public and contraction terms, by one pass over the matrices'
    terms, the rank-one ``r`` computed term by term (never laid out: σ values per constraint and lookup). They
    are a :class:`.coefficients.Deferred` block, computed when a test asks for them, every repetition together
    when they fit :data:`.coefficients.DEFERRED_BYTES`, else one at a time (8 bytes a wire each: 0.55 GiB on
    tinygpt's step); the contraction terms are summed then too."""
    out = []
    make = functools.partial(_z_coefficients, pc, lay)
    runs = lookup.runs(pc.r1cs.lookup_block_bits, pc.r1cs.lookup_block_rows) if lay.lk.n else None
    for s in range(sigma):
        gamma = T.field(f"lin{s}.columns", lay.k)
        parts = [coefficients.outer(T, f"lin{s}.{x}", lay.mq, gamma) for x in "abc"]
        rp = T.field(f"lin{s}.public", pc.n_public + 1)
        fix = None
        blocks = list(parts)
        if lay.lk.n:
            more = lookup.linear_rows(lay.lk, T, s, alphas, gamma, runs)
            blocks.append(more[0])
            parts += more
        if lay.cs.n:
            fix, more = contraction.linear_rows(pc.contraction, lay.cs, T, s, draws, gamma)
            parts += more
        beta = np.concatenate([o.beta for o in blocks])
        z = coefficients.Deferred(lay.mz, (beta, gamma, rp, fix), make)
        out.append((Rows([z] + parts, lay.k), rp))
    return out


def _z_coefficients(pc: Prepared, lay: Layout, reps: list) -> list[np.ndarray]:
    """The coefficients on ``z`` (``mz·k`` values each) of the repetitions ``reps`` (``(β, γ, rp, fix)`` each), by
    one pass over the matrices: ``−(Aᵀr_a + Bᵀr_b + Cᵀr_c + Lᵀr_v)`` (the stacked rows ``[A; B; C; L]`` carry
    the rank-one blocks of a, b, c, ``mq`` rows of ``β`` each, and v), plus the public coefficients ``rp`` and
    less the contraction terms ``fix``."""
    M = pc.n_constraints
    starts = [(0, 0), (M, lay.mq), (2 * M, 2 * lay.mq)] + ([(3 * M, 3 * lay.mq)] if lay.lk.n else [])
    rz = pc.apply_outer(starts, np.array([b for b, *_ in reps]), np.array([g for _, g, *_ in reps]),
                        lay.mz * lay.k)
    for z, (_, _, rp, fix) in zip(rz, reps):
        gf.negate(z)                                    # in place: Aᵀr_a + … negated
        z[:pc.n_public + 1] = gf.add(z[:pc.n_public + 1], rp)
        if fix is not None:
            wires, sums = fix.sums()
            z[wires] = gf.sub(z[wires], sums)
    return list(rz)


def test_challenges(pc: Prepared, lay: Layout, T: Transcript, alphas: np.ndarray,
                    draws: list) -> tuple[np.ndarray, list, np.ndarray]:
    """The three tests' challenges, drawn together after the commitments: the proximity test's ``r`` (σ rows
    over the witness rows), the linear test's repetitions (:func:`_linear_tests`) and the quadratic test's
    ``rq`` (σ rows over :func:`quad_rows`)."""
    sg, nw = lay.sigma, len(lay.w)
    r = T.field("prox", sg * nw).reshape(sg, nw)
    lin = _linear_tests(pc, lay, T, sg, alphas, draws)
    rq = T.field("quad", sg * quad_rows(lay)).reshape(sg, -1)
    return r, lin, rq


def zh_on_coset(p: Params) -> np.ndarray:
    """``η^k − 1`` for the first ``n/k`` points ``η`` of ``D`` (the values repeat with that period)."""
    eta_k = gf.mul(gf.powers(pow(gf.root_of_unity(p.n), p.k, gf.P), p.n // p.k), pow(gf.GENERATOR, p.k, gf.P))
    return gf.sub(eta_k, 1)


def quad_rows(lay: Layout) -> int:
    """Rows the quadratic test combines: ``a∘b − c``, the lookups' ``h_s∘(α_s − v) − 1``, the contractions'
    ``x_s∘y_s − π_s``."""
    return lay.mq + lay.lk.sl * lay.lk.mv + lay.cs.sigma * lay.cs.mx


def _products(U: np.ndarray, lay: Layout, alphas: np.ndarray) -> np.ndarray:
    """The quadratic test's rows at any points: ``a∘b − c``, then ``h_s∘(α_s − v) − 1``, then
    ``x_s∘y_s − π_s``."""
    parts = [gf.sub(gf.mul(U[lay.block("a")], U[lay.block("b")]), U[lay.block("c")])]
    if lay.lk.n:
        parts.append(lookup.quadratic_rows(U[lay.block("v")], U[lay.block("h")], alphas))
    if lay.cs.n:
        parts.append(contraction.quadratic_rows(U[lay.block("cx")], lay.cs))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _eval_at(polys: np.ndarray, powers: np.ndarray) -> np.ndarray:
    """Evaluate rows of coefficients at the opened points (``powers[i, j] = η_j^i``)."""
    return gf.matmul(polys, powers[:polys.shape[1]])


def _canonical(proof: LigeroProof) -> None:
    """Every value a field element in [0, p), every hash and salt the right size (else Reject)."""
    names = ("public", "u", "q", "h", "columns") + (("columns2",) if proof.second_round else ())
    for name in names:
        a = getattr(proof, name)
        if not isinstance(a, np.ndarray) or a.dtype != np.int64 or (a.size and (a.min() < 0 or a.max() >= gf.P)):
            raise Reject(f"{name} must hold field elements (int64 in [0, p))")
    _commitment(proof.root, proof.salts, proof.siblings, "the")
    if proof.second_round:
        _commitment(proof.root2, proof.salts2, proof.siblings2, "the lookup commitment's")


def _commitment(root, salts, siblings, whose: str) -> None:
    """A Merkle root of 32 bytes, lists of 16-byte salts and 32-byte siblings (else Reject)."""
    if not isinstance(salts, list) or not isinstance(siblings, list):
        raise Reject(f"{whose} salts and siblings must be lists of bytes")
    if not isinstance(root, bytes) or len(root) != 32:
        raise Reject(f"{whose} Merkle root must be 32 bytes")
    if any(not isinstance(x, bytes) or len(x) != 16 for x in salts):
        raise Reject("every salt must be 16 bytes")
    if any(not isinstance(x, bytes) or len(x) != 32 for x in siblings):
        raise Reject("every Merkle sibling must be 32 bytes")


def _opens(root: bytes, columns: np.ndarray, salts: list, siblings: list, n: int, idx: list) -> bool:
    """The opened ``columns`` (one salt each) are the leaves ``idx`` of the tree with this root."""
    return len(salts) == len(idx) and merkle.verify_opening(root, n, idx, merkle.leaves(columns.T, salts), siblings)


def expected_params(pc: Prepared, min_bits: float = 100, **options) -> Params:
    """The parameters an honest prover uses for this circuit and soundness target: :func:`.params.choose`
    of the circuit's size (``options`` go to it as well). :func:`verify_prepared` accepts no others unless
    its caller names them, so that the prover cannot choose how much work verification takes."""
    return _choose(pc.n_wires, pc.n_constraints, pc.n_lookups, float(min_bits), tuple(sorted(options.items())),
                   pc.contraction_cells, pc.lookup_table or lookup.TABLE)


@functools.lru_cache(maxsize=64)
def _choose(n_wires: int, n_constraints: int, lookups: int, bits: float, options: tuple,
            contractions: int = 0, table: int = lookup.TABLE) -> Params:
    return choose(n_wires, n_constraints, bits, lookups=lookups, contractions=contractions, table=table,
                  **dict(options))


def _show(p: Params) -> str:
    sl = f", σL={p.lookup_sigma}" if p.lookup_sigma else ""
    sc = f", σC={p.contraction_sigma}" if p.contraction_sigma else ""
    return f"k={p.k}, t={p.t}, n={p.n}, σ={p.sigma}{sl}{sc}"


def verify_prepared(pc: Prepared, proof: LigeroProof, public: np.ndarray, min_bits: float = 100,
                    statement: str | None = None, digest: bytes | None = None,
                    params: Params | None = None) -> None:
    """Raise :class:`Reject` naming the first failed check: the header first (:func:`_check_header`: what the
    proof declares against what the verifier derives), then the protocol replayed (:func:`_replay`).

    The proof names its own parameters, so the verifier insists that they give at least
    ``min_bits`` of soundness: weaker parameters would let a prover grind a false proof. They must
    also be exactly ``params``, by default :func:`expected_params` (those ``zk.prove`` chooses for this
    circuit and ``min_bits``): every size the verifier allocates follows from them, so it is refused
    before anything is allocated. The header must match the circuit: its digest, its public-output
    count (which the chain of training steps relies on) and, when given, its ``statement``.
    """
    lay = _check_header(pc, proof, public, min_bits, statement, digest, params)
    _replay(pc, proof, lay)


def _check_header(pc: Prepared, proof: LigeroProof, public: np.ndarray, min_bits: float, statement: str | None,
                  digest: bytes | None, params: Params | None) -> Layout:
    """The checks before the transcript: the proof's parameters, counts, digest, statement and public values
    against what the verifier derives from its circuit, then every array's shape and canonical form. Returns
    the layout the parameters give (every size the replay allocates)."""
    p = proof.params
    try:
        p.validate()
    except ValueError as e:
        raise Reject(str(e)) from None
    # the largest k this circuit can need: its rows rounded up, or 1024 (100 bits needs ~150 of n = 4k columns)
    # (the lookup rows count their tables, whose entries can outnumber a small circuit's wires)
    rows = max(pc.n_wires, pc.n_constraints, pc.n_lookups + (pc.lookup_table if pc.n_lookups else 0),
               pc.contraction_cells, 1024)
    if (p.k > 1 << (rows - 1).bit_length() or p.n > 8 * p.k or p.sigma > MAX_SIGMA or p.lookup_sigma > MAX_SIGMA
            or p.contraction_sigma > MAX_SIGMA):
        sl = (f", σL={p.lookup_sigma}" if p.lookup_sigma else "") + \
            (f", σC={p.contraction_sigma}" if p.contraction_sigma else "")
        raise Reject(f"the proof's parameters (k={p.k}, n={p.n}, σ={p.sigma}{sl}) are larger than this circuit "
                     f"of {rows} rows can need (k ≤ {1 << (rows - 1).bit_length()}, n ≤ 8k, σ ≤ {MAX_SIGMA}"
                     f"{', σL ≤ %d' % MAX_SIGMA if sl else ''}): a verifier's work must not be the prover's choice")
    if proof.lookups != pc.n_lookups:
        raise Reject(f"the proof claims {proof.lookups} lookups, the circuit has {pc.n_lookups}")
    if proof.lookups and proof.lookup_table != pc.lookup_table:
        raise Reject(f"the proof claims lookup tables of {proof.lookup_table} entries, the circuit's have "
                     f"{pc.lookup_table}")
    if not pc.n_lookups and p.lookup_sigma:
        raise Reject("the proof has lookup challenges, but the circuit has no lookups")
    if pc.n_lookups and p.lookup_sigma < 1:
        raise Reject(f"the circuit has {pc.n_lookups} lookups, but the proof draws no lookup challenge")
    if proof.contractions != pc.contraction_cells:
        raise Reject(f"the proof claims {proof.contractions} contraction cells, the circuit has "
                     f"{pc.contraction_cells}")
    if not pc.contraction_cells and p.contraction_sigma:
        raise Reject("the proof has contraction challenges, but the circuit has no contractions")
    if pc.contraction_cells and p.contraction_sigma < 1:
        raise Reject(f"the circuit has {len(pc.r1cs.contractions)} contractions, but the proof draws no "
                     f"Freivalds challenge")
    if proof.circuit_digest != (digest or pc.digest):
        raise Reject("the proof is for another circuit (digest mismatch)")
    if proof.public_outputs != pc.r1cs.n_pub_out:
        raise Reject(f"the proof claims {proof.public_outputs} public outputs, the circuit has {pc.r1cs.n_pub_out}")
    if statement is not None and proof.statement != statement:
        raise Reject("the proof's statement is not this circuit's")
    public = gf.reduce(np.asarray(public, dtype=np.int64))
    if len(public) != pc.n_public or len(proof.public) != pc.n_public:
        raise Reject(f"expected {pc.n_public} public values, got {len(public)}")
    if not np.array_equal(public, proof.public):
        bad = int(np.flatnonzero(public != proof.public)[0])
        raise Reject(f"public value {bad} differs from the proof's")
    # every size below, and so the verifier's work, follows from p: it must be what the verifier derived, and
    # nothing (not even the soundness computation, whose work grows with n) depends on the claimed sizes before
    want = expected_params(pc, min_bits, soundness=p.soundness) if params is None else params
    if p != want:
        whose = "you named" if params is not None else f"this circuit and {min_bits:g} bits give"
        raise Reject(f"the proof's parameters ({_show(p)}) are not the ones {whose} ({_show(want)}): "
                     f"a verifier's work must not be the prover's choice")
    table = pc.lookup_table or lookup.TABLE
    if not meets(p, min_bits, pc.n_lookups, contractions=pc.contraction_cells, table=table):   # by the analysis
        bits = soundness_bits(p, lookups=pc.n_lookups, contractions=pc.contraction_cells, table=table)   # claimed
        sl = f", σL={p.lookup_sigma}" if pc.n_lookups else ""
        by = f" by the {p.soundness} bound" if p.soundness != DEFAULT_SOUNDNESS else ""
        raise Reject(f"the proof's parameters (k={p.k}, t={p.t}, n={p.n}, σ={p.sigma}{sl}) give "
                     f"{bits:.1f} bits of soundness{by}, below the required {min_bits}")
    lay = layout(pc, p)
    sg, t = p.sigma, p.t
    shapes = {"u": (sg, p.K), "q": (sg, p.lin_len), "h": (sg, p.quad_len), "columns": (lay.rows, t)}
    if lay.second:
        shapes["columns2"] = (lay.second, t)
    for name, shape in shapes.items():
        if np.shape(getattr(proof, name)) != shape:
            raise Reject(f"{name} has shape {np.shape(getattr(proof, name))}, expected {shape}")
    _canonical(proof)
    return lay


def _replay(pc: Prepared, proof: LigeroProof, lay: Layout) -> None:
    """The protocol as the prover ran it, each message read from the proof (P → V) and each challenge drawn from
    the Fiat–Shamir transcript (V → P) in the prover's order, then the three tests at the opened columns. The
    header is checked (:func:`_check_header`): every array has the size ``lay`` gives."""
    p = proof.params
    K, k, n, t = p.K, p.k, p.n, p.t
    # P → V: the header (parameters, field, circuit digest, statement) and the public values, then the round-1
    # commitment (the Merkle root of the witness, lookup-value and mask rows)
    T = transcript(proof.header(), proof.public)
    T.absorb("root", proof.root)
    alphas, draws = np.zeros(0, dtype=np.int64), []
    if lay.lk.n:
        # V → P: the lookup challenges α
        alphas = T.field("lookup.alpha", lay.lk.sl)
        for a in alphas.tolist():                # g_j·(α − t_j) = m_j would not bind g_j: the bound assumes α ∉ T
            where = tables.collision(a, lay.lk.tables, lay.lk.functions)
            if where is not None:
                raise Reject(f"a lookup challenge fell in {where}; an honest prover proves again")
    if lay.cs.n:
        # V → P: the Freivalds challenges u_s, v_s of the contractions
        draws = contraction.challenges(T, pc.contraction, lay.cs)
    if lay.second:
        # P → V: the round-2 commitment (lookup inverses, Freivalds rows)
        T.absorb("root2", proof.root2)
    # V → P: the proximity, linear and quadratic tests' challenges
    r, lin, rq = test_challenges(pc, lay, T, alphas, draws)
    # P → V: the tests' polynomials u (proximity), q (linear), h (quadratic)
    for name in ("u", "q", "h"):
        T.absorb(name, getattr(proof, name).astype("<i8").tobytes())
    # V → P: the t columns to open
    idx = T.indices("columns", t, n)
    # P → V: the opened columns, their salts and Merkle paths, checked against the commitments
    if not _opens(proof.root, proof.columns, proof.salts, proof.siblings, n, idx):
        raise Reject("opened columns do not match the Merkle commitment")
    Uo = proof.columns
    if lay.second:
        if not _opens(proof.root2, proof.columns2, proof.salts2, proof.siblings2, n, idx):
            raise Reject("opened columns do not match the lookup commitment")
        Uo = np.concatenate([Uo, proof.columns2])
    # the verifier alone: each test's polynomial against the opened values
    w = gf.root_of_unity(n)
    eta = np.array([gf.GENERATOR * pow(w, j, gf.P) % gf.P for j in idx], dtype=np.int64)   # opened points
    powers = gf.powers(eta, 2 * K)                                  # powers[i, j] = η_j^i
    W = Uo[lay.w]
    lag = gf.lagrange_at(k, eta)
    if not np.array_equal(_eval_at(proof.u, powers), gf.add(gf.matmul(r, W), Uo[lay.block("prox")])):
        raise Reject("proximity test failed at an opened column")
    values = coefficients.values_at([R for R, _ in lin], lag)          # r_i(η) for every row, opened column
    for j, ((R, rp), rv) in enumerate(zip(lin, values)):
        target = gf.sum_mod(gf.mul(rp, np.concatenate([[1], proof.public])))
        got = gf.mul(k, gf.sum_mod(proof.q[j, ::k]))
        if got != target:
            raise Reject(f"linear test {j}: the sum over H does not match the public values")
        want = gf.add(gf.sum_mod(gf.mul(rv, W), axis=0), Uo[lay.block("lin")][j])
        if not np.array_equal(_eval_at(proof.q[j:j + 1], powers)[0], want):
            raise Reject(f"linear test {j} failed at an opened column")
    zh = gf.sub(powers[k], 1)
    want = gf.add(gf.matmul(rq, _products(Uo, lay, alphas)), Uo[lay.block("quad")])
    if not np.array_equal(gf.mul(_eval_at(proof.h, powers), zh), want):
        raise Reject("quadratic test failed at an opened column")
