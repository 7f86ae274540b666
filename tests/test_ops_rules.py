"""Layout rules of the ops: strict mode and ``LayoutError``, ``restickify`` across the
families, ``stats()``/``reset_stats()`` and the CPU-fallback warning."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from torch_layouts import DataFormats, LayoutError, SpyreTensorLayout, htp, mace, tensorrt

F16, F32 = torch.float16, torch.float32
TRANSPOSED = SpyreTensorLayout((512, 256), (256, 1), F16, [1, 0])


def operands():
    a = torch.randn(512, 256, dtype=F16)
    da = a.to("spyre")
    return a, da, torch_layouts.restickify(da, TRANSPOSED)


def test_issue_example():
    a, da, r = operands()
    assert r.device_tensor_layout() == TRANSPOSED
    with torch_layouts.strict_layouts():
        with pytest.raises(LayoutError) as info:
            da + r
    message = str(info.value)
    assert message.startswith("add needs all operands sticked on the same dim")
    assert f"self: {da.device_tensor_layout()} (sticked on dim 1" in message
    assert f"other: {TRANSPOSED} (sticked on dim 0" in message
    assert f"torch_layouts.restickify(other, {da.device_tensor_layout()})" in message
    assert isinstance(info.value, ValueError)
    torch_layouts.reset_stats()
    out = da + r  # outside strict mode: restickified and counted
    torch.testing.assert_close(out.cpu(), a + a, atol=0, rtol=0)
    stats = torch_layouts.stats()
    assert stats["restickify_count"] == 1 and stats["restickify_bytes"] == 512 * 256 * 2


def test_strict_mode_is_scoped_and_per_thread():
    _, da, r = operands()
    caught = []

    def other_thread():
        try:
            da + r
        except LayoutError as e:  # pragma: no cover - the assertion below reports it
            caught.append(e)

    with torch_layouts.strict_layouts():
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        with torch_layouts.strict_layouts(False):
            da + r
        with pytest.raises(LayoutError):
            da * r
    assert caught == []
    da + r
    with pytest.raises(TypeError, match="bool"):
        with torch_layouts.strict_layouts("yes"):
            pass


def test_strict_mode_allows_compatible_operands():
    a = torch.randn(64, 256, dtype=F16)
    da, bias = a.to("spyre"), torch.randn(256, dtype=F16).to("spyre")
    with torch_layouts.strict_layouts():
        out = torch.relu(da * 2 + bias) - da[:, :64].sum(-1, keepdim=True)
        out = torch.where(out > 0, out, da)  # a bool mask has other sticks: converted, not an error
    ref = torch.relu(a * 2 + bias.cpu()) - a[:, :64].sum(-1, keepdim=True)
    torch.testing.assert_close(out.cpu(), torch.where(ref > 0, ref, a), atol=2e-2, rtol=1e-2)


# Layouts of every family for restickify round trips: id, shape, dtype, layout spec.
FAMILIES = [
    ("spyre-dim-order", (2, 8, 8, 40), F16, SpyreTensorLayout((2, 8, 8, 40), F16, [3, 0, 1, 2])),
    ("spyre-sparse", (2, 8, 8, 40), F32, SpyreTensorLayout((2, 8, 8, 40), F32, [0, 1, 2, 3, -1])),
    ("htp-crouton", (2, 8, 8, 40), F16, htp.R4CroutonLayout),
    ("htp-flat", (2, 8, 8, 40), F32, htp.R4FlatMemoryLayout),
    ("tensorrt-kCHW4", (2, 8, 8, 40), F16, tensorrt.TensorFormat.kCHW4),
    ("tensorrt-kHWC8", (2, 8, 8, 40), F16, tensorrt.TensorFormat.kHWC8),
    ("mace-image", (2, 8, 8, 40), F32, mace.ImageLayout(mace.BufferType.IN_OUT_CHANNEL)),
]


@pytest.mark.parametrize("_, shape, dtype, spec", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_restickify_across_families(_, shape, dtype, spec):
    x = torch.randn(shape).to(dtype)
    y = x.to("spyre")
    torch_layouts.reset_stats()
    z = torch_layouts.restickify(y, spec)
    expected = spec.bind(shape, dtype) if hasattr(spec, "bind") else spec
    assert z.device_tensor_layout() == expected
    torch.testing.assert_close(z.cpu(), x, atol=0, rtol=0)
    assert torch_layouts.restickify(z, spec) is z  # already there: no copy
    back = torch_layouts.restickify(z, y.device_tensor_layout())
    torch.testing.assert_close(back.cpu(), x, atol=0, rtol=0)
    stats = torch_layouts.stats()
    assert stats["restickify_count"] == 2 and stats["restickify_bytes"] == 2 * x.numel() * x.element_size()
    assert stats["host_bounces"] == 0


def test_restickify_is_differentiable():
    x = torch.randn(8, 100)
    y = x.to("spyre").requires_grad_()
    z = torch_layouts.restickify(y, SpyreTensorLayout((8, 100), F32, [1, 0]))
    (z * torch.arange(100.0).to("spyre")).sum().backward()
    torch.testing.assert_close(y.grad.cpu(), torch.arange(100.0).expand(8, 100))
    assert y.grad.device_tensor_layout() == y.device_tensor_layout()


def test_restickify_rejects_bad_arguments():
    y = torch.randn(4, 8).to("spyre")
    with pytest.raises(TypeError, match="tensor"):
        torch_layouts.restickify([1, 2], TRANSPOSED)
    with pytest.raises(ValueError, match="spyre tensor"):
        torch_layouts.restickify(torch.randn(4, 8), SpyreTensorLayout((4, 8), F32))
    with pytest.raises(TypeError, match="layout"):
        torch_layouts.restickify(y, "default")
    with pytest.raises(ValueError):
        torch_layouts.restickify(y, SpyreTensorLayout((5, 8), F32))


def test_stats_count_kernels_dma_and_fallbacks():
    torch_layouts.reset_stats()
    x = torch.randn(64, 64)
    y = x.to("spyre")
    z = (y + 1).exp().sum(0)
    torch.nonzero(y)  # no device kernel: the CPU fallback
    torch.nonzero(y > 0)
    z.cpu()
    stats = torch_layouts.stats()
    assert stats["h2d_bytes"] >= 64 * 64 * 4 and stats["d2h_bytes"] >= 64 * 4
    assert stats["kernel_calls"]["aten::add.Tensor"] == 1 and stats["kernel_calls"]["aten::exp"] == 1
    assert stats["kernel_calls"]["aten::sum.dim_IntList"] == 1
    assert stats["fallbacks"] == {"aten::nonzero": 2}
    assert set(stats) >= {"restickify_count", "restickify_bytes", "h2d_bytes", "d2h_bytes", "d2d_bytes",
                          "host_bounces", "kernel_calls", "fallbacks"}
    torch_layouts.reset_stats()
    stats = torch_layouts.stats()
    assert stats["kernel_calls"] == {} and stats["fallbacks"] == {} and stats["h2d_bytes"] == 0


def test_fallback_warning_names_each_op_once():
    y = torch.randn(8, 8).to("spyre")
    torch_layouts.warn_on_fallback(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.nonzero(y)
            torch.nonzero(y > 0)
            torch.bincount((y > 0).long().flatten())
            y + y  # a device kernel: no warning
        messages = [str(w.message) for w in caught]
        assert sum("nonzero" in m for m in messages) == 1 and sum("bincount" in m for m in messages) == 1
        assert len(messages) == 2
    finally:
        torch_layouts.warn_on_fallback(False)
    with pytest.raises(TypeError, match="bool"):
        torch_layouts.warn_on_fallback(1)


@pytest.mark.parametrize("device_size, stride_map", [([8, 3, 32], [32, 256, 1]), ([2, 12, 32], [384, 32, 1])],
                         ids=["tiles-swapped", "tiles-split"])
def test_an_operand_with_the_same_stick_in_another_tile_order_is_relaid_not_restickified(device_size, stride_map):
    """A gradient whose tiles are ordered differently (a reduction's collapsed layout) is copied
    into the op's layout without a restickify; strict mode still asks for the same layout."""
    layout = SpyreTensorLayout(device_size, stride_map, DataFormats.IEEE_FP32)
    x, y = torch.randn(768), torch.randn(768)
    dx, dy = x.to("spyre", device_layout=layout), y.to("spyre")
    torch_layouts.reset_stats()
    assert torch.equal((dy + dx).cpu(), y + x)
    assert torch_layouts.stats()["restickify_count"] == 0
    with torch_layouts.strict_layouts(), pytest.raises(LayoutError, match="same layout"):
        dy + dx


@pytest.mark.parametrize("split, merged", [((6, 2, 3, 16), (6, 2, 48)), ((4, 5, 3), (4, 15)), ((3, 7, 40), (21, 40)),
                                           ((6, 2, 48), (6, 96)), ((3, 7, 40), (3, 280))],
                         ids=["sticks-of-16", "sticks-of-3", "rows-merged", "rows-of-48-merged", "rows-of-40-merged"])
@pytest.mark.parametrize("op", [lambda t: t * 2, lambda t: t + t, lambda t: t.sum([0]), lambda t: t.sum(-1),
                                lambda t: t.clone().exp(), lambda t: torch.softmax(t, -1)],
                         ids=["mul", "add", "sum-outer", "sum-stick", "clone-exp", "softmax"])
def test_results_over_merged_dims_are_read_in_place(split, merged, op):
    """``x.view(merged) * 2`` holds its result in ``x``'s layout bound over the merged shape: a
    stick holding fewer elements than its slots (``Group.radices``), or sticks of 32 over merged
    rows of 48 (steps 1, 32, 48: two radices); the next ops read that buffer as it is: no
    restickify, the CPU's values."""
    x = torch.randn(split)
    y = x.to("spyre").view(merged) * 2
    torch_layouts.reset_stats()
    out = op(y)
    assert torch_layouts.stats()["restickify_count"] == 0
    torch.testing.assert_close(out.cpu(), op(x.view(merged) * 2))


VIEWS = {
    "transpose": lambda t: t.transpose(-1, -2),
    "merge-last-two": lambda t: t.reshape(*t.shape[:-2], -1),
    "merge-first-two": lambda t: t.reshape(-1, *t.shape[2:]),
    "split-last": lambda t: t.reshape(*t.shape[:-1], 2, -1) if t.shape[-1] % 2 == 0 else t,
    "unsqueeze": lambda t: t.unsqueeze(1),
    "permute": lambda t: t.permute(*reversed(range(t.dim()))),
}
ELEMENTWISE = {"add": lambda t: t + t, "mul": lambda t: t * 3, "exp": lambda t: t.exp(),
               "clone-add": lambda t: (lambda c: c + c)(t.clone())}
READS = {"sum-first": lambda t: t.sum(0), "mean": lambda t: t.mean(), "softmax": lambda t: torch.softmax(t, -1),
         "transpose-contiguous": lambda t: t.transpose(0, -1).contiguous()}


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.sampled_from([2, 3, 5, 16, 40, 48, 96]), min_size=2, max_size=3),
       views=st.lists(st.sampled_from(sorted(VIEWS)), min_size=1, max_size=2),
       op=st.sampled_from(sorted(ELEMENTWISE) + sorted(READS)))
def test_ops_on_results_of_views_read_them_in_place(shape, views, op):
    """``v(x) * 2`` for compositions of views ``v`` of a device tensor in its default layout (its
    sticks split, merged, permuted) holds its result in a layout bound over the view's shape; the
    next elementwise op reads it without a restickify and gives the CPU's bits, and the reads give
    the CPU's values (sums to rounding: another order of additions)."""
    torch.manual_seed(0)
    x = torch.randn(shape)
    dx = x.to("spyre")
    for name in views:
        if x.dim() < 2:
            break
        x, dx = VIEWS[name](x), VIEWS[name](dx)
    y, dy = x * 2, dx * 2
    fn = ELEMENTWISE.get(op) or READS[op]
    torch_layouts.reset_stats()
    out = fn(dy)
    if op in ELEMENTWISE:
        assert torch_layouts.stats()["restickify_count"] == 0
    if op in ELEMENTWISE:  # the CPU's kernels on the buffer's views: the CPU's bits
        assert torch.equal(out.cpu(), fn(y))
    else:
        torch.testing.assert_close(out.cpu().double(), fn(y.double()), rtol=1e-4, atol=1e-3)
