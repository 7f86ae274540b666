"""The spyre device runtime: registration, ``torch.spyre``, device index rules, memory statistics,
128-byte alignment, capacity and out-of-memory, random number generation.

The environment (TORCH_LAYOUTS_DEVICE_MEMORY, TORCH_LAYOUTS_DEVICE_COUNT) is read once at
import, so every test that sets it runs a script in a fresh interpreter; those scripts all
start together (``runs`` fixture) and report what they saw as JSON.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torch_layouts
from torch_layouts import DeviceLayout, SpyreTensorLayout, _C
from torch_layouts.core.layout import binding_key

REPO = Path(__file__).resolve().parents[1]
GiB, MiB, KiB = 2**30, 2**20, 2**10

PRELUDE = "import json\nout = {}\n"
IMPORTS = "import torch, torch_layouts\nfrom torch_layouts import SpyreTensorLayout\n"

SCRIPTS = {
    # importing the package alone (torch not imported first) registers the device
    "bare import": ({}, """
        import torch_layouts, torch
        out["backend"] = torch._C._get_privateuse1_backend_name()
    """),
    "defaults": ({}, """
        out["count"] = torch.spyre.device_count()
        out["info"] = list(torch.spyre.mem_get_info())
        out["capacity"] = torch.spyre.memory_stats()["capacity_bytes"]
    """),
    "one point five KiB": ({"TORCH_LAYOUTS_DEVICE_MEMORY": "1.5KiB"}, """
        out["capacity"] = torch.spyre.mem_get_info()[1]
        a = torch.empty(1024, dtype=torch.uint8, device="spyre")
        try:
            torch.empty(1024, dtype=torch.uint8, device="spyre")
        except torch.OutOfMemoryError as e:
            out["error"] = str(e)
    """),
    # a misconfigured device fails where it is first used (importing torch and the package works)
    "bad memory": ({"TORCH_LAYOUTS_DEVICE_MEMORY": "64XB"}, "torch.ones(2).add(1); torch.empty(1, device='spyre')"),
    "bad count zero": ({"TORCH_LAYOUTS_DEVICE_COUNT": "0"}, "torch.empty(1, device='spyre')"),
    "oom": ({"TORCH_LAYOUTS_DEVICE_MEMORY": "64MiB"}, """
        MiB = 2**20
        base = torch.spyre.memory_allocated()
        a = torch.empty(40 * MiB, dtype=torch.uint8, device="spyre")
        out["after_a"] = torch.spyre.memory_allocated() - base
        out["errors"] = []
        def attempt(what, make):
            before = torch.spyre.memory_allocated()
            try:
                make()
                out["errors"].append([what, None, 0])
            except torch.OutOfMemoryError as e:
                out["errors"].append([what, str(e), torch.spyre.memory_allocated() - before])
        attempt("empty", lambda: torch.empty(40 * MiB, dtype=torch.uint8, device="spyre"))
        attempt("op result", lambda: a + 1)
        attempt("to with a layout", lambda: torch.zeros(10 * MiB).to(
            "spyre", device_layout=SpyreTensorLayout((10 * MiB,), torch.float32)))
        attempt("random factory", lambda: torch.randn(8 * MiB, device="spyre"))
        out["num_ooms"] = torch.spyre.memory_stats()["num_ooms"]
        out["usable"] = (torch.arange(10, device="spyre") * 2).cpu().tolist()
        del a
        out["after_del"] = torch.spyre.memory_allocated() - base
        out["big_after_free"] = torch.empty(60 * MiB, dtype=torch.uint8, device="spyre").numel()
        # two freed 8 MiB blocks fill the 16 MiB cache (emptied of the small blocks kept so far);
        # a 56 MiB request drops it rather than fail
        torch.spyre.empty_cache()
        blocks = [torch.empty(8 * MiB, dtype=torch.uint8, device="spyre") for _ in range(2)]
        del blocks
        out["cached"] = torch.spyre.memory_stats()["inactive_split_bytes.all.current"]
        out["free_with_cache"] = torch.spyre.mem_get_info()[0]
        out["fits_after_drop"] = torch.empty(56 * MiB, dtype=torch.uint8, device="spyre").numel()
        out["cached_after_drop"] = torch.spyre.memory_stats()["inactive_split_bytes.all.current"]
    """),
    "devices": ({"TORCH_LAYOUTS_DEVICE_COUNT": "3", "TORCH_LAYOUTS_DEVICE_MEMORY": "2GB"}, """
        out["count"] = torch.spyre.device_count()
        out["capacities"] = [torch.spyre.mem_get_info(i)[1] for i in range(3)]
        out["first"] = torch.spyre.current_device()
        with torch.spyre.device(2):
            out["inside"] = torch.spyre.current_device()
            with torch.spyre.device("spyre:1"):
                out["nested"] = torch.spyre.current_device()
            out["after_nested"] = torch.spyre.current_device()
            a = torch.ones(4, 70, device="spyre")
            out["made_inside"] = [str(a.device), str((a * 3).device)]
        out["after"] = torch.spyre.current_device()
        out["allocated"] = [torch.spyre.memory_allocated(i) for i in range(3)]
        out["allocated_by_name"] = torch.spyre.memory_allocated("spyre:2")
        x = torch.randn(4, 70)
        L = SpyreTensorLayout((4, 70), torch.float32, [1, 0])
        y1 = x.to("spyre:1", device_layout=L)
        y2 = y1.to("spyre:2", device_layout=L)
        y0 = y2.to("spyre:0")
        out["moves"] = [[str(t.device), bool(torch.equal(t.cpu(), x))] for t in (y1, y2, y0)]
        out["layouts"] = [y2.device_tensor_layout() == L,
                          y0.device_tensor_layout() == SpyreTensorLayout((4, 70), torch.float32)]
        out["op_device"] = str((y1 + 1).device)
        torch.spyre.set_device("spyre:1")
        out["set_str"] = [torch.spyre.current_device(), str(torch.empty(2, device="spyre").device)]
        torch.spyre.set_device(torch.device("spyre", 2))
        out["set_device_obj"] = torch.spyre.current_device()
        torch.spyre.set_device(0)
        out["errors"] = {}
        for name, make in {"empty": lambda: torch.empty(2, device="spyre:3"), "set": lambda: torch.spyre.set_device(5),
                           "ctx": lambda: torch.spyre.device(3).__enter__(),
                           "stats": lambda: torch.spyre.memory_allocated(4)}.items():
            try:
                make()
                out["errors"][name] = None
            except Exception as e:
                out["errors"][name] = [type(e).__name__, str(e)]
        out["states"] = len(torch.spyre.get_rng_state_all())
        torch.manual_seed(11)
        out["same_seed_same_numbers"] = torch.equal(torch.randn(5, device="spyre:0").cpu(),
                                                    torch.randn(5, device="spyre:1").cpu())
        torch.spyre.manual_seed_all(3)
        before = [torch.spyre.get_rng_state(i).clone() for i in range(3)]
        torch.empty(100, device="spyre:1").normal_()
        out["draws_from"] = [not torch.equal(torch.spyre.get_rng_state(i), before[i]) for i in range(3)]
    """),
}


@pytest.fixture(scope="module")
def runs() -> dict[str, subprocess.Popen]:
    """Start every environment script at once; each test waits for the one it reads."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_LAYOUTS_DEVICE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    procs = {}
    for name, (extra, body) in SCRIPTS.items():
        imports = "" if name == "bare import" else IMPORTS
        code = PRELUDE + imports + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
        procs[name] = subprocess.Popen([sys.executable, "-c", code], env={**env, **extra}, cwd=REPO,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield procs
    for proc in procs.values():
        proc.kill()
        proc.communicate()


def result(runs: dict, name: str) -> dict:
    stdout, stderr = runs[name].communicate(timeout=120)
    assert runs[name].returncode == 0, stderr
    return json.loads(stdout.splitlines()[-1])


def failure(runs: dict, name: str) -> str:
    """The error a failed run reports. With the package installed, ``import torch`` loads it
    through the ``torch.backends`` entry point and reports our error as the cause of its own
    "Failed to load the backend extension"; the line naming our error is the one returned."""
    _, stderr = runs[name].communicate(timeout=120)
    assert runs[name].returncode != 0
    lines = stderr.strip().splitlines()
    ours = [line for line in lines if line.startswith(("ValueError:", "TypeError:", "IndexError:"))]
    return ours[-1] if ours else lines[-1]


# -- registration and torch.spyre ------------------------------------------------------------------
def test_device_is_registered():
    assert torch._C._get_privateuse1_backend_name() == "spyre"
    assert torch.device("spyre:0").type == "spyre" and torch.device("spyre").index is None
    assert torch.get_device_module("spyre") is torch.spyre
    assert torch.accelerator.current_accelerator() == torch.device("spyre")
    assert torch.accelerator.device_count() == torch.spyre.device_count()
    x = torch.ones(3)
    y = x.spyre()
    assert y.is_spyre and not x.is_spyre and y.device == torch.device("spyre", 0)
    assert x.untyped_storage().spyre().device.type == "spyre"
    assert torch.ones(2, device="spyre").device == torch.device("spyre", 0)


def test_import_without_torch_first(runs):
    assert result(runs, "bare import") == {"backend": "spyre"}


def test_defaults_one_device_of_16_gib(runs):
    out = result(runs, "defaults")
    assert out == {"count": 1, "info": [16 * GiB, 16 * GiB], "capacity": 16 * GiB}


def test_spyre_module_functions():
    assert torch.spyre.is_available() and torch.spyre.is_initialized()
    assert torch.spyre.device_count() >= 1 and torch.spyre.current_device() == 0
    assert torch.spyre.synchronize() is None and torch.spyre.synchronize("spyre:0") is None
    assert torch.spyre.empty_cache() is None
    assert "spyre:0" in torch.spyre.get_device_name()
    with torch.spyre.device(0):
        assert torch.spyre.current_device() == 0
    torch.spyre.set_device("spyre")
    assert torch.spyre.current_device() == 0


BAD_INDEX = [
    ("factory", lambda: torch.empty(3, device="spyre:1")),
    ("to", lambda: torch.ones(3).to("spyre:7")),
    ("set_device", lambda: torch.spyre.set_device(1)),
    ("context", lambda: torch.spyre.device(2).__enter__()),
    ("memory stats", lambda: torch.spyre.memory_allocated(3)),
    ("synchronize", lambda: torch.spyre.synchronize(5)),
    ("rng state", lambda: torch.spyre.get_rng_state(4)),
]


@pytest.mark.parametrize("name,make", BAD_INDEX, ids=[n for n, _ in BAD_INDEX])
def test_bad_device_index(name, make):
    if torch.spyre.device_count() != 1:
        pytest.skip("the suite runs with one spyre device")
    with pytest.raises(RuntimeError, match=r"The device index is out of range\. It must be in \[0, 1\), but got "
                                           r"spyre:\d \(there is 1 spyre device"):
        make()
    assert torch.spyre.current_device() == 0


def test_bad_device_arguments():
    with pytest.raises(ValueError, match="expected a spyre device, got cpu"):
        torch.spyre.set_device("cpu")
    with pytest.raises(ValueError, match="expected a spyre device"):
        torch.spyre.memory_allocated(torch.device("meta"))
    with pytest.raises(TypeError, match="device must be"):
        torch.spyre.set_device(True)
    with pytest.raises(TypeError, match="device must be"):
        torch.spyre.memory_stats(1.5)


def test_environment_variables(runs):
    assert result(runs, "one point five KiB")["capacity"] == 1536
    assert result(runs, "devices")["capacities"] == [2 * 10**9] * 3
    assert "TORCH_LAYOUTS_DEVICE_MEMORY='64XB' is not a size" in failure(runs, "bad memory")
    assert "ValueError: TORCH_LAYOUTS_DEVICE_COUNT='0' must be an integer in [1, 64]" == failure(runs, "bad count zero")


def test_several_devices(runs):
    out = result(runs, "devices")
    assert out["count"] == 3
    assert (out["first"], out["inside"], out["nested"], out["after_nested"], out["after"]) == (0, 2, 1, 2, 0)
    assert out["made_inside"] == ["spyre:2", "spyre:2"]
    # ones(4, 70) float32: [ceil(70/32)=3 tiles, 4 rows, 32] * 4 bytes = 1536 (a * 3 is gone)
    assert out["allocated"] == [0, 0, 1536] and out["allocated_by_name"] == 1536
    assert out["moves"] == [["spyre:1", True], ["spyre:2", True], ["spyre:0", True]]
    assert out["layouts"] == [True, True] and out["op_device"] == "spyre:1"
    assert out["set_str"] == [1, "spyre:1"] and out["set_device_obj"] == 2
    for name, index in [("empty", 3), ("set", 5), ("ctx", 3), ("stats", 4)]:
        assert out["errors"][name] == [
            "RuntimeError", f"The device index is out of range. It must be in [0, 3), but got spyre:{index} "
            "(there are 3 spyre devices; set TORCH_LAYOUTS_DEVICE_COUNT for more)"]
    assert out["states"] == 3


# -- memory ---------------------------------------------------------------------------------------------
STAT_KEYS = {
    "allocated_bytes.all.current", "allocated_bytes.all.peak", "allocated_bytes.all.allocated",
    "allocated_bytes.all.freed", "reserved_bytes.all.current", "reserved_bytes.all.peak",
    "active_bytes.all.current", "active_bytes.all.peak", "requested_bytes.all.current",
    "requested_bytes.all.peak", "allocation.all.current", "allocation.all.peak", "allocation.all.allocated",
    "allocation.all.freed", "num_alloc_retries", "num_ooms",
}


@pytest.fixture
def no_gc():
    """No garbage collection during the test, so only the test's own tensors come and go."""
    gc.disable()
    yield
    gc.enable()


def test_memory_statistics(no_gc):
    assert STAT_KEYS <= set(torch.spyre.memory_stats())
    torch.spyre.empty_cache()
    s0 = torch.spyre.memory_stats()
    # rank 7: a plain row-major layout of 6 float16 bytes, reserved as one 128-byte block
    small = torch.empty((1, 1, 1, 1, 1, 1, 3), dtype=torch.float16, device="spyre")
    layout = SpyreTensorLayout((5, 100, 150), torch.float16, [1, 0, 2])
    big = torch.empty((5, 100, 150), dtype=torch.float16, device="spyre", device_layout=layout)
    s1 = torch.spyre.memory_stats()
    assert small.untyped_storage().nbytes() == 6 and big.untyped_storage().nbytes() == layout.nbytes == 192000
    assert s1["allocated_bytes.all.current"] - s0["allocated_bytes.all.current"] == 128 + 192000
    assert s1["requested_bytes.all.current"] - s0["requested_bytes.all.current"] == 6 + 192000
    assert s1["allocation.all.current"] - s0["allocation.all.current"] == 2
    assert s1["allocation.all.allocated"] - s0["allocation.all.allocated"] == 2
    assert s1["allocated_bytes.all.allocated"] - s0["allocated_bytes.all.allocated"] == 128 + 192000
    assert torch.spyre.memory_allocated() == s1["allocated_bytes.all.current"] == torch.spyre.memory_reserved()
    assert torch.spyre.max_memory_allocated() >= torch.spyre.memory_allocated()
    free, capacity = torch.spyre.mem_get_info()
    assert capacity == _C._capacity(0) and free == capacity - torch.spyre.memory_allocated()
    assert torch.spyre.memory_stats("spyre:0") == torch.spyre.memory_stats(0) == torch.spyre.memory_stats()

    torch.spyre.reset_peak_memory_stats()
    peak = torch.spyre.max_memory_allocated()
    assert peak == torch.spyre.memory_allocated()
    del big
    s2 = torch.spyre.memory_stats()
    assert s1["allocated_bytes.all.current"] - s2["allocated_bytes.all.current"] == 192000
    assert s2["allocated_bytes.all.freed"] - s1["allocated_bytes.all.freed"] == 192000
    assert s2["allocation.all.freed"] - s1["allocation.all.freed"] == 1
    assert torch.spyre.max_memory_allocated() == peak  # the peak stays until reset
    torch.spyre.reset_peak_memory_stats()
    assert torch.spyre.max_memory_allocated() == torch.spyre.memory_allocated() == peak - 192000
    temp = torch.empty(1000, dtype=torch.uint8, device="spyre")  # 8 sticks of 128
    assert torch.spyre.max_memory_allocated() == peak - 192000 + 1024
    del temp, small
    assert torch.spyre.memory_allocated() == s0["allocated_bytes.all.current"]


def test_freed_large_blocks_are_cached_and_reused(no_gc):
    torch.spyre.empty_cache()
    reserved0, allocated0 = torch.spyre.memory_reserved(), torch.spyre.memory_allocated()
    assert reserved0 == allocated0
    a = torch.empty(3 * MiB, dtype=torch.uint8, device="spyre")
    ptr = a.data_ptr()
    del a  # kept whole (its host backing is rounded to 2 MiB pages) for the next request of that size
    assert torch.spyre.memory_allocated() == allocated0
    assert torch.spyre.memory_reserved() == reserved0 + 4 * MiB
    assert torch.spyre.memory_stats()["inactive_split_bytes.all.current"] == 4 * MiB
    assert torch.spyre.mem_get_info()[0] == torch.spyre.mem_get_info()[1] - reserved0 - 4 * MiB
    b = torch.empty(3 * MiB + 5, dtype=torch.uint8, device="spyre")  # same backing size: the same block
    assert b.data_ptr() == ptr and torch.spyre.memory_reserved() == torch.spyre.memory_allocated()
    del b
    small = torch.empty(1000, dtype=torch.uint8, device="spyre")
    del small  # kept too, by its 128-byte-rounded size
    assert torch.spyre.memory_reserved() == reserved0 + 4 * MiB + 1024
    assert torch.spyre.max_memory_reserved() >= reserved0 + 4 * MiB + 1024
    torch.spyre.empty_cache()
    assert torch.spyre.memory_reserved() == torch.spyre.memory_allocated() == allocated0


# Freed blocks the allocator keeps, by size: (bytes asked, bytes kept after the free, another size
# that gets the same block). Below 64 KiB sizes round up to 128 bytes; from there to 16 KiB
# steps, from 1 MiB to whole 2 MiB pages.
KEPT_BLOCKS = [
    (1, 128, 128),
    (1000, 1024, 897),
    (64 * KiB - 128, 64 * KiB - 128, 64 * KiB - 255),
    (64 * KiB, 64 * KiB, 64 * KiB - 100),
    (100 * KiB, 112 * KiB, 112 * KiB),
    (1 * MiB - 128, 1 * MiB, 1 * MiB - 16 * KiB + 1),
    (3 * MiB, 4 * MiB, 3 * MiB + 5),
]


@pytest.mark.parametrize("nbytes, kept, other", KEPT_BLOCKS, ids=[str(c[0]) for c in KEPT_BLOCKS])
def test_freed_blocks_are_kept_by_rounded_size(nbytes, kept, other, no_gc):
    torch.spyre.empty_cache()
    reserved0 = torch.spyre.memory_reserved()
    a = torch.empty(nbytes, dtype=torch.uint8, device="spyre")
    ptr = a.data_ptr()
    del a
    assert torch.spyre.memory_reserved() == reserved0 + kept
    if other is not None:
        b = torch.empty(other, dtype=torch.uint8, device="spyre")
        assert b.data_ptr() == ptr and torch.spyre.memory_reserved() == torch.spyre.memory_allocated()
        del b
    torch.spyre.empty_cache()
    assert torch.spyre.memory_reserved() == reserved0


def test_the_block_freed_last_is_reused_first(no_gc):
    """Of several cached blocks of one size, a request gets the one freed last (still in the CPU's
    caches, as malloc would hand it out), whatever order they were allocated or freed in."""
    torch.spyre.empty_cache()
    blocks = [torch.empty(3 * MiB, dtype=torch.uint8, device="spyre") for _ in range(4)]
    ptrs = [b.data_ptr() for b in blocks]
    order = [2, 0, 3, 1]
    for i in order:
        blocks[i] = None
    reused = [torch.empty(3 * MiB, dtype=torch.uint8, device="spyre") for _ in range(4)]
    assert [r.data_ptr() for r in reused] == [ptrs[i] for i in reversed(order)]
    del reused
    torch.spyre.empty_cache()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int8, torch.int64, torch.bool])
def test_fresh_storage_is_128_byte_aligned(dtype):
    sizes = [(1,), (3,), (5, 7), (1, 1, 1, 1, 1, 1, 5), (2, 3, 1, 1, 1, 1, 3), (129,), (3, 65)]
    keep = []
    for size in sizes:
        for t in (torch.empty(size, dtype=dtype, device="spyre"), torch.zeros(size, dtype=dtype).to("spyre"),
                  torch.ones(size, dtype=dtype, device="spyre") + 0):
            assert t.untyped_storage().data_ptr() % 128 == 0
            keep.append(t)  # alive, so every block is a distinct allocation
    assert len({t.untyped_storage().data_ptr() for t in keep}) == len(keep)


def test_out_of_memory(runs):
    out = result(runs, "oom")
    assert out["after_a"] == 40 * MiB
    expected = {
        "empty": 40 * MiB,
        "op result": 40 * MiB,
        "to with a layout": 40 * MiB,
        "random factory": 32 * MiB,
    }
    assert [what for what, _, _ in out["errors"]] == list(expected)
    for what, message, leaked in out["errors"]:
        assert message is not None, f"{what} did not raise"
        assert f"({expected[what]} bytes)" in message  # what was asked
        assert "24.00 MiB free" in message and "64.00 MiB capacity" in message
        assert "spyre:0 out of memory" in message and "TORCH_LAYOUTS_DEVICE_MEMORY" in message
        assert leaked == 0
    assert out["num_ooms"] == 4
    assert out["usable"] == [2 * i for i in range(10)]
    assert out["after_del"] == 0 and out["big_after_free"] == 60 * MiB
    assert out["cached"] == 16 * MiB and out["free_with_cache"] == 48 * MiB
    assert out["fits_after_drop"] == 56 * MiB and out["cached_after_drop"] == 0


def test_tiny_capacity(runs):
    out = result(runs, "one point five KiB")
    assert "(1024 bytes); 512 bytes free of 1.50 KiB capacity" in out["error"]


# -- random numbers -----------------------------------------------------------------------------------
def _draw() -> torch.Tensor:
    return torch.cat([torch.randn(50, device="spyre").cpu(), torch.rand(20, device="spyre").cpu(),
                      torch.randint(0, 1000, (10,), device="spyre").float().cpu(),
                      torch.empty(30, device="spyre").normal_().cpu(),
                      torch.randperm(20, device="spyre").float().cpu(),
                      torch.bernoulli(torch.full((20,), 0.5, device="spyre")).cpu(),
                      torch.multinomial(torch.ones(10, device="spyre"), 5).float().cpu()])


def test_same_seed_same_numbers():
    torch.manual_seed(123)
    a = _draw()
    torch.manual_seed(123)
    b = _draw()
    torch.manual_seed(124)
    c = _draw()
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a[:50].std() > 0.5 and 0 < a[50:70].min() and a[50:70].max() < 1


def test_spyre_manual_seed_and_independence_from_cpu():
    torch.spyre.manual_seed(7)
    assert torch.spyre.initial_seed() == 7
    a = _draw()
    torch.spyre.manual_seed(7)
    torch.randn(1000)  # the CPU generator is a different stream
    b = _draw()
    assert torch.equal(a, b)
    torch.manual_seed(7)
    torch.spyre.manual_seed(8)  # only the spyre generator changes
    assert not torch.equal(_draw(), a)
    torch.spyre.manual_seed_all(7)
    assert torch.equal(_draw(), a)


def test_rng_state_round_trip():
    torch.spyre.manual_seed(5)
    _draw()
    state = torch.spyre.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = _draw()
    torch.spyre.set_rng_state(state)
    assert torch.equal(_draw(), a)
    torch.spyre.set_rng_state_all([state])
    assert torch.equal(_draw(), a)
    assert torch.equal(torch.spyre.get_rng_state_all()[0], torch.spyre.get_rng_state())
    before = torch.spyre.get_rng_state()
    with torch.random.fork_rng(device_type="spyre"):
        torch.spyre.manual_seed(99)
        _draw()
    assert torch.equal(torch.spyre.get_rng_state(), before)


def test_explicit_generator():
    g = torch.Generator(device="spyre")
    assert g.device == torch.device("spyre", 0)
    g.manual_seed(3)
    a = torch.randn(20, device="spyre", generator=g).cpu()
    g.manual_seed(3)
    default_before = torch.spyre.get_rng_state()
    b = torch.randn(20, device="spyre", generator=g).cpu()
    assert torch.equal(a, b) and torch.equal(torch.spyre.get_rng_state(), default_before)
    state = g.get_state()
    c = torch.empty(20, device="spyre").uniform_(generator=g).cpu()
    g.set_state(state)
    assert torch.equal(torch.empty(20, device="spyre").uniform_(generator=g).cpu(), c)


def test_dropout_draws_from_the_spyre_generator():
    cpu_state = torch.get_rng_state()
    torch.spyre.manual_seed(0)
    a = torch.nn.functional.dropout(torch.ones(200, device="spyre"), 0.5).cpu()
    assert torch.equal(torch.get_rng_state(), cpu_state)
    torch.randn(10)
    torch.spyre.manual_seed(0)
    assert torch.equal(torch.nn.functional.dropout(torch.ones(200, device="spyre"), 0.5).cpu(), a)


def test_seed_reseeds():
    torch.spyre.manual_seed(1)
    torch.spyre.seed()
    assert torch.spyre.initial_seed() != 1


def test_random_ops_use_their_devices_generator(runs):
    out = result(runs, "devices")
    assert out["same_seed_same_numbers"] and out["draws_from"] == [False, True, False]


def test_layout_objects_are_shared_not_copied():
    """A tensor and its views report one layout object, interchangeable with the one given (every
    attribute equal, the host binding included); equal bindings share one runtime record, so a
    later equal layout object gets that same object back (layouts are immutable values). The
    object may be an equal one another test recorded first: identity with ``layout`` is not
    asserted."""
    layout = DeviceLayout([3, 64], [64, 1], torch.float32, host_size=(3, 64))
    y = torch.zeros(3, 64).to("spyre", device_layout=layout)
    reported = y.device_tensor_layout()
    assert binding_key(reported) == binding_key(layout) and y[1:].device_tensor_layout() is reported
    again = DeviceLayout([3, 64], [64, 1], torch.float32, host_size=(3, 64))
    assert torch.zeros(3, 64).to("spyre", device_layout=again).device_tensor_layout() is reported
    assert torch_layouts.device_memory(y).numel() == 192
