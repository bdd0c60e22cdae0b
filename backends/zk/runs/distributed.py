"""Proving the steps of a private run on a Dask cluster (``dask.distributed``), or serially.

``cluster`` is as ``systems/cluster.py`` describes it: ``None`` (the default) is a ``LocalCluster`` of one
single-threaded worker process per core, at most one per step (without Dask, the steps are proved here, one
after the other), ``"serial"`` or ``1`` proves here, anything else needs Dask.

The circuit and the dataset tree are sent to every worker once, as one cloudpickled blob
(``scatter(broadcast=True)``: 1.1 s for the private iris circuit, against 11 s for the objects
themselves, whose thousands of arrays Dask serialises one by one), and unpickled once per worker
process; each step is one task, submitted with a key naming the run and the step. Proofs stream back as they
finish (``as_completed``, with a progress bar) and are put in place by step number. When a worker
dies mid-proof, the scheduler re-runs its task on another worker (Dask's own recovery; a task that
kills ``distributed.scheduler.allowed-failures`` workers, 3 by default, is reported as failed): no
step is lost, and one arriving twice is refused. With ``seeds`` given (tests), each step's prover
randomness comes from its own seed, so the proofs are bit-identical to serial proving wherever they
run.
"""
from __future__ import annotations

import os
import pickle
import uuid
from typing import Any, Callable, Sequence

import numpy as np

from ..systems import ligero
from ..systems.cluster import Split, connect, dask_available, tune_malloc
from ..systems.ligero import LigeroProof

__all__ = ["prove_steps", "prove_step"]


_LOADED: dict[str, tuple] = {}


def _remote_task(run: str, blob: bytes, *task):
    """A step on a worker: ``blob`` is the run's cloudpickled ``(circuit, tree)``, loaded once per process."""
    tune_malloc()
    if run not in _LOADED:
        _LOADED.clear()                     # one run at a time per worker: drop the previous run's circuit
        _LOADED[run] = pickle.loads(blob)
    return _task(*_LOADED[run], *task)


def _task(circuit, tree, k, params, x, y, r_before, r_after, after, seed, soundness="longfellow", split=None):
    rng = None if seed is None else np.random.default_rng(seed)
    return prove_step(circuit, tree, k, params, x, y, r_before, r_after, after, rng=rng, soundness=soundness,
                      split=split)


def prove_step(circuit, tree, k: int, params, x, y, r_before, r_after, after: Sequence,
               rng: np.random.Generator | None = None,
               soundness: str = ligero.DEFAULT_SOUNDNESS, split: "Split | None" = None) -> tuple[int, LigeroProof]:
    """Prove step ``k`` (a task of ``run.prove_run``, run on a worker, or in the driver with its rows shared
    among the workers by ``split``): the witness's new parameters must be the trajectory's ``after``."""
    wit = circuit.witness_private(params, x, y, tree, r_before, r_after)
    got = wit.outputs()
    for n, a in zip(circuit.output_names, after):
        if not np.array_equal(got[n], a):
            raise RuntimeError(f"step {k}: the circuit's {n} after the step differs from the fixed-point "
                               f"interpreter's trajectory")
    if split is None:
        return k, ligero.prove(circuit, wit, rng=rng, soundness=soundness)
    return k, ligero.prove(circuit, wit, rng=rng, soundness=soundness, split=split)


def prove_steps(circuit, tree, tasks: Sequence[tuple], cluster: Any = None, progress: bool = True,
                seeds: Sequence[int] | None = None, log: Callable[[str], None] | None = None,
                soundness: str = "longfellow", split: bool = False) -> list:
    """The proofs of ``tasks`` (``(k, params, x, y, r_before, r_after, after)`` each), in step order, with
    Ligero parameters for the ``soundness`` analysis.

    ``split=False``: each step is one task, proved whole by one worker (steps in parallel). ``split=True``: the
    steps are proved one after the other, each one's rows shared among all the workers (:class:`Split`), for a
    step too large for one worker's memory or time; the proofs are the same bytes either way."""
    from tqdm.auto import tqdm
    seeds = list(seeds) if seeds is not None else [None] * len(tasks)
    if len(seeds) != len(tasks):
        raise ValueError(f"{len(tasks)} steps need {len(tasks)} seeds, got {len(seeds)}")
    if cluster is None:                          # a local cluster, a worker per core (and per step at most)
        cluster = max(1, min(os.cpu_count() or 1, len(tasks))) if dask_available() else "serial"
    bar = tqdm(total=len(tasks), desc="proving", unit="step", disable=not progress)
    proofs: dict[int, Any] = {}

    def take(k: int, proof) -> None:
        if k in proofs:
            raise RuntimeError(f"step {k} was proved twice")
        proofs[k] = proof
        bar.update(1)
        if log:
            log(f"step {k} proved ({len(proofs)}/{len(tasks)})")
    try:
        if cluster == "serial" or cluster == 1:
            for t, s in zip(tasks, seeds):
                take(*_task(circuit, tree, *t, s, soundness))
        elif split:
            client, owned = connect(cluster)
            try:
                for t, s in zip(tasks, seeds):
                    with Split(client) as sp:
                        k, proof = _task(circuit, tree, *t, s, soundness, sp)
                        proof.timings.update({f"bytes_{n}": float(v) for n, v in sp.moved.items()},
                                             workers=float(sp.workers))
                    take(k, proof)
            finally:
                if owned is not None:
                    client.close()
                    owned.close()
        else:
            client, owned = connect(cluster)
            from distributed import as_completed
            try:
                import cloudpickle
                run = uuid.uuid4().hex[:8]
                blob = client.scatter(cloudpickle.dumps((circuit, tree)), broadcast=True)
                futures = [client.submit(_remote_task, run, blob, *t, s, soundness, key=f"prove-step-{run}-{t[0]}",
                                         pure=False)
                           for t, s in zip(tasks, seeds)]
                for fut in as_completed(futures):
                    take(*fut.result())
            finally:
                if owned is not None:
                    client.close()
                    owned.close()
    finally:
        bar.close()
    missing = [t[0] for t in tasks if t[0] not in proofs]
    if missing:
        raise RuntimeError(f"steps {missing} were not proved")
    return [proofs[t[0]] for t in tasks]
