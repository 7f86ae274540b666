"""Helpers of the DMA executor's tests: copies between strided views of flat buffers, checked
bit for bit against PyTorch's own strided copy."""

from __future__ import annotations

import torch

from torch_layouts import _C

BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def dense_strides(shape: list[int], pad: list[int]) -> list[int]:
    """Row-major strides of ``shape`` with ``pad`` extra elements along each dim."""
    strides, step = [], 1
    for n, p in zip(reversed(shape), reversed(pad)):
        strides.append(step)
        step *= n + p
    return strides[::-1]


def check_permuted_copy(shape: list[int], order: list[int], src_pad: list[int], dst_pad: list[int],
                        esize: int, split: str = "source") -> None:
    """A src tensor of ``shape`` (rows padded, read from an unaligned offset) copied by the executor
    (its threads splitting the work by ``split``'s rows) into a destination whose dims run in
    ``order`` equals PyTorch's strided copy bit for bit, every element outside the nest untouched."""
    dtype = BITS[esize]
    src_strides = dense_strides(shape, src_pad)
    dst_shape = [shape[d] for d in order]
    dst_dense = dense_strides(dst_shape, [dst_pad[d] for d in order])
    dst_strides = [0] * len(shape)
    for k, d in enumerate(order):
        dst_strides[d] = dst_dense[k]
    src_numel = 1 + sum((n - 1) * s for n, s in zip(shape, src_strides))
    dst_numel = 1 + sum((n - 1) * s for n, s in zip(shape, dst_strides))
    src = torch.randint(-100, 100, (src_numel + 7,), dtype=torch.int64).to(dtype)[3:3 + src_numel]
    dst = torch.full((dst_numel,), 7, dtype=dtype)
    expected = dst.clone()
    expected.as_strided(shape, dst_strides).copy_(src.as_strided(shape, src_strides))
    _C._run_nests([(tuple(shape), tuple(dst_strides), tuple(src_strides), 0, 0)], dst, src, split=split)
    assert torch.equal(dst, expected)


def check_rows_continued(dtype: torch.dtype, na: int, nb: int, ne: int, outer: int, gap: int) -> None:
    """[outer][a][e][b] -> [outer][b][e][a] and back (``gap`` elements between outer positions)
    equal PyTorch's strided copy bit for bit, the elements outside the nest untouched."""
    ranges = (outer, nb, ne, na)
    packed = (nb * ne * na + gap, ne * na, na, 1)  # [outer][b][e][a]
    rows = (na * ne * nb + gap, 1, nb, ne * nb)  # [outer][a][e][b], strides in ranges' order
    numel = outer * (na * nb * ne + gap)
    src = torch.randint(-100, 100, (numel,), dtype=torch.int64).to(dtype)
    for dst_strides, src_strides in ((packed, rows), (rows, packed)):
        dst = torch.full((numel,), 7, dtype=dtype)
        expected = dst.clone()
        expected.as_strided(ranges, dst_strides).copy_(src.as_strided(ranges, src_strides))
        _C._run_nests([(ranges, dst_strides, src_strides, 0, 0)], dst, src)
        assert torch.equal(dst, expected)
