"""No silent wrong data: DLPack export, ``view(dtype)`` across element sizes, ``out=`` tensors and
views that must be resized, and ``resize_`` keeping storage order, each against the CPU bit for bit
over random shapes, layouts and dtypes (or a clear refusal where a layout cannot represent it)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from torch_layouts import _C
from torch_layouts import device_memory as torch_layouts_device_memory
from torch_layouts.runtime.dlpack import host_order_copy

PROPERTY = settings(max_examples=25, deadline=None)
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.uint8, torch.int16, torch.int32,
          torch.int64, torch.bool)
VIEW_DTYPES = DTYPES[:-1] + (torch.float8_e4m3fn,)
WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.cpu()
    return t if t.dtype == torch.bool else t.view(WIDTH[t.element_size()])


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def device_tensor(helpers, data, seed: int, dtypes=DTYPES, min_rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A random host tensor and the same values on spyre, in a random Spyre or hand-built layout."""
    if data.draw(st.booleans(), label="spyre layout"):
        case = data.draw(helpers.spyre_cases(strided=False, dtypes=dtypes))
    else:
        case = data.draw(helpers.layout_cases(strided=False))
        assume(case.dtype in dtypes and case.copies == 1)
    assume(len(case.host_size) >= min_rank)
    x = helpers.random_bits(math.prod(case.host_size), case.dtype, seed).view(case.host_size)
    return x, x.to("spyre", device_layout=case.layout())


# -- view(dtype) -------------------------------------------------------------------------------
@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_view_dtype_reads_and_writes_like_cpu(helpers, data, seed):
    """Every dtype view reads exactly the CPU's bytes (also sliced), or is refused at once with a
    RuntimeError naming both dtypes; a write through it lands where the CPU's does."""
    x, y = device_tensor(helpers, data, seed, dtypes=VIEW_DTYPES, min_rank=1)
    target = data.draw(st.sampled_from(VIEW_DTYPES), label="target")
    try:
        expected = x.view(target)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            y.view(target)
        return
    if target.itemsize < x.element_size():  # narrower elements: always representable
        view = y.view(target)
    else:
        try:
            view = y.view(target)
        except RuntimeError as error:
            assert "cannot address a spyre buffer" in str(error)
            return
    assert same(view.cpu(), expected)
    if expected.dim() and expected.size(0) > 1:  # a slice of the view reads the same
        assert same(view[1:].cpu(), expected[1:])
    fill = helpers.random_bits(expected.numel(), target, seed + 1).view(expected.shape)
    host = x.clone()
    host.view(target).copy_(fill)
    view.copy_(fill.to("spyre"))
    assert same(y.cpu(), host)


@pytest.mark.parametrize("source, target", [(torch.float32, torch.int16), (torch.float32, torch.uint8),
                                             (torch.float32, torch.float16), (torch.int16, torch.int32),
                                             (torch.uint8, torch.float32), (torch.bfloat16, torch.int8)])
def test_issue_view_dtype_cases(source, target):
    """The issue's failing cases (more than one row, a tiled default layout) read the CPU's values."""
    x = torch.randint(-100, 100, (5, 96)).to(source)
    assert same(x.to("spyre").view(target).cpu(), x.view(target))


# -- DLPack ------------------------------------------------------------------------------------
def test_dlpack_refuses_tiled_buffers():
    """The issue's example: a tiled buffer is never handed out as a strided one."""
    t = torch.arange(6.0).reshape(2, 3).to("spyre")
    for export in (lambda: torch.from_dlpack(t), lambda: torch.utils.dlpack.to_dlpack(t),
                   lambda: t.__dlpack__(), lambda: torch.to_dlpack(t)):
        with pytest.raises(BufferError, match="tiled.*copy=True"):
            export()


def test_dlpack_device_and_aliasing():
    """A host-order buffer exports as itself on DLPack's extension device; writes are shared."""
    raw = host_order_copy(torch.arange(6.0).reshape(2, 3).to("spyre"))
    assert raw.__dlpack_device__() == (torch.utils.dlpack.DLDeviceType.kDLExtDev, 0)
    shared = torch.from_dlpack(torch.utils.dlpack.to_dlpack(raw[:, 1:]))
    assert shared.device == raw.device and shared.data_ptr() == raw[:, 1:].data_ptr()
    shared[0, 0] = 9.0
    assert raw.cpu().tolist() == [[0.0, 9.0, 2.0], [3.0, 4.0, 5.0]]


@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_dlpack_exports_exact_elements_or_refuses(helpers, data, seed):
    """Any view of any buffer: DLPack gives exactly the CPU's elements or a BufferError; with
    copy=True it always gives them (in a fresh buffer)."""
    x, y = device_tensor(helpers, data, seed)
    if x.dim() and x.size(0) > 1 and data.draw(st.booleans()):
        x, y = x[1:], y[1:]
    if x.dim() > 1 and data.draw(st.booleans()):
        x, y = x.transpose(0, -1), y.transpose(0, -1)
    for candidate in (y, host_order_copy(y)):
        try:
            out = torch.from_dlpack(candidate)
        except BufferError:
            assert _C._bound_layout_of(candidate) is not None
            continue
        assert out.data_ptr() == candidate.data_ptr() and same(out.cpu(), x)
    copied = torch.from_dlpack(y, copy=True)
    assert same(copied.cpu(), x)


# -- out= that must be resized -------------------------------------------------------------------
@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_out_resized_like_cpu(helpers, data, seed):
    """``torch.abs``/``torch.add`` into an out tensor or view of another size: the out tensor and the
    whole buffer under it end up as on the CPU."""
    rank = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 5)) for _ in range(rank))
    a = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    base_numel = data.draw(st.integers(0, 2 * math.prod(shape) + 4))
    base = torch.randn(base_numel, generator=torch.Generator().manual_seed(seed + 1))
    step = data.draw(st.integers(1, 3))
    start = data.draw(st.integers(0, max(0, base_numel - 1)))
    host_base, dev_base = base.clone(), base.to("spyre")
    host_out, dev_out = host_base[start::step], dev_base[start::step]
    op = data.draw(st.sampled_from(["abs", "add"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if op == "abs":
            torch.abs(a, out=host_out)
            torch.abs(a.to("spyre"), out=dev_out)
        else:
            torch.add(a, 1.5, out=host_out)
            torch.add(a.to("spyre"), 1.5, out=dev_out)
    assert same(dev_out.cpu(), host_out)
    assert same(dev_base.cpu(), host_base[:dev_base.numel()])


def test_issue_out_view_example():
    a = torch.randn(4, 6)
    host, dev = torch.zeros(30), torch.zeros(30).to("spyre")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.abs(a, out=host[::2][:6])
        torch.abs(a.to("spyre"), out=dev[::2][:6])
    assert same(dev.cpu(), host)


# -- resize_ keeps storage order -------------------------------------------------------------------
@pytest.mark.parametrize("old, new", [((8,), (32,)), ((8,), (4,)), ((3, 4), (2, 8)), ((3, 40), (7, 50)),
                                      ((2, 3, 70), (5,)), ((5,), (0,)), ((0,), (3, 3))])
def test_resize_keeps_storage_order(old, new):
    """As on the CPU: the first min(old, new) elements in storage order survive, in place."""
    x = torch.arange(math.prod(old), dtype=torch.float32).reshape(old)
    y = x.to("spyre")
    keep = min(x.numel(), math.prod(new))
    assert y.resize_(new) is y and y.shape == torch.Size(new) and y.is_contiguous()
    assert torch.equal(y.cpu().reshape(-1)[:keep], x.reshape(-1)[:keep])


@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_resize_relays_tiled_buffers(helpers, data, seed):
    """Growing a tensor in any layout re-lays its elements into the new shape's layout; views of the
    same storage see the grown buffer in storage order, as CPU views do."""
    case = data.draw(helpers.spyre_cases(strided=False, dtypes=DTYPES, max_rank=3))
    x = helpers.random_bits(math.prod(case.host_size), case.dtype, seed).view(case.host_size)
    y = x.to("spyre", device_layout=case.layout())
    alias = y.view(-1)
    new = tuple(data.draw(st.integers(0, 6)) for _ in range(data.draw(st.integers(1, 3))))
    keep = min(x.numel(), math.prod(new))
    y.resize_(new)
    assert same(y.cpu().reshape(-1)[:keep], x.reshape(-1)[:keep])
    assert same(alias.cpu()[:keep], x.reshape(-1)[:keep])


@settings(max_examples=150, deadline=None)
@given(shape=st.lists(st.sampled_from([2, 3, 128, 256]), min_size=1, max_size=3),
       dtype=st.sampled_from([torch.uint8, torch.int8, torch.float16, torch.float32]), data=st.data(),
       seed=st.integers(0, 2**31))
def test_flat_views_of_unpadded_buffers_are_elements(helpers, shape, dtype, data, seed):
    """A flat view (view(-1), reshape, a dim-dropping view of it) of a tensor whose buffer has no
    padding, in any Spyre dim order, reads and writes the elements in host order, as CPU views do:
    a uint8 one spans the storage's bytes exactly, which UntypedStorage's raw reads also do, and
    was once read raw in device order. The storage's own bytes stay raw."""
    from torch_layouts import SpyreTensorLayout
    order = list(data.draw(st.permutations(range(len(shape)))))
    layout = SpyreTensorLayout(tuple(shape), dtype, order)
    x = helpers.random_bits(math.prod(shape), dtype, seed).view(shape)
    y = x.to("spyre", device_layout=layout)
    assume(y.untyped_storage().nbytes() == x.numel() * x.element_size())  # no padding: the bytes' size
    for flat in (y.view(-1), y.reshape(-1), y.view(-1).view(-1), y.view(-1).detach()):
        assert same(flat.cpu(), x.reshape(-1))
    z = helpers.random_bits(math.prod(shape), dtype, seed + 1)
    y.view(-1).copy_(z)
    assert same(y.cpu(), z.view(shape))
    raw = torch.empty(0, dtype=torch.uint8, device="spyre").set_(y.untyped_storage())
    assert same(raw.cpu(), torch_layouts_device_memory(y).cpu().view(torch.uint8).reshape(-1))


@settings(max_examples=150, deadline=None)
@given(shape=st.lists(st.sampled_from([2, 3, 64, 128]), min_size=1, max_size=3),
       dtype=st.sampled_from([torch.float16, torch.float32, torch.int32]), target=st.sampled_from([torch.uint8, torch.int8]),
       data=st.data(), seed=st.integers(0, 2**31))
def test_byte_views_of_unpadded_buffers_are_elements(helpers, shape, dtype, target, data, seed):
    """A byte view (``view(dtype)``) of a flat view of a tensor whose buffer has no padding, in any
    Spyre dim order, reads and writes the elements' bytes in host order, as CPU views do: a uint8
    one spans the storage's bytes exactly, and ATen's own dtype view (a plain TensorImpl) was
    read as the raw storage, in device order."""
    from torch_layouts import SpyreTensorLayout
    assume(math.prod(shape) <= 32768)
    order = list(data.draw(st.permutations(range(len(shape)))))
    x = helpers.random_bits(math.prod(shape), dtype, seed).view(shape)
    y = x.to("spyre", device_layout=SpyreTensorLayout(tuple(shape), dtype, order))
    assume(y.untyped_storage().nbytes() == x.numel() * x.element_size())  # no padding: the bytes' size
    views = [y.view(-1).view(target)] + ([y.view(target)] if len(shape) == 1 else [])
    for view in views:
        assert same(view.cpu(), x.reshape(-1).view(target))
    z = helpers.random_bits(x.numel() * x.element_size(), target, seed + 1)
    views[0].copy_(z.to("spyre"))
    assert same(y.cpu(), z.view(dtype).view(shape))


# A hand-built layout holding a 1-D tensor transposed ((2, 2) device dims, host index i + 2j at
# device [i][j]): its uint8 view spans the storage's bytes exactly (the draw that found the bug).
def test_byte_view_of_a_transposed_1d_layout_reads_host_order(helpers):
    from conftest import LayoutCase
    case = LayoutCase(host_size=(4,), host_stride=(1,), host_offset=0, storage_numel=4, device_size=(2, 2),
                      stride_map=(1, 2), roles=(("digit", 0, 1), ("digit", 0, 2)), groups=(((0,), None),),
                      dtype=torch.float16, pad_value=0)
    x = helpers.random_bits(4, torch.float16, 0)
    y = x.to("spyre", device_layout=case.layout())
    assert same(y.view(torch.uint8).cpu(), x.view(torch.uint8))
    assert same(y.view(torch.uint8)[2:6].cpu(), x.view(torch.uint8)[2:6])


def test_resize_of_a_view_shares_the_grown_storage():
    host, dev = torch.arange(10.0), torch.arange(10.0).to("spyre")
    host_view, dev_view = host[2:5], dev[2:5]
    host_view.resize_(3, 4)
    dev_view.resize_(3, 4)
    assert dev_view.storage_offset() == 2 and torch.equal(dev_view.cpu()[:2], host_view[:2])
    dev_view.fill_(7.0)
    assert torch.equal(dev.cpu(), torch.tensor([0.0, 1.0] + [7.0] * 8))
