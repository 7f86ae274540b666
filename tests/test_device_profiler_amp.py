"""The profiler and autocast on spyre: PyTorch's PrivateUse1 profiler stubs are registered (no
"not enabled" errors, non-negative device times; the overhead is a benchmark figure in
benchmarks/bench_ops.py), and ``torch.autocast("spyre")``
casts ops by CUDA's policies."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch


def small_model() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("spyre")
    return model, torch.randn(4, 16).to("spyre")


def test_profiler_with_spyre_device_times():
    """The legacy profiler with ``use_device="spyre"`` records spyre times, none negative, and
    never reports "PrivateUse1 used in profiler but not enabled"."""
    code = """
import torch, torch_layouts
model = torch.nn.Linear(8, 8).to("spyre")
x = torch.randn(2, 8).to("spyre")
with torch.autograd.profiler.profile(use_device="spyre") as prof:
    model(x)
events = prof.function_events
assert events and all(e.device_time_total >= 0 and e.cpu_time_total >= 0 for e in events)
assert any(e.device_time_total > 0 for e in events)
assert "SPYRE" in prof.key_averages().table(row_limit=3)
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]
    assert "not enabled" not in result.stderr


def test_autocast_policies():
    assert torch.spyre.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    a, b = torch.randn(4, 8).to("spyre"), torch.randn(8, 3).to("spyre")
    with torch.autocast("spyre", dtype=torch.float16):
        product = a @ b
        linear = torch.nn.functional.linear(a, b.t())
        summed = a + a  # no policy: stays float32
        probabilities = torch.softmax(product, dim=-1)  # fp32 policy
    assert product.dtype == linear.dtype == torch.float16
    assert summed.dtype == torch.float32 and probabilities.dtype == torch.float32
    assert torch.allclose(product.float().cpu(), a.cpu() @ b.cpu(), atol=1e-2, rtol=1e-2)
    with torch.autocast("spyre", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("spyre") and (a @ b).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("spyre") and (a @ b).dtype == torch.float32


def test_autocast_unsupported_dtype_warns_and_disables():
    a = torch.randn(2, 2).to("spyre")
    with pytest.warns(UserWarning, match="not supported"):
        with torch.autocast("spyre", dtype=torch.float32):
            assert (a @ a).dtype == torch.float32


def test_autocast_backward():
    layer = torch.nn.Linear(8, 4).to("spyre")
    x = torch.randn(3, 8).to("spyre")
    with torch.autocast("spyre", dtype=torch.float16):
        y = layer(x)
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32 and layer.weight.grad.device.type == "spyre"
