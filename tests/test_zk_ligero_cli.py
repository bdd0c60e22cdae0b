"""``circuitgrad zk prove --system ligero`` / ``zk verify``: no snarkjs, no setup."""
from __future__ import annotations

import json
import os
import shutil

from conftest import run_cli

_cli = run_cli


def test_prove_chained_steps_verify_and_tamper(tmp_path):
    out = str(tmp_path / "proofs")
    res = _cli("zk", "prove", "examples/iris.py", "--system", "ligero", "--steps", "3", "--batch", "4",
               "--out", out)
    assert res.returncode == 0, res.stdout + res.stderr
    for phase in ("[compile] done", "[witness 0] done", "[prove 0] done", "[prove 2] done"):
        assert phase in res.stdout
    assert "public statement: step of mlp(4,4-16-3) in fixed(16,8) over ligero51: public outputs" in res.stdout
    assert json.load(open(os.path.join(out, "chain.json")))["options"]["width"] == 16
    ok = _cli("zk", "verify", out)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.count(": ligero OK") == 3 and "all proofs verify" in ok.stdout
    # a proof moved to another position is valid on its own but breaks the chain
    broken = str(tmp_path / "broken")
    shutil.copytree(out, broken)
    shutil.copy(os.path.join(out, "step_000.proof"), os.path.join(broken, "step_002.proof"))
    bad = _cli("zk", "verify", broken)
    assert bad.returncode == 1
    assert "step_002.proof: ligero OK (does not continue the previous step)" in bad.stdout
    assert "VERIFICATION FAILED" in bad.stdout
    # a corrupted file is refused with the reason
    path = os.path.join(broken, "step_001.proof")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x10
    open(path, "wb").write(bytes(data))
    bad = _cli("zk", "verify", broken)
    assert bad.returncode != 0
    assert "step_001.proof: checksum mismatch: the file is corrupted or was modified" in bad.stderr
    # verifying against another circuit (other options) fails
    chain = json.load(open(os.path.join(out, "chain.json")))
    chain["options"]["hidden"] = [12]
    json.dump(chain, open(os.path.join(out, "chain.json"), "w"))
    other = _cli("zk", "verify", out)
    assert other.returncode == 1
    assert "the proof is for another circuit (digest mismatch)" in other.stdout
