"""Device kernels a training step needs besides the forward ops: dropout (drawing from the spyre
generator), layer norm backward, ``_safe_softmax``, the predicates and ``all``/``any`` it uses,
MSE loss, Adam's pointwise ops and the backward of views; each against the CPU op, forward
and backward, with no CPU fallback. Then a TransformerEncoder training step on the device."""

from __future__ import annotations

import copy
import functools
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import torch_layouts
from ops_support import matches_cpu, padding_holds_pad_value
from torch_layouts import SpyreTensorLayout

F16, F32, BF16 = torch.float16, torch.float32, torch.bfloat16
A = torch.ops.aten
close = functools.partial(matches_cpu, f16=(2e-2, 1e-2), other=(1e-5, 1e-5))


def randn(*shape: int, dtype: torch.dtype = F32, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def no_fallback() -> None:
    stats = torch_layouts.stats()
    assert stats["fallbacks"] == {}, stats["fallbacks"]


@pytest.fixture(autouse=True)
def counters():
    torch_layouts.reset_stats()


# -- dropout ---------------------------------------------------------------------------
DROPOUT = [((8, 128, 256), 0.1, False), ((5, 70), 0.5, False), ((64, 96), 0.3, True), ((3, 40, 64), 0.0, False)]


@pytest.mark.parametrize("shape, p, transposed", DROPOUT, ids=["model", "padded", "transposed", "p0"])
def test_dropout_draws_what_the_generator_lends(shape, p, transposed):
    """The keep mask is the spyre generator's ``bernoulli_(1 - p)`` over the input's elements (the
    draw the CPU fallback made), the output ``x * mask / (1 - p)``, and the offset moves alike."""
    x = randn(*shape)
    d = x.to("spyre")
    if transposed:
        x, d = x.t(), d.t()
    torch.spyre.manual_seed(7)
    out, mask = torch.native_dropout(d, p, True)
    offset = torch.spyre.default_generators[0].get_offset()
    no_fallback()
    torch.spyre.manual_seed(7)
    keep = torch.empty_like(d).bernoulli_(1 - p).cpu()
    assert torch.spyre.default_generators[0].get_offset() == offset
    assert mask.dtype == torch.bool and torch.equal(mask.cpu(), keep.bool())
    assert torch.equal(out.cpu(), x * keep * (1 / (1 - p)))
    assert padding_holds_pad_value(out)
    grad = randn(*shape, seed=1)
    dgrad = grad.to("spyre")  # in the input's arrangement, as autograd's gradient is
    grad, dgrad = (grad.t(), dgrad.t()) if transposed else (grad, dgrad)
    torch_layouts.reset_stats()
    back = A.native_dropout_backward(dgrad, mask, 1 / (1 - p))
    assert torch.equal(back.cpu(), A.native_dropout_backward(grad, keep.bool(), 1 / (1 - p)))
    assert torch_layouts.stats()["restickify_count"] == 0
    no_fallback()


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 70), min_size=1, max_size=3), st.sampled_from([F16, F32]), st.data(),
       st.sampled_from([0.1, 0.5, 0.9]))
def test_dropout_property(shape, dtype, data, p):
    """Any Spyre layout (dim_order, sparse sticks, padding, pad value): the mask is the spyre
    generator's draw, the output ``x * mask / (1 - p)`` and the backward ``grad * mask / (1 - p)``
    (the gradient in the input's layout or the default one), bit for bit as on the CPU."""
    order = list(data.draw(st.permutations(range(len(shape)))))
    if data.draw(st.booleans()):
        order.append(-1)
    layout = SpyreTensorLayout(tuple(shape), dtype, order, pad_value=data.draw(st.sampled_from([0, -3.0])))
    x = randn(*shape, dtype=dtype, seed=data.draw(st.integers(0, 2**16)))
    d = x.to("spyre", device_layout=layout)
    torch.spyre.manual_seed(11)
    out, mask = torch.native_dropout(d, p, True)
    torch.spyre.manual_seed(11)
    keep = torch.empty_like(d).bernoulli_(1 - p).cpu()
    assert torch.equal(mask.cpu(), keep.bool())
    assert torch.equal(bits(out.cpu()), bits(x * keep * (1 / (1 - p))))
    assert padding_holds_pad_value(out)
    grad = randn(*shape, dtype=dtype, seed=data.draw(st.integers(0, 2**16)))
    dgrad = grad.to("spyre", device_layout=layout) if data.draw(st.booleans()) else grad.to("spyre")
    back = A.native_dropout_backward(dgrad, mask, 1 / (1 - p))
    assert torch.equal(bits(back.cpu()), bits(A.native_dropout_backward(grad, keep.bool(), 1 / (1 - p))))
    assert padding_holds_pad_value(back)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a float tensor (NaN payloads and the sign of zero count)."""
    return t.contiguous().view({torch.float16: torch.int16, torch.bfloat16: torch.int16}.get(t.dtype, torch.int32))


SPECIAL = [float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 3e38, -1e-45, 1.0]


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("p", [0.5, 1.0])
def test_dropout_special_values_bit_for_bit(dtype, p):
    """Infinities, NaN, signed zeros and the extremes, kept and dropped (NaN times a dropped 0,
    -0 kept negative), forward and backward: the CPU's ``x * mask * scale`` bit for bit."""
    x = torch.tensor(SPECIAL * 40, dtype=dtype).view(8, 40)
    d = x.to("spyre")
    torch.spyre.manual_seed(5)
    out, mask = torch.native_dropout(d, p, True)
    keep = mask.cpu()
    scale = 0.0 if p == 1.0 else 1 / (1 - p)
    assert torch.equal(bits(out.cpu()), bits(A.native_dropout_backward(x, keep, scale)))
    back = A.native_dropout_backward(d.t().contiguous().t(), mask, scale)  # the gradient in another layout
    assert torch.equal(bits(back.cpu()), bits(A.native_dropout_backward(x, keep, scale)))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=3), st.data(), st.sampled_from([torch.float32, torch.bool]))
def test_scaled_product_matches_aten(shape, data, b_dtype):
    """The fused ``(a * b) * scale`` on strided and broadcast views: ATen's two ops bit for bit."""
    from torch_layouts import _C
    a = torch.randn(*shape, 2)[..., 0]  # strided
    b = torch.rand(shape) > 0.4
    b = b.float() if b_dtype == torch.float32 else b
    a.view(-1)[: len(SPECIAL)] = torch.tensor(SPECIAL[: a.numel()])
    if data.draw(st.booleans()) and len(shape) > 1:
        b = b[:1].expand(shape)  # broadcast: stride 0
    out = torch.full(shape, 7.0)
    scale = data.draw(st.sampled_from([0.0, 1.0, 1 / 0.9, 3.5]))
    _C._scaled_product(out, a, b, scale)
    assert torch.equal(bits(out), bits(torch.mul(a, b).mul_(scale)))


def test_dropout_outside_training_and_its_module():
    x = randn(6, 64).to("spyre")
    out, mask = torch.native_dropout(x, 0.4, False)
    assert torch.equal(out.cpu(), x.cpu()) and bool(mask.cpu().all())
    torch.spyre.manual_seed(3)
    a = nn.Dropout(0.25)(x).cpu()
    torch.spyre.manual_seed(3)
    assert torch.equal(nn.Dropout(0.25)(x).cpu(), a)
    no_fallback()


def test_dropout_refuses_integers_and_bad_probabilities():
    with pytest.raises(RuntimeError, match="floating point"):
        torch.native_dropout(torch.ones(4, 4, dtype=torch.int32, device="spyre"), 0.5, True)
    with pytest.raises(RuntimeError):
        torch.native_dropout(torch.ones(4, 4, device="spyre"), 1.5, True)


# -- layer norm backward ---------------------------------------------------------------
LAYER_NORM = [
    ((8, 128, 256), (256,), F32, True), ((8, 16, 64), (64,), F16, True), ((4, 96), (96,), F32, False),
    ((2, 5, 70), (70,), F32, True), ((3, 6, 40), (6, 40), F16, True), ((3, 6, 64), (6, 64), F32, True),
]


@pytest.mark.parametrize("shape, normalized, dtype, affine", LAYER_NORM,
                         ids=["model", "half", "no-affine", "padded", "2-dims-padded", "2-dims"])
def test_layer_norm_forward_and_backward_match_cpu(shape, normalized, dtype, affine):
    x, g = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=1)
    w, b = randn(*normalized, dtype=dtype, seed=2), randn(*normalized, dtype=dtype, seed=3)
    results = []
    for device in ("cpu", "spyre"):
        leaves = [t.detach().to(device).requires_grad_() for t in (x, w, b)]
        out = nn.functional.layer_norm(leaves[0], normalized, *(leaves[1:] if affine else (None, None)))
        out.backward(g.to(device))
        results.append([out.detach()] + [t.grad for t in (leaves if affine else leaves[:1])])
    for k, (got, want) in enumerate(zip(results[1], results[0])):
        # weight and bias gradients sum over rows in another order: float16 sums round differently
        tol = ((2e-2, 2e-2) if k < 2 else (1e-1, 5e-2)) if dtype == F16 else (1e-4, 1e-4)
        matches_cpu(got, want, f16=tol, other=tol)
    no_fallback()


def test_layer_norm_backward_output_mask():
    x, g, w, b = randn(4, 64), randn(4, 64, seed=1), randn(64, seed=2), randn(64, seed=3)
    _, mean, rstd = torch.native_layer_norm(x, (64,), w, b, 1e-5)
    d = [t.to("spyre") for t in (g, x, mean, rstd, w, b)]
    for mask in ([True, False, False], [False, True, True], [True, True, False]):
        got = A.native_layer_norm_backward(d[0], d[1], (64,), d[2], d[3], d[4], d[5], mask)
        want = A.native_layer_norm_backward(g, x, (64,), mean, rstd, w, b, mask)
        for a, e in zip(got, want):
            assert (a is None) == (e is None)
            if e is not None:
                close(a, e)
    no_fallback()


# -- softmax family ---------------------------------------------------------------------
SOFTMAX = [((2, 4, 128, 128), -1, F32), ((4, 64, 128), 1, F32), ((3, 20, 70), -1, F32), ((64, 128), 0, F16)]


@pytest.mark.parametrize("shape, dim, dtype", SOFTMAX, ids=["attention", "middle-dim", "padded", "half-dim0"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "safe_softmax"])
def test_softmax_family_forward_and_backward(shape, dim, dtype, op):
    fn = {"softmax": torch.softmax, "log_softmax": torch.log_softmax, "safe_softmax": torch._safe_softmax}[op]
    x, g = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=1)
    if op == "safe_softmax":
        x.select(dim, 0).fill_(float("-inf"))  # rows of only -inf: 0s, not NaNs
    results = []
    for device in ("cpu", "spyre"):
        leaf = x.detach().to(device).requires_grad_()
        out = fn(leaf, dim)
        out.backward(g.to(device))
        results.append((out.detach(), leaf.grad))
    for got, want in zip(results[1], results[0]):
        close(got, want)
    assert torch_layouts.stats()["restickify_count"] == 0
    no_fallback()


# -- predicates, all/any ------------------------------------------------------------------
def special(*shape: int) -> torch.Tensor:
    x = randn(*shape)
    x[0, 1], x[1, 2], x[2, 3], x[3] = float("-inf"), float("inf"), float("nan"), float("-inf")
    return x


@pytest.mark.parametrize("op", ["isneginf", "isposinf", "isinf", "isnan"])
@pytest.mark.parametrize("shape", [(6, 64), (6, 70)], ids=["whole-sticks", "padded"])
def test_predicates(op, shape):
    x = special(*shape)
    fn = getattr(torch, op)
    got = fn(x.to("spyre"))
    assert got.dtype == torch.bool and torch.equal(got.cpu(), fn(x))
    out = torch.empty(shape, dtype=torch.bool, device="spyre")
    getattr(A, op).out(x.to("spyre"), out=out)
    assert torch.equal(out.cpu(), fn(x))
    no_fallback()


REDUCE = [(-1, False), (-1, True), (0, False), ((0, 1), False), (None, False)]


@pytest.mark.parametrize("kind", ["all", "any"])
@pytest.mark.parametrize("dim, keepdim", REDUCE, ids=["stick", "stick-keepdim", "rows", "both", "all"])
@pytest.mark.parametrize("source", ["bool", "float"])
def test_all_any(kind, dim, keepdim, source):
    x = torch.isneginf(special(6, 70)) if source == "bool" else special(6, 70).nan_to_num(0.0).clamp(-1, 0).ceil()
    fn = getattr(torch, kind)
    want = fn(x) if dim is None else fn(x, dim, keepdim=keepdim)
    got = fn(x.to("spyre")) if dim is None else fn(x.to("spyre"), dim, keepdim=keepdim)
    assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got.cpu(), want)
    no_fallback()


# -- Adam's pointwise ops, MSE loss -----------------------------------------------------------
def _lerp_tensor(a, b, c):
    return torch.lerp(a, b, c.sigmoid())


POINTWISE = [
    ("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=-0.3)),
    ("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c.exp(), value=0.7)),
    ("lerp-scalar", lambda a, b, c: torch.lerp(a, b, 0.1)),
    ("lerp-tensor", _lerp_tensor),
]


@pytest.mark.parametrize("_, fn", POINTWISE, ids=[p[0] for p in POINTWISE])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_optimizer_pointwise_ops(_, fn, dtype):
    a, b, c = (randn(20, 70, dtype=dtype, seed=s) for s in range(3))
    close(fn(*(t.to("spyre") for t in (a, b, c))), fn(a, b, c))
    leaves = [[t.clone().requires_grad_() for t in (a, b, c)], [t.to("spyre").requires_grad_() for t in (a, b, c)]]
    for group in leaves:
        fn(*group).sum().backward()
    for cpu, dev in zip(*leaves):
        assert (dev.grad is None) == (cpu.grad is None)
        if cpu.grad is not None:
            close(dev.grad, cpu.grad)
    no_fallback()


def test_adam_step_runs_on_device_kernels():
    params = [randn(64, 32, seed=s) for s in range(3)]
    grads = [randn(64, 32, seed=10 + s) for s in range(3)]
    results = []
    for device in ("cpu", "spyre"):
        ps = [nn.Parameter(p.clone().to(device)) for p in params]
        opt = torch.optim.Adam(ps, lr=0.1, foreach=False)
        for _ in range(2):
            for p, g in zip(ps, grads):
                p.grad = g.to(device)
            opt.step()
        results.append([p.detach() for p in ps])
    for got, want in zip(results[1], results[0]):
        close(got, want)
    no_fallback()


# mse_loss on the device: (input shape, layout dim order or None, reduction, dtype). The CPU
# kernels run on the buffers' views: operands of one layout in one refinement of their shape
# (sticks as a dim of their own), padded ones (70 float32 columns) through dense copies; the
# unreduced loss and the gradient are the CPU's bits, in the input's layout; after the first call
# of a geometry the runtime's front replays forward and backward without Python (2 calls).
MSE_CASES = [
    ((8, 128, 64), None, "mean", F32),
    ((8, 128, 64), None, "none", F32),
    ((5, 70), None, "mean", F32),
    ((5, 70), None, "none", F32),
    ((32, 10), [1, 0], "sum", F32),
    ((16, 128), None, "mean", F16),
    ((4, 6, 6), None, "none", BF16),
]


@pytest.mark.parametrize("shape, order, reduction, dtype", MSE_CASES)
def test_mse_loss_matches_the_cpu_and_is_replayed(shape, order, reduction, dtype, monkeypatch):
    from torch_layouts.ops import losses
    entered = []
    original = losses.on_views
    monkeypatch.setattr(losses, "on_views", lambda *a, **k: entered.append(1) or original(*a, **k))
    layout = None if order is None else SpyreTensorLayout(shape, dtype, order)
    for seed in range(3):
        x, y = randn(*shape, seed=seed).to(dtype), randn(*shape, seed=seed + 7).to(dtype)
        results = []
        for device in ("cpu", "spyre"):
            leaf = (x if device == "cpu" else x.to(device, device_layout=layout)).detach().requires_grad_()
            loss = nn.functional.mse_loss(leaf, y.to(device), reduction=reduction)
            loss.backward(randn(*loss.shape, seed=seed + 5).to(dtype).to(device))
            results.append((loss.detach(), leaf.grad))
        (loss, grad), (want_loss, want_grad) = results[1], results[0]
        if reduction == "none":
            assert torch.equal(loss.cpu(), want_loss) and loss.device_tensor_layout() == leaf.device_tensor_layout()
        else:  # summed in the buffer's order
            torch.testing.assert_close(loss.cpu(), want_loss, rtol=1e-2 if dtype != F32 else 1e-5, atol=0)
        assert torch.equal(grad.cpu(), want_grad) and grad.device_tensor_layout() == leaf.device_tensor_layout()
        assert padding_holds_pad_value(grad)
    no_fallback()
    assert len(entered) == 2


def test_mse_loss_rejects_unknown_reduction():
    x = randn(4, 4).to("spyre")
    with pytest.raises(ValueError, match="7 is not a valid value for reduction"):
        A.mse_loss(x, x, 7)


# nll_loss on the device: (input shape, input layout dim order or None, reduction, weighted,
# ignore_index hit, Python calls over three calls). Loss, total weight and gradient are the CPU's
# bits; after the first call of a geometry the runtime's front replays forward and backward without
# Python (2 calls), also where the classes are split across tiles (70 classes in sticks of 32: no
# strided view of the buffer holds them): weighted or unreduced, the forward reads a dense copy and
# the backward writes its gradient into one, then copied into the gradient's layout; unweighted and
# reduced, the runtime's row kernels read and write the rows' views; the front replays both.
NLL_CASES = [
    ((32, 10), None, "mean", False, False, 2),
    ((32, 10), [1, 0], "mean", True, True, 2),
    ((32, 10), None, "sum", True, False, 2),
    ((32, 10), None, "none", False, True, 2),
    ((5, 70), None, "mean", True, True, 2),
    ((5, 70), None, "none", False, False, 2),
    ((8, 1000), None, "mean", False, False, 2),
    ((8, 1000), None, "sum", False, True, 2),
    ((4, 30522), None, "mean", False, True, 2),
    ((6, 64), None, "none", False, True, 2),
    ((10,), None, "mean", False, False, 2),
    ((10,), None, "none", True, False, 2),
]


@pytest.mark.parametrize("shape, order, reduction, weighted, ignored, calls", NLL_CASES)
def test_nll_loss_matches_the_cpu_bit_for_bit_and_is_replayed(shape, order, reduction, weighted, ignored, calls,
                                                                monkeypatch):
    from torch_layouts.ops import losses
    entered = []
    for name in ("on_views", "_on_rows"):
        original = getattr(losses, name)
        monkeypatch.setattr(losses, name, lambda *a, original=original, **k: entered.append(1) or original(*a, **k))
    classes = shape[-1]
    for seed in range(3):
        x = randn(*shape, seed=seed).log_softmax(-1)
        target = torch.randint(0, classes, shape[:-1], generator=torch.Generator().manual_seed(seed))
        if ignored:
            target.view(-1)[0] = 3
        weight = torch.rand(classes, generator=torch.Generator().manual_seed(seed)) if weighted else None
        layout = None if order is None else SpyreTensorLayout(shape, F32, order)
        results = []
        for device in ("cpu", "spyre"):
            leaf = (x if device == "cpu" else x.to(device, device_layout=layout)).detach().requires_grad_()
            loss = nn.functional.nll_loss(leaf, target.to(device), None if weight is None else weight.to(device),
                                          ignore_index=3 if ignored else -100, reduction=reduction)
            grad = randn(*loss.shape, seed=seed + 5)
            loss.backward(grad.to(device))
            results.append((loss.detach().cpu(), leaf.grad.cpu()))
        assert all(torch.equal(got, want) for got, want in zip(*results)), results
        assert padding_holds_pad_value(leaf.grad)
    no_fallback()
    assert len(entered) == calls


@pytest.mark.parametrize("rows", [1, 15, 16, 17, 300, 4097])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_replayed_nll_loss_sums_rows_as_the_cpu(rows, reduction):
    """The front's replays of nll_loss and its backward (``csrc/nll_loss_rows.cpp``) over batches
    that fill ATen's cascade of partial sums to several levels, some rows ignored: the CPU's loss
    and gradient bit for bit on every call; a target out of bounds in a replayed call raises the
    CPU's IndexError."""
    gen = torch.Generator().manual_seed(rows)
    for call in range(3):
        x = torch.randn(rows, 7, generator=gen).log_softmax(-1) * 100
        target = torch.randint(0, 7, (rows,), generator=gen)
        target[::5] = -100
        scale = torch.randn((), generator=gen)
        results = []
        for device in ("cpu", "spyre"):
            leaf = x.detach().to(device).requires_grad_()
            loss = nn.functional.nll_loss(leaf, target.to(device), reduction=reduction)
            loss.backward(scale.to(device))
            results.append((loss.detach().cpu().view(torch.int32), leaf.grad.cpu().view(torch.int32)))
        assert all(torch.equal(got, want) for got, want in zip(*results)), (call, results)
    target[-1] = 7
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        nn.functional.nll_loss(x.to("spyre"), target.to("spyre"), reduction=reduction)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 300), st.integers(1, 40), st.sampled_from(["mean", "sum"]), st.floats(0, 1),
       st.sampled_from([None, [1, 0]]), st.integers(0, 2**31))
def test_replayed_nll_loss_of_any_batch_and_layout_gives_the_cpus_bits(rows, classes, reduction, ignored, order, seed):
    """``nll_loss`` and its backward over any batch and class count, in either Spyre dim order,
    any share of the rows ignored: the loss and the gradient are the CPU's bits on the first call
    and on the front's replays, the gradient's padding its pad value."""
    gen = torch.Generator().manual_seed(seed)
    layout = None if order is None else SpyreTensorLayout((rows, classes), F32, order)
    for _ in range(3):
        x = torch.randn(rows, classes, generator=gen).log_softmax(-1) * 30
        target = torch.randint(0, classes, (rows,), generator=gen)
        target[torch.rand(rows, generator=gen) < ignored] = -100
        scale = torch.randn((), generator=gen)
        results = []
        for device in ("cpu", "spyre"):
            leaf = (x if device == "cpu" else x.to(device, device_layout=layout)).detach().requires_grad_()
            loss = nn.functional.nll_loss(leaf, target.to(device), reduction=reduction)
            loss.backward(scale.to(device))
            results.append((loss.detach().cpu().view(torch.int32), leaf.grad.cpu().view(torch.int32)))
        assert all(torch.equal(got, want) for got, want in zip(*results))
        assert padding_holds_pad_value(leaf.grad)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 70), st.integers(33, 300), st.sampled_from(["mean", "sum"]), st.floats(0, 1),
       st.integers(0, 2**31))
def test_nll_loss_of_classes_in_sticks_runs_on_the_rows_views(rows, classes, reduction, ignored, seed):
    """Float32 classes in Spyre's sticks (more than one stick a row: no 2-D view of the buffer),
    padded or not: ``nll_loss`` and its backward run the runtime's row kernels on the rows' views,
    on the first call of a geometry (``_on_rows``, once each, unless an earlier example planned it)
    and on the front's replays after (no Python), with no copy of the classes (no relayout, no
    bytes moved between buffers); loss and gradient are the CPU's bits, the gradient's padding
    its pad value."""
    from torch_layouts.ops import losses
    entered = []
    gen = torch.Generator().manual_seed(seed)
    with mock.patch.object(losses, "_on_rows", lambda *a, original=losses._on_rows: entered.append(1) or original(*a)):
        _nll_loss_on_rows_matches_the_cpu(rows, classes, reduction, ignored, gen)
        planned = len(entered)
        assert planned <= 2
        for _ in range(2):
            _nll_loss_on_rows_matches_the_cpu(rows, classes, reduction, ignored, gen)
        assert len(entered) == planned, entered


def _nll_loss_on_rows_matches_the_cpu(rows: int, classes: int, reduction: str, ignored: float,
                                      gen: torch.Generator) -> None:
    """One call of ``nll_loss`` and its backward on random log-probabilities (a share ``ignored``
    of the rows ignored), on the device and on the CPU: the same bits, no copy of the classes."""
    x = torch.randn(rows, classes, generator=gen).log_softmax(-1) * 30
    target = torch.randint(0, classes, (rows,), generator=gen)
    target[torch.rand(rows, generator=gen) < ignored] = -100
    scale = torch.randn((), generator=gen)
    leaf = x.to("spyre").requires_grad_()
    device_target, device_scale = target.to("spyre"), scale.to("spyre")
    torch_layouts.reset_stats()
    loss = nn.functional.nll_loss(leaf, device_target, reduction=reduction)
    loss.backward(device_scale)
    stats = torch_layouts.stats()
    assert stats["relayouts"] == 0 and stats["d2d_bytes"] == 0, stats
    cpu_leaf = x.clone().requires_grad_()
    cpu_loss = nn.functional.nll_loss(cpu_leaf, target, reduction=reduction)
    cpu_loss.backward(scale)
    assert torch.equal(loss.detach().cpu().view(torch.int32), cpu_loss.detach().view(torch.int32))
    assert torch.equal(leaf.grad.cpu().view(torch.int32), cpu_leaf.grad.view(torch.int32))
    assert padding_holds_pad_value(leaf.grad)


@pytest.mark.parametrize("view", [lambda z: z[:, 3:1003], lambda z: z[2:18], lambda z: z[::2], lambda z: z[:, 40:]],
                         ids=["columns across sticks", "rows", "every other row", "columns from a stick's middle"])
def test_nll_loss_of_views_of_classes_in_sticks_is_the_cpus_on_every_call(view):
    """Views of classes in sticks: where the rows' view is of a restickified copy (columns that
    start within a stick), the first call computes on the copy and no replay is kept for the
    view's geometry (one would read the next call's own buffer as the copy's); every call's loss
    and gradient are the CPU's bits."""
    z = randn(40, 1024).log_softmax(1)
    dz = z.to("spyre")
    target = torch.randint(0, view(z).shape[1], (view(z).shape[0],), generator=torch.Generator().manual_seed(1))
    for call in range(3):
        results = []
        for source, device in ((z, "cpu"), (dz, "spyre")):
            leaf = view(source).detach().requires_grad_()
            loss = nn.functional.nll_loss(leaf, target.to(device))
            loss.backward()
            results.append((loss.detach().cpu().view(torch.int32), leaf.grad.cpu().view(torch.int32)))
        assert all(torch.equal(got, want) for got, want in zip(*results)), call


def test_nll_loss_of_classes_in_sticks_errors_are_the_cpus():
    """A target out of bounds of 1000 classes in padded sticks (1010 lies in the padding) raises
    the CPU's IndexError on the first call and on a replayed one, forward and backward; calls
    with good targets still run after."""
    x = randn(8, 1000).log_softmax(-1)
    good, bad = torch.randint(0, 1000, (8,)), torch.randint(0, 1000, (8,))
    bad[5] = 1010
    dx = x.to("spyre")
    loss, total = torch.ops.aten.nll_loss_forward(dx, good.to("spyre"), None, 1, -100)
    for _ in range(2):
        with pytest.raises(IndexError, match="Target 1010 is out of bounds"):
            torch.ops.aten.nll_loss_forward(dx, bad.to("spyre"), None, 1, -100)
        with pytest.raises(IndexError, match="Target 1010 is out of bounds"):
            torch.ops.aten.nll_loss_backward(torch.ones((), device="spyre"), dx, bad.to("spyre"), None, 1, -100, total)
        torch.ops.aten.nll_loss_backward(torch.ones((), device="spyre"), dx, good.to("spyre"), None, 1, -100, total)


def test_nll_loss_errors_are_the_cpus():
    x, target = randn(4, 3).to("spyre"), torch.tensor([0, 5, 1, 1]).to("spyre")
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):
        nn.functional.nll_loss(x, target)
    with pytest.raises(RuntimeError, match="expected target dtype to be Long or Byte"):
        nn.functional.nll_loss(x, target.int())
    with pytest.raises(RuntimeError, match="same device.*cpu and spyre:0"):
        nn.functional.nll_loss(x, torch.tensor([0, 2, 1, 1]))


# -- backward of views --------------------------------------------------------------------------
SELECT = [((3, 128, 8, 64), 0, 1), ((128, 3, 8, 64), 1, 2), ((16, 8, 64, 3), 3, 0), ((3, 6, 2, 16), 0, 2)]


def _python_entries(monkeypatch) -> list:
    """Grows by one each time a view backward enters its Python kernel (which fills the zeros)."""
    from torch_layouts.ops import view_backward
    entered = []
    monkeypatch.setattr(view_backward, "fill_", lambda *a, original=view_backward.fill_: entered.append(1) or
                        original(*a))
    return entered


@pytest.mark.parametrize("sizes, dim, index", SELECT, ids=["outer", "middle", "stick", "padded"])
@pytest.mark.parametrize("arrangement", ["contiguous", "permuted"])
def test_select_backward(sizes, dim, index, arrangement, monkeypatch):
    """The CPU's result bit for bit, padding at its value; calls after the first of a geometry are
    replayed by the runtime's front."""
    torch_layouts.ops.elementwise.forget_recipes()
    entered = _python_entries(monkeypatch)
    shape = sizes[:dim] + sizes[dim + 1:]
    for seed in range(3):
        g = randn(*shape, seed=seed)
        if arrangement == "permuted":
            g = g.permute(2, 0, 1).contiguous().permute(1, 2, 0)
        got = A.select_backward(g.to("spyre"), sizes, dim, index)
        assert torch.equal(got.cpu(), A.select_backward(g, sizes, dim, index))
        assert padding_holds_pad_value(got)
    assert len(entered) == 1
    no_fallback()


SLICE = [((40, 30, 70), 0, 5, 25, 1), ((20, 60, 70), 1, 1, 60, 2), ((20, 30, 150), 2, 10, 80, 1)]


@pytest.mark.parametrize("sizes, dim, start, end, step", SLICE, ids=["rows", "strided", "stick"])
def test_slice_backward(sizes, dim, start, end, step, monkeypatch):
    torch_layouts.ops.elementwise.forget_recipes()
    entered = _python_entries(monkeypatch)
    for seed in range(3):
        g = randn(20, 30, 70, seed=seed)
        got = A.slice_backward(g.to("spyre"), sizes, dim, start, end, step)
        assert torch.equal(got.cpu(), A.slice_backward(g, sizes, dim, start, end, step))
        assert padding_holds_pad_value(got)
    assert len(entered) == 1
    no_fallback()


# -- a training step ---------------------------------------------------------------------------
def encoder(dropout: float) -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=dropout, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_transformer_encoder_training_step_matches_cpu(optimizer):
    """Without dropout the device step gives the CPU's parameters; every op runs on a device kernel."""
    cpu = encoder(0.0)
    device = copy.deepcopy(cpu).to("spyre")
    x, y = randn(4, 32, 64), randn(4, 32, 64, seed=1)
    # Adam's eps keeps it from amplifying rounding in gradients that are 0 in exact arithmetic
    make = {"SGD": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "Adam": lambda p: torch.optim.Adam(p, lr=1e-2, eps=1e-3)}
    for model, data in ((cpu, (x, y)), (device, (x.to("spyre"), y.to("spyre")))):
        opt = make[optimizer](model.parameters())
        for _ in range(2):
            opt.zero_grad()
            nn.functional.mse_loss(model(data[0]), data[1]).backward()
            opt.step()
    no_fallback()
    for (name, got), want in zip(device.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=1e-4, rtol=1e-4, msg=name)


def test_training_step_with_dropout_needs_no_fallback_and_only_matmul_restickifies():
    """Dropout, its backward and attention's ``_safe_softmax`` run on the device; the only
    restickifies are matmul operands sticked on the wrong dim (the rule requires those)."""
    model = encoder(0.1).to("spyre")
    x = randn(4, 32, 64).to("spyre")
    nn.functional.mse_loss(model(x), x).backward()
    stats = torch_layouts.stats()
    no_fallback()
    matmuls = sum(n for op, n in stats["kernel_calls"].items() if op in ("aten::mm", "aten::addmm", "aten::bmm"))
    assert 0 < stats["restickify_count"] <= 2 * matmuls
    for op in ("aten::native_dropout", "aten::native_dropout_backward", "aten::_safe_softmax",
               "aten::native_layer_norm_backward", "aten::select_backward", "aten::mse_loss_backward"):
        assert stats["kernel_calls"].get(op, 0) >= 1, op


def test_layouts_with_another_dim_order_train_too():
    """A weight kept sticked on its output dim (dim_order [1, 0]) still trains like the CPU."""
    lin = nn.Linear(64, 96)
    x = randn(16, 64)
    ref = nn.functional.layer_norm(lin(x), (96,)).square().mean()
    ref.backward()
    dev = copy.deepcopy(lin).to("spyre")
    dev.weight = nn.Parameter(dev.weight.detach().to("spyre", device_layout=SpyreTensorLayout((96, 64), F32, [1, 0])))
    dev.weight.grad = None
    out = nn.functional.layer_norm(dev(x.to("spyre")), (96,)).square().mean()
    out.backward()
    close(out.detach(), ref.detach())
    close(dev.weight.grad, lin.weight.grad)
    no_fallback()
