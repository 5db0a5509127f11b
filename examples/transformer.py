"""One pre-norm transformer block from plain torch ops: LayerNorm, multi-head self-attention
written with matmul/softmax/reshape/transpose, and a GELU MLP."""

from __future__ import annotations

import math

import torch
from torch import nn


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (no mask)."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        assert d_model % heads == 0, "d_model must be divisible by heads"
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.shape
        head_dim = d_model // self.heads
        q, k, v = self.qkv(x).split(d_model, dim=-1)
        q, k, v = (t.reshape(batch, seq, self.heads, head_dim).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim)
        attended = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out(attended.transpose(1, 2).reshape(batch, seq, d_model))


class TransformerBlock(nn.Module):
    """x + attn(ln1(x)), then + mlp(ln2(.))."""

    def __init__(self, d_model: int = 256, heads: int = 4, mlp_ratio: int = 4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model),
            nn.GELU(),
            nn.Linear(mlp_ratio * d_model, d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def make_transformer_block(
    batch: int = 4, seq: int = 128, d_model: int = 256, heads: int = 4, seed: int = 0
) -> tuple[TransformerBlock, tuple[torch.Tensor]]:
    """The block (in eval mode) and example inputs of shape [batch, seq, d_model]."""
    torch.manual_seed(seed)
    model = TransformerBlock(d_model, heads).eval()
    return model, (torch.randn(batch, seq, d_model),)
