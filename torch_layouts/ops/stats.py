"""What the device did: kernel calls, restickifies, DMA traffic and CPU fallbacks.

``stats()`` merges this package's counters (device-kernel calls per op, restickifies)
with the C++ runtime's (DMA bytes each way, device-to-device bytes, relayouts, host
bounces, view gathers/scatters, CPU-fallback calls per op). ``reset_stats()`` clears
both.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from .. import _C

_lock = threading.Lock()
_kernel_calls: Counter[str] = Counter()
_restickify = {"count": 0, "bytes": 0}


def count_kernel(op: str) -> None:
    with _lock:
        _kernel_calls[op] += 1


def count_restickify(nbytes: int) -> None:
    with _lock:
        _restickify["count"] += 1
        _restickify["bytes"] += int(nbytes)


def stats() -> dict[str, Any]:
    """A snapshot of the device's counters since the last ``reset_stats()``.

    Keys: ``restickify_count``, ``restickify_bytes`` (explicit ``restickify`` calls and
    those inserted by ops), ``h2d_bytes``, ``d2h_bytes``, ``d2d_bytes``, ``relayouts``,
    ``relayout_bytes``, ``host_bounces``, ``view_gathers``, ``view_scatters`` (the
    runtime's copies), ``adopted_bytes`` (CPU kernels' results that became device buffers
    where the kernel wrote them, with no copy), ``kernel_calls`` (device kernels per op) and ``fallbacks`` (ops
    that ran on the CPU fallback, per op).
    """
    replayed, replayed_bytes = _C._restickify_counts()  # those the runtime's front replayed
    with _lock:
        out: dict[str, Any] = {"restickify_count": _restickify["count"] + replayed,
                               "restickify_bytes": _restickify["bytes"] + replayed_bytes}
        calls = Counter(_kernel_calls)
    calls.update(_C._kernel_counts())  # the kernels the runtime's front counts
    calls = dict(sorted(calls.items()))
    out.update(_C._counters())
    out["kernel_calls"] = calls
    out["fallbacks"] = dict(sorted(_C._fallback_counts().items()))
    return out


def reset_stats() -> None:
    """Zero every counter (this package's and the runtime's)."""
    with _lock:
        _kernel_calls.clear()
        _restickify.update(count=0, bytes=0)
    _C._reset_kernel_counts()
    _C._reset_stats()


def warn_on_fallback(enabled: bool = True) -> None:
    """Warn once per op when an op without a device kernel runs on the CPU fallback."""
    if not isinstance(enabled, bool):
        raise TypeError(f"warn_on_fallback takes a bool, got {enabled!r}")
    _C._set_fallback_warning(enabled)
