"""Backward of views on device memory: ``select_backward`` and ``slice_backward``.

Each is a zero tensor of the input's size (default layout) with the gradient copied into the
view the forward took (the runtime plans that copy between the two buffers, ``view_copy``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .elementwise import fill_
from .operands import default_coords, new_tensor
from .registry import register


def into_zeros(grad: torch.Tensor, input_sizes: Sequence[int], part: Callable[[torch.Tensor], torch.Tensor]
               ) -> torch.Tensor:
    """Zeros of ``input_sizes`` with ``grad`` written into ``part`` of them."""
    out = fill_(new_tensor(default_coords(tuple(input_sizes), grad.dtype), grad.device), 0)
    if grad.numel():
        part(out).copy_(grad)
    return out


def select_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, index: int) -> torch.Tensor:
    return into_zeros(grad, input_sizes, lambda t: t.select(dim, index))


def slice_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int, end: int, step: int
                   ) -> torch.Tensor:
    return into_zeros(grad, input_sizes, lambda t: torch.ops.aten.slice.Tensor(t, dim, start, end, step))


def register_all() -> None:
    register("select_backward", select_backward)
    register("slice_backward", slice_backward)
