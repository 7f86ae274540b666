"""Losses on device memory: ``mse_loss`` and ``mse_loss_backward``, ``nll_loss_forward`` and
``nll_loss_backward`` (``cross_entropy``'s), the CPU kernels on strided views of the device
buffers (``on_views``), writing the results' views: the CPU's bits and errors, no copy of the
inputs where they are such views (a floating input or result that is not, log-probabilities of
1000 classes in padded sticks or their gradient, is copied through a dense layout). Their
recipes are offered to the runtime's front, which replays later calls of a geometry, those copies
too, without Python.

>>> x = torch.randn(4, 3).log_softmax(1)
>>> t = torch.tensor([0, 2, 1, 1])
>>> torch.equal(torch.nn.functional.nll_loss(x.to("spyre"), t.to("spyre")).cpu(), torch.nn.functional.nll_loss(x, t))
True
"""

from __future__ import annotations

import torch

from .on_views import on_views
from .operands import coords_for, default_coords
from .registry import register

REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # at::Reduction


def _reduction(reduction: int) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction (0: none, 1: mean, 2: sum)")
    return REDUCTIONS[reduction]


def mse_loss(x: torch.Tensor, target: torch.Tensor, reduction: int = 1) -> torch.Tensor:
    """``(x - target) ** 2``, reduced by ``reduction``: unreduced in ``x``'s coordinates, else 0-dim."""
    if _reduction(reduction) == "none":
        return on_views(torch.ops.aten.mse_loss.out, [x, target, reduction], (0, 1), [coords_for(x)], x.device,
                         refine=True)[0]
    # mse_loss.out would compute the unreduced loss in its out= tensor: the functional op, its value copied
    return on_views(torch.ops.aten.mse_loss.default, [x, target, reduction], (0, 1),
                     [default_coords((), x.dtype)], x.device, refine=True)[0]


def mse_loss_backward(grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, reduction: int) -> torch.Tensor:
    """``(x - target) * norm * grad`` with ``norm = 2 / numel`` for a mean, else 2, in ``x``'s coordinates."""
    _reduction(reduction)
    return on_views(torch.ops.aten.mse_loss_backward.grad_input, [grad, x, target, reduction], (0, 1, 2),
                     [coords_for(x)], x.device, refine=True)[0]


def nll_loss_forward(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                     ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss (per sample for ``reduction`` none on a batch, else 0-dim) and the total weight."""
    shape = tuple(target.shape) if _reduction(reduction) == "none" and x.dim() == 2 else ()
    return on_views(torch.ops.aten.nll_loss_forward.output, [x, target, weight, reduction, ignore_index], (0, 1, 2),
                     [default_coords(shape, x.dtype), default_coords((), x.dtype)], x.device)


def nll_loss_backward(grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                      reduction: int, ignore_index: int, total_weight: torch.Tensor) -> torch.Tensor:
    """The gradient of ``nll_loss_forward``'s loss with respect to ``x`` (zeros off the targets)."""
    return on_views(torch.ops.aten.nll_loss_backward.grad_input,
                     [grad, x, target, weight, reduction, ignore_index, total_weight], (0, 1, 2, 3, 6),
                     [default_coords(tuple(x.shape), x.dtype)], x.device)[0]


def register_all() -> None:
    register("mse_loss", mse_loss)
    register("mse_loss_backward", mse_loss_backward)
    register("nll_loss_forward", nll_loss_forward)
    register("nll_loss_backward", nll_loss_backward)
