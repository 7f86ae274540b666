"""``index_copy_``/``index_copy`` on device memory (a static KV cache's update): bit for bit the
CPU's, on the device (no CPU fallback), with the CPU's errors, and an update at a new position
each step planned once. ``index_select`` on the buffers where they lie: the CPU's results on
every call, planned or replayed."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import ISA_SETS, kernels_in, padding_holds_pad_value, raises_like_the_cpu
from torch_layouts import SpyreTensorLayout, _C
from torch_layouts.ops import elementwise, indexing, view_copy

F16, F32 = torch.float16, torch.float32


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = F32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# One row per case: id, the cache's shape, dtype, dim, and the index of each update in turn.
CASES = [
    ("decode-positions", (1, 4, 512, 64), F32, 2, [[0], [1], [2], [9], [3]]),
    ("prefill-then-decode-half", (2, 8, 128, 64), F16, 2, [list(range(0, 40)), [40], [41], [42]]),
    ("scattered-and-repeated", (4, 96, 128), F32, 1, [[5, 70, 6, 7, 5], [95, 0]]),
    ("along-the-stick-dim", (64, 256), F32, 1, [[3, 4, 5], [100]]),
    ("batch-rows", (16, 2048), F32, 0, [[2], [15, 1]]),
    ("negative-dim", (2, 64, 128), F32, -2, [[10, 11], [63]]),
]


@pytest.mark.parametrize("_, shape, dtype, dim, updates", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("index_on", ["cpu", "spyre"])
def test_index_copy_matches_the_cpu(_, shape, dtype, dim, updates, index_on):
    cache = randn(*shape, dtype=dtype)
    device = cache.to("spyre")
    torch_layouts.reset_stats()
    for n, index in enumerate(updates):
        sizes = list(shape)
        sizes[dim] = len(index)
        source = randn(*sizes, seed=n + 1, dtype=dtype)
        idx = torch.tensor(index)
        assert device.index_copy_(dim, idx.to(index_on), source.to("spyre")) is device
        cache.index_copy_(dim, idx, source)
        assert torch.equal(device.cpu(), cache)
        fresh = torch.index_copy(device, dim, idx.to(index_on), source.to("spyre"))
        assert torch.equal(fresh.cpu(), torch.index_copy(cache, dim, idx, source))
        assert torch.equal(device.cpu(), cache)  # the functional form leaves self alone
    assert not torch_layouts.stats()["fallbacks"]


def test_an_update_at_a_new_position_each_step_is_planned_once(monkeypatch):
    view_copy.forget_plans()
    planned = []
    boxes = view_copy._boxes
    monkeypatch.setattr(view_copy, "_boxes", lambda *a: planned.append(1) or boxes(*a))
    cache = torch.zeros(1, 8, 256, 256)
    device = cache.to("spyre")
    for t in range(12):
        step = randn(1, 8, 1, 256, seed=t)
        device.index_copy_(2, torch.tensor([t]), step.to("spyre"))
        cache.index_copy_(2, torch.tensor([t]), step)
    assert torch.equal(device.cpu(), cache) and len(planned) == 1
    view_copy.forget_plans()


# One row per case: id, a bad call of (self, source) with its index.
ERRORS = [
    ("index-out-of-range", lambda x, s: x.index_copy_(1, torch.tensor([64]), s[:, :1])),
    ("negative-index", lambda x, s: x.index_copy_(1, torch.tensor([3, -1]), s[:, :2])),
    ("count-mismatch", lambda x, s: x.index_copy_(1, torch.tensor([1, 2]), s[:, :1])),
    ("dtype-mismatch", lambda x, s: x.index_copy_(1, torch.tensor([1]), s[:, :1].half())),
    ("int32-index", lambda x, s: x.index_copy_(1, torch.tensor([1], dtype=torch.int32), s[:, :1])),
    ("2-d-index", lambda x, s: x.index_copy_(1, torch.tensor([[1]]), s[:, :1])),
    ("slice-shapes", lambda x, s: x.index_copy_(1, torch.tensor([1]), s[:2, :1])),
]


@pytest.mark.parametrize("_, bad", ERRORS, ids=[c[0] for c in ERRORS])
def test_bad_calls_raise_the_cpus_errors_and_write_nothing(_, bad):
    x, s = randn(4, 64, 96), randn(4, 3, 96, seed=1)
    device = x.to("spyre")
    with pytest.raises(Exception) as cpu:
        bad(x.clone(), s)
    with pytest.raises(type(cpu.value), match=str(cpu.value).replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        bad(device, s.to("spyre"))
    assert torch.equal(device.cpu(), x)


# index_select: id, shape, dtype, dim order of the input's layout (None: default), dim, index
# length, index dtype. The refined path where the selected dim is whole in both layouts; the
# general one (a staged copy) where it is split (columns of sticks) or the index is empty.
SELECTS = [
    ("rows-of-sticks", (1024, 256), F32, None, 0, 64, torch.int64),
    ("threads", (2048, 256), F32, None, 0, 512, torch.int64),  # 512 KiB gathered: split over the threads
    ("short-runs", (64, 4), F32, None, 0, 9, torch.int64),  # runs of 16 bytes: ATen's index_select
    ("rows-int32-index", (96, 70), F32, None, 0, 40, torch.int32),
    ("rows-of-half-sticks", (200, 16), F32, None, 0, 33, torch.int64),  # runs of 64 bytes
    ("rows-of-float16-half-sticks", (200, 32), F16, None, 0, 33, torch.int64),  # runs of 64 bytes
    ("tokens-of-3d", (8, 128, 256), F32, None, 1, 17, torch.int64),
    ("batch-of-3d-half", (8, 16, 128), F16, None, 0, 5, torch.int64),
    ("last-dim-of-3d", (4, 6, 96), F32, None, -1, 9, torch.int64),  # split into sticks: general path
    ("columns", (16, 128), F32, None, 1, 7, torch.int64),  # general path
    ("dim-order", (64, 48), F32, [1, 0], 0, 30, torch.int64),
    ("one-dim", (300,), F32, None, 0, 12, torch.int64),
    ("empty-index", (32, 64), F32, None, 0, 0, torch.int64),
]


@pytest.mark.parametrize("_, shape, dtype, order, dim, count, index_dtype", SELECTS, ids=[c[0] for c in SELECTS])
def test_index_select_gives_the_cpus_result_on_every_call(_, shape, dtype, order, dim, count, index_dtype,
                                                          monkeypatch):
    """Three calls with fresh values and indices (repeated, unsorted): the CPU's rows, one
    layout, padding the pad value; later calls are replayed by the front (no Python), an empty
    index's too (its empty view)."""
    elementwise.forget_recipes()
    entered = []
    for name in ("strided_or_staged", "_INDEX_SELECT"):  # the refined path's read, the general path
        original = getattr(indexing, name)
        monkeypatch.setattr(indexing, name, lambda *a, f=original: entered.append(1) or f(*a))
    layout = None if order is None else SpyreTensorLayout(shape, dtype, order)
    outs, calls = [], []
    for seed in range(3):
        x = randn(*shape, seed=seed, dtype=dtype)
        gen = torch.Generator().manual_seed(seed)
        index = torch.randint(0, shape[dim], (count,), generator=gen).to(index_dtype)
        dx, di = x.to("spyre", device_layout=layout), index.to("spyre")
        before = len(entered)
        out = dx.index_select(dim, di)
        calls.append(len(entered) - before)
        assert torch.equal(out.cpu(), x.index_select(dim, index)) and padding_holds_pad_value(out)
        outs.append(out)
    assert all(o.device_tensor_layout() == outs[0].device_tensor_layout() for o in outs)
    assert calls[0] >= 1 and calls[1:] == [0, 0], calls
    assert torch_layouts.stats()["fallbacks"] == {}
    for bad in (shape[dim], -1):  # a replayed call's index out of range (or negative): the CPU's error
        if count:
            index[count // 2] = bad
            bad_index, source = index.clone(), x
            raises_like_the_cpu(lambda d, i=bad_index, s=source: (
                s if d == "cpu" else s.to(d, device_layout=layout)).index_select(dim, i.to(d)))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.data())
def test_index_select_of_any_layout_gives_the_cpus_result(shape, data):
    """Any Spyre layout, dim and index (repeats included): the first call and its replays."""
    elementwise.forget_recipes()
    order = list(data.draw(st.permutations(range(len(shape)))))
    layout = SpyreTensorLayout(tuple(shape), F32, order)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    count = data.draw(st.integers(1, 12))
    for seed in range(3):
        x = randn(*shape, seed=seed)
        index = torch.randint(0, shape[dim], (count,), generator=torch.Generator().manual_seed(seed))
        out = x.to("spyre", device_layout=layout).index_select(dim, index.to("spyre"))
        assert torch.equal(out.cpu(), x.index_select(dim, index)) and padding_holds_pad_value(out)


@pytest.mark.parametrize("isa", ISA_SETS)
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 160), st.sampled_from([F32, F16, torch.bfloat16]),
       st.sampled_from(["row-major", "spyre"]), st.data())
def test_index_select_of_rows_of_any_length_gives_the_cpus_result(isa, rows, width, dtype, family, data):
    """Rows gathered from a row-major device buffer (runs of the whole row: 2 to 640 bytes, whole
    64-byte lines up to 512 bytes among them, which the gathers copy a line at a time) or from
    Spyre's default layout (runs of a stick or less), in three dtypes: the CPU's bits on the first
    call and on its replays, padding the pad value; with the gathers of each instruction set this
    CPU runs (AVX-512's line copies, the others' memcpy)."""
    with kernels_in(_C._set_isa_tables, isa):  # each instruction set's tables
        elementwise.forget_recipes()
        shape = (rows, width)
        layout = (torch_layouts.DeviceLayout(list(shape), [width, 1], dtype) if family == "row-major"
                  else SpyreTensorLayout(shape, dtype))
        count = data.draw(st.integers(1, 12))
        for seed in range(3):
            x = randn(*shape, seed=seed, dtype=dtype)
            index = torch.randint(0, rows, (count,), generator=torch.Generator().manual_seed(seed))
            out = x.to("spyre", device_layout=layout).index_select(0, index.to("spyre"))
            bits = torch.int32 if dtype == F32 else torch.int16  # bit for bit, NaNs and signed zeros too
            assert torch.equal(out.cpu().view(bits), x.index_select(0, index).view(bits))
            assert padding_holds_pad_value(out)


@pytest.mark.parametrize("rows, dtype, width", [((4, 16), F32, 96), ((3, 5, 7), F16, 128)],
                         ids=["2d-index", "3d-index-half"])
def test_embedding_gathers_rows_where_they_lie(rows, dtype, width, monkeypatch):
    """``embedding`` (``index_select`` of its index reshaped to 1-D, which a device index's
    padded sticks make a staged copy) gives the CPU's rows on every call, replayed after the
    first; the table is never copied whole (the general path, which copies it, is not entered)."""
    elementwise.forget_recipes()
    entered = []
    for name in ("strided_or_staged", "_INDEX_SELECT"):
        original = getattr(indexing, name)
        monkeypatch.setattr(indexing, name, lambda *a, f=original, n=name: entered.append(n) or f(*a))
    weight = randn(500, width, dtype=dtype)  # whole sticks: a padded one has no strided view
    dw = weight.to("spyre")
    calls = []
    for seed in range(3):
        index = torch.randint(0, 500, rows, generator=torch.Generator().manual_seed(seed))
        before = len(entered)
        out = torch.nn.functional.embedding(index.to("spyre"), dw)
        calls.append(entered[before:])
        assert torch.equal(out.cpu(), torch.nn.functional.embedding(index, weight))
    assert calls[0] == ["strided_or_staged"] and calls[1:] == [[], []], calls
    assert torch_layouts.stats()["fallbacks"] == {}


# x[index] (aten::index.Tensor): id, the index (a function of the device: where the index lies),
# whether index_select takes it (else the CPU fallback of index.Tensor_out, as before).
GETITEMS = [
    ("rows", lambda d: (torch.tensor([3, 1, 3]).to(d),), True),
    ("columns", lambda d: (slice(None), torch.tensor([0, 63, 5]).to(d)), True),
    ("2d-index", lambda d: (torch.tensor([[1, 2], [9, 0]]).to(d),), True),
    ("0-dim-index", lambda d: (torch.tensor(4).to(d),), True),  # Python's x[i]: a select, not aten::index
    ("int32-index", lambda d: (torch.tensor([7, 2], dtype=torch.int32).to(d),), True),
    ("negative", lambda d: (torch.tensor([-1, 2]).to(d),), False),
    ("bool-mask", lambda d: (torch.arange(10).remainder(3).eq(0).to(d),), False),
    ("two-indices", lambda d: (torch.tensor([1, 2]).to(d), torch.tensor([3, 4]).to(d)), False),
    ("cpu-index", lambda d: (torch.tensor([1, 2]),), False),
]


@pytest.mark.parametrize("_, make, selected", GETITEMS, ids=[c[0] for c in GETITEMS])
def test_getitem_with_an_index_tensor(_, make, selected):
    """The CPU's result; one integer device index among Nones is ``index_select``'s (no CPU
    fallback), anything else the CPU fallback of ``index.Tensor_out``."""
    x = randn(10, 64)
    dx = x.to("spyre")
    torch_layouts.reset_stats()
    out = dx[make("spyre")]
    assert out.device.type == "spyre" and torch.equal(out.cpu(), x[make("cpu")])
    assert torch_layouts.stats()["fallbacks"] == ({} if selected else {"aten::index.Tensor_out": 1})


def test_getitem_out_of_range_raises_the_cpus_error():
    raises_like_the_cpu(lambda d: torch.zeros(10, 64).to(d)[torch.tensor([10]).to(d)])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=3), st.data())
def test_getitem_of_any_layout_gives_the_cpus_result(shape, data):
    """Any Spyre layout, an integer index tensor (1-D or 2-D, negative entries included) at any
    dim: the CPU's elements, the result on the device."""
    order = list(data.draw(st.permutations(range(len(shape)))))
    layout = SpyreTensorLayout(tuple(shape), F32, order)
    dim = data.draw(st.integers(0, len(shape) - 1))
    index_shape = data.draw(st.sampled_from([(5,), (2, 3)]))
    index = torch.tensor(data.draw(st.lists(st.integers(-shape[dim], shape[dim] - 1), min_size=6, max_size=6)))
    index = index[:math.prod(index_shape)].view(index_shape)
    x = randn(*shape)
    where = (slice(None),) * dim
    out = x.to("spyre", device_layout=layout)[(*where, index.to("spyre"))]
    assert out.device.type == "spyre" and torch.equal(out.cpu(), x[(*where, index)])
