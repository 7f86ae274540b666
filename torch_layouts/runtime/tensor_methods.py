"""``device_layout=`` on ``Tensor.to``, ``new_empty``, ``new_empty_strided`` and ``torch.empty``.

The patched functions only step in when ``device_layout`` is given; every other call
goes straight to PyTorch's own implementation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import _C
from ..core.dtypes import int64_downcast
from ..core.layout import DeviceLayout
from .layout_records import bind, bound_record_for, bound_record, storage_strides

_original: dict[str, Callable[..., Any]] = {}


def device_tensor_layout(self: torch.Tensor) -> DeviceLayout | None:
    """The layout of a spyre tensor's buffer (shared by all its views); None off the device."""
    return _C._layout_of(self)


def device_memory(tensor: torch.Tensor) -> torch.Tensor:
    """A 1-D CPU copy of a spyre tensor's device buffer, in device order, padding included."""
    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "spyre":
        raise ValueError(f"device_memory needs a spyre tensor, got {type(tensor).__name__} on "
                         f"{getattr(tensor, 'device', None)}")
    return _C._raw_buffer(tensor).clone()


def _spyre_device(device: torch.device | str | int | None, default: torch.device) -> torch.device:
    device = torch.device(device) if isinstance(device, (str, int)) else (device or default)
    if device.type != "spyre":
        raise ValueError(f"device_layout applies to spyre tensors; the target device is {device}")
    return torch.device("spyre", _C._get_device() if device.index is None else device.index)


def empty_with_layout(spec: object, size: Sequence[int], dtype: torch.dtype, device: torch.device,
                      stride: Sequence[int] | None = None) -> torch.Tensor:
    """An uninitialised spyre tensor in ``spec`` (a layout or template); padding holds the pad value.

    ``stride``: the tensor's strides, the units the layout's stride_map is read in (default:
    those the layout was made for, else row-major).
    """
    size = tuple(size)
    stride = None if stride is None else tuple(stride)
    info = _kept("empty", spec, size, stride, dtype, lambda: _record(bind(spec, size, dtype, stride), size, stride))
    return _C._empty_with_layout(info, device.index)


def _record(layout: DeviceLayout, size: tuple[int, ...], stride: tuple[int, ...] | None) -> _C.BoundLayout:
    """The runtime record of a new tensor of ``size`` in bound ``layout``, its stride_map read in
    ``stride`` (None: the strides the layout reads it in)."""
    if stride is None:
        return bound_record_for(layout, size)
    info = bound_record(layout, size, stride)
    layout.resolve(size, stride)
    return info


def _is_whole(tensor: torch.Tensor) -> bool:
    info = _C._bound_layout_of(tensor)
    return (
        info is not None
        and tensor.storage_offset() == 0
        and list(tensor.shape) == info.base_size
        and all(n == 1 or s == b for n, s, b in zip(tensor.shape, tensor.stride(), info.base_stride))
    )


def relayout(x: torch.Tensor, spec: object, device: torch.device, dtype: torch.dtype,
             stride: Sequence[int] | None = None) -> torch.Tensor:
    """A new spyre tensor holding ``x`` (any device) in ``spec`` with strides ``stride``; no autograd."""
    out = empty_with_layout(spec, x.shape, dtype, device, stride)
    with torch.no_grad():
        out.copy_(x)
    return out


class _ToLayout(torch.autograd.Function):
    """Differentiable move into a layout: the gradient goes back to the source's device and layout."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, spec: object, device: torch.device,
                stride: tuple[int, ...] | None) -> torch.Tensor:
        ctx.source_device = x.device
        ctx.source_layout = device_tensor_layout(x) if x.device.type == "spyre" and _is_whole(x) else None
        ctx.source_stride = tuple(x.stride())
        return relayout(x, spec, device, x.dtype, stride)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        if ctx.source_layout is not None:
            stride = None if ctx.source_layout.host_stride is not None else ctx.source_stride
            return relayout(grad, ctx.source_layout, ctx.source_device, grad.dtype, stride), None, None, None
        return grad.to(ctx.source_device), None, None, None


# The runtime records new tensors get in a layout given by the caller, per (layout object, size,
# strides, dtype), are kept by the runtime (csrc/layout_moves.cpp): a training loop moves each
# batch into the same layout, a model makes its buffers in it. The runtime holds the layout
# object beside its record, so that its id is not reused while the entry lives, and moves a host
# tensor into a kept record without this module (``Tensor.to`` is its C method).
def _kept(kind: str, spec: object, size: Sequence[int], stride: Sequence[int] | None, dtype: torch.dtype,
          make: Callable[[], _C.BoundLayout]) -> _C.BoundLayout:
    """The record ``make()`` gives, kept for (``kind``, ``spec``, ``size``, ``stride``, ``dtype``)."""
    hit = _C._kept_record(kind, spec, size, stride, dtype)
    if hit is not None:
        int64_downcast(dtype)  # as bind() does: once, or every time under set_warn_always
        return hit
    info = make()
    _C._keep_record(kind, spec, size, stride, dtype, info)
    return info


def _host_move(x: torch.Tensor, spec: object) -> _C.BoundLayout:
    """The runtime record of a new tensor holding host tensor ``x`` in ``spec``."""
    def make() -> _C.BoundLayout:
        layout = bind(spec, x.shape, x.dtype, x.stride())
        return _record(layout, tuple(x.shape), storage_strides(layout, x.shape, x.stride()))
    return _kept("move", spec, x.shape, x.stride(), x.dtype, make)


def _plain_host(x: torch.Tensor) -> bool:
    """A host tensor whose move autograd does not record (it needs no grad, or grad is off)."""
    return x.device.type != "spyre" and not (x.requires_grad and torch.is_grad_enabled())


def _host_copy(x: torch.Tensor, spec: object, index: int) -> torch.Tensor:
    """A fresh tensor on spyre device ``index`` in ``spec`` holding host tensor ``x`` (its kept record)."""
    return _C._empty_with_layout(_host_move(x, spec), index).copy_(x)


def to_layout(x: torch.Tensor, spec: object, device: torch.device | None = None, dtype: torch.dtype | None = None,
              copy: bool = False) -> torch.Tensor:
    """``x`` on a spyre device in the layout ``spec``; ``x`` itself when already there."""
    device = _spyre_device(device, x.device if x.device.type == "spyre" else torch.device("spyre"))
    if dtype is not None and dtype != x.dtype:
        x = x.to(dtype)
    if _plain_host(x):
        return _host_copy(x, spec, device.index)
    layout = bind(spec, x.shape, x.dtype, x.stride())
    if not copy and x.device == device and _is_whole(x) and device_tensor_layout(x) == layout:
        return x
    stride = storage_strides(layout, x.shape, x.stride())
    if x.requires_grad and torch.is_grad_enabled():
        return _ToLayout.apply(x, layout, device, stride)
    return relayout(x, layout, device, x.dtype, stride)


def _to(self: torch.Tensor, *args: Any, device_layout: object = None, **kwargs: Any) -> torch.Tensor:
    """``Tensor.to`` where its C method (csrc/layout_moves.cpp) does not move the tensor itself: a
    first move into a layout object, a move autograd records, a mode or subclass sees."""
    if device_layout is None:
        return _original["to"](self, *args, **kwargs)
    copy = kwargs.pop("copy", False)
    device, dtype, _non_blocking, _memory_format = torch._C._nn._parse_to(*args, **kwargs)
    return to_layout(self, device_layout, device, dtype, copy)


def _new_empty(self: torch.Tensor, *size: Any, device_layout: object = None, **kwargs: Any) -> torch.Tensor:
    if device_layout is None:
        return _original["new_empty"](self, *size, **kwargs)
    return _empty_call(_shape(size), None, device_layout, self.dtype, self.device, kwargs)


def _new_empty_strided(self: torch.Tensor, size: Sequence[int], stride: Sequence[int], *,
                       device_layout: object = None, **kwargs: Any) -> torch.Tensor:
    if device_layout is None:
        return _original["new_empty_strided"](self, size, stride, **kwargs)
    return _empty_call(tuple(size), tuple(stride), device_layout, self.dtype, self.device, kwargs)


def _empty(*size: Any, device_layout: object = None, **kwargs: Any) -> torch.Tensor:
    if device_layout is None:
        _check_memory_format(kwargs)
        return _original["empty"](*size, **kwargs)
    return _empty_call(_shape(size), None, device_layout, torch.get_default_dtype(), torch.device("spyre"), kwargs)


def _check_memory_format(kwargs: dict[str, Any]) -> None:
    """Spyre tensors are strided in the layout's host order: a channels-last request is refused (Torch-Spyre)."""
    fmt = kwargs.get("memory_format")
    if fmt in (None, torch.contiguous_format, torch.preserve_format):
        return
    device = kwargs.get("device")
    device = torch.get_default_device() if device is None else torch.device(device)
    if device.type == "spyre":
        raise RuntimeError(f"Spyre backend only supports contiguous memory format, got: {fmt}")


def _empty_call(size: tuple[int, ...], stride: tuple[int, ...] | None, spec: object, dtype: torch.dtype,
                device: torch.device, kwargs: dict[str, Any]) -> torch.Tensor:
    requires_grad = kwargs.pop("requires_grad", False)
    dtype = kwargs.pop("dtype", None) or dtype
    device = _spyre_device(kwargs.pop("device", None), device if device.type == "spyre" else torch.device("spyre"))
    kwargs.pop("pin_memory", None)
    _check_memory_format({"memory_format": kwargs.pop("memory_format", None), "device": device})
    layout_kw = kwargs.pop("layout", torch.strided)
    if layout_kw not in (None, torch.strided) or kwargs:
        raise TypeError(f"unsupported arguments with device_layout: {sorted(kwargs) or layout_kw}")
    return empty_with_layout(spec, size, dtype, device, stride).requires_grad_(requires_grad)


def _shape(size: tuple[Any, ...]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (Sequence, torch.Size)):
        return tuple(size[0])
    return tuple(size)


def install() -> None:
    """Add ``device_layout=`` to the PyTorch functions that create or move tensors."""
    if _original:
        return
    # torch.device("spyre") as a context manager sends the constructors in a set it builds once
    # from the functions then in torch to the device: build it now, so it holds the torch.empty
    # the wrapper below calls (else `with torch.device("spyre"): torch.empty(2)` stays on the CPU).
    from torch.utils._device import _device_constructors

    _device_constructors.cache_clear()
    _device_constructors()
    _original.update(to=torch.Tensor.to, new_empty=torch.Tensor.new_empty,
                     new_empty_strided=torch.Tensor.new_empty_strided, empty=torch.empty)
    torch.Tensor.to = _C._tensor_to_method(_original["to"], _to)  # _to: what the C method does not move itself
    torch.Tensor.new_empty = functools.wraps(_original["new_empty"])(_new_empty)
    torch.Tensor.new_empty_strided = functools.wraps(_original["new_empty_strided"])(_new_empty_strided)
    torch.empty = functools.wraps(_original["empty"])(_empty)
    torch.Tensor.device_tensor_layout = device_tensor_layout
