"""A model with a custom operator that xfuse cannot see into: `xfuse_examples::soft_clip`, a
`torch.library` custom op. torch.export keeps it as one node; xfuse imports it as a
`graph.torch_call` that runs eagerly (a fusion boundary), and fuses what is around it.

    python -m examples.custom_op       # the fusion report, and the error against eager
"""

from __future__ import annotations

import torch
from torch import nn


@torch.library.custom_op("xfuse_examples::soft_clip", mutates_args=())
def soft_clip(x: torch.Tensor, limit: float) -> torch.Tensor:
    """limit * tanh(x / limit): a smooth clamp to (-limit, limit)."""
    return limit * torch.tanh(x / limit)


@soft_clip.register_fake
def _(x: torch.Tensor, limit: float) -> torch.Tensor:
    return torch.empty_like(x)


class SoftClipMLP(nn.Module):
    """linear, relu, soft_clip (custom), a scale and shift, linear."""

    def __init__(self, features: int = 32, hidden: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x) * 0.5 + 0.1)
        h = soft_clip(h, 2.0)
        return self.fc2(h * 1.5 - 0.25).sigmoid()


def make_custom_op_model(
    batch: int = 8, features: int = 32, seed: int = 0
) -> tuple[SoftClipMLP, tuple[torch.Tensor]]:
    torch.manual_seed(seed)
    return SoftClipMLP(features).eval(), (torch.randn(batch, features),)


if __name__ == "__main__":
    import xfuse

    model, inputs = make_custom_op_model()
    print(xfuse.explain(model, inputs))
    with torch.no_grad():
        error = (xfuse.compile(model, inputs)(*inputs) - model(*inputs)).abs().max()
    print(f"max error against eager: {error.item():.2e}")
