"""oneDNN memory formats: every tag against an independent offset formula, on the device.

The reference formulas are written out here from oneDNN's "Understanding Memory Formats"
guide and its ``blocking_desc_t`` (``offset = sum_d (i_d / B_d) * strides[d]`` plus the place
inside the inner blocks, dims padded up to whole blocks with zeros), e.g. for nChw8c
``offset(n, c, h, w) = n*Cp*H*W + (c/8)*H*W*8 + h*W*8 + w*8 + c%8`` with ``Cp = ceil(C/8)*8``.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable

import pytest
import torch
from conftest import as_bits
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from torch_layouts import SpyreTensorLayout, _C, htp, mace, onednn, tensorrt
from torch_layouts.cli import main
from torch_layouts.cli.specs import UsageError, build_layout


def rup(n: int, b: int) -> int:
    return -(-n // b) * b


# -- the reference: one offset formula per tag, (index, size) -> device offset; and the padded size --------
def nchw(i, s):
    (n, c, h, w), (_, C, H, W) = i, s
    return ((n * C + c) * H + h) * W + w


def nhwc(i, s):
    (n, c, h, w), (_, C, H, W) = i, s
    return ((n * H + h) * W + w) * C + c


def ncdhw(i, s):
    (n, c, d, h, w), (_, C, D, H, W) = i, s
    return (((n * C + c) * D + d) * H + h) * W + w


def ndhwc(i, s):
    (n, c, d, h, w), (_, C, D, H, W) = i, s
    return (((n * D + d) * H + h) * W + w) * C + c


def nChwXc(b: int) -> Callable:
    def offset(i, s):
        (n, c, h, w), (_, C, H, W) = i, s
        return n * rup(C, b) * H * W + (c // b) * H * W * b + h * W * b + w * b + c % b
    return offset


def nCdhwXc(b: int) -> Callable:
    def offset(i, s):
        (n, c, d, h, w), (_, C, D, H, W) = i, s
        return n * rup(C, b) * D * H * W + (c // b) * D * H * W * b + (d * H * W + h * W + w) * b + c % b
    return offset


def OIhwXiXo(b: int) -> Callable:  # noqa: N802 - oneDNN's tag
    def offset(i, s):
        (o, i_, h, w), (_, I, H, W) = i, s
        return ((o // b) * (rup(I, b) // b) + i_ // b) * H * W * b * b + (h * W + w) * b * b + (i_ % b) * b + o % b
    return offset


def OIhw4i16o4i(i, s):  # noqa: N802
    (o, i_, h, w), (_, I, H, W) = i, s
    inner = ((i_ % 16) // 4) * 64 + (o % 16) * 4 + i_ % 4
    return ((o // 16) * (rup(I, 16) // 16) + i_ // 16) * H * W * 256 + (h * W + w) * 256 + inner


def gOIhw16i16o(i, s):  # noqa: N802
    (g, o, i_, h, w), (_, O, I, H, W) = i, s
    blocks = (g * (rup(O, 16) // 16) + o // 16) * (rup(I, 16) // 16) + i_ // 16
    return blocks * H * W * 256 + (h * W + w) * 256 + (i_ % 16) * 16 + o % 16


def Ohwi16o(i, s):  # noqa: N802
    (o, i_, h, w), (_, I, H, W) = i, s
    return (o // 16) * H * W * I * 16 + ((h * W + w) * I + i_) * 16 + o % 16


def hwio(i, s):
    (o, i_, h, w), (O, I, _, W) = i, s
    return ((h * W + w) * I + i_) * O + o


def plain(i, s):
    return sum(x * math.prod(s[k + 1:]) for k, x in enumerate(i))


def ba(i, s):
    return i[1] * s[0] + i[0]


# (tag, host size, offset formula, padded sizes per dim)
TAGS = [
    ("nchw", (2, 5, 3, 4), nchw, None),
    ("nhwc", (2, 5, 3, 4), nhwc, None),
    ("ncdhw", (2, 3, 2, 3, 4), ncdhw, None),
    ("ndhwc", (2, 3, 2, 3, 4), ndhwc, None),
    ("nc", (3, 7), plain, None),
    ("cn", (3, 7), ba, None),
    ("x", (11,), plain, None),
    ("ab", (4, 6), plain, None),
    ("ba", (4, 6), ba, None),
    ("acdb", (2, 5, 3, 4), nhwc, None),
    ("oihw", (6, 5, 3, 3), nchw, None),
    ("hwio", (6, 5, 3, 3), hwio, None),
    ("nChw16c", (2, 20, 3, 4), nChwXc(16), (2, 32, 3, 4)),
    ("nChw16c", (1, 3, 2, 5), nChwXc(16), (1, 16, 2, 5)),
    ("aBcd16b", (2, 20, 3, 4), nChwXc(16), (2, 32, 3, 4)),
    ("nChw8c", (2, 13, 3, 5), nChwXc(8), (2, 16, 3, 5)),
    ("nChw4c", (3, 6, 2, 3), nChwXc(4), (3, 8, 2, 3)),
    ("nCdhw16c", (2, 18, 2, 3, 2), nCdhwXc(16), (2, 32, 2, 3, 2)),
    ("nCdhw8c", (1, 9, 3, 2, 3), nCdhwXc(8), (1, 16, 3, 2, 3)),
    ("OIhw8i8o", (10, 12, 3, 3), OIhwXiXo(8), (16, 16, 3, 3)),
    ("OIhw16i16o", (20, 17, 3, 2), OIhwXiXo(16), (32, 32, 3, 2)),
    ("OIhw4i16o4i", (18, 21, 2, 3), OIhw4i16o4i, (32, 32, 2, 3)),
    ("OIhw4i16o4i", (5, 3, 1, 1), OIhw4i16o4i, (16, 16, 1, 1)),
    ("gOIhw16i16o", (2, 17, 5, 2, 3), gOIhw16i16o, (2, 32, 16, 2, 3)),
    ("Ohwi16o", (20, 5, 3, 2), Ohwi16o, (32, 5, 3, 2)),
]
TAG_IDS = [f"{tag}-{'x'.join(map(str, size))}" for tag, size, _, _ in TAGS]


def reference_memory(x: torch.Tensor, formula: Callable, total: int) -> torch.Tensor:
    """Device memory from the formula alone: every element at its offset, zeros elsewhere."""
    memory = torch.zeros(total, dtype=x.dtype)
    for index in torch.cartesian_prod(*(torch.arange(n) for n in x.shape)).reshape(-1, x.dim()).tolist():
        memory[formula(index, tuple(x.shape))] = x[tuple(index)]
    return memory


@pytest.mark.parametrize("tag, size, formula, padded", TAGS, ids=TAG_IDS)
def test_device_memory_matches_the_oneDNN_formula(tag, size, formula, padded) -> None:
    x = torch.arange(1, 1 + math.prod(size), dtype=torch.float32).reshape(size)
    y = x.to("spyre", device_layout=onednn.MemoryFormat(tag))
    layout = y.device_tensor_layout()
    padded = padded or size
    assert isinstance(layout, onednn.BoundMemoryFormat) and layout.padded_dims == padded
    assert layout.nbytes == math.prod(padded) * 4 == y.untyped_storage().nbytes()
    memory = torch_layouts.device_memory(y)
    assert torch.equal(memory, reference_memory(x, formula, math.prod(padded)))  # padding holds zeros
    assert torch.equal(y.cpu(), x)
    last = tuple(n - 1 for n in size)
    assert layout.device_offset(last) == formula(list(last), size)


@pytest.mark.parametrize("tag, size, formula, padded", TAGS, ids=TAG_IDS)
def test_blocking_desc_gives_the_same_offsets(tag, size, formula, padded) -> None:
    """oneDNN's generic offset from ``strides``, ``inner_blks`` and ``inner_idxs`` agrees with the formula."""
    layout = onednn.MemoryFormat(tag).bind(size, torch.float16)
    blocks = [math.prod(b for d2, b in zip(layout.inner_idxs, layout.inner_blks) if d2 == d) for d in range(len(size))]
    for index in torch.cartesian_prod(*(torch.arange(n) for n in size)).reshape(-1, len(size)).tolist()[::7]:
        offset = sum((i // b) * s for i, b, s in zip(index, blocks, layout.strides))
        rest, inner = [i % b for i, b in zip(index, blocks)], 0
        for k, (dim, blk) in enumerate(zip(layout.inner_idxs, layout.inner_blks)):
            below = math.prod(b for d2, b in zip(layout.inner_idxs[k + 1:], layout.inner_blks[k + 1:]) if d2 == dim)
            inner = inner * blk + (rest[dim] // below) % blk
        assert offset + inner == formula(index, size), index


def test_abstract_spelling_and_blocking_desc() -> None:
    fmt = onednn.MemoryFormat("OIhw4i16o4i")
    assert fmt.abstract == "ABcd4b16a4b" and str(fmt) == "OIhw4i16o4i"
    assert repr(fmt) == "onednn.MemoryFormat('OIhw4i16o4i')"
    assert onednn.MemoryFormat("gOIhw16i16o").abstract == "aBCde16c16b"
    assert onednn.MemoryFormat("Ohwi16o").abstract == "Acdb16a"
    assert onednn.MemoryFormat("nhwc").abstract == "acdb"
    layout = onednn.MemoryFormat("nChw16c").bind((2, 20, 3, 4), torch.bfloat16)
    assert layout.strides == (32 * 12, 16 * 12, 4 * 16, 16)
    assert (layout.inner_blks, layout.inner_idxs, layout.data_type) == ((16,), (1,), "bf16")
    assert str(layout) == "nChw16c bound to [2, 20, 3, 4], padded [2, 32, 3, 4]"
    assert layout.pad_value == 0


# -- zero padding survives what the device does to the tensor ---------------------------------------------
def test_padding_holds_zeros_after_creation_ops_and_relayout() -> None:
    fmt = onednn.MemoryFormat("nChw8c")
    size = (2, 5, 3, 3)
    real = fmt.bind(size, torch.float32).real_mask()
    empty = torch.empty(size, device="spyre", device_layout=fmt)
    x = torch.randn(size)
    y = x.to("spyre", device_layout=fmt)
    z = y * 3 + 1
    r = x.to("spyre", device_layout=htp.R4CroutonLayout).to("spyre", device_layout=fmt)
    for t in (empty, y, z, r):
        assert t.device_tensor_layout() == fmt.bind(size, torch.float32)
        assert bool((torch_layouts.device_memory(t)[~real] == 0).all())
    assert torch.equal(z.cpu(), x * 3 + 1)


# -- rejections ----------------------------------------------------------------------------------------------
BAD_TAGS = [
    ("nchw16c", "lower case"),
    ("nCHw16c", "'H' is upper case (blocked) but has no block"),
    ("OIhw", "has no block"),
    ("nChw16x", "names no dim"),
    ("nChw1c", "size >= 2"),
    ("abd", "each of its 3 dims"),
    ("nchwn", "names a dim twice"),
    ("nchwo", "mixes dim letters"),
    ("abcz", "mixes the letters a to l"),
    ("16c", "expected dim letters"),
    ("", "expected dim letters"),
    ("nc hw", "expected dim letters"),
]


@pytest.mark.parametrize("tag, fragment", BAD_TAGS, ids=[t or "empty" for t, _ in BAD_TAGS])
def test_bad_tags_are_rejected_by_name(tag: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="oneDNN tag") as err:
        onednn.MemoryFormat(tag)
    assert fragment in str(err.value)


def test_bad_shapes_dtypes_and_arguments() -> None:
    with pytest.raises(ValueError, match=r"4-D tensors; host size \[2, 16, 3\] has rank 3"):
        torch.zeros(2, 16, 3).to("spyre", device_layout=onednn.MemoryFormat("nChw16c"))
    with pytest.raises(ValueError, match="no memory::data_type for torch.int64"):
        onednn.MemoryFormat("nchw").bind((1, 2, 3, 4), torch.int64)
    with pytest.raises(TypeError, match="must be a str, got 16"):
        onednn.MemoryFormat(16)
    with pytest.raises(TypeError, match="must be an onednn.MemoryFormat"):
        onednn.BoundMemoryFormat("nchw", (1, 2, 3, 4), torch.float32)
    with pytest.raises(UsageError, match="oneDNN pads blocked dims with zeros"):
        build_layout("onednn:nChw16c", (1, 16, 2, 2), pad_value=1)


# -- bit-exact round trips ------------------------------------------------------------------------------------
ROUND_TRIP_TAGS = sorted({tag for tag, *_ in TAGS})


@settings(max_examples=40)
@given(st.sampled_from(ROUND_TRIP_TAGS), st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.int8,
                                                         torch.uint8, torch.int32, torch.bool, torch.float8_e5m2]),
       st.lists(st.integers(0, 19), min_size=5, max_size=5), st.integers(0, 2**31))
def test_round_trips_are_bit_exact(tag, dtype, sizes, seed) -> None:
    fmt = onednn.MemoryFormat(tag)
    size = tuple(sizes[: fmt.ndims])
    gen = torch.Generator().manual_seed(seed)
    bits = torch.randint(-(2**31), 2**31, size, generator=gen, dtype=torch.int64)
    width = {1: torch.int8, 2: torch.int16, 4: torch.int32}[dtype.itemsize]
    x = bits.to(width).view(dtype) if dtype != torch.bool else bits % 2 == 0
    y = x.to("spyre", device_layout=fmt)
    assert torch.equal(as_bits(y.cpu()), as_bits(x))
    real = fmt.bind(size, dtype).real_mask()
    assert not bool(as_bits(torch_layouts.device_memory(y))[~real].any())


# -- relayouts to and from every other family, on the device -------------------------------------------------
SIZE = (2, 5, 9, 37)
OTHERS = [
    ("spyre default", SpyreTensorLayout(SIZE, torch.float32)),
    ("spyre dim_order [3,0,1,2]", SpyreTensorLayout(SIZE, torch.float32, [3, 0, 1, 2])),
    ("htp crouton", htp.R4CroutonLayout),
    ("trt kCHW32", tensorrt.TensorFormat.kCHW32),
    ("trt kLINEAR", tensorrt.TensorFormat.kLINEAR),
    ("mace in/out channel", mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL)),
    ("mace cpu nchw", mace.CpuLayout.CPU_NCHW),
]
ONEDNN = ["nChw16c", "nChw8c", "nhwc", "OIhw4i16o4i"]


@pytest.mark.parametrize("other", OTHERS, ids=[row[0] for row in OTHERS])
@pytest.mark.parametrize("tag", ONEDNN)
def test_relayouts_to_and_from_every_family(tag: str, other: tuple[str, object]) -> None:
    x = torch.randn(SIZE)
    fmt = onednn.MemoryFormat(tag)
    y = x.to("spyre", device_layout=fmt)
    o = x.to("spyre", device_layout=other[1])
    before = _C._counters()["host_bounces"]
    into_other = y.to("spyre", device_layout=other[1])
    into_onednn = o.to("spyre", device_layout=fmt)
    assert _C._counters()["host_bounces"] == before  # both moved device to device
    assert torch.equal(torch_layouts.device_memory(into_other), torch_layouts.device_memory(o))
    assert torch.equal(torch_layouts.device_memory(into_onednn), torch_layouts.device_memory(y))
    assert torch.equal(into_other.cpu(), x) and torch.equal(into_onednn.cpu(), x)


# -- the CLI and pictures -------------------------------------------------------------------------------------
def test_cli_show_prints_the_blocking(capsys: pytest.CaptureFixture) -> None:
    assert main(["show", "onednn:nChw16c", "--shape", "1,3,2,2", "--rows", "0", "--cols", "0"]) == 0
    out = capsys.readouterr().out
    assert "nChw16c bound to [1, 3, 2, 2], padded [1, 16, 2, 2]" in out
    assert re.search(r"padded_dims\s+\[1, 16, 2, 2\]", out) and "inner_blks [16], inner_idxs [1]" in out
    assert "64 elements (256 bytes), 52 of them padding (pad value 0.0)" in out
    # one row per (n, C block, h, w): channels 0..2 real, 13 zeros; host index of (0, c, h, w) = c*4 + h*2 + w
    assert re.search(r"\[0,0,1,1\]\s+3\s+7\s+11(\s+pad){13}\n", out)


def test_cli_spec_names_the_same_layout_as_the_python_api() -> None:
    assert build_layout("onednn:OIhw4i16o4i", (18, 21, 2, 3)) == onednn.MemoryFormat("OIhw4i16o4i").bind(
        (18, 21, 2, 3), torch.float32)
    assert build_layout("dnnl:nhwc", (1, 2, 3, 4), torch.float16).dtype == torch.float16
    with pytest.raises(UsageError, match="onednn needs a layout after the colon, e.g. onednn:nChw16c"):
        build_layout("onednn", (1, 2, 3, 4))
    with pytest.raises(UsageError, match="bad oneDNN tag 'nChw16q'"):
        build_layout("onednn:nChw16q", (1, 2, 3, 4))


def test_picture_names_blocks(tmp_path) -> None:
    from torch_layouts import viz

    layout = onednn.MemoryFormat("nChw8c").bind((1, 3, 2, 2), torch.float32)
    assert viz.chunk_name(layout) == "block"
    assert viz.chunk_name(onednn.MemoryFormat("nchw").bind((1, 3, 2, 2), torch.float32)) == "row"
    device, host = viz.chunk_ids(layout)
    assert host.tolist() == [h * 2 + w for _ in range(3) for h in range(2) for w in range(2)]
    assert int((device == viz.PAD).sum()) == 4 * 5
    fig = viz.draw(layout, tmp_path / "block.png", dpi=30)
    assert (tmp_path / "block.png").stat().st_size > 0 and "nChw8c" in fig._suptitle.get_text()


def test_torch_save_and_load_keep_the_format_and_views() -> None:
    x = torch.randn(2, 20, 3, 3)
    y = x.to("spyre", device_layout=onednn.MemoryFormat("nChw8c"))
    buffer = io.BytesIO()
    torch.save({"y": y, "view": y[:, 3:7]}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert loaded["y"].device_tensor_layout() == y.device_tensor_layout()
    assert torch.equal(torch_layouts.device_memory(loaded["y"]), torch_layouts.device_memory(y))
    assert torch.equal(loaded["view"].cpu(), x[:, 3:7])
