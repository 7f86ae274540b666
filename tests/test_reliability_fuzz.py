"""Reliability (issue 10.2): invalid layouts and DMA programs raise, never crash or stray.

* The C++ executor (``_C._run_nests``) gets random nests (huge, negative, overflowing,
  malformed values) on small buffers that are slices of bigger tensors: the guard
  elements around them must stay untouched, a failing call must not have written
  anything, a successful one must equal an element-by-element reference, and every
  in-bounds nest must run (``asan_fuzz.check_run_nests``).
* Explicit layouts with random ``device_size``/``stride_map`` (huge, negative, zero) are
  either rejected with ValueError/TypeError or, when accepted, either refuse the host
  tensor with an allowed exception or move it bit for bit (``asan_fuzz.check_layout``).
* DMA programs for random host views (sizes, strides, offsets, buffer sizes) run by the
  Python executor either raise or move exactly the view's elements.
* Runtime layout records (``_C.BoundLayout``) with random nests, padding fills and view
  address tables only ever raise from allocation, H2D, D2H and view reads/writes, and the
  correct record works exactly (``asan_fuzz.check_bound_layout``).

``test_asan_fuzz_script`` runs the standalone loop (``tests/asan_fuzz.py``) in a
subprocess with a 4 MiB device, so huge layouts meet OutOfMemoryError instead of host
memory; the same script is what runs under AddressSanitizer (see the report / Makefile).
Every bug the fuzzers found has a regression test at the end (reproductions that used to
crash run in subprocesses).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from asan_fuzz import (
    ALLOWED,
    BIG,
    GUARD,
    check_layout,
    check_bound_layout,
    check_run_nests,
    identity_record,
    make_layout,
    random_host,
)
from conftest import as_bits, pad_bits
from hypothesis import given
from hypothesis import strategies as st
from test_reliability_roundtrip import scaled

from torch_layouts import DeviceLayout, _C, dma_program
from torch_layouts.dma.execute import execute

REPO = Path(__file__).resolve().parent.parent
# Guard elements before the Python executor's buffers (which are views with a storage offset).
LEAD = GUARD
FUZZ_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int32, torch.bool)


def values(*small: int) -> st.SearchStrategy[int]:
    """Mostly small values, sometimes a boundary or huge one (int64 limits and beyond)."""
    return st.one_of(*[st.sampled_from(small)] * 4, st.sampled_from(BIG), st.integers(-(2**64), 2**64))


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter at the repo root (crashes stay out of this process)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


# -- the C++ executor --------------------------------------------------------------------------
@st.composite
def nest_lists(draw: st.DrawFn, dst_numel: int, src_numel: int) -> list[object]:
    nests: list[object] = []
    for _ in range(draw(st.integers(0, 3))):
        rank = draw(st.integers(0, 3))
        ranges = tuple(draw(values(0, 1, 1, 2, 3, 5, 8, -1)) for _ in range(rank))
        dst_strides = tuple(draw(values(-2, -1, 0, 1, 1, 2, 3, 8)) for _ in range(rank))
        src_strides = tuple(draw(values(-2, -1, 0, 1, 1, 2, 3, 8)) for _ in range(rank))
        nest: list[object] = [ranges, dst_strides, src_strides,
                              draw(values(0, 1, 3, dst_numel - 1, dst_numel, -1)),
                              draw(values(0, 1, 3, src_numel - 1, src_numel, -1))]
        damage = draw(st.sampled_from(["none"] * 12 + ["drop", "short", "junk"]))
        if damage == "drop":
            nest.pop()
        elif damage == "short" and rank:
            nest[2] = nest[2][:-1]
        elif damage == "junk":
            nest[draw(st.integers(0, 4))] = draw(st.sampled_from([None, 2.5, "x", (1.5,), [None]]))
        nests.append(tuple(nest))
    return nests


@scaled(300)
@given(data=st.data(), dst_numel=st.integers(0, 40), src_numel=st.integers(0, 40),
       element_size=st.sampled_from([1, 2, 4, 8]))
def test_run_nests_fuzz(data: st.DataObject, dst_numel: int, src_numel: int, element_size: int) -> None:
    nests = data.draw(nest_lists(dst_numel, src_numel))
    check_run_nests(nests, dst_numel, src_numel, element_size, seed=dst_numel * 41 + src_numel)


@pytest.mark.parametrize("nests, dst_numel, src_numel, outcome", [
    # one row per rule: (nests, destination and source sizes, "ran"/"raised")
    ([((4,), (1,), (1,), 0, 0)], 4, 4, "ran"),
    ([((4,), (1,), (1,), 1, 0)], 4, 4, "raised"),  # one past the end
    ([((4,), (-1,), (1,), 3, 0)], 4, 4, "ran"),  # negative stride inside the buffer
    ([((4,), (-1,), (1,), 2, 0)], 4, 4, "raised"),  # negative stride below 0
    ([((2, 2), (2, 1), (1, 2), 0, 0)], 4, 4, "ran"),  # a transpose
    ([((3,), (0,), (1,), 0, 0)], 1, 3, "ran"),  # repeated writes to one element
    ([((), (), (), 3, 0)], 4, 1, "ran"),  # a rank-0 nest moves one element
    ([((), (), (), 4, 0)], 4, 1, "raised"),
    ([((0,), (99,), (99,), -99, 99)], 4, 4, "ran"),  # empty nests move nothing
    ([((-1,), (1,), (1,), 0, 0)], 4, 4, "raised"),
    ([((2**62,), (2,), (0,), 0, 0)], 4, 4, "raised"),  # huge ranges
    ([((3,), (2**62,), (0,), -(2**63), 0)], 4, 4, "raised"),  # overflowing addresses
    ([((2**64,), (1,), (1,), 0, 0)], 4, 4, "raised"),  # not an int64
    ([((4,), (1,), (1,), 0, 0), ((1,), (1,), (1,), 9, 0)], 4, 4, "raised"),  # nothing moves if one is bad
    ([((2,), (1,), (1,), 0)], 4, 4, "raised"),  # four fields
    ([((2,), (1, 1), (1,), 0, 0)], 4, 4, "raised"),  # strides and ranges differ in length
    ([((2.0,), (1,), (1,), 0, 0)], 4, 4, "raised"),
])
def test_run_nests_table(nests: list, dst_numel: int, src_numel: int, outcome: str) -> None:
    assert check_run_nests(nests, dst_numel, src_numel, 4) == outcome


@pytest.mark.parametrize("dst, src, message", [
    (torch.zeros(2, 4), torch.zeros(8), "1-D contiguous CPU buffers"),
    (torch.zeros(16)[::2], torch.zeros(8), "1-D contiguous CPU buffers"),
    (torch.zeros(8), torch.zeros(8, dtype=torch.int16), "differ in element size"),
])
def test_run_nests_rejects_bad_buffers(dst: torch.Tensor, src: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _C._run_nests([((1,), (1,), (1,), 0, 0)], dst, src)


def test_run_nests_rejects_device_buffers() -> None:
    device = torch.zeros(8).to("spyre")
    with pytest.raises(ValueError, match="CPU buffers"):
        _C._run_nests([((1,), (1,), (1,), 0, 0)], device, torch.zeros(8))


# -- explicit layouts ---------------------------------------------------------------------------
@st.composite
def explicit_layouts(draw: st.DrawFn) -> tuple[object, tuple[int, ...]]:
    """Random explicit layout values (small, zero, negative, huge) and a small host shape."""
    dtype = draw(st.sampled_from(FUZZ_DTYPES))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 5, 7]), max_size=3)))
    rank = draw(st.integers(1, 4))
    device_size = [draw(values(0, 1, 2, 3, 4, 5, 7, 8, 16)) for _ in range(rank)]
    stride_map = [draw(values(-1, -1, 0, 1, 1, 2, 3, 4, 5, 7, 8, 12, 35)) for _ in range(rank)]
    spyre = draw(st.booleans())
    if spyre and draw(st.booleans()):
        device_size[-1] = 128 // dtype.itemsize
    pad = draw(st.sampled_from([0, 1, True, 2.5, -(2**70), float("nan")]))
    return make_layout(device_size, stride_map, dtype, spyre, pad), shape


@scaled(300)
@given(explicit_layouts(), st.integers(0, 2**16))
def test_explicit_layout_fuzz(case: tuple[DeviceLayout | None, tuple[int, ...]], seed: int) -> None:
    layout, shape = case
    if layout is None:  # rejected by the constructor with ValueError/TypeError
        return
    check_layout(layout, shape, seed, max_bytes=1 << 20)


@pytest.mark.parametrize("device_size, stride_map, error", [
    ([-1, 4], [1, 1], ValueError),
    ([4, 4], [-2, 1], ValueError),
    ([2**62, 4], [4, 1], ValueError),  # too many elements
    ([4], [1, 1], ValueError),
    ([], [], ValueError),
    ([4.0], [1], TypeError),
    ("44", [1, 1], TypeError),
    ([True], [1], TypeError),
])
def test_explicit_layout_rejects(device_size: object, stride_map: object, error: type) -> None:
    with pytest.raises(error, match="device_size|stride_map"):
        DeviceLayout(device_size, stride_map, torch.float32)


def test_huge_layout_is_out_of_memory_not_host_memory() -> None:
    """A valid layout bigger than the device: OutOfMemoryError, and the device stays usable."""
    layout = DeviceLayout([2**40, 3], [3, 1], torch.float32)
    before = torch.spyre.memory_allocated()
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        torch.ones(2, 3).to("spyre", device_layout=layout)
    assert torch.spyre.memory_allocated() == before
    assert torch.equal(torch.ones(2, 3).to("spyre").cpu(), torch.ones(2, 3))


# -- DMA programs on host buffers ----------------------------------------------------------------
@st.composite
def program_cases(draw: st.DrawFn) -> tuple:
    dtype = draw(st.sampled_from(FUZZ_DTYPES))
    rank = draw(st.integers(1, 3))
    size = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    layout = DeviceLayout(list(size), [-1 if n == 1 else math.prod(size[d + 1:]) for d, n in enumerate(size)],
                          dtype, pad_value=draw(st.sampled_from([0, 1])))
    host_size = tuple(draw(st.sampled_from([n, n, n + 1, 0, -1, 2**40])) for n in size)
    host_stride = tuple(draw(values(0, 1, 2, 3, 7, -1)) for _ in size)
    host_offset = draw(values(0, 0, 1, 5, -1))
    host_numel = draw(st.integers(0, 60))
    return layout, host_size, host_stride, host_offset, host_numel


@scaled(200)
@given(program_cases(), st.integers(0, 2**16))
def test_dma_program_fuzz(case: tuple, seed: int) -> None:
    """Programs for random host views: invalid ones raise; valid ones move exactly the view."""
    layout, size, stride, offset, host_numel = case
    try:
        h2d = dma_program(layout, size, stride, offset, "h2d")
        d2h = dma_program(layout, size, stride, offset, "d2h")
    except (ValueError, TypeError, IndexError):
        return
    dtype, n_dev = layout.dtype, layout.device_numel
    host = random_host((LEAD + host_numel + GUARD,), dtype, seed)
    device = random_host((LEAD + n_dev + GUARD,), dtype, seed + 1)
    host_before, device_before = host.clone(), device.clone()
    inner_host, inner_device = host.narrow(0, LEAD, host_numel), device.narrow(0, LEAD, n_dev)
    try:
        execute(h2d, inner_host, inner_device)
    except ALLOWED:
        assert torch.equal(as_bits(device), as_bits(device_before)) and torch.equal(as_bits(host), as_bits(host_before))
        return
    assert torch.equal(as_bits(host), as_bits(host_before)), "H2D changed the host buffer"
    outside = torch.ones(device.numel(), dtype=torch.bool)
    outside[LEAD:LEAD + n_dev] = False
    assert torch.equal(as_bits(device)[outside], as_bits(device_before)[outside]), "H2D wrote outside the device buffer"
    if math.prod(size) > 4096:  # a broadcast (stride-0) view of many elements: guards checked, that's all
        return
    target = random_host((LEAD + host_numel + GUARD,), dtype, seed + 2)
    expected = target.clone()
    if math.prod(size) == 0:  # nothing real: all padding, and D2H writes nothing
        assert bool((as_bits(inner_device) == pad_bits(layout.pad_value, dtype)).all())
        execute(d2h, target.narrow(0, LEAD, host_numel), inner_device)
        assert torch.equal(as_bits(target), as_bits(expected))
        return
    stride = tuple(0 if n == 1 else s for n, s in zip(size, stride))  # a size-1 dim's stride is never used
    host_map = layout.host_map(size, stride)
    real = host_map >= 0
    view = host.as_strided(size, stride, offset + LEAD).reshape(-1)  # host: storage offset 0
    assert torch.equal(as_bits(inner_device)[real], as_bits(view)[host_map[real]])
    assert bool((as_bits(inner_device)[~real] == pad_bits(layout.pad_value, dtype)).all())
    positions = torch.arange(host_numel).as_strided(size, stride, offset).reshape(-1) + LEAD
    expected[positions] = view  # overlapping views write one value several times
    execute(d2h, target.narrow(0, LEAD, host_numel), inner_device)
    assert torch.equal(as_bits(target), as_bits(expected)), "D2H wrote outside the view or lost an element"


# -- runtime layout records ----------------------------------------------------------------------
@st.composite
def addresses(draw: st.DrawFn) -> object:
    def pairs() -> list[tuple[int, int]]:
        return draw(st.lists(st.tuples(values(0, 0, 1, -1), values(1, 1, 2, 3, -1, 0)), max_size=2))

    groups = draw(st.lists(st.tuples(st.lists(values(0, 0, 1), max_size=2), st.builds(pairs)), max_size=2))
    return (pairs(), groups, pairs())


@st.composite
def records(draw: st.DrawFn) -> tuple[int, tuple]:
    """A [numel] buffer's record: the correct one with parts replaced by random nests, padding
    fills or view address tables."""
    numel = draw(st.integers(0, 12))
    record = list(identity_record(numel))
    nests = nest_lists(numel, numel)
    fills = nests.map(lambda ns: [n[:2] + n[3:4] for n in ns if isinstance(n, tuple) and len(n) == 5])
    for part, strategy in enumerate((nests, nests, fills, addresses())):
        if draw(st.booleans()):
            record[part] = draw(strategy)
    return numel, tuple(record)


@scaled(150)
@given(records())
def test_bound_layout_record_fuzz(case: tuple[int, tuple]) -> None:
    """Random H2D/D2H nests, padding fills and address tables in a runtime layout record:
    allocation, copies and view reads/writes either work or raise an allowed exception."""
    numel, record = case
    check_bound_layout(numel, record)


@pytest.mark.parametrize("numel", [0, 1, 7])
def test_correct_bound_layout_record_works(numel: int) -> None:
    """The fuzzer's baseline record is right (and still matches _C.BoundLayout's signature)."""
    assert check_bound_layout(numel, identity_record(numel)) == "ran"


# -- the standalone loop, with a small device ------------------------------------------------------
def test_asan_fuzz_script() -> None:
    result = subprocess.run([sys.executable, str(REPO / "tests" / "asan_fuzz.py"), "--iterations", "400",
                             "--seed", "7"], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TORCH_LAYOUTS_DEVICE_MEMORY": "4MiB"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nests ran" in result.stdout and "layout ran" in result.stdout


@pytest.mark.long
def test_asan_fuzz_script_long() -> None:
    result = subprocess.run([sys.executable, str(REPO / "tests" / "asan_fuzz.py"), "--iterations", "20000",
                             "--seed", "11"], cwd=REPO, capture_output=True, text=True, timeout=1200,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TORCH_LAYOUTS_DEVICE_MEMORY": "4MiB"})
    assert result.returncode == 0, result.stdout + result.stderr


# -- regression tests of the bugs the fuzzers found ------------------------------------------------
def test_nest_ending_at_int64_max() -> None:
    result = run_python("""
        import torch, torch_layouts
        big = torch.full((24,), -7.0)
        try:
            torch_layouts._C._run_nests([((2,), (2**62,), (0,), 2**62 - 1, 0)], big.narrow(0, 8, 8), torch.ones(8))
        except IndexError:
            pass
        assert bool((big == -7).all()), "wrote outside the destination"
        try:
            torch_layouts._C._run_nests([((), (), (), 2**63 - 1, 0)], torch.zeros(4), torch.ones(4))
        except IndexError:
            print("clean")
    """)
    assert result.returncode == 0 and "clean" in result.stdout, result.stderr[-2000:]


@pytest.mark.parametrize("device_size, stride_map, host_size", [
    ([0], [-1], ()),
    ([0], [-1], (1, 1)),
    ([2, 0], [1, -1], (2,)),
])
def test_empty_device_layout_rejects_nonempty_host(device_size: list[int], stride_map: list[int],
                                                   host_size: tuple[int, ...]) -> None:
    layout = DeviceLayout(device_size, stride_map, torch.float32)
    with pytest.raises(ValueError, match="cannot hold"):
        layout.resolve(host_size)


def test_host_map_with_huge_strides() -> None:
    with pytest.raises(ValueError, match="stride beyond"):
        DeviceLayout([3, 2], [2**62, 1], torch.float32)
    layout = DeviceLayout([3, 2], [2**62 - 1, 1], torch.float32)
    expected = [0 if index is None else 1 for index in map(layout.host_index, range(6), [(2,)] * 6)]
    assert layout.real_mask((2,)).long().tolist() == expected


def test_allocation_near_int64_max_bytes() -> None:
    result = run_python("""
        import torch, torch_layouts
        layout = torch_layouts.DeviceLayout([2**62 - 1], [1], torch.bfloat16)
        try:
            torch.ones(3, dtype=torch.bfloat16).to("spyre", device_layout=layout)
        except torch.OutOfMemoryError as err:
            print("clean", err)
    """)
    assert result.returncode == 0 and "clean" in result.stdout, result.stderr[-2000:]


def test_layout_beyond_int64_bytes() -> None:
    layout = DeviceLayout([2**62 - 1], [1], torch.float32)
    with pytest.raises(torch.OutOfMemoryError):
        torch.ones(3).to("spyre", device_layout=layout)


def test_python_executor_ignores_storage_offset() -> None:
    layout = DeviceLayout([4], [1], torch.float32)
    device = torch.full((8,), -7.0)
    execute(dma_program(layout, (4,), direction="h2d"), torch.arange(4.0), device.narrow(0, 4, 4))
    assert device.tolist() == [-7.0] * 4 + [0.0, 1.0, 2.0, 3.0]


def test_bound_layout_record_rejects_overflowing_device_numel() -> None:
    layout = DeviceLayout([4], [1], torch.float32)
    nests, _, fills, address = identity_record(4)
    with pytest.raises(ValueError):
        _C.BoundLayout(layout, [4], [1], torch.float32, 2**62, 16, [((1000,), (1,), (0,), 0, 0)], nests, fills, 0.0,
                      False, address)


@pytest.mark.parametrize("address", [
    ([(0, 0)], [([0], [(1, 1)])]),  # zero host stride
    ([(0, 1)], [([0], [(0, 1)])]),  # zero digit step
    ([(5, 1)], [([0], [(1, 1)])]),  # host dim out of range
])
def test_address_table_is_validated(address: tuple) -> None:
    result = run_python(f"""
        import torch, torch_layouts
        from torch_layouts import DeviceLayout, _C
        nest = [((4,), (1,), (1,), 0, 0)]
        layout = DeviceLayout([4], [1], torch.float32)
        try:
            info = _C.BoundLayout(layout, [4], [1], torch.float32, 4, 16, nest, nest, [], 0.0, False, {address!r})
            t = _C._empty_with_layout(info, 0)
            t[1::2].cpu()
        except ValueError:
            print("rejected")
    """)
    assert result.returncode == 0 and "rejected" in result.stdout, (result.returncode, result.stderr[-1500:])
