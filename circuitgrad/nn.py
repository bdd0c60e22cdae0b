"""Layers, losses and optimizers: definitions, i.e. named diagrams of primitives.

Layers are morphisms ``X → Y`` whose parameters are :class:`Parameter`
operations inside the diagram, so they compose with ``>>`` and tensor with ``@``::

    model = dense(B, 4, 16) >> relu(B, 16) >> dense(B, 16, 3)

Losses are functions ``T ↦ (Ŷ ⊗ Y → float[])`` and optimizers build the update
``P ⊗ S ⊗ dP → P ⊗ S`` for the parameter types ``P`` (``S`` = optimizer state).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import ops
from .diagram import Diagram, Var, sequential, trace
from .provenance import scope
from .types import Dtype, NdArrayType, float32, index

__all__ = [
    "linear", "bias", "dense", "relu", "sigmoid", "tanh", "softmax",
    "mse", "softmax_cross_entropy", "sgd", "momentum", "Optimizer", "mlp",
    "gelu", "layer_norm", "rms_norm", "attention", "transformer_block", "Adam", "adam", "adamw",
    "set_learning_rate", "embedding", "positional_embedding", "gpt",
    "conv2d", "max_pool2d", "avg_pool2d", "flatten", "ClipGradNorm", "clip_grad_norm",
]


def _T(shape: Sequence[int], dtype: Dtype) -> NdArrayType:
    return NdArrayType(tuple(shape), dtype)


# ------------------------------------------------------------------ layers
def linear(B: int, n: int, m: int, dtype: Dtype = float32) -> Diagram:
    """``x ↦ x @ W`` with ``W : [n, m]`` (Glorot-uniform initialised)."""
    W = _T((n, m), dtype)
    return trace(lambda x: x @ ops.param(W, "W"), [_T((B, n), dtype)], name=f"linear({B},{n},{m})")


def bias(B: int, m: int, dtype: Dtype = float32) -> Diagram:
    """``x ↦ x + b`` with ``b : [m]`` broadcast over the batch (zero initialised)."""
    b = _T((m,), dtype)
    return trace(lambda x: x + ops.param(b, "b", init="zeros"), [_T((B, m), dtype)], name=f"bias({B},{m})")


def dense(B: int, n: int, m: int, dtype: Dtype = float32) -> Diagram:
    """``linear(B, n, m) >> bias(B, m)``::

            ┌────────┐   ┌──────┐
        x ──┤ @ W    ├───┤ + b  ├── y
            └────────┘   └──────┘
    """
    return sequential([linear(B, n, m, dtype), bias(B, m, dtype)], name=f"dense({B},{n},{m})")


def _elementwise(name: str, fn, shape: Sequence[int], dtype: Dtype) -> Diagram:
    return trace(fn, [_T(shape, dtype)], name=f"{name}({','.join(map(str, shape))})")


def relu(*shape: int, dtype: Dtype = float32) -> Diagram:
    """``max(x, 0) = x · H(x)`` (exact in fixed point)."""
    return _elementwise("relu", ops.relu, shape, dtype)


def sigmoid(*shape: int, dtype: Dtype = float32) -> Diagram:
    """Logistic sigmoid."""
    return _elementwise("sigmoid", ops.sigmoid, shape, dtype)


def tanh(*shape: int, dtype: Dtype = float32) -> Diagram:
    """Hyperbolic tangent."""
    return _elementwise("tanh", ops.tanh, shape, dtype)


def softmax(*shape: int, dtype: Dtype = float32) -> Diagram:
    """Softmax over the last axis."""
    return _elementwise("softmax", ops.softmax, shape, dtype)


def mlp(B: int, sizes: Sequence[int], activation=relu, dtype: Dtype = float32) -> Diagram:
    """``dense >> activation >> … >> dense`` through the layer ``sizes``."""
    layers = []
    for i, (n, m) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(dense(B, n, m, dtype))
        if i < len(sizes) - 2:
            layers.append(activation(B, m, dtype=dtype))
    return sequential(layers, name=f"mlp({B},{'-'.join(map(str, sizes))})")



# ------------------------------------------------------------ convolutions
def conv2d(B: int, C: int, H: int, W: int, O: int, kernel: int | tuple[int, int] = 3, stride=1, padding=0,
           bias: bool = True, dtype: Dtype = float32) -> Diagram:
    """``torch.nn.Conv2d(C, O, kernel, stride, padding)`` on ``[B, C, H, W]`` images (NCHW)::

               ┌────────┐   ┌───────────────┐   ┌─────┐
        x ─────┤ Unfold ├───┤ w[O, C·kh·kw] @├───┤ + b ├── y : [B, O, Ho, Wo]
               └────────┘   └───────────────┘   └─────┘

    Weights ``w : [O, C, kh, kw]`` (Glorot-uniform), bias ``b : [O]`` (zeros) unless ``bias=False``.
    """
    k = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
    Wt = _T((O, C) + k, dtype)

    def f(x):
        y = ops.conv2d(x, ops.param(Wt, "W"), stride, padding)
        if bias:
            y = y + ops.broadcast_to(ops.param(_T((O, 1, 1), dtype), "b", init="zeros"), y.shape)
        return y
    return trace(f, [_T((B, C, H, W), dtype)], name=_shape_name("conv2d", (B, C, H, W, O), kernel=kernel,
                                                                 stride=stride, padding=padding))


def max_pool2d(B: int, C: int, H: int, W: int, kernel: int | tuple[int, int] = 2, stride=None,
               dtype: Dtype = float32) -> Diagram:
    """``torch.nn.MaxPool2d(kernel, stride)`` (``stride`` defaults to ``kernel``; no padding)."""
    return trace(lambda x: ops.max_pool2d(x, kernel, stride), [_T((B, C, H, W), dtype)],
                 name=_shape_name("max_pool2d", (B, C, H, W), kernel=kernel, stride=stride))


def avg_pool2d(B: int, C: int, H: int, W: int, kernel: int | tuple[int, int] = 2, stride=None, padding=0,
               dtype: Dtype = float32) -> Diagram:
    """``torch.nn.AvgPool2d(kernel, stride, padding)`` (zero padding counted, PyTorch's default)."""
    return trace(lambda x: ops.avg_pool2d(x, kernel, stride, padding), [_T((B, C, H, W), dtype)],
                 name=_shape_name("avg_pool2d", (B, C, H, W), kernel=kernel, stride=stride, padding=padding))


def flatten(B: int, *shape: int, dtype: Dtype = float32) -> Diagram:
    """``[B, *shape] → [B, Π shape]`` (``torch.nn.Flatten``)."""
    n = int(np.prod(shape, dtype=np.int64))
    return trace(lambda x: ops.reshape(x, (B, n)), [_T((B,) + shape, dtype)], name=_shape_name("flatten", (B,) + shape))

# ------------------------------------------------------------------ losses
def mse(T: NdArrayType) -> Diagram:
    """Mean squared error ``mean((ŷ − y)²)`` over all elements: ``T ⊗ T → []``."""
    def loss(yhat: Var, y: Var) -> Var:
        d = yhat - y
        return ops.scale(ops.sum(d * d), 1.0 / T.size)
    return trace(loss, [T, T], name="mse")


def softmax_cross_entropy(T: NdArrayType) -> Diagram:
    """``mean_rows(logsumexp(ŷ_r) − Σ_k y_rk ŷ_rk)``: ``[..., K] ⊗ [..., K] → []`` (``y`` one-hot rows).

    Rows are every index but the last: ``[B, K]`` averages over the batch, ``[B, S, V]`` over every
    position, as ``torch.nn.functional.cross_entropy`` does. Integer labels (``[B]`` or ``[B, S]``)
    are accepted at the call and one-hot encoded there. Its reverse derivative is
    ``(softmax(ŷ) − y) / rows``: the log is never differentiated, so the fixed-point step needs only
    softmax.
    """
    B = int(np.prod(T.shape[:-1], dtype=np.int64)) if T.ndim > 1 else 1

    def loss(yhat: Var, y: Var) -> Var:
        per_row = ops.logsumexp(yhat) - ops.sum(y * yhat, axis=-1)
        return ops.scale(ops.sum(per_row), 1.0 / B)
    return trace(loss, [T, T], name="softmax_cross_entropy")


# -------------------------------------------------------------- optimizers
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


# ------------------------------------------------------ transformer layers
def _shape_name(name: str, shape: Sequence[int], **kw) -> str:
    extra = "".join(f",{k}={v}" for k, v in kw.items())
    return f"{name}({','.join(map(str, shape))}{extra})"


def gelu(*shape: int, dtype: Dtype = float32) -> Diagram:
    """GELU, tanh approximation (PyTorch's ``approximate="tanh"``)."""
    return _elementwise("gelu", ops.gelu, shape, dtype)


def layer_norm(*shape: int, eps: float = 1e-5, dtype: Dtype = float32) -> Diagram:
    """Layer normalisation over the last axis with a learned gain ``g`` (ones) and bias ``b`` (zeros)."""
    d = shape[-1]

    def f(x):
        g = ops.param(_T((d,), dtype), "ln_g", init="ones")
        b = ops.param(_T((d,), dtype), "ln_b", init="zeros")
        return ops.layer_norm(x, eps) * g + b
    return trace(f, [_T(shape, dtype)], name=_shape_name("layer_norm", shape))


def rms_norm(*shape: int, eps: float = 1e-6, dtype: Dtype = float32) -> Diagram:
    """RMS normalisation over the last axis, ``x / sqrt(mean(x²) + eps) · g`` (``g`` ones)."""
    d = shape[-1]

    def f(x):
        g = ops.param(_T((d,), dtype), "rms_g", init="ones")
        r = ops.rsqrt(ops.add_epsilon(ops.mean(x * x, -1), eps))
        return x * ops.broadcast_to(ops.reshape(r, x.shape[:-1] + (1,)), x.shape) * g
    return trace(f, [_T(shape, dtype)], name=_shape_name("rms_norm", shape))


def _project(x: Var, n: int, m: int, label: str, dtype: Dtype) -> Var:
    """``x @ W + b`` over the last axis, the definition ``label``."""
    with scope(label):
        W = ops.param(_T((n, m), dtype), f"{label}_W")
        b = ops.param(_T((m,), dtype), f"{label}_b", init="zeros")
        return x @ W + b


def _heads(x: Var, heads: int) -> Var:
    """``[B, S, d] → [B, heads, S, d/heads]``."""
    B, S, d = x.shape
    return ops.permute(ops.reshape(x, (B, S, heads, d // heads)), (0, 2, 1, 3))


def _multi_head(x: Var, d: int, heads: int, causal: bool, kind: str, dtype: Dtype) -> Var:
    B, S, _ = x.shape
    q, k, v = (_heads(_project(x, d, d, n, dtype), heads) for n in ("q", "k", "v"))
    o = ops.permute(ops.attention(q, k, v, causal=causal, kind=kind), (0, 2, 1, 3))
    return _project(ops.reshape(o, (B, S, d)), d, d, "o", dtype)


def _check_heads(fn: str, d: int, heads: int, kind: str) -> None:
    if heads < 1 or d % heads:
        raise ValueError(f"{fn}: d={d} must be a multiple of heads={heads}")
    if kind not in ("softmax", "spherical"):
        raise ValueError(f"{fn}: attention must be 'softmax' or 'spherical', got {kind!r}")


def attention(B: int, S: int, d: int, heads: int = 1, causal: bool = False, kind: str = "softmax",
              dtype: Dtype = float32) -> Diagram:
    """Multi-head self-attention ``[B, S, d] → [B, S, d]``: projections ``q, k, v, o`` with biases,
    ``heads`` heads of width ``d/heads``, softmax or spherical attention (see :func:`ops.attention`)::

              ┌─ x@Wq ─┐
        x ──┬─┼─ x@Wk ─┼── attention per head ── concat ── @Wo ── y
            └─┴─ x@Wv ─┘
    """
    _check_heads("nn.attention", d, heads, kind)
    return trace(lambda x: _multi_head(x, d, heads, causal, kind, dtype), [_T((B, S, d), dtype)],
                 name=_shape_name("attention", (B, S, d), heads=heads, kind=kind, causal=causal))


def transformer_block(B: int, S: int, d: int, heads: int = 1, causal: bool = True, kind: str = "softmax",
                      mlp_ratio: int = 4, dtype: Dtype = float32) -> Diagram:
    """A pre-norm transformer block: ``x + attention(ln(x))``, then ``x + mlp(ln(x))`` with a GELU MLP."""
    _check_heads("nn.transformer_block", d, heads, kind)

    def block(x):
        def ln(z, tag):
            with scope(tag):
                g = ops.param(_T((d,), dtype), f"{tag}_g", init="ones")
                b = ops.param(_T((d,), dtype), f"{tag}_b", init="zeros")
                return ops.layer_norm(z) * g + b
        z = ln(x, "ln1")
        with scope("attention"):
            z = _multi_head(z, d, heads, causal, kind, dtype)
        x = x + z                      # both residual adds belong to the block, outside their sublayer
        z = ln(x, "ln2")
        with scope("mlp"):
            z = _project(ops.gelu(_project(z, d, mlp_ratio * d, "fc", dtype)), mlp_ratio * d, d, "proj", dtype)
        return x + z
    return trace(block, [_T((B, S, d), dtype)],
                 name=_shape_name("transformer_block", (B, S, d), heads=heads, kind=kind), path="block")


def embedding(B: int, S: int, vocab: int, d: int, dtype: Dtype = float32) -> Diagram:
    """Token ids ``index(vocab)[B, S]`` to vectors ``[B, S, d]``: ``OneHot(ids) @ E`` with ``E ~ N(0, 0.02²)``."""
    def f(ids):
        E = ops.param(_T((vocab, d), dtype), "tok_E", init="normal")
        return ops.one_hot(ids, dtype) @ E
    return trace(f, [NdArrayType((B, S), index(vocab))], name=_shape_name("embedding", (B, S, vocab, d)))


def positional_embedding(B: int, S: int, d: int, dtype: Dtype = float32) -> Diagram:
    """``x + P`` with a learned position table ``P : [S, d]`` (``N(0, 0.02²)``) broadcast over the batch."""
    def f(x):
        return x + ops.param(_T((S, d), dtype), "pos_P", init="normal")
    return trace(f, [_T((B, S, d), dtype)], name=_shape_name("positional_embedding", (B, S, d)))


def gpt(B: int, S: int, vocab: int, d: int = 128, heads: int = 4, layers: int = 2, attention: str = "softmax",
        mlp_ratio: int = 4, dtype: Dtype = float32) -> Diagram:
    """A GPT: token and position embeddings, ``layers`` causal pre-norm blocks, a final layer norm and a
    linear head to ``vocab`` logits: ``index(vocab)[B, S] → [B, S, vocab]``::

        ids ── embedding ── + positions ── block × layers ── layer_norm ── @W + b ── logits
    """
    _check_heads("nn.gpt", d, heads, attention)
    if layers < 0:
        raise ValueError(f"nn.gpt: layers must be ≥ 0, got {layers}")
    parts = [embedding(B, S, vocab, d, dtype), positional_embedding(B, S, d, dtype)]
    parts += [transformer_block(B, S, d, heads, True, attention, mlp_ratio, dtype) for _ in range(layers)]
    parts += [layer_norm(B, S, d, dtype=dtype), trace(lambda x: _project(x, d, vocab, "head", dtype),
                                                      [_T((B, S, d), dtype)], name=f"head({d},{vocab})", path="")]
    return sequential(parts, name=f"gpt(B={B},S={S},vocab={vocab},d={d},heads={heads},layers={layers},"
                                  f"{attention})")


# -------------------------------------------------------------------- Adam
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
            ("adam_t", _T((), dt)), ("adam_lr", _T((), dt))]

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
