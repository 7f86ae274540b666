"""Qualcomm HTP ChunkedMemoryLayout: the documented listings, index formulas, round trips, errors."""

from __future__ import annotations

import itertools
import math
import pickle

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from torch_layouts import htp
from torch_layouts.core.dtypes import BITS_DTYPE
from torch_layouts.core.layout import DeviceLayout, LayoutTemplate
from torch_layouts.dma import dma_program, execute


# -- helpers -------------------------------------------------------------------
def with_pad(template: htp.ChunkedMemoryLayout, pad_value) -> htp.ChunkedMemoryLayout:
    return htp.ChunkedMemoryLayout(template.rank, *itertools.chain(*template.pairs), pad_value=pad_value)


def to_device(layout: DeviceLayout, x: torch.Tensor) -> torch.Tensor:
    dev = torch.empty(layout.device_numel, dtype=layout.dtype)
    execute(dma_program(layout, direction="h2d"), x.reshape(-1), dev)
    return dev


def to_host(layout: DeviceLayout, dev: torch.Tensor) -> torch.Tensor:
    host = torch.empty(math.prod(layout.host_size), dtype=layout.dtype)
    execute(dma_program(layout, direction="d2h"), host, dev)
    return host.reshape(layout.host_size)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(BITS_DTYPE[t.element_size()])


def random_tensor(size: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random bit patterns (NaN payloads, -0.0 included); 0/1 for bool."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, size, generator=gen).bool()
    raw = BITS_DTYPE[dtype.itemsize]
    info = torch.iinfo(raw)
    return torch.randint(info.min, info.max, size, generator=gen, dtype=raw).view(dtype)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def row_major(index: tuple[int, ...], size: tuple[int, ...]) -> int:
    return sum(i * math.prod(size[k + 1:]) for k, i in enumerate(index))


# -- independent index formulas (NHWC activations; weights KH, KW, CI, CO) -----
def chunk_index(n, h, w, c, N, H, W, C, hb, wb, cb):
    return ((n * cdiv(H, hb) + h // hb) * cdiv(W, wb) + w // wb) * cdiv(C, cb) + c // cb


def f_flat(n, h, w, c, N, H, W, C):
    return ((n * H + h) * W + w) * C + c, N * H * W * C


def f_nchw(n, h, w, c, N, H, W, C):
    return ((n * C + c) * H + h) * W + w, N * H * W * C


def f_depth32(n, h, w, c, N, H, W, C):
    Wc, Cc = cdiv(W, 4), cdiv(C, 32)
    return ((((n * H + h) * Cc + c // 32) * Wc + w // 4) * 4 + w % 4) * 32 + c % 32, N * H * Cc * Wc * 128


def f_crouton(n, h, w, c, N, H, W, C):
    chunk = chunk_index(n, h, w, c, N, H, W, C, 8, 8, 32)
    return chunk * 2048 + ((h % 8) * 8 + w % 8) * 32 + c % 32, N * cdiv(H, 8) * cdiv(W, 8) * cdiv(C, 32) * 2048


def f_crouton4x1(n, h, w, c, N, H, W, C):
    chunk = chunk_index(n, h, w, c, N, H, W, C, 8, 8, 32)
    inner = (((h % 8) * 2 + (w % 8) // 4) * 32 + c % 32) * 4 + w % 4
    return chunk * 2048 + inner, N * cdiv(H, 8) * cdiv(W, 8) * cdiv(C, 32) * 2048


def f_crouton2x2(n, h, w, c, N, H, W, C):
    chunk = chunk_index(n, h, w, c, N, H, W, C, 8, 8, 32)
    inner = (((((h % 8) // 2) * 4 + (w % 8) // 2) * 32 + c % 32) * 2 + h % 2) * 2 + w % 2
    return chunk * 2048 + inner, N * cdiv(H, 8) * cdiv(W, 8) * cdiv(C, 32) * 2048


def f_crouton2(n, h, w, c, N, H, W, C):
    chunk = chunk_index(n, h, w, c, N, H, W, C, 8, 4, 32)
    inner = (((h % 8) * 2 + (w % 4) // 2) * 32 + c % 32) * 2 + w % 2
    return chunk * 1024 + inner, N * cdiv(H, 8) * cdiv(W, 4) * cdiv(C, 32) * 1024


def f_convweight(kh, kw, ci, co, KH, KW, CI, CO):
    CIc, COc = cdiv(CI, 32), cdiv(CO, 32)
    chunk = (((co // 32) * CIc + ci // 32) * KH + kh) * KW + kw
    return chunk * 1024 + (((ci % 32) // 4) * 32 + co % 32) * 4 + ci % 4, COc * CIc * KH * KW * 1024


FORMULAS = {
    "R4FlatMemoryLayout": f_flat,
    "R4NCHWMemoryLayout": f_nchw,
    "R4Depth32MemoryLayout": f_depth32,
    "R4CroutonLayout": f_crouton,
    "R4Crouton4x1Layout": f_crouton4x1,
    "R4Crouton2x2Layout": f_crouton2x2,
    "R4Crouton2Layout": f_crouton2,
    "R4ConvWeightLayout": f_convweight,
}


def formula_offsets(name: str, size: tuple[int, ...]) -> tuple[torch.Tensor, int]:
    """Device offset of every host element (row-major) and the device size, by the formula."""
    grids = torch.meshgrid(*(torch.arange(s) for s in size), indexing="ij")
    offsets, total = FORMULAS[name](*(g.reshape(-1) for g in grids), *size)
    return offsets, total


def expected_device(x: torch.Tensor, offsets: torch.Tensor, total: int, pad) -> torch.Tensor:
    out = torch.full((total,), pad, dtype=x.dtype)
    out[offsets] = x.reshape(-1)
    return out


# -- HTP's notation -------------------------------------------------------
@pytest.mark.parametrize(
    "name, pairs",
    [
        ("R4FlatMemoryLayout", (4, 0, 0, 1, 0, 2, 0, 3, 0)),
        ("R4NCHWMemoryLayout", (4, 0, 0, 3, 0, 1, 0, 2, 0)),
        ("R4Depth32MemoryLayout", (4, 0, 0, 1, 0, 3, 0, 2, 0, 2, 4, 3, 32)),
        ("R4CroutonLayout", (4, 0, 0, 1, 0, 2, 0, 3, 0, 1, 8, 2, 8, 3, 32)),
        ("R4Crouton4x1Layout", (4, 0, 0, 1, 0, 2, 0, 3, 0, 1, 8, 2, 2, 3, 32, 2, 4)),
        ("R4Crouton2x2Layout", (4, 0, 0, 1, 0, 2, 0, 3, 0, 1, 4, 2, 4, 3, 32, 1, 2, 2, 2)),
        ("R4Crouton2Layout", (4, 0, 0, 1, 0, 2, 0, 3, 0, 1, 8, 2, 2, 3, 32, 2, 2)),
        ("R4ConvWeightLayout", (4, 3, 0, 2, 0, 0, 0, 1, 0, 2, 8, 3, 32, 2, 4)),
    ],
)
def test_named_layouts_are_the_documented_table(name, pairs):
    template = getattr(htp, name)
    assert template == htp.ChunkedMemoryLayout(*pairs) == htp.TABLE[name]
    assert isinstance(template, LayoutTemplate)
    assert htp.parse(name) == template
    assert htp.parse(str(template)) == template


@pytest.mark.parametrize(
    "template, text",
    [
        (htp.R4CroutonLayout, "ChunkedMemoryLayout<4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,8, 3,32>"),
        (htp.R4ConvWeightLayout, "ChunkedMemoryLayout<4, 3,0, 2,0, 0,0, 1,0, 2,8, 3,32, 2,4>"),
        (htp.FlatMemoryLayout(4), "ChunkedMemoryLayout<4, 0,0, 1,0, 2,0, 3,0>"),
        (htp.FlatMemoryLayout(1), "ChunkedMemoryLayout<1, 0,0>"),
        (htp.ChunkedMemoryLayout(2, 1,0, 0,0, 1,4, pad_value=31),
         "ChunkedMemoryLayout<2, 1,0, 0,0, 1,4>, pad_value=31"),
    ],
)
def test_template_str(template, text):
    assert str(template) == text
    assert htp.parse(template.notation()) == with_pad(template, 0)


@pytest.mark.parametrize(
    "template, size, text",
    [
        (htp.R4CroutonLayout, (2, 9, 20, 50),
         "ChunkedMemoryLayout<4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,8, 3,32> bound to [2, 9, 20, 50], padded [2, 16, 24, 64]"),
        (htp.R4ConvWeightLayout, (3, 3, 32, 50),
         "ChunkedMemoryLayout<4, 3,0, 2,0, 0,0, 1,0, 2,8, 3,32, 2,4> bound to [3, 3, 32, 50], padded [3, 3, 32, 64]"),
        (with_pad(htp.R4FlatMemoryLayout, -1), (1, 2, 3, 4),
         "ChunkedMemoryLayout<4, 0,0, 1,0, 2,0, 3,0> bound to [1, 2, 3, 4], padded [1, 2, 3, 4], pad_value=-1"),
    ],
)
def test_bound_str(template, size, text):
    assert str(template.bind(size, torch.float16)) == text


def test_value_semantics():
    a = htp.ChunkedMemoryLayout(4, 0,0, 1,0, 2,0, 3,0)  # fmt: skip
    assert a == htp.FlatMemoryLayout(4) == htp.R4FlatMemoryLayout == htp.parse("flat")
    assert hash(a) == hash(htp.R4FlatMemoryLayout)
    assert len({a, htp.R4FlatMemoryLayout, htp.FlatMemoryLayout(4), htp.R4CroutonLayout}) == 2
    assert a != with_pad(a, 1) and a != htp.R4NCHWMemoryLayout and a != htp.FlatMemoryLayout(3)
    with pytest.raises(AttributeError):
        a.rank = 3
    bound = htp.R4CroutonLayout.bind((2, 9, 20, 50), torch.float16)
    assert isinstance(bound, DeviceLayout) and bound.template is htp.R4CroutonLayout
    assert bound == htp.R4CroutonLayout.bind([2, 9, 20, 50], torch.float16)
    assert bound != htp.R4CroutonLayout.bind((2, 9, 20, 50), torch.float32)
    assert bound != htp.R4CroutonLayout.bind((2, 10, 20, 50), torch.float16)
    for value in (a, bound, with_pad(htp.R4Crouton2Layout, 3)):
        copy = pickle.loads(pickle.dumps(value))
        assert copy == value and hash(copy) == hash(value) and str(copy) == str(value)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("flat", htp.R4FlatMemoryLayout),
        ("NCHW", htp.R4NCHWMemoryLayout),
        ("depth32", htp.R4Depth32MemoryLayout),
        ("d32", htp.R4Depth32MemoryLayout),
        (" crouton ", htp.R4CroutonLayout),
        ("crouton4x1", htp.R4Crouton4x1Layout),
        ("crouton2x2", htp.R4Crouton2x2Layout),
        ("crouton2", htp.R4Crouton2Layout),
        ("convweight", htp.R4ConvWeightLayout),
        ("r4croutonlayout", htp.R4CroutonLayout),
        ("4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,8, 3,32", htp.R4CroutonLayout),
        ("ChunkedMemoryLayout<4, 3,0, 2,0, 0,0, 1,0, 2,8, 3,32, 2,4>", htp.R4ConvWeightLayout),
        ("FlatMemoryLayout<3>", htp.ChunkedMemoryLayout(3, 0, 0, 1, 0, 2, 0)),
        ("2,1,0,0,0,1,3", htp.ChunkedMemoryLayout(2, 1, 0, 0, 0, 1, 3)),
    ],
)
def test_parse(spec, expected):
    assert htp.parse(spec) == expected


# -- hand values for the documented examples ---------------------------------------
@pytest.mark.parametrize(
    "template, size, padded, chunk, grid, device_size, stride_map",
    [
        (htp.R4FlatMemoryLayout, (2, 3, 5, 30), (2, 3, 5, 30), (1, 1, 1, 1), (2, 3, 5, 30),
         (2, 3, 5, 30), (450, 150, 30, 1)),
        (htp.R4CroutonLayout, (1, 3, 5, 30), (1, 8, 8, 32), (1, 8, 8, 32), (1, 1, 1, 1),
         (1, 1, 1, 1, 8, 8, 32), (-1, -1, -1, -1, 150, 30, 1)),
        (htp.R4CroutonLayout, (2, 9, 20, 50), (2, 16, 24, 64), (1, 8, 8, 32), (2, 2, 3, 2),
         (2, 2, 3, 2, 8, 8, 32), (9000, 8000, 400, 32, 1000, 50, 1)),
        (htp.R4ConvWeightLayout, (3, 3, 32, 32), (3, 3, 32, 32), (1, 1, 32, 32), (3, 3, 1, 1),
         (1, 1, 3, 3, 8, 32, 4), (-1, -1, 3072, 1024, 128, 1, 32)),
        (htp.R4ConvWeightLayout, (3, 3, 32, 50), (3, 3, 32, 64), (1, 1, 32, 32), (3, 3, 1, 2),
         (2, 1, 3, 3, 8, 32, 4), (32, -1, 4800, 1600, 200, 1, 50)),
        (htp.R4ConvWeightLayout, (3, 3, 64, 96), (3, 3, 64, 96), (1, 1, 32, 32), (3, 3, 2, 3),
         (3, 2, 3, 3, 8, 32, 4), (32, 3072, 18432, 6144, 384, 1, 96)),
        (htp.R4Depth32MemoryLayout, (1, 3, 5, 30), (1, 3, 8, 32), (1, 1, 4, 32), (1, 3, 2, 1),
         (1, 3, 1, 2, 4, 32), (-1, 150, -1, 120, 30, 1)),
        # 1,4 ... 1,2 on a height of 2: the 1,4 dim (step 2) holds only coordinate 0.
        (htp.R4Crouton2x2Layout, (2, 2, 5, 30), (2, 8, 8, 32), (1, 8, 8, 32), (2, 1, 1, 1),
         (2, 1, 1, 1, 4, 4, 32, 2, 2), (300, -1, -1, -1, -1, 60, 1, 150, 30)),
        (htp.R4Crouton2Layout, (1, 3, 5, 30), (1, 8, 8, 32), (1, 8, 4, 32), (1, 1, 2, 1),
         (1, 1, 2, 1, 8, 2, 32, 2), (-1, -1, 120, -1, 150, 60, 1, 30)),
    ],
)
def test_hand_values(template, size, padded, chunk, grid, device_size, stride_map):
    layout = template.bind(size, torch.float16)
    assert layout.padded_size == padded
    assert layout.chunk_size == chunk
    assert layout.chunk_grid == grid
    assert layout.num_chunks == math.prod(grid)
    assert layout.device_size == device_size
    assert layout.stride_map == stride_map
    assert layout.device_numel == math.prod(padded)
    assert layout.host_size == size


# -- the documented listings, element by element -----------------------------------
# A listing is a list of lines as printed in the HTP documentation. A line is a tuple of host
# indices in the padded tensor (an index outside the host size is padding);
# ``...`` inside a line stands for the elements between its neighbours, in the
# layout's stated order (``key``); a line that is just ``...`` skips rows (gap).
# Lines follow each other contiguously in memory ("newlines are still contiguous").

FLAT_2x3x5x30 = [
    ((0, 0, 0, 0), (0, 0, 0, 1), ..., (0, 0, 0, 29)),
    ((0, 0, 1, 0), (0, 0, 1, 1), ..., (0, 0, 1, 29)),
    ...,
    ((0, 0, 4, 0), (0, 0, 4, 1), ..., (0, 0, 4, 29)),
    ((0, 1, 0, 0), (0, 1, 0, 1), ..., (0, 1, 0, 29)),  # documentation typo: prints (0,0,0,1) for (0,1,0,1)
    ((0, 1, 1, 0), (0, 1, 1, 1), ..., (0, 1, 1, 29)),
    ...,
    ((0, 2, 1, 0), (0, 2, 1, 1), ..., (0, 2, 1, 29)),
    ...,
    ((0, 2, 4, 0), (0, 2, 4, 1), ..., (0, 2, 4, 29)),
    ((1, 0, 0, 0), (1, 0, 0, 1), ..., (1, 0, 0, 29)),
    ...,
    ((1, 2, 4, 0), (1, 2, 4, 1), ..., (1, 2, 4, 29)),
]

CROUTON_1x3x5x30 = [
    ((0, 0, 0, 0), (0, 0, 0, 1), ..., (0, 0, 0, 29), (0, 0, 0, 30), (0, 0, 0, 31)),
    # documentation typo: prints (0,0,0,30), (0,0,0,31) at the end of this row, meaning (0,0,1,30), (0,0,1,31)
    ((0, 0, 1, 0), (0, 0, 1, 1), ..., (0, 0, 1, 29), (0, 0, 1, 30), (0, 0, 1, 31)),
    ...,
    ((0, 0, 4, 0), (0, 0, 4, 1), ..., (0, 0, 4, 29), (0, 0, 4, 30), (0, 0, 4, 31)),
    ((0, 0, 5, 0), (0, 0, 5, 1), ..., (0, 0, 5, 31)),
    ...,
    ((0, 0, 7, 0), (0, 0, 7, 1), ..., (0, 0, 7, 31)),
    ((0, 1, 0, 0), (0, 1, 0, 1), ..., (0, 1, 0, 31)),
    ((0, 1, 1, 0), (0, 1, 1, 1), ..., (0, 1, 1, 31)),
    ...,
    ((0, 2, 1, 0), (0, 2, 1, 1), ..., (0, 2, 1, 31)),
    ...,
    ((0, 2, 4, 0), (0, 2, 4, 1), ..., (0, 2, 4, 29), (0, 2, 4, 30), (0, 2, 4, 31)),
]
# The documentation's statements on which stretches of memory are valid data and which are pad.
CROUTON_1x3x5x30_SPANS = [
    ((0, 0, 0, 0), (0, 0, 0, 29), "valid"),
    ((0, 0, 0, 30), (0, 0, 0, 31), "pad"),
    ((0, 0, 4, 0), (0, 0, 4, 29), "valid"),
    ((0, 0, 4, 30), (0, 0, 7, 31), "pad"),  # "(0,0,4,30), (0,0,4,31), (0,0,5,0)...(0,0,7,31)"
    ((0, 2, 4, 0), (0, 2, 4, 29), "valid"),
    ((0, 2, 4, 30), (0, 7, 7, 31), "pad"),  # "(0,2,4,30)...(0,2,7,31), (0,3,0,0)...(0,7,7,31)"
]

CROUTON_2x9x20x50 = [
    ((0, 0, 0, 0), ..., (0, 0, 0, 31)),
    ((0, 0, 1, 0), ..., (0, 0, 1, 31)),
    ...,
    ((0, 0, 7, 0), ..., (0, 0, 7, 31)),
    ((0, 1, 0, 0), ..., (0, 1, 7, 31)),
    ...,
    ((0, 7, 7, 0), ..., (0, 7, 7, 31)),  # > end of chunk
    ((0, 0, 0, 32), ..., (0, 0, 0, 63)),  # > start of chunk
    ((0, 0, 1, 32), ..., (0, 0, 1, 63)),
    ...,
    ((0, 0, 7, 32), ..., (0, 0, 7, 63)),
    ((0, 1, 0, 32), ..., (0, 1, 7, 63)),
    ...,
    ((0, 7, 7, 32), ..., (0, 7, 7, 63)),  # > end of chunk, finished all 64 in dimension 3
    ((0, 0, 8, 0), ..., (0, 0, 8, 31)),
    ((0, 0, 9, 0), ..., (0, 0, 9, 31)),
    ...,
    ((0, 0, 15, 0), ..., (0, 0, 15, 31)),
    ((0, 1, 8, 0), ..., (0, 1, 15, 31)),
    ...,
    ((0, 7, 8, 0), ..., (0, 7, 15, 31)),
    ((0, 0, 8, 32), ..., (0, 0, 15, 63)),
    ...,
    ((0, 7, 8, 32), ..., (0, 7, 15, 63)),
    ((0, 0, 16, 0), ..., (0, 0, 23, 63)),
    ...,
    ((0, 7, 16, 32), ..., (0, 7, 23, 63)),  # > finished traversing all 24 in dimension 2
    # seed: "(0,8,0,0) ... (0,8,23,63) (0,15,0,0) ... (0,15,23,63)": a summary of the band
    # h = 8..15; (0,8,23,63) and (0,15,0,0) are not neighbours in memory (the band is 6 chunks
    # of 8 rows), so the line is read as the band's first to last element.
    ((0, 8, 0, 0), ..., (0, 15, 23, 63)),  # > finished traversing all 16 in dimension 1
    # seed: "(1,0,0,0) ... (1,8,23,63) (1,15,0,0) ... (1,15,23,63)", the same summary for n = 1
    ((1, 0, 0, 0), ..., (1, 15, 23, 63)),  # > end of memory layout
]
# The documentation's "> start of chunk" marks (and the chunks the listing starts), with offsets by hand.
CROUTON_2x9x20x50_CHUNK_STARTS = [
    ((0, 0, 0, 0), 0),
    ((0, 0, 0, 32), 2048),
    ((0, 0, 8, 0), 2 * 2048),
    ((0, 0, 8, 32), 3 * 2048),
    ((0, 0, 16, 0), 4 * 2048),
    ((0, 8, 0, 0), 6 * 2048),
    ((1, 0, 0, 0), 12 * 2048),
]

WEIGHTS_3x3x32x32 = [
    ((0, 0, 0, 0), (0, 0, 1, 0), (0, 0, 2, 0), (0, 0, 3, 0)),
    ((0, 0, 0, 1), (0, 0, 1, 1), (0, 0, 2, 1), (0, 0, 3, 1)),
    ((0, 0, 0, 2), ..., (0, 0, 3, 31)),
    ((0, 0, 4, 0), (0, 0, 5, 0), (0, 0, 6, 0), (0, 0, 7, 0)),
    ((0, 0, 4, 1), (0, 0, 5, 1), (0, 0, 6, 1), (0, 0, 7, 1)),
    ((0, 0, 4, 2), ..., (0, 0, 7, 31), ..., (0, 0, 31, 31)),
    ((0, 1, 0, 0), (0, 1, 1, 0), ..., (0, 1, 31, 31)),
    ...,
    ((0, 2, 0, 0), ..., (0, 2, 31, 31)),
    ((1, 0, 0, 0), ..., (1, 0, 31, 31)),
]

WEIGHTS_3x3x64x96 = [
    ((0, 0, 0, 0), ..., (2, 2, 31, 31)),
    ((0, 0, 32, 0), ..., (2, 2, 63, 31)),
    ((0, 0, 0, 32), ..., (2, 2, 31, 63)),
    ((0, 0, 32, 32), ..., (2, 2, 63, 63)),
    ((0, 0, 0, 64), ..., (2, 2, 31, 95)),
    ((0, 0, 32, 64), ..., (2, 2, 63, 95)),
]

# "a 3x3x32x50 tensor ... will get padded into 3x3x32x64 ... do (0,0,0,0)...(2,2,31,31) and
# then do (0,0,0,32)...(2,2,31,63)"
WEIGHTS_3x3x32x50 = [
    ((0, 0, 0, 0), ..., (2, 2, 31, 31)),
    ((0, 0, 0, 32), ..., (2, 2, 31, 63)),
]


def flat_key(i):
    return i


def crouton_key(i):
    n, h, w, c = i
    return (n, h // 8, w // 8, c // 32, h % 8, w % 8, c % 32)


def weight_key(i):  # (filter h, filter w, in channels, out channels)
    kh, kw, ci, co = i
    return (co // 32, ci // 32, kh, kw, (ci % 32) // 4, co % 32, ci % 4)


LISTINGS = {
    "flat 2x3x5x30": (htp.R4FlatMemoryLayout, (2, 3, 5, 30), (2, 3, 5, 30), flat_key, FLAT_2x3x5x30, True),
    "crouton 1x3x5x30": (htp.R4CroutonLayout, (1, 3, 5, 30), (1, 8, 8, 32), crouton_key, CROUTON_1x3x5x30, False),
    "crouton 2x9x20x50": (htp.R4CroutonLayout, (2, 9, 20, 50), (2, 16, 24, 64), crouton_key, CROUTON_2x9x20x50,
                          True),
    "weights 3x3x32x32": (htp.R4ConvWeightLayout, (3, 3, 32, 32), (3, 3, 32, 32), weight_key, WEIGHTS_3x3x32x32,
                          False),
    "weights 3x3x64x96": (htp.R4ConvWeightLayout, (3, 3, 64, 96), (3, 3, 64, 96), weight_key, WEIGHTS_3x3x64x96,
                          True),
    "weights 3x3x32x50": (htp.R4ConvWeightLayout, (3, 3, 32, 50), (3, 3, 32, 64), weight_key, WEIGHTS_3x3x32x50,
                          True),
}


def device_order(template, size, padded):
    """(padded index at each device position, executed device buffer of the real tensor)."""
    full = template.bind(padded, torch.int32)
    full_map = full.host_map()
    assert sorted(full_map.tolist()) == list(range(math.prod(padded)))  # the padded tensor has no padding
    seq = [tuple(t) for t in torch.stack(torch.unravel_index(full_map, padded), 1).tolist()]
    real = with_pad(template, -1).bind(size, torch.int32)
    assert real.device_size == full.device_size
    dev = to_device(real, torch.arange(math.prod(size), dtype=torch.int32).reshape(size))
    return seq, dev.tolist(), real


def walk(lines, seq, order):
    """Match a listing against ``seq``; return the last position matched."""
    pos = {idx: k for k, idx in enumerate(seq)}
    rank = {idx: k for k, idx in enumerate(order)}
    p, gap = -1, False
    for line in lines:
        if line is ...:
            gap = True
            continue
        prev, inline = None, False
        for item in line:
            if item is ...:
                inline = True
                continue
            if gap:
                assert pos[item] > p, f"{item} should come after position {p}"
                p = pos[item]
            else:
                between = order[rank[prev] + 1:rank[item]] if inline else []
                assert seq[p + 1:p + 1 + len(between)] == between, f"elements between {prev} and {item}"
                p += 1 + len(between)
                assert seq[p] == item, f"position {p}: expected {item}, got {seq[p]}"
            prev, gap, inline = item, False, False
    return p


@pytest.mark.parametrize("name", LISTINGS)
def test_documented_listing(name):
    template, size, padded, key, lines, ends = LISTINGS[name]
    seq, dev, real = device_order(template, size, padded)
    assert real.padded_size == padded
    # Padding is exactly the padded indices outside the host size; real positions hold their element.
    expected = [row_major(i, size) if all(a < s for a, s in zip(i, size)) else -1 for i in seq]
    assert dev == expected
    assert real.host_map().tolist() == expected
    order = sorted(itertools.product(*map(range, padded)), key=key)
    last = walk(lines, seq, order)
    if ends:
        assert last == len(seq) - 1


def test_documented_crouton_pad_statements():
    seq, dev, _ = device_order(htp.R4CroutonLayout, (1, 3, 5, 30), (1, 8, 8, 32))
    pos = {idx: k for k, idx in enumerate(seq)}
    for first, last, kind in CROUTON_1x3x5x30_SPANS:
        held = dev[pos[first]:pos[last] + 1]
        assert held and all((v == -1) == (kind == "pad") for v in held), (first, last, kind)


def test_documented_crouton_chunk_starts():
    layout = htp.R4CroutonLayout.bind((2, 9, 20, 50), torch.float16)
    for index, offset in CROUTON_2x9x20x50_CHUNK_STARTS:
        assert layout.get_raw(index) == offset
        assert layout.host_index(offset) == index


def test_listing_walk_rejects_wrong_order():
    """The listing matcher can fail: the flat listing does not describe NCHW memory."""
    seq, _, _ = device_order(htp.R4NCHWMemoryLayout, (2, 3, 5, 30), (2, 3, 5, 30))
    with pytest.raises(AssertionError):
        walk(FLAT_2x3x5x30, seq, sorted(itertools.product(*map(range, (2, 3, 5, 30)))))


# -- named layouts against independent formulas --------------------------------
ODD_SIZES = [(1, 3, 5, 30), (2, 9, 20, 50), (3, 7, 11, 33), (1, 1, 1, 1), (2, 5, 3, 65), (1, 17, 9, 3),
             (3, 3, 64, 96)]


@pytest.mark.parametrize("name", FORMULAS)
@pytest.mark.parametrize("size", ODD_SIZES, ids=str)
def test_named_layout_formula(name, size):
    offsets, total = formula_offsets(name, size)
    layout = htp.TABLE[name].bind(size, torch.float32)
    assert layout.device_numel == total
    x = random_tensor(size, torch.float32, seed=sum(size))
    assert torch.equal(bits(to_device(layout, x)), bits(expected_device(x, offsets, total, 0.0)))
    host_map = torch.full((total,), -1, dtype=torch.int64)
    host_map[offsets] = torch.arange(offsets.numel())
    assert torch.equal(layout.host_map(), host_map)
    for flat in sorted({0, offsets.numel() // 3, offsets.numel() - 1}):
        index = tuple(torch.unravel_index(torch.tensor(flat), size)[k].item() for k in range(4))
        assert layout.get_raw(index) == layout.device_offset(index) == offsets[flat].item()


@pytest.mark.parametrize("name", FORMULAS)
@pytest.mark.parametrize("dtype, pad", [(torch.float16, 31.0), (torch.int8, -3), (torch.bool, True)])
def test_named_layout_nonzero_pad_value(name, dtype, pad):
    size = (2, 9, 5, 33)
    offsets, total = formula_offsets(name, size)
    layout = with_pad(htp.TABLE[name], pad).bind(size, dtype)
    x = random_tensor(size, dtype, seed=7)
    dev = to_device(layout, x)
    assert torch.equal(bits(dev), bits(expected_device(x, offsets, total, pad)))
    assert torch.equal(bits(to_host(layout, dev)), bits(x))


@pytest.mark.parametrize("name", FORMULAS)
def test_get_raw_chunk_starts(name):
    """Every chunk's first element: get_raw is the formula's offset, a multiple of the chunk size."""
    size = (2, 9, 20, 50)
    layout = htp.TABLE[name].bind(size, torch.float16)
    chunk_numel = math.prod(layout.chunk_size)
    starts = list(itertools.product(*(range(0, s, c) for s, c in zip(size, layout.chunk_size))))
    assert len(starts) == layout.num_chunks
    raws = []
    for start in starts:
        offset, _ = FORMULAS[name](*start, *size)
        raws.append(layout.get_raw(start))
        assert raws[-1] == offset and offset % chunk_numel == 0
    assert sorted(raws) == [k * chunk_numel for k in range(layout.num_chunks)]


# -- round trips ---------------------------------------------------------------
ROUND_TRIP_DTYPES = [torch.float16, torch.float32, torch.int8, torch.bool]


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(sorted(htp.TABLE)),
    size=st.tuples(st.integers(1, 4), st.integers(1, 19), st.integers(1, 19), st.integers(1, 70)),
    dtype=st.sampled_from(ROUND_TRIP_DTYPES),
    seed=st.integers(0, 2**31),
)
def test_named_round_trip(name, size, dtype, seed):
    layout = htp.TABLE[name].bind(size, dtype)
    x = random_tensor(size, dtype, seed)
    dev = to_device(layout, x)
    assert torch.equal(bits(to_host(layout, dev)), bits(x))
    pad = layout.host_map() < 0
    assert (bits(dev)[pad] == 0).all()


def reference_offsets(order, sized, size):
    """The documented semantics written out: mixed radix over [chunks in order..., sized pairs in order]."""
    rank = len(size)
    chunk = [math.prod(s for d, s in sized if d == dim) for dim in range(rank)]
    grids = [g.reshape(-1) for g in torch.meshgrid(*(torch.arange(s) for s in size), indexing="ij")]
    digits = [(grids[d] // chunk[d], cdiv(size[d], chunk[d])) for d in order]
    for i, (d, s) in enumerate(sized):
        inner = math.prod(s2 for d2, s2 in sized[i + 1:] if d2 == d)
        digits.append(((grids[d] // inner) % s, s))
    offset = torch.zeros_like(grids[0]) if grids else torch.zeros(1, dtype=torch.int64)
    for value, radix in digits:
        offset = offset * radix + value
    return offset, math.prod(radix for _, radix in digits)


@st.composite
def pair_lists(draw):
    rank = draw(st.integers(1, 6))
    order = draw(st.permutations(range(rank)))
    sized = draw(st.lists(st.tuples(st.integers(0, rank - 1), st.integers(1, 4)), max_size=5))
    size = tuple(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    chunk = [math.prod(s for d, s in sized if d == dim) for dim in range(rank)]
    assume(math.prod(cdiv(s, c) * c for s, c in zip(size, chunk)) <= 20000)
    return list(order), sized, size


@settings(max_examples=60, deadline=None)
@given(case=pair_lists(), pad=st.integers(-100, 100), seed=st.integers(0, 2**31))
def test_random_pair_lists(case, pad, seed):
    order, sized, size = case
    values = [v for d in order for v in (d, 0)] + [v for pair in sized for v in pair]
    template = htp.ChunkedMemoryLayout(len(size), *values, pad_value=pad)
    assert htp.parse(template.notation()) == with_pad(template, 0)
    layout = template.bind(size, torch.int16)
    offsets, total = reference_offsets(order, sized, size)
    assert layout.device_numel == total == math.prod(layout.padded_size)
    # bijection between host elements and real device positions, as the reference says
    host_map = layout.host_map()
    expected_map = torch.full((total,), -1, dtype=torch.int64)
    expected_map[offsets] = torch.arange(offsets.numel())
    assert torch.equal(host_map, expected_map)
    # round trip bit for bit; padding holds the pad value
    x = random_tensor(size, torch.int16, seed)
    dev = to_device(layout, x)
    assert torch.equal(dev, expected_device(x, offsets, total, pad))
    assert torch.equal(to_host(layout, dev), x)
    # device_offset / host_index are inverse on real positions; padding has no host index
    gen = torch.Generator().manual_seed(seed)
    for flat in torch.randint(0, offsets.numel(), (5,), generator=gen).tolist():
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), size))
        assert layout.device_offset(index) == offsets[flat].item()
        assert layout.host_index(offsets[flat].item()) == index
    for p in (host_map < 0).nonzero().reshape(-1)[:5].tolist():
        assert layout.host_index(p) is None


def test_empty_host_tensor():
    layout = htp.R4CroutonLayout.bind((0, 3, 5, 30), torch.float16)
    assert layout.device_numel == 0 and layout.padded_size == (0, 8, 8, 32) and layout.num_chunks == 0


# -- bad input -----------------------------------------------------------------
@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((4, 0, 0, 1, 0, 2, 0, 3), {}, ValueError, "odd number of values (7)"),
        ((4, 0, 0, 1, 0, 2, 0, 3, 0, 4, 8), {}, ValueError, "dim 4 of pair (4,8) is out of range for rank 4"),
        ((4, 0, 0, 1, 0, 2, 0, -1, 0), {}, ValueError, "dim -1 of pair (-1,0) is out of range"),
        ((4, 0, 0, 1, 0, 2, 0, 1, 8), {}, ValueError, "dim 3 is missing from the chunk order"),
        ((4, 0, 0, 1, 0, 2, 0, 3, 0, 1, 0), {}, ValueError, "dim 1 is listed twice in the chunk order"),
        ((4, 0, 0, 1, 0, 2, 0, 3, 0, 3, -32), {}, ValueError, "pair (3,-32) has a negative size -32"),
        ((0,), {}, ValueError, "rank must be >= 1, got 0"),
        (("4", 0, 0), {}, TypeError, "rank must be an int, got '4'"),
        ((1, 0, 0.5), {}, TypeError, "pair value 1 must be an int, got 0.5"),
        ((1, 0, 0), {"pad_value": "x"}, TypeError, "pad_value must be a number or bool, got 'x'"),
    ],
)
def test_template_rejects(args, kwargs, error, message):
    with pytest.raises(error) as info:
        htp.ChunkedMemoryLayout(*args, **kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "template, size, dtype, error, message",
    [
        (htp.R4CroutonLayout, (2, 3, 4), torch.float16, ValueError,
         "host_size [2, 3, 4] has rank 3, but ChunkedMemoryLayout<4, 0,0, 1,0, 2,0, 3,0, 1,8, 2,8, 3,32> has rank 4"),
        (htp.FlatMemoryLayout(1), (2, 3), torch.float16, ValueError, "host_size [2, 3] has rank 2"),
        (htp.R4CroutonLayout, (1, 2, 3, 4), torch.float64, ValueError, "float64"),
        (htp.R4CroutonLayout, (1, 2, 3, 4), torch.complex64, ValueError, "complex64"),
        (with_pad(htp.R4CroutonLayout, 31), (1, 2, 3, 4), torch.bool, ValueError, "pad_value 31"),
        (with_pad(htp.R4CroutonLayout, 300), (1, 2, 3, 4), torch.int8, ValueError, "pad_value 300"),
        (htp.R4CroutonLayout, (1, -2, 3, 4), torch.float16, ValueError, "host_size[1]=-2"),
        (htp.R4CroutonLayout, "1234", torch.float16, TypeError, "host_size must be a sequence"),
    ],
)
def test_bind_rejects(template, size, dtype, error, message):
    with pytest.raises(error) as info:
        template.bind(size, dtype)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("crouton9", "'crouton9'"),
        ("", "''"),
        ("4, 0,0, x", "'4, 0,0, x'"),
        ("4, 0,0, 1,0", "dim 2 is missing from the chunk order"),
        ("4, 0,0, 1,0, 2,0, 3,0, 1", "odd number of values"),
        ("ChunkedMemoryLayout<4, 0,0, 1,0, 2,0, 3,0, 5,8>", "dim 5 of pair (5,8)"),
        ("FlatMemoryLayout<4, 0>", "FlatMemoryLayout takes exactly one value"),
        ("FlatMemoryLayout<0>", "rank must be >= 1, got 0"),
    ],
)
def test_parse_rejects(spec, message):
    with pytest.raises(ValueError) as info:
        htp.parse(spec)
    assert message in str(info.value) and repr(spec) in str(info.value)


def test_parse_rejects_non_str():
    with pytest.raises(TypeError, match="spec must be a str"):
        htp.parse(4)
