"""The compact constraint matrices (backends/zk/circuits/sparse.py): canonical rows, coefficient codes, blocks."""
import numpy as np
import pytest

from circuitgrad.backends.zk.circuits.sparse import Assembler, Matrix, canonical


def _dense(M: Matrix, n_wires: int) -> np.ndarray:
    out = np.zeros((len(M.ptr) - 1, n_wires), dtype=object)
    for i in range(len(M.ptr) - 1):
        for e in range(M.ptr[i], M.ptr[i + 1]):
            out[i, M.wires[e]] += int(M.palette[M.codes[e]])
    return out


def _coo_dense(rows, wires, coeffs, n_rows, n_wires) -> np.ndarray:
    out = np.zeros((n_rows, n_wires), dtype=object)
    for r, w, c in zip(rows, wires, coeffs):
        out[r, w] += int(c)
    return out


def test_canonical_sorts_merges_and_drops_zeros():
    rows = np.array([1, 0, 1, 1, 0])
    wires = np.array([5, 2, 3, 5, 2])
    coeffs = np.array([2, 1, 4, -2, -1])        # row 1 wire 5: 2 − 2 = 0; row 0 wire 2: 1 − 1 = 0
    counts, w, c = canonical(rows, wires, coeffs, 3)
    assert list(counts) == [0, 1, 0] and list(w) == [3] and list(c) == [4]


def test_blocks_give_the_matrix_of_all_terms_at_once():
    rng = np.random.default_rng(0)
    a, parts_all, n_wires = Assembler(), [], 50
    row = 0
    for m in (3, 1, 7, 4):
        parts = []
        for _ in range(3):
            rows = row + rng.integers(0, m, 2 * m)
            parts.append((rows, rng.integers(0, n_wires, 2 * m), rng.choice([-3, -1, 1, 2, 1 << 40], 2 * m)))
        a.add(parts, row, m)
        parts_all += parts
        row += m
    got = a.finish()
    rows, wires, coeffs = (np.concatenate([p[i] for p in parts_all]) for i in range(3))
    want = Matrix.from_coo(rows, wires, coeffs, row)
    assert np.array_equal(_dense(got, n_wires), _coo_dense(rows, wires, coeffs, row, n_wires))
    assert np.array_equal(got.ptr, want.ptr) and np.array_equal(got.wires, want.wires)
    assert np.array_equal(got.coeffs, want.coeffs)               # codes differ, the coefficients do not
    assert got.wires.dtype == np.int32 and got.codes.dtype == np.uint16 and got.ptr.dtype == np.int32
    assert got.coeffs.dtype == np.int64 and int(got.coeffs.max()) >= 1 << 40          # merged sums of 2^40 terms


def test_blocks_join_in_the_order_given():
    a = Assembler()
    a.add([(np.array([0, 1]), np.array([4, 5]), np.array([1, 1]))], 0, 2)
    a.add([(np.array([2]), np.array([6]), np.array([3]))], 2, 1)
    M = a.finish([1, 0])
    assert list(M.ptr) == [0, 1, 2, 3] and list(M.wires) == [6, 4, 5] and list(M.coeffs) == [3, 1, 1]


def test_many_distinct_coefficients_take_wider_codes():
    n = 70_000
    M = Matrix.from_coo(np.arange(n), np.zeros(n, dtype=np.int64), np.arange(1, n + 1), n)
    assert M.codes.dtype == np.uint32 and list(M.coeffs[:3]) == [1, 2, 3] and int(M.coeffs[-1]) == n


def test_a_block_must_follow_the_rows_before_it():
    a = Assembler()
    a.add([], 0, 2)
    with pytest.raises(ValueError, match=r"^Assembler.add: rows 3… after 2 rows$"):
        a.add([], 3, 1)


def test_wires_beyond_int32_are_refused():
    with pytest.raises(ValueError, match=r"^a constraint matrix stores wires below 2\^31; wire 2147483648 is beyond$"):
        Matrix.from_coo(np.array([0]), np.array([2 ** 31]), np.array([1]), 1)


def test_setting_the_coefficients_recodes_them_and_checks_their_count():
    M = Matrix.from_coo(np.array([0, 0]), np.array([1, 2]), np.array([1, 1]), 1)
    M.coeffs = np.array([7, -7])
    assert list(M.coeffs) == [7, -7] and len(M.palette) == 2
    with pytest.raises(ValueError, match=r"^Matrix.coeffs: 3 coefficients for 2 terms$"):
        M.coeffs = np.array([1, 2, 3])


def test_wide_field_coefficients_stay_python_ints():
    big = (1 << 200) + 1
    M = Matrix.from_coo(np.array([0, 0]), np.array([1, 2]), np.array([big, 1], dtype=object), 1)
    assert list(M.coeffs) == [1, big] or list(M.coeffs) == [big, 1]
    assert M.evaluate(np.array([1, 2, 3], dtype=object), (1 << 255) - 19).tolist() == [(2 * big + 3) % ((1 << 255) - 19)]
