"""``index_copy_``, ``index_copy``, ``index_select`` and ``self[index]`` on device memory.

``index_copy_`` (a static KV cache's update): each run of consecutive indices is one copy from its
slab of the source into the slab of ``self`` it names (``narrow`` of both), which the runtime
plans and replays like any copy into part of a buffer (``view_copy``): an update at a new position
each step reuses the kept plan, shifted. The index is read on the host (a device index moves there
first).

``index_select`` runs the CPU kernel on the input's and the result's buffers where they lie, in
one refinement of their shapes but the selected dim (``operands.common_reads_along``: Spyre's
2-D layout splits the columns into stick columns), so that it gathers the selected rows' sticks
instead of reading a row-major copy of the whole input (64 of 1024x256 float32 rows: 28 -> 7 us,
CPU 3.2; ``embedding`` of 512 indices into a 32000x1024 table 4.9 -> 0.17 ms); the recipe goes to
the runtime's front. Elsewhere ``on_views.cpu_kernel``'s general path (a staged copy).
"""

from __future__ import annotations

import torch

from .. import _C
from .on_views import cpu_kernel
from .operands import common_reads_along, default_coords, new_tensor, raw_view, runtime_record
from .registry import leave_to_fallback, register, scalar_type_name
from .view_copy import strided_or_staged

_INDEX_SELECT = cpu_kernel(torch.ops.aten.index_select.default, torch.ops.aten.index_select.out)


def _runs(index: list[int]) -> list[tuple[int, int, int]]:
    """(first position in the index, first target, count) for each run of consecutive targets."""
    runs: list[tuple[int, int, int]] = []
    for i, j in enumerate(index):
        if runs and runs[-1][1] + runs[-1][2] == j:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((i, j, 1))
    return runs


def index_copy_(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """``self.index_copy_(dim, index, source)`` with ATen's checks: ``source``'s slice ``i``
    along ``dim`` goes to ``self``'s slice ``index[i]`` (the last of repeated indices wins).

    >>> cache = torch.zeros(1, 4, 512, 64).to("spyre")
    >>> _ = cache.index_copy_(2, torch.tensor([7]), torch.ones(1, 4, 1, 64).to("spyre"))
    """
    if index.dim() > 1:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got {index.dim()})")
    if index.dtype != torch.int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got {scalar_type_name(index.dtype)}")
    if source.dtype != self.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{scalar_type_name(self.dtype)} and (source) {scalar_type_name(source.dtype)}")
    dim = dim % max(self.dim(), 1)
    if source.dim() == 0 and self.dim() == 1:
        source = source.reshape(1)
    targets = index.reshape(-1).cpu().tolist()
    rows = source.shape[dim] if source.dim() else 1
    if len(targets) != rows:
        raise IndexError(f"index_copy_(): Number of indices ({len(targets)}) should be equal to source.size(dim) "
                         f"({rows})")
    if source.dim() != self.dim() or any(a != b for d, (a, b) in enumerate(zip(self.shape, source.shape)) if d != dim):
        def slices(t: torch.Tensor) -> str:
            return " ".join(str(n) for d, n in enumerate(t.shape) if d != dim)
        raise RuntimeError(f"index_copy_(): Source/destination tensor must have same slice shapes. Destination slice "
                           f"shape: {slices(self)} at dimension {dim} and source slice shape: {slices(source)} at "
                           "dimension 0.")
    size = self.shape[dim] if self.dim() else 1
    for j in targets:
        if not 0 <= j < size:
            raise IndexError(f"index_copy_(): index {j} is out of bounds for dimension {dim} with size {size}")
    if self.dim() == 0:
        return self.copy_(source) if targets else self
    for first, target, count in _runs(targets):
        self.narrow(dim, target, count).copy_(source.narrow(dim, first, count))
    return self


def index_copy(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    return index_copy_(self.clone(), dim, index, source)


def index_select(self: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """``torch.index_select(self, dim, index)`` on the buffers where they lie (module docstring).

    >>> x = torch.randn(16, 64)
    >>> got = index_select(x.to("spyre"), 0, torch.tensor([3, 0, 3]).to("spyre"))
    >>> torch.equal(got.cpu(), x[[3, 0, 3]])
    True
    """
    k = dim + self.dim() if dim < 0 else dim
    if (self.dim() == 0 or not 0 <= k < self.dim() or not isinstance(index, torch.Tensor) or index.dim() > 1
            or index.dtype not in (torch.int32, torch.int64) or index.device != self.device or index.numel() == 0):
        return _INDEX_SELECT(self, dim, index)  # the CPU's errors, or a staged copy
    shape = list(self.shape)
    shape[k] = index.numel()
    coords = default_coords(tuple(shape), self.dtype)
    out = new_tensor(coords, self.device)
    reads = common_reads_along(self, out, k) if self.numel() else None
    taken = strided_or_staged(index, True)  # a reshaped index (embedding's) may be a staged copy
    if reads is None or taken is None:
        return _INDEX_SELECT(self, dim, index)
    src, dst, place = reads
    held, index_read, staged = taken
    try:
        torch.ops.aten.index_select.out(raw_view(self, *src), place, raw_view(held, *index_read),
                                        out=raw_view(out, *dst))
    except Exception:  # an index out of range: the CPU's own message
        torch.index_select(self.cpu(), dim, index.cpu())
        raise
    _C._offer_recipe([self, None, index], [(0, *src), (2, *index_read) + (() if staged is None else
                                                                        (runtime_record(staged), 0))],
                     [runtime_record(coords)], [dst], [(1, place)], "aten::index_select.out")
    return out


def index(self: torch.Tensor, indices: list[torch.Tensor | None]) -> torch.Tensor:
    """``self[indices]`` (``aten::index.Tensor``): one integer index tensor on the device among
    Nones selects along its dim by ``index_select`` (its rows gathered where they lie), reshaped to
    the index's shape; anything else (a negative or out-of-range index, a bool mask, several index
    tensors, a CPU index) runs as before: the CPU fallback of ``index.Tensor_out``.

    >>> x, i = torch.randn(6, 64), torch.tensor([[5, 0], [2, 2]])
    >>> torch.equal(x.to("spyre")[i.to("spyre")].cpu(), x[i])
    True
    """
    given = [(k, t) for k, t in enumerate(indices) if t is not None]
    if len(given) == 1 and given[0][0] < self.dim() and given[0][1].dtype in (torch.int64, torch.int32) and \
            given[0][1].device == self.device:
        k, idx = given[0]
        try:
            picked = torch.index_select(self, k, idx.reshape(-1))
        except (IndexError, RuntimeError):  # negative indices wrap, out-of-range ones raise: the fallback's
            picked = None
        if picked is not None:
            shape = (*self.shape[:k], *idx.shape, *self.shape[k + 1:])
            return picked if picked.shape == shape else picked.reshape(shape)
    return torch.ops.aten.index.Tensor_out(self, indices, out=self.new_empty(0))


def register_all() -> None:
    register("index_select", index_select)
    register("index.Tensor", index)
    leave_to_fallback("index.Tensor_out")
    register("index_copy_", index_copy_)
    register("index_copy", index_copy)
