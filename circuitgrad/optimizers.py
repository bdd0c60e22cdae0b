"""Optimizers: the update ``P ⊗ S ⊗ dP → P ⊗ S`` of a training step, for the parameter types ``P`` (``S`` the
optimizer's state), as definitions (diagrams of primitives) like the layers of :mod:`circuitgrad.nn`, which
re-exports them (``nn.sgd``, ``nn.adamw``, ...).

SGD and momentum, Adam and AdamW (bias-corrected, decoupled weight decay), gradient clipping by global norm
around any of them, and :func:`set_learning_rate`, which changes a compiled step's rate without recompiling.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import ops
from .diagram import Diagram
from .tracing import Var, trace
from .types import Dtype, NdArrayType, float32

__all__ = ["Optimizer", "sgd", "momentum", "Adam", "adam", "adamw", "CLIP_EPS", "ClipGradNorm", "clip_grad_norm",
           "set_learning_rate"]


def _rate(fn: str, what: str, v: object, upper: float = math.inf) -> float:
    """``v`` as a float in ``(0, upper)``, or a clear error naming ``fn`` and ``what``."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{fn}: {what} must be a number, got {type(v).__name__} {v!r}")
    f = float(v)
    if not (math.isfinite(f) and 0 < f < upper):
        bound = "> 0" if upper == math.inf else f"in (0, {upper:g})"
        raise ValueError(f"{fn}: {what} must be a finite number {bound}, got {f!r}")
    return f


@dataclass(frozen=True)
class Optimizer:
    """Builds the update diagram ``P ⊗ S ⊗ dP → P ⊗ S`` for parameter types ``P``.

    ``lr`` must be a finite number > 0 and ``beta`` 0 (no momentum) or in ``(0, 1)``.
    """
    name: str
    lr: float
    beta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", _rate(self.name, "learning rate lr", self.lr))
        if self.beta != 0:
            object.__setattr__(self, "beta", _rate(self.name, "beta", self.beta, upper=1.0))

    def constants(self) -> list[tuple[str, float]]:
        """The constants of the update, by name: ``learning rate`` and, with momentum, ``momentum beta``."""
        return [("learning rate", self.lr)] + ([("momentum beta", self.beta)] if self.beta else [])

    def state(self, params: Sequence[NdArrayType]) -> list[tuple[str, NdArrayType]]:
        """``(suffix, type)`` of the optimizer state, per parameter order."""
        return [("momentum", t) for t in params] if self.beta else []

    def state_names(self, names: Sequence[str], params: Sequence[NdArrayType]) -> list[str]:
        """The names of the state entries (``"momentum/W0"``, …), in :meth:`state`'s order."""
        return [f"{s}/{n}" for (s, _), n in zip(self.state(params), names)]

    def initial(self, name: str) -> float:
        """The initial value of state entry ``name`` (zero)."""
        return 0.0

    def update(self, params: Sequence[NdArrayType]) -> Diagram:
        k = len(params)
        state = [t for _, t in self.state(params)]

        def step(*vs: Var):
            p, s, g = vs[:k], vs[k:k + len(state)], vs[k + len(state):]
            if not self.beta:
                return tuple(pi - ops.scale(gi, self.lr) for pi, gi in zip(p, g))
            v = tuple(ops.scale(si, self.beta) + gi for si, gi in zip(s, g))
            return tuple(pi - ops.scale(vi, self.lr) for pi, vi in zip(p, v)) + v
        return trace(step, list(params) + state + list(params), name=self.name)


def sgd(lr: float) -> Optimizer:
    """Plain SGD: ``p ← p − lr·∇p`` (``lr``: a finite number > 0)."""
    return Optimizer(f"sgd({lr})", _rate("sgd", "learning rate lr", lr))


def momentum(lr: float, beta: float = 0.9) -> Optimizer:
    """Heavy-ball momentum: ``v ← β·v + ∇p``, ``p ← p − lr·v`` (``lr > 0`` and ``β ∈ (0, 1)``, finite)."""
    return Optimizer(f"momentum({lr},{beta})", _rate("momentum", "learning rate lr", lr),
                     _rate("momentum", "beta", beta, upper=1.0))


@dataclass(frozen=True)
class Adam(Optimizer):
    """Adam (Kingma & Ba) and, with ``decoupled=True``, AdamW (Loshchilov & Hutter), as ``torch.optim``::

        t ← t + 1;  p ← p·(1 − lr·wd) (AdamW);  m ← β₁m + (1 − β₁)g;  v ← β₂v + (1 − β₂)g²
        p ← p − lr/(1 − β₁ᵗ) · m / (sqrt(v)/sqrt(1 − β₂ᵗ) + ε)

    The state holds ``m`` and ``v`` per parameter, the step count ``adam/t`` and the learning rate
    ``adam/lr`` (set to ``lr`` by ``init_params``): a schedule changes ``params["adam/lr"]`` between
    steps (:func:`set_learning_rate`) without recompiling. Plain Adam's ``weight_decay`` adds
    ``wd·p`` to the gradient, as ``torch.optim.Adam`` does.
    """
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        fn = "adamw" if self.decoupled else "adam"
        object.__setattr__(self, "beta2", _rate(fn, "beta2", self.beta2, upper=1.0))
        object.__setattr__(self, "eps", _rate(fn, "eps", self.eps))
        if self.weight_decay:
            object.__setattr__(self, "weight_decay", _rate(fn, "weight_decay", self.weight_decay))

    def constants(self) -> list[tuple[str, float]]:
        return [("learning rate", self.lr), ("beta1", self.beta), ("beta2", self.beta2), ("eps", self.eps)] + (
            [("weight decay", self.weight_decay)] if self.weight_decay else [])

    def state(self, params: Sequence[NdArrayType]) -> list[tuple[str, NdArrayType]]:
        dt = params[0].dtype if params else float32
        return [("adam_m", t) for t in params] + [("adam_v", t) for t in params] + [
            ("adam_t", NdArrayType((), dt)), ("adam_lr", NdArrayType((), dt))]

    def state_names(self, names: Sequence[str], params: Sequence[NdArrayType]) -> list[str]:
        return [f"adam_m/{n}" for n in names] + [f"adam_v/{n}" for n in names] + ["adam/t", "adam/lr"]

    def initial(self, name: str) -> float:
        return self.lr if name == "adam/lr" else 0.0

    def update(self, params: Sequence[NdArrayType]) -> Diagram:
        k = len(params)
        b1, b2, wd = self.beta, self.beta2, self.weight_decay

        def step(*vs: Var):
            p, m, v, (t, lr), g = vs[:k], vs[k:2 * k], vs[2 * k:3 * k], vs[3 * k:3 * k + 2], vs[3 * k + 2:]
            t = t + 1.0
            step_size = lr / (1.0 - ops.exp(t * math.log(b1)))
            bc2 = ops.sqrt(1.0 - ops.exp(t * math.log(b2)))
            new_p, new_m, new_v = [], [], []
            for pi, mi, vi, gi in zip(p, m, v, g):
                if wd and self.decoupled:
                    pi = pi - pi * (lr * wd)
                elif wd:
                    gi = gi + ops.scale(pi, wd)
                mi = ops.scale(mi, b1) + ops.scale(gi, 1.0 - b1)
                vi = ops.scale(vi, b2) + ops.scale(gi * gi, 1.0 - b2)
                denom = ops.sqrt(vi) / bc2 + self.eps
                new_p.append(pi - step_size * (mi / denom))
                new_m.append(mi)
                new_v.append(vi)
            return tuple(new_p) + tuple(new_m) + tuple(new_v) + (t, lr)
        types = list(params) + [t for _, t in self.state(params)] + list(params)
        return trace(step, types, name=self.name)


def adam(lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
         weight_decay: float = 0.0) -> Adam:
    """``torch.optim.Adam`` (L2 weight decay added to the gradient)."""
    return Adam(f"adam({lr})", _rate("adam", "learning rate lr", lr), _rate("adam", "beta1", betas[0], 1.0),
                betas[1], eps, weight_decay, False)


def adamw(lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
          weight_decay: float = 0.01) -> Adam:
    """``torch.optim.AdamW`` (decoupled weight decay)."""
    return Adam(f"adamw({lr},wd={weight_decay})", _rate("adamw", "learning rate lr", lr),
                _rate("adamw", "beta1", betas[0], 1.0), betas[1], eps, weight_decay, True)


#: added to the global norm before dividing, as ``torch.nn.utils.clip_grad_norm_``
CLIP_EPS = 1e-6


@dataclass(frozen=True)
class ClipGradNorm(Optimizer):
    """``inner`` applied to gradients clipped by their global norm, as ``torch.nn.utils.clip_grad_norm_``::

        n = sqrt(Σ_params Σ g²);  g ← g · min(1, max_norm / (n + 1e-6))

    The state, its names and initial values are ``inner``'s (a schedule still works). In fixed point
    the ``1e-6`` is one step, like every ε constant, and the sum of squares must fit the format (in
    fixed(32, 16): ``Σ g² < 32768``), else the step raises ``FixedPointOverflow`` naming the ``Mul``.
    """
    inner: Optimizer | None = None
    max_norm: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.inner, Optimizer):
            raise TypeError(f"clip_grad_norm: optimizer must be an nn optimizer (nn.sgd, nn.adamw, …), "
                            f"got {self.inner!r}")
        object.__setattr__(self, "max_norm", _rate("clip_grad_norm", "max_norm", self.max_norm))

    def constants(self) -> list[tuple[str, float]]:
        return self.inner.constants() + [("clip max norm", self.max_norm)]

    def state(self, params: Sequence[NdArrayType]) -> list[tuple[str, NdArrayType]]:
        return self.inner.state(params)

    def state_names(self, names: Sequence[str], params: Sequence[NdArrayType]) -> list[str]:
        return self.inner.state_names(names, params)

    def initial(self, name: str) -> float:
        return self.inner.initial(name)

    def update(self, params: Sequence[NdArrayType]) -> Diagram:
        k, n_state = len(params), len(self.inner.state(params))
        inner = self.inner.update(params)

        def step(*vs: Var):
            g = vs[k + n_state:]
            squares = [ops.sum(gi * gi) for gi in g]
            total = squares[0]
            for sq in squares[1:]:
                total = total + sq
            # min(1, m / (n + ε)) = m / max(n + ε, m): never above 1, so it neither loses a small
            # coefficient to rounding (1 − (1 − c)) nor overflows fixed point when the gradients vanish
            norm = ops.add_epsilon(ops.sqrt(total), CLIP_EPS)
            coef = ops.div(self.max_norm, ops.maximum(norm, ops.constant(norm.type, self.max_norm)))
            return inner(*vs[:k + n_state], *(gi * ops.broadcast_to(coef, gi.shape) for gi in g))
        return trace(step, list(params) + [t for _, t in self.state(params)] + list(params), name=self.name)


def clip_grad_norm(optimizer: Optimizer, max_norm: float = 1.0) -> ClipGradNorm:
    """``optimizer`` after clipping the gradients to global norm ``max_norm`` (``torch.nn.utils.clip_grad_norm_``)."""
    return ClipGradNorm(f"clip_grad_norm({getattr(optimizer, 'name', optimizer)},{max_norm})",
                        getattr(optimizer, "lr", 1.0), 0.0, optimizer, max_norm)

def set_learning_rate(params: dict, lr: float, dtype: Dtype | None = None) -> dict:
    """``params`` with Adam's learning rate ``adam/lr`` set to ``lr`` (same dtype): a schedule, no recompile.

    ``lr`` is checked as the optimizers check theirs: a number (``TypeError`` otherwise), finite and
    > 0 (``ValueError``), and not rounding to 0 in the parameters' dtype.  A fixed-point model keeps the
    rate as a raw integer: pass its ``dtype`` (``cg.fixed(w, f)``, the step's ``dtype``) to quantize ``lr``.
    The new rate is an array of the same module as ``params['adam/lr']``: on the device for a CuPy step
    (checked on the host first, then copied there; nothing is read back from the device). A device array of
    another library (``__cuda_array_interface__``) counts as CuPy's (``cupy.asarray``, no copy).
    """
    lr = _rate("set_learning_rate", "learning rate lr", lr)
    if "adam/lr" not in params:
        raise KeyError("set_learning_rate: params hold no 'adam/lr' (only nn.adam and nn.adamw keep the rate as "
                       "state; other optimizers' rates are constants of the compiled step)")
    # the rate stays where the parameters are: a CuPy rate for a CuPy step (CuPy refuses np.asarray of a device
    # array, and a NumPy 0-d rate would reach a kernel by value)
    from .arguments import array_module, device_array
    old = device_array(params["adam/lr"], "set_learning_rate: params['adam/lr']")   # a torch CUDA tensor: cupy
    xp = array_module(old)
    if not hasattr(old, "dtype"):
        old = np.asarray(old)
    if np.issubdtype(old.dtype, np.integer):
        from .fixedpoint import FixedPointOverflow, const
        from .types import Fixed
        if not isinstance(dtype, Fixed):
            raise TypeError(f"set_learning_rate: params['adam/lr'] is a raw fixed-point integer ({old.dtype}); pass "
                            f"the model's format to quantize lr, e.g. dtype=step.dtype, got dtype={dtype!r}")
        try:
            raw = const(lr, dtype, "set_learning_rate: learning rate lr")
        except FixedPointOverflow as e:
            raise ValueError(str(e)) from None
        return {**params, "adam/lr": xp.asarray(np.asarray(raw, dtype=old.dtype))}
    with np.errstate(over="ignore"):
        new = np.asarray(lr, dtype=old.dtype)
    if not (np.isfinite(new) and new > 0):
        raise ValueError(f"set_learning_rate: learning rate lr {lr!r} becomes {float(new)!r} in {old.dtype}, "
                         f"the dtype of params['adam/lr']")
    return {**params, "adam/lr": new if xp is np else xp.asarray(new)}
