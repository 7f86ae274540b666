"""Losses on device memory: ``mse_loss`` and ``mse_loss_backward``, composed of device
kernels (pointwise ops and reductions), with the CPU kernels' formulas; ``nll_loss_forward`` and
``nll_loss_backward`` (``cross_entropy``'s), the CPU kernels on strided views of the device
buffers (``operands.host_read``), writing the results' views: the CPU's bits and errors, no copy
of the inputs where they are such views (a floating input or result that is not, log-probabilities
of 1000 classes in padded sticks or their gradient, is copied through a dense row-major layout).
Their recipes are offered to the runtime's front, which replays later calls of a geometry, those
copies too, without Python.

>>> x = torch.randn(4, 3).log_softmax(1)
>>> t = torch.tensor([0, 2, 1, 1])
>>> torch.equal(torch.nn.functional.nll_loss(x.to("spyre"), t.to("spyre")).cpu(), torch.nn.functional.nll_loss(x, t))
True
"""

from __future__ import annotations

import torch

from .. import _C
from ..core.layout import BoundLayout, DeviceLayout
from .elementwise import MUL, SUB, run
from .operands import Read, default_coords, host_read, new_tensor, raw_view, rowmajor, runtime_record
from .view_copy import materialize
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


def _dense(x: torch.Tensor) -> BoundLayout:
    """Coordinates holding ``x`` dense and row-major, with no padding."""
    size = tuple(x.shape)
    stride = rowmajor(size)
    return BoundLayout(DeviceLayout(size, stride, x.dtype, host_size=size, host_stride=stride), size, stride)


def _strided(t: torch.Tensor, copied: bool) -> tuple[torch.Tensor, Read, BoundLayout | None] | None:
    """Where the op reads (``copied``: an input's values) or writes a new result ``t``: ``t`` itself
    through its strided view, or, for a floating tensor that no strided view holds (classes in
    padded sticks), a new dense row-major tensor (holding ``t``'s values when ``copied``; a
    result's is copied into ``t`` after), with its coordinates."""
    r = host_read(t)
    if r is not None or not t.is_floating_point():
        return None if r is None else (t, r, None)
    coords = _dense(t)
    staged = materialize(t, coords) if copied else new_tensor(coords, t.device)
    return staged, host_read(staged), coords


def _on_views(op: torch._ops.OpOverload, args: list, inputs: tuple[int, ...], shapes: list[tuple[int, ...]],
              device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """``op`` (a CPU ``out=`` overload) on strided views of the device tensors at ``inputs`` of
    ``args``, writing new device tensors of ``shapes`` (default layouts) through their views (both
    ``_strided``); the recipe is offered to the runtime's front. Inputs that no read holds go
    through CPU copies."""
    devices = {a.device for a in args if isinstance(a, torch.Tensor)}
    if len(devices) > 1:
        first, second = sorted(map(str, devices))[:2]
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{first} and {second}!")
    outs = [new_tensor(default_coords(shape, dtype), device) for shape in shapes]
    reads = [(i, _strided(args[i], True)) for i in inputs if args[i] is not None]
    written = [_strided(o, False) for o in outs]
    names = [a.name for a in op._schema.arguments if a.is_out]
    if any(r is None for _, r in reads) or any(w is None for w in written):
        values = op.overloadpacket.default(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
        values = values if isinstance(values, tuple) else (values,)
        return tuple(o.copy_(v) for o, v in zip(outs, values))
    call = list(args)
    for i, (t, r, _) in reads:
        call[i] = raw_view(t, *r)
    op(*call, **{name: raw_view(t, *r) for name, (t, r, _) in zip(names, written)})
    for o, (t, _, staged) in zip(outs, written):
        if staged is not None:
            o.copy_(t)
    offered = [(i, *r) + (() if staged is None else (runtime_record(staged), 0)) for i, (_, r, staged) in reads]
    _C._offer_recipe([a if isinstance(a, torch.Tensor) else None for a in args], offered,
                     [runtime_record(default_coords(shape, dtype)) for shape in shapes], [r for _, r, _ in written],
                     [], f"aten::{op._schema.name.split('::')[1]}.{op._overloadname}",
                     staged_outs=[None if staged is None else runtime_record(staged) for _, _, staged in written])
    return tuple(outs)


def nll_loss_forward(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                     ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss (per sample for ``reduction`` none on a batch, else 0-dim) and the total weight."""
    shape = tuple(target.shape) if _reduction(reduction) == "none" and x.dim() == 2 else ()
    return _on_views(torch.ops.aten.nll_loss_forward.output, [x, target, weight, reduction, ignore_index], (0, 1, 2),
                     [shape, ()], x.device, x.dtype)


def nll_loss_backward(grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                      reduction: int, ignore_index: int, total_weight: torch.Tensor) -> torch.Tensor:
    """The gradient of ``nll_loss_forward``'s loss with respect to ``x`` (zeros off the targets)."""
    return _on_views(torch.ops.aten.nll_loss_backward.grad_input,
                     [grad, x, target, weight, reduction, ignore_index, total_weight], (0, 1, 2, 3, 6),
                     [tuple(x.shape)], x.device, x.dtype)[0]


def register_all() -> None:
    register("mse_loss", mse_loss)
    register("mse_loss_backward", mse_loss_backward)
    register("nll_loss_forward", nll_loss_forward)
    register("nll_loss_backward", nll_loss_backward)
