"""Operands as strided views of raw device buffers, in an op's device coordinates.

Kernels compute on device memory itself. An op picks a *coordinate system*: a layout
resolved over the host tensor it produces (``BoundLayout``), usually the layout of its first
full-rank operand. Every device operand is then read as a CPU ``as_strided`` view of
its own raw buffer (``_C._raw_buffer``) shaped like that layout's ``device_size``: the
view holds, at every real position of the coordinates, the operand's element for that
host index. Ordinary CPU torch ops on such views write straight into the result's
buffer, at its real positions (``real_slices``).

``plan_view`` derives such a view without touching data: it is the address-mapping
engine's ``map_view`` (``core/mapping.py``) from the operand's bound layout, through
the operand's view of its base tensor, onto the coordinates. Where it finds none the
caller restickifies the operand (a device-to-device copy into a compatible layout).

Spyre's documented stick rule ("pointwise operands share the stick dim") is checked on
the way: the coordinates' stick dim must land on the operand's own stick (``q == 1``),
or the operand must broadcast along it, and no other coordinate dim may walk the
operand's stick.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

import torch

from .. import _C
from ..core.dtypes import data_format, elems_per_stick
from ..core.layout import BoundLayout, DeviceLayout, contiguous_strides, is_dense
from ..core.mapping import Fill, View, map_view, padding
from ..runtime import layout_records
from ..spyre import SpyreTensorLayout
from .strided import strided_copy

Shape = tuple[int, ...]




class ViewPlan(NamedTuple):
    """How to read an operand in some coordinates: ``raw.as_strided(shape, strides, offset)``."""

    strides: Shape
    offset: int
    stick_ok: bool  # the operand honours the stick rule in these coordinates
    exact: bool  # the operand's buffer is the coordinates' buffer (padding included)
    shape: Shape | None = None  # refined plans: the factors of the coordinate dims ...
    dst_strides: Shape | None = None  # ... their strides in the coordinates' buffer ...
    factors: Shape | None = None  # ... and how many factors each coordinate dim has

    def read(self, x: torch.Tensor, coords: BoundLayout) -> torch.Tensor:
        """The operand's view: shaped like the coordinates, or like their factors if refined."""
        return raw_view(x, self.shape or coords.shape, self.strides, self.offset)


# -- small helpers ------------------------------------------------------------------
def record_of(x: torch.Tensor) -> _C.BoundLayout | None:
    """The layout record of a device tensor whose elements its layout describes."""
    info = _C._bound_layout_of(x)
    if info is None or info.layout.dtype.itemsize != x.element_size():
        return None
    return info


def geometry_key(x: torch.Tensor) -> tuple | None:
    """What a kernel's plan for device tensor ``x`` depends on, as a tuple of ints: its device,
    dtype, shape, strides, offset and layout record (the layout object's identity, the base
    tensor's size and strides; the runtime keys its replayed view copies the same way); None when
    ``x`` is not a device tensor carrying a layout. Plans keyed on it keep the layout objects alive."""
    return _C._geometry_key(x)


_V = TypeVar("_V")


def keep(cache: dict, key: object, value: _V, limit: int) -> _V:
    """``cache[key] = value`` in a cache of plans kept per geometry, emptied when it holds
    ``limit`` entries (a plan is cheap to work out again); returns ``value``."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
    return value


def layouts_of(tensors: Sequence[torch.Tensor]) -> tuple:
    """The layout objects of device tensors, for a plan keyed on their ``geometry_key`` to hold:
    the ids in its key then stay theirs."""
    return tuple(_C._bound_layout_of(t).layout for t in tensors)


def plan_key(op: str, args: tuple, tensors: Sequence[torch.Tensor]) -> tuple | None:
    """A kernel call's key for its kept plan: the op, its other arguments and every tensor's
    ``geometry_key`` (None when a tensor has no layout)."""
    parts: list = [op, args]
    for t in tensors:
        geometry = geometry_key(t)
        if geometry is None:
            return None
        parts.append(geometry)
    return tuple(parts)


Read = tuple[Shape, Shape, int]  # a view of a raw buffer: size, strides, offset


def read_of(v: torch.Tensor) -> Read:
    return tuple(v.shape), tuple(v.stride()), v.storage_offset()


class FactoredRead(NamedTuple):
    """A strided view of a raw buffer holding a tensor's elements in a refinement of its shape:
    host dim ``d`` split into ``counts[d]`` consecutive dims of ``read`` (outer first), so that
    index ``i`` of dim ``d`` is those dims' row-major index."""

    read: Read
    counts: tuple[int, ...]


HOST_READS: dict[tuple, tuple[FactoredRead | None, tuple]] = {}  # geometry_key -> (read, layouts held)
MAX_HOST_READS = 1024


def factored_read(x: torch.Tensor) -> FactoredRead | None:
    """The strided view of ``x``'s raw buffer that holds ``x``'s elements, each host dim split
    where its device offsets step unevenly (a dim whose halves lie in two tiles: attention's heads
    of a packed projection), or None when no such view holds them (offsets that are not affine in
    any split, or ``x`` a dtype view of its buffer). Worked out once per geometry.

    >>> x = torch.randn(6, 64).to("spyre").view(6, 4, 16).transpose(0, 1)  # 4 heads, 2 per stick
    >>> r = factored_read(x)
    >>> r.counts, torch.equal(raw_view(x, *r.read).reshape(x.shape), x.cpu())
    ((2, 1, 1), True)
    """
    key = geometry_key(x)
    if key is None:
        return None
    kept = HOST_READS.get(key)
    if kept is None:
        kept = keep(HOST_READS, key, (_factored(x), layouts_of([x])), MAX_HOST_READS)
    return kept[0]


def host_read(x: torch.Tensor) -> Read | None:
    """``factored_read`` where no dim is split: a strided view of ``x``'s raw buffer in ``x``'s
    own shape (the first copy of broadcast ones), else None.

    >>> x = torch.randn(4, 6, 6).to("spyre").view(2, 2, 6, 6)  # heads split out of one device dim
    >>> size, strides, offset = host_read(x)
    >>> torch.equal(raw_view(x, size, strides, offset), x.cpu())
    True
    """
    r = factored_read(x)
    return r.read if r is not None and all(c == 1 for c in r.counts) else None


def piece_reads(x: torch.Tensor, limit: int = 16) -> tuple[Read, ...] | None:
    """Strided views of ``x``'s raw buffer that together hold each of ``x``'s elements once:
    ``factored_read``'s one view, else ``x`` cut along each dim where its device offsets change
    step (a slice straddling sticks: ``x[:, 5:40]`` of float32 is 27 + 8 columns) into at most
    ``limit`` boxes that each have one; None otherwise.

    >>> x = torch.randn(4, 70).to("spyre")[1:3, 5:40]
    >>> [size for size, _, _ in piece_reads(x)]
    [(2, 27), (2, 8)]
    """
    read = factored_read(x)
    if read is not None:
        return (read.read,)
    boxes = _piece_boxes([x], limit)
    if boxes is None:
        return None
    reads = [factored_read(x[box]) for box in boxes]
    return None if any(r is None for r in reads) else tuple(r.read for r in reads)


def piece_common_reads(a: torch.Tensor, b: torch.Tensor, limit: int = 16) -> tuple[tuple[Read, Read], ...] | None:
    """``common_reads`` of ``a`` and ``b`` (one shape), else of the boxes both are cut into where
    either's device offsets change step (``piece_reads``): strided copies that together move all
    of ``a`` into ``b``; None where some box has none.

    >>> p = torch.randn(6, 2, 48).to("spyre").unflatten(-1, (3, 16)).permute(2, 0, 1, 3)  # q, k, v
    >>> out = torch.empty(3, 6, 2, 16).to("spyre")
    >>> pieces = piece_common_reads(p, out)
    >>> for src, dst in pieces: _ = raw_view(out, *dst).copy_(raw_view(p, *src))
    >>> len(pieces), torch.equal(out.cpu(), p.cpu())
    (2, True)
    """
    pair = common_reads(a, b)
    if pair is not None or a.shape != b.shape:
        return None if pair is None else (pair,)
    for periods in (True, False):  # whole tiles of a tiled dim in one piece, else a piece per run
        boxes = _piece_boxes([a, b], limit, periods)
        pairs = None if boxes is None else [common_reads(a[box], b[box]) for box in boxes]
        if pairs is not None and all(p is not None for p in pairs):
            return tuple(pairs)
    return None


def copy_pieces(src: torch.Tensor, out: torch.Tensor, pieces: Sequence[tuple[Read, Read]]) -> torch.Tensor:
    """``out`` after copying ``src`` into it piece by piece (``piece_common_reads``' pairs)."""
    for read, write in pieces:
        raw_view(out, *write).copy_(raw_view(src, *read))
    return out


def _piece_boxes(tensors: Sequence[torch.Tensor], limit: int, periods: bool = False
                 ) -> list[tuple[slice, ...]] | None:
    """The boxes that cut tensors of one shape along each dim wherever any one's device offsets
    change step (at most ``limit``), or None (too many, a dtype view, no layout). With
    ``periods``, runs that repeat one pattern (a tiled dim's tiles: 1000 float32 columns in
    sticks of 32) stay in one box, cut after the last whole one."""
    shape = tensors[0].shape
    cuts: list[set[int]] = [set() for _ in shape]
    for x in tensors:
        info = record_of(x)
        if x.numel() == 0 or info is None or info.layout.dtype != x.dtype:
            return None
        offsets = _C._view_offsets(info, list(x.shape), list(x.stride()), x.storage_offset())
        for d, n in enumerate(shape):
            line = offsets.movedim(d, 0).reshape(n, -1)[:, 0].tolist()
            start = 0
            while start < n:  # a run of one step from start; the next starts where the step changes
                end = start + 1
                if end < n:
                    step = line[end] - line[start]
                    while end + 1 < n and line[end + 1] - line[end] == step:
                        end += 1
                    end += 1
                    if periods:  # further runs of that length, each the last one moved by one jump
                        k, jump = end - start, line[end] - line[start] if end < n else 0
                        while end + k <= n and all(line[end + j] == line[end - k + j] + jump for j in range(k)):
                            end += k
                cuts[d].add(start)
                start = end
    runs = [[slice(a, b) for a, b in zip(sorted(c), sorted(c)[1:] + [n])] for c, n in zip(cuts, shape)]
    if math.prod(len(r) for r in runs) > limit:
        return None
    return list(itertools.product(*runs))


def common_reads(a: torch.Tensor, b: torch.Tensor) -> tuple[Read, Read] | None:
    """Strided views of ``a``'s and ``b``'s buffers holding their elements (tensors of one shape)
    in one refinement of that shape, so that one strided copy moves ``a`` into ``b``; None where
    either has no ``factored_read`` or their splits of a dim do not nest.

    >>> g = torch.randn(6, 4, 32).to("spyre")[:, :2, :16]  # two heads of a wider buffer
    >>> out = torch.zeros(6, 2, 16).to("spyre")
    >>> src, dst = common_reads(g, out)
    >>> _ = raw_view(out, *dst).copy_(raw_view(g, *src))
    >>> torch.equal(out.cpu(), g.cpu())
    True
    """
    reads = common_reads_along(a, b, None)
    return None if reads is None else reads[:2]


def common_reads_along(a: torch.Tensor, b: torch.Tensor, free: int | None) -> tuple[Read, Read, int] | None:
    """``common_reads`` of tensors whose shapes may differ along the dim ``free`` (an
    ``index_select``'s input and result), which neither splits: the two views, and that dim's
    place in them; None where ``free`` is split on either side (or as ``common_reads``).

    >>> x = torch.randn(16, 64).to("spyre")  # Spyre's 2-D layout: two stick columns of 32
    >>> src, dst, k = common_reads_along(x, torch.zeros(4, 64).to("spyre"), 0)
    >>> src[0], dst[0], k
    ((16, 2, 32), (4, 2, 32), 0)
    """
    ra, rb = factored_read(a), factored_read(b)
    if ra is None or rb is None or a.dim() != b.dim() or any(
            a.shape[d] != b.shape[d] for d in range(a.dim()) if d != free):
        return None
    factors = [_per_dim(r) for r in (ra, rb)]
    reads: list[list[tuple[int, int]]] = [[], []]
    place = -1
    for d in range(a.dim()):
        if d == free:
            ends = [f[d] or [(1, 0)] for f in factors]  # a dim of size 1 may have no factor
            if any(len(e) != 1 for e in ends):
                return None
            place = len(reads[0])
            reads[0] += ends[0]
            reads[1] += ends[1]
            continue
        sizes = _common_sizes([f for f, _ in factors[0][d]], [f for f, _ in factors[1][d]])
        if sizes is None:
            return None
        for k in (0, 1):
            split = _resplit(factors[k][d], sizes)
            if split is None:
                return None
            reads[k] += split
    origins = (ra.read[2], rb.read[2])
    views = [(tuple(n for n, _ in r), tuple(st for _, st in r), o) for r, o in zip(reads, origins)]
    return views[0], views[1], place


def _per_dim(r: FactoredRead) -> list[list[tuple[int, int]]]:
    """A factored read's (size, stride) factors, grouped per host dim."""
    pairs = list(zip(*r.read[:2]))
    first = list(itertools.accumulate(r.counts, initial=0))
    return [pairs[first[d]:first[d + 1]] for d in range(len(r.counts))]


def _common_sizes(a: list[int], b: list[int]) -> list[int] | None:
    """The factor sizes (outer first) that split a dim at every boundary of both splits, or None."""
    def bounds(sizes: list[int]) -> set[int]:
        return set(itertools.accumulate(reversed(sizes), lambda acc, n: acc * n))
    cuts = sorted(bounds(a) | bounds(b) | {1})
    if any(hi % lo for lo, hi in zip(cuts, cuts[1:])):
        return None
    return [hi // lo for lo, hi in zip(cuts, cuts[1:])][::-1] or [1]


def _resplit(factors: list[tuple[int, int]], sizes: list[int]) -> list[tuple[int, int]] | None:
    """``factors`` (size, stride; outer first) split further into factors of ``sizes``."""
    out: list[tuple[int, int]] = []
    pending = list(sizes)
    for n, stride in reversed(factors):
        covered = 1
        while covered < n and pending:
            m = pending.pop()
            out.append((m, stride * covered))
            covered *= m
        if covered != n:
            return None
    if pending and any(m != 1 for m in pending):
        return None
    out += [(1, 0)] * len(pending)
    return out[::-1]


def _factors(steps: list[int]) -> list[tuple[int, int]] | None:
    """(size, stride) factors, outer first, of a sequence of offsets (from 0) that is a row-major
    affine function of them, or None."""
    n = len(steps)
    if n == 1:
        return [(1, 0)]
    step = steps[1]
    run = 1
    while run < n and steps[run] == run * step:
        run += 1
    if step < 0 or n % run:
        return None
    outer = steps[::run]
    if any(steps[j + r] != steps[j] + r * step for j in range(0, n, run) for r in range(run)):
        return None
    rest = [] if run == n else _factors(outer)
    return None if rest is None else rest + [(run, step)]


def _factored(x: torch.Tensor) -> FactoredRead | None:
    info = record_of(x)
    if x.numel() == 0 or info is None or info.layout.dtype != x.dtype:
        return None  # a dtype view: offsets in units of its buffer's dtype
    offsets = _C._view_offsets(info, list(x.shape), list(x.stride()), x.storage_offset())
    origin = int(offsets.reshape(-1)[0])
    sizes, strides, counts = [], [], []
    for d, n in enumerate(x.shape):
        line = offsets.movedim(d, 0).reshape(n, -1)[:, 0]  # dim d's offsets, every other index 0
        factors = _factors([int(v) - origin for v in line])
        if factors is None:
            return None
        sizes += [f for f, _ in factors]
        strides += [s for _, s in factors]
        counts.append(len(factors))
    expected = torch.full((), origin, dtype=torch.int64)
    for k, (n, step) in enumerate(zip(sizes, strides)):
        shape = [1] * len(sizes)
        shape[k] = n
        expected = expected + torch.arange(n, dtype=torch.int64).view(shape) * step
    if not torch.equal(offsets.reshape(-1), expected.expand(sizes).reshape(-1)):
        return None
    return FactoredRead((tuple(sizes), tuple(strides), origin), tuple(counts))


def in_place(views: Sequence[torch.Tensor], tensors: Sequence[torch.Tensor]) -> bool:
    """Whether each operand's view reads its own buffer (no copy was made to read it)."""
    return all(v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() for v, t in zip(views, tensors))


def raw(x: torch.Tensor) -> torch.Tensor:
    """A 1-D CPU tensor of ``x.dtype`` aliasing the whole device buffer of ``x``."""
    buf = _C._raw_buffer(x)
    return buf if buf.dtype == x.dtype else buf.view(x.dtype)


def raw_view(x: torch.Tensor, size: Shape, stride: Shape | None = None, offset: int = 0) -> torch.Tensor:
    """``raw(x).as_strided(size, stride, offset)`` in one runtime call (the replays' hot path);
    without ``stride``, the buffer's start read contiguously in ``size``."""
    return _C._raw_view(x, size, stride, offset)


def is_whole_dense(x: torch.Tensor, info: _C.BoundLayout) -> bool:
    """``x`` covers exactly its buffer's base tensor (possibly permuted or reshaped)."""
    return (
        x.storage_offset() == 0
        and x.numel() == math.prod(info.base_size)
        and is_dense(tuple(x.shape), tuple(x.stride()))
    )


def rowmajor(size: Shape) -> Shape:
    return contiguous_strides(size)


def strides_in_order(size: Shape, like: Shape) -> Shape:
    """Dense strides for ``size`` whose dims nest in the order of the strides ``like``."""
    order = sorted(range(len(size)), key=lambda d: (-like[d], d))
    strides = [0] * len(size)
    running = 1
    for d in reversed(order):
        strides[d] = running
        running *= max(size[d], 1)
    return tuple(strides)


# -- coordinate systems ----------------------------------------------------------------
@functools.lru_cache(maxsize=1024)
def default_coords(size: Shape, dtype: torch.dtype) -> BoundLayout:
    stride = rowmajor(size)
    return BoundLayout(layout_records.default_layout(size, stride, dtype), size, stride)


@functools.lru_cache(maxsize=1024)
def ordered_coords(size: Shape, dtype: torch.dtype, order: tuple[int, ...]) -> BoundLayout:
    """The Spyre layout of ``size`` with ``order`` as its dim_order, over a row-major tensor."""
    return BoundLayout(SpyreTensorLayout(size, dtype, list(order)), size, rowmajor(size))


def coords_for(x: torch.Tensor) -> BoundLayout:
    """Coordinates an op on ``x`` computes in: ``x``'s own buffer when it is whole, else a
    layout of ``x``'s shape with the same dim_order (when ``x`` can be read in it), else, for a
    view whose elements run along a dim other than its last, a layout with that dim as the stick
    (when ``x`` can be read in it), else the default layout of ``x``'s shape."""
    size, stride = tuple(x.shape), tuple(x.stride())
    info = record_of(x)
    if info is None:
        return default_coords(size, x.dtype)
    if is_whole_dense(x, info):
        own = BoundLayout(info.layout, size, stride)
        p = plan(x, own)
        if p is not None and p.exact:
            return own
    order = getattr(info.layout, "dim_order", None)
    if order and len(order) - (order[-1] == -1) == len(size) and len(size) <= 6:
        candidate = ordered_coords(size, x.dtype, tuple(order))
        p = plan(x, candidate)
        if p is not None and p.stick_ok:
            return candidate
    # As the CPU's result keeps its input's strides: a transposed view of a bigger buffer
    # (attention's k.transpose(-2, -1) * scale, a view of the packed projection) is read where it
    # lies and its result keeps the stick on that dim, instead of a restickify into the default
    # layout (8x4x64x128 float32 in a training step: ~330 us a call).
    inner = next((d for d in range(len(size) - 1, -1, -1) if size[d] > 1 and stride[d] == 1), None)
    if inner is not None and inner != len(size) - 1 and len(size) <= 6:
        candidate = ordered_coords(size, x.dtype, (*(d for d in range(len(size)) if d != inner), inner))
        p = plan(x, candidate)
        if p is not None and p.stick_ok:
            return candidate
    return default_coords(size, x.dtype)


@functools.lru_cache(maxsize=2048)
def coords_with_dtype(coords: BoundLayout, dtype: torch.dtype) -> BoundLayout:
    """The layout a result of another dtype gets: the default layout of that dtype with
    the same dim_order when the coordinates are a Spyre layout built from one (read over
    its own host tensor or a permutation of it), else the default layout."""
    layout = coords.layout
    if layout.dtype == dtype:
        return coords
    order = _dim_order_over(layout, coords.size, coords.stride)
    if order is not None:
        return BoundLayout(SpyreTensorLayout(coords.size, coords.stride, dtype, order), coords.size, coords.stride)
    return BoundLayout(layout_records.default_layout(coords.size, coords.stride, dtype), coords.size, coords.stride)


def _dim_order_over(layout: DeviceLayout, size: Shape, stride: Shape) -> list[int] | None:
    """A Spyre layout's dim_order renumbered for a permutation of its host tensor."""
    order = getattr(layout, "dim_order", None)
    if order is None or layout.host_size is None or len(layout.host_size) != len(size):
        return None
    free = list(range(len(size)))
    where = {}
    for b, (n, s) in enumerate(zip(layout.host_size, layout.host_stride)):
        match = next((v for v in free if size[v] == n and (n == 1 or stride[v] == s)), None)
        if match is None:
            return None
        where[b] = match
        free.remove(match)
    return [where[b] if b != -1 else -1 for b in order]


@functools.lru_cache(maxsize=2048)
def operand_layout(coords: BoundLayout, size: Shape, dtype: torch.dtype, stride: Shape | None = None) -> DeviceLayout | None:
    """A layout for a tensor of ``size`` (the coordinates' rank, 1 where it broadcasts)
    whose device dims are the coordinates' own: every grouped device dim keeps its step
    along the same host dim; dims along broadcast host dims shrink to 1 (the stick stays,
    synthetic). None when a host-dim group mixes broadcast and real dims."""
    stride = stride if stride is not None else strides_in_order(size, coords.stride)
    device_size = list(coords.layout.device_size)
    stride_map = list(coords.layout.stride_map)
    last = len(device_size) - 1
    for j in coords.synthetic:
        stride_map[j] = -1
    for group in coords.groups:
        flags = {size[d] == 1 for d in group.host_dims}
        if flags == {True, False}:
            return None
        for dig in group.digits:
            if True in flags:
                stride_map[dig.dim] = -1
                if dig.dim != last:
                    device_size[dig.dim] = 1
            else:
                stride_map[dig.dim] = dig.step * stride[group.host_dims[-1]]
    for j, n in enumerate(device_size):
        if n == 1:
            stride_map[j] = -1
    if isinstance(coords.layout, SpyreTensorLayout) and device_size[-1] == elems_per_stick(dtype):
        layout: DeviceLayout = SpyreTensorLayout(device_size, stride_map, data_format(dtype))
    else:
        layout = DeviceLayout(device_size, stride_map, dtype, host_size=size, host_stride=stride)
    try:
        layout.resolve(size, stride)
    except ValueError:
        return None
    return layout


# -- views -------------------------------------------------------------------------------
def plan(x: torch.Tensor, coords: BoundLayout, refine: bool = False) -> ViewPlan | None:
    """How to read device tensor ``x`` (broadcastable to ``coords.size``) in ``coords``."""
    info = record_of(x)
    if info is None:
        return None
    return plan_view(coords, info.layout, tuple(info.base_size), tuple(info.base_stride),
                     tuple(x.shape), tuple(x.stride()), x.storage_offset(), refine)


def view(x: torch.Tensor, coords: BoundLayout, p: ViewPlan) -> torch.Tensor:
    return raw_view(x, coords.layout.device_size, p.strides, p.offset)


def scalar_view(x: torch.Tensor) -> torch.Tensor:
    """A 0-dim CPU view of the element of a 0-dim device tensor (or None if unreadable)."""
    info = record_of(x)
    if info is None:
        return None
    offset = element_offset(info.layout, tuple(info.base_size), tuple(info.base_stride), x.storage_offset())
    return raw_view(x, (), (), offset)


@functools.lru_cache(maxsize=4096)
def element_offset(layout: DeviceLayout, base_size: Shape, base_stride: Shape, offset: int) -> int:
    res = layout.resolve(base_size, base_stride)
    index = [0] * len(base_size)
    rest = offset
    for d in sorted(range(len(base_size)), key=lambda d: -base_stride[d]):
        if base_size[d] > 1 and base_stride[d] > 0:
            index[d], rest = divmod(rest, base_stride[d])
    return res.device_offset(tuple(index))


@functools.lru_cache(maxsize=8192)
def plan_view(coords: BoundLayout, layout: DeviceLayout, base_size: Shape, base_stride: Shape,
              size: Shape, stride: Shape, offset: int, refine: bool = False) -> ViewPlan | None:
    """The strided view of a buffer in ``layout`` (holding a base tensor) that reads the
    view ``(size, stride, offset)`` of that base in ``coords``; see the module docstring.
    With ``refine``, coordinate dims may split into factors (``ViewPlan.shape``) that
    walk several operand digits: such a plan reads the operand for a copy."""
    try:
        found = map_view(layout.resolve(base_size, base_stride), View(size, stride, offset), coords, refine)
    except ValueError:
        return None
    if found is None:
        return None
    nest = found.nest
    last, x_last = len(coords.shape) - 1, layout.device_rank - 1
    stick_ok = True
    for j, walk in enumerate(found.walks):
        for dim, q in walk:
            hit = dim == x_last
            if dim != -1 and (hit and (j != last or q != 1 or len(walk) > 1) or (j == last and not hit)):
                stick_ok = False
    if found.refined:
        return ViewPlan(nest.src_strides, nest.src_offset, stick_ok, False, nest.ranges, nest.dst_strides,
                        found.factors)
    strides = coords.layout.device_strides if found.exact else nest.src_strides
    return ViewPlan(strides, nest.src_offset, stick_ok, found.exact)


# -- padding -----------------------------------------------------------------------------
MAX_PIECES = 16  # beyond this many real boxes, kernels write whole buffers and restore padding


@functools.lru_cache(maxsize=2048)
def real_slices(coords: BoundLayout) -> tuple[tuple[tuple[slice, ...], ...], bool]:
    """Index tuples into a buffer shaped like the coordinates that cover exactly its real
    positions (a few boxes: one per partial tile, the first element of a sparse stick;
    the whole buffer ``((),)`` when it has no padding), and False; or the whole buffer
    and True (padding to restore afterwards) when there are more than ``MAX_PIECES`` boxes."""
    if not has_padding(coords):
        return ((),), False  # every position is real: the whole buffer, unsliced
    boxes = []
    for box in coords.real_boxes():
        if len(boxes) == MAX_PIECES:
            return ((),), True
        boxes.append(tuple(slice(begin, begin + count) for begin, count in box))
    return tuple(boxes), False


@functools.lru_cache(maxsize=2048)
def fills(coords: BoundLayout) -> tuple[Fill, ...]:
    """Nests covering every padding position of the coordinates' buffer."""
    return tuple(padding(coords))


@functools.lru_cache(maxsize=2048)
def one_real_box(coords: BoundLayout) -> tuple[tuple[int, int], ...] | None:
    """The coordinates' real positions as one box (``(begin, count)`` per device dim) when they have
    padding and their real positions are one box (padding only past the real extent of some device
    dims: a dim shorter than its stick), else None."""
    if not has_padding(coords):
        return None
    boxes = list(itertools.islice(coords.real_boxes(), 2))
    return boxes[0] if len(boxes) == 1 else None


def fill_pad(t: torch.Tensor, coords: BoundLayout, value: float | int | bool) -> torch.Tensor:
    """Set the padding positions of a contiguous CPU tensor shaped like the coordinates."""
    flat = t.view(-1)
    for f in fills(coords):
        flat.as_strided(f.ranges, f.strides, f.offset).fill_(value)
    return t


def padded_copy(v: torch.Tensor, coords: BoundLayout, value: float | int | bool, dtype: torch.dtype | None = None
                ) -> torch.Tensor:
    """A contiguous copy of a view in the coordinates with ``value`` in every padding position."""
    out = strided_copy(torch.empty(coords.layout.device_size, dtype=dtype or v.dtype), v)
    return fill_pad(out, coords, value)


@functools.lru_cache(maxsize=1024)
def reduced_dims(coords: BoundLayout, host_dims: frozenset[int]) -> tuple[int, ...] | None:
    """Device dims stepping along ``host_dims``; None if a group mixes them with other dims."""
    out: list[int] = []
    for group in coords.groups:
        inside = set(group.host_dims) & host_dims
        if inside and inside != set(group.host_dims):
            return None
        if inside:
            out += [dig.dim for dig in group.digits]
    return tuple(sorted(out))


# -- new device tensors ------------------------------------------------------------------
_RECORDS: dict[int, tuple[BoundLayout, _C.BoundLayout]] = {}  # id(coords) -> (coords, its runtime record)
MAX_RECORDS = 4096


def runtime_record(coords: BoundLayout) -> _C.BoundLayout:
    """The runtime's record of the coordinates' layout (what it allocates tensors of).

    Kept per coordinates *object* (the plans hand the same one back each call), which skips
    ``bound_record``'s key on every attribute of the layout; the entry holds the object, so its
    id stays its own."""
    hit = _RECORDS.get(id(coords))
    if hit is None or hit[0] is not coords:
        record = layout_records.bound_record(coords.layout, coords.size, coords.stride)
        hit = keep(_RECORDS, id(coords), (coords, record), MAX_RECORDS)
    return hit[1]


def new_tensor(coords: BoundLayout, device: torch.device) -> torch.Tensor:
    """A fresh device tensor in the coordinates' layout (padding set to the pad value)."""
    return _C._empty_with_layout(runtime_record(coords), device.index)


def scratch(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A contiguous CPU tensor living in fresh device memory: a kernel's scratchpad (device
    memory is backed by huge pages, so large scratch buffers are cheap to touch)."""
    numel = math.prod(shape)
    buffer = torch.empty((numel,), dtype=dtype, device=device)
    return raw(buffer)[:numel].view(tuple(shape))


def has_padding(coords: BoundLayout) -> bool:
    return bool(fills(coords))


def stick_dim(x: torch.Tensor) -> int | None:
    """The dim of ``x`` its buffer's stick runs along (None: sparse or unknown)."""
    info = record_of(x)
    if info is None:
        return None
    layout = info.layout
    try:
        res = layout.resolve(tuple(info.base_size), tuple(info.base_stride))
    except ValueError:
        return None
    last = layout.device_rank - 1
    for group in res.groups:
        if any(dig.dim == last for dig in group.digits):
            base_dim = group.host_dims[-1]
            unit = info.base_stride[base_dim]
            for d in range(x.dim()):
                if x.size(d) > 1 and x.stride(d) == unit:
                    return d
            return None
    return None
