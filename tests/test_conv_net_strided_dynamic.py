"""Conv nets with stride-2 convolutions and pooling compiled with their batch and image height
and width symbolic, on the CPU: the output sizes of strided windows are floor divisions of
the input sizes (`e0 = (s1 + 1) floordiv 2`, xfuse/dialects/graph/sizes.py), their kernels are
compiled once for every batch size and image size (odd and even), and every call matches
eager. Sizes whose floor divisions would be 1 are outside the program's ranges: torch.export
refuses a `Dim` that allows them, and a call with one raises `SymbolicSizeError`."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.export import Dim

import xfuse
from xfuse import dynamo
from xfuse.errors import DynamicShapesWarning, ExportError, SymbolicSizeError
from xfuse.runtime.dynamic import DynamicProgram

pytestmark = pytest.mark.usefixtures("no_fallback")

IMAGES = [(32, 32), (40, 33), (17, 64), (9, 12), (23, 8)]
"""Heights and widths, odd and even."""


def strided_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, 2, 1),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    ).eval()


class Residual(torch.nn.Module):
    """A ResNet basic block that halves the image: a 3x3 stride-2 convolution, batch norm and
    ReLU, a 3x3 convolution and batch norm, plus a 1x1 stride-2 convolution of the input."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.down = torch.nn.Sequential(
            torch.nn.Conv2d(cin, cout, 1, stride=2, bias=False), torch.nn.BatchNorm2d(cout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + self.down(x))


class ResNetLike(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(3, 2, 1),
        )
        self.stage1 = Residual(8, 16)
        self.stage2 = Residual(16, 32)
        self.pool = torch.nn.AvgPool2d(2, 1)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(self.stage2(self.stage1(self.stem(x))))
        return self.head(h.mean((2, 3)))


def resnet_like() -> ResNetLike:
    torch.manual_seed(0)
    model = ResNetLike().eval()
    with torch.no_grad():  # batch statistics other than the identity
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                assert m.running_mean is not None and m.running_var is not None
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model


def compile_dynamic(model: torch.nn.Module, low: int) -> DynamicProgram:
    shapes = (
        {0: Dim("b", min=2, max=64), 2: Dim("h", min=low, max=512), 3: Dim("w", min=low, max=512)},
    )
    example = torch.randn(2, 3, max(32, low), max(32, low))
    program = xfuse.compile(model, (example,), dynamic_shapes=shapes)
    assert isinstance(program, DynamicProgram)
    return program


def test_a_stride_2_net_compiles_once_for_every_size(compiled_kernels: list[str]) -> None:
    model = strided_net()
    program = compile_dynamic(model, 8)
    assert "(s" in program.symbols and ") floordiv 2" in program.symbols
    assert ") floordiv 4" in program.symbols  # the pooling after the convolution
    compiled = len(compiled_kernels)
    assert compiled == program.kernel_count >= 2
    with torch.no_grad():
        for height, width in IMAGES:
            for batch in (2, 3, 5, 64):
                x = torch.randn(batch, 3, height, width)
                torch.testing.assert_close(program(x), model(x))
    assert len(compiled_kernels) == compiled  # nothing compiled again
    assert program.specialised is None


def test_a_resnet_like_net_compiles_once_for_every_size(compiled_kernels: list[str]) -> None:
    model = resnet_like()
    program = compile_dynamic(model, 64)
    compiled = len(compiled_kernels)
    assert compiled == program.kernel_count >= 3
    with torch.no_grad():
        for height, width in [(64, 64), (65, 97), (80, 127), (128, 70)]:
            for batch in (2, 7):
                x = torch.randn(batch, 3, height, width)
                torch.testing.assert_close(program(x), model(x))
    assert len(compiled_kernels) == compiled


def test_sizes_whose_floor_divisions_would_be_1_are_refused_in_one_line() -> None:
    """The pooling's output (h + 3) floordiv 4 is 1 for h < 5: torch.export refuses a `Dim`
    from 2, and a program from 5 refuses a call at 4 (eager's answer is never replaced by a
    wrong one)."""
    model = strided_net()
    with pytest.raises(ExportError, match="Constraints violated"):
        compile_dynamic(model, 2)
    program = compile_dynamic(model, 5)
    with torch.no_grad():
        x = torch.randn(2, 3, 5, 6)
        torch.testing.assert_close(program(x), model(x))
        with pytest.raises(SymbolicSizeError, match=r"is 4, outside its range \[5, 512\]") as e:
            program(torch.randn(2, 3, 4, 6))
    assert "\n" not in str(e.value)


def test_torch_compile_dynamic_compiles_a_stride_2_net_once(compiled_kernels: list[str]) -> None:
    """Dynamo makes a square image's height and width one symbol: the first call's square
    image is a graph of its own, every later (non-square) size one symbolic graph."""
    model = strided_net()
    start = dict(dynamo.COMPILES)
    compiled = torch.compile(model, backend="xfuse", dynamic=True, options={"fallback": "error"})
    counts: list[int] = []
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", DynamicShapesWarning)
        for height, width in IMAGES[1:]:
            for batch in (2, 5):
                x = torch.randn(batch, 3, height, width)
                torch.testing.assert_close(compiled(x), model(x))
                counts.append(len(compiled_kernels))
    assert dynamo.COMPILES["symbolic"] - start.get("symbolic", 0) == 1
    assert dynamo.COMPILES["per-shape"] == start.get("per-shape", 0)
    assert counts[0] == counts[-1] >= 2  # kernels compiled once
