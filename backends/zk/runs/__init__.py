"""Proved runs: a chain of training steps proved one by one, the weights behind commitments, the data by its root.

Imports ``circuits`` and ``systems``. The modules:

* :mod:`.run`: ``zk.commit_dataset``, ``zk.prove_run``, ``zk.verify_run`` (:class:`Run`, :class:`Dataset`);
* :mod:`.distributed`: the steps of a run proved on a Dask cluster, or serially;
* :mod:`.bundle`: the directory a proved chain of steps is written to and read back from (``chain.json``).
"""
from .run import DataCommitment, Dataset, Run, check_run, commit_dataset, prove_run, verify_run

__all__ = ["DataCommitment", "Dataset", "Run", "commit_dataset", "prove_run", "verify_run", "check_run"]
