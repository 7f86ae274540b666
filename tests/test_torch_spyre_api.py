"""The names Torch-Spyre code imports from ``torch.spyre``: they exist and behave as documented."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest
import torch

import torch_layouts
from torch_layouts import DataFormats, SpyreTensorLayout

F16 = torch.float16


def test_layout_names_are_the_librarys():
    assert torch.spyre.SpyreTensorLayout is SpyreTensorLayout
    assert torch.spyre.DataFormats is DataFormats
    stl = torch.spyre.SpyreTensorLayout([4, 512, 64], [64, 256, 1], torch.spyre.get_device_dtype(F16))
    assert str(stl) == ("SpyreTensorLayout(device_size=[4, 512, 64], stride_map =[64, 256, 1], "
                        "device_dtype=DataFormats.SEN169_FP16)")


@pytest.mark.parametrize("dtype, fmt, eps", [
    (F16, "SEN169_FP16", 64), (torch.float32, "IEEE_FP32", 32), (torch.int8, "SENINT8", 128),
    (torch.int32, "IEEE_INT32", 32), (torch.int64, "IEEE_INT32", 32), (torch.bfloat16, "BFLOAT16", 64),
])
def test_get_device_dtype(dtype, fmt, eps):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.spyre.get_device_dtype(dtype) is DataFormats[fmt]
    assert torch.spyre.get_elem_in_stick(dtype) == eps == DataFormats[fmt].elems_per_stick()


def test_get_device_dtype_refuses_host_only_types():
    with pytest.raises(ValueError, match="float64"):
        torch.spyre.get_device_dtype(torch.float64)


def test_get_spyre_tensor_layout():
    t = torch.zeros(4, 128, dtype=F16, device="spyre")
    assert torch.spyre.get_spyre_tensor_layout(t).device_size == (2, 4, 64)
    with pytest.raises(ValueError, match="cpu"):
        torch.spyre.get_spyre_tensor_layout(torch.zeros(2))


# -- memory ------------------------------------------------------------------------------------
def test_memory_module_is_importable_by_name():
    memory = importlib.import_module("torch.spyre.memory")
    assert memory is torch.spyre.memory
    for name in ("empty_cache", "get_memory_info", "max_memory_allocated", "max_memory_reserved",
                 "memory_allocated", "memory_reserved", "memory_stats", "reset_accumulated_memory_stats",
                 "reset_peak_memory_stats"):
        assert callable(getattr(memory, name)), name


def test_reset_accumulated_memory_stats_restarts_the_counters_only():
    memory = torch.spyre.memory
    keep = torch.zeros(1024, device="spyre")
    torch.zeros(4096, device="spyre")  # allocated and freed
    before = memory.memory_stats()
    assert before["allocated_bytes.all.allocated"] > 0 and before["allocation.all.freed"] > 0
    memory.reset_accumulated_memory_stats()
    after = memory.memory_stats()
    assert after["allocated_bytes.all.allocated"] == after["allocated_bytes.all.freed"] == 0
    assert after["allocation.all.allocated"] == after["num_ooms"] == 0
    assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]  # current untouched
    assert torch.spyre.memory_stats() == after
    t = torch.zeros(256, device="spyre")
    grown = memory.memory_stats()
    assert grown["allocation.all.allocated"] == 1 and grown["allocated_bytes.all.allocated"] >= t.nbytes
    assert memory.memory_allocated() == grown["allocated_bytes.all.current"] >= keep.nbytes + t.nbytes
    free, total = memory.get_memory_info()
    assert 0 <= free <= total == grown["capacity_bytes"]


# -- downcast warning ------------------------------------------------------------------------------
def test_downcast_warning_switch(warn_always):
    assert torch.spyre.get_downcast_warning() is True
    try:
        torch.spyre.set_downcast_warning(False)
        assert torch.spyre.get_downcast_warning() is False
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.zeros(3, 5, 7, dtype=torch.int64, device="spyre")
            torch.spyre.get_device_dtype(torch.int64)
    finally:
        torch.spyre.set_downcast_warning(True)
    with pytest.warns(UserWarning, match="does not support int64"):
        torch.spyre.get_device_dtype(torch.int64)
    with pytest.raises(TypeError, match="bool"):
        torch.spyre.set_downcast_warning(1)


@pytest.fixture
def warn_always():
    """Torch-Spyre's warning is once per process; torch.set_warn_always(True) repeats it."""
    before = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    yield
    torch.set_warn_always(before)


@pytest.mark.parametrize("make", [
    lambda: torch.arange(64 * 64).reshape(64, 64).to("spyre"),
    lambda: torch.zeros(5, 5, dtype=torch.int64, device="spyre").copy_(torch.ones(5, 5, dtype=torch.int64)),
    lambda: torch.zeros(2, dtype=torch.int32).to("spyre", torch.int64),
], ids=["to", "copy_", "to-dtype"])
def test_downcast_warning_on_int64_device_tensors(warn_always, make):
    torch.spyre.set_downcast_warning(True)
    with pytest.warns(UserWarning, match="does not support int64.*IEEE_INT32"):
        make()


@pytest.mark.parametrize("value, warns", [("off", False), ("1", True)])
def test_downcast_warning_environment(value, warns):
    code = ("import warnings, torch, torch_layouts\nwarnings.simplefilter('error')\n"
            "torch.zeros(3, dtype=torch.int64).to('spyre')\nprint(torch.spyre.get_downcast_warning())")
    env = {"TORCH_SPYRE_DOWNCAST_WARN": value, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert (out.returncode != 0) is warns, out.stderr[-500:]
    if not warns:
        assert out.stdout.strip() == "False"
    else:
        assert "does not support int64" in out.stderr


# -- fallback warnings, generators ----------------------------------------------------------------
def test_fallback_warning_category():
    assert issubclass(torch.spyre.FallbackWarning, UserWarning)
    assert torch_layouts.FallbackWarning is torch.spyre.FallbackWarning
    torch_layouts.warn_on_fallback(True)
    try:
        x = torch.ones(5, device="spyre")
        with pytest.warns(torch.spyre.FallbackWarning, match="nonzero"):
            torch.nonzero(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error", torch.spyre.FallbackWarning)
            torch.nonzero(x)  # once per op
    finally:
        torch_layouts.warn_on_fallback(False)


def test_fallback_warning_as_error_raises_cleanly():
    torch_layouts.warn_on_fallback(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", torch.spyre.FallbackWarning)
            with pytest.raises(torch.spyre.FallbackWarning, match="bincount"):
                torch.bincount(torch.tensor([1, 2, 2], device="spyre"))
    finally:
        torch_layouts.warn_on_fallback(False)
    assert torch.bincount(torch.tensor([1, 2, 2], device="spyre")).cpu().tolist() == [0, 1, 2]


def test_default_generators_are_stable_objects():
    gens = torch.spyre.default_generators
    assert len(gens) == len(tuple(gens)) == torch.spyre.device_count() and gens[-1] is gens[len(gens) - 1]
    assert gens[0].device == torch.device("spyre", 0)
    assert torch_layouts._C._get_default_generator(0) is gens[0]
    assert torch_layouts._C._get_default_generator(0) is torch_layouts._C._get_default_generator(0)
    torch.spyre.manual_seed(1234)
    assert gens[0].initial_seed() == 1234
