"""``python -m torch_layouts``: show, dma, demo and every error path.

The subprocess runs (the real entry point) start together in a module fixture, a few
at a time, so the suite pays for torch's import only a handful of times in wall time.
Expected values come from the vendors' documentation and formulas, not from the CLI's own code.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from matplotlib import image

from torch_layouts import SpyreTensorLayout, dma_program, htp, mace, tensorrt, viz
from torch_layouts.cli import main
from torch_layouts.cli.demo import CORRUPT_ENV
from torch_layouts.cli.show import memory_map, summary
from torch_layouts.cli.specs import UsageError, build_layout

REPO = Path(__file__).resolve().parents[1]
PICTURE_SHAPE = (round(viz.FIGSIZE[1] * viz.DPI), round(viz.FIGSIZE[0] * viz.DPI))
DOCUMENTED_DIM_ORDER = ("SpyreTensorLayout(device_size=[5, 3, 100, 64], stride_map =[15000, 64, 150, 1], "
                  "device_dtype=DataFormats.SEN169_FP16)")
DEMO_PICTURES = ("spyre", "spyre_dim_order", "htp_crouton", "trt_kCHW4", "trt_kCHW32", "mace_in_out_channel",
                 "onednn_nChw16c", "onednn_OIhw4i16o4i")

# (case id, argv, extra environment); "{out}" is replaced by the module's temporary folder.
RUNS = [
    ("show_spyre", ["show", "spyre", "--shape", "5,100,150", "--dtype", "float16", "--dim-order", "1,0,2"], {}),
    ("show_htp", ["show", "htp:crouton", "--shape", "1,3,5,30", "--png", "{out}/crouton.png",
                  "--svg", "{out}/crouton.svg"], {}),
    ("dma_text", ["dma", "spyre", "--shape", "1024,256", "--dtype", "float16"], {}),
    ("dma_json_file", ["dma", "spyre", "--shape", "1024,256", "--dtype", "float16", "--json", "{out}/dci.json"], {}),
    ("dma_json_d2h", ["dma", "htp:crouton", "--shape", "1,3,5,30", "--direction", "d2h", "--json", "-"], {}),
    ("demo", ["demo", "--out", "{out}/pictures"], {}),
    ("demo_corrupt", ["demo", "--no-pictures"], {CORRUPT_ENV: "1"}),
]

# (case id, argv, a fragment the one-line error must contain)
ERRORS = [
    ("bad_family", ["show", "cuda:tiled", "--shape", "4,4"], "unknown family 'cuda'"),
    ("bad_name", ["show", "htp:croutonz", "--shape", "1,3,5,30"], "croutonz"),
    ("bad_shape", ["show", "spyre", "--shape", "5,x,150"], "5,x,150"),
    ("shape_mismatch", ["show", "htp:crouton", "--shape", "3,4"], "rank 2"),
    ("bad_dtype", ["show", "spyre", "--shape", "4,4", "--dtype", "float64"], "float64"),
    ("bad_dim_order", ["show", "spyre", "--shape", "4,4,4", "--dim-order", "0,0,1"], "[0, 0, 1]"),
    ("unwritable_output", ["show", "trt:kCHW4", "--shape", "1,6,2,3", "--png", "{out}/missing/x.png"],
     "missing/x.png"),
    ("argparse", ["show", "spyre"], "--shape"),
]


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch_layouts", *argv], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=300)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def runs(out: Path) -> dict[str, subprocess.CompletedProcess]:
    """Every subprocess case, run three at a time; demo first (the longest)."""
    cases = sorted([(i, a, e) for i, a, e in RUNS] + [(i, a, {}) for i, a, _ in ERRORS],
                   key=lambda case: not case[0].startswith("demo"))
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {case_id: pool.submit(_run, [arg.replace("{out}", str(out)) for arg in argv], env)
                   for case_id, argv, env in cases}
        return {case_id: future.result() for case_id, future in futures.items()}


def _ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


# -- show ------------------------------------------------------------------------
def test_show_spyre_prints_the_documented_layout_padding_and_program(runs: dict) -> None:
    stdout = _ok(runs["show_spyre"])
    layout = SpyreTensorLayout((5, 100, 150), torch.float16, [1, 0, 2])
    assert DOCUMENTED_DIM_ORDER in stdout
    assert re.search(r"device_size\s+\[5, 3, 100, 64\]", stdout)
    assert re.search(r"stride_map\s+\[15000, 64, 150, 1\]", stdout)
    # 150 fp16 values pad to 192 (Spyre's documentation): 5 * 100 * 192 device elements for 75000 real ones.
    assert "96000 elements (192000 bytes), 21000 of them padding" in stdout
    assert "78.1% (75000 real / 96000 device elements)" in stdout
    assert str(dma_program(layout)) in stdout
    # memory map: 5 * 3 * 100 rows of one stick; last row [4,2,99] holds host row (4, 99), elements 128..149
    assert "1500 row(s) = device dims [5, 3, 100], 64 column(s)" in stdout
    last_row = next(line for line in stdout.splitlines() if line.strip().startswith("[4,2,99]")).split()
    assert last_row[1] == str(4 * 15000 + 99 * 150 + 128) and last_row[-1] == "pad"
    assert "not shown (...): 1468 of 1500 rows and 48 of 64 columns" in stdout


def _parse_map(stdout: str) -> tuple[list[int], list[int | None]]:
    """(device row coordinates..., cells) of a fully printed memory map."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("device memory map:"))
    cells: list[int | None] = []
    labels = []
    for line in lines[start + 2:]:
        if not line.strip().startswith("["):
            break
        label, *values = line.split()
        labels.append([int(v) for v in label.strip("[]").split(",")])
        cells += [None if v == "pad" else int(v) for v in values]
    return labels, cells


def test_show_text_map_matches_host_map_and_the_kchw4_formula(capsys: pytest.CaptureFixture) -> None:
    assert main(["show", "trt:kCHW4", "--shape", "1,6,2,3", "--rows", "0", "--cols", "0"]) == 0
    labels, cells = _parse_map(capsys.readouterr().out)
    layout = tensorrt.TensorFormat.kCHW4.bind((1, 6, 2, 3), torch.float16)
    assert [c if c is not None else -1 for c in cells] == layout.host_map().tolist()
    n, c, h, w = 1, 6, 2, 3  # TensorRT: kCHW4 is [N][(C+3)/4][H][W][4]
    expected: list[int | None] = [None] * (n * 2 * h * w * 4)
    for ci in range(c):
        for hi in range(h):
            for wi in range(w):
                expected[((ci // 4 * h + hi) * w + wi) * 4 + ci % 4] = (ci * h + hi) * w + wi
    assert cells == expected
    assert labels == [[0, cb, hi, wi] for cb in range(2) for hi in range(h) for wi in range(w)]


def test_show_htp_writes_a_png_and_an_svg(runs: dict, out: Path) -> None:
    stdout = _ok(runs["show_htp"])
    assert "padded [1, 8, 8, 32]" in stdout  # HTP's documentation: crouton chunks are 8 x 8 x 32
    assert "22.0% (450 real / 2048 device elements)" in stdout
    assert image.imread(out / "crouton.png").shape[:2] == PICTURE_SHAPE
    root = ET.parse(out / "crouton.svg").getroot()
    assert root.tag.endswith("svg")
    assert float(root.attrib["width"].removesuffix("pt")) == pytest.approx(viz.FIGSIZE[0] * 72)


def test_show_mace_prints_the_image(capsys: pytest.CaptureFixture) -> None:
    assert main(["show", "mace:IN_OUT_CHANNEL", "--shape", "1,2,3,6"]) == 0
    stdout = capsys.readouterr().out
    assert "image 6x2 RGBA" in stdout  # [W * ceil(C/4), N * H] = [3 * 2, 1 * 2]
    assert "6 x 2 RGBA pixels" in stdout


# -- dma ---------------------------------------------------------------------------
def test_dma_prints_the_documented_loop_nest(runs: dict) -> None:
    stdout = _ok(runs["dma_text"])
    # The DCI example of Spyre's documentation for a (1024, 256) float16 tensor.
    expected = ["for i in range(4):", "  for j in range(1024):", "    for k in range(64):",
                "      device[i*65536 + j*64 + k] = host[j*256 + i*64 + k]"]
    lines = stdout.splitlines()
    start = lines.index(expected[0])
    assert lines[start:start + 4] == expected


def test_dma_json_file_matches_the_program(runs: dict, out: Path) -> None:
    _ok(runs["dma_json_file"])
    data = json.loads((out / "dci.json").read_text())
    assert data == dma_program(SpyreTensorLayout((1024, 256), torch.float16)).to_dict()
    (nest,) = data["nests"]
    assert (nest["sizes"], nest["destination"]["strides"], nest["source"]["strides"]) == (
        [4, 1024, 64], [65536, 64, 1], [64, 256, 1])


def test_dma_json_stdout_d2h(runs: dict) -> None:
    data = json.loads(_ok(runs["dma_json_d2h"]))
    layout = htp.R4CroutonLayout.bind((1, 3, 5, 30), torch.float32)
    assert data == dma_program(layout, direction="d2h").to_dict()
    assert data["direction"] == "D2H" and data["padding"] == []


# -- demo --------------------------------------------------------------------------
def test_demo_passes_and_draws_every_family(runs: dict, out: Path) -> None:
    stdout = _ok(runs["demo"])
    assert "[FAIL]" not in stdout
    assert re.search(r"Summary: \d+ checks, 0 failed", stdout)
    for name in DEMO_PICTURES:
        assert image.imread(out / "pictures" / f"{name}.png").shape[:2] == PICTURE_SHAPE


def test_demo_fails_when_device_memory_is_corrupted(runs: dict) -> None:
    result = runs["demo_corrupt"]
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "[FAIL] device memory holds every element where host_map says" in result.stdout
    assert "FAILED: back to the host bit for bit" in result.stdout


# -- errors ------------------------------------------------------------------------
@pytest.mark.parametrize("case_id, fragment", [(i, f) for i, _, f in ERRORS], ids=[i for i, _, _ in ERRORS])
def test_errors_exit_2_with_one_line(runs: dict, case_id: str, fragment: str) -> None:
    result = runs[case_id]
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert fragment in result.stderr
    assert result.stdout == ""


# -- in process: specs, more error paths, the text map ------------------------------
F16, F32 = torch.float16, torch.float32
SPECS = [
    # (spec, shape, dtype, dim_order, expected layout)
    ("spyre", (5, 100, 150), None, None, SpyreTensorLayout((5, 100, 150), F16)),
    ("spyre:dim_order=1,0,2", (5, 100, 150), None, None, SpyreTensorLayout((5, 100, 150), F16, [1, 0, 2])),
    ("spyre", (5, 100, 150), F32, (1, 0, 2), SpyreTensorLayout((5, 100, 150), F32, [1, 0, 2])),
    ("spyre:sparse", (512, 256), None, None, SpyreTensorLayout((512, 256), F16, [0, 1, -1])),
    ("spyre:sparse", (512, 256), None, (1, 0), SpyreTensorLayout((512, 256), F16, [1, 0, -1])),
    ("htp:crouton", (1, 3, 5, 30), None, None, htp.R4CroutonLayout.bind((1, 3, 5, 30), F32)),
    ("htp:4,0,0,1,0,2,0,3,0,1,8,2,8,3,32", (2, 9, 20, 50), None, None, htp.R4CroutonLayout.bind((2, 9, 20, 50), F32)),
    ("htp:R4Depth32MemoryLayout", (1, 3, 5, 30), F16, None, htp.R4Depth32MemoryLayout.bind((1, 3, 5, 30), F16)),
    ("trt:kCHW4", (1, 6, 2, 3), None, None, tensorrt.TensorFormat.kCHW4.bind((1, 6, 2, 3), F16)),
    ("tensorrt:kHWC", (1, 6, 2, 3), None, None, tensorrt.TensorFormat.kHWC.bind((1, 6, 2, 3), F32)),
    ("trt:kDLA_HWC4,xavier", (1, 3, 2, 5), None, None,
     tensorrt.FormatTemplate(tensorrt.TensorFormat.kDLA_HWC4, dla="xavier").bind((1, 3, 2, 5), F16)),
    ("mace:IN_OUT_CHANNEL", (1, 2, 3, 6), None, None,
     mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL).bind((1, 2, 3, 6), F32)),
    ("mace:cpu_nchw", (1, 2, 3, 6), F16, None, mace.CpuLayout.CPU_NCHW.bind((1, 2, 3, 6), F16)),
]


@pytest.mark.parametrize("spec, shape, dtype, dim_order, expected", SPECS, ids=[s[0] for s in SPECS])
def test_specs_name_the_same_layout_as_the_python_api(spec, shape, dtype, dim_order, expected) -> None:
    layout = build_layout(spec, shape, dtype, dim_order)
    assert layout == expected and layout.dtype == expected.dtype


def test_pad_value_reaches_every_family_that_has_one() -> None:
    for spec, shape in (("spyre", (3, 5)), ("htp:crouton", (1, 3, 5, 30)), ("trt:kCHW4", (1, 6, 2, 3))):
        layout = build_layout(spec, shape, pad_value=-3)
        assert layout.pad_value == -3
    with pytest.raises(UsageError, match="MACE layouts always pad with zero"):
        build_layout("mace:IN_OUT_CHANNEL", (1, 2, 3, 6), pad_value=1)


IN_PROCESS_ERRORS = [
    (["show", "htp", "--shape", "1,3,5,30"], "htp needs a layout after the colon"),
    (["show", "trt:kCHW5", "--shape", "1,6,2,3"], "'kCHW5'"),
    (["show", "mace:NOPE", "--shape", "1,2,3,6"], "'NOPE'"),
    (["show", "spyre:dim_order", "--shape", "2,3"], "spyre:dim_order"),
    (["show", "spyre:dim_order=1,0", "--shape", "2,3", "--dim-order", "0,1"], "disagree"),
    (["show", "spyre", "--shape=-1,3"], "-1,3"),
    (["show", "spyre", "--shape", "1,2,3,4,5,6,7"], "rank 7"),
    (["show", "trt:kCHW4", "--shape", "6"], "dimensions >= 3"),
    (["show", "trt:kCHW16", "--shape", "1,16,2,2", "--dtype", "float32"], "FP16"),
    (["show", "mace:CONV2D_FILTER", "--shape", "2,3"], "OIHW"),
    (["show", "spyre", "--shape", "2,3", "--dtype", "complex64"], "complex64"),
    (["show", "spyre", "--shape", "2,3", "--dtype", "floatz"], "floatz"),
    (["show", "spyre", "--shape", "2,3", "--dim-order", "0,a"], "0,a"),
    (["show", "htp:crouton", "--shape", "1,3,5,30", "--dim-order", "0,1,2,3"], "spyre layouts only"),
    (["show", "spyre", "--shape", "2,3", "--pad-value", "abc"], "abc"),
    (["show", "spyre", "--shape", "2,3", "--pad-value", "0.1"], "0.1"),
    (["dma", "spyre", "--shape", "2,3", "--json", "/proc/definitely/not/here.json"], "here.json"),
    (["demo", "--out", "/proc/definitely/not/here"], "not/here"),
    (["show", "spyre", "--shape", "5000,4000", "--rows", "2", "--png", "/proc/x.png"], "at most 16777216"),
]


@pytest.mark.parametrize("argv, fragment", IN_PROCESS_ERRORS, ids=[f for _, f in IN_PROCESS_ERRORS])
def test_more_errors_are_one_line(argv: list[str], fragment: str, capsys: pytest.CaptureFixture) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and fragment in captured.err


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["dma", "spyre", "--shape", "2,3", "--direction", "up"],
                                  ["show", "spyre", "--shape", "2,3", "--rows", "many"]])
def test_argparse_errors_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_memory_map_keeps_head_and_tail_and_says_what_it_cut() -> None:
    layout = SpyreTensorLayout((5, 100, 150), torch.float16)  # device [100, 3, 5, 64]
    text = memory_map(layout, max_rows=8, max_cols=8)
    rows = [line.split() for line in text.splitlines()[2:-1]]
    # 8 rows: 6 from the head, a gap, 2 from the tail; 8 columns: 6 + gap + 2
    assert [r[0] for r in rows] == ["[0,0,0]", "[0,0,1]", "[0,0,2]", "[0,0,3]", "[0,0,4]", "[0,1,0]", "...",
                                    "[99,2,3]", "[99,2,4]"]
    assert text.splitlines()[1].split() == ["row", "0", "1", "2", "3", "4", "5", "...", "62", "63"]
    host_map = layout.host_map().view(1500, 64)
    for r, values in zip([0, 1, 2, 3, 4, 5], rows):
        assert values[1:7] == [str(v) for v in host_map[r, :6].tolist()]
    # the third tile of every row of 150 holds 22 elements: columns 62, 63 are padding there
    assert rows[-1][-2:] == ["pad", "pad"]
    assert text.splitlines()[-1] == ("not shown (...): 1492 of 1500 rows and 56 of 64 columns; "
                                     "--rows 0 --cols 0 print everything")


def test_summary_efficiency_for_each_family() -> None:
    cases = [  # (layout, real elements, device elements) from the families' documented array forms
        (SpyreTensorLayout((5, 100, 150), F16), 75000, 100 * 3 * 5 * 64),
        (htp.R4CroutonLayout.bind((2, 9, 20, 50), F32), 18000, 2 * 16 * 24 * 64),
        (tensorrt.TensorFormat.kCHW32.bind((2, 40, 5, 7), F16), 2800, 2 * 2 * 5 * 7 * 32),
        (mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL).bind((1, 3, 5, 30), F32), 450, 40 * 3 * 4),
    ]
    for layout, real, device in cases:
        assert f"{100 * real / device:.1f}% ({real} real / {device} device elements)" in summary(layout)
        assert math.prod(layout.device_size) == device
