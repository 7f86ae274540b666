"""Torch-Spyre's names on ``torch.spyre``: layouts, device formats, warnings, memory and generators.

Code written for Torch-Spyre imports these from ``torch.spyre`` (README "Torch-Spyre names")::

    from torch.spyre import SpyreTensorLayout, get_device_dtype
    stl = SpyreTensorLayout([4, 512, 64], [64, 256, 1], get_device_dtype(torch.float16))
    torch.spyre.memory.reset_accumulated_memory_stats()
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from .. import _C
from ..core.dtypes import (
    DataFormats,
    data_format,
    elems_per_stick,
    get_downcast_warning,
    int64_downcast,
    set_downcast_warning,
)
from ..core.layout import DeviceLayout
from ..spyre import SpyreTensorLayout
from . import spyre_memory as memory

__all__ = [
    "DataFormats",
    "FallbackWarning",
    "SpyreTensorLayout",
    "default_generators",
    "get_device_dtype",
    "get_downcast_warning",
    "get_elem_in_stick",
    "get_spyre_tensor_layout",
    "memory",
    "set_downcast_warning",
]


class FallbackWarning(UserWarning):
    """An op without a device kernel ran on the CPU fallback (enable with ``torch_layouts.warn_on_fallback()``)."""


def _warn_fallback(message: str) -> None:
    warnings.warn(message, FallbackWarning, stacklevel=2)


def get_device_dtype(dtype: torch.dtype) -> DataFormats:
    """The device format Torch-Spyre gives ``dtype`` (int64 -> IEEE_INT32, with the downcast warning).

    >>> torch.spyre.get_device_dtype(torch.float16)
    DataFormats.SEN169_FP16
    """
    fmt = data_format(dtype)
    int64_downcast(dtype)
    return fmt


def get_elem_in_stick(dtype: torch.dtype) -> int:
    """Elements of ``dtype`` in one 128-byte stick (Torch-Spyre's ``get_elem_in_stick``)."""
    return elems_per_stick(dtype)


def get_spyre_tensor_layout(tensor: torch.Tensor) -> DeviceLayout:
    """The layout of a spyre tensor's buffer (Torch-Spyre's ``get_spyre_tensor_layout``)."""
    layout = tensor.device_tensor_layout() if isinstance(tensor, torch.Tensor) else None
    if layout is None:
        raise ValueError(f"get_spyre_tensor_layout needs a spyre tensor, got "
                         f"{getattr(tensor, 'device', type(tensor).__name__)}")
    return layout


class _DefaultGenerators(Sequence):
    """One generator object per device for the life of the process (``torch.cuda.default_generators``).

    Made on first use, so importing the package reads no device settings.
    """

    def __init__(self) -> None:
        self._made: dict[int, torch.Generator] = {}

    def __len__(self) -> int:
        return _C._device_count()

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(len(self))[index])
        i = range(len(self))[index]  # IndexError names a bad index
        if i not in self._made:
            self._made[i] = _C._get_default_generator(i)
        return self._made[i]

    def __repr__(self) -> str:
        return repr(tuple(self))


default_generators = _DefaultGenerators()


def install() -> None:
    """Send the runtime's CPU-fallback warnings as ``FallbackWarning`` and make ``torch.spyre.memory`` importable."""
    import sys

    _C._set_fallback_warner(_warn_fallback)
    sys.modules.setdefault("torch.spyre.memory", memory)
