"""Copies into and out of part of a device buffer (``x[i].copy_(y)``, ``x[:, a:b] = y``,
``host.copy_(x[i])``): planned as strided copies between the buffers from 2048 elements
(``ops/view_copy.py``), the runtime's element path below; both against the CPU bit for bit."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import padding_holds_pad_value
from torch_layouts import DeviceLayout, SpyreTensorLayout, _C
from torch_layouts.core.dtypes import data_format
from torch_layouts.ops import view_copy

BITS = {torch.float16: torch.int16, torch.float32: torch.int32}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(BITS[t.dtype])


def part(t: torch.Tensor, kind: str, n: int) -> torch.Tensor:
    """A view of part of ``t`` (rank 3, every dim at least 2): ``kind`` names it."""
    return {"select": lambda: t.select(0, n % t.shape[0]),
            "slice": lambda: t[:, n % (t.shape[1] - 1):],
            "narrow-last": lambda: t.narrow(2, n % (t.shape[2] - 1), t.shape[2] - n % (t.shape[2] - 1) - 1),
            "step": lambda: t[::2],
            "transposed": lambda: t[1:].transpose(1, 2)}[kind]()


KINDS = ["select", "slice", "narrow-last", "step", "transposed"]


@settings(max_examples=30, deadline=None)
@given(st.tuples(st.integers(2, 6), st.integers(2, 40), st.integers(2, 300)) | st.tuples(st.integers(2, 4),
       st.integers(16, 40), st.integers(64, 300)), st.sampled_from([torch.float16,
       torch.float32]), st.sampled_from(KINDS), st.integers(0, 50), st.sampled_from(["d2d", "h2d", "d2h"]), st.data())
def test_view_copies_match_the_cpu_property(shape, dtype, kind, n, direction, data):
    """Any Spyre dim_order, any of the views; the source a device tensor in another random
    dim_order (or a host tensor), twice (the kept plan, with fresh values; a device source is
    the same buffer, so the second D2D copy is the runtime's replay of the kept boxes): the
    destination's elements are the CPU's bit for bit, the rest of its buffer and its padding
    untouched."""
    order = list(data.draw(st.permutations(range(3))))
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(shape, generator=gen).to(dtype)
    d = x.to("spyre", device_layout=SpyreTensorLayout(shape, dtype, order))
    target = part(x, kind, n)
    src_layout = SpyreTensorLayout(tuple(target.shape), dtype, list(data.draw(st.permutations(range(target.dim())))))
    dev_src = None
    for round_ in range(2):
        values = torch.randn(target.shape, generator=gen).to(dtype)
        if direction == "d2h":  # out of part of the device buffer into a host tensor
            host = torch.empty(target.shape, dtype=dtype)
            host.copy_(part(d, kind, n))
            assert torch.equal(bits(host), bits(target.contiguous()))
            continue
        if direction == "d2d":
            dev_src = values.to("spyre", device_layout=src_layout) if dev_src is None else dev_src.copy_(values)
        src = values if direction == "h2d" else dev_src
        part(d, kind, n).copy_(src)
        target.copy_(values)
        assert torch.equal(bits(d.cpu()), bits(x)), round_
        assert padding_holds_pad_value(d)


CONVERSIONS = [(torch.float32, torch.float16), (torch.float16, torch.float32), (torch.float32, torch.bfloat16),
               (torch.bfloat16, torch.float32), (torch.int32, torch.float32)]


@settings(max_examples=30, deadline=None)
@given(st.tuples(st.integers(2, 4), st.integers(16, 40), st.integers(64, 300)), st.sampled_from(CONVERSIONS),
       st.sampled_from(KINDS), st.integers(0, 50), st.sampled_from(["d2d", "h2d", "d2h"]), st.data())
def test_converting_copies_of_part_of_a_buffer_property(shape, dtypes, kind, n, direction, data):
    """A copy into or out of part of a device buffer that also converts the dtype (``host_f16.copy_(x[1])``
    of float32, ``x[:, a:b] = y.half()``): the CPU's bits, through the planned copies of the part
    from 2048 elements, never the element path (each element's device offset computed: 1 MiB
    took 1.3-2.6 ms)."""
    src_dtype, dst_dtype = dtypes if direction != "d2h" else dtypes[::-1]
    order = list(data.draw(st.permutations(range(3))))
    gen = torch.Generator().manual_seed(n)
    x = (torch.randn(shape, generator=gen) * 100).to(dst_dtype if direction != "d2h" else src_dtype)
    d = x.to("spyre", device_layout=SpyreTensorLayout(shape, x.dtype, order))
    target = part(x, kind, n)
    planned = target.numel() >= 2048
    for round_ in range(2):
        torch_layouts.reset_stats()
        if direction == "d2h":  # out of part of the device buffer into a host tensor of another dtype
            host = torch.empty(target.shape, dtype=dst_dtype)
            host.copy_(part(d, kind, n))
            assert torch.equal(host, target.to(dst_dtype)), round_
        else:
            values = (torch.randn(target.shape, generator=gen) * 100).to(src_dtype)
            part(d, kind, n).copy_(values if direction == "h2d" else values.to("spyre"))
            target.copy_(values)
            assert torch.equal(d.cpu(), x), round_
            assert padding_holds_pad_value(d)
        stats = torch_layouts.stats()
        assert not planned or stats["view_gathers"] == stats["view_scatters"] == 0, (round_, stats)


VIEW_DTYPES = {torch.float32: [torch.int32, torch.int16], torch.float16: [torch.int16, torch.int8]}


@settings(max_examples=25, deadline=None)
@given(st.tuples(st.integers(2, 4), st.integers(2, 40), st.integers(2, 200)), st.sampled_from([torch.float16,
       torch.float32]), st.sampled_from(KINDS), st.integers(0, 50), st.sampled_from(["d2d", "h2d", "d2h"]), st.data())
def test_copies_through_dtype_views_match_the_cpu_property(shape, dtype, kind, n, direction, data):
    """The same copies through ``view(dtype)`` of the device buffer (an element size as large or
    smaller): the buffer's bytes are the CPU's, and a host copy out of it holds the CPU's bits."""
    view_dtype = data.draw(st.sampled_from(VIEW_DTYPES[dtype]))
    gen = torch.Generator().manual_seed(n)
    x = torch.randn(shape, generator=gen).to(dtype)
    d = x.to("spyre", device_layout=SpyreTensorLayout(shape, dtype, list(data.draw(st.permutations(range(3))))))
    target = part(x.view(view_dtype), kind, n)
    other_layout = SpyreTensorLayout(shape, dtype, list(data.draw(st.permutations(range(3)))))
    dev_other = None  # the device source's buffer, the same one both rounds (the second copy replays)
    for round_ in range(2):
        other = torch.randn(shape, generator=gen).to(dtype)  # the source: the same part of another buffer
        values = part(other.view(view_dtype), kind, n)
        if direction == "d2h":
            host = torch.empty(target.shape, dtype=view_dtype)
            host.copy_(part(d.view(view_dtype), kind, n))
            assert torch.equal(host, target.contiguous())
            continue
        if direction == "d2d":
            dev_other = other.to("spyre", device_layout=other_layout) if dev_other is None else dev_other.copy_(other)
        src = values if direction == "h2d" else part(dev_other.view(view_dtype), kind, n)
        part(d.view(view_dtype), kind, n).copy_(src)
        target.copy_(values)
        assert torch.equal(d.cpu().view(torch.uint8), x.view(torch.uint8)), round_
        assert padding_holds_pad_value(d)


# Views the planned path reads (no element path: ``view_scatters`` stays 0): kind, the base's
# dim_order, the source's.
PLANNED = [("select", [0, 1, 2], [0, 1]), ("slice", [0, 1, 2], [0, 1, 2]), ("step", [1, 0, 2], [1, 0, 2]),
           ("transposed", [0, 2, 1], [0, 1, 2]), ("select", [2, 0, 1], [1, 0]),
           # the source sticked on another dim: one refined box, or moved first into coordinates
           # that read the destination
           ("select", [0, 1, 2], [1, 0]), ("slice", [0, 1, 2], [2, 0, 1])]


@pytest.mark.parametrize("direction", ["d2d", "h2d", "d2h"])
@pytest.mark.parametrize("kind, order, src_order", PLANNED, ids=[f"{k}-{o}" for k, o, _ in PLANNED])
def test_planned_view_copies(kind, order, src_order, direction):
    x = torch.randn(4, 40, 300)
    d = x.to("spyre", device_layout=SpyreTensorLayout(x.shape, x.dtype, order))
    values = torch.randn(part(x, kind, 1).shape)
    torch_layouts.reset_stats()
    if direction == "d2h":
        host = torch.empty(values.shape)
        host.copy_(part(d, kind, 1))
        assert torch.equal(host, part(x, kind, 1))
    else:
        src = values if direction == "h2d" else values.to(
            "spyre", device_layout=SpyreTensorLayout(tuple(values.shape), values.dtype, src_order))
        part(d, kind, 1).copy_(src)
        part(x, kind, 1).copy_(values)
        assert torch.equal(d.cpu(), x)
    stats = torch_layouts.stats()
    assert stats["view_scatters"] == stats["view_gathers"] == 0


def test_host_copies_from_2048_elements_and_device_copies_of_any_size_are_planned():
    """Host copies into part of a buffer take the element path below 2048 elements; copies within
    the device are planned at any size, and kept: a repeat runs in the runtime."""
    d = torch.zeros(4, 64, 64).to("spyre")
    big, small, tiny = torch.randn(64, 64), torch.randn(4, 64), torch.randn(3, 5)
    torch_layouts.reset_stats()
    d[1] = big  # 4096 elements from the host
    assert torch_layouts.stats()["view_scatters"] == 0
    d[2, :4] = small  # 256 elements from the host
    assert torch_layouts.stats()["view_scatters"] == 1
    view_copy.forget_plans()
    d[3, 1:4, 2:7] = tiny.to("spyre")  # 15 elements within the device: planned in Python
    assert view_copy.PLANS and _C._kept_view_copies() >= 1
    view_copy.PLANS.clear()
    d[3, 1:4, 2:7] = tiny.to("spyre")  # the runtime's kept plan
    assert not view_copy.PLANS, "a repeated copy within the device was planned again"
    assert torch_layouts.stats()["view_scatters"] == 1
    expected = torch.zeros(4, 64, 64)
    expected[1], expected[2, :4], expected[3, 1:4, 2:7] = big, small, tiny
    assert torch.equal(d.cpu(), expected)


# Copies between the host and part of a device buffer, as (id, device base shape, part of it).
HOST_CASES = [
    ("row of a 3-D buffer", (4, 64, 128), lambda t: t[1]),
    ("token column of a KV cache", (2, 256, 16, 128), lambda t: t[:, 7]),
    ("stick-aligned slice of the stick dim", (64, 256), lambda t: t[:, 64:192]),
]


@pytest.mark.parametrize("host", ["contiguous", "transposed"])
@pytest.mark.parametrize("_, shape, part", HOST_CASES, ids=[c[0] for c in HOST_CASES])
def test_host_copies_into_and_out_of_part_of_a_buffer_are_staged_by_the_runtime(_, shape, part, host, python_copies):
    """The second copy of a geometry between the host and part of a device buffer runs in the
    runtime (the kept staging coordinates and plan), with the Python path's results; staged in
    row-major coordinates, a contiguous host side is copied straight from or into its own buffer
    (no staged device tensor is allocated), while one of other strides (here transposed) cannot
    stand for the staged buffer and is staged through a device tensor."""
    view_copy.forget_plans()  # (the other host side's run kept this geometry's plans)
    base = torch.randn(shape)
    d = base.to("spyre")
    size = part(base).shape

    def host_tensor() -> torch.Tensor:
        if host == "contiguous":
            return torch.empty(size)
        return torch.empty(tuple(reversed(size))).permute(*reversed(range(len(size))))

    for step in range(3):
        values, out = host_tensor().normal_(), host_tensor()
        torch.spyre.reset_peak_memory_stats()
        part(d).copy_(values)
        part(base).copy_(values)
        out.copy_(part(d))
        assert torch.equal(out, values) and torch.equal(d.cpu(), base)
        assert len(python_copies) == 2, f"copies with the host entered Python {len(python_copies)} times by step {step}"
        if step:
            staged = torch.spyre.max_memory_allocated() > torch.spyre.memory_allocated()
            assert staged == (host == "transposed"), f"step {step}: a staged tensor made: {staged}"
    assert padding_holds_pad_value(d)


@pytest.mark.parametrize("_, shape, part", HOST_CASES, ids=[c[0] for c in HOST_CASES])
def test_a_staging_in_sticks_keeps_the_staged_tensor(_, shape, part):
    """Kept staging coordinates that are not row-major (sticks: padding, another order) never let
    a host buffer stand for the staged one: the runtime stages through a device tensor."""
    from torch_layouts.ops.operands import new_tensor, ordered_coords

    base = torch.randn(shape)
    d = base.to("spyre")
    view = part(d)
    coords = ordered_coords(tuple(view.shape), view.dtype, tuple(range(view.dim())))
    for into_device in (True, False):  # plans of both ways between a staged tensor in sticks and the view
        staged = new_tensor(coords, d.device)
        assert view_copy.copy_between(view, staged) if into_device else view_copy.copy_between(staged, view)
        _C._keep_staging(view, staged)
    base = d.cpu()
    for _ in range(2):
        values, out = torch.randn(view.shape), torch.empty(view.shape)
        part(d).copy_(values)
        part(base).copy_(values)
        out.copy_(part(d))
        assert torch.equal(out, values) and torch.equal(d.cpu(), base)


def test_a_host_alias_of_the_device_buffer_is_read_whole_first():
    """A contiguous host tensor over the device buffer itself (the runtime's raw alias) copied into
    part of that buffer: staged, so every source element is read before any is written, as a
    copy from a separate host tensor would read it."""
    d = torch.randn(4, 64, 128).to("spyre")
    for step in range(3):
        raw = _C._raw_buffer(d)
        source = raw[64 * 128 // 2: 64 * 128 // 2 + 64 * 128].view(64, 128)  # straddles d[0] and d[1]
        expected = d.cpu()
        expected[1] = source.clone()
        d[1].copy_(source)
        assert torch.equal(d.cpu(), expected), f"step {step}"


@pytest.fixture
def python_copies():
    """A list that grows by one each time the runtime hands a copy to ops/view_copy.py (a spy
    registered as its copier; ``view_copy.copy_view`` again after the test)."""
    calls = []

    def spy(dst: torch.Tensor, src: torch.Tensor) -> bool:
        calls.append((tuple(dst.shape), dst.device.type, src.device.type))
        return view_copy.copy_view(dst, src)

    _C._set_view_copier(spy)
    yield calls
    _C._set_view_copier(view_copy.copy_view)


def test_a_source_that_is_part_of_a_buffer_sticked_elsewhere():
    """Both sides views, their sticks on different dims: the source is copied whole first."""
    x, y = torch.randn(4, 64, 96), torch.randn(3, 64, 96)
    d = x.to("spyre")
    e = y.to("spyre", device_layout=SpyreTensorLayout(y.shape, y.dtype, [0, 2, 1]))
    torch_layouts.reset_stats()
    d[1:3] = e[1:]
    x[1:3] = y[1:]
    assert torch.equal(d.cpu(), x)
    stats = torch_layouts.stats()
    assert stats["view_scatters"] == stats["view_gathers"] == stats["host_bounces"] == 0


@pytest.mark.parametrize("n", [3, 3000])
def test_copies_into_a_layout_with_broadcast_copies_write_every_copy(n):
    """A layout with a stride-0 device dim holds each element twice: a copy into a new tensor of
    it from part of a buffer, and a write into part of it, reach both copies at any size."""
    x = torch.randn(2, n + 1).half()
    for part, broadcast in ((lambda t: t.narrow(1, 1, n), DeviceLayout([2, n, 2], [n, 1, 0], torch.float16)),
                            (lambda t: t.narrow(0, 1, 1), DeviceLayout([n + 1, 2], [1, 0], torch.float16))):
        z = part(x.to("spyre")).to("spyre", device_layout=broadcast)
        memory = torch_layouts.device_memory(z).view(-1, 2)
        assert torch.equal(z.cpu(), part(x)) and torch.equal(memory[:, 0], memory[:, 1])
    w = x.to("spyre", device_layout=DeviceLayout([2, n + 1, 2], [n + 1, 1, 0], torch.float16))
    patch = torch.randn(2, n).half()
    w.narrow(1, 1, n).copy_(patch.to("spyre"))
    memory = torch_layouts.device_memory(w).view(2, n + 1, 2)
    assert torch.equal(w.cpu()[:, 1:], patch) and torch.equal(memory[..., 0], memory[..., 1])


# Copies the module finds no plan for (a part of the stick dim not aligned to sticks), which the
# element path copies: id, device tensor's shape, the part, whether the host is the other side.
DECLINED = [
    ("device-to-device", (8, 96), lambda t: t[:, 3:40], False),
    ("host-to-device", (64, 96), lambda t: t[:, 5:70], True),
]


@pytest.mark.parametrize("_, shape, part, host", DECLINED, ids=[c[0] for c in DECLINED])
def test_a_declined_geometry_goes_straight_to_the_element_path(_, shape, part, host, python_copies):
    """The module is asked once per geometry it declines; repeats copy by element offsets
    without calling it, with the right values."""
    x = torch.randn(shape)
    d = x.to("spyre")
    for step in range(3):
        values = torch.randn(part(x).shape)
        if host:
            part(d).copy_(values)
            part(x).copy_(values)
            assert torch.equal(d.cpu(), x)
        else:
            out = torch.empty(values.shape, device="spyre")
            d.copy_(x)
            out.copy_(part(d))
            assert torch.equal(out.cpu(), part(x))
        assert len(python_copies) == 1, f"step {step}: the module was asked {len(python_copies)} times"
    view_copy.forget_plans()  # forgetting the plans forgets the declines too
    part(d).copy_(part(x)) if host else torch.empty(part(x).shape, device="spyre").copy_(part(d))
    assert len(python_copies) == 2


# Copies within the device that no coordinates read on both sides (a transpose of dims under a
# stick: padded sticks on different dims), staged through new tensors: id, shape, the source from
# a device tensor of that shape.
RESTAGED = [
    ("transpose-of-a-whole-tensor", (4, 6, 8), lambda t: t.transpose(1, 2)),
    ("transpose-of-part-of-a-buffer", (8, 12, 16), lambda t: t[2:6].transpose(1, 2)),
]


@pytest.mark.parametrize("_, shape, source", RESTAGED, ids=[c[0] for c in RESTAGED])
def test_staged_device_copies_are_repeated_by_the_runtime(_, shape, source, python_copies):
    """The first copy of such a geometry is planned in ops/view_copy.py; repeats make the same
    copies in the runtime, without Python, with the same values."""
    x = torch.randn(shape)
    d = x.to("spyre")
    for step in range(3):
        values = torch.randn(shape)
        d.copy_(values)
        out = torch.empty(source(values).shape, device="spyre")
        out.copy_(source(d))
        assert torch.equal(out.cpu(), source(values))
        assert padding_holds_pad_value(out)
        device_copies = [c for c in python_copies if c[1] == c[2] == "spyre"]
        assert len(device_copies) == 1, f"step {step}: {len(device_copies)} copies planned in Python"


def _sticks_in_another_order(x: torch.Tensor) -> torch.Tensor:
    """``x`` (n, 8, 256) on the device as n rows of 2048, each row's even sticks before its odd ones."""
    layout = SpyreTensorLayout([x.shape[0], 2, 32, 32], [2048, 32, 64, 1], data_format(x.dtype))
    return x.reshape(x.shape[0], 2048).to("spyre", device_layout=layout).view(x.shape)


# D2D copies into part of a buffer whose source reads the destination's coordinates only with a
# coordinate dim split into factors (its sticks in another order, or along another dim: a
# transpose): one strided copy between the two buffers, no device tensor staged in between.
REFINED = [
    ("sticks-in-another-order", _sticks_in_another_order),
    ("sticked-on-dim-0", lambda x: x.to("spyre", device_layout=SpyreTensorLayout(x.shape, x.dtype, [1, 2, 0]))),
    ("transposed-view", lambda x: x.permute(2, 1, 0).contiguous().to("spyre").permute(2, 1, 0)),
]


@pytest.mark.parametrize("make", [m for _, m in REFINED], ids=[n for n, _ in REFINED])
def test_refined_view_copies_stage_nothing(make):
    x = torch.randn(64, 8, 256)
    src = make(x)
    out = torch.zeros(3, 64, 8, 256).to("spyre")
    allocations = torch.spyre.memory_stats()["allocation.all.allocated"]
    torch_layouts.reset_stats()
    out[1].copy_(src)
    assert torch.spyre.memory_stats()["allocation.all.allocated"] == allocations
    stats = torch_layouts.stats()
    assert stats["view_scatters"] == stats["view_gathers"] == stats["host_bounces"] == 0
    want = torch.zeros(3, 64, 8, 256)
    want[1] = x
    assert torch.equal(bits(out.cpu()), bits(want))


# D2D copies of views that no coordinates of the copy's shape read (attention's heads of a packed
# projection: a stick holds two heads) but strided views of both buffers hold in one refinement of
# the shape (operands.common_reads): one strided copy, planned once, then replayed by the runtime.
COMMON_BOX = [
    ("head-split-q", (2, 6, 48), lambda t: t.transpose(0, 1)[..., :16].reshape(6, 4, 8).transpose(0, 1)),
    ("head-split-k-transposed", (2, 6, 48),
     lambda t: t.transpose(0, 1)[..., 16:32].reshape(6, 4, 8).transpose(0, 1).transpose(1, 2)),
]


@pytest.mark.parametrize("_, shape, source", COMMON_BOX, ids=[c[0] for c in COMMON_BOX])
def test_views_held_by_a_common_refinement_copy_in_one_box(_, shape, source, python_copies):
    for step in range(3):
        x = torch.randn(shape)
        src = source(x.to("spyre"))
        out = torch.empty(src.shape, device="spyre")
        torch_layouts.reset_stats()
        out.copy_(src)
        stats = torch_layouts.stats()
        assert stats["view_scatters"] == stats["view_gathers"] == stats["host_bounces"] == 0
        assert torch.equal(bits(out.cpu()), bits(source(x))) and padding_holds_pad_value(out)
        device_copies = [c for c in python_copies if c[1] == c[2] == "spyre"]
        assert len(device_copies) == 1, f"step {step}: {len(device_copies)} copies planned in Python"


@pytest.mark.parametrize("shift", [-3, 3, 0])
def test_copies_within_one_buffer_read_every_source_element_first(shift):
    """Overlapping parts of one buffer: the result is the source's values before the copy."""
    x = torch.randn(64, 96)
    d = x.to("spyre")
    d[8:56] = d[8 + shift:56 + shift]
    want = x.clone()
    want[8:56] = x[8 + shift:56 + shift].clone()
    assert torch.equal(d.cpu(), want)


def test_a_view_no_plan_reads_is_left_to_the_runtime(monkeypatch):
    """The copier answers False (nothing written) when no coordinates read both tensors;
    the runtime's element path then copies."""
    monkeypatch.setattr(view_copy, "_boxes", lambda dst, src: ())
    view_copy.forget_plans()
    d = torch.zeros(4, 64, 64).to("spyre")
    values = torch.randn(64, 64)
    torch_layouts.reset_stats()
    d[1] = values.to("spyre")
    assert torch_layouts.stats()["view_scatters"] == 1
    assert torch.equal(d.cpu()[1], values)
    view_copy.forget_plans()


# Device-to-device copies into or out of part of a buffer: (destination, source) of one
# geometry, the source's data fresh on each call.
REPLAYED = [
    ("select", lambda d, s: (d[1], s)),
    ("slice", lambda d, s: (d[1, :, 32:64], s[:, 32:64])),
    ("out of part", lambda d, s: (s, d[2])),
    ("transposed source", lambda d, s: (d[1], s.transpose(0, 1).contiguous().transpose(0, 1))),
]


@pytest.mark.parametrize("views", [v for _, v in REPLAYED], ids=[n for n, _ in REPLAYED])
def test_kept_plans_are_replayed_by_the_runtime(views):
    """The first copy of a geometry is planned here; later ones are replayed by the runtime
    without calling the planner, bit for bit as the CPU copies, wherever the data changes."""
    calls = []

    def counting(dst: torch.Tensor, src: torch.Tensor) -> bool:
        calls.append(1)
        return view_copy.copy_view(dst, src)

    view_copy.forget_plans()
    torch_layouts._C._set_view_copier(counting)
    try:
        for round_ in range(3):
            x, y = torch.randn(4, 64, 96), torch.randn(64, 96)
            d, s = x.to("spyre"), y.to("spyre")
            dst, src = views(d, s)
            want_dst, want_src = views(x, y)
            dst.copy_(src)
            want_dst.copy_(want_src)
            assert torch.equal(bits(d.cpu()), bits(x)) and torch.equal(bits(s.cpu()), bits(y))
            assert len(calls) == 1, f"round {round_}: the planner was called {len(calls)} times"
        assert torch_layouts._C._kept_view_copies() >= 1
    finally:
        torch_layouts._C._set_view_copier(view_copy.copy_view)
        view_copy.forget_plans()


@pytest.mark.parametrize("raw_side", ["dst", "src"])
def test_a_raw_device_buffer_is_left_to_the_runtime(raw_side):
    """A device tensor with no layout (a raw buffer over an UntypedStorage, as DLPack's
    host-order copies make) on either side of a view copy: the runtime copies it."""
    x = torch.randn(4, 64, 96)
    d = x.to("spyre")
    storage = torch.UntypedStorage(64 * 96 * 4, device="spyre")
    raw = torch.empty(0, device="spyre").set_(storage, 0, (64, 96))
    if raw_side == "dst":
        raw.copy_(d[1])
        assert torch.equal(raw.cpu(), x[1])
    else:
        raw.copy_(x[2].to("spyre"))
        d[1] = raw
        x[1] = x[2]
        assert torch.equal(d.cpu(), x)


# One row per case: id, the cache's shape, dtype, dim_order (None: the default), a function of
# (cache, position) giving the part written, and whether positions only step along an untiled dim.
SHIFT_CASES = [
    ("kv-cache-positions", (8, 64, 256), torch.float32, None, lambda c, t: c[:, t], True),
    ("kv-cache-half-4d", (2, 8, 48, 128), torch.float16, None, lambda c, t: c[:, :, t], True),
    ("batch-entries", (40, 64, 128), torch.float32, None, lambda c, t: c[t], True),
    ("positions-dim-order", (16, 48, 128), torch.float32, [1, 0, 2], lambda c, t: c[:, t], True),
    ("stick-dim-slices", (8, 64, 2048), torch.float32, None, lambda c, t: c[..., 64 * t:64 * t + 64], False),
]


@pytest.mark.parametrize("_, shape, dtype, dim_order, part_of, shifts", SHIFT_CASES, ids=[c[0] for c in SHIFT_CASES])
@pytest.mark.parametrize("direction", ["write", "read"])
def test_copies_at_new_positions_reuse_a_shifted_plan(_, shape, dtype, dim_order, part_of, shifts, direction,
                                                      monkeypatch):
    """Writes into (or reads out of) a buffer at a new position each step, as a KV cache does: bit
    for bit the CPU's, and planned once where the positions step along an untiled dim."""
    view_copy.forget_plans()
    planned, called = [], []
    boxes = view_copy._boxes
    monkeypatch.setattr(view_copy, "_boxes", lambda *a: planned.append(1) or boxes(*a))
    torch_layouts._C._set_view_copier(lambda dst, src: called.append(1) or view_copy.copy_view(dst, src))
    layout = None if dim_order is None else SpyreTensorLayout(shape, dtype, dim_order)
    cache = torch.randn(shape).to(dtype)
    device = cache.to("spyre", device_layout=layout) if layout is not None else cache.to("spyre")
    positions = [0, 3, 1, 7, 2, 6]
    try:
        for t in positions:
            if direction == "write":
                y = torch.randn(part_of(cache, t).shape).to(dtype)
                part_of(device, t).copy_(y.to("spyre"))
                part_of(cache, t).copy_(y)
            else:
                out = torch.empty(part_of(cache, t).shape, dtype=dtype).to("spyre")
                out.copy_(part_of(device, t))
                assert torch.equal(bits(out.cpu()), bits(part_of(cache, t)))
    finally:
        torch_layouts._C._set_view_copier(view_copy.copy_view)
    assert torch.equal(bits(device.cpu()), bits(cache)) and padding_holds_pad_value(device)
    # shifting positions: planned once, and the runtime shifts the kept plan itself after that
    assert (len(planned) == len(called) == 1) if shifts else (len(planned) == len(positions)), (planned, called)
    view_copy.forget_plans()
