"""What ``circuitgrad zk`` and the ZK API say when something is missing or misnamed: a missing extra (Dask,
galois), a directory of the other kind than the command line says, a soundness mismatch, a retired protocol;
and the statement as people read it."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from conftest import main_in_process, zk_step_circuit

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.systems import ligero
from circuitgrad.extras import MissingExtra
from circuitgrad.backends.zk.systems.ligero import proofio
from circuitgrad.backends.zk.circuits.statement import block, describe

TINY = ["examples/iris.py", "--batch", "2", "--hidden", "4"]


def _verify(d: str, *args: str) -> list[str]:
    """``zk verify`` of the directory ``d`` with the tiny model's options (the directory before ``--hidden``,
    whose values would take it)."""
    return ["zk", "verify", TINY[0], d, *TINY[1:], *args]
DASK = "needs Dask: pip install 'circuitgrad[zk]'"


_main = main_in_process     # (exit status, stdout, stderr)


@pytest.fixture
def no_dask(monkeypatch):
    """An install without the [zk] extra's Dask: importing distributed fails."""
    monkeypatch.setitem(sys.modules, "distributed", None)


# ------------------------------------------------------------------ missing extras
@pytest.mark.parametrize("private", [["--private"], []])
@pytest.mark.parametrize("flags, asked", [(["--workers", "2"], "--workers 2"),
                                          (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler tcp://127.0.0.1:1")])
def test_cli_workers_without_dask_is_one_line_naming_the_extra(no_dask, capsys, tmp_path, flags, asked, private):
    """A private run's steps, or one step's rows, on Dask without Dask: one line, before any work."""
    out = tmp_path / "run"
    rc, stdout, err = _main(capsys, "zk", "prove", *TINY, *private, *flags, "--out", str(out))
    command = "zk prove --private" if private else "zk prove"
    assert (rc, stdout, err) == (1, "", f"circuitgrad zk: {command} {asked} {DASK}\n")
    assert not out.exists()                          # refused before any work


@pytest.mark.parametrize("cmd", ["prove", "verify"])
def test_cli_any_missing_module_of_an_extra_is_one_line(capsys, tmp_path, monkeypatch, cmd):
    from circuitgrad.backends.zk import cli

    def missing(*_, **__):
        raise ModuleNotFoundError("No module named 'galois'", name="galois")
    monkeypatch.setattr(cli, "_setup", missing)
    d = _dir(tmp_path, "chain.json")
    args = ["zk", "prove", *TINY, "--out", str(tmp_path / "p")] if cmd == "prove" else \
        _verify(d, "--init-seed", "0")
    monkeypatch.setattr(cli.B, "read", lambda *_: None)          # verify: compiles after reading the bundle
    rc, _, err = _main(capsys, *args)
    assert (rc, err) == (1, "circuitgrad zk: No module named 'galois': pip install 'circuitgrad[zk]'\n")


@pytest.mark.slow
def test_cli_private_prove_without_dask_proves_here(no_dask, capsys, tmp_path):
    out = str(tmp_path / "run")
    rc, stdout, err = _main(capsys, "zk", "prove", *TINY, "--private", "--out", out)
    assert rc == 0, stdout + err
    assert ("[prove 1 steps here (Dask is not installed: pip install 'circuitgrad[zk]' to prove on a local "
            "cluster)] done in ") in stdout
    assert sorted(os.listdir(out)) == ["run.json", "step_000.proof"]
    c0 = next(line.split()[-1] for line in stdout.splitlines() if line.startswith("starting commitment c0 "))
    rc, stdout, err = _main(capsys, *_verify(out, "--private", "--c0", c0))
    assert rc == 0 and "all 1 proofs verify and chain" in stdout, stdout + err


@pytest.fixture(scope="module")
def private():
    fx = cg.fixed(16, 8)
    step = cg.compile_model(nn.mlp(2, [3, 2, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=fx)
    rng = np.random.default_rng(0)
    x, y = np.round(rng.uniform(-2, 2, (6, 3)) * 256) / 256, rng.integers(0, 2, 6)
    return step, zk.commit_dataset(step, x, y), [(x[:2], y[:2]), (x[2:4], y[2:4])]


def test_api_prove_run_on_a_cluster_without_dask_names_the_extra(no_dask, private):
    step, data, batches = private
    for cluster in (4, "tcp://127.0.0.1:1"):
        with pytest.raises(MissingExtra) as e:
            zk.prove_run(step, step.init_params(seed=0), batches, dataset=data, cluster=cluster, progress=False)
        assert str(e.value) == f"proving on a Dask cluster (cluster={cluster!r}) {DASK}"
        assert isinstance(e.value, ImportError)


@pytest.mark.slow
def test_api_prove_run_by_default_proves_here_without_dask(no_dask, private, monkeypatch):
    step, data, batches = private
    monkeypatch.setattr(os, "cpu_count", lambda: 4)      # with Dask: a local cluster of 2 workers, one per step
    run = zk.prove_run(step, step.init_params(seed=0), batches, dataset=data, progress=False,
                       rng=np.random.default_rng(1))
    assert run.steps == 2 and zk.verify_run(run, step, c0=run.commitments[0], d=data.commitment)


def test_galois_missing_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "galois", None)
    with pytest.raises(MissingExtra) as e:
        zk.field(10007, "f10007").galois()
    assert str(e.value) == "field arithmetic on arrays (Field.galois) needs galois: pip install 'circuitgrad[zk]'"


# ------------------------------------------------------------------ the directory zk verify names
def _dir(tmp_path, *files: str) -> str:
    d = tmp_path / "proofs"
    d.mkdir()
    for f in files:
        (d / f).write_text("{}")
    return str(d)


@pytest.mark.parametrize("args, message", [
    (("--init-seed", "0"), "{d}: holds a private run (run.json, written by zk prove --private): verify it with "
                           "--private --c0 E1,E2,E3,E4 (the starting commitment you trust)"),
    (("--c0", "1,2,3,4"), "{d}: holds a private run (run.json, written by zk prove --private): verify it with "
                          "--private --c0 E1,E2,E3,E4 (the starting commitment you trust)"),
])
def test_a_private_run_verified_without_private_names_the_flags(capsys, tmp_path, args, message):
    d = _dir(tmp_path, "run.json", "step_000.proof")
    rc, stdout, err = _main(capsys, *_verify(d, *args))
    assert (rc, stdout, err) == (2, "", f"circuitgrad zk: {message.format(d=d)}\n")


def test_a_bundle_verified_as_a_private_run_names_the_flags(capsys, tmp_path):
    d = _dir(tmp_path, "chain.json", "step_000.proof")
    rc, stdout, err = _main(capsys, *_verify(d, "--private", "--c0", "1,2,3,4"))
    assert (rc, stdout, err) == (2, "", f"circuitgrad zk: {d}: holds proofs of public steps (chain.json), not a "
                                        f"private run: verify it without --private, with --init FILE.npz or "
                                        f"--init-seed N\n")


@pytest.mark.parametrize("args, message", [
    (("--init-seed", "0", "--c0", "1,2,3,4"), "--c0 checks a private run: add --private"),
    (("--init-seed", "0", "--data-rows", "3"), "--data-rows checks a private run: add --private"),
])
def test_private_flags_on_a_bundle_are_usage_errors(capsys, tmp_path, args, message):
    d = _dir(tmp_path, "chain.json")
    assert _main(capsys, *_verify(d, *args)) == (2, "", f"circuitgrad zk: {message}\n")


def test_public_flags_on_a_private_run_are_usage_errors(capsys, tmp_path):
    d = _dir(tmp_path, "run.json")
    assert _main(capsys, *_verify(d, "--private", "--c0", "1,2,3,4", "--init-seed", "0")) == (
        2, "", "circuitgrad zk: --init-seed names parameters of a public run; a --private run starts from the "
               "commitment --c0 names\n")


@pytest.mark.parametrize("private", [[], ["--private", "--c0", "1,2,3,4"]], ids=["bundle", "private"])
def test_a_file_where_the_proof_directory_goes_is_a_usage_error(capsys, tmp_path, private):
    path = str(tmp_path / "x.json")
    open(path, "w").write("{}")
    seed = [] if private else ["--init-seed", "0"]
    assert _main(capsys, *_verify(path, *private, *seed)) == (
        2, "", f"circuitgrad zk: {path}: a file, not a proof directory: name the directory zk prove --out wrote\n")


@pytest.mark.parametrize("flag", ["--init", "--final"])
def test_a_directory_named_as_a_checkpoint_is_a_usage_error(capsys, tmp_path, flag):
    d = _dir(tmp_path, "chain.json")
    given = ["--init-seed", "0"] if flag == "--final" else []
    message = f"circuitgrad zk: {tmp_path}: a directory, not a checkpoint (an .npz file of raw parameters)\n"
    assert _main(capsys, *_verify(d, flag, str(tmp_path), *given)) == (2, "", message)
    if flag == "--init":                             # and before zk prove compiles anything
        out = tmp_path / "out"
        assert _main(capsys, "zk", "prove", *TINY, "--init", str(tmp_path), "--out", str(out)) == (2, "", message)
        assert not out.exists()


# ------------------------------------------------------------------ soundness mismatch, retired protocols
@pytest.fixture(scope="module")
def small():
    c, wit = zk_step_circuit("iris", 1, [2], field=zk.LIGERO51)
    return c, wit, zk.prove(c, wit, soundness="classic", rng=np.random.default_rng(0))


def test_loading_a_classic_proof_for_a_longfellow_verifier_names_the_mismatch(small, tmp_path):
    c, wit, proof = small
    path = str(tmp_path / "step.proof")
    proof.save(path)
    message = (f"{path}: the proof claims the 'classic' soundness bound, but the verifier requires 'longfellow': "
               f"verify with soundness='classic' (zk verify --soundness classic) if that bound is enough for you, "
               f"or prove with soundness='longfellow'")
    with pytest.raises(zk.FormatError) as e:
        zk.SYSTEMS["ligero"].load(path, c)
    assert str(e.value) == message
    with pytest.raises(zk.FormatError) as e:
        ligero.load(path, ligero.max_proof_bytes(c), soundness="longfellow")
    assert str(e.value) == message
    back = zk.SYSTEMS["ligero"].load(path, c, soundness="classic")          # the verifier that asks for it
    assert zk.verify(back, c, wit.public, soundness="classic")


@pytest.mark.parametrize("version, why", [
    ("v3", "Merkle hashing without domain tags"),
    ("v4", "column leaves over whole columns, each test's challenges after the previous response")])
def test_a_proof_of_a_retired_protocol_is_refused_by_name(small, monkeypatch, version, why):
    _, _, proof = small
    monkeypatch.setattr(proofio, "PROTOCOL", f"circuitgrad-ligero-r1cs-{version}")   # an older version's header
    old = proofio.dumps(proof)
    monkeypatch.undo()
    with pytest.raises(zk.FormatError) as e:
        ligero.loads(old, "step_000.proof")
    assert str(e.value) == (f"step_000.proof: proof format circuitgrad-ligero-r1cs-{version} ({why}) is no longer "
                            f"accepted: re-prove with this version (circuitgrad-ligero-r1cs-v5)")
    assert ligero.loads(proofio.dumps(proof)).header()["protocol"] == "circuitgrad-ligero-r1cs-v5"


# ------------------------------------------------------------------ the statement as a block
def test_the_statement_prints_as_an_indented_block_of_claims(small):
    c = small[0]
    text = block(describe(c), "classic", "public statement")
    program = describe(c)["program_sha256"][:16]
    assert text.splitlines() == [
        f"public statement: step of mlp(1,4-2-3) [program sha256 {program}]",
        "  loss:           softmax_cross_entropy",
        "  optimizer:      sgd(lr=0.1 (raw 26))",
        "  arithmetic:     fixed(16,8) over ligero51",
        "  public outputs: 19 values: W0[4, 2], b0[2], W1[2, 3], b1[3]",
        "  public inputs:  19 values: W0[4, 2], b0[2], W1[2, 3], b1[3]",
        "  private:        x[1, 4], y[1, 3]",
        "  targets y:      one-hot rows",
        f"  size:           {c.r1cs.n_constraints} constraints, {c.r1cs.n_wires} wires",
        f"  lookups:        {c.r1cs.n_lookups} into [0, 2^1), [0, 2^2), [0, 2^3), [0, 2^4), [0, 2^5),",
        "                  [0, 2^8) (limbs of 8 bits)",
        f"  contractions:   {len(c.r1cs.contractions)} ({c.r1cs.n_contraction_terms} terms) proved by Freivalds' check",
        "  soundness:      Ligero parameters meet the classic soundness bound (Ames et al., CCS 2017)"]
    assert all(len(line) <= 100 for line in text.splitlines())
    assert "\n" not in c.statement()                 # what a proof binds stays one line, as before


def test_long_lists_wrap_between_items_never_inside_brackets():
    from circuitgrad.backends.zk.circuits.statement import _wrap
    items = ", ".join(f"W{i}[16, 16]" for i in range(12))
    lines = _wrap("  public outputs: ", items, 60)
    assert lines == ["  public outputs: W0[16, 16], W1[16, 16], W2[16, 16],",
                     "                  W3[16, 16], W4[16, 16], W5[16, 16],",
                     "                  W6[16, 16], W7[16, 16], W8[16, 16],",
                     "                  W9[16, 16], W10[16, 16], W11[16, 16]"]
