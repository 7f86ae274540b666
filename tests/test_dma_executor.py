"""The C++ DMA executor (``_C._run_nests``) against PyTorch's own strided copy, bit for bit.

Every nest reduces to copy_tile's problem (units contiguous on both sides, a loop contiguous in
the destination, one contiguous in the source, outer loops); these properties draw permuted,
padded, strided copies that reach every tile kernel (1/2/4/8-byte transposes, interleaves of 2
and 4 rows and their inverses, wide units, ragged edges) with plain and non-temporal stores.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_layouts
from dma_support import BITS, check_rows_continued, check_permuted_copy
from torch_layouts import _C, DeviceLayout

SIZES = [1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65]


def check_transposed_both_ways(host: torch.Tensor) -> None:
    """A rows x cols matrix into its transpose's buffer and back, bit for bit."""
    rows, cols = host.shape
    packed = torch.empty(rows * cols, dtype=host.dtype)
    _C._run_nests([((rows, cols), (1, rows), (cols, 1), 0, 0)], packed, host.reshape(-1))
    assert torch.equal(packed, host.t().reshape(-1))
    back = torch.empty_like(packed)
    _C._run_nests([((rows, cols), (cols, 1), (1, rows), 0, 0)], back, packed)
    assert torch.equal(back, host.reshape(-1))


@st.composite
def copies(draw: st.DrawFn) -> tuple:
    """A src tensor of ``shape`` (rows padded), copied into a dst whose dims run in ``order``."""
    rank = draw(st.integers(1, 4))
    shape = draw(st.lists(st.sampled_from(SIZES), min_size=rank, max_size=rank))
    while math.prod(shape) > 40_000:
        shape[shape.index(max(shape))] //= 2
    order = draw(st.permutations(range(rank)))
    src_pad = draw(st.lists(st.sampled_from([0, 0, 1, 3]), min_size=rank, max_size=rank))
    dst_pad = draw(st.lists(st.sampled_from([0, 0, 1, 3]), min_size=rank, max_size=rank))
    esize = draw(st.sampled_from([1, 2, 4, 8]))
    return shape, list(order), src_pad, dst_pad, esize


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=copies())
def test_nest_equals_pytorch_strided_copy(streaming: bool, block_width: str, case: tuple) -> None:
    check_permuted_copy(*case)


@pytest.mark.parametrize("esize", [1, 2, 4, 8])
@pytest.mark.parametrize("rows", [2, 4, 8, 16, 32, 64, 100])
def test_interleaves_and_transposes_of_long_rows(streaming: bool, block_width: str, esize: int, rows: int) -> None:
    """rows x 4099 units transposed both ways: the interleave kernels (2 and 4 rows), tiles of
    all of a few far-apart rows (up to 64), the SIMD blocks and their ragged edges, split across
    threads."""
    check_transposed_both_ways(torch.randint(-100, 100, (rows, 4099), dtype=torch.int64).to(BITS[esize]))


@pytest.mark.parametrize("esize", [2, 4, 8])
@pytest.mark.parametrize("rows, cols", [(64, 64), (130, 300), (257, 129), (64, 1000)])
def test_square_transposes_turned_toward_the_far_side(streaming: bool, block_width: str, esize: int, rows: int,
                                                     cols: int) -> None:
    """Square transposes take tiles along the destination's rows, or along the source's where
    those lie farther apart (NCHW -> NHWC): both orientations, ragged tiles, every unit width of
    the block transposes, equal PyTorch's transpose bit for bit."""
    check_transposed_both_ways(torch.randint(-100, 100, (rows, cols), dtype=torch.int64).to(BITS[esize]))


@pytest.mark.parametrize("esize", [2, 4, 8])
@pytest.mark.parametrize("blocks, extra", [((1, 1), (0, 0)), ((1, 1), (1, 0)), ((2, 3), (0, 5)), ((3, 2), (7, 13)),
                                           ((1, 4), (63, 1)), ((0, 2), (16, 3)), ((1, 1), (17, 0))])
@pytest.mark.parametrize("pad", [0, 3])
def test_one_tile_of_line_blocks_and_the_strips_they_leave(block_width: str, esize: int, blocks: tuple[int, int],
                                                           extra: tuple[int, int], pad: int) -> None:
    """A transpose run as one tile of whole line blocks (64-byte rows: 32x32 2-byte, 16x16 4-byte
    or 8x8 8-byte units; a band of 16 rows of 2-byte units in 16x32 blocks) plus the strips below
    and beside them, rows padded and read unaligned, both ways: PyTorch's strided copy bit for
    bit, nothing outside the nest written."""
    k = 64 // esize
    shape = [blocks[0] * k + extra[0], blocks[1] * k + extra[1]]
    _C._force_tile_shape(1 << 20, 1 << 20)
    try:
        check_permuted_copy(shape, [1, 0], [0, pad], [0, pad], esize)
        check_permuted_copy(shape[::-1], [1, 0], [pad, 0], [0, pad], esize)
    finally:
        _C._force_tile_shape(0, 0)


@pytest.mark.parametrize("rows", [2, 4])
@pytest.mark.parametrize("units", [32, 33, 95, 1000])
@pytest.mark.parametrize("pad", [0, 3])
def test_interleaves_of_two_and_four_rows_and_their_inverses(block_width: str, rows: int, units: int,
                                                              pad: int) -> None:
    """2 or 4 rows interleaved into a dense destination (kCHW2, kCHW4) and the inverse, 32 units a
    step in AVX-512 word permutes plus the tail, rows padded and read unaligned: PyTorch's strided
    copy bit for bit, nothing outside the nest written."""
    check_permuted_copy([rows, units], [1, 0], [0, pad], [0, 0], 2)
    check_permuted_copy([units, rows], [1, 0], [0, 0], [pad, 0], 2)


def test_line_blocks_switch_returns_the_old_setting() -> None:
    """Turning the line blocks off always works and returns the old setting; turning them on
    where the CPU lacks AVX-512BW is a ValueError naming it (checked on such CPUs only)."""
    old = _C._set_line_blocks(False)
    try:
        assert _C._set_line_blocks(False) is False
        if not _C._line_blocks_available():
            with pytest.raises(ValueError, match="AVX-512"):
                _C._set_line_blocks(True)
    finally:
        if old:
            _C._set_line_blocks(True)


@pytest.mark.parametrize("lanes", [2, 4, 8])
@pytest.mark.parametrize("rows, cols", [(4, 4), (5, 7), (64, 256), (67, 130), (256, 3)])
def test_transposes_of_wide_units(streaming: bool, lanes: int, rows: int, cols: int) -> None:
    """rows x cols units of ``lanes`` int32 (8, 16 and 32 bytes: MACE images of float16 and
    float32) transposed both ways: the 4x4 blocks of 16-byte units and their ragged edges."""
    host = torch.randint(-2**31, 2**31 - 1, (rows, cols, lanes), dtype=torch.int64).to(torch.int32)
    packed = torch.empty(rows * cols * lanes, dtype=torch.int32)
    nest = ((rows, cols, lanes), (lanes, rows * lanes, 1), (cols * lanes, lanes, 1), 0, 0)
    _C._run_nests([nest], packed, host.reshape(-1))
    assert torch.equal(packed, host.transpose(0, 1).reshape(-1))
    back = torch.empty_like(packed)
    _C._run_nests([((rows, cols, lanes), (cols * lanes, lanes, 1), (lanes, rows * lanes, 1), 0, 0)], back, packed)
    assert torch.equal(back, host.reshape(-1))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(esize=st.sampled_from([1, 2, 4, 8]), na=st.integers(2, 20), nb=st.integers(2, 20),
       ne=st.sampled_from([2, 3, 9, 64, 113, 300]), outer=st.integers(1, 3), gap=st.sampled_from([0, 5]))
def test_rows_continued_on_both_sides(streaming: bool, esize: int, na: int, nb: int, ne: int, outer: int,
                                      gap: int) -> None:
    """A loop e that continues the destination's rows (a) and the source's rows (b) both, as in
    MACE's CONV2D_FILTER and oneDNN's OIhw16i16o: [outer][a][e][b] -> [outer][b][e][a] and back,
    several chunks of e per outer position, equal PyTorch's strided copy bit for bit."""
    check_rows_continued(BITS[esize], na, nb, ne, outer, gap)


@pytest.mark.parametrize("esize, na", [(1, 4), (1, 8), (1, 16), (2, 2), (2, 4), (2, 8), (4, 2), (4, 4), (8, 2)])
def test_rows_continued_on_both_sides_in_row_wide_blocks(streaming: bool, esize: int, na: int) -> None:
    """Destination rows of 4, 8 or 16 bytes (CONV2D_FILTER's 4 output channels of a 3x3 kernel):
    the second transpose, of row-wide units, with ragged blocks (9 rows, chunks of e not a
    multiple of 4), equal PyTorch's strided copy bit for bit in both directions, streamed or not."""
    check_rows_continued(BITS[esize], na, nb=9, ne=1000, outer=2, gap=0)


@pytest.mark.parametrize("dtype, pad", [(torch.float32, float("nan")), (torch.float16, -0.0), (torch.bfloat16, 1.5),
                                        (torch.int8, -128), (torch.int32, -7), (torch.bool, True),
                                        (torch.float8_e4m3fn, -2.0), (torch.uint8, 200), (torch.int16, -3)])
def test_padding_holds_the_pad_value_bit_for_bit(helpers, dtype: torch.dtype, pad: object) -> None:
    """A new tensor's padding (boxes on two sides of a 3-D layout, strided and contiguous) holds
    the pad value's bits as ``fill_`` would store them; every real element keeps its value."""
    host = helpers.random_bits(3 * 5 * 6, dtype, 0).view(3, 5, 6)
    layout = DeviceLayout([4, 8, 7], [56, 7, 1], dtype, pad_value=pad)  # pads dims 0, 1 and 2
    device = host.to("spyre", device_layout=layout)
    raw = helpers.as_bits(torch_layouts.device_memory(device))
    real = layout.real_mask((3, 5, 6))
    assert torch.equal(raw[~real], torch.full_like(raw[~real], helpers.pad_bits(pad, dtype)))
    assert torch.equal(helpers.as_bits(device.cpu()), helpers.as_bits(host))


def test_stream_threshold_rejects_negative_bytes() -> None:
    with pytest.raises(ValueError, match="-1"):
        _C._set_stream_bytes(-1)


@pytest.mark.parametrize("esize", [2, 8])
@pytest.mark.parametrize("unit_bytes", [32, 64, 96, 128, 192, 256, 384])
@pytest.mark.parametrize("dense", ["source", "destination", "neither"])
@pytest.mark.parametrize("na, nb", [(9, 8), (8, 6)], ids=["tile", "small-tile"])
def test_whole_line_tiles_in_either_order(streaming: bool, esize: int, unit_bytes: int, dense: str, na: int,
                                          nb: int) -> None:
    """Tiles of wide units (32-384 bytes, moved in 32-byte words where AVX is: Spyre's sticks,
    HTP's crouton): a dense source block read in order and scattered, a dense destination, or
    neither, equal PyTorch's strided copy bit for bit; a tile of fewer than 64 units under a line
    each runs unit by unit along the outer loop instead, one of whole lines stays a tile."""
    dtype, unit = BITS[esize], unit_bytes // esize
    outer = 3
    far = (na + 1) * nb * unit  # rows of the non-dense side(s) lie this far apart
    src_a = nb * unit if dense == "source" else far
    dst_b = na * unit if dense == "destination" else far
    ranges = (outer, nb, na, unit)
    dst_strides = (dst_b * nb + unit, dst_b, unit, 1)
    src_strides = (src_a * na + unit, unit, src_a, 1)
    src_numel = sum((n - 1) * s for n, s in zip(ranges, src_strides)) + 1
    dst_numel = sum((n - 1) * s for n, s in zip(ranges, dst_strides)) + 1
    src = torch.randint(-100, 100, (src_numel,), dtype=torch.int64).to(dtype)
    dst = torch.full((dst_numel,), 7, dtype=dtype)
    expected = dst.clone()
    expected.as_strided(ranges, dst_strides).copy_(src.as_strided(ranges, src_strides))
    _C._run_nests([(ranges, dst_strides, src_strides, 0, 0)], dst, src)
    assert torch.equal(dst, expected)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(esize=st.sampled_from([1, 2, 4, 8]), unit_bytes=st.sampled_from([32, 64, 128, 192, 256]),
       spaced=st.integers(1, 40), rows=st.integers(1, 300), gap=st.integers(1, 3), extra=st.sampled_from([0, 1, 5]),
       pad=st.sampled_from([0, 1]), outer=st.integers(1, 3), threads=st.integers(1, 3),
       split=st.sampled_from(["source", "destination"]),
       tile=st.sampled_from([(0, 0), (1, 1), (3, 5), (8, 8), (40, 2), (2, 300)]))
def test_runs_spaced_in_the_destination(streaming: bool, esize: int, unit_bytes: int, spaced: int, rows: int,
                                        gap: int, extra: int, pad: int, outer: int, threads: int, split: str,
                                        tile: tuple[int, int]) -> None:
    """Runs adjacent in the source but ``gap`` runs (plus ``extra`` elements) apart in the
    destination, as ``x[1].copy_(y)`` writes into a 3-D tensor in Spyre's layout: whole-line runs
    take the spaced tiles (copy_spaced_runs), in any tile shape, over the threads, split by either
    side, streamed where aligned; the others the unit-by-unit path. PyTorch's strided copy bit for
    bit, the destination's gaps untouched."""
    dtype, unit = BITS[esize], unit_bytes // esize
    dst_a = (gap + 1) * unit + extra  # the spaced loop's destination stride
    ranges = (outer, rows, spaced, unit)
    dst_strides = (rows * (spaced * dst_a + pad), spaced * dst_a + pad, dst_a, 1)
    src_strides = (rows * spaced * unit, unit, rows * unit, 1)  # each spaced index: rows adjacent runs
    src_numel = outer * rows * spaced * unit
    dst_numel = sum((n - 1) * s for n, s in zip(ranges, dst_strides)) + 1
    src = torch.randint(-100, 100, (src_numel,), dtype=torch.int64).to(dtype)
    dst = torch.full((dst_numel,), 7, dtype=dtype)
    expected = dst.clone()
    expected.as_strided(ranges, dst_strides).copy_(src.as_strided(ranges, src_strides))
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        _C._force_tile_shape(*tile)
        _C._run_nests([(ranges, dst_strides, src_strides, 0, 0)], dst, src, split=split)
    finally:
        _C._force_tile_shape(0, 0)
        torch.set_num_threads(old)
    assert torch.equal(dst, expected)


@pytest.mark.parametrize("split", ["source", "destination"])
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("esize, rows, cols, lanes", [(2, 256, 2048, 1), (2, 1000, 700, 1), (4, 129, 2053, 1),
                                                      (8, 300, 301, 1), (1, 777, 1500, 1), (2, 96, 101, 64)])
def test_copies_split_over_threads_by_either_side(streaming: bool, split: str, threads: int, esize: int, rows: int,
                                                  cols: int, lanes: int) -> None:
    """Copies run as rectangles of tiles (about 64 KiB each) over the threads, each taking runs of the
    source's rows or (D2H) of the destination's: ragged rectangles and whole-line units included,
    rows x cols units transposed both ways, bit for bit."""
    host = torch.randint(-100, 100, (rows, cols, lanes), dtype=torch.int64).to(BITS[esize])
    there = ((rows, cols, lanes), (lanes, rows * lanes, 1), (cols * lanes, lanes, 1), 0, 0)
    back = ((rows, cols, lanes), (cols * lanes, lanes, 1), (lanes, rows * lanes, 1), 0, 0)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        packed = torch.empty(host.numel(), dtype=host.dtype)
        _C._run_nests([there], packed, host.reshape(-1), split=split)
        assert torch.equal(packed, host.transpose(0, 1).reshape(-1))
        again = torch.empty_like(packed)
        _C._run_nests([back], again, packed, split=split)
        assert torch.equal(again, host.reshape(-1))
    finally:
        torch.set_num_threads(old)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), split=st.sampled_from(["source", "destination"]), threads=st.integers(2, 3),
       tile=st.tuples(st.integers(1, 64), st.integers(1, 64)))
def test_large_permuted_copies_split_either_way(streaming: bool, data: st.DataObject, split: str, threads: int,
                                                tile: tuple[int, int]) -> None:
    """Permuted, padded, unaligned copies of about 0.5 to 1.5 MiB, split over the threads in
    rectangles of a forced tile shape by the source's rows or by the destination's: PyTorch's
    strided copy bit for bit, nothing outside the nest written."""
    rank = data.draw(st.integers(2, 4))
    esize = data.draw(st.sampled_from([1, 2, 4, 8]))
    shape = data.draw(st.lists(st.sampled_from([2, 3, 7, 16, 17, 64, 65, 130, 1000]), min_size=rank,
                               max_size=rank))
    while math.prod(shape) * esize < 600_000:
        shape[shape.index(min(shape))] *= 3
    while math.prod(shape) * esize > 1_600_000:
        shape[shape.index(max(shape))] //= 2
    order = list(data.draw(st.permutations(range(rank))))
    pads = st.lists(st.sampled_from([0, 0, 1, 3]), min_size=rank, max_size=rank)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        _C._force_tile_shape(*tile)
        check_permuted_copy(shape, order, data.draw(pads), data.draw(pads), esize, split)
    finally:
        _C._force_tile_shape(0, 0)
        torch.set_num_threads(old)


def test_a_split_is_named() -> None:
    with pytest.raises(ValueError, match="'source' or the 'destination', got 'host'"):
        _C._run_nests([((4,), (1,), (1,), 0, 0)], torch.empty(4), torch.empty(4), split="host")


@pytest.mark.parametrize("esize", [1, 2, 4, 8])
@pytest.mark.parametrize("step", [2, 3])
@pytest.mark.parametrize("run", [1, 3, 4, 7, 16, 33])
@pytest.mark.parametrize("c", [1, 2, 3])
def test_strided_runs_gathered_into_dense_ones(esize: int, step: int, run: int, c: int) -> None:
    """Runs of every ``step``-th source unit written densely, ``c`` of them per position of an outer
    loop (a clone of ``x[:, ::2]`` in Spyre's layout: each destination stick gathers every other
    float32 of two source sticks): no source loop of units, so the tile is the run itself, copied
    along its length (the every-other-float32 case by a shuffle kernel, with its tail):
    PyTorch's strided copy bit for bit, nothing outside the nest written."""
    dtype = BITS[esize]
    outer = 5
    ranges = (outer, c, run)
    dst_strides = (c * run + 1, run, 1)
    src_strides = (c * run * step + 2, 9000, step)  # the c runs far apart (other sticks)
    src_numel = 1 + sum((n - 1) * s for n, s in zip(ranges, src_strides))
    dst_numel = 1 + sum((n - 1) * s for n, s in zip(ranges, dst_strides))
    src = torch.randint(-100, 100, (src_numel + 3,), dtype=torch.int64).to(dtype)[3:]
    dst = torch.full((dst_numel,), 7, dtype=dtype)
    expected = dst.clone()
    expected.as_strided(ranges, dst_strides).copy_(src.as_strided(ranges, src_strides))
    _C._run_nests([(ranges, dst_strides, src_strides, 0, 0)], dst, src)
    assert torch.equal(dst, expected)
