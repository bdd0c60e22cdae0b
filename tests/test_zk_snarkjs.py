"""End-to-end Groth16 and PLONK proofs of small training steps through snarkjs.

Both circuits fit the 2^12 powers of tau (generated once, cached): the Groth16
step is a 2-4-2 MLP at batch 2 in fixed(16, 8) (3959 constraints); the PLONK
step is a 2-2-2 MLP at batch 1 in fixed(12, 6) (2386 PLONK gates; the 2-4-2
step needs 7230 gates, i.e. a 2^13 ceremony that takes twice as long to prepare).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import snarkjs_or_skip

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk

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
    assert zk.verify(proof)
    assert proof.public == [str(v) for v in w.public]
    assert proof.statement == c.statement()


def test_changing_any_public_value_breaks_verification(proved):
    system, c, w, proof = proved
    for i in range(len(proof.public)):
        bad = zk.Proof(proof.system, proof.proof, list(proof.public), proof.verification_key)
        bad.public[i] = str((int(bad.public[i]) + 1) % zk.BN254.p)
        assert not zk.verify(bad), f"public value {i} changed but the proof still verifies"


def test_changing_the_proof_breaks_verification(proved):
    system, c, w, proof = proved
    forged = json.loads(json.dumps(proof.proof))
    key = "pi_a" if system == "groth16" else "A"
    forged[key][0] = str((int(forged[key][0]) + 1))
    assert not zk.verify(zk.Proof(proof.system, forged, proof.public, proof.verification_key))


def test_proof_files_roundtrip_and_malformed_files(proved, tmp_path):
    system, c, w, proof = proved
    proof.save(str(tmp_path))
    again = zk.Proof.load(str(tmp_path))
    assert again.public == proof.public and again.system == system and zk.verify(again)
    (tmp_path / "public.json").write_text("[1, 2")
    with pytest.raises(ValueError, match=r"public\.json: not valid JSON"):
        zk.Proof.load(str(tmp_path))
    (tmp_path / "public.json").write_text('["12", "x"]')
    with pytest.raises(ValueError, match=r"public\.json: expected a list of decimal strings"):
        zk.Proof.load(str(tmp_path))
    (tmp_path / "public.json").write_text(json.dumps(proof.public))
    (tmp_path / "proof.json").unlink()
    with pytest.raises(ValueError, match=r"missing proof\.json"):
        zk.Proof.load(str(tmp_path))
