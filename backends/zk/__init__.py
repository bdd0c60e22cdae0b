"""The ZK backend: training steps as sound arithmetic circuits over prime fields.

    from circuitgrad.backends import zk
    circuit = zk.compile(step, dtype=cg.fixed(32, 16), field=zk.BN254)
    wit = circuit.witness(params, x, y)          # bit-exact with the fixed-point interpreter
    assert circuit.check(wit)
    circuit.export("out/")                       # step.r1cs, step.wtns, step.sym

See ``docs/ZK.md`` for the gadgets, their costs and the public statement.
"""
from .circuit import Circuit, Witness, compile, compile_program
from .field import BN254, Field, field
from .formats import FormatError
from .lower import RULES, UNSUPPORTED
from .r1cs import R1CS, UnsatisfiedConstraint
from .snarkjs import Proof, SnarkjsError, ToolMissing, prove, verify

__all__ = ["compile", "compile_program", "Circuit", "Witness", "BN254", "Field", "field", "R1CS", "RULES", "UNSUPPORTED",
           "UnsatisfiedConstraint", "FormatError", "Proof", "prove", "verify", "SnarkjsError", "ToolMissing"]
