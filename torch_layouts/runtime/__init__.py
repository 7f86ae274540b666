"""The spyre device: registration of the C++ runtime with PyTorch."""

from __future__ import annotations

import enum

import torch

from .. import _C
from . import device_module, planner, printing, serialization, tensor_methods


def init() -> None:
    """Rename PrivateUse1 to ``spyre`` and install the runtime (idempotent)."""
    if torch._C._get_privateuse1_backend_name() == "spyre":
        return
    _C._device_count()  # validates TORCH_LAYOUTS_DEVICE_COUNT / _MEMORY now, with a clear error
    torch.utils.rename_privateuse1_backend("spyre")
    torch._register_device_module("spyre", device_module)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    _C._set_planner(planner)
    tensor_methods.install()
    printing.install()
    from .. import htp, mace, tensorrt

    families = (htp, mace, tensorrt)
    safe = [obj for mod in families for obj in vars(mod).values()
            if isinstance(obj, type) and obj.__module__ == mod.__name__
            and (issubclass(obj, enum.Enum) or hasattr(obj, "bind"))]
    serialization.install(safe)
