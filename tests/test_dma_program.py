"""DMA programs: Spyre's documented program, nest structure, padding, strided hosts, JSON, execution, relayout."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from torch_layouts import DataFormats, DeviceLayout, SpyreTensorLayout, dma_program
from torch_layouts.dma import Nest, execute
from torch_layouts.dma.execute import run_transfers
from torch_layouts.dma.relayout import relayout_transfers

F16 = torch.float16
ROUND_TRIP_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int32, torch.bool,
                     torch.float8_e5m2, torch.int64)
PROPERTY = settings(max_examples=150, deadline=None)

SEED_CODE = """\
for i in range(4):
  for j in range(1024):
    for k in range(64):
      device[i*65536 + j*64 + k] = host[j*256 + i*64 + k]"""


def _code(prog) -> str:
    return "\n".join(line for line in str(prog).splitlines() if not line.startswith("#"))


def test_seed_program_exactly():
    stl = SpyreTensorLayout((1024, 256), F16)
    prog = torch_layouts.dma_program(stl, (1024, 256))
    assert prog.nests == (Nest((4, 1024, 64), (65536, 64, 1), (64, 256, 1), 0, 0),)
    (nest,) = prog.nests
    assert (nest.ranges, nest.device_strides, nest.host_strides) == ((4, 1024, 64), (65536, 64, 1), (64, 256, 1))
    assert (nest.device_offset, nest.host_offset) == (0, 0)
    assert _code(prog) == SEED_CODE and prog.padding == ()
    back = dma_program(stl, (1024, 256), direction="d2h")
    assert back.nests == prog.nests
    assert _code(back) == SEED_CODE.replace(
        "device[i*65536 + j*64 + k] = host[j*256 + i*64 + k]", "host[j*256 + i*64 + k] = device[i*65536 + j*64 + k]")


# (layout, host size, host stride, expected nests), nests written by hand from the layout
NESTS = [
    ("(5, 100, 150): full sticks, then 22-element remainders at offset 2 tiles",
     SpyreTensorLayout((5, 100, 150), F16), (5, 100, 150), None,
     [Nest((100, 2, 5, 64), (960, 320, 64, 1), (150, 64, 15000, 1), 0, 0),
      Nest((100, 5, 22), (960, 64, 1), (150, 15000, 1), 640, 128)]),
    ("(5, 100, 150) dim_order [1, 0, 2]", SpyreTensorLayout((5, 100, 150), F16, [1, 0, 2]), (5, 100, 150), None,
     [Nest((5, 2, 100, 64), (19200, 6400, 64, 1), (15000, 64, 150, 1), 0, 0),
      Nest((5, 100, 22), (19200, 64, 1), (15000, 150, 1), 12800, 128)]),
    ("contiguous rows merge into one loop", DeviceLayout([3, 4], [4, 1], F16), (3, 4), None,
     [Nest((12,), (1,), (1,), 0, 0)]),
    ("three dims merge", DeviceLayout([2, 3, 4], [12, 4, 1], F16), (2, 3, 4), None, [Nest((24,), (1,), (1,), 0, 0)]),
    ("stick-wide rows merge", SpyreTensorLayout((3, 64), F16), (3, 64), None, [Nest((192,), (1,), (1,), 0, 0)]),
    ("tiles do not merge", SpyreTensorLayout((4, 128), F16), (4, 128), None,
     [Nest((2, 4, 64), (256, 64, 1), (64, 128, 1), 0, 0)]),
    ("transposed", DeviceLayout([4, 3], [1, 4], F16), (3, 4), None, [Nest((4, 3), (3, 1), (1, 4), 0, 0)]),
    ("broadcast copies", DeviceLayout([2, 3, 4], [0, 4, 1], F16), (3, 4), None, [Nest((2, 12), (12, 1), (0, 1), 0, 0)]),
    ("sparse", SpyreTensorLayout((2, 3), F16, [0, 1, -1]), (2, 3), None, [Nest((3, 2), (128, 64), (1, 3), 0, 0)]),
    ("12 + 8 row blocks", DeviceLayout([2, 12, 1, 2, 64], [720, 60, 64, 1200, 1], F16), (40, 60), None,
     [Nest((12, 2, 60), (128, 64, 1), (60, 1200, 1), 0, 0), Nest((8, 2, 60), (128, 64, 1), (60, 1200, 1), 1536, 720)]),
    ("permuted host", DeviceLayout([3, 8], [5, 1], F16), (5, 3), (1, 5), [Nest((3, 5), (8, 1), (5, 1), 0, 0)]),
    ("sliced host", DeviceLayout([3, 2, 2], [7, 2, 1], F16), (3, 4), (7, 1), [Nest((3, 4), (4, 1), (7, 1), 0, 0)]),
    ("zero-size host", DeviceLayout([2, 4], [4, 1], F16), (0, 4), None, []),
]


@pytest.mark.parametrize("name, layout, size, stride, nests", NESTS, ids=[n[0] for n in NESTS])
def test_nests(name, layout, size, stride, nests):
    assert list(dma_program(layout, size, stride).nests) == nests


def test_remainder_nests_print_their_offsets():
    code = _code(dma_program(SpyreTensorLayout((5, 100, 150), F16)))
    assert "      device[640 + i*960 + j*64 + k] = host[128 + j*15000 + i*150 + k]" in code.splitlines()


def test_program_is_cached():
    a = dma_program(SpyreTensorLayout((1024, 256), F16), [1024, 256])
    assert a is dma_program(SpyreTensorLayout((1024, 256), F16), (1024, 256))
    assert a is not dma_program(SpyreTensorLayout((1024, 256), F16), (1024, 256), direction="d2h")


def test_to_json():
    layout = SpyreTensorLayout((5, 100, 150), F16, pad_value=-2)
    for direction in ("h2d", "d2h"):
        prog = dma_program(layout, direction=direction)
        doc = json.loads(prog.to_json())
        assert {"direction", "dtype", "element_size", "layout", "source", "destination", "nests",
                "padding"} <= doc.keys()
        assert (doc["direction"], doc["dtype"], doc["element_size"]) == (direction.upper(), "float16", 2)
        assert doc["layout"]["device_size"] == [100, 3, 5, 64] and doc["layout"]["text"] == str(layout)
        host, dev = ("source", "destination") if direction == "h2d" else ("destination", "source")
        assert doc[host] == {"size": [5, 100, 150], "stride": [15000, 150, 1], "offset": 0}
        assert doc[dev]["numel"] == 96000 and doc[dev]["nbytes"] == 192000
        nests = [Nest(tuple(n["sizes"]), tuple(n[dev]["strides"]), tuple(n[host]["strides"]), n[dev]["offset"],
                      n[host]["offset"]) for n in doc["nests"]]
        assert nests == list(prog.nests)
        fills = [(tuple(f["sizes"]), tuple(f["strides"]), f["offset"], f["value"]) for f in doc["padding"]]
        assert fills == [(tuple(f.ranges), tuple(f.strides), f.offset, -2.0) for f in prog.padding]
        assert bool(fills) == (direction == "h2d")


# -- counting buffers: every real position written once, padding never moved --------------------
def _addresses(ranges, strides, offset) -> torch.Tensor:
    out = torch.tensor([offset])
    for r, s in zip(ranges, strides):
        out = (out[:, None] + torch.arange(r) * s).reshape(-1)
    return out


def _counts(nests, numel: int, side: str) -> torch.Tensor:
    addrs = [_addresses(n.ranges, getattr(n, f"{side}_strides"), getattr(n, f"{side}_offset")) for n in nests]
    return torch.bincount(torch.cat(addrs) if addrs else torch.zeros(0, dtype=torch.int64), minlength=numel)


def _check_nest_shape(prog) -> None:
    """Loops ordered by decreasing device stride, no unit loops, no two adjacent loops that could merge."""
    for n in prog.nests:
        assert len(n.ranges) == len(n.device_strides) == len(n.host_strides)
        assert all(a > b for a, b in zip(n.device_strides, n.device_strides[1:]))
        assert n.ranges == (1,) or all(r > 1 for r in n.ranges)
        for i in range(len(n.ranges) - 1):
            r = n.ranges[i + 1]
            runs_on = n.device_strides[i] == n.device_strides[i + 1] * r, n.host_strides[i] == n.host_strides[i + 1] * r
            assert not all(runs_on)


def _check_coverage(layout, size, stride, offset, storage_numel, copies=1) -> None:
    real = layout.real_mask(size, stride).long()
    view = torch.zeros(storage_numel, dtype=torch.int64)
    view[torch.arange(storage_numel).as_strided(size, stride, offset).reshape(-1)] = 1
    h2d = dma_program(layout, size, stride, offset, "h2d")
    d2h = dma_program(layout, size, stride, offset, "d2h")
    _check_nest_shape(h2d)
    _check_nest_shape(d2h)
    assert torch.equal(_counts(h2d.nests, layout.device_numel, "device"), real)
    fills = torch.bincount(torch.cat([_addresses(f.ranges, f.strides, f.offset) for f in h2d.padding] or
                                     [torch.zeros(0, dtype=torch.int64)]), minlength=layout.device_numel)
    assert torch.equal(fills, 1 - real)
    assert torch.equal(_counts(h2d.nests, storage_numel, "host"), view * copies)
    assert torch.equal(_counts(d2h.nests, storage_numel, "host"), view)
    assert (_counts(d2h.nests, layout.device_numel, "device") <= real).all()
    assert d2h.padding == () and h2d.elements == real.sum() and d2h.elements == math.prod(size)


@pytest.mark.parametrize("name, layout, size, stride, nests", NESTS, ids=[n[0] for n in NESTS])
def test_table_coverage(name, layout, size, stride, nests):
    stride = stride or tuple(math.prod(size[d + 1:]) for d in range(len(size)))
    storage = sum((n - 1) * s for n, s in zip(size, stride)) + 1 if math.prod(size) else 0
    _check_coverage(layout, size, stride, 0, storage, math.prod(n for n, m in zip(layout.device_size,
                                                                                   layout.stride_map) if m == 0))


@PROPERTY
@given(data=st.data())
def test_coverage_random_layouts(helpers, data):
    c = data.draw(helpers.layout_cases())
    _check_coverage(c.layout(), c.host_size, c.host_stride, c.host_offset, c.storage_numel, c.copies)


@PROPERTY
@given(data=st.data())
def test_coverage_random_spyre(helpers, data):
    c = data.draw(helpers.spyre_cases())
    _check_coverage(c.layout(), c.host_size, c.host_stride, c.host_offset, c.storage_numel)
    assert len(dma_program(c.layout(), c.host_size, c.host_stride).nests) <= 2  # bulk copies, not per element


# -- execution, bit for bit ---------------------------------------------------------------------
def _round_trip(helpers, layout, case, expected_device: torch.Tensor, seed: int) -> None:
    """H2D into stale device memory equals ``expected_device``; D2H into stale storage restores the view."""
    bits = helpers.as_bits
    storage = helpers.random_bits(case.storage_numel, layout.dtype, seed)
    device = helpers.random_bits(layout.device_numel, layout.dtype, seed + 1)
    execute(dma_program(layout, case.host_size, case.host_stride, case.host_offset, "h2d"), storage, device)
    assert torch.equal(bits(device), expected_device(bits(storage)))
    out = helpers.random_bits(case.storage_numel, layout.dtype, seed + 2)
    expected_out = bits(out).clone()
    view = torch.arange(case.storage_numel).as_strided(case.host_size, case.host_stride, case.host_offset)
    expected_out[view.reshape(-1)] = bits(storage)[view.reshape(-1)]
    execute(dma_program(layout, case.host_size, case.host_stride, case.host_offset, "d2h"), out, device)
    assert torch.equal(bits(out), expected_out)


@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_round_trip_spyre(helpers, data, seed):
    """Device memory matches the documented Spyre index formula; padding holds the pad value."""
    case = data.draw(helpers.spyre_cases(dtypes=ROUND_TRIP_DTYPES))
    layout = case.layout()
    assert layout.device_size == case.device_size()

    def expected(storage_bits):
        dev = torch.full((layout.device_numel,), helpers.pad_bits(case.pad_value, case.dtype), dtype=storage_bits.dtype)
        dev[case.device_offsets()] = case.host_values(storage_bits)
        return dev

    _round_trip(helpers, layout, case, expected, seed)


@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_round_trip_random_layouts(helpers, data, seed):
    case = data.draw(helpers.layout_cases(dtypes=ROUND_TRIP_DTYPES))
    host_map = case.expected_host_map()
    real = host_map >= 0

    def expected(storage_bits):
        dev = torch.full((host_map.numel(),), helpers.pad_bits(case.pad_value, case.dtype), dtype=storage_bits.dtype)
        dev[real] = storage_bits[case.storage_offsets(host_map[real])]
        return dev

    _round_trip(helpers, case.layout(), case, expected, seed)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_printed_code_runs(helpers, data, seed):
    """``str(program)`` is Python: running it moves the same elements as the executor."""
    case = data.draw(helpers.layout_cases(dtypes=(torch.int16, torch.float32)))
    layout = case.layout()
    storage = helpers.random_bits(case.storage_numel, case.dtype, seed)
    device = torch.zeros(layout.device_numel, dtype=case.dtype)
    prog = dma_program(layout, case.host_size, case.host_stride, case.host_offset)
    execute(prog, storage, device)
    scope = {"host": helpers.as_bits(storage).tolist(), "device": [None] * layout.device_numel}
    exec(str(prog), scope)  # noqa: S102 - the program text is the thing under test
    real = layout.real_mask(case.host_size, case.host_stride)
    want = [b if r else case.pad_value for b, r in zip(helpers.as_bits(device).tolist(), real.tolist())]
    assert scope["device"] == want
    back = {"host": [None] * case.storage_numel, "device": helpers.as_bits(device).tolist()}
    exec(str(dma_program(layout, case.host_size, case.host_stride, case.host_offset, "d2h")), back)
    view = torch.arange(case.storage_numel).as_strided(case.host_size, case.host_stride, case.host_offset)
    assert all(back["host"][i] == scope["host"][i] for i in view.reshape(-1).tolist())


@pytest.mark.parametrize("pad, dtype", [(float("nan"), torch.float32), (-0.0, F16), (True, torch.bool),
                                        (-128, torch.int8)])
def test_special_pad_values(helpers, pad, dtype):
    layout = DeviceLayout([2, 5], [3, 1], dtype, pad_value=pad)
    device = torch.zeros(10, dtype=dtype)
    execute(dma_program(layout, (2, 3)), helpers.random_bits(6, dtype, 0), device)
    pad_bits = helpers.as_bits(device).view(2, 5)[:, 3:]
    assert (pad_bits == helpers.pad_bits(pad, dtype)).all()


def test_zero_size_hosts():
    layout = DeviceLayout([2, 4], [4, 1], F16, pad_value=1)
    device = torch.zeros(8, dtype=F16)
    execute(dma_program(layout, (0, 4)), torch.empty(0, dtype=F16), device)
    assert torch.equal(device, torch.ones(8, dtype=F16))
    stl = SpyreTensorLayout((0, 5), F16)
    assert stl.device_numel == 0 and dma_program(stl).nests == ()
    execute(dma_program(stl), torch.empty(0, dtype=F16), torch.empty(0, dtype=F16))


# -- device-to-device relayout ---------------------------------------------------------------------
def _check_relayout(helpers, src, dst, size, seed) -> bool:
    """None, or nests that fill every real position of ``dst`` and leave its padding alone."""
    transfers = relayout_transfers(src, dst, size)
    if transfers is None:
        return False
    host = helpers.random_bits(math.prod(size), src.dtype, seed)
    src_buf = torch.empty(src.device_numel, dtype=src.dtype)
    want = torch.empty(dst.device_numel, dtype=dst.dtype)
    execute(dma_program(src, size), host, src_buf)
    execute(dma_program(dst, size), host, want)
    got = helpers.random_bits(dst.device_numel, dst.dtype, seed + 1)
    stale = helpers.as_bits(got).clone()
    run_transfers(transfers, got, src_buf)
    real = dst.real_mask(size)
    assert torch.equal(helpers.as_bits(got)[real], helpers.as_bits(want)[real])
    assert torch.equal(helpers.as_bits(got)[~real], stale[~real])
    return True


@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_relayout_between_spyre_dim_orders(helpers, data, seed):
    a = data.draw(helpers.spyre_cases(strided=False, dtypes=ROUND_TRIP_DTYPES))
    b = data.draw(helpers.spyre_cases(strided=False, dtypes=(a.dtype,), host_size=a.host_size))
    assert _check_relayout(helpers, a.layout(), b.layout(), a.host_size, seed)


@PROPERTY
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_relayout_arbitrary_pairs(helpers, data, seed):
    a = data.draw(helpers.layout_cases(strided=False, dtypes=ROUND_TRIP_DTYPES))
    b = data.draw(helpers.layout_cases(strided=False, dtypes=(a.dtype,), host_size=a.host_size))
    _check_relayout(helpers, a.layout(), b.layout(), a.host_size, seed)


TILED_12_8 = DeviceLayout([2, 12, 1, 2, 64], [720, 60, 64, 1200, 1], F16)


@pytest.mark.parametrize("src, dst, size, direct", [
    (DeviceLayout([3, 4], [4, 1], F16), DeviceLayout([2, 3, 2], [2, 4, 1], F16), (3, 4), True),
    (SpyreTensorLayout((5, 100, 150), F16), SpyreTensorLayout((5, 100, 150), F16, [1, 0, 2]), (5, 100, 150), True),
    (SpyreTensorLayout((6, 70), F16), SpyreTensorLayout((6, 70), F16, [1, 0]), (6, 70), True),
    (DeviceLayout([40, 60], [60, 1], F16), TILED_12_8, (40, 60), True),  # the row-major side walks one stride
    # 12 + 8 blocks do not nest, but the row-major side holds the tensor in host order: the tiled
    # side's own DMA program, between the buffers
    (TILED_12_8, DeviceLayout([40, 60], [60, 1], F16), (40, 60), True),
    (DeviceLayout([40, 60], [60, 1], F16), DeviceLayout([38, 64], [64, 1], F16), (40, 60), True),
    (TILED_12_8, DeviceLayout([38, 64], [64, 1], F16), (40, 60), False),  # neither nests nor is in host order
    (DeviceLayout([38, 64], [64, 1], F16), TILED_12_8, (40, 60), False),
])
def test_relayout_examples(helpers, src, dst, size, direct):
    assert _check_relayout(helpers, src, dst, size, 7) == direct


# -- bad input --------------------------------------------------------------------------------------
def test_executor_rejects_bad_buffers():
    prog = dma_program(SpyreTensorLayout((3, 70), F16))
    host, device = torch.zeros(210, dtype=F16), torch.zeros(384, dtype=F16)
    for h, d, message in [
        (host, torch.zeros(383, dtype=F16), r"device buffer has 383 elements, .* needs 384"),
        (host.view(3, 70), device, r"host buffer must be a 1-D contiguous CPU tensor, got size \[3, 70\]"),
        (host, device.view(2, 192), r"device buffer must be a 1-D contiguous CPU tensor"),
        (torch.zeros(420)[::2], device, r"host buffer must be a 1-D contiguous"),
        (torch.zeros(210), device, r"host buffer has 4-byte elements, the program moves 2-byte elements"),
    ]:
        with pytest.raises(ValueError, match=message):
            execute(prog, h, d)


def test_executor_checks_bounds_before_moving_anything():
    layout = DeviceLayout([3, 4], [7, 1], torch.int32)
    prog = dma_program(layout, (3, 4), (7, 1), host_offset=9)
    device = torch.full((12,), -1, dtype=torch.int32)
    with pytest.raises(IndexError, match=r"touches elements \[9, 27\) outside its buffer of 20 elements"):
        execute(prog, torch.zeros(20, dtype=torch.int32), device)
    assert (device == -1).all()


@pytest.mark.parametrize("kwargs, message", [
    ({"direction": "up"}, r"direction must be 'h2d' or 'd2h', got 'up'"),
    ({"host_offset": -1}, r"host_offset must be a non-negative int, got -1"),
    ({"host_offset": 1.0}, r"host_offset must be a non-negative int, got 1\.0"),
    ({"host_size": (3, 5)}, r"cannot hold a host tensor of size \[3, 5\]"),
    ({"host_size": (3, -5)}, r"host_size\[1\]=-5"),
])
def test_dma_program_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dma_program(DeviceLayout([3, 4], [4, 1], F16), **({"host_size": (3, 4)} | kwargs))


def test_explicit_layout_program():
    stl = SpyreTensorLayout([38, 64], [64, 1], DataFormats.SEN169_FP16)
    x = torch.randn(40, 60).to(F16)
    device = torch.empty(2432, dtype=F16)
    execute(dma_program(stl, (40, 60)), x.view(-1), device)
    assert torch.equal(device[:2400], x.view(-1)) and (device[2400:] == 0).all()
