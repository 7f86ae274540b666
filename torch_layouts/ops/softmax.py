"""Softmax, log-softmax (and their backward) and layer norm on device memory.

All of them reduce along some host dims and keep the input's layout for the result:
the input is read in its own coordinates (``reductions.readable``), copied into a
float32 scratch whose padding holds the reduction's neutral value (``-inf`` before a
max, 0 before a sum), and the result is written back over the whole buffer before the
padding is restored. Float16/bfloat16 inputs compute in float32, like PyTorch's CPU
kernels. ``native_layer_norm``'s mean and rstd are reductions over the normalised
dims, laid out as ``keepdim`` reductions (sparse when the stick dim is normalised).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .elementwise import convert, copy_real, operand_view, output
from ..core.layout import BoundLayout
from .operands import fill_pad, padded_copy
from .reductions import LOW_PRECISION, readable, write_result
from .registry import register


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in LOW_PRECISION else dtype


def _rsum(t: torch.Tensor, red: tuple[int, ...]) -> torch.Tensor:
    return t.sum(red, keepdim=True) if red else t.clone()


def _rmax(t: torch.Tensor, red: tuple[int, ...]) -> torch.Tensor:
    return t.amax(red, keepdim=True) if red else t.clone()


def _write(coords: BoundLayout, values: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    out, target, finish = output(coords, dtype, device)
    if finish is None:
        copy_real(target, values, coords, out)
    else:
        target.copy_(values)
        finish()
    return out


def _softmax_any(x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    dim = dim % max(x.dim(), 1)
    if x.numel() == 0:
        return torch.empty_like(x)
    x, coords, v, red, _ = readable(x, (dim,) if x.dim() else ())
    t = padded_copy(v, coords, -math.inf, _acc(x.dtype))
    t.sub_(_rmax(t, red))
    if log:
        t.sub_(_rsum(t.exp(), red).log_())
    else:
        t.exp_()
        t.div_(_rsum(t, red))
    return _write(coords, t, x.dtype, x.device)


def softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    return _softmax_any(convert(x, torch.float32) if half_to_float else x, dim, log=False)


def log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    return _softmax_any(convert(x, torch.float32) if half_to_float else x, dim, log=True)


def _backward(op: str, grad: torch.Tensor, output_: torch.Tensor, dim: int, input_dtype: torch.dtype,
              log: bool) -> torch.Tensor:
    dim = dim % max(output_.dim(), 1)
    if output_.numel() == 0:
        return torch.empty_like(output_, dtype=input_dtype)
    output_, coords, o, red, _ = readable(output_, (dim,) if output_.dim() else ())
    g = operand_view(op, [("grad_output", grad), ("output", output_)], coords, 0)
    acc = _acc(output_.dtype)
    gf = padded_copy(g, coords, 0, acc)
    of = padded_copy(o, coords, 0, acc)
    if log:
        result = gf - of.exp() * _rsum(gf, red)
    else:
        result = of * (gf - _rsum(gf * of, red))
    return _write(coords, result, input_dtype, output_.device)


def softmax_backward(grad: torch.Tensor, output_: torch.Tensor, dim: int, input_dtype: torch.dtype) -> torch.Tensor:
    return _backward("_softmax_backward_data", grad, output_, dim, input_dtype, log=False)


def log_softmax_backward(grad: torch.Tensor, output_: torch.Tensor, dim: int, input_dtype: torch.dtype
                         ) -> torch.Tensor:
    return _backward("_log_softmax_backward_data", grad, output_, dim, input_dtype, log=True)


def native_layer_norm(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer norm over the trailing ``normalized_shape`` dims; returns (out, mean, rstd)."""
    normalized_shape = tuple(normalized_shape)
    axis = x.dim() - len(normalized_shape)
    if axis < 0 or tuple(x.shape[axis:]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(x.shape)}")
    dims = tuple(range(axis, x.dim()))
    count = math.prod(normalized_shape)
    stat_shape = tuple(x.shape[:axis]) + (1,) * len(normalized_shape)
    if x.numel() == 0:
        empty = torch.empty_like(x)
        return empty, x.new_empty(stat_shape), x.new_empty(stat_shape)
    named = [("input", x), ("normalized_shape", normalized_shape), ("weight", weight), ("bias", bias)]
    x, coords, v, red, _ = readable(x, dims)
    named[0] = ("input", x)
    t = padded_copy(v, coords, 0, _acc(x.dtype))
    mean = _rsum(t, red).div_(count)
    t.sub_(mean)
    fill_pad(t, coords, 0)
    rstd = _rsum(t * t, red).div_(count).add_(eps).rsqrt_()
    t.mul_(rstd)
    if weight is not None:
        t.mul_(operand_view("native_layer_norm", named, coords, 2))
    if bias is not None:
        t.add_(operand_view("native_layer_norm", named, coords, 3))
    out = _write(coords, t, x.dtype, x.device)
    stats = [write_result(coords, dims, True, s.to(x.dtype), x.device) for s in (mean, rstd)]
    return out, stats[0], stats[1]


def register_all() -> None:
    register("_softmax", softmax)
    register("_log_softmax", log_softmax)
    register("_softmax_backward_data", softmax_backward)
    register("_log_softmax_backward_data", log_softmax_backward)
    register("native_layer_norm", native_layer_norm)
