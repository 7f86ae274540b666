"""Torch-Spyre layout semantics: the device context, layouts made for another host size, and
explicit layouts read in the receiving tensor's own storage offsets (checked in device memory)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from torch_layouts import DataFormats, SpyreTensorLayout

F16 = torch.float16


# -- 1. torch.device("spyre") as a context ----------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: torch.empty(3, 4), lambda: torch.empty((2, 5), dtype=F16), lambda: torch.zeros(3),
    lambda: torch.ones(2, 2), lambda: torch.full((2,), 7.0), lambda: torch.empty_strided((2, 3), (1, 2)),
], ids=["empty", "empty-tuple", "zeros", "ones", "full", "empty_strided"])
def test_constructors_follow_the_device_context(make):
    with torch.device("spyre"):
        t = make()
    assert t.device == torch.device("spyre", 0)
    assert make().device.type == "cpu"  # and only inside the block


def test_empty_with_layout_inside_the_context():
    layout = SpyreTensorLayout((3, 70), F16)
    with torch.device("spyre"):
        t = torch.empty((3, 70), dtype=F16, device_layout=layout)
    assert t.device.type == "spyre" and t.device_tensor_layout() == layout


def test_explicit_cpu_device_wins_over_the_context():
    with torch.device("spyre"):
        assert torch.empty(3, device="cpu").device.type == "cpu"


# -- 2. a layout made for another host size with as many elements -------------------------------
def device_values(t: torch.Tensor) -> torch.Tensor:
    return torch_layouts.device_memory(t)


def test_flat_layout_holds_a_2d_tensor_as_torch_spyre_builds_it():
    x = torch.randn(512, 256).to(F16)
    layout = SpyreTensorLayout([131072], [1], F16, [0])
    y = x.to(device_layout=layout)
    assert y.device.type == "spyre" and y.device_tensor_layout() == layout
    assert torch.equal(y.cpu(), x)
    assert torch.equal(device_values(y), x.reshape(-1))  # [2048, 64] sticks in host order


@pytest.mark.parametrize("made_for, shape", [((24,), (2, 3, 4)), ((6, 4), (4, 6)), ((2, 3, 4), (24,)),
                                             ((130,), (2, 65))])
def test_layouts_apply_to_any_shape_of_their_element_count(made_for, shape):
    layout = SpyreTensorLayout(made_for, torch.float32)
    x = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    y = x.to("spyre", device_layout=layout)
    assert torch.equal(y.cpu(), x) and y.device_tensor_layout() == layout
    # the layout is its stride_map over storage offsets: the flat tensor lands identically
    flat = x.reshape(made_for).to("spyre", device_layout=layout)
    assert torch.equal(device_values(y), device_values(flat))


def test_another_element_count_is_refused_naming_both_sizes():
    layout = SpyreTensorLayout((3, 40), F16)
    with pytest.raises(ValueError, match=r"\[3, 40\] \(120 elements\).*\[3, 41\] \(123 elements\)"):
        torch.zeros(3, 41, dtype=F16).to("spyre", device_layout=layout)


# -- 3. explicit layouts count the receiving tensor's own storage offsets ------------------------
def check_identity(y: torch.Tensor, x: torch.Tensor, layout: SpyreTensorLayout) -> None:
    """Device memory of ``y`` holds ``x`` by Torch-Spyre's identity: the real position at device
    coord c holds the element at storage offset dot(c, stride_map) of ``x``'s own storage, every
    element of ``x`` has one, and padding holds zeros."""
    host_map = layout.host_map(tuple(x.shape), tuple(y.stride()))  # row-major host index, -1: padding
    real = host_map >= 0
    assert int(real.sum()) == x.numel() == int(torch.unique(host_map[real]).numel())
    coords = torch.cartesian_prod(*[torch.arange(n) for n in layout.device_size]).reshape(-1, layout.device_rank)
    smap = torch.tensor(layout.stride_map)
    offsets = (coords * smap.clamp(min=0)).sum(1)[real]
    index = torch.stack(torch.unravel_index(host_map[real], tuple(x.shape)), 1)
    assert torch.equal(offsets, (index * torch.tensor(x.stride())).sum(1))  # dot(c, stride_map) = x's offset
    memory = device_values(y)
    storage = torch.as_strided(x, (x.untyped_storage().nbytes() // x.element_size(),), (1,), 0)
    bits = storage[offsets + x.storage_offset()].view(torch.int16)
    assert torch.equal(memory[real].view(torch.int16), bits)
    assert bool((memory[~real] == 0).all())


PERMUTED = [  # Torch-Spyre's permuted cases: [60, 40] stored, viewed as [40, 60]
    ((40, 60), (1, 40), [1, 40, 64], [2560, 1, 40]),
    ((40, 60), (1, 40), [1, 60, 64], [64, 40, 1]),
    ((4, 6, 8), (1, 32, 4), [1, 6, 8, 64], [4096, 32, 4, 1]),
]


@pytest.mark.parametrize("size, stride, device_size, stride_map", PERMUTED)
def test_explicit_layout_reads_the_tensors_own_storage(size, stride, device_size, stride_map):
    x = torch.empty_strided(size, stride, dtype=F16).copy_(torch.randn(size))
    layout = SpyreTensorLayout(device_size, stride_map, DataFormats.SEN169_FP16)
    y = x.to("spyre", device_layout=layout)
    assert y.stride() == x.stride() and torch.equal(y.cpu(), x)
    check_identity(y, x, layout)


def test_the_issue_case_in_device_memory():
    """size [40, 60], strides [1, 40]: device coord (0, i, j) holds storage offset i + 40 j = x[i, j]."""
    x = torch.arange(2400, dtype=torch.float32).to(F16).reshape(60, 40).t()  # x[i, j] == i + 40 j
    y = x.to("spyre", device_layout=SpyreTensorLayout([1, 40, 64], [2560, 1, 40], DataFormats.SEN169_FP16))
    memory = device_values(y).reshape(40, 64)
    assert torch.equal(memory[:, :60], x)
    assert torch.equal(memory[1, :4], torch.tensor([1, 41, 81, 121], dtype=F16))
    assert bool((memory[:, 60:] == 0).all())


@settings(max_examples=25)
@given(perm=st.permutations(range(3)), sizes=st.lists(st.integers(1, 70), min_size=3, max_size=3),
       order=st.permutations(range(3)))
def test_permuted_tensors_in_layouts_made_for_their_strides(perm, sizes, order):
    """An explicit copy of SpyreTensorLayout(size, x.stride(), dtype, order) places element at offset o
    where the layout made for x's strides places it; the values are x's own."""
    base = torch.randn(*[sizes[p] for p in perm]).to(F16)
    x = base.permute([perm.index(d) for d in range(3)])
    made = SpyreTensorLayout(tuple(x.shape), tuple(x.stride()), F16, list(order))
    explicit = SpyreTensorLayout(list(made.device_size), list(made.stride_map), DataFormats.SEN169_FP16)
    a, b = x.to("spyre", device_layout=made), x.to("spyre", device_layout=explicit)
    assert torch.equal(device_values(a).view(torch.int16), device_values(b).view(torch.int16))
    check_identity(b, x, explicit)
    assert torch.equal(b.cpu(), x)


def test_non_dense_tensors_are_read_in_row_major_order():
    x = torch.randn(8, 128).to(F16)[:, ::2]  # gaps: strides (128, 2)
    layout = SpyreTensorLayout([1, 8, 64], [64, 64, 1], DataFormats.SEN169_FP16)
    y = x.to("spyre", device_layout=layout)
    assert torch.equal(device_values(y), x.reshape(-1)) and torch.equal(y.cpu(), x)
