"""No-wrap bounds: how large ``⟨A_i,w⟩·⟨B_i,w⟩ − ⟨C_i,w⟩`` can be over the integers, from the constraints alone.

A constraint holds modulo ``p``. Read every wire as its signed representative
``w̃ ∈ (−p/2, p/2)``: if ``|Ã·B̃ − C̃| < p``, the congruence is an equation
over the integers, which is what every gadget's argument needs.
:func:`no_wrap_bounds` bounds that residual for every row, and for every entry
of every contraction (``|Σ aₖbₖ − c|``). The bound holds for every witness
that satisfies the system. It does not look at the program, the fixed-point
format or ``required_bits``: only at the matrices, the lookups and the
contractions.

Facts about wires (an interval for ``w̃``), each sound on its own:

* ``w̃₀ = 1``; every wire lies in ``[−(p−1)/2, (p−1)/2]``;
* booleanity and its kin: ``(a·x + α)(b·x + β) = 0`` with ``a, b = ±1`` puts
  ``x`` in ``{−aα, −bβ}``;
* isolation: in a relation ``Σ cⱼxⱼ ≡ v``, a term with ``cⱼ = ±1`` is congruent to
  ``±(v − Σ_{k≠j} cₖx̃ₖ)``; when that interval lies inside ``(−p/2, p/2)``, it holds
  ``x̃ⱼ``. The relations: each lookup (``v ∈ [0, 2^b)``), each linear row
  (``β·A − C ≡ 0`` with ``B`` the constant ``β``, or ``A`` constant), and each
  product row (``C ≡ A·B``, ``v`` the interval of ``Ã·B̃``): bit and limb
  decompositions, range checks, products and linear combinations all take this form;
* contractions: ``c ≡ Σ aₖbₖ`` puts ``c̃`` in ``±Σ|ãₖ||b̃ₖ|``.

Facts about linear combinations, which bound a row's ``A``, ``B`` or ``C`` more
tightly than its terms do (``t − 2^f·k`` is small even where ``2^f·k`` is not):

* a looked-up combination ``X`` (``X ≡ v ∈ [0, 2^b)``) whose term-by-term interval
  lies inside ``(2^b − 1 − p, p)`` equals ``v``; where ``X`` has limb terms (wires that
  no row and no contraction uses: the upper limbs of a range check wider than one
  table), the rest of ``X`` lies in ``v`` minus the limbs' interval;
* a linear row ``β·X ≡ C`` whose term-by-term residual lies inside ``(−p, p)`` holds
  over the integers: ``C`` lies in ``β·X``'s interval and, for ``β = ±1``, ``X`` in ``β·C``'s.

A row side gets such a fact when it is the same combination, up to a constant
term and a nonzero factor: combinations are matched by a hash of their
normalised terms (divided by the gcd of the coefficients, the first one
positive), and every match is then compared term by term, so a collision
only loses a fact. Facts are derived in passes, each from the facts of earlier
passes, until nothing tightens.

Arithmetic: float64 interval ends, vectorised with NumPy. Every end is an
integer; below ``2^53`` every sum and product of them is exact, and where a
magnitude reaches ``2^53`` (only over fields of more than 53 bits, or for bounds
that are already far above ``p``) the result is widened by ``(n + 6)·2^−52``
times the sum of the magnitudes, which covers the rounding of ``n`` operations.
Quotients are rounded inwards with ``ceil``/``floor``, which stays sound
because no correctly rounded quotient crosses an integer below ``2^53``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import tables
from .r1cs import R1CS

__all__ = ["Bounds", "no_wrap_bounds"]

_EXACT = 2.0 ** 53                 # below this, float64 integers add and multiply exactly
_U = 2.0 ** -52
_MAX_PASSES = 200


@dataclass
class Bounds:
    """Upper bounds on every constraint's integer residual (float64, rounded up)."""
    #: per row: ``|Ã·B̃ − C̃|`` at most this
    rows: np.ndarray
    #: per contraction, per entry of its ``C`` (flattened): ``|Σ ãₖb̃ₖ − c̃|`` at most this
    contractions: list[np.ndarray]
    #: per wire: the signed representative lies in ``[lo, hi]``
    lo: np.ndarray
    hi: np.ndarray
    p: int
    #: passes until no fact tightened
    passes: int
    tags: list[str] = field(default_factory=list, repr=False)
    block_rows: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64), repr=False)
    contraction_tags: list[str] = field(default_factory=list, repr=False)

    @property
    def max(self) -> float:
        """The largest bound of any row or contraction entry (0 for an empty system)."""
        return max([float(self.rows.max(initial=0))] + [float(c.max(initial=0)) for c in self.contractions])

    @property
    def log2_max(self) -> float:
        return math.log2(self.max) if self.max > 0 else float("-inf")

    def no_wrap(self) -> bool:
        """True when no constraint can wrap around ``p``: every bound is below ``p``."""
        return self.max < _float_down(self.p)

    def by_tag(self) -> dict[str, float]:
        """The largest bound per tag (rows by their block's tag, contractions by theirs), largest first."""
        out: dict[str, float] = {}
        if len(self.rows):
            top = np.maximum.reduceat(self.rows, self.block_rows[:-1]) if len(self.block_rows) > 1 else []
            for t, v in zip(self.tags, top):
                out[t] = max(out.get(t, 0.0), float(v))
        for t, c in zip(self.contraction_tags, self.contractions):
            out[t] = max(out.get(t, 0.0), float(c.max(initial=0)))
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def worst(self) -> tuple[str, float]:
        """The tag with the largest bound, and that bound (``("", 0.0)`` for an empty system)."""
        return next(iter(self.by_tag().items()), ("", 0.0))


def _float_up(x: int) -> float:
    f = float(x)
    return f if int(f) >= x else float(np.nextafter(f, np.inf))


def _float_down(x: int) -> float:
    f = float(x)
    return f if int(f) <= x else float(np.nextafter(f, -np.inf))


def _pad(lo: np.ndarray, hi: np.ndarray, mag: np.ndarray, n) -> tuple[np.ndarray, np.ndarray]:
    """Widen ``[lo, hi]`` by ``(n + 6)·2^−52·mag`` where ``mag ≥ 2^53`` (inexact); unchanged below."""
    m = np.where(mag >= _EXACT, (np.asarray(n, dtype=np.float64) + 6) * _U * mag, 0.0)
    return lo - m, hi + m


def _mul(alo, ahi, blo, bhi):
    """The product of intervals ``[alo, ahi]·[blo, bhi]``, widened where inexact."""
    c = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
    lo = np.minimum(np.minimum(c[0], c[1]), np.minimum(c[2], c[3]))
    hi = np.maximum(np.maximum(c[0], c[1]), np.maximum(c[2], c[3]))
    return _pad(lo, hi, np.maximum(np.abs(lo), np.abs(hi)), 0)


def _scale(lo, hi, s):
    """``s·[lo, hi]`` (``s`` per element), widened where inexact."""
    return _mul(lo, hi, s, s)


def _quotient(lo, hi, s):
    """The integers ``K`` with ``s·K ∈ [lo, hi]`` (``s ≠ 0``), rounded inwards where exact."""
    a, b = lo / s, hi / s
    qlo, qhi = np.minimum(a, b), np.maximum(a, b)
    qlo, qhi = _pad(qlo, qhi, np.maximum(np.abs(lo), np.abs(hi)), 0)
    return np.ceil(qlo), np.floor(qhi)


def _signed(coeffs: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Coefficients as float64 (for bounds: a coefficient of ``2^53`` or more makes its term's magnitude inexact,
    and so widened) and int64 (for matching; None where they do not fit)."""
    if coeffs.dtype != object:
        c = coeffs.astype(np.int64)
        return c.astype(np.float64), c
    v = [int(x) % p for x in coeffs]
    v = [x - p if x > p // 2 else x for x in v]                  # signed representatives
    fits = all(-(1 << 62) < x < (1 << 62) for x in v)
    return np.array([float(x) for x in v], dtype=np.float64), (np.array(v, dtype=np.int64) if fits else None)


@dataclass
class _Terms:
    """Terms of many linear combinations, grouped by owner (ascending)."""
    owner: np.ndarray
    wire: np.ndarray
    coef: np.ndarray
    n: int

    def __post_init__(self):
        self.count = np.bincount(self.owner, minlength=self.n).astype(np.float64)

    def interval(self, lo: np.ndarray, hi: np.ndarray, some: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """The term-by-term interval of each combination (of those in ``some``, default all): ``(which, lo, hi)``."""
        t = self.only(some)
        a, b = t.coef * lo[t.wire], t.coef * hi[t.wire]
        tlo, thi = np.minimum(a, b), np.maximum(a, b)
        which = np.arange(self.n) if some is None else some
        slo = np.bincount(t.owner, tlo, self.n)[which]
        shi = np.bincount(t.owner, thi, self.n)[which]
        mag = np.bincount(t.owner, np.maximum(np.abs(tlo), np.abs(thi)), self.n)[which]
        return (which, *_pad(slo, shi, mag, self.count[which]))

    def only(self, some: np.ndarray | None) -> "_Terms":
        """The terms of the combinations in ``some`` (ascending indices; None: all), owners unchanged."""
        if some is None:
            return self
        mask = np.zeros(self.n, dtype=bool)
        mask[some] = True
        keep = mask[self.owner]
        t = _Terms.__new__(_Terms)
        t.owner, t.wire, t.coef, t.n, t.count = self.owner[keep], self.wire[keep], self.coef[keep], self.n, self.count
        return t

    def touching(self, wires: np.ndarray) -> np.ndarray:
        """The combinations with a term on a wire where ``wires`` (a mask) is set, ascending."""
        mask = np.zeros(self.n, dtype=bool)
        mask[self.owner[wires[self.wire]]] = True
        return np.flatnonzero(mask)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (uint64, wrapping)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class _Combinations:
    """Every side (A, B, C rows, lookups, lookups' cores and limbs): its constant, its normalising factor
    (the gcd of its other coefficients, signed so that the first is positive) and a hash of its normalised terms."""

    def __init__(self, owner, wire, coef_f, coef_i, n):
        nc = wire != 0
        self.const = np.bincount(owner[~nc], coef_f[~nc], n)
        o, w = owner[nc], wire[nc]
        self.coef = coef_f[nc]
        self.length = np.bincount(o, minlength=n)
        self.start = np.concatenate([[0], np.cumsum(self.length)[:-1]]).astype(np.int64)
        has = self.length > 0
        self.scale = np.ones(n)
        self.key = np.zeros((n, 2), dtype=np.uint64)
        self.matchable = has.copy()
        if coef_i is None:
            self.matchable[:] = False
            self.wire, self.canon = w, np.zeros(len(w), dtype=np.int64)
            return
        c = coef_i[nc]
        starts = self.start[has]
        g = np.gcd.reduceat(np.abs(c), starts) if len(starts) else np.zeros(0, dtype=np.int64)
        sign = np.sign(c[starts])
        s = np.zeros(n, dtype=np.int64)
        s[has] = g * sign
        self.scale[has] = s[has].astype(np.float64)
        self.matchable &= np.abs(self.scale) < _EXACT
        canon = c // np.where(s[o] == 0, 1, s[o])
        self.wire, self.canon = w, canon
        with np.errstate(over="ignore"):
            t1 = _mix(w.astype(np.uint64) * np.uint64(0x100000001B3) + _mix(canon.astype(np.uint64)))
            t2 = _mix(_mix(w.astype(np.uint64) ^ np.uint64(0x5851F42D4C957F2D)) + canon.astype(np.uint64)
                      * np.uint64(0xD6E8FEB86659FD93))
            for k, t in enumerate((t1, t2)):
                if len(starts):
                    self.key[has, k] = np.add.reduceat(t, starts)

    def same(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Whether sides ``x[i]`` and ``y[i]`` have the same normalised terms (exactly)."""
        ok = self.length[x] == self.length[y]
        x, y = x[ok], y[ok]
        n = self.length[x]
        pair = np.repeat(np.arange(len(x)), n)
        within = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        i, j = self.start[x][pair] + within, self.start[y][pair] + within
        bad = (self.wire[i] != self.wire[j]) | (self.canon[i] != self.canon[j])
        out = np.zeros(len(ok), dtype=bool)
        out[np.flatnonzero(ok)] = np.bincount(pair, bad, len(x)) == 0
        return out

    def groups(self, fact_sides: np.ndarray, query_sides: np.ndarray) -> tuple[np.ndarray, ...]:
        """Facts grouped by hash: ``(order of the facts by group, group of each sorted fact, whether it is
        exactly its group's combination, first sorted fact of each group, group of each query side or −1)``.
        Every hash match is compared term by term with the group's first fact; a mismatch only loses a fact."""
        kf, lf = self.key[fact_sides], self.length[fact_sides]
        order = np.lexsort((lf, kf[:, 1], kf[:, 0]))
        ks, ls = kf[order], lf[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (ks[1:, 0] != ks[:-1, 0]) | (ks[1:, 1] != ks[:-1, 1]) | (ls[1:] != ls[:-1])
        group = np.cumsum(new) - 1
        first = np.flatnonzero(new)
        rep = fact_sides[order][first]
        exact = self.same(fact_sides[order], rep[group])
        q = query_sides[self.matchable[query_sides]]
        head = ks[first, 0]
        pos = np.minimum(np.searchsorted(head, self.key[q, 0]), len(first) - 1)
        hit = (head[pos] == self.key[q, 0]) & (ks[first, 1][pos] == self.key[q, 1])
        h = np.flatnonzero(hit)
        hit[h] = self.same(q[h], rep[pos[h]])
        qg = np.full(len(query_sides), -1, dtype=np.int64)
        qg[np.flatnonzero(self.matchable[query_sides])[hit]] = pos[hit]
        return order, group, exact, first, qg


def _table_tops(r: R1CS) -> np.ndarray:
    """Each lookup's largest table value (``2^b − 1`` for a range; a function table's last entry), as floats."""
    keys = r.lookup_bits
    tops = np.zeros(len(keys), dtype=np.float64)
    for key in np.unique(keys):
        tops[keys == key] = float(tables.top(int(key), r.function_tables))
    return tops


def _rows_terms(M, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    n = len(M.ptr) - 1
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(M.ptr))
    f, i = _signed(np.asarray(M.coeffs), p)
    return owner, np.asarray(M.wires, dtype=np.int64), f, i


def no_wrap_bounds(r: R1CS) -> Bounds:
    """Bound every row's ``|Ã·B̃ − C̃|`` and every contraction entry's ``|Σ ãₖb̃ₖ − c̃|`` over the integers, for
    every witness that satisfies ``r`` (see the module docstring); all bounds below ``p``: nothing wraps."""
    if r.counted:
        raise ValueError("no_wrap_bounds: this circuit was counted, not built (count_only): it has no matrices")
    return _Analysis(r).run()


class _Analysis:
    """The system's static structure (sides, relations, facts' groups) and the wire and side intervals."""

    def __init__(self, r: R1CS):
        self.r = r
        p = r.field.p
        self.P2_in = _float_down((p - 1) // 2)   # an interval inside ±P2_in holds the signed representative
        self.pf = _float_down(p)
        n, nl = r.n_constraints, r.n_lookups
        self.n = n
        self.table = _table_tops(r) if nl else np.zeros(0)
        mats = [_rows_terms(M, p) for M in (r.A, r.B, r.C)]
        z = np.zeros(0, dtype=np.int64)
        mats.append(_rows_terms(r.L, p) if nl else (z, z, z.astype(np.float64), z))
        mats += self._cores(mats, r)
        self.offsets = [0, n, 2 * n, 3 * n, 3 * n + nl, 3 * n + nl + len(self.cored)]
        nside = self.offsets[-1] + len(self.cored)
        ints = [m[3] for m in mats]
        self.sides = _Terms(np.concatenate([m[0] + o for m, o in zip(mats, self.offsets)]),
                            np.concatenate([m[1] for m in mats]), np.concatenate([m[2] for m in mats]), nside)
        self.combos = _Combinations(self.sides.owner, self.sides.wire, self.sides.coef,
                                    np.concatenate(ints) if all(i is not None for i in ints) else None, nside)
        const, length = self.combos.const, self.combos.length
        b_const = length[n:2 * n] == 0
        linear = (length[:n] == 0) | b_const
        self.x_side = np.where(b_const, np.arange(n), n + np.arange(n))   # the non-constant factor (A if B is)
        self.beta = np.where(b_const, const[n:2 * n], const[:n])          # the constant factor
        self.lin, self.prod = np.flatnonzero(linear), np.flatnonzero(~linear)
        self._relations(mats, linear)
        self.lo = np.full(r.n_wires, -_float_up((p - 1) // 2))
        self.hi = -self.lo
        self.lo[0] = self.hi[0] = 1.0
        self._booleans()
        self._fact_groups()
        self.slo, self.shi = np.full(nside, -np.inf), np.full(nside, np.inf)
        self.mags: dict[int, tuple] = {}                    # each contraction's |a|, |b| when last summed

    def _cores(self, mats, r: R1CS) -> list:
        """Each lookup whose combination has limb terms (wires in no row or contraction), split into its core and
        those terms: ``core = v − limbs``, so the core lies in ``[0, 2^b) − limbs`` (what ``fits`` range-checks)."""
        o, w, c, i = mats[3]
        seen = np.zeros(r.n_wires, dtype=bool)
        for m in mats[:3]:
            seen[m[1]] = True
        for con in r.contractions:
            for x in (con.a, con.b, con.c):
                seen[x.reshape(-1)] = True
        seen[0] = True
        limb = ~seen[w]
        has_limb = np.bincount(o[limb], minlength=len(self.table)) > 0
        has_core = np.bincount(o[~limb & (w != 0)], minlength=len(self.table)) > 0
        self.cored = np.flatnonzero(has_limb & has_core)
        new = np.full(len(self.table), -1, dtype=np.int64)
        new[self.cored] = np.arange(len(self.cored))
        out = []
        for part in (~limb, limb):
            keep = part & (new[o] >= 0)
            out.append((new[o[keep]], w[keep], c[keep], None if i is None else i[keep]))
        return out

    def _relations(self, mats, linear) -> None:
        """``Σ cⱼxⱼ ≡ v`` for isolation: each lookup (``v ∈ [0, 2^b)``), each linear row (``β·X − C ≡ 0``) and each
        product row (``−C ≡ −A·B``, ``v`` set each pass)."""
        n, nl = self.n, len(self.table)
        parts = [mats[3][:3]]
        for k, (o, w, c, _) in enumerate(mats[:3]):
            if k < 2:                                     # the X side of linear rows, times β
                keep = linear[o] & (self.x_side[o] == o + self.offsets[k])
                parts.append((nl + o[keep], w[keep], c[keep] * self.beta[o[keep]]))
            else:
                parts.append((nl + o, w, -c))
        order = np.argsort(np.concatenate([q[0] for q in parts]), kind="stable")
        self.rel = _Terms(*(np.concatenate([q[i] for q in parts])[order] for i in range(3)), nl + n)
        self.iso = np.flatnonzero((np.abs(self.rel.coef) == 1) & (self.rel.wire != 0))
        self.rel_vlo = np.zeros(nl + n)
        self.rel_vhi = np.concatenate([self.table, np.zeros(n)])

    def _booleans(self) -> None:
        """``(a·x + α)(b·x + β) = 0`` with ``a, b = ±1`` and ``C = 0``: ``x ∈ {−aα, −bβ}``."""
        n, c = self.n, self.combos
        length, const = c.length, c.const
        rows = np.flatnonzero((length[:n] == 1) & (length[n:2 * n] == 1) & (length[2 * n:3 * n] == 0)
                              & (const[2 * n:3 * n] == 0))
        ia, ib = c.start[rows], c.start[n + rows]
        wa, ca, cb = c.wire[ia], c.coef[ia], c.coef[ib]
        ok = (wa == c.wire[ib]) & (np.abs(ca) == 1) & (np.abs(cb) == 1)
        r1, r2 = -const[rows] * ca, -const[n + rows] * cb
        blo, bhi = np.minimum(r1, r2), np.maximum(r1, r2)
        ok &= np.maximum(np.abs(blo), np.abs(bhi)) <= self.P2_in
        np.maximum.at(self.lo, wa[ok], blo[ok])
        np.minimum.at(self.hi, wa[ok], bhi[ok])

    def _fact_groups(self) -> None:
        """The sides that facts are about (lookups; C sides of linear rows; their X sides where ``β = ±1``),
        grouped by combination, and the group of every side that matches one."""
        n, length = self.n, self.combos.length
        lin = self.lin
        self.look = np.flatnonzero(length[3 * n:self.offsets[4]] > 0)
        self.lin_c = lin[length[2 * n + lin] > 0]
        self.lin_x = lin[(np.abs(self.beta[lin]) == 1) & (length[self.x_side[lin]] > 0)]
        self.fact_sides = np.concatenate([3 * n + self.look, self.offsets[4] + np.arange(len(self.cored)),
                                          2 * n + self.lin_c, self.x_side[self.lin_x]])
        self.fact_sides = self.fact_sides.astype(np.int64)
        if len(self.fact_sides):
            rows = np.flatnonzero(length[:3 * n] > 0)            # the row sides that a fact may tighten
            rows = rows[np.argsort(self.combos.key[rows, 0], kind="stable")]
            self.forder, _, self.fexact, self.gstarts, qgroup = self.combos.groups(self.fact_sides, rows)
        else:
            rows = qgroup = np.zeros(0, dtype=np.int64)
        self.queried = rows[qgroup >= 0]
        self.qgroup = qgroup[qgroup >= 0]

    def run(self) -> Bounds:
        passes = 0
        wires = None                                      # the wires that tightened in the last pass (None: all)
        while passes < _MAX_PASSES:
            passes += 1
            before = (self.lo.copy(), self.hi.copy(), self.slo.copy(), self.shi.copy())
            self._pass(wires)
            wires = (self.lo != before[0]) | (self.hi != before[1])
            if not wires.any() and np.array_equal(self.slo, before[2]) and np.array_equal(self.shi, before[3]):
                break
        return self._result(passes)

    def _pass(self, wires: np.ndarray | None) -> None:
        """One pass: side intervals (term by term, then every fact), then isolation and contractions; term by term
        and by isolation only where a wire tightened in the last pass, or a product row's factor in this one."""
        n, c, lo, hi = self.n, self.combos, self.lo, self.hi
        was = (self.slo[:2 * n].copy(), self.shi[:2 * n].copy())
        q, tlo, thi = self.sides.interval(lo, hi, None if wires is None else self.sides.touching(wires))
        self.slo[q], self.shi[q] = np.maximum(self.slo[q], tlo), np.minimum(self.shi[q], thi)
        slo, shi = self.slo, self.shi
        if len(self.queried):
            fs = self.fact_sides
            flo, fhi = self._facts()
            klo, khi = _quotient(flo - c.const[fs], fhi - c.const[fs], c.scale[fs])
            klo = np.where(self.fexact, klo[self.forder], -np.inf)
            khi = np.where(self.fexact, khi[self.forder], np.inf)
            glo, ghi = np.maximum.reduceat(klo, self.gstarts), np.minimum.reduceat(khi, self.gstarts)
            fin = np.isfinite(glo[self.qgroup]) & np.isfinite(ghi[self.qgroup])
            q, g = self.queried[fin], self.qgroup[fin]
            xlo, xhi = _scale(glo[g], ghi[g], c.scale[q])
            xlo, xhi = _pad(xlo + c.const[q], xhi + c.const[q], np.maximum(np.abs(xlo), np.abs(xhi)), 1)
            slo[q], shi[q] = np.maximum(slo[q], xlo), np.minimum(shi[q], xhi)
        prod, nl = self.prod, len(self.table)
        ablo, abhi = _mul(slo[prod], shi[prod], slo[n + prod], shi[n + prod])
        self.rel_vlo[nl + prod], self.rel_vhi[nl + prod] = -abhi, -ablo
        if wires is None:
            some = None
        else:                                             # relations on a tightened wire or product
            moved = np.zeros(self.rel.n, dtype=bool)
            moved_ab = (slo[:2 * n] != was[0]) | (shi[:2 * n] != was[1])
            moved[nl + prod] = moved_ab[prod] | moved_ab[n + prod]
            moved[self.rel.touching(wires)] = True
            some = np.flatnonzero(moved)
        _isolate(self.rel, self.iso, self.rel_vlo, self.rel_vhi, lo, hi, self.P2_in, some)
        mag = np.maximum(np.abs(lo), np.abs(hi))
        for i, con in enumerate(self.r.contractions):     # c ≡ Σ aₖbₖ, again where a or b tightened
            if i in self.mags and all(np.array_equal(mag[x], m) for x, m in zip((con.a, con.b), self.mags[i])):
                continue
            self.mags[i] = (mag[con.a], mag[con.b])
            s = _contraction_sum(con, lo, hi)
            ok = s <= self.P2_in
            cw = con.c.reshape(-1)[ok]
            np.maximum.at(lo, cw, -s[ok])
            np.minimum.at(hi, cw, s[ok])
        lo[0] = hi[0] = 1.0

    def _facts(self) -> tuple[np.ndarray, np.ndarray]:
        """Each fact's interval for its side's value (``±inf`` where its no-wrap condition fails), in the order
        of ``fact_sides``: lookups, lookups' cores, C sides of linear rows, X sides of linear rows with ``β = ±1``."""
        n, slo, shi, pf, table = self.n, self.slo, self.shi, self.pf, self.table
        # a lookup X ≡ v ∈ [0, 2^b) equals v when X's interval lies inside (2^b − 1 − p, p)
        ok = (slo[3 * n:self.offsets[4]] > table - pf) & (shi[3 * n:self.offsets[4]] < pf)
        out = [(np.where(ok, 0.0, -np.inf)[self.look], np.where(ok, table, np.inf)[self.look])]
        # its core is v minus its limb terms
        rest = self.offsets[5] + np.arange(len(self.cored))
        clo, chi = _pad(-shi[rest], table[self.cored] - slo[rest], np.maximum(np.abs(slo[rest]), np.abs(shi[rest])), 1)
        out.append((np.where(ok[self.cored], clo, -np.inf), np.where(ok[self.cored], chi, np.inf)))
        # a linear row β·X − C ≡ 0 holds exactly when its interval lies inside (−p, p)
        for rows, target in ((self.lin_c, "C"), (self.lin_x, "X")):
            xs, cs, beta = self.x_side[rows], 2 * n + rows, self.beta[rows]
            bxlo, bxhi = _scale(slo[xs], shi[xs], beta)
            dlo, dhi = bxlo - shi[cs], bxhi - slo[cs]
            dlo, dhi = _pad(dlo, dhi, np.maximum(np.abs(dlo), np.abs(dhi)), 2)
            ok = (dlo > -pf) & (dhi < pf)
            vlo, vhi = (bxlo, bxhi) if target == "C" else _scale(slo[cs], shi[cs], beta)   # β = ±1: X = β·C
            out.append((np.where(ok, vlo, -np.inf), np.where(ok, vhi, np.inf)))
        return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])

    def _result(self, passes: int) -> Bounds:
        n, slo, shi, r = self.n, self.slo, self.shi, self.r
        ab_lo, ab_hi = _mul(slo[:n], shi[:n], slo[n:2 * n], shi[n:2 * n])
        dlo, dhi = ab_lo - shi[2 * n:3 * n], ab_hi - slo[2 * n:3 * n]
        mag = np.maximum(np.abs(dlo), np.abs(dhi))
        rows = _pad(mag, mag, mag, 0)[1]
        mags = np.maximum(np.abs(self.lo), np.abs(self.hi))
        cb = []
        for con in r.contractions:
            s = _contraction_sum(con, self.lo, self.hi) + mags[con.c.reshape(-1)]
            cb.append(_pad(s, s, s, 0)[1])
        return Bounds(rows, cb, self.lo, self.hi, r.field.p, passes, list(r.tags), np.asarray(r.block_rows),
                      [con.tag for con in r.contractions])


def _isolate(rel: _Terms, iso: np.ndarray, vlo, vhi, lo, hi, P2_in, some: np.ndarray | None = None) -> None:
    """Tighten ``[lo, hi]`` of every wire with coefficient ±1 in a relation ``Σ cⱼxⱼ ≡ v ∈ [vlo, vhi]`` (of those in
    ``some``, default all): ``x ≡ ±(v − Σ_{k≠j} cₖxₖ)``, kept where that interval lies inside ``(−p/2, p/2)``."""
    if some is not None:
        mask = np.zeros(rel.n, dtype=bool)
        mask[some] = True
        keep = mask[rel.owner]
        iso = np.cumsum(keep)[iso[keep[iso]]] - 1         # positions among the kept terms
        rel = rel.only(some)
    wmag = np.maximum(np.abs(lo), np.abs(hi))
    free = wmag[rel.wire] > P2_in / 2                      # unknown: summed apart, so nothing cancels
    a, b = rel.coef * lo[rel.wire], rel.coef * hi[rel.wire]
    tlo, thi = np.where(free, 0.0, np.minimum(a, b)), np.where(free, 0.0, np.maximum(a, b))
    tmag = np.maximum(np.abs(tlo), np.abs(thi))
    n = rel.n
    slo, shi = np.bincount(rel.owner, tlo, n), np.bincount(rel.owner, thi, n)
    smag = np.bincount(rel.owner, tmag, n)
    nfree = np.bincount(rel.owner, free, n)
    o = rel.owner[iso]
    f = free[iso]
    use = np.where(f, nfree[o] == 1, nfree[o] == 0) & np.isfinite(vlo[o]) & np.isfinite(vhi[o])
    olo, ohi = slo[o] - tlo[iso], shi[o] - thi[iso]        # the other terms
    xlo, xhi = vlo[o] - ohi, vhi[o] - olo
    mag = smag[o] + np.maximum(np.abs(vlo[o]), np.abs(vhi[o]))
    xlo, xhi = _pad(xlo, xhi, mag, rel.count[o])
    neg = rel.coef[iso] < 0
    xlo, xhi = np.where(neg, -xhi, xlo), np.where(neg, -xlo, xhi)
    use &= np.maximum(np.abs(xlo), np.abs(xhi)) <= P2_in
    w = rel.wire[iso][use]
    np.maximum.at(lo, w, np.ceil(xlo[use]))
    np.minimum.at(hi, w, np.floor(xhi[use]))


def _contraction_sum(c, lo, hi) -> np.ndarray:
    """``Σₖ |ãₖ|·|b̃ₖ|`` per entry of ``c`` (flattened), rounded up."""
    mag = np.maximum(np.abs(lo), np.abs(hi))
    s = np.matmul(mag[c.a], mag[c.b]).reshape(-1)
    return _pad(s, s, s, c.a.shape[2])[1]
