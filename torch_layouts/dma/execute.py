"""Run DMA programs on flat torch buffers with strided bulk copies.

This is the reference executor for host-side use (tests, tools); the device
runtime runs the same nests in C++. Every nest is bounds-checked before any byte
moves, and copies move bits (integer views), so NaN payloads and -0.0 survive.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..core.dtypes import BITS_DTYPE
from ..core.mapping import Fill, Transfer, span
from .program import DmaProgram


def _flat(buffer: torch.Tensor, name: str, element_size: int) -> torch.Tensor:
    if buffer.dim() != 1 or not buffer.is_contiguous() or buffer.device.type != "cpu":
        raise ValueError(f"{name} buffer must be a 1-D contiguous CPU tensor, got size {list(buffer.shape)} "
                         f"on {buffer.device}")
    if buffer.element_size() != element_size:
        raise ValueError(f"{name} buffer has {buffer.element_size()}-byte elements, the program moves "
                         f"{element_size}-byte elements")
    return buffer


def check_bounds(ranges: Sequence[int], strides: Sequence[int], offset: int, numel: int, what: str) -> None:
    low, high = span(ranges, strides, offset)
    if low < 0 or high > numel:
        raise IndexError(f"{what} touches elements [{low}, {high}) outside its buffer of {numel} elements")


def run_transfers(transfers: Sequence[Transfer], dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy every nest from ``src`` to ``dst`` (same element size), bit for bit."""
    bits = BITS_DTYPE[dst.element_size()]
    for t in transfers:
        check_bounds(t.ranges, t.dst_strides, t.dst_offset, dst.numel(), f"destination of nest {t}")
        check_bounds(t.ranges, t.src_strides, t.src_offset, src.numel(), f"source of nest {t}")
    d, s = dst.view(bits), src.view(bits)
    d0, s0 = d.storage_offset(), s.storage_offset()  # as_strided counts from the storage's start
    for t in transfers:
        d.as_strided(t.ranges, t.dst_strides, d0 + t.dst_offset).copy_(
            s.as_strided(t.ranges, t.src_strides, s0 + t.src_offset))


def run_fills(fills: Sequence[Fill], device: torch.Tensor, value: float | int | bool) -> None:
    for f in fills:
        check_bounds(f.ranges, f.strides, f.offset, device.numel(), f"padding nest {f}")
    start = device.storage_offset()
    for f in fills:
        device.as_strided(f.ranges, f.strides, start + f.offset).fill_(value)


def execute(program: DmaProgram, host: torch.Tensor, device: torch.Tensor) -> None:
    """Run ``program`` between a flat host buffer and a flat device buffer.

    H2D also sets every padding position of ``device`` to the layout's pad value.
    """
    size = program.layout.element_size
    host, device = _flat(host, "host", size), _flat(device, "device", size)
    if device.numel() != program.layout.device_numel:
        raise ValueError(f"device buffer has {device.numel()} elements, {program.layout!r} needs "
                         f"{program.layout.device_numel}")
    if program.direction == "h2d":
        run_transfers(program.transfers(), device, host)
        run_fills(program.padding, device.view(program.layout.dtype), program.layout.pad_value)
    else:
        run_transfers(program.transfers(), host, device)
