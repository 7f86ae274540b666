"""The runtime's layout records: what the C++ runtime asks Python.

A device buffer's layout bound to its host tensor, compiled into the record the C++
runtime keeps (``_C.BoundLayout``: DMA nests both ways, padding fills, view addressing);
the default layout of a new tensor; nests to host tensors of other strides and between
layouts. Each answer is memoised; the runtime caches default layouts itself, so the hot
path of small copies never enters Python.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from .. import _C
from ..core import family
from ..core.dtypes import check_device_dtype, int64_downcast
from ..core.layout import BoundLayout, DeviceLayout, LayoutTemplate, cache_by_binding, is_dense
from ..core.mapping import Transfer, View, map_addresses, swap
from ..dma.program import dma_program
from ..dma.relayout import relayout_transfers

Shape = tuple[int, ...]


def default_layout(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> DeviceLayout:
    """The layout a tensor gets without ``device_layout`` (the device family's default)."""
    dtype = check_device_dtype(dtype, "spyre tensor dtype")
    int64_downcast(dtype)
    return family.device_default(size, stride, dtype)


def storage_strides(layout: DeviceLayout, size: Sequence[int], stride: Sequence[int] | None) -> Shape | None:
    """The strides ``layout``'s stride_map is read in for a tensor of this size and strides.

    As in Torch-Spyre, a stride_map counts host *storage* offsets of the tensor it receives:
    device coord c holds the element at offset dot(c, stride_map) of the tensor's own storage.
    A layout made for this size keeps the strides it was made for; a non-dense tensor (gaps or
    overlaps) is read in row-major order. None: the layout's default.
    """
    if stride is None or (layout.host_size == tuple(size) and layout.host_stride is not None):
        return None
    return tuple(stride) if math.prod(size) and is_dense(size, stride) else None


def bind(spec: object, size: Sequence[int], dtype: torch.dtype, stride: Sequence[int] | None = None
         ) -> DeviceLayout:
    """A concrete layout for a host tensor (of strides ``stride``) from a layout or a family template."""
    if isinstance(spec, LayoutTemplate):
        return spec.bind(tuple(size), dtype)
    if isinstance(spec, DeviceLayout):
        if spec.dtype != dtype:
            try:  # a device format may hold several host dtypes (Spyre's IEEE_INT32 holds int64)
                spec = spec.for_host_dtype(dtype)
            except ValueError:
                raise ValueError(f"device_layout {spec} holds {spec.dtype}, the tensor is {dtype}") from None
        int64_downcast(dtype)
        # As in Torch-Spyre, a layout is its stride_map over host storage offsets: one made for
        # another host size with as many elements holds the same offsets (a flat [N] layout
        # holds an [a, b] tensor of N elements); resolve() raises when it cannot.
        if spec.host_size is not None and math.prod(spec.host_size) != math.prod(size):
            raise ValueError(f"device_layout {spec} was made for host size {list(spec.host_size)} "
                             f"({math.prod(spec.host_size)} elements); the tensor's size is {list(size)} "
                             f"({math.prod(size)} elements)")
        spec.resolve(tuple(size), storage_strides(spec, size, stride))
        return spec
    raise TypeError(f"device_layout must be a layout or a layout template, got {spec!r}")


def _extent_bytes(size: Shape, stride: Shape, itemsize: int) -> int:
    if math.prod(size) == 0:
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(size, stride))) * itemsize


def _tuples(transfers: Sequence[Transfer]) -> list[tuple]:
    return [tuple(t) for t in transfers]


@cache_by_binding(maxsize=4096)
def bound_record(layout: DeviceLayout, size: Shape, stride: Shape) -> _C.BoundLayout:
    """The runtime's compiled form of a layout holding a host tensor of this size and strides.

    Memoised per layout *with its host binding*: the record holds the layout the tensor reports.
    """
    h2d = dma_program(layout, size, stride, 0, "h2d")
    d2h = dma_program(layout, size, stride, 0, "d2h")
    identity = h2d.in_host_order
    storage = max(layout.nbytes, _extent_bytes(size, stride, layout.element_size))
    if storage >= 2**63:
        raise torch.OutOfMemoryError(f"{layout!r} needs {storage} bytes, more than any device can hold")
    return _C.BoundLayout(
        layout, list(size), list(stride), layout.dtype, layout.device_numel, storage,
        _tuples(h2d.transfers()), _tuples(d2h.transfers()), [tuple(f) for f in h2d.padding],
        layout.pad_value, identity, _address(layout.resolve(size, stride)),
    )


def _address(res: BoundLayout) -> tuple:
    """The bound layout flattened for the runtime's view addressing (see csrc/bound_layout.h)."""
    size, stride = res.size, res.stride
    order = sorted((d for d in range(len(size)) if size[d] > 1 and stride[d] > 0), key=lambda d: -stride[d])
    groups = [
        (list(g.host_dims), [(dig.step, dig.device_stride) for dig in reversed(g.digits)])
        for g in res.groups
    ]
    copies = [(res.layout.device_size[j], res.layout.device_strides[j]) for j in res.broadcast]
    return [(d, stride[d]) for d in order], groups, copies


def bound_record_for(layout: DeviceLayout, size: Sequence[int]) -> _C.BoundLayout:
    """``bound_record`` with the host strides the layout reads its stride_map in."""
    res = layout.resolve(tuple(size))
    return bound_record(layout, res.size, res.stride)


def default_bound_record(dtype: torch.dtype, size: Shape, stride: Shape) -> _C.BoundLayout:
    return bound_record(default_layout(size, stride, dtype), size, stride)


@functools.lru_cache(maxsize=4096)
def host_nests(layout: DeviceLayout, size: Shape, stride: Shape, host_stride: Shape, h2d: bool) -> list[tuple] | None:
    """Nests between the device buffer and a host tensor whose strides are not the layout's."""
    res = layout.resolve(size, stride)
    if not h2d and any(n > 1 and s == 0 and t != 0 for n, s, t in zip(size, stride, host_stride)):
        return None  # an expanded base dim: the host copies must be replicated, not planned
    transfers = map_addresses(None, View(size, host_stride, 0), res, broadcast_full=h2d)
    if transfers is None:
        return None
    return _tuples(transfers if h2d else swap(transfers))


def relayout_nests(src: DeviceLayout, src_stride: Shape, dst: DeviceLayout, dst_stride: Shape,
                   size: Shape) -> list[tuple] | None:
    transfers = relayout_transfers(src, dst, size, src_stride, dst_stride)
    return None if transfers is None else _tuples(transfers)
