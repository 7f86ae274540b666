"""``torch.spyre.memory``: the memory functions of ``torch.accelerator.memory``, for spyre devices.

Torch-Spyre code calls these by module (``torch.spyre.memory.memory_stats()``), e.g.::

    torch.spyre.memory.reset_accumulated_memory_stats()
    torch.spyre.memory.memory_stats()["allocated_bytes.all.allocated"]  # bytes allocated since the reset
"""

from __future__ import annotations

from typing import Any

from .. import _C
from .device_index import DeviceLike, _index

# Counters that only grow (CUDA's "accumulated" statistics): reset_accumulated_memory_stats
# moves their zero; current and peak values are untouched by it.
ACCUMULATED = (
    "allocated_bytes.all.allocated",
    "allocated_bytes.all.freed",
    "allocation.all.allocated",
    "allocation.all.freed",
    "num_alloc_retries",
    "num_ooms",
)
_zero: dict[int, dict[str, int]] = {}

__all__ = [
    "empty_cache",
    "empty_host_cache",
    "get_memory_info",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
]


def memory_stats(device: DeviceLike = None) -> dict[str, Any]:
    """Allocator statistics with ``torch.cuda.memory_stats``' key names; accumulated counters since their reset."""
    index = _index(device)
    stats = _C._memory_stats(index)
    for key, zero in _zero.get(index, {}).items():
        if key in stats:
            stats[key] -= zero
    return dict(sorted(stats.items()))


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    """Restart the accumulated counters (bytes/blocks allocated and freed, OOMs, retries) from zero."""
    index = _index(device)
    stats = _C._memory_stats(index)
    _zero[index] = {key: stats[key] for key in ACCUMULATED if key in stats}


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Restart the peaks from the current values."""
    _C._reset_peak_memory_stats(_index(device))


def memory_allocated(device: DeviceLike = None) -> int:
    return _C._memory_stats(_index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device: DeviceLike = None) -> int:
    return _C._memory_stats(_index(device))["allocated_bytes.all.peak"]


def memory_reserved(device: DeviceLike = None) -> int:
    return _C._memory_stats(_index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device: DeviceLike = None) -> int:
    return _C._memory_stats(_index(device))["reserved_bytes.all.peak"]


def get_memory_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free bytes, capacity bytes) of the simulated device memory."""
    stats = _C._memory_stats(_index(device))
    return stats["free_bytes"], stats["capacity_bytes"]


def empty_cache(device: DeviceLike = None) -> None:
    """Give the freed blocks the allocator keeps for reuse back to the host."""
    _C._empty_cache(_index(device))


def empty_host_cache() -> None:
    """Host memory is plain pageable CPU memory here: there is no pinned-host cache to empty."""
