"""Poseidon2 parameters for any prime field: a port of the reference generator.

Ported from ``poseidon2_rust_params.sage`` of HorizenLabs/poseidon2 (the script that generated the
published instances in ``plain_implementations/src/poseidon2/poseidon2_instance_*.rs``; read at commit
055bde3, whose last change to the script, bb476b9, set ``SBOX = 0`` and regenerated every instance):

* :func:`sbox_degree` is ``get_alpha``: the smallest ``α ≥ 3`` with ``gcd(α, p − 1) = 1``.
* :func:`round_numbers` is ``find_FD_round_numbers`` with ``sat_inequiv_alpha`` (:func:`secure`): the
  statistical bound, interpolation, the three Gröbner-basis bounds of the Poseidon paper, and the
  fourth Gröbner bound added from eprint 2023/537. It searches ``R_P`` in 1..499 and even ``R_F`` in
  4..98 for the cheapest ``t·R_F + R_P`` and adds the margins ``R_F += 2``, ``R_P = ⌈1.075·R_P⌉``.
* :class:`Grain` is ``grain_sr_generator``: the 80-bit Grain LFSR seeded with
  ``FIELD = 1 (2 bits) ‖ SBOX = 0 (4) ‖ n (12) ‖ t (12) ‖ R_F (10) ‖ R_P (10) ‖ 1^30``, 160 bits discarded,
  output bits self-shrunk in pairs. :func:`round_constants` is ``generate_constants``: ``R_F·t + R_P``
  draws of ``n`` bits, most significant first, rejected while ``≥ p``.
* :func:`internal_diagonal` is ``generate_matrix_partial``: for ``t = 2, 3`` the fixed matrices
  ``[[2,1],[1,3]]`` and ``[[2,1,1],[1,2,1],[1,1,3]]``; for larger ``t`` the diagonal of
  ``circ(0, 1, …, 1) + diag(r)`` drawn as ``r_i = grain(n) mod p`` until ``check_minpoly_condition``
  holds (for ``i = 1..2t`` the minimal polynomial of ``M^i`` has degree ``t`` and is irreducible), then
  checked with the subspace-trail algorithms 1-3. The result is ``μ = diag(M_I) − 1`` (the reference's
  ``MAT_DIAG_M_1``), so ``M_I = J + diag(μ)``.

Where the script computes in Sage, the port is exact: ``ceil(log_α(2)·m)`` and ``ceil(log_α t)`` are
integer comparisons of powers, the fourth Gröbner bound compares ``binomial² > 2^(M−1)`` exactly (the
script rounds the binomial to a float first: same result, and a value past the float range passes both
ways), a product with a float from the script is evaluated with :mod:`decimal` at 60 digits, and
``R_F_5`` repeats the script's float arithmetic. Only a value within ``10⁻⁴⁰`` of an integer could be
decided differently, and :func:`_ceil_decimal` refuses one. The minimal polynomial condition is
tested as "the characteristic polynomial is irreducible", which is equivalent.
"""
from __future__ import annotations

import decimal
import math
import random

__all__ = ["sbox_degree", "secure", "round_numbers", "Grain", "round_constants", "external_matrix",
           "internal_diagonal", "inverse", "algorithm_1", "algorithm_2", "algorithm_3", "minpoly_condition", "is_prime"]

M4 = ((5, 7, 1, 3), (4, 6, 1, 1), (1, 3, 5, 7), (1, 1, 4, 6))


def is_prime(n: int) -> bool:
    """Miller–Rabin with the first 13 prime bases (deterministic below 3.3·10^24)."""
    if n < 2:
        return False
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    if n in bases:
        return True
    if any(n % b == 0 for b in bases):
        return False
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def sbox_degree(p: int) -> int:
    """``get_alpha``: the smallest ``α ≥ 3`` with ``gcd(α, p − 1) = 1``."""
    for alpha in range(3, p):
        if math.gcd(alpha, p - 1) == 1:
            return alpha
    raise ValueError(f"no S-box degree for p = {p}")


# ------------------------------------------------------------------------------------------ rounds
def _ceil_log(base: int, x: int) -> int:
    """``⌈log_base x⌉`` for integers: the smallest ``k ≥ 0`` with ``base^k ≥ x``."""
    k, v = 0, 1
    while v < x:
        k, v = k + 1, v * base
    return k


def _ceil_decimal(v: decimal.Decimal) -> int:
    c = math.ceil(v)
    if abs(v - c) < decimal.Decimal("1e-40") or abs(v - (c - 1)) < decimal.Decimal("1e-40"):
        raise ArithmeticError(f"round-number bound {v} is too close to an integer to decide")
    return c


def _bound_terms(p: int, t: int, alpha: int, M: int) -> tuple:
    """The parts of ``sat_inequiv_alpha`` that do not depend on ``R_F, R_P``."""
    n = p.bit_length()                                    # FIELD_SIZE = len(p.bits())
    ctx = decimal.Context(prec=60)
    ln2, lna = ctx.ln(2), ctx.ln(alpha)
    # R_F_1: M <= floor(log2(p) - (alpha-1)/2) * (t+1); floor(log2 p) = n-1 for p not a power of 2
    rf1 = 6 if M <= (n - 1 - (alpha - 1) // 2) * (t + 1) else 10
    rf2 = 1 + _ceil_log(alpha, 2 ** min(M, n)) + _ceil_log(alpha, t)          # + ... - R_P
    rf3 = _ceil_log(alpha, 2 ** M) if M <= n - 1 else _ceil_log(alpha, p)   # min(M, log2 p); log2 p ∈ (n-1, n)
    f = float(M) / float(t + 1)                           # M / float(t + 1)
    if decimal.Decimal(f) <= ctx.divide(ctx.ln(p), 2 * ln2):       # min(M/(t+1), log2(p)/2)
        rf4 = t - 1 + _ceil_decimal(ctx.divide(ctx.multiply(decimal.Decimal(f), ln2), lna))
    else:
        rf4 = t - 1 + _ceil_log(alpha * alpha, p)         # ⌈log_α(p)/2⌉
    two_log2_alpha = float(ctx.divide(2 * lna, ln2))      # float(2 * log(alpha, 2))
    return rf1, rf2, rf3, rf4, two_log2_alpha


def secure(p: int, t: int, R_F: int, R_P: int, alpha: int, M: int, _terms: tuple | None = None) -> bool:
    """``sat_inequiv_alpha``: whether ``R_F`` full and ``R_P`` partial rounds meet every bound (no margin)."""
    if R_F % 2:
        raise ValueError("R_F must be even")
    rf1, rf2, rf3, rf4, two_log2_alpha = _terms or _bound_terms(p, t, alpha, M)
    rf5 = math.ceil((t - 2 + M / two_log2_alpha - R_P) / float(t - 1))       # float arithmetic, as in Sage
    if R_F < max(rf1, rf2 - R_P, rf3 - R_P, rf4 - R_P, rf5):
        return False
    r = t // 3                                            # addition due to eprint 2023/537
    over = (R_F - 1) * t + R_P + r + r * (R_F // 2) + R_P + alpha
    under = r * (R_F // 2) + R_P + alpha
    return math.comb(over, under) ** 2 > 2 ** (M - 1)     # ceil(2·log2(binomial)) >= M


def round_numbers(p: int, t: int, alpha: int, M: int = 128, security_margin: bool = True) -> tuple[int, int]:
    """``find_FD_round_numbers`` with the S-box cost ``t·R_F + R_P``: ``(R_F, R_P)``."""
    terms = _bound_terms(p, t, alpha, M)
    R_F = R_P = 0
    min_cost, max_cost_rf = math.inf, 0
    for R_P_t in range(1, 500):
        for R_F_t in range(4, 100, 2):
            if t * (R_F_t + 2 * security_margin) + (math.ceil(float(R_P_t) * 1.075) if security_margin else R_P_t) \
                    > min_cost:
                break                 # exact shortcut: this and every larger R_F_t would cost more
            if secure(p, t, R_F_t, R_P_t, alpha, M, terms):
                if security_margin:
                    R_F_t += 2
                    R_P_t = int(math.ceil(float(R_P_t) * 1.075))   # as in the script, R_P_t stays raised
                cost = t * R_F_t + R_P_t
                if cost < min_cost or (cost == min_cost and R_F_t < max_cost_rf):
                    R_P, R_F, min_cost, max_cost_rf = R_P_t, R_F_t, cost, R_F_t
    if not R_F:
        raise ValueError(f"no round numbers for p = {p}, t = {t}, alpha = {alpha}, M = {M}")
    return R_F, R_P


# ------------------------------------------------------------------------------------------- grain
class Grain:
    """The Grain LFSR of the reference (``init_generator`` + ``grain_sr_generator``)."""

    def __init__(self, n: int, t: int, R_F: int, R_P: int, field: int = 1, sbox: int = 0):
        fields = ((field, 2), (sbox, 4), (n, 12), (t, 12), (R_F, 10), (R_P, 10))
        if any(v >= 1 << w for v, w in fields):
            raise ValueError("Grain seed: a parameter does not fit its bit width")
        self.s = [int(c) for v, w in fields for c in format(v, f"0{w}b")] + [1] * 30
        for _ in range(160):
            self._step()

    def _step(self) -> int:
        s = self.s
        b = s[62] ^ s[51] ^ s[38] ^ s[23] ^ s[13] ^ s[0]
        s.pop(0)
        s.append(b)
        return b

    def bit(self) -> int:
        while True:
            if self._step():
                return self._step()
            self._step()

    def bits(self, n: int) -> int:
        """``grain_random_bits(n)``: ``n`` output bits, the first one most significant."""
        v = 0
        for _ in range(n):
            v = (v << 1) | self.bit()
        return v


def round_constants(grain: Grain, p: int, t: int, R_F: int, R_P: int) -> tuple[list[list[int]], list[int]]:
    """``generate_constants`` (field 1): the full rounds' rows ``(R_F, t)`` and the partial rounds' ``(R_P,)``."""
    n = p.bit_length()
    out = []
    for _ in range(R_F * t + R_P):
        v = grain.bits(n)
        while v >= p:
            v = grain.bits(n)
        out.append(v)
    h = R_F // 2 * t
    full = out[:h] + out[h + R_P:]
    return [full[i:i + t] for i in range(0, R_F * t, t)], out[h:h + R_P]


# ---------------------------------------------------------------------------------------- matrices
def external_matrix(t: int) -> list[list[int]]:
    """``generate_matrix_full``: ``circ(2,1)``, ``circ(2,1,1)``, ``M4``, or ``circ(2·M4, M4, …)`` for ``4 | t``."""
    if t == 2:
        return [[2, 1], [1, 2]]
    if t == 3:
        return [[2, 1, 1], [1, 2, 1], [1, 1, 2]]
    if t == 4:
        return [list(r) for r in M4]
    if t % 4 == 0:
        return [[M4[i % 4][j % 4] * (2 if i // 4 == j // 4 else 1) for j in range(t)] for i in range(t)]
    raise ValueError(f"Poseidon2 has no external matrix for t = {t} (t must be 2, 3 or a multiple of 4)")


def _mul(A, B, p):
    Bt = list(zip(*B))
    return [[sum(a * b for a, b in zip(r, c)) % p for c in Bt] for r in A]


def _vec(A, v, p):
    return [sum(a * b for a, b in zip(r, v)) % p for r in A]


def _rref(rows, p):
    """Reduced row echelon form: (nonzero rows, pivot columns)."""
    R = [list(r) for r in rows]
    piv, k = [], 0
    ncols = len(R[0]) if R else 0
    for c in range(ncols):
        i = next((i for i in range(k, len(R)) if R[i][c] % p), None)
        if i is None:
            continue
        R[k], R[i] = R[i], R[k]
        inv = pow(R[k][c], -1, p)
        R[k] = [x * inv % p for x in R[k]]
        for j in range(len(R)):
            if j != k and R[j][c] % p:
                f = R[j][c]
                R[j] = [(x - f * y) % p for x, y in zip(R[j], R[k])]
        piv.append(c)
        k += 1
    return R[:k], piv


def _rank(rows, p) -> int:
    return len(_rref(rows, p)[0]) if rows else 0


def _kernel(rows, ncols: int, p) -> list[list[int]]:
    """A basis of ``{x : A x = 0}``."""
    R, piv = _rref(rows, p) if rows else ([], [])
    out = []
    for f in (c for c in range(ncols) if c not in piv):
        x = [0] * ncols
        x[f] = 1
        for r, c in zip(R, piv):
            x[c] = -r[f] % p
        out.append(x)
    return out


def inverse(A, p) -> list[list[int]]:
    """``A^{-1} mod p`` (ValueError when ``A`` is singular)."""
    t = len(A)
    R, piv = _rref([list(r) + [int(i == j) for j in range(t)] for i, r in enumerate(A)], p)
    if piv[:t] != list(range(t)):
        raise ValueError(f"Poseidon2: a {t}×{t} matrix is singular modulo p = {p}")
    return [r[t:] for r in R]


def _same_span(A, B, p) -> bool:
    ra, rb = _rank(A, p), _rank(B, p)
    return ra == rb and _rank(A + B, p) == ra


def _charpoly(M, p) -> list[int]:
    """Characteristic polynomial (coefficients low → high, monic): Hessenberg form, then the recurrence."""
    n = len(M)
    H = [list(r) for r in M]
    for m in range(1, n - 1):
        i = next((i for i in range(m, n) if H[i][m - 1]), None)
        if i is None:
            continue
        if i != m:
            H[i], H[m] = H[m], H[i]
            for r in H:
                r[i], r[m] = r[m], r[i]
        inv = pow(H[m][m - 1], -1, p)
        for j in range(m + 1, n):
            u = H[j][m - 1] * inv % p
            if u:
                H[j] = [(a - u * b) % p for a, b in zip(H[j], H[m])]
                for r in H:
                    r[m] = (r[m] + u * r[j]) % p
    P = [[1]]
    for k in range(1, n + 1):
        cur = _padd([0] + P[k - 1], [-H[k - 1][k - 1] * c for c in P[k - 1]], p)
        prod = 1
        for i in range(1, k):
            prod = prod * H[k - i][k - i - 1] % p
            cur = _padd(cur, [-prod * H[k - i - 1][k - 1] * c for c in P[k - i - 1]], p)
        P.append(cur)
    return P[n]


# ---------------------------------------------------------------------------- polynomials over F_p
def _trim(a):
    while a and a[-1] == 0:
        a.pop()
    return a


def _padd(a, b, p):
    n = max(len(a), len(b))
    return _trim([((a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0)) % p for i in range(n)])


def _pdivmod(a, b, p):
    a, q = list(a), [0] * max(0, len(a) - len(b) + 1)
    inv = pow(b[-1], -1, p)
    for i in range(len(a) - len(b), -1, -1):
        c = a[i + len(b) - 1] * inv % p
        q[i] = c
        if c:
            for j, y in enumerate(b):
                a[i + j] = (a[i + j] - c * y) % p
    return _trim(q), _trim(a[:len(b) - 1])


def _pmulmod(a, b, f, p):
    out = [0] * (len(a) + len(b) - 1) if a and b else []
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b):
                out[i + j] += x * y
    return _pdivmod([v % p for v in out], f, p)[1]


def _ppowmod(a, e, f, p):
    r, a = [1], _pdivmod(a, f, p)[1]
    while e:
        if e & 1:
            r = _pmulmod(r, a, f, p)
        e >>= 1
        if e:
            a = _pmulmod(a, a, f, p)
    return r


def _pgcd(a, b, p):
    a, b = _trim(list(a)), _trim(list(b))
    while b:
        a, b = b, _pdivmod(a, b, p)[1]
    inv = pow(a[-1], -1, p)
    return [c * inv % p for c in a]


def _irreducible(f, p) -> bool:
    """Ben-Or: ``gcd(x^(p^k) − x, f) = 1`` for ``k ≤ deg f / 2``, with ``x^(p^k)`` by the Frobenius matrix."""
    n = len(f) - 1
    h = _ppowmod([0, 1], p, f, p)
    Q, g = [[1]], [1]
    for _ in range(1, n):
        g = _pmulmod(g, h, f, p)
        Q.append(g)
    g = h
    for k in range(1, n // 2 + 1):
        if len(_pgcd(f, _padd(g, [0, p - 1], p), p)) > 1:
            return False
        acc = [0] * n
        for c, row in zip(g, Q):
            for i, v in enumerate(row):
                acc[i] += c * v
        g = _trim([v % p for v in acc])
    return True


def _roots(f, p) -> list[int]:
    """The distinct roots of ``f`` in ``F_p`` (Cantor–Zassenhaus, fixed seed)."""
    g = _pgcd(f, _padd(_ppowmod([0, 1], p, f, p), [0, p - 1], p), p)
    rng, out, todo = random.Random(0), [], [g]
    while todo:
        g = todo.pop()
        if len(g) == 2:
            out.append(-g[0] * pow(g[1], -1, p) % p)
        elif len(g) > 2:
            while True:
                d = _pgcd(g, _padd(_ppowmod([rng.randrange(p), 1], (p - 1) // 2, g, p), [p - 1], p), p)
                if 1 < len(d) < len(g):
                    todo += [d, _pdivmod(g, d, p)[0]]
                    break
    return sorted(out)


# ------------------------------------------------------------------------ the script's matrix checks
def minpoly_condition(M, p) -> bool:
    """``check_minpoly_condition``: ``M^i`` has an irreducible minimal polynomial of degree ``t``, ``i = 1..2t``."""
    A = M
    for _ in range(2 * len(M)):
        if not _irreducible(_charpoly(A, p), p):
            return False
        A = _mul(M, A, p)
    return True


def algorithm_1(M, p) -> bool:
    """Subspace-trail check 1 (``s = 1``): no invariant subspace trail of up to ``t − 1`` rounds."""
    t = len(M)
    powers = [M]                                          # M^1 .. M^(t+1)
    for _ in range(t):
        powers.append(_mul(powers[-1], M, p))
    for i in range(1, t):
        A = powers[i - 1]
        if all(A[a][b] == (A[0][0] if a == b else 0) for a in range(t) for b in range(t)):
            return False
        if i == 1:
            S = [[int(a == b) for a in range(t)] for b in range(1, t)]
        else:
            S = [[0] + v for v in _kernel([powers[k][0][1:] for k in range(i - 1)], t - 1, p)]
        ann = _kernel(S, t, p)                            # S = {x : ann·x = 0}
        IS = []
        for lam in _roots(_charpoly(A, p), p):            # eigenspaces with eigenvalue in F
            shifted = [[(A[a][b] - (lam if a == b else 0)) % p for b in range(t)] for a in range(t)]
            IS += _kernel(ann + shifted, t, p)            # S ∩ ker(M^i − λI)
        if 1 <= _rank(IS, p) < t:
            return False
        for j in range(1, i + 1):
            if _same_span(S, [_vec(powers[j - 1], v, p) for v in S], p):
                return False
    return True


def algorithm_2(M, p) -> bool:
    """Subspace-trail check 2 (``s = 1``): the orbit of ``e_0`` under ``M`` spans the whole space.

    With ``s = 1`` the script's only index set is ``{0}`` and its "full iota space" is all of ``F^t``,
    so its intersection test never fires: the check fails exactly when the span stops growing below ``t``.
    """
    t = len(M)
    v = [1] + [0] * (t - 1)
    IS = [v]
    while True:
        delta = _rank(IS, p)
        v = _vec(M, v, p)
        IS = _rref(IS + [v], p)[0]
        if len(IS) == t:
            return True
        if len(IS) <= delta:
            return False


def algorithm_3(M, p) -> bool:
    """Subspace-trail check 3: :func:`algorithm_2` for ``M^r``, ``r = 2..4t``."""
    A = M
    for _ in range(2, 4 * len(M) + 1):
        A = _mul(A, M, p)
        if not algorithm_2(A, p):
            return False
    return True


def internal_diagonal(grain: Grain, p: int, t: int) -> list[int]:
    """``generate_matrix_partial`` as ``μ = diag(M_I) − 1`` (``M_I = J + diag(μ)``), with the script's checks."""
    n = p.bit_length()
    if t == 2:
        M = [[2, 1], [1, 3]]
    elif t == 3:
        M = [[2, 1, 1], [1, 2, 1], [1, 1, 3]]
    else:
        while True:
            d = [grain.bits(n) % p for _ in range(t)]     # F(grain_random_bits(n)): reduced, not rejected
            M = [[d[i] if i == j else 1 for j in range(t)] for i in range(t)]
            if minpoly_condition(M, p):
                break
    if not (algorithm_1(M, p) and algorithm_2(M, p) and algorithm_3(M, p)):
        raise ValueError(f"the internal matrix for p = {p}, t = {t} is not secure w.r.t. subspace trails "
                         f"(the reference script stops here too)")
    if _rank(M, p) < t:                                   # implied by the irreducibility above
        raise ValueError(f"the internal matrix for p = {p}, t = {t} is singular")
    return [(M[i][i] - 1) % p for i in range(t)]
