"""Torch-Spyre's custom ops on ``torch.ops.spyre``, registered with ``torch.library`` (fake kernels included).

* ``restickify(x, dim_order=None)``: a copy of a spyre tensor in Spyre's layout with that
  dim_order (default: the default layout), e.g. ``torch.ops.spyre.restickify(w, [1, 0])``.
* ``overwrite(input, output, dims, offsets)``: writes ``input`` into ``output`` at
  ``offsets`` along ``dims`` (a KV-cache slot write), in place.
* ``overwrite_f(input, output, dims, offsets)``: the same on a copy of ``output``, returned.
* ``copy_from_d2d(src, dst, src_off, dst_off)``: copies ``src`` read at storage offset
  ``src_off`` into ``dst`` written at storage offset ``dst_off`` (any offsets: Torch-Spyre
  needs them stick-aligned, the simulator does not).

Example::

    cache = torch.zeros(1, 8, 128, 64, dtype=torch.float16, device="spyre")
    torch.ops.spyre.overwrite(kv_step, cache, [2], [position])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .core.layout import contiguous_strides, is_dense
from .runtime.tensor_methods import to_layout
from .spyre import SpyreTensorLayout


def _restickify_strides(x: torch.Tensor) -> tuple[int, ...]:
    """The strides of restickify's result: ``x``'s own when dense, else row-major."""
    return tuple(x.stride()) if x.numel() and is_dense(x.shape, x.stride()) else contiguous_strides(x.shape)


@torch.library.custom_op("spyre::restickify", mutates_args=(), device_types="spyre")
def restickify(x: torch.Tensor, dim_order: Sequence[int] | None = None) -> torch.Tensor:
    """``x`` copied into ``SpyreTensorLayout(x.shape, strides, x.dtype, dim_order)``."""
    layout = SpyreTensorLayout(tuple(x.shape), _restickify_strides(x), x.dtype, None if dim_order is None
                               else list(dim_order))
    return to_layout(x, layout, copy=True)


@restickify.register_fake
def _(x: torch.Tensor, dim_order: Sequence[int] | None = None) -> torch.Tensor:
    return x.new_empty_strided(x.shape, _restickify_strides(x))


def _slot(input: torch.Tensor, output: torch.Tensor, dims: Sequence[int], offsets: Sequence[int]) -> torch.Tensor:
    """The view of ``output`` that ``input`` overwrites; raises naming a bad dim or offset."""
    if len(dims) != len(offsets):
        raise ValueError(f"overwrite needs one offset per dim, got dims {list(dims)} and offsets {list(offsets)}")
    if input.dim() != output.dim():
        raise ValueError(f"overwrite: input has shape {list(input.shape)}, output {list(output.shape)} "
                         "(same rank needed)")
    slot = output
    for dim, offset in zip(dims, offsets):
        if not -output.dim() <= dim < output.dim():
            raise IndexError(f"overwrite: dim {dim} is out of range for output of rank {output.dim()}")
        if offset < 0 or offset + input.size(dim) > output.size(dim):
            raise IndexError(f"overwrite: offset {offset} along dim {dim} puts input's {input.size(dim)} "
                             f"elements outside output's {output.size(dim)}")
        slot = slot.narrow(dim, offset, input.size(dim))
    if slot.shape != input.shape:
        raise ValueError(f"overwrite: input of shape {list(input.shape)} does not fill the slot of shape "
                         f"{list(slot.shape)} (every dim not in dims {list(dims)} must match output)")
    return slot


@torch.library.custom_op("spyre::overwrite", mutates_args=("output",))
def overwrite(input: torch.Tensor, output: torch.Tensor, dims: Sequence[int], offsets: Sequence[int]) -> None:
    """``output[..., offsets[i]:offsets[i] + input.size(dims[i]), ...] = input``, in place."""
    _slot(input, output, dims, offsets).copy_(input)


@overwrite.register_fake
def _(input: torch.Tensor, output: torch.Tensor, dims: Sequence[int], offsets: Sequence[int]) -> None:
    _slot(input, output, dims, offsets)


@torch.library.custom_op("spyre::overwrite_f", mutates_args=())
def overwrite_f(input: torch.Tensor, output: torch.Tensor, dims: Sequence[int], offsets: Sequence[int]
                ) -> torch.Tensor:
    """``overwrite`` on a copy of ``output``; returns the copy."""
    result = output.clone()
    overwrite(input, result, dims, offsets)
    return result


@overwrite_f.register_fake
def _(input: torch.Tensor, output: torch.Tensor, dims: Sequence[int], offsets: Sequence[int]) -> torch.Tensor:
    _slot(input, output, dims, offsets)
    return output.clone()


def _at_offset(t: torch.Tensor, offset: int, what: str) -> torch.Tensor:
    if offset < 0:
        raise IndexError(f"copy_from_d2d: {what} offset {offset} is negative")
    return t.as_strided(t.shape, t.stride(), offset)


@torch.library.custom_op("spyre::copy_from_d2d", mutates_args=("dst",))
def copy_from_d2d(src: torch.Tensor, dst: torch.Tensor, src_off: int, dst_off: int) -> None:
    """``dst`` (its sizes and strides at storage offset ``dst_off``) = ``src`` (at ``src_off``)."""
    if src.shape != dst.shape:
        raise ValueError(f"copy_from_d2d: src has shape {list(src.shape)}, dst {list(dst.shape)}")
    _at_offset(dst, dst_off, "dst").copy_(_at_offset(src, src_off, "src"))


@copy_from_d2d.register_fake
def _(src: torch.Tensor, dst: torch.Tensor, src_off: int, dst_off: int) -> None:
    if src.shape != dst.shape:
        raise ValueError(f"copy_from_d2d: src has shape {list(src.shape)}, dst {list(dst.shape)}")
