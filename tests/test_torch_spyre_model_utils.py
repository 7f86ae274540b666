"""``torch_layouts.model_utils``: Torch-Spyre's weight layouts for Linear and Embedding, from its
documented behaviour (issue #1339 and the indirect-access layout)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from torch_layouts import DataFormats, SpyreTensorLayout, device_memory
from torch_layouts.model_utils import (
    _dma_to_spyre_dim_order_swapped,
    _dma_to_spyre_indirect_access,
    load_model_to_spyre,
    patch_module_to_for_spyre,
)

F16 = torch.float16


def test_linear_weight_sticks_along_out_features():
    w = torch.randn(1024, 4096, dtype=F16)
    dev = _dma_to_spyre_dim_order_swapped(w)
    assert dev.shape == w.shape and torch.equal(dev.cpu(), w)
    assert dev.device_tensor_layout() == SpyreTensorLayout((1024, 4096), (4096, 1), F16, [1, 0])
    assert dev.device_tensor_layout().device_size[0] == 16
    # a stick holds 64 consecutive rows of one column
    assert torch.equal(device_memory(dev)[:64], w[:64, 0])


@pytest.mark.parametrize("dtype, device_size", [(F16, [1000, 4, 64]), (torch.float32, [1000, 8, 32])])
def test_embedding_table_takes_the_indirect_access_layout(dtype, device_size):
    w = torch.randn(1000, 256).to(dtype)
    dev = _dma_to_spyre_indirect_access(w)
    layout = dev.device_tensor_layout()
    assert list(layout.device_size) == device_size and layout.device_dtype is DataFormats(dtype)
    assert torch.equal(dev.cpu(), w)
    assert torch.equal(device_memory(dev), w.reshape(-1))  # a row is whole sticks, rows in order


def test_embedding_with_a_partial_stick_warns_and_falls_back():
    with pytest.warns(UserWarning, match="hidden dim 100 is not a multiple of the Spyre stick size 64"):
        assert _dma_to_spyre_indirect_access(torch.randn(1000, 100, dtype=F16)) is None
    model = nn.Embedding(1000, 100, dtype=F16)
    table = model.weight.detach().clone()
    with pytest.warns(UserWarning, match="falling back to the default layout"):
        load_model_to_spyre(model)
    assert model.weight.device_tensor_layout() == SpyreTensorLayout((1000, 100), F16)
    assert torch.equal(model.weight.cpu(), table)


@pytest.mark.parametrize("helper", [_dma_to_spyre_dim_order_swapped, _dma_to_spyre_indirect_access])
def test_helpers_take_2d_weights_only(helper):
    with pytest.raises(AssertionError, match=r"\[4\]"):
        helper(torch.randn(4, dtype=F16))


def test_load_model_routes_each_tensor():
    model = nn.Sequential(nn.Embedding(50, 128, dtype=F16), nn.Linear(128, 64, dtype=F16), nn.LayerNorm(64, dtype=F16))
    model.register_buffer("scale", torch.ones(3, dtype=F16))
    expected = {k: v.detach().clone() for k, v in model.state_dict().items()}
    assert load_model_to_spyre(model) is model
    assert model[0].weight.device_tensor_layout().device_size == (50, 2, 64)
    assert model[1].weight.device_tensor_layout() == SpyreTensorLayout((64, 128), F16, [1, 0])
    assert model[1].bias.device_tensor_layout() == SpyreTensorLayout((64,), F16)
    assert isinstance(model[1].weight, nn.Parameter) and model[1].weight.requires_grad
    for name, value in model.state_dict().items():
        assert value.device.type == "spyre" and torch.equal(value.cpu(), expected[name]), name
    out = model(torch.tensor([[1, 2, 3]]).to("spyre"))
    ref = nn.Sequential(nn.Embedding(50, 128), nn.Linear(128, 64), nn.LayerNorm(64)).to(F16)
    ref.load_state_dict({k: v for k, v in expected.items() if k != "scale"})
    torch.testing.assert_close(out.cpu(), ref(torch.tensor([[1, 2, 3]])), atol=2e-2, rtol=2e-2)


def test_load_model_is_idempotent_and_honours_apply_overrides():
    class KeepOnCpu(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(8, 4, dtype=F16))

        def _apply(self, fn, recurse=True):
            return self

    root = nn.Module()
    root.lin, root.keep = nn.Linear(64, 128, dtype=F16), KeepOnCpu()
    load_model_to_spyre(root)
    assert root.keep.weight.device.type == "cpu" and root.lin.weight.device.type == "spyre"
    ptr = root.lin.weight.data_ptr()
    load_model_to_spyre(root)
    assert root.lin.weight.data_ptr() == ptr


@pytest.mark.parametrize("src, target", [(torch.float32, F16), (F16, torch.bfloat16), (torch.float32, torch.bfloat16)])
def test_dtype_is_honoured(src, target):
    model = nn.Linear(64, 128, dtype=src)
    weight = model.weight.detach().clone()
    load_model_to_spyre(model, dtype=target)
    assert all(p.dtype == target and p.device.type == "spyre" for p in model.parameters())
    assert torch.equal(model.weight.cpu(), weight.to(target))


def test_unsupported_dtype_raises():
    with pytest.raises(ValueError, match="complex64"):
        load_model_to_spyre(nn.Linear(4, 4), dtype=torch.complex64)
    with pytest.raises(TypeError, match="Tensor"):
        load_model_to_spyre(torch.zeros(2))


def test_patched_module_to():
    original = nn.Module.to
    try:
        patch_module_to_for_spyre()
        first = nn.Module.to
        patch_module_to_for_spyre()
        assert nn.Module.to is first and first._spyre_patched
        model = nn.Linear(64, 128, dtype=F16).to("spyre")
        assert model.weight.device_tensor_layout().device_size == (2, 64, 64)
        assert nn.Linear(4, 4).to(torch.float16).weight.device.type == "cpu"  # other targets unchanged
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            moved = nn.Linear(64, 64).to(device="spyre", dtype=F16)
        assert moved.weight.dtype == F16 and moved.weight.device.type == "spyre"
    finally:
        nn.Module.to = original
