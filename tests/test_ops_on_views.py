"""Ops that run their CPU out= overload on the device buffers' views (``ops/on_views.CPU_KERNELS``):
the CPU's values and errors, results in the default layouts of their shapes, no CPU fallback, and
replays by the runtime's front."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import padding_holds_pad_value, raises_like_the_cpu
from torch_layouts import SpyreTensorLayout
from torch_layouts.ops import elementwise, on_views

F16, F32, BF16 = torch.float16, torch.float32, torch.bfloat16
INDEX = torch.tensor([0, 2, 2, 1])

# id, op on a device or CPU tensor, shape, dtype: every CPU_KERNELS entry at least once.
CASES = [
    ("argmax-last", lambda x: x.argmax(-1), (32, 10), F32),
    ("argmin-first-padded", lambda x: x.argmin(0), (8, 1000), F16),
    ("argmax-all", lambda x: x.argmax(), (4, 6, 70), BF16),
    ("max-all", lambda x: x.max(), (16, 128), F32),
    ("min-all", lambda x: x.min(), (5, 70), F16),
    ("max-dim", lambda x: x.max(-1), (32, 10), F32),
    ("min-dim-keepdim", lambda x: x.min(0, keepdim=True), (16, 128), BF16),
    ("topk", lambda x: x.topk(3, -1), (8, 1000), F32),
    ("topk-smallest-first-dim", lambda x: x.topk(2, 0, largest=False, sorted=True), (5, 70), F16),
    ("sort", lambda x: x.sort(-1), (16, 128), F32),
    ("sort-stable-descending", lambda x: torch.sort(x, dim=0, descending=True, stable=True), (32, 10), BF16),
    ("var", lambda x: x.var(-1), (8, 1000), F32),
    ("var-no-correction-keepdim", lambda x: x.var(0, correction=0, keepdim=True), (32, 10), F32),
    ("std", lambda x: x.std(-1), (16, 128), BF16),
    ("vector-norm", lambda x: x.norm(dim=-1), (32, 10), F32),
    ("vector-norm-1-all", lambda x: torch.linalg.vector_norm(x, 1), (5, 70), F16),
    ("index_select", lambda x: x.index_select(1, INDEX.to(x.device)), (16, 128), F32),
    ("gather", lambda x: x.gather(1, INDEX.view(4, 1).expand(4, 3).contiguous().to(x.device)), (4, 70), F32),
    ("scatter-src", lambda x: x.scatter(1, INDEX.view(4, 1).to(x.device), x[:, :1] * 2), (4, 70), F16),
    ("scatter-value", lambda x: x.scatter(0, INDEX.view(1, 4).to(x.device), 0.5), (16, 128), F32),
    ("scatter_add", lambda x: x.scatter_add(1, INDEX.view(4, 1).to(x.device), x[:, :1]), (4, 70), F32),
    ("prod-dim", lambda x: x.prod(-1), (32, 10), F32),
    ("prod-all", lambda x: (x * 0.1 + 1).prod(), (5, 70), F32),
    ("nansum", lambda x: (x / (x > 0)).nansum(-1), (16, 128), F32),
    ("aminmax", lambda x: torch.aminmax(x, dim=0), (8, 1000), BF16),
    ("logcumsumexp", lambda x: x.logcumsumexp(-1), (32, 10), F32),
    ("cummax", lambda x: x.cummax(0), (16, 128), F16),
    ("cummin", lambda x: x.cummin(-1), (4, 6, 70), F32),
    ("cumprod", lambda x: (x * 0.1 + 1).cumprod(-1), (4, 6, 70), F32),
    ("tril", lambda x: x.tril(), (16, 128), F16),
    ("triu-diagonal-of-a-transpose", lambda x: x.t().triu(1), (5, 70), F32),
    ("flip", lambda x: x.flip(0, 1), (4, 70), BF16),
    ("roll", lambda x: x.roll(3, -1), (32, 10), F32),
    ("kthvalue", lambda x: x.kthvalue(2, -1), (8, 1000), F32),
    ("median-dim", lambda x: x.median(0), (16, 128), F32),
    ("median-all", lambda x: x.median(), (5, 70), F16),
    ("mode", lambda x: x.round().mode(-1), (32, 10), F32),
    ("avg_pool2d", lambda x: torch.nn.functional.avg_pool2d(x, 3, 1, 1, count_include_pad=False), (2, 4, 5, 33), F32),
    ("adaptive_avg_pool2d", lambda x: torch.nn.functional.adaptive_avg_pool2d(x, 4), (2, 3, 8, 8), BF16),
    ("adaptive_max_pool2d", lambda x: torch.nn.functional.adaptive_max_pool2d(x, 2), (2, 3, 8, 8), F32),
    ("upsample-nearest", lambda x: torch.nn.functional.interpolate(x, scale_factor=2), (1, 70, 6, 10), F32),
    ("upsample-bilinear", lambda x: torch.nn.functional.interpolate(x, size=(5, 7), mode="bilinear",
                                                                    align_corners=True), (2, 3, 8, 8), F32),
    # PyTorch's embedding is index_select viewed as (2, 2, 1000): the buffer holds the (4, 1000) result
    ("embedding", lambda x: torch.nn.functional.embedding(INDEX.view(2, 2).to(x.device), x), (8, 1000), F16),
]
BUFFER_SHAPES = {"embedding": (4, 1000)}  # results that are views of a buffer of another shape


def _results(r):
    return r if isinstance(r, tuple) else (r,)


@pytest.mark.parametrize("name, fn, shape, dtype", CASES, ids=[c[0] for c in CASES])
def test_cpu_kernels_on_views_match_the_cpu_and_replay(name, fn, shape, dtype, monkeypatch):
    elementwise.forget_recipes()
    entered = []
    original = on_views.on_views
    monkeypatch.setattr(on_views, "on_views", lambda *a, **k: entered.append(1) or original(*a, **k))
    torch_layouts.reset_stats()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    dx = x.to("spyre")
    expected = _results(fn(x))
    for _ in range(3):
        got = _results(fn(dx))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and torch.equal(g.cpu(), e)
            assert g.device_tensor_layout() == SpyreTensorLayout(BUFFER_SHAPES.get(name, tuple(e.shape)), e.dtype)
            assert padding_holds_pad_value(g)
    assert torch.equal(dx.cpu(), x)
    assert len(entered) == 1, "a replayed call entered Python"
    assert torch_layouts.stats()["fallbacks"] == {}


ERRORS = [
    ("dim-range", lambda d: torch.randn(3, 4).to(d).argmax(5)),
    ("topk-k", lambda d: torch.randn(3, 4).to(d).topk(9)),
    ("index-range", lambda d: torch.randn(3, 4).to(d).index_select(1, torch.tensor([7]).to(d))),
    ("index-dtype", lambda d: torch.randn(3, 4).to(d).index_select(1, torch.tensor([1.0]).to(d))),
    ("gather-range", lambda d: torch.randn(3, 4).to(d).gather(1, torch.tensor([[9]]).to(d))),
]


@pytest.mark.parametrize("_, fn", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors_are_the_cpus(_, fn):
    elementwise.forget_recipes()
    raises_like_the_cpu(fn)


def test_a_replayed_index_out_of_range_still_raises():
    """After a valid call of the geometry (replayed without Python), a bad index is the CPU
    kernel's error on the views, naming the range; nothing is written."""
    x = torch.randn(3, 4).to("spyre")
    x.index_select(1, torch.tensor([1]).to("spyre"))
    with pytest.raises((IndexError, RuntimeError), match="out of"):
        x.index_select(1, torch.tensor([7]).to("spyre"))


PROPERTY_OPS = [
    ("argmax", lambda x, d: x.argmax(d)),
    ("max", lambda x, d: x.max(d)),
    ("sort", lambda x, d: x.sort(dim=d, stable=True)),
    ("topk", lambda x, d: x.topk(1, d)),
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.sampled_from([F32, F16, BF16]),
       st.sampled_from(range(len(PROPERTY_OPS))), st.data())
def test_any_layout_gives_the_cpus_bits_and_replays_them(shape, dtype, which, data):
    """Inputs in any dim order: the CPU's bits (these ops do not round), the same again when
    replayed, in the same layouts."""
    _, fn = PROPERTY_OPS[which]
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    order = data.draw(st.permutations(range(len(shape))))
    elementwise.forget_recipes()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape) + which)).to(dtype)
    dx = x.to("spyre", device_layout=SpyreTensorLayout(tuple(shape), dtype, list(order)))
    expected = _results(fn(x, dim))
    for _ in range(3):
        got = _results(fn(dx, dim))
        for g, e in zip(got, expected):
            assert torch.equal(g.cpu(), e) and g.device_tensor_layout() == SpyreTensorLayout(tuple(e.shape), e.dtype)


# Backward ops of the pooling and upsampling above: id, the forward.
BACKWARD = [
    ("max_pool2d", lambda x: torch.nn.functional.max_pool2d(x, 2)),
    ("avg_pool2d", lambda x: torch.nn.functional.avg_pool2d(x, 3, 1, 1)),
    ("adaptive_avg_pool2d", lambda x: torch.nn.functional.adaptive_avg_pool2d(x, 3)),
    ("adaptive_max_pool2d", lambda x: torch.nn.functional.adaptive_max_pool2d(x, 2)),
    ("upsample-nearest", lambda x: torch.nn.functional.interpolate(x, scale_factor=2)),
    ("upsample-bilinear", lambda x: torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear")),
]


@pytest.mark.parametrize("_, fn", BACKWARD, ids=[c[0] for c in BACKWARD])
def test_pooling_and_upsampling_backward_run_on_the_device(_, fn):
    x = torch.randn(2, 3, 8, 10, generator=torch.Generator().manual_seed(2))
    dx, cx = x.to("spyre").requires_grad_(), x.clone().requires_grad_()
    torch_layouts.reset_stats()
    fn(dx).pow(2).sum().backward()
    fn(cx).pow(2).sum().backward()
    torch.testing.assert_close(dx.grad.cpu(), cx.grad)
    assert torch_layouts.stats()["fallbacks"] == {}
