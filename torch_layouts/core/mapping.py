"""The address-mapping engine: where the elements of one address space sit in another.

Every copy or view between two address spaces answers one question: for each host
element, its address on the source side and on the destination side. Per host-dim
group, both are mixed radices of the group coordinate ``h``: a bound layout's digits
(device dims stepping along the group, ``h -> sum coord_i * device_stride_i``), or a
host tensor's strides. The engine refines the two digit structures to common
:class:`Piece` digits, each linear on both sides, and emits loop nests
``(ranges, dst_strides, src_strides, dst_offset, src_offset)`` in elements
(docs/design.md section 5). Two questions, one engine:

- :func:`map_addresses`: nests over the destination's *real* positions only (padding
  never touched). DMA programs (a host tensor seen through its strides) and device
  relayouts (another bound layout) are thin callers.
- :func:`map_view`: one nest over the *whole* destination buffer that reads a view of
  the source at every real position, affine in the destination's device coordinates.
  Operand views of kernels and the strided copies that materialise them are thin callers.

Both are pure; callers memoise. Where no linear refinement exists they return None and
the caller goes through a host buffer (or restickifies).

>>> import torch
>>> from torch_layouts.core.layout import DeviceLayout
>>> dst = DeviceLayout([2, 4], [3, 1], torch.float16).resolve((2, 3))
>>> map_addresses(None, View((2, 3), (3, 1), 0), dst)
[Transfer(ranges=(2, 3), dst_strides=(4, 1), src_strides=(3, 1), dst_offset=0, src_offset=0)]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

from .layout import BoundLayout, Digit, Group, radices_of
from .regions import Box, split_group

Digits = Sequence[tuple[int, int, int]]  # (step, size, stride) per digit, finest first
Loop = tuple[int, int, int]  # one loop of a nest: (range, dst stride, src stride)


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


class View(NamedTuple):
    """A strided view ``(size, stride, offset)`` of the host tensor a source holds.

    Offsets count elements of the source's host storage (for host memory: the buffer).
    """

    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


class Piece(NamedTuple):
    """A digit of a destination coordinate, linear on both sides: it counts ``step``
    units of the coordinate, takes ``size`` values and moves ``dst`` / ``src`` elements
    per value in the destination / source address space."""

    step: int
    size: int
    dst: int
    src: int


class ViewMap(NamedTuple):
    """How to read a view of the source at every position of the destination's buffer.

    ``nest`` covers the whole destination buffer: its loops are the destination dims,
    or their factors (``factors`` per dim, coarsest first) where a dim walks several
    source digits. ``walks`` tells, per destination dim and factor (finest first),
    the source device dim it walks (-1: none, a broadcast) and how many of that dim's
    steps one step takes. ``exact``: the source buffer is the destination's buffer.
    """

    nest: Transfer
    factors: tuple[int, ...]
    walks: tuple[tuple[tuple[int, int], ...], ...]
    exact: bool

    @property
    def refined(self) -> bool:
        return len(self.nest.ranges) != len(self.factors)


# -- real positions: DMA programs and relayouts --------------------------------------------
def map_addresses(src: BoundLayout | None, view: View | None, dst: BoundLayout, *,
                  broadcast_full: bool = True) -> list[Transfer] | None:
    """Nests copying every real element of ``dst`` from the source, or None.

    The source is host memory read through ``view`` (``src`` None: the host tensor's
    strides and storage offset), or the bound layout ``src`` holding the same host
    tensor (``view`` None). ``broadcast_full`` writes every copy of a broadcast dim of
    ``dst`` (else only the first: reading it back is ``swap`` of the nests).
    """
    if src is None:
        if view is None or view.size != dst.size:
            raise ValueError(f"host memory is read through a view of size {list(dst.size)}, got {view!r}")
        other = [host_digits(dst, group, view.stride) for group in dst.groups]
        return refined_nests(dst, other, view.offset, broadcast_full)
    if view is not None or src.size != dst.size:
        raise ValueError(f"a layout source holds the destination's host tensor {list(dst.size)} whole, "
                         f"got size {list(src.size)} and view {view!r}")
    whole = {g.host_dims: g for g in src.groups}
    dst_groups = {g.host_dims for g in dst.groups}
    per_dim: dict[int, list[tuple[int, int, int]]] = {}  # the other groups' digits, each within one host dim
    for g in src.groups:
        if g.host_dims not in dst_groups:
            per_dim.update(digits_per_dim(g, src.size) or {})
    other = []
    for group in dst.groups:
        match = whole.get(group.host_dims)
        if match is not None:
            other.append([(dig.step, dig.size, dig.device_stride) for dig in match.digits])
            continue
        if any(d not in per_dim for d in group.host_dims):
            return None
        unit = _units(group.host_dims, dst.size)
        other.append(sorted((unit[d] * local, n, stride) for d in group.host_dims for local, n, stride in per_dim[d]))
    if {d for g in dst.groups for d in g.host_dims} != {d for g in src.groups for d in g.host_dims}:
        return None
    return refined_nests(dst, other, 0, broadcast_full)


def _units(dims: Sequence[int], size: Sequence[int]) -> dict[int, int]:
    """The step of each of a group's host dims (``dims``, outer to inner) in its coordinate."""
    unit, step = {}, 1
    for d in reversed(dims):
        unit[d], step = step, step * size[d]
    return unit


def digits_per_dim(group: Group, size: Sequence[int]) -> dict[int, list[tuple[int, int, int]]] | None:
    """``group``'s digits cut where they pass from one host dim into the next: per host dim,
    (step, size, stride) digits over that dim's own index, which a group of other host dims (in
    another order, or fewer or more of them) composes; a source group whose base's strides nest
    its dims in another order than the destination's (a transposed view's result bound to strides
    that keep the transpose) maps that way. None for a group with padding or a digit that does
    not cut at a host dim's boundary.

    >>> from torch_layouts.core.layout import DeviceLayout
    >>> g = DeviceLayout([6], [1], torch.float16).resolve((2, 3), (1, 2)).groups[0]  # dims (1, 0)
    >>> digits_per_dim(g, (2, 3))  # one digit over h = 2 * d1 + d0, cut into d1's and d0's
    {1: [(1, 3, 2)], 0: [(1, 2, 1)]}
    """
    if group.pad:
        return None
    own = _units(group.host_dims, size)
    out: dict[int, list[tuple[int, int, int]]] = {d: [] for d in group.host_dims}
    for digit in group.digits:
        step, n, stride = digit.step, digit.size, digit.device_stride
        while n > 1:
            d = next((h for h in group.host_dims if own[h] <= step < own[h] * size[h]), None)
            if d is None or step % own[d] or size[d] % (step // own[d]):
                return None
            local = step // own[d]
            m = min(n, size[d] // local)
            if n % m:
                return None
            out[d].append((local, m, stride))
            step, n, stride = step * m, n // m, stride * m
    return out


def host_digits(dst: BoundLayout, group: Group, host_stride: Sequence[int]) -> list[tuple[int, int, int]]:
    """A host tensor's (step, size, stride) digits over a group, adjacent ones merged."""
    digits: list[tuple[int, int, int]] = []
    step = 1
    for d in reversed(group.host_dims):
        size, stride = dst.size[d], host_stride[d]
        if digits and digits[-1][2] * digits[-1][1] == stride:
            prev = digits[-1]
            digits[-1] = (prev[0], prev[1] * size, prev[2])
        else:
            digits.append((step, size, stride))
        step *= size
    return digits


def refined_nests(dst: BoundLayout, other: Sequence[Digits], other_offset: int,
                  broadcast_full: bool) -> list[Transfer] | None:
    """Nests over the real positions of ``dst`` whose source address has the digits
    ``other`` per group of ``dst`` (plus ``other_offset``); None if not linear."""
    layout = dst.layout
    if dst.empty or layout.device_numel == 0:
        return []
    per_group: list[tuple[list[Piece], list[Box]]] = []
    for group, other_digits in zip(dst.groups, other):
        lead = [(dig.step, dig.size, dig.device_stride) for dig in group.digits]
        found = refine(group, lead, other_digits)
        if found is None:
            return None
        per_group.append(found)
    fixed = [(layout.device_size[j], layout.device_strides[j], 0) for j in dst.broadcast] if broadcast_full else []
    transfers = []
    for choice in itertools.product(*(boxes for _, boxes in per_group)):
        loops: list[Loop] = []
        dst_off, src_off = 0, other_offset
        for (pieces, _), box in zip(per_group, choice):
            for piece, (start, count) in zip(pieces, box):
                dst_off += start * piece.dst
                src_off += start * piece.src
                loops.append((count, piece.dst, piece.src))
        loops += fixed
        transfer = nest(loops, dst_off, src_off)
        if transfer is not None:
            transfers.append(transfer)
    transfers.sort(key=lambda t: t.dst_offset)
    return transfers


def refine(group: Group, lead: Digits, other: Digits) -> tuple[list[Piece], list[Box]] | None:
    """Digits of ``group`` linear on both sides, with their real boxes; None if impossible.

    Either the other side walks the group with one stride, or both sides are mixed
    radices (a digit may end in padding: ``Group.radices``) whose steps nest, so the union
    of their steps is a common refinement.
    """
    if len(other) == 1 and other[0][0] == 1:
        stride = other[0][2]
        pieces = [Piece(step, size, st, step * stride) for step, size, st in lead]
        return pieces, list(group.real)
    if radices_of([(st, n) for st, n, _ in lead]) is None or radices_of([(st, n) for st, n, _ in other]) is None:
        return None
    steps = sorted({s for s, _, _ in lead} | {s for s, _, _ in other})
    if any(b % a for a, b in zip(steps, steps[1:])):
        return None
    sizes = [b // a for a, b in zip(steps, steps[1:])] + [-(-group.size // steps[-1])]
    pieces = [Piece(s, n, _stride_at(lead, s), _stride_at(other, s)) for s, n in zip(steps, sizes)]
    real, _ = split_group(steps, sizes, group.size)
    return pieces, real


def _stride_at(digits: Digits, step: int) -> int:
    """Stride of a refined digit of ``step`` within the coarsest digit not above it."""
    base = max((d for d in digits if d[0] <= step), key=lambda d: d[0])
    return base[2] * (step // base[0])


def nest(loops: Sequence[Loop], dst_off: int, src_off: int) -> Transfer | None:
    """Drop unit loops, order by decreasing ``dst`` stride and merge loops that run on."""
    if any(size == 0 for size, _, _ in loops):
        return None
    ordered = sorted((lp for lp in loops if lp[0] > 1), key=lambda lp: -lp[1])
    merged: list[Loop] = []
    for size, dst, src in ordered:
        if merged and merged[-1][1] == dst * size and merged[-1][2] == src * size:
            size *= merged.pop()[0]
        merged.append((size, dst, src))
    if not merged:
        merged = [(1, 1, 1)]
    ranges, dst_strides, src_strides = zip(*merged)
    return Transfer(ranges, dst_strides, src_strides, dst_off, src_off)


def padding(dst: BoundLayout) -> list[Fill]:
    """Fill nests covering every padding position of ``dst``'s buffer."""
    strides = dst.layout.device_strides
    fills = []
    for box in dst.pad_boxes():
        loops = [(count, st, 0) for (_, count), st in zip(box, strides)]
        found = nest(loops, sum(start * st for (start, _), st in zip(box, strides)), 0)
        if found is not None:
            fills.append(Fill(found.ranges, found.dst_strides, found.dst_offset))
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


# -- whole buffers: operand views ------------------------------------------------------------
_Target = tuple[int, int, int, int]  # (source group, digit, units of the group, steps of the digit)


def map_view(src: BoundLayout, view: View, dst: BoundLayout, refine: bool = False) -> ViewMap | None:
    """One nest reading ``view`` (broadcastable to ``dst.size``) of the host tensor held
    by ``src`` at every position of ``dst``'s buffer, or None.

    A destination dim ``j`` steps along a host-dim group of ``dst`` with some step;
    through the view's strides (0 where it broadcasts) that is a fixed host-offset
    stride ``m_j`` in ``src``'s host storage. There host offsets decompose into
    ``src``'s groups and each group into mixed-radix digits (``Group.radices``: a digit
    may end in padding; a group whose steps do not divide is split into radices where they
    do not, ``_radix_groups``); ``m_j`` must land on one digit (``q`` steps of it) and,
    summed over the real range of every destination dim plus the view's offset, stay below
    each digit's radix (no carries) and each group's extent. Then the source address is
    affine: ``q * device_stride`` per dim. With ``refine``, a dim that overflows a digit may
    split into factors walking the next coarser digits (a nest for a copy, not a view shaped
    like ``dst``).
    """
    mult = _view_strides(dst, view.size, view.stride)
    if mult is None:
        return None
    groups = _radix_groups(src)
    if groups is None:
        return None
    if any(b.unit_stride < a.unit_stride * a.size for a, b in zip(groups, groups[1:])):
        return None
    start = [0] * len(groups)
    rest = view.offset
    for gi in reversed(range(len(groups))):
        start[gi], rest = divmod(rest, groups[gi].unit_stride)
        if start[gi] >= groups[gi].size:
            return None
    if rest:
        return None
    load = list(start)  # the largest group coordinate any real position reaches
    digit_load: dict[tuple[int, int], int] = {}
    base = 0
    for gi, group in enumerate(groups):
        for i, dig in enumerate(group.digits):
            value = start[gi] // dig.step
            if i + 1 < len(group.digits):
                value %= group.radices[i]
            digit_load[(gi, i)] = value
            base += value * dig.device_stride
    dsize, dstride = dst.layout.device_size, dst.layout.device_strides
    per_dim: list[list[tuple[Piece, _Target | None]]] = [
        [(Piece(1, n, st, 0), None)] for n, st in zip(dsize, dstride)]
    walks: list[tuple[tuple[int, int], ...]] = [()] * len(dsize)
    for group in dst.groups:
        for dig in group.digits:
            j = dig.dim
            if dsize[j] == 1:
                continue
            found = _factors(groups, mult[j], dsize[j], dstride[j], refine)
            if found is None:
                return None
            per_dim[j] = found
            walks[j] = tuple((-1, 0) if t is None else (groups[t[0]].digits[t[1]].dim, t[3]) for _, t in found)
        # the most each source group / digit gains over the real positions of this group
        gains: dict[tuple, int] = {}
        for box in group.real:
            totals: dict[tuple, int] = {}
            for dig, (begin, count) in zip(group.digits, box):
                top = begin + count - 1
                for piece, target in per_dim[dig.dim]:
                    if target is not None:
                        gi, i, w, q = target
                        reach = min(piece.size - 1, top // piece.step)
                        totals[("g", gi)] = totals.get(("g", gi), 0) + w * reach
                        totals[("d", gi, i)] = totals.get(("d", gi, i), 0) + q * reach
            for k, v in totals.items():
                gains[k] = max(gains.get(k, 0), v)
        for k, v in gains.items():
            if k[0] == "g":
                load[k[1]] += v
            else:
                digit_load[(k[1], k[2])] += v
    if any(load[gi] >= g.size for gi, g in enumerate(groups)):
        return None
    if any(v >= groups[gi].radices[i] for (gi, i), v in digit_load.items()):
        return None
    pieces = [piece for dim in per_dim for piece, _ in reversed(dim)]
    shape = tuple(p.size for p in pieces)
    strides = tuple(p.src for p in pieces)
    if base + sum((n - 1) * st for n, st in zip(shape, strides)) >= src.layout.device_numel:
        return None
    factors = tuple(len(dim) for dim in per_dim)
    exact = len(pieces) == len(dsize) and _same_buffer(src, dst, strides, base)
    return ViewMap(Transfer(shape, tuple(p.dst for p in pieces), strides, 0, base), factors, tuple(walks), exact)


class _Radix(NamedTuple):
    """Digits of a source group that form one mixed radix of host offsets: its coordinate steps
    ``unit_stride`` host elements and takes ``size`` values; digit steps count from its first."""

    unit_stride: int
    size: int
    digits: tuple[Digit, ...]
    radices: tuple[int, ...]


def _radix_groups(src: BoundLayout) -> list[_Radix] | None:
    """``src``'s groups as mixed radices of host offsets, by unit stride; None if one is none.

    A layout takes a group's coordinates coarsest digit first (``c = h // step``, then the rest),
    so where a step does not divide the next (a host dim of 96 whose sticks of 32 hold rows of
    48: steps 1, 32 and 48; a 12 + 8 style tiling) the group is two radices, split there: ``h //
    48`` and, of ``h % 48``, digits of steps 1 and 32.
    """
    out = []
    for g in src.groups:
        runs = [[g.digits[0]]]
        for a, b in zip(g.digits, g.digits[1:]):
            if b.step % a.step:
                runs.append([b])
            else:
                runs[-1].append(b)
        for k, run in enumerate(runs):
            base = run[0].step
            top = runs[k + 1][0].step if k + 1 < len(runs) else g.size
            digits = tuple(Digit(d.dim, d.step // base, d.size, d.device_stride) for d in run)
            radices = radices_of([(d.step, d.size) for d in digits])
            if radices is None:
                return None
            out.append(_Radix(g.unit_stride * base, -(-top // base), digits, radices))
    return sorted(out, key=lambda r: r.unit_stride)


def _view_strides(dst: BoundLayout, size: Sequence[int], stride: Sequence[int]) -> list[int] | None:
    """Per destination dim: the view's host-offset stride (0 where it broadcasts)."""
    rank, rx = len(dst.size), len(size)
    if rx > rank:
        return None
    host = [0] * rank
    for dx, (n, s) in enumerate(zip(size, stride)):
        d = dx + rank - rx
        if n != 1:
            if n != dst.size[d]:
                return None
            host[d] = s
    mult = [0] * dst.layout.device_rank
    for group in dst.groups:
        dims = group.host_dims
        unit, extent = host[dims[-1]], dst.size[dims[-1]]
        for d in reversed(dims[:-1]):
            if host[d] != unit * extent:
                return None
            extent *= dst.size[d]
        for dig in group.digits:
            mult[dig.dim] = dig.step * unit
    return mult


def _factors(groups: Sequence[_Radix], m: int, size: int, dst_stride: int, refine: bool
             ) -> list[tuple[Piece, _Target | None]] | None:
    """Factors (finest first) of a destination dim of ``size`` whose host-offset stride
    is ``m``, each walking one source digit; one factor unless ``refine`` splits the dim
    where it overflows a digit (its real values, its radix) into the next coarser one."""
    pieces: list[tuple[Piece, _Target | None]] = []
    step = 1
    while True:
        if m == 0:
            return pieces + [(Piece(step, size, dst_stride, 0), None)]
        gi = max((g for g in range(len(groups)) if m % groups[g].unit_stride == 0),
                 key=lambda g: groups[g].unit_stride, default=None)
        if gi is None:
            return None
        w = m // groups[gi].unit_stride
        i = max(i for i, d in enumerate(groups[gi].digits) if d.step <= w and w % d.step == 0)
        dig, radix = groups[gi].digits[i], groups[gi].radices[i]
        q = w // dig.step
        target = (gi, i, w, q)
        span_ = radix // q if radix % q == 0 else 0
        if not refine or q * (size - 1) < radix or span_ <= 1 or size % span_:
            return pieces + [(Piece(step, size, dst_stride, q * dig.device_stride), target)]
        pieces.append((Piece(step, span_, dst_stride, q * dig.device_stride), target))
        size, dst_stride, m, step = size // span_, dst_stride * span_, m * span_, step * span_


def _same_buffer(src: BoundLayout, dst: BoundLayout, strides: Sequence[int], base: int) -> bool:
    """The view reads ``src``'s buffer position for position as ``dst``'s own."""
    if base != 0 or src.layout.device_size != dst.layout.device_size:
        return False
    natural = dst.layout.device_strides
    grouped = {dig.dim for g in dst.groups for dig in g.digits}
    for j, n in enumerate(src.layout.device_size):
        if n == 1:
            continue
        if j in grouped:
            if strides[j] != natural[j]:
                return False
        elif not (j in dst.synthetic and j in src.synthetic):
            return False
    return True


__all__ = ["Fill", "Piece", "Transfer", "View", "ViewMap", "host_digits", "map_addresses", "map_view",
           "padding", "span", "swap"]
