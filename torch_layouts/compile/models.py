"""Small models the demo, the benchmarks and the tests compile: an MLP, an attention
block and a transformer of such blocks (pre-norm, GELU MLP)."""

from __future__ import annotations

import torch


class Attention(torch.nn.Module):
    """Multi-head self-attention with a residual connection."""

    def __init__(self, dim: int = 64, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)
        return x + self.out(y)


def mlp(dim: int = 64, hidden: int = 128) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, dim))


class Block(torch.nn.Module):
    """A transformer layer: attention, then a pre-norm MLP, both residual."""

    def __init__(self, dim: int = 64, heads: int = 2) -> None:
        super().__init__()
        self.attention = Attention(dim, heads)
        self.norm = torch.nn.LayerNorm(dim)
        self.mlp = mlp(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention(x)
        return x + self.mlp(self.norm(x))


def transformer(layers: int = 12, dim: int = 64, heads: int = 2) -> torch.nn.Module:
    return torch.nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
