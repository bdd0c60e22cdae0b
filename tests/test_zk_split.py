"""One proof shared among Dask workers (``cluster.Split``): the same bytes as one process, and a worker that
computes a wrong row or a wrong block of the commitment gives a proof that does not verify."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from conftest import lookup_and_product_step, run_cli

from circuitgrad.backends import zk
from circuitgrad.backends.zk.systems import cluster as zk_cluster, ligero
from circuitgrad.backends.zk.systems.ligero import encoding, merkle, params as LP, proofio, protocol, prover
from circuitgrad.backends.zk.systems.ligero.circuitdata import prepare

pytest.importorskip("distributed")

#: weak parameters (named to the verifier) that give each round several Merkle row blocks
WEAK = LP.Params(8, 8, 64, 1, 1, contraction_sigma=1)


@pytest.fixture(scope="module")
def step():
    """A 4-8-3 MLP step over the Ligero field (lookups and contractions: both rounds, every kind of row)."""
    return lookup_and_product_step()


@pytest.fixture(scope="module")
def threads():
    """Two workers in this process (threads): a monkeypatched prover is what they run."""
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


def _split(c, w, client, params=WEAK):
    with zk_cluster.Split(client) as split:
        proof = ligero.prove(c, w, params=params, rng=np.random.default_rng(5), split=split)
    return proof, split


def test_split_proof_is_the_single_process_one(step, threads):
    c, w = step
    lay = protocol.layout(prepare(c.r1cs), WEAK)
    assert lay.rows > 2 * merkle.ROW_BLOCK and lay.second > merkle.ROW_BLOCK    # each worker has blocks of both
    one = ligero.prove(c, w, params=WEAK, rng=np.random.default_rng(5))
    proof, split = _split(c, w, threads)
    assert split.workers == 2
    assert proofio.dumps(proof) == proofio.dumps(one)
    ligero.check(proof, c, w.public, params=WEAK, min_bits=0)
    # sent: the circuit and witness to each worker, then the calls; received: every digest, the test sums, columns
    digests = 32 * WEAK.n * (-(-lay.rows // merkle.ROW_BLOCK) + -(-lay.second // merkle.ROW_BLOCK))
    sums = 2 * (8 * (WEAK.K + 2 * WEAK.n) * WEAK.sigma + len(pickle.dumps("0" * 64)))   # and a fingerprint
    assert split.moved["received"] == digests + sums + 8 * lay.total * WEAK.t
    assert split.moved["sent"] > 2 * 8 * c.r1cs.n_wires


def test_a_two_worker_local_cluster_gives_the_same_proof_bytes(step):
    """``zk.prove(..., cluster=2)``: a LocalCluster of two worker processes, the default parameters."""
    c, w = step
    one = zk.prove(c, w, rng=np.random.default_rng(9))
    two = zk.prove(c, w, rng=np.random.default_rng(9), cluster=2)
    assert proofio.dumps(two) == proofio.dumps(one)
    assert zk.verify(two, c)
    assert two.timings["workers"] == 2 and two.timings["bytes_received"] > 0


def test_a_wrong_row_in_one_workers_block_is_rejected(step, threads, monkeypatch):
    """The second worker's rows (the last row block of round 1) hold a value one off: the commitment, the
    tests and the opened columns all agree with it, and the linear test finds it is not the circuit's."""
    c, w = step
    lay = protocol.layout(prepare(c.r1cs), WEAK)
    bad = lay.mw - 1                                         # the last witness row of round 1: worker 2's range
    real = encoding.Encoding.values

    def values(self, a, b):
        out = real(self, a, b)
        if a <= bad < b:
            out = out.copy()
            out[bad - a, 0] = ligero.gf.add(out[bad - a, 0], 1)
        return out
    monkeypatch.setattr(encoding.Encoding, "values", values)
    proof, _ = _split(c, w, threads)
    with pytest.raises(ligero.Reject, match=r"^linear test 0"):
        ligero.check(proof, c, w.public, params=WEAK, min_bits=0)


def test_a_worker_committing_other_rows_than_it_opens_is_rejected(step, threads, monkeypatch):
    """A worker whose block digests are of other rows than the ones it later opens: the opened columns do not
    match the commitment."""
    c, w = step
    real = prover.Passes.digests

    def digests(self, a, b, start):
        out = real(self, a, b, start)
        if a > start:                                        # not the first worker's share
            out = out.copy()
            out[:, -1, 0] ^= 1
        return out
    monkeypatch.setattr(prover.Passes, "digests", digests)
    proof, _ = _split(c, w, threads)
    with pytest.raises(ligero.Reject, match=r"^opened columns do not match the Merkle commitment$"):
        ligero.check(proof, c, w.public, params=WEAK, min_bits=0)


def test_a_worker_with_other_challenges_stops_the_proof(step, threads, monkeypatch):
    """A worker that draws other test challenges (another version of the library) is found by the fingerprint
    its test sums carry, before any proof is made. The workers draw through ``protocol.test_challenges``, the
    driver through its own import of it."""
    c, w = step
    real = protocol.test_challenges

    def other(*args):
        r, lin, rq = real(*args)
        rq = rq.copy()
        rq[0, 0] = ligero.gf.add(rq[0, 0], 1)
        return r, lin, rq
    monkeypatch.setattr(protocol, "test_challenges", other)
    with pytest.raises(RuntimeError, match=r"^a Dask worker drew other test challenges than this process \(is it "
                                           r"running another version of circuitgrad\?\): the proof would not verify$"):
        _split(c, w, threads)


def test_a_split_proof_is_forgotten_by_the_workers(step, threads):
    c, w = step
    _split(c, w, threads)
    assert not zk_cluster._ROWS            # in-process workers: the same module, emptied by Split.close


@pytest.mark.slow
def test_cli_prove_with_workers_shares_each_step_and_verifies(tmp_path):
    out = str(tmp_path / "proofs")
    opts = ["--batch", "2", "--hidden", "4"]
    r = run_cli("zk", "prove", "examples/iris.py", *opts, "--steps", "1", "--workers", "2", "--out", out)
    assert r.returncode == 0, r.stderr
    r = run_cli("zk", "verify", "examples/iris.py", out, *opts, "--init-seed", "0")
    assert r.returncode == 0, r.stderr + r.stdout


def test_a_split_proofs_inputs_travel_as_out_of_band_buffers():
    """The circuit, witness, seed and masks go to the workers as one object whose arrays Dask serialises as
    frames of their own (pickle protocol 5), not inside a pickled blob: a worker's arrays are the frames it
    received, and the bytes counted as sent are the arrays' bytes and a small header."""
    from distributed.protocol import serialize
    big = np.arange(1 << 18, dtype=np.int64)
    inputs = zk_cluster._Inputs((big, big[::2].copy(), b"seed", 7))
    _, frames = serialize(inputs)
    sizes = sorted(memoryview(f).nbytes for f in frames)
    assert big.nbytes in sizes and big.nbytes // 2 in sizes
    assert 1.5 * big.nbytes <= zk_cluster._pickled_bytes(inputs) < 1.5 * big.nbytes + 4096
