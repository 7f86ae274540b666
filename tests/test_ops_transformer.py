"""A small transformer block (attention + MLP) on the device: forward results and
gradients match the CPU's, and the forward pass runs on device kernels only (no op on
the CPU fallback)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torch_layouts

F16, F32 = torch.float16, torch.float32


class Block(nn.Module):
    """Pre-norm block: LayerNorm, multi-head attention with scaled scores, softmax and a
    projection, then LayerNorm, Linear, GELU, Linear; residual adds around both."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        head = width // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, tokens, self.heads, head).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, tokens, width)
        x = x + self.proj(y)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


@pytest.mark.parametrize("dtype, tol", [(F32, 1e-4), (F16, 2e-2)], ids=["float32", "float16"])
def test_transformer_block(dtype, tol):
    torch.manual_seed(0)
    cpu = Block(64, 2).to(dtype)
    device = Block(64, 2).to(dtype)
    device.load_state_dict(cpu.state_dict())
    device.to("spyre")
    x = torch.randn(2, 24, 64).to(dtype)

    torch_layouts.reset_stats()
    out = device(x.to("spyre"))
    stats = torch_layouts.stats()
    assert stats["fallbacks"] == {}, stats["fallbacks"]
    for op in ("aten::native_layer_norm", "aten::addmm", "aten::bmm", "aten::_softmax", "aten::gelu",
               "aten::add.Tensor"):
        assert stats["kernel_calls"].get(op, 0) >= 1, op
    ref = cpu(x)
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=tol, rtol=tol)

    xd = x.to("spyre").requires_grad_()
    xc = x.clone().requires_grad_()
    device(xd).square().mean().backward()
    cpu(xc).square().mean().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, atol=tol, rtol=10 * tol)
    for (name, p_dev), p_cpu in zip(device.named_parameters(), cpu.parameters()):
        assert p_dev.grad.device.type == "spyre", name
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, atol=tol, rtol=10 * tol, msg=name)


def test_weights_sticked_on_n_run_the_block_in_strict_mode():
    """With every Linear weight kept in dim_order [1, 0] (so weight.t() is sticked on n) and
    a token count that fills whole sticks, the forward pass passes strict mode and needs one
    restickify: the contiguous copy of k^T that matmul makes for the attention scores moves
    the stick from the head dim to the tokens, as it must on the hardware."""
    torch.manual_seed(1)
    block = Block(64, 2)
    x = torch.randn(2, 32, 64)
    ref = block(x)
    block.to("spyre")
    for module in block.modules():
        if isinstance(module, nn.Linear):
            layout = torch_layouts.SpyreTensorLayout(tuple(module.weight.shape), F32, [1, 0])
            module.weight.data = torch_layouts.restickify(module.weight.data, layout)
    torch_layouts.reset_stats()
    with torch_layouts.strict_layouts():
        out = block(x.to("spyre"))
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), atol=1e-4, rtol=1e-4)
    stats = torch_layouts.stats()
    assert stats["restickify_count"] == 1 and stats["fallbacks"] == {}
    with torch_layouts.strict_layouts(), pytest.raises(torch_layouts.LayoutError, match="addmm needs mat2"):
        block.fc1.weight.data = torch_layouts.restickify(block.fc1.weight.data, torch_layouts.SpyreTensorLayout(
            tuple(block.fc1.weight.shape), F32))  # back to the default layout: weight.t() is sticked on k
        block(x.to("spyre"))
