"""Backward of views on device memory: ``select_backward`` and ``slice_backward``.

Each is a zero tensor of the input's size (default layout) with the gradient copied into the
view the forward took (the runtime plans that copy between the two buffers, ``view_copy``). A
call offers the runtime's front its replay (``csrc/view_backward_recipe.cpp``): later calls of its
geometry make the zeros and the copy without Python (a CPU copy between strided views of the two
buffers where they have them, ``operands.common_reads``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .. import _C
from .elementwise import fill_
from .operands import common_reads, default_coords, new_tensor, runtime_record
from .registry import register


def into_zeros(op: str, grad: torch.Tensor, input_sizes: Sequence[int],
               part: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Zeros of ``input_sizes`` with ``grad`` written into ``part`` of them (``op``'s kernel)."""
    coords = default_coords(tuple(input_sizes), grad.dtype)
    out = fill_(new_tensor(coords, grad.device), 0)
    view = part(out)
    if grad.numel():
        view.copy_(grad)
    _C._offer_view_backward("aten::" + op, grad, runtime_record(coords), list(view.shape), list(view.stride()),
                            view.storage_offset(), *(common_reads(grad, view) or (None, None)))
    return out


def select_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, index: int) -> torch.Tensor:
    return into_zeros("select_backward", grad, input_sizes, lambda t: t.select(dim, index))


def slice_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int, end: int, step: int
                   ) -> torch.Tensor:
    return into_zeros("slice_backward", grad, input_sizes,
                      lambda t: torch.ops.aten.slice.Tensor(t, dim, start, end, step))


def register_all() -> None:
    register("select_backward", select_backward)
    register("slice_backward", slice_backward)
