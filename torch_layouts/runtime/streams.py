"""``torch.spyre`` streams and events (CUDA's API; the guard in ``csrc/device_guard.cpp``).

Spyre ops complete before they return, so work on any stream is already done when the next
line runs: ``query()`` is always True and waits return at once. What CUDA documents that
callers can observe still holds: each stream has its own id (0 is a device's default stream),
the current stream is per thread and per device, ``with stream:`` / ``torch.spyre.stream(s)``
switch it, and events record when they were reached, so ``elapsed_time`` measures the host
time between two records (milliseconds, as CUDA).

Example::

    >>> s = torch.spyre.Stream()
    >>> start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
    >>> with torch.spyre.stream(s):
    ...     start.record(); y = x @ x; end.record()
    >>> end.synchronize(); start.elapsed_time(end) >= 0
    True
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

DeviceLike = torch.device | str | int | None


def _device(device: DeviceLike) -> torch.device:
    if device is None:
        return torch.device("spyre", torch.accelerator.current_device_index()
                            if torch.accelerator.current_accelerator().type == "spyre" else 0)
    if isinstance(device, int) and not isinstance(device, bool):
        return torch.device("spyre", device)
    device = torch.device(device)
    if device.type != "spyre":
        raise ValueError(f"expected a spyre device, got {device}")
    return device


class Stream(torch.Stream):
    """A spyre stream: ``torch.Stream`` on the spyre device (``query``, ``synchronize``,
    ``wait_event``, ``wait_stream``, ``record_event`` and ``with`` as ``torch.Stream``)."""

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: object) -> Stream:
        if kwargs:  # (stream_id=, device_index=, device_type=): an existing stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=_device(device), priority=priority)


def Event(enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,  # noqa: N802
          device: DeviceLike = None) -> torch.Event:
    """A ``torch.Event`` on a spyre device (``enable_timing`` for ``elapsed_time``). A factory, not a
    subclass: ``torch.Event.elapsed_time`` accepts only ``torch.Event`` itself."""
    return torch.Event(_device(device), enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def _wrap(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


def current_stream(device: DeviceLike = None) -> Stream:
    """The current stream of ``device`` (default: the current device) in this thread."""
    return _wrap(torch.accelerator.current_stream(_device(device)))


def default_stream(device: DeviceLike = None) -> Stream:
    """The default stream (id 0) of ``device``."""
    current = torch.accelerator.current_stream(_device(device))
    return Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current on its device (and that device current), like ``torch.cuda.set_stream``."""
    torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    """Make ``stream`` current inside the block (None: no change), restoring the previous one."""
    if stream is None:
        yield
        return
    previous_device = torch.accelerator.current_device_index()
    previous = torch.accelerator.current_stream(stream.device)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)
        torch.accelerator.set_device_index(previous_device)


_LIBRARY: torch.library.Library | None = None


def _record_stream(tensor: torch.Tensor, stream: torch.Stream) -> None:
    """``Tensor.record_stream``: spyre work is done when it returns, so there is nothing to
    defer; the stream must still be a spyre stream, as on CUDA."""
    if stream.device.type != "spyre":
        raise RuntimeError(f"record_stream: expected a spyre stream for a spyre tensor, got a stream on {stream.device}")


def install() -> None:
    """Register the stream-aware ATen ops for the device (idempotent)."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("aten", "IMPL")
        _LIBRARY.impl("record_stream", _record_stream, "PrivateUse1")
