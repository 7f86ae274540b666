"""Reductions on device memory (sum, mean, amax, amin) against the CPU: values, result
layouts (sparse when the stick dim is reduced), padding that never leaks into a result,
and the pad value in the result's padding."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import padding_holds_pad_value
from torch_layouts import SpyreTensorLayout, htp, mace, tensorrt

F16, F32 = torch.float16, torch.float32


def tolerance(dtype: torch.dtype, count: int) -> dict:
    """Float16 sums are rounded differently when the device sums tile by tile."""
    if dtype in (F16, torch.bfloat16):
        return {"atol": 2e-3 * count ** 0.5 + 1e-2, "rtol": 1e-2}
    return {"atol": 1e-4 * count ** 0.5, "rtol": 1e-5}


def kind_tolerance(kind: str, dtype: torch.dtype, count: int) -> dict:
    """Sums' and means' ``tolerance``; extremes are exact."""
    return tolerance(dtype, count) if kind in ("sum", "mean") else {"atol": 0, "rtol": 0}


def expected_layout(shape, dtype, order, dims, keepdim):
    """Spyre's documented rule: drop the reduced dims; reducing the stick dim gives a sparse layout."""
    order = list(range(len(shape))) if order is None else list(order)
    sparse = order[-1] == -1 or order[-1] in dims
    real = [d for d in order if d != -1]
    if keepdim:
        out_shape = tuple(1 if d in dims else n for d, n in enumerate(shape))
    else:
        out_shape = tuple(n for d, n in enumerate(shape) if d not in dims)
        kept = [d for d in real if d not in dims]
        real = [sorted(kept).index(d) for d in kept]
    if not out_shape:
        return SpyreTensorLayout((), dtype)
    return SpyreTensorLayout(out_shape, dtype, real + ([-1] if sparse else []))


def test_issue_example():
    a = torch.randn(256, 256, dtype=F16).to("spyre")
    layout = a.sum(dim=1).device_tensor_layout()
    assert list(layout.device_size) == [1, 256, 64] and list(layout.stride_map) == [-1, 1, -1]


# One row per case: id, shape, dtype, dim_order (None: default), pad value, dims, keepdim.
CASES = [
    ("stick", (64, 256), F16, None, 0, (1,), False),
    ("rows", (64, 256), F16, None, 0, (0,), False),
    ("stick-keepdim", (40, 150), F32, None, 0, (1,), True),
    ("padded-stick", (3, 20, 150), F32, None, 0, (2,), False),
    ("middle", (3, 20, 150), F32, None, 0, (1,), True),
    ("two-dims", (3, 20, 150), F32, None, 0, (0, 2), False),
    ("all", (3, 20, 150), F32, None, 0, (0, 1, 2), False),
    ("dim-order-10", (96, 130), F16, [1, 0], 0, (0,), False),
    ("dim-order-10-other", (96, 130), F16, [1, 0], 0, (1,), False),
    ("dim-order-102", (3, 40, 70), F32, [1, 0, 2], 0, (1,), True),
    ("sparse-input", (16, 70), F16, [0, 1, -1], 0, (1,), False),
    ("sparse-input-rows", (16, 70), F16, [0, 1, -1], 0, (0,), True),
    ("pad-value", (9, 40), F32, None, 5.0, (1,), False),
    ("rank-1", (300,), F32, None, 0, (0,), False),
    ("short-stick-beside", (32, 10), F32, None, 0, (0,), False),  # one box: padding beside the reduced dim
    ("short-stick-pad-value", (6, 4, 10), F16, None, 5.0, (1,), True),
]


@pytest.mark.parametrize("_, shape, dtype, order, pad, dims, keepdim", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("kind", ["sum", "mean", "amax", "amin"])
def test_reductions(kind, _, shape, dtype, order, pad, dims, keepdim):
    gen = torch.Generator().manual_seed(len(shape) + len(dims))
    base = torch.rand(shape, generator=gen) + 1  # all positive: a zero leaking from padding would win amin
    if kind == "amax":
        base = -base  # all negative: a zero leaking from padding would win amax
    layout = SpyreTensorLayout(shape, dtype, order, pad_value=pad)
    count = 1
    for d in dims:
        count *= shape[d]
    # The second tensor has the first's geometry: its reduction replays the kept plan.
    for x in (base.to(dtype), (base * torch.linspace(0.5, 2, base.shape[-1])).to(dtype)):
        y = x.to("spyre", device_layout=layout)
        torch_layouts.reset_stats()
        out = getattr(y, kind)(dim=dims, keepdim=keepdim)
        stats = torch_layouts.stats()
        assert stats["fallbacks"] == {} and stats["restickify_count"] == 0
        ref = getattr(x, kind)(dim=dims, keepdim=keepdim)
        assert out.dtype == ref.dtype and out.shape == ref.shape
        torch.testing.assert_close(out.cpu(), ref, **tolerance(dtype, count))
        assert padding_holds_pad_value(out)
        assert out.device_tensor_layout() == expected_layout(shape, dtype, order, dims, keepdim)
        torch.testing.assert_close(y.cpu(), x, atol=0, rtol=0)  # the input is untouched


@pytest.mark.parametrize("kind", ["sum", "mean", "amax"])
def test_whole_tensor_reductions(kind):
    x = -torch.rand(5, 70) - 1
    out = getattr(x.to("spyre"), kind)()
    assert out.shape == () and out.device_tensor_layout() == SpyreTensorLayout((), F32)
    torch.testing.assert_close(out.cpu(), getattr(x, kind)(), **tolerance(F32, 350))
    assert padding_holds_pad_value(out)


def test_dtypes():
    ints = torch.randint(-100, 100, (7, 50), dtype=torch.int32)
    di = ints.to("spyre")
    cases = [(di.sum(1), ints.sum(1)), (di.amax(0), ints.amax(0)),
             (di.amin(1, keepdim=True), ints.amin(1, keepdim=True)), (di.sum(1, dtype=F32), ints.sum(1, dtype=F32)),
             (di.to(torch.bool).sum(0), ints.bool().sum(0))]
    for out, ref in cases:
        assert out.dtype == ref.dtype
        torch.testing.assert_close(out.cpu(), ref, atol=0, rtol=0)
        assert padding_holds_pad_value(out)
    h = torch.randn(30, 100, dtype=F16)
    out = h.to("spyre").sum(-1, dtype=F32)
    torch.testing.assert_close(out.cpu(), h.sum(-1, dtype=F32), atol=1e-3, rtol=1e-4)
    with pytest.raises(RuntimeError, match="mean"):
        di.mean(1)


def test_views_and_negative_dims():
    x = torch.randn(6, 40, 100)
    y = x.to("spyre")
    cases = [
        (y[:, 3:30, 10:90].amax(-1), x[:, 3:30, 10:90].amax(-1)),
        (y.transpose(0, 2).sum(0), x.transpose(0, 2).sum(0)),
        (y.permute(2, 0, 1).mean((-1, -2)), x.permute(2, 0, 1).mean((-1, -2))),
        (y[2].sum(0, keepdim=True), x[2].sum(0, keepdim=True)),
        (y.reshape(240, 100).amin(0), x.reshape(240, 100).amin(0)),
    ]
    for out, ref in cases:
        torch.testing.assert_close(out.cpu(), ref, **tolerance(F32, 4000))
        assert padding_holds_pad_value(out)


@pytest.mark.parametrize("spec", [htp.R4CroutonLayout, tensorrt.TensorFormat.kCHW4,
                                  mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL)],
                         ids=["htp", "tensorrt", "mace"])
def test_other_families(spec):
    x = -torch.rand(1, 6, 5, 40).half() - 1
    y = x.to("spyre", device_layout=spec)
    for kind in ("sum", "amax"):
        for dim in (-1, 1):
            out = getattr(y, kind)(dim)
            torch.testing.assert_close(out.cpu(), getattr(x, kind)(dim), **tolerance(F16, 40))
            assert padding_holds_pad_value(out)


def test_empty_and_zero_dim_reductions():
    x = torch.randn(0, 5)
    torch.testing.assert_close(x.to("spyre").sum(0).cpu(), x.sum(0))
    s = torch.tensor(-2.5)
    for kind in ("sum", "mean", "amax", "amin"):
        out = getattr(s.to("spyre"), kind)()
        torch.testing.assert_close(out.cpu(), getattr(s, kind)())
        assert padding_holds_pad_value(out)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.sampled_from([F16, F32]), st.data(),
       st.sampled_from(["sum", "mean", "amax", "amin"]))
def test_replayed_reductions_match_the_planning_path(shape, dtype, data, kind):
    """Any Spyre layout, dims and keepdim: a reduction that replays its kept plan gives, bit for
    bit, what the path that plans it gives on the same data, and the CPU's result to rounding."""
    from torch_layouts.ops import reductions
    order = list(data.draw(st.permutations(range(len(shape)))))
    layout = SpyreTensorLayout(tuple(shape), dtype, order, pad_value=data.draw(st.sampled_from([0, -3.0])))
    dims = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    keepdim = data.draw(st.booleans())
    first, second = (torch.randn(shape, generator=torch.Generator().manual_seed(s)).to(dtype) for s in (1, 2))
    getattr(first.to("spyre", device_layout=layout), kind)(dim=dims, keepdim=keepdim)  # plans (and keeps it)
    y = second.to("spyre", device_layout=layout)
    replayed = getattr(y, kind)(dim=dims, keepdim=keepdim).cpu()
    reductions.PLANS.clear()
    planned = getattr(y, kind)(dim=dims, keepdim=keepdim)
    assert torch.equal(replayed.view(torch.int16 if dtype == F16 else torch.int32),
                       planned.cpu().view(torch.int16 if dtype == F16 else torch.int32))
    assert padding_holds_pad_value(planned)
    count = math.prod(shape[d] for d in dims)
    torch.testing.assert_close(replayed, getattr(second, kind)(dim=dims, keepdim=keepdim), **tolerance(dtype, count))


# float16 sums over several dims that lie end to end in the device buffer: shape, dims.
END_TO_END = [((6, 2, 48), (0, 1)), ((4, 8, 64), (0, 1)), ((3, 5, 7, 32), (0, 1, 2)), ((16, 12, 40), (0, 1)),
              ((7, 9, 33), (0, 1)), ((2, 3, 4, 5, 64), (0, 1, 2, 3))]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("shape, dims", END_TO_END, ids=[str(c[0]) for c in END_TO_END])
def test_half_sums_over_dims_end_to_end_round_once(shape, dims, seed):
    """Reduced dims that lie end to end in the device buffer are one dim to the CPU's sum
    (``reductions.merge_reduced``, and its replay): accumulated in float32 and rounded to float16
    once, so within an ulp of the exact sum (rounded per dim they were 3 to 119 ulps off), the
    first call's bits the replays' too."""
    from torch_layouts.ops import elementwise, reductions
    elementwise.forget_recipes()  # the first call plans
    reductions.PLANS.clear()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).half()
    exact = x.double().sum(dims)
    ulp = (torch.nextafter(exact.half(), torch.tensor(math.inf, dtype=F16)).double() - exact.half().double()).abs()
    y = x.to("spyre")
    calls = [y.sum(dims).cpu() for _ in range(3)]
    assert ((calls[0].double() - exact).abs() <= ulp).all()
    assert all(torch.equal(c.view(torch.int16), calls[0].view(torch.int16)) for c in calls)


# Whole-tensor sums and means (``loss.mean()``) of tensors whose stick is right: the CPU's reduction
# on the input's strided view of its buffer (no copy, no restickify), replayed by the runtime's
# front after the first call of a geometry. id, base shape, dtype, the view, kind.
WHOLE = [
    ("attention-loss-mean", (6, 2, 16), F32, lambda t: t.transpose(0, 1), "mean"),
    ("heads-split-sum", (4, 6, 6), F32, lambda t: t.view(2, 2, 6, 6), "sum"),
    ("short-stick-mean-half", (3, 40), F16, lambda t: t, "mean"),
    ("transposed-sum-bf16", (6, 4, 10), torch.bfloat16, lambda t: t.transpose(0, 2), "sum"),
    ("rows-of-four-sticks-sum", (32, 128), F32, lambda t: t, "sum"),
    ("rows-of-four-sticks-mean-half", (8, 128, 256), F16, lambda t: t, "mean"),
    ("rows-of-three-sticks-mean", (5, 96), F32, lambda t: t.t(), "mean"),
    ("padded-rows-of-sticks-mean", (5, 70), F32, lambda t: t, "mean"),  # the zero padding summed
    ("rows-of-1000-classes-sum-half", (8, 1000), F16, lambda t: t, "sum"),
]


def _in_place_calls(shape, dtype, make, reduce_, monkeypatch) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Three calls of ``reduce_`` on ``make`` of fresh device tensors, none restickifying: per call
    the result, the CPU's, and ``x``; after the first, none enters the Python kernel."""
    from torch_layouts.ops import elementwise, reductions
    elementwise.forget_recipes()
    reductions.PLANS.clear()
    entered, calls, results = [], [], []
    original = reductions.geometry_key
    monkeypatch.setattr(reductions, "geometry_key", lambda t: entered.append(1) or original(t))
    for seed in range(3):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
        y = make(x.to("spyre"))
        torch_layouts.reset_stats()
        before = len(entered)
        out = reduce_(y)
        calls.append(len(entered) - before)
        assert torch_layouts.stats()["restickify_count"] == 0 and padding_holds_pad_value(out)
        results.append((out, reduce_(make(x)), x))
    assert calls[0] >= 1 and calls[1:] == [0, 0], calls
    return results


@pytest.mark.parametrize("_, shape, dtype, make, kind", WHOLE, ids=[c[0] for c in WHOLE])
def test_whole_tensor_reductions_read_the_buffer_in_place(_, shape, dtype, make, kind, monkeypatch):
    for out, ref, _x in _in_place_calls(shape, dtype, make, lambda t: getattr(t, kind)(), monkeypatch):
        assert out.shape == () and out.dtype == ref.dtype
        torch.testing.assert_close(out.cpu(), ref, **tolerance(dtype, math.prod(shape)))


# Column sums (the contiguous dim kept, several dims reduced: a bias gradient over batch and tokens):
# they take the column-sum kernel (csrc/column_sums.cpp), or, where it declines (more than 16384
# results), reduce their least contiguous dim first (``reductions.sum_order``).
# id, shape, dtype, the view, dims, keepdim, kind.
COLUMN_SUMS = [
    ("bias-grad-3d", (8, 128, 256), F32, lambda t: t, (0, 1), False, "sum"),
    ("bias-grad-view", (8, 128, 256), F32, lambda t: t.view(1024, 256), (0,), False, "sum"),
    ("mean-3d-keepdim", (4, 32, 96), F32, lambda t: t, (0, 1), True, "mean"),
    ("half-4d", (2, 3, 16, 128), F16, lambda t: t, (0, 1, 2), False, "sum"),
    ("bfloat16-bias-grad-mean", (4, 16, 96), torch.bfloat16, lambda t: t, (0, 1), False, "mean"),
    ("padded-columns", (6, 10, 100), F32, lambda t: t, (0, 1), False, "sum"),
    ("more-columns-than-the-kernel-takes", (2, 3, 16416), F32, lambda t: t, (0, 1), False, "sum"),
]


@pytest.mark.parametrize("_, shape, dtype, view, dims, keepdim, kind", COLUMN_SUMS, ids=[c[0] for c in COLUMN_SUMS])
def test_column_sums_take_the_kernel_or_reduce_their_outermost_dim_first(_, shape, dtype, view, dims, keepdim, kind,
                                                                         monkeypatch):
    """Replayed calls give the planning path's bits (both take the same kernel, or order the dims
    alike) and the CPU's values to rounding."""
    from torch_layouts.ops import reductions
    orders, real = [], reductions.sum_order
    monkeypatch.setattr(reductions, "sum_order", lambda v, d: orders.append((v, d)) or real(v, d))
    taken, kernel = [], torch_layouts._C._columns_sum
    monkeypatch.setattr(torch_layouts._C, "_columns_sum", lambda v, d, out: taken.append(kernel(v, d, out)) or taken[-1])
    fn = lambda t: getattr(view(t), kind)(dim=dims, keepdim=keepdim)  # noqa: E731
    bits = torch.int32 if dtype == F32 else torch.int16
    for out, ref, x in _in_place_calls(shape, dtype, lambda t: t, fn, monkeypatch):
        with torch_layouts.strict_layouts():  # the Python path, which replays nothing
            planned = fn(x.to("spyre"))
        assert torch.equal(out.cpu().view(bits), planned.cpu().view(bits))
        torch.testing.assert_close(out.cpu(), ref, **tolerance(dtype, math.prod(view(x).shape[d] for d in dims)))
    if all(taken) and taken:
        assert not orders
    else:
        columns = [(v, d) for v, d in orders if len(d) > 1]
        assert not any(taken) and columns and all(real(v, d)[0] == max(d, key=v.stride) for v, d in columns)
    assert all(taken) == (_ != "more-columns-than-the-kernel-takes")


@pytest.mark.parametrize("dtype", [F16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind", ["sum", "mean"])
def test_half_precision_bias_gradients_round_once(dtype, kind):
    """A float16 or bfloat16 sum (or mean) over batch and tokens: accumulated in float32 and rounded
    once, within an ulp of the exact value as the CPU's is (rounded per dim, the device's sums were
    80 float16 and 287 bfloat16 ulps off), the same bits on every call."""
    x = torch.randn(8, 128, 256, generator=torch.Generator().manual_seed(3)).to(dtype)
    calls = [getattr(x.to("spyre"), kind)((0, 1)).cpu() for _ in range(3)]
    exact = getattr(x.double(), kind)((0, 1))
    ulp = (torch.nextafter(calls[0], torch.tensor(math.inf, dtype=dtype)).double() - calls[0].double()).abs()
    assert ((calls[0].double() - exact).abs() <= ulp).all()
    assert all(torch.equal(c, calls[0]) for c in calls)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(2, 9), st.integers(2, 40), st.sampled_from([16, 32, 48, 64, 100]), st.sampled_from(["sum", "mean"]),
       st.booleans(), st.sampled_from([0, -3.0]), st.integers(0, 2**16))
def test_column_sums_replay_the_planning_paths_bits(monkeypatch, batch, tokens, features, kind, keepdim, pad, seed):
    """A bias gradient's sum (or mean) over batch and tokens of a 3-D float32 tensor in Spyre's
    default layout, any sizes (a stick padded or not, a pad value that is not the sum's identity):
    the column-sum kernel takes it where there are several stick columns, the replays give the
    planning path's bits on fresh data, the result's padding holds the pad value, and the values
    are the CPU's to rounding."""
    from torch_layouts.ops import elementwise, reductions
    elementwise.forget_recipes()  # the first call plans
    reductions.PLANS.clear()
    taken, kernel = [], torch_layouts._C._columns_sum
    monkeypatch.setattr(torch_layouts._C, "_columns_sum", lambda v, d, out: taken.append(kernel(v, d, out)) or taken[-1])
    shape = (batch, tokens, features)
    layout = SpyreTensorLayout(shape, F32, pad_value=pad)
    first, second = (torch.randn(shape, generator=torch.Generator().manual_seed(seed + k)) for k in (0, 1))
    getattr(first.to("spyre", device_layout=layout), kind)(dim=(0, 1), keepdim=keepdim)  # plans (and keeps it)
    # one stick column: batch and tokens lie end to end, one dim to sum, ATen's reduction
    assert any(taken) == (features > 32)
    y = second.to("spyre", device_layout=layout)
    replayed = getattr(y, kind)(dim=(0, 1), keepdim=keepdim)
    reductions.PLANS.clear()
    with torch_layouts.strict_layouts():
        planned = getattr(y, kind)(dim=(0, 1), keepdim=keepdim)
    assert torch.equal(replayed.cpu().view(torch.int32), planned.cpu().view(torch.int32))
    assert padding_holds_pad_value(replayed) and padding_holds_pad_value(planned)
    torch.testing.assert_close(replayed.cpu(), getattr(second, kind)(dim=(0, 1), keepdim=keepdim),
                               **tolerance(F32, batch * tokens))


# Exact reductions over the sticks of unpadded inputs, whose results alone are padded (one value per
# stick): replayed by the runtime's front, which reduces the outermost dims first (``reduce_view``).
# id, shape, dtype, dims, keepdim, kind (``any``/``all`` of ``x > 0``).
EXACT_OVER_STICKS = [
    ("amax-rows", (64, 256), F32, (1,), False, "amax"),
    ("amin-rows-keepdim", (64, 256), F32, (1,), True, "amin"),
    ("amax-half-two-dims", (8, 4, 128), F16, (0, 2), False, "amax"),
    ("amin-three-dims", (4, 6, 64), F32, (0, 1, 2), True, "amin"),
    ("any-rows", (32, 128), F32, (1,), False, "any"),
    ("all-middle-and-sticks", (6, 8, 64), F32, (1, 2), True, "all"),
]


@pytest.mark.parametrize("_, shape, dtype, dims, keepdim, kind", EXACT_OVER_STICKS,
                         ids=[c[0] for c in EXACT_OVER_STICKS])
def test_exact_reductions_over_sticks_replay_the_cpus_bits(_, shape, dtype, dims, keepdim, kind, monkeypatch):
    """Each call gives the CPU's result bit for bit in Spyre's sparse result layout, its padding the
    pad value; after the first, the calls are replayed without entering Python."""
    make = (lambda t: t > 0) if kind in ("any", "all") else (lambda t: t)
    fn = lambda t: getattr(t, kind)(dim=dims, keepdim=keepdim)  # noqa: E731
    for out, ref, _x in _in_place_calls(shape, dtype, make, fn, monkeypatch):
        assert torch.equal(out.cpu(), ref)
        if kind in ("amax", "amin"):
            assert out.device_tensor_layout() == expected_layout(shape, dtype, None, dims, keepdim)


# Sums, means and extremes over sticks taken by the row kernels (``reductions.ROW_SUMS_FROM``,
# lowered here to every size): later calls of a geometry replay in the runtime's front, the row
# kernels' bits. id, shape, dtype, dims, keepdim, kind.
ROW_SUMS = [
    ("stick-sum-half", (64, 256), F16, (1,), False, "sum"),
    ("padded-stick-mean-keepdim", (40, 150), F32, (1,), True, "mean"),
    ("stick-mean", (64, 256), F32, (1,), False, "mean"),  # its values straight into the result
    ("padded-sticks-sum", (3, 20, 150), F32, (2,), False, "sum"),
    ("rows-and-sticks-mean-half", (8, 16, 128), F16, (1, 2), False, "mean"),
    ("stick-amax", (64, 256), F32, (1,), False, "amax"),
    ("many-sticks-sum-keepdim", (300, 256), F32, (1,), True, "sum"),  # a result of 75 KiB written whole, in blocks
    ("stick-amin-half-keepdim", (64, 256), F16, (1,), True, "amin"),
    ("batch-sticks-amax", (3, 20, 128), F32, (2,), False, "amax"),
    ("rows-and-sticks-amin", (8, 16, 128), F32, (1, 2), False, "amin"),
]


@pytest.mark.parametrize("_, shape, dtype, dims, keepdim, kind", ROW_SUMS, ids=[c[0] for c in ROW_SUMS])
def test_sums_over_sticks_replay_the_row_kernels(_, shape, dtype, dims, keepdim, kind, monkeypatch):
    """After the first call (Python, the row kernels' sweep) the front replays the sweep: the bits
    and layout the Python path gives on the same data, the CPU's values to rounding (extremes:
    exactly)."""
    from torch_layouts.ops import reductions
    monkeypatch.setattr(reductions, "ROW_SUMS_FROM", 1)
    swept, real = [], reductions._row_reduce
    monkeypatch.setattr(reductions, "_row_reduce", lambda k, v, red, *rest: swept.append(red) or real(k, v, red, *rest))
    fn = lambda t: getattr(t, kind)(dim=dims, keepdim=keepdim)  # noqa: E731
    bits = torch.int16 if dtype == F16 else torch.int32
    for out, ref, x in _in_place_calls(shape, dtype, lambda t: t, fn, monkeypatch):
        with torch_layouts.strict_layouts():  # the Python path, which replays nothing
            planned = fn(x.to("spyre"))
        assert out.device_tensor_layout() == planned.device_tensor_layout()
        assert torch.equal(out.cpu().view(bits), planned.cpu().view(bits))
        torch.testing.assert_close(out.cpu(), ref, **kind_tolerance(kind, dtype, math.prod(shape[d] for d in dims)))
    assert swept


# Small reductions (under ``ROW_SUMS_FROM``) at the default threshold: float32 sums, means and
# extremes of rows of several sticks take the row kernels; a row within its stick (one reduced
# dim) keeps ATen's reduction, the CPU's bits; float16 sums and extremes keep ATen's. id, shape,
# dtype, dims, kind, whether the row kernels sweep.
SMALL_REDUCTIONS = [
    ("rows-of-sticks-sum", (63, 64), F32, (1,), "sum", True),
    ("two-long-rows-mean", (2, 2000), F32, (1,), "mean", True),
    ("padded-rows-sum-3d", (3, 20, 60), F32, (2,), "sum", True),
    ("rows-and-sticks-sum", (4, 3, 40), F32, (1, 2), "sum", True),
    ("row-within-its-stick-sum", (32, 10), F32, (1,), "sum", False),
    ("row-within-its-stick-mean", (8, 16, 16), F32, (2,), "mean", False),
    ("rows-of-sticks-amax", (63, 64), F32, (1,), "amax", True),
    ("a-few-long-rows-amin", (3, 1300), F32, (1,), "amin", True),
    ("row-within-its-stick-amax", (40, 20), F32, (1,), "amax", False),
    ("rows-of-sticks-sum-half", (4, 128), F16, (1,), "sum", False),
    ("rows-of-sticks-amax-half", (4, 128), F16, (1,), "amax", False),
]


@pytest.mark.parametrize("_, shape, dtype, dims, kind, swept", SMALL_REDUCTIONS, ids=[c[0] for c in SMALL_REDUCTIONS])
def test_small_float32_reductions_over_several_sticks_take_the_row_kernels(_, shape, dtype, dims, kind, swept,
                                                                      monkeypatch):
    """Below ``ROW_SUMS_FROM``, float32 sums, means and extremes over several device dims take
    the row kernels (their replays the same bits); a row within its stick keeps ATen's reduction
    and the CPU's bits; float16 sums and extremes keep ATen's. Every result is the CPU's to
    rounding (extremes: exactly)."""
    from torch_layouts.ops import reductions
    assert math.prod(shape) < reductions.ROW_SUMS_FROM
    rows, real = [], reductions._row_reduce
    monkeypatch.setattr(reductions, "_row_reduce", lambda k, v, red, *rest: rows.append(red) or real(k, v, red, *rest))
    fn = lambda t: getattr(t, kind)(dim=dims)  # noqa: E731
    for out, ref, x in _in_place_calls(shape, dtype, lambda t: t, fn, monkeypatch):
        with torch_layouts.strict_layouts():  # the Python path, which replays nothing
            planned = fn(x.to("spyre"))
        assert torch.equal(out.cpu(), planned.cpu())
        if "within-its-stick" in _:
            assert torch.equal(out.cpu(), ref)
        else:
            torch.testing.assert_close(out.cpu(), ref, **kind_tolerance(kind, dtype, math.prod(shape[d] for d in dims)))
    assert bool(rows) == swept


# Extremes over sticks whose last one is padded: every row's real elements first (the row
# kernels' tail), its padding a value that would win were it read. id, shape, dtype, dim, keepdim,
# kind, pad value.
PADDED_EXTREMES = [
    ("classes-amax", (8, 1000), F32, -1, False, "amax", 2.0**100),
    ("classes-amin-keepdim", (64, 100), F32, 1, True, "amin", -2.0**100),
    ("rows-amax-half", (100, 100), F16, -1, False, "amax", 65504.0),
    ("batch-rows-amin-bfloat16", (3, 20, 100), torch.bfloat16, 2, False, "amin", float("-inf")),
    ("nan-padding-amax-keepdim", (16, 130), F32, -1, True, "amax", float("nan")),
]


@pytest.mark.parametrize("_, shape, dtype, dim, keepdim, kind, pad", PADDED_EXTREMES, ids=[c[0] for c in PADDED_EXTREMES])
def test_extremes_over_a_padded_stick_stop_at_each_rows_real_elements(_, shape, dtype, dim, keepdim, kind, pad,
                                                                       monkeypatch):
    """``amax``/``amin`` over the stick dim whose last stick is padded: one sweep of the row kernels
    that stops at each row's real elements (the padding, which would win, never read), replayed
    from the second call; the CPU's values exactly, a row's NaN included, in the Python path's
    layout."""
    from torch_layouts.ops import elementwise, reductions
    elementwise.forget_recipes()
    reductions.PLANS.clear()
    tails, real = [], reductions._row_reduce
    monkeypatch.setattr(reductions, "_row_reduce", lambda k, v, red, n=1, tail=None: tails.append(tail) or
                        real(k, v, red, n, tail))
    layout = SpyreTensorLayout(shape, dtype, pad_value=pad)
    fn = lambda t: getattr(t, kind)(dim=dim, keepdim=keepdim)  # noqa: E731
    for seed in range(3):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
        x.view(-1)[7 * seed + 3] = math.nan if seed == 1 else x.view(-1)[3]  # one row's NaN, in the second call
        y = x.to("spyre", device_layout=layout)
        out = fn(y)
        with torch_layouts.strict_layouts():  # the Python path, which replays nothing
            planned = fn(y)
        torch.testing.assert_close(out.cpu(), fn(x), rtol=0, atol=0, equal_nan=True)
        assert out.device_tensor_layout() == planned.device_tensor_layout()
    assert tails == [shape[-1]] * (1 + 3)  # planned once, replayed, and each strict call


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.sampled_from([F16, F32]), st.data(),
       st.sampled_from(["sum", "mean", "amax", "amin"]))
def test_replayed_sums_over_sticks_match_the_planning_path(monkeypatch, shape, dtype, data, kind):
    """Any Spyre layout, dims and keepdim, with the row kernels taking every sum and extreme over
    sticks: a call that replays its kept plan gives, bit for bit, what the planning path gives on
    the same data, and the CPU's result to rounding (extremes: exactly)."""
    from torch_layouts.ops import elementwise, reductions
    monkeypatch.setattr(reductions, "ROW_SUMS_FROM", 1)
    elementwise.forget_recipes()  # the first call plans with the row sums, not a plan kept by an earlier test
    reductions.PLANS.clear()
    order = list(data.draw(st.permutations(range(len(shape)))))
    layout = SpyreTensorLayout(tuple(shape), dtype, order, pad_value=data.draw(st.sampled_from([0, -3.0])))
    dims = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    keepdim = data.draw(st.booleans())
    fn = lambda t: getattr(t, kind)(dim=dims, keepdim=keepdim)  # noqa: E731
    first, second = (torch.randn(shape, generator=torch.Generator().manual_seed(s)).to(dtype) for s in (1, 2))
    fn(first.to("spyre", device_layout=layout))  # plans (and keeps it)
    y = second.to("spyre", device_layout=layout)
    replayed = fn(y)
    with torch_layouts.strict_layouts():  # the Python path, which replays nothing
        planned = fn(y)
    bits = torch.int16 if dtype == F16 else torch.int32
    assert torch.equal(replayed.cpu().view(bits), planned.cpu().view(bits))
    assert padding_holds_pad_value(replayed)
    count = math.prod(shape[d] for d in dims)
    torch.testing.assert_close(replayed.cpu(), fn(second), **kind_tolerance(kind, dtype, count))


# Views whose reduced dims split a device dim (attention's heads): reduced as strided views of the
# buffer instead of restickified. id, base shape, dtype, the view, kind, dims, keepdim.
STRIDED = [
    ("heads-mean", (4, 6, 6), F32, lambda t: t.view(2, 2, 6, 6), "mean", (1,), False),
    ("heads-sum-keepdim", (4, 6, 6), F32, lambda t: t.view(2, 2, 6, 6), "sum", (1,), True),
    ("batch-amax", (8, 6, 6), F32, lambda t: t.view(2, 4, 6, 6), "amax", (0,), False),
    ("heads-amin-half", (4, 6, 32), F16, lambda t: t.view(2, 2, 6, 32), "amin", (1, 3), False),
    ("heads-mean-bf16", (6, 4, 10), torch.bfloat16, lambda t: t.view(6, 2, 2, 10), "mean", (2,), True),
]


@pytest.mark.parametrize("_, shape, dtype, make, kind, dims, keepdim", STRIDED, ids=[c[0] for c in STRIDED])
def test_views_splitting_a_device_dim_reduce_in_place(_, shape, dtype, make, kind, dims, keepdim, monkeypatch):
    """The CPU's values bit for bit, in the layout the restickified path gives, with no restickify;
    after the first call of a geometry, the runtime's front replays it without entering Python."""
    fn = lambda t: getattr(t, kind)(dim=dims, keepdim=keepdim)  # noqa: E731
    for out, ref, x in _in_place_calls(shape, dtype, make, fn, monkeypatch):
        assert out.dtype == ref.dtype and torch.equal(out.cpu(), ref)
        assert out.device_tensor_layout() == fn(make(x).to("spyre")).device_tensor_layout()



# logsumexp: the CPU's kernel on the input's strided view, or on a dense copy where sticks split its
# rows (1000 float32 classes, 128 columns in sticks). id, shape, dims, keepdim, dtype.
LOGSUMEXP_CASES = [
    ("one-stick", (32, 10), (-1,), False, F32),
    ("padded-classes", (8, 1000), (-1,), False, F32),
    ("keepdim-first-half", (16, 128), (0,), True, F16),
    ("two-dims-bfloat16", (4, 6, 70), (0, -1), False, torch.bfloat16),
    ("integers", (5, 70), (1,), False, torch.int32),
]


@pytest.mark.parametrize("_, shape, dims, keepdim, dtype", LOGSUMEXP_CASES, ids=[c[0] for c in LOGSUMEXP_CASES])
def test_logsumexp_is_the_cpus_and_replays(_, shape, dims, keepdim, dtype, monkeypatch):
    """The CPU's bits in the default layout of the result's shape (its padding the pad value);
    a geometry enters Python once, later calls are replayed by the runtime's front."""
    from torch_layouts.ops import on_views
    entered = []
    original = on_views.on_views
    monkeypatch.setattr(on_views, "on_views", lambda *a, **k: entered.append(1) or original(*a, **k))
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    dx = x.to("spyre")
    expected = torch.logsumexp(x, dims, keepdim)
    for _ in range(3):
        out = torch.logsumexp(dx, dims, keepdim)
        assert out.dtype == expected.dtype and torch.equal(out.cpu(), expected)
        assert out.device_tensor_layout() == SpyreTensorLayout(tuple(expected.shape), expected.dtype)
        assert padding_holds_pad_value(out)
    assert len(entered) == 1
    assert torch_layouts.stats()["fallbacks"] == {}
