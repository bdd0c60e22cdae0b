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
from functools import cached_property
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import arguments, nn, ops
from .diagram import Diagram, identity, unbind_parameters
from .fixedpoint import FixedPointOverflow, const, dequantize, run_fixed
from .nn import Optimizer
from .optic import rdiff
from .primitives import Parameter
from .rewrite import simplify
from .schedule import Program, retype_type, retype, schedule
from .targets import DEFAULT_BACKEND, TARGETS, backend_target, backends, runtime
from .tracing import trace
from .types import Dtype, Fixed, NdArrayType, float32

__all__ = ["compile_model", "CompiledModel", "Params"]

Params = dict  # name -> array (float arrays, or raw int64 for fixed point)


@dataclass
class _Fn:
    program: Program
    run: Callable
    source: str
    launches: int | None = None      # kernel launches per call (GPU backend)
    compiled: Any = None             # the backend's own compiled function (GPU: a ``GpuFunction``)


def number_labels(params: Sequence[Parameter]) -> list[str]:
    """Each parameter's name in the parameter dict: its label and how many of that label came before (``W0``, ``b0``, ``W1``)."""
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
    donate: bool = False                   # GPU: ``step`` writes the updated parameters into the arrays passed in
    precision: str = "fp32"                # GPU: float32 matrix products in fp32, or on tensor cores in tf32/bf16
    graph: bool = False                    # GPU: ``step`` replayed as one CUDA graph from its second call
    _fns: dict[str, _Fn] = field(default_factory=dict, repr=False)

    def fn(self, key: str) -> _Fn:
        """The compiled ``predict``/``loss``/``gradients``/``step`` (compiled on first use)."""
        f = self._fns.get(key)
        if f is None:
            f = self._fns[key] = _compile_fn(self.diagrams[key], key, self.dtype, self.arg_names[key],
                                             self.backend, self.donate, self.precision,
                                             self.graph and key == "step")
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
        """The array module of this backend's arrays (its runtime's: ``circuitgrad/targets.py``)."""
        return runtime(self.backend).xp()

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

    # ----------------------------------------------------------- arguments
    # Checked and converted by circuitgrad.arguments (the policy is in its docstring).
    def cast(self, x, what: str):
        """``x`` converted to this model's dtype on its backend (quantized in fixed point); no shape check."""
        return arguments.convert(arguments.real_array(x, what), self.dtype, self.xp, what)

    def _targets(self, y, fn: str = ""):
        """Targets ``y`` (integer class labels or rows of the output type) checked and converted."""
        return arguments.targets(y, self.y_type, self.dtype, self.xp, fn, self._checks)

    def _x(self, x, fn: str):
        return arguments.inputs(x, self.x_type, self.dtype, self.xp, fn, any_rows=fn == "predict",
                                checks=self._checks)

    @cached_property
    def _checks(self) -> arguments.DeviceChecks:
        return arguments.DeviceChecks()

    def check_inputs(self) -> None:
        """Raise the ``ValueError`` of any out-of-range ids or labels given on the device since the last check.

        On a GPU backend, ``step`` and ``gradients`` check device ids and labels on the device without waiting
        for the result (that would synchronise every step); ``predict`` and ``loss`` (which synchronise anyway)
        and this method read it. Host ids and labels are always checked at once.
        """
        self._checks.check()

    def arguments(self, function: str, params: Params, x, y=None) -> list:
        """The positional arguments ``fn(function).run`` takes: ``params`` in order (with the optimizer state
        for ``step``), then ``x`` and ``y`` (not for ``predict``), checked and converted as :meth:`step` does,
        on this backend's device (for :func:`circuitgrad.backends.gpu.profile`, say)."""
        if function not in self.diagrams:
            raise ValueError(f"arguments: unknown function {function!r}; choose one of {sorted(self.diagrams)}")
        out = self._params(params, function) + [self._x(x, function)]
        return out if function == "predict" else out + [self._targets(y, function)]

    @cached_property
    def _shapes(self) -> dict[str, tuple[int, ...]]:
        types = [p.T for p in self.parameters]
        types += [t for _, t in self.optimizer.state(types)]
        return {n: t.shape for n, t in zip(self.param_names + self.state_names, types)}

    @cached_property
    def _all_names(self) -> list[str]:
        return self.param_names + self.state_names

    def _params(self, params: Mapping[str, np.ndarray], fn: str) -> list:
        """The arrays ``fn`` takes from ``params`` (checked: names, shapes, dtypes), in order."""
        names = self._all_names if fn == "step" else self.param_names
        out = arguments.parameters(params, names, self._shapes, self._shapes, self.dtype, fn, self.xp)
        if fn == "step" and self.donate and "donate" in runtime(self.backend).options:
            arguments.distinct_arrays(out, names, fn)      # each donated parameter is updated in its own array
        return out

    def to_float(self, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Parameters as float64 arrays (dequantized in fixed point)."""
        if self.is_fixed:
            return {k: dequantize(v, self.dtype) for k, v in params.items()}
        return {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}

    # ----------------------------------------------------------------- API
    def init_params(self, seed: int = 0) -> Params:
        """Parameters by their ``init`` (Glorot-uniform weights, zero biases, unit gains, ``N(0, 0.02²)``
        embeddings) and the optimizer's initial state (zeros, and its learning rate where it keeps one).

        Arrays of the model's float dtype, or raw ``int64`` fixed-point values
        (``v`` means ``v / 2**frac``) for a fixed-point model.
        """
        rng = np.random.default_rng(seed)
        out: Params = {}
        for name, p in zip(self.param_names, self.parameters):
            shape = p.T.shape
            if p.init in ("zeros", "ones") or len(shape) == 0:
                v = np.full(shape, 1.0 if p.init == "ones" else 0.0)
            elif p.init == "normal":
                v = rng.normal(0.0, 0.02, size=shape)
            else:
                if len(shape) == 4:            # convolution weights [O, C, kh, kw], as PyTorch counts fans
                    rf = shape[2] * shape[3]
                    fan_in, fan_out = shape[1] * rf, shape[0] * rf
                else:
                    fan_in, fan_out = (shape[0], shape[-1]) if len(shape) > 1 else (shape[0], shape[0])
                lim = np.sqrt(6.0 / (fan_in + fan_out))
                v = rng.uniform(-lim, lim, size=shape)
            out[name] = self.cast(v, f"parameter {name}")
        for name, (_, t) in zip(self.state_names, self.optimizer.state([p.T for p in self.parameters])):
            out[name] = self.cast(np.full(t.shape, self.optimizer.initial(name)), f"optimizer state {name}")
        return out

    def predict(self, params: Params, x) -> np.ndarray:
        """Model outputs for any number of rows (run in chunks of the batch size).

        ``x``: any real dtype, converted to the model's (quantized in fixed
        point), shape ``(n, *input shape)``, finite.  ``params`` as for
        :meth:`step` (the optimizer state may be left in or out).  Bad
        arguments raise ``TypeError``/``ValueError`` naming them (see
        :mod:`circuitgrad.arguments`).
        """
        ps = self._params(params, "predict")
        x = self._x(x, "predict")
        self.check_inputs()
        xp = self.xp
        B = self.batch
        n = x.shape[0]
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
        """``d loss / d params`` at ``(x, y)`` (raw fixed-point integers in fixed point).

        Arguments as for :meth:`step` (the optimizer state may be left in or out).
        """
        ps = self._params(params, "gradients")
        out = self.fn("gradients").run(*ps, self._x(x, "gradients"), self._targets(y, "gradients"))
        return dict(zip(self.param_names, out))

    def loss(self, params: Params, x, y) -> float:
        """The loss value at ``(x, y)``; arguments as for :meth:`step` (the optimizer state may be left out)."""
        ps = self._params(params, "loss")
        x, y = self._x(x, "loss"), self._targets(y, "loss")
        self.check_inputs()
        (v,) = self.fn("loss").run(*ps, x, y)
        return float(dequantize(v, self.dtype)) if self.is_fixed else float(self.to_host(v))

    def step(self, params: Params, x, y) -> Params:
        """One training step; returns the updated parameters (and optimizer state).

        * ``params``: exactly the names of :meth:`init_params`, each of its
          shape; float models take arrays of exactly their dtype (a float64
          array for a float32 model is refused: ``.astype`` it), fixed-point
          models raw integers (``v`` means ``v / 2**frac``; floats are refused:
          start from :meth:`init_params` or :func:`~circuitgrad.quantize`).
        * ``x``: shape ``(batch, *input shape)``, any real dtype, converted to
          the model's (quantized in fixed point), finite.
        * ``y``: integer class labels ``(batch,)`` in ``0..K-1`` (not floats),
          or target rows of exactly the output shape, finite.

        Bad arguments raise ``TypeError``/``ValueError`` naming the function,
        the argument, and the expected and received shape or dtype. On a GPU
        backend, ids and labels already on the device are range-checked on the
        device, and the error is raised by the next ``predict``, ``loss`` or
        :meth:`check_inputs` (``step`` never waits for the device).
        """
        ps = self._params(params, "step")
        out = self.fn("step").run(*ps, self._x(x, "step"), self._targets(y, "step"))
        return dict(zip(self.param_names + self.state_names, out))


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
    grads = trace(grads_fn, ptypes + [x_type, y_type], name="gradients", path="")
    upd = optimizer.update(ptypes)
    n_state = len(optimizer.state(ptypes))

    def step_fn(*v):
        ps, ss, (x, y) = v[:k], v[k:k + n_state], v[k + n_state:]
        return upd(*ps, *ss, *grads(*ps, x, y))
    step = trace(step_fn, ptypes + [t for _, t in optimizer.state(ptypes)] + [x_type, y_type], name="step",
                 path="")
    return params, x_type, y_type, {"predict": model_p, "loss": total, "gradients": grads, "step": step}


_SWAPPED = "; did you swap loss= and optimizer=?"


def _describe(v: object) -> str:
    if isinstance(v, Optimizer):
        return f"the optimizer {v.name}"
    if isinstance(v, Diagram):
        return f"the diagram {v.name}"
    if callable(v) and hasattr(v, "__name__"):
        return f"the function {v.__name__}"
    r = repr(v)
    return f"{type(v).__name__} {r if len(r) <= 40 else r[:39] + '…'}"


def _check_arguments(model: object, loss: object, optimizer: object) -> None:
    """Clear ``TypeError`` s for a model that is no diagram, and for swapped or uncalled loss/optimizer."""
    if not isinstance(model, Diagram):
        raise TypeError(f"compile_model: model must be a Diagram such as nn.mlp(8, [4, 16, 3]), "
                        f"got {_describe(model)}")
    if isinstance(loss, Diagram) or not callable(loss) or isinstance(loss, Optimizer):
        hint = (_SWAPPED if isinstance(loss, Optimizer) else
                "; pass the function itself (nn.mse, not nn.mse(T)): compile_model applies it to the "
                "model's output type" if isinstance(loss, Diagram) else "")
        raise TypeError(f"compile_model: loss must be a loss function such as nn.mse or "
                        f"nn.softmax_cross_entropy, got {_describe(loss)}{hint}")
    if not isinstance(optimizer, Optimizer):
        hint = (f"; call it with a learning rate, e.g. nn.{optimizer.__name__}(0.1)"
                if optimizer in (nn.sgd, nn.momentum) else _SWAPPED if callable(optimizer) else "")
        raise TypeError(f"compile_model: optimizer must be an Optimizer such as nn.sgd(0.1) or "
                        f"nn.momentum(0.1), got {_describe(optimizer)}{hint}")


def _check_constants(optimizer: Optimizer, dtype: Fixed) -> None:
    """Refuse optimizer constants that round to 0 (or do not fit) in ``dtype``, rounded as the interpreter does."""
    for what, c in optimizer.constants():
        try:
            const(c, dtype, what)
        except FixedPointOverflow as e:
            raise ValueError(f"compile_model: {e}") from None


def _for(option: str) -> str:
    """Where a runtime option applies, for messages: "the GPU (backend='cupy' or 'cupy-emulated')"."""
    where = []
    for t in TARGETS.values():
        names = [repr(r.name) for r in t.runtimes if option in r.options]
        if names:
            where.append(f"{t.title or t.name} (backend={' or '.join(names)})")
    return "; ".join(where) or "no backend"


def _choose(backend: str, donate: bool, precision: str, graph: bool) -> tuple[str, str, bool]:
    """``(backend, precision, graph)`` after ``"auto"`` is resolved, each option checked against the runtime's
    row in ``circuitgrad/targets.py``: this function names no backend."""
    names = backends()
    if backend not in names:
        raise ValueError(f"compile_model: unknown backend {backend!r}; available: "
                         f"{', '.join(repr(b) for b in names)}")
    if backend == "auto":          # the first device runtime whose target is usable, else the default
        usable = [r.name for t in TARGETS.values() if any(r.device for r in t.runtimes) and t.available()[0]
                  for r in t.runtimes if r.device]
        backend = usable[0] if usable else DEFAULT_BACKEND
        rt = runtime(backend)
        precision = precision if "precision" in rt.options else "fp32"
        graph = graph if "graph" in rt.options else False
    rt = runtime(backend)
    if rt.device:
        ok, why = backend_target(backend).available()
        if not ok:
            raise RuntimeError(f"compile_model: backend={backend!r} needs {rt.needs}: {why}; "
                               f"use backend={DEFAULT_BACKEND!r} (or 'auto')")
    if precision != "fp32" and "precision" not in rt.options:
        raise ValueError(f"compile_model: precision={precision!r} is for {_for('precision')}; the {backend} "
                         f"backend multiplies in the model's dtype")
    if graph and "graph" not in rt.options:
        homes = [r.name for r in backend_target(backend).runtimes if "graph" in r.options]
        raise ValueError(f"compile_model: graph=True needs backend={homes[0]!r}, not {backend!r}" if homes else
                         f"compile_model: graph=True is for {_for('graph')}")
    if graph and not donate:
        raise ValueError("compile_model: graph=True replays the step into the same buffers: pass donate=True too")
    return backend, precision, graph


def compile_model(model: Diagram, loss: Callable[[NdArrayType], Diagram], optimizer: Optimizer,
                  dtype: Dtype | None = None, backend: str = DEFAULT_BACKEND, donate: bool = False, precision: str = "fp32",
                  graph: bool = False) -> CompiledModel:
    """Compile ``model : X → Y`` with a loss and an optimizer.

    ``dtype`` (default: the model's) retypes every wire: ``float32``,
    ``float64`` or ``fixed(width, frac)`` (exact integer semantics).
    ``backend``: a runtime of the table of targets (``circuitgrad/targets.py``, which says what each takes):
    ``"numpy"`` (CPU), ``"cupy"`` (fused CUDA kernels; needs CuPy and a GPU), ``"cupy-emulated"`` (the CuPy
    code path run on the CPU, for testing) or ``"auto"`` (the first device runtime whose device is usable,
    else NumPy).
    ``donate=True`` (GPU) lets ``step`` update parameters in the arrays passed in.
    ``precision`` (GPU, float32 models) of the matrix products: ``"fp32"`` (the default, as in PyTorch),
    ``"tf32"`` (on the TF32 tensor cores) or ``"bf16"`` (operands rounded to bfloat16, float32 accumulation:
    the products of ``torch.autocast(dtype=torch.bfloat16)``; everything else stays float32).
    ``graph=True`` (``backend="cupy"``, with ``donate=True``) replays ``step`` as one CUDA graph
    from its second call: its outputs are the graph's buffers, overwritten by the next step. With
    ``backend="auto"`` both apply only when the GPU is chosen.

    ``TypeError`` if ``model`` is not a diagram or ``loss``/``optimizer`` are
    swapped (or not a loss function / :class:`~circuitgrad.nn.Optimizer`);
    ``ValueError`` if a fixed-point learning rate or momentum beta rounds to 0
    (or does not fit) in ``dtype``.
    """
    t0 = time.perf_counter()
    _check_arguments(model, loss, optimizer)
    backend, precision, graph = _choose(backend, donate, precision, graph)
    params, x_type, y_type, diagrams = _build(model, loss, optimizer)
    dtype = dtype or y_type.dtype          # the output's: an input may be index(n) token ids
    if precision != "fp32" and dtype != float32:
        raise ValueError(f"compile_model: precision={precision!r} rounds float32 products; the model computes in "
                         f"{dtype}")
    if isinstance(dtype, Fixed):
        _check_constants(optimizer, dtype)
    if isinstance(dtype, Fixed) and not runtime(backend).fixed:
        fixed = " or ".join(repr(b) for b in backends() if b != "auto" and runtime(b).fixed)
        raise ValueError(f"compile_model: the {backend} backend computes in float32/float64, not {dtype}; "
                         f"fixed point runs on backend={fixed} (the reference interpreter)")
    pnames = number_labels(params)
    snames = optimizer.state_names(pnames, [p.T for p in params])
    names = {"predict": pnames + ["x"], "loss": pnames + ["x", "y"], "gradients": pnames + ["x", "y"],
             "step": pnames + [n.replace("/", "_") for n in snames] + ["x", "y"]}
    cm = CompiledModel(model, loss, optimizer, dtype, backend, params, pnames, snames,
                       retype_type(x_type, dtype), y_type.with_dtype(dtype), diagrams, names, donate=donate,
                       precision=precision, graph=graph)
    cm.fn("step")          # the training step is compiled now; the others on first use
    cm.compile_seconds = time.perf_counter() - t0
    return cm


def _compile_fn(d: Diagram, key: str, dtype: Dtype, arg_names: list[str], backend: str = DEFAULT_BACKEND,
                donate: bool = False, precision: str = "fp32", graph: bool = False) -> _Fn:
    prog = schedule(d, key)
    if prog.types and any(t.dtype != dtype for t in prog.types):
        prog = retype(prog, dtype)
    prog = simplify(prog)                  # after retype: some rewrites are fixed point's alone
    if isinstance(dtype, Fixed):
        return _Fn(prog, lambda *xs: run_fixed(prog, xs), str(prog))
    rt = runtime(backend)
    options = {"donate_pairs": dict(zip(prog.outputs, prog.inputs)) if donate and key == "step" else None,
               "precision": precision, "graph": graph}
    g = rt.compile_function(prog, arg_names, key, **{k: v for k, v in options.items()
                                                     if (k if k != "donate_pairs" else "donate") in rt.options})
    return _Fn(prog, g.run, g.source, g.launches, g)
