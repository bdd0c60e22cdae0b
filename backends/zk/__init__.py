"""The ZK backend: training steps as sound arithmetic circuits over prime fields.

    from circuitgrad.backends import zk
    circuit = zk.compile(step, dtype=cg.fixed(32, 16), field=zk.BN254)
    wit = circuit.witness(params, x, y)          # bit-exact with the fixed-point interpreter
    assert circuit.check(wit)
    circuit.export("out/")                       # step.r1cs, step.wtns, step.sym
    proof = zk.prove(circuit, wit)               # native Ligero: transparent, no setup
    assert zk.verify(proof, circuit, wit.public) # against the circuit the verifier compiled

See ``docs/ZK.md`` for the gadgets, their costs and the public statement.
"""
from .circuit import Circuit, Witness, compile, compile_program
from .field import BN254, LIGERO51, Field, field
from .formats import FormatError
from .lower import RULES, UNSUPPORTED
from .r1cs import R1CS, UnsatisfiedConstraint
from .ligero import LigeroProof, Reject
from .prover import SYSTEMS, check, prove, verify
from .snarkjs import Keys, Proof, SnarkjsError, ToolMissing, setup, verification_key
from .statement import params_sha256

__all__ = ["compile", "compile_program", "Circuit", "Witness", "BN254", "LIGERO51", "Field", "field", "R1CS", "RULES", "UNSUPPORTED",
           "UnsatisfiedConstraint", "FormatError", "Proof", "LigeroProof", "SYSTEMS", "prove", "verify", "check",
           "Reject", "Keys", "setup", "verification_key", "params_sha256", "SnarkjsError", "ToolMissing"]
