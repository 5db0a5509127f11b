"""`convolution-matmul`: a batch-1 1x1 convolution that torch runs on its slow path becomes the
matrix product that path computes, bit for bit eager's values (of stride 2: the product at full
resolution, sampled); a larger window of stride 2 becomes its patches times the weight,
transposed; others stay library calls; and `xfuse.compile` runs it on the CPU for programs that
stay NCHW (`channels_last=False`, or the layout measured so: `xfuse.choices.chosen_layout`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xfuse
from xfuse import interpret
from xfuse.frontend import import_module
from xfuse.pipeline import device_passes
from xfuse.runtime.driver import run_pipeline

CONV = "aten.convolution.default"


class Block(nn.Module):
    """A convolution (1x1 unless told) between eval batch-norm-like affines and ReLUs (ResNet's
    bottleneck)."""

    def __init__(self, channels: int, out: int, bias: bool, **conv: Any) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, out, bias=bias, **{"kernel_size": 1, **conv})

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


def _rewritten(model: nn.Module, x: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """`model` imported, decomposed and through `convolution-matmul{every=true}` (verified, no
    convolution left), and the interpreter's result of the rewritten module on `x`."""
    imported = import_module(model, (x,))
    args = imported.arguments(x)
    run_pipeline("decompose,convolution-matmul{every=true}", imported.module)
    imported.module.verify()
    assert _count(imported.module, "graph.torch_call", CONV) == 0
    (got,) = interpret(imported.module, args)
    return imported.module, got


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
        ("5x5 window of stride 1", 4, 4, {"kernel_size": 5}, (1, 4, 8, 8), torch.float32),
        ("stride 3", 4, 4, {"stride": 3}, (1, 4, 8, 8), torch.float32),
        ("padding", 4, 4, {"padding": 1}, (1, 4, 8, 8), torch.float32),
        (
            "dilation",
            4,
            4,
            {"kernel_size": 3, "stride": 2, "dilation": 2},
            (1, 4, 8, 8),
            torch.float32,
        ),
        ("large patches", 64, 128, {"kernel_size": 3}, (1, 64, 24, 24), torch.float32),
        ("many pixels per channel", 4, 4, {"kernel_size": 3}, (1, 4, 16, 16), torch.float32),
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
    assert _count(imported.module, "graph.patches") == 0, name


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(1, 16, 8, 8), (1, 16, 7, 9)])
def test_a_strided_one_is_the_full_product_sampled(
    bias: bool, dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    """Stride 2: the product at full resolution (odd sizes too), every second pixel read; the
    same dot products, so eager's values to `assert_close` (BLAS may order them otherwise)."""
    torch.manual_seed(3)
    model = Block(16, 24, bias, stride=2).eval().to(dtype)
    x = torch.randn(shape, dtype=dtype)
    module, got = _rewritten(model, x)
    assert _count(module, "graph.slice") == 1
    with torch.no_grad():
        torch.testing.assert_close(got, model(x))


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "shape"),
    [
        (3, 2, 1, (1, 8, 8, 8)),
        (3, 2, 0, (1, 5, 7, 9)),
        (2, 2, 0, (1, 6, 6, 5)),
        ((3, 1), (2, 1), (1, 0), (1, 4, 9, 4)),
        (5, 3, 2, (1, 3, 10, 11)),
    ],
)
@pytest.mark.parametrize("bias", [False, True])
def test_a_larger_window_is_its_patches_times_the_weight(
    kernel: Any, stride: Any, padding: Any, shape: tuple[int, ...], bias: bool
) -> None:
    """A window larger than 1x1 (of a value the program makes, read at most 9 times per
    element): `graph.patches`, seen as a matrix, times the weight; eager's values, from the
    interpreter and from compiled kernels."""
    torch.manual_seed(4)
    conv = {"kernel_size": kernel, "stride": stride, "padding": padding}
    model = Block(shape[1], 6, bias, **conv).eval()
    x = torch.randn(shape)
    module, got = _rewritten(model, x)
    assert _count(module, "graph.patches") == 1
    with torch.no_grad():
        want = model(x)
        torch.testing.assert_close(got, want)
        compiled = xfuse.compile(model, (x,), quiet=True, fallback="error")
        torch.testing.assert_close(compiled(x), want)


def test_a_program_input_gets_patches_of_its_own() -> None:
    """ViT's patch embedding (a 4x4 window of stride 4 on the image), whatever backend torch
    would pick: its patches are a kernel of their own (there is no producer to compute), the
    product runs in BLAS's faster orientation, and a channels-last argument gives the same
    values."""
    torch.manual_seed(6)
    model = nn.Sequential(nn.Conv2d(3, 32, 4, stride=4, bias=False), nn.ReLU()).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        compiled = xfuse.compile(model, (x,), quiet=True, fallback="error", channels_last=False)
        torch.testing.assert_close(compiled(x), model(x))
        cl = x.contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(compiled(cl), model(cl))
    module = compiled.default.program.module
    assert _count(module, "graph.torch_call", CONV) == 0
    assert _count(module, "graph.patches") == 1
    assert len(compiled.kernels) == 2  # the patches; the ReLU, reading the product as NCHW


def test_patches_are_torch_unfold_laid_out_by_position() -> None:
    """The interpreter's `graph.patches` against `F.unfold`'s columns, integers included."""
    from xfuse.dialects import graph
    from xfuse.interpreters.graph import POOL_IMPLS

    for dtype in (torch.float32, torch.int64):
        x = torch.randint(-9, 9, (3, 7, 6)).to(dtype)
        op = graph.PatchesOp(_typed_input(x), (3, 2), (2, 2), (1, 1))
        got = POOL_IMPLS["graph.patches"](op, [x])
        cols = F.unfold(x.double()[None], (3, 2), padding=(1, 1), stride=(2, 2))[0]
        oh, ow = got.shape[:2]
        want = cols.reshape(3, 3, 2, oh, ow).permute(3, 4, 0, 1, 2).to(dtype)
        assert got.is_contiguous() and torch.equal(got, want)


def _typed_input(x: torch.Tensor) -> Any:
    """A block argument of `x`'s tensor type (an operand for building an op)."""
    from xdsl.dialects.builtin import TensorType
    from xdsl.ir import Block

    from xfuse.ir import dtypes

    return Block(arg_types=[TensorType(dtypes.from_torch(x.dtype), x.shape)]).args[0]


def test_patches_take_in_their_producer_so_no_kernel_is_added() -> None:
    """ResNet's downsampling shapes, compiled: an affine and ReLU read only by a 3x3
    convolution of stride 2 are computed where its patch kernel reads them, and a sum reads a
    1x1 convolution of stride 2's sampled product in place: two kernels each, as with the
    library calls (one before the convolution, one after)."""

    class Down(nn.Module):
        def __init__(self, window: int) -> None:
            super().__init__()
            padding = window // 2
            self.conv = nn.Conv2d(16, 32, window, stride=2, padding=padding, bias=False)
            self.up = nn.Conv2d(16, 32, 1, stride=2, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.relu(x * 0.5 + 0.25)
            if self.conv.kernel_size == (1, 1):  # two sampled products of y, summed
                return F.relu(self.conv(y) * 0.75 + self.up(y) * 0.25)
            return F.relu(self.conv(y) * 0.75 - 0.1)

    torch.manual_seed(5)
    x = torch.randn(1, 16, 8, 8)
    for window, rewritten, count in ((3, "graph.patches", 1), (1, "graph.slice", 2)):
        model = Down(window).eval()
        with torch.no_grad(), threads(2):
            compiled = xfuse.compile(model, (x,), quiet=True, fallback="error", channels_last=False)
            torch.testing.assert_close(compiled(x), model(x))
        module = compiled.default.program.module
        assert _count(module, "graph.torch_call", CONV) == 0, window
        assert _count(module, rewritten) == count, window
        assert len(compiled.kernels) == 2, window


def test_xfuse_compile_runs_it_on_the_cpu_and_matches_eager() -> None:
    """The product reads the weight at each call (a changed weight changes the result), and
    the values are eager's bit for bit."""
    torch.manual_seed(1)
    model = Block(32, 16, True).eval()
    x = torch.randn(1, 32, 8, 8)
    with torch.no_grad(), threads(2):
        compiled = xfuse.compile(model, (x,), quiet=True, fallback="error", channels_last=False)
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
        model.conv.weight.mul_(-1)
        model.conv.bias.add_(1)  # type: ignore[union-attr]
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)
    module = compiled.default.program.module
    assert _count(module, "graph.torch_call", CONV) == 0


def test_it_runs_on_the_cpu_only_and_not_with_channels_last() -> None:
    def names(channels_last: bool | None, device: str) -> list[str]:
        return [p.name for p in device_passes(channels_last, torch.device(device))]

    assert "convolution-matmul" in names(False, "cpu")
    assert "convolution-matmul" not in names(None, "cpu")  # unless the layout is measured NCHW
    assert "convolution-matmul" not in names(True, "cpu")
    assert "convolution-matmul" not in names(None, "cuda")
