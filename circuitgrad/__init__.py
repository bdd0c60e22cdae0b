"""circuitgrad: deep learning models as open-hypergraph morphisms.

One model definition, one reverse derivative (an optic functor over the whole
hypergraph), compiled to NumPy / CuPy step functions, Amaranth hardware and
arithmetic circuits over finite fields.
"""
from .types import NdArrayType, Dtype, Float, Fixed, Index, float32, float64, fixed, index
from .primitives import TypeMismatch, Primitive, PRIMITIVES
from .diagram import Diagram, identity, sequential, monogamous, unbind_parameters, IllFormedDiagram
from .tracing import Var, trace
from .optic import rdiff, lens
from .schedule import Program, Apply, schedule, retype
from .interpret import run, UnboundParameter
from .fixedpoint import FixedPointOverflow, run_fixed, quantize, dequantize
from . import blas, ops
from . import nn
from .compile import compile_model, CompiledModel
from .modelfile import ModelSpec
from .costmodel import cost, Cost
from .drawing import draw

__version__ = "0.1.0"

__all__ = [
    "NdArrayType", "Dtype", "Float", "Fixed", "Index", "float32", "float64", "fixed", "index",
    "TypeMismatch", "Primitive", "PRIMITIVES",
    "Diagram", "Var", "trace", "identity", "sequential", "monogamous", "unbind_parameters", "IllFormedDiagram",
    "rdiff", "lens", "Program", "Apply", "schedule", "retype", "run", "UnboundParameter",
    "FixedPointOverflow", "run_fixed", "quantize", "dequantize", "blas", "ops", "nn",
    "compile_model", "CompiledModel", "ModelSpec", "cost", "Cost", "draw",
]
