"""Sending spyre tensors between processes (``torch.multiprocessing`` queues, pipes, spawn args).

Simulated device memory is private to each process (there is no device IPC), so a spyre tensor
crosses a process boundary by value: the receiver gets a new device buffer in the same layout
holding the same elements (pickled as for ``torch.save``). Unlike CUDA IPC, in-place writes on
one side are not seen on the other. Every other tensor keeps PyTorch's shared-memory reduction.

Example::

    >>> queue = torch.multiprocessing.get_context("spawn").SimpleQueue()
    >>> queue.put(torch.ones(3, device="spyre"))   # the receiver gets a spyre tensor of ones
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing.reductions as reductions
from multiprocessing.reduction import ForkingPickler

_original: dict[str, Callable[..., Any]] = {}


def reduce_tensor(tensor: torch.Tensor) -> tuple:
    """PyTorch's reduction for host and CUDA tensors; by value (with the layout) for spyre ones."""
    if tensor.device.type == "spyre":
        return tensor.__reduce_ex__(2)
    return _original["reduce_tensor"](tensor)


def install() -> None:
    """Register the reduction for ``torch.Tensor`` and ``Parameter`` with the multiprocessing pickler."""
    if _original:
        return
    _original["reduce_tensor"] = reductions.reduce_tensor
    for cls in (torch.Tensor, torch.nn.Parameter):
        ForkingPickler.register(cls, reduce_tensor)
