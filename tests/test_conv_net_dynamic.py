"""A small conv net (convolution, batch norm in eval, ReLU, depthwise convolution, global
average pooling, linear head) compiled with its batch and its image's height and width
symbolic, on the CPU: its kernels are compiled once for batch sizes 2..64 and three image
sizes, every call matches eager, and no group runs eagerly (strict mode). Batch size 1
specialises, as Inductor's does: `xfuse.compile` runs it through a static program compiled
per shape, `torch.compile` through another graph (dynamo's own specialisation), again without
eager groups.
Through `torch.compile`, dynamo's trace guards the batch at 16 (torch picks a convolution
backend by it), so batch sizes 2..64 are two graphs, each compiled once."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.export import Dim

import xfuse
from xfuse import dynamo
from xfuse.errors import DynamicShapesWarning, SymbolicSizeError
from xfuse.explanation import dynamic_explanation
from xfuse.runtime.dynamic import DynamicProgram

pytestmark = pytest.mark.usefixtures("no_fallback")

IMAGES = [(8, 10), (12, 6), (16, 14)]
"""Three image sizes (height, width), never square: dynamo would make equal sizes one symbol."""


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.conv(x)))
        h = torch.relu(self.depthwise(h))
        return self.head(self.pool(h).flatten(1))


def conv_net() -> ConvNet:
    torch.manual_seed(0)
    model = ConvNet().eval()
    mean, var = model.bn.running_mean, model.bn.running_var
    assert mean is not None and var is not None
    with torch.no_grad():  # batch statistics other than the identity
        mean.uniform_(-0.5, 0.5)
        var.uniform_(0.5, 2.0)
    return model


def test_compile_with_dynamic_shapes_compiles_once_for_every_size(
    compiled_kernels: list[str],
) -> None:
    model = conv_net()
    shapes = {"x": {0: Dim("batch", min=1, max=64), 2: Dim("h", max=32), 3: Dim("w", max=32)}}
    program = xfuse.compile(model, (torch.randn(4, 3, 8, 10),), dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    compiled = len(compiled_kernels)
    assert compiled == program.kernel_count >= 2
    with torch.no_grad():
        for height, width in IMAGES:
            for batch in range(2, 65):
                x = torch.randn(batch, 3, height, width)
                torch.testing.assert_close(program(x), model(x))
        assert len(compiled_kernels) == compiled  # nothing compiled again
        assert program.specialised is None
        for height, width in IMAGES:  # batch 1 specialises: a static program per shape
            x = torch.randn(1, 3, height, width)
            torch.testing.assert_close(program(x), model(x))
        assert program.specialised is not None
        assert len(program.specialised.specialisations) == len(IMAGES)
        with pytest.raises(SymbolicSizeError, match=r"is 65, outside its range \[2, 64\]"):
            program(torch.randn(65, 3, 8, 10))
    explanation = dynamic_explanation(program)
    assert [(s.source, s.dim, s.low, s.high) for s in explanation.symbols] == [
        ("x dim 0", "batch", 2, 64),
        ("x dim 2", "h", 2, 32),
        ("x dim 3", "w", 2, 32),
    ]
    assert explanation.fallbacks == [] and len(explanation.kernels) == program.kernel_count


def symbolic_programs() -> list[DynamicProgram]:
    """The symbolic programs of the graphs dynamo keeps compiled (`dynamo.BACKEND_PROGRAMS`)."""
    found = [getattr(p, "dynamic", None) for p in list(dynamo.BACKEND_PROGRAMS.values())]
    return [p for p in found if isinstance(p, DynamicProgram)]


def test_torch_compile_dynamic_compiles_once_per_graph_dynamo_traces(
    compiled_kernels: list[str],
) -> None:
    """Dynamo's trace of the convolutions guards on the batch size (torch picks a convolution
    backend by it: below 16 or not), so batch sizes 2..64 are two graphs, each compiled once
    for every size and image it serves; batch 1 is dynamo's specialisation, a third graph.
    The explanation of each names dynamo's guard."""
    model = conv_net()
    start = dict(dynamo.COMPILES)
    compiled = torch.compile(model, backend="xfuse", dynamic=True, options={"fallback": "error"})
    sizes: dict[str, list[int]] = {}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        for batch in range(2, 65):
            for height, width in IMAGES:
                x = torch.randn(batch, 3, height, width)
                torch.testing.assert_close(compiled(x), model(x))
            symbolic = dynamo.COMPILES["symbolic"] - start.get("symbolic", 0)
            sizes.setdefault(str(symbolic), []).append(len(compiled_kernels))
        assert sorted(sizes) == ["1", "2"]
        assert sizes["1"][0] == sizes["1"][-1] >= 2  # batch 2..15: kernels compiled once
        assert sizes["2"][0] == sizes["2"][-1] == 2 * sizes["1"][0]  # 16..64: once more
        assert len(sizes["1"]) == 14  # the second graph starts at batch 16
        for height, width in IMAGES:
            x = torch.randn(1, 3, height, width)
            torch.testing.assert_close(compiled(x), model(x))
    assert dynamo.COMPILES["symbolic"] - start.get("symbolic", 0) == 3
    assert dynamo.COMPILES["per-shape"] == start.get("per-shape", 0)
    explained = [dynamic_explanation(p) for p in symbolic_programs()]
    guards = [g for e in explained for g in e.guards if g.startswith("dynamo: ")]
    assert any(g.endswith("< 16") for g in guards) and any(g.endswith(">= 16") for g in guards)
    assert all(e.fallbacks == [] for e in explained)
