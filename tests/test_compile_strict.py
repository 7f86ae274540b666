"""Strict mode at compile time: a graph that needs a restickify raises LayoutError."""

from __future__ import annotations

import pytest
import torch

import torch_layouts
from torch_layouts import LayoutError, SpyreTensorLayout


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(64, 128, dtype=torch.float16).to("spyre"), torch.randn(128, 64, dtype=torch.float16).to("spyre")


@pytest.mark.parametrize("backend_name", [None, "spyre"])
def test_needed_restickify_raises_naming_node_layouts_and_fix(backend_name: str | None) -> None:
    x, y = _inputs()
    f = torch.compile(lambda a, b: a * b.t(), **({} if backend_name is None else {"backend": backend_name}))
    torch_layouts.reset_stats()
    with torch_layouts.strict_layouts(), pytest.raises(LayoutError) as err:
        f(x, y)
    message = str(err.value)
    assert "node mul (aten.mul.Tensor)" in message
    assert str(x.device_tensor_layout()) in message and str(y.device_tensor_layout()) in message
    assert "Fix: " in message and "torch_layouts.restickify(" in message
    assert torch_layouts.stats()["kernel_calls"] == {}  # raised at compile time: nothing ran


def test_graph_needing_nothing_compiles_in_strict_mode() -> None:
    x, _ = _inputs()
    y = torch.randn(128, 64, dtype=torch.float16)
    yt = y.to("spyre", device_layout=SpyreTensorLayout((128, 64), torch.float16, [1, 0]))
    with torch_layouts.strict_layouts():
        out = torch.compile(lambda a, b: a * b.t(), backend="spyre")(x, yt)
    torch.testing.assert_close(out.cpu(), x.cpu() * y.t())


def test_outside_strict_mode_the_restickify_is_inserted_and_counted() -> None:
    x, y = _inputs()
    f = torch.compile(lambda a, b: a * b.t(), backend="spyre")
    f(x, y)
    torch_layouts.reset_stats()
    out = f(x, y)
    torch.testing.assert_close(out.cpu(), x.cpu() * y.cpu().t())
    assert torch_layouts.stats()["restickify_count"] == 1
