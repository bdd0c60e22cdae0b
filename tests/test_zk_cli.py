"""``circuitgrad zk prove`` / ``zk verify`` on the iris example (a tiny configuration that fits 2^12)."""
from __future__ import annotations

import argparse
import json
import os
import shutil

import numpy as np
import pytest
from conftest import run_cli, snarkjs_or_skip

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _snarkjs():
    snarkjs_or_skip()


_cli = run_cli
OPTS = ["--batch", "1", "--hidden", "2", "--width", "12", "--frac", "6", "--system", "groth16"]


def test_prove_two_chained_steps_then_verify_tamper_and_forge(tmp_path):
    out = str(tmp_path / "proofs")
    res = _cli("zk", "prove", "examples/iris.py", "--steps", "2", *OPTS, "--out", out)
    assert res.returncode == 0, res.stdout + res.stderr
    for phase in ("[compile] done", "[witness 0] done", "[setup+prove 0] done", "[setup+prove 1] done"):
        assert phase in res.stdout
    assert "public statement: step of mlp(1,4-2-3) [program sha256 " in res.stdout
    assert "\n  arithmetic:     fixed(12,6) over bn254\n" in res.stdout
    ok = _cli("zk", "verify", "examples/iris.py", out, *OPTS, "--init-seed", "0")
    assert ok.returncode == 0 and ok.stdout.count(": groth16 OK") == 2 and "all 2 proofs verify" in ok.stdout
    # the verifier may name the verification key it trusts
    vk = os.path.join(str(tmp_path), "vk.json")
    shutil.copy(os.path.join(out, "step_000", "verification_key.json"), vk)
    ok = _cli("zk", "verify", "examples/iris.py", out, *OPTS, "--init-seed", "0", "--vkey", vk)
    assert ok.returncode == 0 and "all 2 proofs verify" in ok.stdout
    # a changed public value in step 1 fails (and breaks the chain)
    tampered = str(tmp_path / "tampered")
    shutil.copytree(out, tampered)
    pub = os.path.join(tampered, "step_001", "public.json")
    values = json.load(open(pub))
    values[-1] = str(int(values[-1]) + 1)
    json.dump(values, open(pub, "w"))
    bad = _cli("zk", "verify", "examples/iris.py", tampered, *OPTS, "--init-seed", "0")
    assert bad.returncode == 1 and "step_001: groth16 INVALID" in bad.stdout and "VERIFICATION FAILED" in bad.stdout
    # a Groth16 proof of another circuit with the same public layout, carrying its own key, is rejected
    from test_zk_snarkjs import forge

    from circuitgrad.backends import zk
    from circuitgrad.backends.zk.cli import _setup
    args = argparse.Namespace(script="examples/iris.py", system="groth16", width=12, frac=6, batch=1, hidden=[2],
                              lr=None)
    c = _setup(args)[2]
    fake = forge(c)
    real = zk.Proof.load(os.path.join(out, "step_000"))
    n_out = c.r1cs.n_pub_out
    ins = [int(v) - zk.BN254.p if int(v) > zk.BN254.p // 2 else int(v) for v in real.public[n_out:]]
    forged = zk.prove(fake, zk.Witness(fake, np.array([1] + [0] * n_out + ins, dtype=np.int64)),
                      system="groth16", log=lambda s: None)
    forged.statement, forged.circuit_digest = c.statement(), c.digest().hex()
    forgery = str(tmp_path / "forgery")
    shutil.copytree(out, forgery)
    shutil.rmtree(os.path.join(forgery, "step_000"))
    shutil.rmtree(os.path.join(forgery, "step_001"))
    forged.save(os.path.join(forgery, "step_000"))
    chain = json.load(open(os.path.join(forgery, "chain.json")))
    chain["steps"] = 1
    json.dump(chain, open(os.path.join(forgery, "chain.json"), "w"))
    bad = _cli("zk", "verify", "examples/iris.py", forgery, *OPTS, "--init-seed", "0")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert ("step_000: groth16 INVALID: the proof's verification key is not the one derived for this circuit"
            in bad.stdout) and "VERIFICATION FAILED" in bad.stdout


def test_too_large_setup_is_refused_before_it_starts(tmp_path):
    res = _cli("zk", "prove", "examples/digits.py", "--out", str(tmp_path / "p"), "--max-local-ptau", "12",
               "--system", "groth16")
    assert res.returncode != 0
    assert "need powers of tau 2^" in res.stderr and "Pass --ptau FILE" in res.stderr
