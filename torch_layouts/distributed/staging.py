"""Host staging of a collective's spyre tensors: DMA out, run on the host engine, DMA back in place."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future


class HostBuffers:
    """Host staging buffers kept for reuse, so a large collective does not fault in fresh pages
    on every call (the way the CUDA caching allocator keeps device blocks). Thread-safe: a
    collective's buffers come back when it completes, possibly on the host engine's thread."""

    MIN_BYTES = 1 << 20  # smaller buffers come from the CPU allocator each time
    MAX_BYTES = 256 << 20  # at most this much is kept

    def __init__(self) -> None:
        self._free: dict[tuple[int, torch.dtype], list[torch.Tensor]] = {}
        self._kept = 0
        self._lock = threading.Lock()

    def take(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        numel = shape.numel()
        with self._lock:
            kept = self._free.get((numel, dtype))
            if kept:
                buf = kept.pop()
                self._kept -= buf.nbytes
                return buf.view(shape)
        return torch.empty(shape, dtype=dtype)

    def give(self, buf: torch.Tensor) -> None:
        if buf.nbytes < self.MIN_BYTES:
            return
        with self._lock:
            if self._kept + buf.nbytes <= self.MAX_BYTES:
                self._free.setdefault((buf.numel(), buf.dtype), []).append(buf.view(-1))
                self._kept += buf.nbytes


BUFFERS = HostBuffers()


@dataclass
class Staging:
    """The host tensors standing in for a collective's spyre tensors, and where results go back.

    ``write_back`` pairs each spyre tensor the collective writes with its host result; copying
    it back (``dev.copy_(host)``, the device's host-to-device DMA program) keeps its layout.
    """

    write_back: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    hosts: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # (host, spyre tensor)

    def stage(self, value: Any, read: bool, write: bool) -> Any:
        """Replace every spyre tensor in ``value`` (a tensor or nested lists of them) by a host tensor.

        ``read``: the collective reads it, so its real elements are copied out (device-to-host DMA;
        padding never leaves the device). ``write``: the collective writes it, so the host result
        is copied back in place when the collective completes. CPU tensors pass through untouched.
        """
        if isinstance(value, (list, tuple)):
            return [self.stage(v, read, write) for v in value]
        if not isinstance(value, torch.Tensor) or value.device.type != "spyre":
            return value
        alias = value.detach()  # written in place even where it requires grad, as gloo does on CPU
        host = BUFFERS.take(value.shape, value.dtype)
        if read:
            host.copy_(alias)  # the device-to-host DMA program: real elements only
        if write:
            self.write_back.append((alias, host))
        self.hosts.append((host, value))
        return host

    def finish(self) -> None:
        """Copy every host result back into its spyre tensor (in place, each keeping its layout),
        then keep the host buffers for the next collective."""
        for dev, host in self.write_back:
            dev.copy_(host)
        for host, _ in self.hosts:
            BUFFERS.give(host)

    def device_value(self, value: Any) -> Any:
        """``value`` (a future's result) with each staged host tensor replaced by its spyre tensor."""
        if isinstance(value, (list, tuple)):
            return [self.device_value(v) for v in value]
        if isinstance(value, torch.Tensor):
            return next((dev for host, dev in self.hosts if host is value), value)
        return value

    def written(self) -> list[torch.Tensor]:
        """The spyre tensors the collective wrote (the value of its work's future)."""
        return self.device_value([host for _, host in self.write_back])

    def chain(self, boxed_work: torch.ScriptObject, async_op: bool) -> torch.ScriptObject:
        """A work whose completion includes the copy back, as the dispatcher's boxed ``Work``.

        Synchronous calls wait here and return a completed work; asynchronous ones return a work
        wrapping a future that completes after the copy back, so
        ``wait()``/``is_completed()``/``get_future()`` behave as for any c10d work, errors included.
        """
        if not self.write_back:  # the host tensors stay alive in the host engine's work
            return boxed_work
        work = dist.Work.unbox(boxed_work)
        if not async_op:
            work.wait()
            self.finish()
            done = torch.futures.Future()
            done.set_result(self.written())
            return _create_work_from_future(done).boxed()

        def done(fut: torch.futures.Future) -> Any:
            value = fut.value()  # raises the host engine's error, if any
            self.finish()
            return self.device_value(value)

        try:
            future = work.get_future().then(done)
        except RuntimeError:  # gloo's send/recv works have no future: a thread waits on them
            future = self._wait_in_thread(work)
        return _create_work_from_future(future).boxed()

    def _wait_in_thread(self, work: dist.Work) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()

        def wait() -> None:
            try:
                work.wait()
                self.finish()
            except Exception as error:  # noqa: BLE001  (handed to whoever waits on the work)
                future.set_exception(error)
            else:
                future.set_result(self.written())

        threading.Thread(target=wait, name="spyre-collective", daemon=True).start()
        return future
