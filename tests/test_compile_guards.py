"""Layout guards: one recompile when an input's device layout changes, cache hits after."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from torch_layouts import SpyreTensorLayout
from torch_layouts.compile import lowering

X = torch.randn(64, 128, dtype=torch.float16)
TRANSPOSED = SpyreTensorLayout((64, 128), torch.float16, [1, 0])


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()
    counters.clear()


@pytest.mark.parametrize("backend_name", [None, "spyre"])
def test_layout_change_recompiles_once_and_same_layout_hits_cache(backend_name: str | None) -> None:
    a, b = X.to("spyre"), X.to("spyre", device_layout=TRANSPOSED)
    y = torch.randn(64, 128, dtype=torch.float16).to("spyre")
    f = torch.compile(lambda p, q: p * q + 1, **({} if backend_name is None else {"backend": backend_name}))
    frames = []
    for t in (a, a, b, b, a, b):
        out = f(t, y)
        torch.testing.assert_close(out.cpu(), X * y.cpu() + 1)
        frames.append(counters["frames"]["ok"])
    assert frames == [1, 1, 2, 2, 2, 2]
    assert counters["stats"]["unique_graphs"] == 2


def test_layouts_are_part_of_the_plan_cache_key() -> None:
    a, b = X.to("spyre"), X.to("spyre", device_layout=TRANSPOSED)
    f = torch.compile(lambda p: p.exp(), backend="spyre")
    before = dict(lowering.cache_stats)
    f(a)
    torch._dynamo.reset()
    f(a)  # the same graph and layout: the plan comes from the cache
    f(b)  # another layout: a new plan
    assert lowering.cache_stats["misses"] - before["misses"] == 2
    assert lowering.cache_stats["hits"] - before["hits"] == 1


def test_nested_compile_region_reuses_with_layout_guards() -> None:
    @torch.compiler.nested_compile_region
    def block(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).relu()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return block(block(x)) + 1

    a, b = X.to("spyre"), X.to("spyre", device_layout=TRANSPOSED)
    f = torch.compile(fn, backend="spyre")
    for t in (a, a, b, b):
        torch.testing.assert_close(f(t).cpu(), (X * 4).relu() + 1)
    assert counters["frames"]["ok"] == 2
