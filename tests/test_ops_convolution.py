"""Convolutions and batch norm on the device (``ops/convolution.py``): the CPU's kernels on the
buffers' views give the CPU's bits, on the first call and on the runtime front's replays, with
no CPU fallback and no byte to or from the host; a batch norm's running statistics are updated
where they lie."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import torch_layouts
from ops_support import padding_holds_pad_value, stays_on_device
from torch_layouts.ops import convolution, elementwise



def _leaf(t: torch.Tensor, grad: bool, device: str) -> torch.Tensor:
    return t.detach().to(device).requires_grad_(grad)


@st.composite
def convolutions(draw: st.DrawFn) -> dict:
    """A convolution's operands and arguments: 1-3 spatial dims, groups, strides, padding,
    dilation, transposed or not, with or without a bias."""
    dims = draw(st.integers(1, 3))
    groups = draw(st.integers(1, 3))
    transposed = draw(st.booleans())
    c_in, c_out = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(dims)]
    stride = [draw(st.integers(1, 2)) for _ in range(dims)]
    dilation = [draw(st.integers(1, 2)) for _ in range(dims)]
    padding = [draw(st.integers(0, 1)) for _ in range(dims)]
    sizes = [draw(st.integers(4 if dims < 3 else 3, 9 if dims < 3 else 5)) for _ in range(dims)]
    # a transposed convolution's output padding is below its stride or dilation
    output_padding = [draw(st.integers(0, max(s, d) - 1)) if transposed else 0 for s, d in zip(stride, dilation)]
    weight = [c_in, c_out // groups] if transposed else [c_out, c_in // groups]
    return dict(input=[draw(st.integers(1, 3)), c_in, *sizes], weight=weight + kernel,
                bias=draw(st.booleans()) and c_out, stride=stride, padding=padding, dilation=dilation,
                transposed=transposed, output_padding=output_padding, groups=groups,
                grads=draw(st.tuples(st.booleans(), st.booleans(), st.booleans())))


@settings(max_examples=60, deadline=None)
@given(convolutions(), st.integers(0, 2**31))
def test_convolution_and_its_backward_are_the_cpus(conv, seed):
    """``aten::convolution`` forward and backward (any subset of the operands wanting gradients:
    the output mask) on the device: the CPU's bits on three calls (the first runs Python, the
    next are replayed by the runtime's front: no Python), no fallback, no host bytes; the results'
    padding holds its pad value."""
    entered = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(convolution, "on_views_masked",
                      lambda *a, f=convolution.on_views_masked, **k: entered.append(1) or f(*a, **k))
        _convolution_and_its_backward_are_the_cpus(conv, seed, entered)


def _convolution_and_its_backward_are_the_cpus(conv: dict, seed: int, entered: list) -> None:
    gen = torch.Generator().manual_seed(seed)
    x, w = torch.randn(conv["input"], generator=gen), torch.randn(conv["weight"], generator=gen)
    b = torch.randn(conv["bias"], generator=gen) if conv["bias"] else None
    args = [conv[k] for k in ("stride", "padding", "dilation", "transposed", "output_padding", "groups")]
    wants = conv["grads"]

    def run(device: str) -> list[torch.Tensor]:
        leaves = [_leaf(t, g, device) if t is not None else None for t, g in zip((x, w, b), wants)]
        grad = None
        if any(t is not None and t.requires_grad for t in leaves):
            shape = torch.ops.aten.convolution(*[t.detach().to("meta") if t is not None else None for t in leaves],
                                               *args).shape
            grad = torch.randn(shape, generator=torch.Generator().manual_seed(seed + 1)).to(device)
        torch_layouts.reset_stats()
        y = torch.ops.aten.convolution(*leaves, *args)
        got = [y]
        if grad is not None:
            y.backward(grad)
            got += [t.grad for t in leaves if t is not None and t.requires_grad]
        if device == "spyre":
            stays_on_device()
        return got

    try:
        want = run("cpu")
    except RuntimeError as e:  # a geometry the CPU rejects: the device raises the same
        with pytest.raises(RuntimeError, match=str(e).split("\n")[0][:40].replace("(", r"\(").replace("[", r"\[")):
            run("spyre")
        return
    elementwise.forget_recipes()
    for call in range(3):
        before = len(entered)
        got = run("spyre")
        assert (len(entered) - before == 0) == (call > 0), call
        assert len(got) == len(want)
        for g, v in zip(got, want):
            assert torch.equal(g.cpu(), v), call
            assert padding_holds_pad_value(g)


def test_convolution_reads_any_layout():
    """An input in a non-default layout (channels in the stick: no strided view is row-major) and
    the weight in another dim order: the CPU's bits, on the device."""
    x, w = torch.randn(2, 5, 7, 6), torch.randn(4, 5, 3, 3)
    dx = x.to("spyre", device_layout=torch_layouts.SpyreTensorLayout(x.shape, x.dtype, [0, 2, 3, 1]))
    dw = w.to("spyre", device_layout=torch_layouts.SpyreTensorLayout(w.shape, w.dtype, [1, 0, 2, 3]))
    for _ in range(2):
        torch_layouts.reset_stats()
        got = nn.functional.conv2d(dx, dw, padding=1)
        stays_on_device()
        assert torch.equal(got.cpu(), nn.functional.conv2d(x, w, padding=1))


def test_convolution_errors_are_the_cpus():
    """A weight whose channels do not match the input's: the CPU's RuntimeError."""
    x, w = torch.randn(1, 3, 8, 8), torch.randn(4, 2, 3, 3)
    with pytest.raises(RuntimeError) as cpu:
        nn.functional.conv2d(x, w)
    with pytest.raises(RuntimeError) as device:
        nn.functional.conv2d(x.to("spyre"), w.to("spyre"))
    assert str(cpu.value).split("\n")[0] == str(device.value).split("\n")[0]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([(6, 3), (4, 8, 5), (3, 6, 4, 7), (2, 4, 3, 3, 3), (5, 40, 2, 3)]), st.booleans(),
       st.booleans(), st.booleans(), st.integers(0, 2**31))
def test_batch_norm_and_its_backward_are_the_cpus(shape, affine, track, training, seed):
    """``native_batch_norm`` and its backward (1-3 spatial dims; affine or not; running statistics
    or not; training or evaluation): output, gradients and running statistics the CPU's bits on
    three calls, no fallback, no host bytes."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * 3 + 1
    grad = torch.randn(shape, generator=gen)
    kind = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[len(shape)]
    cpu = kind(shape[1], affine=affine, track_running_stats=track)
    if affine:
        with torch.no_grad():
            cpu.weight.copy_(torch.rand(shape[1], generator=gen) + 0.5)
            cpu.bias.copy_(torch.randn(shape[1], generator=gen))
    if track:
        cpu.running_mean.copy_(torch.randn(shape[1], generator=gen))
        cpu.running_var.copy_(torch.rand(shape[1], generator=gen) + 0.5)
    device = kind(shape[1], affine=affine, track_running_stats=track).to("spyre")
    device.load_state_dict(cpu.state_dict())
    cpu.train(training), device.train(training)
    for call in range(3):
        cx, dx, dgrad = x.clone().requires_grad_(), x.to("spyre").requires_grad_(), grad.to("spyre")
        want = cpu(cx)
        want.backward(grad)
        torch_layouts.reset_stats()
        got = device(dx)
        got.backward(dgrad)
        stays_on_device()
        assert torch.equal(got.cpu(), want), call
        assert torch.equal(dx.grad.cpu(), cx.grad), call
        for name, value in cpu.state_dict().items():
            assert torch.equal(device.state_dict()[name].cpu(), value), (call, name)
        for p, q in zip(device.parameters(), cpu.parameters()):
            assert torch.equal(p.grad.cpu(), q.grad), call


def test_running_statistics_without_a_strided_view_are_updated():
    """Running statistics on a diagonal of a device matrix (no strided view of the buffer holds
    one): updated as the CPU updates the same diagonal, output the CPU's bits."""
    x = torch.randn(8, 40, 3)
    cpu_stats = torch.rand(2, 40, 40)
    device_stats = cpu_stats.to("spyre")
    for _ in range(2):
        want = nn.functional.batch_norm(x, cpu_stats[0].diagonal(), cpu_stats[1].diagonal(), training=True)
        got = nn.functional.batch_norm(x.to("spyre"), device_stats[0].diagonal(), device_stats[1].diagonal(),
                                       training=True)
        assert torch.equal(got.cpu(), want)
        assert torch.equal(device_stats.cpu(), cpu_stats)


def test_a_convolutional_network_trains_on_the_device():
    """Two convolutions, batch norm, ReLU, pooling and a linear head, two SGD steps with no CPU
    fallback: every parameter and buffer the CPU's to float32 rounding (the global average pool is
    a ``mean`` and the loss a ``log_softmax``, whose device kernels sum in another order)."""
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(16, 10))
    device = copy.deepcopy(cpu).to("spyre")
    images, labels = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (cpu, device)]
    torch_layouts.reset_stats()
    for _ in range(2):
        for model, opt, (x, y) in zip((cpu, device), optimizers, ((images, labels),
                                                                  (images.to("spyre"), labels.to("spyre")))):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    assert torch_layouts.stats()["fallbacks"] == {}
    for (name, value), other in zip(cpu.state_dict().items(), device.state_dict().values()):
        torch.testing.assert_close(other.cpu(), value, atol=1e-6, rtol=1e-5, msg=name)
