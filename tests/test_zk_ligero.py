"""The native Ligero prover: field arithmetic, soundness bound, completeness, soundness, zero knowledge, format."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import assert_flipped_bytes_rejected, lookup_and_product_step, row_reduce_mod_p, zk_step_circuit

import circuitgrad as cg
from circuitgrad.backends import zk
from circuitgrad.backends.zk.systems import ligero
from circuitgrad.backends.zk.circuits import gf
from circuitgrad.backends.zk.systems.ligero import merkle, ntt as transforms, params as LP, protocol, prover
from circuitgrad.backends.zk.systems.ligero.circuitdata import prepare
from circuitgrad.backends.zk.circuits.r1cs import Builder

P = gf.P


# ------------------------------------------------------------------ field
def _obj(a):
    return np.asarray(a).astype(object)


@pytest.mark.parametrize("op, ref", [
    (gf.add, lambda a, b: (a + b) % P),
    (gf.sub, lambda a, b: (a - b) % P),
    (gf.mul, lambda a, b: (a * b) % P),
])
def test_field_ops_match_python_integers(op, ref):
    rng = np.random.default_rng(1)
    a = rng.integers(0, P, 5000)
    b = rng.integers(0, P, 5000)
    a[:3], b[:3] = P - 1, [P - 1, 0, 1]
    assert (op(a, b).astype(object) == ref(_obj(a), _obj(b))).all()


def test_p_is_the_documented_ntt_friendly_prime():
    assert P == 262139 * 2 ** 33 + 1 and P.bit_length() == 51
    assert pow(3, (P - 1) // 2, P) != 1 and pow(3, (P - 1) // 262139, P) != 1   # 3 generates F_p^*
    assert all(pow(a, P - 1, P) == 1 for a in (2, 5, 7, 11, 13))                      # Fermat witnesses


def test_matmul_segment_sum_and_batch_inverse():
    rng = np.random.default_rng(2)
    A, B = rng.integers(0, P, (4, 300)), rng.integers(0, P, (300, 5))
    assert (gf.matmul(A, B).astype(object) == (_obj(A) @ _obj(B)) % P).all()
    v = np.full(10, P - 1)
    assert gf.segment_sum(v, np.array([0, 4, 4, 10])).tolist() == [(4 * (P - 1)) % P, 0, (6 * (P - 1)) % P]
    x = rng.integers(1, P, (7, 3))
    assert (gf.mul(gf.batch_inv(x), x) == 1).all()


@pytest.mark.parametrize("n", [2, 16, 256])
def test_ntt_is_the_dft_and_inverts(n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, P, (2, n))
    w = gf.root_of_unity(n)
    ref = [[sum(int(x[i, j]) * pow(w, j * k, P) for j in range(n)) % P for k in range(n)] for i in range(2)]
    assert transforms.ntt(x).tolist() == ref
    assert (transforms.intt(transforms.ntt(x)) == x).all()
    c = rng.integers(0, P, (1, n // 2))
    ev = transforms.coset_eval(c, n)
    assert ev[0, 1] == sum(int(c[0, i]) * pow(3 * w, i, P) for i in range(n // 2)) % P
    assert (transforms.coset_interp(ev)[:, :n // 2] == c).all() and not transforms.coset_interp(ev)[:, n // 2:].any()


def test_lagrange_basis_interpolates():
    rng = np.random.default_rng(3)
    k = 8
    vals = rng.integers(0, P, k)
    coeffs = transforms.intt(vals[None])[0]
    pts = np.array([3, 12345, P - 7])
    want = [sum(int(c) * pow(int(x), i, P) for i, c in enumerate(coeffs)) % P for x in pts]
    assert gf.matmul(vals[None], gf.lagrange_at(k, pts))[0].tolist() == want


# ------------------------------------------------------------ soundness bound
def _exact_round2_bits(p: LP.Params) -> float:
    def ratio(a):
        return Fraction(math.comb(a, p.t), math.comb(p.n, p.t))
    return -math.log2(ratio((p.n + p.K) // 2) + ratio(2 * p.K - 2))


def test_soundness_formula_reproduces_the_longfellow_review():
    # Cascudo et al. (2025), Fig. 2: n = 4096, rate 1/7 (K = 585), 140 queries give 115.7 bits, 132 give 108.97
    big_field = 256
    for t, bits in ((140, 115.73), (132, 108.97)):
        p = LP.Params(585 - t, t, 4096, 1)
        assert -LP.round_errors(p, field_bits=big_field)[1] == pytest.approx(bits, abs=0.01)


@pytest.mark.parametrize("cells", [300, 80_000, 2_000_000])
def test_default_parameters_reach_100_bits(cells):
    p = LP.choose(cells, cells)
    assert LP.soundness_bits(p) >= 100
    e1, e2 = LP.round_errors(p)
    assert -e2 == pytest.approx(_exact_round2_bits(p), abs=1e-6)
    assert -e1 >= 100 and p.sigma * (math.log2(P) - math.log2(p.n + 1)) >= 100 - 1e-9
    assert LP.soundness_bits(LP.Params(p.k, p.t // 2, p.n, p.sigma)) < 100     # fewer columns: not enough


def test_fiat_shamir_caps_the_level_at_the_hash_size():
    p = LP.Params(1024, 1000, 8192, 8)
    assert LP.soundness_bits(p) == pytest.approx((256 - math.log2(4.5)) / 2, abs=0.01)


# -------------------------------------------------------------- circuits
@pytest.fixture(scope="module")
def iris():
    c, wit = zk_step_circuit("iris", 8, [16])
    proof = zk.prove(c, wit, system="ligero", rng=np.random.default_rng(0))
    return c, wit, proof


def test_iris_step_proof_verifies(iris):
    c, wit, proof = iris
    assert c.required_bits <= ligero.FIELD_BITS
    assert zk.verify(proof, c, wit.public)
    assert proof.soundness_bits >= 100


@pytest.mark.slow
def test_digits_step_proof_verifies():
    c, wit = zk_step_circuit("digits", 8, [16])
    proof = zk.prove(c, wit, system="ligero")
    assert c.r1cs.n_constraints > 100_000
    assert zk.verify(proof, c, wit.public)


def test_unsatisfied_witness_is_refused_before_proving(iris):
    c, wit, _ = iris
    bad = wit.values.copy()
    bad[-1] += 1
    with pytest.raises(zk.UnsatisfiedConstraint):
        zk.prove(c, bad, system="ligero")


def test_wide_formats_are_refused_with_the_bits_they_need():
    c, wit = zk_step_circuit("iris", 2, [4], cg.fixed(32, 16))
    with pytest.raises(ValueError, match=rf"^ligero: step in fixed\(32,16\) needs a prime above 2\^{c.required_bits} "
                                         r"so that no constraint wraps around, but the Ligero field has 51 bits"):
        zk.prove(c, wit, system="ligero")


def test_a_violated_constraint_gives_a_proof_that_does_not_verify(iris):
    c, wit, _ = iris
    rng = np.random.default_rng(4)
    first_private = 1 + c.r1cs.n_public
    for w in rng.choice(np.arange(first_private, c.r1cs.n_wires), 3, replace=False):
        bad = wit.values.copy()
        bad[w] += int(rng.integers(1, 1000))
        assert not c.check(bad)
        proof = ligero.prove(c, bad, check=False)
        with pytest.raises(ligero.Reject):
            ligero.check(proof, c, wit.public)


def test_changed_public_values_are_rejected(iris):
    c, wit, proof = iris
    rng = np.random.default_rng(5)
    for i in rng.choice(len(wit.public), 10, replace=False):
        pub = list(wit.public)
        pub[i] = (pub[i] + 1) % c.field.p
        assert not zk.verify(proof, c, pub), f"public value {i} changed but the proof verifies"
    # a proof that claims other public values (its header and transcript change with them) is rejected
    forged = protocol.LigeroProof(**{**proof.__dict__, "public": gf.add(proof.public, 1)})
    with pytest.raises(ligero.Reject):
        ligero.check(forged, c, None)


def test_another_circuit_is_rejected(iris):
    c, wit, proof = iris
    other, _ = zk_step_circuit("iris", 8, [12])
    with pytest.raises(ligero.Reject, match=r"^the proof is for another circuit \(digest mismatch\)$"):
        ligero.check(proof, other, None)


def test_every_part_of_a_proof_is_bound(iris):
    c, wit, proof = iris
    rng = np.random.default_rng(6)
    for name in ("u", "q", "h", "columns", "public"):
        for _ in range(3):
            arr = getattr(proof, name).copy()
            flat = arr.reshape(-1)
            flat[rng.integers(flat.size)] = int(rng.integers(0, P))
            assert not zk.verify(protocol.LigeroProof(**{**proof.__dict__, name: arr}), c, None), name
    for name in ("salts", "siblings"):
        items = list(getattr(proof, name))
        j = int(rng.integers(len(items)))
        items[j] = bytes(b ^ 1 for b in items[j])
        assert not zk.verify(protocol.LigeroProof(**{**proof.__dict__, name: items}), c, wit.public), name
    root = bytes(32)
    assert not zk.verify(protocol.LigeroProof(**{**proof.__dict__, "root": root}), c, wit.public)
    assert not zk.verify(protocol.LigeroProof(**{**proof.__dict__, "statement": "another"}), c, wit.public)


# ------------------------------------------------------------- file format
def test_file_roundtrip_and_every_flipped_byte_is_rejected(iris, tmp_path):
    c, wit, proof = iris
    path = tmp_path / "step.proof"
    proof.save(str(path))
    again = zk.Proof.load(str(path))
    assert isinstance(again, zk.LigeroProof) and zk.verify(again, c, wit.public)
    assert_flipped_bytes_rejected(path.read_bytes(), c, wit.public, seed=7)


def test_malformed_files_get_clear_errors(iris, tmp_path):
    from circuitgrad.backends.zk.systems.ligero import proofio
    import hashlib
    _, _, proof = iris
    data = proofio.dumps(proof)

    def seal(body):
        return body + hashlib.sha256(body).digest()

    cases = [
        (b"", r"^proof: too short to be a circuitgrad Ligero proof \(0 bytes\)$"),
        (b"NOTAPROOF" + data[9:], r"^proof: not a circuitgrad Ligero proof \(bad magic"),
        (data[:-1], r"^proof: checksum mismatch: the file is corrupted or was modified$"),
        (seal(data[:8] + b"\x04\x00" + data[10:-32]), r"^proof: proof format version 4 is not supported"),
        (seal(data[:-32 - 5]), r"^proof: truncated in Merkle siblings"),
        (seal(data[:-32] + b"extra"), r"^proof: 5 unexpected bytes after the proof$"),
    ]
    for blob, msg in cases:
        with pytest.raises(zk.FormatError, match=msg):
            ligero.loads(blob)
    head = proof.header()
    import json
    import struct
    for key, value, msg in (("field", "7", r"is over the field '7'"), ("k", 3, r"k=3 must be a power of two"),
                            ("protocol", "x", r"protocol 'x' is not")):
        h = json.dumps({**head, key: value}, sort_keys=True).encode()
        old = struct.unpack("<I", data[10:14])[0]
        blob = seal(data[:10] + struct.pack("<I", len(h)) + h + data[14 + old:-32])
        with pytest.raises(zk.FormatError, match=msg):
            ligero.loads(blob)
    with pytest.raises(zk.FormatError, match=r"no such proof file"):
        ligero.load(str(tmp_path / "missing.proof"))


# ----------------------------------------------------------- zero knowledge
def _square_circuit(m: int):
    """``y_i = x_i²`` with ``y`` public and ``x`` private: ``x`` and ``−x`` prove the same statement."""
    b = Builder(zk.BN254)
    y = b.alloc(m, "y")
    x = b.alloc(m, "x")
    b.constrain([(x, 1)], [(x, 1)], [(y, 1)], "square")
    return b.finish(m, 0, m)


def test_opened_values_do_not_depend_on_the_private_witness():
    """Two witnesses with the same public statement give identically distributed openings.

    The test fixes the opened columns, proves 150 times with each witness and compares the
    distributions (16 bins) of everything the verifier sees about the witness: opened witness-row
    values and the three test polynomials. It also checks the exact reason: on the opened
    columns, the masking coefficients act through an invertible t×t matrix, so any opened
    values are reachable from any witness.
    """
    m = 24
    r1cs = _square_circuit(m)
    pc = prepare(r1cs)
    rng = np.random.default_rng(8)
    x = rng.integers(-100, 100, m)
    w1 = np.concatenate([[1], x * x, x])
    w2 = np.concatenate([[1], x * x, -x])
    assert r1cs.check(w1) and r1cs.check(w2)
    p = LP.Params(k=16, t=6, n=64, sigma=1)
    cols = [1, 7, 20, 33, 50, 63]
    seen = []
    for w in (w1, w2):
        vals = []
        for _ in range(150):
            pr = prover.prove_prepared(pc, w, p, rng=rng, columns=cols)
            vals.append(np.concatenate([pr.columns.reshape(-1), pr.u.reshape(-1), pr.q.reshape(-1),
                                        pr.h.reshape(-1)]))
        seen.append(np.array(vals) * 16 // P)
    h1 = np.bincount(seen[0].reshape(-1), minlength=16)
    h2 = np.bincount(seen[1].reshape(-1), minlength=16)
    chi2 = float((((h1 - h2) ** 2) / np.maximum(h1 + h2, 1)).sum())
    assert chi2 < 45, f"opened values differ in distribution (χ² = {chi2:.1f}, 15 dof)"   # p < 1e-4 under H0
    # exactness: opened value = data part + (η^k − 1)·ρ(η); ρ ↦ (ρ(η_j))_j is a Vandermonde map
    eta = [3 * pow(gf.root_of_unity(p.n), j, P) % P for j in cols]
    M = [[(pow(e, p.k, P) - 1) * pow(e, i, P) % P for i in range(p.t)] for e in eta]
    assert _rank_mod_p(M) == p.t


def _rank_mod_p(rows):
    return len(row_reduce_mod_p(rows, P)[1])


def test_merkle_openings_reject_wrong_siblings():
    leaves = [bytes([i]) * 32 for i in range(16)]
    tree = merkle.Tree(leaves)
    idx = [3, 4, 9]
    sib = tree.open(idx)
    assert merkle.verify_opening(tree.root, 16, idx, [leaves[i] for i in idx], sib)
    assert not merkle.verify_opening(tree.root, 16, idx, [leaves[i] for i in idx], sib[:-1])
    assert not merkle.verify_opening(tree.root, 16, idx, [leaves[i] for i in (3, 4, 8)], sib)
    assert not merkle.verify_opening(tree.root, 16, [3, 3, 9], [leaves[i] for i in idx], sib)


def test_merkle_leaves_and_nodes_are_domain_separated():
    """A 6-row column's leaf input (tag, salt, 6 words) is as long as a node's (tag, two hashes): without the
    tags, the node above leaves 0 and 1 of a 4-leaf tree opened as 'leaf 0 of a 2-leaf tree' whose salt and
    column are those two hashes' bytes; with them, a leaf hash is never a node hash."""
    rng = np.random.default_rng(5)
    cols = rng.integers(0, P, (4, 6))
    salts = [rng.bytes(16) for _ in range(4)]
    hashes = merkle.leaves(cols, salts)
    tree = merkle.Tree(hashes)
    both = hashes[0] + hashes[1]
    fake_salt, fake_column = both[:16], np.frombuffer(both[16:], dtype="<i8").reshape(1, 6)
    assert merkle.leaves(fake_column, [fake_salt])[0] != merkle.node(hashes[0], hashes[1]) == tree.levels[1][0]
    assert not merkle.verify_opening(tree.root, 2, [0], merkle.leaves(fake_column, [fake_salt]), [tree.levels[1][1]])
    assert merkle.verify_opening(tree.root, 4, [0], [hashes[0]], tree.open([0]))
    assert merkle.LEAF_TAG != merkle.NODE_TAG and len(merkle.LEAF_TAG) == len(merkle.NODE_TAG) == 8


def test_dispatch_rejects_unknown_systems_and_needs_the_circuit(iris):
    c, wit, proof = iris
    with pytest.raises(ValueError, match=r"^zk\.prove: unknown proof system 'stark'; choose one of "
                                         r"\['ligero', 'groth16', 'plonk'\]$"):
        zk.prove(c, wit, system="stark")
    with pytest.raises(TypeError, match=r"^zk\.verify: a proof is checked against the circuit the verifier compiled"):
        zk.verify(proof)


# ------------------------------------------------ review regressions (weak parameters, aliasing, header)
def test_weak_parameters_are_refused_even_for_an_honest_proof(iris):
    c, wit, _ = iris
    weak = LP.Params(k=2048, t=20, n=8192, sigma=1)
    assert LP.soundness_bits(weak) < 100
    proof = ligero.prove(c, wit, params=weak)
    with pytest.raises(ligero.Reject, match=r"^the proof's parameters \(k=2048, t=20, n=8192, σ=1\) are not the "
                                            r"ones this circuit and 100 bits give \(k=1024, t=154, n=4096, σ=3\)"):
        ligero.check(proof, c, wit.public)
    with pytest.raises(ligero.Reject, match=r"^the proof's parameters \(k=2048, t=20, n=8192, σ=1\) give "
                                            r"[\d.]+ bits of soundness, below the required 100$"):
        ligero.check(proof, c, wit.public, params=weak)     # parameters a verifier names must reach the target
    assert ligero.verify(proof, c, wit.public, min_bits=0, params=weak)  # the argument itself is complete
    with pytest.raises(ValueError, match=r"exceeds the largest supported codeword"):
        LP.Params(k=1 << 22, t=100, n=1 << 24, sigma=3).validate()
    with pytest.raises(ValueError, match=r"must not outnumber the message values"):
        LP.Params(k=4, t=5, n=32, sigma=1).validate()


def test_public_values_that_alias_modulo_the_ligero_prime_are_refused(iris):
    c, wit, proof = iris
    for shift in (P, -5 * P):
        pub = list(wit.public)
        pub[0] = (pub[0] + shift) % c.field.p                            # another BN254 value, same residue
        with pytest.raises(ligero.Reject, match=r"^public value 0 \(-?\d+\) is outside the range"):
            ligero.check(proof, c, pub)
        assert not zk.verify(proof, c, pub)


def test_header_must_match_the_circuit(iris):
    c, wit, proof = iris
    lying = protocol.LigeroProof(**{**proof.__dict__, "public_outputs": 0})
    with pytest.raises(ligero.Reject, match=rf"^the proof claims 0 public outputs, the circuit has "
                                            rf"{c.r1cs.n_pub_out}$"):
        ligero.check(lying, c, wit.public)
    bad = protocol.LigeroProof(**{**proof.__dict__, "u": proof.u - P})   # same residues, not canonical
    with pytest.raises(ligero.Reject, match=r"^u must hold field elements"):
        ligero.check(bad, c, wit.public)
    assert not zk.verify(protocol.LigeroProof(**{**proof.__dict__, "u": proof.u[:, :3]}), c, wit.public)


@pytest.mark.parametrize("cells, values", [(1, 0), (1 << 14, 0), (1 << 14, 1 << 29)])
def test_streamed_and_blocked_proofs_are_the_kept_one(iris, monkeypatch, cells, values):
    """The prover's passes go over blocks of rows: with the encoded matrix recomputed instead of kept
    (``KEEP_BYTES = 0``), its values recomputed too or kept (``VALUES_BYTES``), and blocks of one row (or of a
    few), the seeded proof is byte for byte the one with the matrix kept and the default blocks, and it verifies."""
    from circuitgrad.backends.zk.systems.ligero import proofio
    c, w, _ = iris
    default = proofio.dumps(ligero.prove(c, w, rng=np.random.default_rng(7)))
    monkeypatch.setattr(prover, "KEEP_BYTES", 0)
    monkeypatch.setattr(prover, "VALUES_BYTES", values)
    monkeypatch.setattr(prover, "BLOCK_CELLS", cells)
    streamed = ligero.prove(c, w, rng=np.random.default_rng(7))
    assert proofio.dumps(streamed) == default
    assert ligero.verify(streamed, c, w.public)


@pytest.mark.parametrize("k", [8, None])
def test_streamed_proof_with_lookups_and_contractions_is_the_kept_one(monkeypatch, k):
    """Both rounds streamed in blocks of a few rows give the bytes of the kept matrix; with k = 8 (weak
    parameters, named to the verifier) each round has several Merkle row blocks of 256 rows."""
    from circuitgrad.backends.zk.systems.ligero import proofio
    c, w = lookup_and_product_step()
    p = None if k is None else LP.Params(k, 8, 8 * k, 1, 1, contraction_sigma=1)
    lay = protocol.layout(prepare(c.r1cs), p or ligero.expected_params(c))
    assert lay.lk.n and lay.cs.n
    if k is not None:
        assert lay.rows > 2 * merkle.ROW_BLOCK and lay.second > merkle.ROW_BLOCK
    kept = ligero.prove(c, w, params=p, rng=np.random.default_rng(5))
    monkeypatch.setattr(prover, "KEEP_BYTES", 0)
    monkeypatch.setattr(prover, "VALUES_BYTES", 0 if k else 1 << 29)
    monkeypatch.setattr(prover, "BLOCK_CELLS", 3 * lay.k * 8)
    streamed = ligero.prove(c, w, params=p, rng=np.random.default_rng(5))
    assert proofio.dumps(streamed) == proofio.dumps(kept)
    assert ligero.check(streamed, c, w.public, params=p, min_bits=0 if k else 100) is None


@pytest.mark.parametrize("budget", [1, 1 << 30])
def test_keep_0_streams_everything_and_the_coefficients_on_z_by_repetition(monkeypatch, budget):
    """``ligero.prove(keep=0)`` keeps neither the encoding nor the rows' values (``prover.plan``); with the linear
    test's coefficients on z computed one repetition at a time (a budget of 1 byte) or all together, the seeded
    proof is the default one's bytes and it verifies."""
    from circuitgrad.backends.zk.systems.ligero import coefficients, proofio
    c, w = lookup_and_product_step()
    lay = protocol.layout(prepare(c.r1cs), ligero.expected_params(c))
    assert prover.plan(lay, ligero.expected_params(c)) == (True, False)
    assert prover.plan(lay, ligero.expected_params(c), keep=0) == (False, False)
    assert prover.plan(lay, ligero.expected_params(c), split=True) == (False, False)
    default = proofio.dumps(ligero.prove(c, w, rng=np.random.default_rng(3)))
    groups = []
    real = coefficients.materialized
    monkeypatch.setattr(coefficients, "DEFERRED_BYTES", budget)
    monkeypatch.setattr(prover, "materialized", lambda reps: ((groups.append(g), (g, r))[1] for g, r in real(reps)))
    streamed = ligero.prove(c, w, rng=np.random.default_rng(3), keep=0)
    assert proofio.dumps(streamed) == default
    assert ligero.verify(streamed, c, w.public)
    sigma = ligero.expected_params(c).sigma
    assert groups == ([[j] for j in range(sigma)] if budget == 1 else [list(range(sigma))])


def test_a_commitment_range_must_start_a_merkle_row_block(iris):
    """The prover's passes cut the commitment at row blocks; a range that does not start one is refused (a split
    across workers would otherwise hash other blocks than one process)."""
    from circuitgrad.backends.zk.systems.ligero.encoding import Encoding
    c, w, _ = iris
    pc = prepare(c.r1cs)
    p = ligero.expected_params(c)
    lay = protocol.layout(pc, p)
    passes = prover.Passes(pc, lay, p, Encoding(pc, gf.reduce(np.asarray(w.values)), lay, p, bytes(32)), False,
                           lambda s: None)
    with pytest.raises(ValueError, match=r"^rows 3… do not start a Merkle row block of the matrix at 0$"):
        passes.digests(3, lay.mw, 0)

