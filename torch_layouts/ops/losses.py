"""Losses on device memory: ``mse_loss`` and ``mse_loss_backward``, composed of device
kernels (pointwise ops and reductions), with the CPU kernels' formulas."""

from __future__ import annotations

import torch

from .elementwise import MUL, SUB, run
from .reductions import reduce
from .registry import register

REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # at::Reduction


def _reduction(reduction: int) -> str:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction (0: none, 1: mean, 2: sum)")
    return REDUCTIONS[reduction]


def mse_loss(x: torch.Tensor, target: torch.Tensor, reduction: int = 1) -> torch.Tensor:
    """``(x - target) ** 2``, reduced by ``reduction``."""
    kind = _reduction(reduction)
    diff = run(SUB, [x, target], {})
    run(MUL, [diff, diff], {}, target=diff)
    return diff if kind == "none" else reduce(kind, diff, None, False, None)


def mse_loss_backward(grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, reduction: int) -> torch.Tensor:
    """``(x - target) * norm * grad`` with ``norm = 2 / numel`` for a mean, else 2."""
    norm = 2.0 / x.numel() if _reduction(reduction) == "mean" else 2.0
    out = run(SUB, [x, target], {})
    run(MUL, [out, norm], {}, target=out)
    return run(MUL, [out, grad], {}, target=out)


def register_all() -> None:
    register("mse_loss", mse_loss)
    register("mse_loss_backward", mse_loss_backward)
