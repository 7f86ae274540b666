"""Which spyre device a ``device`` argument of the ``torch.spyre`` functions names."""

from __future__ import annotations

import torch

from .. import _C

DeviceLike = torch.device | str | int | None


def _index(device: DeviceLike = None) -> int:
    if device is None:
        return _C._get_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "spyre":
            raise ValueError(f"expected a spyre device, got {device}")
        return _C._get_device() if device.index is None else device.index
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"device must be a torch.device, str or int, got {device!r}")
    return device
