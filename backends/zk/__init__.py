"""The ZK backend: training steps as sound arithmetic circuits over prime fields.

    from circuitgrad.backends import zk
    circuit = zk.compile(step, dtype=cg.fixed(32, 16), field=zk.BN254)
    wit = circuit.witness(params, x, y)          # bit-exact with the fixed-point interpreter
    assert circuit.check(wit)
    circuit.export("out/")                       # step.r1cs, step.wtns, step.sym
    proof = zk.prove(circuit, wit)               # native Ligero: transparent, no setup
    assert zk.verify(proof, circuit, wit.public) # against the circuit the verifier compiled

    data = zk.commit_dataset(step, X, Y)         # private runs: weights behind commitments, data by its root
    run = zk.prove_run(step, params0, batches, dataset=data, cluster=4)      # 4 local Dask workers
    assert zk.verify_run(run, step, c0=run.commitments[0], d=data.commitment)

See ``docs/ZK.md`` for the gadgets, their costs and the public statement. The code: :mod:`.circuits` (lowering,
constraint systems, fields, the statement), :mod:`.systems` (the proof systems: Ligero, snarkjs), :mod:`.runs`
(proved runs); :mod:`.cost` and :mod:`.cli` are what ``circuitgrad cost`` and ``circuitgrad zk`` load.
"""
from .circuits import (BN254, LIGERO51, R1CS, UNSUPPORTED, ZK_RULES, Circuit, DataTree, Field, FormatError, Poseidon2,
                       UnsatisfiedConstraint, Witness, compile, compile_program, field, params_sha256, poseidon2)
from .runs import DataCommitment, Dataset, Run, check_run, commit_dataset, prove_run, verify_run
from .systems import (SYSTEMS, Keys, LigeroProof, Proof, ProofSystem, Reject, SnarkjsError, ToolMissing, check, prove,
                      setup, verification_key, verify)

__all__ = ["compile", "compile_program", "Circuit", "Witness", "BN254", "LIGERO51", "Field", "field", "R1CS", "ZK_RULES", "UNSUPPORTED",
           "UnsatisfiedConstraint", "FormatError", "Proof", "LigeroProof", "SYSTEMS", "ProofSystem", "prove", "verify",
           "check", "Reject", "Keys", "setup", "verification_key", "params_sha256", "SnarkjsError", "ToolMissing",
           "Poseidon2", "poseidon2", "DataTree", "DataCommitment", "Dataset", "Run", "commit_dataset", "prove_run",
           "verify_run", "check_run", "installed"]


def installed() -> str:
    """What ``circuitgrad info`` reports: the field arithmetic the native prover runs (compiled or NumPy)."""
    import importlib.util
    from .circuits import gf
    if gf.kernels() == "numba":
        import numba
        return f"Numba {numba.__version__} (compiled field kernels for the native prover)"
    if importlib.util.find_spec("numba") is not None:
        return "NumPy field kernels for the native prover (Numba is installed, but the NumPy path was chosen)"
    return "NumPy field kernels for the native prover (pip install 'circuitgrad[numba]' compiles them, 2-5x faster)"
