"""End-to-end Groth16 and PLONK proofs of small training steps through snarkjs.

Both circuits fit the 2^12 powers of tau (generated once, cached): the Groth16
step is a 2-4-2 MLP at batch 2 in fixed(16, 8) (3959 constraints); the PLONK
step is a 2-2-2 MLP at batch 1 in fixed(12, 6) (2386 PLONK gates; the 2-4-2
step needs 7230 gates, i.e. a 2^13 ceremony that takes twice as long to prepare).
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import snarkjs_or_skip

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.systems import snarkjs as sj
from circuitgrad.backends.zk.circuits.r1cs import Builder

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _snarkjs():
    snarkjs_or_skip()

CASES = {
    "groth16": (2, [2, 4, 2], cg.fixed(16, 8)),
    "plonk": (1, [2, 2, 2], cg.fixed(12, 6)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def proved(request):
    system = request.param
    B, sizes, dt = CASES[system]
    step = cg.compile_model(nn.mlp(B, sizes), loss=nn.mse, optimizer=nn.sgd(0.25), dtype=dt)
    c = zk.compile(step)
    rng = np.random.default_rng(0)
    params = step.init_params(seed=0)
    w = c.witness(params, rng.normal(size=(B, sizes[0])), rng.normal(size=(B, sizes[-1])) * 0.5)
    proof = zk.prove(c, w, system=system, log=lambda s: None)
    return system, c, w, proof


def test_proof_verifies_and_states_the_public_values(proved):
    system, c, w, proof = proved
    assert proof.system == system
    assert zk.verify(proof, c, w.public)
    assert proof.public == [str(v) for v in w.public]
    assert proof.statement == c.statement() and proof.circuit_digest == c.digest().hex()


def test_changing_any_public_value_breaks_verification(proved):
    system, c, w, proof = proved
    for i in range(len(proof.public)):
        bad = dataclasses.replace(proof, public=list(proof.public))
        bad.public[i] = str((int(bad.public[i]) + 1) % zk.BN254.p)
        assert not zk.verify(bad, c), f"public value {i} changed but the proof still verifies"


def test_aliased_public_values_are_rejected(proved):
    system, c, w, proof = proved
    aliased = list(w.public)
    aliased[0] += zk.BN254.p
    with pytest.raises(zk.Reject, match=r"^public value 0 \(\d+\) is not a canonical element of bn254"):
        zk.check(proof, c, aliased)
    bad = dataclasses.replace(proof, public=[str(int(proof.public[0]) + zk.BN254.p)] + proof.public[1:])
    with pytest.raises(zk.Reject, match=r"public\.json\[0\]: '\d+' is not a canonical decimal number below"):
        zk.check(bad, c)


def test_changing_the_proof_breaks_verification(proved):
    system, c, w, proof = proved
    forged = json.loads(json.dumps(proof.proof))
    key = "pi_a" if system == "groth16" else "A"
    forged[key][0] = str((int(forged[key][0]) + 1))
    assert not zk.verify(dataclasses.replace(proof, proof=forged), c)


def test_proof_files_roundtrip_and_malformed_files(proved, tmp_path):
    system, c, w, proof = proved
    proof.save(str(tmp_path))
    again = zk.Proof.load(str(tmp_path))
    assert again.public == proof.public and again.system == system and zk.verify(again, c, w.public)
    (tmp_path / "public.json").write_text("[1, 2")
    with pytest.raises(zk.FormatError, match=r"public\.json: not valid JSON"):
        zk.Proof.load(str(tmp_path))
    (tmp_path / "public.json").write_text('["12", "x"]')
    with pytest.raises(zk.FormatError, match=r"public\.json\[1\]: 'x' is not a canonical decimal number below"):
        zk.Proof.load(str(tmp_path))
    (tmp_path / "public.json").write_text('["012"]')
    with pytest.raises(zk.FormatError, match=r"public\.json\[0\]: '012' is not a canonical decimal number"):
        zk.Proof.load(str(tmp_path))
    (tmp_path / "public.json").write_text(json.dumps(proof.public))
    (tmp_path / "proof.json").write_text(json.dumps({**proof.proof, "protocol": "fflonk"}))
    with pytest.raises(zk.FormatError, match=rf"proof\.json must be a {system} proof over bn128"):
        zk.Proof.load(str(tmp_path))
    (tmp_path / "proof.json").unlink()
    with pytest.raises(zk.FormatError, match=r"missing proof\.json"):
        zk.Proof.load(str(tmp_path))


def forge(c):
    """The red team's attack on exported files: a trivial circuit (``v·1 = v`` rows) with ``c``'s public layout,
    proved with its own Groth16 setup, claiming ``c``'s statement, the real inputs and outputs of the forger's
    choice."""
    r = c.r1cs
    b = Builder(zk.BN254)
    pub = b.alloc((r.n_public,), "public")
    b.constrain([(pub, 1)], [(0, 1)], [(pub, 1)], "forged")
    fake = dataclasses.replace(c, r1cs=b.finish(r.n_pub_out, r.n_pub_in, 0), fills=[])
    return fake


def test_a_forged_groth16_proof_of_another_circuit_is_rejected(proved):
    system, c, w, proof = proved
    if system != "groth16":
        pytest.skip("the forgery is a Groth16 proof")
    fake = forge(c)
    values = np.concatenate([[1], np.full(c.r1cs.n_pub_out, 7), w.values[1 + c.r1cs.n_pub_out:1 + c.r1cs.n_public]])
    fw = zk.Witness(fake, values.astype(np.int64))
    forged = zk.prove(fake, fw, system="groth16", log=lambda s: None)
    assert sj.verify(forged, fake)                 # a valid proof ... of the trivial circuit
    forged.statement = c.statement()               # claiming the real statement, as a forger edits statement.json
    forged.circuit_digest = c.digest().hex()
    assert forged.public[c.r1cs.n_pub_out:] == proof.public[c.r1cs.n_pub_out:]    # from the real parameters
    assert not zk.verify(forged, c)
    with pytest.raises(zk.Reject, match=r"^the proof's verification key is not the one derived for this circuit"):
        zk.check(forged, c)
    # with the real key swapped in, the pairing check itself fails
    assert not zk.verify(dataclasses.replace(forged, verification_key=proof.verification_key), c)


def test_verification_keys_come_from_the_verifier(proved, tmp_path):
    system, c, w, proof = proved
    vk = zk.verification_key(c, system)
    assert vk == proof.verification_key
    path = tmp_path / "vk.json"
    path.write_text(json.dumps(vk))
    assert zk.verify(proof, c, w.public, vkey=str(path))
    wrong = dict(vk, nPublic=vk["nPublic"] + 1)
    with pytest.raises(zk.FormatError, match=r"^the verification key has \d+ public values, the circuit \d+: it is "
                                             r"another circuit's key$"):
        zk.verify(proof, c, vkey=wrong)


def test_plonk_setup_is_deterministic(proved, tmp_path):
    """What lets a PLONK verifier derive the key itself: the same circuit and ptau give the same key."""
    system, c, w, proof = proved
    if system != "plonk":
        pytest.skip("PLONK only")
    keys = zk.setup(c, "plonk", log=lambda s: None)
    again = tmp_path / "again.zkey"
    sj._run(["plonk", "setup", sj._r1cs_file(c, str(tmp_path))[0], keys.ptau, str(again)], "plonk setup")
    sj._run(["zkey", "export", "verificationkey", str(again), str(tmp_path / "vk.json")], "export")
    assert json.load(open(tmp_path / "vk.json")) == keys.verification_key == proof.verification_key


def test_groth16_verification_without_a_trusted_setup_says_what_to_pass():
    step = cg.compile_model(nn.mlp(1, [1, 1]), loss=nn.mse, optimizer=nn.sgd(0.25), dtype=cg.fixed(8, 4))
    c = zk.compile(step)
    with pytest.raises(zk.ToolMissing, match=r"^no Groth16 setup of this circuit on this machine: pass the "
                                             r"verification key of a setup you trust"):
        zk.verification_key(c, "groth16")
