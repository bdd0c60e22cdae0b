"""Proofs of whole training runs with private weights and committed data.

::

    data = zk.commit_dataset(step, X, Y)                     # DataTree; data.commitment is public
    run = zk.prove_run(step, params0, batches, dataset=data, cluster=None)   # a LocalCluster; or a Dask cluster
    assert zk.verify_run(run, step, c0=run.commitments[0], d=data.commitment)
    run.save("run/"); zk.Run.load("run/")

A run of ``N`` steps is ``N`` independent proofs of the private step circuit
(``zk.compile(step, public="commitments")``). Proof ``k`` claims: *some parameters with
commitment ``C_k``, trained one step on a batch of rows of the dataset with root ``D``, give
parameters with commitment ``C_{k+1}``*. The statements chain by commitment: the blinding of
``C_{k+1}`` is drawn once and used both as step ``k``'s ``r_after`` and step ``k+1``'s ``r_before``,
so a verifier given ``C_0`` and ``D`` checks the whole run by checking each proof against
``(C_k, C_{k+1}, D)``. A removed, swapped or repeated step breaks the chain: its proof's
commitments are not the neighbours'.

One proof per step, not an aggregated proof: the steps then prove in parallel with no
coordination (Dask, :mod:`.distributed`), a failed step is re-proved alone, and the verifier's
work is linear in the run, as an aggregate's would be with our transparent prover (Ligero has no
succinct recursion). ``docs/ZK.md`` gives the measured figures.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..circuits.commit import DataTree, check_randomness, commit, fresh_randomness
from ..circuits.field import LIGERO51
from ..circuits.formats import printable
from ..circuits.statement import describe
from ..systems import ligero
from ..systems.ligero import LigeroProof, Reject
from ..systems.registry import SYSTEMS
from .bundle import BundleError, check_fields, check_step_files, read_json

__all__ = ["Run", "ProofFiles", "Dataset", "DataCommitment", "commit_dataset", "prove_run", "verify_run", "check_run",
           "RUN_FORMAT", "max_run_json_bytes", "honest_run_json_bytes"]

RUN_FORMAT = "circuitgrad-zk-run"
_VERSION = 1
_MAX_STEPS = 1_000_000
_MAX_STATEMENT = 1 << 20        # a statement's JSON bytes, when the reader of a run knows no circuit
#: the proof system of every step: transparent (no setup to trust), and it proves the commitments' lookups
SYSTEM = SYSTEMS["ligero"]
_STEP_FILE = re.compile(r"step_\d+" + re.escape(SYSTEM.suffix))


@dataclass(frozen=True)
class DataCommitment:
    """What a verifier trusts about a dataset: its Merkle root and its number of rows."""
    root: tuple
    rows: int


@dataclass
class Dataset:
    """A committed dataset (the prover's side): the tree of its raw rows."""
    tree: DataTree

    @property
    def commitment(self) -> DataCommitment:
        return DataCommitment(self.tree.root, self.tree.n)


def commit_dataset(step, x, y=None) -> Dataset:
    """Commit the dataset ``x`` (inputs, any number of rows) and ``y`` (class labels or target rows) in
    ``step``'s fixed-point dtype: one row per sample, the input row then the target row, raw."""
    from circuitgrad import arguments
    from circuitgrad.types import NdArrayType
    fx = _fixed(step)
    xr = np.asarray(fx._x(x, "predict"), dtype=np.int64)
    rows = [xr.reshape(len(xr), -1)]
    if y is not None:
        T = fx.y_type
        yr = arguments.targets(y, NdArrayType((len(xr),) + T.shape[1:], T.dtype), fx.dtype, np, "dataset")
        rows.append(np.asarray(yr, dtype=np.int64).reshape(len(xr), -1))
    return Dataset(DataTree(np.concatenate(rows, axis=1), fx.dtype.width, LIGERO51))


def _fixed(step):
    from circuitgrad.types import Fixed
    if not isinstance(step.dtype, Fixed):
        raise TypeError(f"a private run is proved in fixed point: compile the model with dtype=cg.fixed(16, 8), "
                        f"got {step.dtype}")
    return step


@dataclass
class Run:
    """The proofs of a run and their public chain: ``commitments[k]`` before step ``k``, ``[N]`` at the end.

    ``opening`` (the final raw parameters and the blinding of ``C_N``) stays with the prover: :meth:`save`
    never writes it.
    """
    statement: str
    circuit_sha256: str
    data: DataCommitment
    commitments: list[tuple]
    proofs: Sequence[LigeroProof]       # a list, or the files of a loaded run (:class:`ProofFiles`), read when used
    opening: dict | None = field(default=None, repr=False)
    #: ``(step, rows, circuit)`` that :meth:`Run.load` compiled for the verifier (reused by :func:`check_run`)
    compiled: tuple | None = field(default=None, repr=False, compare=False)
    #: the proved circuit's statement as data (``statement.describe``), which :func:`prove_run` sets for
    #: printing (``statement.block``); never saved, never checked
    description: dict | None = field(default=None, repr=False, compare=False)

    @property
    def steps(self) -> int:
        return len(self.proofs)

    def save(self, directory: str) -> None:
        """``run.json`` (statement, chain, data commitment) and ``step_000.proof`` … in ``directory``."""
        os.makedirs(directory, exist_ok=True)
        names = [SYSTEM.step_name(k) for k in range(self.steps)]
        same = set()                           # a loaded run saved over its own files: they stay as they are
        if isinstance(self.proofs, ProofFiles):
            same = {e for e, src in zip(names, self.proofs.paths) if os.path.exists(os.path.join(directory, e))
                    and os.path.samefile(os.path.join(directory, e), src)}
        stale = [e for e in os.listdir(directory) if _STEP_FILE.fullmatch(e) and e not in same]
        for e in stale:
            os.remove(os.path.join(directory, e))
        for k, e in enumerate(names):
            if e not in same:
                self.proofs[k].save(os.path.join(directory, e))     # one at a time for a loaded run
        with open(os.path.join(directory, "run.json"), "w") as fh:
            json.dump({"format": RUN_FORMAT, "version": _VERSION, "steps": self.steps, "statement": self.statement,
                       "circuit_sha256": self.circuit_sha256, "data_root": [str(v) for v in self.data.root],
                       "data_rows": self.data.rows, "commitments": [[str(v) for v in c] for c in self.commitments]},
                      fh, indent=1)

    @classmethod
    def load(cls, directory: str, step=None, data: "DataCommitment | None" = None) -> "Run":
        """Read a run directory as untrusted input: every field's type, count and range is checked.

        The step files are counted first (at most ``_MAX_STEPS``), and ``run.json`` is read only if it is no
        larger than an honest one of that many steps can be (:func:`max_run_json_bytes`): with the ``step`` and
        the dataset commitment ``data`` the verifier trusts, for exactly this step's statement; without them,
        for any statement up to 1 MiB. Its size is checked before a byte of it is decoded. The step files
        are checked to be exactly those ``run.json`` counts (regular files, neither symbolic nor hard links);
        each proof is read only when used (:class:`ProofFiles`), one at a time."""
        if (step is None) != (data is None):
            raise TypeError("Run.load: pass both step and data (the DataCommitment you trust), or neither")
        if step is None:
            return _load(directory)
        circuit = _circuit(_fixed(step), data.rows)
        run = _load(directory, [SYSTEM.statement(circuit, s) for s in SYSTEM.soundness_modes], data.rows)
        run.compiled = (step, data.rows, circuit)
        return run


class ProofFiles(Sequence):
    """The step proofs of a loaded run, read from their files one at a time, when used: a run of ``N`` steps
    costs the memory of one proof, not ``N`` (:func:`check_run` reads each with the size its circuit allows)."""

    def __init__(self, paths: list[str]):
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self.load(i) for i in range(len(self))[k]]
        return self.load(range(len(self))[k])

    def load(self, k: int, limit: int | None = None, soundness: str | None = None) -> LigeroProof:
        """Proof ``k`` (a :class:`FormatError` names the file if it is not one), at most ``limit`` bytes; with
        ``soundness``, one whose header claims another analysis is refused by that mismatch first."""
        return ligero.load(self.paths[k]) if limit is None else ligero.load(self.paths[k], limit, soundness)


def _elements(v: Any, n: int, what: str) -> tuple:
    """``n`` canonical field elements written as decimal strings."""
    if not isinstance(v, list) or len(v) != n:
        raise BundleError(f"run.json: {what} must be a list of {n} field elements")
    out = []
    for s in v:
        if not isinstance(s, str) or not re.fullmatch(r"0|[1-9][0-9]{0,20}", s) or int(s) >= LIGERO51.p:
            raise BundleError(f"run.json: {what} holds {printable(str(s))[:40]!r}, not a canonical field element "
                              f"(a decimal string in [0, p))")
        out.append(int(s))
    return tuple(out)


def _capacity() -> int:
    from ..circuits.poseidon2 import poseidon2
    return poseidon2(LIGERO51).capacity


def honest_run_json_bytes(steps: int, statement_bytes: int, rows: int) -> int:
    """The size of the ``run.json`` :meth:`Run.save` writes for ``steps`` steps, a statement of
    ``statement_bytes`` bytes as JSON (quotes and escapes included) and ``rows`` data rows, with every field
    element at its widest (16 decimal digits): an upper bound on an honest one's size, exact in its structure
    (``json.dump(..., indent=1)``: a fixed part plus the same bytes for each of the ``steps + 1`` commitments)."""
    c, e = _capacity(), "9" * len(str(LIGERO51.p - 1))

    def size(k: int) -> int:
        return len(json.dumps({"format": RUN_FORMAT, "version": _VERSION, "steps": steps, "statement": "",
                               "circuit_sha256": "0" * 64, "data_root": [e] * c, "data_rows": rows,
                               "commitments": [[e] * c] * k}, indent=1))
    one = size(1)
    return one + steps * (size(2) - one) + statement_bytes - 2


def max_run_json_bytes(steps: int, statements: Sequence[str] | None = None, rows: int | None = None) -> int:
    """The most bytes a ``run.json`` of ``steps`` steps may have: :func:`honest_run_json_bytes` for the longest
    of ``statements`` (the honest ones; any of up to 1 MiB when None) and ``rows`` (any up to 2^63 when None),
    plus 1/8 and 4 KiB of margin for another writer's whitespace. It grows with the run: 64 MiB, the old fixed
    limit, is an honest run of about 800,000 steps."""
    sb = max((len(json.dumps(s)) for s in statements), default=2) if statements is not None else _MAX_STATEMENT
    honest = honest_run_json_bytes(steps, sb, rows if rows is not None else 1 << 63)
    return honest + honest // 8 + 4096


def _count_steps(directory: str) -> int:
    """The step files in ``directory`` (names only, none read): a :class:`BundleError` past ``_MAX_STEPS``."""
    n = 0
    with os.scandir(directory) as it:
        for e in it:
            if _STEP_FILE.fullmatch(e.name):
                n += 1
                if n > _MAX_STEPS:
                    raise BundleError(f"{printable(directory)}: more than {_MAX_STEPS} step files; a run has at most "
                                      f"{_MAX_STEPS} steps")
    return n


def _load(directory: str, statements: Sequence[str] | None = None, rows: int | None = None) -> Run:
    c = _capacity()
    path = os.path.join(directory, "run.json")
    if not os.path.isdir(directory) or not os.path.lexists(path):
        raise BundleError(f"{printable(directory)}: not a run directory (no run.json; zk.prove_run(...).save "
                          f"writes one)")
    # run.json is no larger than an honest one of as many steps as there are step files: its size, not the
    # prover's padding, bounds the memory and time of decoding it (checked before it is read)
    d = read_json(path, max_run_json_bytes(max(1, _count_steps(directory)), statements, rows), "run.json")
    if not isinstance(d, dict) or d.get("format") != RUN_FORMAT:
        raise BundleError(f"{path}: not a circuitgrad run (format must be {RUN_FORMAT!r})")
    check_fields(path, d, {"version": int, "steps": int, "statement": str, "circuit_sha256": str, "data_rows": int,
                           "data_root": list, "commitments": list})
    if d["version"] != _VERSION:
        raise BundleError(f"{path}: run version {d['version']} is not supported (this is version {_VERSION})")
    n = d["steps"]
    if not 1 <= n <= _MAX_STEPS:
        raise BundleError(f"{path}: steps must be in 1..{_MAX_STEPS}, got {n}")
    if not re.fullmatch(r"[0-9a-f]{64}", d["circuit_sha256"]):
        raise BundleError(f"{path}: circuit_sha256 must be 64 lowercase hex digits")
    if d["data_rows"] < 1:
        raise BundleError(f"{path}: data_rows must be positive")
    if len(d["commitments"]) != n + 1:
        raise BundleError(f"{path}: {n} steps need {n + 1} commitments, got {len(d['commitments'])}")
    commitments = [_elements(v, c, f"commitment {k}") for k, v in enumerate(d["commitments"])]
    names = [SYSTEM.step_name(k) for k in range(n)]
    check_step_files(directory, names, "run.json")
    proofs = ProofFiles([os.path.join(directory, e) for e in names])
    return Run(d["statement"], d["circuit_sha256"], DataCommitment(_elements(d["data_root"], c, "data_root"),
               d["data_rows"]), commitments, proofs)


# ------------------------------------------------------------------------------------------ proving
def _circuit(step, rows: int, run: "Run | None" = None):
    """The private step circuit of ``step`` for a dataset of ``rows`` rows (the one ``run`` was loaded against,
    when it was: :meth:`Run.load` compiled it to bound ``run.json``, and :func:`check_run` does not again)."""
    from ..circuits.circuit import compile
    if run is not None and run.compiled is not None and run.compiled[0] is step and run.compiled[1] == rows:
        return run.compiled[2]
    return compile(step, public="commitments", data_rows=rows)


def prove_run(step, params0: Mapping[str, np.ndarray], batches: Iterable, dataset: Dataset, cluster: Any = None,
              r0: Sequence[int] | None = None, progress: bool = True,
              log: Callable[[str], None] | None = None, rng: np.random.Generator | None = None,
              soundness: str = ligero.DEFAULT_SOUNDNESS, split: bool = False) -> Run:
    """Prove training ``step`` from ``params0`` (raw or float parameters and optimizer state) on
    ``batches`` (pairs ``(x, y)`` whose rows are rows of ``dataset``).

    The trajectory is computed first with the fixed-point interpreter; then every step is proved
    independently on a Dask cluster: by default a ``LocalCluster`` with a worker per core (here, one step
    after the other, where Dask is not installed);
    ``cluster`` may be a ``distributed.Client``, a cluster object, a scheduler address such as
    ``"tcp://host:8786"``, a number of local workers, or ``"serial"`` to prove here, one step after
    the other (see :func:`.distributed.prove_steps`). ``split=True`` proves the steps one after the other
    instead, each one's rows shared among all the workers (for a step one worker cannot hold): the same
    proofs. ``r0`` is the blinding of ``C_0`` when the starting
    commitment was published before (default: fresh).

    ``rng`` (tests and benchmarks only: it is not secret) draws the blindings and every step's prover
    randomness, so that a run is reproducible bit for bit wherever its steps are proved. By default
    both come from the OS's CSPRNG. ``soundness`` is the analysis every step's Ligero parameters meet
    (``"longfellow"`` or ``"classic"``, see ``ligero.prove``); the run's statement names it.
    """
    ligero.check_soundness(soundness)
    from ..systems.cluster import require_dask
    from .distributed import prove_steps
    require_dask(cluster)                          # before any work: a missing Dask is one line (the [zk] extra)
    fx = _fixed(step)
    circuit = _circuit(fx, dataset.tree.n)
    names = circuit.output_names
    missing = [n for n in names if n not in params0]
    if missing:
        raise KeyError(f"prove_run: params0 lacks {missing}; pass step.init_params(...) or a checkpoint of "
                       f"{names}")
    params = {}
    for n in names:                                # raw fixed point, as step.init_params gives them
        v = np.asarray(params0[n])
        params[n] = v.astype(np.int64) if np.issubdtype(v.dtype, np.integer) else np.asarray(fx.cast(v, n), np.int64)
    batches = list(batches)
    if not batches:
        raise ValueError("prove_run: no batches: a run has at least one step")
    from ..circuits.private import row_indices
    for k, (x, y) in enumerate(batches):           # refuse a foreign row before any proving starts
        try:
            row_indices(circuit, circuit._inputs(params, x, y), dataset.tree)
        except ValueError as e:
            raise ValueError(f"prove_run: batch {k}: {e}") from None
    traj = [params]
    for x, y in batches:                           # the trajectory, in the fixed-point interpreter
        traj.append({n: np.asarray(v, dtype=np.int64) for n, v in fx.step(traj[-1], x, y).items()})
    c = circuit.private.capacity
    draw = (lambda: fresh_randomness(LIGERO51)) if rng is None else \
        (lambda: tuple(int(v) for v in rng.integers(0, LIGERO51.p, size=c)))
    blind = [check_randomness(r0, LIGERO51) if r0 is not None else draw()] + [draw() for _ in batches]
    seeds = None if rng is None else [int(v) for v in rng.integers(0, 2 ** 63, size=len(batches))]
    commitments = [commit([t[n] for n in names], r, fx.dtype.width, LIGERO51) for t, r in zip(traj, blind)]
    tasks = [(k, traj[k], x, y, blind[k], blind[k + 1], [traj[k + 1][n] for n in names])
             for k, (x, y) in enumerate(batches)]
    proofs = prove_steps(circuit, dataset.tree, tasks, cluster, progress=progress, seeds=seeds, log=log,
                         soundness=soundness, split=split)
    return Run(SYSTEM.statement(circuit, soundness), circuit.digest().hex(), dataset.commitment,
               commitments, proofs, opening={"params": traj[-1], "randomness": blind[-1]},
               description=describe(circuit))


# ----------------------------------------------------------------------------------------- verifying
def check_run(run: Run, step, c0: Sequence[int], d: DataCommitment, c_final: Sequence[int] | None = None,
              steps: int | None = None, soundness: str = ligero.DEFAULT_SOUNDNESS) -> None:
    """Raise :class:`Reject` naming the first failure: statement, data root, chain, or a step's proof.

    The verifier supplies what it trusts: the step (it compiles the circuit itself), the starting
    commitment ``c0`` and the dataset commitment ``d``; optionally the final commitment, the number
    of steps and the soundness analysis it requires (every proof must claim exactly it). Everything
    else in ``run`` is checked, never trusted.
    """
    ligero.check_soundness(soundness)
    if not isinstance(run, Run):
        raise TypeError(f"check_run: expected a zk.Run, got {type(run).__name__}")
    if not isinstance(d, DataCommitment):
        raise TypeError("check_run: d must be the zk.DataCommitment (root and rows) you trust")
    circuit = _circuit(_fixed(step), d.rows, run)
    claimed = SYSTEM.soundness_of(run.statement, circuit)
    if claimed is not None and claimed != soundness:
        raise Reject(f"the run claims the {claimed!r} soundness bound, but the verifier requires {soundness!r}")
    if run.statement != SYSTEM.statement(circuit, soundness):
        raise Reject(f"the run proves another statement than this step's:\n  run:  {run.statement[:300]}\n"
                     f"  step: {circuit.statement()[:300]}")
    if run.circuit_sha256 != circuit.digest().hex():
        raise Reject("the run was proved for another circuit (circuit_sha256 differs)")
    if tuple(run.data.root) != tuple(d.root) or run.data.rows != d.rows:
        raise Reject("the run's dataset root is not the one you trust")
    if steps is not None and run.steps != steps:
        raise Reject(f"the run has {run.steps} steps, not {steps}")
    if len(run.commitments) != run.steps + 1:
        raise Reject(f"{run.steps} steps need {run.steps + 1} commitments, the run has {len(run.commitments)}")
    if tuple(run.commitments[0]) != tuple(int(v) for v in c0):
        raise Reject("the run does not start from the commitment you trust (c0)")
    if c_final is not None and tuple(run.commitments[-1]) != tuple(int(v) for v in c_final):
        raise Reject("the run does not end at the commitment you expect (c_final)")
    limit = ligero.max_proof_bytes(circuit, soundness=soundness)   # a step file larger than an honest proof: not read
    for k in range(run.steps):
        proof = run.proofs.load(k, limit, soundness) if isinstance(run.proofs, ProofFiles) else run.proofs[k]
        public = [*run.commitments[k + 1], *run.commitments[k], *d.root]
        try:
            SYSTEM.check(proof, circuit, public, soundness=soundness)
        except Reject as e:
            raise Reject(f"step {k}: {e}") from None
        del proof                              # before the next one is read: one proof in memory at a time


def verify_run(run: Run, step, c0: Sequence[int], d: DataCommitment, c_final: Sequence[int] | None = None,
               steps: int | None = None, soundness: str = ligero.DEFAULT_SOUNDNESS) -> bool:
    """True when every proof of ``run`` verifies and the chain goes from ``c0`` (on data ``d``) to its end."""
    try:
        check_run(run, step, c0, d, c_final, steps, soundness)
        return True
    except (Reject, ValueError, IndexError):
        return False
