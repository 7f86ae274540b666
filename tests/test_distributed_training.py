"""DistributedDataParallel, FSDP2 and FSDP1 on spyre across 2 processes train exactly as on CPU
(losses and final weights), each rank on its own simulated device, with padded parameters too."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from distributed_support import run


def assert_same_training(cpu: dict[str, Any], spyre: dict[str, Any]) -> None:
    torch.testing.assert_close(spyre["losses"], cpu["losses"], rtol=1e-5, atol=1e-6)
    assert cpu["weights"].keys() == spyre["weights"].keys()
    for name, weight in cpu["weights"].items():
        torch.testing.assert_close(spyre["weights"][name], weight, rtol=1e-5, atol=1e-6, msg=name)


def assert_synchronised(runs: list[dict[str, Any]], device: str) -> None:
    """Every rank ends with the same weights (the gradients were averaged), from different losses."""
    first = runs[0][device]
    for other in runs[1:]:
        assert not torch.equal(other[device]["losses"], first["losses"])  # each rank its own data
        for name, weight in first["weights"].items():
            assert torch.equal(other[device]["weights"][name], weight), name


@pytest.fixture(scope="module")
def runs() -> list[dict[str, Any]]:
    """One 2-process run, two simulated devices per process: rank r trains on spyre:r."""
    return run("training", world=2, timeout=300, env={"TORCH_LAYOUTS_DEVICE_COUNT": "2"})


def test_ddp_trains_like_cpu_one_device_per_rank(runs: list[dict[str, Any]]) -> None:
    for rank, out in enumerate(runs):
        assert out["ddp"]["spyre"]["param_devices"] == [f"spyre:{rank}"]
        assert_same_training(out["ddp"]["cpu"], out["ddp"]["spyre"])
    assert_synchronised([out["ddp"] for out in runs], "spyre")
    assert_synchronised([out["ddp"] for out in runs], "cpu")


def test_fsdp2_trains_like_cpu(runs: list[dict[str, Any]]) -> None:
    for rank, out in enumerate(runs):
        assert out["fsdp"]["spyre"]["param_devices"] == [f"spyre:{rank}"]
        assert_same_training(out["fsdp"]["cpu"], out["fsdp"]["spyre"])
    assert_synchronised([out["fsdp"] for out in runs], "spyre")


def test_fsdp1_trains_like_cpu() -> None:
    runs = run("fsdp1", world=2, timeout=240)
    for out in runs:
        assert out["spyre"]["param_devices"] == ["spyre:0"]
        assert_same_training(out["cpu"], out["spyre"])


@pytest.mark.long
@pytest.mark.parametrize("world", [4])
def test_training_like_cpu_on_more_ranks(world: int) -> None:
    runs = run("training", world=world, timeout=600, env={"TORCH_LAYOUTS_DEVICE_COUNT": str(world)})
    for out in runs:
        for kind in out:
            assert_same_training(out[kind]["cpu"], out[kind]["spyre"])
    assert_synchronised([out["ddp"] for out in runs], "spyre")


def test_fsdp2_and_fsdp1_train_like_cpu_with_padded_parameters() -> None:
    """Linear(10, 6) and Linear(6, 10): no parameter (nor FSDP1's flat parameter) fills whole sticks."""
    runs = run("fsdp_padded", world=2, timeout=240)
    for kind in ("fsdp2", "fsdp1"):
        for out in runs:
            assert out[kind]["spyre"]["param_devices"] == ["spyre:0"]
            assert_same_training(out[kind]["cpu"], out[kind]["spyre"])
        assert_synchronised([out[kind] for out in runs], "spyre")


def test_parameter_storage_resize_keeps_a_padded_layout_usable() -> None:
    """What FSDP (fully_shard and FullyShardedDataParallel) does to each unsharded parameter."""
    bias = torch.arange(16, dtype=torch.float32)
    param = torch.empty(16, device="spyre")  # 16 float32 pad to a 32-element stick
    param.untyped_storage().resize_(0)
    param.untyped_storage().resize_(param.numel() * param.itemsize)
    param.copy_(bias.to("spyre"))
    assert torch.equal((param + 1).cpu(), bias + 1)
