"""Device-to-device relayout: nests copying one layout's buffer into another's.

Both layouts hold the same host tensor (same size; each reads its ``stride_map`` in
its own host strides). Where the two digit structures refine to a common one, the
copy runs device to device in one pass; otherwise ``relayout_transfers`` returns
None and the runtime goes through a host buffer.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ..core.layout import DeviceLayout, check_host
from .plan import Transfer, plan


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
    src_res, dst_res = src.resolve(size, src_stride), dst.resolve(size, dst_stride)
    by_dims = {g.host_dims: g for g in src_res.groups}
    other = []
    for group in dst_res.groups:
        match = by_dims.get(group.host_dims)
        if match is None:
            return None
        other.append([(dig.step, dig.size, dig.device_stride) for dig in match.digits])
    if len(other) != len(src_res.groups):
        return None
    return plan(dst_res, other, 0, broadcast_full=True)
