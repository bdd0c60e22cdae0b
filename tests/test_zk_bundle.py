"""Proof bundles and runs read by a verifier: it bounds its own work, the private
opening stays out of the published run, files that are not files, and one encoding per proof."""
from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import re
import shutil
import struct
import time
import tracemalloc
import weakref

import numpy as np
import pytest
from conftest import main_in_process, run_cli, zk_step_circuit

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import zk
from circuitgrad.backends.zk.runs import bundle as B
from circuitgrad.backends.zk.systems import ligero
from circuitgrad.backends.zk.runs import run as R
from circuitgrad.backends.zk.circuits.formats import FormatError, json_loads, read_untrusted
from circuitgrad.backends.zk.systems.ligero import params as LP, proofio, protocol
from circuitgrad.backends.zk.systems.ligero.circuitdata import prepare
from circuitgrad.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IRIS = ["examples/iris.py", "--batch", "4", "--option", "momentum=0"]


@pytest.fixture(scope="module")
def iris():
    """The iris step of the red team's report (batch 8, 16 hidden units) and an honest proof of it."""
    c, wit = zk_step_circuit("iris", 8, [16])
    return c, wit, zk.prove(c, wit, rng=np.random.default_rng(0))


def _inflated(proof, c, k: int, t: int, n: int, sigma: int | None = None):
    """``proof`` rewritten with other parameters and arrays of the shapes they imply (as the red team did)."""
    p = proof.params
    q = LP.Params(k, t, n, sigma or p.sigma, p.lookup_sigma)
    lay = protocol.layout(prepare(c.r1cs), q)
    zero = lambda *shape: np.zeros(shape, dtype=np.int64)          # noqa: E731
    return protocol.LigeroProof(**{**proof.__dict__, "params": q, "u": zero(q.sigma, q.K),
                                   "q": zero(q.sigma, q.lin_len), "h": zero(q.sigma, q.quad_len),
                                   "columns": zero(lay.rows, t), "salts": [bytes(16)] * t,
                                   "siblings": [bytes(32)] * t, "columns2": zero(lay.lk.second, t),
                                   "salts2": [bytes(16)] * t, "siblings2": [bytes(32)] * t})


def _cost(fn) -> tuple[float, int, BaseException | None]:
    """Seconds, peak traced memory (bytes) and the exception of ``fn()``."""
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    err = None
    try:
        fn()
    except (ligero.Reject, FormatError) as e:
        err = e
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, err


def _refusal(p: LP.Params, want: LP.Params) -> str:
    return (rf"^the proof's parameters \({re.escape(protocol._show(p))}\) are not the ones this circuit and 100 bits "
            rf"give \({re.escape(protocol._show(want))}\): a verifier's work must not be the prover's choice$")


def _main(capsys, *args: str) -> tuple[int, str]:
    """``circuitgrad ARGS`` in-process from the repository root: (exit status, everything it printed)."""
    rc, out, err = main_in_process(capsys, *args)
    return rc, out + err


# ---------------------------------------------------------------- 2. the verifier bounds its own work
def test_an_inflated_proof_costs_the_verifier_no_more_than_an_honest_one(iris, tmp_path, monkeypatch):
    """t = k = 8192, n = 65536 (the red team's 4 MB file) allocated > 6.8 GiB; now it is refused unread, or,
    read by a verifier that does not bound the file, before anything its parameters size. (Memory is the
    measure: an unbounded read parses the whole file, which takes longer than an honest verification.)"""
    layout, replay = protocol.layout, protocol._replay
    c, wit, proof = iris
    honest, big = str(tmp_path / "honest.proof"), str(tmp_path / "inflated.proof")
    proof.save(honest)
    bad = _inflated(proof, c, 8192, 8192, 65536)
    bad.save(big)
    assert os.path.getsize(big) > 4_000_000
    limit = ligero.max_proof_bytes(c)
    assert os.path.getsize(honest) <= limit < 2 * os.path.getsize(honest)

    _, ph, err = _cost(lambda: ligero.check(ligero.load(honest, limit), c, wit.public))
    assert err is None
    want = ligero.expected_params(c)
    assert proof.params == want
    cases = {   # the verifier that bounds the file, one that reads any file up to 256 MiB, and the object itself
        "bounded read": (lambda: ligero.load(big, limit),
                         rf"^{re.escape(big)}: {os.path.getsize(big)} bytes, more than a proof file may have "
                         rf"\({limit}\)$"),
        "unbounded read": (lambda: ligero.check(ligero.load(big), c, wit.public), _refusal(bad.params, want)),
        "in memory": (lambda: ligero.check(bad, c, wit.public), _refusal(bad.params, want)),
    }
    sized = []      # every call of what the parameters size: their layout and the protocol's replay
    monkeypatch.setattr(protocol, "layout", lambda *a, **kw: sized.append("layout") or layout(*a, **kw))
    monkeypatch.setattr(protocol, "_replay", lambda *a, **kw: sized.append("replay") or replay(*a, **kw))
    for what, (fn, message) in cases.items():
        _, peak, err = _cost(fn)
        assert err is not None and re.match(message, str(err)), (what, err)
        assert sized == [] and peak <= 2 * ph, (what, sized, peak, ph)
    ligero.check(ligero.load(honest, limit), c, wit.public)        # the spies see the honest proof's work
    assert sized == ["layout", "replay"]


def test_the_prover_cannot_choose_other_parameters(iris):
    """Any parameters but those the verifier derives (zk.prove's choice for the circuit and the target) are
    refused before the verifier allocates anything they size, even sound ones of a valid proof."""
    c, wit, proof = iris
    p = proof.params
    variants = [(p.k, p.t + 40, p.n), (p.k, p.t, 2 * p.n), (2 * p.k, p.t, 2 * p.n), (p.k, p.k, 8 * p.k),
                (p.k // 2, p.t, p.n)]
    for k, t, n in variants:
        bad = _inflated(proof, c, k, t, n)
        seconds, peak, err = _cost(lambda: ligero.check(bad, c, wit.public))
        assert isinstance(err, ligero.Reject) and re.match(_refusal(bad.params, p), str(err)), (k, t, n, err)
        assert peak < 1 << 20, (k, t, n, peak)                 # nothing of the sizes the proof names
    more = _inflated(proof, c, p.k, p.t, p.n, p.sigma + 1)
    with pytest.raises(ligero.Reject, match=_refusal(more.params, p)):
        ligero.check(more, c, wit.public)
    # a valid, sound proof with more columns than the verifier's choice: refused unless the verifier names them
    extra = LP.Params(p.k, p.t + 8, p.n, p.sigma, p.lookup_sigma)
    valid = zk.prove(c, wit, params=extra, rng=np.random.default_rng(1))
    assert LP.soundness_bits(extra) >= 100
    with pytest.raises(ligero.Reject, match=_refusal(extra, p)):
        ligero.check(valid, c, wit.public)
    assert not zk.verify(valid, c, wit.public)
    assert ligero.verify(valid, c, wit.public, params=extra)
    with pytest.raises(ligero.Reject, match=r"^the proof's parameters \(.*\) are not the ones you named \("):
        ligero.check(proof, c, wit.public, params=extra)


# ---------------------------------------------------------------- 2. private runs: one proof at a time
FX = cg.fixed(16, 8)


def _private_data(rows=20):
    rng = np.random.default_rng(0)
    return np.round(rng.uniform(-2, 2, (rows, 3)) * 256) / 256, rng.integers(0, 2, rows)


@pytest.fixture(scope="module")
def private(tmp_path_factory):
    step = cg.compile_model(nn.mlp(4, [3, 4, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=FX)
    x, y = _private_data()
    data = zk.commit_dataset(step, x, y)
    batches = [(x[i:i + 4], y[i:i + 4]) for i in (0, 4)]
    run = zk.prove_run(step, step.init_params(seed=0), batches, dataset=data, cluster="serial", progress=False,
                       rng=np.random.default_rng(5))
    where = str(tmp_path_factory.mktemp("private") / "run")
    run.save(where)
    return step, data, run, where


def _copy(where: str, tmp_path) -> str:
    dst = str(tmp_path / "copy")
    shutil.copytree(where, dst)
    return dst


def test_a_private_run_is_read_one_proof_at_a_time(private, tmp_path, monkeypatch):
    step, data, run, where = private
    real, calls, alive = ligero.load, [], []

    def load(path, limit=None, soundness=None):
        gc.collect()
        calls.append((os.path.basename(path), limit, sum(r() is not None for r in alive)))
        proof = real(path, limit, soundness)
        alive.append(weakref.ref(proof))
        return proof
    monkeypatch.setattr(R.ligero, "load", load)
    back = zk.Run.load(where)
    assert calls == [] and back.steps == 2                      # loading reads run.json and names, no proof
    circuit = zk.compile(step, public="commitments", data_rows=data.tree.n)
    zk.check_run(back, step, c0=run.commitments[0], d=data.commitment, steps=2)
    limit = ligero.max_proof_bytes(circuit)
    assert calls == [("step_000.proof", limit, 0), ("step_001.proof", limit, 0)]   # the previous one is gone
    # a step file that is not a proof is found when its step is checked, by name
    d = _copy(where, tmp_path)
    open(os.path.join(d, "step_001.proof"), "wb").write(b"garbage")
    bad = zk.Run.load(d)
    with pytest.raises(FormatError, match=rf"^{re.escape(d)}/step_001\.proof: too short to be a circuitgrad Ligero "
                                          rf"proof \(7 bytes\)$"):
        zk.check_run(bad, step, c0=run.commitments[0], d=data.commitment)


def test_a_loaded_run_saves_over_itself_and_elsewhere(private, tmp_path):
    step, data, run, where = private
    d = _copy(where, tmp_path)
    before = {e: open(os.path.join(d, e), "rb").read() for e in os.listdir(d)}
    zk.Run.load(d).save(d)                                  # its proofs are read from the files it writes
    assert {e: open(os.path.join(d, e), "rb").read() for e in os.listdir(d)} == before
    zk.Run.load(d).save(str(tmp_path / "other"))
    assert zk.verify_run(zk.Run.load(str(tmp_path / "other")), step, c0=run.commitments[0], d=data.commitment,
                         steps=2)


def test_hard_linked_step_files_are_refused(private, tmp_path):
    step, data, run, where = private
    d = _copy(where, tmp_path)
    os.remove(os.path.join(d, "step_001.proof"))
    os.link(os.path.join(d, "step_000.proof"), os.path.join(d, "step_001.proof"))
    message = (rf"^{re.escape(d)}: step_000\.proof is a hard link \(one of 2 names of one file\); a bundle holds its "
               rf"own files$")
    with pytest.raises(B.BundleError, match=message):
        zk.Run.load(d)
    with pytest.raises(B.BundleError, match=message):          # the public bundle's check is the same
        B.check_step_files(d, ["step_000.proof", "step_001.proof"], "chain.json")


def test_zk_verify_private_compiles_before_it_reads_the_run(private, tmp_path, capsys):
    *_, where = private
    d = _copy(where, tmp_path)
    open(os.path.join(d, "run.json"), "w").write("{")
    rc, text = _main(capsys, "zk", "verify", "examples/iris.py", d, "--private", "--c0", "1,2,3,4", "--lr", "0")
    assert rc != 0 and "lr must be a finite number > 0, got 0.0" in text and "run.json" not in text, text


# ---------------------------------------------------------------- 3. the private opening
def _refused(fn) -> str:
    with pytest.raises(BaseException) as e:
        fn()
    return str(e.value.code if isinstance(e.value, SystemExit) else e.value)


def test_the_opening_is_written_beside_the_run_never_inside(tmp_path, monkeypatch):
    from circuitgrad.backends.zk.cli import _opening_path
    monkeypatch.chdir(tmp_path)
    os.mkdir("run")
    beside = str(tmp_path / "run") + ".opening.npz"
    for out in ("run", "run/", "run/.", "./run", "run//", str(tmp_path / "run")):
        assert _opening_path(out) == beside, out
    assert _opening_path(".") == str(tmp_path) + ".opening.npz"          # '--out .': beside the directory
    os.symlink(".", os.path.join("run", "here"))                         # run/here is run itself: resolved,
    assert _opening_path("run/here") == beside                           # its opening is beside it too
    for out, where in (("/", "/.opening.npz"),):
        msg = _refused(lambda: _opening_path(out))
        assert msg.endswith(f"--out {out}: the private opening would be written to {where}, inside the run "
                            f"directory that is published; name the run directory by a path with a parent outside "
                            f"it"), msg


@pytest.mark.slow
def test_zk_prove_private_out_dot_keeps_the_opening_out_of_the_run(tmp_path):
    res = run_cli("zk", "prove", "examples/iris.py", "--steps", "1", "--batch", "2", "--hidden", "4", "--private",
                  "--workers", "1", "--out", str(tmp_path / "run") + "/.")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(os.listdir(tmp_path / "run")) == ["run.json", "step_000.proof"]
    assert os.path.exists(str(tmp_path / "run") + ".opening.npz")
    assert f"(private: keep them) in {tmp_path / 'run'}.opening.npz" in res.stdout
    # an opening left inside a run (by an older zk prove --out .) is pointed out by the verifier
    shutil.copy(str(tmp_path / "run") + ".opening.npz", tmp_path / "run" / "..opening.npz")
    c0 = next(line.split()[-1] for line in res.stdout.splitlines() if line.startswith("starting commitment c0 "))
    ok = run_cli("zk", "verify", "examples/iris.py", str(tmp_path / "run"), "--batch", "2", "--hidden", "4",
                 "--private", "--c0", c0)
    assert ok.returncode == 0 and "all 1 proofs verify and chain" in ok.stdout, ok.stdout + ok.stderr
    assert (f"{tmp_path / 'run'}: WARNING: ..opening.npz in the run directory looks like a private opening (final "
            f"parameters and their blinding): remove it before you publish the run\n") in ok.stdout


# ---------------------------------------------------------------- 4. files that are not files
def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_directory_where_a_file_belongs_is_one_line_and_closes_its_descriptor(tmp_path):
    d = str(tmp_path / "step_000.proof")
    os.mkdir(d)
    before = _fds()
    for _ in range(50):
        with pytest.raises(FormatError, match=rf"^{re.escape(d)}: a directory; a proof file must be a regular file$"):
            ligero.load(d)
    assert _fds() == before
    with pytest.raises(FormatError, match=r"^x: a directory; a thing must be a regular file$"):
        os.chdir(tmp_path)
        os.mkdir("x")
        read_untrusted("x", what="thing")
    assert _fds() == before


def test_a_link_swapped_in_after_the_check_is_not_followed(tmp_path, monkeypatch):
    os.symlink("/dev/zero", tmp_path / "step_000.proof")
    monkeypatch.setattr(os.path, "islink", lambda p: False)       # as if it became a link after the check
    before = _fds()
    with pytest.raises(FormatError, match=r"step_000\.proof: cannot read: Too many levels of symbolic links$"):
        read_untrusted(str(tmp_path / "step_000.proof"), what="proof file")
    assert _fds() == before


def test_a_directory_in_a_bundle_or_run_is_one_line(private, tmp_path, capsys):
    step, data, run, where = private
    b = str(tmp_path / "bundle")
    os.makedirs(os.path.join(b, "chain.json"))
    with pytest.raises(B.BundleError, match=rf"^{re.escape(b)}/chain\.json: a directory; a chain\.json must be a "
                                            rf"regular file$"):
        B.read(b, "ligero", ("ligero",))
    rc, text = _main(capsys, "zk", "verify", *IRIS, b, "--init-seed", "0")
    assert rc != 0 and text == f"circuitgrad zk: {b}/chain.json: a directory; a chain.json must be a regular file\n"
    d = _copy(where, tmp_path)
    os.remove(os.path.join(d, "run.json"))
    os.mkdir(os.path.join(d, "run.json"))
    with pytest.raises(B.BundleError, match=rf"^{re.escape(d)}/run\.json: a directory; a run\.json must be a "
                                            rf"regular file$"):
        zk.Run.load(d)
    shutil.rmtree(d)
    d = _copy(where, tmp_path)
    os.remove(os.path.join(d, "step_000.proof"))
    os.mkdir(os.path.join(d, "step_000.proof"))
    back = zk.Run.load(d)
    with pytest.raises(FormatError, match=rf"^{re.escape(d)}/step_000\.proof: a directory; a proof file must be a "
                                          rf"regular file$"):
        zk.check_run(back, step, c0=run.commitments[0], d=data.commitment)


# ---------------------------------------------------------------- 4. one encoding per proof
def _reheader(data: bytes, header: bytes) -> bytes:
    """``data`` with another header, the length and checksum made consistent (what a forger would do)."""
    hlen = struct.unpack_from("<I", data, 10)[0]
    body = data[:10] + struct.pack("<I", len(header)) + header + data[14 + hlen:-32]
    return body + hashlib.sha256(body).digest()


def test_a_proof_has_exactly_one_encoding(iris):
    c, wit, proof = iris
    data = proofio.dumps(proof)
    assert proofio.dumps(proofio.loads(data)) == data                 # parse and write back: the same bytes
    hlen = struct.unpack_from("<I", data, 10)[0]
    raw = data[14:14 + hlen]
    head = json.loads(raw)
    assert json.dumps(head, sort_keys=True).encode() == raw
    canonical = (r"^proof: the header is not in its canonical form \(json\.dumps\(header, sort_keys=True\), as zk "
                 r"writes it\): a proof has exactly one encoding$")
    upper = dict(head, circuit_sha256=head["circuit_sha256"].upper())
    cases = {
        "upper-case digest": (json.dumps(upper, sort_keys=True), r"^proof: circuit_sha256 must be 64 lowercase hex "
                                                                 r"digits$"),
        "reordered keys": (json.dumps(dict(reversed(list(head.items())))), canonical),
        "spaced": (json.dumps(head, sort_keys=True, indent=1), canonical),
        "compact": (json.dumps(head, sort_keys=True, separators=(",", ":")), canonical),
        "escaped": (json.dumps(head, sort_keys=True).replace('"k"', '"\\u006b"'), canonical),
        "duplicate key": ('{"k": 1, ' + raw.decode()[1:], r"^proof: header is not valid JSON \(duplicate key 'k': "
                                                          r"each key may appear once\)$"),
        "duplicate, same value": ('{"k": %d, ' % head["k"] + raw.decode()[1:],
                                  r"^proof: header is not valid JSON \(duplicate key 'k': each key may appear once\)$"),
    }
    for what, (header, message) in cases.items():
        other = _reheader(data, header.encode())
        assert other != data
        with pytest.raises(FormatError, match=message):
            proofio.loads(other)
    assert proofio.loads(_reheader(data, raw)).header() == proof.header()   # the canonical one still loads


def test_duplicate_json_keys_are_refused_wherever_untrusted_json_is_read(private, tmp_path):
    for text in ('{"a": 1, "a": 1}', '{"a": {"b": 1, "b": 2}}', '[{"x": 0, "x": 0}]'):
        with pytest.raises(ValueError, match=r"^duplicate key '[abx]': each key may appear once$"):
            json_loads(text)
    assert json_loads('{"a": {"b": [1, {"c": 2}]}}') == {"a": {"b": [1, {"c": 2}]}}
    step, data, run, where = private
    d = _copy(where, tmp_path)
    text = open(os.path.join(d, "run.json")).read()
    open(os.path.join(d, "run.json"), "w").write('{"steps": 1, ' + text.lstrip()[1:])
    with pytest.raises(B.BundleError, match=rf"^{re.escape(d)}/run\.json: not valid JSON \(duplicate key 'steps': "
                                            rf"each key may appear once\)$"):
        zk.Run.load(d)
    b = str(tmp_path / "bundle")
    os.mkdir(b)
    open(os.path.join(b, "chain.json"), "w").write('{"format": "circuitgrad-zk-bundle", "format": "x"}')
    with pytest.raises(B.BundleError, match=rf"^{re.escape(b)}/chain\.json: not valid JSON \(duplicate key 'format': "
                                            rf"each key may appear once\)$"):
        B.read(b, "ligero", ("ligero",))
    from circuitgrad.backends.zk.systems import snarkjs as sj
    path = str(tmp_path / "public.json")
    open(path, "w").write('{"protocol": "groth16", "protocol": "plonk"}')
    with pytest.raises(FormatError, match=rf"^{re.escape(path)}: not valid JSON \(duplicate key 'protocol': each "
                                          rf"key may appear once\)$"):
        sj._read_json(path, "missing")


# ---------------------------------------------------------------- 7. options that differ, said even when proofs verify
@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("zk") / "proofs")
    res = run_cli("zk", "prove", *IRIS, "--steps", "1", "--out", out)
    assert res.returncode == 0, res.stdout + res.stderr
    return out


def test_a_bundle_whose_options_differ_verifies_and_says_which(bundle, tmp_path, capsys):
    d = str(tmp_path / "b")
    shutil.copytree(bundle, d)
    path = os.path.join(d, "chain.json")
    chain = json.load(open(path))
    chain["options"]["note"] = "made on Tuesday"                     # no option of the verifier's
    del chain["options"]["frac"]                                     # one the verifier has
    chain["options"]["script"] = "elsewhere/iris.py"                 # where the prover kept it: not an option
    json.dump(chain, open(path, "w"))
    os.chdir(ROOT)
    rc = main(["zk", "verify", *IRIS, d, "--init-seed", "0"])
    out = capsys.readouterr().out
    assert rc == 0 and "all 1 proofs verify" in out
    assert (f"{d}: chain.json names other options than yours, for the same statement: frac=unset (yours 8), "
            f"note='made on Tuesday' (yours unset)\n") in out
    rc = main(["zk", "verify", *IRIS, bundle, "--init-seed", "0"])
    assert rc == 0 and "options than yours" not in capsys.readouterr().out


# ---------------------------------------------------------------- where zk prove writes
TINY = """import numpy as np
import circuitgrad as cg
from circuitgrad import nn
X = np.round(np.random.default_rng(0).uniform(-2, 2, (8, 2)) * 256) / 256
Y = np.arange(8) % 2
def model(batch=2, lr=0.125, dtype=cg.fixed(16, 8)):
    def data(seed):
        for i in range(0, 8, batch):
            yield X[i:i + batch], Y[i:i + batch]
    return cg.ModelSpec(nn.mlp(batch, [2, 2], dtype=dtype), nn.softmax_cross_entropy, nn.sgd(lr), dtype, data,
                        dataset=lambda: (X, Y))
"""


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.py"
    p.write_text(TINY)
    return str(p)


@pytest.mark.parametrize("private", [[], ["--private", "--workers", "1"]], ids=["bundle", "private"])
def test_zk_prove_out_an_existing_file_is_a_usage_error(tiny, tmp_path, capsys, private):
    f = tmp_path / "f"
    f.write_text("mine")
    rc, text = _main(capsys, "zk", "prove", tiny, "--out", str(f), *private)
    assert (rc, text) == (2, f"circuitgrad zk: --out {f}: exists and is not a directory; name a new directory (or a "
                             f"bundle zk prove wrote, which is replaced)\n")
    rc, text = _main(capsys, "zk", "prove", tiny, "--out", str(f / "x"), *private)
    assert (rc, text) == (2, f"circuitgrad zk: --out {f / 'x'}: {f} is not a directory\n")
    assert f.read_text() == "mine"


def test_zk_prove_over_a_bundle_leaves_no_stale_step_and_never_overwrites_other_files(tiny, tmp_path, capsys):
    out = str(tmp_path / "proofs")
    assert _main(capsys, "zk", "prove", tiny, "--out", out, "--steps", "2")[0] == 0
    assert sorted(os.listdir(out)) == ["chain.json", "final.npz", "step_000.proof", "step_001.proof"]
    assert _main(capsys, "zk", "prove", tiny, "--out", out, "--steps", "1")[0] == 0      # over our own bundle
    assert sorted(os.listdir(out)) == ["chain.json", "final.npz", "step_000.proof"]
    rc, text = _main(capsys, "zk", "verify", tiny, out, "--init-seed", "0")
    assert rc == 0 and text.endswith("all 1 proofs verify\n"), text
    for foreign in ("notes.txt", "step_007", "step_001.proof.bak"):
        path = os.path.join(out, foreign)
        os.mkdir(path) if foreign == "step_007" else open(path, "w").write("mine")
        if foreign == "step_007":
            open(os.path.join(path, "data.csv"), "w").write("mine")       # not a snarkjs proof's file
        before = sorted(os.listdir(out))
        rc, text = _main(capsys, "zk", "prove", tiny, "--out", out, "--steps", "1")
        assert (rc, text) == (2, f"circuitgrad zk: --out {out}: the directory holds {foreign}, which zk prove does "
                                 f"not write; name a new directory (or a bundle zk prove wrote, which is replaced)\n")
        assert sorted(os.listdir(out)) == before
        shutil.rmtree(path) if foreign == "step_007" else os.remove(path)
    rc, text = _main(capsys, "zk", "prove", tiny, "--out", out, "--private", "--workers", "1")   # a bundle: no run
    assert (rc, text) == (2, f"circuitgrad zk: --out {out}: the directory holds chain.json, which zk prove does not "
                             f"write; name a new directory (or a bundle zk prove wrote, which is replaced)\n")


def test_the_run_and_its_opening_are_placed_by_one_resolved_path(tiny, tmp_path, capsys, monkeypatch):
    """``--out x/..`` with x a symbolic link: the OS writes the run where x/.. resolves, so the opening is placed
    (and checked) by that same resolved path, not by the path as written (it was R/a/b.opening.npz, inside R)."""
    from circuitgrad.backends.zk.cli import _opening_path
    R = tmp_path / "R"
    (R / "a" / "b").mkdir(parents=True)
    (R / "c" / "run").mkdir(parents=True)
    monkeypatch.chdir(R / "a" / "b")
    os.symlink(R / "c", "x")
    os.symlink(R / "c" / "run", "y")
    assert _opening_path("x/..") == f"{R}.opening.npz"
    assert _opening_path("y") == f"{R / 'c' / 'run'}.opening.npz"
    rc, text = _main(capsys, "zk", "prove", tiny, "--private", "--workers", "1", "--steps", "2",
                     "--out", str(R / "a" / "b" / "y"))
    assert rc == 0, text
    assert sorted(os.listdir(R / "c" / "run")) == ["run.json", "step_000.proof", "step_001.proof"]
    assert sorted(os.listdir(R / "c")) == ["run", "run.opening.npz"]
    assert sorted(os.listdir(R / "a" / "b")) == ["x", "y"]
    assert (f"2 proofs in {R / 'c' / 'run'}; the final parameters and their blinding (private: keep them) in "
            f"{R / 'c' / 'run'}.opening.npz\n") in text


# ---------------------------------------------------------------- run.json bounded by the run
def _padded_run_json(path: str, size: int = (64 << 20) - 64) -> None:
    """The review's run.json: a list of empty lists, as large as the old fixed limit (64 MiB) allowed."""
    head = '{"format":"circuitgrad-zk-run","x":['
    with open(path, "w") as fh:
        fh.write(head + "[]," * ((size - len(head) - 4) // 3) + "[]]}")


def test_an_inflated_run_json_is_refused_unread_at_the_cost_of_an_honest_verify(private, tmp_path):
    """A 64 MiB run.json of empty lists was parsed before any check: 1.78 GB and 12 s against 201 MB and 3 s for
    the honest run (iris, 2 steps). Now run.json may be no larger than an honest one of as many steps as the
    directory holds step files, for this step's statement, and its size is checked before it is read."""
    step, data, run, where = private
    d = _copy(where, tmp_path)
    th, ph, err = _cost(lambda: zk.check_run(zk.Run.load(d, step, data.commitment), step, c0=run.commitments[0],
                                             d=data.commitment, steps=2))
    assert err is None
    path = os.path.join(d, "run.json")
    _padded_run_json(path)
    size = os.path.getsize(path)
    circuit = zk.compile(step, public="commitments", data_rows=data.tree.n)
    limit = R.max_run_json_bytes(2, [LP.with_soundness(circuit.statement(), s) for s in ligero.SOUNDNESS],
                                 data.tree.n)
    assert limit < 16_000
    seconds, peak, err = _cost(lambda: zk.Run.load(d, step, data.commitment))
    assert isinstance(err, B.BundleError)
    assert str(err) == f"{path}: {size} bytes, more than a run.json may have ({limit})"
    assert seconds <= 2 * th and peak <= 2 * ph, (seconds, th, peak, ph)
    # without a step (any statement up to 1 MiB) the bound still follows from the step files: about 1.2 MiB here
    seconds, peak, err = _cost(lambda: zk.Run.load(d))
    assert str(err) == f"{path}: {size} bytes, more than a run.json may have ({R.max_run_json_bytes(2)})"
    assert seconds <= 2 * th and peak <= 2 * ph, (seconds, th, peak, ph)


def test_the_run_json_bound_is_an_honest_run_json_of_that_many_steps(private, tmp_path):
    step, data, run, where = private
    widest = tuple([zk.LIGERO51.p - 1] * len(run.commitments[0]))
    for steps in (1, 3, 40):
        big = R.Run(run.statement, run.circuit_sha256, R.DataCommitment(widest, data.tree.n),
                    [widest] * (steps + 1), R.ProofFiles([os.path.join(where, "step_000.proof")] * steps))
        d = str(tmp_path / f"r{steps}")
        os.makedirs(d)
        with open(os.path.join(d, "run.json"), "w") as fh:          # what Run.save writes, without the proofs
            json.dump({"format": R.RUN_FORMAT, "version": 1, "steps": steps, "statement": big.statement,
                       "circuit_sha256": big.circuit_sha256, "data_root": [str(v) for v in widest],
                       "data_rows": data.tree.n, "commitments": [[str(v) for v in c] for c in big.commitments]},
                      fh, indent=1)
        honest = os.path.getsize(os.path.join(d, "run.json"))
        assert R.honest_run_json_bytes(steps, len(json.dumps(run.statement)), data.tree.n) == honest
        assert honest < R.max_run_json_bytes(steps, [run.statement], data.tree.n) <= honest * 9 // 8 + 4096
    # the old fixed 64 MiB refused an honest run of about 800,000 steps, which _MAX_STEPS allows
    assert R.honest_run_json_bytes(800_000, len(json.dumps(run.statement)), data.tree.n) > 64 << 20
    assert R.max_run_json_bytes(R._MAX_STEPS, [run.statement], data.tree.n) < 128 << 20


def test_a_run_of_too_many_step_files_is_refused_by_counting_names(private, tmp_path, monkeypatch):
    step, data, run, where = private
    d = _copy(where, tmp_path)
    monkeypatch.setattr(R, "_MAX_STEPS", 1)
    with pytest.raises(B.BundleError, match=rf"^{re.escape(d)}: more than 1 step files; a run has at most 1 steps$"):
        zk.Run.load(d, step, data.commitment)


# ---------------------------------------------------------------- the exact parameters first
def test_the_exact_parameters_are_checked_before_any_work_that_follows_their_sizes(iris, monkeypatch):
    """soundness_bits (whose work grows with the claimed n: the classic bound scans every distance) ran on the
    proof's claimed parameters before the verifier compared them with its own; now it runs only on those."""
    c, wit, proof = iris
    real, calls = protocol.meets, []         # the soundness test (soundness_bits, or exact near the target)
    monkeypatch.setattr(protocol, "meets", lambda p, *a, **kw: calls.append(p) or real(p, *a, **kw))
    p = proof.params
    for k, t, n in ((p.k, p.t + 1, p.n), (p.k, p.t, 2 * p.n), (8192, 8192, 65536)):
        bad = _inflated(proof, c, k, t, n)
        with pytest.raises(ligero.Reject, match=_refusal(bad.params, p)):
            ligero.check(bad, c, wit.public)
    assert calls == []
    ligero.check(proof, c, wit.public)
    assert calls == [p]


# ---------------------------------------------------------------- one parameter choice everywhere
@pytest.mark.parametrize("soundness, sizes", [("longfellow", (930, 500, 300)), ("longfellow", (7898, 7231, 985)),
                                              ("classic", (930, 500, 300))])
def test_the_parameter_choice_does_not_depend_on_the_last_bits_of_floats(monkeypatch, soundness, sizes):
    """choose() decided `soundness_bits(p) >= 100` on floats from lgamma, gammaln and logaddexp2, whose last bits
    differ between C libraries, and the verifier requires exactly the parameters its own choose() gives. Now a
    figure within EXACT_BAND of the target is decided in exact rationals. Simulated here by the worst machine:
    every float figure lands inside the band, on the wrong side of the target."""
    w, c, lookups = sizes
    want = LP.choose(w, c, lookups=lookups, soundness=soundness)
    real = LP.soundness_bits

    def wrong_side(p, **kw):
        return 100 - LP.EXACT_BAND / 2 if real(p, **kw) >= 100 else 100 + LP.EXACT_BAND / 2
    monkeypatch.setattr(LP, "soundness_bits", wrong_side)
    assert LP.choose(w, c, lookups=lookups, soundness=soundness) == want
    assert LP.meets(want, 100, lookups)
    assert not LP.meets(dataclasses.replace(want, t=want.t - 1), 100, lookups)


def test_the_verifier_accepts_the_honest_parameters_whatever_their_float_figure(iris, monkeypatch):
    c, wit, proof = iris
    real = LP.soundness_bits
    low = lambda p, **kw: min(real(p, **kw), 100 - LP.EXACT_BAND / 2)      # noqa: E731
    monkeypatch.setattr(LP, "soundness_bits", low)
    monkeypatch.setattr(protocol, "soundness_bits", low)
    assert LP.soundness_bits(proof.params, lookups=proof.lookups) < 100
    ligero.check(proof, c, wit.public)          # decided exactly: the parameters meet 100 bits
