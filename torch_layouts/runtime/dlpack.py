"""DLPack export of spyre tensors: a plain strided view, or a clear refusal.

A DLPack capsule describes memory as (pointer, sizes, strides). A spyre tensor's buffer is that
memory only when its layout keeps the elements in host order without padding (a raw buffer or an
identity layout); a tiled buffer read that way would give wrong values. Such tensors are refused
with ``BufferError`` unless the caller allows a copy (``__dlpack__(copy=True)`` /
``torch.from_dlpack(t, copy=True)``), which exports a fresh host-order device buffer.
PyTorch has no device hook for DLPack export, so ``Tensor.__dlpack__`` and ``to_dlpack`` are
wrapped; every other tensor goes straight to PyTorch.

Example::

    >>> torch.from_dlpack(torch.arange(6.).reshape(2, 3).to("spyre"))
    BufferError: cannot export a spyre tensor in SpyreTensorLayout(...) through DLPack ...
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .. import _C

_original: dict[str, Callable[..., Any]] = {}


def is_strided_buffer(tensor: torch.Tensor) -> bool:
    """The device buffer holds ``tensor``'s elements where its strides say (no tiling, no padding)."""
    info = _C._bound_layout_of(tensor)
    return info is None or info.identity


def host_order_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of ``tensor`` on its device in a raw buffer (bytes in row-major host order)."""
    storage = torch.UntypedStorage(tensor.numel() * tensor.element_size(), device=tensor.device)
    out = torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(storage, 0, tensor.shape)
    return out.copy_(tensor.detach())


def exportable(tensor: torch.Tensor, copy: bool | None) -> torch.Tensor:
    """``tensor`` itself when DLPack may alias it, a host-order copy when ``copy`` asks for one
    (PyTorch's own copy, ``clone()``, would be tiled again)."""
    if tensor.device.type != "spyre":
        return tensor
    if copy:
        return host_order_copy(tensor)
    if is_strided_buffer(tensor):
        return tensor
    raise BufferError(
        f"cannot export a spyre tensor in {tensor.device_tensor_layout()} through DLPack: its device buffer "
        "is tiled, not the strided tensor DLPack describes. Pass copy=True (torch.from_dlpack(t, copy=True) "
        "or t.__dlpack__(copy=True)) for a host-order copy on the device, or export t.cpu()")


def _dlpack(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    if self.device.type == "spyre" and not torch.overrides.has_torch_function_unary(self):
        copy = kwargs.get("copy")
        source = exportable(self, copy)
        if source is not self:
            kwargs["copy"] = False  # copied already, in host order
            return _original["__dlpack__"](source, *args, **kwargs)
    return _original["__dlpack__"](self, *args, **kwargs)


def _dlpack_device(self: torch.Tensor) -> tuple[Any, int]:
    # PyTorch maps the device type "privateuse1" to kDLExtDev, which misses a renamed backend.
    if self.device.type == "spyre" and not torch.overrides.has_torch_function_unary(self):
        return torch.utils.dlpack.DLDeviceType.kDLExtDev, self.device.index or 0
    return _original["__dlpack_device__"](self)


def _to_dlpack(tensor: torch.Tensor) -> Any:
    return _original["to_dlpack"](exportable(tensor, copy=False))


def install() -> None:
    """Guard ``Tensor.__dlpack__``, ``torch.to_dlpack`` and ``torch.utils.dlpack.to_dlpack``; give
    spyre tensors DLPack's device type for extension devices (``__dlpack_device__``)."""
    if _original:
        return
    _original.update(__dlpack__=torch.Tensor.__dlpack__, __dlpack_device__=torch.Tensor.__dlpack_device__,
                     to_dlpack=torch.utils.dlpack.to_dlpack)
    torch.Tensor.__dlpack__ = functools.wraps(_original["__dlpack__"])(_dlpack)
    torch.Tensor.__dlpack_device__ = functools.wraps(_original["__dlpack_device__"])(_dlpack_device)
    wrapped = functools.wraps(_original["to_dlpack"])(_to_dlpack)
    torch.utils.dlpack.to_dlpack = wrapped
    torch.to_dlpack = wrapped
