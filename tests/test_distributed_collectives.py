"""Collectives on spyre tensors across 2 processes equal the same collectives on CPU tensors.

All run in one 2-process run on 127.0.0.1 (``collectives`` in distributed_scenarios.py), in
three groups: ``new_group("gloo")``, the default group of ``init_process_group()`` and
``"cpu:gloo,spyre:spyre_gloo"``; rank 1's spyre tensors use a different layout from rank 0's.
Every result must equal the CPU result bit for bit, stay on spyre in its own layout, and leave
device memory exactly as a fresh copy of the result would (padding untouched by the transfer).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from distributed_scenarios import COLLECTIVES, DTYPES
from distributed_support import run

EXPECTED = {f"{name}[{dt}]" for dt in DTYPES for name in COLLECTIVES
            if not (name == "all_reduce_avg" and not dt.is_floating_point)}


@pytest.fixture(scope="module")
def runs() -> list[dict[str, Any]]:
    """One 2-process run, two simulated devices per process: rank r on spyre:r."""
    return run("collectives", world=2, timeout=300, env={"TORCH_LAYOUTS_DEVICE_COUNT": "2"})


def assert_matches_cpu(rank: int, name: str, outcome: dict[str, Any]) -> None:
    where = f"rank {rank}, {name}"
    assert len(outcome["spyre"]) == len(outcome["cpu"]), where
    for spyre, cpu in zip(outcome["spyre"], outcome["cpu"]):
        assert spyre.dtype == cpu.dtype and spyre.shape == cpu.shape, where
        assert torch.equal(spyre, cpu), f"{where}: max diff {(spyre.double() - cpu.double()).abs().max()}"
    assert set(outcome["devices"]) <= {f"spyre:{rank}"}, where
    assert outcome["layout_kept"], f"{where}: a tensor changed layout"
    assert outcome["memory_clean"], f"{where}: device memory differs from a fresh copy of the result"


def test_every_collective_and_dtype_ran(runs: list[dict[str, Any]]) -> None:
    for out in runs:
        assert set(out["gloo"]) == EXPECTED
        assert len(out["default"]) == 6 and len(out["pair"]) == 3


def test_ranks_hold_different_layouts(runs: list[dict[str, Any]]) -> None:
    """Rank 1's 2-D tensors are stick-major on dim 0, its 4-D float32 ones HTP croutons."""
    for key in ("all_reduce_sum[torch.float16]", "all_reduce_4d[torch.float32]"):
        layouts = [out["gloo"][key]["layouts"] for out in runs]
        assert layouts[0] != layouts[1], key


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
def test_collective_matches_cpu_in_a_gloo_group(runs: list[dict[str, Any]], name: str) -> None:
    for rank, out in enumerate(runs):
        for key, outcome in out["gloo"].items():
            if key.startswith(f"{name}["):
                assert_matches_cpu(rank, key, outcome)


@pytest.mark.parametrize("group", ["default", "pair"])
def test_collectives_match_cpu_in_spyre_gloo_groups(runs: list[dict[str, Any]], group: str) -> None:
    """The default group (``init_process_group()``) and ``"cpu:gloo,spyre:spyre_gloo"``."""
    for rank, out in enumerate(runs):
        for key, outcome in out[group].items():
            assert_matches_cpu(rank, f"{group}: {key}", outcome)


def test_backends_picked_for_each_group(runs: list[dict[str, Any]]) -> None:
    for rank, out in enumerate(runs):
        assert out["backends"] == {"default": {"spyre": "gloo"},  # spyre_gloo's engine
                                   "gloo": {"cpu": "gloo", "cuda": "gloo", "spyre": "gloo"},
                                   "pair": {"cpu": "gloo", "spyre": "gloo"}}
        assert out["current_device"] == rank
        assert out["objects"] == [{"rank": 0}, {"rank": 1}]  # object collectives go through spyre
        # like cuda's default nccl group, the default spyre group has no CPU backend
        assert "No backend type associated with device type cpu" in out["cpu_on_default_group"]


def test_dtensor_and_functional_collectives_on_a_spyre_mesh(runs: list[dict[str, Any]]) -> None:
    for rank, out in enumerate(runs):
        checks = out["dtensor"]
        assert checks["spyre_devices"] == ["spyre"] and checks["cpu_devices"] == ["cpu"]
        assert checks["spyre"].keys() == checks["cpu"].keys() and len(checks["cpu"]) == 5
        for name, cpu in checks["cpu"].items():
            assert torch.equal(checks["spyre"][name], cpu), f"rank {rank}: {name}"


@pytest.mark.long
def test_every_collective_matches_cpu_on_four_ranks() -> None:
    runs = run("collectives", world=4, timeout=600, env={"TORCH_LAYOUTS_DEVICE_COUNT": "4"})
    for rank, out in enumerate(runs):
        assert set(out["gloo"]) == EXPECTED
        for group in ("gloo", "default", "pair"):
            for key, outcome in out[group].items():
                assert_matches_cpu(rank, f"{group}: {key}", outcome)
