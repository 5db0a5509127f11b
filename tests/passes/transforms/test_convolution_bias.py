"""`convolution-bias`: a convolution's bias becomes a graph add after it, which fuses with
what reads the convolution; the program computes what it did, and what eager computes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xfuse
from tests.backends.test_cuda import gpu
from xfuse import interpret
from xfuse.dialects import graph
from xfuse.frontend import import_module
from xfuse.frontend.convolution import ConvolutionCall

WITH_BIAS = "decompose,convolution-bias,split-reductions,fuse-scored,group-cleanup,fold-linear"


class ConvNorm(torch.nn.Module):
    """A convolution with a bias (depthwise or not), then a GELU: the bias's add fuses with it."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.conv(x))


def convolutions(module: object) -> list[ConvolutionCall]:
    calls = (ConvolutionCall.of(op) for op in module.walk() if isinstance(op, graph.TorchCallOp))  # type: ignore[attr-defined]
    return [c for c in calls if c is not None]


@pytest.mark.parametrize("groups", [1, 8])
def test_the_program_interprets_as_before(groups: int) -> None:
    model = ConvNorm(groups).eval()
    x = torch.randn(2, 8, 6, 6)
    imported = import_module(model, (x,))
    args = imported.arguments(x)
    xfuse.pipeline("decompose")(imported.module)
    before = interpret(imported.module, args)
    xfuse.pipeline("convolution-bias")(imported.module)
    (conv,) = convolutions(imported.module)
    assert conv.bias is None
    torch.testing.assert_close(interpret(imported.module, args), before)


def test_the_add_fuses_with_the_convolutions_reader() -> None:
    model = ConvNorm(1).eval()
    x = torch.randn(2, 8, 6, 6)
    with torch.no_grad():
        explained = xfuse.explain(model, (x,), pipeline=WITH_BIAS)
        compiled = xfuse.compile(model, (x,), pipeline=WITH_BIAS, quiet=True)
        torch.testing.assert_close(compiled(x), model(x))
    (group,) = explained.groups
    assert {"graph.add", "graph.erf"} <= set(group.ops), group.ops


def rmse(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).pow(2).mean().sqrt())


def test_bf16_is_as_close_to_the_exact_result_as_eager() -> None:
    """In bf16 the convolution is rounded before its bias is added, as cuDNN's convolution
    and torch's add after it do (a library adding it as it writes rounds once): against the
    f64 result, no worse than twice eager's error."""
    model = ConvNorm(8).to(torch.bfloat16).eval()
    x = torch.randn(2, 8, 6, 6, dtype=torch.bfloat16)
    with torch.no_grad():
        compiled = xfuse.compile(model, (x,), pipeline=WITH_BIAS, quiet=True)
        exact = ConvNorm(8).double().eval()
        exact.load_state_dict(model.state_dict())
        want = exact(x.double())
        assert rmse(compiled(x), want) <= 2 * rmse(model(x), want)


@gpu
@pytest.mark.parametrize("groups", [1, 8])
def test_cuda_program_adds_the_bias_in_the_readers_kernel(groups: int) -> None:
    """On CUDA `xfuse.compile` runs the pass: the convolution (cuDNN's, or the depthwise
    stencil, which sums in f32 and rounds once), then one kernel of the bias and the GELU. In
    bf16 eager rounds the convolution and the add apart, so against the f64 result the
    program's error is no worse than twice eager's."""
    model = ConvNorm(groups).to("cuda", torch.bfloat16).eval()
    x = torch.randn(4, 8, 16, 16, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        explained = xfuse.explain(model, (x,), "cuda")
        compiled = xfuse.compile(model, (x,), "cuda", quiet=True)
        exact = ConvNorm(groups).to("cuda", torch.float64).eval()
        exact.load_state_dict(model.state_dict())
        want = exact(x.double())
        assert rmse(compiled(x), want) <= 2 * rmse(model(x), want)
    assert any({"graph.add", "graph.erf"} <= set(g.ops) for g in explained.groups)
    assert not any("convolution" in op and "%t2" in op for op in explained.ops)
