"""``backend="cupy-emulated"``: each kernel launch stood in for by NumPy, on the host.

The generated glue runs with ``xp = numpy`` and these *emulated* kernels, which evaluate each step's instructions
with NumPy, reading every input through the same layouts (offset arrays) as the CUDA code. The tests use this to
check the glue, the plan and the buffer handling without a GPU (and without nvcc: the CUDA C itself is run by
:mod:`~.run`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from circuitgrad.interpret import FLOAT_RULES

from ..blas import widen_bf16
from ..kernel import Kernel
from ..layout import read_through
from ..plan import Plan
from ..storage import to_bf16_bits

__all__ = ["emulated_kernel"]


def emulated_kernel(p: Plan, step_index: int, kern: Kernel) -> Callable:
    """A CPU stand-in for a kernel launch: runs the step's instructions with NumPy into the given outputs.

    Inputs are read as the CUDA code reads them: through the plan's layouts, as offsets into the
    base arrays passed in (so a wrong layout gives a wrong result here too).
    """
    step = p.steps[step_index]
    prog = p.program

    def launch(grid, block, args):
        bases = dict(zip(kern.inputs, args[:len(kern.inputs)]))
        dtype = prog.types[kern.outputs[-1]].dtype.numpy_dtype()
        env: dict[int, np.ndarray] = {}

        def value(x: int) -> np.ndarray:
            s, shape = p.src(x), prog.types[x].shape
            if s in p.constants:
                return np.full(shape, p.constants[s], dtype=dtype)
            b, stages = p.read(s)
            if b in env:                    # made in this launch: float values, as a register holds them
                return read_through(env[b], shape, stages)
            base = bases[b]                 # stored as bfloat16 (an attention kernel's operand): its values
            return read_through(widen_bf16(np, base) if b in p.narrow else base, shape, stages)

        if step.kind == "copy":
            (r,) = kern.outputs
            base, stages = step.layout
            env[r] = read_through(bases[base], prog.types[r].shape, stages)
        else:
            for a in step.work:      # recomputed groups first (once, in their own shape), an epilogue last
                own = getattr(a.op, "evaluate", None)   # the backend's own instructions (gpu.attention)
                res = own(*(value(x) for x in a.args)) if own else FLOAT_RULES[type(a.op)](a.op, *(value(x) for x in a.args))
                for r, y in zip(a.results, res):
                    env[r] = np.asarray(y)
        for v, out in zip(kern.outputs, args[len(kern.inputs):]):
            y = to_bf16_bits(env[v]) if v in p.narrow else env[v]        # a value stored as bfloat16: its bits
            out[...] = np.broadcast_to(y, out.shape)
    return launch
