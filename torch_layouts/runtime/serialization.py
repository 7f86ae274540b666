"""``torch.save``/``torch.load`` and ``copy.deepcopy`` of spyre tensors: values, layout and views kept.

A spyre tensor pickles as a record of its device buffer (the base tensor's host values,
the layout, the base strides) plus its own view geometry. Tensors that share a buffer
share its record within one pickle, so after loading they share storage again, like CPU
tensors; loading rebuilds the buffer in its layout (or on the host under
``map_location="cpu"``).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .. import _C
from ..core.layout import DeviceLayout
from .tensor_methods import empty_with_layout

View = tuple[tuple[int, ...], tuple[int, ...], int, torch.dtype]

_original_reduce = torch.Tensor._reduce_ex_internal
_original_deepcopy = torch.Tensor.__deepcopy__


def _base(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor a spyre buffer was made for (any view of it gives the same base)."""
    info = _C._bound_layout_of(tensor)
    return torch.empty(0, dtype=info.layout.dtype, device=tensor.device).set_(
        tensor.untyped_storage(), 0, info.base_size, info.base_stride)


class _Buffer:
    """One device buffer in one pickle. The pickler's memo keeps it alive (and so shared by
    every tensor on the buffer) while it runs; it is pickled as the buffer's host values."""

    __slots__ = ("base", "__weakref__")

    def __init__(self, base: torch.Tensor) -> None:
        self.base = base

    def __reduce__(self) -> tuple:
        info = _C._bound_layout_of(self.base)
        return (restore_buffer, (_C._to_host(self.base), info.layout, tuple(info.base_stride), str(self.base.device)))


_buffers: weakref.WeakValueDictionary[tuple[int, int], _Buffer] = weakref.WeakValueDictionary()


def _buffer(tensor: torch.Tensor) -> _Buffer:
    storage = tensor.untyped_storage()
    if storage.nbytes() == 0:
        return _Buffer(_base(tensor))
    key = (tensor.device.index, storage.data_ptr())
    buffer = _buffers.get(key)
    if buffer is None:
        buffer = _buffers[key] = _Buffer(_base(tensor))
    return buffer


def _reduce_ex_internal(self: torch.Tensor, proto: int) -> tuple:
    if self.device.type != "spyre" or _C._bound_layout_of(self) is None:
        return _original_reduce(self, proto)
    view = (tuple(self.shape), tuple(self.stride()), self.storage_offset(), self.dtype)
    return (rebuild, (_buffer(self), view, self.requires_grad))


def _restore_location(host: torch.Tensor, device: str) -> torch.device:
    """Where ``torch.load``'s ``map_location`` sends a buffer saved on ``device``."""
    map_location = torch.serialization._serialization_tls.map_location
    if callable(map_location):  # called like PyTorch calls it: (a CPU storage, the saved location)
        moved = map_location(host.untyped_storage(), device)
        target = torch.device(device) if moved is None else moved.device
    else:
        target = torch.device(torch._utils._get_restore_location(device))
    if target.type == "spyre" and target.index is None:
        return torch.device("spyre", _C._get_device())
    return target


def restore_buffer(host: torch.Tensor, layout: DeviceLayout, base_stride: tuple[int, ...],
                   device: str) -> torch.Tensor:
    """Recreate a saved device buffer as its base tensor (on the host under ``map_location="cpu"``)."""
    if not isinstance(host, torch.Tensor) or not isinstance(layout, DeviceLayout):
        raise ValueError(f"corrupt spyre tensor record: host {type(host).__name__}, layout {type(layout).__name__}")
    target = _restore_location(host, device)
    if target.type != "spyre":
        return torch.empty_strided(host.shape, base_stride, dtype=host.dtype, device=target).copy_(host)
    base = empty_with_layout(layout, host.shape, host.dtype, target, base_stride)
    base.copy_(host)
    return base


def rebuild(base: torch.Tensor | _Buffer, view: View, requires_grad: bool) -> torch.Tensor:
    """Recreate a saved spyre tensor on its restored buffer (the unpickling side of ``_reduce_ex_internal``)."""
    if isinstance(base, _Buffer):  # copy.copy and other reduce users that do not pickle
        base = restore_buffer(*base.__reduce__()[1])
    size, stride, offset, dtype = view
    info = _C._bound_layout_of(base) if base.device.type == "spyre" else None
    if info is not None and dtype.itemsize == info.layout.dtype.itemsize:
        _C._view_offsets(info, list(size), list(stride), offset)  # IndexError if the view leaves its base
    result = torch.empty(0, dtype=dtype, device=base.device).set_(base.untyped_storage(), offset, size, stride)
    return result.requires_grad_(requires_grad)


def _deepcopy(self: torch.Tensor, memo: dict[Any, Any]) -> torch.Tensor:
    """PyTorch's deepcopy, with each spyre buffer copied whole, layout and padding included."""
    if self.device.type == "spyre" and _C._bound_layout_of(self) is not None:
        copies = memo.setdefault("torch", {})  # where UntypedStorage.__deepcopy__ memoises storages
        storage = self.untyped_storage()
        if storage._cdata not in copies:
            fresh = _C._empty_with_layout(_C._bound_layout_of(self), self.device.index)
            _C._raw_buffer(fresh).copy_(_C._raw_buffer(self))
            copies[storage._cdata] = fresh.untyped_storage()
    return _original_deepcopy(self, memo)


def _subclasses(cls: type) -> list[type]:
    return [cls] + [sub for direct in cls.__subclasses__() for sub in _subclasses(direct)]


def install() -> None:
    """Pickle and deep-copy spyre tensors with their layout; allow their records under ``weights_only``."""
    from ..core.layout import _restore

    torch.Tensor._reduce_ex_internal = _reduce_ex_internal
    torch.Tensor.__deepcopy__ = _deepcopy
    torch.serialization.add_safe_globals([rebuild, restore_buffer, _restore, *_subclasses(DeviceLayout)])
