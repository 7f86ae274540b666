"""Strided copies between CPU views of device buffers on the C++ DMA executor.

Kernels gather operands out of tiles into dense scratch matrices and scatter results
back (matmul packing, row-wise kernels). Such a copy between two strided views of
1-D buffers is one loop nest for ``_C._run_nests`` (cache-tiled transposes and run
copies over threads, see docs/design.md). Where elements move between sticks (a
transpose: either side's innermost dim is not contiguous) it is 2-5x faster than
PyTorch's ``copy_``; where both sides are runs of contiguous elements (tile gathers and
scatters) PyTorch's copy is as fast up to a few MiB, so those stay with ``copy_`` unless they
reach ``RUNS_BYTES``, where the executor's non-temporal stores make it up to 2x faster, their
source runs lie far apart in two dims (``_scattered_runs``), the runs are short for the outer
dims they walk (``_short_runs``), or they are whole lines adjacent in the source but spaced in the
destination (``_spaced_runs``). Elements are copied as
bits, so both views must have the same dtype; anything else, and copies too small to
amortise the executor's fixed cost, go through ``copy_``.
"""

from __future__ import annotations

import torch

from .. import _C
from ..core.dtypes import BITS_DTYPE

SMALL = 4096  # elements: below this PyTorch's copy costs less than the executor's call
RUNS_BYTES = 8 << 20  # run copies this large stream their stores (docs/design.md section 5)
FAR = 32768  # elements: source steps this large in both of a run copy's next two dims alias in cache


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The whole storage of ``t`` as a 1-D integer tensor of ``t``'s element size."""
    return t.view(BITS_DTYPE[t.element_size()]).as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)


def _innermost_stride(t: torch.Tensor) -> int:
    """The stride of ``t``'s last dim of more than one element (1 for a single element)."""
    for n, s in zip(reversed(t.shape), reversed(t.stride())):
        if n > 1:
            return s
    return 1


def _scattered_runs(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether PyTorch's copy, walking ``dst`` in storage order, would read runs of ``src`` at
    least ``FAR`` elements apart along both of the next two dims: runs that land on the same
    cache sets, which the executor's tiles read together (MultiheadAttention's split of the
    packed projection: 3 MiB in 220 -> 97 us; nearer runs copy faster in PyTorch)."""
    shape, dst_strides, src_strides = dst.shape, dst.stride(), src.stride()
    outer = sorted((d for d in range(len(shape) - 1) if shape[d] > 1), key=dst_strides.__getitem__)
    return len(outer) >= 2 and abs(src_strides[outer[0]]) >= FAR and abs(src_strides[outer[1]]) >= FAR


def _merged_dims(dst: torch.Tensor, src: torch.Tensor) -> list[list[int]]:
    """``[size, dst stride, src stride]`` per dim of more than one element, outermost first,
    merged where a dim continues the next one on both sides."""
    dims: list[list[int]] = []
    for n, d, s in zip(dst.shape, dst.stride(), src.stride()):
        if n == 1:
            continue
        if dims and dims[-1][1] == n * d and dims[-1][2] == n * s:
            dims[-1] = [dims[-1][0] * n, d, s]
        else:
            dims.append([n, d, s])
    return dims


def _spaced_runs(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether the runs are whole cache lines, adjacent in the source but not in the destination
    (``x[1].copy_(y)`` into a 3-D tensor in Spyre's layout: 128-byte runs 512 bytes apart), which
    PyTorch's copy walks in the destination's order, a run from each of many far-apart source
    rows in turn; the executor's spaced tiles write each destination row's runs together
    (docs/design.md, "How the executor runs a nest")."""
    dims = _merged_dims(dst, src)
    if len(dims) < 2 or dims[-1][1] != 1 or dims[-1][2] != 1:
        return False
    run = dims[-1][0]
    return (run * dst.element_size() % 64 == 0 and all(d != run for _, d, _ in dims[:-1])
            and any(s == run for _, _, s in dims[:-1]))


def _short_runs(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether PyTorch's copy would walk many short runs through several outer dims (after
    merging dims contiguous on both sides), where its per-run cost exceeds the executor's
    (1 MiB, measured: runs under 64 bytes 1.1-4.8x the executor's time; 128-byte runs under
    three outer dims 1.15-1.7x; any run under four outer dims 1.2-1.7x)."""
    dims = _merged_dims(dst, src)
    run_bytes, outer = dims[-1][0] * dst.element_size(), len(dims) - 1
    return run_bytes < 64 or outer >= 4 or outer == 3 and run_bytes <= 128


def on_executor(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether ``strided_copy`` runs ``dst.copy_(src)`` as one executor nest: CPU tensors of one
    shape and dtype (``src`` may broadcast with stride 0), not tiny, whose elements move between
    rows, or whose runs are large, scattered or short (see above)."""
    return not (dst.dtype != src.dtype or dst.shape != src.shape or dst.device.type != "cpu"
                or src.device.type != "cpu" or dst.element_size() not in BITS_DTYPE or dst.numel() < SMALL
                or (_innermost_stride(dst) == _innermost_stride(src) == 1
                    and dst.numel() * dst.element_size() < RUNS_BYTES and not _scattered_runs(dst, src)
                    and not _short_runs(dst, src) and not _spaced_runs(dst, src)))


def executor_copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` as one executor nest, for tensors ``on_executor`` accepts. Returns ``dst``."""
    nest = (tuple(dst.shape), tuple(dst.stride()), tuple(src.stride()), dst.storage_offset(), src.storage_offset())
    _C._run_nests([nest], _flat(dst), _flat(src))
    return dst


def strided_copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` for CPU tensors of one shape: one executor nest where ``on_executor``
    says so, else PyTorch's copy. Returns ``dst``."""
    return executor_copy(dst, src) if on_executor(dst, src) else dst.copy_(src)
