"""Spyre device tensors: creation with ``device_layout``, the layout on every view, storage
size, H2D/D2H/D2D copies (strided, sliced, views, dtype conversion, broadcast, empty, 0-d)
bit for bit, and ``device_memory`` against the documented Spyre index formula."""

from __future__ import annotations

import gc
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from torch_layouts import DeviceLayout, SpyreTensorLayout, _C, htp, mace, tensorrt
from torch_layouts.core.layout import contiguous_strides

F16, F32 = torch.float16, torch.float32
PROPERTY = settings(max_examples=30, deadline=None)
COPY_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int32, torch.int64, torch.bool,
               torch.float8_e4m3fn)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The same elements as integers of their width (bool as it is): NaN payloads and -0.0 compare."""
    widths = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t if t.dtype == torch.bool else t.view(widths[t.element_size()])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a.cpu()), bits(b.cpu()))


def row_major(case):
    """The same Spyre case on a fresh row-major host tensor (the documented offsets then apply to it)."""
    numel = math.prod(case.host_size)
    return type(case)(case.host_size, contiguous_strides(case.host_size), 0, numel, case.dim_order, case.dtype,
                      case.pad_value)


def check_device_memory(y: torch.Tensor, host: torch.Tensor, offsets: torch.Tensor | None = None) -> None:
    """``device_memory(y)`` holds ``host`` where the layout puts it and the pad value everywhere else."""
    layout = y.device_tensor_layout()
    memory = torch_layouts.device_memory(y)
    assert memory.device.type == "cpu" and memory.dim() == 1 and memory.dtype == layout.dtype
    assert memory.numel() == layout.device_numel
    host_map = layout.host_map()
    real = host_map >= 0
    assert torch.equal(bits(memory[real]), bits(host.reshape(-1)[host_map[real]]))
    pad = bits(torch.tensor([layout.pad_value], dtype=layout.dtype))
    assert bool((bits(memory[~real]) == pad).all())
    if offsets is not None:  # the independent formula agrees with host_map
        assert torch.equal(bits(memory[offsets]), bits(host.reshape(-1)))


# -- the issue's example ---------------------------------------------------------------------------
def test_issue_example():
    x = torch.randint(-2**15, 2**15, (5, 100, 150), dtype=torch.int16).view(F16)
    layout = SpyreTensorLayout((5, 100, 150), F16, [1, 0, 2])
    y = x.to("spyre", device_layout=layout)
    assert y.device == torch.device("spyre", 0) and str(y.device) == "spyre:0"
    assert y.device_tensor_layout() == layout
    # device dims [o1, o2 tiles, o0, stick] = [5, ceil(150/64), 100, 64] float16 elements
    assert y.untyped_storage().nbytes() == 5 * 3 * 100 * 64 * 2 == layout.nbytes
    assert same_bits(y.cpu(), x)
    finite = torch.randn(5, 100, 150, dtype=F16)
    z = finite.to("spyre", device_layout=layout)
    got = (z[1:3].transpose(0, 1) * 2).sum()
    assert got.device.type == "spyre" and got.shape == ()
    # float16 sums accumulate in float32 on both sides, in different orders: allow an ulp or two
    torch.testing.assert_close(got.cpu().float(), (finite[1:3].transpose(0, 1) * 2).sum().float(),
                               rtol=2e-3, atol=0.5)
    stats = torch.spyre.memory_stats()
    assert torch.spyre.memory_allocated() == stats["allocated_bytes.all.current"] >= 2 * layout.nbytes
    assert torch.spyre.max_memory_allocated() >= torch.spyre.memory_allocated()


# -- creation with device_layout ---------------------------------------------------------------------
L34 = SpyreTensorLayout((3, 40), F16, [1, 0])  # device [1, 40, 64] / [2560, 1, 40]


def _creators():
    host = torch.zeros(2, dtype=F16)
    return [
        ("to", lambda L: torch.zeros(3, 40, dtype=F16).to("spyre", device_layout=L)),
        ("to with dtype", lambda L: torch.zeros(3, 40).to("spyre", F16, device_layout=L)),
        ("new_empty", lambda L: host.new_empty((3, 40), device="spyre", device_layout=L)),
        ("new_empty *size", lambda L: host.new_empty(3, 40, device="spyre", device_layout=L)),
        ("new_empty_strided", lambda L: host.new_empty_strided((3, 40), (40, 1), device="spyre", device_layout=L)),
        ("torch.empty", lambda L: torch.empty((3, 40), device="spyre", device_layout=L, dtype=F16)),
        ("torch.empty *size", lambda L: torch.empty(3, 40, dtype=F16, device_layout=L)),
        ("spyre new_empty", lambda L: torch.ones(1, device="spyre", dtype=F16).new_empty((3, 40), device_layout=L)),
    ]


@pytest.mark.parametrize("name,make", _creators(), ids=[n for n, _ in _creators()])
def test_create_with_layout(name, make):
    L = SpyreTensorLayout((3, 40), F16, [1, 0], pad_value=-3)
    y = make(L)
    assert (y.shape, y.stride(), y.dtype, y.device) == ((3, 40), (40, 1), F16, torch.device("spyre", 0))
    assert y.device_tensor_layout() == L and _C._impl_carries_layout(y)
    assert y.untyped_storage().nbytes() == 40 * 64 * 2 == L.nbytes
    assert y.untyped_storage().data_ptr() % 128 == 0
    memory = torch_layouts.device_memory(y)
    padding = L.host_map() < 0
    assert int(padding.sum()) == 40 * 64 - 120 and bool((memory[padding] == -3).all())  # padding set at birth


def test_new_empty_strided_keeps_strides():
    L = SpyreTensorLayout((3, 40), (1, 3), F16)
    y = torch.zeros(1, dtype=F16).new_empty_strided((3, 40), (1, 3), device="spyre", device_layout=L)
    assert y.stride() == (1, 3) and y.device_tensor_layout() == L
    x = torch.randn(40, 3, dtype=F16).t()
    y.copy_(x)
    memory = torch_layouts.device_memory(y)  # device dims [1 tile, 3 rows, 64]: row i at i * 64
    assert same_bits(y.cpu(), x) and all(same_bits(memory[i * 64:i * 64 + 40], x[i]) for i in range(3))


def test_requires_grad_and_device_index_with_layout():
    y = torch.empty((3, 40), device="spyre:0", device_layout=L34, dtype=F16, requires_grad=True)
    assert y.requires_grad and y.is_leaf and y.device.index == 0


DEFAULT_SHAPES = [(), (7,), (1, 1), (3, 40), (2, 3, 70), (2, 1, 3, 1, 2, 5), (2,) * 7]


@pytest.mark.parametrize("size", DEFAULT_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [F16, F32, torch.int8, torch.bool])
def test_default_layout(size, dtype):
    """Without device_layout every way of making a device tensor gives the default layout of its shape."""
    x = torch.zeros(size, dtype=dtype)
    if len(size) <= 6:
        expected = SpyreTensorLayout(size, dtype)
    else:  # above Spyre's rank: plain row-major
        expected = DeviceLayout(size, [s if n != 1 else -1 for n, s in zip(size, contiguous_strides(size))], dtype,
                                host_size=size)
    made = [x.to("spyre"), torch.empty(size, dtype=dtype, device="spyre"),
            torch.zeros(size, dtype=dtype, device="spyre"), x.new_empty(size, device="spyre"),
            torch.ones(1, dtype=dtype, device="spyre").new_empty(size), x.spyre()]
    for y in made:
        assert y.device_tensor_layout() == expected and y.untyped_storage().nbytes() == expected.nbytes
    assert x.device_tensor_layout() is None


def test_permuted_source_keeps_its_strides():
    x = torch.randn(6, 70, 9, dtype=F16).permute(2, 0, 1)
    y = x.to("spyre")
    assert y.stride() == x.stride() and y.device_tensor_layout() == SpyreTensorLayout(x.shape, x.stride(), F16)
    assert same_bits(y.cpu(), x)


@pytest.mark.parametrize("template", [
    htp.R4CroutonLayout, htp.R4FlatMemoryLayout, htp.ChunkedMemoryLayout(4, 0, 0, 1, 0, 2, 0, 3, 0, 1, 8, 2, 8, 3, 32),
    tensorrt.TensorFormat.kCHW4, tensorrt.TensorFormat.kHWC8, mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL),
], ids=str)
def test_templates_bind_to_the_tensor(helpers, template):
    x = helpers.random_bits(2 * 3 * 5 * 30, F16, 7).view(2, 3, 5, 30)
    bound = template.bind((2, 3, 5, 30), F16)
    for y in [x.to("spyre", device_layout=template),
              torch.empty((2, 3, 5, 30), dtype=F16, device="spyre", device_layout=template).copy_(x),
              x.new_empty((2, 3, 5, 30), device="spyre", device_layout=template).copy_(x)]:
        assert y.device_tensor_layout() == bound
        assert y.untyped_storage().nbytes() == bound.nbytes
        assert same_bits(y.cpu(), x)
        check_device_memory(y, x)


# One layout object (or template) moving host tensors of several sizes and strides, each twice
# (the second move reuses the first's record): the layout, strides and device bytes of the same
# move of a tensor that requires grad (the differentiable path, which keeps no record).
REPEATED_MOVES = [
    ("template, two shapes", tensorrt.TensorFormat.kCHW4, [(2, 3, 5, 30), (1, 6, 4, 8)], False),
    ("flat layout, two sizes of its numel", SpyreTensorLayout((120,), F16, [0]), [(120,), (4, 30)], False),
    ("dim order, permuted source", SpyreTensorLayout((6, 40), F16, [1, 0]), [(6, 40)], True),
]


@pytest.mark.parametrize("_, spec, shapes, permuted", REPEATED_MOVES, ids=[c[0] for c in REPEATED_MOVES])
def test_repeated_moves_into_one_layout_object(helpers, _, spec, shapes, permuted):
    for i, shape in enumerate(shapes):
        x = helpers.random_bits(math.prod(shape), F16, i).view(shape)
        if permuted:
            x = x.t().contiguous().t()
        for _ in range(2):
            y = x.to("spyre", device_layout=spec)
            made = x.detach().requires_grad_().to("spyre", device_layout=spec)
            assert y.device_tensor_layout() == made.device_tensor_layout() and y.stride() == made.stride()
            assert same_bits(torch_layouts.device_memory(y), torch_layouts.device_memory(made))
            assert same_bits(y.cpu(), x) and not y.requires_grad


# The forms of a spyre device a host move names (Tensor.to's first argument): each gives the same
# tensor as the differentiable path, on the device it names (the current one when it names none).
MOVE_DEVICES = ["spyre", "spyre:0", torch.device("spyre"), torch.device("spyre", 0)]


@pytest.mark.parametrize("device", MOVE_DEVICES, ids=[str(d) for d in MOVE_DEVICES])
def test_host_moves_name_their_device_in_any_form(helpers, device):
    x = helpers.random_bits(6 * 40, F16, 3).view(6, 40)
    spec = SpyreTensorLayout((6, 40), F16, [1, 0])
    for _ in range(2):
        y = x.to(device, device_layout=spec)
        made = x.detach().requires_grad_().to(device, device_layout=spec)
        assert y.device == made.device == torch.device("spyre", torch.spyre.current_device())
        assert y.device_tensor_layout() == made.device_tensor_layout() and y.stride() == made.stride()
        assert same_bits(y.cpu(), x) and not y.requires_grad


def test_empty_with_a_layout_keeps_its_record(monkeypatch):
    """``torch.empty(..., device_layout=L)`` binds ``L`` once per size, strides and dtype: later
    calls take the kept record (no Python binding), each a fresh tensor in ``L``; a size ``L``
    cannot hold raises every time."""
    from torch_layouts.runtime import tensor_methods
    binds = []
    monkeypatch.setattr(tensor_methods, "bind", lambda *a, original=tensor_methods.bind: binds.append(a) or original(*a))
    spec = SpyreTensorLayout((6, 40), F16, [1, 0])
    made = [torch.empty(6, 40, dtype=F16, device="spyre", device_layout=spec) for _ in range(3)]
    assert len(binds) == 1
    assert all(t.device_tensor_layout() == spec and t.shape == (6, 40) for t in made)
    assert len({t.untyped_storage().data_ptr() for t in made}) == 3  # a buffer each
    torch.empty(240, dtype=F16, device="spyre", device_layout=spec)  # another size: bound anew
    assert len(binds) == 2
    for _ in range(2):
        with pytest.raises(ValueError, match="41"):
            torch.empty(6, 41, dtype=F16, device="spyre", device_layout=spec)


BAD_CREATION = [
    ("layout dtype differs", lambda: torch.empty((3, 40), device="spyre", device_layout=L34), ValueError, "float16"),
    ("layout for another shape", lambda: torch.zeros(3, 41, dtype=F16).to("spyre", device_layout=L34), ValueError,
     "[3, 41]"),
    ("cpu target", lambda: torch.zeros(3, 40, dtype=F16).to("cpu", device_layout=L34), ValueError, "cpu"),
    ("cpu empty", lambda: torch.empty((3, 40), dtype=F16, device="cpu", device_layout=L34), ValueError, "cpu"),
    ("not a layout", lambda: torch.zeros(3, 40).to("spyre", device_layout="[1, 0]"), TypeError, "'[1, 0]'"),
    ("float64", lambda: torch.zeros(3, dtype=torch.float64).to("spyre"), ValueError, "float64"),
    ("complex", lambda: torch.empty(3, dtype=torch.complex64, device="spyre"), ValueError, "complex64"),
    ("bad device index", lambda: torch.zeros(3, 40, dtype=F16).to("spyre:9", device_layout=L34), RuntimeError,
     "spyre:9"),
    ("layout cannot hold", lambda: torch.zeros(3, 200, dtype=F16).to(
        "spyre", device_layout=DeviceLayout([3, 64], [200, 1], F16)), ValueError, ""),
]


@pytest.mark.parametrize("name,make,error,text", BAD_CREATION, ids=[c[0] for c in BAD_CREATION])
def test_bad_creation(name, make, error, text):
    with pytest.raises(error) as info:
        make()
    assert text in str(info.value)


# -- device-to-device relayout ---------------------------------------------------------------------
@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_relayout_on_device(helpers, data, seed):
    """``to("spyre", device_layout=other)`` of a device tensor moves the data on the device."""
    case = data.draw(helpers.spyre_cases(strided=False, dtypes=COPY_DTYPES))
    orders = st.permutations(range(len(case.host_size))).map(list)
    other = SpyreTensorLayout(case.host_size, case.dtype, data.draw(orders), pad_value=case.pad_value)
    x = helpers.random_bits(math.prod(case.host_size), case.dtype, seed).view(case.host_size)
    y = x.to("spyre", device_layout=case.layout())
    _C._reset_stats()
    z = y.to("spyre", device_layout=other)
    counters = _C._counters()
    assert z.device_tensor_layout() == other and same_bits(z.cpu(), x)
    check_device_memory(z, x)
    assert counters["host_bounces"] == 0 and counters["h2d_bytes"] == 0 and counters["d2h_bytes"] == 0
    changed = other != case.layout()
    assert (z is y) == (not changed)
    assert counters["d2d_bytes"] == (x.numel() * x.element_size() if changed else 0)
    assert counters["relayouts"] == int(changed)


def _dense_copy_round_trip(y: torch.Tensor, x: torch.Tensor) -> None:
    """``y`` (holding ``x``) copied into a new tensor in a dense layout of its shape and back into
    a new tensor of its own layout: the same bits each way, the padding its pad value, and
    neither copy through the host."""
    from torch_layouts.ops.operands import new_tensor
    from torch_layouts.ops.view_copy import dense_coords
    dense = new_tensor(dense_coords(y), y.device)
    _C._reset_stats()
    dense.copy_(y)
    back = torch.empty(y.shape, dtype=y.dtype, device="spyre", device_layout=y.device_tensor_layout())
    back.copy_(dense)
    counters = _C._counters()
    assert same_bits(dense.cpu(), x) and same_bits(back.cpu(), x)
    check_device_memory(back, x)
    assert counters["host_bounces"] == 0 and counters["h2d_bytes"] == 0 and counters["d2h_bytes"] == 0


@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_copies_to_and_from_a_dense_layout_stay_on_the_device(helpers, data, seed):
    """A tensor in any Spyre layout copied into a dense layout of its shape (a kernel's staged
    read) and back: the DMA program between the two, or, where the mapping engine has no direct
    one, one side's own program between the buffers."""
    case = data.draw(helpers.spyre_cases(strided=False, dtypes=COPY_DTYPES).filter(lambda c: c.host_size))
    x = helpers.random_bits(math.prod(case.host_size), case.dtype, seed).view(case.host_size)
    _dense_copy_round_trip(x.to("spyre", device_layout=case.layout()), x)


@pytest.mark.parametrize("query, key", [((8, 4, 128, 64), (8, 4, 128, 64)), ((2, 3, 48, 64), (2, 3, 80, 64)),
                                        ((2, 5, 33, 16), (2, 5, 65, 16)), ((3, 40, 70), (3, 50, 70))])
def test_a_batched_matmuls_result_copies_to_a_dense_layout_on_the_device(query, key):
    """sdpa's scores: the batched matmul's result layout has no direct relayout program to a dense
    one (but the last case); its own DMA program copies it, each way (they went through the host:
    8x4x128x128 float32, 2 MB each way)."""
    q, k = torch.randn(query), torch.randn(key)
    scores = torch.matmul(q.to("spyre"), k.to("spyre").transpose(-2, -1))
    _dense_copy_round_trip(scores, scores.cpu())


def test_same_layout_returns_self_unless_copy():
    y = torch.randn(3, 40, dtype=F16).to("spyre", device_layout=L34)
    assert y.to("spyre", device_layout=L34) is y
    assert y.to("spyre:0", device_layout=SpyreTensorLayout((3, 40), F16, [1, 0])) is y  # equal layout value
    assert y.to("spyre") is y and y.to(F16) is y
    copied = y.to("spyre", device_layout=L34, copy=True)
    assert copied is not y and copied.device_tensor_layout() == L34 and torch.equal(copied.cpu(), y.cpu())
    assert copied.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
    view = y[1:]
    moved = view.to("spyre", device_layout=SpyreTensorLayout((2, 40), F16, [1, 0]))
    assert moved is not view and torch.equal(moved.cpu(), y.cpu()[1:])


def test_relayout_with_dtype_change():
    x = torch.randn(3, 40)
    y = x.to("spyre")
    z = y.to("spyre", F16, device_layout=L34)
    assert z.dtype == F16 and z.device_tensor_layout() == L34 and torch.equal(z.cpu(), x.half())


# -- views keep the layout -----------------------------------------------------------------------------
VIEWS = [
    ("view", lambda t: t.view(30, 150)), ("reshape", lambda t: t.reshape(-1)), ("slice", lambda t: t[1:3, ::2]),
    ("select", lambda t: t[2]), ("t", lambda t: t[0].t()), ("permute", lambda t: t.permute(2, 0, 1)),
    ("expand", lambda t: t[:, :1].expand(6, 7, 150)), ("unsqueeze", lambda t: t.unsqueeze(1)),
    ("squeeze", lambda t: t.unsqueeze(0).squeeze(0)), ("alias", lambda t: torch.ops.aten.alias(t)),
    ("as_strided", lambda t: t.as_strided((3, 3), (1, 150), 7)),
    ("_unsafe_view", lambda t: torch.ops.aten._unsafe_view(t, (30, 150))), ("detach", lambda t: t.detach()),
    ("data", lambda t: t.data), ("narrow", lambda t: t.narrow(1, 3, 2)), ("unfold", lambda t: t.unfold(2, 4, 3)),
    ("diagonal", lambda t: t.diagonal(0, 1, 2)), ("flatten", lambda t: t.flatten(1)),
    ("movedim", lambda t: t.movedim(0, 2)), ("split", lambda t: t.split(2)[1]), ("unbind", lambda t: t.unbind(1)[3]),
    ("mT", lambda t: t.mT), ("view_as", lambda t: t.view_as(t)),
    ("chained", lambda t: t.permute(1, 2, 0)[1:, 3:].mT[2]),
]


@pytest.mark.parametrize("name,view", VIEWS, ids=[n for n, _ in VIEWS])
def test_views_keep_layout(helpers, name, view):
    x = helpers.random_bits(6 * 5 * 150, F16, 3).view(6, 5, 150)
    layout = SpyreTensorLayout((6, 5, 150), F16, [2, 0, 1])
    y = x.to("spyre", device_layout=layout)
    v = view(y)
    assert v.device == y.device and _C._impl_carries_layout(v)
    assert v.device_tensor_layout() is y.device_tensor_layout()
    assert v.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    assert v.untyped_storage().nbytes() == layout.nbytes
    assert same_bits(v.cpu(), view(x))


def test_dtype_view_shares_buffer():
    x = torch.randn(3, 40, dtype=F16)
    y = x.to("spyre", device_layout=L34)
    v = y.view(torch.int16)
    assert v.device_tensor_layout() == L34 and torch.equal(v.cpu(), x.view(torch.int16))


def test_detach_data_and_grad_keep_layout():
    x = torch.randn(3, 40)
    layout = SpyreTensorLayout((3, 40), F32, [1, 0])
    y = x.to("spyre", device_layout=layout).requires_grad_()
    for alias in (y.detach(), y.data):
        assert alias.device_tensor_layout() == layout and _C._impl_carries_layout(alias)
        assert alias.untyped_storage().data_ptr() == y.untyped_storage().data_ptr() and not alias.requires_grad
    (y[1:] * 3).sum().backward()
    assert y.grad.device.type == "spyre" and _C._impl_carries_layout(y.grad)
    assert torch.equal(y.grad.cpu(), torch.tensor([0.0, 3.0, 3.0]).view(3, 1).expand(3, 40))


# -- copies, bit for bit -----------------------------------------------------------------------------
@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_h2d_from_strided_sources(helpers, data, seed):
    """Permuted and sliced host views into a layout made for the view itself and into the row-major
    layout of the shape: device memory matches the documented Spyre offsets; D2H restores the view."""
    case = data.draw(helpers.spyre_cases(dtypes=COPY_DTYPES))
    storage = helpers.random_bits(case.storage_numel, case.dtype, seed)
    x = storage.as_strided(case.host_size, case.host_stride, case.host_offset)

    y = x.to("spyre", device_layout=case.layout(), non_blocking=True)
    assert y.device_tensor_layout() == case.layout() and y.stride() == x.stride()
    assert y.untyped_storage().nbytes() >= case.layout().nbytes
    check_device_memory(y, x.contiguous(), case.device_offsets())
    assert same_bits(y.cpu(), x)

    plain = row_major(case)
    z = x.to("spyre", device_layout=plain.layout())
    assert z.untyped_storage().nbytes() == plain.layout().nbytes and z.is_contiguous()
    check_device_memory(z, x.contiguous(), plain.device_offsets())
    assert same_bits(z.cpu(), x)


@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_d2h_into_strided_destinations(helpers, data, seed):
    """D2H into a permuted, sliced CPU view writes exactly the view's elements, straight into the
    view: its strides prove that no two of its elements share an address, so no host tensor
    stands between (no host bounce)."""
    case = data.draw(helpers.spyre_cases(dtypes=COPY_DTYPES))
    plain = row_major(case)
    x = helpers.random_bits(math.prod(case.host_size), case.dtype, seed).view(case.host_size)
    y = x.to("spyre", device_layout=plain.layout())
    storage = helpers.random_bits(case.storage_numel, case.dtype, seed + 1)
    expected = storage.clone()
    dst = storage.as_strided(case.host_size, case.host_stride, case.host_offset)
    expected.as_strided(case.host_size, case.host_stride, case.host_offset).copy_(x)
    torch_layouts.reset_stats()
    dst.copy_(y, non_blocking=True)
    assert torch_layouts.stats()["host_bounces"] == 0
    assert same_bits(storage, expected)


@pytest.mark.parametrize("size, stride, overlapping", [
    ((3, 40), (45, 1), False),  # rows padded
    ((40, 3), (1, 45), False),  # a transposed padded buffer
    ((3, 20), (40, 2), False),  # every other column
    ((2, 3, 40), (200, 41, 1), False),  # rows and planes padded
    ((2, 3, 8), (30, 1, 3), False),  # permuted, the middle dim innermost
    ((3, 40), (20, 1), True),  # rows overlap by half
    ((40, 3), (1, 20), True),
    ((2, 3, 8), (12, 4, 1), True),  # planes overlap the last row of the one before
    ((2, 3, 4), (13, 4, 1), False),  # planes one element apart
    ((2, 3, 4), (11, 4, 1), True),  # a plane starts on the last element of the one before
    ((3, 4), (3, 1), True),  # rows share one element
])
def test_d2h_into_views_aten_cannot_prove_apart(size, stride, overlapping):
    """A CPU destination that is no dense tensor (ATen's overlap check says "too hard"): D2H writes
    straight into it where its strides prove its elements apart; where they share addresses, it
    reads into a fresh host tensor and copies that in, as a CPU source would be copied (the same
    bits in the shared storage)."""
    numel = 1 + sum((n - 1) * s for n, s in zip(size, stride))
    x = torch.randn(size)
    y = x.to("spyre")
    storage = torch.randn(numel + 7)
    expected = storage.clone()
    expected.as_strided(size, stride, 3).copy_(x)
    torch_layouts.reset_stats()
    storage.as_strided(size, stride, 3).copy_(y)
    assert torch_layouts.stats()["host_bounces"] == int(overlapping)
    assert same_bits(storage, expected)


@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_views_of_device_tensors_read_and_written(helpers, data, seed):
    """Reading and writing slices and permuted views of a device tensor matches the same on the host;
    the padding keeps its pad value."""
    case = data.draw(helpers.spyre_cases(strided=False, dtypes=COPY_DTYPES))
    rank = len(case.host_size)
    x = helpers.random_bits(math.prod(case.host_size), case.dtype, seed).view(case.host_size).clone()
    y = x.to("spyre", device_layout=case.layout())

    def draw_view() -> tuple:
        index = []
        for n in case.host_size:
            start = data.draw(st.integers(0, n - 1), label="start")
            index.append(slice(start, data.draw(st.integers(start + 1, n), label="stop"),
                               data.draw(st.integers(1, 2), label="step")))
        return tuple(index), data.draw(st.permutations(range(rank)), label="perm")

    index, perm = draw_view()
    assert same_bits(y[index].permute(perm).cpu(), x[index].permute(perm))

    index, perm = draw_view()
    shape = x[index].permute(perm).shape
    values = helpers.random_bits(math.prod(shape), case.dtype, seed + 1).view(shape)
    source = data.draw(st.sampled_from(["host", "device", "device view"]), label="source")
    if source == "device":
        values = values.to("spyre")
    elif source == "device view":
        values = values.to("spyre", device_layout=SpyreTensorLayout(shape, case.dtype, list(reversed(range(rank)))))
    y[index].permute(perm).copy_(values)
    x[index].permute(perm).copy_(values.cpu())
    assert same_bits(y.cpu(), x)
    check_device_memory(y, x)


def test_slice_assignment_and_inplace_ops_on_views():
    x = torch.randn(6, 70, 9)
    layout = SpyreTensorLayout((6, 70, 9), F32, [1, 2, 0], pad_value=-3)
    y = x.to("spyre", device_layout=layout)
    assert torch.equal(y[:, 60:].cpu(), x[:, 60:])
    v = torch.randn(6, 10, 9)
    y[:, 10:20] = v
    x[:, 10:20] = v
    y[:, 20:30] = v.to("spyre")
    x[:, 20:30] = v
    y[1:3].mul_(2)
    x[1:3].mul_(2)
    y[:, :, 4].add_(y[:, :, 5])
    x[:, :, 4].add_(x[:, :, 5])
    y[0, 0, 0] = 7.0
    x[0, 0, 0] = 7.0
    assert torch.equal(y.cpu(), x) and y.device_tensor_layout() == layout
    check_device_memory(y, x)


@pytest.mark.parametrize("src_dtype,dst_dtype", [(F32, F16), (F16, F32), (F32, torch.bfloat16), (torch.int32, F32),
                                                  (F32, torch.int8), (torch.bool, F16), (F16, torch.int64)])
def test_dtype_converting_copies(src_dtype, dst_dtype):
    """Conversions give exactly what the host's conversion gives, in every direction."""
    x = (torch.randn(4, 70) * 50).to(src_dtype)
    special = src_dtype.is_floating_point and dst_dtype != torch.int64  # NaN -> int64 is outside int32: refused
    x[0, :3] = torch.tensor([float("nan"), -0.0, float("inf")]).to(src_dtype) if special else 0
    want = x.to(dst_dtype)
    h2d = torch.empty(4, 70, dtype=dst_dtype, device="spyre").copy_(x)
    assert same_bits(h2d.cpu(), want)
    assert same_bits(x.to("spyre", dst_dtype).cpu(), want)
    y = x.to("spyre", device_layout=SpyreTensorLayout((4, 70), src_dtype, [1, 0]))
    assert same_bits(torch.empty(4, 70, dtype=dst_dtype).copy_(y), want)  # D2H
    assert same_bits(y.to("cpu", dst_dtype), want)
    d2d = torch.empty(4, 70, dtype=dst_dtype, device="spyre").copy_(y)
    assert same_bits(d2d.cpu(), want) and same_bits(y.to(dst_dtype).cpu(), want)
    view = torch.zeros(4, 140, dtype=dst_dtype, device="spyre")
    view[:, ::2].copy_(y.t().t())
    assert same_bits(view[:, ::2].cpu(), want) and same_bits(view[:, 1::2].cpu(), torch.zeros(4, 70, dtype=dst_dtype))


@pytest.mark.parametrize("source", [torch.tensor(2.5), torch.tensor([1.0, 2.0, 3.0]), torch.tensor([[4.0], [5.0]])],
                         ids=["0-d", "row", "column"])
@pytest.mark.parametrize("where", ["cpu", "spyre"])
def test_broadcasting_copy(source, where):
    layout = SpyreTensorLayout((2, 3), F32, [1, 0], pad_value=-3)
    y = torch.zeros(2, 3).to("spyre", device_layout=layout)
    y.copy_(source.to(where))
    expected = source.expand(2, 3)
    assert torch.equal(y.cpu(), expected)
    check_device_memory(y, expected.contiguous())


def test_copy_from_expanded_and_overlapping_sources():
    x = torch.randn(3, 1).expand(3, 70)
    y = x.to("spyre")
    assert torch.equal(y.cpu(), x)
    dst = torch.empty(3, 70, device="spyre").copy_(x.to("spyre")[:, :1].expand(3, 70))
    assert torch.equal(dst.cpu(), x)


@pytest.mark.parametrize("size", [(0,), (0, 5), (3, 0, 2), (2, 0)], ids=str)
def test_zero_size_tensors(size):
    x = torch.empty(size, dtype=F16)
    y = x.to("spyre")
    assert y.shape == size and y.device.type == "spyre" and y.cpu().shape == size
    assert y.device_tensor_layout() == SpyreTensorLayout(size, F16)
    assert y.untyped_storage().nbytes() == SpyreTensorLayout(size, F16).nbytes == 0
    assert torch_layouts.device_memory(y).numel() == 0
    assert y.copy_(x) is y and y.clone().shape == size
    assert torch.empty(size, dtype=F16).copy_(y).shape == size
    assert float(y.float().sum().cpu()) == 0.0
    assert y.to("spyre", device_layout=SpyreTensorLayout(size, F16, list(range(len(size)))[::-1])).shape == size


def test_zero_d_tensors():
    x = torch.tensor(-0.0, dtype=F16)
    layout = SpyreTensorLayout((), F16, pad_value=1.5)
    y = x.to("spyre", device_layout=layout)
    assert y.shape == () and y.device_tensor_layout() == layout
    assert layout.device_size == (1, 64) and y.untyped_storage().nbytes() == 128
    assert same_bits(y.cpu(), x) and str(y.item()) == "-0.0"
    memory = torch_layouts.device_memory(y)
    assert same_bits(memory[:1], x.view(1)) and bool((memory[1:] == 1.5).all())
    y.copy_(torch.tensor(3.0))
    assert y.item() == 3.0 and bool((torch_layouts.device_memory(y)[1:] == 1.5).all())
    z = torch.tensor(5, dtype=torch.int32, device="spyre")
    assert z.item() == 5 and z.unsqueeze(0).expand(3).cpu().tolist() == [5, 5, 5]
    assert (y * 2).item() == 6.0 and y.view(1).cpu().tolist() == [3.0]


def test_device_memory_is_a_copy_and_checks_its_argument():
    y = torch.ones(3, 40, dtype=F16).to("spyre", device_layout=L34)
    memory = torch_layouts.device_memory(y)
    memory.fill_(9)
    assert bool((y.cpu() == 1).all())
    assert bool((torch_layouts.device_memory(y[1:])[L34.host_map() >= 0] == 1).all())  # a view: the whole buffer
    with pytest.raises(ValueError, match="spyre tensor"):
        torch_layouts.device_memory(torch.ones(3))
    with pytest.raises(ValueError, match="spyre tensor"):
        torch_layouts.device_memory([1, 2])


@PROPERTY
@given(data=st.data())
def test_storage_is_padded_device_size_and_aligned(helpers, data):
    case = data.draw(helpers.spyre_cases(strided=False))
    layout = case.layout()
    gc.disable()  # no garbage collection may free device memory while we count
    try:
        before = torch.spyre.memory_allocated()
        y = torch.empty(case.host_size, dtype=case.dtype, device="spyre", device_layout=layout)
        grown = torch.spyre.memory_allocated() - before
    finally:
        gc.enable()
    assert y.untyped_storage().nbytes() == layout.nbytes == layout.device_numel * case.dtype.itemsize
    assert y.untyped_storage().data_ptr() % 128 == 0
    assert grown == -(-layout.nbytes // 128) * 128
