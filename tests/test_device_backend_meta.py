"""Backend tensor metadata of spyre tensors (issue 14): ``torch._C._get/_set_tensor_metadata``.

* get: every family's device tensor (and its views) reports one ``spyre.layout:`` key whose
  record decodes to the buffer's layout, base size and strides.
* set on raw device storage holding a saved buffer's bytes (what PyTorch's generic
  ``_rebuild_tensor_v2`` does) attaches the layout: the tensor reads the original values.
* set on a tensor of the same base shape in another layout re-lays it: values kept, the
  device memory is the new layout's, views sharing the storage follow.
* bad keys and mismatched shapes raise ValueError; save/load, deepcopy, FakeTensor keep working.
"""

from __future__ import annotations

import base64
import copy
import io
import pickle

import pytest
import torch
from conftest import as_bits
from test_reliability_roundtrip import move
from test_reliability_serialization import FAMILY_TABLE, host

import torch_layouts
from torch_layouts import SpyreTensorLayout, _C
from torch_layouts.runtime import backend_meta
from torch_layouts.runtime.tensor_methods import device_memory


def layout_keys(t: torch.Tensor) -> list[str]:
    return [k for k in torch._C._get_tensor_metadata(t) if k.startswith(backend_meta.PREFIX)]


def raw_copy(t: torch.Tensor) -> torch.Tensor:
    """A spyre tensor with t's geometry on raw device storage holding t's device bytes (no layout)."""
    raw = _C._raw_buffer(t).clone()
    storage = torch.UntypedStorage(t.untyped_storage().nbytes(), device=t.device)
    cpu_bytes = torch.zeros(t.untyped_storage().nbytes(), dtype=torch.uint8)
    cpu_bytes[: raw.untyped_storage().nbytes()] = raw.view(torch.uint8)
    storage.copy_(cpu_bytes.untyped_storage())
    out = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, t.storage_offset(), t.shape, t.stride())
    assert _C._layout_of(out) is None
    return out


@pytest.mark.parametrize("name, shape, dtype, spec", FAMILY_TABLE, ids=[row[0] for row in FAMILY_TABLE])
def test_get_names_the_layout_and_set_attaches_it_to_raw_bytes(name, shape, dtype, spec):
    x = host(shape, dtype)
    d = move(x, spec)
    keys = layout_keys(d)
    assert len(keys) == 1 and torch._C._get_tensor_metadata(d)[keys[0]] is True
    layout, base_size, base_stride = backend_meta.decode(keys[0])
    info = _C._bound_layout_of(d)
    assert layout == _C._layout_of(d) and list(base_size) == info.base_size and list(base_stride) == info.base_stride
    assert layout_keys(d[..., :1]) == keys  # views name their buffer's layout

    raw = raw_copy(d)
    torch._C._set_tensor_metadata(raw, torch._C._get_tensor_metadata(d))
    assert _C._layout_of(raw) == layout
    assert torch.equal(as_bits(raw.cpu()), as_bits(x))
    assert torch.equal(device_memory(raw), device_memory(d))


def test_set_relays_a_buffer_keeping_values_and_views():
    x = torch.randn(3, 7, 9)
    a = x.to("spyre")
    other = SpyreTensorLayout((3, 7, 9), torch.float32, [2, 0, 1], pad_value=-3)
    b = x.to("spyre", device_layout=other)
    view = a[1:, 2]
    torch._C._set_tensor_metadata(a, torch._C._get_tensor_metadata(b))
    assert _C._layout_of(a) == other and _C._layout_of(view) == other
    assert torch.equal(a.cpu(), x) and torch.equal(view.cpu(), x[1:, 2])
    assert torch.equal(device_memory(a), device_memory(b))
    before = device_memory(a)
    torch._C._set_tensor_metadata(a, torch._C._get_tensor_metadata(b))  # same layout: unchanged
    assert torch.equal(device_memory(a), before)


def test_set_rejects_another_base_shape_and_corrupt_keys():
    a = torch.zeros(4, 5, device="spyre")
    b = torch.zeros(5, 4, device="spyre")
    with pytest.raises(ValueError, match=r"base of size \[5, 4\].*\[4, 5\]"):
        torch._C._set_tensor_metadata(a, torch._C._get_tensor_metadata(b))
    for key in ["spyre.layout:!!!", "spyre.layout:" + "QUJD", backend_meta.PREFIX + "gAJLAS4="]:
        with pytest.raises(ValueError, match="spyre tensor metadata key"):
            torch._C._set_tensor_metadata(a, {key: True})
    # A key whose pickle names a global outside the weights_only allowlist is refused, not run.
    evil = backend_meta.PREFIX + base64.urlsafe_b64encode(pickle.dumps((print, (), ()), protocol=2)).decode()
    with pytest.raises(ValueError, match="corrupt"):
        torch._C._set_tensor_metadata(a, {evil: True})
    with pytest.raises(ValueError, match="two layouts"):
        key = layout_keys(a)[0]
        torch._C._set_tensor_metadata(a, {key: True, key + "A": True})


def test_attach_checks_the_view_fits_the_layout():
    d = torch.arange(6.0).reshape(2, 3).to("spyre")
    big = torch.arange(12.0).reshape(4, 3).to("spyre")
    raw = raw_copy(big)
    with pytest.raises(IndexError):
        torch._C._set_tensor_metadata(raw, torch._C._get_tensor_metadata(d))
    assert _C._layout_of(raw) is None


def test_host_tensors_and_conj_bits_are_untouched():
    assert torch._C._get_tensor_metadata(torch.zeros(3)) == {}
    d = torch.zeros(2, 3, device="spyre")
    meta = torch._C._get_tensor_metadata(d)
    torch._C._set_tensor_metadata(d, dict(meta))
    assert layout_keys(d) == list(meta)


def test_save_load_deepcopy_and_fake_tensors_keep_working():
    x = torch.randn(3, 7, 9)
    d = x.to("spyre", device_layout=SpyreTensorLayout((3, 7, 9), torch.float32, [2, 0, 1]))
    buffer = io.BytesIO()
    torch.save(d, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert layout_keys(loaded) == layout_keys(d) and torch.equal(loaded.cpu(), x)
    assert layout_keys(copy.deepcopy(d)) == layout_keys(d)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(d)
        assert fake.device == d.device and fake.shape == d.shape
    assert torch_layouts.runtime.backend_meta.decode(layout_keys(d)[0])[0] == _C._layout_of(d)
