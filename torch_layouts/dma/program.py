"""DMA programs: the loop nests that move a host tensor into or out of device memory.

``dma_program(layout, host_size, host_stride)`` reads ``stride_map`` in the host
strides given (default row-major), as Torch-Spyre's DCI generation does. Each nest
holds loop ranges, device strides and host strides ordered by decreasing device
stride, plus a device and a host offset (docs/design.md section 5). Padding is never
moved: an H2D program also lists the padding positions it sets to the pad value.
The nests come from the address-mapping engine (``core/mapping.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.layout import DeviceLayout, cache_by_binding
from ..core.mapping import Fill, Transfer, View, map_addresses, padding, swap

DIRECTIONS = ("h2d", "d2h")
_LOOP_VARS = "ijklmnopqrstuvwxyzabcdefgh"


@dataclass(frozen=True)
class Nest:
    """One loop nest: ``device[device_offset + dot(idx, device_strides)]`` <-> ``host[host_offset + dot(idx, host_strides)]``."""

    ranges: tuple[int, ...]
    device_strides: tuple[int, ...]
    host_strides: tuple[int, ...]
    device_offset: int = 0
    host_offset: int = 0

    @property
    def elements(self) -> int:
        return math.prod(self.ranges)


@dataclass(frozen=True)
class DmaProgram:
    """The loop nests moving one host tensor to (``h2d``) or from (``d2h``) device memory."""

    direction: str
    layout: DeviceLayout
    host_size: tuple[int, ...]
    host_stride: tuple[int, ...]
    host_offset: int
    nests: tuple[Nest, ...]
    padding: tuple[Fill, ...]

    @property
    def elements(self) -> int:
        """Real elements moved."""
        return sum(n.elements for n in self.nests)

    @property
    def nbytes(self) -> int:
        return self.elements * self.layout.element_size

    @property
    def in_host_order(self) -> bool:
        """Whether the device buffer holds the host tensor as host memory does: no padding, every
        element at its host offset (a dense layout in its host strides' order)."""
        return (not self.padding and self.layout.device_numel == math.prod(self.host_size)
                and all(len(n.ranges) == 1 and n.device_strides == (1,) and n.host_strides == (1,)
                        and n.device_offset == n.host_offset for n in self.nests))

    def transfers(self) -> list[Transfer]:
        """Nests as (ranges, dst strides, src strides, dst offset, src offset)."""
        out = [Transfer(n.ranges, n.device_strides, n.host_strides, n.device_offset, n.host_offset) for n in self.nests]
        return out if self.direction == "h2d" else swap(out)

    def __str__(self) -> str:
        layout = self.layout
        arrow = "->" if self.direction == "h2d" else "<-"
        lines = [
            f"# {self.direction.upper()}: host size {list(self.host_size)} stride {list(self.host_stride)} "
            f"offset {self.host_offset} {arrow} {layout}",
            f"# {len(self.nests)} nest(s), {self.elements} elements, {self.nbytes} bytes; "
            f"device buffer {layout.device_numel} elements ({layout.nbytes} bytes)",
        ]
        for n in self.nests:
            dev = _index_expr(n.device_offset, n.device_strides, n.device_strides)
            host = _index_expr(n.host_offset, n.host_strides, n.device_strides)
            stmt = f"device[{dev}] = host[{host}]" if self.direction == "h2d" else f"host[{host}] = device[{dev}]"
            lines += _loops(n.ranges, stmt)
        if self.direction == "h2d" and self.padding:
            lines.append(f"# padding: {sum(math.prod(f.ranges) for f in self.padding)} positions")
            for f in self.padding:
                lines += _loops(f.ranges, f"device[{_index_expr(f.offset, f.strides, f.strides)}] = {layout.pad_value!r}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A DCI-like description: sizes, source/destination strides and offsets per nest."""
        h2d = self.direction == "h2d"
        host = {"size": list(self.host_size), "stride": list(self.host_stride), "offset": self.host_offset}
        device = {"size": list(self.layout.device_size), "numel": self.layout.device_numel,
                  "nbytes": self.layout.nbytes}
        return {
            "direction": self.direction.upper(),
            "dtype": str(self.layout.dtype).removeprefix("torch."),
            "element_size": self.layout.element_size,
            "layout": {"kind": type(self.layout).__name__, "text": str(self.layout),
                       "device_size": list(self.layout.device_size), "stride_map": list(self.layout.stride_map)},
            "source": host if h2d else device,
            "destination": device if h2d else host,
            "nests": [
                {
                    "sizes": list(n.ranges),
                    "source": {"strides": list(n.host_strides if h2d else n.device_strides),
                               "offset": n.host_offset if h2d else n.device_offset},
                    "destination": {"strides": list(n.device_strides if h2d else n.host_strides),
                                    "offset": n.device_offset if h2d else n.host_offset},
                }
                for n in self.nests
            ],
            "padding": [
                {"sizes": list(f.ranges), "strides": list(f.strides), "offset": f.offset, "value": self.layout.pad_value}
                for f in (self.padding if h2d else ())
            ],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def _index_expr(offset: int, strides: Sequence[int], order: Sequence[int]) -> str:
    """``offset + i*s0 + ...`` with terms sorted by decreasing stride (loop vars follow ``order``)."""
    terms = sorted(((s, _LOOP_VARS[i]) for i, s in enumerate(strides) if s != 0), key=lambda t: -t[0])
    parts = [v if s == 1 else f"{v}*{s}" for s, v in terms]
    if offset or not parts:
        parts.insert(0, str(offset))
    return " + ".join(parts)


def _loops(ranges: Sequence[int], statement: str) -> list[str]:
    lines = [f"{'  ' * depth}for {_LOOP_VARS[depth]} in range({r}):" for depth, r in enumerate(ranges)]
    return lines + ["  " * len(ranges) + statement]


def dma_program(layout: DeviceLayout, host_size: Sequence[int] | None = None,
                host_stride: Sequence[int] | None = None, host_offset: int = 0,
                direction: str = "h2d") -> DmaProgram:
    """The DMA program between a host tensor and ``layout``, memoised per argument set.

    ``stride_map`` is read in ``host_stride`` (default row-major strides of ``host_size``,
    or the host the layout was made for); ``host_offset`` is the host tensor's storage offset.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    if isinstance(host_offset, bool) or not isinstance(host_offset, int) or host_offset < 0:
        raise ValueError(f"host_offset must be a non-negative int, got {host_offset!r}")
    res = layout.resolve(host_size, host_stride)
    return _program(layout, res.size, res.stride, host_offset, direction)


@cache_by_binding(maxsize=4096)  # the program holds the layout
def _program(layout: DeviceLayout, size: tuple[int, ...], stride: tuple[int, ...], host_offset: int,
             direction: str) -> DmaProgram:
    res = layout.resolve(size, stride)
    transfers = map_addresses(None, View(size, stride, host_offset), res, broadcast_full=direction == "h2d")
    assert transfers is not None, "a layout's own host strides are linear in every group"
    nests = tuple(Nest(*t) for t in transfers)
    fills = tuple(padding(res)) if direction == "h2d" else ()
    return DmaProgram(direction, layout, size, stride, host_offset, nests, fills)


__all__ = ["DmaProgram", "Nest", "dma_program"]
