"""The core layout value: value semantics, the section-4 rules case by case, and properties.

Each table row gives a host tensor, a layout and, written independently, what every
device position must hold: a function of the device coordinates returning the host
index or None for padding (docs/design.md section 4).
"""

from __future__ import annotations

import copy
import itertools
import math
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_layouts import DataFormats, DeviceLayout, SpyreTensorLayout, dma_program, mace
from torch_layouts.compile.lowering import cache_key
from torch_layouts.compile.propagate import Fixed, layout_of_state
from torch_layouts.dma import execute
from torch_layouts.runtime.layout_records import bound_record

F16 = torch.float16


def _tiles_12_8(c):
    row = 12 * c[0] + c[1] + 20 * c[3]
    return (row, c[4]) if (c[0] == 0 or c[1] < 8) and c[4] < 60 else None


def _flat(f, size):
    """The host index of flat element ``f`` of a folded host, None past the end."""
    if f >= math.prod(size):
        return None
    index = []
    for n in reversed(size):
        f, i = divmod(f, n)
        index.append(i)
    return tuple(reversed(index))


# (name, host_size, host_stride or None for row-major, device_size, stride_map, expected(coords))
CASES = [
    ("row-major", (3, 4), None, [3, 4], [4, 1], lambda c: (c[0], c[1])),
    ("transposed", (3, 4), None, [4, 3], [1, 4], lambda c: (c[1], c[0])),
    ("stick padding", (3, 5), None, [2, 3, 4], [4, 5, 1],
     lambda c: (c[1], 4 * c[0] + c[2]) if 4 * c[0] + c[2] < 5 else None),
    ("padding on a row dim", (3, 4), None, [5, 4], [4, 1], lambda c: (c[0], c[1]) if c[0] < 3 else None),
    ("padding on every dim, tiled", (5, 6), None, [3, 2, 2, 4], [12, 4, 6, 1],
     lambda c: (2 * c[0] + c[2], 4 * c[1] + c[3]) if 2 * c[0] + c[2] < 5 and 4 * c[1] + c[3] < 6 else None),
    ("synthetic dim", (3, 4), None, [3, 2, 4], [4, -1, 1], lambda c: (c[0], c[2]) if c[1] == 0 else None),
    ("sparse", (2, 3), None, [3, 1, 2, 4], [1, -1, 3, -1], lambda c: (c[2], c[0]) if c[3] == 0 else None),
    ("broadcast", (3, 4), None, [2, 3, 4], [0, 4, 1], lambda c: (c[1], c[2])),
    ("size-1 host dim ignored", (3, 1, 4), None, [3, 4], [4, 1], lambda c: (c[0], 0, c[1])),
    ("size-1 host dim as synthetic", (3, 1, 4), None, [3, 2, 4], [4, -1, 1],
     lambda c: (c[0], 0, c[2]) if c[1] == 0 else None),
    ("size-1 device dim, any stride", (3, 4), None, [3, 1, 4], [4, 999, 1], lambda c: (c[0], c[2])),
    ("mixed radix padded in the middle", (10,), None, [2, 2, 4], [8, 4, 1],
     lambda c: (8 * c[0] + 4 * c[1] + c[2],) if 8 * c[0] + 4 * c[1] + c[2] < 10 else None),
    ("steps not aligned to the host", (10,), None, [4, 3], [3, 1],
     lambda c: (3 * c[0] + c[1],) if 3 * c[0] + c[1] < 10 else None),
    ("partial sum below the next step", (6,), None, [3, 3], [2, 1],
     lambda c: (2 * c[0] + c[1],) if c[1] < 2 else None),
    ("stride tie: the later dim is finer", (3,), None, [3, 2], [1, 1], lambda c: (c[0],) if c[1] == 0 else None),
    ("folded host dims", (40, 60), None, [38, 64], [64, 1], lambda c: _flat(64 * c[0] + c[1], (40, 60))),
    ("three folded host dims", (2, 3, 4), None, [4, 7], [7, 1], lambda c: _flat(7 * c[0] + c[1], (2, 3, 4))),
    ("blocks of 20 rows split 12 + 8", (40, 60), None, [2, 12, 1, 2, 64], [720, 60, 64, 1200, 1], _tiles_12_8),
    ("permuted host strides", (4, 3), (1, 4), [3, 4], [4, 1], lambda c: (c[1], c[0])),
    ("sliced host", (3, 2), (5, 1), [3, 2], [5, 1], lambda c: (c[0], c[1])),
    ("sliced host with a step", (3, 3), (10, 2), [3, 4], [10, 2], lambda c: (c[0], c[1]) if c[1] < 3 else None),
    ("zero-size host", (0, 4), None, [2, 4], [4, 1], lambda c: None),
    ("rank-0 host", (), None, [2], [-1], lambda c: () if c[0] == 0 else None),
]
IDS = [row[0] for row in CASES]


def _row_major(size):
    return tuple(math.prod(size[d + 1:]) for d in range(len(size)))


def _expected(device_size, expected):
    return [expected(c) for c in itertools.product(*(range(n) for n in device_size))]


@pytest.mark.parametrize("name, host_size, host_stride, device_size, stride_map, expected", CASES, ids=IDS)
def test_table_host_map(name, host_size, host_stride, device_size, stride_map, expected):
    layout = DeviceLayout(device_size, stride_map, F16)
    want = [-1 if idx is None else sum(i * s for i, s in zip(idx, _row_major(host_size)))
            for idx in _expected(device_size, expected)]
    assert layout.host_map(host_size, host_stride).tolist() == want
    assert layout.real_mask(host_size, host_stride).tolist() == [w >= 0 for w in want]


@pytest.mark.parametrize("name, host_size, host_stride, device_size, stride_map, expected", CASES, ids=IDS)
def test_table_point_functions(name, host_size, host_stride, device_size, stride_map, expected):
    layout = DeviceLayout(device_size, stride_map, F16)
    want = _expected(device_size, expected)
    assert [layout.host_index(p, host_size, host_stride) for p in range(len(want))] == want
    for idx in itertools.product(*(range(n) for n in host_size)):
        assert layout.device_offset(idx, host_size, host_stride) == want.index(idx)  # first copy
    assert sum(w is not None for w in want) == math.prod(host_size) * math.prod(
        n for n, m in zip(device_size, stride_map) if m == 0)


@pytest.mark.parametrize("name, host_size, host_stride, device_size, stride_map, expected", CASES, ids=IDS)
def test_table_stride_map_identity(name, host_size, host_stride, device_size, stride_map, expected):
    """host_offset = sum_j device_coord[j] * stride_map[j] at every real position."""
    stride = host_stride or _row_major(host_size)
    for coords, idx in zip(itertools.product(*(range(n) for n in device_size)), _expected(device_size, expected)):
        if idx is not None:
            assert sum(c * m for c, m in zip(coords, stride_map)) == sum(i * s for i, s in zip(idx, stride))


@pytest.mark.parametrize("dtype, itemsize", [(torch.float16, 2), (torch.bfloat16, 2), (torch.float32, 4),
                                             (torch.int8, 1), (torch.int64, 8), (torch.bool, 1)])
def test_size_in_bytes_counts_padding(dtype, itemsize):
    layout = DeviceLayout([2, 12, 1, 2, 64], [720, 60, 64, 1200, 1], dtype)
    assert (layout.device_numel, layout.nbytes, layout.size_bytes()) == (3072, 3072 * itemsize, 3072 * itemsize)
    assert layout.device_strides == (1536, 128, 128, 64, 1)


def test_folded_dims_pad_2400_elements_to_2432():
    layout = DeviceLayout([38, 64], [64, 1], F16)
    host_map = layout.host_map((40, 60))
    assert host_map.numel() == 2432
    assert torch.equal(host_map[:2400], torch.arange(2400))
    assert (host_map[2400:] == -1).all()


def test_12_plus_8_tiling_blocks():
    layout = DeviceLayout([2, 12, 1, 2, 64], [720, 60, 64, 1200, 1], F16)
    rows = layout.host_map((40, 60)).view(2, 12, 2, 64)[..., 0]  # host row * 60 at column 0
    assert rows[0].tolist() == [[60 * (r + 20 * b) for b in range(2)] for r in range(12)]
    assert rows[1, :8].tolist() == [[60 * (12 + r + 20 * b) for b in range(2)] for r in range(8)]
    assert (rows[1, 8:] == -1).all()


# -- value semantics ---------------------------------------------------------------------------
def _layout(**kw):
    args = dict(device_size=[2, 3, 4], stride_map=[0, 4, 1], dtype=F16) | kw
    return DeviceLayout(args.pop("device_size"), args.pop("stride_map"), args.pop("dtype"), **args)


def test_equality_and_hash():
    a, b = _layout(), _layout(device_size=(2, 3, 4), stride_map=(0, 4, 1))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a == _layout(host_size=(3, 4))  # the host a layout was made for is not part of the value
    for other in (_layout(device_size=[2, 3, 5]), _layout(stride_map=[-1, 4, 1]), _layout(dtype=torch.bfloat16),
                  _layout(pad_value=1)):
        assert a != other
    assert a != (a.device_size, a.stride_map) and a != "layout"


@pytest.mark.parametrize("make", [copy.deepcopy, copy.copy, lambda x: pickle.loads(pickle.dumps(x))],
                         ids=["deepcopy", "copy", "pickle"])
def test_copies_are_equal_values(make):
    a = _layout(pad_value=-2.5, host_size=(3, 4), host_stride=(1, 3))
    b = make(a)
    assert b == a and hash(b) == hash(a) and type(b) is DeviceLayout
    assert (b.host_size, b.host_stride, b.pad_value) == ((3, 4), (1, 3), -2.5)
    assert torch.equal(b.host_map(), a.host_map())


@pytest.mark.parametrize("name", ["device_size", "stride_map", "dtype", "pad_value", "host_size", "new"])
def test_immutable(name):
    a = _layout()
    with pytest.raises(AttributeError, match="immutable"):
        setattr(a, name, None)
    with pytest.raises(AttributeError, match="immutable"):
        delattr(a, name)
    assert a == _layout()


def test_inputs_are_copied():
    size, smap = [3, 4], [4, 1]
    a = DeviceLayout(size, smap, F16)
    size[0], smap[0] = 9, 9
    assert (a.device_size, a.stride_map) == ((3, 4), (4, 1))


# -- caches keyed on a layout keep each layout's own binding -------------------------------------
FP8 = torch.float8_e4m3fn

# (name, a, b, host size, host strides): a == b, yet they differ in an attribute == ignores (the host
# binding, a Spyre dim_order, the sign of a zero pad); both hold the host tensor given.
EQUAL_APART = [
    ("explicit vs bound", lambda: DeviceLayout([3, 4], [4, 1], F16),
     lambda: DeviceLayout([3, 4], [4, 1], F16, host_size=(3, 4)), (3, 4), (4, 1)),
    ("bound to other sizes", lambda: DeviceLayout([12], [1], F16, host_size=(12,)),
     lambda: DeviceLayout([12], [1], F16, host_size=(3, 4)), (3, 4), (4, 1)),
    ("bound to other strides", lambda: DeviceLayout([4, 3], [1, 4], F16, host_size=(3, 4), host_stride=(4, 1)),
     lambda: DeviceLayout([4, 3], [1, 4], F16, host_size=(3, 4), host_stride=(1, 3)), (3, 4), (4, 1)),
    ("spyre explicit vs bound", lambda: SpyreTensorLayout([1, 64], [64, 1], DataFormats.SEN169_FP16),
     lambda: SpyreTensorLayout((64,), F16), (64,), (1,)),
    ("spyre rank-0 float8", lambda: SpyreTensorLayout([1, 128], [-1, -1], DataFormats.SEN143_FP8, pad_value=1.5),
     lambda: SpyreTensorLayout((), FP8, [], pad_value=1.5), (), ()),
    ("spyre dim_order", lambda: SpyreTensorLayout((1, 1, 64), F16, [0, 1, 2]),
     lambda: SpyreTensorLayout((1, 1, 64), F16, [1, 0, 2]), (1, 1, 64), (64, 64, 1)),
    ("mace bound to other ranks", lambda: mace.CPU_NCHW.bind((2, 6), F16),
     lambda: mace.CPU_NCHW.bind((2, 1, 1, 6), F16), (2, 6), (6, 1)),
    ("pad 0.0 vs -0.0", lambda: DeviceLayout([4], [1], F16, pad_value=0.0),
     lambda: DeviceLayout([4], [1], F16, pad_value=-0.0), (3,), (1,)),
]

# (name, the layout a cached path hands back for a layout and a host size and strides)
CACHED_PATHS = [
    ("resolve", lambda layout, size, stride: layout.resolve(size, stride).layout),
    ("dma_program", lambda layout, size, stride: dma_program(layout, size, stride).layout),
    ("bound_record", lambda layout, size, stride: bound_record(layout, size, stride).layout),
    ("device tensor", lambda layout, size, stride: torch.empty(
        0, dtype=layout.dtype).new_empty_strided(size, stride, device="spyre", device_layout=layout
                                                 ).device_tensor_layout()),
    ("layout_of_state", lambda layout, size, stride: layout_of_state(size, layout.dtype, Fixed(layout), stride)),
]


def _attributes(layout: DeviceLayout) -> tuple:
    """Everything a layout holds, the pad value's sign included."""
    return type(layout), layout._state(), repr(layout.pad_value)


@pytest.mark.parametrize("path", [p[1] for p in CACHED_PATHS], ids=[p[0] for p in CACHED_PATHS])
@pytest.mark.parametrize("a, b, size, stride", [c[1:] for c in EQUAL_APART], ids=[c[0] for c in EQUAL_APART])
def test_cached_paths_keep_each_layouts_binding(a, b, size, stride, path):
    a, b = a(), b()
    assert a == b and hash(a) == hash(b) and _attributes(a) != _attributes(b)
    for layout in (a, b, a, b):
        assert _attributes(path(layout, size, stride)) == _attributes(layout)


@pytest.mark.parametrize("a, b", [c[1:3] for c in EQUAL_APART], ids=[c[0] for c in EQUAL_APART])
def test_compile_plan_cache_keys_tell_fixed_layouts_apart(a, b):
    gm = torch.fx.symbolic_trace(torch.nn.Identity())
    a, b = a(), b()
    assert cache_key(gm, {"x": Fixed(a)}) != cache_key(gm, {"x": Fixed(b)})
    assert cache_key(gm, {"x": Fixed(a)}) == cache_key(gm, {"x": Fixed(copy.copy(a))})


def test_relayout_keeps_the_binding_of_an_equal_cached_layout():
    """A rank-0 float8 tensor relaid into a bound layout after an equal explicit one was used."""
    explicit = SpyreTensorLayout([1, 128], [-1, -1], DataFormats.SEN143_FP8, pad_value=1.5)
    x = torch.tensor(2.0).to(FP8).to("spyre", device_layout=explicit)
    bound = SpyreTensorLayout((), FP8, [], pad_value=1.5)
    y = torch.tensor(-3.0).to(FP8).to("spyre").to("spyre", device_layout=bound)
    assert bound == explicit and x.device_tensor_layout().host_size is None
    layout = y.device_tensor_layout()
    assert (layout.host_size, layout.host_stride) == ((), ())
    assert layout.resolve().size == () and y.cpu().float().item() == -3.0 and x.cpu().float().item() == 2.0


# -- host tensors that are permuted or sliced, through DMA programs ----------------------------
def test_permuted_host_through_dma():
    base = torch.arange(15, dtype=torch.float32).view(3, 5)
    x = base.t()  # size (5, 3), strides (1, 5)
    layout = DeviceLayout([3, 8], [5, 1], torch.float32, pad_value=-1)
    device = torch.empty(24)
    execute(dma_program(layout, x.shape, x.stride(), direction="h2d"), base.view(-1), device)
    assert torch.equal(device.view(3, 8), torch.cat([base, torch.full((3, 3), -1.0)], dim=1))
    out = torch.zeros(15)
    execute(dma_program(layout, x.shape, x.stride(), direction="d2h"), out, device)
    assert torch.equal(out, base.view(-1))


def test_sliced_host_through_dma():
    big = torch.arange(28, dtype=torch.int32).view(4, 7)
    x = big[1:4, 2:6]  # size (3, 4), strides (7, 1), storage offset 9
    layout = DeviceLayout([3, 2, 2], [7, 2, 1], torch.int32)
    device = torch.empty(12, dtype=torch.int32)
    execute(dma_program(layout, x.shape, x.stride(), host_offset=x.storage_offset()), big.view(-1), device)
    assert torch.equal(device, x.reshape(-1))
    storage = torch.full((28,), -5, dtype=torch.int32)
    execute(dma_program(layout, x.shape, x.stride(), host_offset=9, direction="d2h"), storage, device)
    expected = torch.full((4, 7), -5, dtype=torch.int32)
    expected[1:4, 2:6] = x
    assert torch.equal(storage, expected.view(-1))


# -- properties over random layouts --------------------------------------------------------------
PROPERTY = settings(max_examples=150, deadline=None)


@PROPERTY
@given(data=st.data())
def test_host_map_matches_the_plan(helpers, data):
    case = data.draw(helpers.layout_cases())
    layout = case.layout()
    host_map = layout.host_map(case.host_size, case.host_stride)
    assert torch.equal(host_map, case.expected_host_map())
    assert torch.equal(layout.real_mask(case.host_size, case.host_stride), host_map >= 0)


@PROPERTY
@given(data=st.data())
def test_bijection_and_identity(helpers, data):
    """Every host element sits at exactly one real position per broadcast copy, where
    sum(coord * stride_map) is its host storage offset."""
    case = data.draw(helpers.layout_cases())
    layout = case.layout()
    host_map = layout.host_map(case.host_size, case.host_stride)
    real = host_map >= 0
    numel = math.prod(case.host_size)
    assert torch.equal(torch.bincount(host_map[real], minlength=numel), torch.full((numel,), case.copies))
    coords = helpers.unravel(torch.arange(layout.device_numel), case.device_size)
    via_stride_map = sum(c * m for c, m in zip(coords, case.stride_map))
    assert torch.equal(case.host_offset + via_stride_map[real], case.storage_offsets(host_map[real]))


@PROPERTY
@given(data=st.data())
def test_device_offset_and_host_index_are_inverse(helpers, data):
    case = data.draw(helpers.layout_cases())
    layout = case.layout()
    size, stride = case.host_size, case.host_stride
    expected = case.expected_host_map()
    first_copy = {}
    for p in range(layout.device_numel):
        h = int(expected[p])
        want = None if h < 0 else tuple(int(i) for i in helpers.unravel(torch.tensor(h), size))
        assert layout.host_index(p, size, stride) == want
        if h >= 0:
            first_copy.setdefault(want, p)
    for idx in itertools.product(*(range(n) for n in size)):
        assert layout.device_offset(idx, size, stride) == first_copy[idx]


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, kwargs, error, message", [
    (([3, 4], [4], F16), {}, ValueError, r"device_size \[3, 4\] and stride_map \[4\] differ in length"),
    (([3, -4], [4, 1], F16), {}, ValueError, r"device_size\[1\]=-4"),
    (([3, 4], [4, -2], F16), {}, ValueError, r"stride_map\[1\]=-2"),
    (([3, 4.0], [4, 1], F16), {}, TypeError, r"device_size\[1\] must be an int, got 4.0"),
    (([3, 4], [4, True], F16), {}, TypeError, r"stride_map\[1\] must be an int, got True"),
    (("34", [4, 1], F16), {}, TypeError, r"device_size must be a sequence of ints, got '34'"),
    (([3, 4], 7, F16), {}, TypeError, r"stride_map must be a sequence of ints, got 7"),
    (([], [], F16), {}, ValueError, r"device_size"),
    (([3, 4], [4, 1], torch.float64), {}, ValueError, r"torch\.float64 is not a device type"),
    (([3, 4], [4, 1], torch.complex64), {}, ValueError, r"torch\.complex64 is not a device type"),
    (([3, 4], [4, 1], torch.complex128), {}, ValueError, r"torch\.complex128 is not a device type"),
    (([3, 4], [4, 1], "float16"), {}, TypeError, r"dtype must be a torch\.dtype or DataFormats, got 'float16'"),
    (([3, 4], [4, 1], torch.int8), {"pad_value": 300}, ValueError, r"pad_value 300 does not fit torch\.int8"),
    (([3, 4], [4, 1], torch.int32), {"pad_value": 1.5}, ValueError, r"pad_value 1\.5"),
    (([3, 4], [4, 1], torch.bool), {"pad_value": 2}, ValueError, r"pad_value 2 is not a bool"),
    (([3, 4], [4, 1], F16), {"pad_value": "x"}, TypeError, r"pad_value must be a number, got 'x'"),
    (([3, 4], [4, 1], F16), {"pad_value": 1e6}, ValueError,
     r"pad_value 1000000\.0 is not exactly representable in torch\.float16"),
    (([3, 4], [4, 1], F16), {"pad_value": 0.1}, ValueError, r"pad_value 0\.1 is not exactly representable"),
    (([3, 4], [4, 1], torch.float8_e4m3fn), {"pad_value": float("inf")}, ValueError, r"pad_value inf is not exactly"),
    (([3, 4], [4, 1], F16), {"host_size": (3, -1)}, ValueError, r"host_size\[1\]=-1"),
    (([3, 4], [4, 1], F16), {"host_size": (3, 4), "host_stride": (1,)}, ValueError,
     r"host_stride \[1\] and host_size \[3, 4\] differ in length"),
])
def test_bad_construction(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        DeviceLayout(*args, **kwargs)


@pytest.mark.parametrize("device_size, stride_map, host_size, host_stride, message", [
    ([3, 4], [4, 1], (4, 4), None,
     r"cannot hold a host tensor of size \[4, 4\]: only 3 of the 4 elements along host dim\(s\) \[0\]"),
    ([2, 3], [1, 1], (3,), None, r"cannot hold a host tensor of size \[3\]: only 2 of the 3"),
    ([5, 3], [2, 1], (12,), None, r"only 10 of the 12"),
    ([3, 4], [8, 3], (3, 4), (8, 2), r"stride_map\[1\]=3 .* does not step along any host dim"),
    ([4], [1], (3, 4), (5, 1), r"no device dim stepping along host dim 0 \(size 3, stride 5\)"),
    ([38, 64], [64, 1], (40, 61), None, r"only 2432 of the 2440"),
    ([3, 4], [4, 1], (3, 4, -2), None, r"host_size\[2\]=-2"),
    ([3, 4], [4, 1], (3, 4), (4, 1, 1), r"host_stride \[4, 1, 1\] and host_size \[3, 4\] differ in length"),
])
def test_layout_that_cannot_hold_the_host(device_size, stride_map, host_size, host_stride, message):
    layout = DeviceLayout(device_size, stride_map, F16)
    for call in (layout.resolve, layout.host_map, layout.real_mask, lambda s, t: dma_program(layout, s, t)):
        with pytest.raises(ValueError, match=message):
            call(host_size, host_stride)


def test_unbound_layout_needs_a_host_size():
    with pytest.raises(ValueError, match=r"not bound to a host size; pass host_size"):
        _layout().host_map()


@pytest.mark.parametrize("index", [(3, 0), (0, -1), (1,), (0, 0, 0), (0.0, 1)])
def test_device_offset_rejects_bad_indices(index):
    with pytest.raises(IndexError, match=r"host index .* out of range for host size \[3, 4\]"):
        _layout().device_offset(index, (3, 4))


@pytest.mark.parametrize("offset", [-1, 24, 1.0])
def test_host_index_rejects_bad_offsets(offset):
    with pytest.raises(IndexError, match=r"device offset .* is outside \[0, 24\)"):
        _layout().host_index(offset, (3, 4))
