"""XiaoMi MACE layouts: OpenCL RGBA 2-D images and the CPU runtime's buffer orders.

A GPU tensor lives in a ``width x height`` image of RGBA pixels, 4 elements each,
row-major: device offset ``(y * width + x) * 4 + lane``. The 4 lanes hold 4
consecutive indices (``% 4``) of one logical dim; missing lanes are zero.
Logical orders: NHWC for in/out tensors (2-D NC as N,1,1,C), OIHW for conv
filters, MIHW for depthwise filters (multiplier 1), 1-D for arguments.

Image shapes and pixel mappings follow MACE's ``OpenCLUtil::CalImage2DShape``
(mace/core/runtime/opencl/opencl_util.cc) and the buffer_to_image kernels
(mace/ops/opencl/cl/buffer_to_image.cl); docs/design.md section 8. WINOGRAD_FILTER is
left out: its kernel transforms the values, it does not only move them.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from .core.family import Family, register
from .core.layout import DeviceLayout, LayoutTemplate, check_host, contiguous_strides

LANES = 4
DEFAULT_MAX_IMAGE_SIZE = (16384, 16384)  # (CL_DEVICE_IMAGE2D_MAX_WIDTH, CL_DEVICE_IMAGE2D_MAX_HEIGHT)

Part = Literal["all", "blocks", "lane"]  # a whole logical dim, its ceil(n/4) blocks, or its n % 4
Axis = tuple[int, Part]

N, H, W, C = range(4)  # NHWC
O, I, KH, KW = range(4)  # OIHW, and MIHW with M in place of O


class BufferType(enum.Enum):
    """MACE's ``OpenCLBufferType`` (same values), minus WINOGRAD_FILTER."""

    CONV2D_FILTER = 0
    IN_OUT_CHANNEL = 1
    ARGUMENT = 2
    IN_OUT_HEIGHT = 3
    IN_OUT_WIDTH = 4
    DW_CONV2D_FILTER = 6
    WEIGHT_HEIGHT = 7
    WEIGHT_WIDTH = 8

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class _Image:
    """A buffer type's logical order and its image: row axes (y), column axes (x), the lane axis."""

    order: str
    rows: tuple[Axis, ...]
    cols: tuple[Axis, ...]
    lane: int


_IMAGES = {
    # [W * ceil(C/4), N * H]: x = (c/4)*W + w, y = n*H + h, lane c%4
    BufferType.IN_OUT_CHANNEL: _Image("NHWC", ((N, "all"), (H, "all")), ((C, "blocks"), (W, "all")), C),
    # [W * C, N * ceil(H/4)]: x = c*W + w, y = n*ceil(H/4) + h/4, lane h%4
    BufferType.IN_OUT_HEIGHT: _Image("NHWC", ((N, "all"), (H, "blocks")), ((C, "all"), (W, "all")), H),
    # [ceil(W/4) * C, N * H]: x = c*ceil(W/4) + w/4, y = n*H + h, lane w%4
    BufferType.IN_OUT_WIDTH: _Image("NHWC", ((N, "all"), (H, "all")), ((C, "all"), (W, "blocks")), W),
    # [I, ceil(O/4) * KH * KW]: x = i, y = (o/4)*KH*KW + kh*KW + kw, lane o%4
    BufferType.CONV2D_FILTER: _Image("OIHW", ((O, "blocks"), (KH, "all"), (KW, "all")), ((I, "all"),), O),
    # [KH * KW * M, ceil(I/4)] with M = 1: x = kh*KW + kw, y = i/4, lane i%4
    BufferType.DW_CONV2D_FILTER: _Image("MIHW", ((I, "blocks"),), ((KH, "all"), (KW, "all")), I),
    # [ceil(W/4), 1]: x = w/4, lane w%4
    BufferType.ARGUMENT: _Image("W", (), ((0, "blocks"),), 0),
    # [I * KH * KW, ceil(O/4)]: x = (kh*KW + kw)*I + i, y = o/4, lane o%4
    BufferType.WEIGHT_HEIGHT: _Image("OIHW", ((O, "blocks"),), ((KH, "all"), (KW, "all"), (I, "all")), O),
    # [ceil(I/4) * KH * KW, O]: x = (kh*KW + kw)*ceil(I/4) + i/4, y = o, lane i%4
    BufferType.WEIGHT_WIDTH: _Image("OIHW", ((O, "all"),), ((KH, "all"), (KW, "all"), (I, "blocks")), I),
}


def _logical_shape(order: str, host_size: tuple[int, ...], what: str) -> tuple[int, ...]:
    """The host size in ``order``'s rank; 2-D NC in/out tensors become N,1,1,C."""
    if order == "NHWC" and len(host_size) == 2:
        return (host_size[0], 1, 1, host_size[1])
    if len(host_size) != len(order):
        nc = " (or a 2-D NC)" if order == "NHWC" else ""
        raise ValueError(f"{what} takes a {len(order)}-D {order}{nc} tensor, got host size {list(host_size)} "
                         f"(rank {len(host_size)})")
    return host_size


def _device_dims(shape: tuple[int, ...], axes: Sequence[Axis]) -> tuple[list[int], list[int]]:
    """Device dims (row-major) and their host strides; size-1 logical dims get -1."""
    strides = contiguous_strides(shape)
    device_size, stride_map = [], []
    for dim, part in axes:
        n, step = shape[dim], strides[dim]
        extent = {"all": n, "blocks": -(-n // LANES), "lane": LANES}[part]
        device_size.append(extent)
        stride_map.append(-1 if n <= 1 else step * LANES if part == "blocks" else step)
    return device_size, stride_map


def _image_dims(buffer_type: BufferType, host_size: tuple[int, ...]) -> tuple[tuple[int, int], list[int], list[int]]:
    image = _IMAGES[buffer_type]
    shape = _logical_shape(image.order, host_size, buffer_type.name)
    if buffer_type is BufferType.DW_CONV2D_FILTER and shape[0] != 1:
        raise ValueError(f"DW_CONV2D_FILTER supports depthwise multiplier M=1 only, got M={shape[0]} "
                         f"in MIHW host size {list(shape)}")
    device_size, stride_map = _device_dims(shape, image.rows + image.cols + ((image.lane, "lane"),))
    rows = len(image.rows)
    return (math.prod(device_size[rows:-1]), math.prod(device_size[:rows])), device_size, stride_map


def _check_buffer_type(buffer_type: object) -> BufferType:
    if not isinstance(buffer_type, BufferType):
        raise TypeError(f"buffer_type must be a mace.BufferType, got {buffer_type!r}")
    return buffer_type


def image_shape(buffer_type: BufferType, shape: Sequence[int]) -> tuple[int, int]:
    """MACE's ``CalImage2DShape``: the (width, height) in pixels of a tensor's image."""
    size, _ = check_host(shape, None)
    return _image_dims(_check_buffer_type(buffer_type), size)[0]


def _check_max_image_size(max_image_size: object) -> tuple[int, int]:
    if (isinstance(max_image_size, (str, bytes)) or not isinstance(max_image_size, Sequence)
            or len(max_image_size) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in max_image_size)):
        raise TypeError(f"max_image_size must be a (width, height) pair of ints, got {max_image_size!r}")
    if min(max_image_size) < 1:
        raise ValueError(f"max_image_size {tuple(max_image_size)} must be positive")
    return int(max_image_size[0]), int(max_image_size[1])


class BoundImageLayout(DeviceLayout):
    """A MACE image layout bound to a host tensor: device memory is the RGBA image."""

    __slots__ = ("buffer_type", "image_shape")

    buffer_type: BufferType
    image_shape: tuple[int, int]  # (width, height) in pixels

    def __init__(self, buffer_type: BufferType, host_size: Sequence[int], dtype: torch.dtype, *,
                 max_image_size: Sequence[int] = DEFAULT_MAX_IMAGE_SIZE) -> None:
        buffer_type = _check_buffer_type(buffer_type)
        max_w, max_h = _check_max_image_size(max_image_size)
        size, _ = check_host(host_size, None)
        (width, height), device_size, stride_map = _image_dims(buffer_type, size)
        for what, value, limit, cl_name in (("width", width, max_w, "CL_DEVICE_IMAGE2D_MAX_WIDTH"),
                                            ("height", height, max_h, "CL_DEVICE_IMAGE2D_MAX_HEIGHT")):
            if value > limit:
                raise ValueError(
                    f"{buffer_type.name} image of host size {list(size)} is {width}x{height} pixels: its {what} "
                    f"{value} exceeds the maximum image {what} {limit} ({cl_name})"
                )
        super().__init__(device_size, stride_map, dtype, host_size=size)
        object.__setattr__(self, "buffer_type", buffer_type)
        object.__setattr__(self, "image_shape", (width, height))

    def _identity(self) -> tuple:
        return super()._identity() + (self.buffer_type, self.image_shape)

    def __str__(self) -> str:
        width, height = self.image_shape
        return f"ImageLayout({self.buffer_type.name}) bound to {list(self.host_size)}: image {width}x{height} RGBA"

    def pixel(self, host_index: Sequence[int]) -> tuple[int, int, int]:
        """``(x, y, lane)`` of the pixel holding the host element at ``host_index``."""
        pixel, lane = divmod(self.device_offset(host_index), LANES)
        y, x = divmod(pixel, self.image_shape[0])
        return x, y, lane

    def host_index_at(self, x: int, y: int, lane: int) -> tuple[int, ...] | None:
        """Host index held by lane ``lane`` of pixel ``(x, y)``, or None where it is zero padding."""
        width, height = self.image_shape
        for name, value, bound in (("x", x, width), ("y", y, height), ("lane", lane, LANES)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
                raise IndexError(f"{name}={value!r} is outside [0, {bound}) of the {width}x{height} RGBA image")
        return self.host_index((y * width + x) * LANES + lane)


@dataclass(frozen=True)
class ImageLayout(LayoutTemplate):
    """A MACE image layout template; ``x.to("spyre", device_layout=ImageLayout(bt))`` binds it to ``x``."""

    buffer_type: BufferType
    max_image_size: tuple[int, int] = DEFAULT_MAX_IMAGE_SIZE

    def __post_init__(self) -> None:
        _check_buffer_type(self.buffer_type)
        object.__setattr__(self, "max_image_size", _check_max_image_size(self.max_image_size))

    def bind(self, host_size: Sequence[int], dtype: torch.dtype) -> BoundImageLayout:
        return BoundImageLayout(self.buffer_type, host_size, dtype, max_image_size=self.max_image_size)

    def __str__(self) -> str:
        limit = "" if self.max_image_size == DEFAULT_MAX_IMAGE_SIZE else f", max_image_size={self.max_image_size}"
        return f"ImageLayout({self.buffer_type.name}{limit})"


class CpuLayout(enum.Enum):
    """MACE's CPU runtime buffer orders; the value is the logical order and the stored order."""

    CPU_NCHW = ("NHWC", (N, C, H, W))  # an NHWC tensor stored NCHW (2-D NC as N,1,1,C)
    CPU_OIHW = ("OIHW", (O, I, KH, KW))
    CPU_MIHW = ("MIHW", (O, I, KH, KW))
    CPU_W = ("W", (0,))

    def bind(self, host_size: Sequence[int], dtype: torch.dtype) -> BoundCpuLayout:
        return BoundCpuLayout(self, host_size, dtype)

    def __str__(self) -> str:
        return self.name


LayoutTemplate.register(CpuLayout)

CPU_NCHW, CPU_OIHW, CPU_MIHW, CPU_W = CpuLayout


class BoundCpuLayout(DeviceLayout):
    """A MACE CPU buffer order bound to a host tensor: a pure permutation, no padding."""

    __slots__ = ("order",)

    order: CpuLayout

    def __init__(self, order: CpuLayout, host_size: Sequence[int], dtype: torch.dtype) -> None:
        if not isinstance(order, CpuLayout):
            raise TypeError(f"order must be a mace.CpuLayout, got {order!r}")
        size, _ = check_host(host_size, None)
        logical, stored = order.value
        shape = _logical_shape(logical, size, order.name)
        device_size, stride_map = _device_dims(shape, [(d, "all") for d in stored])
        super().__init__(device_size, stride_map, dtype, host_size=size)
        object.__setattr__(self, "order", order)

    def _identity(self) -> tuple:
        return super()._identity() + (self.order,)

    def __str__(self) -> str:
        return f"{self.order.name} bound to {list(self.host_size)}"


def parse(spec: str) -> ImageLayout | CpuLayout:
    """A template from a CLI spec: a buffer type (``IN_OUT_CHANNEL``) or a CPU order (``CPU_NCHW``), any case."""
    if not isinstance(spec, str):
        raise TypeError(f"spec must be a str, got {spec!r}")
    name = spec.strip().upper()
    if name in BufferType.__members__:
        return ImageLayout(BufferType[name])
    if name in CpuLayout.__members__:
        return CpuLayout[name]
    known = ", ".join([*BufferType.__members__, *CpuLayout.__members__])
    raise ValueError(f"unknown MACE layout spec {spec!r}; expected one of {known}")


def _build(notation: str, host_size: tuple[int, ...], dtype: torch.dtype | None, pad_value: int | float,
           dim_order: Sequence[int] | None) -> BoundImageLayout | BoundCpuLayout:
    """The CLI's ``mace:TYPE``; float32 by default. MACE's images and buffers always pad with zero."""
    if pad_value != 0:
        raise ValueError(f"MACE layouts always pad with zero; --pad-value {pad_value} is not possible for "
                         f"mace:{notation}")
    return parse(notation).bind(host_size, dtype or torch.float32)


def _facts(layout: DeviceLayout) -> list[tuple[str, str]]:
    if not isinstance(layout, BoundImageLayout):
        return []
    width, height = layout.image_shape
    return [("image", f"{width} x {height} RGBA pixels (width x height)")]


register(Family(
    name="mace",
    layout_types=(BoundImageLayout, BoundCpuLayout),
    build=_build,
    specs=(("mace:TYPE", "a MACE buffer type (IN_OUT_CHANNEL, IN_OUT_HEIGHT, IN_OUT_WIDTH, CONV2D_FILTER, "
                         "DW_CONV2D_FILTER, ARGUMENT, WEIGHT_HEIGHT, WEIGHT_WIDTH) or a CPU order (CPU_NCHW, "
                         "CPU_OIHW, CPU_MIHW, CPU_W)"),),
    example="mace:IN_OUT_CHANNEL",
    logical_dims="NHWC / OIHW / MIHW / W",
    chunk_name=lambda layout: "pixel" if isinstance(layout, BoundImageLayout) else "row",
    facts=_facts,
    picture_line=lambda layout: layout.image_shape[0] if isinstance(layout, BoundImageLayout) else None,
    safe_classes=(BufferType, ImageLayout, CpuLayout),
))
