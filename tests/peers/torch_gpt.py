"""The GPT of ``nn.gpt`` written directly in PyTorch, on circuitgrad's parameter names.

Used by the tests (gradients equal to 1e-8) and by ``bench/tinygpt.py`` (the same training run in
both frameworks). circuitgrad numbers the parameters of one label in order, so block ``i``'s are
``q_W{i}``, …, and the final layer norm's are ``ln_g0``/``ln_b0``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["BLOCK", "block", "gpt"]

BLOCK = ("ln1_g", "ln1_b", "q_W", "q_b", "k_W", "k_b", "v_W", "v_b", "o_W", "o_b", "ln2_g", "ln2_b", "fc_W", "fc_b",
         "proj_W", "proj_b")


def block(x, p: dict, heads: int, causal: bool, kind: str, i: int = 0, eps: float = 1e-6, attend=None):
    """``nn.transformer_block``: pre-norm attention and GELU MLP with residuals (block ``i``'s parameters).

    ``attend(q, k, v)``, when given, replaces the attention of ``kind`` (``bench/spherical_variants.py``)."""
    B, S, d = x.shape

    def ln(z, tag):
        return F.layer_norm(z, (d,), p[f"{tag}_g{i}"], p[f"{tag}_b{i}"], eps=1e-5)

    def proj(z, tag):
        return z @ p[f"{tag}_W{i}"] + p[f"{tag}_b{i}"]

    h = ln(x, "ln1")
    q, k, v = (proj(h, t).reshape(B, S, heads, d // heads).transpose(1, 2) for t in "qkv")
    if attend is not None:
        o = attend(q, k, v)
    elif kind == "softmax":
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        s = q @ k.transpose(-1, -2) / (d // heads) ** 0.5
        if causal:
            s = s * torch.tril(torch.ones(S, S, dtype=s.dtype, device=s.device))
        o = (s / torch.sqrt((s * s).sum(-1, keepdim=True) + eps)) @ v
    x = x + proj(o.transpose(1, 2).reshape(B, S, d), "o")
    return x + proj(F.gelu(proj(ln(x, "ln2"), "fc"), approximate="tanh"), "proj")


def gpt(ids, p: dict, layers: int, heads: int, kind: str, eps: float = 1e-6, attend=None):
    """``nn.gpt``: logits ``[B, S, vocab]`` of token ids ``[B, S]`` (``attend``: see :func:`block`)."""
    E = p["tok_E0"]
    x = F.one_hot(ids, E.shape[0]).to(E.dtype) @ E + p["pos_P0"]
    for i in range(layers):
        x = block(x, p, heads, True, kind, i, eps, attend)
    x = F.layer_norm(x, (x.shape[-1],), p["ln_g0"], p["ln_b0"], eps=1e-5)
    return x @ p["head_W0"] + p["head_b0"]
