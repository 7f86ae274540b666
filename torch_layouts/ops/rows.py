"""Row-wise kernels (softmax, layer norm and their backward) as one sweep over the tiles.

When the coordinates' real positions are one box (no padding, or padding only past the real
extent of some device dims: a dim shorter than a stick) and the device dims of the reduced host
dims flatten, coarsest first, to those dims' elements in host order, slicing the buffer to that
box and permuting the reduced dims last turns it into ``(other dims..., row dims...)``: each row
is one host row, in whatever strides the tiles give it; the padding is never read or written.
Where the reduced dim's stick is padded (1000 float32 classes in sticks of 32), each row's real
elements are its first ones (``Rows.tail``): the kernels stop within the last run.
The C++ row kernels (``_C._rows_*``, docs/design.md "Row kernels") read such views directly,
block by block of rows (float16/bfloat16 through float32 block buffers), with no dense copy of
the tensor.
A call whose operands were read where they lie keeps its ``RowPlan``: the next call of the same
geometry skips the planning and replays the views.
Row results (a layer norm's mean and rstd) and per-column results (its weight and bias
gradients) come back shaped like the coordinates, size 1 along the dims they do not span,
for ``reductions.write_result``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

from ..core.layout import BoundLayout
from .operands import (Read, has_padding, in_place, keep, layouts_of, new_tensor, one_real_box, plan_key, raw_view,
                       read_of)

ROW_DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # what the row kernels compute on


class Rows(NamedTuple):
    """How a buffer in some coordinates reads as rows: the device-dim permutation, how many of
    its last dims make a row, the box of real positions (``(begin, count)`` per device dim;
    None: the whole buffer), and a row's real elements where they end within its last run
    (``tail``, the first ones in row order; None: the whole row)."""

    order: tuple[int, ...]
    width: int
    box: tuple[tuple[int, int], ...] | None = None
    tail: int | None = None

    @property
    def real(self) -> int:
        """A row's real elements as the row kernels take them (-1: the whole row)."""
        return -1 if self.tail is None else self.tail

    def shape(self, coords: BoundLayout) -> tuple[int, ...]:
        extent = coords.shape if self.box is None else tuple(count for _, count in self.box)
        return tuple(extent[d] for d in self.order)

    def length(self, coords: BoundLayout) -> int:
        """A row's real elements."""
        return math.prod(self.shape(coords)[len(self.order) - self.width:]) if self.tail is None else self.tail

    def view(self, v: torch.Tensor) -> torch.Tensor:
        """``v`` (shaped like the coordinates) with the row dims last: the row kernels' operand."""
        if self.box is not None:
            v = v[tuple(slice(begin, begin + count) for begin, count in self.box)]
        return v.permute(self.order)

    def count(self, coords: BoundLayout) -> int:
        """How many rows."""
        return math.prod(self.shape(coords)[:len(self.order) - self.width])

    def per_row(self, rv: torch.Tensor) -> torch.Tensor:
        """A row view (``view``) constant along the row dims (stride 0) as a contiguous float32
        ``(rows,)`` tensor (the row kernels read such operands by their data pointer)."""
        return rv[(...,) + (0,) * self.width].reshape(-1).to(torch.float32).contiguous()

    def per_column(self, rv: torch.Tensor) -> torch.Tensor:
        """A row view constant along the other dims as a contiguous float32 ``(length,)`` tensor."""
        values = rv[(0,) * (len(self.order) - self.width)].reshape(-1)
        return (values if self.tail is None else values[:self.tail]).to(torch.float32).contiguous()

    def rows_like(self, values: torch.Tensor, coords: BoundLayout) -> torch.Tensor:
        """``(rows,)`` values shaped like the coordinates, size 1 along the row dims."""
        shape = [n if k < len(self.order) - self.width else 1 for k, n in enumerate(self.shape(coords))]
        return values.reshape(shape).permute(_inverse(self.order))

    def columns_like(self, values: torch.Tensor, coords: BoundLayout) -> torch.Tensor:
        """``(length,)`` values shaped like the coordinates, size 1 along the other dims (0s in a
        row's padding)."""
        shape = [n if k >= len(self.order) - self.width else 1 for k, n in enumerate(self.shape(coords))]
        if self.tail is not None:
            values = torch.nn.functional.pad(values, (0, math.prod(shape) - self.tail))
        return values.reshape(shape).permute(_inverse(self.order))


def _inverse(order: tuple[int, ...]) -> list[int]:
    out = [0] * len(order)
    for k, d in enumerate(order):
        out[d] = k
    return out


@functools.lru_cache(maxsize=1024)
def rows(coords: BoundLayout, dims: tuple[int, ...], padded: bool = False) -> Rows | None:
    """How the coordinates' buffer reads as rows over host ``dims``, or None (copies, device dims
    that do not flatten to the dims' elements in host order, padding unless ``padded``, or real
    positions that are neither one box nor one box of rows whose real elements come first)."""
    if coords.broadcast or not dims:
        return None
    wanted = set(dims)
    reduced: list[int] = []
    for group in sorted(coords.groups, key=lambda g: g.host_dims[0]):
        inside = set(group.host_dims) & wanted
        if not inside:
            continue
        if inside != set(group.host_dims) or not group.nested or list(group.host_dims) != sorted(group.host_dims):
            return None
        reduced += [dig.dim for dig in reversed(group.digits)]
    if not reduced:  # the reduced dims have no device dims (size 1): no row to walk
        return None
    order = tuple([d for d in range(len(coords.shape)) if d not in reduced] + reduced)
    if not has_padding(coords):
        return Rows(order, len(reduced))
    if not padded:
        return None
    box = one_real_box(coords)
    return Rows(order, len(reduced), box) if box is not None else tail_rows(coords, order, len(reduced))


def tail_rows(coords: BoundLayout, order: tuple[int, ...], width: int) -> Rows | None:
    """Rows whose real elements are the first ``tail`` of each row of one box of rows (the rows'
    stick padded), or None."""
    real = torch.zeros(coords.shape, dtype=torch.bool)
    for box in coords.real_boxes():
        real[tuple(slice(begin, begin + count) for begin, count in box)] = True
    real = real.permute(order)
    outer = real.flatten(len(order) - width).any(-1)
    spans = []
    for k in range(outer.dim()):  # the outer dims' box: where any real row lies along each
        hit = outer.movedim(k, 0).reshape(outer.shape[k], -1).any(-1).nonzero().flatten()
        spans.append((int(hit[0]), int(hit[-1]) - int(hit[0]) + 1))
    inside = real[tuple(slice(b, b + c) for b, c in spans)].reshape(-1, math.prod(real.shape[len(spans):]))
    tail = int(inside[0].sum())
    if tail == 0 or not inside[:, :tail].all() or inside[:, tail:].any():
        return None
    box = [(0, n) for n in coords.shape]
    for d, span in zip(order, spans):
        box[d] = span
    return Rows(order, width, None if box == [(0, n) for n in coords.shape] else tuple(box), tail)


class RowPlan(NamedTuple):
    """A row kernel call's geometry: the result's coordinates, the rows, and every operand's
    row view in its raw buffer (inputs, then the result, if any); ``layouts`` keeps the
    operands' layout objects alive, so that the ids in the plan's key stay theirs."""

    coords: BoundLayout
    rows: Rows
    reads: tuple[Read, ...]
    layouts: tuple

    def replay(self, tensors: tuple[torch.Tensor, ...], result: bool = True
               ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """The operands' row views and, with ``result``, a new result and its row view."""
        out = new_tensor(self.coords, tensors[0].device) if result else None
        operands = (*tensors, out) if result else tensors
        return [raw_view(t, *r) for t, r in zip(operands, self.reads)], out


PLANS: dict[tuple, RowPlan] = {}
MAX_PLANS = 512


def lookup(op: str, args: tuple, tensors: tuple[torch.Tensor, ...]) -> tuple[tuple | None, RowPlan | None]:
    """A call's key (``operands.plan_key``) and the plan kept for it, if any."""
    key = plan_key(op, args, tensors)
    return key, None if key is None else PLANS.get(key)


def remember(key: tuple | None, coords: BoundLayout, shape: Rows, views: list[torch.Tensor],
             tensors: tuple[torch.Tensor, ...]) -> None:
    """Keep the plan of a call whose operands were read where they lie (``views``: the operands'
    row views, then the result's, if any)."""
    if key is None or not in_place(views, tensors):
        return
    keep(PLANS, key, RowPlan(coords, shape, tuple(read_of(v) for v in views), layouts_of(tensors)), MAX_PLANS)
