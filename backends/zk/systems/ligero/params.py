"""Code parameters of the Ligero argument, and its soundness error in bits.

A row of the witness matrix carries ``k`` values on the subgroup
``H = ⟨ω_k⟩``. It is encoded as a polynomial of degree below ``K = k + t``
(``t`` random coefficients times ``X^k − 1`` mask it) and evaluated on the
coset ``3·⟨ω_n⟩``. The Reed–Solomon code has length ``n``, dimension ``K``
and distance ``d = n − K + 1``. The verifier opens ``t`` columns, and every
test runs ``σ`` times with independent challenges.

See :func:`soundness_bits` for the bounds and ``docs/ZK.md`` for their sources. Two analyses are
offered (:data:`SOUNDNESS`): ``"longfellow"`` (the default, :func:`round_errors`) and the more
conservative ``"classic"`` one of the Ligero paper (:func:`classic_error`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...circuits import gf
from ...circuits.r1cs import TABLE_BITS
from ...circuits.statement import CLAIMS

__all__ = ["Params", "soundness_bits", "round_errors", "classic_error", "lookup_error", "lookup_sigma",
           "contraction_error", "contraction_sigma", "choose",
           "proof_bytes", "check_soundness", "with_soundness", "soundness_of", "meets", "TARGET_BITS", "HASH_BITS",
           "TABLE", "SOUNDNESS", "DEFAULT_SOUNDNESS"]

#: entries of the default lookup table ``[0, 2^TABLE_BITS)`` (a circuit's own: ``R1CS.lookup_table_size``)
TABLE = 1 << TABLE_BITS

#: default soundness target (bits), checked by a test; the verifier refuses proofs below it
TARGET_BITS = 100
#: the largest codeword the verifier accepts (keeps a hostile proof file from demanding huge memory)
MAX_N = 1 << 22

#: the soundness analyses a proof may claim: ``"longfellow"`` (Cascudo et al. 2025, the default) and
#: ``"classic"`` (Ames et al., CCS 2017: more columns for the same target)
SOUNDNESS = ("longfellow", "classic")
DEFAULT_SOUNDNESS = "longfellow"


def check_soundness(name) -> str:
    """``name`` if it names a soundness analysis of :data:`SOUNDNESS`, else ValueError."""
    if not isinstance(name, str) or name not in SOUNDNESS:
        raise ValueError(f"unknown soundness bound {name!r}: choose 'longfellow' (the default: Cascudo et al. "
                         f"2025) or 'classic' (Ames et al. 2017, more conservative)")
    return name


def with_soundness(statement: str, soundness: str) -> str:
    """The statement a proof makes: the circuit's ``statement`` and the soundness analysis (of :data:`SOUNDNESS`)
    its parameters meet, in the words of ``statement.CLAIMS``; the default analysis adds nothing."""
    return statement + CLAIMS.get(check_soundness(soundness), "")


def soundness_of(claimed: str, statement: str) -> str | None:
    """The soundness analysis for which ``with_soundness(statement, ·)`` is ``claimed``, or None."""
    return next((s for s in SOUNDNESS if with_soundness(statement, s) == claimed), None)


@dataclass(frozen=True)
class Params:
    k: int          # message values per row (|H|, a power of two)
    t: int          # opened columns, and masking coefficients per row
    n: int          # codeword length (a power of two)
    sigma: int      # repetitions of each test
    lookup_sigma: int = 0   # independent logUp challenges (0: the circuit has no lookups)
    soundness: str = DEFAULT_SOUNDNESS   # the analysis the parameters are chosen for (SOUNDNESS)
    contraction_sigma: int = 0   # independent Freivalds draws (0: the circuit has no contractions)

    @property
    def K(self) -> int:
        """Degree bound of the row polynomials (the code's dimension)."""
        return self.k + self.t

    @property
    def lin_len(self) -> int:
        """Coefficients of the linear-test polynomial ``Σ rᵢ(X)·pᵢ(X)``: degree < K + k − 1."""
        return self.K + self.k - 1

    @property
    def quad_len(self) -> int:
        """Coefficients of the quadratic-test quotient ``(Σ rᵢ(pₐpᵦ − p꜀)) / (X^k − 1)``."""
        return 2 * self.K - 1 - self.k

    def validate(self) -> None:
        """Raise ValueError unless the parameters define a sound, complete argument."""
        for name in ("k", "t", "n", "sigma", "lookup_sigma", "contraction_sigma"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise ValueError(f"Ligero parameter {name}={v!r} must be an integer")
        for name in ("k", "n"):
            v = getattr(self, name)
            if v < 2 or v & (v - 1) or v > 1 << gf.TWO_ADICITY:
                raise ValueError(f"Ligero parameter {name}={v} must be a power of two in [2, 2^{gf.TWO_ADICITY}]")
        if not 1 <= self.t <= self.n:
            raise ValueError(f"Ligero parameter t={self.t} must lie in [1, n={self.n}]")
        if self.sigma < 1:
            raise ValueError(f"Ligero parameter sigma={self.sigma} must be at least 1")
        if self.lookup_sigma < 0:
            raise ValueError(f"Ligero parameter lookup_sigma={self.lookup_sigma} must not be negative")
        if self.contraction_sigma < 0:
            raise ValueError(f"Ligero parameter contraction_sigma={self.contraction_sigma} must not be negative")
        check_soundness(self.soundness)
        if self.t > self.k:
            raise ValueError(f"Ligero parameters k={self.k}, t={self.t}: the masking coefficients (t) must not "
                             f"outnumber the message values (k)")
        if self.n > MAX_N:
            raise ValueError(f"Ligero parameter n={self.n} exceeds the largest supported codeword, {MAX_N}")
        if 2 * self.K - 1 > self.n:
            raise ValueError(f"Ligero parameters k={self.k}, t={self.t}, n={self.n}: products of row polynomials "
                             f"have degree {2 * self.K - 2}, so n must be at least {2 * self.K - 1}")


HASH_BITS = 256


def _log_ratio(a: int, n: int, t: int) -> float:
    """``log2(C(a, t) / C(n, t))``: the chance that ``t`` distinct random columns all land in a set of ``a``."""
    if a < t:
        return -math.inf
    return (math.lgamma(a + 1) - math.lgamma(a - t + 1) - math.lgamma(n + 1) + math.lgamma(n - t + 1)) / math.log(2)


def _log_sum(*x: float) -> float:
    m = max(x)
    return m if m == -math.inf else m + math.log2(sum(2.0 ** (v - m) for v in x))


def round_errors(p: Params, field_bits: float = math.log2(gf.P)) -> tuple[float, float]:
    """``log2`` of the two rounds' soundness errors ``(ε₁, ε₂)``.

    With ``K`` the code dimension and ``n`` its length (Cascudo, Hazay, Venkitasubramaniam,
    Yogev, *Independent Security Analysis of Longfellow ZK*, 2025, Thms 4.1, 4.3, 4.4)::

        ε₁ = ((n + 1)/|F|)^σ + (2/|F|)^σ + (1/|F|)^σ            the tests' random combinations
        ε₂ = C(⌊(n + K)/2⌋, t)/C(n, t) + C(2K − 2, t)/C(n, t)    the t opened columns

    ε₁ is a σ-fold repetition with independent challenges; the columns are shared, so σ does
    not reduce ε₂. The paper's ``(1/|F|)^σ`` for the linear and quadratic tests is counted as
    ``(2/|F|)^σ`` for the linear test, whose coefficients are rank-one blocks ``β ⊗ γ`` (a nonzero
    violation survives with probability at most ``2/|F|``: :mod:`.coefficients`), plus ``(1/|F|)^σ``
    for the quadratic test.
    """
    e1 = _log_sum(p.sigma * (math.log2(p.n + 1) - field_bits), p.sigma * (1 - field_bits), -p.sigma * field_bits)
    e2 = _log_sum(_log_ratio((p.n + p.K) // 2, p.n, p.t), _log_ratio(2 * p.K - 2, p.n, p.t))
    return e1, e2


def _log_ratios(a: np.ndarray, n: int, t: int) -> np.ndarray:
    """:func:`_log_ratio` for an array of set sizes ``a`` (clipped to ``n``: a probability is at most 1)."""
    from scipy.special import gammaln
    a = np.minimum(np.asarray(a, dtype=np.float64), n)
    out = (gammaln(a + 1) - gammaln(np.maximum(a - t, 0) + 1) - math.lgamma(n + 1)
           + math.lgamma(n - t + 1)) / math.log(2)
    return np.where(a < t, -np.inf, out)


def classic_error(p: Params, field_bits: float = math.log2(gf.P), lookups: int = 0,
                  contractions: int = 0, table: int = TABLE) -> tuple[float, int]:
    """``log2`` of the soundness error by the classic Ligero analysis, and the distance ``e`` that gives it.

    Ames, Hazay, Ishai, Venkitasubramaniam, *Ligero: Lightweight Sublinear Arguments Without a
    Trusted Setup*, CCS 2017, §4: the interleaved-code test (Lemma 4.2: for any linear code of
    distance ``d`` and any ``e < d/4``, a random combination of rows of a matrix ``e``-far from the
    interleaved code is ``e``-close to the code with probability at most ``(e + 1)/|F|``), the tests of
    linear and quadratic constraints, and their union bound. In this protocol's notation (code
    dimension ``K = k + t``, length ``n``, ``d = n − K + 1``; the linear-test polynomial has degree
    below ``K + k − 1``, the quadratic one below ``2K − 1``)::

        ε(e) = ((e + 1)/|F|)^σ + (2/|F|)^σ + (1/|F|)^σ             proximity, linear, quadratic challenges
             + C(n − e, t)/C(n, t)                                 the opened columns miss every error
             + C(e + K + k, t)/C(n, t) + C(e + 2K, t)/C(n, t)      a wrong test polynomial matches them
             + ε_L                                                 logUp (:func:`lookup_error`)
             + ε_C                                                 contractions (:func:`contraction_error`)

    minimised over the integers ``0 ≤ e < d/4``. The paper writes ``(1 − e/n)^t`` and
    ``((e + 2K)/n)^t`` for the column terms; ``C(a, t)/C(n, t)`` is the exact chance that ``t``
    *distinct* random columns (what the verifier opens) all fall in a set of ``a``, and is smaller.
    Independent challenges multiply, so σ repetitions raise the field terms to the power σ. The
    linear test's term is ``2/|F|`` rather than the paper's ``1/|F|``: its coefficients are rank-one
    blocks ``β ⊗ γ`` (:mod:`.coefficients`).
    Nothing in it is specific to Reed–Solomon codes, and it assumes no proximity-gap conjecture.
    """
    e, total = _classic_totals(p, field_bits, lookups, contractions, table)
    if not len(e):
        return 0.0, 0
    i = int(np.argmin(total))
    return min(0.0, float(total[i])), int(e[i])


def _classic_totals(p: Params, field_bits: float, lookups: int,
                    contractions: int = 0, table: int = TABLE) -> tuple[np.ndarray, np.ndarray]:
    """The distances ``e`` :func:`classic_error` minimises over and ``log2 ε(e)`` for each."""
    n, K, k, t, sg = p.n, p.K, p.k, p.t, p.sigma
    d = n - K + 1
    if d < 1:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    e = np.arange(0, (d - 1) // 4 + 1)
    field = sg * (np.log2(e + 1.0) - field_bits)
    other = _log_sum(sg * (1 - field_bits), -sg * field_bits)
    terms = [field, np.full(e.shape, other), _log_ratios(n - e, n, t), _log_ratios(e + K + k, n, t),
             _log_ratios(e + 2 * K, n, t)]
    if lookups:
        terms.append(np.full(e.shape, lookup_error(lookups, p.lookup_sigma, field_bits, table)))
    if contractions:
        terms.append(np.full(e.shape, contraction_error(p.contraction_sigma, field_bits)))
    return e, np.logaddexp2.reduce(np.stack(terms), axis=0)


#: within this many bits of the target, :func:`meets` decides in exact rational arithmetic, not floats
EXACT_BAND = 1e-4


def meets(p: Params, target_bits: float = TARGET_BITS, lookups: int = 0, hash_bits: int = HASH_BITS,
          contractions: int = 0, table: int = TABLE) -> bool:
    """Whether ``p`` reaches ``target_bits`` by the analysis it names: the rule :func:`choose` picks parameters
    by and the verifier checks them by, so it must give the same answer on every machine.

    :func:`soundness_bits` is a float computed with ``lgamma``, ``gammaln`` and ``logaddexp2``, whose last
    bits differ between C libraries; its errors are below 1e-9 bits. So a figure more than
    :data:`EXACT_BAND` (1e-4 bits) from an integer target decides, and one within it is decided exactly: the
    same bound in rationals (``Fraction``, binomials by ``math.comb``) at ``λ = target``:
    ``ε_K + 4.5·2^(λ−κ) ≤ 2^−λ``. For the classic bound the exact minimum over ``e`` is taken over every
    distance whose float error term lies within 1e-6 bits of the float minimum (the exact minimiser is
    among them on any machine). A change to this rule or to :func:`choose` changes which parameters an
    honest prover uses: it is a new protocol version (``proofio.PROTOCOL``, docs/ZK.md).
    """
    b = soundness_bits(p, lookups=lookups, hash_bits=hash_bits, contractions=contractions, table=table)
    if abs(b - target_bits) > EXACT_BAND or not float(target_bits).is_integer():
        return b >= target_bits
    return _exact_meets(p, int(target_bits), lookups, hash_bits, contractions, table)


def _exact_meets(p: Params, target: int, lookups: int, hash_bits: int, contractions: int = 0,
                 table: int = TABLE) -> bool:
    from fractions import Fraction
    if (lookups and p.lookup_sigma < 1) or (contractions and p.contraction_sigma < 1):
        return False
    bound = Fraction(1, 2 ** target) - Fraction(9, 2) * Fraction(2) ** (target - hash_bits)
    P, n, K, k, t, sg = gf.P, p.n, p.K, p.k, p.t, p.sigma
    eL = Fraction(lookups + table, P) ** p.lookup_sigma if lookups else Fraction(0)
    eC = Fraction(2, P) ** p.contraction_sigma if contractions else Fraction(0)
    cn = math.comb(n, t)

    def ratio(a: int) -> Fraction:              # C(a, t)/C(n, t), a clipped to n (math.comb is 0 for a < t)
        return Fraction(math.comb(min(max(a, 0), n), t), cn)
    if check_soundness(p.soundness) == "classic":
        e, total = _classic_totals(p, math.log2(P), lookups, contractions, table)
        if not len(e):
            return False
        near = e[total <= total.min() + 1e-6]
        near = near[np.argsort(total[total <= total.min() + 1e-6], kind="stable")[:64]]
        eK = min(Fraction(int(x) + 1, P) ** sg + Fraction(2, P) ** sg + Fraction(1, P) ** sg + ratio(n - int(x))
                 + ratio(int(x) + K + k) + ratio(int(x) + 2 * K) + eL + eC for x in near)
        eK = min(eK, Fraction(1))
    else:
        e1 = Fraction(n + 1, P) ** sg + Fraction(2, P) ** sg + Fraction(1, P) ** sg
        e2 = ratio((n + K) // 2) + ratio(2 * K - 2)
        eK = max(e1, e2, eL, eC)
    return eK <= bound


def lookup_error(lookups: int, sigma: int, field_bits: float = math.log2(gf.P), table: int = TABLE) -> float:
    """``log2`` of the logUp round's soundness error: ``((N + |T|)/|F|)^σ_L`` (−∞ without lookups), ``|T|``
    (``table``) the entries of all the circuit's tables together.

    With ``v`` fixed by the first commitment, ``Σ 1/(α − vᵢ) − Σ m_j/(α − j)`` is a nonzero rational
    function unless every ``vᵢ`` is in the table with multiplicity ``m_j`` (``N < p``); cleared of
    denominators it has degree below ``N + |T|``, so a random ``α`` is a root with probability at most
    ``(N + |T|)/|F|`` (Haböck, *Multivariate lookups based on logarithmic derivatives*, 2022, Lemma 5).
    This needs ``α ∉ T``: at ``α = j`` the constraint ``g_j·(α − j) = m_j`` would leave ``g_j`` free, so
    the verifier refuses a challenge in a table. With several tables (one per width) each has its own
    identity, of degree below ``N_b + |T_b|``; the union bound over them sums to ``N + |T|``. ``σ_L``
    independent challenges multiply.
    """
    if lookups == 0:
        return -math.inf
    return sigma * (math.log2(lookups + table) - field_bits)


def lookup_sigma(lookups: int, target_bits: float = 100, field_bits: float = math.log2(gf.P),
                 table: int = TABLE) -> int:
    """The fewest logUp challenges that keep :func:`lookup_error` below ``2^−(target_bits + 1)``."""
    if lookups == 0:
        return 0
    return max(1, math.ceil((target_bits + 1) / (field_bits - math.log2(lookups + table))))


def contraction_error(sigma: int, field_bits: float = math.log2(gf.P)) -> float:
    """``log2`` of the contraction round's soundness error: ``(2/|F|)^σC`` (−∞ for ``σC = 0``).

    With ``A``, ``B``, ``C`` fixed by the first commitment and some ``C[l] ≠ A[l]·B[l]``,
    ``Σ_l u[l]ᵀ(C[l] − A[l]B[l])v[l]`` is a nonzero polynomial of total degree 2 in the entries of the
    random vectors ``u`` and ``v``, so a uniform draw is a root with probability at most ``2/|F|``
    (Schwartz–Zippel; Freivalds 1977 for one product). The bound does not grow with the number or
    size of the contractions: they are all checked by one sum. ``σC`` independent draws multiply.
    """
    return sigma * (1 - field_bits) if sigma else -math.inf


def contraction_sigma(contractions: int, target_bits: float = 100, field_bits: float = math.log2(gf.P)) -> int:
    """The fewest Freivalds draws that keep :func:`contraction_error` below ``2^−(target_bits + 1)``
    (0 without contractions; 3 over the 51-bit field for 100 bits)."""
    if contractions == 0:
        return 0
    return max(1, math.ceil((target_bits + 1) / (field_bits - 1)))


def soundness_bits(p: Params, field_bits: float = math.log2(gf.P), hash_bits: int = HASH_BITS,
                   lookups: int = 0, soundness: str | None = None, contractions: int = 0,
                   table: int = TABLE) -> float:
    """Security level λ of the non-interactive argument, in bits (``lookups``: the circuit's count).

    ``soundness`` names the analysis (default: the one the parameters were chosen for,
    ``p.soundness``). ``"longfellow"``: ``ε_K = max(ε₁, ε₂, ε_L, ε_C)`` (:func:`round_errors`,
    :func:`lookup_error`, :func:`contraction_error`) is the round-by-round knowledge error. ``"classic"``:
    ``ε_K`` is the union bound of :func:`classic_error`, which bounds every round's error too. A circuit
    with lookups and ``lookup_sigma = 0``, or with contractions (``contractions``: their Freivalds cells,
    any positive count) and ``contraction_sigma = 0``, has no sound argument (λ = 0). Fiat–Shamir
    with a ``κ``-bit random oracle then gives ``ε(T) ≤ T·ε_K + 4.5·T²/2^κ`` for a prover making
    ``T`` hash queries (ibid., Thm 5.1). λ is the largest value with
    ``ε_K + 4.5·2^(λ−κ) ≤ 2^−λ``: a prover needs ``2^λ`` work per unit of success probability.
    """
    if (lookups and p.lookup_sigma < 1) or (contractions and p.contraction_sigma < 1):
        return 0.0
    if check_soundness(p.soundness if soundness is None else soundness) == "classic":
        eK = classic_error(p, field_bits, lookups, contractions, table)[0]
    else:
        eK = max(*round_errors(p, field_bits), lookup_error(lookups, p.lookup_sigma, field_bits, table),
                 contraction_error(p.contraction_sigma if contractions else 0, field_bits))
    lo, hi = 0.0, min(-eK, float(hash_bits))
    for _ in range(80):
        lam = (lo + hi) / 2
        if 2.0 ** eK + 4.5 * 2.0 ** (lam - hash_bits) <= 2.0 ** -lam:
            lo = lam
        else:
            hi = lam
    return lo


def _rows(cells_z: int, cells_q: int, k: int, lookups: int = 0, sl: int = 0, contractions: int = 0,
          sc: int = 0, table: int = TABLE) -> int:
    lk = (1 + sl) * (-(-lookups // k) + -(-table // k)) if lookups else 0
    ct = 3 * sc * -(-contractions // k) if contractions else 0
    return -(-cells_z // k) + 3 * -(-cells_q // k) + lk + ct


def proof_bytes(p: Params, n_wires: int, n_constraints: int, lookups: int = 0, contractions: int = 0,
                table: int = TABLE) -> int:
    """Proof size estimate: opened columns, Merkle siblings and the σ test polynomials (``contractions``:
    the cells ``N`` of each Freivalds vector)."""
    rows = _rows(n_wires, n_constraints, p.k, lookups, p.lookup_sigma, contractions, p.contraction_sigma,
                 table) + 3 * p.sigma
    sib = p.t * max(1.0, math.log2(p.n / p.t)) * 32 * (2 if lookups or contractions else 1)
    return int(8 * p.t * rows + 16 * p.t + sib + 8 * p.sigma * (p.K + p.lin_len + p.quad_len))


def _fewest_columns(n: int, k: int, target_bits: float, top: int) -> int:
    """A lower bound (at least 8) on the columns ``t`` that reach ``target_bits`` by the Longfellow bound: its
    column term ``C(⌊(n + K)/2⌋, t)/C(n, t)`` with ``K = k + t ≥ k`` is at least ``C(⌊(n + k)/2⌋, t)/C(n, t)``,
    which falls with ``t``, so a bisection finds where that alone first reaches the target (two columns of
    slack for the floats). :func:`choose` scans up from it instead of from 8: the error itself is not
    monotone in ``t`` (``K`` grows with it), but no smaller ``t`` can meet the target."""
    lo, hi = 8, top + 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _log_ratio((n + k) // 2, n, mid) <= -target_bits else (mid + 1, hi)
    return max(8, lo - 2)


def choose(n_wires: int, n_constraints: int, target_bits: float = TARGET_BITS, sigma: int | None = None,
           blowup: int | None = None, lookups: int = 0, soundness: str = DEFAULT_SOUNDNESS,
           contractions: int = 0, table: int = TABLE) -> Params:
    """Parameters meeting ``target_bits`` under the ``soundness`` analysis with the smallest estimated proof.

    ``k`` ranges over powers of two and ``n = blowup·k`` (default: 4 for ``"longfellow"``; 4 or 8,
    whichever gives the smaller proof, for ``"classic"``). ``t`` is the smallest number of opened
    columns that reaches the target, and ``σ`` (unless given) the smallest repetition count that
    makes the field terms reach it. ``contractions``: the cells ``N`` of each Freivalds vector
    (:mod:`.contraction`; 0 without contractions). ``table``: the entries of the circuit's lookup tables.
    """
    check_soundness(soundness)
    fb = math.log2(gf.P)
    blowups = (blowup,) if blowup is not None else (4,) if soundness == "longfellow" else (4, 8)
    best = None
    for logk in range(5, 15):
        k = 1 << logk
        for b in blowups:
            n = b * k
            s = sigma or max(1, math.ceil((target_bits + 1) / (fb - math.log2(n + 2))))

            def params(t: int) -> Params:
                return Params(k, t, n, s, lookup_sigma(lookups, target_bits, table=table), soundness,
                              contraction_sigma(contractions, target_bits))

            def ok(t: int) -> bool:
                return meets(params(t), target_bits, lookups, contractions=contractions, table=table)
            top = min(k, (n + 1) // 2 - k, n // 2 - 1)       # t ≤ k, and 2K − 1 ≤ n
            if top < 8:
                continue
            if soundness == "longfellow":                  # the smallest t that meets the target, scanned from
                start = _fewest_columns(n, k, target_bits, top)   # a bound below it (ε₂ alone at K = k)
                t = next((t for t in range(start, top + 1) if ok(t)), None)
            else:                                           # a bisection: each evaluation scans every e
                t = None
                if ok(top):
                    lo, hi = 8, top
                    while lo < hi:
                        mid = (lo + hi) // 2
                        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
                    t = lo
            if t is None:
                continue
            pr = params(t)
            cost = proof_bytes(pr, n_wires, n_constraints, lookups, contractions, table)
            if best is None or cost < best[0]:
                best = (cost, pr)
    if best is None:
        raise ValueError(f"no Ligero parameters reach {target_bits} bits by the {soundness} bound"
                         + (f" with blowup {blowup}" if blowup is not None else ""))
    return best[1]
