"""``torch.spyre`` device queries beyond the basics: initialisation, properties, capability.

Example::

    >>> torch.spyre.init()
    >>> props = torch.spyre.get_device_properties("spyre:0")
    >>> props.name, props.total_memory == torch.spyre.mem_get_info(0)[1]
    ('spyre (simulated, torch_layouts)', True)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import _C

DeviceLike = torch.device | str | int | None

# The simulated device's (major, minor) generation, as get_device_capability reports it.
CAPABILITY = (1, 0)


def _index(device: DeviceLike) -> int:
    if device is None:
        return _C._get_device()
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        device = torch.device(device)
        if device.type != "spyre":
            raise ValueError(f"expected a spyre device, got {device}")
        index = _C._get_device() if device.index is None else device.index
    _C._capacity(index)  # RuntimeError "The device index is out of range" for a bad index
    return index


@dataclass(frozen=True)
class SpyreDeviceProperties:
    """What ``torch.cuda.get_device_properties`` reports, for a simulated spyre device."""

    name: str
    index: int
    total_memory: int  # the device capacity in bytes (TORCH_LAYOUTS_DEVICE_MEMORY, else host-derived)
    major: int
    minor: int
    multi_processor_count: int = 1
    is_integrated: bool = True  # device memory is host memory


def init() -> None:
    """Initialise the spyre runtime (the simulated devices are ready at import; idempotent)."""
    if _C._device_count() < 1:
        raise RuntimeError("no spyre device (TORCH_LAYOUTS_DEVICE_COUNT must be at least 1)")


def get_device_properties(device: DeviceLike = None) -> SpyreDeviceProperties:
    """Name, capacity and generation of a spyre device (default: the current one)."""
    index = _index(device)
    return SpyreDeviceProperties("spyre (simulated, torch_layouts)", index, _C._capacity(index), *CAPABILITY)


def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
    """(major, minor) generation of a spyre device: the simulated device is (1, 0)."""
    _index(device)
    return CAPABILITY
