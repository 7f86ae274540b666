"""Losses on device memory: ``mse_loss`` and ``mse_loss_backward``, ``nll_loss_forward`` and
``nll_loss_backward`` (``cross_entropy``'s), the CPU kernels on strided views of the device
buffers (``on_views``), writing the results' views: the CPU's bits and errors, no copy of the
inputs where they are such views (a floating input or result that is not is copied through a
dense layout). ``nll_loss`` of float32 classes in sticks (log-probabilities of 1000 or 1024
classes in Spyre's layout: no 2-D view), unweighted and reduced, runs the runtime's nll_loss row
kernels (``csrc/nll_loss_rows.cpp``) on the rows' views instead: the forward reads one element a
row, the backward writes its result where it lies, with no copy of the classes. Their recipes are
offered to the runtime's front, which replays later calls of a geometry, those copies too,
without Python.

>>> x = torch.randn(4, 3).log_softmax(1)
>>> t = torch.tensor([0, 2, 1, 1])
>>> torch.equal(torch.nn.functional.nll_loss(x.to("spyre"), t.to("spyre")).cpu(), torch.nn.functional.nll_loss(x, t))
True
"""

from __future__ import annotations

import torch

from .. import _C
from ..core.layout import BoundLayout
from .on_views import finish, on_views
from .operands import Read, coords_for, default_coords, host_read, new_tensor, raw, raw_view, read_of, runtime_record
from .reductions import readable
from .registry import register
from .rows import rows
from .view_copy import strided_or_staged

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


def _class_rows(x: torch.Tensor, coords: BoundLayout | None = None) -> tuple[torch.Tensor, Read, int] | None:
    """Where float32 ``x`` (rows, classes) lies in ``coords`` (default: its own) with no 2-D
    strided view (classes in sticks), the tensor read, its rows' view of that buffer (``rows.Rows``:
    a row, then the class dim's device dims) and the real classes a row, as the runtime's nll_loss
    row kernels take them; None elsewhere (a 2-D view: ATen's kernel reads it where it lies)."""
    if x.dim() != 2 or x.dtype != torch.float32 or x.shape[0] == 0 or x.shape[1] == 0:
        return None
    if coords is None:
        if host_read(x) is not None:
            return None
        x, coords, v, _, _ = readable(x, (1,))
    else:  # a new result in these coordinates
        v = raw(x).view(coords.shape)
    shape = rows(coords, (1,), padded=True)
    if shape is None or shape.box is not None:
        return None
    return x, read_of(shape.view(v)), shape.length(coords)


def _on_rows(name: str, kernel: object, args: list, viewed: dict[int, tuple[torch.Tensor, Read]],
             inputs: tuple[int, ...], outs: list[torch.Tensor], row_out: tuple[int, Read] | None,
             classes: int, kernel_args: list) -> bool:
    """``kernel`` (``_C._nll_loss_rows`` or its backward) on views of ``args``' device tensors:
    those in ``viewed`` through the rows' views given, the others at ``inputs`` and the new results
    ``outs`` through ``strided_or_staged``'s (the result at ``row_out`` through its rows' view).
    ``kernel_args`` lists the kernel's arguments: an int is that argument's view (a result's as
    ``-1 - k``), anything else passes as it is (wrapped in a 1-tuple). The recipe of ``name``, its
    compute, is offered to the runtime's front where each rows' view is of the call's own tensor
    (a copy's view would not fit the next call's buffer: a slice across sticks is read from a
    restickified copy). False, having written nothing, where the kernel refuses the views."""
    reads = {i: (t, r, None) for i, (t, r) in viewed.items()}
    for i in inputs:
        if i not in reads and args[i] is not None:
            reads[i] = strided_or_staged(args[i], True)
    written = [(o, row_out[1], None) if row_out is not None and k == row_out[0] else strided_or_staged(o, False)
               for k, o in enumerate(outs)]
    if any(r is None for r in reads.values()) or any(w is None for w in written):
        return False
    operands = [raw_view(written[-1 - a][0], *written[-1 - a][1]) if isinstance(a, int) and a < 0
                else raw_view(reads[a][0], *reads[a][1]) if isinstance(a, int) else a[0] for a in kernel_args]
    if not kernel(*operands, classes):
        return False
    finish(args, outs, [runtime_record(coords_for(o)) for o in outs], reads.items(), written, name, classes,
           offer=all(t is args[i] for i, (t, _) in viewed.items()))
    return True


def nll_loss_forward(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                     ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss (per sample for ``reduction`` none on a batch, else 0-dim) and the total weight."""
    shape = tuple(target.shape) if _reduction(reduction) == "none" and x.dim() == 2 else ()
    args = [x, target, weight, reduction, ignore_index]
    class_rows = _class_rows(x) if weight is None and reduction in (1, 2) and target.dim() == 1 else None
    if class_rows is not None:
        outs = [new_tensor(default_coords((), x.dtype), x.device) for _ in range(2)]
        xs, view, classes = class_rows
        if _on_rows("aten::nll_loss_forward.output", _C._nll_loss_rows, args, {0: (xs, view)}, (1,), outs, None,
                    classes, [0, 1, (reduction,), (ignore_index,), -1, -2]):
            return outs[0], outs[1]
    return on_views(torch.ops.aten.nll_loss_forward.output, args, (0, 1, 2),
                     [default_coords(shape, x.dtype), default_coords((), x.dtype)], x.device)


def nll_loss_backward(grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                      reduction: int, ignore_index: int, total_weight: torch.Tensor) -> torch.Tensor:
    """The gradient of ``nll_loss_forward``'s loss with respect to ``x`` (zeros off the targets)."""
    args = [grad, x, target, weight, reduction, ignore_index, total_weight]
    coords = default_coords(tuple(x.shape), x.dtype)
    class_rows = _class_rows(x) if weight is None and reduction in (1, 2) and target.dim() == 1 else None
    if class_rows is not None:
        out = new_tensor(coords, x.device)
        written = _class_rows(out, coords)
        xs, view, classes = class_rows
        if written is not None and written[2] == classes and _on_rows(
                "aten::nll_loss_backward.grad_input", _C._nll_loss_backward_rows, args, {1: (xs, view)}, (0, 2, 6),
                [out], (0, written[1]), classes, [0, 2, (reduction,), (ignore_index,), 6, -1]):
            return out
    return on_views(torch.ops.aten.nll_loss_backward.grad_input, args, (0, 1, 2, 3, 6), [coords], x.device)[0]


def register_all() -> None:
    register("mse_loss", mse_loss)
    register("mse_loss_backward", mse_loss_backward)
    register("nll_loss_forward", nll_loss_forward)
    register("nll_loss_backward", nll_loss_backward)
