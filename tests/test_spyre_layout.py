"""SpyreTensorLayout: the examples of Spyre's documentation and docs/design.md, data formats, constructor forms, limits, errors."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_layouts import DataFormats, DeviceLayout, SpyreTensorLayout, dma_program

F16 = torch.float16
FP16 = DataFormats.SEN169_FP16

# dtype -> (DataFormats member name, elements per 128-byte stick), docs/design.md section 3
FORMATS = {
    torch.float16: ("SEN169_FP16", 64), torch.bfloat16: ("BFLOAT16", 64), torch.float32: ("IEEE_FP32", 32),
    torch.int8: ("SENINT8", 128), torch.uint8: ("UINT8", 128), torch.int16: ("SENINT16", 64),
    torch.int32: ("IEEE_INT32", 32), torch.int64: ("IEEE_INT32", 32), torch.bool: ("BOOL", 128),
    torch.float8_e4m3fn: ("SEN143_FP8", 128), torch.float8_e5m2: ("SEN152_FP8", 128),
}


# (constructor args, device_size, stride_map)
EXAMPLES = [
    (((5, 100, 150), F16), [100, 3, 5, 64], [150, 64, 15000, 1]),
    (((5, 100, 150), F16, [1, 0, 2]), [5, 3, 100, 64], [15000, 64, 150, 1]),
    (((1024, 256), F16), [4, 1024, 64], [64, 256, 1]),
    (((512, 8, 256), F16), [8, 4, 512, 64], [256, 64, 2048, 1]),
    (((512, 256), (256, 1), F16, [1, 0]), [8, 256, 64], [16384, 1, 256]),
    (((512, 256), (256, 1), F16, [0, 1, -1]), [256, 1, 512, 64], [1, -1, 256, -1]),
    (((), F16), [1, 64], [-1, -1]),
    (((128, 256, 512), F16), [256, 8, 128, 64], [512, 64, 131072, 1]),  # Spyre's documented stride_map example
    (((50, 10, 200), F16), [10, 4, 50, 64], [200, 64, 2000, 1]),  # Spyre's documented worked example
    (((100,), F16), [2, 64], [64, 1]),
    (((5, 1), F16), [1, 5, 64], [-1, 1, -1]),  # size-1 host dims get -1
    (((3, 100), torch.float32), [4, 3, 32], [32, 100, 1]),
    (((3, 100), torch.int8), [1, 3, 128], [128, 100, 1]),
    (((2, 3, 4, 5, 6, 70), F16), [3, 4, 5, 6, 2, 2, 64], [8400, 2100, 420, 70, 64, 25200, 1]),
    (((2,) * 7, F16, [0, 1, 2, 3, 4, 5, 6, -1]), [2, 2, 2, 2, 2, 2, 1, 2, 64], [32, 16, 8, 4, 2, 1, -1, 64, -1]),
    (([4, 512, 64], [64, 256, 1], FP16), [4, 512, 64], [64, 256, 1]),
    (([38, 64], [64, 1], FP16), [38, 64], [64, 1]),
]


@pytest.mark.parametrize("args, device_size, stride_map", EXAMPLES, ids=[str(a) for a, _, _ in EXAMPLES])
def test_examples(args, device_size, stride_map):
    stl = SpyreTensorLayout(*args)
    assert (stl.device_size, stl.stride_map) == (tuple(device_size), tuple(stride_map))
    dtype = next(a for a in args if isinstance(a, (torch.dtype, DataFormats)))
    name = dtype.name if isinstance(dtype, DataFormats) else FORMATS[dtype][0]
    text = f"SpyreTensorLayout(device_size={device_size}, stride_map ={stride_map}, device_dtype=DataFormats.{name})"
    assert str(stl) == repr(stl) == text
    assert isinstance(stl, DeviceLayout) and stl.device_rank == len(device_size)


@pytest.mark.parametrize("dim_order, text", [
    (None, "SpyreTensorLayout(device_size=[100, 3, 5, 64], stride_map =[150, 64, 15000, 1], "
           "device_dtype=DataFormats.SEN169_FP16)"),
    ([1, 0, 2], "SpyreTensorLayout(device_size=[5, 3, 100, 64], stride_map =[15000, 64, 150, 1], "
                "device_dtype=DataFormats.SEN169_FP16)"),
])
def test_documented_text_exactly(dim_order, text):
    args = ((5, 100, 150), F16) if dim_order is None else ((5, 100, 150), F16, dim_order)
    assert str(SpyreTensorLayout(*args)) == text


def test_documented_padded_host_example():
    """The documented [256, 8, 128, 64] / [512, 64, 131072, 1] layout also holds a [100, 200, 500] host
    tensor with the same strides; the other positions are padding."""
    stl = SpyreTensorLayout([256, 8, 128, 64], [512, 64, 131072, 1], FP16)
    host, stride = (100, 200, 500), (131072, 512, 1)
    assert dma_program(stl, host, stride).elements == 100 * 200 * 500
    assert dma_program(stl, (128, 256, 512)).elements == stl.device_numel
    dev_stride = (65536, 8192, 64, 1)
    for i, j, k in [(0, 0, 0), (99, 199, 499), (7, 130, 64), (50, 3, 448)]:
        coords = (j, k // 64, i, k % 64)
        offset = sum(c * s for c, s in zip(coords, dev_stride))
        assert stl.device_offset((i, j, k), host, stride) == offset
        assert stl.host_index(offset, host, stride) == (i, j, k)
    for coords in [(200, 0, 0, 0), (0, 7, 0, 52), (0, 0, 100, 0), (255, 7, 127, 63)]:
        assert stl.host_index(sum(c * s for c, s in zip(coords, dev_stride)), host, stride) is None


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_default_layout_formula(helpers, data):
    """Random shapes, dim_orders (sparse too) and permuted/sliced host strides: device dims
    ``[o1, ..., o(r-1) tiles, o0, stick]``, stride_map right to left, every element where the
    documented index formula puts it."""
    case = data.draw(helpers.spyre_cases())
    stl = case.layout()
    assert (stl.device_size, stl.stride_map) == (case.device_size(), case.stride_map())
    assert stl.dim_order == case.dim_order
    assert stl.sparse or case.dim_order[-1:] != (-1,)
    host_map, offsets = stl.host_map(), case.device_offsets()
    numel = math.prod(case.host_size)
    assert torch.equal(host_map[offsets], torch.arange(numel))
    assert int((host_map >= 0).sum()) == numel
    for h in {0, numel // 2, numel - 1}:
        idx = tuple(int(i) for i in helpers.unravel(torch.tensor(h), case.host_size))
        assert stl.device_offset(idx) == int(offsets[h]) and stl.host_index(int(offsets[h])) == idx


def test_data_formats_members():  # IEEE_INT64 is int64's host format; on the device it is IEEE_INT32
    assert {f.name for f in DataFormats} == {name for name, _ in FORMATS.values()} | {"IEEE_INT64"}


@pytest.mark.parametrize("dtype, name, eps", [(d, n, e) for d, (n, e) in FORMATS.items()])
def test_formats_and_sticks(dtype, name, eps):
    fmt = DataFormats[name]
    stl = SpyreTensorLayout((3, 200), dtype)
    assert stl.device_dtype is fmt and stl.dtype == dtype
    assert stl.elems_per_stick() == fmt.elems_per_stick() == eps == 128 // fmt.dtype.itemsize
    assert stl.device_size == (math.ceil(200 / eps), 3, eps)
    assert stl.nbytes == math.ceil(200 / eps) * 3 * eps * dtype.itemsize  # int64: 8-byte slots
    assert str(stl).endswith(f"device_dtype=DataFormats.{name})") and repr(fmt) == str(fmt) == f"DataFormats.{name}"
    explicit = SpyreTensorLayout(list(stl.device_size), list(stl.stride_map), fmt)
    assert explicit.dtype == fmt.dtype and explicit.for_host_dtype(dtype) == stl
    if dtype == fmt.dtype:
        assert SpyreTensorLayout((3, 200), fmt) == stl and explicit == stl


def test_constructor_forms_agree():
    size, stride = (5, 100, 150), (15000, 150, 1)
    forms = [
        SpyreTensorLayout(size, F16),
        SpyreTensorLayout(torch.Size(size), F16, (0, 1, 2)),
        SpyreTensorLayout(size, stride, F16),
        SpyreTensorLayout(list(size), list(stride), F16, [0, 1, 2]),
        SpyreTensorLayout([100, 3, 5, 64], [150, 64, 15000, 1], FP16),
    ]
    assert all(f == forms[0] and hash(f) == hash(forms[0]) for f in forms)
    assert [f.dim_order for f in forms] == [(0, 1, 2)] * 4 + [None]
    assert [f.host_size for f in forms] == [size] * 4 + [None]
    assert SpyreTensorLayout(size, F16, [1, 0, 2]) != forms[0]


def test_bound_layout_knows_its_host_and_explicit_needs_one():
    stl = SpyreTensorLayout((1024, 256), F16)
    assert dma_program(stl) is dma_program(stl, (1024, 256))
    explicit = SpyreTensorLayout([4, 1024, 64], [64, 256, 1], FP16)
    with pytest.raises(ValueError, match="not bound to a host size"):
        dma_program(explicit)
    assert dma_program(explicit, (1024, 256)).nests == dma_program(stl).nests


def test_sparse_holds_one_element_per_stick():
    stl = SpyreTensorLayout((6, 5), (5, 1), F16, [0, 1, -1])
    assert stl.sparse and not SpyreTensorLayout((6, 5), F16).sparse
    sticks = stl.host_map().view(-1, 64)
    assert (sticks[:, 1:] == -1).all()
    assert sorted(sticks[:, 0].tolist()) == list(range(30))


def test_pad_value_is_part_of_the_value():
    stl = SpyreTensorLayout((3, 4), F16, pad_value=-1)
    assert stl != SpyreTensorLayout((3, 4), F16) and stl.pad_value == -1.0
    assert "pad_value=-1.0" in str(stl)


@pytest.mark.parametrize("make", [copy.deepcopy, lambda x: pickle.loads(pickle.dumps(x))], ids=["deepcopy", "pickle"])
def test_copies_keep_the_notation(make):
    stl = SpyreTensorLayout((512, 256), (256, 1), F16, [0, 1, -1], pad_value=2)
    other = make(stl)
    assert other == stl and hash(other) == hash(stl) and type(other) is SpyreTensorLayout
    assert (other.dim_order, other.host_size, other.host_stride, str(other)) == (
        stl.dim_order, stl.host_size, stl.host_stride, str(stl))


def test_immutable():
    stl = SpyreTensorLayout((3, 4), F16)
    for name in ("dim_order", "device_size", "stride_map"):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(stl, name, None)


# -- ranks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("rank, sparse", [(r, False) for r in range(7)] + [(r, True) for r in range(8)])
def test_supported_ranks(helpers, rank, sparse):
    size = tuple(range(2, 2 + rank))
    order = list(range(rank)) + [-1] if sparse else list(range(rank))[::-1]
    stl = SpyreTensorLayout(size, F16, order)
    case = helpers.SpyreCase(size, stl.host_stride, 0, math.prod(size), tuple(order), F16, 0)
    assert stl.device_rank == (2 if rank == 0 else rank + 1 + sparse)
    assert (stl.device_size, stl.stride_map) == (case.device_size(), case.stride_map())
    assert torch.equal(stl.host_map()[case.device_offsets()], torch.arange(math.prod(size)))
    assert dma_program(stl).elements == math.prod(size)
    assert SpyreTensorLayout(list(stl.device_size), list(stl.stride_map), stl.device_dtype) == stl


@pytest.mark.parametrize("rank, sparse", [(7, False), (8, True), (9, False)])
def test_rank_too_high(rank, sparse):
    size, stride = (2,) * rank, tuple(2 ** k for k in reversed(range(rank)))
    order = list(range(rank)) + [-1] if sparse else list(range(rank))
    forms = [(size, F16, order), (size, stride, F16, order)] + ([] if sparse else [(size, F16), (size, stride, F16)])
    for args in forms:
        with pytest.raises(ValueError, match=rf"host rank {rank} exceeds the Spyre limit of {6 + sparse}"):
            SpyreTensorLayout(*args)


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, kwargs, error, message", [
    (((3, 4, 5), F16, [0, 0, 1]), {}, ValueError, r"dim_order \[0, 0, 1\] must be a permutation of \[0, 1, 2\]"),
    (((3, 4, 5), F16, [-1, 0, 1, 2]), {}, ValueError, r"dim_order \[-1, 0, 1, 2\] must be a permutation"),
    (((3, 4, 5), F16, [0, -1, 1, 2]), {}, ValueError, r"dim_order \[0, -1, 1, 2\] must be a permutation"),
    (((3, 4, 5), F16, [0, 1, 2, -1, -1]), {}, ValueError, r"dim_order \[0, 1, 2, -1, -1\] must be a permutation"),
    (((3, 4, 5), F16, [0, 1]), {}, ValueError, r"dim_order \[0, 1\] must be a permutation of \[0, 1, 2\]"),
    (((3, 4, 5), F16, [0, 1, 3]), {}, ValueError, r"dim_order \[0, 1, 3\] must be a permutation"),
    (((3, 4, 5), F16, [0, 1, 2, 3]), {}, ValueError, r"dim_order \[0, 1, 2, 3\] must be a permutation"),
    (((3, 4), F16, [0, 1.0]), {}, TypeError, r"dim_order must hold ints, got \[0, 1\.0\]"),
    (((3, 4), F16, "01"), {}, TypeError, r"dim_order must be a sequence of ints, got '01'"),
    (((3, 4), F16, 1), {}, TypeError, r"dim_order must be a sequence of ints, got 1"),
    (((-1, 4), F16), {}, ValueError, r"host_size\[0\]=-1"),
    (((3, 4), (4, -1), F16), {}, ValueError, r"host_stride\[1\]=-1"),
    (((3, 4), (4,), F16), {}, ValueError, r"host_stride \[4\] and host_size \[3, 4\] differ in length"),
    (((3, 4.5), F16), {}, TypeError, r"host_size\[1\] must be an int, got 4\.5"),
    (((3, 4), torch.float64), {}, ValueError, r"dtype torch\.float64 is not a device type"),
    (((3, 4), torch.complex64), {}, ValueError, r"dtype torch\.complex64 is not a device type"),
    (((3, 4), (4, 1), torch.complex128), {}, ValueError, r"dtype torch\.complex128 is not a device type"),
    (((3, 4), "float16"), {}, TypeError, r"got \(\(3, 4\), 'float16'\)"),
    (((3, 4),), {}, TypeError, r"SpyreTensorLayout takes .* got \(\(3, 4\),\)"),
    (((3, 4), torch.int8), {"pad_value": 200}, ValueError, r"pad_value 200 does not fit torch\.int8"),
    (([4, 32], [32, 1], FP16), {}, ValueError, r"device_size\[-1\]=32 must be 64"),
    (([4, 64], [64], FP16), {}, ValueError, r"device_size \[4, 64\] and stride_map \[64\] differ in length"),
    (([-4, 64], [64, 1], FP16), {}, ValueError, r"device_size\[0\]=-4"),
    (([], [], FP16), {}, ValueError, r"device_size must be a non-empty sequence, got \[\]"),
    (([2] * 9 + [64], [1] * 10, FP16), {}, ValueError, r"device_size \[2, .*, 64\] has rank 10"),
    (([4, 64], [64, -3], FP16), {}, ValueError, r"stride_map\[1\]=-3"),
])
def test_bad_input(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        SpyreTensorLayout(*args, **kwargs)


def test_layout_too_small_for_the_host():
    stl = SpyreTensorLayout([4, 512, 64], [64, 256, 1], FP16)
    with pytest.raises(ValueError, match=r"cannot hold a host tensor of size \[1024, 256\]: only 512 of the 1024"):
        dma_program(stl, (1024, 256))
