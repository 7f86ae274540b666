"""Batch norm on the device (``csrc/batch_norm.cpp``, ``ops/convolution.py``): the runtime's
kernels read the operands where they lie and give ATen's output, saved statistics, running
statistics and gradients bit for bit (its contiguous path's double sums, one element at a time;
its backward's sums in vectors of 8 lanes and their butterfly; its fused multiply-adds where its
vectorized kernels fuse), on the first call and on the front's replays, in every instruction set;
inputs they do not take run ATen's kernel on contiguous copies."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_layouts
from ops_support import ISA_SETS, kernels_in, padding_holds_pad_value, stays_on_device
from torch_layouts import SpyreTensorLayout, _C
from torch_layouts.ops import convolution, elementwise

A = torch.ops.aten


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, float32."""
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


@contextlib.contextmanager
def python_entries(isa: str) -> Iterator[list[int]]:
    """In instruction set ``isa``, with no recipe kept: a list that grows by one each time a batch
    norm call enters Python."""
    entered: list[int] = []
    with pytest.MonkeyPatch.context() as monkeypatch, kernels_in(_C._set_isa_tables, isa):
        elementwise.forget_recipes()
        monkeypatch.setattr(convolution, "on_views", lambda *a, f=convolution.on_views: entered.append(1) or f(*a))
        yield entered


@st.composite
def batches(draw: st.DrawFn) -> dict:
    """An input's shape (3-D or 4-D; rows of part of a stick, a stick, or more), its scale and
    offset (sums whose double additions round), a layout's dim_order (None: the default), and the
    call's options."""
    spatial = [draw(st.integers(1, 5)), draw(st.sampled_from([2, 7, 32, 33, 70]))][draw(st.integers(0, 1)):]
    shape = (draw(st.integers(1, 6)), draw(st.integers(1, 20)), *spatial)
    orders = [None, None, [1, 0] + list(range(2, len(shape))), list(range(len(shape)))[::-1]]
    return dict(shape=shape, scale=draw(st.sampled_from([1e-3, 1.0, 1e3])), offset=draw(st.sampled_from([0.0, 5.0])),
                order=draw(st.sampled_from(orders)), training=draw(st.booleans()), affine=draw(st.booleans()),
                track=draw(st.booleans()), momentum=draw(st.sampled_from([0.1, 0.3])),
                eps=draw(st.sampled_from([1e-5, 1e-3])))


@settings(max_examples=60, deadline=None)
@given(batches(), st.integers(0, 2**31), st.sampled_from(ISA_SETS))
def test_batch_norm_is_the_cpus(config, seed, isa):
    """Output, saved mean and inverse deviation, and running statistics bit for bit the CPU's on
    three calls (the first runs Python, the next are replayed); results in their default layouts,
    padding at its pad value; no fallback, no host bytes."""
    gen = torch.Generator().manual_seed(seed)
    shape, channels, training = config["shape"], config["shape"][1], config["training"]
    if not training and not config["track"]:
        return  # evaluation needs running statistics (ATen's error, the device's: test_ops_convolution)
    weight = torch.rand(channels, generator=gen) + 0.5 if config["affine"] else None
    bias = torch.randn(channels, generator=gen) if config["affine"] else None
    stats = [torch.randn(channels, generator=gen), torch.rand(channels, generator=gen) + 0.5] if config["track"] else [None, None]
    device_stats = [None if s is None else s.to("spyre") for s in stats]
    layout = None if config["order"] is None else SpyreTensorLayout(shape, torch.float32, config["order"])
    with python_entries(isa) as entered:
        for call in range(3):
            x = torch.randn(shape, generator=gen) * config["scale"] + config["offset"]
            args = [weight, bias, *stats, training, config["momentum"], config["eps"]]
            want = A.native_batch_norm(x, *args)
            device_args = [None if t is None else t.to("spyre") for t in (weight, bias)] + device_stats
            dx = x.to("spyre", device_layout=layout)
            torch_layouts.reset_stats()
            got = A.native_batch_norm(dx, *device_args, *args[4:])
            stays_on_device()
            assert len(got) == 3 and all(_same(g.cpu(), w) for g, w in zip(got, want)), call
            assert all(padding_holds_pad_value(g) for g in got if g.numel())
            for s, d in zip(stats, device_stats):
                assert s is None or _same(d.cpu(), s), call
    assert len(entered) == 1  # the first call only


@settings(max_examples=60, deadline=None)
@given(batches(), st.integers(0, 2**31), st.sampled_from(ISA_SETS))
def test_batch_norm_backward_is_the_cpus(config, seed, isa):
    """The input's, weight's and bias's gradients bit for bit the CPU's on three calls (training
    with the saved statistics, evaluation with the running ones; planes whose size is not a
    multiple of 8 end in ATen's partial vector), the first running Python, the next replayed;
    no fallback, no host bytes."""
    gen = torch.Generator().manual_seed(seed)
    shape, channels, train = config["shape"], config["shape"][1], config["training"]
    weight = torch.rand(channels, generator=gen) + 0.5 if config["affine"] else None
    mean, var = torch.randn(channels, generator=gen), torch.rand(channels, generator=gen) + 0.5
    layout = None if config["order"] is None else SpyreTensorLayout(shape, torch.float32, config["order"])
    with python_entries(isa) as entered:
        for call in range(3):
            x = torch.randn(shape, generator=gen) * config["scale"] + config["offset"]
            grad = torch.randn(shape, generator=gen)
            _, saved_mean, saved_invstd = A.native_batch_norm(x, weight, None, None, None, True, 0.1, config["eps"])
            args = [weight, mean, var, saved_mean if train else None, saved_invstd if train else None]
            want = A.native_batch_norm_backward(grad, x, *args, train, config["eps"], [True, True, True])
            dgrad, dx = grad.to("spyre", device_layout=layout), x.to("spyre", device_layout=layout)
            dargs = [None if t is None else t.to("spyre") for t in args]
            torch_layouts.reset_stats()
            got = A.native_batch_norm_backward(dgrad, dx, *dargs, train, config["eps"], [True, True, True])
            stays_on_device()
            assert all(_same(g.cpu(), w) for g, w in zip(got, want)), call
            assert all(padding_holds_pad_value(g) for g in got)
    assert len(entered) == 1  # the first call only


def test_the_cnns_batch_norm_reads_its_input_where_it_lies():
    """A convolution's 16x32x32x32 float32 output (Spyre's default layout: rows of one stick, the
    batch beside it) normalized, and its gradient found, with no relayout and no device copy."""
    x = torch.randn(16, 32, 32, 32).to("spyre").requires_grad_()
    module = torch.nn.BatchNorm2d(32).to("spyre")
    grad = torch.randn(16, 32, 32, 32).to("spyre")
    module(x).backward(grad)
    torch_layouts.reset_stats()
    module(x).backward(grad)
    s = stays_on_device()
    assert s["relayouts"] == 0 and s["d2d_bytes"] == 0, s


@pytest.mark.parametrize("dtype, shape", [(torch.float16, (4, 3, 5, 6)), (torch.bfloat16, (4, 3, 6)),
                                          (torch.float32, (4, 3)), (torch.float32, (4, 3, 1, 1))])
def test_other_inputs_take_atens_kernel(dtype, shape):
    """Half-precision inputs, and planes of one element (ATen's channels-last path): the runtime's
    op runs ATen's kernel on contiguous copies, so the device gives the CPU's bits."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=gen).to(dtype)
    weight, bias = torch.rand(3, generator=gen) + 0.5, torch.randn(3, generator=gen)
    mean, var = torch.randn(3, generator=gen), torch.rand(3, generator=gen) + 0.5
    want = A.native_batch_norm(x, weight, bias, mean.clone(), var.clone(), True, 0.1, 1e-5)
    device_mean, device_var = mean.to("spyre"), var.to("spyre")
    got = A.native_batch_norm(x.to("spyre"), weight.to("spyre"), bias.to("spyre"), device_mean, device_var, True, 0.1,
                              1e-5)
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want))
    A.native_batch_norm(x, weight, bias, mean, var, True, 0.1, 1e-5)
    assert torch.equal(device_mean.cpu(), mean) and torch.equal(device_var.cpu(), var)


def test_the_runtime_op_checks_its_output():
    """Called directly on CPU tensors, an output of another size is a ValueError naming it."""
    x = torch.randn(2, 3, 4, 5)
    with pytest.raises(ValueError, match="out must be"):
        torch.ops.torch_layouts.batch_norm.out(x, None, None, None, None, True, 0.1, 1e-5, out=torch.empty(2, 3, 4),
                                               save_mean=torch.empty(3), save_invstd=torch.empty(3))
