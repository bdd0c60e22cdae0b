"""``circuitgrad zk prove|verify``: prove training steps of an example and check the proofs.

    circuitgrad zk prove examples/iris.py --steps 4 --out out/proofs
    circuitgrad zk verify examples/iris.py out/proofs --init-seed 0
    circuitgrad zk prove examples/tinygpt.py --option d=16 --option heads=2 --option layers=1 --batch 1
    circuitgrad zk prove examples/iris.py --steps 64 --private --workers 4 --out run/
    circuitgrad zk verify examples/iris.py run/ --private --c0 E1,E2,E3,E4

With ``--private`` the parameters stay private behind commitments and the batches are proved to
be rows of the model file's ``dataset()``, committed by its Merkle root (:mod:`.runs.run`); the steps are
proved on a Dask cluster (``--workers N``: a local one; ``--scheduler tcp://host:8786``: an
existing one), a step per worker, or with ``--split`` one step after the other, each shared among them. The verifier names the starting commitment it trusts (``--c0``) and the dataset
(recomputed from the model file, or ``--data-root``/``--data-rows``).

The model file (``circuitgrad/modelfile.py``) defines ``model(**options)``:
the model, loss, optimizer, dtype and data that the script trains.

Each step gets its own proof (``step_000.proof`` for Ligero, ``step_000/``
for snarkjs), and the proofs form a chain: step ``k`` proves
``params_k → params_{k+1}``, so its public inputs must equal the public
outputs of step ``k − 1``.

The bundle is untrusted input (:mod:`.runs.bundle`). ``verify`` compiles the
circuit from the model file and options named on *its own* command line,
never from the bundle, and checks every proof against it; the first
parameters must equal a checkpoint the verifier supplies (``--init FILE.npz``,
or ``--init-seed N``: the parameters ``step.init_params(N)`` gives). The step
files must be exactly those ``chain.json`` counts. The result names the
SHA-256 of the first and last parameters. snarkjs proofs are checked against
a verification key derived from that circuit (``--vkey``/``--zkey``/``--ptau``,
or this machine's own setup), never the key inside the proof.

Why one proof per step rather than one proof of the chain: the chain is
already bound by equal public values, which anyone can compare. Per-step
proofs keep the prover's memory at one step's circuit, and they let step
``k`` be proved while training continues. A failure names the step.
"""
from __future__ import annotations

import itertools
import os
import re
import time

import numpy as np

from circuitgrad import modelfile
from circuitgrad.command import UsageError, add_model_options, missing_extra
from circuitgrad.extras import MissingExtra

from .circuits.circuit import compile as zk_compile
from .circuits.field import LIGERO51
from .circuits.formats import FormatError, printable
from .circuits.statement import block, describe, params_sha256
from .runs import bundle as B
from .systems import ligero
from .systems import snarkjs as sj
from .systems.interface import ProofSystem
from .systems.registry import DEFAULT, SYSTEMS

__all__ = ["add_parser"]


def _fail(msg: str) -> SystemExit:
    """A failure: one line, exit status 1."""
    return SystemExit(f"circuitgrad zk: {printable(msg)}")


def _usage(msg: str) -> UsageError:
    """A wrong command line: one line, exit status 2 (``circuitgrad.cli.main``)."""
    return UsageError(printable(msg))


class _Phase:
    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        print(f"[{self.name}] …", flush=True)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            print(f"[{self.name}] done in {time.perf_counter() - self.t0:.2f} s", flush=True)


def _setup(a, witness: bool = True):
    """The model file's spec, compiled step and circuit for the options in ``a``, and those options resolved;
    ``witness=False``: the circuit without its witness program (what a verifier needs)."""
    from circuitgrad.command import load_model
    for flag in ("ptau", "vkey", "zkey"):          # files the command line names: a missing one is a usage error
        path = getattr(a, flag, None)
        if path is not None and not os.path.exists(path):
            raise _usage(f"--{flag} {path}: no such file")
    system = SYSTEMS[a.system]
    try:
        spec, dtype = load_model(a, system.dtype)
        step = spec.compile(dtype=dtype)
        circuit = zk_compile(step, field=system.field, witness=witness)
    except (ValueError, TypeError, OverflowError, ArithmeticError) as e:
        raise _fail(str(e)) from None
    opts = {"script": a.script, **spec.options, "width": dtype.width, "frac": dtype.frac, "field": system.field.name}
    mode = _soundness(a)
    if mode != system.default_soundness:               # the default is not written: older bundles match
        opts["soundness"] = mode
    return spec, step, circuit, opts


def _soundness(a) -> str | None:
    """The soundness analysis named by ``--soundness`` (default ``longfellow``), or None for a system that has
    its own (snarkjs), which refuses any other name than the default."""
    system = SYSTEMS[a.system]
    mode = getattr(a, "soundness", None) or ligero.DEFAULT_SOUNDNESS
    if mode in system.soundness_modes:
        return mode
    if mode != ligero.DEFAULT_SOUNDNESS:
        raise _usage(f"--soundness {mode} names an analysis of the native Ligero prover; {a.system} proofs "
                     f"(snarkjs) have their own")
    return None


def _check_checkpoint(path: str | None) -> None:
    """Usage errors for a checkpoint the command line names (``--init``, ``--final``): missing, or a directory."""
    if path is not None and not os.path.exists(path):
        raise _usage(f"{path}: no such checkpoint")
    if path is not None and os.path.isdir(path):
        raise _usage(f"{path}: a directory, not a checkpoint (an .npz file of raw parameters)")


def _params(step, circuit, init: str | None, seed: int | None) -> list[np.ndarray]:
    """Raw parameters (in the circuit's output order) from a checkpoint file or ``init_params(seed)``."""
    names, wires = circuit.output_names, circuit.output_wires
    _check_checkpoint(init)
    if init is not None:
        try:
            return B.load_params(init, names, [w.shape for w in wires], circuit.dtype)
        except FormatError as e:
            raise _fail(str(e)) from None
    p = step.init_params(seed=seed)
    return [np.asarray(p[n], dtype=np.int64) for n in names]


def _refuse_large_setup(a, system: ProofSystem, circuit) -> None:
    """Refuse to start generating powers of tau larger than ``--max-local-ptau`` (none for a transparent system)."""
    r = circuit.r1cs
    power = system.missing_setup(circuit)
    if not (power is None or a.ptau or power <= a.max_local_ptau):
        eta = 132 * 2.13 ** (power - 12) / 60
        raise SystemExit(
            f"circuitgrad zk: {r.n_constraints} constraints need powers of tau 2^{power} for {a.system}, which is "
            f"not cached; preparing it locally would take about {eta:.0f} minutes on a 2-core machine (measured: "
            f"132 s at 2^12, 281 s at 2^13). Pass --ptau FILE (a prepared ceremony file of at least 2^{power}), "
            f"shrink the circuit (--batch, --hidden, --width/--frac), pass --max-local-ptau {power} to "
            f"generate it anyway, or use the native prover: --system ligero.")


_STEP_FILE = re.compile(r"step_\d{3,}\.proof")
_STEP_DIR = re.compile(r"step_\d{3,}")
_SNARKJS_FILES = {"proof.json", "public.json", "verification_key.json", "statement.json"}


def _ours(out: str, e: str, index: set[str]) -> bool:
    """Whether ``out/e`` is a file ``zk prove`` writes in such a directory: ``index`` (``chain.json`` …), a step
    proof (``step_000.proof``, a regular file), or a snarkjs step directory holding only a snarkjs proof's files."""
    path = os.path.join(out, e)
    if os.path.islink(path):
        return False
    if e in index or _STEP_FILE.fullmatch(e):
        return os.path.isfile(path)
    if _STEP_DIR.fullmatch(e) and os.path.isdir(path):
        inner = os.listdir(path)
        return all(f in _SNARKJS_FILES and os.path.isfile(os.path.join(path, f))
                   and not os.path.islink(os.path.join(path, f)) for f in inner)
    return False


def _out_dir(out: str, index: set[str]) -> str:
    """The directory ``--out`` names, resolved once through symbolic links (``os.path.realpath``): the run or
    bundle is written there and every check is made on that same path. A usage error when it is not a directory,
    or when it holds anything ``zk prove`` did not write (``index``, step proofs): a bundle is written over only
    a bundle, never over the user's own files."""
    real = os.path.realpath(out)
    above = real
    while not os.path.lexists(above):
        above = os.path.dirname(above)
    if above != real and not os.path.isdir(above):
        raise _usage(f"--out {out}: {above} is not a directory")
    if os.path.lexists(real) and not os.path.isdir(real):
        raise _usage(f"--out {out}: exists and is not a directory; name a new directory (or a bundle zk prove "
                     f"wrote, which is replaced)")
    if os.path.isdir(real):
        foreign = sorted(e for e in os.listdir(real) if not _ours(real, e, index))
        if foreign:
            raise _usage(f"--out {out}: the directory holds {printable(foreign[0])}, which zk prove does not "
                         f"write; name a new directory (or a bundle zk prove wrote, which is replaced)")
    return real


def _make_dir(out: str, real: str) -> None:
    try:
        os.makedirs(real, exist_ok=True)
    except OSError as e:
        raise _usage(f"--out {out}: cannot create the directory: {e.strerror or e}") from None


def _remove_ours(real: str) -> None:
    """Remove a previous bundle's files (``_out_dir`` checked they are all ours): no stale step is left behind."""
    for e in os.listdir(real):
        path = os.path.join(real, e)
        if os.path.isdir(path) and not os.path.islink(path):
            for f in os.listdir(path):
                os.remove(os.path.join(path, f))
            os.rmdir(path)
        else:
            os.remove(path)


def _prove(a) -> int:
    if a.steps < 1:
        raise _usage(f"--steps must be at least 1, got {a.steps}")
    _check_checkpoint(a.init)
    if a.private:
        return _prove_private(a)
    if a.split:
        raise _usage("--split proves a --private run's steps one after the other, each shared among the workers; "
                     "without --private, --workers already shares each step")
    cluster = _cluster(a, "zk prove")
    if cluster is not None and not SYSTEMS[a.system].split_steps:
        raise _usage("--workers and --scheduler share a step's rows among Dask workers with the native prover: "
                     "use --system ligero")
    out = _out_dir(a.out, {"chain.json", "final.npz"})
    with _Phase("compile"):
        spec, step, circuit, opts = _setup(a)
    system = SYSTEMS[a.system]
    options = _prove_options(a, system)
    if cluster is not None:
        options["cluster"] = cluster
    statement = system.statement(circuit, _soundness(a))
    print(block(describe(circuit), _soundness(a), "public statement"))
    _refuse_large_setup(a, system, circuit)
    names = circuit.output_names
    first = _params(step, circuit, a.init, a.seed)
    params = dict(zip(names, first))
    try:
        batches = modelfile.batches(spec, a.seed, a.script)
        first_batch = next(batches)
    except modelfile.ModelFileError as e:
        raise _fail(str(e)) from None
    batches = itertools.chain([first_batch], batches)
    _make_dir(a.out, out)
    _remove_ours(out)
    for k in range(a.steps):
        try:
            x, y = modelfile.check_batch(step, next(batches), k, a.script)
        except modelfile.ModelFileError as e:
            raise _fail(str(e)) from None
        with _Phase(f"witness {k}"):                # every system's prove checks the witness first
            wit = circuit.witness(params, x, y)
        if k == a.steps - 1:
            circuit.release_witness_program()     # the last witness is made: its memory goes to the prover
        where = os.path.join(out, system.step_name(k))
        with _Phase(f"{'setup+prove' if system.trusted_setup else 'prove'} {k}"):
            proof = system.prove(circuit, wit, **options)
        system.save(proof, where)
        params = step.step(params, x, y)
        print(f"step {k}: proof in {where} ({len(proof.public)} public values, {system.summary(proof, where)})")
    last = [np.asarray(params[n], dtype=np.int64) for n in names]
    np.savez(os.path.join(out, "final.npz"), **dict(zip(names, last)))
    h0, h1 = params_sha256(names, first), params_sha256(names, last)
    B.write_chain(out, a.steps, a.system, statement, circuit.digest().hex(), h0, h1, opts)
    print(f"first parameters sha256 {h0}")
    print(f"last parameters sha256 {h1} (saved as {os.path.join(out, 'final.npz')})")
    return 0


def _prove_options(a, system: ProofSystem) -> dict:
    """What ``system.prove`` takes from the command line: the soundness analysis where the system has them,
    the powers of tau where it has a setup."""
    options = {"log": lambda s: print("  " + s, flush=True)}
    if system.soundness_modes:
        options["soundness"] = _soundness(a)
    if system.trusted_setup:
        options["ptau_file"] = a.ptau
    return options


def _elements(text: str, what: str) -> tuple:
    """``E1,E2,E3,E4``: a digest of four canonical field elements, in decimal."""
    parts = text.split(",")
    if len(parts) != 4 or not all(x.isdigit() and int(x) < LIGERO51.p for x in parts):
        raise _usage(f"{what} must be four field elements in [0, p) separated by commas, as zk prove printed it")
    return tuple(int(x) for x in parts)


def _show(d) -> str:
    return ",".join(str(v) for v in d)


def _dataset(spec, step, script):
    from .runs.run import commit_dataset
    try:
        return commit_dataset(step, *modelfile.dataset(spec, script))
    except modelfile.ModelFileError as e:
        raise _fail(str(e)) from None


def _cluster(a, command: str):
    """``--workers N`` or ``--scheduler ADDRESS`` (None: neither), checked before any work: one of them, at least
    one worker, and Dask installed (else one line naming the extra)."""
    if a.workers is not None and a.scheduler is not None:
        raise _usage("--workers starts a local Dask cluster and --scheduler uses an existing one: name one of them")
    if a.workers is not None and a.workers < 1:
        raise _usage(f"--workers must be at least 1, got {a.workers}")
    from .systems.cluster import require_dask
    try:
        require_dask(a.scheduler or a.workers)
    except MissingExtra as e:
        asked = f"--scheduler {a.scheduler}" if a.scheduler is not None else f"--workers {a.workers}"
        raise _fail(e.line(f"{command} {asked}")) from None
    return a.scheduler or a.workers


def _prove_private(a) -> int:
    from .runs.run import prove_run
    if not SYSTEMS[a.system].private_runs:
        raise _usage("a --private run is proved by the native prover: use --system ligero")
    if a.split and (a.workers or 0) < 2 and a.scheduler is None:
        raise _usage("--split shares each step's rows among Dask workers: add --workers N (N >= 2) or --scheduler")
    _cluster(a, "zk prove --private")
    from .systems.cluster import dask_available
    dask = dask_available()
    out = _out_dir(a.out, {"run.json"})
    opening = _opening_path(a.out)
    with _Phase("compile"):
        spec, step, circuit, _ = _setup(a)
    with _Phase("commit the dataset"):
        data = _dataset(spec, step, a.script)
    try:
        batches = [modelfile.check_batch(step, b, k, a.script)
                   for k, b in enumerate(itertools.islice(modelfile.batches(spec, a.seed, a.script), a.steps))]
    except modelfile.ModelFileError as e:
        raise _fail(str(e)) from None
    names = circuit.output_names
    params = dict(zip(names, _params(step, circuit, a.init, a.seed)))
    cluster = a.scheduler or a.workers                # None: a local cluster, a worker per core
    if cluster is None and not dask:                  # none asked for: prove here, without Dask
        cluster, where = 1, "here (Dask is not installed: pip install 'circuitgrad[zk]' to prove on a local cluster)"
    elif cluster is None:
        where = "on a local cluster, a worker per core"
    else:
        where = f"on {cluster}" if a.scheduler else "here" if cluster == 1 else f"on {cluster} local workers"
    if a.split:
        where += ", each step shared among the workers"
    with _Phase(f"prove {a.steps} steps {where}"):
        try:
            run = prove_run(step, params, batches, dataset=data, cluster=cluster, soundness=_soundness(a),
                            split=a.split)
        except MissingExtra as e:
            raise _fail(str(e)) from None
    _make_dir(a.out, out)
    _remove_ours(out)                         # a previous run's files (all ours: _out_dir checked)
    run.save(out)                             # the resolved path: the one _opening_path checked
    np.savez(opening, randomness=np.array(run.opening["randomness"], dtype=np.int64),
             **{n: run.opening["params"][n] for n in names})
    print(block(run.description, _soundness(a), "public statement"))
    print(f"dataset: {data.commitment.rows} rows, root {_show(data.commitment.root)}")
    print(f"starting commitment c0 {_show(run.commitments[0])}")
    print(f"final commitment {_show(run.commitments[-1])}")
    print(f"{a.steps} proofs in {out}; the final parameters and their blinding (private: keep them) in {opening}")
    return 0


def _opening_path(out: str) -> str:
    """Where the private opening of the run written to ``out`` goes: ``RUN.opening.npz`` beside the run directory,
    never inside it (publishing the run must not publish the final weights and their blinding)."""
    run = os.path.realpath(out)                # resolved as the OS resolves it when the run is written (_out_dir):
    opening = run + ".opening.npz"             # 'run/', 'run/.', './run' and a symbolic link to it are all 'run'
    inside = os.path.realpath(os.path.dirname(opening))
    if os.path.commonpath([inside, run]) == run:
        raise _usage(f"--out {out}: the private opening would be written to {opening}, inside the run directory "
                     f"that is published; name the run directory by a path with a parent outside it")
    return opening


def _verify_private(a) -> int:
    from .runs.run import DataCommitment, Run, check_run
    if a.c0 is None:
        raise _usage("name the commitment the run starts from, which you trust: --c0 E1,E2,E3,E4")
    c0 = _elements(a.c0, "--c0")
    with _Phase("compile"):                    # first: the run's files are read only against a circuit
        spec, step, _, _ = _setup(a, witness=False)
    if a.data_root is not None:
        if a.data_rows is None:
            raise _usage("--data-root needs --data-rows (the number of rows the root commits to)")
        if a.data_rows < 1:
            raise _usage(f"--data-rows must be at least 1, got {a.data_rows}")
        d = DataCommitment(_elements(a.data_root, "--data-root"), a.data_rows)
    else:
        with _Phase("commit the dataset of the model file"):
            d = _dataset(spec, step, a.script).commitment
    try:                                       # run.json (no larger than an honest one for this step and dataset)
        run = Run.load(a.proofs, step, d)      # and the names of the step files; each proof when checked
    except FormatError as e:
        raise _fail(str(e)) from None
    opened = sorted(e for e in os.listdir(a.proofs) if e.endswith(".opening.npz"))
    if opened:                                 # written there by an older zk prove --private --out .
        print(f"{a.proofs}: WARNING: {printable(opened[0])} in the run directory looks like a private opening (final "
              f"parameters and their blinding): remove it before you publish the run")
    c_final = _elements(a.c_final, "--c-final") if a.c_final else None
    try:
        check_run(run, step, c0, d, c_final, a.steps, soundness=_soundness(a))
    except (ligero.Reject, ValueError) as e:
        print(f"{a.proofs}: INVALID: {printable(str(e))}")
        print("VERIFICATION FAILED")
        return 1
    print(block(describe(run.compiled[2]), _soundness(a)))     # the verifier's circuit: run.statement equals it
    print(f"dataset: {d.rows} rows, root {_show(d.root)}")
    print(f"from c0 {_show(c0)} to {_show(run.commitments[-1])}")
    print(f"all {run.steps} proofs verify and chain")
    return 0


def _check_step(path: str, system: str, circuit, keys: dict, soundness: str | None = None):
    """Load the proof at ``path`` as a proof of the registered ``system`` (no larger than an honest one of
    ``circuit``) and check it against ``circuit`` and the verifier's ``keys`` (raise on failure)."""
    impl = SYSTEMS[system]
    proof = impl.load(path, circuit, soundness)
    impl.check(proof, circuit, soundness=soundness, **keys)
    return proof


def _option(options: dict, key: str) -> str:
    return f"{options[key]!r:.40}" if key in options else "unset"


def _check_proofs_dir(a) -> None:
    """Usage errors for the directory ``zk verify`` names: missing, not a directory, or a run of the other kind
    than ``--private`` says (a private run holds ``run.json``, a bundle of public steps ``chain.json``)."""
    path = a.proofs
    if not os.path.exists(path):
        raise _usage(f"{path}: not a proof directory (zk prove --out writes one)")
    if not os.path.isdir(path):
        raise _usage(f"{path}: a file, not a proof directory: name the directory zk prove --out wrote")
    run, chain = (os.path.lexists(os.path.join(path, f)) for f in ("run.json", "chain.json"))
    if run and not chain and not a.private:
        raise _usage(f"{path}: holds a private run (run.json, written by zk prove --private): verify it with "
                     f"--private --c0 E1,E2,E3,E4 (the starting commitment you trust)")
    if chain and not run and a.private:
        raise _usage(f"{path}: holds proofs of public steps (chain.json), not a private run: verify it without "
                     f"--private, with --init FILE.npz or --init-seed N")
    private = [f for f, v in (("--c0", a.c0), ("--c-final", a.c_final), ("--data-root", a.data_root),
                              ("--data-rows", a.data_rows)) if v is not None]
    public = [f for f, v in (("--init", a.init), ("--init-seed", a.init_seed), ("--final", a.final)) if v is not None]
    if private and not a.private:
        raise _usage(f"{private[0]} checks a private run: add --private")
    if public and a.private:
        raise _usage(f"{public[0]} names parameters of a public run; a --private run starts from the commitment "
                     f"--c0 names")
    _check_checkpoint(a.init)
    _check_checkpoint(a.final)


def _verify(a) -> int:
    if a.steps is not None and a.steps < 1:
        raise _usage(f"--steps must be at least 1, got {a.steps}")
    _check_proofs_dir(a)
    if a.private:
        return _verify_private(a)
    if (a.init is None) == (a.init_seed is None):
        raise _usage("name the parameters the run starts from, which the verifier trusts: --init FILE.npz "
                    "(a checkpoint) or --init-seed N (step.init_params(N))")
    try:
        bundle = B.read(a.proofs, a.system, SYSTEMS)
    except FormatError as e:
        raise _fail(str(e)) from None
    if a.steps is not None and a.steps != bundle.steps:
        raise _fail(f"{a.proofs} holds {bundle.steps} steps, you asked to verify {a.steps}")
    with _Phase("compile"):
        _, step, circuit, opts = _setup(a, witness=False)
    system = SYSTEMS[a.system]
    mode = _soundness(a)
    statement = system.statement(circuit, mode)
    ok = True
    differ = [f"{printable(k)[:40]}={_option(bundle.options, k)} (yours {_option(opts, k)})"
              for k in list(opts) + sorted(set(bundle.options) - set(opts)) if k != "script"
              and (k in opts, opts.get(k)) != (k in bundle.options, bundle.options.get(k))]
    claimed = system.soundness_of(bundle.statement, circuit)
    if bundle.statement != statement and claimed is not None:      # said once, before any proof is read: each
        print(f"{a.proofs}: the bundle claims the {claimed} soundness bound, you require {mode}: verify with "
              f"--soundness {claimed}")                            # would only fail its size or parameters
        print("VERIFICATION FAILED")
        return 1
    if bundle.statement != statement:
        ok = False
        print(f"{a.proofs}: chain.json names another statement than the one you verify"
              + (f" (its options differ: {', '.join(differ)})" if differ else ""))
    elif differ:
        more = f" and {len(differ) - 8} more" if len(differ) > 8 else ""
        print(f"{a.proofs}: chain.json names other options than yours, for the same statement: "
              f"{', '.join(differ[:8])}{more}")
    try:                                       # from what the verifier names or made itself, never the bundle
        keys = system.verifier_keys(circuit, a.vkey, a.zkey, a.ptau)
    except (FormatError, sj.ToolMissing, sj.SnarkjsError, ValueError) as e:
        raise _fail(str(e)) from None
    names = circuit.output_names
    prev = _params(step, circuit, a.init, a.init_seed)
    first = prev
    for path in bundle.paths:
        where = os.path.relpath(path, a.proofs)
        try:
            proof = _check_step(path, a.system, circuit, keys, mode)
            outs, ins = circuit.split_public(proof.public)
        except (FormatError, ligero.Reject, ValueError, RecursionError) as e:
            print(f"{where}: {a.system} INVALID: {printable(str(e))}")
            ok, prev = False, None
            continue
        chained = prev is not None and all(np.array_equal(i, p) for i, p in zip(ins.values(), prev))
        what = "the starting parameters" if path == bundle.paths[0] else "the previous step"
        print(f"{where}: {a.system} OK" + ("" if chained else f" (does not continue from {what})"))
        ok = ok and chained
        prev = list(outs.values())
    if a.final is not None and prev is not None:
        final = _params(step, circuit, a.final, None)
        same = all(np.array_equal(f, p) for f, p in zip(final, prev))
        print(f"{a.final}: {'equals' if same else 'DIFFERS FROM'} the last step's parameters")
        ok = ok and same
    print(block(describe(circuit), mode))
    print(f"first parameters sha256 {params_sha256(names, first)}")
    if ok:
        print(f"last parameters sha256 {params_sha256(names, prev)}")
    print(f"all {bundle.steps} proofs verify" if ok else "VERIFICATION FAILED")
    return 0 if ok else 1


def _one_line(fn):
    """``zk prove``/``zk verify``: a missing optional dependency wherever it is imported is one line naming its
    extra (``pip install 'circuitgrad[zk]'``), exit status 1, not a traceback."""
    def run(a) -> int:
        try:
            return fn(a)
        except ImportError as e:
            raise _fail(missing_extra(e)) from None
    return run


def _circuit_args(p) -> None:
    """The options that determine the circuit: the prover and the verifier name them the same way."""
    add_model_options(p)
    p.add_argument("--system", choices=SYSTEMS, default=DEFAULT,
                   help="ligero (native, transparent, default), groth16 or plonk (snarkjs)")
    p.add_argument("--width", type=int, default=None, help="fixed-point width (default 16 for ligero, else 32)")
    p.add_argument("--frac", type=int, default=None, help="fractional bits (default width/2)")
    p.add_argument("--ptau", default=None, help="prepared powers-of-tau file (default: this machine's cache)")
    p.add_argument("--soundness", choices=ligero.SOUNDNESS, default=None,
                   help="ligero: the soundness analysis the parameters must meet at 100 bits: longfellow (the "
                        "default, Cascudo et al. 2025) or classic (Ames et al. 2017: larger proofs); the "
                        "verifier must name the same one (docs/ZK.md)")


def add_parser(sub) -> None:
    """Register ``zk prove`` and ``zk verify`` under the ``circuitgrad`` command."""
    zk = sub.add_parser("zk", help="zero-knowledge proofs of training steps").add_subparsers(dest="zk_cmd",
                                                                                            required=True)
    p = zk.add_parser("prove", help="prove training steps of an example script")
    _circuit_args(p)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--out", default="proofs", help="the bundle directory to write (default proofs/)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial parameters and the batch order")
    p.add_argument("--init", default=None, help="start from this checkpoint (.npz of raw parameters)")
    p.add_argument("--max-local-ptau", type=int, default=14,
                   help="largest powers of tau to generate locally without --ptau (default 14)")
    p.add_argument("--private", action="store_true",
                   help="keep the parameters private behind commitments and prove the batches are rows of the "
                        "model file's dataset()")
    p.add_argument("--workers", type=int, default=None,
                   help="prove on a local Dask cluster of N workers: --private, a step per worker (default: one per "
                        "core; 1: in this process); otherwise each step's rows shared among them")
    p.add_argument("--scheduler", default=None, help="prove on the Dask cluster at this address (tcp://host:8786), "
                                                     "as --workers does")
    p.add_argument("--split", action="store_true",
                   help="--private: prove the steps one after the other, each one's rows shared among the workers "
                        "(a step too large for one worker); the same proofs")
    p.set_defaults(fn=_one_line(_prove))
    v = zk.add_parser("verify", help="verify a bundle written by 'zk prove' against a model you name")
    _circuit_args(v)
    v.add_argument("proofs", help="the bundle directory (untrusted: it is only read)")
    v.add_argument("--init", default=None, help="the checkpoint the run must start from (.npz of raw parameters)")
    v.add_argument("--init-seed", type=int, default=None, help="the run starts from step.init_params(N)")
    v.add_argument("--final", default=None, help="also check that the last parameters equal this checkpoint")
    v.add_argument("--steps", type=int, default=None, help="the number of steps the bundle must hold")
    v.add_argument("--vkey", default=None, help="snarkjs: a verification key you trust (verification_key.json)")
    v.add_argument("--zkey", default=None, help="groth16: a proving key, checked against the circuit and --ptau")
    v.add_argument("--private", action="store_true", help="the directory is a private run (zk prove --private)")
    v.add_argument("--c0", default=None, help="--private: the commitment the run starts from, E1,E2,E3,E4")
    v.add_argument("--c-final", default=None, help="--private: also require this final commitment")
    v.add_argument("--data-root", default=None, help="--private: the dataset root you trust (default: recomputed "
                                                     "from the model file's dataset)")
    v.add_argument("--data-rows", type=int, default=None, help="--private: the rows --data-root commits to")
    v.set_defaults(fn=_one_line(_verify))
