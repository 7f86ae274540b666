"""CPU kernels on strided views of device buffers: an op whose CPU out= overload (or functional
form) computes straight from where its operands lie, its recipe offered to the runtime's front,
which replays later calls of a geometry without Python (losses, ``logsumexp``).

>>> from torch_layouts.ops.operands import default_coords
>>> x = torch.randn(4, 3)
>>> out = on_views(torch.ops.aten.logsumexp.out, [x.to("spyre"), [1], False], (0,),
...                [default_coords((4,), x.dtype)], torch.device("spyre", 0))[0]
>>> torch.equal(out.cpu(), torch.logsumexp(x, 1))
True
"""

from __future__ import annotations

import torch

from .. import _C
from ..core.layout import BoundLayout
from .operands import Read, common_reads, host_read, new_tensor, raw_view, runtime_record
from .view_copy import strided_or_staged

__all__ = ["on_views"]


def _refined(args: list, inputs: tuple[int, ...], out: torch.Tensor) -> tuple[list, Read] | None:
    """For an op whose one result ``out`` is its inputs' shape (or 0-dim: a loss over every
    element), views of its inputs at ``inputs`` (0-dim ones: their element) and of ``out`` in one
    refinement of that shape (``common_reads``: sticks as a dim of their own), so that it computes
    on the buffers where they lie; None where some operand has no such view (padding, broadcasting)."""
    shaped = [i for i in inputs if args[i] is not None and args[i].dim() > 0]
    if not shaped:
        return None
    reads = {i: host_read(args[i]) for i in inputs if args[i] is not None and args[i].dim() == 0}
    if out.dim() == 0:  # the inputs in one refinement among themselves, the result its element
        first, view = args[shaped[0]], host_read(out)
        pairs = [common_reads(first, args[i]) for i in shaped[1:]]
        if view is None or not pairs or any(p is None or p[0] != pairs[0][0] for p in pairs):
            return None
        reads.update({shaped[0]: pairs[0][0], **{i: p[1] for i, p in zip(shaped[1:], pairs)}})
    else:
        pairs = [common_reads(args[i], out) for i in shaped]
        if any(p is None or p[1] != pairs[0][1] for p in pairs):
            return None
        reads.update({i: p[0] for i, p in zip(shaped, pairs)})
        view = pairs[0][1]
    if any(r is None for r in reads.values()):
        return None
    return [(i, (args[i], r, None)) for i, r in reads.items()], view


def on_views(op: torch._ops.OpOverload, args: list, inputs: tuple[int, ...], results: list[BoundLayout],
              device: torch.device, refine: bool = False) -> tuple[torch.Tensor, ...]:
    """``op`` (a CPU ``out=`` overload, or a functional one whose values are copied) on strided
    views of the device tensors at ``inputs`` of ``args``, writing new device tensors in the
    coordinates ``results`` through their views (both ``view_copy.strided_or_staged``; with
    ``refine``, an elementwise op's or a whole loss's operands in one refinement of their shape
    where they have one, ``_refined``); the recipe is offered to the runtime's front. Inputs that
    no read holds go through CPU copies."""
    devices = {a.device for a in args if isinstance(a, torch.Tensor)}
    if len(devices) > 1:
        first, second = sorted(map(str, devices))[:2]
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{first} and {second}!")
    outs = [new_tensor(coords, device) for coords in results]
    refined = _refined(args, inputs, outs[0]) if refine and len(outs) == 1 else None
    if refined is not None:
        reads, written = refined[0], [(outs[0], refined[1], None)]
    else:
        reads = [(i, strided_or_staged(args[i], True)) for i in inputs if args[i] is not None]
        written = [strided_or_staged(o, False) for o in outs]
    names = [a.name for a in op._schema.arguments if a.is_out]
    if any(r is None for _, r in reads) or any(w is None for w in written):
        values = op.overloadpacket.default(*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
        values = values if isinstance(values, tuple) else (values,)
        return tuple(o.copy_(v) for o, v in zip(outs, values))
    call = list(args)
    for i, (t, r, _) in reads:
        call[i] = raw_view(t, *r)
    if names:
        op(*call, **{name: raw_view(t, *r) for name, (t, r, _) in zip(names, written)})
    else:  # a functional op: its values copied into the results' views
        values = op(*call)
        for v, (t, r, _) in zip(values if isinstance(values, tuple) else (values,), written):
            raw_view(t, *r).copy_(v)
    for o, (t, _, staged) in zip(outs, written):
        if staged is not None:
            o.copy_(t)
    offered = [(i, *r) + (() if staged is None else (runtime_record(staged), 0)) for i, (_, r, staged) in reads]
    _C._offer_recipe([a if isinstance(a, torch.Tensor) else None for a in args], offered,
                     [runtime_record(coords) for coords in results], [r for _, r, _ in written],
                     [], op._schema.name + ("" if op._overloadname == "default" else f".{op._overloadname}"),
                     staged_outs=[None if staged is None else runtime_record(staged) for _, _, staged in written])
    return tuple(outs)
