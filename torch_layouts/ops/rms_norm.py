"""RMS norm on device memory: ``_fused_rms_norm`` and ``_fused_rms_norm_backward``.

``torch.nn.functional.rms_norm`` on a device with a ``_fused_rms_norm`` kernel calls it (on the
CPU it runs as a composite of ``pow``, ``mean``, ``rsqrt`` and ``mul``); its autograd formula
calls ``_fused_rms_norm_backward``. Both run layer norm's row kernels in their RMS mode
(``_C._rows_layer_norm(..., rms=True)``: no mean, rstd from the mean of the squares, the input
gradient without the sum of ``grad * weight``), one sweep of the input's tiles where it lies, as
``layer_norm`` does (its plans kept per geometry: ``rows.lookup``). ``rstd`` is float32, kept
like a ``keepdim`` reduction's result. Elsewhere (a layout whose rows the kernels do not take,
a float16 backward, whose float32 ``rstd`` its coordinates do not hold) the same math runs as
device ops in float32, as ATen's composite does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .. import _C
from ..core.layout import BoundLayout
from .elementwise import operand_view
from .layer_norm import _check_shape, _columns, _placed, _row_values, _rows, _write_columns
from .operands import new_tensor, raw, runtime_record
from .reductions import placement, readable, write_placed, write_result
from .registry import register
from .rows import PLANS, ROW_DTYPES, RowPlan, Rows, lookup, remember

# The dtype the norm computes in: ATen's opmath type of every device dtype it takes.
COMPUTE = torch.float32


def _fused_rms_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                    eps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """RMS norm over the trailing ``normalized_shape`` dims: ``x * rstd * weight`` with
    ``rstd = 1 / sqrt(mean(x ** 2) + eps)``; returns (out, rstd).

    >>> x = torch.randn(8, 128)
    >>> out = torch.nn.functional.rms_norm(x.to("spyre"), (128,))
    >>> torch.allclose(out.cpu(), torch.nn.functional.rms_norm(x, (128,)), atol=1e-5)
    True
    """
    normalized_shape = tuple(normalized_shape)
    axis = _check_shape(x, normalized_shape)
    dims = tuple(range(axis, x.dim()))
    eps = torch.finfo(COMPUTE).eps if eps is None else eps  # ATen's default
    if x.numel() == 0:
        stat_shape = tuple(x.shape[:axis]) + (1,) * len(normalized_shape)
        return torch.empty_like(x), x.new_empty(stat_shape, dtype=COMPUTE)
    params = (weight,) if weight is not None else ()
    key, known = lookup("_fused_rms_norm", (normalized_shape, weight is not None), (x, *params))
    if known is not None:
        _offer_forward(known, x, weight, dims)  # the runtime's front had no replay for it
        views, out = known.replay((x, *params))
        return _fused_forward(known.coords, known.rows, views, out, weight is not None, dims, eps)
    given = x
    x, coords, v, _, _ = readable(x, dims)
    shape = _rows(coords, dims)
    if shape is None or x.dtype not in ROW_DTYPES or (weight is not None and weight.dtype != x.dtype):
        return _composite(given, dims, weight, eps)
    named = [("input", x), ("normalized_shape", normalized_shape), ("weight", weight)]
    out = new_tensor(coords, x.device)
    views = [shape.view(v), *([shape.view(operand_view("_fused_rms_norm", named, coords, 2))] if weight is not None
                              else []), shape.view(raw(out).view(coords.shape))]
    remember(key if x is given else None, coords, shape, views, (x, *params))
    result = _fused_forward(coords, shape, views, out, weight is not None, dims, eps)
    if key is not None and key in PLANS:
        _offer_forward(PLANS[key], x, weight, dims)
    return result


def _fused_forward(coords: BoundLayout, shape: Rows, views: list[torch.Tensor], out: torch.Tensor, weighted: bool,
                   dims: tuple[int, ...], eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The row kernels' RMS norm over the rows of the input's buffer; ``views``: the row views of
    the input, the weight if any, and ``out``."""
    w = shape.per_column(views[1]) if weighted else None
    rows = shape.count(coords)
    mean, rstd = torch.empty(rows), torch.empty(rows)
    _C._rows_layer_norm(views[0], views[-1], w, None, eps, mean, rstd, shape.width, shape.real, rms=True)
    place = placement(coords, dims, True, torch.float32, shape, True)
    if place is not None:
        return out, write_placed(place, rstd, out.device)
    return out, write_result(coords, dims, True, shape.rows_like(rstd, coords), out.device)


def _offer_forward(kept: RowPlan, x: torch.Tensor, weight: torch.Tensor | None, dims: tuple[int, ...]) -> None:
    """Offer the runtime's front this forward's replay (``csrc/row_recipes.cpp``'s layer norm in
    its RMS mode; a call passing no eps gets ATen's default)."""
    stats = _placed(kept.coords, dims, True, COMPUTE, kept.rows, True)
    if stats is None:
        return
    weight_cols = _columns(kept.reads[1], kept.rows) if weight is not None else None
    _C._offer_layer_norm(x, weight, None, kept.reads[0], weight_cols, None, runtime_record(kept.coords),
                         kept.reads[-1], kept.rows.count(kept.coords), kept.rows.width, kept.rows.real, stats,
                         rms_eps=torch.finfo(COMPUTE).eps)


def _composite(x: torch.Tensor, dims: tuple[int, ...], weight: torch.Tensor | None,
               eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The norm as device ops in the compute dtype (ATen's composite; the weight applied there)."""
    xf = x.to(COMPUTE)
    rstd = torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)
    out = xf * rstd
    if weight is not None:
        out = out * weight.to(xf.dtype)
    return out.to(x.dtype), rstd


def _fused_rms_norm_backward(grad: torch.Tensor, x: torch.Tensor, normalized_shape: Sequence[int],
                             rstd: torch.Tensor, weight: torch.Tensor | None, output_mask: Sequence[bool]
                             ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(grad_input, grad_weight) of ``_fused_rms_norm``, each None unless asked for in
    ``output_mask``: with ``xhat = x * rstd`` and ``gw = grad * weight``, ``grad_input = rstd *
    (gw - xhat * mean(gw * xhat))`` (over the normalised dims), ``grad_weight = sum(grad * xhat)``
    (over the others)."""
    normalized_shape = tuple(normalized_shape)
    axis = _check_shape(x, normalized_shape)
    dims, others = tuple(range(axis, x.dim())), tuple(range(axis))
    if x.numel() == 0:
        return (torch.empty_like(x) if output_mask[0] else None,
                torch.zeros(normalized_shape, dtype=x.dtype, device=x.device)
                if output_mask[1] and weight is not None else None)
    op = "_fused_rms_norm_backward"
    tensors = (grad, x, rstd) + ((weight,) if weight is not None else ())
    key, known = lookup(op, (normalized_shape, tuple(output_mask)), tensors)
    if known is not None:
        _offer_backward(known, tensors, weight, others, output_mask)  # the front had no replay for it
        views, grad_input = known.replay(tensors, result=bool(output_mask[0]))
        return _fused_backward(known.coords, known.rows, views, grad_input, weight, others, output_mask, x.device)
    given = x
    x, coords, v, _, _ = readable(x, dims)
    shape = _rows(coords, dims)
    if (shape is None or x.dtype != torch.float32 or grad.dtype != x.dtype or rstd.dtype != torch.float32
            or (weight is not None and weight.dtype != x.dtype)):
        return _composite_backward(grad, given, dims, others, rstd, weight, output_mask)
    named = [("grad_out", grad), ("input", x), ("normalized_shape", normalized_shape), ("rstd", rstd),
             ("weight", weight)]
    grad_input = new_tensor(coords, x.device) if output_mask[0] else None
    views = [shape.view(operand_view(op, named, coords, 0)), shape.view(v),
             *(shape.view(operand_view(op, named, coords, i)) for i in (3, 4) if named[i][1] is not None)]
    if grad_input is not None:
        views.append(shape.view(raw(grad_input).view(coords.shape)))
    remember(key if x is given else None, coords, shape, views, tensors)
    result = _fused_backward(coords, shape, views, grad_input, weight, others, output_mask, x.device)
    if key is not None and key in PLANS:
        _offer_backward(PLANS[key], tensors, weight, others, output_mask)
    return result


def _offer_backward(kept: RowPlan, tensors: tuple[torch.Tensor, ...], weight: torch.Tensor | None,
                    others: tuple[int, ...], output_mask: Sequence[bool]) -> None:
    """Offer the runtime's front this backward's replay (layer norm's backward with no mean);
    ``tensors``: grad, input, rstd and the weight, if any, as the call got them."""
    rows, reads = kept.rows, kept.reads
    grad_weight = None
    if output_mask[1] and weight is not None:
        grad_weight = _placed(kept.coords, others, False, weight.dtype, rows, False)
        if grad_weight is None:
            return
    grad_input = bool(output_mask[0])
    _C._offer_layer_norm_backward(list(zip((0, 1, 3, 4), tensors)), reads[0], reads[1], None,
                                  _row_values(reads[2], rows), _columns(reads[3], rows) if weight is not None else None,
                                  runtime_record(kept.coords) if grad_input else None,
                                  reads[-1] if grad_input else None, grad_weight, None, rows.length(kept.coords),
                                  rows.width)


def _fused_backward(coords: BoundLayout, shape: Rows, views: list[torch.Tensor], grad_input: torch.Tensor | None,
                    weight: torch.Tensor | None, others: tuple[int, ...], output_mask: Sequence[bool],
                    device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The row kernels' RMS norm backward; ``views``: the row views of grad, input, rstd, the
    weight if any, and ``grad_input`` if asked for."""
    rstd = shape.per_row(views[2])
    w = None if weight is None else shape.per_column(views[3])
    dgamma = torch.empty(shape.length(coords)) if output_mask[1] and weight is not None else None
    # in RMS mode the kernels take no mean (the argument is not read)
    _C._rows_layer_norm_backward(views[0], views[1], rstd, rstd, w,
                                 views[-1] if grad_input is not None else None, dgamma, None, shape.width, shape.real,
                                 rms=True)
    grad_weight = None if dgamma is None else _write_columns(coords, others, shape, dgamma, weight.dtype, device)
    return grad_input, grad_weight


def _composite_backward(grad: torch.Tensor, x: torch.Tensor, dims: tuple[int, ...], others: tuple[int, ...],
                        rstd: torch.Tensor, weight: torch.Tensor | None, output_mask: Sequence[bool]
                        ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The backward as device ops in the compute dtype."""
    dtype = COMPUTE
    xhat = x.to(dtype) * rstd.to(dtype)
    g = grad.to(dtype)
    grad_input = grad_weight = None
    if output_mask[0]:
        gw = g * weight.to(dtype) if weight is not None else g
        grad_input = (rstd.to(dtype) * (gw - xhat * (gw * xhat).mean(dims, keepdim=True))).to(x.dtype)
    if output_mask[1] and weight is not None:
        grad_weight = (g * xhat).sum(others).to(weight.dtype) if others else (g * xhat).to(weight.dtype)
    return grad_input, grad_weight


def register_all() -> None:
    register("_fused_rms_norm", _fused_rms_norm)
    register("_fused_rms_norm_backward", _fused_rms_norm_backward)

