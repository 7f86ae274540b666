"""``argmax``, ``argmin`` and ``max``/``min`` over a dim on device memory.

Over the dim a tensor's sticks run along (logits over their classes), a large float32 or float16
input is read where it lies by the runtime's row kernel (``_C._rows_arg_extreme``: each run's
extreme by the vector fold, then the first element equal to the row's, or its first NaN: ATen's
index and value), whose rows are the buffer's (``rows.rows``: the padding of a last stick never
read; a box of real positions, classes within a stick, sliced to); the results go back to host
order by the rows' first elements' host indices, worked out once per geometry. ATen's own kernel
walks such a row element by element (1024x1024 float32: 330 us on the CPU), and read it from a
relayouted copy on the device. Every other call runs the CPU kernel on the views
(``on_views.cpu_kernel``), replayed by the runtime's front.

>>> x = torch.randn(300, 1000)
>>> torch.equal(x.to("spyre").argmax(-1).cpu(), x.argmax(-1))
True
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import torch

from .. import _C
from ..core.layout import BoundLayout
from .on_views import cpu_kernel
from .operands import default_coords, geometry_key, keep, layouts_of, new_tensor, raw_view, stick_dim
from .reductions import readable
from .registry import aten_overload, register
from .rows import Rows, rows
from .view_copy import strided_or_staged

# Inputs from which the row kernel takes the call (each call runs Python, its plan kept per
# geometry, where ATen's kernel on the views is replayed without it).
ROWS_FROM = 1 << 16
ROW_DTYPES = (torch.float32, torch.float16)

_FALLBACK = {name: cpu_kernel(aten_overload(name), aten_overload(out))
             for name, out in (("argmax", "argmax.out"), ("argmin", "argmin.out"), ("max.dim", "max.dim_max"),
                               ("min.dim", "min.dim_min"))}


@functools.lru_cache(maxsize=256)
def _host_rows(coords: BoundLayout, dim: int, shape: Rows) -> torch.Tensor:
    """For the rows of ``coords`` read along host dim ``dim`` as ``shape`` reads them: each row's
    index among the host's rows (row-major over the other dims), from its first element's host
    index."""
    first = shape.view(coords.host_map().view(coords.shape))[(...,) + (0,) * shape.width].reshape(-1)
    inner = math.prod(coords.size[dim + 1:])
    return first // (inner * coords.size[dim]) * inner + first % inner


class RowsPlan(NamedTuple):
    """What ``_on_rows`` worked out for an input of one geometry read in place: its coordinates,
    the view of its buffer in them, the rows, and the host order of the rows' results (None:
    already in host order)."""

    coords: BoundLayout
    read: tuple[tuple[int, ...], int]  # strides, offset of the view in the coordinates
    shape: Rows
    order: torch.Tensor | None
    layouts: tuple  # layouts_of the input: the id in the key stays its layout's


PLANS: dict[tuple, RowsPlan | None] = {}  # per geometry and dim; None: the row kernel does not take it
MAX_PLANS = 256


def _plan(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, RowsPlan] | None:
    """The input to read (``x``, or its readable copy) and the rows' plan, kept per geometry where
    ``x`` is read in place; None where the row kernel does not take the call."""
    key = geometry_key(x)
    if key is not None and (key, dim) in PLANS:
        return None if PLANS[key, dim] is None else (x, PLANS[key, dim])
    plan = None
    if x.dtype in ROW_DTYPES and x.numel() >= ROWS_FROM and x.shape[dim] != 0 and stick_dim(x) == dim:
        read, coords, v, _, _ = readable(x, (dim,))
        shape = rows(coords, (dim,), padded=True)
        if shape is not None:
            order = _host_rows(coords, dim, shape)
            identity = torch.equal(order, torch.arange(order.numel()))
            plan = RowsPlan(coords, (tuple(v.stride()), v.storage_offset()), shape, None if identity else order,
                            layouts_of([x]))
            if read is not x:
                return read, plan
    if key is not None:
        keep(PLANS, (key, dim), plan, MAX_PLANS)
    return None if plan is None else (x, plan)


def _on_rows(x: torch.Tensor, dim: int, keepdim: bool, max_: bool, values: bool) -> tuple[torch.Tensor, ...] | None:
    """The row kernel's (indices[, values]) of a reduction over ``x``'s stick dim ``dim``; None
    where it does not take the call. A geometry's plan is kept: later calls only run the kernel
    and write the results (2 threads, float32: ``(1024, 70).max(-1)`` 52 -> 30 us, CPU 31;
    ``(512, 256).argmax(-1)`` 35 -> 20, CPU 55)."""
    planned = _plan(x, dim)
    if planned is None:
        return None
    x, plan = planned
    v = raw_view(x, plan.coords.layout.device_size, *plan.read)
    shape = plan.shape
    count = x.numel() // x.shape[dim]
    indices = torch.empty(count, dtype=torch.int64)
    extremes = torch.empty(count) if values else None
    _C._rows_arg_extreme(shape.view(v), indices, extremes, shape.width, shape.real, max_)
    size = list(x.shape)
    size[dim] = 1
    if not keepdim:
        del size[dim]
    results = [indices] if extremes is None else [extremes.to(x.dtype), indices]
    out = []
    for flat in results:
        host = flat
        if plan.order is not None:
            host = torch.empty_like(flat)
            host[plan.order] = flat
        result = new_tensor(default_coords(tuple(size), host.dtype), x.device)
        target, read, staged = strided_or_staged(result, False)
        raw_view(target, *read).copy_(host.view(size))
        out.append(result.copy_(target) if staged is not None else result)
    return tuple(out)


def _kernel(name: str, max_: bool, values: bool) -> Any:
    fallback = _FALLBACK[name]

    def kernel(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
        if dim is not None and -x.dim() <= dim < x.dim():
            done = _on_rows(x, dim % x.dim(), keepdim, max_, values)
            if done is not None:
                return done if values else done[0]
        return fallback(x, dim, keepdim)
    return kernel


def register_all() -> None:
    register("argmax", _kernel("argmax", True, False))
    register("argmin", _kernel("argmin", False, False))
    register("max.dim", _kernel("max.dim", True, True))
    register("min.dim", _kernel("min.dim", False, True))
