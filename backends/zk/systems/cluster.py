"""Dask clusters for the native prover (``dask.distributed``, the ``[zk]`` extra): the ``cluster`` argument, and
one Ligero proof's work shared among the workers (:class:`Split`, ``zk.prove(..., cluster=...)``).

``cluster`` is one of:

* ``None`` (the default): a ``LocalCluster`` of one single-threaded worker process per core (at most
  one per step), closed afterwards; where Dask is not installed, the steps are proved here, one after
  the other;
* an ``int`` ``n``: a ``LocalCluster`` of ``n`` workers; ``1`` proves here, without Dask;
* ``"serial"``: prove here, one step after the other (the reference the cluster must match);
* a scheduler address (``"tcp://host:8786"``): an existing cluster (``dask scheduler`` and
  ``dask worker tcp://host:8786`` on each machine, with circuitgrad installed in the same version);
* a ``distributed.Client`` or a cluster object (``LocalCluster``, ``SSHCluster``, ``KubeCluster``, …).

Every choice but the first two local ones needs Dask (the ``[zk]`` extra); without it they raise
:class:`~circuitgrad.extras.MissingExtra`, one line naming the install command. The steps of a private run
are dealt out to the workers by ``runs/distributed.py``.
"""
from __future__ import annotations

import hashlib
import pickle
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from circuitgrad import allocator, extras

from ..circuits import gf
from .ligero import encoding, merkle, prover, protocol

__all__ = ["dask_available", "require_dask", "connect", "tune_malloc", "Split"]


def dask_available() -> bool:
    """Whether Dask (``distributed`` and ``cloudpickle``, the ``[zk]`` extra) is installed."""
    return extras.available("distributed") and extras.available("cloudpickle")


def require_dask(cluster: Any) -> None:
    """Raise :class:`~circuitgrad.extras.MissingExtra` when proving on ``cluster`` needs Dask and it is not
    installed (``None``, ``1`` and ``"serial"`` prove here without it)."""
    if cluster is None or cluster == 1 or (isinstance(cluster, str) and cluster == "serial"):
        return
    what = f"proving on a Dask cluster (cluster={cluster!r:.60})"
    extras.require("distributed", what, "Dask", "zk")
    extras.require("cloudpickle", what, "Dask", "zk")


def tune_malloc() -> None:
    """Undo the allocator settings a Dask nanny gives its workers, once per worker process.

    A nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (``distributed.nanny.pre-spawn-environ``),
    which also pins glibc's mmap threshold at 128 KiB: every large NumPy temporary of the prover is then
    a fresh ``mmap`` and page faults, and a Ligero proof took 3.5× as long as in a plain process (2.35 s
    against 0.65 s for the private iris step, ``bench/private_run.py``). The workers get the setting of
    :mod:`circuitgrad.allocator` (mmap threshold 32 MiB, trim threshold 64 MiB).
    """
    allocator.tune()


def connect(cluster: Any) -> tuple[Any, Any]:
    """``(client, owned cluster or None)`` for the ``cluster`` argument (see the module docstring)."""
    if isinstance(cluster, bool):
        raise TypeError("cluster must be None, 'serial', a number of local workers, a scheduler address, a Client "
                        "or a cluster")
    if isinstance(cluster, int) and cluster < 1:
        raise ValueError(f"a local cluster needs at least one worker, got {cluster}")
    require_dask(cluster)
    from distributed import Client, LocalCluster
    if isinstance(cluster, Client):
        return cluster, None
    if isinstance(cluster, int):
        local = LocalCluster(n_workers=cluster, threads_per_worker=1, processes=True, dashboard_address=None)
        return Client(local), local
    if isinstance(cluster, str) or hasattr(cluster, "scheduler_address"):
        return Client(cluster), None
    raise TypeError(f"cluster must be None, 'serial', a number of local workers, a scheduler address, a Client or "
                    f"a cluster, got {type(cluster).__name__}")


# ------------------------------------------------------------------------------------- one proof, many workers
@dataclass
class _Proof:
    """What a worker process holds of one proof: its rows, built once (under the lock) for every thread."""
    passes: Any
    second: bool = False
    challenges: Any = None


_ROWS: dict[str, _Proof] = {}
_ROWS_LOCK = threading.Lock()


class _Inputs:
    """What every worker needs of one proof: ``(prepared circuit, witness, layout, parameters, seed, masks)``.
    Scattered as one object, so that Dask pickles it once with its arrays as out-of-band buffers (protocol 5)
    and the worker's arrays are the received frames, not a copy of a pickled blob (which doubled a worker's
    memory: 2 × 3.9 GiB on tinygpt's step)."""

    def __init__(self, items: tuple):
        self.items = items


def _rows_task(key: str, inputs: _Inputs, second, method: str, *args):
    """One pass's share of a proof on a worker: ``inputs`` the proof's :class:`_Inputs`, its rows made once per
    process whatever its threads; ``second`` the round-2 challenges (or None). The tests return the
    fingerprint of the challenges they used, beside their sums."""
    tune_malloc()
    with _ROWS_LOCK:
        if key not in _ROWS:
            pc, z, lay, p, seed, masks = inputs.items
            _ROWS[key] = _Proof(prover.Passes(pc, lay, p, encoding.Encoding(pc, z, lay, p, seed, masks), False,
                                              lambda s: None))
        state = _ROWS[key]
        pr = state.passes
        if second is not None and not state.second:
            pr.enc.start_second(*second)
            state.second = True
        if method == "tests" and state.challenges is None:     # from the transcript as the driver had it
            state.challenges = protocol.test_challenges(pr.pc, pr.lay, args[0], pr.enc.alphas,
                                                        second[1] if second else [])
    if method == "tests":
        _, part, parts = args
        return pr.tests(*state.challenges, part, parts) + (_fingerprint(state.challenges),)
    return getattr(pr, method)(*args)


def _forget(key: str) -> None:
    """Drop a proof's rows, witness and seed from this worker (when the proof is done)."""
    with _ROWS_LOCK:
        _ROWS.pop(key, None)


def _fingerprint(challenges: tuple) -> str:
    """A digest of the tests' challenges (the proximity and quadratic ones, and each linear repetition's γ and
    public coefficients): driver and workers must have drawn the same."""
    r, lin, rq = challenges
    h = hashlib.sha256(np.ascontiguousarray(r).tobytes() + np.ascontiguousarray(rq).tobytes())
    for R, rp in lin:
        h.update(np.ascontiguousarray(rp).tobytes())
        h.update(np.ascontiguousarray(R.parts[1].gamma).tobytes())
    return h.hexdigest()


class Split:
    """The passes of one Ligero proof shared among the workers of a Dask cluster (``cluster`` as for
    :func:`prove_steps`): ``zk.prove(..., cluster=...)``.

    Every worker receives the prepared circuit, the witness, the seed and the masks once (``scatter``,
    broadcast, as one object whose arrays Dask sends as out-of-band pickle buffers, so that a worker holds them
    once), and rebuilds any rows it is asked for (:mod:`.ligero.encoding`); :meth:`close` makes every worker
    forget them. They are the prover's secrets: use workers you trust, over ``tls://`` between machines. The commitment's rows are cut
    at Merkle row blocks, one range per worker, which returns its block digests; the tests' jobs are dealt out
    round robin and their sums added; the opened columns come back by ranges of rows. Nothing depends on
    which worker computed what, so the proof's bytes are the single process's. ``moved`` counts the bytes sent
    to and received from the workers (the pickled inputs and the arrays returned).
    """

    def __init__(self, cluster: Any):
        self.client, self.owned = connect(cluster)
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        self.moved = {"sent": 0, "received": 0}

    def close(self) -> None:
        """Forget the proof on every worker (its witness and seed), then close a cluster this object started."""
        if getattr(self, "key", None) is not None:
            try:
                self.client.run(_forget, self.key)
            except Exception:               # a worker that is gone holds nothing any more
                pass
            self.key = None
        self.blob = None
        if self.owned is not None:
            self.client.close()
            self.owned.close()

    def __enter__(self) -> "Split":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self, method: str, calls: list) -> list:
        futures = [self.client.submit(_rows_task, self.key, self.blob, self.second_args, method, *c, pure=False)
                   for c in calls]
        out = self.client.gather(futures)
        self.moved["sent"] += sum(len(pickle.dumps(c)) for c in calls)
        self.moved["received"] += sum(_nbytes(x) for x in out)
        return out

    def start(self, pr) -> None:
        e = pr.enc
        inputs = _Inputs((pr.pc, e.z, pr.lay, pr.p, e.seed, e.masks))
        self.key, self.second_args = uuid.uuid4().hex[:12], None
        self.blob = self.client.scatter(inputs, broadcast=True, hash=False)     # its own key: never another proof's
        self.moved["sent"] += _pickled_bytes(inputs) * self.workers

    def second(self, alphas: np.ndarray, draws: list) -> None:
        self.second_args = (alphas, draws)

    def _ranges(self, a: int, b: int, align: int) -> list[tuple[int, int]]:
        blocks = -(-(b - a) // align)
        per = -(-blocks // self.workers)
        return [(a + i * per * align, min(b, a + (i + 1) * per * align)) for i in range(self.workers)
                if a + i * per * align < b]

    def digests(self, a: int, b: int) -> np.ndarray:
        parts = self._run("digests", [(lo, hi, a) for lo, hi in self._ranges(a, b, merkle.ROW_BLOCK)])
        return np.concatenate(parts, axis=1)

    def tests(self, snapshot, challenges: tuple) -> tuple:
        parts = self._run("tests", [(snapshot, i, self.workers) for i in range(self.workers)])
        if any(fp != _fingerprint(challenges) for *_, fp in parts):
            raise RuntimeError("a Dask worker drew other test challenges than this process (is it running another "
                               "version of circuitgrad?): the proof would not verify")
        u, q, pq, _ = parts[0]
        for u2, q2, pq2, _ in parts[1:]:
            u, q, pq = gf.add(u, u2), gf.add(q, q2), gf.add(pq, pq2)
        return u, q, pq

    def columns(self, a: int, b: int, idx: list, powers: np.ndarray) -> np.ndarray:
        parts = self._run("columns", [(lo, hi, idx, powers) for lo, hi in self._ranges(a, b, 1)])
        return np.concatenate(parts)


def _pickled_bytes(x) -> int:
    """The bytes of ``x`` pickled with its buffers out of band (what Dask sends), without copying them."""
    sizes = []
    import cloudpickle
    head = cloudpickle.dumps(x, protocol=5, buffer_callback=lambda b: sizes.append(b.raw().nbytes))
    return len(head) + sum(sizes)


def _nbytes(x) -> int:
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(v) for v in x)
    return len(pickle.dumps(x))
