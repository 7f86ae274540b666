"""Shared test helpers: random bit-pattern tensors, random hand-built layouts, Spyre cases.

``layout_cases`` builds a core layout from an explicit plan (which device dim
steps along which host dims, by how much) and keeps that plan, so a test can
compute where every host element must land without asking the library;
``spyre_cases`` does the same from the documented Spyre default layout.
Strategies and helpers are handed to tests through session fixtures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st

from torch_layouts import DeviceLayout, SpyreTensorLayout

# The default profile keeps `make test` within CI's budget; `--hypothesis-profile=long`
# (make test-long) runs every property with ten times the examples.
settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", deadline=None, max_examples=1000,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long: slow variants, run by `make test-long`")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "long" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="long variant: run with `make test-long`")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


INT_OF_WIDTH = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
DEVICE_DTYPES = (
    torch.float16, torch.bfloat16, torch.float32, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2,
)


def as_bits(t: torch.Tensor) -> torch.Tensor:
    """The same memory as signed integers of the element's width (NaN payloads, -0.0 kept)."""
    return t.view(INT_OF_WIDTH[t.element_size()])


def random_bits(numel: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A 1-D tensor of random bit patterns; the first two are -0.0 and an all-ones NaN for floats.

    int64 values stay in int32's range: the device holds int64 as IEEE_INT32 and refuses others.
    """
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=gen).bool()
    if dtype == torch.int64:
        return random_bits(numel, torch.int32, seed).to(torch.int64)
    ints = INT_OF_WIDTH[dtype.itemsize]
    info = torch.iinfo(ints)
    out = torch.randint(info.min, info.max, (numel,), dtype=ints, generator=gen)
    out[:2] = torch.tensor([info.min, -1], dtype=ints)[: min(numel, 2)]
    return out.view(dtype)


def pad_bits(value: object, dtype: torch.dtype) -> int:
    """The bit pattern of ``value`` stored as ``dtype``."""
    return int(as_bits(torch.tensor([value], dtype=dtype))[0])


def unravel(linear: torch.Tensor, size: tuple[int, ...]) -> list[torch.Tensor]:
    """Row-major coordinates of flat indices."""
    coords = []
    for extent in reversed(size):
        coords.append(linear % extent)
        linear = linear // extent
    return coords[::-1]


def pad_values(dtype: torch.dtype) -> list[object]:
    """Pad values to try for ``dtype``: zero and exactly representable non-zero ones."""
    if dtype == torch.bool:
        return [False, True]
    if dtype == torch.uint8:
        return [0, 3]
    return [0, -3] if not dtype.is_floating_point else [0, -3, 1.5]


@dataclass(frozen=True)
class LayoutCase:
    """A layout plus the plan it was built from.

    ``roles[j]`` is ``("digit", group, step)`` (device dim j adds ``coord * step`` to the
    group's flat coordinate), ``("synthetic",)``, ``("broadcast",)`` or ``("unit",)`` (size 1).
    ``groups[g]`` is ``(host dims outer to inner, block)``; ``block`` (or None) is the
    row count of a 12 + 8 style tiling whose finer digits must stay below it.
    """

    host_size: tuple[int, ...]
    host_stride: tuple[int, ...]
    host_offset: int
    storage_numel: int
    device_size: tuple[int, ...]
    stride_map: tuple[int, ...]
    roles: tuple[tuple, ...]
    groups: tuple[tuple[tuple[int, ...], int | None], ...]
    dtype: torch.dtype
    pad_value: object

    def layout(self) -> DeviceLayout:
        return DeviceLayout(self.device_size, self.stride_map, self.dtype, pad_value=self.pad_value)

    @property
    def copies(self) -> int:
        """How many device positions hold each host element (broadcast dims replicate)."""
        return math.prod(n for n, r in zip(self.device_size, self.roles) if r[0] == "broadcast")

    def expected_host_map(self) -> torch.Tensor:
        """Row-major host index at every device position (-1 = padding), from the plan alone."""
        pos = torch.arange(math.prod(self.device_size))
        coords = unravel(pos, self.device_size)
        real = torch.ones_like(pos, dtype=torch.bool)
        linear = torch.zeros_like(pos)
        row_major = [math.prod(self.host_size[d + 1:]) for d in range(len(self.host_size))]
        for g, (dims, block) in enumerate(self.groups):
            total = torch.zeros_like(pos)
            below_block = torch.zeros_like(pos)
            for j, role in enumerate(self.roles):
                if role[0] == "digit" and role[1] == g:
                    total += coords[j] * role[2]
                    if block is not None and role[2] < block:
                        below_block += coords[j] * role[2]
            real &= total < math.prod(self.host_size[d] for d in dims)
            if block is not None:
                real &= below_block < block
            for d in reversed(dims):
                linear += (total % self.host_size[d]) * row_major[d]
                total //= self.host_size[d]
        for j, role in enumerate(self.roles):
            if role[0] == "synthetic":
                real &= coords[j] == 0
        return torch.where(real, linear, -1)

    def storage_offsets(self, linear: torch.Tensor) -> torch.Tensor:
        """Host storage offsets of row-major host indices."""
        out = torch.full_like(linear, self.host_offset)
        for c, s in zip(unravel(linear, self.host_size), self.host_stride):
            out += c * s
        return out


@st.composite
def host_views(draw: st.DrawFn, size: tuple[int, ...], strided: bool = True
               ) -> tuple[tuple[int, ...], int, int]:
    """Strides, storage offset and storage size of a view of ``size``: with ``strided``, a
    permutation of a bigger tensor, sliced (gaps, steps, offset); else row-major."""
    order = draw(st.permutations(range(len(size)))) if strided else list(range(len(size)))
    stride = [0] * len(size)
    running = 1
    for d in reversed(order):
        stride[d] = running * (draw(st.sampled_from([1, 1, 2])) if strided else 1)
        running = stride[d] * size[d] + (draw(st.sampled_from([0, 0, 2])) if strided else 0)
    offset = draw(st.integers(0, 3)) if strided else 0
    return tuple(stride), offset, offset + running


@st.composite
def layout_cases(draw: st.DrawFn, max_rank: int = 3, strided: bool = True,
                 host_size: tuple[int, ...] | None = None, dtypes: tuple = DEVICE_DTYPES) -> LayoutCase:
    """Random host tensors (permuted, sliced) with random tilings, padding, folds,
    12 + 8 style blocks, synthetic, broadcast and size-1 device dims."""
    if host_size is None:
        rank = draw(st.integers(0, max_rank))
        host_size = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    stride, offset, storage_numel = draw(host_views(host_size, strided))

    eligible = sorted((d for d in range(len(host_size)) if host_size[d] > 1), key=lambda d: stride[d])
    members: list[list[int]] = []
    for d in eligible:
        prev = members[-1][0] if members else None
        if prev is not None and stride[d] == stride[prev] * host_size[prev] and draw(st.booleans()):
            members[-1].insert(0, d)
        else:
            members.append([d])

    dims: list[tuple[int, int, tuple]] = []  # (device size, stride_map, role)
    groups = []
    for g, group in enumerate(members):
        extent = math.prod(host_size[d] for d in group)
        unit = stride[group[-1]]
        block = None
        if extent >= 3 and draw(st.booleans()):
            block = draw(st.integers(2, extent))
            a = draw(st.integers(-(-block // 2), block - 1))
            last = -(-extent // block) + (draw(st.integers(0, 1)) if block < extent else 0)
            digits = [(1, a), (a, 2), (block, last)]
        else:
            digits, step = [], 1
            for _ in range(draw(st.integers(0, 2))):
                s = draw(st.integers(2, 4))
                if step * s >= extent:
                    break
                digits.append((step, s))
                step *= s
            digits.append((step, -(-extent // step) + draw(st.integers(0, 1))))
        # A digit whose stride an outer member's stride divides would step along that member.
        ratios = [stride[d] // unit for d in group[:-1]]
        assume(not any(n > 1 and step % r == 0 for step, n in digits for r in ratios))
        dims += [(n, step * unit, ("digit", g, step)) for step, n in digits]
        groups.append((tuple(group), block))
    dims += [(draw(st.integers(2, 3)), -1, ("synthetic",)) for _ in range(draw(st.integers(0, 1)))]
    dims += [(draw(st.integers(2, 3)), 0, ("broadcast",)) for _ in range(draw(st.integers(0, 1)))]
    units = draw(st.integers(0 if dims else 1, 1))
    dims += [(1, draw(st.sampled_from([-1, 0, 5, 64])), ("unit",)) for _ in range(units)]
    dims = [dims[i] for i in draw(st.permutations(range(len(dims))))]
    dtype = draw(st.sampled_from(dtypes))
    return LayoutCase(
        host_size=host_size, host_stride=tuple(stride), host_offset=offset, storage_numel=storage_numel,
        device_size=tuple(n for n, _, _ in dims), stride_map=tuple(m for _, m, _ in dims),
        roles=tuple(r for _, _, r in dims), groups=tuple(groups), dtype=dtype,
        pad_value=draw(st.sampled_from(pad_values(dtype))),
    )


@dataclass(frozen=True)
class SpyreCase:
    """A host view and a Spyre dim_order, with the documented default layout written out."""

    host_size: tuple[int, ...]
    host_stride: tuple[int, ...]
    host_offset: int
    storage_numel: int
    dim_order: tuple[int, ...]
    dtype: torch.dtype
    pad_value: object

    @property
    def eps(self) -> int:
        device_itemsize = 4 if self.dtype == torch.int64 else self.dtype.itemsize  # int64 sticks as IEEE_INT32
        return 128 // device_itemsize

    def layout(self) -> SpyreTensorLayout:
        return SpyreTensorLayout(self.host_size, self.host_stride, self.dtype, list(self.dim_order),
                                 pad_value=self.pad_value)

    def _dims(self) -> list[tuple[int | None, str]]:
        """Device dims as (host dim, part): part is "whole", "tile", "elem" or "synthetic" (host dim None)."""
        order = self.dim_order
        if not self.host_size:
            return [(None, "synthetic"), (None, "synthetic")]
        if order[-1] == -1:  # sparse: [o1, ..., o(r-1), synthetic, o0, one element per stick]
            dims = order[:-1]
            return [(d, "whole") for d in dims[1:]] + [(None, "synthetic"), (dims[0], "whole"), (None, "synthetic")]
        stick = order[-1]
        if len(order) == 1:
            return [(stick, "tile"), (stick, "elem")]
        return [(d, "whole") for d in order[1:-1]] + [(stick, "tile"), (order[0], "whole"), (stick, "elem")]

    def device_size(self) -> tuple[int, ...]:
        extent = {"whole": lambda d: self.host_size[d], "tile": lambda d: -(-self.host_size[d] // self.eps),
                  "elem": lambda d: self.eps, "synthetic": lambda d: 1}
        out = [extent[part](d) for d, part in self._dims()]
        out[-1] = self.eps  # the stick is eps long even when it holds one element (sparse, rank 0)
        return tuple(out)

    def stride_map(self) -> tuple[int, ...]:
        """Host strides; the stick's tile dim gets eps * stride; size-1 and synthetic dims -1."""
        def host_stride(d: int | None, part: str) -> int:
            if d is None or self.host_size[d] == 1:
                return -1
            return self.host_stride[d] * (self.eps if part == "tile" else 1)
        return tuple(host_stride(d, part) for d, part in self._dims())

    def device_offsets(self) -> torch.Tensor:
        """Device offset of every host element, in row-major host order."""
        idx = unravel(torch.arange(math.prod(self.host_size)), self.host_size)
        coord = {"whole": lambda d: idx[d], "tile": lambda d: idx[d] // self.eps, "elem": lambda d: idx[d] % self.eps}
        size = self.device_size()
        offsets = torch.zeros(math.prod(self.host_size), dtype=torch.int64)
        for (d, part), step in zip(self._dims(), [math.prod(size[j + 1:]) for j in range(len(size))]):
            if part != "synthetic":
                offsets += coord[part](d) * step
        return offsets

    def host_values(self, storage: torch.Tensor) -> torch.Tensor:
        """The host view's elements in row-major order."""
        return storage.as_strided(self.host_size, self.host_stride, self.host_offset).reshape(-1)


@st.composite
def spyre_cases(draw: st.DrawFn, strided: bool = True, dtypes: tuple = DEVICE_DTYPES, max_rank: int = 4,
                host_size: tuple[int, ...] | None = None) -> SpyreCase:
    """Random host views with random dim_orders (sparse included); the stick dim may span tiles."""
    dtype = draw(st.sampled_from(dtypes))
    if host_size is None:
        rank = draw(st.integers(0, max_rank))
        sizes = [draw(st.integers(1, 5)) for _ in range(rank)]
    else:
        rank, sizes = len(host_size), list(host_size)
    order = list(draw(st.permutations(range(rank))))
    if draw(st.booleans()):
        order.append(-1)
    elif host_size is None and rank and draw(st.booleans()):
        sizes[order[-1]] = draw(st.integers(1, 2 * (128 // dtype.itemsize) + 3))
    size = tuple(sizes)
    stride, offset, storage_numel = draw(host_views(size, strided))
    return SpyreCase(size, stride, offset, storage_numel, tuple(order), dtype,
                     draw(st.sampled_from(pad_values(dtype))))


@pytest.fixture(scope="session")
def helpers() -> SimpleNamespace:
    """Strategies and helpers shared by the layout and DMA tests."""
    return SimpleNamespace(layout_cases=layout_cases, spyre_cases=spyre_cases, SpyreCase=SpyreCase,
                           random_bits=random_bits, as_bits=as_bits, pad_bits=pad_bits, unravel=unravel)


@pytest.fixture(params=[False, True], ids=["plain", "streaming"])
def streaming(request: pytest.FixtureRequest):
    """Every DMA copy streamed (non-temporal stores) or none, for the test's duration."""
    from torch_layouts import _C

    old = _C._set_stream_bytes(0 if request.param else 1 << 62)
    yield request.param
    _C._set_stream_bytes(old)


@pytest.fixture(params=["lines", "half_lines"])
def block_width(request: pytest.FixtureRequest):
    """Transposes of 2/4/8-byte units in AVX-512 blocks of whole 64-byte lines, or in the 256-bit
    blocks of half lines, for the test's duration (skipped where the CPU has no AVX-512BW)."""
    from torch_layouts import _C

    lines = request.param == "lines"
    if lines and not _C._line_blocks_available():
        pytest.skip("this CPU has no AVX-512F/BW line blocks")
    old = _C._set_line_blocks(lines)
    yield request.param
    _C._set_line_blocks(old)
