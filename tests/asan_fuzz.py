"""Fuzz the runtime's copy paths with invalid values; run it under AddressSanitizer.

Three kinds of random input, each either works correctly or raises a Python exception
(ValueError, TypeError, IndexError, RuntimeError; torch.OutOfMemoryError is a
RuntimeError), never touches memory outside its buffers and never crashes:

* DMA nests for the C++ executor (``torch_layouts._C._run_nests``) on small CPU buffers
  that are slices of bigger tensors: the guard elements around them must stay untouched,
  a failing call must leave the destination untouched, and a successful one must equal
  a reference computed here element by element;
* explicit layouts (random ``device_size``/``stride_map`` with huge and negative values)
  used with ``x.to("spyre", device_layout=...)``: a layout that is accepted must round
  trip bit for bit with its padding holding the pad value;
* runtime layout records (``_C.BoundLayout``) with random H2D/D2H nests, padding fills and
  view address tables: allocation, copies and view reads/writes check every offset, and
  the correct record works exactly.

``test_reliability_fuzz.py`` drives the same checks with hypothesis and keeps a regression
test for each bug the fuzzers found. Standalone, and under AddressSanitizer
(``make asan`` builds an instrumented copy of the repo and runs this there)::

    TORCH_LAYOUTS_DEVICE_MEMORY=4MiB python tests/asan_fuzz.py --iterations 5000 --seed 0
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Sequence

import torch

import torch_layouts
from torch_layouts import DataFormats, DeviceLayout, SpyreTensorLayout, _C

ALLOWED = (ValueError, TypeError, IndexError, RuntimeError)
INT64 = (-(2**63), 2**63 - 1)
WORK_LIMIT = 50_000  # element copies a nest may ask for and still be run
MAX_DEVICE_BYTES = 64 << 20  # layouts bigger than this are only moved when the capacity is below it
GUARD = 16  # guard elements on each side of a buffer
INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
BIG = [2**31 - 1, 2**31, 2**32, 2**40, 2**62 - 1, 2**62, 2**63 - 1, 2**63, 2**64, -(2**31), -(2**62), -(2**63),
       -(2**63) - 1]


def _fits(value: object) -> bool:
    return isinstance(value, int) and INT64[0] <= value <= INT64[1]


def _well_formed(nest: object) -> bool:
    """A 5-tuple of three equal-length int sequences and two ints, every value an int64."""
    if not isinstance(nest, tuple) or len(nest) != 5:
        return False
    loops, offsets = nest[:3], nest[3:]
    if not all(isinstance(s, (tuple, list)) for s in loops) or len({len(s) for s in loops}) != 1:
        return False
    return all(_fits(v) for s in loops for v in s) and all(_fits(v) for v in offsets)


def _inside(ranges: Sequence[int], strides: Sequence[int], offset: int, numel: int) -> bool:
    """Every element a non-empty nest addresses lies in [0, numel) (exact integer arithmetic)."""
    low = high = offset
    for r, s in zip(ranges, strides):
        reach = (r - 1) * s
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    return low >= 0 and high < numel


def expectation(nests: object, dst_numel: int, src_numel: int) -> str:
    """What a correct executor must do: "run", "raise", "either" (a no-op or an error), or
    "skip" (valid but too much work to run here)."""
    if not isinstance(nests, (list, tuple)) or not all(_well_formed(n) for n in nests):
        return "raise"
    verdict, work = "run", 0
    for ranges, dst_strides, src_strides, dst_offset, src_offset in nests:
        if any(r < 0 for r in ranges):
            if 0 not in ranges:
                return "raise"
            verdict = "either"  # a zero loop makes the nest empty; a negative one is an error
        elif 0 in ranges:
            if any(abs(v) >= 2**31 for v in (*ranges, *dst_strides, *src_strides, dst_offset, src_offset)):
                verdict = "either"  # an empty nest may still be rejected for overflowing values
        elif not (_inside(ranges, dst_strides, dst_offset, dst_numel)
                  and _inside(ranges, src_strides, src_offset, src_numel)):
            return "raise"
        else:
            work += math.prod(ranges)
    return "skip" if verdict == "run" and work > WORK_LIMIT else verdict


def _indices(ranges: Sequence[int], strides: Sequence[int], offset: int) -> torch.Tensor:
    idx = torch.tensor([offset], dtype=torch.int64)
    for r, s in zip(ranges, strides):
        idx = (idx[:, None] + torch.arange(r, dtype=torch.int64)[None, :] * s).reshape(-1)
    return idx


def reference(nests: Sequence[tuple], dst: torch.Tensor, src: torch.Tensor) -> list[set[int]]:
    """For each destination element, the values a correct run may leave there (several when
    one nest writes it more than once: the order within a nest is not specified)."""
    allowed = [{int(v)} for v in dst.tolist()]
    for ranges, dst_strides, src_strides, dst_offset, src_offset in nests:
        if 0 in ranges:
            continue
        d_idx, s_idx = _indices(ranges, dst_strides, dst_offset), _indices(ranges, src_strides, src_offset)
        values = src[s_idx].tolist()
        written: dict[int, set[int]] = {}
        for d, v in zip(d_idx.tolist(), values):
            written.setdefault(d, set()).add(int(v))
        for d, vs in written.items():
            allowed[d] = vs
    return allowed


def check_run_nests(nests: object, dst_numel: int, src_numel: int, element_size: int, seed: int = 0) -> str:
    """Run ``nests`` on guarded buffers; raise AssertionError if the executor misbehaves."""
    expect = expectation(nests, dst_numel, src_numel)
    if expect == "skip":
        return expect
    dtype = INT_OF_SIZE[element_size]
    gen = torch.Generator().manual_seed(seed)
    info = torch.iinfo(dtype)
    dst_big = torch.randint(info.min, info.max, (dst_numel + 2 * GUARD,), dtype=dtype, generator=gen)
    src_big = torch.randint(info.min, info.max, (src_numel + 2 * GUARD,), dtype=dtype, generator=gen)
    dst_before, src_before = dst_big.clone(), src_big.clone()
    dst, src = dst_big.narrow(0, GUARD, dst_numel), src_big.narrow(0, GUARD, src_numel)
    try:
        _C._run_nests(nests, dst, src)
        outcome = "ran"
    except ALLOWED as err:
        outcome = f"raised {type(err).__name__}"
    assert torch.equal(src_big, src_before), f"{nests!r}: the source buffer or its guards changed"
    assert torch.equal(dst_big[:GUARD], dst_before[:GUARD]) and torch.equal(
        dst_big[GUARD + dst_numel:], dst_before[GUARD + dst_numel:]), f"{nests!r}: wrote outside the destination"
    if outcome != "ran":
        assert expect in ("raise", "either"), f"{nests!r} on {dst_numel}/{src_numel} elements: {outcome}"
        assert torch.equal(dst_big, dst_before), f"{nests!r}: {outcome} after writing part of the destination"
        return "raised"
    assert expect in ("run", "either"), f"{nests!r} on {dst_numel}/{src_numel} elements was accepted"
    if expect == "run":
        allowed = reference(nests, dst_before[GUARD:GUARD + dst_numel], src)
        got = dst.tolist()
        bad = [i for i, (v, ok) in enumerate(zip(got, allowed)) if v not in ok]
        assert not bad, f"{nests!r}: wrong values at destination elements {bad[:8]}"
    return "ran"


# -- explicit layouts ------------------------------------------------------------------------------
def _as_bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(INT_OF_SIZE[t.element_size()])


def random_host(shape: Sequence[int], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A CPU tensor of random bit patterns (NaN payloads, -0.0 included for floats)."""
    gen = torch.Generator().manual_seed(seed)
    numel = math.prod(shape)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=gen).bool().view(tuple(shape))
    ints = torch.int32 if dtype == torch.int64 else INT_OF_SIZE[dtype.itemsize]  # int64 is held as IEEE_INT32
    info = torch.iinfo(ints)
    bits = torch.randint(info.min, info.max, (numel,), dtype=ints, generator=gen)
    return (bits.to(dtype) if dtype == torch.int64 else bits.view(dtype)).view(tuple(shape))


def make_layout(device_size: object, stride_map: object, dtype: torch.dtype, spyre: bool,
                pad_value: object = 0) -> DeviceLayout | None:
    """The layout, or None when the constructor rejects the values with ValueError/TypeError."""
    try:
        if spyre:
            return SpyreTensorLayout(device_size, stride_map, DataFormats(dtype), pad_value=pad_value)
        return DeviceLayout(device_size, stride_map, dtype, pad_value=pad_value)
    except (ValueError, TypeError):
        return None


def check_layout(layout: DeviceLayout, shape: Sequence[int], seed: int = 0, max_bytes: int | None = None) -> str:
    """Move a random host tensor into ``layout``: either an allowed exception or an exact round trip."""
    if max_bytes is not None and layout.nbytes > max_bytes:
        return "too big"
    x = random_host(shape, layout.dtype, seed)
    try:
        resolvable = layout.resolve(tuple(shape)) is not None
    except ValueError:
        resolvable = False
    try:
        y = x.to("spyre", device_layout=layout)
    except ALLOWED as err:
        assert not resolvable or isinstance(err, torch.OutOfMemoryError), (
            f"{layout!r} holds {list(shape)} but the move raised {type(err).__name__}: {err}")
        return "raised"
    assert resolvable, f"{layout!r} cannot hold {list(shape)}, yet the move succeeded"
    assert torch.equal(_as_bits(y.cpu()), _as_bits(x)), f"{layout!r}: round trip of {list(shape)} changed bits"
    memory = _as_bits(torch_layouts.device_memory(y))
    host_map = layout.host_map(tuple(shape))
    real = host_map >= 0
    assert torch.equal(memory[real], _as_bits(x).reshape(-1)[host_map[real]]), f"{layout!r}: misplaced elements"
    pad = _as_bits(torch.tensor([layout.pad_value], dtype=layout.dtype))[0]
    assert bool((memory[~real] == pad).all()), f"{layout!r}: padding does not hold {layout.pad_value!r}"
    return "ran"


# -- runtime layout records ------------------------------------------------------------------------
# A record for a [numel] float32 buffer holding a [numel] host tensor: (h2d, d2h, fills, address).
Record = tuple[object, object, object, object]


def identity_record(numel: int) -> Record:
    """The correct record: one contiguous nest each way, no padding, the identity address table."""
    nest = [((numel,), (1,), (1,), 0, 0)]
    address = ([(0, 1)], [([0], [(1, 1)])], []) if numel > 1 else ([], [], [])
    return nest, nest, [], address


def check_bound_layout(numel: int, record: Record) -> str:
    """A runtime layout record (``_C.BoundLayout``) with arbitrary nests, padding fills and view
    address table: building it, allocating its buffer (runs the fills), H2D and D2H (run the
    nests) and view reads/writes (use the address table) work or raise an allowed exception;
    the correct record must work exactly; every allocated block is freed again."""
    h2d, d2h, fills, address = record
    layout = DeviceLayout([max(numel, 1)], [1], torch.float32)
    nests = [h2d, d2h, [(r, s, s, o, o) for r, s, o in fills] if isinstance(fills, list) else fills]
    if any(expectation(n, layout.device_numel, layout.device_numel) == "skip" for n in nests):
        return "skip"  # in bounds, but too many element copies to run here
    valid = record == identity_record(numel)
    values = torch.arange(numel, dtype=torch.float32)
    before = torch.spyre.memory_allocated()
    outcome = "ran"
    try:
        info = _C.BoundLayout(layout, [numel], [1], torch.float32, layout.device_numel, 4 * layout.device_numel,
                             h2d, d2h, fills, 0.0, False, address)
        tensor = _C._empty_with_layout(info, 0)
        tensor.copy_(values)
        back = tensor.cpu()
        view = tensor[1::2].cpu()
        tensor[::3].copy_(-values[::3])
        written = tensor.cpu()
        if valid:
            expected = values.clone()
            expected[::3] *= -1
            assert torch.equal(back, values) and torch.equal(view, values[1::2]) and torch.equal(written, expected)
    except ALLOWED as err:
        assert not valid, f"the correct record for {numel} elements failed: {type(err).__name__}: {err}"
        outcome = "raised"
    tensor = info = None
    assert torch.spyre.memory_allocated() == before, "a layout record leaked device memory"
    return outcome


# -- random inputs (the standalone loop; the test suite uses hypothesis instead) -------------------
def _value(rng: random.Random, small: Sequence[int]) -> int:
    return rng.choice(BIG) if rng.random() < 0.15 else rng.choice(small)


def random_nests(rng: random.Random, dst_numel: int, src_numel: int) -> object:
    """Mostly well-formed nests with small, boundary, huge and negative values; a few malformed."""
    nests: list[object] = []
    for _ in range(rng.randint(0, 3)):
        rank = rng.randint(0, 3)
        ranges = [_value(rng, [0, 1, 1, 2, 3, 4, 5, 8, -1]) for _ in range(rank)]
        dst_strides = [_value(rng, [-2, -1, 0, 1, 1, 2, 3, 4, 8]) for _ in range(rank)]
        src_strides = [_value(rng, [-2, -1, 0, 1, 1, 2, 3, 4, 8]) for _ in range(rank)]
        dst_offset = _value(rng, [0, 0, 1, 3, dst_numel - 1, dst_numel, -1])
        src_offset = _value(rng, [0, 0, 1, 3, src_numel - 1, src_numel, -1])
        nest: list[object] = [tuple(ranges), tuple(dst_strides), tuple(src_strides), dst_offset, src_offset]
        roll = rng.random()
        if roll < 0.03:
            nest.pop()
        elif roll < 0.06 and rank:
            nest[1] = nest[1][:-1]
        elif roll < 0.08:
            nest[rng.randint(0, 4)] = rng.choice([None, 2.5, "x", (1.5,)])
        nests.append(tuple(nest))
    return nests


def random_address(rng: random.Random) -> object:
    """An address table (host_order, groups, copies) with small, boundary, huge and negative values."""
    def pairs() -> list[tuple[int, int]]:
        return [(_value(rng, [0, 0, 0, 1, -1]), _value(rng, [1, 1, 2, 3, -1, 0])) for _ in range(rng.randint(0, 2))]

    groups = [([_value(rng, [0, 0, 0, 1]) for _ in range(rng.randint(0, 2))], pairs())
              for _ in range(rng.randint(0, 2))]
    return (pairs(), groups, pairs()) if rng.random() > 0.03 else rng.choice([None, (1,), ([(0,)], [], [])])


def random_record(rng: random.Random, numel: int) -> Record:
    """Often the correct record with one part replaced by random values, else all random."""
    fills = [n[:2] + n[3:4] for n in random_nests(rng, numel, numel) if isinstance(n, tuple) and len(n) == 5]
    rand = [random_nests(rng, numel, numel), random_nests(rng, numel, numel), fills, random_address(rng)]
    if rng.random() < 0.5:
        return tuple(rand)
    record = list(identity_record(numel))
    if rng.random() < 0.8:
        part = rng.randrange(4)
        record[part] = rand[part]
    return tuple(record)


def random_layout(rng: random.Random) -> tuple[object, object, torch.dtype, bool, tuple[int, ...]]:
    """Random explicit layout values (often plausible, sometimes huge or negative) and a host shape."""
    dtype = rng.choice([torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.int32, torch.bool])
    shape = tuple(rng.choice([0, 1, 2, 3, 4, 5, 7]) for _ in range(rng.randint(0, 3)))
    rank = rng.randint(1, 4)
    device_size = [_value(rng, [0, 1, 2, 3, 4, 5, 7, 8, 16]) for _ in range(rank)]
    stride_map = [_value(rng, [-1, -1, 0, 1, 1, 2, 3, 4, 5, 7, 8, 12, 16, 35]) for _ in range(rank)]
    spyre = rng.random() < 0.3
    if spyre:
        device_size[-1] = rng.choice([128 // dtype.itemsize, 128 // dtype.itemsize, 7, -64])
    return device_size, stride_map, dtype, spyre, shape


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    capacity = _C._capacity(0)
    max_bytes = None if capacity <= MAX_DEVICE_BYTES else MAX_DEVICE_BYTES  # beyond: OOM, never host memory
    tally: dict[str, int] = {}
    for i in range(args.iterations):
        dst_numel, src_numel = rng.randint(0, 48), rng.randint(0, 48)
        nests = random_nests(rng, dst_numel, src_numel)
        result = check_run_nests(nests, dst_numel, src_numel, rng.choice([1, 2, 4, 8]), seed=i)
        tally[f"nests {result}"] = tally.get(f"nests {result}", 0) + 1
        numel = rng.randint(0, 12)
        result = check_bound_layout(numel, random_record(rng, numel))
        tally[f"record {result}"] = tally.get(f"record {result}", 0) + 1
        device_size, stride_map, dtype, spyre, shape = random_layout(rng)
        layout = make_layout(device_size, stride_map, dtype, spyre)
        result = "rejected" if layout is None else check_layout(layout, shape, seed=i, max_bytes=max_bytes)
        tally[f"layout {result}"] = tally.get(f"layout {result}", 0) + 1
    print(f"asan_fuzz: {args.iterations} iterations, seed {args.seed}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
