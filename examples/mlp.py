"""A two-layer MLP (Linear-ReLU-Linear): the smallest model with a fusion opportunity."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """Linear -> ReLU -> Linear."""

    def __init__(self, d_in: int = 512, d_hidden: int = 1024, d_out: int = 512):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def make_mlp(
    batch: int = 64, d_in: int = 512, d_hidden: int = 1024, d_out: int = 512, seed: int = 0
) -> tuple[MLP, tuple[torch.Tensor]]:
    """The model (in eval mode) and example inputs of shape [batch, d_in]."""
    torch.manual_seed(seed)
    model = MLP(d_in, d_hidden, d_out).eval()
    return model, (torch.randn(batch, d_in),)
