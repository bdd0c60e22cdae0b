"""circuitgrad: deep learning models as open-hypergraph morphisms.

One model definition, one reverse derivative (an optic functor over the whole
hypergraph), compiled to NumPy / CuPy step functions, Amaranth hardware and
arithmetic circuits over finite fields.
"""
from .types import NdArrayType, Dtype, Float, Fixed, Index, float32, float64, fixed, index
from .primitives import TypeMismatch
from .diagram import Diagram, identity, sequential, IllFormedDiagram
from .tracing import trace
from .optic import rdiff
from .schedule import schedule
from .interpret import run, UnboundParameter
from .fixedpoint import FixedPointOverflow, run_fixed, quantize, dequantize
from . import ops
from . import nn
from .compile import compile_model, CompiledModel
from .modelfile import ModelSpec
from .costmodel import cost, Cost
from .drawing import draw

__version__ = "0.1.0"

#: what a user calls: types, building and tracing models, the reverse derivative, compiling and running them,
#: fixed point, cost and drawings. Internals (``Primitive``, ``Program``, ``retype``, ``monogamous``, ``blas``,
#: …) stay importable from their modules (``circuitgrad.primitives``, ``circuitgrad.schedule``, …).
__all__ = [
    "NdArrayType", "Dtype", "Float", "Fixed", "Index", "float32", "float64", "fixed", "index",
    "TypeMismatch", "IllFormedDiagram", "UnboundParameter", "FixedPointOverflow",
    "Diagram", "identity", "sequential", "trace", "ops", "nn", "rdiff",
    "schedule", "run", "run_fixed", "quantize", "dequantize",
    "compile_model", "CompiledModel", "ModelSpec", "cost", "Cost", "draw",
]
