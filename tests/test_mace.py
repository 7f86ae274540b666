"""MACE OpenCL image layouts and CPU buffer orders (docs/design.md section 8).

Every image is checked against MACE's formulas written out here independently of
torch_layouts.mace: ``CalImage2DShape`` (mace/core/runtime/opencl/opencl_util.cc)
for the image shape, the buffer_to_image kernels for where each element goes.
"""

from __future__ import annotations

import itertools
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_layouts import mace
from torch_layouts.core.dtypes import BITS_DTYPE
from torch_layouts.core.layout import DeviceLayout, LayoutTemplate
from torch_layouts.dma import dma_program, execute

BT = mace.BufferType
IN_OUT = (BT.IN_OUT_CHANNEL, BT.IN_OUT_HEIGHT, BT.IN_OUT_WIDTH)
GARBAGE = 77  # what a device buffer holds before H2D: padding must come out 0, not this


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def nhwc(shape: tuple[int, ...], fill: int = 1) -> tuple[int, ...]:
    """A 2-D NC size (fill 1) or index (fill 0) as NHWC."""
    return (shape[0], fill, fill, shape[1]) if len(shape) == 2 else shape


def mace_image_shape(bt: BT, shape: tuple[int, ...]) -> tuple[int, int]:
    """(width, height), as CalImage2DShape computes it."""
    if bt in IN_OUT:
        n, h, w, c = nhwc(shape)
        return {BT.IN_OUT_CHANNEL: (cdiv(c, 4) * w, n * h),
                BT.IN_OUT_HEIGHT: (w * c, n * cdiv(h, 4)),
                BT.IN_OUT_WIDTH: (cdiv(w, 4) * c, n * h)}[bt]
    if bt is BT.ARGUMENT:
        return cdiv(shape[0], 4), 1
    if bt is BT.DW_CONV2D_FILTER:
        m, i, kh, kw = shape
        return kh * kw * m, cdiv(i, 4)
    o, i, kh, kw = shape
    return {BT.CONV2D_FILTER: (i, kh * kw * cdiv(o, 4)),
            BT.WEIGHT_HEIGHT: (i * kh * kw, cdiv(o, 4)),
            BT.WEIGHT_WIDTH: (cdiv(i, 4) * kh * kw, o)}[bt]


def mace_pixel(bt: BT, shape: tuple[int, ...], index: tuple[int, ...]) -> tuple[int, int, int]:
    """(x, y, lane) that MACE's buffer_to_image kernel writes the element at ``index`` to."""
    if bt in IN_OUT:
        _, hh, ww, _ = nhwc(shape)
        n, h, w, c = nhwc(index, fill=0)
        return {BT.IN_OUT_CHANNEL: ((c // 4) * ww + w, n * hh + h, c % 4),
                BT.IN_OUT_HEIGHT: (c * ww + w, n * cdiv(hh, 4) + h // 4, h % 4),
                BT.IN_OUT_WIDTH: (c * cdiv(ww, 4) + w // 4, n * hh + h, w % 4)}[bt]
    if bt is BT.ARGUMENT:
        return index[0] // 4, 0, index[0] % 4
    if bt is BT.DW_CONV2D_FILTER:
        _, i, kh, kw = index
        return kh * shape[3] + kw, i // 4, i % 4
    _, ii, hh, ww = shape
    o, i, kh, kw = index
    return {BT.CONV2D_FILTER: (i, (o // 4) * hh * ww + kh * ww + kw, o % 4),
            BT.WEIGHT_HEIGHT: ((kh * ww + kw) * ii + i, o // 4, o % 4),
            BT.WEIGHT_WIDTH: ((kh * ww + kw) * cdiv(ii, 4) + i // 4, o, i % 4)}[bt]


def expected_image(bt: BT, x: torch.Tensor) -> torch.Tensor:
    """The image [height][width][RGBA] MACE builds from ``x``; missing lanes zero."""
    width, height = mace_image_shape(bt, tuple(x.shape))
    image = torch.zeros(height, width, 4, dtype=x.dtype)
    for index in itertools.product(*map(range, x.shape)):
        px, py, lane = mace_pixel(bt, tuple(x.shape), index)
        assert image[py, px, lane] == 0, f"two elements map to pixel {(px, py, lane)}"
        image[py, px, lane] = x[index]
    return image


def h2d(layout: DeviceLayout, x: torch.Tensor) -> torch.Tensor:
    device = torch.full((layout.device_numel,), GARBAGE, dtype=x.dtype)
    execute(dma_program(layout, direction="h2d"), x.contiguous().reshape(-1), device)
    return device


def d2h(layout: DeviceLayout, device: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    host = torch.empty(shape, dtype=device.dtype)
    execute(dma_program(layout, direction="d2h"), host.view(-1), device)
    return host


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(BITS_DTYPE[t.element_size()])


# One row per case: buffer type, host size, (width, height) worked out by hand from the MACE table.
IMAGE_CASES = [
    (BT.IN_OUT_CHANNEL, (1, 7, 5, 10), (15, 7)),  # the issue's example
    (BT.IN_OUT_CHANNEL, (2, 3, 5, 7), (10, 6)),
    (BT.IN_OUT_CHANNEL, (3, 9), (3, 3)),  # 2-D NC as N,1,1,C
    (BT.IN_OUT_CHANNEL, (2, 3, 1, 1), (1, 6)),
    (BT.IN_OUT_HEIGHT, (2, 7, 3, 5), (15, 4)),
    (BT.IN_OUT_HEIGHT, (1, 5, 1, 3), (3, 2)),
    (BT.IN_OUT_HEIGHT, (3, 5), (5, 3)),
    (BT.IN_OUT_WIDTH, (2, 3, 7, 5), (10, 6)),
    (BT.IN_OUT_WIDTH, (1, 2, 9, 1), (3, 2)),
    (BT.CONV2D_FILTER, (16, 3, 3, 3), (3, 36)),  # the issue's example
    (BT.CONV2D_FILTER, (7, 5, 3, 1), (5, 6)),
    (BT.CONV2D_FILTER, (1, 3, 2, 2), (3, 4)),
    (BT.DW_CONV2D_FILTER, (1, 7, 3, 3), (9, 2)),
    (BT.DW_CONV2D_FILTER, (1, 5, 1, 3), (3, 2)),
    (BT.ARGUMENT, (10,), (3, 1)),
    (BT.ARGUMENT, (4,), (1, 1)),
    (BT.ARGUMENT, (1,), (1, 1)),
    (BT.WEIGHT_HEIGHT, (7, 5, 3, 2), (30, 2)),
    (BT.WEIGHT_HEIGHT, (5, 1, 1, 1), (1, 2)),
    (BT.WEIGHT_WIDTH, (7, 5, 3, 2), (12, 7)),
    (BT.WEIGHT_WIDTH, (3, 9, 1, 3), (9, 3)),
]


@pytest.mark.parametrize("bt,shape,image", IMAGE_CASES, ids=lambda v: str(v))
def test_image_shape_and_every_pixel(bt: BT, shape: tuple[int, ...], image: tuple[int, int]) -> None:
    assert mace_image_shape(bt, shape) == image  # the hand-worked row agrees with MACE's formula
    assert mace.image_shape(bt, shape) == image
    layout = mace.ImageLayout(bt).bind(shape, torch.float32)
    width, height = image
    assert layout.image_shape == image
    assert layout.device_numel == width * height * 4
    assert layout.host_size == shape
    x = torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)
    device = h2d(layout, x)
    assert torch.equal(device.view(height, width, 4), expected_image(bt, x))
    assert torch.equal(d2h(layout, device, shape), x)


@pytest.mark.parametrize("bt,shape,image", IMAGE_CASES, ids=lambda v: str(v))
def test_pixel_lookup_matches_formulas(bt: BT, shape: tuple[int, ...], image: tuple[int, int]) -> None:
    layout = mace.ImageLayout(bt).bind(shape, torch.float16)
    width, height = image
    held = {}
    for index in itertools.product(*map(range, shape)):
        where = mace_pixel(bt, shape, index)
        assert layout.pixel(index) == where
        assert layout.host_index_at(*where) == index
        held[where] = index
    for px, py, lane in itertools.product(range(width), range(height), range(4)):
        assert layout.host_index_at(px, py, lane) == held.get((px, py, lane))


def test_issue_example() -> None:
    x = torch.randn(1, 7, 5, 10)
    layout = mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL).bind(x.shape, x.dtype)
    assert isinstance(layout, DeviceLayout)
    assert layout.buffer_type is BT.IN_OUT_CHANNEL
    assert layout.image_shape == (5 * 3, 1 * 7)
    assert str(layout) == "ImageLayout(IN_OUT_CHANNEL) bound to [1, 7, 5, 10]: image 15x7 RGBA"
    assert layout.describe() == str(layout)
    image = h2d(layout, x).view(7, 15, 4)
    for h, w, c in itertools.product(range(7), range(5), range(10)):
        assert image[h, (c // 4) * 5 + w, c % 4] == x[0, h, w, c]
    assert torch.all(image[:, 10:, 2:] == 0)  # channels 10, 11 do not exist
    assert mace.image_shape(BT.CONV2D_FILTER, (16, 3, 3, 3)) == (3, 4 * 3 * 3)


def test_weight_height_stores_conv2d_filter_bytes() -> None:
    # MACE: the conv filter image "has no difference compared to [H*W*I, (O+3)/4]".
    x = torch.randn(7, 5, 3, 2)
    conv = mace.ImageLayout(BT.CONV2D_FILTER).bind(x.shape, x.dtype)
    weight = mace.ImageLayout(BT.WEIGHT_HEIGHT).bind(x.shape, x.dtype)
    assert torch.equal(h2d(conv, x), h2d(weight, x))
    assert conv.image_shape != weight.image_shape and conv != weight


# -- random tensors, random sizes --------------------------------------------
DIM = st.integers(1, 6)
CHANNELS = st.integers(1, 9)
KERNEL = st.integers(1, 3)
SHAPES = {
    BT.IN_OUT_CHANNEL: st.one_of(st.tuples(DIM, DIM, DIM, CHANNELS), st.tuples(DIM, CHANNELS)),
    BT.IN_OUT_HEIGHT: st.one_of(st.tuples(DIM, CHANNELS, DIM, DIM), st.tuples(DIM, CHANNELS)),
    BT.IN_OUT_WIDTH: st.one_of(st.tuples(DIM, DIM, CHANNELS, DIM), st.tuples(DIM, CHANNELS)),
    BT.CONV2D_FILTER: st.tuples(CHANNELS, DIM, KERNEL, KERNEL),
    BT.DW_CONV2D_FILTER: st.tuples(st.just(1), CHANNELS, KERNEL, KERNEL),
    BT.ARGUMENT: st.tuples(st.integers(1, 40)),
    BT.WEIGHT_HEIGHT: st.tuples(CHANNELS, DIM, KERNEL, KERNEL),
    BT.WEIGHT_WIDTH: st.tuples(DIM, CHANNELS, KERNEL, KERNEL),
}
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.uint8]


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random bit patterns (NaN payloads, -0.0 included)."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (torch.Size(shape).numel() * dtype.itemsize,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


@st.composite
def cases(draw: st.DrawFn) -> tuple[BT, tuple[int, ...], torch.dtype, int]:
    bt = draw(st.sampled_from(list(BT)))
    return bt, draw(SHAPES[bt]), draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**31))


@settings(max_examples=120, deadline=None)
@given(cases())
def test_random_round_trip_bit_for_bit(case: tuple[BT, tuple[int, ...], torch.dtype, int]) -> None:
    bt, shape, dtype, seed = case
    x = random_tensor(shape, dtype, seed)
    layout = mace.ImageLayout(bt).bind(shape, dtype)
    width, height = mace_image_shape(bt, shape)
    device = h2d(layout, x)
    assert torch.equal(bits(device.view(height, width, 4)), bits(expected_image(bt, x)))
    assert torch.equal(bits(d2h(layout, device, shape)), bits(x))


@settings(max_examples=80, deadline=None)
@given(cases())
def test_bijection_and_inverse(case: tuple[BT, tuple[int, ...], torch.dtype, int]) -> None:
    bt, shape, dtype, _ = case
    layout = mace.ImageLayout(bt).bind(shape, dtype)
    width, _ = layout.image_shape
    numel = torch.Size(shape).numel()
    host_map = layout.host_map()
    assert int((host_map >= 0).sum()) == numel  # every real position holds one host element
    assert torch.equal(host_map[host_map >= 0].sort().values, torch.arange(numel))
    rows = torch.arange(numel).reshape(shape)
    for index in itertools.product(*map(range, shape)):
        offset = layout.device_offset(index)
        assert layout.host_index(offset) == index
        assert host_map[offset] == rows[index]
        px, py, lane = layout.pixel(index)
        assert offset == (py * width + px) * 4 + lane
        assert layout.host_index_at(px, py, lane) == index


# -- CPU buffer orders ----------------------------------------------------------
CPU_CASES = [
    (mace.CPU_NCHW, (2, 3, 5, 7), lambda x: x.permute(0, 3, 1, 2)),  # NHWC stored NCHW
    (mace.CPU_NCHW, (1, 1, 4, 3), lambda x: x.permute(0, 3, 1, 2)),
    (mace.CPU_NCHW, (3, 5), lambda x: x),  # NC: N,1,1,C stored NCHW is NC
    (mace.CPU_OIHW, (7, 5, 3, 2), lambda x: x),
    (mace.CPU_MIHW, (2, 5, 3, 3), lambda x: x),  # the CPU runtime allows any multiplier
    (mace.CPU_W, (11,), lambda x: x),
]


@pytest.mark.parametrize("template,shape,permute", CPU_CASES, ids=lambda v: str(v))
def test_cpu_orders_match_torch_permute(template: mace.CpuLayout, shape: tuple[int, ...], permute) -> None:
    assert isinstance(template, LayoutTemplate)
    x = random_tensor(shape, torch.float32, 0)
    layout = template.bind(shape, torch.float32)
    assert layout.device_numel == x.numel()  # a pure permutation: no padding
    device = h2d(layout, x)
    assert torch.equal(bits(device), bits(permute(x).contiguous().reshape(-1)))
    assert torch.equal(bits(d2h(layout, device, shape)), bits(x))
    assert str(layout) == f"{template.name} bound to {list(shape)}"


@settings(max_examples=40, deadline=None)
@given(st.tuples(DIM, DIM, DIM, CHANNELS), st.integers(0, 2**31))
def test_cpu_nchw_random(shape: tuple[int, ...], seed: int) -> None:
    x = random_tensor(shape, torch.float16, seed)
    layout = mace.CPU_NCHW.bind(shape, torch.float16)
    assert torch.equal(bits(h2d(layout, x)), bits(x.permute(0, 3, 1, 2).contiguous().reshape(-1)))


# -- templates, values, parser ------------------------------------------------
def test_templates_are_values() -> None:
    template = mace.ImageLayout(BT.IN_OUT_HEIGHT)
    assert isinstance(template, LayoutTemplate)
    assert template == mace.ImageLayout(BT.IN_OUT_HEIGHT) and hash(template) == hash(mace.ImageLayout(BT.IN_OUT_HEIGHT))
    assert pickle.loads(pickle.dumps(template)) == template
    assert template.max_image_size == (16384, 16384)
    assert str(template) == "ImageLayout(IN_OUT_HEIGHT)"
    layout = template.bind((2, 5, 3, 7), torch.float16)
    again = pickle.loads(pickle.dumps(layout))
    assert again == layout and hash(again) == hash(layout) and again.image_shape == layout.image_shape
    assert layout != mace.ImageLayout(BT.IN_OUT_WIDTH).bind((2, 5, 3, 7), torch.float16)
    with pytest.raises(AttributeError):
        layout.image_shape = (1, 1)


@pytest.mark.parametrize("spec,expected", [
    ("IN_OUT_CHANNEL", mace.ImageLayout(BT.IN_OUT_CHANNEL)),
    ("in_out_channel", mace.ImageLayout(BT.IN_OUT_CHANNEL)),
    (" dw_conv2d_filter ", mace.ImageLayout(BT.DW_CONV2D_FILTER)),
    ("WEIGHT_WIDTH", mace.ImageLayout(BT.WEIGHT_WIDTH)),
    ("CPU_NCHW", mace.CPU_NCHW),
    ("cpu_w", mace.CPU_W),
])
def test_parse(spec: str, expected: object) -> None:
    assert mace.parse(spec) == expected


# -- bad input ------------------------------------------------------------------
@pytest.mark.parametrize("bt_or_order,shape,words", [
    (BT.IN_OUT_CHANNEL, (7, 5, 10), ["IN_OUT_CHANNEL", "4-D NHWC", "rank 3"]),
    (BT.IN_OUT_WIDTH, (1, 1, 7, 5, 10), ["IN_OUT_WIDTH", "rank 5"]),
    (BT.CONV2D_FILTER, (16, 3), ["CONV2D_FILTER", "4-D OIHW", "rank 2"]),
    (BT.WEIGHT_HEIGHT, (16, 3, 3), ["WEIGHT_HEIGHT", "rank 3"]),
    (BT.DW_CONV2D_FILTER, (7, 3, 3), ["DW_CONV2D_FILTER", "4-D MIHW", "rank 3"]),
    (BT.ARGUMENT, (2, 5), ["ARGUMENT", "1-D W", "rank 2"]),
    (mace.CPU_W, (2, 5), ["CPU_W", "rank 2"]),
    (mace.CPU_OIHW, (16,), ["CPU_OIHW", "rank 1"]),
])
def test_rejects_wrong_rank(bt_or_order: object, shape: tuple[int, ...], words: list[str]) -> None:
    template = mace.ImageLayout(bt_or_order) if isinstance(bt_or_order, BT) else bt_or_order
    with pytest.raises(ValueError) as err:
        template.bind(shape, torch.float32)
    assert all(w in str(err.value) for w in words), str(err.value)
    if isinstance(bt_or_order, BT):
        with pytest.raises(ValueError, match=bt_or_order.name):
            mace.image_shape(bt_or_order, shape)


def test_rejects_depthwise_multiplier() -> None:
    with pytest.raises(ValueError, match=r"multiplier M=1 only, got M=2"):
        mace.ImageLayout(BT.DW_CONV2D_FILTER).bind((2, 7, 3, 3), torch.float32)
    with pytest.raises(ValueError, match=r"got M=3"):
        mace.image_shape(BT.DW_CONV2D_FILTER, (3, 7, 3, 3))


@pytest.mark.parametrize("bt,shape,max_size,words", [
    (BT.IN_OUT_CHANNEL, (1, 7, 5, 10), (8, 64), ["width 15", "maximum image width 8", "CL_DEVICE_IMAGE2D_MAX_WIDTH"]),
    (BT.IN_OUT_CHANNEL, (1, 7, 5, 10), (64, 6), ["height 7", "maximum image height 6", "CL_DEVICE_IMAGE2D_MAX_HEIGHT"]),
    (BT.CONV2D_FILTER, (16, 3, 3, 3), (3, 35), ["height 36", "maximum image height 35"]),
    (BT.ARGUMENT, (4 * 16384 + 1,), None, ["width 16385", "maximum image width 16384"]),
    (BT.IN_OUT_HEIGHT, (16385, 4, 1, 1), None, ["height 16385", "maximum image height 16384"]),
])
def test_rejects_image_over_max_size(bt: BT, shape: tuple[int, ...], max_size: tuple[int, int] | None,
                                     words: list[str]) -> None:
    template = mace.ImageLayout(bt) if max_size is None else mace.ImageLayout(bt, max_image_size=max_size)
    with pytest.raises(ValueError) as err:
        template.bind(shape, torch.float16)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_image_at_max_size_fits() -> None:
    layout = mace.ImageLayout(BT.ARGUMENT).bind((4 * 16384,), torch.float16)
    assert layout.image_shape == (16384, 1)
    assert mace.ImageLayout(BT.IN_OUT_CHANNEL, max_image_size=(15, 7)).bind((1, 7, 5, 10), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64])
def test_rejects_unsupported_dtype(dtype: torch.dtype) -> None:
    with pytest.raises(ValueError, match=str(dtype)):
        mace.ImageLayout(BT.IN_OUT_CHANNEL).bind((1, 2, 2, 3), dtype)
    with pytest.raises(ValueError, match=str(dtype)):
        mace.CPU_NCHW.bind((1, 2, 2, 3), dtype)


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"max_image_size \(0, 16\)"):
        mace.ImageLayout(BT.ARGUMENT, max_image_size=(0, 16))
    with pytest.raises(TypeError, match="max_image_size"):
        mace.ImageLayout(BT.ARGUMENT, max_image_size=16384)
    with pytest.raises(TypeError, match="IN_OUT_CHANNEL"):
        mace.ImageLayout("IN_OUT_CHANNEL")
    with pytest.raises(TypeError, match="buffer_type"):
        mace.image_shape(1, (1, 2, 2, 3))
    with pytest.raises(ValueError, match="'NHWC4'"):
        mace.parse("NHWC4")
    with pytest.raises(ValueError, match="'IN_OUT'"):
        mace.parse("IN_OUT")
    with pytest.raises(TypeError, match="spec"):
        mace.parse(None)
    layout = mace.ImageLayout(BT.ARGUMENT).bind((10,), torch.float32)
    for x, y, lane, name in [(3, 0, 0, "x=3"), (0, 1, 0, "y=1"), (0, 0, 4, "lane=4"), (-1, 0, 0, "x=-1")]:
        with pytest.raises(IndexError, match=name):
            layout.host_index_at(x, y, lane)
