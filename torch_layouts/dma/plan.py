"""Plan strided transfers between a resolved layout and another address space.

A transfer is a loop nest ``(ranges, dst_strides, src_strides, dst_offset,
src_offset)`` in elements. Planning iterates over the device dims ("digits") of
one side and needs the other side's address to be linear in them, per host-dim
group: either the other side walks the group with a single stride (a host tensor
whose group dims are contiguous), or both sides are mixed radices whose steps
nest, so that a common refinement of the digits is linear in both. Anything else
returns None and the caller goes through a host buffer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

from ..core.layout import Group, Resolution
from ..core.regions import Box, split_group


class Transfer(NamedTuple):
    """One loop nest of a copy; loops ordered by decreasing ``dst``-side stride."""

    ranges: tuple[int, ...]
    dst_strides: tuple[int, ...]
    src_strides: tuple[int, ...]
    dst_offset: int
    src_offset: int


class Fill(NamedTuple):
    """One loop nest of device positions to set to the pad value."""

    ranges: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


class _Loop(NamedTuple):
    size: int
    lead: int  # stride on the side whose order the nest follows (the device side)
    other: int


class _Piece(NamedTuple):
    """A digit of a group's coordinate with its stride on both sides."""

    step: int
    size: int
    lead: int
    other: int


def host_digits(res: Resolution, group: Group, host_stride: Sequence[int]) -> list[tuple[int, int, int]]:
    """A host tensor's (step, size, stride) digits over a group, adjacent ones merged."""
    digits: list[tuple[int, int, int]] = []
    step = 1
    for d in reversed(group.host_dims):
        size, stride = res.host_size[d], host_stride[d]
        if digits and digits[-1][2] * digits[-1][1] == stride:
            prev = digits[-1]
            digits[-1] = (prev[0], prev[1] * size, prev[2])
        else:
            digits.append((step, size, stride))
        step *= size
    return digits


def _group_pieces(group: Group, lead: Sequence[tuple[int, int, int]], other: Sequence[tuple[int, int, int]]
                  ) -> tuple[list[_Piece], list[Box]] | None:
    """Digits linear on both sides for one group, with their real boxes; None if impossible."""
    if len(other) == 1 and other[0][0] == 1:
        stride = other[0][2]
        pieces = [_Piece(step, size, st, step * stride) for step, size, st in lead]
        return pieces, list(group.real)
    if not (_is_nested(lead) and _is_nested(other)):
        return None
    steps = sorted({s for s, _, _ in lead} | {s for s, _, _ in other})
    if any(b % a for a, b in zip(steps, steps[1:])):
        return None
    sizes = [b // a for a, b in zip(steps, steps[1:])] + [-(-group.size // steps[-1])]
    pieces = [_Piece(s, n, _stride_at(lead, s), _stride_at(other, s)) for s, n in zip(steps, sizes)]
    real, _ = split_group(steps, sizes, group.size)
    return pieces, real


def _is_nested(digits: Sequence[tuple[int, int, int]]) -> bool:
    return digits[0][0] == 1 and all(a[0] * a[1] == b[0] for a, b in zip(digits, digits[1:]))


def _stride_at(digits: Sequence[tuple[int, int, int]], step: int) -> int:
    """Stride of a refined digit of ``step`` within the coarsest digit not above it."""
    base = max((d for d in digits if d[0] <= step), key=lambda d: d[0])
    return base[2] * (step // base[0])


def plan(res: Resolution, other: Sequence[Sequence[tuple[int, int, int]]], other_offset: int,
         broadcast_full: bool) -> list[Transfer] | None:
    """Transfers iterating the device side of ``res`` against ``other`` (per-group digits).

    The device side is the destination (``dst``); callers swap for the other direction.
    ``broadcast_full`` writes every copy of a broadcast dim (destination device).
    """
    layout = res.layout
    if res.empty or layout.device_numel == 0:
        return []
    per_group: list[tuple[list[_Piece], list[Box]]] = []
    for group, other_digits in zip(res.groups, other):
        lead = [(dig.step, dig.size, dig.device_stride) for dig in group.digits]
        found = _group_pieces(group, lead, other_digits)
        if found is None:
            return None
        per_group.append(found)
    fixed = [
        _Piece(1, layout.device_size[j], layout.device_strides[j], 0)
        for j in res.broadcast
    ] if broadcast_full else []
    transfers = []
    for choice in itertools.product(*(boxes for _, boxes in per_group)):
        loops: list[_Loop] = []
        lead_off, other_off = 0, other_offset
        for (pieces, _), box in zip(per_group, choice):
            for piece, (start, count) in zip(pieces, box):
                lead_off += start * piece.lead
                other_off += start * piece.other
                loops.append(_Loop(count, piece.lead, piece.other))
        loops += [_Loop(p.size, p.lead, p.other) for p in fixed]
        transfer = _nest(loops, lead_off, other_off)
        if transfer is not None:
            transfers.append(transfer)
    transfers.sort(key=lambda t: t.dst_offset)
    return transfers


def _nest(loops: list[_Loop], lead_off: int, other_off: int) -> Transfer | None:
    """Drop unit loops, order by decreasing lead stride and merge loops that run on."""
    if any(loop.size == 0 for loop in loops):
        return None
    loops = sorted((lp for lp in loops if lp.size > 1), key=lambda lp: -lp.lead)
    merged: list[_Loop] = []
    for loop in loops:
        if merged and merged[-1].lead == loop.lead * loop.size and merged[-1].other == loop.other * loop.size:
            outer = merged.pop()
            loop = _Loop(outer.size * loop.size, loop.lead, loop.other)
        merged.append(loop)
    if not merged:
        merged = [_Loop(1, 1, 1)]
    return Transfer(
        tuple(lp.size for lp in merged),
        tuple(lp.lead for lp in merged),
        tuple(lp.other for lp in merged),
        lead_off,
        other_off,
    )


def padding(res: Resolution) -> list[Fill]:
    """Fill nests covering every padding position of the device side."""
    strides = res.layout.device_strides
    fills = []
    for box in res.pad_boxes():
        loops = [_Loop(count, st, 0) for (_, count), st in zip(box, strides)]
        nest = _nest(loops, sum(start * st for (start, _), st in zip(box, strides)), 0)
        if nest is not None:
            fills.append(Fill(nest.ranges, nest.dst_strides, nest.dst_offset))
    return fills


def swap(transfers: list[Transfer]) -> list[Transfer]:
    """The same nests with source and destination exchanged (loop order kept)."""
    return [Transfer(t.ranges, t.src_strides, t.dst_strides, t.src_offset, t.dst_offset) for t in transfers]


def span(ranges: Sequence[int], strides: Sequence[int], offset: int) -> tuple[int, int]:
    """Lowest and one-past-highest element offset a nest touches."""
    low = offset + sum((r - 1) * s for r, s in zip(ranges, strides) if s < 0)
    high = offset + sum((r - 1) * s for r, s in zip(ranges, strides) if s > 0)
    return low, high + 1


def elements(transfers: Sequence[Transfer]) -> int:
    return sum(math.prod(t.ranges) for t in transfers)
