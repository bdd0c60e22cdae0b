"""The fast field arithmetic and hashing of the native prover, pinned against Python-int references.

``ligero/gf.py`` reduces products with a floating-point quotient, keeps NTT butterflies lazily in
``[0, 2p)``, transposes NTT blocks and multiplies matrices with balanced float64 limbs; ``merkle.leaves``
hashes slices of one buffer. Each of these must give exactly what the schoolbook definition gives, on
random inputs with the edge values 0, 1, p − 1 (and p/2 ± 1, where the balanced form switches sign), at
sizes that cross every block and chunk boundary. Proofs then stay byte-identical (the seeded GPT proof of
``bench/prover_profile.py`` was compared before and after).

The tests that take the ``kernels`` fixture run twice: on the NumPy path and on the compiled Numba kernels
(``ligero/gf_numba.py``; that half is skipped where Numba is not installed), so both are pinned against the
same references; further tests compare the two paths directly, edge values included, and a seeded proof's bytes.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from circuitgrad.backends.zk.circuits import gf
from circuitgrad.backends.zk.systems.ligero import merkle, ntt as transforms
from circuitgrad.extras import MissingExtra

P = gf.P
EDGES = [0, 1, 2, P - 1, P - 2, P // 2, P // 2 + 1, (1 << 26) - 1, 1 << 34, (1 << 51) % P]


NUMBA = importlib.util.find_spec("numba") is not None
needs_numba = pytest.mark.skipif(not NUMBA, reason="Numba is not installed (pip install 'circuitgrad[numba]'): "
                                                   "the compiled field kernels are not tested")


@pytest.fixture(params=["numpy", pytest.param("numba", marks=needs_numba)])
def kernels(request):
    """The field arithmetic on the NumPy path, then on the compiled kernels."""
    old = gf.set_kernels(request.param)
    try:
        assert gf.kernels() == request.param
        yield request.param
    finally:
        gf.set_kernels(old)


def _both(fn, *args):
    """``fn(*args)`` on the NumPy path and on the compiled kernels."""
    old = gf.set_kernels("numpy")
    try:
        want = fn(*args)
        gf.set_kernels("numba")
        assert gf.kernels() == "numba"
        return want, fn(*args)
    finally:
        gf.set_kernels(old)


def _rand(rng, *shape, edges=True) -> np.ndarray:
    x = rng.integers(0, P, shape, dtype=np.int64)
    if edges:
        flat = x.reshape(-1)
        e = np.array(EDGES, dtype=np.int64)[:flat.size]
        flat[:len(e)] = e
        flat[-len(e):] = e[::-1]
    return x


def _ntt_ref(a: list, w: int) -> list:
    """Radix-2 recursive NTT in Python ints: ``[Σ_i a_i w^(ij)]_j``."""
    n = len(a)
    if n == 1:
        return list(a)
    even, odd = _ntt_ref(a[0::2], w * w % P), _ntt_ref(a[1::2], w * w % P)
    out, t = [0] * n, 1
    for j in range(n // 2):
        x = t * odd[j] % P
        out[j], out[j + n // 2] = (even[j] + x) % P, (even[j] - x) % P
        t = t * w % P
    return out


@pytest.mark.parametrize("size", [1, 7, 1000, (1 << 15) + 3, 3 * (1 << 15)])
def test_elementwise_match_python_ints(size, kernels):
    rng = np.random.default_rng(size)
    a, b = _rand(rng, size), _rand(rng, size)[::-1].copy()
    A, B = a.tolist(), b.tolist()
    assert gf.add(a, b).tolist() == [(x + y) % P for x, y in zip(A, B)]
    assert gf.sub(a, b).tolist() == [(x - y) % P for x, y in zip(A, B)]
    assert gf.mul(a, b).tolist() == [x * y % P for x, y in zip(A, B)]
    assert gf.neg(a).tolist() == [-x % P for x in A]
    for c in (0, 1, 12345, P - 1, P + 5, -1):
        assert gf.mul(a, c).tolist() == [x * c % P for x in A]
        assert gf.mul(c, a).tolist() == [x * c % P for x in A]


def test_elementwise_broadcasting_and_scalars(kernels):
    rng = np.random.default_rng(1)
    x, y = _rand(rng, 40, 50), _rand(rng, 50)
    want = [[u * v % P for u, v in zip(row, y.tolist())] for row in x.tolist()]
    assert gf.mul(x, y).tolist() == want and gf.mul(y, x).tolist() == want
    assert gf.mul(x[:, :1], y[None, :]).shape == (40, 50)
    assert gf.add(x, y).tolist() == [[(u + v) % P for u, v in zip(row, y.tolist())] for row in x.tolist()]
    assert gf.sub(y, x[:3]).tolist() == [[(v - u) % P for u, v in zip(row, y.tolist())] for row in x[:3].tolist()]
    assert gf.sub(5, y).tolist() == [(5 - v) % P for v in y.tolist()]
    for s in (gf.mul(P - 1, P - 1), gf.add(P - 1, 1), gf.sub(0, 1)):
        assert isinstance(s, np.int64)
    assert gf.mul(P - 1, P - 1) == 1 and gf.add(P - 1, 1) == 0 and gf.sub(0, 1) == P - 1
    for e in (np.zeros((3, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)):
        assert gf.mul(e, np.zeros(0, dtype=np.int64)).shape == e.shape
        assert gf.add(e, e).shape == gf.sub(e, e).shape == gf.mul(e, 7).shape == e.shape
    non_contiguous = x[:, ::2]
    assert gf.mul(non_contiguous, non_contiguous).tolist() == [[u * u % P for u in r] for r in non_contiguous.tolist()]


@pytest.mark.parametrize("n, rows", [(1, 3), (2, 5), (4, 1), (64, 3), (128, 2), (256, 9), (512, 300), (4096, 3),
                                     (1 << 14, 5)])
def test_ntt_matches_python_reference(n, rows, kernels):
    rng = np.random.default_rng(n + rows)
    x = _rand(rng, rows, n)
    x[-1] = P - 1                                          # a row of p − 1: the largest lazy values
    check = range(rows) if n <= 512 else [0, rows // 2, rows - 1]
    w = gf.root_of_unity(n)
    got = transforms.ntt(x)
    for r in check:
        assert got[r].tolist() == _ntt_ref(x[r].tolist(), w), r
    inv_n = pow(n, P - 2, P)
    back = transforms.intt(x)
    for r in check:
        assert back[r].tolist() == [v * inv_n % P for v in _ntt_ref(x[r].tolist(), pow(w, P - 2, P))]
    assert (transforms.intt(got) == x).all()
    assert np.getbufsize() == 8192                        # the NTT restores NumPy's buffer size


def test_ntt_large_and_batched(kernels):
    """2^16 points (blocks of one row), and a batch whose last block is partial."""
    rng = np.random.default_rng(7)
    x = _rand(rng, 2, 1 << 16)
    got = transforms.ntt(x)
    assert got[1].tolist() == _ntt_ref(x[1].tolist(), gf.root_of_unity(1 << 16))
    y = _rand(rng, 3, 5, 1 << 12)                            # leading axes kept; 15 rows in blocks of 16
    assert (transforms.ntt(y).reshape(15, -1) == transforms.ntt(y.reshape(15, -1))).all()
    assert transforms.ntt(y)[2, 4].tolist() == _ntt_ref(y[2, 4].tolist(), gf.root_of_unity(1 << 12))
    assert transforms.ntt(np.zeros((0, 8), dtype=np.int64)).shape == (0, 8)


def test_ntt_leaves_its_input_and_takes_any_layout(kernels):
    rng = np.random.default_rng(8)
    x = _rand(rng, 4, 256)
    x0 = x.copy()
    want = transforms.ntt(x)
    assert (x == x0).all()
    assert (transforms.ntt(np.asfortranarray(x)) == want).all() and (transforms.ntt(x.T.copy().T) == want).all()
    assert (transforms.ntt(_rand(rng, 4, 512)[:, ::2] * 0 + x) == want).all()
    c = x[:, :100].copy()
    transforms.coset_eval(c, 256)
    transforms.intt(x)
    assert (c == x0[:, :100]).all() and (x == x0).all()


def test_coset_eval_and_interp(kernels):
    rng = np.random.default_rng(3)
    n, d = 64, 40
    c = _rand(rng, 3, d)
    w = gf.root_of_unity(n)
    ev = transforms.coset_eval(c, n)
    for r in range(3):
        pts = [3 * pow(w, j, P) % P for j in range(n)]
        assert ev[r].tolist() == [sum(cf * pow(x, i, P) for i, cf in enumerate(c[r].tolist())) % P for x in pts]
    back = transforms.coset_interp(ev)
    assert (back[:, :d] == c).all() and not back[:, d:].any()
    with pytest.raises(ValueError):
        transforms.coset_eval(c, 32)


@needs_numba
@pytest.mark.parametrize("n", [1, 2, 4, 8, 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 15, 1 << 16])
def test_compiled_transforms_equal_the_numpy_path_bit_for_bit(n):
    """Rows of 2^10…2^16 as the prover transforms them, with the edge values and p − 1 rows; the transforms
    of evaluations also take values in [p, 2p) (the NumPy path's butterflies are lazy), which must give the
    same canonical outputs as their reductions."""
    rng = np.random.default_rng(n)
    rows = max(2, (1 << 17) // n)
    x = _rand(rng, rows, n)
    x[-1] = P - 1
    lazy = x + P * (rng.integers(0, 2, x.shape) * (x < P - 1))         # some values v + p, v < p − 1
    lazy[0, :min(n, 3)] = [2 * P - 1, P, P + 1][:min(n, 3)]
    lazy[1] = P                                                        # the zero polynomial, every value p
    for fn, args in [(transforms.ntt, (x,)), (transforms.intt, (x,)), (transforms.coset_interp, (x,)), (transforms.coset_interp, (x, 5)),
                     (transforms.ntt, (lazy,)), (transforms.intt, (lazy,)), (transforms.coset_interp, (lazy,)),
                     (transforms.coset_eval, (x, n)), (transforms.coset_eval, (x[:, :max(1, n // 4)], 4 * n)),
                     (transforms.coset_eval, (x[:, :max(1, n // 2) + 1], 2 * n, 7))]:
        want, got = _both(fn, *args)
        assert got.dtype == np.int64 and got.shape == want.shape and np.array_equal(got, want), fn.__name__
    assert np.array_equal(_both(transforms.ntt, lazy)[1], _both(transforms.ntt, lazy % P)[0])
    for fn in (transforms.ntt, transforms.intt, transforms.coset_interp):
        assert not _both(fn, lazy[1:2])[1].any()
    w = gf.root_of_unity(n)
    assert _both(transforms.ntt, lazy[:1])[1][0].tolist() == _ntt_ref([v % P for v in lazy[0].tolist()], w)


@needs_numba
def test_compiled_transforms_of_any_shape_and_layout():
    rng = np.random.default_rng(21)
    y = _rand(rng, 3, 5, 64)
    for arg in (y, y[:, ::2], np.asfortranarray(y[0]), np.zeros((0, 64), dtype=np.int64), y[0, 0]):
        for fn in (transforms.ntt, transforms.intt, transforms.coset_interp):
            want, got = _both(fn, arg)
            assert got.shape == want.shape == arg.shape and np.array_equal(got, want)
        want, got = _both(transforms.coset_eval, arg[..., :40], 128)
        assert got.shape == want.shape == arg.shape[:-1] + (128,) and np.array_equal(got, want)
    assert _both(transforms.coset_eval, y[..., :0], 64)[1].tolist() == np.zeros((3, 5, 64), dtype=np.int64).tolist()
    before = y.copy()
    for fn, args in [(transforms.ntt, (y,)), (transforms.intt, (y,)), (transforms.coset_eval, (y, 64)), (gf.mul, (y, y)), (gf.mul, (y, 3))]:
        _both(fn, *args)
    assert np.array_equal(y, before)                                       # inputs are left as they were
    with pytest.raises(ValueError, match="degree bound 65 exceeds the domain size 64"):
        _both(transforms.coset_eval, _rand(rng, 2, 65), 64)


@needs_numba
def test_compiled_products_equal_the_numpy_path_bit_for_bit():
    """Every shape the prover multiplies (same shapes, rows by a vector, rows by a column, by a constant,
    broadcasts, strided views, empty arrays), with the edge values at both ends."""
    rng = np.random.default_rng(22)
    a, b = _rand(rng, 70000), _rand(rng, 70000)[::-1].copy()
    M, v, col = _rand(rng, 300, 257), _rand(rng, 257), _rand(rng, 300, 1)
    T = _rand(rng, 4, 6, 257)
    cases = [(a, b), (a[:1000], b[:1000]), (M, v), (v, M), (T, v), (M, col), (col, M), (M[:, :1], v[None, :]),
             (M[:, ::3], M[:, 1::3]), (M.T, M.T), (v, np.int64(P - 1)), (np.int64(5), M), (a, 0), (a, P - 1),
             (M[:1], M), (np.zeros((3, 0), dtype=np.int64), np.zeros(0, dtype=np.int64)), (np.int64(P - 1), P - 1)]
    for x, y in cases:
        want, got = _both(gf.mul, x, y)
        assert np.shape(got) == np.shape(want) and np.array_equal(got, want), (np.shape(x), np.shape(y))
    big = np.full(1000, P - 1, dtype=np.int64)
    assert _both(gf.mul, big, big)[1].tolist() == [1] * 1000
    assert _both(gf.mul, big, 0)[1].tolist() == [0] * 1000


@needs_numba
@pytest.mark.parametrize("m, K, n", [(1, 25, 32768), (3, 33, 8341), (5, 0, 3), (0, 4, 2), (40, 9000, 3),
                                     (16, 1024, 64), (128, 512, 130), (2, 4097, 6), (20, 5000, 40)])
def test_compiled_matmul_equals_the_numpy_path_bit_for_bit(m, K, n):
    """Products with a short side (the prover's combinations of rows: short inner dimensions; a short outer
    one; few multiply-adds) as direct products, long ones on all sides by BLAS limbs on both paths; every
    value at p − 1 puts each sum at its largest."""
    rng = np.random.default_rng(m + K + n)
    a, b = _rand(rng, m, K), _rand(rng, K, n)
    for x, y in [(a, b), (np.full_like(a, P - 1), np.full_like(b, P - 1)), (b.T, a.T), (np.asfortranarray(a), b)]:
        want, got = _both(gf.matmul, x, y)
        assert got.shape == want.shape == (x.shape[0], y.shape[1]) and np.array_equal(got, want)
    assert _both(gf.matmul, np.full((1, K), P - 1), np.full((K, 2), P - 1))[1].tolist() == [[K % P] * 2]


def test_the_kernels_are_chosen_by_name_and_numba_is_optional(monkeypatch):
    with pytest.raises(ValueError) as e:
        gf.set_kernels("gpu")
    assert str(e.value) == "field kernels: auto, numba or numpy (CIRCUITGRAD_GF), got 'gpu'"
    old = gf.set_kernels("numpy")
    try:
        assert gf.kernels() == "numpy" and gf.set_kernels("auto") == "numpy"
        assert gf.kernels() == ("numba" if NUMBA else "numpy")
        monkeypatch.setitem(gf._KERNELS, "module", None)                     # as if Numba were not installed
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
        with warnings.catch_warnings():
            warnings.simplefilter("error")                                  # not a warning: the NumPy path
            assert gf.kernels() == "numpy"
            assert gf.mul(np.array([P - 1, 2]), np.array([P - 1, 3])).tolist() == [1, 6]
        gf.set_kernels("numba")
        with pytest.raises(MissingExtra) as e:
            gf.mul(np.array([P - 1]), np.array([2]))
        assert str(e.value) == "the compiled field arithmetic needs Numba: pip install 'circuitgrad[numba]'"
    finally:
        gf.set_kernels(old)


def test_a_numba_that_does_not_load_is_one_warning_and_the_numpy_path(monkeypatch):
    monkeypatch.setitem(gf._KERNELS, "module", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())   # installed ...
    monkeypatch.setitem(sys.modules, "numba", None)                               # ... but it does not import
    monkeypatch.delitem(sys.modules, "circuitgrad.backends.zk.circuits.gf_numba", raising=False)
    monkeypatch.delattr(sys.modules["circuitgrad.backends.zk.circuits"], "gf_numba", raising=False)
    old = gf.set_kernels("auto")
    try:
        with pytest.warns(RuntimeWarning) as record:
            assert gf.kernels() == "numpy"
            assert gf.kernels() == "numpy"                                        # said once, not per call
            assert gf.mul(np.array([P - 1]), np.array([P - 1])).tolist() == [1]
        assert [str(w.message) for w in record] == [
            "Numba is installed but does not load (import of numba halted; None in sys.modules); the field "
            "arithmetic runs in NumPy"]
    finally:
        gf.set_kernels(old)


def test_circuitgrad_gf_numpy_forces_the_numpy_path():
    code = "from circuitgrad.backends.zk.circuits import gf; print(gf.kernels())"
    env = {**os.environ, "CIRCUITGRAD_GF": "numpy"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout == "numpy\n" and out.stderr == ""
    env["CIRCUITGRAD_GF"] = "fast"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "ValueError: field kernels: auto, numba or numpy (CIRCUITGRAD_GF), got 'fast'")


@needs_numba
def test_a_seeded_proof_is_the_same_bytes_on_either_path():
    from conftest import zk_step_circuit

    from circuitgrad.backends.zk.systems import ligero
    from circuitgrad.backends.zk.systems.ligero import proofio
    c, wit = zk_step_circuit("iris", 8, [16])
    numpy_proof, numba_proof = _both(lambda: proofio.dumps(ligero.prove(c, wit, rng=np.random.default_rng(3))))
    assert numba_proof == numpy_proof
    assert ligero.verify(proofio.loads(numba_proof), c, wit.public)


def _matmul_ref(a: np.ndarray, b: np.ndarray) -> list:
    return ((a.astype(object) @ b.astype(object)) % P).tolist()


@pytest.mark.parametrize("m, K, n", [(1, 1, 1), (5, 7, 3), (3, 7, 40), (6, 4096, 2), (2, 4097, 6), (40, 9000, 3),
                                     (3, 300, 700)])
def test_matmul_matches_python_ints(m, K, n, kernels):
    rng = np.random.default_rng(m * K * n)
    a, b = _rand(rng, m, K), _rand(rng, K, n)
    assert gf.matmul(a, b).tolist() == _matmul_ref(a, b)
    for v in (P - 1, P // 2, P // 2 + 1):                 # every limb product at its bound
        a[:], b[:] = v, v
        assert gf.matmul(a, b).tolist() == _matmul_ref(a, b)
    assert gf.matmul(a[:, :0], b[:0]).tolist() == [[0] * n] * m


@pytest.mark.parametrize("shape, axis", [((7,), -1), ((30, 40), 0), ((30, 40), 1), ((5000, 3), 0), ((2, 9000), -1)])
def test_sum_mod(shape, axis):
    rng = np.random.default_rng(len(shape) + shape[0])
    x = _rand(rng, *shape)
    want = (np.sum(x.astype(object), axis=axis) % P)
    assert np.array_equal(gf.sum_mod(x, axis=axis), want)
    y = x - P // 2                                          # not field elements: the limb path
    assert np.array_equal(gf.sum_mod(y, axis=axis), np.sum(y.astype(object), axis=axis) % P)


def test_segment_sum():
    rng = np.random.default_rng(11)
    v = _rand(rng, 20000)
    V = v.tolist()
    for ptr in ([0, 0, 10, 10, 4000, 5000, 5000, 20000], [0, 3, 3, 4100, 8195, 20000], [0, 20000]):
        assert gf.segment_sum(v, np.array(ptr)).tolist() == [sum(V[s:e]) % P for s, e in zip(ptr, ptr[1:])]
    w = v - P
    assert gf.segment_sum(w, np.array([0, 5, 20000])).tolist() == [sum(V[:5]) % P, sum(V[5:]) % P]


def test_segment_sum_of_columns_and_products_by_a_column(kernels):
    """Several repetitions side by side (the linear test's transposed product): segments along the first axis,
    short and long (cut into pieces) in one call, and rows multiplied by a column without broadcast copies."""
    rng = np.random.default_rng(12)
    v = _rand(rng, 20000 * 3).reshape(20000, 3)
    ptr = np.array([0, 0, 7, 4102, 4103, 13000, 13000, 20000])
    want = [[sum(v[s:e, j].tolist()) % P for j in range(3)] for s, e in zip(ptr, ptr[1:])]
    assert gf.segment_sum(v, ptr).tolist() == want
    c = _rand(rng, 20000)
    assert gf.mul(v, c[:, None]).tolist() == [[x * y % P for x in row] for row, y in zip(v.tolist(), c.tolist())]


def test_inverses_powers_lagrange_bytes(kernels):
    rng = np.random.default_rng(12)
    for size in (1, 2, 3, 7, 1000, 1001, 5 * 7 * 11):     # odd lengths carry a value up the product tree
        x = _rand(rng, size)
        x[x == 0] = 1
        assert gf.batch_inv(x).tolist() == [pow(v, P - 2, P) for v in x.tolist()]
    assert gf.batch_inv(x.reshape(5, 7, 11)).tolist() == gf.batch_inv(x).reshape(5, 7, 11).tolist()
    with pytest.raises(ZeroDivisionError):
        gf.batch_inv(np.array([3, 0]))
    b = _rand(rng, 5)
    pw = gf.powers(b, 37)
    assert pw.tolist() == [[pow(v, i, P) for v in b.tolist()] for i in range(37)]
    k, pts = 8, rng.integers(2, P, 5)
    hs = [pow(gf.root_of_unity(k), h, P) for h in range(k)]
    ref = [[(pow(x, k, P) - 1) * pow(k, P - 2, P) * hh * pow(x - hh, P - 2, P) % P for x in pts.tolist()]
           for hh in hs]
    assert gf.lagrange_at(k, pts).tolist() == ref
    data = rng.bytes(16 * 50)
    assert gf.from_bytes128(data).tolist() == [int.from_bytes(data[i:i + 16], "big") % P for i in range(0, 800, 16)]


def test_merkle_leaves_over_row_blocks_and_root_match_hashlib_with_domain_tags():
    rng = np.random.default_rng(13)
    for n, m in [(16, 3), (64, 343), (4096, 1), (8, 512), (8, 513)]:
        cols = _rand(rng, m, n).T                            # a transposed view, as the verifier holds them
        salts = [rng.bytes(16) for _ in range(n)]

        def blocks(c):                                       # H(BLOCK ‖ 256 rows) of the column, in order
            return b"".join(hashlib.sha256(b"CG-BLCK:" + np.asarray(c[a:a + 256], dtype="<i8").tobytes()).digest()
                            for a in range(0, len(c), 256))
        want = [hashlib.sha256(b"CG-LEAF:" + s + blocks(c)).digest() for s, c in zip(salts, cols)]
        assert merkle.leaves(cols, salts) == want
        digests = np.stack([merkle.block_digests(np.ascontiguousarray(cols.T[a:a + 256]))
                            for a in range(0, m, 256)], axis=1)      # the prover's way: a block of rows at a time
        assert merkle.leaves_of(digests, salts) == want
        level = want
        while len(level) > 1:
            level = [hashlib.sha256(b"CG-NODE:" + level[i] + level[i + 1]).digest() for i in range(0, len(level), 2)]
        assert merkle.Tree(want).root == level[0]


def test_circuitgrad_info_names_the_field_kernels(monkeypatch):
    from circuitgrad.backends import zk
    old = gf.set_kernels("numpy")
    try:
        monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "numba" else object())
        assert zk.installed() == ("NumPy field kernels for the native prover (pip install 'circuitgrad[numba]' "
                                  "compiles them, 2-5x faster)")
    finally:
        gf.set_kernels(old)
    if gf.kernels() == "numba":
        import numba
        assert zk.installed() == f"Numba {numba.__version__} (compiled field kernels for the native prover)"


def test_the_linear_tests_transposed_product_is_the_same_on_both_paths():
    """``Transposed.apply_outer`` (the coefficients on z of the linear test) compiled and in NumPy, on a random
    column CSR with rows in three rank-one blocks and a short one."""
    pytest.importorskip("numba")
    from circuitgrad.backends.zk.systems.ligero.circuitdata import Transposed
    rng = np.random.default_rng(11)
    nw, k, sg = 300, 8, 3
    counts = rng.integers(0, 6, nw)
    ptr = np.zeros(nw + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    n_rows = 200
    rows = rng.integers(0, n_rows, int(ptr[-1])).astype(np.int32)
    coeffs = rng.integers(0, P, int(ptr[-1]))
    coeffs[:5] = [0, 1, P - 1, P - 2, 2]
    T = Transposed(ptr, rows, coeffs, n_rows)
    parts = [(0, 0), (60, 8), (120, 16), (180, 24)]
    betas, gammas = rng.integers(0, P, (sg, 27)), rng.integers(0, P, (sg, k))
    betas[0, :3] = P - 1
    got = {}
    for path in ("numba", "numpy"):
        old = gf.set_kernels(path)
        try:
            got[path] = T.apply_outer(parts, betas, gammas, 320)
        finally:
            gf.set_kernels(old)
    assert np.array_equal(got["numba"], got["numpy"]) and got["numba"].shape == (sg, 320)
    w = int(np.flatnonzero(counts)[0])                        # one wire by Python ints
    e = range(int(ptr[w]), int(ptr[w + 1]))
    j = [max(i for i, (a, _) in enumerate(parts) if a <= int(rows[x])) for x in e]
    want = [sum(int(betas[s, parts[jj][1] + (int(rows[x]) - parts[jj][0]) // k]) * int(gammas[s, (int(rows[x]) -
                parts[jj][0]) % k]) * int(coeffs[x]) for x, jj in zip(e, j)) % P for s in range(sg)]
    assert got["numpy"][:, w].tolist() == want


def test_merkle_blocks_and_leaves_refuse_what_they_cannot_hash():
    with pytest.raises(ValueError, match=r"^a block has 1 to 256 rows, got 257$"):
        merkle.block_digests(np.zeros((257, 4), dtype=np.int64))
    with pytest.raises(ValueError, match=r"^3 salts for 4 columns$"):
        merkle.leaves_of(np.zeros((4, 1, 32), dtype=np.uint8), [b"s" * 16] * 3)


def test_negate_in_place_is_neg():
    rng = np.random.default_rng(13)
    a = np.concatenate([[0, 1, P - 1], rng.integers(0, P, 100_000)]).astype(np.int64)
    want = gf.neg(a)
    got = a.copy()
    assert gf.negate(got) is got and np.array_equal(got, want) and got[0] == 0 and got[1] == P - 1
