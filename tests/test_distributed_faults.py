"""Faults across 2 processes: mismatched collectives give PyTorch's errors, a dead or stalled rank
gives the others a clear error within the timeout (every run is bounded: a hang fails the test)."""

from __future__ import annotations

import re

import torch
from distributed_support import run

TIMEOUT = 4  # seconds: the process group's timeout in the fault runs


def _same(message: str | None) -> str:
    assert message is not None, "expected an error"
    return re.sub(r"\[F\d+ [\d:.]+ ", "[F ", message)  # glog's timestamp differs between calls


def test_mismatches_match_cpu_and_a_stalled_rank_times_out() -> None:
    runs = run("mismatches_then_stall", world=2, timeout=120,
               env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL", "DIST_TIMEOUT": str(TIMEOUT)})
    out = runs[0]
    for case in ("shape", "list_shape", "dtype", "across_shape", "across_dtype"):
        assert _same(out[f"{case}_spyre"]) == _same(out[f"{case}_cpu"]), case
    assert "invalid tensor size" in out["shape_spyre"]
    assert "dtype" in out["dtype_spyre"]
    assert "Detected mismatch between collectives" in out["across_shape_spyre"]
    assert "Tensor shapes" in out["across_shape_spyre"] and "Tensor dtypes" in out["across_dtype_spyre"]
    assert torch.equal(out["after"], torch.full((5, 70), 2.0))  # the group survives the mismatches
    assert "failed to pass monitoredBarrier" in out["stall"]
    assert TIMEOUT - 0.5 <= out["stall_seconds"] <= TIMEOUT + 5


def test_dead_rank_gives_an_error_not_a_hang() -> None:
    runs = run("rank_dies", world=2, timeout=90, env={"DIST_TIMEOUT": str(TIMEOUT)}, expect_rc={1: 3})
    out = runs[0]
    assert torch.equal(out["first"], torch.full((5, 70), 2.0))
    assert out["error"] is not None and "Connection" in out["error"], out["error"]
    assert out["seconds"] <= TIMEOUT + 5
