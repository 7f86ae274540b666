"""Reliability (issue 10.5): every bad input across the public API is explained.

One row per bad input: what is called, the exception type, and the words the message
must contain — always the offending value (a dtype, a rank, a dim_order, a pair, a
device index, a shape, an environment value), so a user can see what to fix. Bad
environment values are checked in fresh interpreters (they are read at start-up).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import torch_layouts
from torch_layouts import DataFormats, DeviceLayout, SpyreTensorLayout, htp, mace, tensorrt

F = tensorrt.TensorFormat
BT = mace.BufferType
REPO = Path(__file__).resolve().parent.parent


def spyre(*args: object, **kwargs: object) -> SpyreTensorLayout:
    return SpyreTensorLayout(*args, **kwargs)


def to(x: torch.Tensor, spec: object, device: str = "spyre") -> Callable[[], object]:
    return lambda: x.to(device, device_layout=spec)


CATALOGUE: list[tuple[str, Callable[[], object], type[Exception], tuple[str, ...]]] = [
    # -- dtypes that cannot live on the device
    ("float64 to", lambda: torch.ones(3, dtype=torch.float64).to("spyre"), ValueError,
     ("float64", "not a device type")),
    ("complex64 to", lambda: torch.ones(3, dtype=torch.complex64).to("spyre"), ValueError, ("complex64",)),
    ("float64 empty", lambda: torch.empty(3, device="spyre", dtype=torch.float64), ValueError, ("float64",)),
    ("float64 layout", lambda: spyre((3,), torch.float64), ValueError, ("float64",)),
    ("complex64 DeviceLayout", lambda: DeviceLayout([4], [1], torch.complex64), ValueError, ("complex64",)),
    ("float64 into template", to(torch.ones(1, 2, 3, 4, dtype=torch.float64), htp.R4CroutonLayout), ValueError,
     ("float64",)),
    ("dtype not a dtype", lambda: spyre((3,), "float16"), TypeError, ("'float16'",)),
    ("layout dtype mismatch", to(torch.ones(3, 4), spyre((3, 4), torch.float16)), ValueError,
     ("torch.float16", "torch.float32")),
    # -- ranks
    ("Spyre rank 7", lambda: spyre((2,) * 7, torch.float16), ValueError, ("rank 7", "6")),
    ("Spyre sparse rank 8", lambda: spyre((2,) * 8, torch.float16, [*range(8), -1]), ValueError, ("rank 8", "7")),
    ("HTP rank", to(torch.ones(3, 4, 5), htp.R4CroutonLayout), ValueError, ("[3, 4, 5]", "rank 3", "rank 4")),
    ("TensorRT min rank", to(torch.ones(3, 4, dtype=torch.float16), F.kCHW4), ValueError, ("kCHW4", ">= 3", "got 2")),
    ("MACE in/out rank", to(torch.ones(3, 4, 5), mace.ImageLayout(BT.IN_OUT_CHANNEL)), ValueError,
     ("IN_OUT_CHANNEL", "[3, 4, 5]", "rank 3")),
    ("MACE argument rank", to(torch.ones(3, 4), mace.ImageLayout(BT.ARGUMENT)), ValueError, ("ARGUMENT", "[3, 4]")),
    ("MACE CPU order rank", to(torch.ones(3, 4, 5), mace.CpuLayout.CPU_OIHW), ValueError, ("CPU_OIHW", "[3, 4, 5]")),
    # -- dim_order
    ("dim_order repeated", lambda: spyre((3, 4), torch.float32, [0, 0]), ValueError, ("[0, 0]",)),
    ("dim_order short", lambda: spyre((3, 4), torch.float32, [0]), ValueError, ("[0]", "[0, 1]")),
    ("dim_order out of range", lambda: spyre((3, 4), torch.float32, [0, 2]), ValueError, ("[0, 2]",)),
    ("dim_order -1 inside", lambda: spyre((3, 4), torch.float32, [0, -1, 1]), ValueError, ("[0, -1, 1]",)),
    ("dim_order not ints", lambda: spyre((3, 4), torch.float32, ["a", 1]), TypeError, ("'a'",)),
    # -- HTP pair lists
    ("pairs missing a dim", lambda: htp.ChunkedMemoryLayout(4, 0, 0, 1, 0, 2, 0), ValueError, ("dim 3", "missing")),
    ("pairs dim twice", lambda: htp.ChunkedMemoryLayout(2, 0, 0, 0, 0, 1, 0), ValueError, ("dim 0", "twice")),
    ("pairs odd count", lambda: htp.ChunkedMemoryLayout(4, 0, 0, 1, 0, 2, 0, 3), ValueError, ("odd", "(7)")),
    ("pair dim out of range", lambda: htp.ChunkedMemoryLayout(4, 0, 0, 1, 0, 2, 0, 5, 0), ValueError,
     ("dim 5", "(5,0)", "rank 4")),
    ("pair negative size", lambda: htp.ChunkedMemoryLayout(4, 0, 0, 1, 0, 2, 0, 3, 0, 3, -32), ValueError,
     ("(3,-32)", "-32")),
    ("pair not an int", lambda: htp.ChunkedMemoryLayout(2, 0, 0, 1, 0, 1, 2.5), TypeError, ("2.5",)),
    ("rank 0 template", lambda: htp.ChunkedMemoryLayout(0), ValueError, ("rank", "0")),
    ("unknown HTP spec", lambda: htp.parse("banana"), ValueError, ("'banana'",)),
    # -- TensorRT format rules
    ("kCHW2 float32", to(torch.ones(1, 3, 4, 5), F.kCHW2), ValueError, ("kCHW2", "float32")),
    ("kHWC float16", to(torch.ones(1, 3, 4, 5, dtype=torch.float16), F.kHWC), ValueError, ("kHWC", "float16")),
    ("kCHW32 bool", to(torch.ones(1, 3, 4, 5, dtype=torch.bool), F.kCHW32), ValueError, ("kCHW32", "bool")),
    ("kDLA_HWC4 C=2", to(torch.ones(1, 2, 4, 5), F.kDLA_HWC4), ValueError, ("kDLA_HWC4", "C=2")),
    ("DLA platform", lambda: tensorrt.FormatTemplate(F.kDLA_HWC4, dla="thor"), ValueError, ("'thor'",)),
    ("DLA platform on non-DLA", lambda: tensorrt.FormatTemplate(F.kCHW4, dla="orin"), ValueError,
     ("'orin'", "kCHW4")),
    ("unknown TensorRT spec", lambda: tensorrt.parse("kCHW5"), ValueError, ("'kCHW5'",)),
    # -- MACE images
    ("MACE image too wide", to(torch.ones(1, 1, 20000, 4), mace.ImageLayout(BT.IN_OUT_CHANNEL)), ValueError,
     ("width 20000", "16384")),
    ("MACE image too high", to(torch.ones(1, 20000, 1, 4), mace.ImageLayout(BT.IN_OUT_CHANNEL)), ValueError,
     ("height 20000", "16384")),
    ("MACE depthwise multiplier", to(torch.ones(2, 3, 3, 3), mace.ImageLayout(BT.DW_CONV2D_FILTER)), ValueError,
     ("M=2",)),
    ("MACE max image size", lambda: mace.ImageLayout(BT.IN_OUT_CHANNEL, max_image_size=(0, 5)), ValueError,
     ("(0, 5)",)),
    ("unknown MACE spec", lambda: mace.parse("RGBA"), ValueError, ("'RGBA'",)),
    # -- device indices
    ("spyre:5 to", lambda: torch.ones(3).to("spyre:5"), RuntimeError, ("spyre:5", "1 spyre device")),
    ("spyre:5 empty", lambda: torch.empty(3, device="spyre:5"), RuntimeError, ("spyre:5",)),
    ("spyre:5 with layout", to(torch.ones(3), spyre((3,), torch.float32), "spyre:5"), RuntimeError, ("spyre:5",)),
    ("spyre:5 set_device", lambda: torch.spyre.set_device(5), RuntimeError, ("spyre:5",)),
    ("spyre:5 memory stats", lambda: torch.spyre.memory_allocated(5), RuntimeError, ("spyre:5",)),
    ("cpu as a spyre device", lambda: torch.spyre.set_device("cpu"), ValueError, ("cpu",)),
    # -- a layout for another shape
    ("layout for fewer rows", to(torch.ones(7, 4), spyre((5, 4), torch.float32)), ValueError, ("[5, 4]", "[7, 4]")),
    ("layout for more rows", to(torch.ones(3, 4), spyre((5, 4), torch.float32)), ValueError, ("[5, 4]", "[3, 4]")),
    ("layout for another rank", to(torch.ones(7, 4, 2), spyre((5, 4), torch.float32)), ValueError,
     ("[5, 4]", "[7, 4, 2]")),
    ("bound HTP layout, other shape", to(torch.ones(1, 3, 5, 7), htp.R4CroutonLayout.bind((1, 3, 5, 6), torch.float32)),
     ValueError, ("[1, 3, 5, 6]", "[1, 3, 5, 7]")),
    ("bound TensorRT layout, other shape",
     to(torch.ones(1, 3, 5, 7, dtype=torch.float16), F.kCHW4.bind((1, 3, 5, 6), torch.float16)), ValueError,
     ("[1, 3, 5, 6]", "[1, 3, 5, 7]")),
    ("empty with another shape's layout",
     lambda: torch.empty((7, 4), device="spyre", device_layout=spyre((5, 4), torch.float32)), ValueError,
     ("[5, 4]", "[7, 4]")),
    ("explicit layout too small", to(torch.ones(4, 6), DeviceLayout([4, 6], [5, 1], torch.float32)), ValueError,
     ("[4, 6]", "only 20 of the 24")),
    # -- device_layout where it does not apply
    ("device_layout to cpu", to(torch.ones(3), spyre((3,), torch.float32), "cpu"), ValueError, ("cpu",)),
    ("device_layout spyre -> cpu", to(torch.ones(3).to("spyre"), spyre((3,), torch.float32), "cpu"), ValueError,
     ("cpu",)),
    ("empty on cpu with layout", lambda: torch.empty(3, device="cpu", device_layout=spyre((3,), torch.float32)),
     ValueError, ("cpu",)),
    ("new_empty on cpu with layout",
     lambda: torch.ones(3).new_empty((3,), device="cpu", device_layout=spyre((3,), torch.float32)), ValueError,
     ("cpu",)),
    ("device_layout a string", to(torch.ones(3), "crouton"), TypeError, ("'crouton'",)),
    ("to_layout an int", lambda: torch_layouts.to_layout(torch.ones(3), 5), TypeError, ("5",)),
    ("sparse with device_layout",
     lambda: torch.empty(3, device="spyre", device_layout=spyre((3,), torch.float32), layout=torch.sparse_coo),
     TypeError, ("sparse_coo",)),
    ("device_memory of a cpu tensor", lambda: torch_layouts.device_memory(torch.ones(3)), ValueError, ("cpu",)),
    # -- explicit layout values
    ("negative device_size", lambda: DeviceLayout([3, -4], [1, 1], torch.float32), ValueError, ("device_size[1]=-4",)),
    ("stride_map below -1", lambda: DeviceLayout([3, 4], [-2, 1], torch.float32), ValueError, ("stride_map[0]=-2",)),
    ("lengths differ", lambda: DeviceLayout([3, 4], [1], torch.float32), ValueError, ("[3, 4]", "[1]")),
    ("float device_size", lambda: DeviceLayout([4.0], [1], torch.float32), TypeError, ("4.0",)),
    ("negative host size", lambda: spyre((3, -4), torch.float32), ValueError, ("host_size[1]=-4",)),
    ("Spyre stick length", lambda: spyre([4, 32], [32, 1], DataFormats.SEN169_FP16), ValueError,
     ("device_size[-1]=32", "64")),
    ("pad value not representable", lambda: spyre((3,), torch.float16, pad_value=0.1), ValueError, ("0.1",)),
    ("pad value out of range", lambda: spyre((3,), torch.int8, pad_value=300), ValueError, ("300", "int8")),
    ("pad value not a bool", lambda: spyre((3,), torch.bool, pad_value=2), ValueError, ("2",)),
    ("pad value a string", lambda: spyre((3,), torch.float32, pad_value="0"), TypeError, ("'0'",)),
    ("HTP pad value", lambda: htp.ChunkedMemoryLayout(1, 0, 0, pad_value="x"), TypeError, ("'x'",)),
    # -- sizes
    ("negative empty size", lambda: torch.empty((-1, 3), device="spyre"), RuntimeError, ("-1",)),
]


@pytest.mark.parametrize("call, error, needles", [row[1:] for row in CATALOGUE], ids=[row[0] for row in CATALOGUE])
def test_bad_input_is_explained(call: Callable[[], object], error: type[Exception], needles: tuple[str, ...]) -> None:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    missing = [n for n in needles if n not in message]
    assert not missing, f"{type(info.value).__name__} message {message!r} does not name {missing}"
    assert "Traceback" not in message and "Invoked with" not in message, f"unhelpful message {message!r}"


def test_device_is_usable_after_every_error() -> None:
    before = torch.spyre.memory_allocated()
    for _, call, error, _ in CATALOGUE:
        with pytest.raises(error):
            call()
    assert torch.spyre.memory_allocated() == before
    x = torch.randn(3, 70)
    assert torch.equal(x.to("spyre", device_layout=spyre((3, 70), torch.float32, [1, 0])).cpu(), x)


# -- environment values, read when the runtime starts ----------------------------------------------
ENV_CASES = [
    ("TORCH_LAYOUTS_DEVICE_MEMORY", "lots", ("TORCH_LAYOUTS_DEVICE_MEMORY", "'lots'", "512MiB")),
    ("TORCH_LAYOUTS_DEVICE_MEMORY", "-5", ("TORCH_LAYOUTS_DEVICE_MEMORY", "'-5'")),
    ("TORCH_LAYOUTS_DEVICE_MEMORY", "99999999TiB", ("TORCH_LAYOUTS_DEVICE_MEMORY", "'99999999TiB'", "out of range")),
    ("TORCH_LAYOUTS_DEVICE_COUNT", "0", ("TORCH_LAYOUTS_DEVICE_COUNT", "'0'", "[1, 64]")),
    ("TORCH_LAYOUTS_DEVICE_COUNT", "two", ("TORCH_LAYOUTS_DEVICE_COUNT", "'two'")),
]

ENV_PROBE = """
import sys
try:
    import torch, torch_layouts
    torch.empty(3, device="spyre")
except Exception as err:
    print(type(err).__name__)
    print(err)
    sys.exit(0)
print("no error")
"""


def test_bad_environment_values() -> None:
    """All cases start at once (two cores), each in its own interpreter."""
    procs = [
        (name, value, needles, subprocess.Popen(
            [sys.executable, "-c", ENV_PROBE], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), name: value}))
        for name, value, needles in ENV_CASES
    ]
    failures = []
    for name, value, needles, proc in procs:
        out, err = proc.communicate(timeout=180)
        kind, _, message = out.partition("\n")
        if proc.returncode != 0 or kind != "ValueError" or any(n not in message for n in needles):
            failures.append(f"{name}={value!r}: exit {proc.returncode}, {out.strip()!r} {err[-500:]!r}")
    assert not failures, "\n".join(failures)


def test_good_environment_values_are_used() -> None:
    probe = "import torch, torch_layouts; print(torch.spyre.device_count(), torch.spyre.mem_get_info(1)[1])"
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=180,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TORCH_LAYOUTS_DEVICE_COUNT": "3",
                                 "TORCH_LAYOUTS_DEVICE_MEMORY": "3MiB"})
    assert result.stdout.split() == ["3", str(3 << 20)], result.stderr[-2000:]
