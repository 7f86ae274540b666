"""Dynamo's device interface for ``spyre`` (what ``torch._dynamo`` asks a device for:
current device, count, synchronize, streams, properties), backed by ``torch.spyre``.

Without it Dynamo says "No interface for device spyre" wherever it needs the device
(e.g. device guards, ``torch.compiler`` helpers). The simulated device is synchronous:
one stream, id 0.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device


class SpyreDeviceProperties:
    """What Dynamo reads from a device's properties."""

    def __init__(self, index: int) -> None:
        self.name = torch.spyre.get_device_name(index)
        self.total_memory = torch.spyre.mem_get_info(index)[1]
        self.multi_processor_count = 32  # Spyre cores (the work division uses them)


class SpyreInterface(DeviceInterface):
    device = staticmethod(torch.spyre.device)  # type: ignore[assignment]

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.spyre.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.spyre.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> SpyreDeviceProperties:
            return SpyreInterface.get_device_properties(device)

    @staticmethod
    def current_device() -> int:
        return torch.spyre.current_device()

    @staticmethod
    def set_device(device: torch.types.Device) -> None:
        torch.spyre.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = torch.spyre.current_device()
        torch.spyre.set_device(device)
        return previous

    @staticmethod
    def exchange_device(device: int) -> int:
        return SpyreInterface.maybe_exchange_device(device)

    @staticmethod
    def device_count() -> int:
        return torch.spyre.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.spyre.is_available()

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0

    @staticmethod
    def synchronize(device: torch.types.Device = None) -> None:
        torch.spyre.synchronize(device)

    @classmethod
    def get_device_properties(cls, device: torch.types.Device = None) -> Any:
        index = torch.device(device).index if device is not None and not isinstance(device, int) else device
        return SpyreDeviceProperties(torch.spyre.current_device() if index is None else index)

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> str:
        return "spyre"

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False


def register() -> None:
    """Register the interface for ``spyre`` and each ``spyre:i``."""
    register_interface_for_device("spyre", SpyreInterface)
    for i in range(torch.spyre.device_count()):
        register_interface_for_device(f"spyre:{i}", SpyreInterface)
