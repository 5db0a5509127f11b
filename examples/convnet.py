"""A small residual conv net: convolutions stay extern (`graph.torch_call` to aten.convolution,
run by torch) while BatchNorm (eval), ReLU and the residual adds between them fuse."""

from __future__ import annotations

import torch
from torch import nn


class ResidualBlock(nn.Module):
    """conv-bn-relu-conv-bn, + x, relu."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class ConvNet(nn.Module):
    """A stem conv, two residual blocks, global average pooling and a linear classifier."""

    def __init__(self, channels: int = 16, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.blocks = nn.Sequential(ResidualBlock(channels), ResidualBlock(channels))
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.stem(x)))
        x = self.blocks(x)
        return self.head(x.mean(dim=(2, 3)))


def _randomize_batchnorm(model: nn.Module) -> None:
    # Fresh BatchNorm statistics are 0 and 1: give them values so that a wrong fusion shows.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)


def make_convnet(
    batch: int = 8, channels: int = 16, size: int = 32, seed: int = 0
) -> tuple[ConvNet, tuple[torch.Tensor]]:
    """The model (in eval mode, BatchNorm statistics randomised) and inputs [batch, 3, size, size]."""
    torch.manual_seed(seed)
    model = ConvNet(channels)
    _randomize_batchnorm(model)
    return model.eval(), (torch.randn(batch, 3, size, size),)
