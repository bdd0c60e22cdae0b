"""Circuits: training steps lowered to constraint systems over prime fields, and what a proof states about them.

Imports nothing from ``systems`` or ``runs``. The modules:

* lowering: :mod:`.lower` (a rule per primitive, ``ZK_RULES``), :mod:`.special` (the special functions),
  :mod:`.fusion` (elementwise regions as function lookups), :mod:`.gadgets` (range checks, divisions, …),
  :mod:`.tables` (lookup tables), :mod:`.intervals` (range checks dropped by interval analysis),
  :mod:`.bounds` (no-wrap bounds from the constraint system alone);
* the circuit objects: :mod:`.circuit` (``zk.compile``, :class:`Circuit`, :class:`Witness`), :mod:`.r1cs`
  (the builder and the constraint system), :mod:`.sparse` (its CSR matrices), :mod:`.formats` (``.r1cs``,
  ``.wtns`` and ``.sym`` files, reading untrusted files);
* fields: :mod:`.field` (:class:`Field`, ``BN254``, ``LIGERO51``), :mod:`.gf` and :mod:`.gf_numba` (vectorised
  arithmetic in ``LIGERO51``, NumPy or compiled);
* the statement: :mod:`.statement` (what a proof claims, and the digest binding it);
* commitments in private steps: :mod:`.poseidon2` and :mod:`.poseidon2_params` (the hash and its gadgets),
  :mod:`.commit` (parameter commitments, the dataset's Merkle tree), :mod:`.private` (the step's constraints).
"""
from .circuit import Circuit, Witness, compile, compile_program
from .commit import DataTree
from .field import BN254, LIGERO51, Field, field
from .formats import FormatError
from .lower import UNSUPPORTED, ZK_RULES
from .poseidon2 import Poseidon2, poseidon2
from .r1cs import R1CS, UnsatisfiedConstraint
from .statement import params_sha256

__all__ = ["compile", "compile_program", "Circuit", "Witness", "BN254", "LIGERO51", "Field", "field", "R1CS",
           "ZK_RULES", "UNSUPPORTED", "UnsatisfiedConstraint", "FormatError", "params_sha256", "DataTree",
           "Poseidon2", "poseidon2"]
