"""``torch.spyre``: device management, random state and memory statistics (CUDA-like)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from .. import _C
from .device_index import DeviceLike, _index
from .amp import get_amp_supported_dtype, is_bf16_supported  # noqa: F401 - torch.spyre API
from .properties import get_device_capability, get_device_properties, init  # noqa: F401 - torch.spyre API
from .streams import Event, Stream, current_stream, default_stream, set_stream, stream  # noqa: F401


def is_available() -> bool:
    return _C._device_count() > 0


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    """The simulated device needs no lazy initialisation."""


def _is_in_bad_fork() -> bool:
    """Simulated device memory is plain host memory: forking is always safe."""
    return False


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._get_device()


def set_device(device: DeviceLike) -> None:
    _C._set_device(_index(device))


@contextlib.contextmanager
def device(device: DeviceLike) -> Iterator[None]:
    """Make ``device`` current inside the block."""
    previous = _C._exchange_device(_index(device))
    try:
        yield
    finally:
        _C._set_device(previous)


def synchronize(device: DeviceLike = None) -> None:
    """Every spyre operation completes before it returns; this only validates ``device``."""
    _C._capacity(_index(device))


def get_device_name(device: DeviceLike = None) -> str:
    return f"spyre:{_index(device)} (simulated, torch_layouts)"


# -- random state --------------------------------------------------------------
def _generator(device: DeviceLike = None) -> torch.Generator:
    return _C._get_default_generator(_index(device))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    for i in range(device_count()):
        _generator(i).seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: DeviceLike = "spyre") -> torch.Tensor:
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "spyre") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


# -- memory (torch.spyre.memory's functions, also on torch.spyre as on torch.cuda) --------------
from .spyre_memory import (  # noqa: E402,F401
    empty_cache,
    get_memory_info,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_peak_memory_stats,
)


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free bytes, capacity bytes) of the simulated device memory; blocks kept for reuse are not free."""
    return get_memory_info(device)


# Torch-Spyre's names: torch_spyre_api.py (last: it imports this module's device helpers).
from .torch_spyre_api import (  # noqa: E402,F401
    DataFormats,
    FallbackWarning,
    SpyreTensorLayout,
    default_generators,
    get_device_dtype,
    get_downcast_warning,
    get_elem_in_stick,
    get_spyre_tensor_layout,
    memory,
    set_downcast_warning,
)
