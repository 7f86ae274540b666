"""``torch.save``/``torch.load`` of spyre tensors: values, layout and view are preserved.

A spyre tensor pickles as its base tensor's host values, the layout and its view
geometry; loading rebuilds the device buffer in that layout (or a CPU tensor under
``map_location="cpu"``).
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _C
from ..core.layout import DeviceLayout
from .tensor_methods import empty_with_layout

_original_reduce = torch.Tensor._reduce_ex_internal


def _reduce_ex_internal(self: torch.Tensor, proto: int) -> tuple:
    if self.device.type != "spyre" or _C._layout_info_of(self) is None:
        return _original_reduce(self, proto)
    info = _C._layout_info_of(self)
    base = torch.empty(0, dtype=self.dtype, device=self.device).set_(
        self.untyped_storage(), 0, info.base_size, info.base_stride)
    host = _C._to_host(base)
    view = (tuple(self.shape), tuple(self.stride()), self.storage_offset())
    return (rebuild, (host, info.layout, tuple(info.base_stride), view, str(self.device), self.requires_grad))


def rebuild(host: torch.Tensor, layout: DeviceLayout, base_stride: tuple[int, ...],
            view: tuple[tuple[int, ...], tuple[int, ...], int], device: str, requires_grad: bool) -> torch.Tensor:
    """Recreate a saved spyre tensor (the unpickling side of ``_reduce_ex_internal``)."""
    if not isinstance(host, torch.Tensor) or not isinstance(layout, DeviceLayout):
        raise ValueError(f"corrupt spyre tensor record: host {type(host).__name__}, layout {type(layout).__name__}")
    size, stride, offset = view
    target = torch.device(torch._utils._get_restore_location(device))
    if target.type != "spyre":
        result = host.as_strided(size, stride, offset).to(target)
    else:
        base = empty_with_layout(layout, host.shape, host.dtype, target, base_stride)
        base.copy_(host)
        result = base.as_strided(size, stride, offset)
    return result.requires_grad_(requires_grad)


def _subclasses(cls: type) -> list[type]:
    return [cls] + [sub for direct in cls.__subclasses__() for sub in _subclasses(direct)]


def install(extra_safe: list[Any]) -> None:
    """Pickle spyre tensors with their layout; allow their records under ``weights_only`` loading."""
    from ..core.layout import _restore

    torch.Tensor._reduce_ex_internal = _reduce_ex_internal
    torch.serialization.add_safe_globals([rebuild, _restore, *_subclasses(DeviceLayout), *extra_safe])

