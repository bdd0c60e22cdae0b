"""Layers, losses and optimizers: definitions, i.e. named diagrams of primitives. The layers are defined
here; the losses in :mod:`circuitgrad.losses` and the optimizers in :mod:`circuitgrad.optimizers`, both
re-exported here so that ``nn`` is the one namespace a model file needs.

Layers are morphisms ``X → Y`` whose parameters are :class:`Parameter`
operations inside the diagram, so they compose with ``>>`` and tensor with ``@``::

    model = dense(B, 4, 16) >> relu(B, 16) >> dense(B, 16, 3)

Losses are functions ``T ↦ (Ŷ ⊗ Y → float[])`` and optimizers build the update
``P ⊗ S ⊗ dP → P ⊗ S`` for the parameter types ``P`` (``S`` = optimizer state).
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from . import ops
from .diagram import Diagram, fresh_parameters, sequential
from .tracing import Var, trace
from .losses import mse, softmax_cross_entropy  # noqa: F401 (re-exported)
from .optimizers import (Adam, ClipGradNorm, Optimizer, adam, adamw, clip_grad_norm,  # noqa: F401 (re-exported)
                         momentum, set_learning_rate, sgd)
from .provenance import scope
from .types import Dtype, NdArrayType, float32, index

__all__ = [
    "linear", "bias", "dense", "relu", "sigmoid", "tanh", "softmax",
    "mse", "softmax_cross_entropy", "sgd", "momentum", "Optimizer", "mlp",
    "gelu", "layer_norm", "rms_norm", "attention", "transformer_block", "Adam", "adam", "adamw",
    "set_learning_rate", "embedding", "positional_embedding", "gpt",
    "conv2d", "max_pool2d", "avg_pool2d", "flatten", "ClipGradNorm", "clip_grad_norm",
]


def _layer(fn: Callable[..., Diagram]) -> Callable[..., Diagram]:
    """Trace a layer once per set of arguments; each call gets a copy with parameters of its own.

    A deep model builds the same few layers many times: copying a traced layer and giving it fresh
    parameters (:func:`~circuitgrad.diagram.fresh_parameters`) costs a tenth of tracing it again.
    Arguments that cannot be hashed (lists) trace every time.
    """
    traced = functools.lru_cache(maxsize=512)(fn)

    @functools.wraps(fn)
    def layer(*args, **kwargs) -> Diagram:
        try:
            hash((args, tuple(kwargs.items())))
        except TypeError:                      # a list argument: no cache key, so trace anew
            return fn(*args, **kwargs)
        return fresh_parameters(traced(*args, **kwargs))
    return layer


def _T(shape: Sequence[int], dtype: Dtype) -> NdArrayType:
    return NdArrayType(tuple(shape), dtype)


# ------------------------------------------------------------------ layers
@_layer
def linear(B: int, n: int, m: int, dtype: Dtype = float32) -> Diagram:
    """``x ↦ x @ W`` with ``W : [n, m]`` (Glorot-uniform initialised)."""
    W = _T((n, m), dtype)
    return trace(lambda x: x @ ops.param(W, "W"), [_T((B, n), dtype)], name=f"linear({B},{n},{m})")


@_layer
def bias(B: int, m: int, dtype: Dtype = float32) -> Diagram:
    """``x ↦ x + b`` with ``b : [m]`` broadcast over the batch (zero initialised)."""
    b = _T((m,), dtype)
    return trace(lambda x: x + ops.param(b, "b", init="zeros"), [_T((B, m), dtype)], name=f"bias({B},{m})")


@_layer
def dense(B: int, n: int, m: int, dtype: Dtype = float32) -> Diagram:
    """``linear(B, n, m) >> bias(B, m)``::

            ┌────────┐   ┌──────┐
        x ──┤ @ W    ├───┤ + b  ├── y
            └────────┘   └──────┘
    """
    return sequential([linear(B, n, m, dtype), bias(B, m, dtype)], name=f"dense({B},{n},{m})")


@_layer
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
@_layer
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


@_layer
def max_pool2d(B: int, C: int, H: int, W: int, kernel: int | tuple[int, int] = 2, stride=None,
               dtype: Dtype = float32) -> Diagram:
    """``torch.nn.MaxPool2d(kernel, stride)`` (``stride`` defaults to ``kernel``; no padding)."""
    return trace(lambda x: ops.max_pool2d(x, kernel, stride), [_T((B, C, H, W), dtype)],
                 name=_shape_name("max_pool2d", (B, C, H, W), kernel=kernel, stride=stride))


@_layer
def avg_pool2d(B: int, C: int, H: int, W: int, kernel: int | tuple[int, int] = 2, stride=None, padding=0,
               dtype: Dtype = float32) -> Diagram:
    """``torch.nn.AvgPool2d(kernel, stride, padding)`` (zero padding counted, PyTorch's default)."""
    return trace(lambda x: ops.avg_pool2d(x, kernel, stride, padding), [_T((B, C, H, W), dtype)],
                 name=_shape_name("avg_pool2d", (B, C, H, W), kernel=kernel, stride=stride, padding=padding))


@_layer
def flatten(B: int, *shape: int, dtype: Dtype = float32) -> Diagram:
    """``[B, *shape] → [B, Π shape]`` (``torch.nn.Flatten``)."""
    n = int(np.prod(shape, dtype=np.int64))
    return trace(lambda x: ops.reshape(x, (B, n)), [_T((B,) + shape, dtype)], name=_shape_name("flatten", (B,) + shape))

# ------------------------------------------------------ transformer layers
def _shape_name(name: str, shape: Sequence[int], **kw) -> str:
    extra = "".join(f",{k}={v}" for k, v in kw.items())
    return f"{name}({','.join(map(str, shape))}{extra})"


@_layer
def gelu(*shape: int, dtype: Dtype = float32) -> Diagram:
    """GELU, tanh approximation (PyTorch's ``approximate="tanh"``)."""
    return _elementwise("gelu", ops.gelu, shape, dtype)


@_layer
def layer_norm(*shape: int, eps: float = 1e-5, dtype: Dtype = float32) -> Diagram:
    """Layer normalisation over the last axis with a learned gain ``g`` (ones) and bias ``b`` (zeros)."""
    d = shape[-1]

    def f(x):
        g = ops.param(_T((d,), dtype), "ln_g", init="ones")
        b = ops.param(_T((d,), dtype), "ln_b", init="zeros")
        return ops.layer_norm(x, eps) * g + b
    return trace(f, [_T(shape, dtype)], name=_shape_name("layer_norm", shape))


@_layer
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


@_layer
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


@_layer
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


@_layer
def embedding(B: int, S: int, vocab: int, d: int, dtype: Dtype = float32) -> Diagram:
    """Token ids ``index(vocab)[B, S]`` to vectors ``[B, S, d]``: ``OneHot(ids) @ E`` with ``E ~ N(0, 0.02²)``."""
    def f(ids):
        E = ops.param(_T((vocab, d), dtype), "tok_E", init="normal")
        return ops.one_hot(ids, dtype) @ E
    return trace(f, [NdArrayType((B, S), index(vocab))], name=_shape_name("embedding", (B, S, vocab, d)))


@_layer
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
