"""The C++ tile GEMM (``_C._tile_gemm``) on matrices stored in tiled, permuted, padded buffers,
against float64 references.

Each operand is a logical ``(batch, rows, cols)`` array stored in a 1-D buffer: its rows and its
columns may each split into (outer, inner) tile dims (a stick of 32 columns, 32 rows of a
transposed operand), every storage dim may carry padding, and the dims are laid out in a random
order (a batch dim between a tile's rows, as Spyre's 3-D layout does). The view handed to the
kernel is that storage, its dims grouped into batch, rows and columns. Input buffers are NaN
outside the operand (a read outside poisons the result); C's buffer holds a sentinel that must
survive everywhere but the ``m x n`` elements written; inputs must come back unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ops_support import kernels_in
from torch_layouts import _C

pytestmark = pytest.mark.skipif(not _C._tile_gemm_available(), reason="the tile GEMM needs AVX2 and FMA")
SENTINEL = -96.0
KERNELS = _C._tile_gemm_kernels()  # the kernels this CPU runs, best first ("avx512", "avx2")


def kernel(name: str):
    """Runs the tile GEMM on kernel ``name`` of ``KERNELS``; restores the old one."""
    return kernels_in(_C._tile_gemm_set_kernel, name)


@dataclass(frozen=True)
class Stored:
    """A ``(batch, rows, cols)`` array in a buffer: the kernel's view and its dim groups."""

    view: torch.Tensor
    groups: tuple[list[int], list[int], list[int]]
    buffer: torch.Tensor

    def logical(self, source: torch.Tensor | None = None) -> torch.Tensor:
        """The array read through the view (batch dims flattened), or through the same view of ``source``."""
        view = self.view if source is None else source.as_strided(self.view.shape, self.view.stride(),
                                                                  self.view.storage_offset())
        batch, rows, cols = self.groups
        v = view.permute(batch + rows + cols)
        nb, nr = len(batch), len(rows)
        return v.reshape(math.prod(v.shape[:nb]), math.prod(v.shape[nb:nb + nr]), math.prod(v.shape[nb + nr:]))

    def place(self, values: torch.Tensor) -> None:
        """Write ``values`` (batch, m, n) into the first m rows and n columns; the rest of the array is 0."""
        batch, rows, cols = self.groups
        v = self.view.permute(batch + rows + cols)
        array = torch.zeros(self.logical().shape)
        array[:, :values.shape[1], :values.shape[2]] = values
        v.copy_(array.reshape(v.shape))

    def positions(self, m: int, n: int) -> torch.Tensor:
        """A mask of the buffer's elements that hold the first m rows and n columns."""
        index = self.logical(torch.arange(self.buffer.numel()))[:, :m, :n].reshape(-1)
        mask = torch.zeros(self.buffer.numel(), dtype=torch.bool)
        mask[index] = True
        return mask


@st.composite
def storage(draw, batch: tuple[int, ...], rows: int, cols: int, fill: float) -> Stored:
    """A buffer holding a ``(*batch, rows, cols)`` array in a drawn tiling, dim order and padding."""
    dims: list[tuple[str, int]] = [("b", n) for n in batch]  # (group, size), logical order within a group
    for group, n in (("r", rows), ("c", cols)):
        tile = draw(st.sampled_from([None, 4, 6, 16, 32]))
        if tile is None or tile >= n:
            dims.append((group, n))
        else:  # outer tiles cover n padded to whole tiles; the padding is past the real elements
            dims += [(group, -(-n // tile)), (group, tile)]
    order = draw(st.permutations(range(len(dims))))
    pads = [draw(st.sampled_from([0, 0, 1, 3])) for _ in dims]
    strides = [0] * len(dims)
    running = draw(st.sampled_from([1, 1, 2]))  # an innermost stride of 2 leaves gaps between elements
    for d in reversed(order):
        strides[d] = running
        running *= dims[d][1] + pads[d]
    offset = draw(st.sampled_from([0, 5]))
    buffer = torch.full((offset + running + 7,), fill)
    view = buffer.as_strided([n for _, n in dims], strides, offset)
    groups = tuple([i for i, (g, _) in enumerate(dims) if g == name] for name in "brc")
    return Stored(view, groups, buffer)


def shared(stored: Stored, batch: tuple[int, ...]) -> Stored:
    """``stored`` (a single matrix) seen by every entry of ``batch`` (stride 0): a weight that
    a batch of matrices shares."""
    nb, view = len(batch), stored.view
    broadcast = view.as_strided([*batch, *view.shape], [0] * nb + list(view.stride()), view.storage_offset())
    return Stored(broadcast, (list(range(nb)), *([d + nb for d in g] for g in stored.groups[1:])), stored.buffer)


@st.composite
def problems(draw):
    batch = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
    m = draw(st.sampled_from([1, 2, 5, 6, 7, 13, 40, 150]))
    n = draw(st.sampled_from([1, 3, 15, 16, 17, 33, 64]))
    k = draw(st.sampled_from([1, 2, 4, 31, 32, 33, 70, 260]))
    # Each operand's rows/cols extents may exceed m/n/k (padding the kernel must not read or write).
    extra = lambda: draw(st.sampled_from([0, 0, 2]))  # noqa: E731
    a = draw(storage(batch, m + extra(), k + extra(), math.nan))
    b_shared = bool(batch) and draw(st.booleans())
    b = draw(storage(() if b_shared else batch, k + extra(), n + extra(), math.nan))  # placed as it is stored
    c = draw(storage(batch, m + extra(), n + extra(), SENTINEL))
    alpha = draw(st.sampled_from([1.0, 0.5, -2.0]))
    start = draw(st.sampled_from(["zero", "accumulate", "bias"]))  # what C starts from
    beta = draw(st.sampled_from([1.0, -0.5]))
    return batch, (m, n, k), a, b, c, alpha, start, beta, b_shared


def run_problem(problem, seed: int) -> tuple:
    """Places the problem's random operands; runs the tile GEMM; returns (C, expected, input buffers before)."""
    batch, (m, n, k), a, b, c, alpha, start, beta, b_shared = problem
    nb = math.prod(batch)
    gen = torch.Generator().manual_seed(seed)
    av, bv = torch.randn(nb, m, k, generator=gen), torch.randn(1 if b_shared else nb, k, n, generator=gen)
    bv = bv.expand(nb, k, n)
    a.place(av)
    b.place(bv[:1] if b_shared else bv)
    b_view = shared(b, batch) if b_shared else b
    want = alpha * (av.double() @ bv.double())
    bias = None
    if start == "accumulate":
        cv = torch.randn(nb, m, n, generator=gen)
        c.place(cv)
        want += cv.double()
    elif start == "bias":
        bias = torch.randn(n + 3, generator=gen)
        want += beta * bias[:n].double()
    a_before, b_before, c_before = a.buffer.clone(), b.buffer.clone(), c.buffer.clone()
    _C._tile_gemm(c.view, c.groups, a.view, a.groups, b_view.view, b_view.groups, m, n, k, alpha,
                  start == "accumulate", bias, beta)
    return want, a_before, b_before, c_before


@pytest.mark.parametrize("name", KERNELS)
@given(problem=problems(), rnd=st.randoms(use_true_random=False))
def test_tile_gemm_matches_float64(name, problem, rnd):
    """Any tiling, dim order and padding of A, B and C, B shared by the batch or not, on every kernel."""
    _, (m, n, k), a, b, c, *_ = problem
    with kernel(name):
        want, a_before, b_before, c_before = run_problem(problem, rnd.randrange(1 << 30))
    got = c.logical()[:, :m, :n].double()
    torch.testing.assert_close(got, want, atol=1e-4 * math.sqrt(k), rtol=1e-5)
    assert torch.equal(a.buffer.nan_to_num(7.0), a_before.nan_to_num(7.0))
    assert torch.equal(b.buffer.nan_to_num(7.0), b_before.nan_to_num(7.0))
    kept = ~c.positions(m, n)  # everything but the m x n results keeps its bits
    assert torch.equal(c.buffer[kept], c_before[kept])


@pytest.mark.parametrize("name", KERNELS)
def test_a_shared_weight_over_rows_interleaved_with_the_batch(name):
    """A batch of two 6-row matrices whose rows interleave (batch stride 1, row stride 2) times
    one shared B: folded into one 12-row strip, whose first and last rows are 11 apart without
    being adjacent; packed as adjacent they gave the other batch entry's rows."""
    buffer = torch.randn(12 * 3, generator=torch.Generator().manual_seed(3))
    a = buffer.as_strided((2, 6, 3), (1, 2, 12))  # [batch][row][k]
    b = torch.randn(3, 5, generator=torch.Generator().manual_seed(4))
    b_view = b.as_strided((2, 3, 5), (0, 5, 1))
    out = torch.full((2, 6, 5), SENTINEL)
    groups = ([0], [1], [2])
    with kernel(name):
        _C._tile_gemm(out, groups, a, groups, b_view, groups, 6, 5, 3, 1.0, False)
    torch.testing.assert_close(out.double(), a.double() @ b.double(), atol=1e-5, rtol=1e-5)


def sticked(x: torch.Tensor, tiles: int) -> torch.Tensor:
    """``x`` (rows, cols) in tiles of 32 columns, ``[tiles, rows, 32]``, zero padded."""
    padded = torch.zeros(x.shape[0], tiles * 32)
    padded[:, :x.shape[1]] = x
    return padded.view(x.shape[0], tiles, 32).permute(1, 0, 2).contiguous()


def test_transposed_operands_are_the_same_view_with_groups_swapped():
    """``g.t() @ x`` read from g's tiles (rows in runs of the stick) equals the CPU's product."""
    g, x = torch.randn(96, 70), torch.randn(96, 40)
    g_tiles = sticked(g, 3)  # g sticked on its columns: [column tiles, rows, stick]
    x_tiles = sticked(x, 2)
    out = torch.full((2, 70, 32), SENTINEL)
    tiles = ([], [1], [0, 2])
    _C._tile_gemm(out, tiles, g_tiles, ([], [0, 2], [1]), x_tiles, tiles, 70, 40, 96, 1.0, False)
    torch.testing.assert_close(out.permute(1, 0, 2).reshape(70, 64)[:, :40], g.t() @ x, atol=1e-4, rtol=1e-5)
    assert bool((out.permute(1, 0, 2).reshape(70, 64)[:, 40:] == SENTINEL).all())


@pytest.mark.parametrize("case", ["dtype", "batch", "rows", "group", "k", "bias", "bias-accumulate"])
def test_bad_operands_raise_value_errors_naming_them(case):
    a, b, c = torch.randn(8, 4), torch.randn(4, 5), torch.zeros(8, 5)
    g = ([], [0], [1])
    args = [c, g, a, g, b, g, 8, 5, 4, 1.0, False]
    match = {"dtype": "A: expected a float32", "batch": "batch sizes differ", "rows": "A: needs 9 rows",
             "group": "C: dim 1 is out of range or in two groups",
             "k": "k must be positive", "bias": "bias: expected a contiguous float32 CPU vector of at least 5",
             "bias-accumulate": "bias: only without accumulate"}[case]
    if case == "dtype":
        args[2] = a.double()
    elif case == "batch":
        args[2], args[3] = a.view(2, 4, 4), ([0], [1], [2])
    elif case == "rows":
        args[6], args[0] = 9, torch.zeros(9, 5)
    elif case == "group":
        args[1] = ([], [1], [1])
    elif case == "k":
        args[8] = 0
    elif case == "bias":
        args.append(torch.randn(4))
    elif case == "bias-accumulate":
        args[10] = True
        args.append(torch.randn(5))
    with pytest.raises(ValueError, match=match):
        _C._tile_gemm(*args)


@pytest.mark.skipif(len(KERNELS) < 2, reason="this CPU runs one tile GEMM kernel (no AVX-512)")
@given(problem=problems(), rnd=st.randoms(use_true_random=False))
def test_kernels_give_the_same_bits(problem, rnd):
    """Every kernel sums each product in the same order with one FMA: C's buffer is bit for bit the same."""
    seed = rnd.randrange(1 << 30)
    results = []
    for name in KERNELS:
        with kernel(name):
            run_problem(problem, seed)
        results.append(problem[4].buffer.clone())
    for name, result in zip(KERNELS[1:], results[1:]):
        assert torch.equal(result.nan_to_num(7.0), results[0].nan_to_num(7.0)), name


def test_set_kernel_returns_the_old_one_and_refuses_others():
    old = _C._tile_gemm_set_kernel(KERNELS[-1])
    try:
        assert _C._tile_gemm_set_kernel(KERNELS[0]) == KERNELS[-1]
        with pytest.raises(ValueError, match="tile GEMM kernel avx9000 is not one this CPU runs"):
            _C._tile_gemm_set_kernel("avx9000")
        assert _C._tile_gemm_set_kernel(KERNELS[-1]) == KERNELS[0]  # the refused call changed nothing
    finally:
        _C._tile_gemm_set_kernel(old)


# (m, k, n) of device products of at least 4 million flops, which the tile GEMM splits over the
# threads: by row blocks, or, where a thread's block of strips would be uneven and the 16-column
# panels split more evenly, every thread all the rows and its share of the panels.
THREADED = [(128, 256, 256), (100, 256, 320), (144, 128, 256), (200, 256, 256), (40, 512, 512), (300, 96, 200),
            (3 * 24, 256, 144)]


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("m, k, n", THREADED)
def test_threaded_splits_write_every_element_once(m, k, n, threads):
    """Whichever way the work splits, every element of C is the product's: no strip or panel
    dropped or added twice."""
    gen = torch.Generator().manual_seed(m + n)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = (a.to("spyre") @ b.to("spyre")).cpu().double()
    finally:
        torch.set_num_threads(old)
    torch.testing.assert_close(got, a.double() @ b.double(), atol=1e-4 * math.sqrt(k), rtol=1e-5)
