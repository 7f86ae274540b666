"""``torch.nn.functional.rms_norm`` on the device: ``_fused_rms_norm`` and its backward on layer
norm's row kernels in their RMS mode, against the CPU's composite (float32 math, rounding apart),
with no CPU fallback, the output's padding the pad value, ``rstd`` float32 in a ``keepdim``
result, and later calls of a geometry replayed by the runtime's front (no Python)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import padding_holds_pad_value, raises_like_the_cpu
from torch_layouts import SpyreTensorLayout
from torch_layouts.ops import rms_norm

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
F = torch.nn.functional
TOL = {F32: 2e-5, F16: 2e-2, BF16: 5e-2}

# id, shape, dtype, dim order of the input's layout (None: default), normalised dims, weight, eps,
# and how the three calls' forward and backward enter Python: the row kernels on the first call,
# replayed by the front after it, or on each call (an input read from a copy in the rows' layout:
# a restickify); a float16 or bfloat16 backward, device ops in float32 each call.
FUSED, BACKWARD, COMPOSITE = "_fused_forward", "_fused_backward", "_composite_backward"
REPLAYED = ([[FUSED], [], []], [[BACKWARD], [], []])
EACH_CALL = ([[FUSED]] * 3, [[BACKWARD]] * 3)
LOW = ([[FUSED], [], []], [[COMPOSITE]] * 3)
CASES = [
    ("rows-of-sticks", (64, 256), F32, None, 1, True, 1e-5, REPLAYED),
    ("3d-no-weight-default-eps", (4, 32, 128), F32, None, 1, False, None, REPLAYED),
    ("padded-stick", (40, 150), F32, None, 1, True, 1e-6, REPLAYED),
    ("two-normalised-dims", (4, 8, 64), F32, None, 2, True, 1e-5, REPLAYED),
    ("rows-across-sticks", (96, 64), F32, [1, 0], 1, True, 1e-5, EACH_CALL),
    ("half", (64, 128), F16, None, 1, True, 1e-5, LOW),
    ("bfloat16-no-weight", (32, 128), BF16, None, 1, False, 1e-5, LOW),
]


def randn(shape: tuple[int, ...], seed: int, dtype: torch.dtype = F32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    torch.testing.assert_close(got.double(), want.double(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("_, shape, dtype, order, ndims, weighted, eps, entering", CASES, ids=[c[0] for c in CASES])
def test_rms_norm_forward_and_backward_match_the_cpu(_, shape, dtype, order, ndims, weighted, eps, entering,
                                                     monkeypatch):
    """Three calls with fresh values: the CPU's output and gradients, no CPU fallback, padding the
    pad value; later calls replayed by the front where the input is read in place."""
    forward, backward = [], []
    for name, log in ((FUSED, forward), (BACKWARD, backward), (COMPOSITE, backward)):
        original = getattr(rms_norm, name)
        monkeypatch.setattr(rms_norm, name, lambda *a, f=original, n=name, log=log: log.append(n) or f(*a))
    normalized = shape[-ndims:]
    layout = None if order is None else SpyreTensorLayout(shape, dtype, order)
    torch_layouts.reset_stats()
    calls: tuple[list, list] = ([], [])
    for seed in range(3):
        x = randn(shape, seed, dtype).requires_grad_()
        w = randn(normalized, seed + 10, dtype).requires_grad_() if weighted else None
        dx = x.detach().to("spyre", device_layout=layout).requires_grad_()
        dw = w.detach().to("spyre").requires_grad_() if weighted else None
        before = len(forward)
        out = F.rms_norm(dx, normalized, dw, eps)
        calls[0].append(forward[before:])
        want = F.rms_norm(x, normalized, w, eps)
        assert out.dtype == dtype and out.shape == want.shape and padding_holds_pad_value(out)
        close(out.cpu(), want.detach(), dtype)
        g = randn(shape, seed + 20, dtype)
        before = len(backward)
        out.backward(g.to("spyre"))
        calls[1].append(backward[before:])
        want.backward(g)
        close(dx.grad.cpu(), x.grad, dtype)
        if weighted:
            assert dw.grad.dtype == dtype
            close(dw.grad.cpu(), w.grad, dtype if dtype != F32 else F16)  # float32 column sums over the rows
    assert torch_layouts.stats()["fallbacks"] == {}
    assert calls == entering, calls


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rstd_is_float32_kept_like_a_keepdim_reduction(eps):
    """``_fused_rms_norm``'s second result: float32, the normalised dims kept as size 1, the
    CPU's ``rsqrt(mean(x ** 2) + eps)`` (eps None: float32's machine epsilon)."""
    x = randn((6, 10, 128), 3, F16)
    out, rstd = torch.ops.aten._fused_rms_norm(x.to("spyre"), [128], None, eps)
    assert rstd.dtype == F32 and rstd.shape == (6, 10, 1) and out.dtype == F16
    want = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + (torch.finfo(F32).eps if eps is None else eps))
    close(rstd.cpu(), want, F32)
    assert padding_holds_pad_value(rstd)


def test_a_wrong_normalized_shape_raises_the_cpus_error():
    raises_like_the_cpu(lambda d: F.rms_norm(torch.ones(4, 64).to(d), (32,)))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=3), st.data())
def test_rms_norm_of_any_layout_matches_the_cpu(shape, data):
    """Any Spyre layout, the last one or two dims normalised, with or without a weight: the
    CPU's output and gradients."""
    order = list(data.draw(st.permutations(range(len(shape)))))
    layout = SpyreTensorLayout(tuple(shape), F32, order)
    ndims = data.draw(st.integers(1, len(shape)))
    normalized = tuple(shape[-ndims:])
    weighted = data.draw(st.booleans())
    x = randn(tuple(shape), 1).requires_grad_()
    w = randn(normalized, 2).requires_grad_() if weighted else None
    dx = x.detach().to("spyre", device_layout=layout).requires_grad_()
    dw = w.detach().to("spyre").requires_grad_() if weighted else None
    out, want = F.rms_norm(dx, normalized, dw, 1e-5), F.rms_norm(x, normalized, w, 1e-5)
    close(out.cpu(), want.detach(), F32)
    assert padding_holds_pad_value(out)
    g = randn(tuple(shape), 3)
    out.backward(g.to("spyre"))
    want.backward(g)
    close(dx.grad.cpu(), x.grad, F32)
    if weighted:
        close(dw.grad.cpu(), w.grad, F16)
