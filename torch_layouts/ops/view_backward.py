"""Backward of views on device memory: ``select_backward`` and ``slice_backward``.

Each is a zero tensor of the input's size (default layout) with the gradient written into
the view the forward took. That view is read in the default coordinates of the gradient's
shape; when it can be (its stick on the last dim), the gradient's real positions are copied
straight between the two device buffers (a gradient in another arrangement is first
copied into those coordinates, ``elementwise.materialize``); otherwise the runtime copies
into the view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .elementwise import fill_, materialize
from .operands import default_coords, new_tensor, plan, real_slices, view
from .registry import register
from .strided import strided_copy


def into_zeros(grad: torch.Tensor, input_sizes: Sequence[int], part: Callable[[torch.Tensor], torch.Tensor]
               ) -> torch.Tensor:
    """Zeros of ``input_sizes`` with ``grad`` written into ``part`` of them."""
    out = fill_(new_tensor(default_coords(tuple(input_sizes), grad.dtype), grad.device), 0)
    target = part(out)
    if grad.numel() == 0:
        return out
    coords = default_coords(tuple(grad.shape), grad.dtype)
    dst = plan(target, coords)
    pieces, whole = real_slices(coords)
    if whole or dst is None or not dst.stick_ok:
        target.copy_(grad)
        return out
    src = plan(grad, coords)
    if src is None or not src.stick_ok:
        grad = materialize(grad, coords)
        src = plan(grad, coords)
    d, s = view(target, coords, dst), view(grad, coords, src)
    for index in pieces:
        strided_copy(d[index], s[index])
    return out


def select_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, index: int) -> torch.Tensor:
    return into_zeros(grad, input_sizes, lambda t: t.select(dim, index))


def slice_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int, end: int, step: int
                   ) -> torch.Tensor:
    return into_zeros(grad, input_sizes, lambda t: torch.ops.aten.slice.Tensor(t, dim, start, end, step))


def register_all() -> None:
    register("select_backward", select_backward)
    register("slice_backward", slice_backward)
