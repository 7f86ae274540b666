"""Softmax, log-softmax, ``_safe_softmax`` (and their backward) on device memory.

All of them reduce along some host dims and keep the input's layout for the result. Where the
buffer reads as rows (``rows``: the real positions one box, the reduced dims' sticks in host
order), the row kernels compute on the buffers in place. Otherwise the input is read in its own
coordinates (``reductions.readable``), copied into a float32 scratch whose padding holds the
reduction's neutral value (``-inf`` before a max, 0 before a sum), and the result is written
back over the whole buffer before the padding is restored. Float16/bfloat16 inputs compute in
float32, like PyTorch's CPU kernels. A call whose operands were read where they lie offers the
runtime's front its replay (``csrc/row_recipes.cpp``): later calls of its geometry run the row
kernel without Python.
"""

from __future__ import annotations

import math

import torch

from .. import _C
from .elementwise import convert, copy_real, operand_view, output
from ..core.layout import BoundLayout
from .operands import new_tensor, padded_copy, raw, runtime_record
from .reductions import LOW_PRECISION, readable
from .registry import register
from .rows import PLANS, ROW_DTYPES, RowPlan, Rows, lookup, remember, rows


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in LOW_PRECISION else dtype


def rsum(t: torch.Tensor, red: tuple[int, ...]) -> torch.Tensor:
    return t.sum(red, keepdim=True) if red else t.clone()


def _rmax(t: torch.Tensor, red: tuple[int, ...]) -> torch.Tensor:
    return t.amax(red, keepdim=True) if red else t.clone()


def write_values(coords: BoundLayout, values: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    out, target, finish = output(coords, dtype, device)
    if finish is None:
        copy_real(target, values, coords, out)
    else:
        target.copy_(values)
        finish()
    return out


def _offer(op: str, kept: RowPlan, tensors: tuple[torch.Tensor, ...], log: bool, safe: bool = False) -> None:
    """Offer the runtime's front the replay of the call of ``op`` it serves (``tensors``: the
    call's input, or its grad and output), so that it runs later calls of this geometry itself."""
    _C._offer_softmax("aten::" + op, list(enumerate(tensors)), list(kept.reads), runtime_record(kept.coords),
                      kept.rows.width, kept.rows.real, log, safe)


def _softmax_any(op: str, x: torch.Tensor, dim: int, log: bool, safe: bool = False) -> torch.Tensor:
    """Softmax (or log-softmax) along ``dim`` for ``op``'s kernel; ``safe``: rows of only ``-inf`` give 0s."""
    dim = dim % max(x.dim(), 1)
    if x.numel() == 0:
        return torch.empty_like(x)
    key, known = lookup("softmax", (dim, log, safe), (x,))
    if known is not None:
        _offer(op, known, (x,), log, safe)
        (vx, vo), out = known.replay((x,))
        _C._rows_softmax(vx, vo, known.rows.width, log, safe, known.rows.real)
        return out
    given = x
    x, coords, v, red, _ = readable(x, (dim,) if x.dim() else ())
    shape = rows(coords, (dim,) if x.dim() else (), padded=True)
    if shape is not None and x.dtype in ROW_DTYPES:
        out = _fused_softmax(x, coords, v, shape, log, safe, key if x is given else None)
        if key in PLANS:
            _offer(op, PLANS[key], (x,), log, safe)
        return out
    t = padded_copy(v, coords, -math.inf, acc_dtype(x.dtype))
    top = _rmax(t, red)
    t.sub_(top)
    if log:
        t.sub_(rsum(t.exp(), red).log_())
    else:
        t.exp_()
        t.div_(rsum(t, red))
    if safe:
        t.masked_fill_(top == -math.inf, 0)
    return write_values(coords, t, x.dtype, x.device)


def _fused_softmax(x: torch.Tensor, coords: BoundLayout, v: torch.Tensor, shape: Rows, log: bool, safe: bool,
                   key: tuple | None) -> torch.Tensor:
    """Softmax over the rows of ``x``'s buffer in one sweep of the tiles (see ``rows``)."""
    out = new_tensor(coords, x.device)
    views = [shape.view(v), shape.view(raw(out).view(coords.shape))]
    _C._rows_softmax(*views, shape.width, log, safe, shape.real)
    remember(key, coords, shape, views, (x,))
    return out


def softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    return _softmax_any("_softmax", convert(x, torch.float32) if half_to_float else x, dim, log=False)


def log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    return _softmax_any("_log_softmax", convert(x, torch.float32) if half_to_float else x, dim, log=True)


def safe_softmax(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``_safe_softmax`` (attention's math path): softmax, 0 along rows of only ``-inf``."""
    if dtype is not None and dtype != x.dtype:
        x = convert(x, dtype)
    return _softmax_any("_safe_softmax", x, dim, log=False, safe=True)


def _backward(op: str, grad: torch.Tensor, output_: torch.Tensor, dim: int, input_dtype: torch.dtype,
              log: bool) -> torch.Tensor:
    dim = dim % max(output_.dim(), 1)
    if output_.numel() == 0:
        return torch.empty_like(output_, dtype=input_dtype)
    key, known = lookup(op, (dim, input_dtype), (grad, output_))
    if known is not None:
        _offer(op, known, (grad, output_), log)
        views, out = known.replay((grad, output_))
        _C._rows_softmax_backward(*views, known.rows.width, log, known.rows.real)
        return out
    given = output_
    output_, coords, o, red, _ = readable(output_, (dim,) if output_.dim() else ())
    g = operand_view(op, [("grad_output", grad), ("output", output_)], coords, 0)
    shape = rows(coords, (dim,) if output_.dim() else (), padded=True)
    if shape is not None and grad.dtype == output_.dtype == input_dtype and input_dtype in ROW_DTYPES:
        out = new_tensor(coords, output_.device)
        views = [shape.view(g), shape.view(o), shape.view(raw(out).view(coords.shape))]
        _C._rows_softmax_backward(*views, shape.width, log, shape.real)
        remember(key if output_ is given else None, coords, shape, views, (grad, output_))
        if key in PLANS:
            _offer(op, PLANS[key], (grad, output_), log)
        return out
    acc = acc_dtype(output_.dtype)
    gf = padded_copy(g, coords, 0, acc)
    of = padded_copy(o, coords, 0, acc)
    if log:
        result = gf - of.exp() * rsum(gf, red)
    else:
        result = of * (gf - rsum(gf * of, red))
    return write_values(coords, result, input_dtype, output_.device)


def softmax_backward(grad: torch.Tensor, output_: torch.Tensor, dim: int, input_dtype: torch.dtype) -> torch.Tensor:
    return _backward("_softmax_backward_data", grad, output_, dim, input_dtype, log=False)


def log_softmax_backward(grad: torch.Tensor, output_: torch.Tensor, dim: int, input_dtype: torch.dtype
                         ) -> torch.Tensor:
    return _backward("_log_softmax_backward_data", grad, output_, dim, input_dtype, log=True)


def register_all() -> None:
    register("_softmax", softmax)
    register("_log_softmax", log_softmax)
    register("_safe_softmax", safe_softmax)
    register("_softmax_backward_data", softmax_backward)
    register("_log_softmax_backward_data", log_softmax_backward)
