"""``ops.strided.strided_copy`` (kernels' gathers and scatters on the DMA executor) against
PyTorch's ``copy_``, bit for bit: tile gathers, scatters, transposes, broadcasts, offsets,
every element size, views of device buffers and of scratch device memory."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ops_support import padding_holds_pad_value
from torch_layouts.ops import strided
from torch_layouts.ops.operands import raw, scratch
from torch_layouts.ops.strided import strided_copy


def _take(t: torch.Tensor, *shape: int) -> torch.Tensor:
    """The leading elements of a 1-D tensor viewed as ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return t[:n].view(shape)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)


# id, source builder (from a contiguous tensor), dtype
CASES = [
    ("tile-gather", lambda t: _take(t, 8, 64, 32).permute(1, 0, 2), torch.float32),
    ("tile-gather-f16", lambda t: _take(t, 4, 48, 64).permute(1, 0, 2), torch.float16),
    ("transpose", lambda t: _take(t, 96, 160).t(), torch.float32),
    ("transpose-int8", lambda t: _take(t, 120, 128).t(), torch.int8),
    ("4d-permute", lambda t: _take(t, 4, 3, 16, 80).permute(2, 0, 3, 1), torch.bfloat16),
    ("offset-slice", lambda t: _take(t, 128, 120)[5:70:2, 7:99], torch.float32),
    ("broadcast", lambda t: _take(t, -1)[:64].expand(30, 64), torch.float32),
    ("int64", lambda t: _take(t, 40, 384).t(), torch.int64),
    ("bool", lambda t: _take(t, 60, 256).t(), torch.bool),
]


SCATTERS = [c for c in CASES if not c[0].startswith("broadcast")]


def _source(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(49152, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(49152, generator=g).to(dtype)
    return torch.randint(-100, 100, (49152,), generator=g).to(dtype)


@pytest.mark.parametrize("_, make, dtype", CASES, ids=[c[0] for c in CASES])
def test_gather_matches_copy(_, make, dtype):
    src = make(_source(dtype))
    expected = torch.empty(src.shape, dtype=dtype).copy_(src)
    got = strided_copy(torch.empty(src.shape, dtype=dtype), src)
    assert torch.equal(_bits(got), _bits(expected))


@pytest.mark.parametrize("_, make, dtype", SCATTERS, ids=[c[0] for c in SCATTERS])
def test_scatter_matches_copy(_, make, dtype):
    """Writing a dense tensor into the strided view: the untouched elements stay."""
    base = _source(dtype)
    target, expected_base = make(base.clone()), base.clone()
    values = torch.arange(target.numel()).to(dtype).view(target.shape)
    make(expected_base).copy_(values)
    strided_copy(target, values)
    assert torch.equal(_bits(target._base if target._base is not None else target), _bits(expected_base))


@pytest.mark.parametrize("_, make, dtype", CASES, ids=[c[0] for c in CASES])
def test_executor_runs_transposes_only(_, make, dtype, monkeypatch):
    """Copies that move elements between rows (and are not tiny) run on the executor; these
    runs of contiguous elements on both sides (long, under few outer dims) stay with PyTorch's copy."""
    calls = []
    real = strided._C._run_nests
    monkeypatch.setattr(strided, "_C", SimpleNamespace(_run_nests=lambda *a: calls.append(real(*a))))
    src = make(_source(dtype))
    strided_copy(torch.empty(src.shape, dtype=dtype), src)
    inner = [s for n, s in zip(src.shape, src.stride()) if n > 1][-1]
    assert len(calls) == (inner != 1 and src.numel() >= strided.SMALL)


# Run copies (contiguous innermost on both sides) go to the executor where their source runs
# lie far apart (FAR set to 1024 elements here) along both of the two dims PyTorch's copy would
# walk next, or where they are short for the outer dims left after merging (``_short_runs``).
RUN_COPIES = [
    ("packed-projection", lambda t: _take(t, 3, 2, 16, 4, 32).permute(2, 3, 1, 0, 4), True),
    ("one-far-dim", lambda t: _take(t, 8, 64, 32).permute(1, 0, 2), False),
    ("runs-of-32-bytes", lambda t: _take(t, 64, 8, 8).permute(1, 0, 2), True),
    ("128-byte-runs-three-outer-dims", lambda t: _take(t, 8, 4, 16, 32).permute(2, 1, 0, 3), True),
    ("256-byte-runs-three-outer-dims", lambda t: _take(t, 8, 4, 8, 64).permute(2, 1, 0, 3), False),
    ("four-outer-dims", lambda t: _take(t, 16, 4, 3, 2, 32).permute(0, 1, 3, 2, 4), True),
    ("merged-to-two-outer-dims", lambda t: _take(t, 8, 4, 16, 32).permute(2, 0, 1, 3), False),
]


@pytest.mark.parametrize("_, make, executor", RUN_COPIES, ids=[c[0] for c in RUN_COPIES])
def test_run_copies_take_the_executor_when_scattered_or_short(_, make, executor, monkeypatch):
    monkeypatch.setattr(strided, "FAR", 1024)
    calls = []
    real = strided._C._run_nests
    monkeypatch.setattr(strided, "_C", SimpleNamespace(_run_nests=lambda *a: calls.append(real(*a))))
    src = make(_source(torch.float32))
    got = strided_copy(torch.empty(src.shape), src)
    assert torch.equal(_bits(got), _bits(src.contiguous()))
    assert len(calls) == executor


# Runs written into a destination whose runs are spaced (x[1] of a 3-D tensor in Spyre's layout:
# [rows][sticks][batch][stick]) go to the executor where they are whole lines adjacent in the source.
SPACED = [
    ("128-byte-runs", lambda: torch.zeros(64, 8, 4, 32)[:, :, 1], lambda t: _take(t, 8, 64, 32).permute(1, 0, 2), True),
    ("256-byte-runs-float16", lambda: torch.zeros(32, 4, 3, 128, dtype=torch.float16)[:, :, 2],
     lambda t: _take(t, 4, 32, 128).permute(1, 0, 2), True),
    ("96-byte-runs", lambda: torch.zeros(64, 8, 4, 24)[:, :, 1], lambda t: _take(t, 8, 64, 24).permute(1, 0, 2), False),
    ("source-spaced-too", lambda: torch.zeros(64, 8, 4, 32)[:, :, 1],
     lambda t: _take(t, 8, 64, 2, 32)[:, :, 0].permute(1, 0, 2), False),
    ("destination-adjacent", lambda: torch.zeros(64, 8, 32), lambda t: _take(t, 8, 64, 32).permute(1, 0, 2), False),
]


@pytest.mark.parametrize("_, make_dst, make_src, executor", SPACED, ids=[c[0] for c in SPACED])
def test_runs_spaced_in_the_destination_take_the_executor(_, make_dst, make_src, executor, monkeypatch):
    calls = []
    real = strided._C._run_nests
    monkeypatch.setattr(strided, "_C", SimpleNamespace(_run_nests=lambda *a: calls.append(real(*a))))
    dst = make_dst()
    src = make_src(_source(dst.dtype))
    base = dst._base if dst._base is not None else dst
    expected = base.clone()
    expected.as_strided(dst.shape, dst.stride(), dst.storage_offset()).copy_(src)
    strided_copy(dst, src)
    assert torch.equal(_bits(base), _bits(expected))
    assert len(calls) == executor


def test_device_buffers_and_scratch():
    """Views of a device tensor's buffer into scratch device memory and back."""
    x = torch.randn(256, 96)
    device = x.to("spyre")
    tiles = raw(device).view(3, 256, 32).permute(1, 0, 2)  # the default layout: [k tiles][m][stick]
    dense = strided_copy(scratch(tiles.shape, torch.float32, device.device), tiles)
    assert torch.equal(dense.reshape(256, 96), x)
    out = torch.empty(256, 96, device="spyre")
    strided_copy(raw(out).view(3, 256, 32).permute(1, 0, 2), dense)
    assert torch.equal(out.cpu(), x)


@pytest.mark.parametrize("dst_dtype, src_dtype", [(torch.float32, torch.float16), (torch.float64, torch.int32)])
def test_other_dtypes_convert_like_copy(dst_dtype, src_dtype):
    src = _take(_source(src_dtype), 96, 160).t()
    got = strided_copy(torch.empty(src.shape, dtype=dst_dtype), src)
    assert torch.equal(got, torch.empty(src.shape, dtype=dst_dtype).copy_(src))


def test_empty_is_a_no_op():
    dst = torch.empty(0, 5)
    assert strided_copy(dst, torch.empty(0, 5)) is dst


# factored_read: a view's elements as one strided view of its buffer, host dims split where their
# device offsets step unevenly. id, base shape, the view, the expected split counts (None: no view).
FACTORED = [
    ("whole", (4, 6, 6), lambda t: t, (1, 1, 1)),
    ("heads-of-packed-projection", (6, 2, 16), lambda t: t.transpose(0, 1).reshape(4, 6, 8).transpose(1, 2),
     (1, 1, 2)),
    ("rows-of-half-sticks", (6, 2, 16), lambda t: t.transpose(0, 1).reshape(4, 6, 8), (1, 2, 1)),
    ("heads-view", (4, 6, 6), lambda t: t.view(2, 2, 6, 6), (1, 1, 1, 1)),
    ("across-sticks", (10, 70), lambda t: t, None),  # 70 = 32 + 32 + 6: no split steps evenly
]


@pytest.mark.parametrize("_, shape, make, counts", FACTORED, ids=[c[0] for c in FACTORED])
def test_factored_read_splits_dims_where_offsets_step_unevenly(_, shape, make, counts):
    from torch_layouts.ops.operands import factored_read, raw_view
    x = torch.randn(shape)
    y = make(x.to("spyre"))
    r = factored_read(y)
    assert (None if r is None else r.counts) == counts
    if r is not None:
        assert len(r.read[0]) == sum(counts) and torch.equal(raw_view(y, *r.read).reshape(y.shape), make(x))


# common_reads: strided views of two tensors' buffers in one refinement of their shape, so that one
# strided copy moves one into the other. id, base shapes, the views, whether they have one.
COMMON = [
    ("same-split", (6, 2, 16), (6, 2, 16), lambda t: t.transpose(0, 1).reshape(4, 6, 8),
     lambda t: t.transpose(0, 1).reshape(4, 6, 8), True),
    ("nested-splits", (6, 2, 16), (4, 6, 8), lambda t: t.transpose(0, 1).reshape(4, 6, 8), lambda t: t, True),
    ("heads-of-a-wider-buffer", (6, 4, 32), (6, 2, 16), lambda t: t[:, :2, :16], lambda t: t, True),
    ("across-sticks", (10, 70), (10, 70), lambda t: t, lambda t: t.t().contiguous().t(), False),
]


@pytest.mark.parametrize("_, shape_a, shape_b, make_a, make_b, found", COMMON, ids=[c[0] for c in COMMON])
def test_common_reads_copy_one_tensor_into_another(_, shape_a, shape_b, make_a, make_b, found):
    from torch_layouts.ops.operands import common_reads, raw_view
    x = torch.randn(shape_a)
    a, b = make_a(x.to("spyre")), make_b(torch.zeros(shape_b).to("spyre"))
    reads = common_reads(a, b)
    assert (reads is not None) == found
    if reads is not None:
        src, dst = reads
        assert src[0] == dst[0] and math.prod(src[0]) == a.numel()
        raw_view(b, *dst).copy_(raw_view(a, *src))
        assert torch.equal(b.cpu(), make_a(x)) and padding_holds_pad_value(b)


# host_read: a view's elements as one strided view of its buffer in its own shape, where its device
# offsets are affine in its index. id, base shape, dtype, the view, whether it reads so.
HOST_READS = [
    ("whole", (4, 6, 6), torch.float32, lambda t: t, True),
    ("heads-split", (4, 6, 6), torch.float32, lambda t: t.view(2, 2, 6, 6), True),
    ("transposed", (6, 2, 16), torch.float32, lambda t: t.transpose(0, 1), True),
    ("sliced", (5, 8, 6), torch.float16, lambda t: t[1:4, 2:], True),
    ("across-sticks", (10, 70), torch.float32, lambda t: t, False),  # 70 = 32 + 32 + 6: tiles apart
    ("int64", (4, 6), torch.int64, lambda t: t, True),  # IEEE_INT32's stick, the host dtype's bytes
    ("dtype-view", (4, 8), torch.float32, lambda t: t.view(torch.int32), False),  # offsets are its buffer's
]


@pytest.mark.parametrize("_, shape, dtype, make, expected", HOST_READS, ids=[c[0] for c in HOST_READS])
def test_host_read_is_the_view_where_it_is_affine(_, shape, dtype, make, expected):
    from torch_layouts.ops.operands import host_read, raw_view
    x = (torch.randn(shape) * 10).to(dtype)
    y = make(x.to("spyre"))
    read = host_read(y)
    assert (read is not None) == expected
    if read is not None:
        assert read[0] == tuple(y.shape) and torch.equal(raw_view(y, *read), make(x))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=2),
       st.one_of(st.integers(1, 160), st.sampled_from([32, 48, 64, 96, 128])),  # whole sticks, or half of one more
       st.sampled_from([torch.float32, torch.float16]), st.data())
def test_factored_and_common_reads_hold_any_view_bit_for_bit(outer, inner, dtype, data):
    """Over random shapes, dim orders, dtypes and views (a dim split into heads, then a
    permutation): a factored read, where there is one, holds the view's elements; a copy through
    common reads into a fresh tensor, through the pieces of piece_common_reads (each element in
    one), and the runtime's copy of the view, give the CPU's bits, padding kept."""
    from torch_layouts import SpyreTensorLayout
    from torch_layouts.ops.operands import common_reads, factored_read, piece_common_reads, raw_view
    shape = [*outer, inner]  # the last dim spans several sticks
    order = data.draw(st.permutations(range(len(shape))))
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))).to(dtype)
    dx = x.to("spyre", device_layout=SpyreTensorLayout(tuple(shape), dtype, list(order)))
    view, host = dx, x
    split = data.draw(st.sampled_from([(len(shape) - 1, k) for k in (2, 4, 8) if inner % k == 0] or [None]))
    if split is not None:  # heads: a dim viewed as (k, n / k), as attention splits its features
        d, k = split
        new_shape = (*shape[:d], k, shape[d] // k, *shape[d + 1:])
        view, host = view.view(new_shape), host.view(new_shape)
    perm = data.draw(st.permutations(range(view.dim())))
    view, host = view.permute(*perm), host.permute(*perm)
    r = factored_read(view)
    if r is not None:
        assert torch.equal(raw_view(view, *r.read).reshape(view.shape).view(torch.int16 if dtype == torch.float16
                                                                            else torch.int32),
                           host.view(torch.int16 if dtype == torch.float16 else torch.int32))
    out = torch.zeros(host.shape, dtype=dtype).to("spyre")
    reads = common_reads(view, out)
    if reads is not None:
        raw_view(out, *reads[1]).copy_(raw_view(view, *reads[0]))
        assert torch.equal(out.cpu(), host) and padding_holds_pad_value(out)
    pieces = piece_common_reads(view, out.zero_())
    if reads is not None:
        assert pieces == (reads,)
    if pieces is not None:  # each element in exactly one piece: the copies give every bit
        assert sum(math.prod(src[0]) for src, _ in pieces) == view.numel()
        for src, dst in pieces:
            raw_view(out, *dst).copy_(raw_view(view, *src))
        assert torch.equal(out.cpu(), host) and padding_holds_pad_value(out)
    copied = torch.empty(host.shape, dtype=dtype, device="spyre").copy_(view)
    assert torch.equal(copied.cpu(), host) and padding_holds_pad_value(copied)
