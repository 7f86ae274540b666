"""Layer norm on device memory: ``native_layer_norm`` and ``native_layer_norm_backward``.

Both read the input in its own coordinates (``reductions.readable``) and compute in a
float32 scratch (like PyTorch's CPU kernels for float16/bfloat16) whose padding holds 0
before every sum. The forward's mean and rstd are reductions over the normalised dims,
laid out as ``keepdim`` reductions (sparse when the stick dim is normalised); the backward
reads them in place, broadcast along those dims. The weight and bias gradients are sums
over the other dims, laid out like a reduction's result. A call whose operands were read where
they lie offers the runtime's front its replay (``csrc/row_recipes.cpp``): later calls of its
geometry run the row kernels without Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .. import _C
from .elementwise import operand_view
from ..core.layout import BoundLayout
from .operands import Read, fill_pad, new_tensor, padded_copy, raw, reduced_dims, runtime_record
from .reductions import placement, readable, reduce_view, write_placed, write_result
from .registry import register
from .rows import PLANS, ROW_DTYPES, RowPlan, Rows, lookup, remember, rows, tail_rows
from .softmax import acc_dtype, rsum, write_values


def _check_shape(x: torch.Tensor, normalized_shape: tuple[int, ...]) -> int:
    """The first normalised dim of ``x``; ATen's error when the trailing dims do not match."""
    axis = x.dim() - len(normalized_shape)
    if axis < 0 or tuple(x.shape[axis:]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(x.shape)}")
    return axis


def _rows(coords: BoundLayout, dims: tuple[int, ...]) -> Rows | None:
    """The rows layer norm runs on: every row of the buffer, whose real elements may end within its
    last run (a padded stick: ``Rows.tail``; also where they are one box, 10 float32 columns of
    a stick); not a box of rows (its statistics are placed by rows of the whole buffer)."""
    shape = rows(coords, dims, padded=True)
    if shape is not None and shape.box is not None:
        shape = tail_rows(coords, shape.order, shape.width)
    return shape if shape is not None and shape.box is None else None


def native_layer_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer norm over the trailing ``normalized_shape`` dims; returns (out, mean, rstd)."""
    normalized_shape = tuple(normalized_shape)
    axis = _check_shape(x, normalized_shape)
    dims = tuple(range(axis, x.dim()))
    count = math.prod(normalized_shape)
    stat_shape = tuple(x.shape[:axis]) + (1,) * len(normalized_shape)
    if x.numel() == 0:
        empty = torch.empty_like(x)
        return empty, x.new_empty(stat_shape), x.new_empty(stat_shape)
    params = tuple(p for p in (weight, bias) if p is not None)
    key, known = lookup("native_layer_norm", (normalized_shape, weight is not None, bias is not None), (x, *params))
    if known is not None:
        _offer_forward(known, x, weight, bias, dims)  # the runtime's front had no replay for it
        views, out = known.replay((x, *params))
        return _fused_forward(known.coords, known.rows, views, out, weight is not None, bias is not None, dims, eps)
    named = [("input", x), ("normalized_shape", normalized_shape), ("weight", weight), ("bias", bias)]
    given = x
    x, coords, v, red, _ = readable(x, dims)
    named[0] = ("input", x)
    shape = _rows(coords, dims)
    if shape is not None and x.dtype in ROW_DTYPES and all(p is None or p.dtype == x.dtype for p in (weight, bias)):
        out = new_tensor(coords, x.device)
        views = [shape.view(v), *(shape.view(operand_view("native_layer_norm", named, coords, i))
                                  for i in (2, 3) if named[i][1] is not None), shape.view(raw(out).view(coords.shape))]
        remember(key if x is given else None, coords, shape, views, (x, *params))
        result = _fused_forward(coords, shape, views, out, weight is not None, bias is not None, dims, eps)
        if key is not None and key in PLANS:
            _offer_forward(PLANS[key], x, weight, bias, dims)
        return result
    t = padded_copy(v, coords, 0, acc_dtype(x.dtype))
    mean = rsum(t, red).div_(count)
    t.sub_(mean)
    fill_pad(t, coords, 0)
    rstd = rsum(t * t, red).div_(count).add_(eps).rsqrt_()
    t.mul_(rstd)
    if weight is not None:
        t.mul_(operand_view("native_layer_norm", named, coords, 2))
    if bias is not None:
        t.add_(operand_view("native_layer_norm", named, coords, 3))
    out = write_values(coords, t, x.dtype, x.device)
    stats = [write_result(coords, dims, True, s.to(x.dtype), x.device) for s in (mean, rstd)]
    return out, stats[0], stats[1]


def _fused_forward(coords: BoundLayout, shape: Rows, views: list[torch.Tensor], out: torch.Tensor, weighted: bool,
                   biased: bool, dims: tuple[int, ...], eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer norm over the rows of the input's buffer in one sweep of the tiles (see ``rows``);
    ``views``: the row views of the input, the weight and bias present, and ``out``."""
    params = iter(shape.per_column(rv) for rv in views[1:-1])
    w, b = (next(params) if present else None for present in (weighted, biased))
    mean, rstd = (torch.empty(shape.count(coords)) for _ in range(2))
    _C._rows_layer_norm(views[0], views[-1], w, b, eps, mean, rstd, shape.width, shape.real)
    place = placement(coords, dims, True, out.dtype, shape, True)
    stats = [write_placed(place, s, out.device) if place is not None else
             write_result(coords, dims, True, shape.rows_like(s.to(out.dtype), coords), out.device) for s in (mean, rstd)]
    return out, stats[0], stats[1]


def _columns(read: Read, rows: Rows) -> Read:
    """A row view's values along one row (``Rows.per_column``'s view)."""
    k = len(rows.order) - rows.width
    return read[0][k:], read[1][k:], read[2]


def _row_values(read: Read, rows: Rows) -> Read:
    """A row view's one value per row (``Rows.per_row``'s view)."""
    k = len(rows.order) - rows.width
    return read[0][:k], read[1][:k], read[2]


def _placed(coords: BoundLayout, dims: tuple[int, ...], keepdim: bool, dtype: torch.dtype, rows: Rows,
            per_row: bool) -> tuple | None:
    """Where ``write_placed`` puts a row kernel's vector, for the runtime's front (None: moved)."""
    place = placement(coords, dims, keepdim, dtype, rows, per_row)
    return None if place is None else (runtime_record(place.out_coords), list(place.pieces))


def _offer_forward(kept: RowPlan, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   dims: tuple[int, ...]) -> None:
    """Offer the runtime's front this forward's replay (``csrc/row_recipes.cpp``)."""
    stats = _placed(kept.coords, dims, True, x.dtype, kept.rows, True)
    if stats is None:
        return
    params = iter(kept.reads[1:-1])
    weight_cols, bias_cols = (_columns(next(params), kept.rows) if p is not None else None for p in (weight, bias))
    _C._offer_layer_norm(x, weight, bias, kept.reads[0], weight_cols, bias_cols, runtime_record(kept.coords),
                         kept.reads[-1], kept.rows.count(kept.coords), kept.rows.width, kept.rows.real, stats)


def _offer_backward(kept: RowPlan, tensors: tuple[torch.Tensor, ...], weight: torch.Tensor | None,
                    bias: torch.Tensor | None, others: tuple[int, ...], output_mask: Sequence[bool]) -> None:
    """Offer the runtime's front this backward's replay (``csrc/row_recipes.cpp``); ``tensors``:
    grad, input, mean, rstd and the weight, if any, as ``native_layer_norm_backward`` got them."""
    rows, reads = kept.rows, kept.reads
    columns = []
    for wanted, p in ((output_mask[1] and weight is not None, weight), (output_mask[2] and bias is not None, bias)):
        columns.append(_placed(kept.coords, others, False, p.dtype, rows, False) if wanted else None)
        if wanted and columns[-1] is None:
            return
    grad_input = bool(output_mask[0])
    own = [(i, t) for i, t in zip((0, 1, 3, 4, 5), tensors)]
    _C._offer_layer_norm_backward(own, reads[0], reads[1], _row_values(reads[2], rows), _row_values(reads[3], rows),
                                  _columns(reads[4], rows) if weight is not None else None,
                                  runtime_record(kept.coords) if grad_input else None,
                                  reads[-1] if grad_input else None, *columns, rows.length(kept.coords), rows.width)


def native_layer_norm_backward(grad: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int],
                               mean: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None,
                               bias: torch.Tensor | None, output_mask: Sequence[bool]
                               ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(grad_input, grad_weight, grad_bias) of ``native_layer_norm``, each None unless asked
    for in ``output_mask``: with ``xhat = (x - mean) * rstd`` and ``gw = grad * weight``,
    ``grad_input = rstd / N * (N * gw - sum(gw) - xhat * sum(gw * xhat))`` (sums over the
    normalised dims), ``grad_weight = sum(grad * xhat)``, ``grad_bias = sum(grad)`` (over the others)."""
    normalized_shape = tuple(normalized_shape)
    axis = _check_shape(x, normalized_shape)
    dims = tuple(range(axis, x.dim()))
    others = tuple(range(axis))
    count = math.prod(normalized_shape)
    if x.numel() == 0:
        empty = [torch.zeros(normalized_shape, dtype=x.dtype, device=x.device) for _ in range(2)]
        return (torch.empty_like(x) if output_mask[0] else None, empty[0] if output_mask[1] and weight is not None
                else None, empty[1] if output_mask[2] and bias is not None else None)
    op = "native_layer_norm_backward"
    tensors = (grad, x, mean, rstd) + ((weight,) if weight is not None else ())
    key, known = lookup(op, (normalized_shape, tuple(output_mask), bias is not None), tensors)
    if known is not None:
        _offer_backward(known, tensors, weight, bias, others, output_mask)  # the front had no replay for it
        views, grad_input = known.replay(tensors, result=bool(output_mask[0]))
        return _fused_backward(known.coords, known.rows, views, grad_input, weight, bias, others, output_mask,
                               x.device)
    given = x
    x, coords, v, red, _ = readable(x, dims)
    named = [("grad_out", grad), ("input", x), ("normalized_shape", normalized_shape), ("mean", mean),
             ("rstd", rstd), ("weight", weight)]
    shape = _rows(coords, dims)
    if (shape is not None and x.dtype in ROW_DTYPES and grad.dtype == x.dtype
            and all(p is None or p.dtype == x.dtype for p in (weight, bias))):
        grad_input = new_tensor(coords, x.device) if output_mask[0] else None
        views = [shape.view(operand_view(op, named, coords, 0)), shape.view(v),
                 *(shape.view(operand_view(op, named, coords, i)) for i in (3, 4, 5) if named[i][1] is not None)]
        if grad_input is not None:
            views.append(shape.view(raw(grad_input).view(coords.shape)))
        remember(key if x is given else None, coords, shape, views, tensors)
        result = _fused_backward(coords, shape, views, grad_input, weight, bias, others, output_mask, x.device)
        if key is not None and key in PLANS:
            _offer_backward(PLANS[key], tensors, weight, bias, others, output_mask)
        return result
    acc = acc_dtype(x.dtype)
    g = padded_copy(operand_view(op, named, coords, 0), coords, 0, acc)
    r = operand_view(op, named, coords, 4).to(acc)
    xhat = padded_copy(v, coords, 0, acc).sub_(operand_view(op, named, coords, 3)).mul_(r)
    fill_pad(xhat, coords, 0)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        gw = g * operand_view(op, named, coords, 5) if weight is not None else g
        dx = gw * count
        dx.sub_(rsum(gw, red)).sub_(xhat * rsum(gw * xhat, red)).mul_(r / count)
        grad_input = write_values(coords, dx, x.dtype, x.device)
    batch = reduced_dims(coords, frozenset(others))
    if output_mask[1] and weight is not None:
        values = reduce_view(g * xhat, batch, "sum", x.device)
        grad_weight = write_result(coords, others, False, values.to(weight.dtype), x.device)
    if output_mask[2] and bias is not None:
        values = reduce_view(g, batch, "sum", x.device)
        grad_bias = write_result(coords, others, False, values.to(bias.dtype), x.device)
    return grad_input, grad_weight, grad_bias


def _fused_backward(coords: BoundLayout, shape: Rows, views: list[torch.Tensor], grad_input: torch.Tensor | None,
                    weight: torch.Tensor | None, bias: torch.Tensor | None, others: tuple[int, ...],
                    output_mask: Sequence[bool], device: torch.device
                    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Layer norm backward over the rows of the buffers in one sweep of the tiles (see ``rows``);
    ``views``: the row views of grad, input, mean, rstd, the weight if any, and ``grad_input``
    if asked for."""
    mean, rstd = shape.per_row(views[2]), shape.per_row(views[3])
    w = None if weight is None else shape.per_column(views[4])
    length = shape.length(coords)
    sums = [torch.empty(length) if want else None
            for want in (output_mask[1] and weight is not None, output_mask[2] and bias is not None)]
    _C._rows_layer_norm_backward(views[0], views[1], mean, rstd, w, views[-1] if grad_input is not None else None,
                                 *sums, shape.width, shape.real)
    grad_weight, grad_bias = (None if s is None else _write_columns(coords, others, shape, s, p.dtype, device)
                              for s, p in zip(sums, (weight, bias)))
    return grad_input, grad_weight, grad_bias


def _write_columns(coords: BoundLayout, others: tuple[int, ...], shape: Rows, sums: torch.Tensor,
                   dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A weight or bias gradient (float32 per-column ``sums``) laid out like a reduction's result."""
    place = placement(coords, others, False, dtype, shape, False)
    if place is not None:
        return write_placed(place, sums, device)
    return write_result(coords, others, False, shape.columns_like(sums.to(dtype), coords), device)


def register_all() -> None:
    register("native_layer_norm", native_layer_norm)
    register("native_layer_norm_backward", native_layer_norm_backward)
