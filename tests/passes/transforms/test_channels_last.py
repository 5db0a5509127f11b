"""`channels-last`: the rewritten program means what it meant (the interpreter runs it with torch,
views and all), on convolutional programs of every shape the pass handles; the decision follows
Inductor's; `xfuse.compile`'s option picks the pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.export import Dim
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from examples.convnet import make_convnet
from examples.resnet import make_resnet18
from xfuse import interpret
from xfuse.dialects import graph
from xfuse.errors import XfuseError
from xfuse.frontend import import_module
from xfuse.interpreters.graph import bind_arguments, find_function
from xfuse.ir.context import parse
from xfuse.passes.transforms.channels_last import (
    ChannelsLastPass,
    Convolution,
    convolutions,
    layout_verdict,
    read_as_nhwc,
)
from xfuse.pipeline import CHANNELS_LAST_ENV, after_decompose, layout_pass, pipeline
from xfuse.runtime.cache import KernelCache
from xfuse.runtime.driver import run_pipeline
from xfuse.runtime.symbolic import DEFAULT_PASSES, SymbolicProgram, passes_text

Built = tuple[nn.Module, tuple[torch.Tensor, ...]]


class ConvNeXtBlock(nn.Module):
    """Depthwise conv, permute to NHWC, layer norm, MLP, permute back, residual (ConvNeXt)."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc1 = nn.Linear(c, 2 * c)
        self.fc2 = nn.Linear(2 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(nn.functional.gelu(self.fc1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


class MobileBlock(nn.Module):
    """Inverted residual with squeeze-excitation and hardswish (MobileNetV3), pooled by mean."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.expand = nn.Conv2d(c, 2 * c, 1)
        self.dw = nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c)
        self.se1 = nn.Conv2d(2 * c, c, 1)
        self.se2 = nn.Conv2d(c, 2 * c, 1)
        self.project = nn.Conv2d(2 * c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.hardswish(self.dw(self.expand(x)))
        s = y.mean(dim=(2, 3), keepdim=True)
        y = y * torch.sigmoid(self.se2(torch.relu(self.se1(s))))
        y = x + self.project(y)
        return nn.functional.avg_pool2d(y, 2).flatten(1)


class DenseBlock(nn.Module):
    """Two dense layers: each reads the concatenation of every feature map before it through
    batch norm and ReLU (DenseNet)."""

    def __init__(self, c: int = 8, growth: int = 4):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.norms = nn.ModuleList([nn.BatchNorm2d(c), nn.BatchNorm2d(c + growth)])
        self.convs = nn.ModuleList(
            [nn.Conv2d(c, growth, 3, padding=1), nn.Conv2d(c + growth, growth, 3, padding=1)]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [self.stem(x)]
        for norm, conv in zip(self.norms, self.convs, strict=True):
            features.append(conv(torch.relu(norm(torch.cat(features, 1)))))
        return torch.cat(features, 1)


class TokenConvBlock(nn.Module):
    """Tokens `[B, H*W, C]` seen as an image for a convolution and back (PVT's spatial
    reduction and depthwise MLP, SegFormer's Mix-FFN): `x.transpose(1, 2).reshape(B, C, H, W)`."""

    def __init__(self, c: int = 8, side: int = 4):
        super().__init__()
        self.side = side
        self.fc = nn.Linear(c, c)
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.sr = nn.Conv2d(c, c, 2, stride=2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, c = x.shape
        image = self.fc(x).transpose(1, 2).reshape(b, c, self.side, self.side)
        y = self.dw(image).flatten(2).transpose(1, 2)
        return y, self.sr(image)


MODELS: dict[str, Callable[[], Built]] = {
    "convnet": make_convnet,
    "resnet18": lambda: make_resnet18(width=8, size=32),
    "convnext": lambda: (ConvNeXtBlock().eval(), (torch.randn(2, 8, 8, 8),)),
    "mobile": lambda: (MobileBlock().eval(), (torch.randn(2, 8, 8, 8),)),
    "dense": lambda: (DenseBlock().eval(), (torch.randn(2, 3, 8, 8),)),
    "tokens": lambda: (TokenConvBlock().eval(), (torch.randn(2, 16, 8),)),
}


def rewrite_keeps_values(
    model: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...]
) -> ModuleOp:
    """`model` imported and decomposed, then rewritten by `channels-last` (forced): the
    rewritten module verifies and the interpreter gives the values it gave before the rewrite.
    The rewritten module, for the caller's checks of its ops."""
    imported = import_module(model, inputs)
    args = imported.arguments(*inputs)
    run_pipeline("decompose", imported.module)
    before = interpret(imported.module, args)
    run_pipeline("channels-last{force=true}", imported.module)
    imported.module.verify()
    for got, want in zip(interpret(imported.module, args), before, strict=True):
        torch.testing.assert_close(got, want)
    return imported.module


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_rewrite_keeps_the_meaning(name: str) -> None:
    module = rewrite_keeps_values(*MODELS[name]())
    ops = [op for op in module.walk() if isinstance(op, graph.TorchCallOp)]
    assert any(op.target.data == "aten.permute.default" for op in ops)


def test_convnext_permutes_cancel() -> None:
    model, inputs = MODELS["convnext"]()
    imported = import_module(model, inputs)
    run_pipeline("decompose,channels-last{force=true}", imported.module)
    permutes = [
        op.permutation
        for op in imported.module.walk()
        if isinstance(op, graph.PermuteOp) and len(op.permutation) == 4
    ]
    # The model's own permute(0, 2, 3, 1) is the convolution's NHWC view, and its permute back
    # is the residual add's operand, already NHWC: left are the residual input's read (NCHW,
    # fused into the add's kernel) and the output's permute (written NCHW by that kernel).
    assert permutes == [(0, 2, 3, 1), (0, 3, 1, 2)]


def test_concatenations_of_nhwc_features_stay_nhwc() -> None:
    """DenseNet's concatenations of convolution outputs join their NHWC values along the last
    dim, so the batch norm after each reads NHWC memory; only the program's output is NCHW."""
    module = rewrite_keeps_values(*MODELS["dense"]())
    concats = [op for op in module.walk() if isinstance(op, graph.ConcatOp)]
    # torch.cat of the stem's output alone is that output: two concatenations are left
    assert [op.axis for op in concats] == [3, 3]
    assert all(graph.shape_of(op.result)[1:3] == (8, 8) for op in concats)


def upsampled(x: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = nn.functional.interpolate(nn.functional.conv2d(x, w), scale_factor=1.5)
    return nn.functional.conv2d(y, v) + 1


def test_a_result_in_memory_order_reaches_the_next_convolution_as_a_view() -> None:
    """An upsample of channels-last memory is a torch call whose result is typed in torch's
    memory order (`orders`: [N, H, W, C]): the second convolution reads it through the
    importer's permute back, a view, with no channels-last copy of it; nor of the input, which
    is passed channels-last (`graph.channels_last`) and read as it lies."""
    x = torch.randn(2, 8, 8, 8).contiguous(memory_format=torch.channels_last)
    inputs = (x, torch.randn(8, 8, 3, 3), torch.randn(8, 8, 3, 3))
    module = rewrite_keeps_values(upsampled, inputs)
    calls = [op for op in module.walk() if isinstance(op, graph.TorchCallOp)]
    assert [c.memory_orders for c in calls if "upsample" in c.target.data] == [((0, 2, 3, 1),)]
    assert "aten.clone.default" not in [c.target.data for c in calls]


@pytest.mark.parametrize("batch", [1, 2])
def test_tokens_seen_as_an_image_reach_the_convolutions_as_views(batch: int) -> None:
    """The linear's `[B, H*W, C]` tokens are NHWC memory: each convolution reads them through
    a torch view, with no channels-last copy (at batch 1 too, where the batch dim's stride is
    any)."""
    module = rewrite_keeps_values(TokenConvBlock().eval(), (torch.randn(batch, 16, 8),))
    calls = [op.target.data for op in module.walk() if isinstance(op, graph.TorchCallOp)]
    assert "aten.clone.default" not in calls
    assert calls.count("aten.permute.default") >= 1


class _ConvRead(nn.Module):
    """A convolution whose result is read as `read` makes of it."""

    def __init__(self, read: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.conv, self.read = nn.Conv2d(4, 6, 3, padding=1), read

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.read(self.conv(x))


@pytest.mark.parametrize(
    ("read", "as_nhwc"),
    [
        (lambda y: y.permute(0, 2, 3, 1), True),  # ConvNeXt's
        (lambda y: y.flatten(2).transpose(1, 2), True),  # SegFormer's tokens
        (lambda y: y.transpose(1, 3).transpose(1, 2), True),
        (lambda y: y.flatten(2), False),
        (lambda y: y.permute(0, 3, 2, 1), False),  # [N, W, H, C]
        (torch.relu, False),
    ],
)
def test_results_read_back_as_tokens_are_found(
    read: Callable[[torch.Tensor], torch.Tensor], as_nhwc: bool
) -> None:
    """`read_as_nhwc`: what an NCHW result must be copied for, and an NHWC one need not."""
    module = import_module(_ConvRead(read).eval(), (torch.randn(2, 4, 5, 7),)).module
    (conv,) = convolutions(find_function(module, "forward").body.block)
    assert read_as_nhwc(conv.op.outputs[0]) == as_nhwc


def _body(text: str) -> ModuleOp:
    return parse(text)


def _verdict(module: ModuleOp, force: bool = False) -> str | None:
    f = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    return layout_verdict(f.body.block, force)


CONV = (
    'graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, '
    "[1 : i64, 1 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], "
    "1 : i64] kwargs = {} : (tensor<1x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<1x8x8x8xf32>"
)


def _convs(dtype: str, count: int, ops: int = 0) -> ModuleOp:
    """@f: `count` chained convolutions of `dtype`, then `ops` negations."""
    t = f"tensor<1x8x8x8x{dtype}>"
    conv = CONV.replace("f32", dtype)
    lines = [f"  %c0 = {conv.replace('(%x, %w)', '(%x, %w)')}"]
    for i in range(1, count):
        lines.append(f"  %c{i} = {conv.replace('(%x, %w)', f'(%c{i - 1}, %w)')}")
    last = f"%c{count - 1}"
    for i in range(ops):
        lines.append(f"  %r{i} = graph.neg {last} : {t}")
        last = f"%r{i}"
    w = f"tensor<8x8x3x3x{dtype}>"
    return _body(
        f"func.func @f(%x: {t}, %w: {w}) -> {t} {{\n"
        + "\n".join(lines)
        + f"\n  func.return {last} : {t}\n}}"
    )


def test_two_bf16_convolutions_go_channels_last() -> None:
    assert _verdict(_convs("bf16", 2)) is None
    assert _verdict(_convs("f16", 3)) is None


def test_f32_or_single_convolutions_stay_nchw() -> None:
    """cuDNN's NHWC f32 kernels, and one strided patch convolution, are slower (H100)."""
    assert _verdict(_convs("f32", 2)) == (
        "f32 convolutions (cuDNN's NHWC f32 kernels are slower: ResNet f32 on an H100)"
    )
    assert _verdict(_convs("bf16", 1)).startswith("one convolution")  # type: ignore[union-attr]
    assert _verdict(_convs("f32", 1), force=True) is None


def test_on_the_cpu_every_program_with_a_convolution_goes_channels_last() -> None:
    """oneDNN reorders NCHW activations around each convolution, whatever its dtype."""
    f = next(op for op in _convs("f32", 1, ops=599).walk() if isinstance(op, func.FuncOp))
    assert layout_verdict(f.body.block, target="cpu") is None
    assert ChannelsLastPass(target="cpu").verdict(f.body.block) is None
    assert ChannelsLastPass(target="cuda").verdict(f.body.block) is not None
    with pytest.raises(ValueError, match="option 'target' must be one of cpu, cuda"):
        ChannelsLastPass(target="tpu")


def test_a_few_convolutions_among_many_ops_stay_nchw() -> None:
    module = _convs("bf16", 2, ops=599)
    assert _verdict(module) == "2 convolutions among 602 ops"  # with the return
    assert _verdict(module, force=True) is None


def test_a_program_without_convolutions_is_left_alone() -> None:
    module = _body(
        "func.func @f(%x: tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32> {\n"
        "  %r = graph.relu %x : tensor<1x8x8x8xf32>\n  func.return %r : tensor<1x8x8x8xf32>\n}"
    )
    text = str(module)
    assert _verdict(module, force=True) == "no 2-D convolution"
    pipeline("channels-last{force=true}")(module)
    assert str(module) == text


def test_the_compile_option_picks_the_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv(CHANNELS_LAST_ENV, raising=False)
    assert layout_pass(None, cpu) == ChannelsLastPass(force=False, target="cpu")
    assert layout_pass(None, cuda) == ChannelsLastPass(force=False, target="cuda")
    assert layout_pass(True, cpu) == ChannelsLastPass(force=True, target="cpu")
    assert layout_pass(False, cuda) is None
    monkeypatch.setenv(CHANNELS_LAST_ENV, "1")
    assert layout_pass(None, cpu) == ChannelsLastPass(force=True, target="cpu")
    assert layout_pass(False, cpu) is None  # the argument wins over the environment
    monkeypatch.setenv(CHANNELS_LAST_ENV, "0")
    assert layout_pass(None, cuda) is None
    monkeypatch.setenv(CHANNELS_LAST_ENV, "yes")
    with pytest.raises(XfuseError, match="XFUSE_CHANNELS_LAST must be 0, 1 or auto"):
        layout_pass(None, cuda)


def test_the_pass_runs_after_decompose() -> None:
    layout = ChannelsLastPass()
    passes = pipeline("decompose,fuse-scored").passes
    assert [p.name for p in after_decompose(passes, [layout])] == [
        "decompose",
        "channels-last",
        "fuse-scored",
    ]
    assert [p.name for p in after_decompose(pipeline("fuse-greedy").passes, [layout])] == [
        "channels-last",
        "fuse-greedy",
    ]
    assert after_decompose(passes, ()) == passes


SYMBOLIC_SIZES = [(2, 8, 10), (5, 12, 6), (3, 10, 14)]
"""(batch, height, width) of the calls of a symbolic program: never square, so that no size
is another symbol's."""


def _symbolic(model: nn.Module, x: torch.Tensor, passes: str) -> tuple[Any, SymbolicProgram]:
    """`model` imported with its batch (and an image's height and width) symbolic, built with
    `passes`."""
    dims = {0: Dim("batch", min=2, max=64)}
    if x.dim() == 4:
        dims |= {2: Dim("h", min=4, max=64), 3: Dim("w", min=4, max=64)}
    program = import_module(model, (x,), dynamic_shapes=(dims,))
    return program, SymbolicProgram(program.module, passes=passes, cache=KernelCache(None))


POOL_PARITY_GUARD = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 13),
    reason="torch.export before 2.13 guards on the parity of a pooling's input size, which no "
    "Dim range satisfies",
)


@pytest.mark.parametrize(
    "name",
    ["convnet", "convnext", pytest.param("mobile", marks=POOL_PARITY_GUARD), "dense", "tokens"],
)
def test_a_symbolic_program_is_rewritten_once_for_every_size(name: str) -> None:
    """With the batch, and an image's height and width, symbolic, the rewrite keeps the size
    symbols: each convolution reads a channels-last view or copy (or another convolution's
    channels-last result), and the one program's
    kernels give eager's values at sizes of every symbol."""
    model, (x,) = MODELS[name]()
    program, compiled = _symbolic(
        model, x, passes_text(cuda=False, layout=ChannelsLastPass(force=True))
    )
    convs = [c.op for c in convolutions(find_function(compiled.fused, "forward").body.block)]
    assert convs
    for conv in convs:
        source = conv.operands[0].owner
        assert isinstance(source, graph.TorchCallOp)
        views = ("aten.permute.default", "aten.clone.default")
        assert source.target.data in views or Convolution.of(source) is not None
    for batch, height, width in SYMBOLIC_SIZES:
        shape = (batch, x.shape[1], height, width) if x.dim() == 4 else (batch, *x.shape[1:])
        y = torch.randn(shape)
        got = compiled(*bind_arguments(program.function, [y], program.params))
        with torch.no_grad():
            want = model(y)
        for g, w in zip(got, want if isinstance(want, tuple) else (want,), strict=True):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_symbolic_program_is_weighed_at_its_size_hints(dtype: torch.dtype) -> None:
    """The decision on a program with size symbols weighs its convolutions at the example's
    sizes: the verdict of the static program of those sizes."""
    model, (x,) = make_convnet()
    model, x = model.to(dtype), x.to(dtype)
    static = import_module(model, (x,))
    symbolic, _ = _symbolic(model, x, DEFAULT_PASSES)
    for imported in (static, symbolic):
        run_pipeline("decompose", imported.module)
    verdicts = [_verdict(p.module) for p in (static, symbolic)]
    assert verdicts[0] == verdicts[1]
    assert (verdicts[0] is None) == (dtype == torch.bfloat16)
