"""Proof systems: the interface every one implements, the registry, and the systems themselves.

Imports ``circuits``, never ``runs``. The modules:

* :mod:`.interface`: :class:`ProofSystem`, what each system provides (``MEMBERS``);
* :mod:`.registry`: ``SYSTEMS`` (name -> system), the default and the fallback system;
* :mod:`.dispatch`: ``zk.prove``, ``zk.verify``, ``zk.check``, which pick a registered system;
* :mod:`.ligero`: the native transparent prover and verifier (a subpackage: parameters, encoding, protocol,
  proof files);
* :mod:`.snarkjs`: Groth16 and PLONK through snarkjs (BN254, plain R1CS, keys from a setup);
* :mod:`.cluster`: Dask clusters, and one Ligero proof's work shared among their workers.
"""
from .dispatch import check, prove, verify
from .interface import ProofSystem
from .ligero import LigeroProof, Reject
from .registry import SYSTEMS
from .snarkjs import Keys, Proof, SnarkjsError, ToolMissing, setup, verification_key

__all__ = ["ProofSystem", "SYSTEMS", "prove", "verify", "check", "LigeroProof", "Reject", "Proof", "Keys", "setup",
           "verification_key", "SnarkjsError", "ToolMissing"]
