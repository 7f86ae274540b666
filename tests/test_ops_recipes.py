"""Pointwise calls replay the recipe of an earlier call of the same geometry (``elementwise.Recipe``):
a replayed call gives the result the general path gives, for new results, in-place ops, ``out=``
tensors, broadcasting and padded layouts, and calls whose geometry differs (aliasing, another
device, strict mode) do not replay a recipe they do not match."""

from __future__ import annotations

import pytest
import torch

import torch_layouts
from ops_support import padding_holds_pad_value
from torch_layouts import LayoutError, SpyreTensorLayout
from torch_layouts.ops import elementwise

F16, F32 = torch.float16, torch.float32


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = F32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# One row per case: id, function of (a, b) on either device, shapes of a and b.
CASES = [
    ("add-unpadded", lambda a, b: a + b, (8, 64), (8, 64)),
    ("mul-padded", lambda a, b: a * b, (5, 70), (5, 70)),
    ("broadcast-bias", lambda a, b: a - b, (4, 6, 96), (96,)),
    ("scalar-alpha", lambda a, b: torch.add(a, b, alpha=0.5), (3, 40), (3, 40)),
    ("compare", lambda a, b: a > b, (6, 64), (6, 64)),
    ("in-place", lambda a, b: a.clone().mul_(b).add_(b, alpha=2), (6, 70), (6, 70)),
    ("transposed", lambda a, b: a.t() * b.t(), (64, 40), (64, 40)),
    ("half", lambda a, b: torch.maximum(a.half(), b.half()), (7, 65), (7, 65)),
]


@pytest.mark.parametrize("_, fn, ashape, bshape", CASES, ids=[c[0] for c in CASES])
def test_replayed_calls_match_the_cpu(_, fn, ashape, bshape):
    elementwise.RECIPES.clear()
    results = []
    for seed in range(3):  # the first call records, the others replay
        a, b = randn(*ashape, seed=seed), randn(*bshape, seed=seed + 10)
        out = fn(a.to("spyre"), b.to("spyre"))
        assert torch.equal(out.cpu(), fn(a, b))
        assert padding_holds_pad_value(out)
        results.append(out.device_tensor_layout())
    assert results[0] == results[1] == results[2]
    # a result whose sticks hold another element count is moved after the op: not recorded
    assert bool(elementwise.RECIPES) == (out.dtype != torch.bool)


def test_out_tensors_replay():
    elementwise.RECIPES.clear()
    for seed in range(3):
        a, b = randn(5, 70, seed=seed), randn(5, 70, seed=seed + 1)
        out = torch.empty(5, 70, device="spyre")
        torch.add(a.to("spyre"), b.to("spyre"), out=out)
        assert torch.equal(out.cpu(), a + b) and padding_holds_pad_value(out)


def test_an_aliased_operand_does_not_replay_the_unaliased_recipe():
    """``x.add_(y)`` then ``x.add_(x.view)``: same geometry, but the second reads its own target."""
    elementwise.RECIPES.clear()
    x, y = randn(64, 64), randn(64, 64, seed=1)
    dx = x.to("spyre")
    dx.add_(y.to("spyre").t())
    x.add_(y.t())
    dx.add_(dx.t())
    x.add_(x.t().clone())
    assert torch.equal(dx.cpu(), x)


def test_a_recipe_of_another_layout_is_not_replayed():
    elementwise.RECIPES.clear()
    a, b = randn(32, 64), randn(32, 64, seed=1)
    plain = a.to("spyre") + b.to("spyre")
    layout = SpyreTensorLayout((32, 64), F32, [1, 0])
    da, db = a.to("spyre", device_layout=layout), b.to("spyre", device_layout=layout)
    swapped = da + db
    assert torch.equal(plain.cpu(), a + b) and torch.equal(swapped.cpu(), a + b)
    assert swapped.device_tensor_layout() == da.device_tensor_layout() != plain.device_tensor_layout()


def test_strict_mode_is_not_bypassed_by_a_recipe():
    elementwise.RECIPES.clear()
    a = randn(40, 64)
    b = a.to("spyre", device_layout=SpyreTensorLayout((40, 64), F32, [1, 0]))
    first = a.to("spyre") + b  # restickifies b: not recorded
    assert torch.equal(first.cpu(), a + a)
    with torch_layouts.strict_layouts(), pytest.raises(LayoutError):
        a.to("spyre") + b


def test_mixed_devices_are_still_rejected_after_a_recipe():
    elementwise.RECIPES.clear()
    a = randn(4, 64).to("spyre")
    a + a
    with pytest.raises(RuntimeError, match="same device"):
        a + randn(4, 64)
