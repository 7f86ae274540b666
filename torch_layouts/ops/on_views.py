"""CPU kernels on strided views of device buffers: an op whose CPU out= overload (or functional
form) computes straight from where its operands lie, its recipe offered to the runtime's front,
which replays later calls of a geometry without Python (losses, ``logsumexp``).

>>> x = torch.randn(4, 3)
>>> out = on_views(torch.ops.aten.logsumexp.out, [x.to("spyre"), [1], False], (0,),
...                [default_coords((4,), x.dtype)], torch.device("spyre", 0))[0]
>>> torch.equal(out.cpu(), torch.logsumexp(x, 1))
True
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import torch

from .. import _C
from ..core.layout import BoundLayout
from .operands import Read, common_reads, default_coords, host_read, new_tensor, raw_view, rowmajor, runtime_record
from .registry import aten_overload, register
from .view_copy import strided_or_staged

__all__ = ["CPU_KERNELS", "common_device", "cpu_kernel", "finish", "meta_results", "on_views", "on_views_kept",
           "register_all", "split"]


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


def common_device(tensors: Sequence[torch.Tensor]) -> torch.device:
    """The one device of ``tensors``; PyTorch's error where they lie on two."""
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        first, second = sorted(map(str, devices))[:2]
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{first} and {second}!")
    return devices.pop()


def split(schema: torch._C.FunctionSchema, values: list) -> tuple[list, dict]:
    """``values`` (in ``schema``'s order) as a Python call takes them: positional, then keyword-only."""
    positional = [v for a, v in zip(schema.arguments, values) if not a.kwarg_only]
    return positional, {a.name: v for a, v in zip(schema.arguments, values) if a.kwarg_only}


def _call(op: torch._ops.OpOverload, values: list) -> object:
    args, kwargs = split(op._schema, values)
    return op(*args, **kwargs)


def _contiguous(t: torch.Tensor) -> bool:
    """``t``'s strided view (if any) reads it row-major."""
    r = host_read(t)
    return r is not None and tuple(r[1]) == rowmajor(tuple(r[0]))


def _empty_view(t: torch.Tensor) -> tuple[torch.Tensor, Read, None]:
    """An empty tensor's view, as ``strided_or_staged`` gives a view (it holds no element to place)."""
    return t, (tuple(t.shape), rowmajor(tuple(t.shape)), 0), None


def _kept(values: object, kept: Sequence[bool]) -> list:
    """A functional op's results (one or a tuple), those ``kept`` flags (every one without it)."""
    values = values if isinstance(values, tuple) else (values,)
    return [v for i, v in enumerate(values) if not kept or kept[i]]


def on_views(op: torch._ops.OpOverload, args: list, inputs: tuple[int, ...], results: list[BoundLayout],
             device: torch.device, refine: bool = False, contiguous: Collection[int] = (),
             overrides: Sequence[tuple[int, object]] = (), kept: Sequence[bool] = ()) -> tuple[torch.Tensor, ...]:
    """``op`` (a CPU ``out=`` overload, or a functional one whose values are copied) on strided
    views of the device tensors at ``inputs`` of ``args``, writing new device tensors in the
    coordinates ``results`` through their views (both ``view_copy.strided_or_staged``; with
    ``refine``, an elementwise op's or a whole loss's operands in one refinement of their shape
    where they have one, ``_refined``); the recipe is offered to the runtime's front. ``args``:
    every argument of the op but its out= ones, in its schema's order; ``results``, one for each of the op's results, or, for a
    functional op, for each that ``kept`` (if given, a flag per return) keeps. An input at an
    index in ``contiguous`` whose view is not row-major is read from a row-major copy (for a CPU
    kernel that would copy it so).
    ``overrides``: (argument, value) pairs the recipe's compute takes that the called op does not
    (the runtime's front inserts them). An empty operand is read or written as its empty view."""
    common_device([a for a in args if isinstance(a, torch.Tensor)])
    outs = [new_tensor(coords, device) for coords in results]
    refined = _refined(args, inputs, outs[0]) if refine and len(outs) == 1 else None
    if refined is not None:
        reads, written = refined[0], [(outs[0], refined[1], None)]
    else:
        reads = [(i, strided_or_staged(args[i], True, staged=i in contiguous and not _contiguous(args[i]),
                                       row_major=i in contiguous) if args[i].numel() else _empty_view(args[i]))
                 for i in inputs if args[i] is not None]
        written = [strided_or_staged(o, False) if o.numel() else _empty_view(o) for o in outs]
    call = list(args)
    for i, (t, r, _) in reads:
        call[i] = raw_view(t, *r)
    if any(a.is_out for a in op._schema.arguments):
        _call(op, call + [raw_view(t, *r) for t, r, _ in written])
    else:  # a functional op: its values copied into the results' views
        for v, (t, r, _) in zip(_kept(_call(op, call), kept), written):
            raw_view(t, *r).copy_(v)
    finish(args, outs, [runtime_record(coords) for coords in results], reads, written,
           op._schema.name + ("" if op._overloadname == "default" else f".{op._overloadname}"), overrides=overrides,
           kept=kept)
    return tuple(outs)


def on_views_kept(op: torch._ops.OpOverload, args: list, inputs: tuple[int, ...],
                  results: Sequence[BoundLayout | None], device: torch.device, **options: Any
                  ) -> tuple[torch.Tensor | None, ...]:
    """``on_views`` of a functional ``op`` some of whose results are left out (an
    ``output_mask``'s, a bias gradient without a bias): ``results`` holds None for those, and so
    does the value returned; ``options``: ``on_views``'s."""
    kept = [r is not None for r in results]
    outs = iter(on_views(op, args, inputs, [r for r in results if r is not None], device,
                         kept=kept if not all(kept) else (), **options))
    return tuple(next(outs) if k else None for k in kept)


def finish(args: list, outs: list[torch.Tensor], records: list, reads: Iterable[tuple[int, tuple]], written: list,
           compute: str, classes: int = -1, offer: bool = True, overrides: Sequence[tuple[int, object]] = (),
           kept: Sequence[bool] = ()) -> None:
    """After a compute on the views (``on_views``, ``losses._on_rows``): each staged result (a
    ``strided_or_staged`` triple of ``written``) copied into its tensor of ``outs``, then, with
    ``offer``, the call's recipe offered to the runtime's front: ``compute`` on the reads' views
    (``(argument, triple)`` pairs) and the results' (``records``: their layout records;
    ``classes``: an nll_loss row view's real classes a row; ``overrides``, ``kept``: as
    ``on_views``)."""
    for o, (t, _, staged) in zip(outs, written):
        if staged is not None:
            o.copy_(t)
    if not offer:
        return
    offered = [(i, *r) + (() if staged is None else (runtime_record(staged), 0)) for i, (_, r, staged) in reads]
    _C._offer_recipe([a if isinstance(a, torch.Tensor) else None for a in args], offered, records,
                     [r for _, r, _ in written], list(overrides), compute,
                     staged_outs=[None if staged is None else runtime_record(staged) for _, _, staged in written],
                     classes=classes, kept=list(kept))


def _is_tensor(argument: torch._C.Argument) -> bool:
    kind = argument.type
    return isinstance(kind, torch.TensorType) or (isinstance(kind, torch.OptionalType)
                                                  and isinstance(kind.getElementType(), torch.TensorType))


def meta_results(op: torch._ops.OpOverload, values: list) -> tuple:
    """``op``'s results (a tuple; None where it leaves one out) on meta copies of ``values`` (its
    arguments in its schema's order): their shapes and dtypes. Where the meta kernel rejects
    them, the CPU kernel's own error, raised on CPU copies of the operands."""
    try:
        metas = _call(op, [torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v
                           for v in values])
    except Exception:
        _call(op, [v.cpu() if isinstance(v, torch.Tensor) else v for v in values])  # the CPU's error
        raise
    return metas if isinstance(metas, tuple) else (metas,)


def cpu_kernel(functional: torch._ops.OpOverload, out: torch._ops.OpOverload) -> Callable[..., Any]:
    """A device kernel for ``functional`` that runs ``out``, its CPU out= overload, on the device
    tensors' views (``on_views``), each result in the default layout of its shape (shapes and
    dtypes from the meta kernel; an error in a call that plans is the CPU kernel's own on CPU
    copies of the operands; a replayed call's, the CPU kernel's on the views).

    >>> argmax = cpu_kernel(torch.ops.aten.argmax.default, torch.ops.aten.argmax.out)
    >>> x = torch.randn(4, 70)
    >>> torch.equal(argmax(x.to("spyre"), 1).cpu(), x.argmax(1))
    True
    """
    schema = functional._schema
    inputs = tuple(i for i, a in enumerate(schema.arguments) if _is_tensor(a))

    def kernel(*args: Any, **kwargs: Any) -> Any:
        values = list(args) + [kwargs.get(a.name, a.default_value) for a in schema.arguments[len(args):]]
        tensors = [values[i] for i in inputs if values[i] is not None]
        results = [default_coords(tuple(m.shape), m.dtype) for m in meta_results(functional, values)]
        try:
            done = on_views(out, values, inputs, results, tensors[0].device)
        except Exception:  # a value the kernel rejects (an index out of range): the CPU's own message
            _call(functional, [v.cpu() if isinstance(v, torch.Tensor) else v for v in values])
            raise
        return done if len(done) > 1 else done[0]
    return kernel


# Ops run as their CPU out= overloads on the views (functional overload -> out= overload): each
# took the CPU fallback (copies of every operand each way) before.
CPU_KERNELS = {
    "logsumexp": "logsumexp.out", "max": "max.unary_out", "min": "min.unary_out", "topk": "topk.values",
    "sort.stable": "sort.values_stable",
    "var.correction": "var.correction_out", "std.correction": "std.correction_out",
    "linalg_vector_norm": "linalg_vector_norm.out", "gather": "gather.out",
    "scatter.src": "scatter.src_out", "scatter.value": "scatter.value_out", "scatter_add": "scatter_add.out",
    "prod": "prod.out", "prod.dim_int": "prod.int_out", "nansum": "nansum.out", "aminmax": "aminmax.out",
    "logcumsumexp": "logcumsumexp.out", "cummax": "cummax.out", "cummin": "cummin.out", "cumprod": "cumprod.out",
    "tril": "tril.out", "triu": "triu.out", "flip": "flip.out", "roll": "roll.out", "kthvalue": "kthvalue.values",
    "median": "median.out", "median.dim": "median.dim_values", "mode": "mode.values",
    # pooling and upsampling (NCHW on the buffers' views), and their backward
    "avg_pool2d": "avg_pool2d.out",
    "_adaptive_avg_pool2d": "_adaptive_avg_pool2d.out", "adaptive_max_pool2d": "adaptive_max_pool2d.out",
    "upsample_nearest2d": "upsample_nearest2d.out", "upsample_bilinear2d": "upsample_bilinear2d.out",
    "avg_pool2d_backward": "avg_pool2d_backward.grad_input",
    "_adaptive_avg_pool2d_backward": "_adaptive_avg_pool2d_backward.out",
    "adaptive_max_pool2d_backward": "adaptive_max_pool2d_backward.grad_input",
    "upsample_nearest2d_backward": "upsample_nearest2d_backward.grad_input",
    "upsample_bilinear2d_backward": "upsample_bilinear2d_backward.grad_input",
}


def register_all() -> None:
    for functional, out in CPU_KERNELS.items():
        register(functional, cpu_kernel(aten_overload(functional), aten_overload(out)))
