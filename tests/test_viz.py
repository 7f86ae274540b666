"""Pictures of layouts: what each panel shows, checked against the vendors' own index formulas.

The colour of an element is its device chunk (the row of the last device dim it lives
in); the expected chunk of every host element is written out here from each family's
documented array form, independently of the library.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib import image

from torch_layouts import DeviceLayout, SpyreTensorLayout, htp, mace, tensorrt, viz

F16, F32 = torch.float16, torch.float32
DPI = 40  # small pictures draw faster; the size check scales with it


def _spyre_chunks(a: int, b: int, c: int) -> list[int]:
    """Spyre default layout of (a, b, c) fp16: device [b, ceil(c/64), a, 64]; stick of (i, j, k)."""
    tiles = -(-c // 64)
    return [(j * tiles + k // 64) * a + i for i in range(a) for j in range(b) for k in range(c)]


def _crouton_chunks(h: int, w: int, d: int) -> list[int]:
    """HTP crouton of (1, h, w, d), h, w <= 8, d <= 32: one chunk [8][8][32]; a row is one (h, w)."""
    return [hi * 8 + wi for hi in range(h) for wi in range(w) for _ in range(d)]


def _kchw4_chunks(c: int, h: int, w: int) -> list[int]:
    """TensorRT kCHW4 of (1, c, h, w): [N][(C+3)/4][H][W][4]; a vector is one (c/4, h, w)."""
    return [(ci // 4 * h + hi) * w + wi for ci in range(c) for hi in range(h) for wi in range(w)]


def _mace_chunks(h: int, w: int, c: int) -> list[int]:
    """MACE IN_OUT_CHANNEL of (1, h, w, c): pixel x = (c/4)*W + w, y = h in a W*ceil(C/4) wide image."""
    width = w * -(-c // 4)
    return [hi * width + ci // 4 * w + wi for hi in range(h) for wi in range(w) for ci in range(c)]


CASES = [
    # (id, layout, expected chunk of every host element, padding positions)
    ("spyre", SpyreTensorLayout((2, 4, 100), F16), _spyre_chunks(2, 4, 100), 4 * 2 * 2 * 64 - 800),
    ("htp_crouton", htp.R4CroutonLayout.bind((1, 3, 5, 30), F32), _crouton_chunks(3, 5, 30), 2048 - 450),
    ("trt_kCHW4", tensorrt.TensorFormat.kCHW4.bind((1, 6, 2, 3), F16), _kchw4_chunks(6, 2, 3), 12),
    ("mace_in_out_channel", mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL).bind((1, 2, 3, 6), F32),
     _mace_chunks(2, 3, 6), 12),
]


@pytest.mark.parametrize("case_id, layout, expected, padding", CASES, ids=[c[0] for c in CASES])
def test_chunks_follow_the_vendor_formulas(case_id: str, layout: DeviceLayout, expected: list[int],
                                           padding: int) -> None:
    device, host = viz.chunk_ids(layout)
    assert host.tolist() == expected
    assert int((device == viz.PAD).sum()) == padding
    real = device != viz.PAD
    assert torch.equal(device[real], torch.arange(layout.device_numel)[real] // layout.device_size[-1])


def _rgb(chunks: np.ndarray) -> np.ndarray:
    rgb = viz.PALETTE[np.maximum(chunks, 0) % len(viz.PALETTE)]
    rgb[chunks == viz.PAD] = viz.PAD_COLOUR
    return rgb


@pytest.mark.parametrize("case_id, layout, expected, padding", CASES, ids=[c[0] for c in CASES])
def test_pictures_show_host_and_device_in_chunk_colours(tmp_path, case_id: str, layout: DeviceLayout,
                                                        expected: list[int], padding: int) -> None:
    fig = viz.draw(layout, tmp_path / f"{case_id}.png", dpi=DPI)
    picture = image.imread(tmp_path / f"{case_id}.png")
    assert picture.shape[:2] == (round(viz.FIGSIZE[1] * DPI), round(viz.FIGSIZE[0] * DPI))
    host_panel, device_panel = (ax.images[0].get_array() for ax in fig.axes[:2])
    # host view: leading dims flattened into rows, the last host dim across
    cols = layout.host_size[-1]
    assert np.array_equal(host_panel, _rgb(np.array(expected).reshape(-1, cols)))
    # device view: memory in order, left to right, top to bottom, padding in the pad colour
    in_order = device_panel.reshape(-1, 3)[: layout.device_numel]
    device, _ = viz.chunk_ids(layout)
    assert np.array_equal(in_order, _rgb(device.numpy()))
    assert not np.any(device_panel.reshape(-1, 3)[layout.device_numel:] - 1.0)  # the tail of the last line is blank
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0] == f"{viz.chunk_name(layout)} 0" and labels[-1].startswith("padding")


def test_a_mace_image_is_drawn_as_the_image(tmp_path) -> None:
    layout = mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL).bind((1, 3, 5, 30), F32)  # 40 x 3 pixels
    fig = viz.draw(layout, tmp_path / "image.png", dpi=DPI)
    assert fig.axes[1].images[0].get_array().shape == (3, 40 * 4, 3)


def test_svg_output(tmp_path) -> None:
    viz.draw(tensorrt.TensorFormat.kHWC8.bind((1, 3, 2, 2), F16), tmp_path / "hwc8.svg")
    text = (tmp_path / "hwc8.svg").read_text()
    assert text.startswith("<?xml") and "<svg" in text


def test_host_size_for_an_unbound_layout(tmp_path) -> None:
    layout = DeviceLayout([2, 64], [64, 1], F16)  # 100 elements padded to 128
    with pytest.raises(ValueError, match="host_size"):
        viz.draw(layout, tmp_path / "x.png")
    fig = viz.draw(layout, tmp_path / "x.png", host_size=(100,), dpi=DPI)
    device_panel = fig.axes[1].images[0].get_array().reshape(-1, 3)[:128]
    assert np.array_equal(device_panel[100:], np.tile(viz.PAD_COLOUR, (28, 1)))


def test_large_and_empty_tensors(tmp_path) -> None:
    fig = viz.draw(SpyreTensorLayout((450, 3), F16), tmp_path / "tall.png", dpi=DPI)
    assert fig.axes[0].images[0].get_array().shape[0] == viz.MAX_LINES
    assert f"first {viz.MAX_LINES} of 450 rows" in fig.axes[0].get_title()
    fig = viz.draw(SpyreTensorLayout((0, 5), F16), tmp_path / "empty.png", dpi=DPI)
    assert not fig.axes[0].images


def test_too_large_to_draw(tmp_path) -> None:
    layout = SpyreTensorLayout((5000, 4000), F16)  # [63, 5000, 64]: 20160000 device elements
    with pytest.raises(ValueError, match="20160000 device elements"):
        viz.draw(layout, tmp_path / "big.png")
    assert not (tmp_path / "big.png").exists()


def test_unwritable_path_raises_oserror(tmp_path) -> None:
    with pytest.raises(OSError):
        viz.draw(SpyreTensorLayout((3, 5), F16), tmp_path / "missing" / "x.png", dpi=DPI)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([viz.PAD, 0, 3, viz.EMPTY]), min_size=5, max_size=5), min_size=1, max_size=6))
def test_pad_blocks_cover_exactly_the_padding(rows: list[list[int]]) -> None:
    grid = np.array(rows)
    covered = np.zeros(grid.shape, dtype=int)
    for top, bottom, start, stop in viz._pad_blocks(grid):
        covered[top:bottom, start:stop] += 1
    assert np.array_equal(covered, (grid == viz.PAD).astype(int))


@pytest.mark.parametrize("layout, name", [
    (SpyreTensorLayout((3, 5), F16), "stick"),
    (htp.R4CroutonLayout.bind((1, 3, 5, 30), F32), "chunk row"),
    (tensorrt.TensorFormat.kCHW32.bind((1, 6, 2, 3), F16), "vector"),
    (tensorrt.TensorFormat.kHWC8.bind((1, 6, 2, 3), F16), "pixel"),
    (tensorrt.TensorFormat.kLINEAR.bind((1, 6, 2, 3), F16), "line"),
    (mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL).bind((1, 2, 3, 6), F32), "pixel"),
    (mace.CpuLayout.CPU_NCHW.bind((1, 2, 3, 6), F32), "row"),
])
def test_chunk_names(layout: DeviceLayout, name: str) -> None:
    assert viz.chunk_name(layout) == name
