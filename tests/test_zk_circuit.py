"""The iris training step as a circuit: bit-exact witness, soundness under mutation,
lint, circom file formats accepted by snarkjs, clear errors on bad files."""
from __future__ import annotations

import importlib
import math
import os
import subprocess
import time

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.circuits import formats
from conftest import snarkjs_or_skip

B = 8


@pytest.fixture(scope="module")
def iris():
    step = cg.compile_model(nn.mlp(B, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1),
                            dtype=cg.fixed(32, 16))
    c = zk.compile(step, dtype=cg.fixed(32, 16), field=zk.BN254)
    rng = np.random.default_rng(5)
    params = step.init_params(seed=0)
    x, y = rng.normal(size=(B, 4)), rng.integers(0, 3, size=B)
    return step, c, params, x, y, c.witness(params, x, y)


def test_witness_is_bit_exact_with_the_interpreter(iris):
    step, c, params, x, y, w = iris
    assert c.check(w)
    want = step.step(params, x, y)
    got = w.outputs()
    assert list(got) == list(want)
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_public_statement(iris):
    step, c, params, x, y, w = iris
    n = sum(v.size for v in params.values())
    assert c.r1cs.n_pub_out == n and c.r1cs.n_pub_in == n
    assert c.r1cs.n_prv_in == x.size + B * 3
    p = c.field.p
    new = np.concatenate([v.reshape(-1) for v in step.step(params, x, y).values()])
    old = np.concatenate([v.reshape(-1) for v in params.values()])
    assert w.public == [int(v) % p for v in np.concatenate([new, old])]
    s = c.statement()
    assert s.startswith(f"step of mlp(8,4-16-3) [program sha256 {c.statement_data()['program_sha256'][:16]}], "
                        f"loss softmax_cross_entropy, optimizer sgd(lr=0.1 (raw 6554)) in fixed(32,16) over bn254: "
                        f"public outputs (131 values)")
    assert "private: x[8, 4], y[8, 3] (targets y: one-hot rows)" in s


def test_lint_no_unconstrained_wire(iris):
    assert len(iris[1].r1cs.unconstrained_wires()) == 0


def test_1000_random_private_mutations_are_rejected(iris):
    step, c, params, x, y, w = iris
    r = c.r1cs
    rng = np.random.default_rng(11)
    first_private = 1 + r.n_public
    wires = rng.integers(first_private, r.n_wires, size=1000)
    base = w.values.astype(object)
    p = r.field.p
    import random
    pick = random.Random(11)
    for wire in wires:
        m = base.copy()
        m[wire] = (m[wire] + pick.randrange(1, p)) % p
        assert len(r.failing(m, r.rows_of_wire(int(wire)))) > 0, r.wire_name(int(wire))


def test_witness_generation_speed_is_recorded(iris):
    """``Witness.seconds`` is the generation's own time: positive, within the call's wall time, and the witness
    is the same one."""
    step, c, params, x, y, w = iris
    t0 = time.perf_counter()
    again = c.witness(params, x, y)
    outer = time.perf_counter() - t0
    assert 0 < again.seconds <= outer and np.array_equal(again.values, w.values)


def test_snarkjs_accepts_exported_iris_files(iris, tmp_path):
    exe = snarkjs_or_skip()
    step, c, params, x, y, w = iris
    paths = c.export(str(tmp_path), w)
    info = subprocess.run([exe, "r1cs", "info", paths["r1cs"]], capture_output=True, text=True, check=True).stdout
    assert f"# of Constraints: {c.r1cs.n_constraints}" in info
    assert f"# of Wires: {c.r1cs.n_wires}" in info
    assert f"# of Public Inputs: {c.r1cs.n_pub_in}" in info and f"# of Outputs: {c.r1cs.n_pub_out}" in info
    chk = subprocess.run([exe, "wtns", "check", paths["r1cs"], paths["wtns"]], capture_output=True, text=True)
    assert chk.returncode == 0 and "WITNESS IS CORRECT" in chk.stdout
    bad = w.values.copy()
    bad[-1] += 1
    formats.write_wtns(os.path.join(tmp_path, "bad.wtns"), bad, c.field)
    chk = subprocess.run([exe, "wtns", "check", paths["r1cs"], os.path.join(tmp_path, "bad.wtns")],
                         capture_output=True, text=True)
    assert "WITNESS IS CORRECT" not in chk.stdout


def test_files_roundtrip_and_corruption_is_reported(iris, tmp_path):
    step, c, params, x, y, w = iris
    paths = c.export(str(tmp_path), w)
    h = formats.read_r1cs_header(paths["r1cs"])
    assert (h["n_wires"], h["n_constraints"], h["prime"]) == (c.r1cs.n_wires, c.r1cs.n_constraints, c.field.p)
    vals = formats.read_wtns(paths["wtns"], c.field)
    assert vals == [int(v) % c.field.p for v in w.values]
    sym = open(paths["sym"]).read().splitlines()
    assert sym[0] == "1,1,0,main.out.W0[0]" and len(sym) == c.r1cs.n_wires - 1
    data = open(paths["r1cs"], "rb").read()
    cut = os.path.join(tmp_path, "cut.r1cs")
    open(cut, "wb").write(data[: len(data) // 2])
    with pytest.raises(zk.FormatError, match=r"^cut\.r1cs: truncated: section 2 claims \d+ bytes, \d+ remain$"):
        formats.read_r1cs_header(cut)
    junk = os.path.join(tmp_path, "junk.wtns")
    open(junk, "wb").write(b"nope" + bytes(20))
    with pytest.raises(zk.FormatError, match=r"^junk\.wtns: not a wtns file \(bad magic or too short\)$"):
        formats.read_wtns(junk)
    wt = open(paths["wtns"], "rb").read()
    short = os.path.join(tmp_path, "short.wtns")
    open(short, "wb").write(wt[:-5])
    with pytest.raises(zk.FormatError, match=r"^short\.wtns: truncated"):
        formats.read_wtns(short)
    other = os.path.join(tmp_path, "other.wtns")
    formats.write_wtns(other, w.values, zk.field(2**255 - 19, "ed25519-base"))
    with pytest.raises(zk.FormatError, match=r"^other\.wtns: witness is over a different field"):
        formats.read_wtns(other, c.field)


def test_field_too_small_is_rejected(iris):
    step = iris[0]
    with pytest.raises(ValueError, match=r"^zk\.compile: field F_2147483647 \(31 bits\) is too small for "
                                         r"fixed\(32,16\)"):
        zk.compile(step, field=zk.field(2**31 - 1))


def test_float_model_is_compiled_in_the_requested_fixed_format():
    step = cg.compile_model(nn.mlp(2, [2, 3, 2]), loss=nn.mse, optimizer=nn.sgd(0.25))
    c = zk.compile(step, dtype=cg.fixed(16, 8), function="predict")
    assert c.dtype == cg.fixed(16, 8)
    w = c.witness({k: v for k, v in step.init_params(0).items()}, np.ones((2, 2)))
    assert c.check(w)


def test_missing_node_is_a_clear_error(tmp_path, monkeypatch):
    from circuitgrad.backends.zk.systems import snarkjs as sj
    monkeypatch.setenv("CIRCUITGRAD_CACHE", str(tmp_path))
    monkeypatch.delenv("CIRCUITGRAD_SNARKJS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(sj.ToolMissing) as e:
        sj.snarkjs(log=lambda s: None)
    assert str(e.value) == ("snarkjs needs Node.js and npm, which are not on PATH: install them (for example "
                            "'apt-get install nodejs npm', or from nodejs.org) and retry")


@pytest.mark.parametrize("f, factors", [
    (zk.BN254, {2: 28, 3: 2, 13: 1, 29: 1, 983: 1, 11003: 1, 237073: 1, 405928799: 1, 1670836401704629: 1,
                13818364434197438864469338081: 1}),            # p − 1 of the BN254 scalar field, as published
    (zk.LIGERO51, {2: 33, 262139: 1})])
def test_a_fields_generator_generates_its_multiplicative_group(f, factors):
    """g is a generator of F_p^× iff g^((p−1)/q) ≠ 1 for every prime q dividing p − 1."""
    galois = pytest.importorskip("galois")
    assert math.prod(q ** e for q, e in factors.items()) == f.p - 1
    assert all(galois.is_prime(q) for q in factors)
    assert all(pow(f.generator, (f.p - 1) // q, f.p) != 1 for q in factors)
    assert pow(4, (f.p - 1) // 2, f.p) == 1                   # the test can fail: a square generates no more


def test_galois_field_builds_without_searching(monkeypatch):
    """galois.GF(p) of a 254-bit prime factors p − 1 and searches a primitive element (minutes) unless given
    one and told not to verify: the field passes its generator (checked above)."""
    galois = pytest.importorskip("galois")
    field = importlib.import_module("circuitgrad.backends.zk.circuits.field")
    calls, build = [], galois.GF
    monkeypatch.setattr(galois, "GF", lambda *a, **kw: calls.append((a, kw)) or build(*a, **kw))
    field._galois.cache_clear()
    GF = zk.BN254.galois()
    assert calls == [((zk.BN254.p,), {"primitive_element": zk.BN254.generator, "verify": False})]
    a = GF([3, 5])
    assert int((a * a)[1]) == 25 and int((-a)[0]) == zk.BN254.p - 3


def test_a_verifiers_circuit_has_no_witness_program_and_checks_the_same_proofs():
    step = cg.compile_model(nn.mlp(4, [4, 8, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=cg.fixed(16, 8))
    rng = np.random.default_rng(0)
    full = zk.compile(step, field=zk.LIGERO51)
    lean = zk.compile(step, field=zk.LIGERO51, witness=False)
    assert full.fills and lean.fills is None
    assert lean.digest() == full.digest() and lean.statement() == full.statement()
    w = full.witness(step.init_params(0), rng.uniform(-1, 1, (4, 4)), rng.integers(0, 3, 4))
    proof = zk.prove(full, w, rng=np.random.default_rng(0))
    assert zk.verify(proof, lean, w.public)
    with pytest.raises(ValueError, match=r"^zk: this circuit was compiled without its witness program \(zk\.compile\("
                                         r"\.\.\., witness=False\), as a verifier does\): it checks proofs but computes "
                                         r"no witness$"):
        lean.witness(step.init_params(0), np.zeros((4, 4)), np.zeros(4, dtype=np.int64))
    full.release_witness_program()                      # the prover's circuit after its last witness
    assert full.fills is None and zk.verify(zk.prove(full, w, rng=np.random.default_rng(1)), lean, w.public)
    with pytest.raises(ValueError, match=r"^zk: this circuit was compiled without its witness program"):
        full.witness(step.init_params(0), np.zeros((4, 4)), np.zeros(4, dtype=np.int64))
