"""The address-mapping engine (core/mapping.py) against a brute-force element-by-element map.

For random layout pairs, host views and operand views, the nests the engine emits are
enumerated address by address and compared with what the layouts' own point functions
(``host_map``, ``device_offsets``) say: every real element is mapped exactly once, to the
right address, and padding is never touched (``map_addresses``); every position of the
destination buffer is read once and each real one from the right source address
(``map_view``).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from torch_layouts.core.layout import BoundLayout, DeviceLayout, contiguous_strides, radices_of
from torch_layouts.core.mapping import Transfer, View, map_addresses, map_view, nest, padding, swap

PROPERTY = settings(max_examples=120, deadline=None)
F16 = torch.float16


def addresses(t: Transfer) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (destination, source) address pair of one nest, in loop order."""
    dst = torch.full((1,), t.dst_offset, dtype=torch.int64)
    src = torch.full((1,), t.src_offset, dtype=torch.int64)
    for n, ds, ss in zip(t.ranges, t.dst_strides, t.src_strides):
        step = torch.arange(n, dtype=torch.int64)
        dst = (dst[:, None] + step * ds).reshape(-1)
        src = (src[:, None] + step * ss).reshape(-1)
    return dst, src


def all_pairs(transfers: list[Transfer]) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [addresses(t) for t in transfers]
    if not pairs:
        return torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64)
    return torch.cat([d for d, _ in pairs]), torch.cat([s for _, s in pairs])


def storage_offsets(linear: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> torch.Tensor:
    """Storage offsets of row-major host indices under ``stride``."""
    out = torch.full_like(linear, offset)
    for c, s in zip(torch.unravel_index(linear, size), stride):
        out += c * s
    return out


def expected_map(dst: BoundLayout, source_of: callable) -> tuple[torch.Tensor, torch.Tensor]:
    """Brute force: each real device position of ``dst`` and its source address."""
    host_map = dst.host_map()
    real = torch.nonzero(host_map >= 0).reshape(-1)
    return real, source_of(host_map[real])


def check_exactly_once(transfers: list[Transfer], dst: BoundLayout, source_of: callable) -> None:
    got_dst, got_src = all_pairs(transfers)
    want_dst, want_src = expected_map(dst, source_of)
    assert got_dst.numel() == torch.unique(got_dst).numel(), "a device position is written twice"
    order = torch.argsort(got_dst)
    assert torch.equal(got_dst[order], want_dst), "the nests miss a real position or touch padding"
    assert torch.equal(got_src[order], want_src), "a real element comes from the wrong source address"


def bound(case, stride: tuple[int, ...] | None = None) -> BoundLayout:
    return case.layout().resolve(case.host_size, stride if stride is not None else case.host_stride)


@st.composite
def _host_views(draw, size: tuple[int, ...]) -> tuple[tuple[int, ...], int, int]:
    order = draw(st.permutations(range(len(size))))
    stride = [0] * len(size)
    running = 1
    for d in reversed(order):
        stride[d] = running * draw(st.sampled_from([1, 2]))
        running = stride[d] * size[d] + draw(st.sampled_from([0, 3]))
    offset = draw(st.integers(0, 3))
    return tuple(stride), offset, offset + running


cases = st.sampled_from(["layout", "spyre"])


def draw_case(helpers, data, **kw):
    kind = data.draw(cases)
    return data.draw(helpers.layout_cases(**kw) if kind == "layout" else helpers.spyre_cases(**kw))


# -- host memory <-> layout: DMA programs -------------------------------------------------------------
@PROPERTY
@given(data=st.data())
def test_host_source_maps_every_real_element_once(helpers, data):
    case = draw_case(helpers, data)
    dst = bound(case)
    view = View(case.host_size, case.host_stride, case.host_offset)
    transfers = map_addresses(None, view, dst)
    assert transfers is not None  # a layout's own host strides are linear in every group
    check_exactly_once(transfers, dst, lambda h: storage_offsets(h, dst.size, view.stride, view.offset))
    assert all(low >= 0 for low in (t.src_offset for t in transfers))
    # reading back is the swap of the nests that write only the first copy of a broadcast dim
    host, device = all_pairs(swap(map_addresses(None, view, dst, broadcast_full=False)))
    assert host.numel() == torch.unique(host).numel() == math.prod(case.host_size)
    want = storage_offsets(torch.arange(math.prod(case.host_size)), dst.size, view.stride, view.offset)
    assert torch.equal(torch.sort(host).values, torch.sort(want).values)
    assert bool((dst.host_map()[device] >= 0).all()), "reading back touches padding"


@PROPERTY
@given(data=st.data())
def test_host_source_in_other_strides(helpers, data):
    """A host tensor whose strides are not the ones the layout reads (runtime host nests)."""
    case = draw_case(helpers, data, strided=False)
    dst = bound(case)
    stride, offset, _ = data.draw(_host_views(case.host_size))
    transfers = map_addresses(None, View(case.host_size, stride, offset), dst)
    if transfers is not None:
        check_exactly_once(transfers, dst, lambda h: storage_offsets(h, dst.size, stride, offset))


# -- layout <-> layout: device relayouts ----------------------------------------------------------------
@PROPERTY
@given(data=st.data())
def test_layout_source_maps_every_real_element_once(helpers, data):
    a = draw_case(helpers, data, strided=False)
    b = draw_case(helpers, data, strided=False, host_size=a.host_size)
    src_stride = data.draw(_host_views(a.host_size))[0] if data.draw(st.booleans()) else a.host_stride
    try:
        src = bound(a, src_stride)
    except ValueError:
        assume(False)
    dst = bound(b)
    transfers = map_addresses(src, None, dst)
    if transfers is None:
        return
    check_exactly_once(transfers, dst, lambda h: src.device_offsets(storage_offsets(h, src.size, src.stride, 0)))
    low = min((t.src_offset for t in transfers), default=0)
    assert low >= 0


def test_relayout_between_tilings_is_direct():
    """Spyre sticks of 64 into 16-element blocks: the steps nest, so one pass device to device."""
    src = DeviceLayout([4, 128, 64], [64, 256, 1], F16).resolve((128, 256))
    dst = DeviceLayout([16, 128, 16], [16, 256, 1], F16).resolve((128, 256))
    transfers = map_addresses(src, None, dst)
    assert transfers is not None and len(transfers) == 1
    check_exactly_once(transfers, dst, lambda h: src.device_offsets(h))


F32 = torch.float32
ROWS = DeviceLayout([8, 1024, 32], [32, 256, 1], F32)  # a linear's (1024, 256) result: sticks outermost


# Relayouts between bindings whose base strides nest the same host dims in other orders (a
# transposed view's result, bound to strides that keep the transpose): id, source (layout, host
# strides), destination (layout, host strides), host size.
BINDINGS = [
    ("seq-first rows into batch-first", (ROWS, (256, 2048, 1)), (ROWS, (32768, 256, 1)), (8, 128, 256)),
    ("batch-first rows into seq-first", (ROWS, (32768, 256, 1)), (ROWS, (256, 2048, 1)), (8, 128, 256)),
    ("seq-first rows into Spyre's 3-D default", (ROWS, (256, 2048, 1)),
     (DeviceLayout([128, 8, 8, 32], [256, 32, 32768, 1], F32), (32768, 256, 1)), (8, 128, 256)),
    ("Spyre's 3-D default into seq-first rows", (DeviceLayout([128, 8, 8, 32], [256, 32, 32768, 1], F32),
                                                  (32768, 256, 1)), (ROWS, (256, 2048, 1)), (8, 128, 256)),
    ("a transposed matrix", (DeviceLayout([6], [1], F16), (1, 2)), (DeviceLayout([6], [1], F16), (3, 1)), (2, 3)),
]


@pytest.mark.parametrize("_, source, destination, size", BINDINGS, ids=[b[0] for b in BINDINGS])
def test_relayout_between_bindings_of_other_dim_orders_is_direct(_, source, destination, size):
    """Each source group's digits, cut at its host dims' boundaries, compose the destination's
    groups in their order: one pass device to device (these went through a host buffer), every
    real element once, from its own source address."""
    src, dst = source[0].resolve(size, source[1]), destination[0].resolve(size, destination[1])
    transfers = map_addresses(src, None, dst)
    assert transfers is not None
    check_exactly_once(transfers, dst, lambda h: src.device_offsets(storage_offsets(h, src.size, src.stride, 0)))


def test_relayout_whose_steps_do_not_nest_is_refused():
    src = DeviceLayout([3, 8], [8, 1], F16).resolve((24,))
    dst = DeviceLayout([2, 12], [12, 1], F16).resolve((24,))
    assert map_addresses(src, None, dst) is None


@pytest.mark.parametrize("src, view, message", [
    (None, None, r"host memory is read through a view of size \[2, 3\]"),
    (None, View((3, 2), (2, 1), 0), r"host memory is read through a view of size \[2, 3\]"),
    ("layout", View((2, 3), (3, 1), 0), r"holds the destination's host tensor \[2, 3\] whole"),
])
def test_bad_sources_are_named(src, view, message):
    dst = DeviceLayout([2, 4], [3, 1], F16).resolve((2, 3))
    with pytest.raises(ValueError, match=message):
        map_addresses(dst if src == "layout" else None, view, dst)


# -- padding ---------------------------------------------------------------------------------------------
@PROPERTY
@given(data=st.data())
def test_padding_is_every_other_position_once(helpers, data):
    dst = bound(draw_case(helpers, data))
    filled = torch.cat([addresses(Transfer(f.ranges, f.strides, f.strides, f.offset, f.offset))[0]
                        for f in padding(dst)] or [torch.empty(0, dtype=torch.int64)])
    assert filled.numel() == torch.unique(filled).numel()
    pad = torch.nonzero(dst.host_map() < 0).reshape(-1)
    assert torch.equal(torch.sort(filled).values, pad)


def test_nest_merges_loops_that_run_on_and_drops_empty_ones():
    loops = [(4, 1, 3), (2, 4, 12), (1, 7, 7)]
    assert nest(loops, 5, 6) == Transfer((8,), (1,), (3,), 5, 6)
    assert nest([(3, 1, 1), (0, 1, 1)], 0, 0) is None
    assert nest([], 2, 3) == Transfer((1,), (1,), (1,), 2, 3)


# -- whole buffers: operand views ------------------------------------------------------------------------
@PROPERTY
@given(data=st.data(), refine=st.booleans())
def test_view_reads_each_real_position_from_its_element(helpers, data, refine):
    a = draw_case(helpers, data, strided=False)
    size = a.host_size
    if data.draw(st.booleans()):  # plain row-major coordinates: their dims overflow tiled digits (refine)
        plain = DeviceLayout(list(size) or [1], list(contiguous_strides(size)) or [-1], a.dtype)
        dst = plain.resolve(size)
    else:
        dst = a.layout().resolve(size, contiguous_strides(size))
    b = draw_case(helpers, data, strided=False, host_size=size)
    base_stride, offset = contiguous_strides(size), 0
    if data.draw(st.booleans()):
        base_stride, offset, _ = data.draw(_host_views(size))
    try:
        src = b.layout().resolve(size, base_stride)
    except ValueError:
        assume(False)
    vsize = list(size)
    if size and data.draw(st.booleans()):  # broadcast along one dim
        vsize[data.draw(st.integers(0, len(size) - 1))] = 1
    view = View(tuple(vsize), base_stride, offset)
    assume(offset < b.layout().device_numel)
    check_view(src, view, dst, map_view(src, view, dst, refine))


@PROPERTY
@given(rows=st.integers(1, 4), a=st.integers(2, 5), b=st.integers(2, 4), extra=st.integers(0, 1),
       cut=st.integers(0, 1))
def test_refined_view_of_tiles_reads_each_element(rows, a, b, extra, cut):
    """Row-major coordinates over column tiles of ``a``: the columns split into (tiles, a)."""
    n = a * b - cut
    src = DeviceLayout([b + extra, rows, a], [a, n, 1], F16).resolve((rows, n))
    dst = DeviceLayout([rows, n], [n, 1], F16).resolve((rows, n))
    found = map_view(src, View((rows, n), (n, 1), 0), dst, refine=True)
    check_view(src, View((rows, n), (n, 1), 0), dst, found)
    assert (found is not None and found.refined) == (cut == 0)


def check_view(src: BoundLayout, view: View, dst: BoundLayout, found) -> None:
    """The nest covers ``dst``'s buffer once, stays in ``src``'s, and reads each real position's element."""
    if found is None:
        return
    size, vsize, offset = dst.size, view.size, view.offset
    vsize = (1,) * (len(size) - len(vsize)) + tuple(vsize)
    base_stride = (0,) * (len(size) - len(view.stride)) + tuple(view.stride)
    dst_addr, src_addr = addresses(found.nest)
    assert torch.equal(torch.sort(dst_addr).values, torch.arange(dst.layout.device_numel)), \
        "the nest covers the destination buffer once"
    assert bool((src_addr >= 0).all()) and bool((src_addr < src.layout.device_numel).all())
    assert found.refined or found.nest.ranges == dst.layout.device_size

    def source_of(h: torch.Tensor) -> torch.Tensor:
        index = torch.unravel_index(h, size)
        storage = torch.full_like(h, offset)
        for d, (c, s) in enumerate(zip(index, base_stride)):
            storage += (c if vsize[d] != 1 else 0) * s
        return src.device_offsets(storage)

    order = torch.argsort(dst_addr)
    want_dst, want_src = expected_map(dst, source_of)
    assert torch.equal(src_addr[order][want_dst], want_src)


def test_view_of_the_same_buffer_is_exact():
    layout = DeviceLayout([4, 3, 64], [64, 256, 1], F16)
    dst = layout.resolve((3, 256))
    found = map_view(dst, View((3, 256), (256, 1), 0), dst)
    assert found is not None and found.exact and not found.refined
    assert found.nest == Transfer((4, 3, 64), (192, 64, 1), (192, 64, 1), 0, 0)


def test_refined_view_splits_a_dim_over_two_digits():
    """A row-major [4, 8] read through 4-element sticks: the 8 splits into 2 x 4."""
    dst = DeviceLayout([4, 8], [8, 1], F16).resolve((4, 8))
    src = DeviceLayout([2, 4, 4], [4, 8, 1], F16).resolve((4, 8))
    assert map_view(src, View((4, 8), (8, 1), 0), dst) is None
    found = map_view(src, View((4, 8), (8, 1), 0), dst, refine=True)
    assert found is not None and found.refined and found.factors == (1, 2)
    assert found.nest == Transfer((4, 2, 4), (8, 4, 1), (4, 16, 1), 0, 0)


# -- digits that end in padding: a layout bound over a tensor with two of its dims merged --------------
@st.composite
def merged_bindings(draw, helpers) -> tuple[BoundLayout, BoundLayout]:
    """A layout over a row-major host tensor (``split``) and the same layout over that tensor
    with two adjacent dims merged (``merged``, where it holds it): a stick holding a whole inner
    dim then holds fewer elements than it has slots, its digit ending in padding."""
    kind = draw(cases)
    case = draw(helpers.layout_cases(strided=False) if kind == "layout" else helpers.spyre_cases(strided=False))
    size = case.host_size
    assume(len(size) >= 2)
    d = draw(st.integers(0, len(size) - 2))
    msize = size[:d] + (size[d] * size[d + 1],) + size[d + 2:]
    layout = case.layout()
    split = layout.resolve(size, contiguous_strides(size))
    try:
        merged = layout.resolve(msize, contiguous_strides(msize))
    except ValueError:
        assume(False)
    return split, merged


@PROPERTY
@given(data=st.data())
def test_merged_dims_map_like_their_split_binding(helpers, data):
    """Bound over the merged tensor, the layout puts every element where the split binding does;
    a view of its own buffer maps (exact) wherever the split binding's does, its groups read as
    mixed radices (padded digits included, split where steps do not divide); and where each group
    is one radix, a relayout to itself is one copy of every real position."""
    split, merged = data.draw(merged_bindings(helpers))
    every = torch.arange(math.prod(merged.size), dtype=torch.int64)
    assert torch.equal(merged.device_offsets(every), split.device_offsets(every))
    assert torch.equal(merged.host_map(), split.host_map())
    view = View(merged.size, contiguous_strides(merged.size), 0)
    found = map_view(merged, view, merged)
    own = map_view(split, View(split.size, contiguous_strides(split.size), 0), split)
    if own is not None:
        assert found is not None and found.exact == own.exact
    if all(g.radices is not None for g in merged.groups):
        transfers = map_addresses(merged, None, merged)
        assert transfers is not None
        check_exactly_once(transfers, merged, lambda h: merged.device_offsets(h))
    check_view(merged, view, merged, found)


@PROPERTY
@given(data=st.data(), refine=st.booleans())
def test_views_and_relayouts_of_padded_digits_read_each_element(helpers, data, refine):
    """A merged binding as the source of a view in other coordinates (row-major or another
    layout over the same tensor) and of relayouts both ways, against the brute-force map."""
    _, src = data.draw(merged_bindings(helpers))
    size = src.size
    other = draw_case(helpers, data, strided=False, host_size=size)
    try:
        dst = other.layout().resolve(size, contiguous_strides(size))
    except ValueError:
        assume(False)
    plain = DeviceLayout(list(size), list(contiguous_strides(size)), src.layout.dtype).resolve(size)
    view = View(size, contiguous_strides(size), 0)
    for coords in (dst, plain):
        check_view(src, view, coords, map_view(src, view, coords, refine))
    for a, b in ((src, dst), (dst, src)):
        transfers = map_addresses(a, None, b)
        if transfers is not None:
            check_exactly_once(transfers, b, lambda h, a=a: a.device_offsets(h))


@pytest.mark.parametrize("device_size, stride_map, split, merged, radices", [
    ([6, 2, 1, 3, 32], [96, 48, -1, 16, 1], (6, 2, 3, 16), (6, 2, 48), (16, 3)),  # MHA's in-proj bias gradient
    ([2, 3, 1, 6, 32], [48, 16, 32, 96, 1], (6, 2, 3, 16), (6, 2, 48), (16, 3)),
    ([4, 5, 64], [3, 12, 1], (5, 4, 3), (5, 12), (3, 4)),
    ([3, 2, 8], [8, 24, 1], (2, 3, 8), (2, 24), (8, 3)),  # no padding: nested as before
], ids=["mha-bias-grad", "spyre-default", "sticks-of-3", "nested"])
def test_a_padded_digit_is_a_radix_of_its_real_values(device_size, stride_map, split, merged, radices):
    layout = DeviceLayout(device_size, stride_map, torch.float32)
    bound = layout.resolve(merged)
    group = next(g for g in bound.groups if len(g.digits) == 2)
    assert group.radices == radices
    assert group.nested == (radices == tuple(dig.size for dig in group.digits))
    found = map_view(bound, View(merged, contiguous_strides(merged), 0), bound)
    assert found is not None and found.exact
    inner = layout.resolve(split)
    every = torch.arange(math.prod(merged), dtype=torch.int64)
    assert torch.equal(bound.device_offsets(every), inner.device_offsets(every))


@pytest.mark.parametrize("device_size, stride_map, size", [
    ([2, 2, 5], [8, 5, 1], (16,)),  # 12 + 8 style: rows 0-4 and 5-7 of 8-row blocks
    ([2, 2, 6, 32], [48, 32, 96, 1], (6, 96)),  # sticks of 32 over rows of 48, two rows merged
    ([7, 2, 3, 32], [40, 32, 280, 1], (3, 280)),
], ids=["blocks-of-8", "rows-of-48-merged", "rows-of-40-merged"])
def test_a_group_whose_steps_do_not_divide_reads_as_two_radices(device_size, stride_map, size):
    """Digits whose steps do not divide are no one radix (``Group.radices`` is None), but the layout
    takes their coordinates coarsest first, so a view of its own buffer still maps, exact, and
    views in other coordinates read each element from its place."""
    bound = DeviceLayout(device_size, stride_map, torch.float32).resolve(size)
    assert any(g.radices is None for g in bound.groups)
    view = View(size, contiguous_strides(size), 0)
    found = map_view(bound, view, bound)
    assert found is not None and found.exact
    check_view(bound, view, bound, found)
    plain = DeviceLayout(list(size), list(contiguous_strides(size)), torch.float32).resolve(size)
    check_view(bound, view, plain, map_view(bound, view, plain))


def test_overlapping_steps_are_a_padded_radix():
    overlapping = DeviceLayout([3, 4], [3, 1], torch.float32).resolve((9,))  # sticks of 4 slots holding 3
    assert overlapping.groups[0].radices == (3, 3)
    assert radices_of([(1, 4), (3, 3)]) == (3, 3)
    assert radices_of([(1, 3), (4, 2)]) is None  # values 0-2 of every 4: a gap no layout can bind
    assert radices_of([(1, 4), (6, 2)]) is None  # steps that do not divide
    assert radices_of([(2, 4)]) is None  # a finest step other than 1
