"""Host staging of collectives (in one process): only real elements leave the device, results
come back in place in each tensor's own layout, bit for bit."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import torch_layouts
from torch_layouts import SpyreTensorLayout
from torch_layouts.distributed.staging import Staging

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int32)


@st.composite
def device_tensors(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor]:
    """A random CPU tensor and its spyre copy in a random Spyre layout (padded in general)."""
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    x = (torch.randn(shape) * 50).to(dtype)
    order = draw(st.permutations(range(len(shape))))
    return x, x.to("spyre", device_layout=SpyreTensorLayout(shape, dtype, list(order)))


@given(device_tensors(), st.booleans())
def test_stage_reads_real_elements_and_writes_back_in_place(pair: tuple[torch.Tensor, torch.Tensor],
                                                            read: bool) -> None:
    x, y = pair
    layout = repr(y.device_tensor_layout())
    staging = Staging()
    host = staging.stage([y], read=read, write=True)[0]
    assert host.device.type == "cpu" and host.shape == x.shape and host.dtype == x.dtype
    assert host.untyped_storage().nbytes() == x.numel() * x.element_size()  # never the padding
    if read:
        assert torch.equal(host, x)
    result = (x.flip(0) if x.dim() else x).clone()
    host.copy_(result)
    staging.finish()
    assert repr(y.device_tensor_layout()) == layout
    assert torch.equal(y.cpu(), result)
    fresh = result.to("spyre", device_layout=y.device_tensor_layout())
    assert torch.equal(torch_layouts.device_memory(y), torch_layouts.device_memory(fresh))
    assert staging.device_value([host, 3])[0] is y


def test_padded_tensor_sends_fewer_bytes_than_it_holds() -> None:
    x = torch.arange(350, dtype=torch.float16).reshape(5, 70)
    y = x.to("spyre")  # rows of 70 pad to 128
    assert y.untyped_storage().nbytes() == 5 * 128 * 2
    host = Staging().stage(y, read=True, write=False)
    assert host.untyped_storage().nbytes() == x.nbytes and torch.equal(host, x)


def test_views_stage_only_their_elements() -> None:
    x = torch.arange(600, dtype=torch.float32).reshape(6, 100)
    y = x.to("spyre")
    staging = Staging()
    host = staging.stage(y[1:4, 10:30], read=True, write=True)
    assert torch.equal(host, x[1:4, 10:30]) and host.numel() == 60
    host.zero_()
    staging.finish()
    expected = x.clone()
    expected[1:4, 10:30] = 0
    assert torch.equal(y.cpu(), expected)


def test_parameters_are_written_in_place() -> None:
    """A leaf that requires grad is written without autograd objecting, as gloo writes CPU parameters."""
    p = torch.ones(4, 64, device="spyre", requires_grad=True)
    staging = Staging()
    host = staging.stage(p, read=True, write=True)
    host.fill_(3)
    staging.finish()
    assert torch.equal(p.detach().cpu(), torch.full((4, 64), 3.0)) and p.requires_grad
    assert staging.device_value(host) is p


@pytest.mark.parametrize("value", [torch.ones(3), 7, None, "x"])
def test_cpu_tensors_and_other_arguments_pass_through(value: object) -> None:
    staging = Staging()
    assert staging.stage([value], read=True, write=True)[0] is value
    assert not staging.write_back and not staging.hosts


def test_large_host_buffers_are_reused_after_the_collective() -> None:
    x = torch.randn(1024, 512)  # 2 MiB
    y = x.to("spyre")
    first = Staging()
    host = first.stage(y, read=True, write=True)
    second_while_busy = Staging().stage(y, read=True, write=False)
    assert second_while_busy.data_ptr() != host.data_ptr()  # a buffer in use is never handed out
    first.finish()
    again = Staging()
    reused = again.stage(y, read=True, write=True)
    assert reused.data_ptr() == host.data_ptr() and torch.equal(reused, x)
