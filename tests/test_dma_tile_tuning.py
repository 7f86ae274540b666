"""Tile tuning of the DMA executor (``csrc/tile_tuning.h``): the first calls of a repeated copy
try tile shapes, timed, then every call runs the fastest. Any shape must copy the same bytes, so
the properties force random shapes on random nests against PyTorch's strided copy, and follow a
tuned geometry from its first call to its settled shape with every result checked."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dma_support import BITS, check_permuted_copy, check_rows_continued
from torch_layouts import _C


@pytest.fixture(autouse=True)
def fresh_tunings():
    _C._forget_tile_tunings()
    yield
    _C._force_tile_shape(0, 0)
    _C._force_tile_shape(0, 0, extended=True)
    _C._set_tile_tuning(True)
    _C._forget_tile_tunings()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), a=st.integers(1, 1100), b=st.integers(1, 300))
def test_every_tile_shape_copies_the_same_bytes(streaming: bool, block_width: str, data: st.DataObject, a: int,
                                               b: int) -> None:
    """Any tile shape, forced on a random permuted, padded, unaligned nest of any element size,
    plain or streamed: PyTorch's strided copy bit for bit, nothing outside the nest written."""
    rank = data.draw(st.integers(2, 4))
    shape = data.draw(st.lists(st.sampled_from([1, 2, 3, 7, 16, 17, 64, 65, 130]), min_size=rank, max_size=rank))
    while math.prod(shape) > 60_000:
        shape[shape.index(max(shape))] //= 2
    order = list(data.draw(st.permutations(range(rank))))
    pads = st.lists(st.sampled_from([0, 0, 1, 3]), min_size=rank, max_size=rank)
    esize = data.draw(st.sampled_from([1, 2, 4, 8]))
    _C._force_tile_shape(a, b, plain=data.draw(st.booleans()))  # plain: no streaming where it would
    check_permuted_copy(shape, order, data.draw(pads), data.draw(pads), esize)


@settings(max_examples=80, deadline=None)
@given(esize=st.sampled_from([1, 2, 4, 8]), na=st.integers(2, 20), nb=st.integers(2, 20),
       ne=st.sampled_from([2, 9, 113, 1000]), outer=st.integers(1, 3), chunk=st.sampled_from([1, 100, 4096, 65536]),
       stream=st.booleans())
def test_every_chunking_of_extended_tiles_copies_the_same_bytes(esize: int, na: int, nb: int, ne: int, outer: int,
                                                                 chunk: int, stream: bool) -> None:
    """A loop e continuing both sides' rows ([outer][a][e][b] -> [outer][b][e][a], MACE's
    CONV2D_FILTER, OIhw16i16o) in chunks of any size, rows streamed or not, and back: PyTorch's
    strided copy bit for bit, the elements between outer positions untouched."""
    _C._force_tile_shape(chunk, int(stream), extended=True)
    check_rows_continued(BITS[esize], na, nb, ne, outer, gap=5)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("chunk", [100, 4096, 65536])
@pytest.mark.parametrize("esize, na, nb", [(2, 3, 2), (2, 9, 2), (2, 13, 4), (2, 9, 4), (2, 33, 4), (4, 9, 4),
                                           (4, 9, 16), (4, 3, 2), (8, 3, 2), (4, 5, 8)])
@pytest.mark.parametrize("ne", [9, 113, 8192])
def test_extended_tiles_of_odd_width_rows_copy_the_same_bytes(esize: int, na: int, nb: int, ne: int, chunk: int,
                                                               stream: bool) -> None:
    """Destination rows of chunks of an odd width (na units: MACE CONV2D_FILTER's D2H, 9 taps
    from records of 4 channels; OIhw16i16o's, from records of 16) from source chunks of whole
    words (nb units), in chunks of e of any size, streamed or not: the source chunks gathered
    first, then one transpose of the records; and back. PyTorch's strided copy bit for bit."""
    _C._force_tile_shape(chunk, int(stream), extended=True)
    check_rows_continued(BITS[esize], na, nb, ne, outer=2, gap=5)


def transpose_nest(rows: int, cols: int) -> tuple:
    """A rows x cols matrix into its transpose's buffer."""
    return ((rows, cols), (1, rows), (cols, 1), 0, 0)


@pytest.mark.parametrize("esize, rows, cols", [(2, 1024, 512), (4, 300, 1000), (8, 256, 300), (1, 2048, 600)])
def test_a_repeated_copy_settles_on_a_tried_shape_with_every_call_exact(streaming: bool, esize: int, rows: int,
                                                                        cols: int) -> None:
    src = torch.randint(-100, 100, (rows * cols,), dtype=torch.int64).to(BITS[esize])
    expected = src.view(rows, cols).t().reshape(-1)
    for call in range(_C._tile_trial_calls()):
        dst = torch.zeros_like(src)
        _C._run_nests([transpose_nest(rows, cols)], dst, src)
        assert torch.equal(dst, expected), f"call {call}"
    (state,) = _C._tile_tunings()
    shapes = state["shapes"]
    assert len(set(shapes)) == len(shapes) > 1
    assert all(1 <= a <= rows and 1 <= b <= cols for a, b, _ in shapes)
    # A copy that streams also tries shapes with plain stores; one that does not, none.
    assert any(plain for *_, plain in shapes) == streaming
    assert state["chosen"] in shapes
    best = state["best"]
    assert all(math.isfinite(t) and t > 0 for t in best)  # every shape was tried
    chosen = shapes.index(state["chosen"])
    # The rules' shape (first) stays unless the fastest beats it by the margin.
    assert (chosen == 0 and best[0] <= 1.1 * min(best)) or (best[chosen] == min(best) and 1.1 * best[chosen] < best[0])


def test_each_trial_runs_its_shape_twice_and_times_the_second() -> None:
    """A shape's first call after another's finds the bytes where the other shape left them (in
    the other thread's cache, if they split the work differently), so each trial is a pair of
    calls: the geometry settles only after two calls per trial (N shapes, then 3 or 4 finalists
    twice), not after one."""
    src = torch.arange(1024 * 512, dtype=torch.int16)
    expected = src.view(1024, 512).t().reshape(-1)

    def call() -> None:
        dst = torch.zeros_like(src)
        _C._run_nests([transpose_nest(1024, 512)], dst, src)
        assert torch.equal(dst, expected)

    call()  # the rules' shape, untimed; the tuning now holds its N shapes
    trials = len(_C._tile_tunings()[0]["shapes"]) + 2 * 4  # at most
    for _ in range(trials):  # as many calls as single trials could take
        call()
    assert _C._tile_tunings()[0]["chosen"] is None
    for _ in range(trials):  # each trial's second call
        call()
    (state,) = _C._tile_tunings()
    assert state["chosen"] in state["shapes"]


def test_a_large_flat_copy_tunes_only_whether_it_streams(streaming: bool) -> None:
    """One run of 1 MiB split over the threads: streamed, it tries plain stores too (two shapes of
    one tile); not streamed, it is not tuned. Every call exact."""
    src = torch.randint(-100, 100, (1 << 18,), dtype=torch.int32)
    for call in range(_C._tile_trial_calls()):
        dst = torch.zeros_like(src)
        _C._run_nests([((src.numel(),), (1,), (1,), 0, 0)], dst, src)
        assert torch.equal(dst, src), f"call {call}"
    tunings = _C._tile_tunings()
    if not streaming:
        assert tunings == []
        return
    (state,) = tunings
    assert state["shapes"] == [(1, 1, False), (1, 1, True)] and state["chosen"] in state["shapes"]


def test_small_copies_and_tuning_off_keep_the_rules_untimed() -> None:
    src = torch.arange(256 * 256, dtype=torch.int16)
    dst = torch.empty_like(src)
    for _ in range(_C._tile_trial_calls()):  # 128 KiB: below the tuning size
        _C._run_nests([transpose_nest(256, 256)], dst, src)
    assert _C._tile_tunings() == []
    big = torch.arange(1024 * 512, dtype=torch.int16)
    assert _C._set_tile_tuning(False) is True
    for _ in range(3):
        _C._run_nests([transpose_nest(1024, 512)], torch.empty_like(big), big)
    assert _C._tile_tunings() == []
    assert _C._set_tile_tuning(True) is False


def test_geometries_are_tuned_per_thread_count() -> None:
    src = torch.arange(1024 * 512, dtype=torch.int16)
    old = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for _ in range(2):
                _C._run_nests([transpose_nest(1024, 512)], torch.empty_like(src), src)
    finally:
        torch.set_num_threads(old)
    assert len(_C._tile_tunings()) == 2


def test_geometries_are_tuned_per_split() -> None:
    """A copy split by its source's rows and the same split by its destination's rows (a D2H) are
    two geometries: each settles on its own tile shape."""
    src = torch.arange(1024 * 512, dtype=torch.int16)
    for split in ("source", "destination"):
        for _ in range(2):
            _C._run_nests([transpose_nest(1024, 512)], torch.empty_like(src), src, split=split)
    assert len(_C._tile_tunings()) == 2


def test_extended_tiles_settle_on_a_tried_chunking() -> None:
    """MACE CONV2D_FILTER's D2H nest (float16, 2 MiB): tried chunkings, plain and streamed, every
    call exact."""
    o4, hw, i = 8, 9, 8192
    ranges, dst_strides, src_strides = (o4, hw, i, 4), (4 * i * hw, 1, hw, i * hw), (4 * i * hw, 4 * i, 4, 1)
    src = torch.randint(-100, 100, (o4 * hw * i * 4,), dtype=torch.int16)
    expected = torch.zeros_like(src)
    expected.as_strided(ranges, dst_strides).copy_(src.as_strided(ranges, src_strides))
    for call in range(_C._tile_trial_calls()):
        dst = torch.zeros_like(src)
        _C._run_nests([(ranges, dst_strides, src_strides, 0, 0)], dst, src)
        assert torch.equal(dst, expected), f"call {call}"
    (state,) = _C._tile_tunings()
    assert state["shapes"][0] == (16384, 0, False)  # the rules: 16 KiB chunks, plain stores
    assert {b for _, b, _ in state["shapes"]} == {0, 1}
    assert state["chosen"] in state["shapes"]


def test_threads_tuning_one_geometry_together_copy_exactly() -> None:
    src = torch.randint(-100, 100, (1024 * 512,), dtype=torch.int16)
    expected = src.view(1024, 512).t().reshape(-1)
    failures: list[int] = []

    def work(worker: int) -> None:
        for _ in range(_C._tile_trial_calls()):
            dst = torch.zeros_like(src)
            _C._run_nests([transpose_nest(1024, 512)], dst, src)
            if not torch.equal(dst, expected):
                failures.append(worker)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    (state,) = _C._tile_tunings()
    assert state["chosen"] in state["shapes"]


def test_environment_turns_tuning_off() -> None:
    code = "from torch_layouts import _C; print(_C._set_tile_tuning(True))"
    env = dict(os.environ, TORCH_LAYOUTS_TILE_TUNING="0", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
