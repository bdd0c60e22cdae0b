"""``compile_model``: from a model diagram to predict / gradients / step functions.

The training step is one diagram, built functorially::

    grads(P, X, Y) = R[(model ⊗ id_Y) ; loss] (P, X, Y, 1)      restricted to dP
    step(P, S, X, Y) = update(P, S, grads(P, X, Y))             optimizer

Every function is scheduled to an SSA program (:mod:`circuitgrad.schedule`);
the float programs are compiled to NumPy source, the fixed-point ones are
run by the fixed-point interpreter, the specification of the FPGA and ZK
backends.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from . import ops
from .codegen import compile_program
from .diagram import Diagram, identity, trace, unbind_parameters
from .fixedpoint import dequantize, quantize, run_fixed
from .nn import Optimizer
from .optic import rdiff
from .primitives import Parameter
from .rewrite import simplify
from .schedule import Program, retype, schedule
from .types import Dtype, Fixed, NdArrayType

__all__ = ["compile_model", "CompiledModel", "Params"]

Params = dict  # name -> array (float arrays, or raw int64 for fixed point)


@dataclass
class _Fn:
    program: Program
    run: Callable
    source: str
    launches: int | None = None      # kernel launches per call (GPU backend)


def _param_names(params: Sequence[Parameter]) -> list[str]:
    seen: dict[str, int] = {}
    names = []
    for p in params:
        k = seen.get(p.label, 0)
        seen[p.label] = k + 1
        names.append(f"{p.label}{k}")
    return names


@dataclass
class CompiledModel:
    """A compiled model: ``init_params``, ``predict``, ``gradients``, ``step``, ``loss``, ``source``."""
    model: Diagram
    loss_fn: Callable[[NdArrayType], Diagram]
    optimizer: Optimizer
    dtype: Dtype
    backend: str
    parameters: list[Parameter]
    param_names: list[str]
    state_names: list[str]
    x_type: NdArrayType
    y_type: NdArrayType
    diagrams: dict[str, Diagram] = field(default_factory=dict)
    arg_names: dict[str, list[str]] = field(default_factory=dict)
    compile_seconds: float = 0.0
    _fns: dict[str, _Fn] = field(default_factory=dict, repr=False)

    def fn(self, key: str) -> _Fn:
        """The compiled ``predict``/``loss``/``gradients``/``step`` (compiled on first use)."""
        f = self._fns.get(key)
        if f is None:
            f = self._fns[key] = _compile_fn(self.diagrams[key], key, self.dtype, self.arg_names[key],
                                             self.backend, getattr(self, "donate", False))
        return f

    # ----------------------------------------------------------- properties
    @property
    def batch(self) -> int:
        return self.x_type.shape[0]

    @property
    def is_fixed(self) -> bool:
        return isinstance(self.dtype, Fixed)

    @property
    def xp(self):
        """The array module of this backend (``numpy`` or ``cupy``)."""
        if self.backend == "cupy":
            import cupy
            return cupy
        return np

    @property
    def launches_per_step(self) -> int | None:
        """Kernel launches per training step (GPU backends), else None."""
        return self.fn("step").launches

    def to_host(self, a) -> np.ndarray:
        """A NumPy copy of a backend array."""
        return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)

    @property
    def source(self) -> str:
        """The generated step code (Python/NumPy, or the SSA listing in fixed point)."""
        return self.fn("step").source

    @property
    def programs(self) -> dict[str, Program]:
        """The SSA programs of ``predict``, ``loss``, ``gradients`` and ``step``."""
        return {k: self.fn(k).program for k in self.diagrams}

    # ----------------------------------------------------------- conversion
    def _in(self, x, what: str) -> np.ndarray:
        if self.backend == "cupy":
            return self.xp.asarray(x, dtype=self.dtype.numpy_dtype())
        x = np.asarray(x)
        if self.is_fixed:
            return quantize(x, self.dtype, what)
        return x.astype(self.dtype.numpy_dtype(), copy=False)

    def _targets(self, y) -> np.ndarray:
        if np.ndim(y) == 1 and self.y_type.ndim == 2 and np.issubdtype(y.dtype if hasattr(y, "dtype")
                                                                       else np.asarray(y).dtype, np.integer):
            y = self.to_host(y)
            k = self.y_type.shape[1]
            if y.size and (y.min() < 0 or y.max() >= k):
                raise ValueError(f"class labels must be in 0..{k - 1}, got [{y.min()}, {y.max()}]")
            y = np.eye(k)[y]
        return self._in(y, "targets")

    def to_float(self, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Parameters as float64 arrays (dequantized in fixed point)."""
        if self.is_fixed:
            return {k: dequantize(v, self.dtype) for k, v in params.items()}
        return {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}

    def _check_batch(self, x: np.ndarray, what: str) -> None:
        if x.shape[0] != self.batch:
            raise ValueError(f"{what}: this model was built for batch {self.batch}, got {x.shape[0]} rows "
                             f"(predict accepts any number of rows; step/gradients need exactly {self.batch})")

    # ----------------------------------------------------------------- API
    def init_params(self, seed: int = 0) -> Params:
        """Glorot-uniform weights, zero biases and zero optimizer state."""
        rng = np.random.default_rng(seed)
        out: Params = {}
        for name, p in zip(self.param_names, self.parameters):
            shape = p.T.shape
            if p.init == "zeros" or len(shape) == 0:
                v = np.zeros(shape)
            else:
                fan_in, fan_out = (shape[0], shape[-1]) if len(shape) > 1 else (shape[0], shape[0])
                lim = np.sqrt(6.0 / (fan_in + fan_out))
                v = rng.uniform(-lim, lim, size=shape)
            out[name] = self._in(v, f"parameter {name}")
        for name, (_, t) in zip(self.state_names, self.optimizer.state([p.T for p in self.parameters])):
            out[name] = self._in(np.zeros(t.shape), f"optimizer state {name}")
        return out

    def _params(self, params: Mapping[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
        missing = [n for n in names if n not in params]
        if missing:
            raise KeyError(f"missing parameters {missing}; expected {list(names)}")
        return [params[n] for n in names]

    def predict(self, params: Params, x) -> np.ndarray:
        """Model outputs for any number of rows (run in chunks of the batch size)."""
        x = self._in(x, "input")
        xp = self.xp
        B = self.batch
        n = x.shape[0]
        ps = self._params(params, self.param_names)
        outs = []
        for i in range(0, n, B):
            chunk = x[i:i + B]
            if chunk.shape[0] < B:
                pad = xp.zeros((B - chunk.shape[0],) + chunk.shape[1:], dtype=chunk.dtype)
                chunk = xp.concatenate([chunk, pad])
            outs.append(self.to_host(self.fn("predict").run(*ps, chunk)[0]))
        y = np.concatenate(outs)[:n] if outs else np.zeros((0,) + self.y_type.shape[1:])
        return dequantize(y, self.dtype) if self.is_fixed else y

    def gradients(self, params: Params, x, y) -> dict[str, np.ndarray]:
        """``d loss / d params`` at ``(x, y)`` (raw fixed-point integers in fixed point)."""
        x, y = self._in(x, "input"), self._targets(y)
        self._check_batch(x, "gradients")
        out = self.fn("gradients").run(*self._params(params, self.param_names), x, y)
        return dict(zip(self.param_names, out))

    def loss(self, params: Params, x, y) -> float:
        """The loss value at ``(x, y)``."""
        x, y = self._in(x, "input"), self._targets(y)
        self._check_batch(x, "loss")
        (v,) = self.fn("loss").run(*self._params(params, self.param_names), x, y)
        return float(dequantize(v, self.dtype)) if self.is_fixed else float(self.to_host(v))

    def step(self, params: Params, x, y) -> Params:
        """One training step; returns the updated parameters (and optimizer state)."""
        x, y = self._in(x, "input"), self._targets(y)
        self._check_batch(x, "step")
        names = self.param_names + self.state_names
        out = self.fn("step").run(*self._params(params, names), x, y)
        return dict(zip(names, out))


def _build(model: Diagram, loss_fn, optimizer: Optimizer):
    model_p, params = unbind_parameters(model)
    if len(model_p.s) - len(params) != 1 or len(model_p.t) != 1:
        raise TypeError(f"compile_model: the model must have one input and one output, "
                        f"got {model.source_types} → {model.target_types}")
    ptypes = [p.T for p in params]
    x_type = model_p.source_types[-1]
    y_type = model_p.target_types[0]
    L = loss_fn(y_type)
    if L.source_types != (y_type, y_type) or len(L.t) != 1:
        raise TypeError(f"compile_model: loss must be {y_type} ⊗ {y_type} → scalar, got {L}")
    total = model_p @ identity([y_type]) >> L
    total.name = f"loss({model.name})"
    R = rdiff(total)
    k = len(ptypes)
    l_type = L.target_types[0]

    def grads_fn(*v):
        (*ps, x, y) = v
        return R(*ps, x, y, ops.constant(l_type, 1.0))[:k]
    grads = trace(grads_fn, ptypes + [x_type, y_type], name="gradients")
    upd = optimizer.update(ptypes)
    n_state = len(optimizer.state(ptypes))

    def step_fn(*v):
        ps, ss, (x, y) = v[:k], v[k:k + n_state], v[k + n_state:]
        return upd(*ps, *ss, *grads(*ps, x, y))
    step = trace(step_fn, ptypes + [t for _, t in optimizer.state(ptypes)] + [x_type, y_type], name="step")
    return params, x_type, y_type, {"predict": model_p, "loss": total, "gradients": grads, "step": step}


BACKENDS = ("numpy", "cupy", "auto", "cupy-emulated")


def compile_model(model: Diagram, loss: Callable[[NdArrayType], Diagram], optimizer: Optimizer,
                  dtype: Dtype | None = None, backend: str = "numpy", donate: bool = False) -> CompiledModel:
    """Compile ``model : X → Y`` with a loss and an optimizer.

    ``dtype`` (default: the model's) retypes every wire: ``float32``,
    ``float64`` or ``fixed(width, frac)`` (exact integer semantics).
    ``backend``: ``"numpy"`` (CPU), ``"cupy"`` (fused CUDA kernels; needs
    CuPy and a GPU), ``"auto"`` (CuPy when a GPU is usable, else NumPy) or
    ``"cupy-emulated"`` (the CuPy code path run on the CPU, for testing).
    ``donate=True`` (GPU) lets ``step`` update parameters in the arrays passed in.
    """
    t0 = time.perf_counter()
    if backend not in BACKENDS:
        raise ValueError(f"compile_model: unknown backend {backend!r}; available: "
                         f"{', '.join(repr(b) for b in BACKENDS)}")
    if backend in ("cupy", "auto"):
        from .backends import gpu
        ok, why = gpu.available()
        if backend == "cupy" and not ok:
            raise RuntimeError(f"compile_model: backend='cupy' needs CuPy and a CUDA GPU: {why}; "
                               f"use backend='numpy' (or 'auto')")
        backend = "cupy" if ok else "numpy"
    params, x_type, y_type, diagrams = _build(model, loss, optimizer)
    dtype = dtype or x_type.dtype
    if backend != "numpy" and isinstance(dtype, Fixed):
        raise ValueError(f"compile_model: the {backend} backend computes in float32/float64, not {dtype}; "
                         f"fixed point runs on backend='numpy' (the reference interpreter)")
    pnames = _param_names(params)
    snames = [f"{s}/{n}" for (s, _), n in zip(optimizer.state([p.T for p in params]), pnames)]
    names = {"predict": pnames + ["x"], "loss": pnames + ["x", "y"], "gradients": pnames + ["x", "y"],
             "step": pnames + [n.replace("/", "_") for n in snames] + ["x", "y"]}
    cm = CompiledModel(model, loss, optimizer, dtype, backend, params, pnames, snames,
                       x_type.with_dtype(dtype), y_type.with_dtype(dtype), diagrams, names)
    cm.donate = donate
    cm.fn("step")          # the training step is compiled now; the others on first use
    cm.compile_seconds = time.perf_counter() - t0
    return cm


def _compile_fn(d: Diagram, key: str, dtype: Dtype, arg_names: list[str], backend: str = "numpy",
                donate: bool = False) -> _Fn:
    prog = simplify(schedule(d, key))
    if prog.types and any(t.dtype != dtype for t in prog.types):
        prog = retype(prog, dtype)
    if isinstance(dtype, Fixed):
        return _Fn(prog, lambda *xs: run_fixed(prog, xs), str(prog))
    if backend in ("cupy", "cupy-emulated"):
        from .backends import gpu
        pairs = dict(zip(prog.outputs, prog.inputs)) if donate and key == "step" else None
        g = gpu.compile_function(prog, arg_names, key, emulate=backend == "cupy-emulated", donate_pairs=pairs)
        return _Fn(prog, g.run, g.source, g.launches)
    fn, src = compile_program(prog, arg_names, key)
    return _Fn(prog, fn, src)
