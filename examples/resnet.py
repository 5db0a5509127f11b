"""ResNet-18 after torchvision's `resnet18` (BasicBlock, layers [2, 2, 2, 2]), written with plain
torch modules (torchvision is not installed next to this torch) and random weights.

Convolutions and max-pooling stay extern (`graph.torch_call`, run by torch); eval-mode batch
norm imports as elementwise ops, so each BatchNorm fuses with the ReLU and the residual add
after it into one kernel.

    python -m examples.resnet          # the fusion report, and the error against eager
"""

from __future__ import annotations

import torch
from torch import nn


def conv3x3(inputs: int, outputs: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    """conv3x3-bn-relu-conv3x3-bn, plus the (downsampled) input, relu."""

    expansion = 1

    def __init__(self, inputs: int, outputs: int, stride: int = 1):
        super().__init__()
        self.conv1 = conv3x3(inputs, outputs, stride)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(outputs, outputs)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.downsample: nn.Module | None = None
        if stride != 1 or inputs != outputs:
            self.downsample = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision's ResNet-18: a 7x7 stem, four stages of two BasicBlocks, average pooling
    and a linear classifier."""

    def __init__(self, classes: int = 1000, width: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        widths = [width, 2 * width, 4 * width, 8 * width]
        stages: list[nn.Module] = []
        inputs = width
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            stages.append(nn.Sequential(BasicBlock(inputs, w, stride), BasicBlock(w, w)))
            inputs = w
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inputs, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def randomize_batchnorm(model: nn.Module) -> None:
    """Fresh statistics are 0 and 1, under which a wrong normalisation would not show."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)


def make_resnet18(
    batch: int = 1, size: int = 64, width: int = 64, seed: int = 0
) -> tuple[ResNet18, tuple[torch.Tensor]]:
    """The model in eval mode (random weights, randomised BatchNorm statistics) and an input
    [batch, 3, size, size]."""
    torch.manual_seed(seed)
    model = ResNet18(width=width)
    randomize_batchnorm(model)
    return model.eval(), (torch.randn(batch, 3, size, size),)


if __name__ == "__main__":
    import xfuse

    model, inputs = make_resnet18()
    print(xfuse.explain(model, inputs))
    with torch.no_grad():
        error = (xfuse.compile(model, inputs)(*inputs) - model(*inputs)).abs().max()
    print(f"max error against eager: {error.item():.2e}")
