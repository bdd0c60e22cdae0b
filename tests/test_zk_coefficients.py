"""The linear test's coefficient rows (``ligero/coefficients.py``): rank-one blocks and constant rows give what the
dense rows give, at the opened points (verifier) and on the whole coset (prover); a rank-one test catches what an
independent one catches."""
from __future__ import annotations

import numpy as np
import pytest

from circuitgrad.backends.zk.circuits import gf
from circuitgrad.backends.zk.systems.ligero import ntt as transforms
from circuitgrad.backends.zk.systems.ligero.coefficients import Outer, Rows
from circuitgrad.backends.zk.systems.ligero.transcript import Transcript

K = 64


def _mixed(rng):
    """A stack of every kind of block: dense (with constant rows), rank one with a shared γ, constant rows."""
    gamma = rng.integers(0, gf.P, K)
    dense = rng.integers(0, gf.P, (5, K))
    dense[1], dense[3] = 7, gf.P - 1
    return Rows([dense, Outer(rng.integers(0, gf.P, 3), gamma), Outer(rng.integers(0, gf.P, 2), None),
                 rng.integers(0, gf.P, (2, K)), Outer(rng.integers(0, gf.P, 4), gamma)], K)


def test_values_at_the_opened_points_are_the_dense_rows_product():
    rng = np.random.default_rng(1)
    R = _mixed(rng)
    lag = gf.lagrange_at(K, rng.integers(1, gf.P, 9))
    assert R.n_rows == 16 and R.dense().shape == (16, K)
    assert np.array_equal(R.values_at(lag), gf.matmul(R.dense(), lag))


def test_combine_on_the_coset_is_the_dense_rows_interpolated_and_evaluated():
    rng = np.random.default_rng(2)
    R = _mixed(rng)
    n = 4 * K
    U = rng.integers(0, gf.P, (20, n))
    W = np.array([0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 15, 17, 18, 19])
    Rd = transforms.coset_eval(transforms.intt(R.dense()), n)                      # every row's polynomial on the coset
    want = gf.sum_mod(gf.mul(Rd, U[W]), axis=0)
    assert np.array_equal(R.combine(U, W, n), want)


def test_flat_lays_the_rows_end_to_end_and_refuses_constant_rows():
    rng = np.random.default_rng(3)
    o = Outer(rng.integers(0, gf.P, 3), rng.integers(0, gf.P, 4))
    assert np.array_equal(o.flat(), o.dense(4).reshape(-1))
    assert np.array_equal(o.flat(10), o.dense(4).reshape(-1)[:10])
    with pytest.raises(ValueError, match="a block of constant rows has no length of its own: use dense"):
        Outer(o.beta, None).flat()


def test_rank_one_coefficients_catch_a_single_wrong_cell():
    """``βᵀ E γ`` for ``E`` with one nonzero cell is ``β_i·E_ih·γ_h``: zero only if a challenge is 0."""
    T = Transcript(b"test")
    hits = 0
    for s in range(50):
        gamma = T.field(f"g{s}", K)
        beta = T.field(f"b{s}", 8)
        E = np.zeros((8, K), dtype=np.int64)
        E[s % 8, (7 * s) % K] = 1 + s
        hits += int(gf.sum_mod(gf.mul(Outer(beta, gamma).dense(K), E).reshape(-1)) == 0)
    assert hits == 0


def test_values_at_several_repetitions_in_bounded_products(monkeypatch):
    """The verifier evaluates every repetition's dense rows together; the products stay within VALUE_CELLS."""
    from circuitgrad.backends.zk.systems.ligero import coefficients
    rng = np.random.default_rng(4)
    reps = [_mixed(rng) for _ in range(3)]
    lag = gf.lagrange_at(K, rng.integers(1, gf.P, 7))
    sizes = []
    real = gf.matmul
    monkeypatch.setattr(coefficients, "VALUE_CELLS", 3 * K)
    monkeypatch.setattr(gf, "matmul", lambda a, b: sizes.append(a.size) or real(a, b))
    got = coefficients.values_at(reps, lag)
    monkeypatch.undo()
    assert all(np.array_equal(v, gf.matmul(R.dense(), lag)) for v, R in zip(got, reps))
    assert max(sizes) <= 3 * K and len(sizes) > 3


@pytest.mark.parametrize("bounds", [[0, 3, 64, 130, 200], [0, 64, 128], [0, 1], [0, 256], [0, 10, 11, 12, 250]])
def test_piecewise_rows_are_the_vector_laid_out(bounds):
    """Runs of one value (the logUp sums' coefficients, by table): constant rows become rank-one blocks, the rows
    a bound cuts (and the padding past the end) stay dense, and together they are the vector laid out."""
    from circuitgrad.backends.zk.systems.ligero.coefficients import piecewise
    rng = np.random.default_rng(5)
    values = rng.integers(1, gf.P, len(bounds) - 1)
    m = 4
    vec = np.zeros(m * K, dtype=np.int64)
    for v, a, b in zip(values, bounds, bounds[1:]):
        vec[a:b] = v
    parts = piecewise(values, np.array(bounds), m, K)
    assert np.array_equal(Rows(parts, K).dense(), vec.reshape(m, K))
    whole = [b // K for b in bounds if b % K == 0]
    assert sum(len(p.beta) for p in parts if isinstance(p, Outer)) >= m - (len(bounds) - len(whole))


def _deferred_reps(rng, count: int, made: list):
    """``count`` repetitions whose first block (6 rows) is deferred; ``made`` records each call's repetitions."""
    from circuitgrad.backends.zk.systems.ligero.coefficients import Deferred
    blocks = [rng.integers(0, gf.P, (6, K)) for _ in range(count)]

    def make(args):
        made.append([a for a, in args])
        return [blocks[a].reshape(-1).copy() for a, in args]
    reps = [Rows([Deferred(6, (i,), make)] + _mixed(rng).parts, K) for i in range(count)]
    return reps, blocks


@pytest.mark.parametrize("budget, calls", [(None, [[0, 1, 2]]), (2 * 8 * 6 * K, [[0, 1], [2]]),
                                           (1, [[0], [1], [2]])])
def test_deferred_blocks_are_computed_together_as_far_as_the_budget_allows(budget, calls):
    """The coefficients on z are a deferred block: computed when a test asks, every repetition in one call when
    they fit the budget, else in groups of as many as fit (at least one); the rows are the dense ones."""
    from circuitgrad.backends.zk.systems.ligero.coefficients import materialized
    rng = np.random.default_rng(6)
    made = []
    reps, blocks = _deferred_reps(rng, 3, made)
    got = [(i, R) for group, rows in materialized(reps, budget) for i, R in zip(group, rows)]
    assert made == calls
    assert [i for i, _ in got] == [0, 1, 2]
    for i, R in got:
        assert np.array_equal(R.dense()[:6], blocks[i])
        assert np.array_equal(R.dense()[6:], Rows(reps[i].parts[1:], K).dense())


def test_values_at_with_deferred_blocks_is_the_dense_rows_product():
    rng = np.random.default_rng(7)
    reps, _ = _deferred_reps(rng, 3, [])
    lag = gf.lagrange_at(K, rng.integers(1, gf.P, 5))
    from circuitgrad.backends.zk.systems.ligero import coefficients
    got = coefficients.values_at(reps, lag)
    assert all(np.array_equal(v, gf.matmul(R.dense(), lag)) for v, R in zip(got, reps))


def test_a_window_of_a_deferred_block_is_refused():
    rng = np.random.default_rng(8)
    reps, _ = _deferred_reps(rng, 1, [])
    with pytest.raises(ValueError, match=r"^Rows\.window: rows of a deferred block \(materialize it first\)$"):
        reps[0].window(2, 8)
    assert reps[0].window(6, 9).n_rows == 3                   # past it: the other blocks
