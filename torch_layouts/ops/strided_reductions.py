"""Reductions of inputs read as strided views in their own shape, where the device-dim path would
copy them first.

A view whose stick is right but whose reduced host dims do not map onto whole device dims of its
coordinates (attention's ``weights.view(bsz, heads, L, S).mean(1)``, the heads split out of one
device dim) would be copied into the default layout first (a view whose stick the rules reject is
still restickified, as the hardware would). When its device offsets are affine in its index
(``operands.host_read``), the CPU's own reduction runs on that strided view of the buffer instead
(and so does a reduction over every dim of any input whose stick is right: ``loss.mean()``),
writing the result's strided view in the layout the restickified path gives (or its values,
copied in, when that layout cuts the result's dims across tiles): no copy of the input, the CPU's
bits. A whole-tensor overload (``x.sum()``) also reads rows of several sticks, its dims split
where they cross tiles: its sum in the buffer's order, within the CPU's rounding of its own.
The plan is kept per geometry; a call of a ``.dim`` overload offers the runtime's front its replay
(the CPU ``out=`` overload on the two views, the call's own dims).

>>> w = torch.rand(4, 6, 6).to("spyre").view(2, 2, 6, 6)
>>> torch.equal(w.mean(1).cpu(), w.cpu().mean(1))
True
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .. import _C
from ..core.layout import BoundLayout
from .operands import Read, factored_read, host_read, layouts_of, new_tensor, raw_view, runtime_record

KINDS = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin}
NATIVE = {"sum": "aten::sum.IntList_out", "mean": "aten::mean.out", "amax": "aten::amax.out",
          "amin": "aten::amin.out"}
# The out= overloads of the whole-tensor overloads (``x.sum()``, ``x.mean()``: self and dtype).
NATIVE_ALL = {"sum": "aten::sum.out", "mean": "aten::mean.dtype_out"}
OUT_ALL = {"sum": torch.ops.aten.sum.out, "mean": torch.ops.aten.mean.dtype_out}
FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class StridedPlan(NamedTuple):
    """The input's strided read, the result's coordinates and its strided view (None: the values
    are copied in); ``layouts`` keeps the input's layout, whose id is in the plan's key, alive."""

    read: Read
    out_coords: BoundLayout
    result: Read | None
    layouts: tuple


def strided_plan(kind: str, x: torch.Tensor, dims: tuple[int, ...], out_coords: BoundLayout,
                 whole: bool = False) -> StridedPlan | None:
    """The plan of a reduction of ``x`` over host ``dims`` into a new tensor of ``out_coords``, or
    None (another kind, an integer input, or offsets that are not affine). A whole-tensor
    overload's (``whole``) reads ``x``'s elements in any shape: its dims split where they cross
    tiles (``operands.factored_read``: a row of several sticks), summed in the buffer's order."""
    if kind not in KINDS or x.dtype not in FLOATS or not dims:
        return None
    read = host_read(x)
    if read is None and whole:
        factored = factored_read(x)
        read = factored.read if factored is not None else None
    if read is None:
        return None
    out = new_tensor(out_coords, x.device)
    return StridedPlan(read, out_coords, host_read(out), layouts_of([x]))


def run(kind: str, x: torch.Tensor, plan: StridedPlan, dims: tuple[int, ...], keepdim: bool,
        dtype: torch.dtype | None, whole: bool = False) -> torch.Tensor:
    """The reduction of ``x`` over host ``dims`` by ``plan``: the CPU op on the input's view, into
    the result's view; the runtime's front is offered the replay (the ``out=`` overload that takes
    the call's own arguments: the ``.dim`` overloads', or with ``whole`` the whole-tensor ``sum``'s
    and ``mean``'s)."""
    v = raw_view(x, *plan.read)
    out = new_tensor(plan.out_coords, x.device)
    fn = KINDS[kind]
    extra = {"dtype": dtype} if kind in ("sum", "mean") else {}
    if plan.result is None:
        return out.copy_(fn(v, **extra) if whole else fn(v, list(dims), keepdim, **extra))
    if whole:
        OUT_ALL[kind](v, **extra, out=raw_view(out, *plan.result))
    else:
        fn(v, list(dims), keepdim, **extra, out=raw_view(out, *plan.result))
    _C._offer_recipe([x], [(0, *plan.read)], runtime_record(plan.out_coords), plan.result, [],
                     NATIVE_ALL[kind] if whole else NATIVE[kind])
    return out
