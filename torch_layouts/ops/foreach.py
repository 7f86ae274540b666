"""The ``_foreach_*`` ops optimizers call (SGD, Adam, AdamW...) on device tensors.

A pointwise op gives each element the same result wherever the element lies, so where every
list's ``i``-th tensor is the whole tensor of its buffer in the same layout as the others (same
device dims but for dims of size 1, same host size and strides) and the layout keeps no copies,
the lists' raw buffers line up element for element: the CPU's own ``_foreach`` op runs once on
the raw buffers of all such indices, and the padding of the tensors it wrote gets its pad value
back. An input of another layout than the first list's tensor (a gradient laid out by the
reduction that made it) is read, as that index's other tensors are, through a strided view of its
buffer in a refinement of the shape both layouts split evenly (``operands.common_reads``) where
both views walk their buffers in one dim order; otherwise (a transpose, which a relayout does
faster) it is first copied into the first tensor's layout. The other indices run tensor by
tensor through the device's pointwise kernels, as ATen's composite ``_foreach`` kernel would.
A call whose every index lines up is offered to the runtime's front, which replays later calls of
its geometry without Python (``csrc/foreach_recipe.h``): in place, the CPU's ``_foreach`` op on
the buffers; out of place (``_foreach_sqrt``, Adam's), the per-tensor op's out= overload from each
input's buffer into a new result's.

Example::

    >>> params = [torch.ones(256, device="spyre")]
    >>> _ = torch._foreach_add_(params, [torch.ones(256, device="spyre")], alpha=0.5)
    >>> params[0].cpu()[:2]
    tensor([1.5000, 1.5000])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from .. import _C
from ..core.layout import BoundLayout
from .operands import Read, common_reads, geometry_key, has_padding, keep, new_tensor, record_of, runtime_record
from .registry import register

A = torch.ops.aten


class Flat(NamedTuple):
    """A tensor whose raw buffer lines up with any other of the same ``key``: its coordinates
    (a result of an out-of-place op gets them), its buffer's element count and whether the
    buffer has padding (restored after an op wrote the whole buffer)."""

    key: tuple
    coords: BoundLayout
    numel: int
    padded: bool


FLAT: dict[tuple, Flat | None] = {}  # geometry_key -> Flat (None: not flat)
MAX_FLAT = 4096


def flat(t: torch.Tensor) -> Flat | None:
    """``t``'s ``Flat`` when it is its buffer's whole tensor (or a row-major view of all of a
    row-major buffer, which reads its elements in the same order) in a layout that keeps no copies."""
    geometry = geometry_key(t)
    if geometry is None:
        return None
    if geometry in FLAT:
        return FLAT[geometry]
    info = record_of(t)
    found = None
    shape, stride = tuple(t.shape), tuple(t.stride())
    whole = info is not None and t.storage_offset() == 0 and (shape, stride) == (tuple(info.base_size),
                                                                                 tuple(info.base_stride))
    view = info is not None and not whole and t.storage_offset() == 0 and t.is_contiguous() and \
        t.numel() == math.prod(info.base_size) and _row_major(info.base_size, info.base_stride)
    if whole or view:
        layout = info.layout
        try:
            coords = BoundLayout(layout, shape, stride)
            rejected = bool(coords.broadcast)  # a layout keeping copies of elements
        except ValueError:  # the layout does not bind to the view's shape
            rejected = True
        if view and not rejected:  # the coordinates must place each element where the view's buffer has it
            rejected = not torch.equal(_C._view_offsets(info, list(shape), list(stride), 0),
                                       _C._view_offsets(runtime_record(coords), list(shape), list(stride), 0))
        if not rejected:
            dims = [(n, m) for n, m in zip(layout.device_size, layout.stride_map) if n != 1]  # size 1: no offset
            key = (tuple(dims), t.dtype, shape, stride)
            found = Flat(key, coords, math.prod(layout.device_size), has_padding(coords))
    return keep(FLAT, geometry, found, MAX_FLAT)  # the coordinates hold the layout: its id in the key stays its own


def _row_major(size: Sequence[int], stride: Sequence[int]) -> bool:
    expected = 1
    for n, s in zip(reversed(size), reversed(stride)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


class CallPlan(NamedTuple):
    """What a call of one geometry (``_C._foreach_key``: every tensor's geometry key, and which
    share the first list's tensor's buffer) runs on raw buffers: the indices that line up; per
    list, each one's view of its buffer (the whole buffer, or a strided view of its elements where
    the index mixes two layouts); each index's coordinates; the (list, position among the fast
    indices) of the tensors copied into the first list's layout first; the others run tensor by
    tensor. ``flats`` keeps the layouts in the key alive."""

    fast: tuple[int, ...]
    views: tuple[tuple[Read, ...], ...]  # per list, per fast index
    coords: tuple[BoundLayout, ...]
    padded: tuple[int, ...]  # positions among the fast indices whose whole buffers, padded, are written
    copies: tuple[tuple[int, int], ...]
    flats: tuple


PLANS: dict[tuple, CallPlan] = {}
MAX_PLANS = 256


def call_plan(lists: list[list[torch.Tensor]]) -> CallPlan:
    """Which indices line up (see the module docstring); tensors of another layout than the first
    list's (a gradient laid out by the reduction that made it) are read through strided views
    (``_same_order_reads``), or else copied into that layout, which the device's copy does in one
    relayout; an index whose first tensor is not flat, or whose tensors differ in shape, dtype or
    device, or share its buffer in another layout, does not line up."""
    fast: list[int] = []
    flats: list[Flat] = []
    copies: list[tuple[int, int]] = []
    views: list[list[Read]] = [[] for _ in lists]
    padded: list[int] = []
    for i, t in enumerate(lists[0]):
        f = flat(t)
        if f is None:
            continue
        moved = []
        for k, other in enumerate(lists[1:], 1):
            o = other[i]
            g = flat(o)
            if g is None or g.key != f.key:
                if o.shape != t.shape or o.dtype != t.dtype or o.device != t.device or \
                        o.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
                    break
                moved.append(k)
        else:
            reads = _same_order_reads(t, [lists[k][i] for k in moved]) if moved else None
            if reads is None:  # whole buffers: the written one's padding is restored after
                copies += [(k, len(fast)) for k in moved]
                padded += [len(fast)] if f.padded else []
            for k, column in enumerate(views):
                column.append(((f.numel,), (1,), 0) if reads is None else reads[1] if k in moved else reads[0])
            fast.append(i)
            flats.append(f)
    return CallPlan(tuple(fast), tuple(map(tuple, views)), tuple(f.coords for f in flats), tuple(padded),
                    tuple(copies), tuple(flats))


def _same_order_reads(t: torch.Tensor, others: list[torch.Tensor]) -> tuple[Read, Read] | None:
    """Strided views of ``t``'s buffer and of ``others``' (tensors of one geometry) holding their
    elements in one order, where both walk their buffers in the same dim order; None where the
    layouts do not split the shape alike, or where one view transposes the other (a copy into
    ``t``'s layout and one pass over whole buffers is then faster than a strided op).

    >>> p = torch.zeros(48, device="spyre")  # a bias: 2 sticks of 32
    >>> g = torch.ones(6, 2, 3, 16, device="spyre").view(6, 2, 48).sum((0, 1))  # 3 sticks of 16
    >>> _same_order_reads(p, [g])
    (((3, 16), (16, 1), 0), ((3, 16), (32, 1), 0))
    """
    if len({geometry_key(o) for o in others}) != 1:
        return None
    reads = common_reads(t, others[0])
    if reads is None or _walk(reads[0]) != _walk(reads[1]):
        return None
    return reads


def _walk(read: Read) -> list[int]:
    """A view's dims of more than one element, largest stride first."""
    sizes, strides, _ = read
    return sorted((d for d, n in enumerate(sizes) if n != 1), key=lambda d: -strides[d])


def _columns(lists: list[list[torch.Tensor]], plan: CallPlan) -> list[list[torch.Tensor]]:
    """The lists' tensors at the fast indices, those the plan copies into the first's layout
    copied (once per tensor two lists hold: ``addcmul_(grad, grad)``)."""
    columns = [[lst[i] for i in plan.fast] for lst in lists]
    copied: dict[int, torch.Tensor] = {}
    for k, j in plan.copies:
        o = columns[k][j]
        if id(o) not in copied:
            copied[id(o)] = new_tensor(plan.coords[j], o.device).copy_(o)
        columns[k][j] = copied[id(o)]
    return columns


def _restore_padding(ts: list[torch.Tensor], plan: CallPlan) -> None:
    for j in plan.padded:
        _C._fill_padding(ts[j])


class Foreach(NamedTuple):
    """A ``_foreach`` overload: its argument kinds (``L`` tensor list, ``SL`` scalar list, ``S``
    a scalar or a single tensor), the per-tensor op, and whether it writes its first list."""

    name: str
    kinds: tuple[str, ...]
    single: Callable[..., Any]
    inplace: bool
    out: str = ""  # an out-of-place op's per-tensor out= overload, which the runtime's replay calls


def _kernel(spec: Foreach) -> Callable[..., Any]:
    packet, _, overload = spec.name.partition(".")
    op = getattr(getattr(A, packet), overload or "default")

    def kernel(*args: Any, **kwargs: Any) -> Any:
        lists = [a for a, k in zip(args, spec.kinds) if k == "L"]
        n = len(lists[0])
        plan = CallPlan((), (), (), (), (), ())
        if not any(isinstance(a, torch.Tensor) and a.device.type == "spyre" for a, k in zip(args, spec.kinds)
                   if k == "S"):
            key = _C._foreach_key(lists)
            plan = PLANS.get(key) if key is not None else None
            if plan is None:
                plan = call_plan(lists)
                if key is not None:
                    keep(PLANS, key, plan, MAX_PLANS)
        results: list[Any] = [None] * n
        if plan.fast:
            if spec.inplace and len(plan.fast) == n:
                _offer(spec, args, plan)
            columns = iter(zip(_columns(lists, plan), plan.views))
            raw_args = [_C._raw_views(*next(columns)) if k == "L" else [a[i] for i in plan.fast]
                        if k == "SL" else a for a, k in zip(args, spec.kinds)]
            if spec.inplace:
                op(*raw_args, **kwargs)
                _restore_padding([lists[0][i] for i in plan.fast], plan)
            else:  # a unary op, written into the results' buffers one by one (the CPU's _foreach
                # form would allocate each result; copying then rewriting in place takes two passes)
                device = lists[0][0].device
                outs = [new_tensor(c, device) for c in plan.coords]
                for a, o in zip(raw_args[0], _C._raw_views(outs, plan.views[0])):
                    spec.single(a, out=o, **kwargs)
                _restore_padding(outs, plan)
                for i, out in zip(plan.fast, outs):
                    results[i] = out
                if len(plan.fast) == n:  # the runtime's front replays later calls of this geometry
                    _C._offer_foreach_unary("aten::" + spec.name, list(lists[0]), list(plan.views[0]),
                                            [runtime_record(c) for c in plan.coords], "aten::" + spec.out,
                                            list(plan.padded))
        if len(plan.fast) < n:
            lined = set(plan.fast)
            for i in range(n):
                if i not in lined:
                    results[i] = spec.single(*[a[i] if k in ("L", "SL") else a for a, k in zip(args, spec.kinds)],
                                             **kwargs)
        return None if spec.inplace else results
    return kernel


def _offer(spec: Foreach, args: tuple, plan: CallPlan) -> None:
    """Offer the runtime's front the replay of an in-place call whose every index lines up
    (``csrc/foreach_recipe.h``), so that it runs later calls of this geometry itself."""
    positions = [j for j, k in enumerate(spec.kinds) if k == "L"]
    _C._offer_foreach("aten::" + spec.name, [(j, list(args[j])) for j in positions], list(plan.views),
                      [(positions[k], j, runtime_record(plan.coords[j])) for k, j in plan.copies], list(plan.padded))


def _add(t, o, alpha=1):
    return t.add_(o, alpha=alpha)


def _sub(t, o, alpha=1):
    return t.sub_(o, alpha=alpha)


def _addcmul(t, a, b, value=1):
    return t.addcmul_(a, b, value=value)


def _addcdiv(t, a, b, value=1):
    return t.addcdiv_(a, b, value=value)


OPS = [
    Foreach("_foreach_add_.List", ("L", "L"), _add, True),
    Foreach("_foreach_add_.Scalar", ("L", "S"), _add, True),
    Foreach("_foreach_add_.ScalarList", ("L", "SL"), _add, True),
    Foreach("_foreach_sub_.List", ("L", "L"), _sub, True),
    Foreach("_foreach_sub_.Scalar", ("L", "S"), _sub, True),
    Foreach("_foreach_sub_.ScalarList", ("L", "SL"), _sub, True),
    Foreach("_foreach_mul_.List", ("L", "L"), torch.Tensor.mul_, True),
    Foreach("_foreach_mul_.Scalar", ("L", "S"), torch.Tensor.mul_, True),
    Foreach("_foreach_mul_.ScalarList", ("L", "SL"), torch.Tensor.mul_, True),
    Foreach("_foreach_mul_.Tensor", ("L", "S"), torch.Tensor.mul_, True),
    Foreach("_foreach_div_.List", ("L", "L"), torch.Tensor.div_, True),
    Foreach("_foreach_div_.Scalar", ("L", "S"), torch.Tensor.div_, True),
    Foreach("_foreach_div_.ScalarList", ("L", "SL"), torch.Tensor.div_, True),
    Foreach("_foreach_div_.Tensor", ("L", "S"), torch.Tensor.div_, True),
    Foreach("_foreach_addcmul_.Scalar", ("L", "L", "L", "S"), _addcmul, True),
    Foreach("_foreach_addcmul_.ScalarList", ("L", "L", "L", "SL"), _addcmul, True),
    Foreach("_foreach_addcdiv_.Scalar", ("L", "L", "L", "S"), _addcdiv, True),
    Foreach("_foreach_addcdiv_.ScalarList", ("L", "L", "L", "SL"), _addcdiv, True),
    Foreach("_foreach_lerp_.Scalar", ("L", "L", "S"), torch.Tensor.lerp_, True),
    Foreach("_foreach_lerp_.List", ("L", "L", "L"), torch.Tensor.lerp_, True),
    Foreach("_foreach_sqrt_", ("L",), torch.Tensor.sqrt_, True),
    Foreach("_foreach_sqrt", ("L",), torch.sqrt, False, "sqrt.out"),
    Foreach("_foreach_neg_", ("L",), torch.Tensor.neg_, True),
    Foreach("_foreach_zero_", ("L",), torch.Tensor.zero_, True),
]


def register_all() -> None:
    for spec in OPS:
        register(spec.name, _kernel(spec))
