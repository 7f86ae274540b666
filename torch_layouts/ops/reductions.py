"""Reductions on device memory: ``sum``, ``mean``, ``amax``, ``amin``, ``all``, ``any`` over dims.

The input is read in its own coordinates (``operands.coords_for``); the reduced host
dims' device dims ("digits") are summed away with CPU torch ops on that view. Padding
must not leak into the result (``amax`` of an all-negative row!): when the padding
does not already hold the reduction's identity, a copy with the identity in every
padding position is reduced instead.

Result layouts follow Spyre's documented rule: the reduced dims are dropped; when the stick dim is
reduced the result is sparse (one element per stick: a Spyre layout whose dim_order
ends in -1); ``keepdim`` keeps them as size-1 dims (stride_map -1). Inputs in layouts
that are not built from a Spyre dim_order give a result whose device dims are the
input's, with the reduced ones collapsed.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

import torch

from .. import _C
from ..runtime.layout_records import default_layout
from ..spyre import MAX_RANK, SpyreTensorLayout
from .elementwise import copy_real, move, restickify_to
from ..core.layout import BoundLayout
from .operands import (Read, coords_for, default_coords, geometry_key, has_padding, keep, layouts_of, new_tensor,
                       operand_layout, padded_copy, plan, plan_view, raw, raw_view, one_real_box, read_of, real_slices,
                       reduced_dims, rowmajor, runtime_record, strides_in_order, view)
from .registry import register
from . import strided_reductions
from .rows import ROW_DTYPES, Rows, tail_rows

LOW_PRECISION = (torch.float16, torch.bfloat16)
COLUMN_DTYPES = (torch.float32, *LOW_PRECISION)  # the column-sum kernel's


def normalize_dims(dim: int | Sequence[int] | None, rank: int) -> tuple[int, ...]:
    """Reduced dims as sorted non-negative ints; None or [] means every dim."""
    if dim is None:
        return tuple(range(rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return tuple(range(rank))
    out = set()
    for d in dims:
        if not -max(rank, 1) <= d < max(rank, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of [{-max(rank, 1)}, "
                             f"{max(rank, 1) - 1}], but got {d})")
        out.add(d % max(rank, 1))
    return tuple(sorted(d for d in out if d < rank))


def identity(kind: str, dtype: torch.dtype) -> float | int | bool:
    if kind in ("sum", "mean", "any"):
        return 0
    if kind == "all":
        return 1
    if dtype == torch.bool:
        return kind == "amin"
    if dtype.is_floating_point:
        return -math.inf if kind == "amax" else math.inf
    info = torch.iinfo(dtype)
    return info.min if kind == "amax" else info.max


def readable(x: torch.Tensor, dims: tuple[int, ...]
             ) -> tuple[torch.Tensor, BoundLayout, torch.Tensor, tuple[int, ...], bool]:
    """``x`` (restickified if it must be), its coordinates, its view in them, the device
    dims of the reduced host dims, and whether the view is ``x``'s exact buffer."""
    coords = coords_for(x)
    p = plan(x, coords)
    if p is None or not p.stick_ok:
        x = restickify_to(x, coords)
        p = plan(x, coords)
    red = reduced_dims(coords, frozenset(dims))
    if red is None:
        coords = default_coords(tuple(x.shape), x.dtype)
        x = restickify_to(x, coords)
        p = plan(x, coords)
        red = reduced_dims(coords, frozenset(dims))
    return x, coords, view(x, coords, p), red, p.exact


def strided_coords(x: torch.Tensor, dims: tuple[int, ...]) -> BoundLayout | None:
    """The coordinates a reduction of ``x``'s strided view lays its result out from (see
    ``ops/strided_reductions.py``), where ``x``'s stick is right (else None: a restickify the
    hardware makes too): the default layout of ``x``'s shape where ``readable`` would copy ``x``
    into it only because the reduced dims split its coordinates' device dims; ``x``'s own
    coordinates where every dim is reduced (their device dims' order does not matter); else None."""
    coords = coords_for(x)
    p = plan(x, coords)
    if p is None or not p.stick_ok:
        return None
    if reduced_dims(coords, frozenset(dims)) is None:
        return default_coords(tuple(x.shape), x.dtype)
    return coords if len(dims) == x.dim() else None


def masked(v: torch.Tensor, coords: BoundLayout, exact: bool, pad_value: object, value: object) -> torch.Tensor:
    """``v`` when its padding already holds ``value``, else a copy whose padding does."""
    if not has_padding(coords) or (exact and pad_value == value):
        return v
    return padded_copy(v, coords, value)


def _reduced_order(order: tuple[int, ...], dims: tuple[int, ...], keepdim: bool) -> list[int]:
    sparse = bool(order) and (order[-1] == -1 or order[-1] in dims)
    real = [d for d in order if d != -1]
    if not keepdim:
        kept = [d for d in real if d not in dims]
        rank = {d: k for k, d in enumerate(sorted(kept))}
        real = [rank[d] for d in kept]
    return real + ([-1] if sparse else [])


@functools.lru_cache(maxsize=2048)
def result_coords(coords: BoundLayout, dims: tuple[int, ...], keepdim: bool, dtype: torch.dtype) -> BoundLayout:
    """The layout of a reduction's result (see the module docstring)."""
    keep = tuple(1 if d in dims else n for d, n in enumerate(coords.size))
    shape = keep if keepdim else tuple(n for d, n in enumerate(coords.size) if d not in dims)
    layout = coords.layout
    order = getattr(layout, "dim_order", None)
    if order is not None and layout.host_size == coords.size and layout.host_stride == coords.stride:
        new_order = _reduced_order(order, dims, keepdim)
        if not shape:
            return default_coords((), dtype)
        if len(shape) <= MAX_RANK + (new_order[-1] == -1):
            return BoundLayout(SpyreTensorLayout(shape, dtype, new_order), shape, rowmajor(shape))
    keep_stride = strides_in_order(keep, coords.stride)
    stride = keep_stride if keepdim else tuple(s for d, s in enumerate(keep_stride) if d not in dims)
    collapsed = operand_layout(coords, keep, dtype, keep_stride)
    spyre_kept = not isinstance(layout, SpyreTensorLayout) or isinstance(collapsed, SpyreTensorLayout)
    if collapsed is not None and spyre_kept:
        return BoundLayout(collapsed, shape, stride)
    return BoundLayout(default_layout(shape, stride, dtype), shape, stride)


class WritePlan(NamedTuple):
    """How ``write_result`` moves values (shaped like the collapsed layout ``src``) into a
    new result in ``out_coords``: ``"same"`` device dims, a ``"strided"`` view of the
    result's buffer (``read``: strides, offset), or relayout nests (``"move"`` into ``dst``)."""

    out_coords: BoundLayout
    src: BoundLayout
    mode: str
    read: tuple[tuple[int, ...], int] | None
    dst: BoundLayout | None


@functools.lru_cache(maxsize=2048)
def write_plan(coords: BoundLayout, dims: tuple[int, ...], keepdim: bool, dtype: torch.dtype) -> WritePlan:
    out_coords = result_coords(coords, dims, keepdim, dtype)
    keep = tuple(1 if d in dims else n for d, n in enumerate(coords.size))
    keep_stride = strides_in_order(keep, coords.stride)
    collapsed = operand_layout(coords, keep, dtype, keep_stride)
    if collapsed is None:
        raise RuntimeError(f"internal error: no collapsed layout of {coords} for reduced dims {dims}")
    src = BoundLayout(collapsed, keep, keep_stride)
    if (src.layout.device_size, src.layout.stride_map) == (out_coords.layout.device_size,
                                                           out_coords.layout.stride_map):
        return WritePlan(out_coords, src, "same", None, None)
    if keepdim:
        dst_stride = out_coords.stride
    else:
        kept = iter(out_coords.stride)
        dst_stride = tuple(1 if d in dims else next(kept) for d in range(len(keep)))
    p = plan_view(src, out_coords.layout, out_coords.size, out_coords.stride, keep, dst_stride, 0)
    if p is not None and p.shape is None and not real_slices(src)[1]:
        return WritePlan(out_coords, src, "strided", (p.strides, p.offset), None)
    return WritePlan(out_coords, src, "move", None, BoundLayout(out_coords.layout, keep, dst_stride))


def write_result(coords: BoundLayout, dims: tuple[int, ...], keepdim: bool, values: torch.Tensor,
                 device: torch.device) -> torch.Tensor:
    """A new device tensor holding ``values`` (shaped like the coordinates, size 1 along the
    reduced device dims), laid out by ``result_coords`` (see ``WritePlan``)."""
    w = write_plan(coords, dims, keepdim, values.dtype)
    out = new_tensor(w.out_coords, device)
    src_values = values.expand(w.src.shape)
    if w.mode == "same":
        copy_real(raw(out).view(w.src.shape), src_values, w.out_coords, out)
    elif w.mode == "strided":
        copy_real(raw_view(out, w.src.shape, *w.read), src_values, w.src, out)
    else:
        move(w.src, src_values.contiguous(), w.dst, out)
    return out


class Placement(NamedTuple):
    """Where ``write_result`` puts the values of a flat vector (a row kernel's per-row or
    per-column results, ``rows.Rows``): the result's coordinates and, per real box of the
    result, the box's read of the result's buffer and of the vector."""

    out_coords: BoundLayout
    pieces: tuple[tuple[Read, Read], ...]


@functools.lru_cache(maxsize=1024)
def placement(coords: BoundLayout, dims: tuple[int, ...], keepdim: bool, dtype: torch.dtype, shape: Rows,
              per_row: bool) -> Placement | None:
    """``write_result``'s copies for ``shape.rows_like`` (``per_row``) or ``shape.columns_like``
    values, worked out once per geometry; None where the values move by relayout nests or the
    result's padding is rewritten afterwards."""
    w = write_plan(coords, dims, keepdim, dtype)
    if w.mode == "move":
        return None
    boxes, whole = real_slices(w.out_coords if w.mode == "same" else w.src)
    if whole:
        return None
    flat = torch.empty(shape.count(coords) if per_row else shape.length(coords))
    values = (shape.rows_like if per_row else shape.columns_like)(flat, coords).expand(w.src.shape)
    base = torch.empty(math.prod(w.out_coords.layout.device_size), dtype=dtype)
    target = base.view(w.src.shape) if w.mode == "same" else base.as_strided(w.src.shape, *w.read)
    return Placement(w.out_coords, tuple((read_of(target[box]), read_of(values[box])) for box in boxes))


def write_placed(p: Placement, flat: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A new result holding the float32 vector ``flat`` where ``p`` places it (converted to the
    result's dtype as ``Tensor.to`` rounds): what ``write_result`` writes, in a copy per box."""
    out = new_tensor(p.out_coords, device)
    for target, values in p.pieces:
        raw_view(out, *target).copy_(flat.as_strided(*values))
    return out


def reduce_view(v: torch.Tensor, red: tuple[int, ...], kind: str, device: torch.device,
                dtype: torch.dtype | None = None) -> torch.Tensor:
    """Reduce the device dims ``red`` of a CPU view, keeping them as size 1.

    Every kind reduces one dim at a time: far faster on strided views than one multi-dim
    reduction, and no copy of the input; reduced dims that lie end to end in memory are one dim
    (``merge_reduced``). Sums take the most contiguous dim first (their rounding is the CPU's per
    run); the exact kinds (``amax``, ``amin``, ``all``, ``any``: any order gives the same bits) the
    least contiguous first, whose reduction walks memory in order, vectorized along the contiguous
    dim (``amax(-1)`` of 1024x256 float32 over its 8 sticks: 38 -> 17 us, the CPU's 11). float16 and
    bfloat16 sums without a ``dtype`` (their result is low precision anyway) use the CPU's own
    kernels, which accumulate in float32 and round each stage's result; asking them for float32
    instead first copies the whole input to float32, which an explicit ``dtype`` pays for its
    precision. A sum over two or more dims (after merging) whose contiguous dim is kept takes the
    column-sum kernel instead (``_C._columns_sum``: one pass, float16 and bfloat16 summed in
    float32 and rounded once; docs/design.md, "Column sums"), where it applies."""
    if not red:
        return v if dtype is None else v.to(dtype)
    native = kind == "sum" and v.dtype in LOW_PRECISION and dtype is None
    v, dims = merge_reduced(v, sorted(red, key=lambda d: (v.stride(d), d)))
    if kind == "sum" and len(dims) > 1 and v.dtype in COLUMN_DTYPES and dtype in (None, torch.float32):
        out = v.new_empty([1 if d in dims else n for d, n in enumerate(v.shape)], dtype=dtype or v.dtype)
        if _C._columns_sum(v, dims, out):
            return out
    for d in (sum_order(v, dims) if kind == "sum" else reversed(dims)):
        if kind != "sum":
            v = getattr(v, kind)(d, keepdim=True)
        else:
            v = v.sum(d, keepdim=True) if native else v.sum(d, keepdim=True, dtype=dtype)
    return v if dtype is None or v.dtype == dtype else v.to(dtype)


def sum_order(v: torch.Tensor, dims: list[int]) -> list[int]:
    """The order a sum reduces the dims ``dims`` (most contiguous first) of ``v`` in: that order,
    but where ``v``'s contiguous dim is kept (column sums: a bias gradient over batch and tokens,
    whose batch dim lies between the stick columns and the stick in Spyre's 3-D layout), the least
    contiguous one first, an outer reduction over whole blocks that the CPU kernel vectorizes along
    the contiguous dim (``sum((0, 1))`` of 8x128x256 float32 32 -> 11 us; CPU 8); the runtime's
    replay orders alike (``csrc/reduce_recipe.cpp``).

    >>> sum_order(torch.zeros(128, 8, 8, 32), [2, 0]), sum_order(torch.zeros(8, 1024, 32), [2, 0])
    ([0, 2], [2, 0])
    """
    kept_inner = any(v.stride(d) == 1 and v.shape[d] > 1 and d not in dims for d in range(v.dim()))
    return [dims[-1], *dims[:-1]] if kept_inner and len(dims) > 1 else dims


def merge_reduced(v: torch.Tensor, order: Sequence[int]) -> tuple[torch.Tensor, list[int]]:
    """``v`` with each dim of ``order`` (reduced dims, most contiguous first) whose stride is the
    size times the stride of the dim before it merged into that one (left of size 1), and the dims
    left to reduce: one reduction over the merged dim, walking memory in order (as ATen merges the
    reduced dims of one tensor that lie end to end), instead of one per dim. The runtime's replay
    of a reduction merges alike (``csrc/reduce_recipe.cpp``).

    >>> v, dims = merge_reduced(torch.zeros(6, 2, 3, 32)[..., :16], [1, 0])  # a padded (6, 2, 48)
    >>> tuple(v.shape), dims
    ((1, 12, 3, 16), [1])
    """
    sizes, strides = list(v.shape), list(v.stride())
    dims: list[int] = []
    for d in order:
        if dims and strides[d] == sizes[dims[-1]] * strides[dims[-1]]:
            sizes[dims[-1]] *= sizes[d]
            sizes[d] = 1
        else:
            dims.append(d)
    return (v if len(dims) == len(order) else v.as_strided(sizes, strides, v.storage_offset())), dims


# Inputs from which float16/bfloat16 sums and extremes over sticks take the C++ row kernels:
# below, ATen's reductions on the view (either way, later calls of the geometry replay in the
# runtime's front). Replayed, the row sums were the faster from 32x512 (float32 sum(-1) 6.6 -> 4.8
# us, 1024x256 55 -> 31 us). Float32 sums, means and extremes over two or more device dims (after
# merging: a row of several sticks) take them at every size: their values go straight into the
# result, where ATen's reductions take a call per reduced dim and a copy (2 threads, replayed:
# sum(-1) of 2x2000, 63x64, 100x40 float32 3.7-4.0 -> 1.8-2.0 us, CPU 1.6-1.9; amax(-1) of 63x64,
# 16x128, 3x20x64 3.1-3.9 -> 1.7-1.9, CPU 1.5-1.7). Over one dim (a row within its stick) ATen's
# reduction gives the CPU's bits in one call; float16 sums and extremes (4x64: 2.2-2.4 -> 2.9-3.0,
# the float32 values converted after) measured slower in the row kernels.
ROW_SUMS_FROM = 1 << 12

# Kinds the row kernels take over sticks: sums (rounded as docs/design.md, "Row kernels" says)
# and extremes (exact in any order).
ROW_KINDS = ("sum", "mean", "amax", "amin")


def _row_kernels_apply(v: torch.Tensor, red: tuple[int, ...], out_dtype: torch.dtype) -> bool:
    """Whether the C++ row kernels take this reduction: floating inputs and results, and the
    reduced dims hold the view's contiguous dim (over sticks; others reduce faster in ATen)."""
    if not red or v.dtype not in ROW_DTYPES or out_dtype not in ROW_DTYPES:
        return False
    inner = min((d for d in range(v.dim()) if v.shape[d] > 1), key=lambda d: abs(v.stride(d)), default=None)
    return inner in red and v.stride(inner) == 1


def _row_reduce(kind: str, v: torch.Tensor, red: tuple[int, ...], count: int = 1, tail: int | None = None
                ) -> torch.Tensor:
    """Sums (``sum``, ``mean``) or extremes (``amax``, ``amin``) over the device dims ``red`` of a
    CPU view, float32, kept as size 1: one sweep, each row's sum accumulated in float32 and
    rounded once (docs/design.md, "Row kernels"), a mean's then divided by ``count`` (its real
    elements) in float32 as ATen's mean divides its sum, its extreme exact, NaN where the row has one.
    ``tail``: each row's real elements, its first ones in row order (``extreme_tail``); None: all.

    >>> v = torch.tensor([[1.0, 5.0], [-2.0, 3.0]]).t()  # a transposed view: rows (1, -2), (5, 3)
    >>> _row_reduce("amax", v, (1,)).flatten().tolist(), _row_reduce("sum", v, (1,)).flatten().tolist()
    ([1.0, 5.0], [-1.0, 8.0])
    """
    order = [d for d in range(v.dim()) if d not in red] + sorted(red)
    out = torch.empty(math.prod(v.shape[d] for d in order[:v.dim() - len(red)]))
    rows = v.permute(order)
    length = -1 if tail is None else tail
    if kind in ("amax", "amin"):
        _C._rows_extreme(rows, out, len(red), kind == "amax", length=length)
    else:
        _C._rows_sum(rows, out, len(red), count if kind == "mean" else 1, length=length)
    return out.view([1 if d in red else n for d, n in enumerate(v.shape)])


class ReducePlan(NamedTuple):
    """What ``reduce`` worked out for a call of one geometry (``geometry_key``) whose input was
    read in place, its padding no concern: the result dtype, the coordinates, the input's read
    in them, the device dims reduced and whether the C++ row kernels take it."""

    out_dtype: torch.dtype
    coords: BoundLayout
    read: tuple[tuple[int, ...], int]  # strides, offset of the view in the coordinates
    red: tuple[int, ...]
    dims: tuple[int, ...]
    count: int
    row_kernels: bool
    layouts: tuple  # layouts_of the input: the id in the key stays its layout's
    tail: int | None = None  # the row kernels' real elements a row (extreme_tail)


PLANS: dict[tuple, ReducePlan | strided_reductions.StridedPlan] = {}
MAX_PLANS = 1024


def _mean_sums_dtype(out_dtype: torch.dtype) -> torch.dtype | None:
    """The dtype a mean's per-dim sums are asked for (None: a low-precision input's own kernels)."""
    return None if out_dtype in LOW_PRECISION else out_dtype


@functools.lru_cache(maxsize=1024)
def extreme_tail(kind: str, coords: BoundLayout, red: tuple[int, ...]) -> int | None:
    """For ``amax`` or ``amin`` over device dims ``red`` of padded coordinates whose every row (the
    kept dims, all real) holds its real elements first in row order (the reduced dims ascending:
    1000 float32 classes in sticks of 32, the last one of 8): how many, where the row kernels stop
    (one sweep, instead of a reduction per real box and their combination); else None.

    >>> extreme_tail("amax", default_coords((8, 1000), torch.float32), (0, 2))  # device dims [32, 8, 32]
    1000
    """
    if kind not in ("amax", "amin") or not red or not has_padding(coords) or one_real_box(coords) is not None:
        return None
    order = tuple([d for d in range(len(coords.shape)) if d not in red] + sorted(red))
    found = tail_rows(coords, order, len(red))
    return found.tail if found is not None and found.box is None else None


def _values(kind: str, v: torch.Tensor, red: tuple[int, ...], row_kernels: bool, count: int, device: torch.device,
            out_dtype: torch.dtype, dtype: torch.dtype | None, tail: int | None = None) -> torch.Tensor:
    """The reduced values of the view ``v`` (size 1 along ``red``), in ``out_dtype``."""
    if row_kernels:
        values = _row_reduce(kind, v, red, count, tail)
    elif kind == "mean":  # a low-precision mean rounds to its dtype: sum natively, divide in float32
        values = reduce_view(v, red, "sum", device, _mean_sums_dtype(out_dtype)).float() / count
    else:
        values = reduce_view(v, red, kind, device, dtype)
    return values.to(out_dtype)


# Reductions whose partial results over disjoint boxes combine exactly into the whole one's.
COMBINE = {"amax": torch.maximum, "amin": torch.minimum, "all": torch.logical_and, "any": torch.logical_or}


@functools.lru_cache(maxsize=1024)
def box_regions(kind: str, coords: BoundLayout, red: tuple[int, ...]
                ) -> tuple[tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...], bool], ...] | None:
    """For a ``COMBINE`` reduction over device dims ``red`` of padded coordinates whose real
    positions are several boxes (1000 classes: 31 whole sticks and one of 8; at most 16): per box,
    the box, its region of the values (``red`` of size 1) and whether it is the first box there
    (it writes the region; the others combine into it). None where two boxes' regions overlap
    without being the same, or for other kinds."""
    if kind not in COMBINE or not has_padding(coords) or one_real_box(coords) is not None:
        return None
    boxes = list(itertools.islice(coords.real_boxes(), 17))
    if len(boxes) > 16:
        return None
    out, seen = [], []
    for box in boxes:
        region = tuple((0, 1) if d in red else b for d, b in enumerate(box))
        for other in seen:
            if other != region and all(a < c + m and c < a + n for (a, n), (c, m) in zip(region, other)):
                return None  # overlapping, not the same
        out.append((box, region, region not in seen))
        seen.append(region)
    return tuple(out)


def _boxed_values(kind: str, v: torch.Tensor, coords: BoundLayout, red: tuple[int, ...], row_kernels: bool, count: int,
                  device: torch.device, out_dtype: torch.dtype, dtype: torch.dtype | None, tail: int | None = None
                  ) -> torch.Tensor:
    """``_values`` of the view ``v`` in ``coords``; where the real positions are one box, of that
    box only (the padding beside it and within the reduced dims neither read nor reduced: the CPU
    kernel walks the real elements as it walks a tensor of their shape), the rest zeros; where
    each row's real elements are its first ``tail`` (``extreme_tail``), of the whole view, the row
    kernels stopping there; where they are several boxes (``box_regions``), of each box, combined
    where their regions meet."""
    if tail is not None:
        return _values(kind, v, red, True, count, device, out_dtype, dtype, tail)
    box = one_real_box(coords)
    regions = box_regions(kind, coords, red) if box is None else None
    if regions is not None:
        values = torch.zeros([1 if d in red else n for d, n in enumerate(v.shape)], dtype=out_dtype)
        for part, region, writes in regions:
            got = _values(kind, v[tuple(slice(b, b + n) for b, n in part)], red, row_kernels, count, device, out_dtype,
                          dtype)
            target = values[tuple(slice(b, b + n) for b, n in region)]
            target.copy_(got) if writes else COMBINE[kind](target, got, out=target)
        return values
    if box is None:
        return _values(kind, v, red, row_kernels, count, device, out_dtype, dtype)
    index = tuple(slice(b, b + n) for b, n in box)
    values = torch.zeros([1 if d in red else n for d, n in enumerate(v.shape)], dtype=out_dtype)
    values[tuple(slice(0, 1) if d in red else i for d, i in enumerate(index))] = _values(
        kind, v[index], red, row_kernels, count, device, out_dtype, dtype)
    return values


def reduce(kind: str, x: torch.Tensor, dim: int | Sequence[int] | None, keepdim: bool,
           dtype: torch.dtype | None, whole: bool = False) -> torch.Tensor:
    """One reduction (``kind`` in sum, mean, amax, amin, all, any) on device memory; the plan
    of a call whose input is read in place is kept per geometry (``ReducePlan``). ``whole``:
    the call is a whole-tensor overload's (``x.sum()``)."""
    geometry = geometry_key(x)
    key = None
    if geometry is not None:
        key = (kind, geometry, dim if dim is None or isinstance(dim, int) else tuple(dim), keepdim, dtype, whole)
        kept = PLANS.get(key)
        if isinstance(kept, strided_reductions.StridedPlan):
            return strided_reductions.run(kind, x, kept, normalize_dims(dim, x.dim()), keepdim, dtype, whole)
        if kept is not None:
            v = raw_view(x, kept.coords.layout.device_size, *kept.read)
            values = _boxed_values(kind, v, kept.coords, kept.red, kept.row_kernels, kept.count, x.device,
                                   kept.out_dtype, dtype, kept.tail)
            _offer(kind, x, v, kept, keepdim, values, dtype)
            return write_result(kept.coords, kept.dims, keepdim, values, x.device)
    dims = normalize_dims(dim, x.dim())
    probe = torch.ones((1,) * x.dim(), dtype=x.dtype)  # the CPU's dtype rules (and errors) on one element
    fn = getattr(torch, kind)
    if kind in ("sum", "mean"):
        out_dtype = (fn(probe, dims, keepdim, dtype=dtype) if dims else fn(probe, dtype=dtype)).dtype
    else:
        out_dtype = fn(probe, dims, keepdim).dtype
    if x.numel() == 0:
        host = getattr(torch, kind)(x.cpu(), dims, keepdim, **({"dtype": dtype} if kind in ("sum", "mean") else {}))
        return host.to(x.device)
    final = strided_coords(x, dims)
    if key is not None and final is not None:  # a strided view of the buffer, if it reads as one, instead
        out_coords = result_coords(final, dims, keepdim, out_dtype)
        strided = strided_reductions.strided_plan(kind, x, dims, out_coords, whole)
        if strided is not None:
            keep(PLANS, key, strided, MAX_PLANS)
            return strided_reductions.run(kind, x, strided, dims, keepdim, dtype, whole)
    original = x
    x, coords, v, red, exact = readable(x, dims)
    pad = x.device_tensor_layout().pad_value
    tail = extreme_tail(kind, coords, red) if _row_kernels_apply(v, red, out_dtype) else None
    boxed = (tail is not None or one_real_box(coords) is not None
             or box_regions(kind, coords, red) is not None)  # no padding read: no mask
    masked_v = v if boxed else masked(v, coords, exact, pad, identity(kind, x.dtype))
    count = math.prod(x.shape[d] for d in dims)
    any_size = (kind in ROW_KINDS and x.dtype == out_dtype == torch.float32
                and len(merge_reduced(masked_v, sorted(red, key=lambda d: abs(masked_v.stride(d))))[1]) > 1)
    row_kernels = tail is not None or (kind in ROW_KINDS and (any_size or x.numel() >= ROW_SUMS_FROM)
                                       and _row_kernels_apply(masked_v, red, out_dtype))
    values = _boxed_values(kind, masked_v, coords, red, row_kernels, count, x.device, out_dtype, dtype, tail)
    if key is not None and x is original and masked_v is v:
        kept = keep(PLANS, key, ReducePlan(out_dtype, coords, (tuple(v.stride()), v.storage_offset()), red, dims,
                                           count, row_kernels, layouts_of([x]), tail), MAX_PLANS)
        _offer(kind, x, v, kept, keepdim, values, dtype)
    return write_result(coords, dims, keepdim, values, x.device)


NATIVE = {"sum": "aten::sum.IntList_out", "amax": "aten::amax.out", "amin": "aten::amin.out"}


def _offer(kind: str, x: torch.Tensor, v: torch.Tensor, kept: ReducePlan, keepdim: bool, values: torch.Tensor,
           dtype: torch.dtype | None) -> None:
    """Offer the runtime's front this call's replay (``csrc/kernel_front.cpp``), where the input's
    real positions are one box (the replay reduces that box, padding within the reduced dims
    unread) and the result's the same box, reduced. One reduced device dim: the CPU reduction of
    the input's view written straight into the result's buffer, where the result's view is laid
    out as ``values`` (so the CPU kernel walks the elements in the same order: the same bits).
    Several, a result laid out otherwise (a sum over a padded stick: one value per stick), or a
    mean, ``all`` or ``any``: the same per-dim reductions as ``reduce_view`` (a mean's sums
    divided as ``_values`` does; reductions over sticks by the row kernels, as ``_row_reduce``), their
    values copied into the result (``csrc/reduce_recipe.cpp``)."""
    if (kind not in NATIVE and kind not in ("mean", "all", "any")) or values.dtype != kept.out_dtype:
        return
    coords, dims = kept.coords, kept.dims
    w = write_plan(coords, dims, keepdim, values.dtype)
    if w.mode == "move":
        return
    regions = box_regions(kind, coords, kept.red) if kept.tail is None else None
    if regions is not None:  # several boxes: each reduced, combined where their regions meet
        _offer_pieces(kind, x, v, kept, w, regions)
        return
    boxes = _reduced_box(coords, kept.red, w.out_coords if w.mode == "same" else w.src)
    if boxes is None and kind in ("sum", "mean", "any") and \
            x.device_tensor_layout().pad_value == 0 == w.out_coords.layout.pad_value:
        boxes = []  # whole views: the input's zero padding sums to zeros (or is False), written over the result's
    if boxes is None:
        return
    size, strides, offset = _values_view(w)
    direct = not kept.row_kernels and kind in NATIVE and len(kept.red) == 1 and tuple(values.shape) == tuple(size) and all(
        n == 1 or s == t for n, s, t in zip(size, strides, values.stride()))
    if not direct:  # several dims, or a result laid out otherwise than the values (a sum over a padded stick)
        box = boxes[0] if boxes else [(0, n) for n in coords.shape]
        start = sum(b * s for (b, _), s in zip(box, v.stride()))
        result_start = sum(b * s for d, ((b, _), s) in enumerate(zip(box, strides)) if d not in kept.red)
        sums = dtype if kind != "mean" else _mean_sums_dtype(kept.out_dtype)  # as _values
        _C._offer_reduce(kind, x, (tuple(n for _, n in box), tuple(v.stride()), v.storage_offset() + start),
                         sorted(kept.red, key=lambda d: (v.stride(d), d)), sums, runtime_record(w.out_coords),
                         (tuple(1 if d in kept.red else n for d, (_, n) in enumerate(box)), strides, offset + result_start),
                         kept.count, kept.out_dtype, kept.row_kernels, -1 if kept.tail is None else kept.tail)
        return
    _C._offer_recipe([x], [(0, tuple(v.shape), tuple(v.stride()), v.storage_offset())], runtime_record(w.out_coords),
                     (size, strides, offset), [(1, list(kept.red)), (2, True)], NATIVE[kind], boxes)


def _values_view(w: WritePlan) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The values' shape and the strides and offset of their view in the result's buffer."""
    size = w.src.shape
    return (size, *(w.read if w.mode == "strided" else (rowmajor(size), 0)))


def _offer_pieces(kind: str, x: torch.Tensor, v: torch.Tensor, kept: ReducePlan, w: WritePlan, regions: tuple
                  ) -> None:
    """Offer the front ``_boxed_values``' reduction over several boxes (``box_regions``): per box,
    the input's view of it, its region of the values and the result's view of that region, each
    box reduced as ``_values`` reduces it (by the row kernels where the plan says so;
    ``csrc/reduce_recipe.cpp``)."""
    size, strides, offset = _values_view(w)
    values_strides = rowmajor(size)
    pieces = []
    for box, region, writes in regions:
        start = sum(b * st for (b, _), st in zip(box, v.stride()))
        sizes = tuple(n for _, n in region)
        pieces.append(((tuple(n for _, n in box), tuple(v.stride()), v.storage_offset() + start),
                       (sizes, values_strides, sum(b * st for (b, _), st in zip(region, values_strides))),
                       (sizes, strides, offset + sum(b * st for (b, _), st in zip(region, strides))), writes))
    _C._offer_reduce_pieces(kind, x, pieces, list(size), sorted(kept.red, key=lambda d: (v.stride(d), d)),
                            runtime_record(w.out_coords), kept.out_dtype, kept.row_kernels)


@functools.lru_cache(maxsize=1024)
def _reduced_box(coords: BoundLayout, red: tuple[int, ...], result: BoundLayout
                 ) -> list[list[tuple[int, int]]] | None:
    """The boxes a recipe of a reduction over device dims ``red`` narrows its views to (``[]``: no
    padding on either side, the whole views; else ``operands.one_real_box``, or the whole coordinates where
    the real positions are several boxes (the caller reads padding that holds the reduction's
    identity: a sum over rows of several sticks, the last one partial), where the result's real
    positions are that box reduced), or None."""
    if not has_padding(coords) and not has_padding(result):
        return []
    box = one_real_box(coords) or tuple((0, n) for n in coords.shape)
    out_pieces, out_whole = real_slices(result)
    reduced = tuple(slice(0, 1) if d in red else slice(b, b + n) for d, (b, n) in enumerate(box))
    return [list(box)] if not out_whole and out_pieces == (reduced,) else None


def sum_dim(x: torch.Tensor, dim: Sequence[int] | None = None, keepdim: bool = False, *,
            dtype: torch.dtype | None = None) -> torch.Tensor:
    return reduce("sum", x, dim, keepdim, dtype)


def sum_all(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return reduce("sum", x, None, False, dtype, whole=True)


def mean_dim(x: torch.Tensor, dim: Sequence[int] | None = None, keepdim: bool = False, *,
             dtype: torch.dtype | None = None) -> torch.Tensor:
    return reduce("mean", x, dim, keepdim, dtype)


def mean_all(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return reduce("mean", x, None, False, dtype, whole=True)


def amax(x: torch.Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    return reduce("amax", x, dim, keepdim, None)


def amin(x: torch.Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    return reduce("amin", x, dim, keepdim, None)


def all_dims(x: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> torch.Tensor:
    return reduce("all", x, dim, keepdim, None)


def any_dims(x: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> torch.Tensor:
    return reduce("any", x, dim, keepdim, None)


def register_all() -> None:
    register("sum.dim_IntList", sum_dim)
    register("sum", sum_all)
    register("mean.dim", mean_dim)
    register("mean", mean_all)
    register("amax", amax)
    register("amin", amin)
    for kind, fn in (("all", all_dims), ("any", any_dims)):
        register(kind, fn)
        register(f"{kind}.dim", fn)
        register(f"{kind}.dims", fn)
