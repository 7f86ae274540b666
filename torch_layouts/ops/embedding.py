"""``embedding_dense_backward`` on device memory: an embedding's weight gradient.

Each token's gradient row is added into the weight row its index names, where both lie in their
buffers (``operands.factored_read``: a row of 256 float32 in Spyre's sticks of 32 reads as 8 runs
of 32), by the runtime's kernel (``csrc/embedding_rows.cpp``): zeros, then the tokens in index
order, each addition rounded once, as ATen's CPU kernel adds them. ``scale_grad_by_freq``, other
dtypes, and rows that no such view holds (padded sticks) run on the CPU fallback, as before.

>>> w, i = torch.randn(10, 64), torch.tensor([[1, 3], [3, 9]])
>>> g = torch.randn(2, 2, 64)
>>> got = torch.ops.aten.embedding_dense_backward(g.to("spyre"), i.to("spyre"), 10, -1, False)
>>> torch.equal(got.cpu(), torch.ops.aten.embedding_dense_backward(g, i, 10, -1, False))
True
"""

from __future__ import annotations

import torch

from .. import _C
from .operands import default_coords, factored_read, new_tensor, raw_view
from .registry import register


def _rows_view(t: torch.Tensor, lead: int) -> torch.Tensor | None:
    """``t``'s buffer as a view of its first ``lead`` dims, then its last dim's refinement (its
    tiles' runs), or None where no strided view refines only the last dim."""
    r = factored_read(t)
    if r is None or any(c != 1 for c in r.counts[:lead]) or r.read[1][-1] != 1:
        return None
    return raw_view(t, *r.read)


def _common_rows(grad: torch.Tensor | None, weight: torch.Tensor | None, lead: int
                 ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The two row views with one row shape (one refined to the other's where their rows' runs
    differ: a single row reads as one run of 64, a batch's as two sticks of 32), or None."""
    if grad is None or weight is None:
        return None
    if grad.shape[lead:] == weight.shape[1:]:
        return grad, weight
    try:  # the coarser one viewed in the finer one's runs (a view, or RuntimeError)
        if grad.dim() - lead > weight.dim() - 1:
            return grad, weight.view(weight.shape[0], *grad.shape[lead:])
        return grad.view(*grad.shape[:lead], *weight.shape[1:]), weight
    except RuntimeError:
        return None


def embedding_dense_backward(grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int, padding_idx: int,
                             scale_grad_by_freq: bool) -> torch.Tensor:
    """The weight gradient of ``embedding(indices, weight)`` given the output's gradient."""
    if not scale_grad_by_freq and grad_output.dtype == torch.float32 and indices.dtype == torch.int64 and \
            grad_output.dim() == indices.dim() + 1 and num_weights > 0 and grad_output.numel() > 0:
        out = new_tensor(default_coords((num_weights, grad_output.shape[-1]), grad_output.dtype), grad_output.device)
        views = _common_rows(_rows_view(grad_output, indices.dim()), _rows_view(out, 1), indices.dim())
        if views is not None:
            _C._embedding_backward_rows(views[0], indices.cpu().contiguous(), padding_idx, views[1])
            return out
    _C._count_fallback("aten::embedding_dense_backward")  # what the CPU fallback does, counted as it counts
    return torch.ops.aten.embedding_dense_backward(grad_output.cpu(), indices.cpu(), num_weights, padding_idx,
                                                   scale_grad_by_freq).to(grad_output.device)


def register_all() -> None:
    register("embedding_dense_backward", embedding_dense_backward)
