"""Broadcast operands of pointwise ops, densified for the CPU kernels.

An operand broadcast along a device dim that lies inside one it varies along (a bias of the last
host dim added to a ``(batch, tokens, features)`` tensor in Spyre's default layout: the batch dim
lies between the stick columns and the stick) reads with stride 0 in the middle of the view, so
the CPU kernel's inner loop is one stick (32 elements) long. Its values over the block of dims
from the outermost one it varies along are copied into a small contiguous tensor first and read
from there: the block's strides then match the result's and the kernel runs along whole blocks
(``x + bias`` of 8x128x256 float32: 30 -> 21 us, the CPU's 16). The replays make the same copy per
call (``csrc/kernel_front.cpp``'s ``densified``), except float32 ``add``, ``sub``, ``mul`` and
``div``, which they run without it (``csrc/arithmetic_runs.cpp``; docs/design.md, "Broadcast
operands").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

# A block is copied only when it holds at most this fraction of the view's elements.
MAX_BLOCK_FRACTION = 1 / 8


def dense_from(shape: Sequence[int], strides: Sequence[int]) -> int:
    """The first dim of the block a view of ``shape`` and ``strides`` reads densified, or -1
    (no dim of stride 0 lies inside one it varies along, or the block would be too large).

    >>> dense_from((128, 8, 8, 32), (0, 32, 0, 1))  # a bias over the sticks, broadcast along dims 0 and 2
    1
    >>> dense_from((128, 8, 8, 32), (0, 0, 32, 1)), dense_from((8, 32), (32, 1))
    (-1, -1)
    """
    dims = [d for d, n in enumerate(shape) if n > 1]
    varying = [d for d in dims if strides[d] != 0]
    if not varying or all(strides[d] != 0 for d in dims if d > varying[0]):
        return -1
    k = varying[0]
    return k if math.prod(shape[k:]) <= MAX_BLOCK_FRACTION * math.prod(shape) else -1


def densified(v: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """``v``'s values, read from a contiguous copy of its block where ``dense_from`` gives one
    (the dims outside the block keep stride 0), else ``v`` itself; ``k``: ``dense_from`` of ``v``,
    where the caller kept it.

    >>> w = torch.arange(64.).as_strided((16, 2, 2, 32), (0, 32, 0, 1))
    >>> d = densified(w)
    >>> torch.equal(d, w), d.stride()
    (True, (0, 64, 32, 1))
    """
    if k is None:
        k = dense_from(tuple(v.shape), tuple(v.stride()))
    if k < 0:
        return v
    block = v.as_strided(v.shape[k:], v.stride()[k:], v.storage_offset()).contiguous()
    return block.as_strided(v.shape, (0,) * k + block.stride())
