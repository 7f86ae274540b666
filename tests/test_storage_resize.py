"""``untyped_storage().resize_`` on padded device buffers, as FSDP frees (``resize_(0)``) and
re-allocates (``resize_(numel * itemsize)``) each parameter: the storage keeps its layout and gets
the whole padded buffer back (padding at the pad value), so copies and ops match the CPU; a storage
shrunk below its tensor's bytes loses the layout and refuses copies instead of corrupting data."""

from __future__ import annotations

import pytest
import torch

import torch_layouts
from torch_layouts import SpyreTensorLayout, htp, mace, tensorrt

# (name, device_layout for x.to("spyre", ...) or None for the default, size, dtype): every one pads.
CASES = [
    ("spyre default 1-D float32", None, (16,), torch.float32),
    ("spyre default float16", None, (3, 10), torch.float16),
    ("spyre default int8", None, (5, 7), torch.int8),
    ("spyre default int64", None, (3, 5), torch.int64),
    ("spyre default bfloat16 3-D", None, (2, 3, 5), torch.bfloat16),
    ("spyre dim_order [1, 0] (Linear(10, 6) weight)", SpyreTensorLayout((6, 10), torch.float32, [1, 0]), (6, 10),
     torch.float32),
    ("htp crouton float32", htp.R4CroutonLayout, (1, 9, 10, 40), torch.float32),
    ("htp crouton float16", htp.R4CroutonLayout, (1, 3, 5, 7), torch.float16),
    ("trt kCHW32 float16", tensorrt.TensorFormat.kCHW32, (2, 5, 3, 4), torch.float16),
    ("trt kCHW32 pad -1", tensorrt.TensorFormatLayout(tensorrt.TensorFormat.kCHW32, (1, 33, 2, 3), torch.float32,
                                                       pad_value=-1.0), (1, 33, 2, 3), torch.float32),
    ("mace in/out channel", mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL), (1, 7, 5, 10), torch.float32),
]
IDS = [case[0] for case in CASES]


def host(size: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(size, generator=g) * 20).to(dtype)


def on_device(x: torch.Tensor, spec: object) -> torch.Tensor:
    return x.to("spyre") if spec is None else x.to("spyre", device_layout=spec)


@pytest.mark.filterwarnings("ignore:Backend Spyre does not support int64")
@pytest.mark.parametrize("name, spec, size, dtype", CASES, ids=IDS)
def test_free_and_reallocate_keeps_the_padded_layout(name, spec, size, dtype) -> None:
    x, z = host(size, dtype, 1), host(size, dtype, 2)
    y = on_device(x, spec)
    layout, logical = y.device_tensor_layout(), y.numel() * y.itemsize
    reference = torch_layouts.device_memory(on_device(z, spec))
    assert y.untyped_storage().nbytes() > logical  # the table only holds layouts that pad
    y.untyped_storage().resize_(0)
    assert y.untyped_storage().nbytes() == 0
    y.untyped_storage().resize_(logical)
    assert y.untyped_storage().nbytes() == logical  # what was asked, as on the CPU
    assert y.device_tensor_layout() == layout
    padding = ~layout.real_mask()
    assert torch.equal(torch_layouts.device_memory(y)[padding], reference[padding])  # the pad value
    y.copy_(z.to("spyre"))
    assert torch.equal(y.cpu(), z)
    assert torch.equal(torch_layouts.device_memory(y), reference)  # the same buffer as z on device
    assert torch.equal((y + y).cpu(), z + z)
    y.copy_(x)  # host to device
    assert torch.equal(y.cpu(), x)


@pytest.mark.filterwarnings("ignore:Backend Spyre does not support int64")
@pytest.mark.parametrize("name, spec, size, dtype", CASES, ids=IDS)
def test_resizing_an_allocated_buffer_keeps_its_values(name, spec, size, dtype) -> None:
    x = host(size, dtype, 3)
    y = on_device(x, spec)
    layout, padded, logical = y.device_tensor_layout(), y.untyped_storage().nbytes(), y.numel() * y.itemsize
    for nbytes in (logical, (logical + padded) // 2, padded + 256, logical):
        y.untyped_storage().resize_(nbytes)
        assert y.untyped_storage().nbytes() == nbytes
        assert y.device_tensor_layout() == layout
        assert torch.equal(y.cpu(), x), nbytes


def test_shrinking_below_the_tensors_bytes_refuses_copies() -> None:
    y = torch.arange(16, dtype=torch.float32).to("spyre")
    y.untyped_storage().resize_(40)
    assert y.untyped_storage().nbytes() == 40
    with pytest.raises(IndexError, match="outside its buffer"):
        y.cpu()
    with pytest.raises(IndexError, match="outside its buffer"):
        y.copy_(torch.zeros(16))


def test_linear_parameters_freed_and_reallocated_compute_like_cpu() -> None:
    """FSDP's cycle on every parameter of a layer whose dims do not fill whole sticks."""
    torch.manual_seed(0)
    cpu = torch.nn.Linear(10, 6)
    dev = torch.nn.Linear(10, 6).to("spyre")
    with torch.no_grad():
        for param, source in zip(dev.parameters(), cpu.parameters()):
            param.untyped_storage().resize_(0)
            param.untyped_storage().resize_(param.numel() * param.itemsize)
            param.copy_(source.to("spyre"))
    x = torch.randn(4, 10)
    out = dev(x.to("spyre"))
    out.sum().backward()
    expected = cpu(x)
    expected.sum().backward()
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(dev.weight.grad.cpu(), cpu.weight.grad)
