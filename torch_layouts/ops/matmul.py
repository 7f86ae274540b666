"""Matrix multiplication on device memory: ``mm``, ``bmm``, ``addmm``, ``mv`` (``matmul``
and ``linear`` reach them through PyTorch's own decompositions).

Spyre's documented rule: ``C[m, n] = A[m, k] @ B[k, n]`` wants A sticked on k, B and C sticked
on n, and B's k dim padded to whole sticks whose padded entries are zero before the op
runs. Here:

* A is read in the default layout of its shape (``[..., k tiles, m, stick]``); any
  buffer it can be read from with its stick on k works in place (when k is not a
  multiple of the stick, only A's own buffer, whose k padding is zero).
* B is read in ``rhs_layout(shape)``: the default layout of its shape (sticked on n)
  with its k device dim padded to a multiple of the stick. When k is a multiple of the
  stick that is the default layout and any buffer with its stick on n works; otherwise
  B must be exactly in that layout (its zero padding is what the GEMM multiplies A's
  k padding with).
* Operands that break the rule are restickified (counted), or rejected in
  ``strict_layouts()``; e.g. ``linear``'s ``weight.t()`` is sticked on k, so a weight
  kept in ``SpyreTensorLayout(w.shape, w.dtype, [1, 0])`` avoids a restickify per call.

The GEMM itself runs over the padded dims, as the hardware would: the tiles of A and B
are gathered into dense ``(m, k_padded)`` and ``(k_padded, n_padded)`` matrices, one
dense matmul computes ``C``'s padded tiles, whose real elements are scattered into C's
device buffer (``O(n^2)`` repacks around the ``O(n^3)`` product). The dense matrices
live in device memory (``operands.scratch``), like a kernel's scratchpad.
"""

from __future__ import annotations

import functools

import torch

from ..core.dtypes import data_format, elems_per_stick
from ..core.layout import BoundLayout, DeviceLayout
from ..spyre import SpyreTensorLayout
from . import rules
from .elementwise import ADD, MUL, copy_real, fill_, materialize, run
from .operands import default_coords, record_of, is_whole_dense, new_tensor, plan, raw, rowmajor, scratch
from .registry import register
from .stats import count_restickify

Shape = tuple[int, ...]


@functools.lru_cache(maxsize=1024)
def rhs_layout(size: Shape, dtype: torch.dtype) -> DeviceLayout:
    """The layout matmul reads B (``(..., k, n)``) in: default, k padded to whole sticks."""
    base = default_coords(size, dtype).layout
    eps = elems_per_stick(dtype)
    k = size[-2]
    padded = -(-k // eps) * eps
    if padded == k:
        return base
    device_size = list(base.device_size)
    device_size[len(size) - 1 if len(size) == 2 else len(size) - 3] = padded
    return SpyreTensorLayout(device_size, base.stride_map, data_format(dtype))


@functools.lru_cache(maxsize=16)
def _matrix_order(rank: int) -> tuple[int, ...]:
    """Device dims of a default layout of this rank, as (batch..., rows, tiles, stick)."""
    return (rank - 1, *range(rank - 2), rank - 2, rank)


def _dense(op: str, named: list[tuple[str, torch.Tensor]], i: int, coords: BoundLayout, exact: bool,
           requirement: str) -> torch.Tensor:
    """Operand ``i`` as a dense ``(..., rows, padded cols)`` CPU matrix gathered from its
    device buffer, read in ``coords`` (restickified into them when it breaks the rule).
    With ``exact`` (k is padded) the buffer must be the coordinates' own, zero padded."""
    name, t = named[i]
    p = plan(t, coords, refine=True)
    info = record_of(t)
    if p is None or not p.stick_ok or (exact and (not p.exact or info.layout.pad_value != 0)):
        if info is not None and is_whole_dense(t, info):
            rules.check(op, requirement, named, name, coords.layout)
        t = materialize(t, coords)
        count_restickify(t.numel() * t.element_size())
        p = plan(t, coords)
    matrix = _matrix_order(len(coords.size))
    counts = p.factors or (1,) * len(coords.shape)
    first = [sum(counts[:d]) for d in range(len(counts))]
    order = [k for d in matrix for k in range(first[d], first[d] + counts[d])]
    cols = coords.shape[matrix[-2]] * coords.shape[matrix[-1]]
    tiles = p.read(t, coords).permute(order)
    return scratch(tiles.shape, t.dtype, t.device).copy_(tiles).view(*coords.size[:-2], -1, cols)


def matmul(op: str, a: torch.Tensor, b: torch.Tensor, names: tuple[str, str] = ("self", "mat2")) -> torch.Tensor:
    """``a @ b`` for ``(..., m, k)`` and ``(..., k, n)`` device tensors with equal batch dims."""
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}")
    if a.dim() < 2 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise RuntimeError(f"{op}: shapes {list(a.shape)} and {list(b.shape)} cannot be multiplied")
    dtype = a.dtype
    eps = elems_per_stick(dtype)
    batch, m, k, n = tuple(a.shape[:-2]), a.shape[-2], a.shape[-1], b.shape[-1]
    out_shape = (*batch, m, n)
    c_coords = default_coords(out_shape, dtype)
    out = new_tensor(c_coords, a.device)
    if 0 in out_shape:
        return out
    if k == 0:
        return fill_(out, 0)
    padded_k = k % eps != 0
    named = [(names[0], a), (names[1], b)]
    b_size = tuple(b.shape)
    dense_a = _dense(op, named, 0, default_coords(tuple(a.shape), dtype), padded_k,
                     "mat1 sticked on k (its last dim) in the default layout")
    dense_b = _dense(op, named, 1, BoundLayout(rhs_layout(b_size, dtype), b_size, rowmajor(b_size)), padded_k,
                     "mat2 sticked on n (its last dim), with k padded to whole sticks of zeros")
    product = scratch((*batch, m, dense_b.shape[-1]), dtype, a.device)
    torch.matmul(dense_a, dense_b, out=product)
    product = product.view(*batch, m, -1, eps)
    order = _matrix_order(len(out_shape))
    in_device_order = product.permute([order.index(d) for d in range(len(order))])
    copy_real(raw(out).view(c_coords.shape), in_device_order, c_coords, out)
    return out


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"mm: expected 2-D tensors, got {a.dim()}-D and {b.dim()}-D")
    return matmul("mm", a, b)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() != 3 or b.dim() != 3:
        raise RuntimeError(f"bmm: expected 3-D tensors, got {a.dim()}-D and {b.dim()}-D")
    return matmul("bmm", a, b)


def mv(a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Matrix times vector: ``mm`` with the vector as an ``(m, 1)`` matrix (the result is
    that ``(n, 1)`` matrix's column, one element per stick)."""
    if a.dim() != 2 or v.dim() != 1:
        raise RuntimeError(f"mv: expected a 2-D matrix and a 1-D vector, got {a.dim()}-D and {v.dim()}-D")
    return matmul("mv", a, v.unsqueeze(1), ("self", "vec")).squeeze(1)


def addmm(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1
          ) -> torch.Tensor:
    """``beta * bias + alpha * (a @ b)``; the bias (any shape broadcasting to the result) is
    added in the result's coordinates."""
    if a.dim() != 2 or b.dim() != 2:
        raise RuntimeError(f"addmm: expected 2-D matrices, got {a.dim()}-D and {b.dim()}-D")
    out = matmul("addmm", a, b, ("mat1", "mat2"))
    if alpha != 1:
        run(MUL, [out, alpha], {}, target=out)
    if beta != 0:
        run(ADD, [out, bias], {"alpha": beta}, target=out)
    return out


def register_all() -> None:
    register("mm", mm)
    register("bmm", bmm)
    register("mv", mv)
    register("addmm", addmm)
