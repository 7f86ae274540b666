"""TensorRT TensorFormat layouts against TensorRT's documented array forms and its own queries.

The expected buffers are built here, independently of torch_layouts.tensorrt, from the
format table (pad, reshape, permute of an index tensor); strides are checked against
values worked out by hand from ``IExecutionContext::getTensorStrides`` (units are
elements; an element is a whole vector for vectorized formats) and against trtexec's
offset formula ``sum c_d * s_d * V`` (vector dim: ``(c/V) * s * V + c % V``).
"""

from __future__ import annotations

import math
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_layouts.core import LayoutTemplate
from torch_layouts.dma import dma_program, execute
from torch_layouts.tensorrt import FormatTemplate, TensorFormat, TensorFormatLayout, parse

F = TensorFormat
FP32, FP16, BF16, INT32, INT8 = torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int8
BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32}

# -- TensorRT's array forms, written independently -------------------------------------------------
VECTOR_MAJOR = {F.kCHW2: (2, 2), F.kCHW4: (4, 2), F.kCHW16: (16, 2), F.kCHW32: (32, 2), F.kCDHW32: (32, 3)}
VECTOR_MINOR = {F.kHWC8: (8, 2), F.kHWC16: (16, 2), F.kDHWC8: (8, 3), F.kHWC: (1, 2), F.kDHWC: (1, 3)}
HWC4_LINE = {"orin": 64, "xavier": 32}  # bytes per H step of kDLA_HWC4
DLA_LINEAR_LINE = 64


def _pad(t: torch.Tensor, axis: int, extent: int) -> torch.Tensor:
    """``t`` padded with -1 along ``axis`` up to ``extent``."""
    shape = list(t.shape)
    shape[axis] = extent
    out = torch.full(shape, -1, dtype=t.dtype)
    out.narrow(axis, 0, t.shape[axis]).copy_(t)
    return out


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def reference_array(fmt: TensorFormat, index: torch.Tensor, itemsize: int, dla: str = "orin") -> torch.Tensor:
    """TensorRT's array form of an int64 index tensor; padding holds -1."""
    if fmt == F.kLINEAR:
        return index.reshape(-1) if index.dim() == 0 else index
    if fmt in VECTOR_MAJOR:
        v, spatial = VECTOR_MAJOR[fmt]
        c_axis = index.dim() - spatial - 1
        c = index.shape[c_axis]
        t = _pad(index, c_axis, _round_up(c, v))
        t = t.reshape(*t.shape[:c_axis], -1, v, *t.shape[c_axis + 1:])  # [..][c/V][V][spatial]
        return t.movedim(c_axis + 1, -1)  # [..][c/V][spatial][c%V]
    if fmt in VECTOR_MINOR:
        v, spatial = VECTOR_MINOR[fmt]
        c_axis = index.dim() - spatial - 1
        return _pad(index, c_axis, _round_up(index.shape[c_axis], v)).movedim(c_axis, -1)
    while index.dim() < 3:  # DLA formats: missing C/H/W dims are size 1
        index = index.unsqueeze(0)
    if fmt == F.kDLA_LINEAR:
        return _pad(index, -1, _round_up(index.shape[-1], DLA_LINEAR_LINE // itemsize))
    c_vec = {1: 1, 3: 4, 4: 4}[index.shape[-3]]
    t = _pad(index, -3, c_vec).movedim(-3, -1)  # [..][H][W][C']
    return _pad(t, -2, _round_up(t.shape[-2], HWC4_LINE[dla] // c_vec // itemsize))


def h2d(layout: TensorFormatLayout, host: torch.Tensor) -> torch.Tensor:
    device = torch.full((layout.device_numel,), 7, dtype=BITS[host.element_size()]).view(host.dtype)
    execute(dma_program(layout, direction="h2d"), host.reshape(-1), device)  # 7s: stale bytes
    return device


def d2h(layout: TensorFormatLayout, device: torch.Tensor, size: tuple[int, ...]) -> torch.Tensor:
    host = torch.empty(size, dtype=device.dtype)
    execute(dma_program(layout, direction="d2h"), host.reshape(-1), device)
    return host


def bits_data(size: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random bit patterns (NaN payloads, -0.0 included) viewed as ``dtype``."""
    bits = BITS[dtype.itemsize]
    info = torch.iinfo(bits)
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(info.min, info.max + 1, size, dtype=bits, generator=gen).view(dtype)


def bind(fmt: TensorFormat, size: tuple[int, ...], dtype: torch.dtype, dla: str = "orin") -> TensorFormatLayout:
    return FormatTemplate(fmt, dla=dla).bind(size, dtype) if fmt.is_dla else fmt.bind(size, dtype)


# -- every format: H2D of its own linear indices against TensorRT's array ---------------------------
# (format, host size, dtype, dla, expected array dims from TensorRT's formula, worked out by hand)
ARRAY_CASES = [
    (F.kLINEAR, (2, 3, 5), FP32, None, [2, 3, 5]),
    (F.kLINEAR, (), BF16, None, [1]),
    (F.kCHW2, (2, 13, 7, 5), FP16, None, [2, 7, 7, 5, 2]),  # (13+1)/2 = 7
    (F.kCHW2, (3, 7, 5), BF16, None, [2, 7, 5, 2]),  # rank 3: {C, H, W}
    (F.kHWC8, (2, 13, 7, 5), FP16, None, [2, 7, 5, 16]),  # (13+7)/8*8 = 16
    (F.kHWC8, (3, 2, 13, 7, 5), BF16, None, [3, 2, 7, 5, 16]),  # rank 5: dim 0 is an outer batch dim
    (F.kCHW4, (2, 13, 7, 5), FP16, None, [2, 4, 7, 5, 4]),
    (F.kCHW4, (1, 6, 3, 3), INT8, None, [1, 2, 3, 3, 4]),
    (F.kCHW16, (2, 17, 3, 5), FP16, None, [2, 2, 3, 5, 16]),
    (F.kCHW32, (2, 33, 3, 5), FP32, None, [2, 2, 3, 5, 32]),
    (F.kCHW32, (40, 1, 1), INT32, None, [2, 1, 1, 32]),
    (F.kDHWC8, (2, 13, 3, 7, 5), FP16, None, [2, 3, 7, 5, 16]),
    (F.kCDHW32, (2, 35, 2, 3, 5), INT8, None, [2, 2, 2, 3, 5, 32]),
    (F.kHWC, (2, 3, 7, 5), FP32, None, [2, 7, 5, 3]),
    (F.kDLA_LINEAR, (2, 3, 7, 5), FP16, None, [2, 3, 7, 32]),  # 64 B / 2 = 32
    (F.kDLA_LINEAR, (3, 70), INT8, None, [1, 3, 128]),  # 64 B / 1 = 64 -> 128
    (F.kDLA_LINEAR, (2, 1, 3, 17), FP32, None, [2, 1, 3, 32]),  # 64 B / 4 = 16 -> 32
    (F.kDLA_HWC4, (2, 3, 7, 5), FP16, "orin", [2, 7, 8, 4]),  # 64/4/2 = 8
    (F.kDLA_HWC4, (2, 3, 7, 3), FP16, "xavier", [2, 7, 4, 4]),  # 32/4/2 = 4
    (F.kDLA_HWC4, (1, 1, 4, 33), INT8, "orin", [1, 4, 64, 1]),  # C=1 -> C'=1, 64/1/1 = 64
    (F.kDLA_HWC4, (1, 1, 4, 33), INT8, "xavier", [1, 4, 64, 1]),  # 32/1/1 = 32 -> 64
    (F.kDLA_HWC4, (4, 5, 9), FP32, "xavier", [5, 10, 4]),  # rank 3, 32/4/4 = 2 -> 10
    (F.kDLA_HWC4, (2, 4, 3, 5), INT32, "orin", [2, 3, 8, 4]),  # 64/4/4 = 4 -> 8
    (F.kHWC16, (2, 13, 7, 5), FP16, None, [2, 7, 5, 16]),
    (F.kDHWC, (2, 13, 3, 7, 5), FP32, None, [2, 3, 7, 5, 13]),
    (F.kDHWC, (3, 2, 4, 5), FP32, None, [2, 4, 5, 3]),
]


def test_cases_cover_every_format() -> None:
    assert {row[0] for row in ARRAY_CASES} == set(TensorFormat)


@pytest.mark.parametrize("fmt, size, dtype, dla, array_dims", ARRAY_CASES, ids=lambda v: str(v))
def test_h2d_matches_the_documented_array(fmt, size, dtype, dla, array_dims) -> None:
    layout = bind(fmt, size, dtype, dla or "orin")
    assert list(layout.device_size) == array_dims
    index = torch.arange(math.prod(size), dtype=torch.int64).reshape(size)
    expected = reference_array(fmt, index, dtype.itemsize, dla or "orin")
    assert list(expected.shape) == array_dims
    expected = expected.reshape(-1)
    assert torch.equal(layout.host_map(), expected)  # the core's placement of every host index

    bits = BITS[dtype.itemsize]
    host = index.to(bits).view(dtype)  # each element holds its own linear index (mod the width)
    device = h2d(layout, host).view(bits)
    want = torch.where(expected >= 0, host.view(bits).reshape(-1)[expected.clamp(min=0)], torch.zeros((), dtype=bits))
    assert torch.equal(device, want)  # padding is zero, real positions hold their index
    assert torch.equal(d2h(layout, device.view(dtype), size).view(bits), host.view(bits))


# -- TensorRT's queries ------------------------------------------------------------------------------
# strides per getTensorStrides: vectorized formats count whole vectors, scalar formats count scalars.
QUERY_CASES = [
    # fmt, size, dtype, dla, components_per_element, vectorized_dim, strides
    (F.kLINEAR, (2, 3, 7, 5), FP16, None, 1, -1, (105, 35, 5, 1)),
    (F.kLINEAR, (), FP32, None, 1, -1, ()),
    (F.kCHW4, (2, 13, 7, 5), FP16, None, 4, 1, (140, 35, 5, 1)),  # C: H*W per vector tile; N: 4 tiles
    (F.kCHW2, (3, 7, 5), FP16, None, 2, 0, (35, 5, 1)),
    (F.kCHW16, (1, 16, 2, 2), FP16, None, 16, 1, (4, 4, 2, 1)),
    (F.kCHW32, (2, 33, 3, 5), FP32, None, 32, 1, (30, 15, 5, 1)),  # 2 tiles of H*W = 15
    (F.kCHW32, (4, 2, 33, 3, 5), INT8, None, 32, 2, (60, 30, 15, 5, 1)),  # outer batch dim
    (F.kCDHW32, (2, 35, 2, 3, 5), INT8, None, 32, 1, (60, 30, 15, 5, 1)),
    (F.kHWC8, (2, 13, 7, 5), FP16, None, 8, 1, (70, 1, 10, 2)),  # 2 vectors per pixel; kHWC8 stride 1 = 8
    (F.kHWC8, (4, 2, 13, 7, 5), BF16, None, 8, 2, (140, 70, 1, 10, 2)),
    (F.kHWC16, (2, 13, 7, 5), FP16, None, 16, 1, (35, 1, 5, 1)),  # 1 vector per pixel
    (F.kDHWC8, (2, 13, 3, 7, 5), FP16, None, 8, 1, (210, 1, 70, 10, 2)),
    (F.kHWC, (2, 3, 7, 5), FP32, None, 1, -1, (105, 1, 15, 3)),  # channel-last scalars
    (F.kDHWC, (2, 13, 3, 7, 5), FP32, None, 1, -1, (1365, 1, 455, 65, 13)),
    (F.kDLA_LINEAR, (2, 3, 7, 5), FP16, "orin", 1, -1, (672, 224, 32, 1)),  # H stride 64 B = 32
    (F.kDLA_LINEAR, (3, 70), INT8, "orin", 1, -1, (128, 1)),
    (F.kDLA_HWC4, (2, 3, 7, 5), FP16, "orin", 1, -1, (224, 1, 32, 4)),  # C'=4, W padded to 8
    (F.kDLA_HWC4, (1, 3, 2, 3), FP16, "orin", 1, -1, (64, 1, 32, 4)),  # H stride 64 B
    (F.kDLA_HWC4, (1, 3, 2, 3), FP16, "xavier", 1, -1, (32, 1, 16, 4)),  # H stride 32 B
    (F.kDLA_HWC4, (1, 1, 2, 3), INT8, "orin", 1, -1, (128, 1, 64, 1)),  # grayscale: C'=1
    (F.kDLA_HWC4, (1, 1, 2, 3), INT8, "xavier", 1, -1, (64, 1, 32, 1)),
]


def test_query_cases_cover_every_format() -> None:
    assert {row[0] for row in QUERY_CASES} == set(TensorFormat)


@pytest.mark.parametrize("fmt, size, dtype, dla, cpe, vdim, strides", QUERY_CASES, ids=lambda v: str(v))
def test_tensorrt_queries(fmt, size, dtype, dla, cpe, vdim, strides) -> None:
    layout = bind(fmt, size, dtype, dla or "orin")
    assert (layout.components_per_element, layout.vectorized_dim, layout.strides) == (cpe, vdim, strides)
    assert_trtexec_offsets(layout)


def assert_trtexec_offsets(layout: TensorFormatLayout) -> None:
    """Every host element sits where trtexec's dataOffsetFromDims says it does."""
    size, v, vdim = layout.host_size, layout.components_per_element, layout.vectorized_dim
    host_map = layout.host_map()
    real = host_map >= 0
    position = torch.empty(math.prod(size), dtype=torch.int64)
    position[host_map[real]] = torch.nonzero(real).flatten()
    coords = torch.meshgrid(*[torch.arange(n) for n in size], indexing="ij") if size else []
    offset = torch.zeros(size, dtype=torch.int64)
    for d, (c, s) in enumerate(zip(coords, layout.strides)):
        offset += (c // v) * s * v + c % v if d == vdim else c * s * (1 if vdim == -1 else v)
    assert torch.equal(offset.reshape(-1), position)


# -- the rules of TensorRT's table -------------------------------------------------------------------
DTYPE_REJECTIONS = [
    (F.kLINEAR, torch.float64), (F.kLINEAR, torch.uint8),
    (F.kCHW2, FP32), (F.kCHW2, INT8), (F.kHWC8, FP32), (F.kHWC8, INT8),
    (F.kCHW4, FP32), (F.kCHW4, BF16), (F.kCHW4, INT32), (F.kCHW16, INT8), (F.kCHW16, BF16),
    (F.kCHW32, BF16), (F.kCHW32, torch.int16), (F.kDHWC8, FP32), (F.kDHWC8, INT8),
    (F.kCDHW32, FP32), (F.kCDHW32, BF16), (F.kHWC, FP16), (F.kHWC, INT8),
    (F.kDLA_LINEAR, BF16), (F.kDLA_HWC4, BF16), (F.kHWC16, FP32), (F.kHWC16, INT8),
    (F.kDHWC, FP16), (F.kDHWC, BF16),
]
ALLOWED = {
    F.kLINEAR: {FP32, FP16, BF16, INT32, INT8}, F.kCHW2: {FP16, BF16}, F.kHWC8: {FP16, BF16},
    F.kCHW4: {FP16, INT8}, F.kCHW16: {FP16}, F.kCHW32: {FP32, FP16, INT32, INT8}, F.kDHWC8: {FP16, BF16},
    F.kCDHW32: {FP16, INT8}, F.kHWC: {FP32}, F.kDLA_LINEAR: {FP32, FP16, INT32, INT8},
    F.kDLA_HWC4: {FP32, FP16, INT32, INT8}, F.kHWC16: {FP16}, F.kDHWC: {FP32},
}
MIN_RANK = {F.kLINEAR: 0, F.kDLA_LINEAR: 0, F.kDLA_HWC4: 0, F.kDHWC8: 4, F.kCDHW32: 4, F.kDHWC: 4}


def test_issue_example_message() -> None:
    with pytest.raises(ValueError, match=r"kCHW2 is bound to FP16.*, got float32"):
        F.kCHW2.bind((2, 13, 7, 5), FP32)


@pytest.mark.parametrize("fmt, dtype", DTYPE_REJECTIONS, ids=str)
def test_dtype_rule(fmt, dtype) -> None:
    size = (1, 4, 3, 2, 2)
    with pytest.raises(ValueError) as err:
        bind(fmt, size, dtype)
    msg = str(err.value)
    assert f"{fmt.name} is bound to" in msg and str(dtype).removeprefix("torch.") in msg


@pytest.mark.parametrize("fmt", list(TensorFormat), ids=str)
def test_every_allowed_dtype_binds(fmt) -> None:
    for dtype in ALLOWED[fmt]:
        assert bind(fmt, (1, 4, 3, 2, 2), dtype).dtype == dtype


@pytest.mark.parametrize("fmt", [f for f in TensorFormat if MIN_RANK.get(f, 3) > 0], ids=str)
def test_rank_rule(fmt) -> None:
    need = MIN_RANK.get(fmt, 3)
    dtype = min(ALLOWED[fmt], key=str)
    bind(fmt, (4,) * need, dtype)
    for rank in range(need):
        with pytest.raises(ValueError) as err:
            bind(fmt, (4,) * rank, dtype)
        msg = str(err.value)
        assert fmt.name in msg and f">= {need}" in msg and f"got {rank}" in msg


@pytest.mark.parametrize("c", [0, 2, 5, 8])
def test_dla_hwc4_channel_rule(c) -> None:
    with pytest.raises(ValueError) as err:
        F.kDLA_HWC4.bind((1, c, 3, 3), FP16)
    msg = str(err.value)
    assert "kDLA_HWC4" in msg and "{1, 3, 4}" in msg and f"C={c}" in msg


def test_dla_hwc4_low_rank_is_grayscale() -> None:
    layout = F.kDLA_HWC4.bind((3, 5), FP16)  # implicit C=1
    assert list(layout.device_size) == [3, 32, 1]


@pytest.mark.parametrize("bad", ["float16", None, 2])
def test_dtype_type_error(bad) -> None:
    with pytest.raises(TypeError, match="dtype"):
        F.kCHW4.bind((1, 4, 2, 2), bad)


def test_template_argument_errors() -> None:
    with pytest.raises(ValueError, match="'pascal'"):
        FormatTemplate(F.kDLA_HWC4, dla="pascal")
    with pytest.raises(ValueError, match="kCHW4"):
        FormatTemplate(F.kCHW4, dla="xavier")
    with pytest.raises(TypeError, match="'kCHW4'"):
        FormatTemplate("kCHW4")
    with pytest.raises(TypeError, match="dla"):
        FormatTemplate(F.kDLA_HWC4, dla=32)


# -- templates and parsing ---------------------------------------------------------------------------
def test_templates_are_layout_templates() -> None:
    assert all(isinstance(f, LayoutTemplate) for f in TensorFormat)
    assert isinstance(FormatTemplate(F.kDLA_HWC4, dla="xavier"), LayoutTemplate)


@pytest.mark.parametrize("spec, expected", [
    ("kCHW4", F.kCHW4),
    ("chw4", F.kCHW4),
    (" kDLA_LINEAR ", F.kDLA_LINEAR),
    ("kDHWC", F.kDHWC),
    ("kDLA_HWC4,xavier", FormatTemplate(F.kDLA_HWC4, dla="xavier")),
    ("kDLA_HWC4, Orin", FormatTemplate(F.kDLA_HWC4)),
])
def test_parse(spec, expected) -> None:
    template = parse(spec)
    assert template == expected
    dtype = min(ALLOWED[expected if isinstance(expected, TensorFormat) else expected.format], key=str)
    assert parse(str(template)).bind((1, 3, 3, 4, 5), dtype) == template.bind((1, 3, 3, 4, 5), dtype)


@pytest.mark.parametrize("spec, names", [
    ("kCHW5", ["kCHW5", "unknown format"]),
    ("", ["''", "unknown format"]),
    ("kDLA_HWC4,volta", ["kDLA_HWC4,volta", "'volta'"]),
    ("kCHW4,xavier", ["kCHW4,xavier", "only applies"]),
    ("kDLA_HWC4,orin,x", ["kDLA_HWC4,orin,x", "FORMAT,PLATFORM"]),
])
def test_parse_errors(spec, names) -> None:
    with pytest.raises(ValueError) as err:
        parse(spec)
    assert all(name in str(err.value) for name in names)
    with pytest.raises(TypeError):
        parse(F.kCHW4)


def test_platform_changes_only_kdla_hwc4() -> None:
    orin, xavier = (FormatTemplate(F.kDLA_HWC4, dla=p).bind((1, 3, 2, 3), FP16) for p in ("orin", "xavier"))
    assert orin != xavier and hash(orin) != hash(xavier)
    assert orin == F.kDLA_HWC4.bind((1, 3, 2, 3), FP16)
    assert str(xavier) == "kDLA_HWC4,xavier bound to [1, 3, 2, 3]: [1][2][4][4]"
    lin = [FormatTemplate(F.kDLA_LINEAR, dla=p).bind((1, 3, 2, 3), FP16) for p in ("orin", "xavier")]
    assert lin[0].device_size == lin[1].device_size == (1, 3, 2, 32)


def test_str_and_value_semantics() -> None:
    layout = F.kCHW4.bind((2, 13, 7, 5), FP16)
    assert str(layout) == "kCHW4 bound to [2, 13, 7, 5]: [2][4][7][5][4]"
    assert layout.describe() == str(layout)
    assert layout.format is F.kCHW4 and layout.dla is None
    copy = pickle.loads(pickle.dumps(layout))
    assert copy == layout and copy.strides == layout.strides and copy.host_size == layout.host_size
    assert layout != F.kCHW4.bind((2, 13, 7, 5), INT8)
    assert TensorFormatLayout(F.kCHW4, (2, 13, 7, 5), FP16, pad_value=-1) != layout
    assert layout.nbytes == 2 * 4 * 7 * 5 * 4 * 2


def test_pad_value_fills_padding() -> None:
    layout = TensorFormatLayout(F.kHWC8, (1, 3, 2, 2), FP16, pad_value=-1)
    device = h2d(layout, torch.ones(1, 3, 2, 2, dtype=FP16))
    assert torch.equal(device.reshape(2, 2, 8), torch.tensor([1.0] * 3 + [-1.0] * 5, dtype=FP16).expand(2, 2, 8))


# -- properties on random odd shapes ----------------------------------------------------------------
OWN_DIMS = {F.kDHWC8: 4, F.kCDHW32: 4, F.kDHWC: 4}


@st.composite
def bound_layouts(draw: st.DrawFn) -> tuple[TensorFormatLayout, torch.Tensor]:
    fmt = draw(st.sampled_from(list(TensorFormat)))
    dtype = draw(st.sampled_from(sorted(ALLOWED[fmt], key=str)))
    lo = MIN_RANK.get(fmt, 3)
    rank = draw(st.integers(lo, max(lo, OWN_DIMS.get(fmt, 3)) + 1))
    size = [draw(st.integers(1, 6)) for _ in range(rank)]
    c_axis = rank - OWN_DIMS.get(fmt, 3)
    if fmt == F.kDLA_HWC4:
        if c_axis >= 0:
            size[c_axis] = draw(st.sampled_from([1, 3, 4]))
    elif fmt not in (F.kLINEAR, F.kDLA_LINEAR):
        size[c_axis] = draw(st.integers(1, 40))
    if fmt.is_dla:
        size[-1:] = [draw(st.integers(1, 70))] if size else []
    dla = draw(st.sampled_from(["orin", "xavier"]))
    layout = bind(fmt, tuple(size), dtype, dla)
    return layout, bits_data(tuple(size), dtype, draw(st.integers(0, 2**16)))


@settings(max_examples=150, deadline=None)
@given(bound_layouts())
def test_round_trip_bit_for_bit_and_bijection(case) -> None:
    layout, host = case
    size = layout.host_size
    bits = BITS[host.element_size()]
    device = h2d(layout, host)
    assert torch.equal(d2h(layout, device, size).view(bits), host.view(bits))

    host_map = layout.host_map()
    real = host_map >= 0
    assert torch.equal(host_map[real].sort().values, torch.arange(math.prod(size)))  # a bijection
    assert not device.view(bits)[~real].any()  # padding holds the pad value 0 (never the stale 7s)
    assert torch.equal(device.view(bits)[real], host.view(bits).reshape(-1)[host_map[real]])
    expected = reference_array(layout.format, torch.arange(math.prod(size)).reshape(size),
                               layout.element_size, layout.dla or "orin")
    assert torch.equal(host_map, expected.reshape(-1))
    assert_trtexec_offsets(layout)


@settings(max_examples=40, deadline=None)
@given(bound_layouts(), st.data())
def test_device_offset_and_host_index_are_inverse(case, data) -> None:
    layout, _ = case
    size = layout.host_size
    host_map = layout.host_map()
    for _ in range(5):
        index = tuple(data.draw(st.integers(0, n - 1)) for n in size)
        offset = layout.device_offset(index)
        assert layout.host_index(offset) == index
        assert host_map[offset] == sum(i * s for i, s in zip(index, _row_major(size)))
        position = data.draw(st.integers(0, layout.device_numel - 1))
        held = layout.host_index(position)
        assert (held is None) == (host_map[position] < 0)
        if held is not None:
            assert layout.device_offset(held) == position


def _row_major(size: tuple[int, ...]) -> list[int]:
    return [math.prod(size[d + 1:]) for d in range(len(size))]
