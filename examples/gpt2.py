"""A GPT-2-style decoder written with plain torch modules, random weights: token and position
embeddings, pre-norm blocks of causal self-attention (masked with a lower-triangular buffer)
and a GELU (tanh) MLP, a final layer norm and a language-model head tied to the embedding.

The position ids (`arange`) and the embedding lookups run through torch (`graph.torch_call`),
matmuls are extern; the layer
norms, the softmax with its mask, the GELU and the residual adds fuse.

    python -m examples.gpt2            # the fusion report, and the error against eager
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class GPT2Config:
    vocab: int = 512
    context: int = 64
    d_model: int = 64
    heads: int = 4
    layers: int = 2


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        mask = torch.tril(torch.ones(config.context, config.context, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, config.context, config.context))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
        scores = scores.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))  # pyright: ignore[reportIndexIssue]
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.fc = nn.Linear(config.d_model, 4 * config.d_model)
        self.gelu = nn.GELU(approximate="tanh")
        self.proj = nn.Linear(4 * config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab, config.d_model)
        self.wpe = nn.Embedding(config.context, config.d_model)
        self.blocks = nn.Sequential(*(Block(config) for _ in range(config.layers)))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        return self.lm_head(self.ln_f(self.blocks(x)))


def make_gpt2(
    batch: int = 1, seq: int = 32, config: GPT2Config | None = None, seed: int = 0
) -> tuple[GPT2, tuple[torch.Tensor]]:
    """The model in eval mode and a batch of token ids [batch, seq]."""
    config = GPT2Config() if config is None else config
    torch.manual_seed(seed)
    model = GPT2(config).eval()
    return model, (torch.randint(0, config.vocab, (batch, seq)),)


if __name__ == "__main__":
    import xfuse

    model, inputs = make_gpt2()
    print(xfuse.explain(model, inputs))
    with torch.no_grad():
        error = (xfuse.compile(model, inputs)(*inputs) - model(*inputs)).abs().max()
    print(f"max error against eager: {error.item():.2e}")
