"""Pointwise calls replay the recipe of an earlier call of the same geometry (``elementwise.Recipe``):
a replayed call gives the result the general path gives, for new results, in-place ops, ``out=``
tensors, broadcasting and padded layouts, and calls whose geometry differs (aliasing, another
device, strict mode) do not replay a recipe they do not match. Recipes of ops whose compute is
their own CPU ``out=`` overload are replayed by the runtime's front without entering Python."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch

import torch_layouts
from ops_support import kernels_in, padding_holds_pad_value
from torch_layouts import LayoutError, SpyreTensorLayout, _C
from torch_layouts.ops import elementwise, reductions
from torch_layouts.ops.operands import piece_reads

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
    elementwise.forget_recipes()
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
    elementwise.forget_recipes()
    for seed in range(3):
        a, b = randn(5, 70, seed=seed), randn(5, 70, seed=seed + 1)
        out = torch.empty(5, 70, device="spyre")
        torch.add(a.to("spyre"), b.to("spyre"), out=out)
        assert torch.equal(out.cpu(), a + b) and padding_holds_pad_value(out)


def test_an_aliased_operand_does_not_replay_the_unaliased_recipe():
    """``x.add_(y)`` then ``x.add_(x.view)``: same geometry, but the second reads its own target."""
    elementwise.forget_recipes()
    x, y = randn(64, 64), randn(64, 64, seed=1)
    dx = x.to("spyre")
    dx.add_(y.to("spyre").t())
    x.add_(y.t())
    dx.add_(dx.t())
    x.add_(x.t().clone())
    assert torch.equal(dx.cpu(), x)


def test_a_recipe_of_another_layout_is_not_replayed():
    elementwise.forget_recipes()
    a, b = randn(32, 64), randn(32, 64, seed=1)
    plain = a.to("spyre") + b.to("spyre")
    layout = SpyreTensorLayout((32, 64), F32, [1, 0])
    da, db = a.to("spyre", device_layout=layout), b.to("spyre", device_layout=layout)
    swapped = da + db
    assert torch.equal(plain.cpu(), a + b) and torch.equal(swapped.cpu(), a + b)
    assert swapped.device_tensor_layout() == da.device_tensor_layout() != plain.device_tensor_layout()


def test_strict_mode_is_not_bypassed_by_a_recipe():
    elementwise.forget_recipes()
    a = randn(40, 64)
    b = a.to("spyre", device_layout=SpyreTensorLayout((40, 64), F32, [1, 0]))
    first = a.to("spyre") + b  # restickifies b: not recorded
    assert torch.equal(first.cpu(), a + a)
    with torch_layouts.strict_layouts(), pytest.raises(LayoutError):
        a.to("spyre") + b


def test_mixed_devices_are_still_rejected_after_a_recipe():
    elementwise.forget_recipes()
    a = randn(4, 64).to("spyre")
    a + a
    with pytest.raises(RuntimeError, match="same device"):
        a + randn(4, 64)


# One row per case: id, function of (a, b, c) on either device (c: a preallocated result for
# out=, or the target of an in-place op), dtype. Each op's compute is its own CPU out= overload.
FRONT_CASES = [
    ("add", lambda a, b, c: a + b, F32),
    ("add-alpha", lambda a, b, c: torch.add(a, b, alpha=0.25), F32),
    ("add-number", lambda a, b, c: a + 3, F32),
    ("mul-number-half", lambda a, b, c: a * 0.1, F16),
    ("mul-bias-broadcast", lambda a, b, c: a * b[0], F32),
    ("sub-out", lambda a, b, c: torch.sub(a, b, alpha=2, out=c), F32),
    ("div-floor", lambda a, b, c: torch.div(a, b, rounding_mode="floor"), F32),
    ("rsub-number", lambda a, b, c: 1 - a, F32),
    ("remainder-number", lambda a, b, c: a % 2, F32),
    ("atan2-half", lambda a, b, c: torch.atan2(a, b), F16),
    ("leaky_relu", lambda a, b, c: torch.nn.functional.leaky_relu(a, 0.2), F32),
    ("elu_backward", lambda a, b, c: torch.ops.aten.elu_backward(a, 1.0, 1.0, 1.0, False, b), F32),
    ("hardtanh_-in-place", lambda a, b, c: torch.nn.functional.hardtanh(c, -0.5, 0.5, inplace=True), F32),
    ("rsub-tensor-alpha-half", lambda a, b, c: torch.rsub(a, b, alpha=2), F16),
    # the Scalar overloads take alpha positionally
    ("rsub-scalar-overload-alpha", lambda a, b, c: torch.ops.aten.rsub.Scalar(a, 3.5, 2), F32),
    ("add-scalar-overload-alpha", lambda a, b, c: torch.ops.aten.add.Scalar(a, 3.5, 2), F32),
    ("add_-in-place", lambda a, b, c: c.add_(b, alpha=1e-3), F32),
    ("mul_-number-in-place", lambda a, b, c: c.mul_(0.9), F16),
    ("exp", lambda a, b, c: torch.exp(a), F32),
    ("gelu-tanh", lambda a, b, c: torch.nn.functional.gelu(a, approximate="tanh"), F32),
    ("maximum-half", lambda a, b, c: torch.maximum(a, b), F16),
    ("clamp", lambda a, b, c: torch.clamp(a, -0.5, 0.5), F32),
    # optional tensor arguments (Tensor? min, max): one given, one None; both given
    ("clamp-tensor-min", lambda a, b, c: torch.clamp(a, min=b), F32),
    ("clamp-tensor-bounds-half", lambda a, b, c: torch.clamp(a, b, c), F16),
    ("addcmul-value", lambda a, b, c: torch.addcmul(c, a, b, value=0.5), F32),
    ("lerp", lambda a, b, c: torch.lerp(a, b, 0.3), F32),
    ("threshold_backward", lambda a, b, c: torch.ops.aten.threshold_backward(a, b, 0.0), F32),
    # relu computes as clamp_min(self, 0) on the CPU: the recipe passes the bound the op lacks
    ("relu", lambda a, b, c: torch.relu(a), F32),
    ("relu_-in-place-half", lambda a, b, c: c.relu_(), F16),
    # a 0-dim device operand (an element view of b) read as the 0-dim view of its element
    ("mul-0dim-tensor", lambda a, b, c: a * b[(0,) * b.dim()], F32),
    ("add_-0dim-tensor-in-place-half", lambda a, b, c: c.add_(b[(1,) * b.dim()]), F16),
]


def _calls_into_python(monkeypatch, module=elementwise, name: str = "signature") -> list:
    """A list that grows by one each time a call enters the Python kernel (which calls
    ``module.name`` first)."""
    calls = []
    original = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)
    monkeypatch.setattr(module, name, spy)
    return calls


# Shapes the front's cases run at: whole sticks; padding past one short stick (one box of real
# positions); a partial last stick in each of several tiles (boxes per tile).
FRONT_SHAPES = [(16, 128), (4, 6, 6), (5, 70)]


@pytest.mark.parametrize("shape", FRONT_SHAPES, ids=["whole", "one-box", "boxes"])
@pytest.mark.parametrize("_, fn, dtype", FRONT_CASES, ids=[c[0] for c in FRONT_CASES])
def test_the_runtime_front_replays_recipes_bit_for_bit(_, fn, dtype, shape, monkeypatch):
    """The first call records (in Python); the next ones of that geometry never enter Python and
    match the CPU bit for bit, the target's other elements and the padding untouched."""
    elementwise.forget_recipes()
    calls = _calls_into_python(monkeypatch)
    entered = []
    for seed in range(3):
        a, b, c = (randn(*shape, seed=seed + k, dtype=dtype) for k in (0, 10, 20))
        dc = c.to("spyre")
        out = fn(a.to("spyre"), b.to("spyre"), dc)
        with torch_layouts.strict_layouts():  # the Python path, which replays nothing
            planned = fn(a.to("spyre"), b.to("spyre"), c.to("spyre")).cpu()
        expected = fn(a, b, c)
        assert out.dtype == expected.dtype and torch.equal(out.cpu(), planned)
        if shape == FRONT_SHAPES[0]:
            assert torch.equal(out.cpu(), expected)
        else:  # the CPU's vector loop and its scalar tail round some functions (gelu) differently
            torch.testing.assert_close(out.cpu(), expected, rtol=1e-5 if dtype == F32 else 1e-3, atol=0)
        assert torch.equal(dc.cpu(), c) and padding_holds_pad_value(out) and padding_holds_pad_value(dc)
        entered.append(len(calls))
    assert _C._kept_recipes() >= 1
    assert entered[0] >= 1 and entered[2] == entered[1] == entered[0], entered


@pytest.mark.parametrize("shape", [(32, 10), (4, 6, 6), (16, 128)], ids=["one-box", "short-sticks", "whole"])
@pytest.mark.parametrize("dtype", [F32, F16], ids=str)
def test_where_with_a_number_replays_in_the_runtime_front(shape, dtype, monkeypatch):
    """``torch.where(mask, x, number)`` makes the number a 0-dim device tensor (``scalar_tensor``)
    and calls ``where.self`` with it: after the first call of a geometry the front replays it (the
    number read as the 0-dim view of its element), the CPU's bits and the pad value in the padding."""
    elementwise.forget_recipes()
    calls = _calls_into_python(monkeypatch)
    entered = []
    for seed in range(3):
        x = randn(*shape, seed=seed, dtype=dtype)
        m = x > 0.3
        dx, dm = x.to("spyre"), m.to("spyre")
        before = len(calls)
        out = torch.where(dm, dx, -2.5 + seed)
        entered.append(len(calls) - before)
        expected = torch.where(m, x, -2.5 + seed)
        assert out.dtype == expected.dtype and torch.equal(out.cpu(), expected) and padding_holds_pad_value(out)
    assert entered[0] >= 1 and entered[1] == entered[2] == 0, entered


# Operands the rules copy first (a view whose stick holds another dim): (id, the op on a device or
# CPU tensor of shape (2, 6, 48)). The recipe repeats the copy each call, counted as the first
# call's restickify, and the front replays it.
STAGED_CASES = [
    ("attention-q-scaling", lambda x: x.transpose(0, 1)[..., :16].reshape(6, 4, 8).transpose(0, 1) * 0.35),
    ("stick-split-view", lambda x: x.view(2, 6, 3, 16).transpose(2, 3) + 1),
]


@pytest.mark.parametrize("_, fn", STAGED_CASES, ids=[c[0] for c in STAGED_CASES])
def test_the_front_replays_recipes_whose_operands_are_restickified(_, fn, monkeypatch):
    elementwise.forget_recipes()
    calls = _calls_into_python(monkeypatch)
    counts = []
    for seed in range(3):
        x = randn(2, 6, 48, seed=seed)
        torch_layouts.reset_stats()
        out = fn(x.to("spyre"))
        counts.append(torch_layouts.stats()["restickify_count"])
        assert torch.equal(out.cpu(), fn(x)) and padding_holds_pad_value(out)
        if seed == 0:
            entered = len(calls)
    assert entered >= 1 and len(calls) == entered
    assert counts[0] >= 1 and counts == [counts[0]] * 3


def test_the_front_keeps_recipes_apart_by_geometry_and_scalar_kind(monkeypatch):
    """Calls differing in layout, in a number's kind, or in aliasing never replay each other's recipe."""
    elementwise.forget_recipes()
    a, b = randn(32, 64), randn(32, 64, seed=1)
    da, db = a.to("spyre"), b.to("spyre")
    layout = SpyreTensorLayout((32, 64), F32, [1, 0])
    ta, tb = a.to("spyre", device_layout=layout), b.to("spyre", device_layout=layout)
    for _ in range(2):
        assert torch.equal((da + db).cpu(), a + b)
        assert torch.equal((ta + tb).cpu(), a + b)
        assert torch.equal((da + 2).cpu(), a + 2) and torch.equal((da + 2.5).cpu(), a + 2.5)
    x = da.clone()
    x.add_(db.t().t())
    x.add_(x)  # the same geometry as the call before, but reading its own target
    assert torch.equal(x.cpu(), (a + b) * 2)


def test_the_front_replays_no_recipe_in_strict_mode():
    elementwise.forget_recipes()
    a, b = randn(40, 64), randn(40, 64, seed=1)
    da, db = a.to("spyre"), b.to("spyre")
    da + db
    assert _C._kept_recipes() == 1
    transposed = b.to("spyre", device_layout=SpyreTensorLayout((40, 64), F32, [1, 0]))
    with torch_layouts.strict_layouts():
        assert torch.equal((da + db).cpu(), a + b)
        with pytest.raises(LayoutError):
            da + transposed


def test_a_recipe_is_offered_only_for_the_call_being_served():
    """Outside a kernel the runtime's front serves, an offer is refused; replayed calls still count."""
    a = randn(8, 64).to("spyre")
    assert not _C._offer_recipe([a], [(0, [8, 64], [64, 1], 0)], None, ([8, 64], [64, 1], 0), [], "aten::add.out")
    elementwise.forget_recipes()
    torch_layouts.reset_stats()
    for _ in range(3):
        a * a
    assert torch_layouts.stats()["kernel_calls"]["aten::mul.Tensor"] == 3


# One row per case: id, a function of one tensor on either device, the input shape, dtype, and how a
# device input is made from the host one.
REPLAYED_CASES = [
    ("sum-rows", lambda x: x.sum(0), (1024, 256), F32, lambda t: t),
    ("sum-keepdim-half", lambda x: x.sum(0, keepdim=True), (64, 128), F16, lambda t: t),
    ("sum-middle-dim", lambda x: x.sum(1), (16, 64, 96), F32, lambda t: t),
    ("sum-dtype", lambda x: x.sum(0, dtype=torch.float16), (64, 64), F16, lambda t: t),
    ("amax", lambda x: x.amax(0), (128, 64), F32, lambda t: t),
    ("amin-half", lambda x: x.amin(1, keepdim=True), (8, 32, 64), F16, lambda t: t),
    ("sum-short-stick", lambda x: x.sum(0), (32, 10), F32, lambda t: t),  # padding beside the reduced dim
    ("sum-keepdim-short-stick-3d", lambda x: x.sum(1, keepdim=True), (4, 12, 6), F32, lambda t: t),
    ("amax-short-stick-half", lambda x: x.amax(0), (40, 20), F16, lambda t: t),
    ("sum-over-a-padded-stick", lambda x: x.sum(1), (32, 10), F32, lambda t: t),  # logits of 10 classes
    ("amax-over-a-padded-stick-half", lambda x: x.amax(-1), (16, 40), F16, lambda t: t),
    ("sum-keepdim-over-a-padded-stick-3d", lambda x: x.sum(-1, keepdim=True), (4, 6, 20), F32, lambda t: t),
    ("amin-over-a-padded-stick", lambda x: x.amin(1), (8, 3, 20), F32, lambda t: t.transpose(1, 2)),
    ("clone", lambda x: x.clone(), (8, 128, 256), F32, lambda t: t),
    ("clone-transposed", lambda x: x.clone(), (8, 128, 256), F32, lambda t: t.transpose(0, 1)),
    ("contiguous-of-a-slice", lambda x: x.contiguous(), (3, 64, 4, 64), F32, lambda t: t[:, 1]),
    ("clone-channels-last", lambda x: x.clone(memory_format=torch.channels_last), (2, 64, 4, 32), F32, lambda t: t),
    ("contiguous-of-packed-projection", lambda x: x.contiguous(), (6, 2, 48), F32,  # MultiheadAttention's q, k, v
     lambda t: t.unflatten(-1, (3, 16)).unsqueeze(0).transpose(0, -2).squeeze(-2)),
    ("contiguous-of-transposed-pad", lambda x: x.contiguous(), (40, 20), F32, lambda t: t.t()),
]


@pytest.mark.parametrize("_, fn, shape, dtype, make", REPLAYED_CASES, ids=[c[0] for c in REPLAYED_CASES])
def test_reductions_and_clones_replay_in_the_runtime_front(_, fn, shape, dtype, make, monkeypatch):
    """After the first call of a geometry, sums, amax/amin over one dim and clones run without
    entering Python, bit for bit the CPU's, in the layout the first call gave."""
    elementwise.forget_recipes()
    module = reductions if "clone" not in _ and "contiguous" not in _ else elementwise
    calls = _calls_into_python(monkeypatch, module, "geometry_key")
    entered, layouts = [], []
    for seed in range(3):
        x = randn(*shape, seed=seed, dtype=dtype)
        out = fn(make(x.to("spyre")))
        expected = fn(make(x))
        assert out.dtype == expected.dtype and out.stride() == expected.stride()
        assert torch.equal(out.cpu(), expected) and padding_holds_pad_value(out)
        entered.append(len(calls))
        layouts.append(out.device_tensor_layout())
    assert entered[0] >= 1 and entered[2] == entered[1] == entered[0], entered
    assert layouts[0] == layouts[1] == layouts[2]


# Clones of views that no one strided view of their buffer holds (a dim whose offsets change step:
# a stick holds two of q, k, v; columns straddling sticks): id, base shape, dtype, the view, how many
# strided copies the clone makes.
CLONE_PIECES = [
    ("packed-projection-q-k-v", (6, 2, 48), F32,
     lambda t: t.unflatten(-1, (3, 16)).unsqueeze(0).transpose(0, -2).squeeze(-2), 2),
    ("columns-straddling-sticks", (10, 70), F32, lambda t: t[:, 5:40], 3),  # cut at both sides' stick ends
    ("rows-and-columns-straddling-half", (8, 150), F16, lambda t: t[1:7, 60:140], 4),
]


@pytest.mark.parametrize("_, shape, dtype, make, pieces", CLONE_PIECES, ids=[c[0] for c in CLONE_PIECES])
def test_clones_of_views_copy_their_pieces_in_place(_, shape, dtype, make, pieces, monkeypatch):
    """Each call: the CPU's bits and padding, no copy through the host or the runtime's element
    path (a few strided CPU copies between the buffers); after the first, no Python."""
    from torch_layouts.ops.operands import piece_common_reads
    elementwise.forget_recipes()
    calls = _calls_into_python(monkeypatch, elementwise, "geometry_key")
    entered = []
    for seed in range(3):
        x = randn(*shape, seed=seed, dtype=dtype)
        view = make(x.to("spyre"))
        torch_layouts.reset_stats()
        out = view.contiguous()
        stats = torch_layouts.stats()
        assert stats["view_gathers"] == stats["host_bounces"] == stats["d2h_bytes"] == stats["h2d_bytes"] == 0, stats
        assert torch.equal(out.cpu(), make(x).contiguous()) and padding_holds_pad_value(out)
        entered.append(len(calls))
    assert entered[0] >= 1 and entered[2] == entered[1] == entered[0], entered
    assert len(piece_common_reads(view, out)) == pieces


# Comparisons and predicates: a bool result, whose stick holds four float32 sticks' elements, written
# through its view in the input's coordinates; masked fills reading such a mask. id, the op, shape
# (the last dim within one stick).
BOOL_RESULTS = [
    ("gt-scalar", lambda x: x > 0, (32, 10)),
    ("eq-tensor", lambda x: x == x.flip(0), (6, 20, 30)),
    ("lt-tensor-short-rows", lambda x: x < x.flip(0), (40, 3)),
    ("isnan", torch.isnan, (32, 10)),
    ("isinf", torch.isinf, (6, 20, 30)),
    ("masked-fill-where-positive", lambda x: x.masked_fill(x > 0, 0.5), (32, 10)),  # a bool mask read in place
    ("masked-fill-3d", lambda x: x.masked_fill(x < 0, -2.0), (6, 20, 30)),
    # rows of several sticks: the bool result has no strided view in the input's coordinates; the
    # compute runs on strided pieces of a refinement of the shape (whole tiles in one piece)
    ("gt-scalar-rows-of-sticks", lambda x: x > 0, (16, 128)),
    ("eq-tensor-1000-classes", lambda x: x == x.flip(0), (8, 1000)),
    ("isnan-padded-rows", torch.isnan, (3, 5, 70)),
    ("ge-attention-scores", lambda x: x >= 0.5, (2, 128, 128)),
]


@pytest.mark.parametrize("_, fn, shape", BOOL_RESULTS, ids=[c[0] for c in BOOL_RESULTS])
def test_bool_results_replay_in_the_runtime_front(_, fn, shape, monkeypatch):
    """After the first call of a geometry: the CPU's bits and dtype, the result's padding, no Python."""
    elementwise.forget_recipes()
    calls = _calls_into_python(monkeypatch, elementwise, "signature")
    entered = []
    for seed in range(3):
        x = randn(*shape, seed=seed)
        x[0, 0] = float("nan") if seed == 1 else float("inf")
        out = fn(x.to("spyre"))
        expected = fn(x)
        torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0, equal_nan=True)  # and the dtype
        assert padding_holds_pad_value(out)
        entered.append(len(calls))
    assert entered[0] >= 1 and entered[2] == entered[1] == entered[0], entered


# Reductions over several device dims (a bias gradient's sum over a (batch*tokens, features) view;
# amax and amin over two dims): id, function, base shape, dtype, view of the device tensor.
MULTI_DIM_CASES = [
    ("bias-grad-sum", lambda x: x.sum(0), (4, 64, 64), F32, lambda t: t.view(256, 64)),
    ("bias-grad-sum-padded", lambda x: x.sum(0), (6, 2, 16), F32, lambda t: t.view(12, 16)),
    ("sum-half", lambda x: x.sum(0), (8, 32, 64), F16, lambda t: t.view(256, 64)),
    ("amax-two-dims", lambda x: x.amax((0, 1)), (4, 8, 64), F32, lambda t: t),
    ("amin-two-dims-half", lambda x: x.amin((0, 1)), (4, 8, 64), F16, lambda t: t),
    # rows of several sticks, the last one partial: the zero padding read and summed with them
    ("row-sums-of-1000-classes", lambda x: x.sum(1), (8, 1000), F32, lambda t: t),
    ("column-sums-over-padded-sticks", lambda x: x.sum(0), (64, 100), F32, lambda t: t),
    ("column-sums-keepdim-half", lambda x: x.sum(0, keepdim=True), (4, 7, 70), F16, lambda t: t),
    # means: the sums above, divided in float32 and rounded to the result's dtype
    ("mean-over-a-padded-stick", lambda x: x.mean(-1), (32, 10), F32, lambda t: t),
    ("mean-of-rows-of-sticks", lambda x: x.mean(-1), (8, 128, 256), F32, lambda t: t),
    ("mean-over-the-batch-half", lambda x: x.mean(0), (64, 128), F16, lambda t: t),
    ("mean-two-dims-keepdim", lambda x: x.mean((0, 1), keepdim=True), (8, 1000), F32, lambda t: t),
    ("mean-half-into-float32", lambda x: x.mean(-1, dtype=torch.float32), (6, 70), F16, lambda t: t),
    # all and any (of a comparison's bool result, or of numbers): per-dim all/any; any's zero padding is False
    ("all-of-a-comparison", lambda x: (x > -3).all(), (32, 10), F32, lambda t: t),
    ("all-over-rows", lambda x: (x > -2).all(-1), (32, 10), F32, lambda t: t),
    ("any-keepdim", lambda x: (x > 2).any(0, keepdim=True), (40, 20), F16, lambda t: t),
    ("any-of-1000-classes", lambda x: (x > 2.5).any(-1), (8, 1000), F32, lambda t: t),
    ("all-of-numbers", lambda x: x.all(), (32, 10), F32, lambda t: t),
    # several boxes of real positions (rows of several sticks, the last partial), their padding not
    # the reduction's identity: each box reduced, combined where their regions meet (all negative:
    # a read of the zero padding would show)
    ("amax-of-1000-negative-classes", lambda x: x.amax(-1), (8, 1000), F32, lambda t: t - 10),
    ("amax-over-rows-of-padded-sticks", lambda x: x.amax(0), (8, 1000), F32, lambda t: t - 10),
    ("amax-of-everything", lambda x: x.amax(), (8, 1000), F32, lambda t: t - 10),
    ("amin-keepdim-half", lambda x: x.amin(-1, keepdim=True), (4, 3, 70), F16, lambda t: t + 10),
    ("amax-two-dims-of-three", lambda x: x.amax((0, 2)), (3, 5, 70), F32, lambda t: t - 10),
    ("all-over-padded-rows", lambda x: (x > -2).all(-1), (64, 100), F32, lambda t: t),
    ("all-of-numbers-padded-rows", lambda x: x.all(), (64, 100), F32, lambda t: t),
]


@pytest.mark.parametrize("_, fn, shape, dtype, make", MULTI_DIM_CASES, ids=[c[0] for c in MULTI_DIM_CASES])
def test_reductions_over_several_device_dims_replay_in_the_runtime_front(_, fn, shape, dtype, make, monkeypatch):
    """After the first call of a geometry the runtime's front makes the same per-dim reductions:
    the Python path's bits (close to the CPU's), its layout and padding, without entering Python."""
    elementwise.forget_recipes()
    reductions.PLANS.clear()
    calls = _calls_into_python(monkeypatch, reductions, "geometry_key")
    x = randn(*shape, dtype=dtype)
    dx = make(x.to("spyre"))
    first = fn(dx)
    entered = len(calls)
    for _ in range(2):
        again = fn(dx)
        assert torch.equal(again.cpu(), first.cpu()) and again.device_tensor_layout() == first.device_tensor_layout()
        assert padding_holds_pad_value(again)
    assert entered >= 1 and len(calls) == entered, (entered, len(calls))
    expected = fn(make(x))
    assert first.dtype == expected.dtype
    # a float16 sum rounds each dim's partial sums (reductions.reduce_view)
    torch.testing.assert_close(first.cpu(), expected, rtol=1e-2 if expected.dtype == F16 else 1e-5, atol=1e-2)


def test_a_reduction_recipe_is_not_replayed_for_other_dims_or_dtypes():
    elementwise.forget_recipes()
    x = randn(64, 96, 32)
    dx = x.to("spyre")
    for _ in range(2):
        for dim in (0, 1):
            for keepdim in (False, True):
                assert torch.equal(dx.sum(dim, keepdim=keepdim).cpu(), x.sum(dim, keepdim=keepdim))
        assert torch.equal(dx.sum(0, dtype=torch.int32).cpu(), x.sum(0, dtype=torch.int32))
        assert torch.equal(dx.amax(0).cpu(), x.amax(0)) and torch.equal(dx.amin(0).cpu(), x.amin(0))


A = torch.ops.aten
BF16 = torch.bfloat16


def converted_in_vectors(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x converted to dtype as ATen's vectorized loop converts each element, wherever it lies: its
    scalar tail (the last numel % 8 elements of each thread's share of a call) turns a signaling
    float16 NaN into 0x7fffffff where the loop's instructions quiet the payload (0x7db8 ->
    0x7ff70000), and the device's converting copies convert as the loop does. Converted here in
    pieces of 4096 elements (one thread each, no tail), the last one padded."""
    flat = x.flatten()
    n = flat.numel()
    pieces = torch.cat([flat, flat.new_zeros(-n % 4096)]).split(4096)
    return torch.cat([piece.to(dtype) for piece in pieces])[:n].view(x.shape)


def _layer_norm(x, w, b):
    return A.native_layer_norm(x, [x.shape[-1]], w, b, 1e-5)


def _layer_norm_backward(mask, affine=True):
    def run(x, w, b, g):
        w, b = (w, b) if affine else (None, None)
        _, mean, rstd = _layer_norm(x, w, b)
        return A.native_layer_norm_backward(g, x, [x.shape[-1]], mean, rstd, w, b, mask)
    return run


# One row per case: id, function of device tensors (x, w, b, g) returning the op's results, the
# shape of x, dtype.
ROW_CASES = [
    ("softmax", lambda x, w, b, g: A._softmax(x, -1, False), (8, 4, 128, 128), F32),
    ("log_softmax-bf16", lambda x, w, b, g: A._log_softmax(x, -1, False), (4, 32, 64), BF16),
    ("softmax-dim0", lambda x, w, b, g: A._softmax(x, 0, False), (64, 96), F32),
    ("safe_softmax", lambda x, w, b, g: A._safe_softmax(x.masked_fill(x > 1, float("-inf")), -1), (16, 64), F32),
    ("softmax_backward", lambda x, w, b, g: A._softmax_backward_data(g, A._softmax(x, -1, False), -1, x.dtype),
     (8, 128, 64), F32),
    ("log_softmax_backward-half", lambda x, w, b, g: A._log_softmax_backward_data(
        g, A._log_softmax(x, -1, False), -1, x.dtype), (8, 128), F16),
    ("layer_norm", lambda x, w, b, g: _layer_norm(x, w, b), (8, 128, 256), F32),
    ("softmax-short-stick", lambda x, w, b, g: A._softmax(x, -1, False), (4, 6, 6), F32),
    ("log_softmax-short-stick-half", lambda x, w, b, g: A._log_softmax(x, -1, False), (32, 10), F16),
    ("softmax_backward-short-stick", lambda x, w, b, g: A._softmax_backward_data(g, A._softmax(x, -1, False), -1,
                                                                                x.dtype), (4, 6, 6), F32),
    ("layer_norm-no-affine-bf16", lambda x, w, b, g: _layer_norm(x, None, None), (4, 32, 64), BF16),
    # rows ending within one stick (10 float32 columns): one box of real positions, every row's first ones
    ("layer_norm-short-stick", lambda x, w, b, g: _layer_norm(x, w, b), (32, 10), F32),
    ("layer_norm-short-sticks-half", lambda x, w, b, g: _layer_norm(x, None, None), (4, 6, 6), F16),
    ("layer_norm_backward-short-stick", _layer_norm_backward([True, True, True]), (32, 10), F32),
    ("layer_norm_backward", _layer_norm_backward([True, True, True]), (8, 128, 256), F32),
    ("layer_norm_backward-weight-only", _layer_norm_backward([False, True, False]), (2, 64, 128), F32),
    ("layer_norm_backward-input-only", _layer_norm_backward([True, False, False], affine=False), (16, 64), BF16),
]


@pytest.mark.parametrize("_, fn, shape, dtype", ROW_CASES, ids=[c[0] for c in ROW_CASES])
def test_row_kernels_replay_in_the_runtime_front(_, fn, shape, dtype, monkeypatch):
    """A softmax or layer norm (forward or backward) of a geometry seen before runs without entering
    Python and gives what the Python path gave, bit for bit, in the same layouts."""
    from torch_layouts.ops import layer_norm, softmax
    x, g = randn(*shape, dtype=dtype), randn(*shape, seed=1, dtype=dtype)
    w, b = randn(shape[-1], seed=2, dtype=dtype), randn(shape[-1], seed=3, dtype=dtype)
    inputs = [t.to("spyre") for t in (x, w, b, g)]
    fn(*inputs)  # plans the geometry in Python
    elementwise.forget_recipes()
    first = fn(*inputs)  # the Python path again, which offers the runtime's front its replays
    calls = [_calls_into_python(monkeypatch, module, "lookup") for module in (softmax, layer_norm)]
    second = fn(*inputs)
    assert not any(calls), "a replayed call entered Python"
    first, second = [[r] if isinstance(r, torch.Tensor) else list(r) for r in (first, second)]
    for p, q in zip(first, second):
        assert (p is None) == (q is None)
        if p is not None:
            assert torch.equal(p.cpu(), q.cpu()) and p.device_tensor_layout() == q.device_tensor_layout()
            assert padding_holds_pad_value(q)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=2), st.sampled_from([1, 10, 32, 64, 70, 100]),
       st.sampled_from([F32, F16, BF16]), st.booleans(), st.integers(0, 2**16))
def test_layer_norm_replays_place_their_results_as_the_python_path_and_the_cpu(lead, width, dtype, affine, seed):
    """Layer norm forward and backward of random shapes (rows of 1 to 100 elements: part of a
    stick, whole sticks, a padded one), three dtypes, with and without weight and bias, called four
    times (planned, offered, then replayed by the runtime's front, whose float32 results are stored
    at listed elements): every call's output, mean, rstd and gradients hold the first call's bits in
    its layouts with the padding the pad value, and the CPU's values within layer norm's tolerance."""
    elementwise.forget_recipes()
    shape = (*lead, width)
    x, g = randn(*shape, seed=seed, dtype=dtype), randn(*shape, seed=seed + 1, dtype=dtype)
    w, b = randn(width, seed=seed + 2, dtype=dtype), randn(width, seed=seed + 3, dtype=dtype)

    def run(device: str) -> list[torch.Tensor]:
        dx, dg, dw, db = (t.to(device) for t in (x, g, w, b))
        params = (dw, db) if affine else (None, None)
        out, mean, rstd = A.native_layer_norm(dx, [width], *params, 1e-5)
        grads = A.native_layer_norm_backward(dg, dx, [width], mean, rstd, *params, [True, affine, affine])
        return [out, mean, rstd, *(t for t in grads if t is not None)]

    want = run("cpu")
    first = run("spyre")
    for _ in range(3):
        again = run("spyre")
        for p, q in zip(first, again, strict=True):
            assert torch.equal(p.cpu(), q.cpu()) and p.device_tensor_layout() == q.device_tensor_layout()
            assert padding_holds_pad_value(q)
    for k, (got, expected) in enumerate(zip(first, want, strict=True)):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        # half outputs round; weight and bias gradients sum over rows in another order; the input's
        # and the weight's gradients are rstd times differences that cancel (rows of one element: the
        # CPU's rounding noise, times rstd 316, reaches 1e-4 where the exact value and ours are 0)
        tol = 1e-4 if dtype == F32 else (5e-2 if k < 4 else 2e-1)
        scale = float(want[2].float().abs().max()) if k in (3, 4) else 1.0
        torch.testing.assert_close(got.cpu().float(), expected.float(), atol=tol * max(scale, 1.0), rtol=tol)


# Autograd's calls: an absent optional tensor (layer norm's weight or bias) reaches the front as an
# undefined tensor, not None. One row per case: id, weight?, bias?
AUTOGRAD_CASES = [
    ("layer_norm-no-affine", False, False),
    ("layer_norm-weight-only", True, False),
    ("layer_norm-affine", True, True),
]


@pytest.mark.parametrize("_, weight, bias", AUTOGRAD_CASES, ids=[c[0] for c in AUTOGRAD_CASES])
def test_backward_calls_from_autograd_replay_in_the_runtime_front(_, weight, bias, monkeypatch):
    """A layer norm's forward and backward run by autograd replay from the second step on,
    with the gradients of the Python path, bit for bit."""
    from torch_layouts.ops import layer_norm
    x, g = randn(8, 128, 64), randn(8, 128, 64, seed=1)
    dx, dg = x.to("spyre"), g.to("spyre")
    params = [randn(64, seed=2 + k).to("spyre").requires_grad_() if want else None
              for k, want in enumerate((weight, bias))]

    def step() -> list[torch.Tensor]:
        leaf = dx.clone().requires_grad_()
        torch.nn.functional.layer_norm(leaf, (64,), *params).backward(dg)
        grads = [leaf.grad] + [p.grad.clone() for p in params if p is not None]
        for p in params:
            if p is not None:
                p.grad = None
        return grads

    step()  # plans the geometries in Python
    elementwise.forget_recipes()
    first = step()  # the Python path again, which offers the runtime's front its replays
    calls = _calls_into_python(monkeypatch, layer_norm, "lookup")
    second = step()
    assert not calls, f"{len(calls)} autograd calls entered Python"
    for p, q in zip(first, second, strict=True):
        assert torch.equal(p.cpu(), q.cpu()) and p.device_tensor_layout() == q.device_tensor_layout()


# One row per case: id, function of device tensors (a, b, c), shapes of a, b, c.
GEMM_CASES = [
    ("mm", lambda a, b, c: a @ b, (256, 128), (128, 96), (96,)),
    ("bmm", lambda a, b, c: torch.bmm(a, b), (4, 64, 128), (4, 128, 64), (64,)),
    ("addmm-bias-row", lambda a, b, c: torch.addmm(c, a, b), (256, 128), (128, 96), (96,)),
    ("addmm-beta-alpha", lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2.0), (256, 128), (128, 96), (96,)),
    ("addmm-beta-0", lambda a, b, c: torch.addmm(c, a, b, beta=0), (64, 128), (128, 64), (64,)),
    ("linear-restickified-weight", lambda a, b, c: torch.nn.functional.linear(a, b, c), (256, 128), (96, 128), (96,)),
    ("transposed-a", lambda a, b, c: a.t() @ b, (128, 256), (128, 96), (96,)),
]


@pytest.mark.parametrize("_, fn, ashape, bshape, cshape", GEMM_CASES, ids=[c[0] for c in GEMM_CASES])
def test_tile_gemm_calls_replay_in_the_runtime_front(_, fn, ashape, bshape, cshape, monkeypatch):
    """A mm/bmm/addmm of a geometry seen before runs the tile GEMM without entering Python: the
    Python path's bits and layout, and the restickifies its rule asks for counted again."""
    from torch_layouts.ops import matmul
    inputs = [randn(*s, seed=k).to("spyre") for k, s in enumerate((ashape, bshape, cshape))]
    fn(*inputs)
    elementwise.forget_recipes()
    torch_layouts.reset_stats()
    first = fn(*inputs)  # the Python path, which offers the runtime's front its replay
    counted = torch_layouts.stats()["restickify_count"]
    calls = _calls_into_python(monkeypatch, matmul, "_call_key")
    torch_layouts.reset_stats()
    second = fn(*inputs)
    assert not calls, "a replayed call entered Python"
    assert torch_layouts.stats()["restickify_count"] == counted
    assert torch.equal(first.cpu(), second.cpu()) and first.device_tensor_layout() == second.device_tensor_layout()


# Half-precision products (no tile GEMM for them): the CPU's mm/bmm/addmm on the operands' row-major
# strided views or dense copies. id, function of device or CPU tensors (a, b, c), shapes of a, b, c,
# dtype, restickifies per call (an operand that breaks the rule). The CPU's bits for contiguous
# operands: the expected values are computed on contiguous copies (linear's weight.t()).
HALF_GEMM_CASES = [
    ("mm-one-stick", lambda a, b, c: a @ b, (32, 64), (64, 48), (48,), F16, 0),
    ("mm-sticks", lambda a, b, c: a @ b, (16, 256), (256, 100), (100,), BF16, 0),
    ("mm-k-padded", lambda a, b, c: a @ b, (7, 65), (65, 3), (3,), F16, 1),
    ("bmm", lambda a, b, c: torch.bmm(a, b), (2, 16, 64), (2, 64, 32), (32,), BF16, 0),
    ("addmm-beta-alpha", lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2.0), (30, 100), (100, 70), (70,), F16, 1),
    ("linear-transposed-weight", lambda a, b, c: torch.nn.functional.linear(a, b, c), (64, 256), (100, 256), (100,),
     F16, 1),
]


@pytest.mark.parametrize("_, fn, ashape, bshape, cshape, dtype, restickifies", HALF_GEMM_CASES,
                         ids=[c[0] for c in HALF_GEMM_CASES])
def test_half_precision_gemms_replay_in_the_runtime_front(_, fn, ashape, bshape, cshape, dtype, restickifies,
                                                          monkeypatch):
    """A half-precision mm/bmm/addmm enters Python once per geometry; every call gives the CPU's
    bits (its GEMM on operands of the same orientation), in C's default layout with its pad
    value, and counts the restickifies the rule asks for."""
    from torch_layouts.ops import matmul
    host = [randn(*s, seed=k, dtype=dtype) for k, s in enumerate((ashape, bshape, cshape))]
    inputs = [t.to("spyre") for t in host]
    elementwise.forget_recipes()
    calls = _calls_into_python(monkeypatch, matmul, "_cpu_gemm")
    with torch.no_grad():
        expected = fn(*host) if "linear" not in _ else torch.addmm(host[2], host[0], host[1].t().contiguous())
    for _ in range(3):
        torch_layouts.reset_stats()
        out = fn(*inputs)
        assert torch_layouts.stats()["restickify_count"] == restickifies
        assert torch.equal(out.cpu(), expected) and padding_holds_pad_value(out)
        assert out.device_tensor_layout() == SpyreTensorLayout(tuple(out.shape), dtype)
    assert len(calls) == 1, "a replayed call entered Python"


# GEMMs whose operands are first copied whole into the GEMM's coordinates (k padded with zeros, or
# a restickify): id, function of (a, b), shapes of a and b, the dim_order a is given in (None: default).
STAGED_GEMM_CASES = [
    ("mm-k-padded", lambda a, b: a @ b, (64, 20), (20, 48), None),
    ("bmm-k-padded-heads", lambda a, b: torch.bmm(a, b), (4, 6, 8), (4, 8, 6), None),
    ("addmm-k-padded", lambda a, b: torch.addmm(torch.ones(48, device="spyre"), a, b), (40, 16), (16, 48), None),
    ("mm-a-restickified", lambda a, b: a @ b, (64, 96), (96, 48), [1, 0]),
]


@pytest.mark.parametrize("_, fn, ashape, bshape, order", STAGED_GEMM_CASES, ids=[c[0] for c in STAGED_GEMM_CASES])
def test_gemms_of_staged_operands_replay_in_the_runtime_front(_, fn, ashape, bshape, order, monkeypatch):
    """A GEMM whose operands are copied into its coordinates first replays too (the copies made by
    the runtime on each call): the Python path's bits and layout, its restickify count, the CPU's
    values."""
    from torch_layouts.ops import matmul
    a, b = randn(*ashape), randn(*bshape, seed=1)
    da = a.to("spyre", device_layout=SpyreTensorLayout(ashape, F32, order)) if order else a.to("spyre")
    db = b.to("spyre")
    fn(da, db)
    elementwise.forget_recipes()
    torch_layouts.reset_stats()
    first = fn(da, db)  # the Python path, which offers the runtime's front its replay
    counted = torch_layouts.stats()["restickify_count"]
    calls = _calls_into_python(monkeypatch, matmul, "_call_key")
    torch_layouts.reset_stats()
    second = fn(da, db)
    assert not calls, "a replayed call entered Python"
    assert torch_layouts.stats()["restickify_count"] == counted
    assert torch.equal(first.cpu(), second.cpu()) and first.device_tensor_layout() == second.device_tensor_layout()
    expected = fn(a, b) if "addmm" not in _ else torch.addmm(torch.ones(48), a, b)
    torch.testing.assert_close(second.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert padding_holds_pad_value(second)


def test_an_addmm_replay_serves_only_its_own_beta_and_alpha():
    a, b, c = randn(64, 128), randn(128, 64, seed=1), randn(64, seed=2)
    da, db, dc = a.to("spyre"), b.to("spyre"), c.to("spyre")
    for beta, alpha in ((1, 1), (1, 1), (0.5, 3.0), (0.0, 1.0), (1, 1)):
        out = torch.addmm(dc, da, db, beta=beta, alpha=alpha)
        assert torch.allclose(out.cpu(), torch.addmm(c, a, b, beta=beta, alpha=alpha), atol=1e-4)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_dropout_backward_replays_in_the_runtime_front(dtype, monkeypatch):
    """native_dropout_backward of a geometry seen before runs without Python: the Python path's bits."""
    from torch_layouts.ops import dropout
    x, g = randn(8, 128, 64, dtype=dtype).to("spyre"), randn(8, 128, 64, seed=1, dtype=dtype).to("spyre")
    _, mask = torch.native_dropout(x, 0.25, True)
    A.native_dropout_backward(g, mask, 1 / 0.75)
    elementwise.forget_recipes()
    first = A.native_dropout_backward(g, mask, 1 / 0.75)  # the Python path, which offers its replay
    calls = _calls_into_python(monkeypatch, dropout, "run")
    second = A.native_dropout_backward(g, mask, 1 / 0.75)
    assert not calls, "a replayed call entered Python"
    assert torch.equal(first.cpu(), second.cpu()) and first.device_tensor_layout() == second.device_tensor_layout()
    expected = g.cpu() * mask.cpu() * (1 / 0.75)
    assert torch.equal(second.cpu(), expected)


@pytest.mark.parametrize("shape, p, dtype", [
    ((8, 128, 64), 0.25, F32), ((32, 64), 0.5, F32), ((4, 96), 0.0, F32), ((32, 10), 0.1, F32), ((3, 40, 100), 0.3, F32),
    ((16, 128), 0.1, F16), ((32, 10), 0.2, BF16), ((3, 40, 100), 0.3, F16)],
    ids=["model", "half", "p0", "short-stick", "padded-sticks", "float16", "short-stick-bfloat16",
         "padded-sticks-float16"])
def test_dropout_replays_in_the_runtime_front(shape, p, dtype, monkeypatch):
    """native_dropout of a geometry seen before draws and computes without Python (box by box where
    there is padding): for a seed, the Python path's output and mask, in its layouts, the pad value
    in their padding, and the generator's offset moved alike; the product rounded as the CPU's."""
    from torch_layouts.ops import dropout
    x = randn(*shape, dtype=dtype).to("spyre")
    torch.native_dropout(x, p, True)  # the Python path, which offers its replay
    calls = _calls_into_python(monkeypatch, dropout, "draw_keep")
    replayed = []
    for _ in range(2):
        torch.spyre.manual_seed(11)
        replayed.append(torch.native_dropout(x, p, True))
        offset = torch.spyre.default_generators[0].get_offset()
    assert not calls, "a replayed call entered Python"
    torch.spyre.manual_seed(11)
    with torch_layouts.strict_layouts():  # the Python path: no replay there
        out, mask = torch.native_dropout(x, p, True)
    assert len(calls) == 1 and torch.spyre.default_generators[0].get_offset() == offset
    for o, m in replayed:
        assert torch.equal(o.cpu(), out.cpu()) and torch.equal(m.cpu(), mask.cpu())
        assert padding_holds_pad_value(o) and padding_holds_pad_value(m)
        assert o.device_tensor_layout() == out.device_tensor_layout()
        assert m.device_tensor_layout() == mask.device_tensor_layout()
    keep = mask.cpu()
    assert torch.equal(out.cpu(), x.cpu().mul(keep.to(dtype)).mul_(1 / (1 - p)))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.sampled_from([F32, F16, BF16]),
       st.sampled_from([0.1, 0.5]), st.data())
def test_dropout_of_any_geometry_is_the_cpus_product_and_replays_it(shape, dtype, p, data):
    """Any shape, dim order and dtype: the output is the CPU's ``x.mul(mask).mul_(scale)`` of the
    mask drawn, bit for bit, the pad value in both results' padding, and a replay from the same
    seed gives the same bits and layouts."""
    order = data.draw(st.permutations(range(len(shape))))
    elementwise.forget_recipes()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype)
    dx = x.to("spyre", device_layout=SpyreTensorLayout(tuple(shape), dtype, list(order)))
    runs = []
    for _ in range(3):
        torch.spyre.manual_seed(5)
        runs.append(torch.native_dropout(dx, p, True))
    out, mask = runs[0]
    assert torch.equal(out.cpu(), x.mul(mask.cpu().to(dtype)).mul_(1 / (1 - p)))
    for o, m in runs:
        assert torch.equal(o.cpu(), out.cpu()) and torch.equal(m.cpu(), mask.cpu())
        assert o.device_tensor_layout() == out.device_tensor_layout() and padding_holds_pad_value(o)
        assert padding_holds_pad_value(m)


# Same-device conversions (`_to_copy`): id, shape, from dtype, to dtype, device layout dim order (None: default).
CONVERSIONS = [
    ("float32-to-float16", (32, 64), F32, F16, None),  # the result's stick holds two of the input's
    ("padded-float32-to-float16", (6, 70), F32, F16, None),
    ("float16-to-float32", (64, 32), F16, F32, None),
    ("float32-to-bfloat16-3d", (4, 16, 96), F32, torch.bfloat16, None),
    ("dim-order-float32-to-float16", (40, 70), F32, F16, [1, 0]),
    ("float32-to-int32", (32, 10), F32, torch.int32, None),
]


@pytest.mark.parametrize("_, shape, src, dst, order", CONVERSIONS, ids=[c[0] for c in CONVERSIONS])
def test_conversions_are_kept_per_geometry(_, shape, src, dst, order, monkeypatch):
    """A conversion of a geometry seen before is converted piece by piece by the runtime, without
    entering Python: the first call's bits, layout and padding, the CPU's values, each call
    counted; strict mode always plans."""
    elementwise.forget_recipes()
    x = (randn(*shape) * 3).to(src)
    dx = x.to("spyre") if order is None else x.to("spyre", device_layout=SpyreTensorLayout(shape, src, order))
    torch_layouts.reset_stats()
    first = dx.to(dst)
    calls = _calls_into_python(monkeypatch, elementwise, "convert")
    for _ in range(2):
        again = dx.to(dst)
        assert torch.equal(again.cpu(), first.cpu()) and again.device_tensor_layout() == first.device_tensor_layout()
        assert padding_holds_pad_value(again)
    assert not calls, "a kept conversion entered Python"
    assert torch_layouts.stats()["kernel_calls"]["aten::_to_copy"] == 3
    assert torch.equal(first.cpu(), x.to(dst))
    with torch_layouts.strict_layouts():
        assert torch.equal(dx.to(dst).cpu(), first.cpu())
    assert len(calls) == 1


# Conversions of views (id, shape, the view, to dtype): the replay converts the span of the buffer
# the view's pieces read at once, then moves the pieces (``csrc/piece_copies.cpp``), or, where they
# read less than half of that span, converts each piece where it lies.
VIEW_CONVERSIONS = [
    ("columns", (64, 256), lambda t: t[:, 32:224], F16),
    ("row-of-a-large-buffer", (64, 256), lambda t: t[37], F16),  # one element per stick: its pieces sparse
    ("rows-slice-to-bfloat16", (48, 96), lambda t: t[5:40], torch.bfloat16),
    ("transposed-to-float16", (40, 96), lambda t: t.t(), F16),
    ("to-int16", (16, 200), lambda t: t[2:], torch.int16),
]


@pytest.mark.parametrize("_, shape, view, dst", VIEW_CONVERSIONS, ids=[c[0] for c in VIEW_CONVERSIONS])
def test_conversions_of_views_replay_the_cpus_bits(_, shape, view, dst, monkeypatch):
    """Every call of a view's conversion, planned or replayed, gives the CPU's conversion of the
    same view bit for bit, in one layout, its padding the pad value; later calls stay out of Python."""
    elementwise.forget_recipes()
    calls = _calls_into_python(monkeypatch, elementwise, "convert")
    outs = []
    for seed in range(3):
        x = randn(*shape, seed=seed) * 300
        out = view(x.to("spyre")).to(dst)
        assert torch.equal(out.cpu(), view(x).to(dst)) and padding_holds_pad_value(out)
        outs.append(out)
    assert all(o.device_tensor_layout() == outs[0].device_tensor_layout() for o in outs)
    assert len(calls) == 1, "a kept conversion entered Python"


def any_values(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Values of every kind: random bit patterns (NaNs with payloads, infinities, subnormals,
    values past float16's range) and normal values around float16's range and rounding ties."""
    gen = torch.Generator().manual_seed(seed)
    bits = torch.randint(-2**31, 2**31 - 1, shape, generator=gen, dtype=torch.int32)
    raw = bits.view(torch.float32) if dtype == F32 else bits.to(torch.int16).view(dtype)
    scale = torch.tensor([1e-7, 1e-3, 1.0, 300.0, 7e4])[torch.randint(0, 5, shape, generator=gen)]
    normal = (torch.randn(shape, generator=gen) * scale).to(dtype)
    return torch.where(torch.rand(shape, generator=gen) < 0.5, raw, normal)


BF16 = torch.bfloat16


# The instruction sets the converting copies run in (the row kernels'; the portable one declines).
ROW_SETS = pytest.mark.parametrize("instructions", _C._rows_math_sets())


@ROW_SETS
@pytest.mark.parametrize("src, dst", [(F32, F16), (F16, F32), (F32, BF16), (BF16, F32)],
                         ids=["to-float16", "to-float32", "to-bfloat16", "bfloat16-to-float32"])
@pytest.mark.parametrize("view", [lambda t: t, lambda t: t[3:, 40:], lambda t: t[:, 64:192]],
                         ids=["whole", "slice", "sticks"])
def test_half_conversions_in_runs_give_the_cpus_bits(src, dst, view, instructions):
    """float32 <-> float16 and bfloat16 conversions whose pieces are runs of sticks, converted where
    they lie (``csrc/converting_copies.cpp``) in each instruction set: the CPU's bits for values of
    every kind, NaN payloads included (float32 -> bfloat16: every NaN 0xffff, as the CPU's
    vectorized conversion gives it), on the planned call and the replays."""
    elementwise.forget_recipes()
    ints = {F32: torch.int32, F16: torch.int16, BF16: torch.int16}
    with kernels_in(_C._rows_set_math, instructions):
        for seed in range(3):
            x = any_values((160, 256), src, seed)  # 160 KiB of float32: split over the threads
            out = view(x.to("spyre")).to(dst)
            assert torch.equal(out.cpu().view(ints[dst]), view(x).to(dst).view(ints[dst]))
            assert padding_holds_pad_value(out)


@ROW_SETS
@pytest.mark.parametrize("src, dst", [(F32, F16), (F16, F32), (F32, BF16), (BF16, F32)],
                         ids=["to-float16", "to-float32", "to-bfloat16", "bfloat16-to-float32"])
@pytest.mark.parametrize("shape, order", [((160, 256), None), ((100, 50), None), ((64, 96), [1, 0]),
                                          ((3, 130), None)], ids=["sticks", "padded", "dim-order", "short-runs"])
def test_converting_copy_into_a_device_tensor_gives_the_cpus_bits(src, dst, shape, order, instructions):
    """``dst.copy_(src)`` between two whole device tensors of float32 and float16 or bfloat16 (both in
    the same dim order) converts each run on the device where the layouts' runs are 8 elements or
    longer (no host bounce in the vector sets), else through the host: the CPU's bits either way,
    the padding the pad value."""
    ints = {F32: torch.int32, F16: torch.int16, BF16: torch.int16}
    layout, src_layout = (SpyreTensorLayout(shape, dst, order), SpyreTensorLayout(shape, src, order)) if order else (None, None)
    runs_on_device = instructions != "portable" and shape != (3, 130)
    with kernels_in(_C._rows_set_math, instructions):
        for seed in range(2):
            x = any_values(shape, src, seed)
            out = torch.empty(shape, dtype=dst, device="spyre", device_layout=layout)
            torch_layouts.reset_stats()
            out.copy_(x.to("spyre", device_layout=src_layout))
            assert (torch_layouts.stats()["host_bounces"] == 0) == runs_on_device
            assert torch.equal(out.cpu().view(ints[dst]), x.to(dst).view(ints[dst]))
            assert padding_holds_pad_value(out)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 80), min_size=1, max_size=3), st.sampled_from([F32, F16, BF16, torch.int32]),
       st.sampled_from([F32, F16, BF16, torch.int32]), st.booleans(), st.data())
def test_copies_between_device_tensors_of_any_dtypes_give_the_cpus_bits(shape, src, dst, same_order, data):
    """``dst.copy_(src)`` between two whole device tensors of any two dtypes, in any Spyre dim
    orders (the same on both sides, where the runs are converted on the device, or each its own):
    the CPU's conversion bit for bit, values of every kind, the destination's padding its pad value."""
    order = list(data.draw(st.permutations(range(len(shape)))))
    other = order if same_order else list(data.draw(st.permutations(range(len(shape)))))
    x = (any_values(tuple(shape), src, len(shape)) if src != torch.int32
         else torch.randint(-2**31, 2**31 - 1, tuple(shape), dtype=torch.int32))
    source = x.to("spyre", device_layout=SpyreTensorLayout(tuple(shape), src, order))
    out = torch.empty(shape, dtype=dst, device="spyre", device_layout=SpyreTensorLayout(tuple(shape), dst, other))
    torch_layouts.reset_stats()
    out.copy_(source)
    # Converted on the device: as ATen's vectorized loop converts; through the host: ATen's whole call.
    want = x.to(dst) if torch_layouts.stats()["host_bounces"] else converted_in_vectors(x, dst)
    ints = {F32: torch.int32, F16: torch.int16, BF16: torch.int16, torch.int32: torch.int32}
    assert torch.equal(out.cpu().view(ints[dst]), want.view(ints[dst]))
    assert padding_holds_pad_value(out)


@ROW_SETS
@pytest.mark.parametrize("columns", [8, 24, 40, 56, 70], ids=lambda c: f"{c}-columns")
def test_bfloat16_ties_and_nans_in_runs_of_any_length(columns, instructions):
    """float32 -> bfloat16 in runs of any length (the vector steps and the element-by-element
    tail), in each instruction set: exact ties round to even and every NaN becomes 0xffff, the
    CPU's bits."""
    elementwise.forget_recipes()
    gen = torch.Generator().manual_seed(columns)
    bits = torch.randint(-2**31, 2**31 - 1, (64, 128), generator=gen, dtype=torch.int32)
    ties = (bits & ~0xffff) | 0x8000  # halfway between two bfloat16 values (or a NaN's payload)
    x = torch.where(torch.rand(64, 128, generator=gen) < 0.5, ties, bits).view(F32)
    with kernels_in(_C._rows_set_math, instructions):
        for _ in range(2):
            out = x.to("spyre")[:, :columns].to(BF16)
            assert torch.equal(out.cpu().view(torch.int16), x[:, :columns].to(BF16).view(torch.int16))


CONVERSION_DTYPES = [F32, F16, torch.bfloat16, torch.int32, torch.int16]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.sampled_from(CONVERSION_DTYPES),
       st.sampled_from(CONVERSION_DTYPES), st.data())
def test_conversions_of_any_layout_and_view_give_the_cpus_bits(shape, src, dst, data):
    """Any Spyre layout, a whole tensor or a slice of it, any two dtypes: the first call (planned)
    and the replays of its geometry convert to the CPU's bits, the result's padding the pad value."""
    elementwise.forget_recipes()
    order = list(data.draw(st.permutations(range(len(shape)))))
    layout = SpyreTensorLayout(tuple(shape), src, order)
    d = data.draw(st.integers(0, len(shape) - 1))
    start = data.draw(st.integers(0, shape[d] - 1))
    index = tuple(slice(start, None) if k == d else slice(None) for k in range(len(shape)))
    for seed in range(3):
        x = (randn(*shape, seed=seed) * 100).to(src)
        out = x.to("spyre", device_layout=layout)[index].to(dst)
        expected = x[index].to(dst)
        assert out.dtype == expected.dtype and torch.equal(out.cpu(), expected)
        assert padding_holds_pad_value(out)


# One row per case: id, an out= call of an op whose functional kernel offers a replay, its CPU twin.
OUT_CASES = [
    ("mm.out", lambda a, b, o: torch.mm(a, b, out=o)),
    ("bmm.out", lambda a, b, o: torch.bmm(a.unsqueeze(0), b.unsqueeze(0), out=o.unsqueeze(0))),
    ("addmm.out", lambda a, b, o: torch.addmm(b[0], a, b, out=o)),
    ("clone.out", lambda a, b, o: A.clone.out(a, out=o)),
    ("_softmax.out", lambda a, b, o: A._softmax.out(a, -1, False, out=o)),
    ("_softmax_backward_data.out", lambda a, b, o: A._softmax_backward_data.out(b, a, -1, a.dtype, grad_input=o)),
    ("sum.IntList_out", lambda a, b, o: torch.sum(a, 0, keepdim=True, out=o[:1])),
    ("add.out", lambda a, b, o: torch.add(a, b, out=o)),
]


@pytest.mark.parametrize("_, fn", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_out_calls_write_their_out_tensor_every_time(_, fn):
    """An out= overload served by its functional kernel is never given the functional's replay
    (which would return a new tensor and leave ``out`` as it was)."""
    for seed in range(3):
        a, b = randn(64, 64, seed=seed), randn(64, 64, seed=seed + 10)
        out = torch.empty(64, 64).to("spyre")
        fn(a.to("spyre"), b.to("spyre"), out)
        expected = torch.empty(64, 64)
        fn(a, b, expected)
        rows = 1 if _ == "sum.IntList_out" else 64  # the sum writes the first row
        assert torch.allclose(out.cpu()[:rows], expected[:rows], atol=1e-5, rtol=1e-5), seed


# fill_ and zero_ on whole tensors: id, the op on a device tensor and a call number (the value
# changes from call to call), shape, pad value of the layout.
FILL_CASES = [
    ("fill-float", lambda x, k: x.fill_(0.5 + k), (16, 128), 0.0),
    ("fill-int-boxes", lambda x, k: x.fill_(k - 3), (5, 70), 0.0),
    ("zero-pad-value", lambda x, k: x.zero_(), (3, 10), 7.0),
    ("ones-like", lambda x, k: torch.ones_like(x), (4, 6, 6), 0.0),
    ("ones-like-0-dim", lambda x, k: torch.ones_like(x), (), 0.0),  # autograd's gradient of a loss
]


@pytest.mark.parametrize("_, fn, shape, pad", FILL_CASES, ids=[c[0] for c in FILL_CASES])
def test_fills_replay_in_the_runtime_front(_, fn, shape, pad, monkeypatch):
    """After the first call of a geometry, fills run without entering Python: every element the
    call's value, the padding its pad value, whatever value each call passes."""
    elementwise.forget_recipes()
    entered = []
    monkeypatch.setattr(elementwise, "_fill_buffer", lambda *a, original=elementwise._fill_buffer:
                        entered.append(1) or original(*a))
    layout = SpyreTensorLayout(shape, F32, pad_value=pad)
    for k in range(3):
        x = randn(*shape, seed=k)
        dx = x.to("spyre", device_layout=layout)
        out = fn(dx, k)
        assert torch.equal(out.cpu(), fn(x, k)) and padding_holds_pad_value(out)
    assert len(entered) == 1


# fill_ and zero_ on views: id, shape and dtype of the whole tensor, the view (an index), the op
# (a call number k picks the value), the number of strided buffer views the fill writes.
VIEW_FILL_CASES = [
    ("rows-in-one-stick", (4, 70), F32, (slice(1, 3), slice(5, 30)), lambda v, k: v.fill_(k + 0.5), 1),
    ("straddling-sticks", (4, 70), F32, (slice(1, 3), slice(5, 40)), lambda v, k: v.zero_(), 2),
    ("past-the-last-stick", (4, 70), F32, (slice(None), slice(30, 70)), lambda v, k: v.fill_(-k), 3),
    ("stepped", (6, 70), F32, (slice(0, 6, 2), slice(1, 69, 3)), lambda v, k: v.fill_(k), 3),
    ("one-row", (5, 64), F16, (2,), lambda v, k: v.fill_(2 * k), 1),
    ("heads-of-a-packed-projection", (2, 6, 48), F32, (Ellipsis, slice(16, 32)), lambda v, k: v.zero_(), 1),
    ("a-column-of-a-4d-tensor", (8, 4, 32, 16), F16, (slice(None), 1, slice(3, 20)), lambda v, k: v.fill_(k), 1),
]


@pytest.mark.parametrize("_, shape, dtype, index, fn, boxes", VIEW_FILL_CASES, ids=[c[0] for c in VIEW_FILL_CASES])
def test_view_fills_write_their_elements_in_place_and_replay(_, shape, dtype, index, fn, boxes, monkeypatch):
    """A fill of a view writes its elements where they lie (a few strided views of the buffer, cut
    where a dim's offsets change step), nothing else, the padding kept; later calls of that
    geometry replay in the runtime's front, whatever value each passes."""
    elementwise.forget_recipes()
    entered = []
    monkeypatch.setattr(elementwise, "_fill_buffer", lambda *a, original=elementwise._fill_buffer:
                        entered.append(1) or original(*a))
    host = randn(*shape, seed=1).to(dtype)
    dev = host.to("spyre")
    assert len(piece_reads(dev[index])) == boxes
    for k in range(3):
        fn(dev[index], k)
        fn(host[index], k)
        assert torch.equal(dev.cpu(), host) and padding_holds_pad_value(dev), k
    assert len(entered) == 1


def test_a_clone_that_restickifies_is_counted_every_call():
    """A contiguous clone that moves the stick is a restickify: it is not replayed by the front,
    so every call counts it."""
    elementwise.forget_recipes()
    d = randn(64, 64).to("spyre")
    counts = []
    for _ in range(3):
        torch_layouts.reset_stats()
        d[:, :48].t().contiguous()
        counts.append(torch_layouts.stats()["restickify_count"])
    assert counts == [1, 1, 1]


# Calls the runtime's front replays, over random geometries (short sticks and padding included):
# id, the op on a device or CPU tensor, whether the replay must give the CPU's bits (else within
# the dtype's tolerance: the row kernels and the per-dim sums round on their own).
REPLAY_PROPERTY_OPS = [
    ("mul", lambda x: x * x, True),
    ("rsub-number", lambda x: 1 - x, True),
    ("remainder-number", lambda x: x % 0.75, True),  # an op that took the CPU fallback before
    ("leaky_relu", lambda x: torch.nn.functional.leaky_relu(x, 0.2), True),
    ("relu", torch.relu, True),
    ("add_-number", lambda x: x.clone().add_(0.5), True),
    ("amax-last", lambda x: x.amax(-1), True),
    ("sum-first", lambda x: x.sum(0), False),
    ("softmax", lambda x: torch.softmax(x, -1), False),
    ("ones_like", lambda x: torch.ones_like(x), True),
    ("zero_", lambda x: x.clone().zero_(), True),
    ("contiguous-of-transpose", lambda x: x.transpose(0, -1).contiguous(), True),
    ("contiguous-of-a-slice", lambda x: x[..., 1:].contiguous(), True),  # pieces where it straddles sticks
    ("fill-of-a-slice", lambda x: _filled_slice(x), True),  # the view's pieces filled in place
    ("gt-zero", lambda x: x > 0, True),  # a bool result through its view in the input's coordinates
    ("masked_fill", lambda x: x.masked_fill(x > 0, 0.5), True),
    ("sum-last", lambda x: x.sum(-1), False),  # over a (padded) stick, or its rows of several sticks
    ("mean-first", lambda x: x.mean(0), False),
    ("mean-all", lambda x: x.mean(), False),
    ("mul-by-an-element", lambda x: x * x[(-1,) * x.dim()], True),  # a 0-dim operand at any offset
    ("where-number", lambda x: torch.where(x > 0, x, -1.5), True),  # the number a 0-dim device tensor
    ("softmax-first", lambda x: torch.softmax(x, 0), False),
    ("log_softmax-last", lambda x: torch.log_softmax(x, -1), False),  # rows ending within a stick
    ("layer_norm-last", lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]), False),
    ("all-first", lambda x: (x > -1).all(0), True),
    ("any-last", lambda x: (x > 1).any(-1), True),
    ("amax-last-of-negatives", lambda x: (x - 10).amax(-1), True),  # several boxes: never the zero padding
    ("to-float16", lambda x: x.to(torch.float16), True),  # a kept conversion, piece by piece
    ("mm-by-own-transpose", lambda x: x.flatten(0, -2) @ x.flatten(0, -2).t(), False),  # halves: the CPU's GEMM
    ("logsumexp-last", lambda x: torch.logsumexp(x, -1), False),
    ("mse-loss-none", lambda x: torch.nn.functional.mse_loss(x, x * 0.5, reduction="none"), True),
    ("mse-loss-mean", lambda x: torch.nn.functional.mse_loss(x, x * 0.5), False),  # summed in the buffer's order
    ("nll-loss-last", lambda x: torch.nn.functional.nll_loss(  # a padded class dim: staged read and gradient
        x.flatten(0, -2), torch.zeros(x.shape[:-1].numel(), dtype=torch.long, device=x.device)), False),
]


def _filled_slice(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[..., 1:].fill_(2.0)
    return y


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=2, max_size=3), st.sampled_from([F32, F16, BF16]),
       st.sampled_from(range(len(REPLAY_PROPERTY_OPS))), st.data())
def test_replays_give_the_python_paths_bits_on_any_geometry(shape, dtype, which, data):
    """The first call of a geometry runs in Python, the next ones are replayed by the runtime's
    front: the same bits, layout and padding every time, and the CPU's values."""
    _, fn, exact = REPLAY_PROPERTY_OPS[which]
    order = data.draw(st.permutations(range(len(shape))))
    layout = SpyreTensorLayout(tuple(shape), dtype, list(order))
    elementwise.forget_recipes()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape) * 41 + which)).to(dtype)
    dx = x.to("spyre", device_layout=layout)
    results = [fn(dx) for _ in range(3)]
    first = results[0]
    for again in results[1:]:
        assert torch.equal(again.cpu(), first.cpu()) and again.device_tensor_layout() == first.device_tensor_layout()
        assert padding_holds_pad_value(again)
    expected = fn(x)
    assert first.dtype == expected.dtype and first.shape == expected.shape
    if exact:
        assert torch.equal(first.cpu(), expected)
    else:
        tol = {F32: 1e-5, F16: 1e-2, BF16: 5e-2}[dtype]
        torch.testing.assert_close(first.cpu(), expected, rtol=tol, atol=tol * 4)


# Replayed calls on fresh buffers each time: (id, function of (a, b, out) on either device,
# whether the device gives the CPU's bits). They cover each kind of replay that lends CPU views
# of the buffers: pointwise (one tensor read twice, out=), row kernels, reductions and fills.
FRESH_BUFFER_OPS = [
    ("add", lambda a, b, out: a + b, True),
    ("add_", lambda a, b, out: a.add_(b, alpha=0.5), True),
    ("same tensor twice", lambda a, b, out: a.mul_(a), True),
    ("out=", lambda a, b, out: torch.mul(a, b, out=out), True),
    ("scalar", lambda a, b, out: b * 3.0, True),
    ("softmax", lambda a, b, out: torch.softmax(a, -1), False),
    ("softmax backward", lambda a, b, out: torch.ops.aten._softmax_backward_data(b, torch.softmax(a, -1), -1, a.dtype),
     False),
    ("layer_norm", lambda a, b, out: torch.nn.functional.layer_norm(a, a.shape[-1:]), False),
    ("sum", lambda a, b, out: a.sum(-1), False),
    ("fill_", lambda a, b, out: out.fill_(2.5), True),
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.sampled_from([F32, F16, BF16]),
       st.sampled_from(range(len(FRESH_BUFFER_OPS))), st.integers(0, 2**31 - 1), st.data())
def test_replays_read_and_write_each_calls_own_buffers(shape, dtype, which, seed, data):
    """A replay computes on CPU views of the call's buffers, which the runtime keeps per thread
    and lends again for the same address and geometry: freed buffers handed out again at the same
    address, buffers of other sizes in between and one tensor read twice still give every call the
    CPU's values (its bits where the device computes as the CPU does) for its own operands, in any
    dim order, and leave the operands as they were."""
    _, fn, exact = FRESH_BUFFER_OPS[which]
    layout = SpyreTensorLayout(tuple(shape), dtype, list(data.draw(st.permutations(range(len(shape))))))
    gen = torch.Generator().manual_seed(seed)
    tol = {F32: 1e-5, F16: 1e-2, BF16: 5e-2}[dtype]
    for step in range(6):
        a, b = (torch.randn(shape, generator=gen).to(dtype) for _ in range(2))
        out = torch.empty(shape, dtype=dtype)
        da, db, dout = (t.to("spyre", device_layout=layout) for t in (a, b, out))
        if step % 2:  # a buffer of another size between calls: the next ones land elsewhere
            torch.empty(step * 7 + 1, device="spyre")
        got, expected = fn(da, db, dout).cpu(), fn(a, b, out)
        if exact:
            assert torch.equal(got, expected), f"step {step}"
        else:
            torch.testing.assert_close(got, expected, rtol=tol, atol=tol * 4, msg=f"step {step}")
        assert torch.equal(da.cpu(), a) and torch.equal(db.cpu(), b), f"operands after step {step}"
        del da, db, dout, got
