"""cat and stack on the device: the CPU's values and errors, the default layout of the result's shape
with the pad value in its padding, no CPU fallback, and replays by the runtime's front."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import padding_holds_pad_value, raises_like_the_cpu
from torch_layouts import SpyreTensorLayout
from torch_layouts.ops import concat, elementwise

F16, F32, BF16 = torch.float16, torch.float32, torch.bfloat16


def randn(shape, dtype=F32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# id, op on a list of tensors, the inputs' (shape, dtype, dim_order or None).
CASES = [
    ("cat-last-short-sticks", lambda ts: torch.cat(ts, -1), [((32, 10), F32, None), ((32, 10), F32, None)]),
    ("cat-first-padded", lambda ts: torch.cat(ts, 0), [((5, 70), F32, None), ((3, 70), F32, None)]),
    ("cat-sticks-half", lambda ts: torch.cat(ts, 1), [((16, 128), F16, None), ((16, 64), F16, None)]),
    ("cat-dim-order", lambda ts: torch.cat(ts, 1), [((8, 64), F32, [1, 0]), ((8, 40), F32, None)]),
    ("cat-promotes", lambda ts: torch.cat(ts, 0), [((4, 70), F32, None), ((2, 70), F16, None)]),
    ("cat-three-3d", lambda ts: torch.cat(ts, 1), [((2, 3, 40), BF16, None)] * 3),
    ("cat-skips-empty-1d", lambda ts: torch.cat(ts, 0), [((0,), F32, None), ((6, 9), F32, None)]),
    ("stack-first", lambda ts: torch.stack(ts), [((32, 10), F32, None), ((32, 10), F32, None)]),
    ("stack-last-half", lambda ts: torch.stack(ts, -1), [((4, 6, 70), F16, None), ((4, 6, 70), F16, None)]),
    ("stack-middle-dim-order", lambda ts: torch.stack(ts, 1), [((8, 64), F32, [1, 0]), ((8, 64), F32, None)]),
]


def _inputs(specs, seed=0):
    host = [randn(shape, dtype, seed + k) for k, (shape, dtype, _) in enumerate(specs)]
    dev = [h.to("spyre") if order is None else h.to("spyre", device_layout=SpyreTensorLayout(shape, dtype, order))
           for h, (shape, dtype, order) in zip(host, specs)]
    return host, dev


@pytest.mark.parametrize("_, fn, specs", CASES, ids=[c[0] for c in CASES])
def test_cat_and_stack_match_the_cpu_and_replay(_, fn, specs, monkeypatch):
    elementwise.forget_recipes()
    entered = []
    original = concat._concat
    monkeypatch.setattr(concat, "_concat", lambda *a: entered.append(1) or original(*a))
    torch_layouts.reset_stats()
    for seed in range(3):
        host, dev = _inputs(specs, seed)
        out, expected = fn(dev), fn(host)
        assert out.dtype == expected.dtype and torch.equal(out.cpu(), expected)
        assert out.device_tensor_layout() == SpyreTensorLayout(tuple(expected.shape), expected.dtype)
        assert padding_holds_pad_value(out)
        assert all(torch.equal(d.cpu(), h) for d, h in zip(dev, host))  # the inputs untouched
    assert len(entered) == 1, "a replayed call entered Python"
    assert torch_layouts.stats()["fallbacks"] == {}


A = torch.randn(3, 4)
ERRORS = [
    ("sizes", lambda d: torch.cat([A.to(d), torch.randn(4, 4).to(d)], 1)),
    ("dims", lambda d: torch.cat([A.to(d), torch.randn(3, 4, 1).to(d)])),
    ("zero-dim", lambda d: torch.cat([torch.tensor(1.0).to(d)], 0)),
    ("dim-range", lambda d: torch.cat([A.to(d)], 5)),
    ("stack-sizes", lambda d: torch.stack([A.to(d), torch.randn(4, 4).to(d)])),
    ("stack-dim-range", lambda d: torch.stack([A.to(d)], 3)),
]


@pytest.mark.parametrize("_, fn", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors_are_the_cpus(_, fn):
    raises_like_the_cpu(fn)


def test_mixed_devices_are_rejected():
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([A.to("spyre"), A], 0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.integers(1, 3), st.sampled_from([F32, F16, BF16]),
       st.booleans(), st.data())
def test_cat_of_any_geometry_is_the_cpus_and_replays_its_bits(shape, count, dtype, stacked, data):
    """Inputs of random shapes, layouts (dim orders) and extents along the dim: the CPU's bits, the
    same bits and layout when replayed, the pad value in the padding."""
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    specs = []
    for _ in range(count):
        size = list(shape)
        if not stacked:
            size[dim] = data.draw(st.integers(1, 40))
        specs.append((tuple(size), dtype, data.draw(st.permutations(range(len(shape))))))
    elementwise.forget_recipes()
    host, dev = _inputs(specs)
    fn = (lambda ts: torch.stack(ts, dim)) if stacked else (lambda ts: torch.cat(ts, dim))
    results = [fn(dev) for _ in range(3)]
    expected = fn(host)
    for r in results:
        assert torch.equal(r.cpu(), expected) and r.device_tensor_layout() == results[0].device_tensor_layout()
        assert padding_holds_pad_value(r)
