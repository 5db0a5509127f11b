"""`convolution-matmul`: a batch-1 1x1 convolution that torch runs on its slow path becomes the
matrix product that path computes, bit for bit eager's values; others stay library calls; and
`xfuse.compile` runs it on the CPU."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xfuse
from xfuse import interpret
from xfuse.api import device_passes, run_pipeline
from xfuse.frontend import import_module

CONV = "aten.convolution.default"


class Block(nn.Module):
    """A 1x1 convolution between eval batch-norm-like affines and ReLUs (ResNet's bottleneck)."""

    def __init__(self, channels: int, out: int, bias: bool, **conv: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, out, 1, bias=bias, **conv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(F.relu(x * 0.5 + 0.25)) * 0.75 - 0.1)


class AfterRelu(nn.Module):
    """A module's layer applied to a value the program makes (`relu` of the argument)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(F.relu(x))


def _count(module: object, name: str, target: str | None = None) -> int:
    return sum(
        op.name == name and (target is None or op.target.data == target)  # type: ignore[attr-defined]
        for op in module.walk()  # type: ignore[attr-defined]
    )


@contextmanager
def threads(n: int) -> Iterator[None]:
    """torch's thread count, which its choice of convolution path reads, set for a while."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_product_is_the_convolution_bit_for_bit(bias: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = Block(16, 24, bias).eval().to(dtype)
    x = torch.randn(1, 16, 7, 9, dtype=dtype)
    imported = import_module(model, (x,))
    args = imported.arguments(x)
    run_pipeline("decompose", imported.module)
    assert _count(imported.module, "graph.torch_call", CONV) == 1
    run_pipeline("convolution-matmul{every=true}", imported.module)
    imported.module.verify()
    assert _count(imported.module, "graph.torch_call", CONV) == 0
    if bias:
        assert _count(imported.module, "graph.torch_call", "aten.addmm.default") == 1
    else:
        assert _count(imported.module, "graph.matmul") == 1
    (got,) = interpret(imported.module, args)
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("name", "channels", "out", "conv", "shape", "dtype"),
    [
        ("3x3 window", 4, 4, {"kernel_size": 3}, (1, 4, 8, 8), torch.float32),
        ("stride 2", 4, 4, {"stride": 2}, (1, 4, 8, 8), torch.float32),
        ("padding", 4, 4, {"padding": 1}, (1, 4, 8, 8), torch.float32),
        ("grouped", 4, 4, {"groups": 2}, (1, 4, 8, 8), torch.float32),
        ("batch 2", 4, 4, {}, (2, 4, 8, 8), torch.float32),
        ("bf16", 4, 4, {}, (1, 4, 8, 8), torch.bfloat16),
    ],
)
def test_other_convolutions_stay_library_calls(
    name: str,
    channels: int,
    out: int,
    conv: dict[str, int],
    shape: tuple[int, ...],
    dtype: torch.dtype,
) -> None:
    model = AfterRelu(nn.Conv2d(channels, out, **{"kernel_size": 1, **conv})).eval().to(dtype)
    imported = import_module(model, (torch.randn(shape, dtype=dtype),))
    run_pipeline("decompose,convolution-matmul{every=true}", imported.module)
    assert _count(imported.module, "graph.torch_call", CONV) == 1, name
    assert _count(imported.module, "graph.matmul") == 0, name


def test_an_input_the_call_gives_stays_a_library_call() -> None:
    """An argument may come channels-last (then eager's convolution takes oneDNN): only a
    value the program makes (a contiguous kernel buffer) becomes the product's operand."""
    torch.manual_seed(2)
    model = nn.Conv2d(8, 4, 1).eval()
    x = torch.randn(1, 8, 6, 6)
    imported = import_module(model, (x,))
    run_pipeline("decompose,convolution-matmul{every=true}", imported.module)
    assert _count(imported.module, "graph.torch_call", CONV) == 1
    with torch.no_grad():
        compiled = xfuse.compile(model, (x,), quiet=True, fallback="error")
        cl = x.contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(compiled(cl), model(cl), rtol=0, atol=0)


def test_by_default_only_what_torch_runs_on_its_slow_path() -> None:
    """With two threads torch runs a batch-1 1x1 convolution of more than 20480 input elements
    with oneDNN, a smaller one on its slow path; with one thread, both on its slow path."""
    small = Block(16, 8, False).eval()
    large = Block(64, 8, False).eval()
    for n, rewritten in ((2, {16: True, 64: False}), (1, {16: True, 64: True})):
        with threads(n):
            for model, channels in ((small, 16), (large, 64)):
                x = torch.randn(1, channels, 18, 18)
                imported = import_module(model, (x,))
                run_pipeline("decompose,convolution-matmul", imported.module)
                matmuls = _count(imported.module, "graph.matmul")
                assert matmuls == int(rewritten[channels]), (n, channels)


def test_large_inputs_stay_library_calls_without_asking_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from xfuse.passes.transforms import convolution_matmul

    monkeypatch.setattr(convolution_matmul, "ASK_TORCH_MAX_ELEMENTS", 16 * 18 * 18 - 1)
    with threads(1):  # torch's slow path, were it asked
        imported = import_module(Block(16, 8, False).eval(), (torch.randn(1, 16, 18, 18),))
        run_pipeline("decompose,convolution-matmul", imported.module)
    assert _count(imported.module, "graph.torch_call", CONV) == 1


def test_xfuse_compile_runs_it_on_the_cpu_and_matches_eager() -> None:
    """The product reads the weight at each call (a changed weight changes the result), and
    the values are eager's bit for bit."""
    torch.manual_seed(1)
    model = Block(32, 16, True).eval()
    x = torch.randn(1, 32, 8, 8)
    with torch.no_grad(), threads(2):
        compiled = xfuse.compile(model, (x,), quiet=True, fallback="error")
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
        model.conv.weight.mul_(-1)
        model.conv.bias.add_(1)  # type: ignore[union-attr]
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
    module = compiled.default.program.module
    assert _count(module, "graph.torch_call", CONV) == 0


def test_it_runs_on_the_cpu_only_and_not_with_channels_last() -> None:
    def names(channels_last: bool | None, device: str) -> list[str]:
        return [p.name for p in device_passes(channels_last, torch.device(device))]

    assert "convolution-matmul" in names(None, "cpu")
    assert "convolution-matmul" not in names(True, "cpu")
    assert "convolution-matmul" not in names(None, "cuda")
