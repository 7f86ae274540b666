"""Whole LSTM layers on the device (``ops/lstm_layers.py``): ``nn.LSTM`` runs each layer and
direction as the CPU's oneDNN layer (``mkldnn_rnn_layer`` and its backward) on the buffers'
views, giving the CPU's bits on the first call and on the runtime front's replays, with no CPU
fallback and no byte to or from the host; where the CPU would not take oneDNN, PyTorch's
composite runs, as on the CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import torch_layouts
from ops_support import padding_holds_pad_value, stays_on_device
from torch_layouts.ops import elementwise, lstm_layers

LAYER = "aten::mkldnn_rnn_layer"
# the dtypes the CPU's LSTM takes oneDNN for with grad mode on (bfloat16 where this CPU has it)
DTYPES = [torch.float32] + ([torch.bfloat16] if torch.ops.mkldnn._is_mkldnn_bf16_supported() else [])



@st.composite
def lstms(draw: st.DrawFn) -> dict:
    """An ``nn.LSTM``'s sizes and options, its input's, and whether initial states are given."""
    return dict(input_size=draw(st.integers(1, 40)), hidden_size=draw(st.sampled_from([1, 5, 32, 40, 64])),
                num_layers=draw(st.integers(1, 2)), bias=draw(st.booleans()), batch_first=draw(st.booleans()),
                bidirectional=draw(st.booleans()), steps=draw(st.integers(1, 7)), batch=draw(st.integers(1, 5)),
                states=draw(st.booleans()), dtype=draw(st.sampled_from(DTYPES)))


def _run(module: nn.LSTM, x: torch.Tensor, states: tuple | None, grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """The output, final states, and (backward of the three against ``grads``) the gradients of
    the input, the initial states and every parameter."""
    leaves = [x] + (list(states) if states else [])
    out, (h, c) = module(x, states)
    torch.autograd.backward([out, h, c], grads)
    return [out, h, c] + [t.grad for t in leaves] + [p.grad for p in module.parameters()]


@settings(max_examples=40, deadline=None)
@given(lstms(), st.integers(0, 2**31))
def test_an_lstm_and_its_backward_are_the_cpus(config, seed):
    """``nn.LSTM`` (1-2 layers, one or two directions, with or without biases and initial states,
    batch first or not, hidden sizes of part of a stick, whole sticks or more; float32, and
    bfloat16 where the CPU takes oneDNN for it) forward and
    backward on the device: the CPU's bits on three calls (the first runs the layers' Python
    kernels, the next are replayed by the runtime's front), a oneDNN layer per layer and
    direction, no fallback, no host bytes; the results' padding holds its pad value."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    sizes = {k: config[k] for k in ("input_size", "hidden_size", "num_layers", "bias", "batch_first",
                                    "bidirectional")}
    dtype = config["dtype"]
    cpu = nn.LSTM(**sizes).to(dtype)
    device = copy.deepcopy(cpu).to("spyre")
    steps, batch = config["steps"], config["batch"]
    x = torch.randn((batch, steps, sizes["input_size"]) if sizes["batch_first"] else (steps, batch, sizes["input_size"]),
                    generator=gen).to(dtype)
    layers = sizes["num_layers"] * (2 if sizes["bidirectional"] else 1)
    states = tuple(torch.randn(layers, batch, sizes["hidden_size"], generator=gen).to(dtype) for _ in range(2))
    out_shape = (*x.shape[:2], sizes["hidden_size"] * (2 if sizes["bidirectional"] else 1))
    grads = [torch.randn(out_shape, generator=gen).to(dtype),
             *(torch.randn(s.shape, generator=gen).to(dtype) for s in states)]

    def leaf(t: torch.Tensor, to: str) -> torch.Tensor:
        return t.detach().to(to).requires_grad_()

    want = _run(cpu, leaf(x, "cpu"), tuple(leaf(s, "cpu") for s in states) if config["states"] else None, grads)
    elementwise.forget_recipes()
    entered = []
    with pytest.MonkeyPatch.context() as patch:
        # the forward's Python kernel, the backward's
        patch.setattr(lstm_layers, "on_views_kept",
                      lambda *a, f=lstm_layers.on_views_kept, **k: entered.append(1) or f(*a, **k))
        patch.setattr(lstm_layers, "on_views_masked",
                      lambda *a, f=lstm_layers.on_views_masked, **k: entered.append(1) or f(*a, **k))
        for call in range(3):
            device.zero_grad(set_to_none=True)
            before = len(entered)
            inputs = (leaf(x, "spyre"), tuple(leaf(s, "spyre") for s in states) if config["states"] else None,
                      [g.to("spyre") for g in grads])
            torch_layouts.reset_stats()
            got = _run(device, *inputs)
            assert stays_on_device()["kernel_calls"][LAYER] == layers
            assert (len(entered) - before == 0) == (call > 0), call
            assert len(got) == len(want)
            for g, v in zip(got, want):
                assert torch.equal(g.cpu(), v), call
                assert padding_holds_pad_value(g)


def test_grad_mode_picks_the_workspace():
    """The CPU's layer returns its workspace (what backward needs) only with grad mode on: the
    device's does likewise, calls in either mode replayed apart (the runtime front's key holds
    the grad mode), each giving the CPU's bits."""
    torch.manual_seed(0)
    x, w_ih, w_hh, b_ih, b_hh = torch.randn(4, 3, 6), torch.randn(32, 6), torch.randn(32, 8), torch.randn(32), \
        torch.randn(32)
    h, c = torch.randn(3, 8), torch.randn(3, 8)
    rest = [False, [], lstm_layers.LSTM_MODE, 8, 1, True, False, False, True]
    operands = [x, w_ih, w_hh, b_ih, b_hh, h, c]
    for grad in (True, False, True, False):
        with torch.set_grad_enabled(grad):
            want = torch.ops.aten.mkldnn_rnn_layer(*operands, *rest)
            got = torch.ops.aten.mkldnn_rnn_layer(*[t.to("spyre") for t in operands], *rest)
        assert (got[3] is None) == (want[3] is None) == (not grad)
        for g, v in zip(got[:3], want[:3]):
            assert torch.equal(g.cpu(), v)
        if grad:
            assert got[3].dtype == torch.uint8 and got[3].shape == want[3].shape


@pytest.mark.parametrize("case", ["projections", "half", "onednn off", "no elements"])
def test_the_composite_runs_where_the_cpu_takes_no_onednn(case):
    """An LSTM with projections, a float16 one with grad mode on, any with oneDNN disabled, and
    an empty batch take PyTorch's composite, as they do on the CPU: the CPU's values to float32
    rounding (float16: to its rounding), no fallback, no oneDNN layer."""
    torch.manual_seed(0)
    cpu = nn.LSTM(6, 16, proj_size=4 if case == "projections" else 0)
    x = torch.randn(5, 0 if case == "no elements" else 3, 6)
    dtype = torch.float16 if case == "half" else torch.float32
    device = copy.deepcopy(cpu).to("spyre", dtype)
    with torch.backends.mkldnn.flags(enabled=case != "onednn off"):
        want = cpu(x)[0]
        torch_layouts.reset_stats()
        got = device(x.to("spyre", dtype))[0]
        got.sum().backward()
    s = torch_layouts.stats()
    assert s["fallbacks"] == {} and LAYER not in s["kernel_calls"], s
    tolerance = dict(atol=2e-3, rtol=2e-3) if dtype == torch.float16 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.float().cpu(), want, **tolerance)


def test_an_lstm_classifier_trains_as_on_the_cpu():
    """Three Adam steps of a 2-layer LSTM and a linear head on the device, no fallback, a oneDNN
    layer per layer a step: the first loss is the CPU's bits (the forward is); the head's gradients
    (``cross_entropy``'s backward, the bias's sum over the batch) are summed in another order than
    the CPU's, so the later losses and the parameters are the CPU's to float32 rounding."""
    torch.manual_seed(0)
    cpu = nn.ModuleDict({"rnn": nn.LSTM(12, 40, num_layers=2, batch_first=True), "head": nn.Linear(40, 5)})
    device = copy.deepcopy(cpu).to("spyre")
    x, y = torch.randn(6, 9, 12), torch.randint(0, 5, (6,))
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (cpu, device)]
    torch_layouts.reset_stats()
    for step in range(3):
        losses = []
        for model, opt, (xs, ys) in zip((cpu, device), optimizers, ((x, y), (x.to("spyre"), y.to("spyre")))):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model["head"](model["rnn"](xs)[0][:, -1]), ys)
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
        assert torch.equal(losses[0], losses[1]) if step == 0 else losses[0].item() == pytest.approx(losses[1].item(),
                                                                                                     rel=1e-5)
    s = torch_layouts.stats()
    assert s["fallbacks"] == {} and s["kernel_calls"][LAYER] == 3 * 2, s
    for (name, p), q in zip(cpu.named_parameters(), device.parameters()):
        torch.testing.assert_close(q.cpu(), p, atol=1e-5, rtol=1e-4, msg=name)


def test_bad_layer_operands_are_named():
    """The CPU's layer reads its operands unchecked; the device's names the one that does not fit
    (a recurrent weight of the wrong width, a state of another dtype, a workspace not the
    forward's, an unknown mode) in a ValueError, before any is read."""
    x, w_ih, w_hh, b = torch.randn(4, 3, 6), torch.randn(32, 6), torch.randn(32, 8), torch.randn(32)
    h = torch.randn(3, 8)
    rest = [False, [], lstm_layers.LSTM_MODE, 8, 1, True, False, False, True]
    d = {name: t.to("spyre") for name, t in dict(x=x, w_ih=w_ih, w_hh=w_hh, b=b, h=h).items()}
    layer = torch.ops.aten.mkldnn_rnn_layer
    with pytest.raises(ValueError, match=r"weight1 must be a torch.float32 tensor of size \[32, 8\], got "
                                         r"torch.float32 of size \[32, 7\]"):
        layer(d["x"], d["w_ih"], torch.randn(32, 7).to("spyre"), d["b"], d["b"], d["h"], d["h"], *rest)
    with pytest.raises(ValueError, match="cx_ must be a torch.float32 tensor"):
        layer(d["x"], d["w_ih"], d["w_hh"], d["b"], d["b"], d["h"], d["h"].half(), *rest)
    with pytest.raises(ValueError, match="mode 7 is none of"):
        layer(d["x"], d["w_ih"], d["w_hh"], d["b"], d["b"], d["h"], d["h"], *rest[:2], 7, *rest[3:])
    output, hy, cy, workspace = layer(d["x"], d["w_ih"], d["w_hh"], d["b"], d["b"], d["h"], d["h"], *rest)
    with pytest.raises(ValueError, match=r"workspace must be the forward's, a torch.uint8 tensor of size"):
        torch.ops.aten.mkldnn_rnn_layer_backward(
            d["x"], d["w_ih"], d["w_hh"], d["b"], d["b"], d["h"], d["h"], output, hy, cy, output, None, None,
            False, lstm_layers.LSTM_MODE, 8, 1, True, True, False, [], False, workspace[:-1])


def test_dropout_falls_between_layers_as_in_the_composite():
    """A 2-layer LSTM with dropout 0.5, training: the device's oneDNN layers and PyTorch's
    composite (oneDNN off), each after seeding the device's generator alike, drop the same
    elements of the first layer's output (values to float32 rounding, far from the undropped
    ones); evaluating, no dropout: the same as with dropout 0."""
    torch.manual_seed(0)
    lstm = nn.LSTM(6, 16, num_layers=2, dropout=0.5).to("spyre")
    x = torch.randn(5, 3, 6).to("spyre")

    def run(onednn: bool) -> torch.Tensor:
        torch.spyre.manual_seed(7)
        with torch.backends.mkldnn.flags(enabled=onednn):
            return lstm(x)[0].cpu()

    layers, composite = run(True), run(False)
    torch.testing.assert_close(layers, composite, atol=1e-5, rtol=1e-5)
    lstm.dropout = 0.0
    undropped = run(True)
    assert (layers - undropped).abs().max() > 1e-2
    lstm.dropout = 0.5
    lstm.eval()
    assert torch.equal(run(True), undropped)


def test_inference_mode_takes_the_layers():
    """Under ``torch.inference_mode`` (autograd off: the backend's key) an LSTM still runs as the
    CPU's oneDNN layers: its bits, a layer per layer and direction, no workspace made."""
    torch.manual_seed(0)
    cpu = nn.LSTM(8, 40, num_layers=2, bidirectional=True)
    device = copy.deepcopy(cpu).to("spyre")
    x = torch.randn(5, 3, 8)
    with torch.inference_mode():
        want = cpu(x)
        xd = x.to("spyre")
        torch_layouts.reset_stats()
        got = device(xd)
    s = torch_layouts.stats()
    assert s["kernel_calls"][LAYER] == 4 and s["fallbacks"] == {}, s
    assert torch.equal(got[0].cpu(), want[0]) and all(torch.equal(g.cpu(), w) for g, w in zip(got[1], want[1]))
