"""``argmax``, ``argmin``, ``max``/``min`` over a dim on the device (``ops/arg_extremes.py``): over
the stick dim the runtime's row kernel gives the CPU's indices (the first among ties, the first
NaN) and values, in every instruction set; elsewhere the CPU kernel on the views."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import kernels_in, stays_on_device
from torch_layouts import SpyreTensorLayout, _C
from torch_layouts.ops import arg_extremes


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal, NaN where NaN (bit for bit: -0.0 and 0.0 differ)."""
    bits = {4: torch.int32, 2: torch.int16, 8: torch.int64}[want.element_size()]
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(got.view(bits), want.view(bits))


@st.composite
def inputs(draw: st.DrawFn) -> torch.Tensor:
    """Rows over classes (part of a stick, whole sticks, a padded last one), 2-D or 3-D, with
    repeated extremes, NaNs, infinities and signed zeros drawn in."""
    lead = draw(st.lists(st.integers(1, 40), min_size=1, max_size=2))
    classes = draw(st.sampled_from([1, 7, 32, 33, 64, 70, 100, 1000]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    x = torch.randn(*lead, classes, generator=gen).to(draw(st.sampled_from([torch.float32, torch.float16])))
    flat = x.view(-1)
    for value in draw(st.lists(st.sampled_from([9.0, -9.0, float("nan"), float("inf"), -float("inf"), 0.0, -0.0]),
                               max_size=6)):
        flat[torch.randint(0, flat.numel(), (draw(st.integers(1, 4)),), generator=gen)] = value
    return x


@settings(max_examples=80, deadline=None)
@given(inputs(), st.booleans(), st.sampled_from(_C._rows_math_sets()))
def test_extremes_over_the_stick_dim_are_the_cpus(x, keepdim, instructions):
    """Over the last dim (the stick dim), the row kernel taking every size: each op's indices and
    values the CPU's bits; the row kernel ran (but over a single class, where ATen's kernel on the
    view does), with no byte to or from the host."""
    device = x.to("spyre")
    taken = []
    with pytest.MonkeyPatch.context() as patch, kernels_in(_C._rows_set_math, instructions):
        patch.setattr(arg_extremes, "ROWS_FROM", 0)
        patch.setattr(arg_extremes, "PLANS", {})  # (a kept "not taken" from the default threshold)
        patch.setattr(arg_extremes, "_on_rows", lambda *a, f=arg_extremes._on_rows: taken.append(f(*a)) or taken[-1])
        torch_layouts.reset_stats()
        got = [getattr(device, op)(-1, keepdim) for op in ("argmax", "argmin")]
        got += [t for op in ("max", "min") for t in getattr(device, op)(-1, keepdim)]
        stays_on_device()
    if x.shape[-1] > 1:  # (one class: no stick dim, ATen's kernel, replayed)
        assert len(taken) == 4 and all(t is not None for t in taken)
    want = [getattr(x, op)(-1, keepdim) for op in ("argmax", "argmin")]
    want += [t for op in ("max", "min") for t in getattr(x, op)(-1, keepdim)]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert _same(g.cpu(), w), k


# id, host shape, dim, Spyre dim_order (None: default): the row kernel for large inputs over the
# stick dim, the CPU kernel on the views elsewhere
CASES = [
    ("rows of sticks", (300, 1024), -1, None, True),
    ("classes in a padded last stick", (256, 1000), 1, None, True),
    ("3-D logits", (4, 64, 1000), 2, None, True),
    ("columns", (1024, 96), 0, None, False),
    ("a permuted layout's stick dim", (96, 1024), 0, [1, 0], True),
    ("small", (30, 70), -1, None, False),
]


@pytest.mark.parametrize("_, shape, dim, order, rows", CASES, ids=[c[0] for c in CASES])
def test_each_path_gives_the_cpus_results(_, shape, dim, order, rows):
    """The row kernel where it applies, the CPU kernel on the views elsewhere: the CPU's bits,
    on repeated calls."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape)))
    layout = None if order is None else SpyreTensorLayout(shape, x.dtype, order)
    device = x.to("spyre", device_layout=layout)
    taken = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(arg_extremes, "_on_rows", lambda *a, f=arg_extremes._on_rows: taken.append(f(*a)) or taken[-1])
        for _ in range(2):
            assert _same(device.argmax(dim).cpu(), x.argmax(dim))
            got, want = device.min(dim, keepdim=True), x.min(dim, keepdim=True)
            assert _same(got.values.cpu(), want.values) and _same(got.indices.cpu(), want.indices)
    assert all((t is not None) == rows for t in taken)


# id, host shape, dim, whether the rows' results come in host order
KEPT = [
    ("rows of sticks", (300, 1024), 1, True),
    ("classes in a padded last stick", (256, 1000), 1, True),
    ("3-D logits, batch rows adjacent", (4, 64, 1000), 2, False),
    ("3-D, a padded stick", (3, 40, 700), -1, False),
]


@pytest.mark.parametrize("_, shape, dim, in_order", KEPT, ids=[c[0] for c in KEPT])
def test_the_row_kernels_plan_is_kept_per_geometry(_, shape, dim, in_order, monkeypatch):
    """The first call over the stick dim plans (the readable view, the rows, their host order,
    found to be the identity or not); later calls of the geometry, on other data, reuse it and
    give the CPU's indices and values bit for bit."""
    monkeypatch.setattr(arg_extremes, "PLANS", {})
    planned = []
    monkeypatch.setattr(arg_extremes, "readable", lambda *a, f=arg_extremes.readable: planned.append(1) or f(*a))
    for seed in range(3):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        x.view(-1)[seed * 7] = float("nan") if seed == 2 else 5.0
        device = x.to("spyre")
        for op in ("argmax", "argmin"):
            assert _same(getattr(device, op)(dim).cpu(), getattr(x, op)(dim))
        for op in ("max", "min"):
            got, want = getattr(device, op)(dim, keepdim=True), getattr(x, op)(dim, keepdim=True)
            assert _same(got.values.cpu(), want.values) and _same(got.indices.cpu(), want.indices)
    assert len(planned) == 1
    (plan,) = arg_extremes.PLANS.values()
    assert (plan.order is None) == in_order


def test_errors_are_the_cpus():
    """A dim out of range: the CPU's IndexError."""
    x = torch.randn(300, 1000)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.to("spyre").argmax(2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.to("spyre").max(-3)
