"""Helpers shared by the op tests: does a result's padding still hold its pad value, does a
result match the CPU's, does a bad call raise the CPU's error, did a call stay on the device."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import torch

import torch_layouts
from torch_layouts import DeviceLayout, _C


def stays_on_device() -> dict:
    """Since the last ``reset_stats()``: no CPU fallback, no byte to or from the host. Returns the
    stats."""
    s = torch_layouts.stats()
    assert s["fallbacks"] == {} and s["h2d_bytes"] == 0 and s["d2h_bytes"] == 0, s
    return s


@functools.lru_cache(maxsize=256)
def real_mask(layout: DeviceLayout, size: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    return layout.real_mask(size, stride)


def padding_holds_pad_value(y: torch.Tensor) -> bool:
    """Every padding position of ``y``'s device memory holds its layout's pad value."""
    layout = y.device_tensor_layout()
    info = _C._bound_layout_of(y)
    real = real_mask(layout, tuple(info.base_size), tuple(info.base_stride))
    memory = torch_layouts.device_memory(y)
    return bool((memory[~real] == torch.tensor(layout.pad_value, dtype=memory.dtype)).all())


def matches_cpu(out: torch.Tensor, ref: torch.Tensor, f16: tuple[float, float], other: tuple[float, float]) -> None:
    """The device result ``out`` has the CPU result ``ref``'s dtype and shape, equals it within
    the (atol, rtol) for its dtype (``f16`` for float16, else ``other``), and its padding
    holds the pad value."""
    atol, rtol = f16 if ref.dtype == torch.float16 else other
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out.cpu(), ref, atol=atol, rtol=rtol)
    assert padding_holds_pad_value(out)


# The instruction sets this CPU runs the per-set kernel tables in (csrc/isa_tables.h), best first.
ISA_SETS = _C._isa_table_sets()


@contextlib.contextmanager
def kernels_in(setter: Callable[[str], str], name: str) -> Iterator[None]:
    """Runs a runtime's kernels in instruction set ``name`` (``setter`` installs one and returns
    the old one, as ``_C._rows_set_math`` and ``_C._tile_gemm_set_kernel`` do); restores the old one."""
    old = setter(name)
    try:
        yield
    finally:
        setter(old)


def raises_like_the_cpu(fn: Callable[[str], object]) -> None:
    """``fn("spyre")`` raises the exception ``fn("cpu")`` raises: its type and message."""
    try:
        fn("cpu")
    except Exception as cpu:  # whatever the CPU raises is the expectation
        expected = cpu
    else:
        raise AssertionError("the CPU call raised nothing")
    try:
        fn("spyre")
    except Exception as device:
        assert type(device) is type(expected) and str(device) == str(expected), (device, expected)
    else:
        raise AssertionError(f"the device call raised nothing; the CPU's: {expected!r}")
