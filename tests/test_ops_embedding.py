"""``embedding_dense_backward`` on the device (``ops/embedding.py``, ``csrc/embedding_rows.cpp``):
the weight gradient is the CPU's bit for bit, computed where the rows lie, with no CPU fallback
(but for ``scale_grad_by_freq`` and rows in padded sticks, which take it as before)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import torch_layouts
from ops_support import padding_holds_pad_value
from torch_layouts import _C

backward = torch.ops.aten.embedding_dense_backward


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().view({4: torch.int32, 2: torch.int16}[t.element_size()])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.sampled_from([32, 64, 96, 256, 10, 40, 70]), st.sampled_from([(17,), (3, 11), (2, 3, 5)]),
       st.integers(1, 400), st.booleans(), st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
       st.integers(0, 2**31))
def test_weight_gradient_is_the_cpus(rows, width, tokens, spread, padded, dtype, seed):
    """Random token gradients into ``rows`` weight rows of ``width`` (one stick, whole sticks, or
    several with the last padded: the fallback), indices drawn from ``spread`` values (many
    repeats: each row's additions in index order, whose rounding the order fixes; some past the
    rows, which both ignore), with or without a padding index: the CPU's bits; no fallback but
    for padded rows of several sticks and half-precision gradients; the result's padding holds
    its pad value."""
    gen = torch.Generator().manual_seed(seed)
    grad = (torch.randn(*tokens, width, generator=gen) * torch.rand(*tokens, 1, generator=gen) * 1e3).to(dtype)
    index = torch.randint(0, spread, tokens, generator=gen)
    padding_idx = int(index.flatten()[0]) if padded else -1
    torch_layouts.reset_stats()
    got = backward(grad.to("spyre"), index.to("spyre"), rows, padding_idx, False)
    assert torch.equal(_bits(got), _bits(backward(grad, index, rows, padding_idx, False)))
    assert padding_holds_pad_value(got)
    assert (torch_layouts.stats()["fallbacks"] == {}) == (dtype == torch.float32 and (width <= 32 or width % 32 == 0))


def test_an_embedding_layer_trains_with_the_cpus_gradients():
    """``nn.Embedding`` (with a padding index) in a small step: its weight gradient on the device
    is the CPU's, on the first step and on the next (each adds into the last), with no fallback."""
    torch.manual_seed(0)
    layer = nn.Embedding(500, 128, padding_idx=3)
    device_layer = nn.Embedding(500, 128, padding_idx=3).to("spyre")
    device_layer.load_state_dict(layer.state_dict())
    torch_layouts.reset_stats()
    for step in range(2):
        index = torch.randint(0, 500, (4, 64), generator=torch.Generator().manual_seed(step))
        index[0, :8] = 3
        weights = torch.randn(4, 64, 128, generator=torch.Generator().manual_seed(step + 10))
        (layer(index) * weights).sum().backward()
        (device_layer(index.to("spyre")) * weights.to("spyre")).sum().backward()
        assert torch.equal(_bits(device_layer.weight.grad), _bits(layer.weight.grad)), step
    assert torch_layouts.stats()["fallbacks"] == {}


def test_scaled_by_frequency_takes_the_fallback():
    grad, index = torch.randn(6, 64), torch.tensor([1, 1, 2, 5, 1, 0])
    torch_layouts.reset_stats()
    got = backward(grad.to("spyre"), index.to("spyre"), 8, -1, True)
    assert torch.equal(_bits(got), _bits(backward(grad, index, 8, -1, True)))
    assert torch_layouts.stats()["fallbacks"] == {"aten::embedding_dense_backward": 1}


@pytest.mark.parametrize("change, message", [
    (lambda g, i, w: (g.double(), i, w), "grad must be a float32 view"),
    (lambda g, i, w: (g[..., :16], i, w), "grad must be a float32 view"),
    (lambda g, i, w: (g, i.int(), w), "indices must be a contiguous int64 CPU tensor"),
    (lambda g, i, w: (g, i[:2], w), "indices must be a contiguous int64 CPU tensor"),
    (lambda g, i, w: (g, i, w.t()), "grad_weight must be a float32 view"),
])
def test_the_kernel_names_a_bad_operand(change, message):
    grad, index, weight = torch.randn(3, 32), torch.tensor([0, 1, 1]), torch.zeros(4, 32)
    grad, index, given = change(grad, index, weight)
    with pytest.raises(ValueError, match=message):
        _C._embedding_backward_rows(grad, index, -1, given)
    assert torch.equal(weight, torch.zeros(4, 32))
