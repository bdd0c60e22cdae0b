"""Private training runs: commitments in the circuit, committed data, chained proofs, Dask."""
import json
import os
import re
import shutil
import signal

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.circuits import commit as C
from circuitgrad.backends.zk.runs.bundle import BundleError

FX = cg.fixed(16, 8)
B, ROWS = 4, 20


def _data(seed=0, rows=ROWS):
    rng = np.random.default_rng(seed)
    x = np.round(rng.uniform(-2, 2, (rows, 3)) * 256) / 256
    y = rng.integers(0, 2, rows)
    return x, y


@pytest.fixture(scope="module")
def step():
    return cg.compile_model(nn.mlp(B, [3, 4, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.125, 0.5),
                            dtype=FX)


@pytest.fixture(scope="module")
def data(step):
    return zk.commit_dataset(step, *_data())


@pytest.fixture(scope="module")
def circuit(step):
    return zk.compile(step, public="commitments", data_rows=ROWS)


def _batches(n, seed=1):
    x, y = _data()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        idx = rng.choice(ROWS, B, replace=False)
        out.append((x[idx], y[idx]))
    return out


@pytest.fixture(scope="module")
def run(step, data):
    return zk.prove_run(step, step.init_params(seed=0), _batches(3), dataset=data, cluster="serial", progress=False,
                        rng=np.random.default_rng(5))


# ------------------------------------------------------------------ the private step circuit
def test_statement_names_commitments_and_dataset(circuit):
    d = circuit.statement_data()
    assert d["public_outputs"] == [["commitment_after", [4]]]
    assert d["public_inputs"] == [["commitment_before", [4]], ["data_root", [4]]]
    names = [n for n, _ in d["private_inputs"]]
    assert names[:2] == ["W0", "b0"] and "x" in names and "merkle_siblings" in names and "r_after" in names
    cm = d["commitments"]
    assert (cm["data_rows"], cm["merkle_arity"], cm["merkle_depth"]) == (ROWS, 3, 3)   # 3^3 = 27 ≥ 20 > 9
    assert cm["hash"].startswith("poseidon2(t=16, d=3,") and cm["packing"] == "3 values of 16 bits per element"
    text = circuit.statement()
    assert "batch rows from a dataset of 20 rows (ternary Merkle tree, depth 3)" in text
    assert circuit.r1cs.n_public == 12
    # a private step proves its products by the contraction argument too, and says so
    assert circuit.contractions == "argument" and len(circuit.r1cs.contractions) == 5   # 2 forward, 3 backward
    assert "contractions" in d and "proved by Freivalds' check" in text


def test_private_witness_matches_native_commitments(step, circuit, data):
    p = step.init_params(seed=0)
    x, y = _batches(1)[0]
    r0, r1 = C.fresh_randomness(zk.LIGERO51), C.fresh_randomness(zk.LIGERO51)
    wit = circuit.witness_private(p, x, y, data.tree, r0, r1)
    assert circuit.check(wit)
    after = step.step(p, x, y)
    names = circuit.output_names
    c_after = C.commit([after[n] for n in names], r1, 16, zk.LIGERO51)
    c_before = C.commit([p[n] for n in names], r0, 16, zk.LIGERO51)
    assert wit.public == [*c_after, *c_before, *data.commitment.root]
    out, ins = circuit.split_public(wit.public)
    assert tuple(out["commitment_after"]) == c_after and tuple(ins["data_root"]) == data.commitment.root


def test_forged_merkle_opening_or_commitment_is_unsatisfiable(step, circuit, data):
    p = step.init_params(seed=0)
    x, y = _batches(1)[0]
    r = [C.fresh_randomness(zk.LIGERO51) for _ in range(2)]
    wit = circuit.witness_private(p, x, y, data.tree, *r)
    lay = circuit.private
    for wire in (lay.siblings[2, 1, 0, 3], lay.bits[0, 0, 0], lay.r_before[0], lay.c_before[1], lay.root[0]):
        bad = wit.values.copy()
        bad[wire] = (bad[wire] + 1) % zk.LIGERO51.p
        assert not circuit.check(bad)


def test_a_batch_row_not_in_the_dataset_is_refused(step, circuit, data):
    x, y = _batches(1)[0]
    x = x.copy()
    x[2, 0] += 1 / 256
    r = [C.fresh_randomness(zk.LIGERO51) for _ in range(2)]
    with pytest.raises(ValueError, match=re.escape("this batch has a row that is not in the committed dataset")):
        circuit.witness_private(step.init_params(seed=0), x, y, data.tree, *r)
    with pytest.raises(ValueError, match=re.escape("prove_run: batch 1: this batch has a row that is not in the "
                                                   "committed dataset")):
        zk.prove_run(step, step.init_params(seed=0), [_batches(1)[0], (x, y)], dataset=data, cluster="serial")


def test_compile_refuses_bad_private_options(step):
    with pytest.raises(ValueError, match=re.escape("zk.compile: public='commitments' needs data_rows=N, the number of "
                                                   "rows of the committed dataset")):
        zk.compile(step, public="commitments")
    with pytest.raises(ValueError, match=re.escape("data_rows must be a positive number of dataset rows, got 0")):
        zk.compile(step, public="commitments", data_rows=0)
    with pytest.raises(ValueError, match=re.escape("zk.compile: public must be one of ['params', 'commitments'], "
                                                   "got 'weights'")):
        zk.compile(step, public="weights")
    with pytest.raises(ValueError, match=re.escape("zk.compile: public='commitments' proves training steps over the "
                                                   "native prover's field ligero51 (got function='step', field bn254)")):
        zk.compile(step, public="commitments", data_rows=4, field=zk.BN254)
    with pytest.raises(ValueError, match=re.escape("commitment randomness must be 4 field elements in [0, p), got 3 "
                                                   "values")):
        C.commit([np.zeros(2, np.int64)], [1, 2, 3], 16, zk.LIGERO51)


def test_packing_is_three_16_bit_values_per_element():
    assert C.per_element(16, zk.LIGERO51) == 3 and C.per_element(32, zk.LIGERO51) == 1
    got = C.pack(np.array([-32768, 32767, 0, 5]), 16, zk.LIGERO51)
    assert got.tolist() == [0 + 65535 * 2 ** 16 + 32768 * 2 ** 32, 5 + 32768]
    with pytest.raises(ValueError, match=re.escape("a committed value does not fit in 16 bits")):
        C.pack(np.array([32768]), 16, zk.LIGERO51)


def test_merkle_tree_paths(data):
    t = data.tree
    for i in (0, 7, ROWS - 1):
        s, pos = t.path(i)
        assert t.verify_path(t.rows[i], s, pos)
        assert not t.verify_path(t.rows[(i + 1) % ROWS], s, pos)


# ------------------------------------------------------------------ runs: soundness of the chain
def test_run_verifies_against_trusted_c0_and_root(step, data, run):
    assert run.steps == 3 and len(run.commitments) == 4
    assert zk.verify_run(run, step, c0=run.commitments[0], d=data.commitment)
    assert zk.verify_run(run, step, c0=run.commitments[0], d=data.commitment, c_final=run.commitments[-1], steps=3)
    # the prover keeps the final opening: it reproduces C_N
    names = zk.compile(step, public="commitments", data_rows=ROWS).output_names
    assert C.commit([run.opening["params"][n] for n in names], run.opening["randomness"],
                    16, zk.LIGERO51) == run.commitments[-1]


def _edit(run, commitments=None, proofs=None, data=None):
    return zk.Run(run.statement, run.circuit_sha256, data or run.data, commitments or list(run.commitments),
                  proofs or list(run.proofs))


def test_run_chain_rejects_tampering(step, data, run):
    c0, d = run.commitments[0], data.commitment
    other = zk.commit_dataset(step, *_data(seed=3)).commitment
    cases = {
        "different C_after": _edit(run, commitments=run.commitments[:3] + [C.fresh_randomness(zk.LIGERO51)]),
        "different data root": _edit(run, data=other),
        "step removed": _edit(run, commitments=run.commitments[:1] + run.commitments[2:], proofs=run.proofs[1:]),
        "steps swapped": _edit(run, proofs=[run.proofs[1], run.proofs[0], run.proofs[2]]),
        "step repeated": _edit(run, commitments=run.commitments + [run.commitments[-1]],
                               proofs=run.proofs + [run.proofs[-1]]),
    }
    for what, bad in cases.items():
        assert not zk.verify_run(bad, step, c0=c0, d=d), what
    assert not zk.verify_run(run, step, c0=run.commitments[1], d=d)
    assert not zk.verify_run(run, step, c0=c0, d=other)
    with pytest.raises(zk.Reject, match=re.escape("step 0: public value 0 differs from the proof's")):
        zk.check_run(cases["steps swapped"], step, c0=c0, d=d)
    with pytest.raises(zk.Reject, match=re.escape("the run does not start from the commitment you trust (c0)")):
        zk.check_run(run, step, c0=run.commitments[1], d=d)


def test_run_save_load_and_malformed_directories(step, data, run, tmp_path):
    run.save(str(tmp_path / "run"))
    assert not any("opening" in e or e.endswith(".npz") for e in os.listdir(tmp_path / "run"))
    back = zk.Run.load(str(tmp_path / "run"))
    assert back.commitments == run.commitments and back.data == run.data
    assert zk.verify_run(back, step, c0=run.commitments[0], d=data.commitment)

    def broken(edit):
        d = tmp_path / f"bad{len(os.listdir(tmp_path))}"
        shutil.copytree(tmp_path / "run", d)
        edit(d)
        return str(d)

    def rewrite(d, f):
        j = json.loads((d / "run.json").read_text())
        f(j)
        (d / "run.json").write_text(json.dumps(j))
    p = zk.LIGERO51.p
    bad = {
        "not a canonical field element": lambda d: rewrite(d, lambda j: j["commitments"][1].__setitem__(0, str(p))),
        "3 steps need 4 commitments": lambda d: rewrite(d, lambda j: j["commitments"].pop()),
        "step_002.proof is missing": lambda d: os.remove(d / "step_002.proof"),
        "unexpected step_003.proof": lambda d: shutil.copy(d / "step_000.proof", d / "step_003.proof"),
        "field 'steps' must be a int": lambda d: rewrite(d, lambda j: j.__setitem__("steps", "3")),
        "not a circuitgrad run": lambda d: rewrite(d, lambda j: j.__setitem__("format", "x")),
    }
    for msg, edit in bad.items():
        with pytest.raises(BundleError, match=re.escape(msg)):
            zk.Run.load(broken(edit))
    from circuitgrad.backends.zk.circuits.formats import FormatError
    garbage = zk.Run.load(broken(lambda d: (d / "step_001.proof").write_bytes(b"garbage")))   # proofs: read when checked
    with pytest.raises(FormatError, match="step_001.proof: too short to be a circuitgrad Ligero proof"):
        zk.check_run(garbage, step, c0=run.commitments[0], d=data.commitment)


# ------------------------------------------------------------------ Dask: a worker dies mid-run
@pytest.mark.slow
def test_local_cluster_with_a_killed_worker_gives_the_serial_proofs():
    """10 steps of the iris model on a LocalCluster of 2 workers, one killed while it proves (enough steps that
    one is still being proved when the first comes back)."""
    from distributed import Client, LocalCluster
    from circuitgrad import datasets
    iris = datasets.load("iris")
    step = cg.compile_model(nn.mlp(8, [4, 16, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=FX)
    data = zk.commit_dataset(step, iris.x_train, iris.y_train)
    batches = list(datasets.batches(iris.x_train, iris.y_train, 8, np.random.default_rng(0)))[:10]
    p0 = step.init_params(seed=0)
    serial = zk.prove_run(step, p0, batches, dataset=data, cluster="serial", progress=False,
                          rng=np.random.default_rng(11))
    killed = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        def kill_one(msg):
            if not killed:                       # after the first proof, kill a worker that is proving
                busy = [w for w, tasks in client.processing().items() if tasks]
                if busy:
                    pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                    killed.append(busy[0])
                    os.kill(pid, signal.SIGKILL)         # mid-proof: the nanny restarts it, the task is re-run
        dist = zk.prove_run(step, p0, batches, dataset=data, cluster=client, progress=False,
                            rng=np.random.default_rng(11), log=kill_one)
        # a scheduler address, as for an existing cluster
        one = zk.prove_run(step, p0, batches[:1], dataset=data, cluster=cluster.scheduler_address, progress=False)
        assert zk.verify_run(one, step, c0=one.commitments[0], d=data.commitment, steps=1)
    assert killed, "no worker was busy when the first proof came back"
    assert dist.commitments == serial.commitments
    from circuitgrad.backends.zk.systems.ligero.proofio import dumps
    assert [dumps(p) for p in dist.proofs] == [dumps(p) for p in serial.proofs]
    assert zk.verify_run(dist, step, c0=serial.commitments[0], d=data.commitment, steps=len(batches))


def test_split_steps_give_the_serial_proofs(step, data, run):
    """``split=True``: each step's rows shared among two workers (threads here), steps one after the other: the
    proofs are the serial run's, byte for byte, and the run verifies."""
    from distributed import Client, LocalCluster

    from circuitgrad.backends.zk.systems.ligero.proofio import dumps
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        split = zk.prove_run(step, step.init_params(seed=0), _batches(3), dataset=data, cluster=client,
                             progress=False, rng=np.random.default_rng(5), split=True)
        assert len(client.scheduler_info()["workers"]) == 2
    assert split.commitments == run.commitments
    assert [dumps(p) for p in split.proofs] == [dumps(p) for p in run.proofs]
    assert all(p.timings["workers"] == 2 for p in split.proofs)
    assert zk.verify_run(split, step, c0=run.commitments[0], d=data.commitment, steps=3)


# ------------------------------------------------------------------ the command line
def _c0(stdout: str) -> str:
    return next(line.split()[-1] for line in stdout.splitlines() if line.startswith("starting commitment c0 "))


@pytest.mark.slow
@pytest.mark.slow
def test_cli_private_run_split_among_two_workers_verifies(tmp_path):
    from conftest import run_cli
    out = str(tmp_path / "run")
    opts = ["--batch", "2", "--hidden", "4"]
    res = run_cli("zk", "prove", "examples/iris.py", "--steps", "2", *opts, "--private", "--workers", "2", "--split",
                  "--out", out)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[prove 2 steps on 2 local workers, each step shared among the workers] done" in res.stdout
    ok = run_cli("zk", "verify", "examples/iris.py", out, *opts, "--private", "--c0", _c0(res.stdout), "--steps", "2")
    assert ok.returncode == 0 and "all 2 proofs verify and chain" in ok.stdout, ok.stdout + ok.stderr


def test_cli_private_run_on_a_local_cluster(tmp_path):
    from conftest import run_cli
    out = str(tmp_path / "run")
    opts = ["--batch", "2", "--hidden", "4"]
    res = run_cli("zk", "prove", "examples/iris.py", "--steps", "2", *opts, "--private", "--out", out)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[prove 2 steps on a local cluster, a worker per core] done" in res.stdout
    assert "dataset: 112 rows, root " in res.stdout and "proving: 100%" in res.stderr      # the progress bar
    assert sorted(os.listdir(out)) == ["run.json", "step_000.proof", "step_001.proof"]
    assert os.path.exists(out + ".opening.npz")              # private: kept beside the run, not in it
    c0 = _c0(res.stdout)
    ok = run_cli("zk", "verify", "examples/iris.py", out, *opts, "--private", "--c0", c0, "--steps", "2")
    assert ok.returncode == 0 and "all 2 proofs verify and chain" in ok.stdout, ok.stdout + ok.stderr
    other = ",".join(["1"] + c0.split(",")[1:])
    bad = run_cli("zk", "verify", "examples/iris.py", out, *opts, "--private", "--c0", other)
    assert bad.returncode == 1 and "INVALID: the run does not start from the commitment you trust (c0)" in bad.stdout
    wrong = run_cli("zk", "verify", "examples/iris.py", out, "--batch", "2", "--hidden", "5", "--private", "--c0", c0)
    assert wrong.returncode == 1 and "INVALID: the run proves another statement than this step's" in wrong.stdout
    for args, msg in ((["zk", "verify", "examples/iris.py", out, *opts, "--private"],
                       "circuitgrad zk: name the commitment the run starts from, which you trust: --c0 E1,E2,E3,E4"),
                      (["zk", "verify", "examples/iris.py", out, *opts, "--private", "--c0", "1,2"],
                       "circuitgrad zk: --c0 must be four field elements in [0, p) separated by commas"),
                      (["zk", "prove", "examples/iris.py", *opts, "--workers", "2", "--system", "plonk"],
                       "circuitgrad zk: --workers and --scheduler share a step's rows among Dask workers with the "
                       "native prover: use --system ligero"),
                      (["zk", "prove", "examples/iris.py", *opts, "--private", "--system", "plonk"],
                       "circuitgrad zk: a --private run is proved by the native prover: use --system ligero"),
                      (["zk", "prove", "examples/iris.py", *opts, "--private", "--split"],
                       "circuitgrad zk: --split shares each step's rows among Dask workers: add --workers N (N >= 2) "
                       "or --scheduler"),
                      (["zk", "prove", "examples/iris.py", *opts, "--split", "--workers", "2"],
                       "circuitgrad zk: --split proves a --private run's steps one after the other, each shared "
                       "among the workers; without --private, --workers already shares each step")):
        r = run_cli(*args)
        assert r.returncode != 0 and msg in r.stderr, (args, r.stderr)


# ------------------------------------------------------------------ privacy
@pytest.mark.slow
def test_opened_values_do_not_depend_on_the_private_weights(step, circuit, data):
    """Two private steps with different weights (hence other commitments: the commitment binds) and the
    same batch: with the opened columns fixed, everything the verifier sees about the witness (opened
    column values and the test polynomials) has the same distribution. The ZK check of the Ligero
    prover (tests/test_zk_ligero.py), applied to the private step circuit."""
    from circuitgrad.backends.zk.systems.ligero import choose, prover
    from circuitgrad.backends.zk.systems.ligero.circuitdata import prepare
    x, y = _batches(1)[0]
    p0 = step.init_params(seed=0)
    p1 = step.init_params(seed=1)
    assert any(not np.array_equal(p0[n], p1[n]) for n in circuit.output_names)
    r = [C.fresh_randomness(zk.LIGERO51) for _ in range(2)]
    wits = [circuit.witness_private(p, x, y, data.tree, *r).values for p in (p0, p1)]
    assert all(circuit.check(w) for w in wits)
    pc = prepare(circuit.r1cs)
    par = choose(pc.n_wires, pc.n_constraints, lookups=pc.n_lookups, contractions=pc.contraction_cells)
    rng = np.random.default_rng(3)
    cols = sorted(rng.choice(par.n, par.t, replace=False).tolist())
    seen = []
    for w in wits:
        vals = []
        for _ in range(12):
            pr = prover.prove_prepared(pc, w, par, rng=rng, columns=cols)
            vals.append(np.concatenate([pr.columns.reshape(-1), pr.columns2.reshape(-1), pr.u.reshape(-1),
                                        pr.q.reshape(-1), pr.h.reshape(-1)]))
        seen.append(np.concatenate(vals) * 16 // zk.LIGERO51.p)
    h1, h2 = (np.bincount(s, minlength=16) for s in seen)
    chi2 = float((((h1 - h2) ** 2) / np.maximum(h1 + h2, 1)).sum())
    assert chi2 < 45, f"opened values differ in distribution (χ² = {chi2:.1f}, 15 dof)"   # p < 1e-4 under H0
    # and they are not degenerate: the histogram is spread over all bins
    assert (h1 > 0).all() and (h2 > 0).all()
