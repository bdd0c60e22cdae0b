"""No-wrap bounds from the constraint system alone (:mod:`circuitgrad.backends.zk.circuits.bounds`).

Every circuit the benchmarks prove, and the formats at the edge of the 51-bit field, must have every
constraint's residual ``|Ã·B̃ − C̃|`` (and every contraction entry's) below ``p``, and below
``2^required_bits``: the analysis confirms ``required_bits`` without reading the program. Hand-built
systems show that it is not vacuous: an unchecked product that does wrap, and a missing range check,
give bounds of at least ``p``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.circuits import gadgets as G
from circuitgrad.backends.zk.circuits.bounds import no_wrap_bounds
from circuitgrad.backends.zk.circuits.r1cs import Builder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from digits_cnn import cnn  # noqa: E402

P = zk.LIGERO51.p
Q = cg.fixed(16, 8)


def _mlp(batch, sizes, dt, loss, lr, function="step"):
    step = cg.compile_model(nn.mlp(batch, sizes), loss=loss or nn.mse, optimizer=nn.sgd(lr), dtype=dt)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (batch, sizes[0]))
    if function == "predict":
        return step, function, x, None
    y = rng.integers(0, sizes[-1], batch) if loss is nn.softmax_cross_entropy else rng.uniform(-1, 1, (batch, sizes[-1]))
    return step, function, x, y


def _gpt(B, S, V, d, heads, layers, attention):
    step = cg.compile_model(nn.gpt(B, S, V, d=d, heads=heads, layers=layers, attention=attention),
                            loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    rng = np.random.default_rng(0)
    return step, "step", rng.integers(0, V, (B, S)), rng.integers(0, V, (B, S))


def _cnn(batch):
    step = cg.compile_model(cnn(batch, channels=2, dtype=Q), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=Q)
    rng = np.random.default_rng(0)
    return step, "step", rng.uniform(0, 1, step.x_type.shape), rng.integers(0, 10, batch)


CE = nn.softmax_cross_entropy
#: the native prover's benchmark circuits (fixed(16, 8) over ligero51: lookups and contraction arguments)
LIGERO = {
    "iris-predict": lambda: _mlp(1, [4, 16, 3], Q, CE, 0.1, "predict"),
    "iris8": lambda: _mlp(8, [4, 16, 3], Q, CE, 0.1),
    "iris32": lambda: _mlp(32, [4, 16, 3], Q, CE, 0.1),
    "digits": lambda: _mlp(32, [64, 64, 10], Q, CE, 0.1),
    "gpt-softmax": lambda: _gpt(2, 8, 16, 16, 2, 1, "softmax"),
    "gpt-spherical": lambda: _gpt(2, 8, 16, 16, 2, 1, "spherical"),
    "gpt32-softmax": lambda: _gpt(2, 16, 32, 32, 2, 1, "softmax"),
    "gpt32-spherical": lambda: _gpt(2, 16, 32, 32, 2, 1, "spherical"),
    "cnn8": lambda: _cnn(8),
}
#: the snarkjs benchmark circuits (BN254: bit decompositions, one constraint per multiply-accumulate)
BN254 = {
    "iris-predict-bn254": lambda: _mlp(1, [4, 16, 3], Q, None, 0.1, "predict"),
    "digits-predict-bn254": lambda: _mlp(1, [64, 64, 10], Q, None, 0.1, "predict"),
    "iris8-bn254": lambda: _mlp(8, [4, 16, 3], cg.fixed(32, 16), CE, 0.1),
    "iris32-bn254": lambda: _mlp(32, [4, 16, 3], cg.fixed(32, 16), CE, 0.1),
    "digits-bn254": lambda: _mlp(32, [64, 64, 10], cg.fixed(32, 16), CE, 0.1),
    "ci-groth16-bn254": lambda: _mlp(2, [2, 4, 2], Q, None, 0.1),
    "ci-plonk-bn254": lambda: _mlp(1, [2, 2, 2], cg.fixed(12, 6), None, 0.1),
}
SLOW = {"gpt32-softmax", "gpt32-spherical", "digits-bn254"}


def _case(name):
    return pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name


@pytest.mark.parametrize("name", [_case(n) for n in [*LIGERO, *BN254]])
def test_no_benchmark_circuit_can_wrap(name):
    step, function, x, y = {**LIGERO, **BN254}[name]()
    field = zk.LIGERO51 if name in LIGERO else zk.BN254
    c = zk.compile(step, field=field, function=function)
    b = no_wrap_bounds(c.r1cs)
    assert b.no_wrap() and b.max < field.p, (name, b.worst())
    assert b.max < 2.0 ** c.required_bits, (name, c.required_bits, b.worst())
    w = c.witness(step.init_params(seed=0), x, y).values[:c.r1cs.n_wires]    # a real witness lies inside them
    assert np.all((b.lo <= w) & (w <= b.hi))


EDGE = [cg.fixed(24, 2), cg.fixed(24, 4), cg.fixed(25, 3)]


@pytest.fixture(scope="module", params=EDGE, ids=str)
def edge(request):
    dt = request.param
    step = cg.compile_model(nn.mlp(2, [2, 2, 3]), loss=CE, optimizer=nn.sgd(0.5), dtype=dt)
    c = zk.compile(step, field=zk.LIGERO51)
    return dt, step, c, no_wrap_bounds(c.r1cs)


def test_formats_at_the_edge_of_the_field_do_not_wrap(edge):
    dt, step, c, b = edge
    assert 48 <= c.required_bits <= 50 and c.range_checks == "lookup" and c.contractions == "argument"
    assert b.no_wrap() and b.max < P and b.max < 2.0 ** c.required_bits, b.worst()
    rng = np.random.default_rng(1)
    w = c.witness(step.init_params(seed=0), rng.uniform(-1, 1, (2, 2)), rng.integers(0, 3, 2)).values[:c.r1cs.n_wires]
    assert np.all((b.lo <= w) & (w <= b.hi))


def test_the_exp2_rows_are_bounded_by_their_range_checked_fraction(edge):
    """``(t − 2^f·k)·(u + c1) = 2^f·v − 2^(f−1) + rem``: term by term ``t − 2^f·k`` reaches ``2^(w+3)``, but it is
    looked up (or decomposed) in ``[0, 2^f)``, and then the residual is below ``2^f·2^w + 2^f·2^(w−1) < 2^(w+f+1)``."""
    dt, _, c, b = edge
    tags = [t for t in b.by_tag() if t.endswith("softmax.exp2")]
    assert tags
    assert all(b.by_tag()[t] < 2.0 ** (dt.width + dt.frac + 1) for t in tags)


def test_an_unchecked_product_that_wraps_is_bounded_above_p():
    """``z = x·y`` with ``x, y < 2^30`` and ``z`` not range-checked: the product reaches ``2^60``, and a witness with
    ``z = x·y mod p`` satisfies the system while ``x·y ≠ z`` over the integers."""
    b = Builder(zk.LIGERO51, range_checks="lookup", table_bits=16)
    x, y = b.alloc(1), b.alloc(1)
    G.fits(b, [(x, 1)], 0, 30, "x")
    G.fits(b, [(y, 1)], 0, 30, "y")
    z = G.product(b, [(x, 1)], [(y, 1)])
    r = b.finish(0, 0, 2)
    bounds = no_wrap_bounds(r)
    row = int(r.rows_of_wire(int(z[0]))[0])
    assert bounds.rows[row] >= P and not bounds.no_wrap()
    xv = yv = (1 << 30) - 1
    w = np.zeros(r.n_wires, dtype=np.int64)
    w[0], w[x[0]], w[y[0]], w[z[0]] = 1, xv, yv, (xv * yv) % P
    limbs = np.setdiff1d(np.arange(r.n_wires), [0, x[0], y[0], z[0]])
    w[limbs] = (1 << 14) - 1                              # the top 14-bit limbs of 2^30 − 1
    assert r.check(w) and xv * yv != int(w[z[0]])


def test_a_checked_product_is_bounded_exactly():
    """``x, y ∈ [0, 255]`` by lookups, ``z = x·y``: ``z ∈ [0, 255²]`` and the residual at most ``255²``."""
    b = Builder(zk.LIGERO51, range_checks="lookup", table_bits=8)
    x, y = b.alloc(1), b.alloc(1)
    G.fits(b, [(x, 1)], 0, 8, "x")
    G.fits(b, [(y, 1)], 0, 8, "y")
    z = G.product(b, [(x, 1)], [(y, 1)])
    bounds = no_wrap_bounds(b.finish(0, 0, 2))
    assert (bounds.lo[x[0]], bounds.hi[x[0]]) == (0, 255)
    assert (bounds.lo[z[0]], bounds.hi[z[0]]) == (0, 255 ** 2)
    assert bounds.rows.tolist() == [255 ** 2]


def test_bits_are_booleans_and_their_rows_are_bounded_by_one():
    """``b·(b − 1) = 0``: ``b ∈ [0, 1]``, residual ``b² − b ∈ [−1, 0]`` by interval arithmetic; the sum row
    ``Σ 2^i·bᵢ = v`` then pins ``v`` to ``[0, 2^8)``."""
    b = Builder(zk.LIGERO51, range_checks="bits")
    v = b.alloc(3)
    bits = G.decompose(b, [(v, 1)], 0, 8, "v")
    bounds = no_wrap_bounds(b.finish(0, 0, 3))
    assert np.all(bounds.lo[bits] == 0) and np.all(bounds.hi[bits] == 1)
    assert np.all(bounds.lo[v] == 0) and np.all(bounds.hi[v] == 255)
    assert bounds.rows[:24].tolist() == [1] * 24 and bounds.rows[24:].tolist() == [255] * 3


def _fraction_row(range_checks: str, check: str, f: int = 20):
    """``t ∈ [0, 2^46)``, ``k ∈ [0, 2^26)``, ``u ∈ [0, 2^10)``, ``v ∈ [0, 2^30)`` and the row
    ``(t − 2^f·k)·u = v``: term by term ``|A·B|`` reaches ``2^57 > p``. ``check``: ``"none"``, ``"same"``
    (``t − 2^f·k ∈ [0, 2^f)``), ``"scaled"`` (the row's A is ``3·(t − 2^f·k) + 5``, the check the same) or
    ``"other"`` (the check is on ``t − 2^f·k'`` for another wire ``k'``)."""
    b = Builder(zk.LIGERO51, range_checks=range_checks, table_bits=16)
    t, k, k2, u, v = (b.alloc(1) for _ in range(5))
    for wire, bits in ((t, 46), (k, 26), (k2, 26), (u, 10), (v, 30)):
        G.fits(b, [(wire, 1)], 0, bits, "range")
    if check in ("same", "scaled"):
        G.fits(b, [(t, 1), (k, -(1 << f))], 0, f, "fraction")
    elif check == "other":
        G.fits(b, [(t, 1), (k2, -(1 << f))], 0, f, "fraction")
    a = [(t, 3), (k, -3 << f), (G.ONE, 5)] if check == "scaled" else [(t, 1), (k, -(1 << f))]
    b.constrain(a, [(u, 1)], [(v, 1)], "row")
    r = b.finish(0, 0, 5)
    return no_wrap_bounds(r).by_tag()["circuit:row"]


@pytest.mark.parametrize("range_checks", ["lookup", "bits"])
def test_a_range_checked_combination_bounds_the_row_and_removing_its_check_does_not(range_checks):
    f = 20
    # with the check: |A| < 2^f (3·2^f + 5 scaled), |B| < 2^10, |C| < 2^30
    assert _fraction_row(range_checks, "same", f) <= (2 ** f - 1) * (2 ** 10 - 1) + 2 ** 30 - 1
    assert _fraction_row(range_checks, "scaled", f) <= (3 * (2 ** f - 1) + 5) * (2 ** 10 - 1) + 2 ** 30 - 1
    assert _fraction_row(range_checks, "none", f) >= P
    assert _fraction_row(range_checks, "other", f) >= P


def test_a_counted_circuit_is_refused():
    step, function, _, _ = _mlp(1, [2, 2], Q, None, 0.25)
    c = zk.compile(step, field=zk.LIGERO51, count_only=True)
    with pytest.raises(ValueError, match=r"^no_wrap_bounds: this circuit was counted, not built \(count_only\): "
                                         r"it has no matrices$"):
        no_wrap_bounds(c.r1cs)


def test_in_a_private_step_only_the_hashes_and_merkle_paths_reach_p():
    """Poseidon2 and the Merkle path compute modulo ``p`` by design; the training step's rows stay below ``p``."""
    step, _, _, _ = _mlp(2, [3, 4, 2], Q, CE, 0.125)
    c = zk.compile(step, public="commitments", data_rows=8)
    tags = no_wrap_bounds(c.r1cs).by_tag()
    wraps = {t.rsplit(":", 1)[1].split(".")[0] for t, v in tags.items() if v >= P}
    assert wraps == {"poseidon2", "merkle"}
    assert all(v < P for t, v in tags.items() if not t.startswith(("commitment ", "dataset membership")))


def test_coefficients_as_field_elements_give_the_same_bounds():
    """A system whose coefficients are field elements in ``[0, p)`` (object arrays, as a file gives them) is read
    with signed representatives: the same bounds as with the builder's small signed coefficients."""
    b = Builder(zk.LIGERO51, range_checks="lookup", table_bits=8)
    x, y = b.alloc(2), b.alloc(2)
    G.fits(b, [(x, 1)], 0, 12, "x")
    G.fits(b, [(y, 1)], 0, 12, "y")
    G.product(b, [(x, 1), (y, -1)], [(y, 1), (G.ONE, -3)])
    r = b.finish(0, 0, 4)
    want = no_wrap_bounds(r)
    for M in (r.A, r.B, r.C, r.L):
        M.coeffs = np.array([int(v) % P for v in M.coeffs], dtype=object)
    got = no_wrap_bounds(r)
    assert got.rows.tolist() == want.rows.tolist() and got.lo.tolist() == want.lo.tolist()
    # by hand: A = x − y ∈ [−4095, 4095], B = y − 3 ∈ [−3, 4092], so A·B and z lie in ±4095·4092
    assert want.rows.tolist() == [2 * 4095 * 4092] * 2
