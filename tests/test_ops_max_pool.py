"""2-D max pooling on the device (``ops/max_pool.py``, ``csrc/max_pool.cpp``): the runtime's
kernel on the buffers' views gives ATen's values, indices and gradients bit for bit (ties, NaN,
infinities, -0 gradients, overlapping windows, padding, dilation, ceil mode), on the first call
and on the front's replays, with no fallback and no byte to or from the host; an index outside
its plane is a ValueError, never a write outside the buffer."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import ISA_SETS, kernels_in, padding_holds_pad_value, raises_like_the_cpu, stays_on_device
from torch_layouts import SpyreTensorLayout, _C
from torch_layouts.ops import elementwise, max_pool

A = torch.ops.aten
# values that tie, order against each other and NaN in every way ATen's rule tells apart
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, float("nan"), float("inf"), float("-inf")]
BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (NaN payloads and -0 included)."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    return torch.equal(a.view(BITS[a.dtype]), b.view(BITS[b.dtype])) if a.dtype in BITS else torch.equal(a, b)


@st.composite
def pools(draw: st.DrawFn) -> dict:
    """An input's shape and dtype, a layout's dim_order (None: the default), and a window: the
    CNN's 2x2 of stride 2 often, else any kernel, stride, padding, dilation and ceil mode."""
    rank = draw(st.sampled_from([3, 4]))
    shape = [draw(st.integers(1, 3)) for _ in range(rank - 3)] + [draw(st.integers(1, 5)), draw(st.integers(2, 11)),
                                                                    draw(st.sampled_from([2, 7, 16, 33, 70]))]
    if draw(st.booleans()):
        window = dict(kernel=[2, 2], stride=[2, 2], padding=[0, 0], dilation=[1, 1], ceil=draw(st.booleans()))
    else:
        kernel = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
        window = dict(kernel=kernel, stride=draw(st.sampled_from([[], [1, 1], [2, 1], [3, 2]])),
                      padding=[draw(st.integers(0, k // 2)) for k in kernel],
                      dilation=[draw(st.integers(1, 2)), draw(st.integers(1, 2))], ceil=draw(st.booleans()))
    order = draw(st.sampled_from([None, None, list(range(1, rank)) + [0], [rank - 1] + list(range(rank - 1))]))
    return dict(shape=tuple(shape), dtype=draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16])),
                order=order, **window)


def _python_entries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """With no recipe kept, a list that grows by one each time a max pooling call enters Python."""
    elementwise.forget_recipes()
    entered: list[int] = []
    monkeypatch.setattr(max_pool, "on_views", lambda *a, original=max_pool.on_views: entered.append(1) or original(*a))
    return entered


@settings(max_examples=60, deadline=None)
@given(pools(), st.integers(0, 2**31), st.sampled_from(ISA_SETS))
def test_max_pool_and_its_backward_are_the_cpus(config, seed, isa):
    """Values, indices and the input's gradient (gradients of -0 among them, which ATen adds into
    zeros) bit for bit the CPU's on three calls, in each instruction set: the first runs Python,
    the next are replayed; results in the default layout, padding at its pad value; no fallback,
    no host bytes."""
    gen = torch.Generator().manual_seed(seed)
    shape, dtype = config["shape"], config["dtype"]
    args = [config["kernel"], config["stride"], config["padding"], config["dilation"], config["ceil"]]
    try:
        want, want_index = A.max_pool2d_with_indices(torch.zeros(shape, dtype=dtype), *args)
    except RuntimeError:
        return  # a geometry with no output (the error tests below check the device raises the CPU's)
    layout = None if config["order"] is None else SpyreTensorLayout(shape, dtype, config["order"])
    with pytest.MonkeyPatch.context() as monkeypatch, kernels_in(_C._set_isa_tables, isa):
        entered = _python_entries(monkeypatch)
        for call in range(3):
            pool = torch.tensor(SPECIAL, dtype=dtype)
            x = pool[torch.randint(0, len(SPECIAL), shape, generator=gen)]
            grad = torch.randn(want.shape, generator=gen).to(dtype)
            grad[grad.abs() < 0.5] = -0.0
            want, want_index = A.max_pool2d_with_indices(x, *args)
            want_grad = A.max_pool2d_with_indices_backward(grad, x, *args, want_index)
            dx = x.to("spyre", device_layout=layout)
            dgrad = grad.to("spyre")
            torch_layouts.reset_stats()
            values, index = A.max_pool2d_with_indices(dx, *args)
            dx_grad = A.max_pool2d_with_indices_backward(dgrad, dx, *args, index)
            stays_on_device()
            assert _same(values.cpu(), want) and torch.equal(index.cpu(), want_index)
            assert _same(dx_grad.cpu(), want_grad)
            for result in (values, index, dx_grad):
                assert result.device_tensor_layout() == SpyreTensorLayout(tuple(result.shape), result.dtype)
                assert padding_holds_pad_value(result)
            assert len(entered) == 2, (call, entered)  # the first call's forward and backward only


def test_a_cnn_pools_as_the_cpu_does():
    """``nn.MaxPool2d`` in a small network's forward and backward: the CPU's output and input
    gradient bit for bit (the 2x2 rows' path: 32x32 planes in sticks of 32)."""
    torch.manual_seed(0)
    x = torch.relu(torch.randn(4, 8, 32, 32))
    pool = torch.nn.MaxPool2d(2)
    dx = x.to("spyre").requires_grad_()
    x.requires_grad_()
    out, dout = pool(x), pool(dx)
    grad = torch.randn(out.shape)
    out.backward(grad)
    dout.backward(grad.to("spyre"))
    assert _same(dout.detach().cpu(), out.detach()) and _same(dx.grad.cpu(), x.grad)


def test_gradients_at_indices_outside_their_windows_add_as_atens():
    """Indices the caller made (ATen's backward takes any index in the plane): each gradient added
    at its index in output order, several into one element, -1 skipped."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 8, 8, generator=gen)
    grad = torch.randn(2, 3, 4, 4, generator=gen)
    index = torch.randint(-1, 64, (2, 3, 4, 4), generator=gen)
    want = A.max_pool2d_with_indices_backward(grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, index)
    got = A.max_pool2d_with_indices_backward(grad.to("spyre"), x.to("spyre"), [2, 2], [2, 2], [0, 0], [1, 1], False,
                                             index.to("spyre"))
    assert _same(got.cpu(), want)


@pytest.mark.parametrize("bad", [64, -2, 10**6])
def test_an_index_outside_the_plane_raises_naming_it(bad):
    """ATen's kernel would write outside its buffer; the device raises a ValueError naming the
    index, and the device stays usable."""
    x = torch.randn(1, 2, 8, 8).to("spyre")
    index = torch.zeros(1, 2, 4, 4, dtype=torch.int64)
    index[0, 1, 2, 3] = bad
    with pytest.raises(ValueError, match=f"indices holds {bad}"):
        A.max_pool2d_with_indices_backward(torch.ones(1, 2, 4, 4).to("spyre"), x, [2, 2], [2, 2], [0, 0], [1, 1], False,
                                           index.to("spyre"))
    assert torch.equal(A.max_pool2d_with_indices(x, [2, 2])[0].cpu(), A.max_pool2d_with_indices(x.cpu(), [2, 2])[0])


@pytest.mark.parametrize("call", [
    lambda x: A.max_pool2d_with_indices(x, [2, 2], [2, 2], [2, 2]),  # padding over half the kernel
    lambda x: A.max_pool2d_with_indices(x, [9, 9]),  # a window larger than the input
    lambda x: A.max_pool2d_with_indices(x.flatten(), [2, 2]),  # no planes
])
def test_bad_geometries_raise_the_cpus_error(call):
    x = torch.randn(1, 2, 8, 8)
    raises_like_the_cpu(lambda device: call(x.to(device)))


@pytest.mark.parametrize("call, match", [
    (lambda x, o, i: torch.ops.torch_layouts.max_pool2d.out(x, [2, 2], out=o[..., :3], indices=i), "out must be"),
    (lambda x, o, i: torch.ops.torch_layouts.max_pool2d.out(x, [2, 2], out=o, indices=i.int()), "indices must be"),
    (lambda x, o, i: torch.ops.torch_layouts.max_pool2d.out(x, [0, 2], out=o, indices=i), "positive"),
    (lambda x, o, i: torch.ops.torch_layouts.max_pool2d.out(x, [2, 2, 2], out=o, indices=i), "kernel_size"),
    (lambda x, o, i: torch.ops.torch_layouts.max_pool2d_backward.grad_input(
        o, x, [2, 2], [], [0], [1], False, i, grad_input=x[..., :7]), "grad_input must be"),
])
def test_the_runtime_ops_check_their_operands(call, match):
    """Called directly on CPU tensors, the runtime's ops raise a ValueError naming the operand
    that does not fit, rather than read or write outside it."""
    x = torch.randn(2, 3, 8, 8)
    out, index = torch.empty(2, 3, 4, 4), torch.empty(2, 3, 4, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match=match):
        call(x, out, index)
