"""torch.compile on spyre: the default backend and backend="spyre", forward and backward."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_layouts
from torch_layouts.compile import backend
from torch_layouts.compile.models import Attention, mlp


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()  # no shapes remembered from other tests: no automatic dynamic shapes


@pytest.mark.parametrize("backend_name", [None, "spyre"])
@pytest.mark.parametrize("make, shape", [(mlp, (16, 64)), (Attention, (2, 8, 64))], ids=["mlp", "attention"])
def test_training_step_equals_eager_and_cpu(backend_name: str | None, make, shape) -> None:
    torch.manual_seed(0)
    cpu = make()
    eager = copy.deepcopy(cpu).to("spyre")
    dev = copy.deepcopy(cpu).to("spyre")
    compiled = torch.compile(dev) if backend_name is None else torch.compile(dev, backend=backend_name)
    x = torch.randn(*shape)
    losses = []
    for model in (compiled, eager, cpu):
        inp = x.to("spyre") if model is not cpu else x
        loss = model(inp).pow(2).mean()
        loss.backward()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    assert losses[0] == pytest.approx(losses[2], rel=1e-4)
    for (name, p), q, c in zip(dev.named_parameters(), eager.parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-4, atol=1e-5, msg=name)
        torch.testing.assert_close(p.grad.cpu(), c.grad, rtol=1e-3, atol=1e-4, msg=name)


def test_float16_inference_equals_eager() -> None:
    torch.manual_seed(0)
    model = Attention().to(torch.float16).to("spyre")
    x = torch.randn(2, 8, 64, dtype=torch.float16).to("spyre")
    with torch.no_grad():
        got, want = torch.compile(model)(x), model(x)
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=0, atol=0)


def test_cpu_graphs_reach_inductor_untouched() -> None:
    seen = []

    def inductor(gm, inputs, *args, **kwargs):
        seen.append((gm, args, kwargs))
        return "inductor"

    routed = backend._route(inductor)
    gm = torch.fx.symbolic_trace(lambda x: (x + 1,))
    assert routed(gm, [torch.ones(2)], 1, flag=True) == "inductor" and seen[0][1:] == ((1,), {"flag": True})
    assert routed(gm, [torch.ones(2).to("spyre")]) != "inductor" and len(seen) == 1


def test_default_backend_is_routed_and_named_backend_registered() -> None:
    import torch._dynamo
    import torch._inductor.compile_fx as inductor

    assert getattr(inductor.compile_fx, "spyre_routed", False)
    assert "spyre" in torch._dynamo.list_backends(exclude_tags=())


def test_dynamo_knows_the_device() -> None:
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device("spyre")
    assert iface.device_count() == torch.spyre.device_count() and iface.is_available()
    assert iface.current_device() == torch.spyre.current_device()
    assert get_interface_for_device(torch.device("spyre", 0)) is iface


def test_mixing_cpu_and_spyre_gives_eagers_error() -> None:
    x = torch.randn(4, 64)
    with pytest.raises(RuntimeError) as eager:
        x + x.to("spyre")
    torch._dynamo.reset()
    with pytest.raises(RuntimeError) as compiled:
        torch.compile(lambda a, b: a + b)(x, x.to("spyre"))
    # Dynamo reports the fake-tensor check's wording of eager's error (devices in argument order)
    same = "Expected all tensors to be on the same device, but found at least two devices"
    assert same in str(eager.value) and same in str(compiled.value)
    assert "cpu" in str(compiled.value) and "spyre" in str(compiled.value)


def test_dynamic_shapes_run_unplanned_with_a_warning_naming_the_dims() -> None:
    x = torch.randn(8, 64).to("spyre")
    f = torch.compile(lambda a: a * 2 + 1, dynamic=True)
    with pytest.warns(UserWarning, match=r"symbolic dim\(s\) \[0, 1\]"):
        out = f(x)
    torch.testing.assert_close(out.cpu(), x.cpu() * 2 + 1)


def test_fallback_ops_run_on_the_cpu_fallback() -> None:
    x = torch.randn(8, 64)

    def bicubic(a: torch.Tensor) -> torch.Tensor:  # (its decomposition's index and arange have no device kernel)
        return torch.nn.functional.interpolate(a.view(1, 1, 8, 64), scale_factor=2, mode="bicubic") + 1
    f = torch.compile(bicubic, backend="spyre")
    torch_layouts.reset_stats()
    out = f(x.to("spyre"))
    torch.testing.assert_close(out.cpu(), bicubic(x))
    assert torch_layouts.stats()["fallbacks"]


class _Recurrent(torch.nn.Module):
    """An LSTM and a linear head on its last output."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(16, 32, batch_first=True)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0][:, -1])


def test_an_lstm_compiles():
    """``torch.compile`` of an LSTM on spyre traces PyTorch's decomposition of ``lstm`` (not the
    device's oneDNN layers, whose workspace a traced graph cannot save): the loss and gradients
    are eager's on the CPU, to float32 rounding."""
    torch.manual_seed(0)
    cpu = _Recurrent()
    dev = copy.deepcopy(cpu).to("spyre")
    x = torch.randn(4, 7, 16)
    got, want = torch.compile(dev)(x.to("spyre")).sum(), cpu(x).sum()
    got.backward()
    want.backward()
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)
