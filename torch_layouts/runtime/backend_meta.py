"""Backend tensor metadata of spyre tensors: the layout in ``torch._C._get_tensor_metadata``.

PyTorch's metadata dict (``torch._utils.get_tensor_metadata``, saved with a tensor by the
generic ``_rebuild_tensor_v2`` path and by Dynamo's repro writer) maps strings to True.
A spyre tensor's dict holds one key, ``"spyre.layout:" + urlsafe-base64(pickle((layout,
base_size, base_stride)))``: its buffer's layout and the host tensor the buffer holds.
The key is decoded with PyTorch's ``weights_only`` unpickler, so a key can only rebuild
layout classes (which are allowed for ``torch.load(weights_only=True)``).

``set_tensor_metadata(t, d)`` on a spyre tensor, as PyTorch calls it on a rebuilt tensor:
- raw device storage (no layout, e.g. bytes restored by the generic path): the key says
  how those bytes are laid out, and is attached to the buffer;
- a buffer already in that layout: nothing changes;
- a buffer holding the same base shape in another layout: the buffer is re-laid (values
  kept, every view sharing the storage sees the new layout).

Example:
    >>> d = torch._C._get_tensor_metadata(x)          # {"spyre.layout:gASV...": True}
    >>> torch._C._set_tensor_metadata(y, d)           # y's buffer now in x's layout
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
from collections.abc import Sequence

import torch

from .. import _C
from ..core.layout import DeviceLayout
from .layout_records import bound_record
from .serialization import _base
from .tensor_methods import empty_with_layout

PREFIX = "spyre.layout:"

Record = tuple[DeviceLayout, tuple[int, ...], tuple[int, ...]]


def encode(layout: DeviceLayout, base_size: Sequence[int], base_stride: Sequence[int]) -> str:
    """The metadata key naming ``layout`` holding a base tensor of this size and strides."""
    record = (layout, tuple(base_size), tuple(base_stride))
    return PREFIX + base64.urlsafe_b64encode(pickle.dumps(record, protocol=2)).decode("ascii")


def decode(key: str) -> Record:
    """The (layout, base_size, base_stride) a metadata key names; ValueError if it names none."""
    shown = key if len(key) <= 80 else key[:77] + "..."
    if not key.startswith(PREFIX):
        raise ValueError(f"spyre tensor metadata key {shown!r} does not start with {PREFIX!r}")
    try:
        data = base64.urlsafe_b64decode(key[len(PREFIX):].encode("ascii"))
        record = torch._weights_only_unpickler.Unpickler(io.BytesIO(data)).load()
    except (binascii.Error, UnicodeEncodeError, pickle.UnpicklingError, EOFError, ValueError, TypeError,
            KeyError, IndexError, AttributeError, RuntimeError) as exc:
        raise ValueError(f"corrupt spyre tensor metadata key {shown!r}: {exc}") from None
    if not (isinstance(record, tuple) and len(record) == 3 and isinstance(record[0], DeviceLayout)
            and all(isinstance(r, tuple) and all(isinstance(i, int) for i in r) for r in record[1:])
            and len(record[1]) == len(record[2])):
        raise ValueError(f"spyre tensor metadata key {shown!r} holds no (layout, base_size, base_stride) record")
    return record


def apply(tensor: torch.Tensor, key: str) -> None:
    """Give ``tensor``'s buffer the layout ``key`` names (see the module docstring)."""
    layout, base_size, base_stride = decode(key)
    current = _C._bound_layout_of(tensor)
    if current is None:
        info = bound_record(layout, base_size, base_stride)
        if tensor.element_size() == layout.element_size:
            _C._view_offsets(info, list(tensor.shape), list(tensor.stride()), tensor.storage_offset())
        _C._attach_layout(tensor, info)
        return
    if current.layout == layout and tuple(current.base_size) == base_size \
            and tuple(current.base_stride) == base_stride:
        return
    if tuple(current.base_size) != base_size:
        raise ValueError(f"spyre tensor metadata names {layout!r} for a base of size {list(base_size)}; "
                         f"the tensor's buffer holds a base of size {list(current.base_size)}")
    base = _base(tensor)
    fresh = empty_with_layout(layout, base_size, base.dtype, tensor.device, base_stride)
    with torch.no_grad():
        fresh.copy_(base)
    _C._adopt_buffer(tensor, fresh)
