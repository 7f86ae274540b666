"""``cumsum`` on device memory along rows of the input's buffer.

Where the buffer reads as rows along the summed dim (``rows``: Spyre's sticks of that dim in
host order), the row kernel ``_C._rows_cumsum`` computes the running sums where the input lies,
ATen's bits (each element added in order into a double for float32, a float32 for float16 and
bfloat16, each sum rounded to the dtype), and later calls of the geometry are replayed by the
runtime's front (``csrc/row_recipes.cpp``). Before, the CPU kernel ran on a dense copy of the
input and its result was copied back into the layout (1024x256 float32 along the sticks: 120 us,
the CPU's 68). Elsewhere (another dtype, a ``dtype=`` conversion, an input whose rows the kernel
does not take) the CPU kernel on the views (``on_views.cpu_kernel``).
"""

from __future__ import annotations

import torch

from .. import _C
from .on_views import cpu_kernel
from .operands import new_tensor, raw, runtime_record
from .reductions import readable
from .registry import register
from .rows import PLANS, ROW_DTYPES, RowPlan, lookup, remember, rows

_CUMSUM = cpu_kernel(torch.ops.aten.cumsum.default, torch.ops.aten.cumsum.out)


def _offer(kept: RowPlan, x: torch.Tensor) -> None:
    """Offer the runtime's front this call's replay."""
    _C._offer_cumsum(x, kept.reads[0], runtime_record(kept.coords), kept.reads[1], kept.rows.width, kept.rows.real)


def cumsum(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.cumsum(x, dim, dtype=dtype)``: the row kernel where it takes the rows (module docstring).

    >>> x = torch.randn(8, 256)
    >>> torch.equal(torch.cumsum(x.to("spyre"), -1).cpu(), torch.cumsum(x, -1))
    True
    """
    if (x.dim() == 0 or x.numel() == 0 or not -x.dim() <= dim < x.dim() or (dtype is not None and dtype != x.dtype)
            or x.dtype not in ROW_DTYPES):
        return _CUMSUM(x, dim, dtype=dtype)
    dim %= x.dim()
    key, known = lookup("cumsum", (dim,), (x,))
    if known is not None:
        _offer(known, x)  # the runtime's front had no replay for it
        (vx, vo), out = known.replay((x,))
        _C._rows_cumsum(vx, vo, known.rows.width, known.rows.real)
        return out
    given = x
    x, coords, v, _, _ = readable(x, (dim,))
    shape = rows(coords, (dim,), padded=True)
    if shape is None:
        return _CUMSUM(given, dim, dtype=dtype)
    out = new_tensor(coords, x.device)
    views = [shape.view(v), shape.view(raw(out).view(coords.shape))]
    _C._rows_cumsum(*views, shape.width, shape.real)
    remember(key if x is given else None, coords, shape, views, (x,))
    if key in PLANS:
        _offer(PLANS[key], x)
    return out


def register_all() -> None:
    register("cumsum", cumsum)
