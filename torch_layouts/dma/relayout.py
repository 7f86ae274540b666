"""Device-to-device relayout: nests copying one layout's buffer into another's.

Both layouts hold the same host tensor (same size; each reads its ``stride_map`` in
its own host strides). Where the two digit structures refine to a common one, the
copy runs device to device in one pass; otherwise ``relayout_transfers`` returns
None and the runtime goes through a host buffer. The nests come from the
address-mapping engine (``core/mapping.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ..core.layout import DeviceLayout, check_host
from ..core.mapping import Transfer, map_addresses


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
    return map_addresses(src.resolve(size, src_stride), None, dst.resolve(size, dst_stride))
