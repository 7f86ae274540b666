"""``torch.ops.spyre``: restickify, overwrite / overwrite_f (KV-cache slot writes) and
copy_from_d2d (copies at storage offsets), checked against CPU results and through torch.library."""

from __future__ import annotations

import pytest
import torch

from torch_layouts import SpyreTensorLayout

F16 = torch.float16


def spyre(t: torch.Tensor) -> torch.Tensor:
    return t.to("spyre")


@pytest.mark.parametrize("order", [None, [1, 0], [0, 1, -1]])
def test_restickify_copies_into_the_dim_order_layout(order):
    x = torch.randn(5, 130).to(F16)
    d = spyre(x)
    y = torch.ops.spyre.restickify(d, order)
    assert y.device_tensor_layout() == SpyreTensorLayout((5, 130), F16, order)
    assert torch.equal(y.cpu(), x) and y.untyped_storage().data_ptr() != d.untyped_storage().data_ptr()
    assert torch.equal(torch.ops.spyre.restickify(d).cpu(), x)


def test_restickify_is_for_spyre_tensors():
    with pytest.raises(NotImplementedError):
        torch.ops.spyre.restickify(torch.zeros(3))


KV_CASES = [  # (cache shape, input shape, dims, offsets)
    ((1, 4, 16, 64), (1, 4, 1, 64), [2], [5]),
    ((1, 4, 16, 64), (1, 4, 3, 64), [2], [13]),
    ((2, 8, 6), (1, 8, 2), [0, 2], [1, 4]),
    ((10,), (10,), [], []),
]


@pytest.mark.parametrize("cache_shape, shape, dims, offsets", KV_CASES)
def test_overwrite_writes_the_slot_in_place(cache_shape, shape, dims, offsets):
    cache, value = torch.randn(cache_shape).to(F16), torch.randn(shape).to(F16)
    expect = cache.clone()
    slot = expect
    for dim, offset in zip(dims, offsets):
        slot = slot.narrow(dim, offset, shape[dim])
    slot.copy_(value)
    on_device = spyre(cache)
    torch.ops.spyre.overwrite(spyre(value), on_device, dims, offsets)
    assert torch.equal(on_device.cpu(), expect)
    cpu = cache.clone()
    torch.ops.spyre.overwrite(value, cpu, dims, offsets)  # the CPU kernel agrees
    assert torch.equal(cpu, expect)


@pytest.mark.parametrize("cache_shape, shape, dims, offsets", KV_CASES)
def test_overwrite_f_returns_a_new_tensor(cache_shape, shape, dims, offsets):
    cache, value = torch.randn(cache_shape).to(F16), torch.randn(shape).to(F16)
    expect = cache.clone()
    torch.ops.spyre.overwrite(value, expect, dims, offsets)
    on_device = spyre(cache)
    out = torch.ops.spyre.overwrite_f(spyre(value), on_device, dims, offsets)
    assert torch.equal(out.cpu(), expect) and torch.equal(on_device.cpu(), cache)


@pytest.mark.parametrize("shape, dims, offsets, error, text", [
    ((1, 4, 1, 64), [2], [16], IndexError, "offset 16 along dim 2"),
    ((1, 4, 1, 64), [2], [-1], IndexError, "offset -1"),
    ((1, 4, 1, 64), [2, 3], [0], ValueError, "one offset per dim"),
    ((1, 4, 1, 64), [7], [0], IndexError, "dim 7"),
    ((1, 3, 1, 64), [2], [0], ValueError, r"\[1, 3, 1, 64\]"),
])
def test_overwrite_refuses_bad_slots(shape, dims, offsets, error, text):
    cache = torch.zeros(1, 4, 16, 64, dtype=F16, device="spyre")
    with pytest.raises(error, match=text):
        torch.ops.spyre.overwrite(torch.ones(shape, dtype=F16, device="spyre"), cache, dims, offsets)
    assert bool((cache.cpu() == 0).all())


@pytest.mark.parametrize("src_off, dst_off", [(0, 0), (3, 7), (64, 1), (130, 0)])
def test_copy_from_d2d_at_any_storage_offset(src_off, dst_off):
    """Torch-Spyre wants stick-aligned offsets; here any offset is exact (a deliberate difference)."""
    a, b = torch.randn(200).to(F16), torch.randn(200).to(F16)
    src, dst = spyre(a), spyre(b)
    torch.ops.spyre.copy_from_d2d(src[:50], dst[:50], src_off, dst_off)
    expect = b.clone()
    expect[dst_off:dst_off + 50] = a[src_off:src_off + 50]
    assert torch.equal(dst.cpu(), expect) and torch.equal(src.cpu(), a)


def test_copy_from_d2d_between_layouts_and_views():
    a = torch.randn(4, 70).to(F16)
    src = a.to("spyre", device_layout=SpyreTensorLayout((4, 70), F16, [1, 0]))
    dst = torch.zeros(6, 70, dtype=F16, device="spyre")
    view = dst[1:5]
    torch.ops.spyre.copy_from_d2d(src, view, src.storage_offset(), view.storage_offset())
    assert torch.equal(dst.cpu()[1:5], a) and bool((dst.cpu()[[0, 5]] == 0).all())
    with pytest.raises(ValueError, match=r"\[4, 70\].*\[6, 70\]"):
        torch.ops.spyre.copy_from_d2d(src, dst, 0, 0)
    with pytest.raises(IndexError, match="-2"):
        torch.ops.spyre.copy_from_d2d(src, view, -2, 0)


@pytest.mark.parametrize("op, args", [
    (torch.ops.spyre.overwrite.default, lambda: (torch.ones(1, 2, 4), torch.zeros(1, 6, 4), [1], [3])),
    (torch.ops.spyre.overwrite_f.default, lambda: (torch.ones(1, 2, 4), torch.zeros(1, 6, 4), [1], [3])),
    (torch.ops.spyre.copy_from_d2d.default, lambda: (torch.ones(8), torch.zeros(8), 0, 0)),
])
def test_registered_with_fake_kernels(op, args):
    torch.library.opcheck(op, args(), test_utils=("test_schema", "test_faketensor"))


def test_compiles_with_the_fake_kernels():
    def step(cache: torch.Tensor, value: torch.Tensor, pos: int) -> torch.Tensor:
        return torch.ops.spyre.overwrite_f(value * 2, cache, [1], [pos])

    cache, value = torch.zeros(1, 6, 4), torch.ones(1, 1, 4)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(cache, value, 2), step(cache, value, 2))
