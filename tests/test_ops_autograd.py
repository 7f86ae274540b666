"""Autograd through the device kernels: PyTorch's own derivative formulas run on device
tensors (their backward ops hit device kernels or the CPU fallback); gradients match
the CPU's."""

from __future__ import annotations

import threading

import pytest
import torch

import torch_layouts
from torch_layouts import SpyreTensorLayout

F16, F32 = torch.float16, torch.float32


def grads(fn, *inputs: torch.Tensor, device: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """fn's output and the gradients of ``(output * weights).sum()`` w.r.t. the inputs."""
    leaves = [(t.to("spyre") if device else t.clone()).requires_grad_() for t in inputs]
    out = fn(*leaves)
    gen = torch.Generator().manual_seed(0)
    weights = torch.randn(out.shape, generator=gen).to(out.dtype)
    (out * (weights.to("spyre") if device else weights)).sum().backward()
    return out, [leaf.grad for leaf in leaves]


def check(fn, *inputs: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4) -> None:
    ref, ref_grads = grads(fn, *inputs, device=False)
    out, dev_grads = grads(fn, *inputs, device=True)
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=atol, rtol=rtol)
    for got, want in zip(dev_grads, ref_grads):
        assert got.device.type == "spyre"
        torch.testing.assert_close(got.cpu(), want, atol=atol, rtol=rtol)


# One row per case: id, function, input shapes.
CASES = [
    ("pointwise", lambda a, b: (a * b + a.exp() - torch.sigmoid(b)).relu() / (b.abs() + 1), [(20, 70), (20, 70)]),
    ("broadcast-bias", lambda a, bias: torch.tanh(a + bias) * bias, [(2, 20, 70), (70,)]),
    ("gelu-silu", lambda a: torch.nn.functional.gelu(a) + torch.nn.functional.silu(a), [(30, 100)]),
    ("where-clamp", lambda a, b: torch.where(a > b, a, b).clamp(-0.5, 0.5) + a.pow(2), [(30, 100), (30, 100)]),
    ("sum-mean", lambda a: a.sum(-1, keepdim=True) * a.mean(0), [(30, 100)]),
    ("amax", lambda a: a.amax(-1) + a.amin(0).sum(), [(30, 100)]),
    ("softmax", lambda a: torch.softmax(a, -1) + torch.log_softmax(a, -1), [(3, 20, 70)]),
    ("mm", lambda a, b: a @ b, [(30, 100), (100, 70)]),
    ("bmm", lambda a, b: torch.bmm(a, b), [(3, 20, 64), (3, 64, 40)]),
    ("linear", lambda x, w, b: torch.nn.functional.linear(x, w, b), [(2, 10, 64), (48, 64), (48,)]),
    ("layer-norm", lambda x, w, b: torch.nn.functional.layer_norm(x, (96,), w, b), [(4, 96), (96,), (96,)]),
    ("views", lambda a: (a[:, 10:50] * 2).t().sum(0) + a.reshape(-1)[:7].sum(), [(20, 70)]),
    ("convert", lambda a: a.to(F16).to(F32) * 3, [(20, 70)]),
]


@pytest.mark.parametrize("_, fn, shapes", CASES, ids=[c[0] for c in CASES])
def test_gradients_match_cpu(_, fn, shapes):
    gen = torch.Generator().manual_seed(len(shapes))
    check(fn, *(torch.randn(s, generator=gen) for s in shapes))


def test_half_precision_gradients():
    gen = torch.Generator().manual_seed(1)
    a, w = torch.randn(16, 64, generator=gen).half(), torch.randn(64, 64, generator=gen).half()
    check(lambda a, w: torch.softmax(a @ w, -1) * a, a, w, atol=2e-2, rtol=2e-2)


def test_gradient_of_a_non_default_layout_input():
    x = torch.randn(40, 70)
    y = x.to("spyre", device_layout=SpyreTensorLayout((40, 70), F32, [1, 0])).requires_grad_()
    (y.exp() * 2).sum().backward()
    torch.testing.assert_close(y.grad.cpu(), x.exp() * 2)


def test_backward_runs_on_device_kernels():
    x = torch.randn(30, 100)
    y = x.to("spyre").requires_grad_()
    out = (torch.softmax(y * 2, -1) @ torch.randn(100, 20).to("spyre")).sum()
    torch_layouts.reset_stats()
    out.backward()
    stats = torch_layouts.stats()
    assert stats["fallbacks"] == {}
    calls = stats["kernel_calls"]
    assert calls.get("aten::_softmax_backward_data") == 1 and calls.get("aten::mm", 0) >= 1


def _backward_threads(x: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """The threads the backward of a small graph on ``x`` ran on, and ``x``'s gradient."""
    seen: list[int] = []
    leaf = x.detach().clone().requires_grad_()
    leaf.register_hook(lambda grad: seen.append(threading.get_ident()))
    torch.nn.functional.layer_norm(torch.softmax(leaf, -1) * 3, leaf.shape[-1:]).pow(2).sum().backward()
    return seen, leaf.grad


@pytest.mark.parametrize("multithreaded", [False, True])
def test_backward_thread_and_gradients(multithreaded: bool):
    """Importing torch_layouts runs the importing thread's backward on that thread (docs/design.md,
    "Backward on the calling thread"); re-enabling autograd's device threads moves it off the
    thread and changes no gradient bit."""
    x = torch.randn(4, 8, 130, generator=torch.Generator().manual_seed(0))
    # Layer norm of softmax outputs (a tiny variance) is ill-conditioned: float32 on the CPU is
    # itself ~1e-3 off float64 here, so the reference is float64 and the threads' runs agree bit for bit.
    _, want = _backward_threads(x.double())
    assert not torch._C._is_multithreading_enabled()
    _, calling_thread = _backward_threads(x.to("spyre"))
    with torch.autograd.set_multithreading_enabled(multithreaded):
        seen, got = _backward_threads(x.to("spyre"))
    assert len(seen) == 1 and (seen[0] == threading.get_ident()) != multithreaded
    assert got.device.type == "spyre"
    assert torch.equal(got.cpu(), calling_thread.cpu())
    torch.testing.assert_close(got.cpu().double(), want, atol=1e-4, rtol=2e-3)
    assert not torch._C._is_multithreading_enabled()


def test_other_threads_keep_pytorchs_default():
    """The setting is autograd's thread-local one: a thread started later has PyTorch's default."""
    result: dict[str, object] = {}

    def body() -> None:
        result["enabled"] = torch._C._is_multithreading_enabled()
        result["seen"], _ = _backward_threads(torch.randn(3, 70).to("spyre"))

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert result["enabled"] is True
    assert result["seen"] and result["seen"][0] != worker.ident
