"""Pointwise kernels on device memory: unary, binary and ternary ops, type conversion,
``fill_``/``zero_`` and ``clone``.

An op computes in the coordinates of its first full-rank operand of the promoted dtype
(``operands.coords_for``: that operand's own buffer when it is a whole tensor, so the
result gets its layout and strides; for a part of a buffer whose elements run along a dim
other than its last, a layout sticked on that dim, as the CPU's result keeps its input's
strides: no restickify); without one, in the default layout of the broadcast shape.
Every operand is read in those coordinates as a strided view of its own buffer (a
lower-rank operand that shares the stick broadcasts with stride 0). The
CPU out-variant of the op writes the result's real positions box by box (a box per
partial tile, the first element of each sparse stick), so the padding keeps the pad
value it got at allocation (``exp`` leaves no 1s in padding); a layout with too many
boxes is computed whole and its padding restored.

An operand that cannot be read so is first converted to the compute dtype if that is
what differs, and otherwise restickified into a compatible layout (``rules``); one whose
stick is right but whose tiles lie in another order is copied (a relayout), not counted
as a restickify.
A result of another dtype (comparisons, conversions) gets the default layout of that
dtype with the same dim_order; when its sticks hold a different number of elements
the values are computed in the operands' coordinates and moved into the result by
relayout loop nests (device to device).

A call whose operands were all read in place leaves a ``Recipe`` (the coordinates and
each operand's strided view) under its geometry (``signature``); later calls of the same
geometry replay it without planning again. When the op's compute is its own CPU ``out=``
overload (``Spec.native``), the recipe is also offered to the runtime's front
(``csrc/kernel_front.cpp``), which then replays such calls without entering Python (box by box
of real positions when the coordinates have padding).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from .. import _C
from ..core.layout import BoundLayout, DeviceLayout
from ..dma.relayout import relayout_transfers
from ..runtime.layout_records import default_layout
from ..spyre import SpyreTensorLayout
from . import rules
from .broadcasts import dense_from, densified
from .operands import (coords_for, coords_with_dtype, copy_pieces, default_coords, geometry_key, has_padding,
                       is_whole_dense, keep, layouts_of, new_tensor, operand_layout, ordered_coords,
                       piece_common_reads, piece_reads, plan, raw, raw_view, real_slices, record_of, rowmajor,
                       runtime_record, scalar_view, stick_dim, strides_in_order, view)
from .registry import aten_overload, check_cast, out_overload, register, write_out
from .stats import count_kernel, count_restickify
from .strided import strided_copy
from .view_copy import copy_between, copy_real, materialize

A = torch.ops.aten


class Spec(NamedTuple):
    """A pointwise op: ``compute(*views, out=o, **kwargs)`` runs it on CPU views."""

    name: str  # the functional overload ("add.Tensor"); it gives the result dtype
    compute: Callable[..., Any]
    operands: tuple[int, ...]  # argument positions of the operands (tensors or scalars)
    masks: tuple[int, ...] = ()  # bool operands: never promoted
    native: str | None = None  # the CPU out= overload ``compute`` is, on the op's own arguments
    extra: tuple = ()  # arguments ``native`` takes after the op's own (relu: clamp_min's bound 0)


# -- dtypes ----------------------------------------------------------------------------
def _key(v: object) -> tuple:
    if isinstance(v, torch.Tensor):
        return ("T", v.dtype, v.dim() == 0)
    if isinstance(v, (bool, int, float, complex)):
        return ("S", type(v))
    if isinstance(v, (list, tuple)):
        return ("L", tuple(_key(x) for x in v))
    return ("V", v)


def _unkey(k: tuple) -> object:
    if k[0] == "T":
        return torch.ones(() if k[2] else (1,), dtype=k[1])
    if k[0] == "S":
        return {bool: True, int: 1, float: 1.0, complex: 1j}[k[1]]
    if k[0] == "L":
        return [_unkey(x) for x in k[1]]
    return k[1]


@functools.lru_cache(maxsize=4096)
def _dtypes(spec: Spec, akeys: tuple, kkeys: tuple) -> tuple[torch.dtype, torch.dtype]:
    """(result dtype, compute dtype) of a call: the op run on one-element CPU tensors, and
    the promotion of its value operands."""
    args = [_unkey(k) for k in akeys]
    kwargs = {name: _unkey(k) for name, k in kkeys}
    values = [args[i] for i in spec.operands if i < len(args) and i not in spec.masks and args[i] is not None]
    acc = values[0]
    for v in values[1:]:
        dtype = torch.result_type(acc, v)
        zero = all(not isinstance(a, torch.Tensor) or a.dim() == 0 for a in (acc, v))
        acc = torch.ones(() if zero else (1,), dtype=dtype)
    compute = acc.dtype if isinstance(acc, torch.Tensor) else torch.result_type(torch.ones(()), acc)
    result = aten_overload(spec.name)(*args, **kwargs).dtype
    return result, compute


def _call_dtypes(spec: Spec, args: list, kwargs: dict) -> tuple[torch.dtype, torch.dtype]:
    return _dtypes(spec, tuple(_key(a) for a in args), tuple(sorted((n, _key(v)) for n, v in kwargs.items())))


# -- operands and results ------------------------------------------------------------
@functools.lru_cache(maxsize=512)
def _names(spec: Spec) -> tuple[str, ...]:
    return tuple(a.name for a in aten_overload(spec.name)._schema.arguments)


def restickify_to(t: torch.Tensor, coords: BoundLayout) -> torch.Tensor:
    """A copy of ``t`` in a layout whose device dims are the coordinates' own (counted)."""
    out = relayout_to(t, coords)
    count_restickify(out.numel() * t.element_size())
    return out


def staging_coords(t: torch.Tensor, coords: BoundLayout) -> BoundLayout | None:
    """The coordinates ``relayout_to`` copies ``t`` into when ``t`` has the coordinates' rank and
    broadcasts along no grouped dim (a copy a recipe repeats as it is), else None."""
    if t.dim() != len(coords.size):
        return None
    size = tuple(t.shape)
    layout = operand_layout(coords, size, t.dtype)
    return None if layout is None else BoundLayout(layout, size, strides_in_order(size, coords.stride))


def relayout_to(t: torch.Tensor, coords: BoundLayout) -> torch.Tensor:
    """A copy of ``t`` in a layout whose device dims are the coordinates' own."""
    rank = len(coords.size)
    size = (1,) * (rank - t.dim()) + tuple(t.shape)
    layout = operand_layout(coords, size, t.dtype)
    source = t.reshape(size)
    if layout is None:
        size, source = coords.size, t.expand(coords.size)
        layout = operand_layout(coords, size, t.dtype)
    return materialize(source, BoundLayout(layout, size, strides_in_order(size, coords.stride)))


def operand_view(op: str, named: list[tuple[str, object]], coords: BoundLayout, i: int, *, primary: bool = False,
                 mask: bool = False, staged: dict | None = None) -> torch.Tensor:
    """The view of operand ``named[i]`` in ``coords``: converted to the coordinates' dtype
    or restickified into a compatible layout when it cannot be read as it is (strict mode
    raises for an operand whose own layout is incompatible; see ``rules``). An operand copied
    as it is (not converted, reshaped or broadcast) goes into ``staged[i]``: the coordinates of
    its copy and the bytes a restickify moves (0: a relayout)."""
    name, t = named[i]
    p = plan(t, coords)
    if p is not None and p.stick_ok:
        return view(t, coords, p)
    if not mask and t.dtype != coords.layout.dtype:
        t = convert(t, coords.layout.dtype)
        p = plan(t, coords)
        if p is not None and p.stick_ok:
            return view(t, coords, p)
    info = record_of(t)
    if (not primary and info is not None and t.element_size() == coords.layout.element_size
            and is_whole_dense(t, info)):
        target = operand_layout(coords, (1,) * (len(coords.size) - t.dim()) + tuple(t.shape), t.dtype)
        rules.check(op, "all operands sticked on the same dim and in the same layout", named, name,
                    target if target is not None else coords.layout)
    refined = plan(t, coords, refine=True)
    # Device dims in another order around the same stick: a relayout, not a restickify.
    relayout = refined is not None and refined.stick_ok
    into = staging_coords(t, coords) if staged is not None and t is named[i][1] else None
    if into is not None:
        staged[i] = (into, 0 if relayout else t.numel() * t.element_size())
    t = relayout_to(t, coords) if relayout else restickify_to(t, coords)
    p = plan(t, coords)
    if p is None or not p.stick_ok:
        raise RuntimeError(f"internal error: restickified operand cannot be read in {coords}")
    return view(t, coords, p)


def _operand(spec: Spec, coords: BoundLayout, args: list, i: int, primary: bool, staged: dict) -> torch.Tensor:
    names = _names(spec)
    named = [(names[k], args[k]) for k in range(len(args))]
    return operand_view(spec.name.split(".")[0], named, coords, i, primary=primary, mask=i in spec.masks,
                        staged=staged)


@functools.lru_cache(maxsize=1024)
def _move_nests(src: BoundLayout, dst: BoundLayout) -> list[tuple] | None:
    transfers = relayout_transfers(src.layout, dst.layout, src.size, src.stride, dst.stride)
    return None if transfers is None else [tuple(t) for t in transfers]


def move(src: BoundLayout, buffer: torch.Tensor, dst: BoundLayout, out: torch.Tensor) -> None:
    """Copy the real elements of a CPU buffer laid out as ``src`` into the device tensor ``out``
    (laid out as ``dst``), device to device; ``out``'s padding is left alone."""
    nests = _move_nests(src, dst)
    if nests is not None:
        _C._run_nests(nests, raw(out), buffer.reshape(-1))
        return
    # No direct loop nests between the two: stage the buffer on the device, let the runtime copy.
    staged = DeviceLayout(src.layout.device_size, src.layout.stride_map, out.dtype, host_size=src.size,
                          host_stride=src.stride)
    tmp = new_tensor(BoundLayout(staged, src.size, src.stride), out.device)
    raw(tmp).copy_(buffer.reshape(-1))
    out.copy_(tmp)


def output(coords: BoundLayout, dtype: torch.dtype, device: torch.device
           ) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None] | None]:
    """A new result in ``coords`` (or its ``dtype`` variant; its padding already holds the
    pad value), the CPU tensor the op writes at the real positions of ``coords``: the
    result's buffer, or a scratch buffer when the result's sticks differ, with the move
    of the values into the result to run afterwards (else None)."""
    oc = coords_with_dtype(coords, dtype)
    out = new_tensor(oc, device)
    if oc.layout.device_size == coords.layout.device_size and oc.layout.stride_map == coords.layout.stride_map:
        return out, raw(out).view(coords.shape), None
    scratch = torch.empty(coords.shape, dtype=dtype)
    return out, scratch, lambda: move(coords, scratch, oc, out)


def _empty_result(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return new_tensor(default_coords(shape, dtype), device)


# -- the driver ------------------------------------------------------------------------
class Recipe(NamedTuple):
    """How ``run`` read the operands of a call and wrote its result, for calls of the same
    geometry (``signature``): every operand read in place or copied as it is into coordinates
    (a restickify or relayout the rules ask for, repeated each call), the result a new tensor in
    the coordinates (or its dtype variant: with other device dims, a comparison's bool result,
    written through its view in the coordinates) or the target's buffer."""

    layouts: tuple  # the operands' layout objects: held, so the ids in the signature stay theirs
    coords: BoundLayout
    # (argument position, strides, offset, None or (the copy's coordinates, restickify bytes))
    reads: tuple[tuple[int, tuple[int, ...], int, tuple[BoundLayout, int] | None], ...]
    out_coords: BoundLayout | None  # a new result's layout (None: the target is written)
    # out=: the target's (strides, offset); a new result of another stick length (a bool one): its view's
    target_read: tuple[tuple[int, ...], int] | None
    unpadded: bool  # the coordinates have no padding: one box covers them
    # per read, the first dim of the block it is read densified over (-1: none); () where none is
    dense: tuple[int, ...] = ()


RECIPES: dict[tuple, Recipe] = {}
MAX_RECIPES = 4096


def signature(spec: Spec, args: tuple | list, kwargs: dict, target: torch.Tensor | None,
              out_dtype: torch.dtype | None) -> tuple | None:
    """A call's geometry: the op, every argument's device, dtype, shape, strides, offset and
    layout (tensors) or kind (scalars), which arguments share the target's buffer; None for
    calls with CPU tensors (``run`` takes its general path)."""
    mode = 0 if target is None else 1 if target is args[0] else 2
    named = tuple(sorted((n, _key(v)) for n, v in kwargs.items())) if kwargs else ()
    parts: list = [spec, mode, out_dtype, named]
    tensors = args if mode != 2 else [*args, target]
    ptr = None if target is None else target.untyped_storage().data_ptr()
    for a in tensors:
        if not isinstance(a, torch.Tensor):
            parts.append(_key(a))
            continue
        geometry = geometry_key(a)  # None off the device or without a layout
        if geometry is None:
            return None
        parts.append((*geometry, ptr is not None and a.untyped_storage().data_ptr() == ptr))
    return tuple(parts)


def _replay(recipe: Recipe, spec: Spec, args: tuple | list, kwargs: dict, target: torch.Tensor | None,
            front: bool) -> torch.Tensor:
    """Run a kept recipe (``front``: the call is the op's kernel's: the recipe is offered to the
    runtime's front again, which had none for it)."""
    if front:
        _offer(recipe, spec, args, kwargs)
    coords = recipe.coords
    views = list(args)
    for i, strides, offset, staged in recipe.reads:
        source = args[i]
        if staged is not None:
            source = materialize(source, staged[0])
            if staged[1]:
                count_restickify(staged[1])
        views[i] = raw_view(source, coords.shape if len(strides) == len(coords.shape) else (), strides, offset)
    for (i, _, _, _), dense in zip(recipe.reads, recipe.dense):  # none, mostly: an empty tuple
        if dense >= 0:
            views[i] = densified(views[i], dense)
    if recipe.out_coords is not None:
        out = new_tensor(recipe.out_coords, args[recipe.reads[0][0]].device)
        o = raw_view(out, coords.shape, *(recipe.target_read or ()))
    elif recipe.target_read is not None:
        out = target
        o = raw_view(target, coords.shape, *recipe.target_read)
    else:
        out, o = target, views[0]
    if recipe.unpadded:
        spec.compute(*views, out=o, **kwargs)
        return out
    pieces, whole = real_slices(coords)
    shaped = {i for i, strides, _, _ in recipe.reads if len(strides) == len(coords.shape)}
    for index in pieces:
        spec.compute(*(v[index] if i in shaped else v for i, v in enumerate(views)), out=o[index], **kwargs)
    if whole:
        _C._fill_padding(out)
    return out


def _record(key: tuple, spec: Spec, args: list, originals: list, positions: list[int], coords: BoundLayout,
            result: torch.dtype, target: torch.Tensor | None, inplace: bool, front: bool, views: list,
            staged: dict, out: torch.Tensor, kwargs: dict) -> None:
    """Keep the recipe of a call whose operands were all read in place or copied as they are
    (``staged``: read through ``views``, see ``Recipe``); with ``front`` (the call is the
    registered kernel's), offer it to the runtime's front too."""
    reads = []
    for i in positions:
        if args[i] is not originals[i]:
            return
        if views[i].dim() < len(coords.shape):  # a 0-dim operand read as the 0-dim view of its element
            reads.append((i, (), views[i].storage_offset(), None))
            continue
        if i in staged:
            reads.append((i, tuple(views[i].stride()), views[i].storage_offset(), staged[i]))
            continue
        p = plan(args[i], coords)
        if p is None or not p.stick_ok:
            return
        reads.append((i, p.strides, p.offset, None))
    out_coords = target_read = None
    if target is None:
        out_coords = coords_with_dtype(coords, result)
        if (out_coords.layout.device_size, out_coords.layout.stride_map) != (coords.layout.device_size,
                                                                             coords.layout.stride_map):
            # another stick length (a comparison's bool result): written through its view in the coordinates
            p = plan(out, coords)
            if p is None or not p.stick_ok or p.shape is not None:
                if front and not staged:
                    _offer_pieces(key, spec, originals, reads, out_coords, out)
                return
            target_read = (p.strides, p.offset)
    elif not inplace:
        p = plan(target, coords)
        target_read = (p.strides, p.offset)
    layouts = layouts_of([t for t in originals if isinstance(t, torch.Tensor)])
    dense = tuple(dense_from(coords.shape, strides) if len(strides) == len(coords.shape) and not (inplace and i == 0)
                  else -1 for i, strides, _, _ in reads)  # an in-place call's target, written, read as it is
    dense = dense if any(k >= 0 for k in dense) else ()
    recipe = keep(RECIPES, key, Recipe(layouts, coords, tuple(reads), out_coords, target_read,
                                       not has_padding(coords), dense), MAX_RECIPES)
    if front:
        _offer(recipe, spec, originals, kwargs)


# Ops whose CPU kernels round every element alike in their vectorized and scalar loops (exact or
# correctly rounded arithmetic, selections): computing whole sticks moves elements between those
# loops, which for exp-like kernels (elu's backward: Sleef's exp and std::exp) changes bits.
ALIKE_IN_EVERY_LOOP = frozenset({"add.out", "sub.out", "mul.out", "div.out", "neg.out", "abs.out", "clamp_min.out",
                                 "clamp_max.out", "clamp.out", "maximum.out", "minimum.out",
                                 "threshold_backward.grad_input"})


def _keeps_padding(recipe: Recipe, spec: Spec, args: tuple | list, kwargs: dict) -> list | None:
    """The call's scalar arguments, (position, value), if its op maps the pad values of operands
    read in the new result's own buffer order to the result's pad value with these scalars (relu,
    ``x * 0.5``, ``a + b`` over zero padding): the front may then compute whole buffers, padding
    included, for calls with these scalars (a stick half padding, as a 16-wide plane's: runs of 16
    elements, a loop each, and a padding fill, where whole sticks are one run). None otherwise:
    another layout, a 0-dim operand, keyword arguments, an op that raises or changes the pad value,
    or whose kernel rounds differently in its vectorized and scalar loops."""
    out = recipe.out_coords
    if (spec.native not in ALIKE_IN_EVERY_LOOP or out is None or recipe.target_read is not None or recipe.dense
            or recipe.unpadded or kwargs):
        return None
    shape = recipe.coords.shape
    if math.prod(shape) != out.layout.device_numel:  # (the views must cover the whole buffer)
        return None
    probe = list(args)
    for i, strides, offset, staged in recipe.reads:
        if staged is not None or len(strides) != len(shape) or tuple(strides) != rowmajor(shape) or offset != 0:
            return None
        probe[i] = torch.full((), args[i].device_tensor_layout().pad_value, dtype=args[i].dtype)
    if any(isinstance(a, torch.Tensor) and a.device.type != "cpu" for a in probe):
        return None
    op = aten_overload(spec.native)
    value = torch.empty((), dtype=out.layout.dtype)
    try:
        op(*probe, *spec.extra, **{next(a.name for a in op._schema.arguments if a.is_out): value})
    except Exception:  # (an integer division by a zero pad value)
        return None
    pad = torch.full((), out.layout.pad_value, dtype=out.layout.dtype)
    if not torch.equal(value.reshape(1).view(torch.uint8), pad.reshape(1).view(torch.uint8)):
        return None
    return [(i, a) for i, a in enumerate(args) if type(a) in (bool, int, float)]


def _offer(recipe: Recipe, spec: Spec, args: tuple | list, kwargs: dict) -> None:
    """Offer the runtime's front the recipe of the call it is serving (``Spec.native`` ops whose
    coordinates' real positions are a few boxes), so that it replays later calls of this geometry
    itself, box by box as ``_replay`` does (or on whole buffers, where the op keeps the padding:
    ``_keeps_padding``)."""
    if spec.native is None:
        return
    pieces, whole = real_slices(recipe.coords)
    if whole:
        return  # too many boxes: the padding is restored after a whole-buffer compute
    shape = recipe.coords.shape
    result = ((shape, rowmajor(shape), 0) if recipe.out_coords is not None and recipe.target_read is None else
              None if recipe.target_read is None else (shape, *recipe.target_read))
    boxes = [] if recipe.unpadded else [[(s.start, s.stop - s.start) for s in box] for box in pieces]
    _C._offer_recipe([t if isinstance(t, torch.Tensor) else None for t in args],
                     [(i, shape if len(strides) == len(shape) else (), strides, offset)
                      + (() if staged is None else (runtime_record(staged[0]), staged[1]))
                      for i, strides, offset, staged in recipe.reads],
                     None if recipe.out_coords is None else runtime_record(recipe.out_coords), result,
                     [(len(args) + i, v) for i, v in enumerate(spec.extra)], "aten::" + spec.native, boxes,
                     dense=list(recipe.dense), whole_if=_keeps_padding(recipe, spec, args, kwargs) if boxes else None)


# A call's pieces for ``_offer_pieces`` per signature (None: it has none), worked out once.
PIECES: dict[tuple, list | None] = {}


def _offer_pieces(key: tuple, spec: Spec, args: list, reads: list, out_coords: BoundLayout, out: torch.Tensor
                  ) -> None:
    """Offer the runtime's front a recipe whose compute runs on strided pieces of a refinement of
    the host shape (``operands.piece_common_reads`` of each operand and the result): a comparison
    whose bool result has no strided view in its input's coordinates (rows of several sticks, a
    stick of bools holding four float32 sticks). Every tensor operand has the result's shape (or
    is 0-dim: ``reads`` holds its element's view) and the same pieces."""
    if spec.native is None:
        return
    if key not in PIECES:
        keep(PIECES, key, _pieces(args, reads, out), MAX_RECIPES)
    pieces = PIECES[key]
    if pieces is None:
        return
    _C._offer_recipe([t if isinstance(t, torch.Tensor) else None for t in args], pieces[0][0],
                     runtime_record(out_coords), pieces[0][1][0], [(len(args) + i, v) for i, v in enumerate(spec.extra)],
                     "aten::" + spec.native, pieces=pieces)


def _pieces(args: list, reads: list, out: torch.Tensor) -> list | None:
    """``_offer_pieces``'s pieces: per piece, every operand's read and the result's view."""
    shaped = [i for i, strides, _, _ in reads if strides]
    per = [piece_common_reads(args[i], out) for i in shaped]
    if not per or any(p is None or [dst for _, dst in p] != [dst for _, dst in per[0]] for p in per):
        return None
    scalars = [(i, (), (), offset) for i, strides, offset, _ in reads if not strides]
    return [([(i, *p[k][0]) for i, p in zip(shaped, per)] + scalars, [per[0][k][1]]) for k in range(len(per[0]))]


def forget_recipes() -> None:
    """Drop every kept recipe (this module's and the runtime front's)."""
    RECIPES.clear()
    PIECES.clear()
    _C._forget_recipes()


def run(spec: Spec, args: tuple | list, kwargs: dict, *, target: torch.Tensor | None = None,
        out_dtype: torch.dtype | None = None, coords: BoundLayout | None = None, front: bool = False) -> torch.Tensor:
    """Run a pointwise op on device memory (see the module docstring); with a ``target``
    (``args[0]`` for an in-place op, else an ``out=`` tensor) the op writes into it. A call
    with the geometry of an earlier one whose operands were read in place replays its
    ``Recipe``; ``front``: the call is the op's registered kernel's (its recipe may be offered
    to the runtime's front)."""
    key = None
    if coords is None and not rules.is_strict():
        key = signature(spec, args, kwargs, target, out_dtype)
        recipe = RECIPES.get(key) if key is not None else None
        if recipe is not None:
            return _replay(recipe, spec, args, kwargs, target, front)
    originals = list(args)
    args = list(args)
    inplace = target is not None and target is args[0]
    positions = [i for i in spec.operands if i < len(args) and isinstance(args[i], torch.Tensor)]
    device = _common_device(args, positions)
    shape = broadcast_shape([tuple(args[i].shape) for i in positions])
    if out_dtype is None:
        result, compute = _call_dtypes(spec, args, kwargs)
    else:
        result, compute = out_dtype, args[positions[0]].dtype
    if target is not None and not inplace:  # out=: written directly when it is a whole tensor of the result
        direct = tuple(target.shape) == shape and target.dtype == result == compute
        coords = _inplace_coords(target, [args[i] for i in positions]) if direct else None
        if coords is None:
            return write_out(run(spec, args, kwargs), target)
    if inplace:
        if tuple(target.shape) != shape:
            raise RuntimeError(f"output with shape {list(target.shape)} doesn't match the broadcast shape "
                               f"{list(shape)}")
        check_cast(result, target.dtype)
        coords = _inplace_coords(target, [args[i] for i in positions[1:]])
        if coords is None:
            return target.copy_(run(spec, args, kwargs))
        result = target.dtype
    if math.prod(shape) == 0:
        return target if target is not None else _empty_result(shape, result, device)
    primary = None
    if coords is None:
        primary = next((i for i in positions if i not in spec.masks and args[i].device.type == "spyre"
                        and tuple(args[i].shape) == shape), None)
        if primary is None:
            coords = default_coords(shape, compute)
        else:
            if args[primary].dtype != compute:
                args[primary] = convert(args[primary], compute)
            coords = coords_for(args[primary])
    views = list(args)
    shaped = set()  # operands read as views shaped like the coordinates
    scalars = set()  # 0-dim operands read as the 0-dim views of their elements
    staged: dict = {}  # operands copied into the coordinates (see operand_view)
    for i in positions:
        t = args[i]
        if t.device.type != "spyre":
            continue
        if t.dim() == 0 and shape:
            views[i] = scalar_view(t)
            if views[i] is None:
                views[i] = t.cpu()
            else:
                scalars.add(i)
            continue
        views[i] = _operand(spec, coords, args, i, primary=(i == primary or (inplace and i == 0)), staged=staged)
        shaped.add(i)
    if inplace:
        out, o, finish = target, views[0], None
    elif target is not None:
        out, o, finish = target, view(target, coords, plan(target, coords)), None
    else:
        out, o, finish = output(coords, result, device)
    pieces, whole = real_slices(coords)
    reads = [densified(v) if i in shaped and not (inplace and i == 0) else v for i, v in enumerate(views)]
    for index in pieces:
        spec.compute(*(v[index] if i in shaped else v for i, v in enumerate(reads)), out=o[index], **kwargs)
    if finish is not None:
        finish()
    elif whole:
        _C._fill_padding(out)
    if key is not None and len(shaped) + len(scalars) == len(positions):
        _record(key, spec, args, originals, positions, coords, result, target, inplace, front, views, staged, out,
                kwargs)
    return out


def broadcast_shape(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for shape in shapes:
        for k, n in enumerate(shape, rank - len(shape)):
            if n != 1:
                if out[k] not in (1, n):
                    raise RuntimeError(f"The size of tensor a ({out[k]}) must match the size of tensor b ({n}) at "
                                       f"non-singleton dimension {k}")
                out[k] = n
    return tuple(out)


def _common_device(args: list, positions: list[int]) -> torch.device:
    device = None
    for i in positions:
        t = args[i]
        if t.device.type == "spyre":
            if device is None:
                device = t.device
            elif t.device != device:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"{device} and {t.device}!")
        elif t.dim() != 0:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"spyre and {t.device}! (only 0-dim CPU tensors mix with spyre tensors)")
    if device is None:
        raise RuntimeError("a spyre kernel was called without a spyre tensor operand")
    return device


def _inplace_coords(target: torch.Tensor, others: list[torch.Tensor]) -> BoundLayout | None:
    """The target's own coordinates, when the op can write its buffer directly."""
    info = record_of(target)
    if info is None or not is_whole_dense(target, info):
        return None
    ptr = target.untyped_storage().data_ptr()
    for t in others:
        if t.device.type == "spyre" and t.untyped_storage().data_ptr() == ptr and (
                t.shape != target.shape or t.stride() != target.stride() or t.storage_offset() != 0):
            return None
    own = BoundLayout(info.layout, tuple(target.shape), tuple(target.stride()))
    p = plan(target, own)
    return own if p is not None and p.exact else None


# -- conversion, copies and fills -------------------------------------------------------
def _copy(v: torch.Tensor, *, out: torch.Tensor) -> None:
    strided_copy(out, v)


COPY = Spec("_to_copy", _copy, (0,))


def convert(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` as ``dtype`` on its device: its layout's dim_order kept (a new tensor)."""
    return run(COPY, [x], {}, out_dtype=dtype)


def to_copy(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``_to_copy`` within one spyre device (the runtime calls it): a conversion that keeps the
    layout's dim_order. Moves between devices never come here. A conversion whose result the
    input's strided pieces cover is kept by the runtime per geometry and dtype: later ones make
    the result and convert piece by piece (CPU copies between the buffers, the same rounding)
    without calling this function."""
    count_kernel("aten::_to_copy")
    out = convert(x, dtype)
    record = record_of(out)
    pieces = piece_common_reads(x, out) if record is not None and not rules.is_strict() else None
    if pieces is not None:
        _C._keep_conversion(x, dtype, record, list(pieces))
    return out


def clone(x: torch.Tensor, *, memory_format: torch.memory_format | None = None) -> torch.Tensor:
    """A copy of ``x`` on the device. A whole tensor clones as a copy of its buffer, in its
    layout (a contiguous clone of a permuted one keeps the arrangement of its buffer, through a
    Spyre dim_order where its own device dims cannot describe the copy); a view gets the
    layout of its shape with its buffer's dim_order, or the default layout.
    A copy that moves the stick to another dim (``k.transpose(-2, -1).contiguous()``) is
    counted as a restickify. The result's coordinates are kept per geometry (``CLONES``); a clone
    that is no restickify is then replayed by the runtime's front (a new tensor of those
    coordinates, CPU copies between strided views of the two buffers where they have them,
    ``operands.piece_common_reads``, else the runtime's copy into it)."""
    key = geometry_key(x)
    key = None if key is None else (key, memory_format)
    kept = CLONES.get(key) if key is not None else None
    coords = kept[0] if kept is not None else _clone_coords(x, memory_format)
    if key is not None and kept is None:
        keep(CLONES, key, (coords, layouts_of([x])), MAX_CLONES)
    p = plan(x, coords)
    out = new_tensor(coords, x.device)
    readable = p is not None and p.stick_ok
    if not readable and stick_dim(x) != stick_dim(out):
        count_restickify(x.numel() * x.element_size())
        return materialize(x, coords, out)
    pieces = piece_common_reads(x, out)
    if pieces is not None:
        copy_pieces(x, out, pieces)
    elif not readable:
        materialize(x, coords, out)
    elif not copy_between(out, x):  # box reads kept per geometry, and by the runtime
        out = run(COPY, [x], {}, out_dtype=x.dtype, coords=coords)
    if key is not None:  # the runtime's front then clones this geometry itself
        _C._offer_clone_recipe(x, runtime_record(coords), list(pieces or ()))
    return out


CLONES: dict[tuple, tuple[BoundLayout, tuple]] = {}  # (geometry_key, memory_format) -> coordinates, layouts_of([x])
MAX_CLONES = 1024


def _clone_coords(x: torch.Tensor, memory_format: torch.memory_format | None) -> BoundLayout:
    """The coordinates of ``clone``'s result (see ``clone``)."""
    size = tuple(x.shape)
    info = record_of(x)
    stride = None
    if memory_format not in (None, torch.preserve_format):
        stride = tuple(torch.empty(size, memory_format=memory_format, device="meta").stride())
        if all(n == 1 or s == t for n, s, t in zip(size, x.stride(), stride)):
            stride = None
    if stride is None:
        coords = coords_for(x)
    elif info is not None and is_whole_dense(x, info):
        own = coords_for(x)
        layout = operand_layout(own, size, x.dtype, stride)
        coords = BoundLayout(layout, size, stride) if layout is not None else _in_buffer_order(x, own, stride)
    else:
        coords = None
    if coords is None:
        coords = BoundLayout(default_layout(size, stride, x.dtype), size, stride)
    return coords


def _in_buffer_order(x: torch.Tensor, own: BoundLayout, stride: tuple[int, ...]) -> BoundLayout | None:
    """A Spyre layout for a row-major copy of ``x`` that keeps the order of ``x``'s buffer (the
    copy is then one sweep of it), from the order its buffer nests ``x``'s dims in; None when
    ``stride`` is not row-major or no dim_order does that."""
    size = tuple(x.shape)
    if stride != rowmajor(size) or not isinstance(own.layout, SpyreTensorLayout) or len(size) > 6:
        return None
    last = own.layout.device_rank - 1
    groups = sorted(own.groups, key=lambda g: min(d.dim for d in g.digits))
    nest = [h for g in groups for h in g.host_dims]  # x's dims, outermost in the buffer first
    stick = next((g.host_dims[-1] for g in own.groups if any(d.dim == last for d in g.digits)), None)
    # A Spyre dim_order (d0, d1, ..., stick) nests the buffer as d1, ..., the stick's tiles, d0, a stick.
    if stick is None or len(nest) != len(size) or len(nest) < 2 or nest[-2] != stick:
        return None
    candidate = ordered_coords(size, x.dtype, (nest[-1], *nest[:-2], stick))
    p = plan(x, candidate)
    in_order = p is not None and p.stick_ok and p.offset == 0 and p.shape is None and \
        tuple(p.strides) == rowmajor(tuple(candidate.layout.device_size))
    return candidate if in_order else None


class FillPlan(NamedTuple):
    """How ``fill_`` writes a tensor: the strided views of its raw buffer (shape, strides, offset)
    that hold its elements, whether the padding is restored after filling the whole buffer, and
    ``layouts_of`` the tensor (so that the id in the plan's key stays its layout's)."""

    boxes: tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]
    restore_padding: bool
    layouts: tuple


FILLS: dict[tuple, FillPlan] = {}
MAX_FILLS = 1024


def _fill_plan(x: torch.Tensor) -> FillPlan | None:
    """The buffer views ``fill_`` writes for ``x``: the boxes of real positions of a tensor that is
    its buffer's whole tensor (``operands.real_slices``), or the strided views holding a view's
    elements (``operands.piece_reads``: a slice, a head of a packed projection, a gradient viewing
    a larger buffer); None where no few strided views hold them."""
    coords = coords_for(x)
    p = plan(x, coords)
    if p is not None and p.exact:
        return _whole_fill(coords, layouts_of([x]))
    info = record_of(x)
    if info is None or BoundLayout(info.layout, tuple(info.base_size), tuple(info.base_stride)).broadcast:
        return None  # a layout keeping copies of elements: the view holds only their first copies
    reads = piece_reads(x)
    return None if reads is None else FillPlan(reads, False, layouts_of([x]))


def _whole_fill(coords: BoundLayout, layouts: tuple) -> FillPlan:
    """The fill of a whole buffer in ``coords``: the boxes of its real positions."""
    pieces, restore = real_slices(coords)
    shape, strides = coords.shape, rowmajor(coords.shape)
    boxes = tuple((tuple(s.stop - s.start for s in index) if index else shape, strides,
                   sum(s.start * t for s, t in zip(index, strides))) for index in pieces)
    return FillPlan(boxes, restore, layouts)


def fill_(x: torch.Tensor, value: Any, op: str = "fill_") -> torch.Tensor:
    """Set every element of ``x`` to ``value`` (the positions of its raw buffer that hold them;
    padding keeps its pad value). The plan is kept per geometry and offered to the runtime's front
    for the call of ``op`` it serves (``csrc/fill_recipe.cpp``); ``zeros``/``ones`` fill fresh tensors.

    >>> x = torch.ones(4, 70).to("spyre")
    >>> _ = x[1:3, 5:40].zero_()
    >>> int(x.cpu().sum())
    210
    """
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} "
                               "dimensions.")
        value = value.item()
    key = geometry_key(x)
    known = FILLS.get(key) if key is not None else None
    if known is None:
        known = _fill_plan(x)
        if known is None:  # elements no strided view holds: fill a fresh tensor and copy it in
            coords = default_coords(tuple(x.shape), x.dtype)
            return x.copy_(_fill_buffer(new_tensor(coords, x.device), _whole_fill(coords, ()), value))
        if key is not None:
            keep(FILLS, key, known, MAX_FILLS)
    if key is not None:
        _C._offer_fill("aten::" + op, x, list(known.boxes), known.restore_padding)
    return _fill_buffer(x, known, value)


def _fill_buffer(x: torch.Tensor, fill: FillPlan, value: Any) -> torch.Tensor:
    """Write ``value`` into the buffer views of ``fill`` (``x``'s elements) in Python: a call the
    runtime's front does not replay."""
    for box in fill.boxes:
        raw_view(x, *box).fill_(value)
    if fill.restore_padding:
        _C._fill_padding(x)
    return x


def zero_(x: torch.Tensor) -> torch.Tensor:
    """``fill_(x, 0)``."""
    return fill_(x, 0, "zero_")


# -- the op table ------------------------------------------------------------------------
def _t(v: object) -> object:
    """Python scalars as 0-dim CPU tensors (for CPU functions that want tensors)."""
    return v if isinstance(v, torch.Tensor) or v is None else torch.tensor(v)


def _add(a, b, alpha=1, *, out):  # add.Scalar, sub.Scalar, rsub.Scalar take alpha positionally
    return torch.add(a, b, alpha=alpha, out=out)


def _sub(a, b, alpha=1, *, out):
    return torch.sub(a, b, alpha=alpha, out=out)


def _rsub(a, b, alpha=1, *, out):
    return torch.sub(_t(b), a, alpha=alpha, out=out)


def _div(a, b, *, rounding_mode=None, out):
    return torch.div(a, b, rounding_mode=rounding_mode, out=out)


def _gelu(a, *, approximate="none", out):
    return torch._C._nn.gelu(a, approximate=approximate, out=out)


def _where(c, a, b, *, out):
    return torch.where(c, _t(a), _t(b), out=out)


def _clamp(a, lo=None, hi=None, *, out):
    return torch.clamp(a, lo, hi, out=out)


def _masked_fill(a, mask, value, *, out):
    out.copy_(a)
    if isinstance(value, torch.Tensor) and value.dim() and value.numel():
        value = value.reshape(-1)[0]  # a scalar value the operands were broadcast with (mask wider than a)
    return out.masked_fill_(mask, value)


def _addcmul(a, b, c, *, value=1, out):
    return torch.addcmul(a, b, c, value=value, out=out)


def _addcdiv(a, b, c, *, value=1, out):
    return torch.addcdiv(a, b, c, value=value, out=out)


def _lerp(a, b, weight, *, out):
    return torch.lerp(a, b, weight, out=out)


def _backward(op: torch._ops.OpOverload) -> Callable[..., Any]:
    def compute(*args, out, **kwargs):
        return op(*args, grad_input=out, **kwargs)
    return compute


def _unary(fn: Callable[..., Any]) -> Callable[..., Any]:
    def compute(a, *, out):
        return fn(a, out=out)
    return compute


def _binary(fn: Callable[..., Any]) -> Callable[..., Any]:
    def compute(a, b, *, out):
        return fn(a, b, out=out)
    return compute


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
    "silu": torch._C._nn.silu, "sin": torch.sin, "cos": torch.cos, "erf": torch.erf, "log1p": torch.log1p,
    "expm1": torch.expm1, "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "sign": torch.sign, "sgn": torch.sgn,
    "relu": lambda a, out: torch.clamp_min(a, 0, out=out),
    **{name: getattr(A, name).out for name in (
        "log2", "log10", "exp2", "sinh", "cosh", "tan", "asin", "acos", "atan", "asinh", "acosh", "atanh", "frac",
        "erfinv", "round", "logical_not", "bitwise_not", "mish", "hardswish", "hardsigmoid", "sinc", "deg2rad",
        "rad2deg")},
}
PREDICATES = {"isneginf": torch.isneginf, "isposinf": torch.isposinf, "isinf": A.isinf.out, "isnan": A.isnan.out}
BINARY = {
    "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
}
# Binary ops that compute as their CPU out= overloads (functional overload -> out= overload).
BINARY_OUT = {
    **{f"{name}.{ov}": f"{name}.{ov}_out" for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "remainder", "fmod")
       for ov in ("Tensor", "Scalar")},
    "copysign.Tensor": "copysign.out", "copysign.Scalar": "copysign.Scalar_out", "floor_divide": "floor_divide.out",
    "floor_divide.Scalar": "floor_divide.Scalar_out",
    **{name: f"{name}.out" for name in ("atan2", "hypot", "logical_and", "logical_or", "logical_xor")},
}
# Unary ops with parameters after self (name -> their CPU out= overload, called positionally).
PARAMETRIZED = {"leaky_relu": A.leaky_relu.out, "elu": A.elu.out, "softplus": A.softplus.out,
                "hardtanh": A.hardtanh.out, "nan_to_num": A.nan_to_num.out, "logit": A.logit.out}


def _positional(op: torch._ops.OpOverload) -> Callable[..., Any]:
    def compute(*args, out):
        return op(*args, out=out)
    return compute

SPECS: list[Spec] = [Spec(name, _unary(fn), (0,)) for name, fn in UNARY.items()]
SPECS += [Spec(name, _unary(fn), (0,)) for name, fn in PREDICATES.items()]
SPECS += [Spec("gelu", _gelu, (0,))]
SPECS += [Spec(f"{name}.{ov}", _binary(BINARY[name]), (0, 1))
          for name in ("eq", "ne", "lt", "le", "gt", "ge") for ov in ("Tensor", "Scalar")]
SPECS += [Spec(name, _binary(BINARY[name]), (0, 1)) for name in ("maximum", "minimum")]
SPECS += [Spec(f"pow.{ov}", _binary(torch.pow), (0, 1)) for ov in ("Tensor_Tensor", "Tensor_Scalar", "Scalar")]
SPECS += [Spec(name, _positional(aten_overload(out)), (0, 1)) for name, out in BINARY_OUT.items()]
SPECS += [Spec(name, _positional(op), (0,)) for name, op in PARAMETRIZED.items()]
SPECS += [Spec(f"add.{ov}", _add, (0, 1)) for ov in ("Tensor", "Scalar")]
SPECS += [Spec(f"sub.{ov}", _sub, (0, 1)) for ov in ("Tensor", "Scalar")]
SPECS += [Spec(f"rsub.{ov}", _rsub, (0, 1)) for ov in ("Tensor", "Scalar")]
SPECS += [Spec(f"mul.{ov}", _binary(torch.mul), (0, 1)) for ov in ("Tensor", "Scalar")]
SPECS += [Spec(f"div.{ov}", _div, (0, 1)) for ov in ("Tensor", "Scalar", "Tensor_mode", "Scalar_mode")]
SPECS += [
    Spec("where.self", _where, (0, 1, 2), masks=(0,)),
    Spec("clamp", _clamp, (0,)), Spec("clamp.Tensor", _clamp, (0, 1, 2)),
    Spec("clamp_min", _binary(torch.clamp_min), (0,)), Spec("clamp_min.Tensor", _binary(torch.clamp_min), (0, 1)),
    Spec("clamp_max", _binary(torch.clamp_max), (0,)), Spec("clamp_max.Tensor", _binary(torch.clamp_max), (0, 1)),
    Spec("masked_fill.Scalar", _masked_fill, (0, 1), masks=(1,)),
    Spec("masked_fill.Tensor", _masked_fill, (0, 1, 2), masks=(1,)),
    Spec("addcmul", _addcmul, (0, 1, 2)), Spec("addcdiv", _addcdiv, (0, 1, 2)),
    Spec("lerp.Scalar", _lerp, (0, 1)), Spec("lerp.Tensor", _lerp, (0, 1, 2)),
]
BACKWARD = ("threshold_backward", "gelu_backward", "sigmoid_backward", "tanh_backward", "silu_backward",
            "leaky_relu_backward", "softplus_backward", "hardtanh_backward", "hardsigmoid_backward", "logit_backward")
SPECS += [Spec(name, _backward(getattr(A, name).grad_input), (0, 1)) for name in BACKWARD]
SPECS += [Spec("elu_backward", _backward(A.elu_backward.grad_input), (0, 5)),
          Spec("hardswish_backward", _positional(A.hardswish_backward.out), (0, 1))]

# The specs whose ``compute`` is the CPU out= overload named here on the op's own arguments (a
# Python number where the overload takes a tensor as PyTorch passes it, a wrapped 0-dim tensor):
# the runtime's front replays their recipes itself.
NATIVE = {
    **{f"{op}.{ov}": f"{op}.out" for op in ("add", "sub", "mul", "div") for ov in ("Tensor", "Scalar")},
    "rsub.Tensor": "rsub.Tensor_out", "rsub.Scalar": "rsub.Scalar_out",
    "div.Tensor_mode": "div.out_mode", "div.Scalar_mode": "div.out_mode",
    **{name: f"{name}.out" for name in UNARY if name != "relu"}, "relu": "clamp_min.out",
    "gelu": "gelu.out", "maximum": "maximum.out", "minimum": "minimum.out",
    "pow.Tensor_Tensor": "pow.Tensor_Tensor_out", "pow.Tensor_Scalar": "pow.Tensor_Scalar_out",
    "pow.Scalar": "pow.Scalar_out", "where.self": "where.self_out", "clamp": "clamp.out",
    "clamp.Tensor": "clamp.Tensor_out", "clamp_min": "clamp_min.out", "clamp_min.Tensor": "clamp_min.Tensor_out",
    "clamp_max": "clamp_max.out", "clamp_max.Tensor": "clamp_max.Tensor_out", "addcmul": "addcmul.out",
    "addcdiv": "addcdiv.out", "lerp.Scalar": "lerp.Scalar_out", "lerp.Tensor": "lerp.Tensor_out",
    **{name: f"{name}.grad_input" for name in (*BACKWARD, "elu_backward")}, "hardswish_backward": "hardswish_backward.out",
    **{f"{op}.{ov}": f"{op}.{ov}_out" for op in ("eq", "ne", "lt", "le", "gt", "ge") for ov in ("Tensor", "Scalar")},
    **{name: f"{name}.out" for name in PREDICATES},
    "masked_fill.Scalar": "masked_fill.Scalar_out", "masked_fill.Tensor": "masked_fill.Tensor_out",
    **BINARY_OUT,
    **{name: f"{name}.out" for name in PARAMETRIZED},
}
EXTRA = {"relu": (0,)}  # arguments a native overload takes after the op's own
SPECS = [spec._replace(native=NATIVE.get(spec.name), extra=EXTRA.get(spec.name, ())) for spec in SPECS]

ADD = Spec("add.Tensor", _add, (0, 1))
MUL = Spec("mul.Tensor", _binary(torch.mul), (0, 1))
SUB = Spec("sub.Tensor", _sub, (0, 1))

# In-place overloads and the functional ones whose dtype rules they follow.
INPLACE = {
    "add_.Tensor": "add.Tensor", "add_.Scalar": "add.Scalar", "sub_.Tensor": "sub.Tensor",
    "sub_.Scalar": "sub.Scalar", "mul_.Tensor": "mul.Tensor", "mul_.Scalar": "mul.Scalar",
    "div_.Tensor": "div.Tensor", "div_.Scalar": "div.Scalar", "div_.Tensor_mode": "div.Tensor_mode",
    "pow_.Scalar": "pow.Tensor_Scalar", "pow_.Tensor": "pow.Tensor_Tensor", "clamp_": "clamp",
    "clamp_min_": "clamp_min", "clamp_max_": "clamp_max", "masked_fill_.Scalar": "masked_fill.Scalar",
    "masked_fill_.Tensor": "masked_fill.Tensor", "gelu_": "gelu", "addcmul_": "addcmul", "addcdiv_": "addcdiv",
    "lerp_.Scalar": "lerp.Scalar", "lerp_.Tensor": "lerp.Tensor",
    **{f"{name}_": name for name in UNARY},
    **{f"{name}_.{ov}": f"{name}.{ov}" for name in ("bitwise_and", "bitwise_or", "bitwise_xor", "remainder", "fmod",
                                                    "copysign") for ov in ("Tensor", "Scalar")},
    "floor_divide_.Tensor": "floor_divide", "floor_divide_.Scalar": "floor_divide.Scalar",
    **{f"{name}_": name for name in ("atan2", "hypot", "logical_and", "logical_or", "logical_xor", *PARAMETRIZED)
       if name != "softplus"},
}


def _functional(spec: Spec) -> Callable[..., torch.Tensor]:
    return lambda *args, **kwargs: run(spec, args, kwargs, front=True)


def _inplace(spec: Spec) -> Callable[..., torch.Tensor]:
    return lambda *args, **kwargs: run(spec, args, kwargs, target=args[0], front=True)


def _out(spec: Spec, out_name: str) -> Callable[..., torch.Tensor]:
    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        target = kwargs.pop(out_name)
        return run(spec, args, kwargs, target=target, front=True)
    return kernel


def register_all() -> None:
    _C._set_converter(to_copy)
    by_name = {spec.name: spec for spec in SPECS}
    for spec in SPECS:
        register(spec.name, _functional(spec))
        found = out_overload(spec.name)
        if found is not None:
            register(found[0], _out(spec, found[1]))
    for name, functional in INPLACE.items():
        register(name, _inplace(by_name[functional]))
    register("clone", clone)
    register("fill_.Scalar", fill_)
    register("fill_.Tensor", fill_)
    register("zero_", zero_)


__all__ = ["ADD", "MUL", "SUB", "broadcast_shape", "convert", "copy_real", "fill_", "materialize", "move", "operand_view",
           "output", "register_all", "restickify_to", "run"]
