"""``cat`` and ``stack`` on device memory: each input copied into its part of one new buffer.

The result takes the default layout of its shape (as the CPU fallback's did), the inputs' promoted
dtype; shapes are checked with the CPU's messages. Each input moves into its part (a
``narrow`` of the result along the dim for ``cat``, a ``select`` for ``stack``) as CPU copies
between strided views of the two buffers (``operands.piece_common_reads``, converting where the
dtypes differ), or by the runtime's copy where no such views hold them. When every input has
such views the recipe is offered to the runtime's front, which replays later calls of the
geometry without Python.

>>> x = torch.randn(4, 70)
>>> torch.equal(torch.cat([x.to("spyre"), x.to("spyre")], 1).cpu(), torch.cat([x, x], 1))
True
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch

from .. import _C
from .on_views import common_device
from .operands import copy_pieces, default_coords, new_tensor, piece_common_reads, runtime_record
from .registry import register


def _dtype(tensors: Sequence[torch.Tensor]) -> torch.dtype:
    return functools.reduce(torch.promote_types, (t.dtype for t in tensors))


def _wrap(dim: int, rank: int) -> int:
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    return dim % rank


def _concat(op: str, tensors: Sequence[torch.Tensor], shape: torch.Size, dtype: torch.dtype,
            part: Callable[[torch.Tensor, int], torch.Tensor | None]) -> torch.Tensor:
    """A new tensor of ``shape`` holding each input in ``part(result, i)`` (None: a skipped one)."""
    tensors = list(tensors)
    device = common_device(tensors)
    coords = default_coords(tuple(shape), dtype)
    out = new_tensor(coords, device)
    pieces: list[list] | None = []
    for i, t in enumerate(tensors):
        target = part(out, i)
        if target is None or t.numel() == 0:
            if pieces is not None:
                pieces.append([])
            continue
        found = piece_common_reads(t, target)
        if found is None:
            target.copy_(t)
            pieces = None
        else:
            copy_pieces(t, out, found)
            if pieces is not None:
                pieces.append(list(found))
    if pieces is not None:
        _C._offer_concat_recipe(f"aten::{op}", tensors, runtime_record(coords), pieces)
    return out


def cat(tensors: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """``torch.cat``: the inputs side by side along ``dim`` (1-D empty ones skipped, as PyTorch
    does), with the CPU's checks and messages."""
    for i, t in enumerate(tensors):
        if t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    kept = [(i, t) for i, t in enumerate(tensors) if not (t.dim() == 1 and t.numel() == 0)]
    first = kept[0][1] if kept else tensors[0]
    d = _wrap(dim, first.dim())
    shape = list(first.shape)
    shape[d] = 0
    for i, t in kept:
        if t.dim() != first.dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {first.dim()} and {t.dim()}")
        for k, (n, m) in enumerate(zip(first.shape, t.shape)):
            if k != d and n != m:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size {n} but got "
                                   f"size {m} for tensor number {i} in the list.")
        shape[d] += t.shape[d]
    offsets, at = [None] * len(tensors), 0
    for i, t in kept:
        offsets[i], at = at, at + t.shape[d]

    def part(out: torch.Tensor, i: int) -> torch.Tensor | None:
        return None if offsets[i] is None else out.narrow(d, offsets[i], tensors[i].shape[d])
    return _concat("cat", tensors, torch.Size(shape), _dtype(tensors), part)


def stack(tensors: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """``torch.stack``: the inputs along a new dim ``dim``, with the CPU's checks and messages."""
    first = tensors[0]
    for i, t in enumerate(tensors):
        if t.shape != first.shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(first.shape)} at entry 0 "
                               f"and {list(t.shape)} at entry {i}")
    d = _wrap(dim, first.dim() + 1)
    shape = torch.Size([*first.shape[:d], len(tensors), *first.shape[d:]])
    return _concat("stack", tensors, shape, _dtype(tensors), lambda out, i: out.select(d, i))


def register_all() -> None:
    register("cat", cat)
    register("stack", stack)
