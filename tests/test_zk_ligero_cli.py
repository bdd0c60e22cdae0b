"""``circuitgrad zk prove --system ligero`` / ``zk verify``: no snarkjs, no setup; the bundle is untrusted."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from conftest import run_cli

from circuitgrad.cli import main

IRIS = ["examples/iris.py", "--batch", "4", "--option", "momentum=0"]     # plain SGD: 131 public values
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("zk") / "proofs")
    res = run_cli("zk", "prove", *IRIS, "--steps", "3", "--out", out)
    assert res.returncode == 0, res.stdout + res.stderr
    return out, res.stdout


@pytest.fixture
def copy(bundle, tmp_path):
    def make() -> str:
        dst = str(tmp_path / "copy")
        shutil.copytree(bundle[0], dst)
        return dst
    return make


def verify(capsys, proofs: str, *extra: str) -> tuple[int, str]:
    """``zk verify`` in-process: (exit code, stdout); a refusal is (its exit status, its one line): 2 for a usage
    error (``main`` returns 2, the line on stderr), 1 for a failure (SystemExit with a message)."""
    os.chdir(ROOT)
    try:
        rc = main(["zk", "verify", *IRIS, proofs, *extra])
    except SystemExit as e:
        return 1, str(e.code)
    out = capsys.readouterr()
    return (2, out.err.rstrip("\n")) if rc == 2 else (rc, out.out)


def test_prove_prints_phases_statement_and_parameter_hashes(bundle):
    out, stdout = bundle
    for phase in ("[compile] done", "[witness 0] done", "[prove 0] done", "[prove 2] done"):
        assert phase in stdout
    lines = stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("public statement: "))
    assert lines[first].startswith("public statement: step of mlp(4,4-16-3) [program sha256 ")
    assert lines[first + 1:first + 6] == ["  loss:           softmax_cross_entropy",
                                          "  optimizer:      sgd(lr=0.05 (raw 13))",
                                          "  arithmetic:     fixed(16,8) over ligero51",
                                          "  public outputs: 131 values: W0[4, 16], b0[16], W1[16, 3], b1[3]",
                                          "  public inputs:  131 values: W0[4, 16], b0[16], W1[16, 3], b1[3]"]
    assert "\n  private:        x[4, 4], y[4, 3]\n  targets y:      one-hot rows\n" in stdout
    chain = json.load(open(os.path.join(out, "chain.json")))
    assert chain["steps"] == 3 and chain["options"]["width"] == 16 and chain["options"]["lr"] == 0.05
    assert f"first parameters sha256 {chain['first_params_sha256']}" in stdout
    assert sorted(os.listdir(out)) == ["chain.json", "final.npz", "step_000.proof", "step_001.proof",
                                       "step_002.proof"]


def test_end_to_end_verify_names_first_and_last_parameters(bundle):
    out, _ = bundle
    ok = run_cli("zk", "verify", *IRIS, out, "--init-seed", "0", "--final", os.path.join(out, "final.npz"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    chain = json.load(open(os.path.join(out, "chain.json")))
    assert ok.stdout.count(": ligero OK\n") == 3 and "all 3 proofs verify" in ok.stdout
    assert f"first parameters sha256 {chain['first_params_sha256']}" in ok.stdout
    assert f"last parameters sha256 {chain['last_params_sha256']}" in ok.stdout
    assert "final.npz: equals the last step's parameters" in ok.stdout


def test_a_script_named_in_the_bundle_is_never_run(copy, capsys, tmp_path):
    broken = copy()
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\nimport sys\nsys.path.insert(0, 'examples')\n"
                    f"from iris import model\n")
    chain = json.load(open(os.path.join(broken, "chain.json")))
    chain["options"]["script"] = str(evil)
    json.dump(chain, open(os.path.join(broken, "chain.json"), "w"))
    rc, out = verify(capsys, broken, "--init-seed", "0")
    assert rc == 0 and "all 3 proofs verify" in out
    assert not marker.exists()


def test_the_first_parameters_are_anchored_to_the_verifiers_checkpoint(bundle, capsys, tmp_path):
    rc, out = verify(capsys, bundle[0], "--init-seed", "1")
    assert rc == 1
    assert "step_000.proof: ligero OK (does not continue from the starting parameters)" in out
    assert "VERIFICATION FAILED" in out
    # the same starting point as a checkpoint file verifies
    from circuitgrad.backends.zk.cli import _setup
    import argparse
    args = argparse.Namespace(script="examples/iris.py", system="ligero", width=None, frac=None, batch=4,
                              hidden=None, lr=None, option=["momentum=0"])
    step = _setup(args)[1]
    np.savez(tmp_path / "init.npz", **step.init_params(seed=0))
    rc, out = verify(capsys, bundle[0], "--init", str(tmp_path / "init.npz"))
    assert rc == 0 and "all 3 proofs verify" in out


@pytest.mark.parametrize("edit, message", [
    (lambda d: os.remove(os.path.join(d, "step_001.proof")),
     "chain.json says 3 steps but step_001.proof is missing"),
    (lambda d: os.rename(os.path.join(d, "step_002.proof"), os.path.join(d, "step_005.proof")),
     "chain.json says 3 steps but step_002.proof is missing"),
    (lambda d: shutil.copy(os.path.join(d, "step_002.proof"), os.path.join(d, "step_003.proof")),
     "unexpected step_003.proof: chain.json says 3 steps, step_000.proof to step_002.proof"),
    (lambda d: os.remove(os.path.join(d, "chain.json")),
     "no chain.json: not a proof bundle written by 'circuitgrad zk prove'"),
    (lambda d: open(os.path.join(d, "chain.json"), "w").write("{\"steps\": 3,"),
     "chain.json: not valid JSON (Expecting property name enclosed in double quotes: line 1 column 13 (char 12))"),
    (lambda d: open(os.path.join(d, "chain.json"), "w").write("[1, 2]"),
     "chain.json: not a circuitgrad proof bundle (format must be 'circuitgrad-zk-bundle')"),
    (lambda d: _edit_chain(d, steps="3"), "chain.json: field 'steps' must be a int, got str"),
    (lambda d: _edit_chain(d, steps=0), "chain.json: steps must be in 1..1000000, got 0"),
    (lambda d: _edit_chain(d, system="groth16"), "holds groth16 proofs, not ligero: verify them with --system groth16"),
    (lambda d: _edit_chain(d, system="stark"), "chain.json: unknown proof system 'stark'"),
    (lambda d: _edit_chain(d, version=2), "chain.json: bundle version 2 is not supported (this is version 1)"),
])
def test_malformed_or_incomplete_bundles_end_with_one_clear_line(copy, capsys, edit, message):
    d = copy()
    edit(d)
    rc, out = verify(capsys, d, "--init-seed", "0")
    assert rc == 1 and message in out and out.startswith("circuitgrad zk: ") and "\n" not in out


def _edit_chain(d: str, **fields) -> None:
    path = os.path.join(d, "chain.json")
    chain = json.load(open(path))
    chain.update(fields)
    json.dump(chain, open(path, "w"))


@pytest.mark.parametrize("args, message, status", [
    ((), "name the parameters the run starts from, which the verifier trusts: --init FILE.npz (a checkpoint) "
         "or --init-seed N (step.init_params(N))", 2),
    (("--init-seed", "0", "--steps", "0"), "--steps must be at least 1, got 0", 2),
    (("--init-seed", "0", "--steps", "2"), "holds 3 steps, you asked to verify 2", 1),
    (("--init", "nothing.npz"), "nothing.npz: no such checkpoint", 2),
])
def test_verifier_options_are_checked(bundle, capsys, args, message, status):
    rc, out = verify(capsys, bundle[0], *args)
    assert rc == status and out.endswith(message)


@pytest.mark.parametrize("where, message", [
    ("missing", "not a proof directory (zk prove --out writes one)"),
    ("file", "a file, not a proof directory: name the directory zk prove --out wrote")])
def test_verify_of_something_that_is_not_a_bundle(capsys, tmp_path, where, message):
    path = str(tmp_path / "nothing") if where == "missing" else str(tmp_path / "x.json")
    if where == "file":
        open(path, "w").write("{}")
    rc, out = verify(capsys, path, "--init-seed", "0")       # both a usage error
    assert rc == 2
    assert out == f"circuitgrad zk: {path}: {message}"


def test_steps_zero_is_refused_by_prove(tmp_path, capsys):
    assert main(["zk", "prove", *IRIS, "--steps", "0", "--out", str(tmp_path / "p")]) == 2
    assert capsys.readouterr().err == "circuitgrad zk: --steps must be at least 1, got 0\n"


def test_moved_corrupted_and_foreign_proofs_fail_by_name(copy, capsys):
    broken = copy()
    # a proof moved to another position is valid on its own but breaks the chain
    shutil.copy(os.path.join(broken, "step_000.proof"), os.path.join(broken, "step_002.proof"))
    rc, out = verify(capsys, broken, "--init-seed", "0")
    assert rc == 1
    assert "step_002.proof: ligero OK (does not continue from the previous step)" in out
    assert "VERIFICATION FAILED" in out
    # a corrupted file is refused with the reason
    path = os.path.join(broken, "step_001.proof")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x10
    open(path, "wb").write(bytes(data))
    rc, out = verify(capsys, broken, "--init-seed", "0")
    assert rc == 1
    assert "step_001.proof: ligero INVALID: " in out and "checksum mismatch: the file is corrupted or was modified" in out


def test_the_verifier_names_the_options_not_the_bundle(bundle, capsys):
    rc, out = verify(capsys, bundle[0], "--init-seed", "0", "--lr", "0.5")
    assert rc == 1
    assert "chain.json names another statement than the one you verify (its options differ: lr=0.05 (yours 0.5))" \
        in out
    assert "step_000.proof: ligero INVALID: the proof is for another circuit (digest mismatch)" in out
    assert "\n  optimizer:      sgd(lr=0.5 (raw 128))\n" in out and "VERIFICATION FAILED" in out


# ------------------------------------------ review regressions: the bundle as hostile input


def test_files_that_are_not_regular_files_are_refused_without_reading(copy, capsys):
    d = copy()
    step1, step2 = os.path.join(d, "step_001.proof"), os.path.join(d, "step_002.proof")
    os.remove(step1)
    os.symlink("/dev/zero", step1)                 # would exhaust memory if read
    os.remove(step2)
    os.mkfifo(step2)                               # would hang if opened for reading
    rc, out = verify(capsys, d, "--init-seed", "0")
    assert rc == 1 and out.endswith("step_001.proof is a symbolic link; a bundle holds its own files")
    os.remove(step1)
    shutil.copy(os.path.join(d, "step_000.proof"), step1)
    rc, out = verify(capsys, d, "--init-seed", "0")
    assert rc == 1 and f"step_002.proof: ligero INVALID: {step2}: not a regular file; a proof file must be one" in out
    assert "last parameters sha256" not in out     # only named when every step verified


def test_a_ligero_proof_is_not_accepted_as_a_groth16_step(bundle, capsys, tmp_path):
    d = str(tmp_path / "g16")
    shutil.copytree(bundle[0], d)
    _edit_chain(d, system="groth16")
    for k in range(3):
        os.rename(os.path.join(d, f"step_00{k}.proof"), os.path.join(d, f"step_00{k}"))
    os.chdir(ROOT)
    # before any proof is read: the verifier has no trusted key (a missing file: a usage error, status 2)
    assert main(["zk", "verify", "examples/iris.py", d, "--batch", "4", "--init-seed", "0", "--system", "groth16",
                 "--vkey", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err == f"circuitgrad zk: --vkey {tmp_path / 'none.json'}: no such file\n"
    from circuitgrad.backends.zk.cli import _check_step
    from circuitgrad.backends.zk import FormatError
    with pytest.raises(FormatError, match=r"^step_000: a groth16 proof is a directory"):
        _check_step(os.path.join(d, "step_000"), "groth16", None, {})


def test_hostile_json_and_names_end_in_one_escaped_line(copy, capsys):
    d = copy()
    open(os.path.join(d, "chain.json"), "w").write("[" * 100000 + "]" * 100000)
    rc, out = verify(capsys, d, "--init-seed", "0")
    assert rc == 1 and "chain.json: not valid JSON (" in out and "\n" not in out
    open(os.path.join(d, "chain.json"), "w").write('{"format": "circuitgrad-zk-bundle", "steps": 1' + "0" * 5000
                                                  + "}")
    rc, out = verify(capsys, d, "--init-seed", "0")
    assert rc == 1 and "chain.json: not valid JSON (Exceeds the limit" in out


def test_control_characters_from_the_bundle_are_escaped(copy, capsys):
    d = copy()
    evil = "step_\r\x1b[2Kall 3 proofs verify\x1b[8m"
    open(os.path.join(d, evil), "w").write("x")
    rc, out = verify(capsys, d, "--init-seed", "0")
    assert rc == 1 and "\x1b" not in out and "\r" not in out
    assert "unexpected step_\\r\\x1b[2Kall 3 proofs verify\\x1b[8m: chain.json says 3 steps" in out


def test_checkpoints_are_bounded_and_validated(bundle, capsys, tmp_path):
    import zipfile
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("W0.npy", b"\0" * (50 << 20))         # 50 MiB of zeros, a few KiB compressed
    rc, out = verify(capsys, bundle[0], "--init", str(bomb))
    assert rc == 1 and out.endswith("bomb.npz: member 'W0.npy' is larger than its shape needs")
    npy = tmp_path / "plain.npz"
    np.save(open(npy, "wb"), np.zeros(3))
    rc, out = verify(capsys, bundle[0], "--init", str(npy))
    assert rc == 1 and "plain.npz: not a NumPy .npz checkpoint (" in out


@pytest.mark.parametrize("args, message", [
    (("--lr", "0"), "--lr must be a finite number > 0, got 0.0"),
    (("--lr", "nan"), "--lr must be a finite number > 0, got nan"),
    (("--batch", "0"), "--batch must be at least 1, got 0"),
    (("--hidden", "0"), "--hidden must be at least 1, got 0"),
])
def test_the_verifiers_own_options_are_checked_not_replaced(bundle, capsys, args, message):
    rc, out = verify(capsys, bundle[0], "--init-seed", "0", *args)
    assert rc == 2 and out == f"circuitgrad zk: {message}"
