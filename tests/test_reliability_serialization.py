"""Reliability (issue 10.6): ``torch.save``/``torch.load`` keep every family's tensors whole.

* Device tensors of every family (and views of them) round-trip: same values bit for
  bit, same layout, same device memory including padding, views share their buffer
  again; with ``weights_only=True`` too, and ``map_location="cpu"`` gives host tensors.
* Corrupted files (truncated at many offsets, bytes flipped or zeroed) raise an error
  and never crash; this runs in a subprocess with a small device, so a corrupted
  record that asks for a huge layout meets OutOfMemoryError, and a crash shows up as
  a failing test instead of taking pytest down.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import as_bits
from hypothesis import given
from hypothesis import strategies as st
from test_reliability_roundtrip import bits_equal, cases, move, scaled

import torch_layouts
from torch_layouts import DeviceLayout, SpyreTensorLayout, htp, mace, tensorrt

REPO = Path(__file__).resolve().parent.parent

FAMILY_TABLE = [
    ("spyre default", (5, 100), torch.float16, None),
    ("spyre dim_order", (3, 7, 9), torch.float32, SpyreTensorLayout((3, 7, 9), torch.float32, [2, 0, 1], pad_value=-3)),
    ("spyre sparse", (6, 40), torch.int8, SpyreTensorLayout((6, 40), torch.int8, [0, 1, -1])),
    ("core tiled", (40, 60), torch.bfloat16, DeviceLayout([2, 12, 1, 2, 64], [720, 60, 64, 1200, 1], torch.bfloat16)),
    ("htp crouton", (1, 3, 5, 30), torch.float16, htp.R4CroutonLayout),
    ("htp pad value", (2, 9, 20, 50), torch.bool, htp.ChunkedMemoryLayout(4, 0, 0, 1, 0, 2, 0, 3, 0, 1, 8, 2, 8, 3, 32,
                                                                         pad_value=True)),
    ("tensorrt kCHW32", (2, 3, 5, 7), torch.int8, tensorrt.TensorFormat.kCHW32),
    ("tensorrt kDLA_HWC4 xavier", (1, 3, 5, 9), torch.float32,
     tensorrt.FormatTemplate(tensorrt.TensorFormat.kDLA_HWC4, dla="xavier")),
    ("mace image", (2, 3, 5, 7), torch.float32, mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL)),
    ("mace filter", (5, 3, 3, 3), torch.bfloat16, mace.ImageLayout(mace.BufferType.CONV2D_FILTER)),
    ("mace cpu order", (2, 3, 4, 5), torch.int32, mace.CpuLayout.CPU_NCHW),
]


def host(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return (torch.randn(shape, generator=gen) * 100).to(dtype)


def save_load(obj: object, **load_kwargs: object) -> object:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def assert_same_device_tensor(loaded: torch.Tensor, saved: torch.Tensor) -> None:
    assert loaded.device == saved.device and loaded.dtype == saved.dtype
    assert (loaded.shape, loaded.stride(), loaded.storage_offset()) == (saved.shape, saved.stride(),
                                                                         saved.storage_offset())
    assert loaded.device_tensor_layout() == saved.device_tensor_layout()
    assert bits_equal(loaded.cpu(), saved.cpu())
    assert bits_equal(torch_layouts.device_memory(loaded), torch_layouts.device_memory(saved)), \
        "device memory (padding included) differs after loading"


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("name, shape, dtype, spec", FAMILY_TABLE, ids=[row[0] for row in FAMILY_TABLE])
def test_every_family_round_trips(name: str, shape: tuple[int, ...], dtype: torch.dtype, spec: object,
                                  weights_only: bool) -> None:
    y = move(host(shape, dtype), spec)
    views = {"whole": y, "slice": y[1:], "step": y.narrow(-1, 1, shape[-1] - 1)[..., ::2], "t": y.transpose(0, -1)}
    loaded = save_load(views, weights_only=weights_only)
    for key, saved in views.items():
        assert_same_device_tensor(loaded[key], saved)
    storages = {loaded[key].untyped_storage().data_ptr() for key in views}
    assert len(storages) == 1, "views of one buffer no longer share it after loading"
    assert loaded["whole"].untyped_storage().data_ptr() != y.untyped_storage().data_ptr()


@pytest.mark.parametrize("name, shape, dtype, spec", FAMILY_TABLE, ids=[row[0] for row in FAMILY_TABLE])
def test_map_location_cpu(name: str, shape: tuple[int, ...], dtype: torch.dtype, spec: object) -> None:
    y = move(host(shape, dtype), spec)
    loaded = save_load({"y": y, "v": y[1:]}, map_location="cpu", weights_only=True)
    assert loaded["y"].device.type == "cpu" and bits_equal(loaded["y"], y.cpu())
    assert bits_equal(loaded["v"], y[1:].cpu())


@scaled(40)
@given(cases(), st.booleans())
def test_random_layouts_round_trip(case: tuple[torch.Tensor, object], weights_only: bool) -> None:
    x, spec = case
    y = move(x, spec)
    loaded = save_load([y, y.detach()], weights_only=weights_only)
    assert_same_device_tensor(loaded[0], y)
    assert loaded[1].untyped_storage().data_ptr() == loaded[0].untyped_storage().data_ptr()


def test_requires_grad_and_modules() -> None:
    layer = torch.nn.Linear(70, 5).to("spyre")
    layer.weight = torch.nn.Parameter(
        layer.weight.detach().to("spyre", device_layout=SpyreTensorLayout((5, 70), torch.float32, [1, 0])))
    state = save_load(layer.state_dict(), weights_only=True)
    assert_same_device_tensor(state["weight"], layer.weight.detach())
    assert_same_device_tensor(state["bias"], layer.bias.detach())
    fresh = torch.nn.Linear(70, 5).to("spyre")
    fresh.load_state_dict(state)
    assert torch.equal(fresh.weight.cpu(), layer.weight.cpu())
    leaf = torch.ones(3, 4).to("spyre").requires_grad_()
    assert save_load(leaf).requires_grad


# -- corrupted files ---------------------------------------------------------------------------------
CORRUPTION_SCRIPT = """
    import io, random, sys, faulthandler
    faulthandler.enable()
    import torch, torch_layouts
    from torch_layouts import SpyreTensorLayout, htp, mace, tensorrt

    count, seed = int(sys.argv[1]), int(sys.argv[2])
    x = torch.randn(2, 3, 5, 7)
    tensors = {
        "spyre": x.to("spyre", device_layout=SpyreTensorLayout(x.shape, torch.float32, [3, 0, 1, 2], pad_value=-3)),
        "htp": x.half().to("spyre", device_layout=htp.R4CroutonLayout),
        "trt": x.to(torch.int8).to("spyre", device_layout=tensorrt.TensorFormat.kCHW4),
        "mace": x.to("spyre", device_layout=mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL)),
    }
    tensors["view"] = tensors["htp"][:, 1:, ::2]
    files = []
    for zipped in (True, False):
        buffer = io.BytesIO()
        torch.save(tensors, buffer, _use_new_zipfile_serialization=zipped)
        files.append(buffer.getvalue())

    rng = random.Random(seed)
    outcomes = {"raised": 0, "loaded": 0}
    start = torch.spyre.memory_allocated()

    def load(data, weights_only):
        try:
            result = torch.load(io.BytesIO(data), weights_only=weights_only)
        except Exception:
            outcomes["raised"] += 1
            return
        for value in (result.values() if isinstance(result, dict) else []):
            if isinstance(value, torch.Tensor):
                value.cpu()  # a loaded tensor must be readable
                if value.device.type == "spyre":
                    torch_layouts.device_memory(value)
        outcomes["loaded"] += 1

    for data in files:
        n = len(data)
        cuts = sorted(set(rng.sample(range(n), min(n, count)) + list(range(0, min(n, 64)))))
        for cut in cuts:
            load(data[:cut], weights_only=cut % 2 == 0)
        for _ in range(count):
            damaged = bytearray(data)
            for _ in range(rng.choice([1, 1, 2, 8])):
                i = rng.randrange(n)
                damaged[i] = rng.choice([damaged[i] ^ (1 << rng.randrange(8)), 0, 0xFF, rng.randrange(256)])
            load(bytes(damaged), weights_only=rng.random() < 0.5)
    import gc; gc.collect()
    print("ok", outcomes, torch.spyre.memory_allocated() - start)
"""


def run_corruption(count: int, seed: int) -> None:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(CORRUPTION_SCRIPT), str(count), str(seed)],
                            cwd=REPO, capture_output=True, text=True, timeout=900,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TORCH_LAYOUTS_DEVICE_MEMORY": "64MiB"})
    assert result.returncode == 0 and result.stdout.startswith("ok"), (
        f"exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    assert "'raised': 0" not in result.stdout
    assert result.stdout.strip().endswith(" 0"), f"corrupted loads leaked device memory: {result.stdout}"


def test_corrupted_files_raise_never_crash() -> None:
    run_corruption(150, seed=0)


@pytest.mark.long
def test_corrupted_files_long() -> None:
    run_corruption(3000, seed=1)


def test_not_a_file_raises() -> None:
    for data in (b"", b"\x80", b"PK\x03\x04garbage", b"\x80\x02}q\x00."):
        with pytest.raises(Exception):  # noqa: B017 - any error is fine, a crash is not
            torch.load(io.BytesIO(data), weights_only=True)


def test_bytes_survive_exactly() -> None:
    """NaN payloads and -0.0 in the saved buffer come back as the same bits."""
    bits = torch.tensor([0x7E01, -0x8000, 0x7C00, -1, 0x0001] * 13, dtype=torch.int16)
    layout = SpyreTensorLayout((5, 13), torch.float16, [1, 0])
    y = bits.view(torch.float16).view(5, 13).to("spyre", device_layout=layout)
    assert torch.equal(as_bits(save_load(y, weights_only=True).cpu()), bits.view(5, 13))


class _CorruptView:
    """Pickles as a view of a real device buffer whose storage offset points past the base, as a
    damaged file can (found by the corruption fuzzer: one byte of the view record changed)."""

    def __reduce__(self) -> tuple:
        view = torch.arange(24.0).view(2, 3, 4).to("spyre")[:, 1:]
        geometry = (tuple(view.shape), tuple(view.stride()), view.storage_offset())
        rebuild, args = view._reduce_ex_internal(2)
        args = tuple((*a[:2], a[2] + 5, *a[3:]) if isinstance(a, tuple) and a[:3] == geometry else a for a in args)
        assert any(isinstance(a, tuple) and a[:3] == (geometry[0], geometry[1], geometry[2] + 5) for a in args)
        return rebuild, args


def test_corrupted_view_is_rejected_at_load() -> None:
    buffer = io.BytesIO()
    torch.save(_CorruptView(), buffer)
    buffer.seek(0)
    with pytest.raises((ValueError, IndexError, RuntimeError)):
        torch.load(buffer, weights_only=True)
