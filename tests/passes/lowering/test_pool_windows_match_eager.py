"""Pools compiled end to end (xfuse.compile on the CPU, after a batch norm and SiLU that the
pool's kernel may take in) against eager: every combination of ceil_mode, count_include_pad
and divisor_override, for windows unrolled, looped, and larger than their input."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xfuse

Pool = Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, torch.Tensor]]


class BatchNormSiLUPool(nn.Module):
    def __init__(self, channels: int, pool: Pool) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.pool = pool
        with torch.no_grad():  # running statistics and affine weights other than the defaults
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 2)
            self.bn.bias.uniform_(-1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.pool(F.silu(self.bn(x)))


def check_against_eager(pool: Pool, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = BatchNormSiLUPool(shape[1], pool).eval()
    x = torch.randn(shape)
    with torch.no_grad():
        want = model(x)
        got = xfuse.compile(model, (x,), "cpu", quiet=True, fallback="error")(x)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("divisor", [None, 5])
@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("ceil", [True, False])
@pytest.mark.parametrize(
    ("kernel", "stride", "padding"),
    [(3, 2, 1), ((6, 7), (3, 2), (3, 2)), (40, 40, 18), ((40, 9), (16, 5), (20, 4))],
)
def test_avg_pool(kernel, stride, padding, ceil: bool, include: bool, divisor) -> None:  # noqa: ANN001
    check_against_eager(
        lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil, include, divisor), (1, 4, 7, 9)
    )


def test_avg_pool_of_a_huge_window_over_a_small_map() -> None:
    """transformers' EfficientNet head: AvgPool2d(1280, ceil_mode=True) over 2x2."""
    check_against_eager(nn.AvgPool2d(1280, ceil_mode=True), (1, 8, 2, 2))


@pytest.mark.parametrize("indices", [False, True])
@pytest.mark.parametrize("ceil", [True, False])
@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation"),
    [(3, 2, 1, 1), ((6, 7), (3, 2), (3, 2), 1), (40, 40, 20, 1), ((6, 6), 2, 3, 2)],
)
def test_max_pool(kernel, stride, padding, dilation, ceil: bool, indices: bool) -> None:  # noqa: ANN001
    check_against_eager(
        lambda x: F.max_pool2d(x, kernel, stride, padding, dilation, ceil, indices), (1, 4, 7, 9)
    )
