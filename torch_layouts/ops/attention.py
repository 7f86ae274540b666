"""Scaled dot-product attention on spyre through PyTorch's backend hook.

``F.scaled_dot_product_attention`` asks the backend's ``_fused_sdp_choice`` which kernel to
run; spyre answers "overrideable" (no dropout, no grouped-query heads), and PyTorch then calls
``_scaled_dot_product_fused_attention_overrideable`` (forward, returning the log-sum-exp that
the backward reuses) and its ``_backward``. Other cases get PyTorch's math path (choice 0).
"""

from __future__ import annotations

import math

import torch

from .registry import register

Tensor = torch.Tensor

MATH, OVERRIDEABLE = 0, 4  # sdp::SDPBackend values


def sdp_choice(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
               is_causal: bool = False, *, scale: float | None = None, enable_gqa: bool = False) -> int:
    """The fused path when it applies (no dropout, as many key heads as query heads), else math."""
    plain = dropout_p == 0.0 and not enable_gqa and query.dim() == 4 and query.size(1) == key.size(1)
    return OVERRIDEABLE if plain else MATH


def _scores(query: Tensor, key: Tensor, attn_bias: Tensor | None, is_causal: bool, scale: float | None) -> Tensor:
    factor = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * factor
    if is_causal:
        keep = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool).tril().to(query.device)
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_bias is not None:
        if attn_bias.dtype == torch.bool:
            scores = scores.masked_fill(~attn_bias, float("-inf"))
        else:
            scores = scores + attn_bias
    return scores


def attention(query: Tensor, key: Tensor, value: Tensor, attn_bias: Tensor | None = None, dropout_p: float = 0.0,
              is_causal: bool = False, return_debug_mask: bool = False, *, scale: float | None = None) -> tuple:
    """(output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_attn_mask)."""
    if dropout_p != 0.0:
        raise NotImplementedError(f"spyre's fused attention runs without dropout (dropout_p={dropout_p}); "
                                  "_fused_sdp_choice sends dropout to the math path")
    scores = _scores(query, key, attn_bias, is_causal, scale)
    logsumexp = scores.logsumexp(-1)
    output = torch.matmul((scores - logsumexp.unsqueeze(-1)).exp(), value)
    empty = torch.empty(0, device=query.device)
    return (output, logsumexp, empty, empty, query.size(-2), key.size(-2), empty, empty, empty)


def attention_backward(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, attn_bias: Tensor | None,
                       grad_input_mask: list[bool], out: Tensor, logsumexp: Tensor, cum_seq_q: Tensor,
                       cum_seq_k: Tensor, max_q: int, max_k: int, dropout_p: float, is_causal: bool,
                       philox_seed: Tensor, philox_offset: Tensor, *, scale: float | None = None) -> tuple:
    """(grad_query, grad_key, grad_value, grad_attn_bias) of ``attention``."""
    factor = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    bias = attn_bias if attn_bias is not None and attn_bias.numel() else None
    probs = (_scores(query, key, bias, is_causal, scale) - logsumexp.unsqueeze(-1)).exp()
    grad_value = torch.matmul(probs.transpose(-2, -1), grad_out)
    grad_probs = torch.matmul(grad_out, value.transpose(-2, -1))
    grad_scores = probs * (grad_probs - (grad_out * out).sum(-1, keepdim=True))
    grad_query = torch.matmul(grad_scores, key) * factor
    grad_key = torch.matmul(grad_scores.transpose(-2, -1), query) * factor
    grad_bias = None
    if grad_input_mask[3] and bias is not None and bias.dtype != torch.bool:
        grad_bias = grad_scores.sum_to_size(bias.shape)
    return grad_query, grad_key, grad_value, grad_bias


def register_all() -> None:
    register("_fused_sdp_choice", sdp_choice)
    register("_scaled_dot_product_fused_attention_overrideable", attention)
    register("_scaled_dot_product_fused_attention_overrideable_backward", attention_backward)
