"""The contraction argument (``contractions="argument"``): Freivalds' check of exact matrix products in the
native Ligero prover (backends/zk/systems/ligero/contraction.py), its soundness against cheating provers, its
transcript order, its file format, and the circuits that use it."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import row_reduce_mod_p

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.systems import ligero
from circuitgrad.backends.zk.systems.ligero import contraction, proofio
from circuitgrad.backends.zk.circuits import gf
from circuitgrad.backends.zk.systems.ligero.params import contraction_error, contraction_sigma, soundness_bits
from circuitgrad.backends.zk.systems.ligero.protocol import Reject
from circuitgrad.backends.zk.systems.ligero.transcript import Transcript
from circuitgrad.backends.zk.circuits.formats import FormatError
from circuitgrad.backends.zk.circuits.r1cs import Builder, Contraction

P = gf.P
M, N, K = 5, 7, 4          # C (M×K) = A (M×N) · B (N×K); K > σC = 3 (a cheater needs a nullspace)


def _product_circuit(L: int = 1):
    """Private A, B, C with ``C[l] = A[l]·B[l]`` recorded as one contraction, and C[0, 0, 0] public."""
    b = Builder(zk.LIGERO51, "bits", "argument")
    out = b.alloc(1, "out")
    A, B, C = b.alloc((L, M, N), "A"), b.alloc((L, N, K), "B"), b.alloc((L, M, K), "C")
    b.context = "product#0"
    b.contract(A, B, C, "matmul.contraction")
    b.constrain([(C.reshape(-1)[:1], 1)], [(0, 1)], [(out, 1)], "output")
    r = b.finish(1, 0, A.size + B.size + C.size)
    c = zk.Circuit(r, None, None, "product", [], [], [], [], [], [], 0.0, None, cg.fixed(16, 8), 40)
    rng = np.random.default_rng(1)
    W = np.zeros(r.n_wires, dtype=np.int64)
    W[0] = 1
    W[A] = rng.integers(-300, 300, A.shape)
    W[B] = rng.integers(-300, 300, B.shape)
    W[C] = np.matmul(W[A], W[B])
    W[out] = W[C.reshape(-1)[0]]
    return c, W, (A, B, C)


def _prove(c, W, rng=None):
    return ligero.prove(c, W, check=False, rng=rng or np.random.default_rng(0))


def _rejects(c, proof, W) -> str:
    with pytest.raises(Reject) as e:
        ligero.check(proof, c, gf.reduce(W[1:1 + c.r1cs.n_public]))
    return str(e.value)


# ------------------------------------------------------------------------------------------ honest proofs
@pytest.mark.parametrize("L", [1, 3])
def test_honest_product_verifies(L):
    c, W, _ = _product_circuit(L)
    assert c.r1cs.check(W)
    proof = _prove(c, W)
    assert ligero.verify(proof, c)
    assert proof.params.contraction_sigma == contraction_sigma(1) == 3
    assert proof.contractions == L * N                     # one x cell per (batch index, inner index)


def test_contraction_error_is_freivalds_bound():
    # (2/p)^σ, independent of the number and size of the contractions
    assert contraction_error(1) == pytest.approx(1 - np.log2(P))
    assert contraction_error(3) == pytest.approx(3 * (1 - np.log2(P)))
    assert contraction_error(0) == -np.inf
    c, W, _ = _product_circuit()
    p = _prove(c, W).params
    bits = soundness_bits(p, contractions=N)
    assert bits >= 100
    assert soundness_bits(p, contractions=N) == soundness_bits(p)     # (2/p)^3 ≈ 2^-150 is not the largest term
    weak = type(p)(**{**p.__dict__, "contraction_sigma": 1})
    assert soundness_bits(weak, contractions=N) < 51                 # one draw: 2/p ≈ 2^-50


# ---------------------------------------------------------------------------------------- cheating provers
def test_one_wrong_entry_is_rejected():
    c, W, (A, B, C) = _product_circuit()
    W = W.copy()
    W[C[0, 2, 1]] += 1
    assert c.r1cs.failing_contractions(W) == [(0, 2 * K + 1)]
    with pytest.raises(zk.UnsatisfiedConstraint, match=r"contraction 0 of 1 \(product#0:matmul.contraction\): "
                                                      rf"entry {2 * K + 1} of C is not the product A·B"):
        c.r1cs.assert_satisfied(W)
    assert "linear test" in _rejects(c, _prove(c, W), W)


def test_a_consistent_wrong_row_is_rejected():
    """Row 1 of C is the product of a different row of A: ``C[1] = (A[1] + e)·B`` for the committed B."""
    c, W, (A, B, C) = _product_circuit()
    W = W.copy()
    e = np.arange(1, N + 1)
    W[C[0, 1]] = (W[A[0, 1]] + e) @ W[B[0]]
    assert len(c.r1cs.failing_contractions(W)) == K
    assert "linear test" in _rejects(c, _prove(c, W), W)


def test_a_cheater_that_fixes_the_sum_breaks_the_quadratic_test(monkeypatch):
    """A prover whose x, y are honest but whose π is shifted so that Σπ matches the wrong C."""
    c, W, (A, B, C) = _product_circuit()
    W = W.copy()
    W[C[0, 0, 0]] += 5
    honest = contraction.second_rows

    def shifted(z, ix, sh, draws):
        rows = honest(z, ix, sh, draws)
        for s, (u, v) in enumerate(draws):          # π_s[0] += u_0·5·v_0: Σπ = uᵀC'v, but π ≠ x∘y
            rows[(3 * s + 2) * sh.mx, 0] = gf.add(rows[(3 * s + 2) * sh.mx, 0], gf.mul(gf.mul(u[0], 5), v[0]))
        return rows
    monkeypatch.setattr(contraction, "second_rows", shifted)
    assert "quadratic test" in _rejects(c, _prove(c, W), W)


def _nullspace_row(vs: list, cols: int) -> np.ndarray:
    """A nonzero d (length ``cols``) over F_p with ``d·v = 0`` for each v in ``vs`` (from the row echelon form)."""
    rows, piv = row_reduce_mod_p([v[:cols] for v in vs], P)
    free = next(col for col in range(cols) if col not in piv)
    d = [0] * cols
    d[free] = 1
    for i, col in enumerate(piv):
        d[col] = -rows[i][free] % P
    return np.array(d, dtype=np.int64)


def test_a_product_chosen_after_the_challenges_is_rejected(monkeypatch):
    """A prover that sees the draws (u_s, v_s) of its first commitment, then commits a wrong C that passes
    Freivalds' check for exactly those draws: the new commitment draws new challenges, and it fails."""
    c, W, (A, B, C) = _product_circuit()
    seen = []
    honest = contraction.challenges

    def spy(T, ix, sh):
        d = honest(T, ix, sh)
        seen.append(d)
        return d
    monkeypatch.setattr(contraction, "challenges", spy)
    assert ligero.verify(_prove(c, W), c)
    draws = seen[-1]
    d = _nullspace_row([v for _, v in draws], K)            # Σ_j d_j v_s[j] = 0 for every draw s
    W2 = W.copy()
    W2[C[0, 0]] = gf.add(gf.reduce(W[C[0, 0]]), d)          # C'[0] = C[0] + d ≠ A[0]·B
    assert c.r1cs.failing_contractions(W2)
    for u, v in draws:                                      # C' passes the check for the draws it was chosen for
        Cf, Cf2 = gf.reduce(W[C[0]]), gf.reduce(W2[C[0]])
        lhs = gf.sum_mod(gf.mul(u[:M, None], gf.mul(Cf, v[None, :K])).reshape(-1))
        lhs2 = gf.sum_mod(gf.mul(u[:M, None], gf.mul(Cf2, v[None, :K])).reshape(-1))
        assert lhs == lhs2
    proof = _prove(c, W2)                                   # same masking randomness, new commitment
    assert not any(np.array_equal(a[0], b[0]) for a, b in zip(seen[-1], draws))
    assert "linear test" in _rejects(c, proof, W2)


def test_challenges_are_drawn_after_the_commitments_they_test(monkeypatch):
    c, W, _ = _product_circuit()
    log = []
    absorb, fld = Transcript.absorb, Transcript.field

    def spy_absorb(self, label, data):
        log.append(("absorb", label))
        return absorb(self, label, data)

    def spy_field(self, label, n):
        log.append(("draw", label))
        return fld(self, label, n)
    monkeypatch.setattr(Transcript, "absorb", spy_absorb)
    monkeypatch.setattr(Transcript, "field", spy_field)
    proof = _prove(c, W)
    prover = list(log)
    log.clear()
    assert ligero.verify(proof, c)
    for seen in (prover, log):                                   # the prover's transcript, then the verifier's
        at = {e: i for i, e in reversed(list(enumerate(seen)))}  # first occurrence
        assert at[("absorb", "root")] < at[("draw", "contract0.u")] < at[("draw", "contract2.v")]
        assert at[("draw", "contract2.v")] < at[("absorb", "root2")] < at[("draw", "lin0.contract0.x")]
    assert [e for e in log if e[0] == "draw"] == [e for e in prover if e[0] == "draw"]


# ------------------------------------------------------------------------------------------- file format
def test_proof_file_round_trip_and_malformed_headers():
    c, W, _ = _product_circuit()
    proof = _prove(c, W)
    data = proofio.dumps(proof)
    assert data[8:10] == (3).to_bytes(2, "little")            # version 3: contractions
    back = proofio.loads(data)
    assert back.contractions == N and back.params.contraction_sigma == 3
    assert ligero.verify(back, c)
    back.contractions = N + 1
    assert "contraction cells" in _rejects(c, back, W)
    import hashlib
    import json
    import struct
    (hlen,) = struct.unpack("<I", data[10:14])
    head = json.loads(data[14:14 + hlen])
    head["contraction_sigma"] = 0
    raw = json.dumps(head, sort_keys=True).encode()
    body = data[:10] + struct.pack("<I", len(raw)) + raw + data[14 + hlen:-32]
    with pytest.raises(FormatError, match="version 3 proof must have contraction_cells and contraction_sigma ≥ 1"):
        proofio.loads(body + hashlib.sha256(body).digest())


# --------------------------------------------------------------------------------------- builder and circuits
def test_builder_refuses_contractions_without_the_argument():
    b = Builder(zk.LIGERO51, "lookup", "mac")
    with pytest.raises(ValueError, match="Builder.contract: this builder proves contractions with 'mac'; the "
                                         "argument needs Builder\\(field, contractions='argument'\\)"):
        b.contract(b.alloc((2, 3)), b.alloc((3, 4)), b.alloc((2, 4)), "x")
    with pytest.raises(ValueError, match="contractions must be one of \\['argument', 'mac'\\], got 'x'"):
        Builder(zk.LIGERO51, "lookup", "x")
    with pytest.raises(ValueError, match="do not compose"):
        Contraction(np.zeros((1, 2, 3), np.int64), np.zeros((1, 4, 5), np.int64), np.zeros((1, 2, 5), np.int64), "t")


def _mlp_step():
    return cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=cg.fixed(16, 8))


def test_mlp_step_constraints_drop_by_the_multiply_accumulates():
    step = _mlp_step()
    arg = zk.compile(step, field=zk.LIGERO51)
    mac = zk.compile(step, field=zk.LIGERO51, contractions="mac")
    assert arg.contractions == "argument" and mac.contractions == "mac"
    # every MatMul of the step: m·p outputs, each (n − 1) product constraints fewer, one more wire (C)
    prog = step.fn("step").program
    saved = wires = 0
    for a in prog.instrs:
        if type(a.op).__name__ in ("MatMul", "BatchMatMul"):
            *lead, m, n = prog.types[a.args[0]].shape
            p = prog.types[a.args[1]].shape[-1]
            outs = int(np.prod(lead, dtype=np.int64)) * m * p
            saved += outs * (n - 1)
            wires += outs
    assert mac.r1cs.n_constraints - arg.r1cs.n_constraints == saved
    assert arg.r1cs.n_wires - mac.r1cs.n_wires == wires - saved
    assert arg.r1cs.n_lookups == mac.r1cs.n_lookups
    assert "contractions" in arg.statement() and "Freivalds" in arg.statement()
    assert "contraction" not in mac.statement()
    rng = np.random.default_rng(0)
    wit = arg.witness(step.init_params(seed=0), rng.uniform(-1, 1, (8, 4)), rng.integers(0, 3, 8))
    proof = zk.prove(arg, wit)
    assert zk.verify(proof, arg, wit.public)
    assert not zk.verify(proof, mac, wit.public)               # another circuit: another digest


def test_snarkjs_export_needs_one_constraint_per_mac(tmp_path):
    step = _mlp_step()
    c = zk.compile(step, field=zk.LIGERO51, range_checks="bits", contractions="argument")
    with pytest.raises(ValueError, match="export: this circuit proves 5 matrix products with the native prover's "
                                         "contraction argument"):
        c.export(str(tmp_path))
    assert zk.compile(step).contractions == "mac"              # BN254 (snarkjs): plain R1CS by default


def test_required_bits_is_exact_for_products():
    """|Σₙ aᵢbᵢ| ≤ n·2^(2w−2) and |2^f·q − 2^(f−1) + r| < 2^(w+f−1) + 2^f: p must exceed their sum S, checked as
    p > 2^⌈log2(S + 1)⌉. fixed(20, 10) sums of 2048 products (2^49 + 2^29 + 2^10: 50 bits) fit the 51-bit field
    (p ≈ 2^50.99998); of 4096 (51 bits) they do not, and the error names the contraction."""
    from circuitgrad.backends.zk.circuits.lower import required_bits
    dt = cg.fixed(20, 10)

    def matmul(n):
        return cg.compile_model(nn.dense(2, n, 2), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=dt)
    for n, ok in ((2048, True), (4096, False)):
        prog = matmul(n).fn("predict").program
        exact = n * (1 << 38) + (1 << 29) + (1 << 10)
        assert required_bits(prog, dt) == (exact + 1).bit_length() == {2048: 50, 4096: 51}[n]
        if ok:
            zk.compile(matmul(n), field=zk.LIGERO51, function="predict")
        else:
            with pytest.raises(ValueError, match=r"^zk\.compile: field ligero51 \(51 bits\) is too small for "
                                                 r"fixed\(20,10\): .* need p > 2\^51 .* \(its longest contraction, "
                                                 r"MatMul#\d+ sums 4096 products\)$"):
                zk.compile(matmul(n), field=zk.LIGERO51, function="predict")


def test_a_counted_circuit_has_the_built_ones_sizes_and_cannot_be_proved(tmp_path):
    """``count_only`` (what cg.cost uses) counts exactly what the built circuit holds, by tag."""
    step = cg.compile_model(nn.gpt(2, 8, 16, d=16, heads=2, layers=1), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(0.125), dtype=cg.fixed(16, 8))
    built = zk.compile(step, field=zk.LIGERO51)
    counted = zk.compile(step, field=zk.LIGERO51, count_only=True)
    b, c = built.r1cs, counted.r1cs
    assert (c.n_wires, c.n_constraints, c.n_lookups, c.table_bits) == (b.n_wires, b.n_constraints, b.n_lookups,
                                                                       b.table_bits)
    assert c.counts_by_gadget() == b.counts_by_gadget()
    assert c.counts_by_gadget(lookups=True) == b.counts_by_gadget(lookups=True)
    assert c.lookup_tables == b.lookup_tables
    # counted terms are those before a row's repeated wires are merged (an upper bound; a sum substituted into a
    # row that also reads one of its terms repeats that wire: 2.2% here)
    assert b.nonzeros <= c.nonzeros <= 1.03 * b.nonzeros
    assert [x.a.shape + x.b.shape for x in c.contractions] == [x.a.shape + x.b.shape for x in b.contractions]
    assert c.n_contraction_terms == b.n_contraction_terms
    with pytest.raises(ValueError, match=r"^zk: this circuit was counted, not built"):
        counted.witness(step.init_params(seed=0), np.zeros((2, 8), dtype=np.int64), np.zeros((2, 8), dtype=np.int64))
    with pytest.raises(ValueError, match=r"^ligero: this circuit was counted, not built"):
        ligero.prove(counted, np.zeros(c.n_wires, dtype=np.int64), check=False)
    with pytest.raises(ValueError, match=r"^export: this circuit was counted, not built"):
        counted.export(str(tmp_path))


@pytest.mark.slow
def test_tinygpts_step_compiles_in_fixed_20_10_over_the_51_bit_field():
    """tinygpt's model (d=128, B=16, S=64): its loss scale 1/(B·S) = 2^-10 rounds to 0 in fixed(16, 8); in
    fixed(20, 10) it is exact, and the exact product bound (sums of 1024 products of 20-bit values) fits the
    51-bit field, so cg.cost counts its circuit (count_only: it is far too large to build here)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import tinygpt
    with pytest.raises(cg.FixedPointOverflow, match=r"^Scale constant 0\.0009765625 rounds to 0 in fixed\(16,8\)"):
        spec = tinygpt.model(dtype=cg.fixed(16, 8))
        cg.cost(cg.compile_model(spec.model, loss=spec.loss, optimizer=spec.optimizer, dtype=spec.dtype),
                target="zk", prover_time=False)
    spec = tinygpt.model(dtype=cg.fixed(20, 10))
    step = cg.compile_model(spec.model, loss=spec.loss, optimizer=spec.optimizer, dtype=spec.dtype)
    c = cg.cost(step, target="zk", prover_time=False)
    r = c.detail["circuit"].r1cs
    assert r.counted and r.n_constraints > 10 ** 7 and r.n_lookups > 10 ** 7
    assert len(r.contractions) > 0 and c.detail["circuit"].required_bits <= 50


def test_malformed_contraction_and_table_parameters_are_refused_by_name():
    c, W, _ = _product_circuit()
    proof = _prove(c, W)
    p = proof.params
    none = type(p)(**{**p.__dict__, "contraction_sigma": 0})
    with pytest.raises(ValueError, match=r"^ligero: the circuit has 1 contractions, so contraction_sigma must be at "
                                         r"least 1$"):
        ligero.prove(c, W, params=none, check=False)
    forged = proofio.loads(proofio.dumps(proof))
    forged.params = none
    with pytest.raises(Reject, match=r"^the circuit has 1 contractions, but the proof draws no Freivalds challenge$"):
        ligero.check(forged, c, params=none)
    with pytest.raises(ValueError, match=r"^table_bits must be an integer in \[3, 22\], got 23$"):
        Builder(zk.LIGERO51, "lookup", table_bits=23)
    with pytest.raises(ValueError, match=r"^Builder.lookup: tables have 1 to 22 bits, got 23$"):
        b = Builder(zk.LIGERO51, "lookup")
        b.lookup([(b.alloc(1), 1)], "t", 23)


def test_a_proof_claiming_contractions_or_other_tables_is_refused():
    """Sizes the verifier takes from its own circuit, never from the proof."""
    step = _mlp_step()
    mac = zk.compile(step, field=zk.LIGERO51, contractions="mac")      # lookups, no contractions
    rng = np.random.default_rng(0)
    wit = mac.witness(step.init_params(seed=0), rng.uniform(-1, 1, (8, 4)), rng.integers(0, 3, 8))
    proof = zk.prove(mac, wit)
    p = proof.params
    claims = type(p)(**{**p.__dict__, "contraction_sigma": 3})
    forged = proofio.loads(proofio.dumps(proof))
    forged.params = claims
    with pytest.raises(Reject, match=r"^the proof has contraction challenges, but the circuit has no contractions$"):
        ligero.check(forged, mac, params=claims)
    forged = proofio.loads(proofio.dumps(proof))
    forged.lookup_table += 256
    with pytest.raises(Reject, match=rf"^the proof claims lookup tables of {forged.lookup_table} entries, the "
                                     rf"circuit's have {proof.lookup_table}$"):
        ligero.check(forged, mac)


def test_the_linear_tests_wire_terms_are_the_occurrences_summed_by_wire():
    """``WireTerms.sums``: ``Σ_draws r_x[k]·u[i]`` on ``A[i, k]``, ``r_y[k]·v[j]`` on ``B[k, j]`` and
    ``r_Σ·u[i]·v[j]`` on ``C[i, j]``, summed by wire (a wire used twice gets both), against Python integers."""
    b = Builder(zk.LIGERO51, "bits", "argument")
    A, B = b.alloc((2, M, N), "A"), b.alloc((2, N, K), "B")
    C = b.alloc((2, M, K), "C")
    A[1, 0, 0] = A[0, 0, 0]                                   # one wire in two places
    b.contract(A, B, C, "matmul.contraction")
    r = b.finish(0, 0, A.size + B.size + C.size)
    ix = contraction.index(r.contractions)
    sh = contraction.Shape(ix.n, 8, 2)
    T = Transcript(b"wire terms")
    draws = contraction.challenges(T, ix, sh)
    terms, _ = contraction.linear_rows(ix, sh, T, 0, draws, T.field("gamma", 8))
    wires, sums = terms.sums()
    want: dict[int, int] = {}
    for ox, oy, rsum, u, v in terms.terms:
        rx, ry = ox.flat(ix.n).tolist(), oy.flat(ix.n).tolist()
        u, v = u.tolist(), v.tolist()
        for l in range(2):
            for i in range(M):
                for k in range(N):
                    w = int(A[l, i, k])
                    want[w] = (want.get(w, 0) + rx[l * N + k] * u[l * M + i]) % P
            for k in range(N):
                for j in range(K):
                    w = int(B[l, k, j])
                    want[w] = (want.get(w, 0) + ry[l * N + k] * v[l * K + j]) % P
            for i in range(M):
                for j in range(K):
                    w = int(C[l, i, j])
                    want[w] = (want.get(w, 0) + rsum * u[l * M + i] * v[l * K + j]) % P
    assert wires.tolist() == sorted(want)
    assert sums.tolist() == [want[w] for w in sorted(want)]
