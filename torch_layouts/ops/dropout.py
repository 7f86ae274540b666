"""Dropout on device memory: ``native_dropout`` and ``native_dropout_backward``.

The keep mask draws from the spyre generator exactly as the CPU fallback did: a CPU
generator seeded with the runtime's mix of the generator's (seed, offset) (``csrc/generator.cpp``'s
``host_seed``), ``bernoulli_`` over a tensor like the input (``empty_like``), then the offset moves
past the values drawn; so a seed gives the masks it gave before. The draws move into the
input's coordinates (``operands.coords_for``) through the DMA; for float32, float16 and bfloat16
inputs one pass (per box of real positions, where there is padding) then writes the product and the mask
(``csrc/pointwise.h``), and later calls of that geometry replay in the runtime's front, the draws
included (``csrc/dropout_recipe.cpp``). The boolean mask is laid out with the input's device dims,
so the product and the backward read both in place (no restickify).
"""

from __future__ import annotations

import torch

from .. import _C
from ..core.layout import BoundLayout
from .elementwise import RECIPES, Spec, run, signature
from .operands import (coords_for, has_padding, new_tensor, operand_layout, plan, raw, raw_view, real_slices,
                       rowmajor, runtime_record, scratch, view)
from .registry import register

MASK64 = (1 << 64) - 1
FUSED = (torch.float32, torch.float16, torch.bfloat16)  # dtypes whose product and mask take one pass


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def draw_keep(x: torch.Tensor, keep: float) -> torch.Tensor:
    """A CPU ``bernoulli_(keep)`` tensor like ``x`` (its strides when dense, as ``empty_like``)
    drawn from ``x``'s spyre generator (whose offset moves past the draws): the values the
    CPU fallback's ``native_dropout`` would draw."""
    device = x.device
    gen = _C._get_default_generator(device.index if device.index is not None else _C._get_device())
    seed, offset = gen.get_state().view(torch.int64).tolist()
    host = torch.Generator().manual_seed(_splitmix64((seed & MASK64) ^ _splitmix64(offset)))
    like = torch.empty_like(x, device="meta")
    out = scratch((x.numel(),), x.dtype, device).as_strided(like.shape, like.stride()).bernoulli_(keep, generator=host)
    numel = max(out.numel(), 1)
    gen.set_offset(offset + (numel + 3) // 4 * 4)
    return out


def _mask_coords(coords: BoundLayout) -> BoundLayout:
    """A bool layout with the coordinates' own device dims (read in place next to them)."""
    layout = operand_layout(coords, coords.size, torch.bool, coords.stride)
    return BoundLayout(layout, coords.size, coords.stride)


def _scaled(a: torch.Tensor, b: torch.Tensor, *, scale: float, out: torch.Tensor) -> torch.Tensor:
    """``(a * b) * scale`` rounded as the CPU's ``a.mul(b).mul_(scale)``: one fused pass for
    float32 (``csrc/pointwise.h``; ATen would take two, and its slow mixed-dtype loop for a bool
    ``b``), the two ATen ops otherwise."""
    if a.dtype == out.dtype == torch.float32 and b.dtype in (torch.float32, torch.bool):
        _C._scaled_product(out, a, b, scale)
        return out
    return torch.mul(a, b, out=out).mul_(scale)


SCALED = Spec("mul.Tensor", _scaled, (0, 1), masks=(1,))


def native_dropout(x: torch.Tensor, p: float, train: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, keep mask) as the CPU's ``native_dropout``: ``x * mask * (1 / (1 - p))``."""
    if train is not None and not train or x.numel() == 0:
        mask = torch.ones(x.shape, dtype=torch.bool, device=x.device) if x.numel() else \
            torch.empty(x.shape, dtype=torch.bool, device=x.device)
        return x.clone(), mask
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"native_dropout: expected a floating point input, got {x.dtype}")
    keep = 1.0 - p
    scale = 0.0 if keep == 0 else 1.0 / keep
    drawn = draw_keep(x, keep)
    coords = coords_for(x)
    # The draws (host order) move into x's coordinates through the DMA (a cache-blocked
    # relayout), where the mask's conversion and the product read them in storage order.
    values = new_tensor(coords, x.device).copy_(drawn)
    mask_coords = _mask_coords(coords)
    mask = new_tensor(mask_coords, x.device)
    p = plan(x, coords) if x.dtype in FUSED else None
    pieces, whole = real_slices(coords)
    if p is not None and p.stick_ok and p.shape is None and not whole:  # the product and the mask in one pass per box
        out = new_tensor(coords, x.device)
        views = (raw_view(out, coords.shape), raw_view(mask, coords.shape), view(x, coords, p),
                 raw_view(values, coords.shape))
        for index in pieces:
            _C._dropout_apply(*(v[index] for v in views), scale)
        boxes = [[(s.start, s.stop - s.start) for s in index] for index in pieces] if has_padding(coords) else []
        # later calls of this geometry: the runtime's front draws and computes them
        _C._offer_dropout(x, (coords.shape, p.strides, p.offset), tuple(drawn.shape), tuple(drawn.stride()),
                          runtime_record(coords), runtime_record(mask_coords), boxes)
        return out, mask
    flags, dense = raw(mask).view(coords.shape), raw(values).view(coords.shape)
    for index in pieces:
        flags[index].copy_(dense[index])  # 0 or 1: the conversion is the comparison with 0
    return run(SCALED, [x, values], {"scale": scale}, out_dtype=x.dtype), mask


def native_dropout_backward(grad: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """``grad * mask * scale``, reading the mask in place when it has ``grad``'s device dims; the
    recipe of such a call is offered to the runtime's front (``csrc/dropout_recipe.cpp``)."""
    out = run(SCALED, [grad, mask], {"scale": scale}, out_dtype=grad.dtype)
    key = signature(SCALED, [grad, mask], {"scale": scale}, None, grad.dtype)
    recipe = RECIPES.get(key) if key is not None else None
    if (recipe is not None and recipe.unpadded and recipe.out_coords is not None
            and all(staged is None for *_, staged in recipe.reads)):
        shape = recipe.coords.shape
        (_, grad_strides, grad_offset, _), (_, mask_strides, mask_offset, _) = recipe.reads
        _C._offer_dropout_backward(grad, mask, (shape, grad_strides, grad_offset), (shape, mask_strides, mask_offset),
                                   runtime_record(recipe.out_coords), (shape, rowmajor(shape), 0))
    return out


def register_all() -> None:
    register("native_dropout", native_dropout)
    register("native_dropout_backward", native_dropout_backward)
