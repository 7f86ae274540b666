"""Copies into or out of part of a device buffer, planned as strided copies between buffers.

``x[1].copy_(y)``, ``x[:, :k] = y``, ``host.copy_(x[1])``: the runtime hands every such copy
(same dtype, not int64) within the device, and from or to the host from 2048 elements, to
``copy_view`` (``csrc/kernels_copy.cpp``; smaller host copies stay on its element path, which
computes each element's device offset). Both
tensors are read as strided views of their raw buffers in one set of coordinates of the copy's
shape (``operands.plan``: the tensors' own coordinates first, then the Spyre layouts of that
shape in each dim_order, up to rank 4), and the coordinates' real positions are copied a box at
a time (runs of whole sticks, or a transpose; ``strided.on_executor`` picks the copy); the
boxes are kept per geometry. Where one tensor reads coordinates without padding only with some
of their dims split into factors (its sticks in another order, or along another dim), the
other's strides split the same way and the copy is one box; where no coordinates read them but
strided views of both buffers hold them in one refinement of their shape
(``operands.common_reads``: attention's head-split views), that is the one box. A host side is staged through a
fresh device tensor in those coordinates, row-major ones first (one whole-buffer DMA); a source that no coordinates
read together with the destination is first moved into coordinates that read the destination
(``materialize``, also the ops' way into their coordinates). A tensor that no coordinates read,
or a raw device buffer with no layout, leaves the copy to the runtime. The boxes of a copy
between two device tensors are also kept by the runtime (``csrc/view_copies.cpp``), which
replays later copies of that geometry without calling this module (buffers shared by both
sides excepted); it also keeps the coordinates a host side was staged through (row-major ones
let a contiguous host side's own buffer stand for the staged one: no staging), and the tensors
a source no coordinates read with the destination was moved through, and makes those copies
itself for later copies of the geometry; a geometry this module declines (returns False) is
not handed to it again until ``forget_plans``. A copy whose tensors differ from a planned one
only in storage offsets that step along untiled dims of their bases (a KV cache written at a new
position each step) reuses that plan's boxes, moved by the device distance of those steps,
instead of planning again: the runtime shifts its kept plans, and this module asks it first for
the copies it makes itself.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator

import torch

from .. import _C
from ..core.layout import BoundLayout, DeviceLayout
from .operands import (Read, ViewPlan, coords_for, host_read, keep, layouts_of, new_tensor, ordered_coords,
                       piece_common_reads, plan, plan_key, raw, raw_view, read_of, real_slices, record_of, rowmajor,
                       strides_in_order, view)
from .strided import executor_copy, on_executor, strided_copy

# A box: the reads of both buffers, and whether the executor copies it (``strided.on_executor``).
Box = tuple[Read, Read, bool]
# Per geometry of (dst, src): the boxes, () when no coordinates read both, and the layout
# objects whose ids are in the key.
PLANS: dict[tuple, tuple[tuple[Box, ...], tuple]] = {}
# Per geometry of one tensor: the coordinates a host side or a staged copy goes through (None:
# none read it), and its layout objects.
READABLE: dict[tuple, tuple[BoundLayout | None, tuple]] = {}
MAX_PLANS = 512


def materialize(t: torch.Tensor, coords: BoundLayout, out: torch.Tensor | None = None) -> torch.Tensor:
    """A new tensor in ``coords`` (or ``out``, a fresh one there) holding ``t`` (same shape and
    dtype): a strided copy between the two buffers when ``t`` can be read in those coordinates,
    else the runtime's copy (relayout nests, or gathers and scatters)."""
    out = new_tensor(coords, t.device) if out is None else out
    p = plan(t, coords, refine=True)
    if p is None:
        return out.copy_(t)
    if p.shape is None:
        copy_real(raw(out).view(coords.shape), view(t, coords, p), coords, out)
    else:
        strided_copy(raw_view(out, p.shape, p.dst_strides), p.read(t, coords))
        _C._fill_padding(out)
    return out


@functools.lru_cache(maxsize=1024)
def _dense(size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> BoundLayout:
    order = sorted(range(len(size)), key=lambda d: (-stride[d], d))  # device dims, outermost first
    layout = DeviceLayout([size[d] for d in order], [stride[d] for d in order], dtype, host_size=size,
                          host_stride=stride)
    return BoundLayout(layout, size, stride)


def dense_coords(t: torch.Tensor, row_major: bool = False) -> BoundLayout:
    """Coordinates holding ``t`` dense with no padding, its dims nested in the order of its
    strides (row-major for a whole tensor, column-major for a transposed matrix), or row-major."""
    size = tuple(t.shape)
    return _dense(size, rowmajor(size) if row_major else strides_in_order(size, tuple(t.stride())), t.dtype)


def strided_or_staged(t: torch.Tensor, copied: bool, staged: bool = False, row_major: bool = False
                      ) -> tuple[torch.Tensor, Read, BoundLayout | None] | None:
    """Where a CPU kernel reads (``copied``: an input's values) or writes a new result ``t``:
    ``t`` itself through its strided view (``operands.host_read``), or, where no strided view
    holds it (classes in padded sticks) or with ``staged``, a new tensor in ``dense_coords``
    (holding ``t``'s values when ``copied``; a result's is copied into ``t`` after), with those
    coordinates. With ``row_major`` (a GEMM operand, which the CPU's half-precision GEMMs sum in
    another order when transposed) the view's last dim steps by one element, else ``t`` is staged
    row-major. None for an empty tensor."""
    r = None if staged else host_read(t)
    if r is not None and row_major and r[0] and r[0][-1] > 1 and r[1][-1] != 1:
        r = None
    if r is not None:
        return t, r, None
    coords = dense_coords(t, row_major)
    out = materialize(t, coords) if copied else new_tensor(coords, t.device)
    r = host_read(out)
    return None if r is None else (out, r, coords)


def copy_real(target: torch.Tensor, values: torch.Tensor, coords: BoundLayout, out: torch.Tensor) -> None:
    """Copy ``values`` into the real positions of ``target`` (``out``'s buffer shaped like
    the coordinates); its padding keeps the pad value."""
    pieces, whole = real_slices(coords)
    for index in pieces:
        strided_copy(target[index], values[index])
    if whole:
        _C._fill_padding(out)


def _candidates(*tensors: torch.Tensor) -> Iterator[BoundLayout]:
    """Coordinates of the tensors' shape to try: theirs, then every Spyre dim_order (rank <= 4)."""
    yield from dict.fromkeys(coords_for(t) for t in tensors)
    t = tensors[0]
    if t.dim() <= 4:
        for order in itertools.permutations(range(t.dim())):
            yield ordered_coords(tuple(t.shape), t.dtype, order)


def _readable(t: torch.Tensor) -> BoundLayout | None:
    """The first candidate coordinates that read ``t`` (None: none), kept per geometry."""
    key = plan_key("readable", (), (t,))
    kept = READABLE.get(key) if key is not None else None
    if kept is not None:
        return kept[0]
    found = next((c for c in _candidates(t) if not real_slices(c)[1] and plan(t, c) is not None), None)
    if key is not None:
        keep(READABLE, key, (found, layouts_of((t,))), MAX_PLANS)
    return found


def _box(dst: torch.Tensor, src: torch.Tensor) -> Box:
    """The box copying CPU view ``src`` into CPU view ``dst`` of the two buffers."""
    return read_of(dst), read_of(src), on_executor(dst, src)


def _boxes(dst: torch.Tensor, src: torch.Tensor) -> tuple[Box, ...]:
    """The boxes of ``dst``'s and ``src``'s buffers that copy every element; () when no
    candidate coordinates read both."""
    for coords in _candidates(dst, src):
        pieces, whole = real_slices(coords)
        if whole:
            continue
        d, s = plan(dst, coords), plan(src, coords)
        if d is None or s is None:
            continue
        dv, sv = view(dst, coords, d), view(src, coords, s)
        return tuple(_box(dv[index], sv[index]) for index in pieces)
    refined = next(filter(None, (_refined_box(dst, src, c) for c in _candidates(dst, src))), None)
    return refined or _common_box(dst, src)


def _common_box(dst: torch.Tensor, src: torch.Tensor) -> tuple[Box, ...]:
    """One box where strided views of both buffers hold the tensors in one refinement of their
    shape (``operands.common_reads``: attention's head-split views, whose sticks no coordinates
    of the copy's shape read), else a box per piece where the tensors cut into pieces have such
    views (``operands.piece_common_reads``: columns starting in a stick's middle), else ()."""
    pieces = piece_common_reads(src, dst)
    return () if pieces is None else tuple(_box(raw_view(dst, *w), raw_view(src, *r)) for r, w in pieces)


def _refined_box(dst: torch.Tensor, src: torch.Tensor, coords: BoundLayout) -> tuple[Box] | None:
    """One box copying every element where one tensor reads coordinates without padding
    as they are and the other only with some coordinate dims split into factors (its sticks
    in another order, or along another dim: a transpose): the first tensor's strides split
    the same way. None where neither or both need factors."""
    if real_slices(coords) != (((),), False):
        return None
    d, s = plan(dst, coords, refine=True), plan(src, coords, refine=True)
    if d is None or s is None or (d.shape is None) == (s.shape is None):
        return None
    if d.shape is not None:
        return (_box(d.read(dst, coords), _split(src, s, d, coords)),)
    return (_box(_split(dst, d, s, coords), s.read(src, coords)),)


def _split(t: torch.Tensor, coarse: ViewPlan, fine: ViewPlan, coords: BoundLayout) -> torch.Tensor:
    """``t``'s view (plan ``coarse``, one stride per coordinate dim) shaped like ``fine``'s
    factors: each factor steps its coordinate dim as many times as it does in the coordinates'
    buffer (``fine.dst_strides``)."""
    unit = coords.layout.device_strides
    dims = [j for j, n in enumerate(fine.factors) for _ in range(n)]
    strides = tuple(coarse.strides[j] * (step // unit[j] if unit[j] else 0) for j, step in zip(dims, fine.dst_strides))
    return raw_view(t, fine.shape, strides, coarse.offset)


def copy_between(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """``dst.copy_(src)`` for device tensors of one shape and dtype, through their buffers;
    False (nothing written) when no coordinates read both.

    >>> x = torch.randn(8, 128, 256).to("spyre").transpose(0, 1)
    >>> copy_between(torch.empty(x.shape, device="spyre"), x)
    True
    """
    key = plan_key("copy_", (), (dst, src))
    kept = PLANS.get(key) if key is not None else None
    if kept is None and _C._replay_view_copy(dst, src):  # the runtime's kept plan, or one it shifts to this copy
        return True
    boxes = kept[0] if kept is not None else _boxes(dst, src)
    if kept is None and key is not None:
        keep(PLANS, key, (boxes, layouts_of((dst, src))), MAX_PLANS)
        if boxes:  # the runtime replays later copies of this geometry, or shifted along untiled dims, itself
            _C._keep_view_copy(dst, src, [(d[0], d[1], s[1], d[2], s[2]) for d, s, _ in boxes],
                               (_untiled_of(dst), _untiled_of(src)))
    if not boxes:
        return False
    sources = [raw_view(src, *read) for _, read, _ in boxes]
    if dst.untyped_storage().data_ptr() == src.untyped_storage().data_ptr():
        sources = [s.clone() for s in sources]  # one buffer: read every source element before any is written
    for (read, _, executor), source in zip(boxes, sources):
        target = raw_view(dst, *read)
        executor_copy(target, source) if executor else target.copy_(source)
    return True


@functools.lru_cache(maxsize=256)
def _untiled(layout: object, size: tuple[int, ...], stride: tuple[int, ...]) -> dict[int, int]:
    """The host dims of a dense base tensor that are a device dim of their own, without padding:
    host dim -> device stride (moving along one moves every element by whole device strides)."""
    order = sorted(range(len(size)), key=lambda d: stride[d])
    dense = 1
    for d in order:
        if size[d] > 1 and stride[d] != dense:
            return {}
        dense *= size[d]
    untiled = {}
    for g in BoundLayout(layout, size, stride).groups:
        if len(g.host_dims) == 1 and len(g.digits) == 1 and not g.pad and g.digits[0].size == g.size:
            untiled[g.host_dims[0]] = g.digits[0].device_stride
    return untiled


def _untiled_of(t: torch.Tensor) -> list[tuple[int, int]]:
    """``_untiled`` of ``t``'s base as (host dim, device stride) pairs: the dims along which the
    runtime shifts a kept copy to another storage offset (``csrc/view_copies.cpp``)."""
    info = record_of(t)
    return [] if info is None else list(_untiled(info.layout, tuple(info.base_size), tuple(info.base_stride)).items())


def _is_whole(t: torch.Tensor) -> bool:
    """Whether device tensor ``t`` is its buffer's whole base tensor (the runtime copies those
    without this module, so copying one never comes back here)."""
    info = record_of(t)
    return info is not None and t.storage_offset() == 0 and tuple(t.shape) == tuple(info.base_size) and all(
        n <= 1 or s == b for n, s, b in zip(t.shape, t.stride(), info.base_stride))


def _copy_staged(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """``dst.copy_(src)`` for device tensors no coordinates read together (two stick dims):
    ``src`` (copied whole first when it is part of its buffer) moves into a new tensor in
    coordinates that read ``dst`` (``materialize``), which is then copied into ``dst``."""
    coords = _readable(dst)
    if coords is None:
        return False
    whole = None
    if not _is_whole(src):
        own = _readable(src)
        if own is None:
            return False
        whole = new_tensor(own, src.device)
        if not copy_between(whole, src):
            return False
    readable = materialize(src if whole is None else whole, coords)
    if not copy_between(dst, readable):
        return False
    _C._keep_restaging(dst, src, whole, readable)  # the runtime makes these copies itself from now on
    return True


def copy_view(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """The runtime's hook for copies into or out of part of a device buffer (see the module
    docstring): whether ``src`` (of ``dst``'s shape and dtype) was copied into ``dst``.

    >>> x = torch.zeros(4, 64, 128).to("spyre")
    >>> x[1] = torch.ones(64, 128).to("spyre")  # one strided copy between the buffers
    """
    if dst.device.type != "cpu" and src.device.type != "cpu":
        return copy_between(dst, src) or _copy_staged(dst, src)
    device = src if src.device.type != "cpu" else dst
    # Row-major coordinates first: the runtime then copies a contiguous host side straight from
    # or into its own buffer (no staged tensor, no whole-buffer DMA).
    for coords in dict.fromkeys(filter(None, (dense_coords(device, row_major=True), _readable(device)))):
        staged = new_tensor(coords, device.device)
        if src.device.type == "cpu":  # host -> part of a device buffer
            copied = copy_between(dst, staged.copy_(src))
        elif copied := copy_between(staged, src):  # part of a device buffer -> host
            dst.copy_(staged)
        if copied:  # the runtime stages later copies of this geometry itself
            _C._keep_staging(device, staged)
            return True
    return False


def forget_plans() -> None:
    """Forget every kept plan: this module's and the runtime's replays of them."""
    PLANS.clear()
    READABLE.clear()
    _C._forget_view_copies()


def register_all() -> None:
    _C._set_view_copier(copy_view)
