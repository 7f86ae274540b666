"""Device-to-device relayout: nests copying one layout's buffer into another's.

Both layouts hold the same host tensor (same size; each reads its ``stride_map`` in
its own host strides). Where the two digit structures refine to a common one, the
copy runs device to device in one pass; where they do not but one layout holds the
tensor in host order in the same host strides (a dense staging copy of the batched
matmul's result layout), the other's own DMA program copies between the two buffers;
otherwise ``relayout_transfers`` returns None and the runtime goes through a host
buffer. The nests come from the address-mapping engine (``core/mapping.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ..core.layout import DeviceLayout, check_host
from ..core.mapping import Transfer, map_addresses
from .program import dma_program


def relayout_transfers(src: DeviceLayout, dst: DeviceLayout, host_size: Sequence[int],
                       src_host_stride: Sequence[int] | None = None,
                       dst_host_stride: Sequence[int] | None = None) -> list[Transfer] | None:
    """Nests copying ``src``'s device buffer into ``dst``'s (padding untouched), or None."""
    size, src_stride = check_host(host_size, src_host_stride)
    _, dst_stride = check_host(size, dst_host_stride)
    return _relayout(src, dst, size, src_stride, dst_stride)


@functools.lru_cache(maxsize=1024)
def _relayout(src: DeviceLayout, dst: DeviceLayout, size: tuple[int, ...], src_stride: tuple[int, ...],
              dst_stride: tuple[int, ...]) -> list[Transfer] | None:
    nests = map_addresses(src.resolve(size, src_stride), None, dst.resolve(size, dst_stride))
    if nests is None and src_stride == dst_stride:
        nests = _through_host_order(src, dst, size, src_stride)
    return nests


def _through_host_order(src: DeviceLayout, dst: DeviceLayout, size: tuple[int, ...],
                        stride: tuple[int, ...]) -> list[Transfer] | None:
    """Where one layout holds the host tensor in host order (device offsets are host offsets),
    the other's DMA program to or from host memory, run between the two buffers; else None."""
    if dma_program(dst, size, stride).in_host_order:
        return dma_program(src, size, stride, 0, "d2h").transfers()
    if dma_program(src, size, stride).in_host_order:
        return dma_program(dst, size, stride, 0, "h2d").transfers()
    return None
