"""``circuitgrad zk prove`` / ``zk verify`` on the iris example (a tiny configuration that fits 2^12)."""
from __future__ import annotations

import json
import os

import pytest
from conftest import run_cli, snarkjs_or_skip

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _snarkjs():
    snarkjs_or_skip()


_cli = run_cli


def test_prove_two_chained_steps_then_verify_and_tamper(tmp_path):
    out = str(tmp_path / "proofs")
    res = _cli("zk", "prove", "examples/iris.py", "--steps", "2", "--batch", "1", "--hidden", "2",
               "--width", "12", "--frac", "6", "--out", out, "--system", "groth16")
    assert res.returncode == 0, res.stdout + res.stderr
    for phase in ("[compile] done", "[witness 0] done", "[setup+prove 0] done", "[setup+prove 1] done"):
        assert phase in res.stdout
    assert "public statement: step of mlp(1,4-2-3) in fixed(12,6) over bn254: public outputs" in res.stdout
    ok = _cli("zk", "verify", out)
    assert ok.returncode == 0 and ok.stdout.count(": groth16 OK") == 2 and "all proofs verify" in ok.stdout
    # a changed public value in step 1 fails (and breaks the chain)
    pub = os.path.join(out, "step_001", "public.json")
    values = json.load(open(pub))
    values[-1] = str(int(values[-1]) + 1)
    json.dump(values, open(pub, "w"))
    bad = _cli("zk", "verify", out)
    assert bad.returncode == 1 and "step_001: groth16 INVALID" in bad.stdout and "VERIFICATION FAILED" in bad.stdout


def test_too_large_setup_is_refused_before_it_starts(tmp_path):
    res = _cli("zk", "prove", "examples/digits.py", "--out", str(tmp_path / "p"), "--max-local-ptau", "12",
               "--system", "groth16")
    assert res.returncode != 0
    assert "need powers of tau 2^" in res.stderr and "Pass --ptau FILE" in res.stderr
