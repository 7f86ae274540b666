"""The column-sum kernel (``_C._columns_sum``, csrc/column_sums.cpp) on strided float32, float16
and bfloat16 views.

Each property draws a buffer's geometry: a shape, the order its dims lie in memory, padding after
the contiguous dim (NaN, which a read outside the view would spread) and the dims to sum; the
kernel's result is checked against the same sum in float64 under each instruction set, its bits
against the same sum taken on other views of the same memory (dims split or merged, listed in
another order), at other thread counts, into an output of other strides, and under the other
instruction sets; half-precision sums against the float32 sums of the same values, rounded once.
Where the kernel declines a call, it returns False and leaves the output as it was.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ops_support import kernels_in
from torch_layouts import _C

SENTINEL = -96.0
SETS = _C._rows_math_sets()  # the instruction sets this CPU runs the column sums in (the row kernels'), best first


def strided(shape: tuple[int, ...], order: list[int], pad: int, seed: int) -> torch.Tensor:
    """A view of ``shape`` whose dims lie in memory in ``order`` (outermost first), the last of
    them contiguous and followed by ``pad`` NaN elements; random values."""
    inner = order[-1]
    sizes = [shape[d] + (pad if d == inner else 0) for d in order]
    buffer = torch.full(sizes, math.nan)
    index = [slice(None)] * len(order)
    index[-1] = slice(0, shape[inner])
    buffer[tuple(index)] = torch.randn([shape[d] for d in order], generator=torch.Generator().manual_seed(seed))
    return buffer[tuple(index)].permute([order.index(d) for d in range(len(shape))])


def reference(v: torch.Tensor, dims: list[int]) -> torch.Tensor:
    return v.double().sum(dims, keepdim=True)


def kept_shape(v: torch.Tensor, dims: list[int]) -> list[int]:
    return [1 if d in dims else n for d, n in enumerate(v.shape)]


@st.composite
def geometries(draw) -> tuple[torch.Tensor, list[int]]:
    """A view the kernel takes: its contiguous dim (16-64 elements) kept, 1-3 others summed (one
    at least of size 2 or more), the others kept."""
    rank = draw(st.integers(2, 5))
    shape = [draw(st.integers(1, 9)) for _ in range(rank)]
    order = draw(st.permutations(range(rank)))
    shape[order[-1]] = draw(st.sampled_from([16, 17, 32, 40, 64]))
    pad = draw(st.sampled_from([0, 0, 3, 16]))
    candidates = [d for d in range(rank) if d != order[-1]]
    dims = sorted(draw(st.sets(st.sampled_from(candidates), min_size=1, max_size=min(3, len(candidates)))))
    shape[dims[0]] = max(shape[dims[0]], 2)  # something to sum
    for d in candidates:  # at most 4 ** 3 * 64 results (the kernel takes up to 16384)
        shape[d] = shape[d] if d in dims else min(shape[d], 4)
    return strided(tuple(shape), list(order), pad, draw(st.integers(0, 2**16))), dims


@settings(max_examples=80, deadline=None)
@given(geometries(), st.sampled_from(SETS))
def test_column_sums_match_float64_and_read_only_the_view(case, instructions):
    v, dims = case
    out = torch.full(kept_shape(v, dims), SENTINEL)
    with kernels_in(_C._rows_set_math, instructions):
        assert _C._columns_sum(v, dims, out)
    count = math.prod(v.shape[d] for d in dims)
    torch.testing.assert_close(out.double(), reference(v, dims), rtol=1e-5, atol=1e-6 * count)


@settings(max_examples=60, deadline=None)
@given(geometries(), st.sampled_from([torch.float16, torch.bfloat16]), st.booleans(), st.sampled_from(SETS))
def test_half_precision_sums_round_once(case, dtype, float_out, instructions):
    """float16 and bfloat16 inputs summed in float32 and rounded once into the input's dtype (or
    kept in float32), under each instruction set's conversions: within an ulp of the exact sum
    (float32's rounding on top: a relative 1e-6), the float32 sums those of the same values in
    float32, bit for bit."""
    v32, dims = case
    v = torch.empty_strided(v32.shape, v32.stride(), dtype=dtype).copy_(v32)  # laid out as the float32 view
    out = torch.full(kept_shape(v, dims), SENTINEL, dtype=torch.float32 if float_out else dtype)
    with kernels_in(_C._rows_set_math, instructions):
        assert _C._columns_sum(v, dims, out)
    exact = reference(v, dims)
    as_float = torch.empty_strided(v.shape, v.stride(), dtype=torch.float32).copy_(v)
    sums = torch.empty(kept_shape(v, dims))
    assert _C._columns_sum(as_float, dims, sums)
    if float_out:
        assert torch.equal(out.view(torch.int32), sums.view(torch.int32))
    else:
        assert torch.equal(out, sums.to(dtype))  # rounded once
        ulp = (torch.nextafter(out, torch.tensor(math.inf, dtype=dtype)).double() - out.double()).abs()
        assert ((out.double() - exact).abs() <= ulp + 1e-6 * v.double().abs().sum(dims, keepdim=True)).all()


@settings(max_examples=30, deadline=None)
@given(geometries())
def test_every_instruction_set_gives_the_same_bits(case):
    """Blocks of sums as wide as each instruction set's registers hold: each sum's terms are added
    in the same order whatever the width."""
    v, dims = case
    outs = []
    for instructions in SETS:
        outs.append(torch.empty(kept_shape(v, dims)))
        with kernels_in(_C._rows_set_math, instructions):
            assert _C._columns_sum(v, dims, outs[-1])
    assert all(torch.equal(o.view(torch.int32), outs[0].view(torch.int32)) for o in outs[1:])


@settings(max_examples=40, deadline=None)
@given(geometries(), st.data())
def test_column_sums_bits_depend_on_memory_alone(case, data):
    """The same elements summed through another view of the same memory (a dim split in two, the
    dims permuted), into an output of other strides, at one thread or two: the same bits."""
    v, dims = case
    out = torch.empty(kept_shape(v, dims))
    assert _C._columns_sum(v, dims, out)
    # A dim of size > 1 split in two (a view of the same memory), the summed dims renumbered.
    splittable = [d for d in range(v.dim()) if v.shape[d] % 2 == 0 and v.shape[d] > 2]
    if splittable:
        d = data.draw(st.sampled_from(splittable))
        shape = list(v.shape[:d]) + [2, v.shape[d] // 2] + list(v.shape[d + 1:])
        strides = list(v.stride()[:d]) + [v.stride(d) * (v.shape[d] // 2), v.stride(d)] + list(v.stride()[d + 1:])
        w = v.as_strided(shape, strides, v.storage_offset())
        w_dims = [k + (k > d) for k in dims] + ([d + 1] if d in dims else [])
        split = torch.empty(kept_shape(w, w_dims))
        assert _C._columns_sum(w, sorted(w_dims), split)
        assert torch.equal(split.view(-1).view(torch.int32), out.view(-1).view(torch.int32))
    perm = data.draw(st.permutations(range(v.dim())))
    p = v.permute(perm)
    permuted = torch.empty(kept_shape(p, [perm.index(d) for d in dims]))
    assert _C._columns_sum(p, sorted(perm.index(d) for d in dims), permuted)
    assert torch.equal(permuted.permute([perm.index(d) for d in range(v.dim())]).view(torch.int32),
                       out.view(torch.int32))
    # Into a transposed output (another stride order), and at one thread.
    t = torch.full(kept_shape(v, dims)[::-1], SENTINEL).permute(list(range(v.dim()))[::-1])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert _C._columns_sum(v, dims, t)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(t.contiguous().view(torch.int32), out.view(torch.int32))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_large_column_sum_gives_the_same_bits_at_any_thread_count(threads):
    """A bias gradient's 8x128x256 sum over batch and tokens in Spyre's 3-D layout (tokens,
    stick columns, batch, stick): 8 chunks of partial sums, whichever thread takes them."""
    v = torch.randn(128, 8, 8, 32, generator=torch.Generator().manual_seed(5))
    before = torch.get_num_threads()
    outs = []
    for n in (threads, 1):
        torch.set_num_threads(n)
        outs.append(torch.empty(1, 8, 1, 32))
        assert _C._columns_sum(v, [0, 2], outs[-1])
    torch.set_num_threads(before)
    assert torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))
    torch.testing.assert_close(outs[0].double(), reference(v, [0, 2]), rtol=1e-5, atol=1e-4)


# Calls the kernel declines: id, the view, the summed dims, the output's shape (None: the kept shape).
DECLINED = [
    ("contiguous-dim-summed", torch.zeros(64, 32), [1], None),
    ("float64", torch.zeros(64, 32, dtype=torch.float64), [0], None),
    ("int32", torch.zeros(64, 32, dtype=torch.int32), [0], None),
    ("broadcast-dim", torch.zeros(1, 32).expand(64, 32), [0], None),
    ("run-shorter-than-16", torch.zeros(64, 8), [0], None),
    ("no-contiguous-dim", torch.zeros(64, 64)[:, ::2], [0], None),
    ("more-than-16384-sums", torch.zeros(2, 16385 * 16).view(2, 16385, 16), [0], None),
    ("nothing-summed", torch.zeros(4, 32), [], None),
    ("only-dims-of-size-1-summed", torch.zeros(1, 4, 32), [0], None),
    ("output-of-another-shape", torch.zeros(4, 32), [0], [1, 16]),
    ("dim-out-of-range", torch.zeros(4, 32), [2], [1, 32]),
]


@pytest.mark.parametrize("_, v, dims, shape", DECLINED, ids=[c[0] for c in DECLINED])
def test_declined_calls_leave_the_output_as_it_was(_, v, dims, shape):
    out = torch.full(shape or kept_shape(v, [d for d in dims if d < v.dim()]), SENTINEL)
    assert not _C._columns_sum(v, dims, out)
    assert (out == SENTINEL).all()
