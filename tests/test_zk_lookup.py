"""Range checks as lookups (``range_checks="lookup"``) and the logUp argument of the native prover.

Gadgets: every primitive's lookup circuit accepts the interpreter's computation, and moving any
wire breaks a constraint or a lookup. Limbs: exactly ``[0, 2^n)`` fits ``n`` bits. Prover: honest
proofs verify; cheating provers (a value outside the table with made-up multiplicities, a looked-up
value that is not ``L·z``, inverses shuffled to keep their sum) are rejected; so are tampered proofs
and files. Exporters: ``.r1cs`` and snarkjs refuse lookups with a clear error.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.circuits import gadgets as G
from circuitgrad.backends.zk.systems import ligero
from circuitgrad.backends.zk.systems.ligero import coefficients, lookup, params as LP, protocol
from circuitgrad.backends.zk.systems.ligero.proofio import MAX_LOOKUP_TABLE
from circuitgrad.backends.zk.circuits.r1cs import Builder
from circuitgrad.tracing import apply
from circuitgrad.schedule import retype
from conftest import assert_flipped_bytes_rejected, CASES, VOCAB, vocab_inputs as _inputs

Q = cg.fixed(16, 8)
P = ligero.gf.P


def _circuit(op):
    d = cg.trace(lambda *a: apply(op, *a), op.source, name=op.name)
    prog = retype(cg.schedule(d), Q)
    return prog, zk.compile_program(prog, Q, zk.LIGERO51)


def _breaks(r, values, wire: int, delta: int) -> bool:
    mutated = values.copy()
    mutated[wire] = (mutated[wire] + delta) % r.field.p
    rows, lrows = r.rows_of_wire(wire), r.lookup_rows_of_wire(wire)
    return len(r.failing(mutated, rows)) > 0 or len(r.failing_lookups(mutated, lrows)) > 0


# ------------------------------------------------------------------ gadgets
@pytest.mark.parametrize("op", CASES + VOCAB, ids=lambda op: op.name + ("(causal)" if getattr(op, "causal", 0) else ""))
def test_lookup_gadgets_accept_the_interpreter_and_pin_every_wire(op, rng):
    prog, c = _circuit(op)
    assert c.range_checks == "lookup" and (c.r1cs.n_lookups > 0) == bool(prog.inputs)
    xs = _inputs(op, rng)
    w = c.witness_raw(xs)
    c.assert_satisfied(w)
    assert all(np.array_equal(w.values[o], x) for o, x in zip(c.output_wires, cg.run_fixed(prog, xs)))
    r = c.r1cs
    assert len(r.unconstrained_wires()) == 0
    base = w.values.astype(object)
    inputs = set(np.concatenate([x.reshape(-1) for x in c.input_wires]).tolist()) if c.input_wires else set()
    for wire in range(1, r.n_wires):
        # an input is free within its range (its lowest limb is implicit, so ±1 is another valid input);
        # every other wire is a function of the inputs and may not move at all
        for delta in ((int(rng.integers(1 << 20, 1 << 62)),) if wire in inputs else
                      (1, r.field.p - 1, int(rng.integers(2, 1 << 62)))):
            assert _breaks(r, base, wire, delta), f"{op.name}: wire {r.wire_name(wire)} is not pinned"


@pytest.mark.parametrize("nbits", [3, 7, 8, 9, 16, 17, 24])
def test_fits_accepts_exactly_the_range(nbits):
    """``v = x + c`` fits ``nbits`` bits: every edge inside holds, ``−1`` and ``2^nbits`` break a lookup."""
    b = Builder(zk.LIGERO51, "lookup")
    x = b.alloc(1)
    G.fits(b, [(x, 1)], 5, nbits, "test")
    r = b.finish(0, 0, 1)
    assert r.n_constraints == 0 and r.n_lookups == -(-nbits // 8)      # one per limb, the top one in its own table
    assert sorted(r.lookup_bits.tolist()) == sorted([8] * (nbits // 8) + ([nbits % 8] if nbits % 8 else []))
    for v, ok in ((0, True), (1, True), ((1 << nbits) - 1, True), (1 << (nbits - 1), True), (-1, False),
                  (1 << nbits, False), ((1 << nbits) + 255, False)):
        W = np.zeros(r.n_wires, dtype=np.int64)
        W[0], W[1] = 1, v - 5
        for wires, fn in b.fills:
            if wires.size:
                W[wires] = ((v >> (8 * np.arange(1, wires.size + 1))) & 255)      # honest limbs of v
        if not ok:                                       # the best a cheat can do: limbs of v mod 2^nbits
            for wires, fn in b.fills:
                if wires.size:
                    W[wires] = (((v % (1 << nbits)) >> (8 * np.arange(1, wires.size + 1))) & 255)
        assert r.check(W) == ok, (nbits, v)


def test_an_out_of_range_witness_is_refused_naming_the_gadget():
    b = Builder(zk.LIGERO51, "lookup")
    b.context = "Mul#3"
    x = b.alloc(2)
    G.fits(b, [(x, 1)], 0, 12, "mul.range")
    r = b.finish(0, 0, 2)
    W = np.array([1, 7, 1 << 12, 0, 16])                  # 4096 = 0 + 256·16: the top limb has 4 bits
    with pytest.raises(zk.UnsatisfiedConstraint) as e:
        r.assert_satisfied(W)
    # lookups: the top limbs of both values (table [0, 2^4)), then their low limbs ([0, 2^8))
    assert r.lookup_bits.tolist() == [4, 4, 8, 8]
    assert str(e.value) == ("lookup 1 of 4 is outside its table [0, 16) (1 failing in all); it comes from "
                            "Mul#3:mul.range.top")
    with pytest.raises(cg.FixedPointOverflow) as e:
        W = np.zeros(r.n_wires, dtype=np.int64)
        W[0], W[1], W[2] = 1, 7, 1 << 12
        for wires, fn in b.fills:
            W[wires] = fn(W)
    assert str(e.value) == "Mul#3: value out of range for mul.range: [7, 4096] does not fit"


def test_bits_and_lookups_compute_the_same_witness_outputs(rng):
    step = cg.compile_model(nn.mlp(4, [4, 8, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    x, y = rng.uniform(-1, 1, (4, 4)), rng.integers(0, 3, 4)
    outs = [zk.compile(step, range_checks=rc).witness(step.init_params(0), x, y).outputs() for rc in ("bits", "lookup")]
    assert outs[0].keys() == outs[1].keys() and all(np.array_equal(outs[0][k], outs[1][k]) for k in outs[0])


def test_the_default_follows_the_field():
    step = cg.compile_model(nn.mlp(2, [2, 3, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    assert zk.compile(step).range_checks == "bits"
    assert zk.compile(step, field=zk.LIGERO51).range_checks == "lookup"
    assert zk.compile(step, field=zk.LIGERO51, range_checks="bits").range_checks == "bits"
    with pytest.raises(ValueError, match=r"^range_checks must be one of \['bits', 'lookup'\], got 'limbs'$"):
        zk.compile(step, range_checks="limbs")
    c = zk.compile(step, field=zk.LIGERO51, contractions="mac")
    tables = ", ".join(f"[0, 2^{b})" for b in c.r1cs.lookup_tables)
    assert c.r1cs.table_bits == 8 and c.r1cs.lookup_tables[-1] == 8           # a small circuit: limbs of 8 bits
    assert c.statement().endswith(f"{c.r1cs.n_constraints} constraints, {c.r1cs.n_wires} wires, "
                                  f"{c.r1cs.n_lookups} lookups into {tables} (limbs of 8 bits)")
    assert c.digest() != zk.compile(step, field=zk.LIGERO51, range_checks="bits").digest()


def test_snarkjs_and_r1cs_files_refuse_lookups(tmp_path):
    from circuitgrad.backends.zk.circuits import formats
    from circuitgrad.backends.zk.systems import snarkjs
    step = cg.compile_model(nn.mlp(2, [2, 3, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    c = zk.compile(step, field=zk.LIGERO51)             # lookups are named first, then contractions
    with pytest.raises(ValueError, match=r"^snarkjs groth16: this circuit proves its ranges with \d+ lookups"):
        snarkjs.setup(c, "groth16")
    with pytest.raises(ValueError, match=r"^write_r1cs: this system proves its ranges with \d+ lookups, which the "
                                         r"\.r1cs format cannot express"):
        formats.write_r1cs(str(tmp_path / "x.r1cs"), c.r1cs)


# ------------------------------------------------------------------- prover
@pytest.fixture(scope="module")
def proved():
    step = cg.compile_model(nn.mlp(4, [4, 8, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    c = zk.compile(step, field=zk.LIGERO51, contractions="mac")      # the lookup round alone (format version 2)
    rng = np.random.default_rng(3)
    w = c.witness(step.init_params(0), rng.uniform(-1, 1, (4, 4)), rng.integers(0, 3, 4))
    return c, w, zk.prove(c, w, rng=np.random.default_rng(0))


def test_soundness_of_the_lookup_round():
    n = 226_403                                            # a GPT step's lookups
    sl = LP.lookup_sigma(n)
    assert LP.lookup_error(n, sl) <= -101 < LP.lookup_error(n, sl - 1)
    assert LP.lookup_error(n, sl) == pytest.approx(sl * (math.log2(n + 256) - math.log2(P)))
    p = LP.choose(400_000, 260_000, lookups=n)
    assert p.lookup_sigma == sl and LP.soundness_bits(p, lookups=n) >= 100
    assert LP.soundness_bits(LP.Params(p.k, p.t, p.n, p.sigma, 0), lookups=n) == 0
    assert LP.soundness_bits(LP.Params(p.k, p.t, p.n, p.sigma, 1), lookups=n) < 40


def test_honest_lookup_proof_verifies_and_roundtrips(proved, tmp_path):
    c, w, proof = proved
    assert proof.lookups == c.r1cs.n_lookups and proof.params.lookup_sigma >= 1
    zk.check(proof, c, w.public)
    path = tmp_path / "step.proof"
    proof.save(str(path))
    assert path.read_bytes()[8:10] == b"\x02\x00"                 # format version 2
    again = zk.Proof.load(str(path))
    assert again.lookups == proof.lookups and zk.verify(again, c, w.public)
    assert_flipped_bytes_rejected(path.read_bytes(), c, w.public, seed=11)


def test_tampered_lookup_commitment_is_rejected(proved):
    c, w, proof = proved
    rng = np.random.default_rng(5)
    cases = {"root2": bytes(32), "columns2": proof.columns2.copy(), "salts2": list(proof.salts2),
             "siblings2": list(proof.siblings2)}
    cases["columns2"][int(rng.integers(proof.columns2.shape[0])), 0] ^= 1
    cases["salts2"][0] = bytes(16)
    cases["siblings2"][0] = bytes(32)
    for name, value in cases.items():
        with pytest.raises(zk.Reject):
            zk.check(protocol.LigeroProof(**{**proof.__dict__, name: value}), c, w.public)
    for name in ("columns2", "salts2", "siblings2"):        # the challenges still hold: only the opening fails
        with pytest.raises(zk.Reject, match=r"^opened columns do not match the lookup commitment$"):
            zk.check(protocol.LigeroProof(**{**proof.__dict__, name: cases[name]}), c, w.public)
    malformed = [("root2", bytes(31), r"^the lookup commitment's Merkle root must be 32 bytes$"),
                 ("salts2", tuple(proof.salts2), r"^the lookup commitment's salts and siblings must be lists of bytes$"),
                 ("siblings2", [b"x"] * 3, r"^every Merkle sibling must be 32 bytes$")]
    for name, value, msg in malformed:
        with pytest.raises(zk.Reject, match=msg):
            zk.check(protocol.LigeroProof(**{**proof.__dict__, name: value}), c, w.public)
    with pytest.raises(zk.Reject, match=r"^the proof claims 3 lookups, the circuit has \d+$"):
        zk.check(protocol.LigeroProof(**{**proof.__dict__, "lookups": 3}), c, w.public)
    weak = protocol.LigeroProof(**{**proof.__dict__, "params": LP.Params(proof.params.k, proof.params.t,
                                                                         proof.params.n, proof.params.sigma, 1)})
    with pytest.raises(zk.Reject, match=r"σL=1\) are not the ones this circuit and 100 bits give \(.*σL=3\): a "
                                        r"verifier's work must not be the prover's choice$"):
        zk.check(weak, c, w.public)
    with pytest.raises(zk.Reject, match=r"σL=1\) give [\d.]+ bits of soundness, below the required 100$"):
        ligero.check(weak, c, w.public, params=weak.params)


def _cheat(c, w, monkeypatch, **methods):
    """A proof made by a prover whose rows are computed by other methods of :class:`.encoding.Encoding` (each
    ``name=f`` replaces ``Encoding.name`` by ``f(real, self, *args)``; no satisfiability check)."""
    from circuitgrad.backends.zk.systems.ligero.encoding import Encoding
    for name, f in methods.items():
        real = getattr(Encoding, name)
        monkeypatch.setattr(Encoding, name, lambda self, *a, f=f, real=real: f(real, self, *a))
    return zk.prove(c, w, check=False, rng=np.random.default_rng(1))


def test_a_value_outside_the_table_cannot_be_proved(proved, monkeypatch):
    """The witness puts 256 into a limb; the cheat claims it as 255 in the multiplicities."""
    c, w, _ = proved
    r = c.r1cs
    limb_rows = [i for i, t in enumerate(r.lookup_tags) if t.endswith("range.limbs")]
    row = int(r.lookup_block_rows[limb_rows[0]])
    assert r.lookup_bits[row] == 8
    at = r.L.ptr[row] + int(np.flatnonzero(r.L.coeffs[r.L.ptr[row]:r.L.ptr[row + 1]] == 1)[0])
    wire = int(r.L.wires[at])                                     # the checked value itself (coefficient 1)
    bad = w.values.copy()
    bad[wire] += 256                                              # moves that lookup by 256
    assert not c.check(bad)
    with pytest.raises(ValueError, match=r"^ligero: lookup \d+ \(.*\) is outside its table \[0, 256\)"):
        zk.prove(c, bad, check=False)

    def multiplicities(real, enc):                              # counts the 256 as a 255
        pc, sh = enc.pc, enc.lay.lk
        v = pc.L.apply(enc.z)
        bits = pc.r1cs.lookup_bits
        start = np.cumsum([0] + [1 << b for b in sh.tables])[:-1]
        return np.bincount(start[sh.table_of(bits)] + np.minimum(v, (1 << bits) - 1), minlength=sh.size)
    proof = _cheat(c, bad, monkeypatch, _multiplicities=multiplicities)
    with pytest.raises(zk.Reject, match=r"^linear test 0"):
        zk.check(proof, c)


def test_a_looked_up_value_must_be_the_circuits(proved, monkeypatch):
    c, w, _ = proved
    pc = ligero.prepare(c.r1cs)
    v = pc.L.apply(ligero.gf.reduce(np.asarray(w.values)))
    j = int(np.flatnonzero(v < 255)[0])

    def values(real, enc, lo, hi):                          # v[j] + 1: still in the table, no longer L·z
        rows = real(enc, lo, hi).copy()
        if lo * enc.p.k <= j < hi * enc.p.k:
            rows.reshape(-1)[j - lo * enc.p.k] += 1
        return rows

    def multiplicities(real, enc):
        m = real(enc).copy()
        m[v[j]] -= 1
        m[v[j] + 1] += 1
        return m
    with pytest.raises(zk.Reject, match=r"^linear test 0"):
        zk.check(_cheat(c, w, monkeypatch, lookup_values=values, _multiplicities=multiplicities), c)


def test_inverses_must_be_inverses(proved, monkeypatch):
    """Shifting one inverse up and another down keeps every sum: only the quadratic rows catch it."""
    c, w, _ = proved

    def inverses(real, enc, s, lo, hi):
        rows = real(enc, s, lo, hi).copy()
        if s == 0 and lo == 0:
            rows[0, 0] = ligero.gf.add(rows[0, 0], 1)
            rows[0, 1] = ligero.gf.sub(rows[0, 1], 1)
        return rows
    with pytest.raises(zk.Reject, match=r"^quadratic test failed"):
        zk.check(_cheat(c, w, monkeypatch, _inverses=inverses), c)


def test_a_version_2_header_must_name_its_lookups(proved):
    import hashlib
    import json
    import struct
    from circuitgrad.backends.zk.systems.ligero import proofio
    _, _, proof = proved
    data = proofio.dumps(proof)
    h = json.dumps({**proof.header(), "lookups": 0}, sort_keys=True).encode()
    old = struct.unpack("<I", data[10:14])[0]
    body = data[:10] + struct.pack("<I", len(h)) + h + data[14 + old:-32]
    with pytest.raises(zk.FormatError, match=r"^proof: a proof with lookups must have lookups and lookup_sigma ≥ 1$"):
        ligero.loads(body + hashlib.sha256(body).digest())
    for table in (1, MAX_LOOKUP_TABLE + 1):              # below one 1-bit table, above every table allowed
        h = json.dumps({**proof.header(), "lookup_table": table}, sort_keys=True).encode()
        body = data[:10] + struct.pack("<I", len(h)) + h + data[14 + old:-32]
        with pytest.raises(zk.FormatError, match=r"^proof: lookup_table must count 2 to 276824064 table entries$"):
            ligero.loads(body + hashlib.sha256(body).digest())


def test_a_challenge_in_the_table_is_refused(proved, monkeypatch):
    """At α = j the constraint g_j·(α − j) = m_j leaves g_j free (a forgery: 300 would pass as a table
    value), so the verifier refuses challenges in [0, 256), and the honest prover cannot use them."""
    from circuitgrad.backends.zk.systems.ligero.transcript import Transcript
    c, w, _ = proved
    real = Transcript.field

    def field(self, label, count):
        out = real(self, label, count)
        return np.full(count, 7, dtype=np.int64) if label == "lookup.alpha" else out
    monkeypatch.setattr(Transcript, "field", field)
    with pytest.raises(lookup.AlphaCollision, match=r"^ligero: a lookup challenge equals a looked-up value"):
        zk.prove(c, w)
    def start_second(real, enc, alphas, draws):                   # round 2 all zeros: no inverse computed
        enc.alphas, enc.held = alphas, np.zeros((enc.lay.second - enc.lay.lk.sl * enc.lay.lk.mv, enc.p.k),
                                                dtype=np.int64)
    forged = _cheat(c, w, monkeypatch, start_second=start_second,
                    _inverses=lambda real, enc, s, lo, hi: np.zeros((hi - lo, enc.p.k), dtype=np.int64))
    with pytest.raises(zk.Reject, match=r"^a lookup challenge fell in a table \[0, 256\); an honest prover "
                                        r"proves again$"):
        zk.check(forged, c, w.public)


def test_a_lookup_circuit_needs_lookup_challenges_whatever_the_bits_asked(proved):
    c, w, proof = proved
    p = proof.params
    none = protocol.LigeroProof(**{**proof.__dict__, "params": LP.Params(p.k, p.t, p.n, p.sigma, 0)})
    with pytest.raises(zk.Reject, match=r"^the circuit has \d+ lookups, but the proof draws no lookup challenge$"):
        ligero.check(none, c, w.public, min_bits=0)


def test_a_bits_builder_refuses_lookups():
    b = Builder(zk.LIGERO51, "bits")
    x = b.alloc(1)
    with pytest.raises(ValueError, match=r"^Builder\.lookup: this builder checks ranges with bits; lookups need "
                                         r"Builder\(field, range_checks='lookup'\)$"):
        b.lookup([(x, 1)], "test")


def test_lookup_challenges_are_refused_for_a_circuit_without_lookups():
    step = cg.compile_model(nn.mlp(4, [4, 8, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    bits = zk.compile(step, field=zk.LIGERO51, range_checks="bits")
    rng = np.random.default_rng(3)
    wb = bits.witness(step.init_params(0), rng.uniform(-1, 1, (4, 4)), rng.integers(0, 3, 4))
    honest = zk.prove(bits, wb, rng=np.random.default_rng(0))
    p = honest.params
    extra = protocol.LigeroProof(**{**honest.__dict__, "params": LP.Params(p.k, p.t, p.n, p.sigma, 3)})
    with pytest.raises(zk.Reject, match=r"^the proof has lookup challenges, but the circuit has no lookups$"):
        zk.check(extra, bits, wb.public)


def test_parameters_must_be_integers():
    with pytest.raises(ValueError, match=r"^Ligero parameter lookup_sigma=None must be an integer$"):
        LP.Params(512, 162, 2048, 3, None).validate()
    with pytest.raises(ValueError, match=r"^Ligero parameter k=True must be an integer$"):
        LP.Params(True, 162, 2048, 3).validate()


def test_a_version_2_file_needs_room_for_its_lookup_rows(proved):
    import hashlib
    import struct
    from circuitgrad.backends.zk.systems.ligero import proofio
    _, _, proof = proved
    data = proofio.dumps(proof)
    tail = 32 + 4 + proof.columns2.size * 8 + 16 * len(proof.salts2) + 4 + 32 * len(proof.siblings2)
    at = len(data) - 32 - tail + 32                         # the lookup row count, after root2
    body = data[:at] + struct.pack("<I", 1) + data[at + 4:-32]
    with pytest.raises(zk.FormatError, match=r"^proof: 1 second-round rows cannot hold 3 lookup challenges' "
                                             r"inverses and table terms and 0 contraction draws$"):
        ligero.loads(body + hashlib.sha256(body).digest())


def test_each_tables_lookups_are_contiguous_and_constant_rows_cost_nothing(proved):
    """The builder orders lookups by table width, so the logUp sums' coefficient rows are constant but at the
    seams; the verifier's row values agree with the full product for constant and other rows alike."""
    c, _, _ = proved
    bits = c.r1cs.lookup_bits
    assert len(set(bits.tolist())) > 1 and np.all(np.diff(bits) >= 0)
    rng = np.random.default_rng(0)
    R = rng.integers(0, ligero.gf.P, (6, 64))
    R[1], R[4] = 7, ligero.gf.P - 1                     # constant rows
    lag = ligero.gf.lagrange_at(64, rng.integers(1, ligero.gf.P, 5))
    assert np.array_equal(ligero.gf.sum_mod(lag, axis=0), np.ones(5, dtype=np.int64))   # Σ_h L_h(η) = 1
    assert np.array_equal(coefficients.Rows([R], 64).values_at(lag), ligero.gf.matmul(R, lag))


def test_a_small_circuit_with_a_wide_table_verifies():
    """The verifier's bound on k counts the table's entries: three wires checked in a 2^16 table need
    k = 2048, more than the wires and constraints alone would allow (an independent review's finding)."""
    b = Builder(zk.LIGERO51, "lookup", "mac", table_bits=16)
    out, x = b.alloc(1, "out"), b.alloc(3, "x")
    G.fits(b, [(x, 1)], 0, 16, "t")
    b.constrain([(x[:1], 1)], [(0, 1)], [(out, 1)], "output")
    r = b.finish(1, 0, 3)
    c = zk.Circuit(r, None, None, "t", [], [], [], [], [], [], 0.0, None, cg.fixed(16, 8), 40)
    W = np.zeros(r.n_wires, dtype=np.int64)
    W[0], W[x], W[out] = 1, [5, 60000, 7], 5
    assert r.check(W) and r.lookup_tables == (16,)
    proof = ligero.prove(c, W, check=False, rng=np.random.default_rng(0))
    assert proof.params.k > 1024
    ligero.check(proof, c, ligero.gf.reduce(W[1:2]))


# ------------------------------------------------------------------- tables wider than 2^16
def _wide(values, bits: int = 18):
    """Values checked to fit ``bits`` bits with limbs of ``bits``: one lookup each into ``[0, 2^bits)``, no limb
    wire, no constraint; the first value is the public output."""
    b = Builder(zk.LIGERO51, "lookup", "mac", table_bits=bits)
    out, x = b.alloc(1, "out"), b.alloc(len(values), "x")
    G.fits(b, [(x, 1)], 0, bits, "wide")
    b.constrain([(x[:1], 1)], [(0, 1)], [(out, 1)], "output")
    r = b.finish(1, 0, len(values))
    c = zk.Circuit(r, None, None, "wide", [], [], [], [], [], [], 0.0, None, cg.fixed(16, 8), 40)
    W = np.zeros(r.n_wires, dtype=np.int64)
    W[0], W[x], W[out] = 1, values, values[0]
    return c, W


def test_a_circuit_with_a_2_18_table_proves_verifies_and_roundtrips():
    from circuitgrad.backends.zk.systems.ligero import proofio
    c, W = _wide([5, (1 << 18) - 1, 0, 123_456])
    r = c.r1cs
    assert r.lookup_tables == (18,) and r.n_lookups == 4 and r.n_constraints == 1 and r.lookup_table_size == 1 << 18
    assert r.check(W)
    proof = ligero.prove(c, W, check=False, rng=np.random.default_rng(0))
    # σL = ⌈101 / (log2 p − log2(4 + 2^18))⌉ = ⌈101 / 33.0⌉ = 4
    assert proof.lookup_table == 1 << 18 and proof.params.lookup_sigma == 4
    ligero.check(proof, c, ligero.gf.reduce(W[1:2]))
    again = ligero.loads(proofio.dumps(proof))             # the file format takes tables of up to 22 bits
    assert again.lookup_table == 1 << 18
    ligero.check(again, c, ligero.gf.reduce(W[1:2]))


def _clamped_multiplicities(monkeypatch, top: int) -> None:
    """A cheating prover (one table ``[0, top)``): every looked-up value at or above ``top`` is counted as
    ``top − 1`` in the multiplicities ``m``, and ``v`` stays ``L·z``."""
    def clamped(pc, z, size):
        return np.bincount(np.minimum(pc.L.apply(z), top - 1), minlength=size).astype(np.int64)
    from circuitgrad.backends.zk.systems.ligero.encoding import Encoding
    monkeypatch.setattr(Encoding, "_multiplicities", lambda self: clamped(self.pc, self.z, self.lay.lk.size))


def test_a_value_just_outside_a_2_18_table_cannot_be_proved(monkeypatch):
    """The witness puts 2^18 into the table [0, 2^18); the cheat claims it as 2^18 − 1 in the multiplicities."""
    c, W = _wide([5, 1 << 18, 7])
    assert not c.r1cs.check(W) and c.r1cs.failing_lookups(W).tolist() == [1]
    with pytest.raises(ValueError, match=r"^ligero: lookup 1 \(circuit:wide\.limbs\) is outside its table "
                                         r"\[0, 262144\): the witness does not satisfy the circuit$"):
        ligero.prove(c, W, check=False)
    _clamped_multiplicities(monkeypatch, 1 << 18)
    proof = ligero.prove(c, W, check=False, rng=np.random.default_rng(1))
    with pytest.raises(zk.Reject, match=r"^linear test 0"):
        ligero.check(proof, c, ligero.gf.reduce(W[1:2]))
    _, honest = _wide([5, (1 << 18) - 1, 7])                # the cheat's own multiplicities, with an honest v
    ligero.check(ligero.prove(c, honest, check=False, rng=np.random.default_rng(1)), c, ligero.gf.reduce(W[1:2]))


def test_a_challenge_in_a_2_18_table_is_refused(monkeypatch):
    """At α = j the constraint g_j·(α − j) = m_j leaves g_j free, so the verifier refuses a challenge below the
    widest table's 2^18, and the honest prover cannot use one."""
    from circuitgrad.backends.zk.systems.ligero.transcript import Transcript
    c, W = _wide([5, 60_000, 7])
    proof = ligero.prove(c, W, check=False, rng=np.random.default_rng(0))
    real = Transcript.field

    def field(self, label, count):
        out = real(self, label, count)
        return np.full(count, (1 << 18) - 3, dtype=np.int64) if label == "lookup.alpha" else out
    monkeypatch.setattr(Transcript, "field", field)
    with pytest.raises(zk.Reject, match=r"^a lookup challenge fell in a table \[0, 262144\); an honest prover "
                                        r"proves again$"):
        ligero.check(proof, c, ligero.gf.reduce(W[1:2]))
    with pytest.raises(lookup.AlphaCollision, match=r"^ligero: a lookup challenge equals a looked-up value"):
        ligero.prove(c, W, check=False)


@pytest.mark.parametrize("nbits,widths", [(20, [20]), (22, [22]), (23, [1, 22]), (45, [1, 22, 22])])
def test_fits_with_22_bit_limbs(nbits, widths):
    """Limbs of 22 bits: ⌈n/22⌉ lookups, the top one in the table of the bits that remain; ``2^n − 1`` fits and
    ``2^n`` does not."""
    b = Builder(zk.LIGERO51, "lookup", table_bits=22)
    x = b.alloc(1)
    G.fits(b, [(x, 1)], 0, nbits, "t")
    r = b.finish(0, 0, 1)
    assert r.n_constraints == 0 and sorted(r.lookup_bits.tolist()) == widths
    for v, ok in (((1 << nbits) - 1, True), (1 << nbits, False)):
        W = np.zeros(r.n_wires, dtype=np.int64)
        W[0], W[1] = 1, v
        for wires, _ in b.fills:
            if wires.size:                               # honest limbs of v mod 2^n (the best a cheat can do)
                W[wires] = ((v % (1 << nbits)) >> (22 * np.arange(1, wires.size + 1))) & ((1 << 22) - 1)
        assert r.check(W) == ok, (nbits, v)


def test_the_provers_check_finds_what_the_python_integer_check_finds():
    """``ligero.prove`` checks the witness in its own field, a block of rows at a time
    (``Prepared.failing``): the same failing constraints and lookups as ``R1CS.failing`` and
    ``failing_lookups`` in Python integers, and the same message."""
    from circuitgrad.backends.zk.systems.ligero.circuitdata import prepare
    op = next(op for op in CASES if type(op).__name__ == "Mul")
    _, c = _circuit(op)
    rng = np.random.default_rng(3)
    W = c.witness_raw(_inputs(op, rng)).values
    r = c.r1cs
    for _ in range(4):
        bad = np.array(W, dtype=np.int64).copy()
        hit = rng.choice(np.arange(1, r.n_wires), 3, replace=False)
        bad[hit] += rng.integers(1, 1 << 20, 3)
        rows, lookups = prepare(r).failing(ligero.gf.reduce(bad), block=7)
        assert rows.tolist() == r.failing(bad).tolist() and lookups.tolist() == r.failing_lookups(bad).tolist()
        assert len(rows) + len(lookups) > 0
        with pytest.raises(zk.UnsatisfiedConstraint) as want:
            r.assert_satisfied(bad)
        with pytest.raises(zk.UnsatisfiedConstraint) as got:
            ligero.prove(c, bad)
        assert str(got.value) == str(want.value)
