"""Device formats as Torch-Spyre defines them: int64 held as IEEE_INT32 (range-checked, never
wrapped), float64 refused with a RuntimeError, only contiguous memory formats on the device."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from torch_layouts import DataFormats, SpyreTensorLayout

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


@pytest.fixture(autouse=True)
def quiet_downcast():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Backend Spyre does not support int64")
        yield


def test_int64_layout_is_ieee_int32_with_32_per_stick():
    stl = SpyreTensorLayout((3, 100), torch.int64)
    assert stl.device_dtype is DataFormats.IEEE_INT32 and stl.elems_per_stick() == 32
    assert stl.device_size == (4, 3, 32) and stl.stride_map == (32, 100, 1)
    y = torch.arange(300).reshape(3, 100).to("spyre")
    assert y.dtype == torch.int64 and y.device_tensor_layout() == stl
    assert str(y.device_tensor_layout()).endswith("device_dtype=DataFormats.IEEE_INT32)")


@settings(max_examples=40)
@given(values=st.lists(st.integers(I32_MIN, I32_MAX), min_size=1, max_size=200),
       order=st.sampled_from([None, [1, 0], [0, 1, -1]]))
def test_int64_round_trip_is_bit_exact_in_range(values, order):
    x = torch.tensor(values, dtype=torch.int64).reshape(1, -1).expand(2, -1).contiguous()
    layout = None if order is None else SpyreTensorLayout(tuple(x.shape), torch.int64, order)
    y = x.to("spyre") if layout is None else x.to("spyre", device_layout=layout)
    back = y.cpu()
    assert back.dtype == torch.int64 and torch.equal(back, x)
    memory = torch_layouts.device_memory(y)
    assert sorted(memory[memory != 0].tolist()) == sorted(v for v in x.reshape(-1).tolist() if v != 0)


@pytest.mark.parametrize("bad", [2**31, I32_MIN - 1, 2**62, -(2**63)])
@pytest.mark.parametrize("how", ["to", "copy_", "view copy_", "tensor(device=)", "layout"])
def test_int64_out_of_int32_range_raises_naming_the_value(bad, how):
    x = torch.tensor([[1, 2, 3], [4, bad, 6]])
    dst = torch.full((2, 3), 9, dtype=torch.int64, device="spyre")
    with pytest.raises(ValueError, match=rf"int64 value {bad} \(element [24] .*IEEE_INT32"):
        if how == "to":
            x.to("spyre")
        elif how == "copy_":
            dst.copy_(x)
        elif how == "view copy_":
            dst[:, 1:].copy_(x[:, 1:])
        elif how == "tensor(device=)":
            torch.tensor(x.tolist(), device="spyre")
        else:
            x.to("spyre", device_layout=SpyreTensorLayout((2, 3), torch.int64, [1, 0]))
    assert dst.cpu().eq(9).all()  # nothing was written


def test_explicit_ieee_int32_layout_holds_int64():
    x = torch.arange(-60, 60).reshape(3, 40)
    layout = SpyreTensorLayout([2, 3, 32], [32, 40, 1], DataFormats.IEEE_INT32)
    y = x.to("spyre", device_layout=layout)
    assert y.dtype == torch.int64 and torch.equal(y.cpu(), x)
    assert str(y.device_tensor_layout()) == str(layout)
    assert torch.equal(torch_layouts.device_memory(y).reshape(2, 3, 32)[0], x[:, :32])
    with pytest.raises(ValueError, match="int32"):
        torch.zeros(3, 40, dtype=torch.float32).to("spyre", device_layout=layout)


def test_int64_device_results_are_never_wrapped():
    y = torch.full((4,), I32_MAX, dtype=torch.int64, device="spyre")
    assert (y + 1).cpu().tolist() == [I32_MAX + 1] * 4  # held in 8-byte slots on the simulator


# -- float64 and complex ---------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: torch.empty(64, dtype=torch.float64, device="spyre"),
    lambda: torch.zeros(3, dtype=torch.float64).to("spyre"),
    lambda: torch.ones(3, device="spyre").to(torch.float64),
    lambda: torch.zeros(2, dtype=torch.complex64, device="spyre"),
], ids=["empty", "to", "cast", "complex"])
def test_host_only_dtypes_raise_runtime_error_naming_them(make):
    with pytest.raises(RuntimeError, match=r"float64|complex64") as info:
        make()
    assert isinstance(info.value, ValueError)  # also a ValueError, as before


# -- memory formats --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: torch.empty(2, 3, 4, 5, device="spyre", memory_format=torch.channels_last),
    lambda: torch.randn(2, 3, 4, 5).to("spyre", memory_format=torch.channels_last),
    lambda: torch.randn(2, 3, 4, 5).to(device="spyre", memory_format=torch.channels_last),
    lambda: torch.randn(2, 3, 4, 5, 6).to("spyre", memory_format=torch.channels_last_3d),
    lambda: torch.empty((2, 3, 4, 5), device_layout=SpyreTensorLayout((2, 3, 4, 5), torch.float32),
                        memory_format=torch.channels_last),
], ids=["empty", "to", "to-device-kw", "to-3d", "empty-with-layout"])
def test_channels_last_on_the_device_is_refused(make):
    with pytest.raises(RuntimeError, match="only supports contiguous memory format"):
        make()


def test_channels_last_refused_inside_the_device_context():
    with torch.device("spyre"), pytest.raises(RuntimeError, match="only supports contiguous memory format"):
        torch.empty(2, 3, 4, 5, memory_format=torch.channels_last)


def test_contiguous_and_preserved_formats_still_work():
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert torch.equal(x.to("spyre").cpu(), x)  # preserve: the host strides come along
    assert torch.equal(x.to("spyre", memory_format=torch.contiguous_format).cpu(), x)
    assert torch.empty(2, 3, device="spyre", memory_format=torch.contiguous_format).device.type == "spyre"
    assert torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).is_contiguous(
        memory_format=torch.channels_last)  # the host is untouched


# -- conversions in a move: performed exactly (a deliberate difference, README) -------------------
@pytest.mark.parametrize("src, dst", [(torch.int8, torch.float16), (torch.float32, torch.int32),
                                      (torch.float16, torch.int64)])
def test_conversions_torch_spyre_refuses_in_the_dma_are_exact_here(src, dst):
    x = (torch.randn(3, 70) * 20).to(src)
    assert torch.equal(x.to("spyre", dst).cpu(), x.to(dst))
    assert torch.equal(x.to("spyre").to(dst).cpu(), x.to(dst))
