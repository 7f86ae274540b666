"""Helpers shared by the op tests: does a result's padding still hold its pad value."""

from __future__ import annotations

import functools

import torch

import torch_layouts
from torch_layouts import DeviceLayout, _C


@functools.lru_cache(maxsize=256)
def real_mask(layout: DeviceLayout, size: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    return layout.real_mask(size, stride)


def padding_holds_pad_value(y: torch.Tensor) -> bool:
    """Every padding position of ``y``'s device memory holds its layout's pad value."""
    layout = y.device_tensor_layout()
    info = _C._layout_info_of(y)
    real = real_mask(layout, tuple(info.base_size), tuple(info.base_stride))
    memory = torch_layouts.device_memory(y)
    return bool((memory[~real] == torch.tensor(layout.pad_value, dtype=memory.dtype)).all())
