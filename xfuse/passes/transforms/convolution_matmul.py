"""
`convolution-matmul`: a batch-1 convolution on the CPU becomes one matrix product: a 1x1 one
that torch runs with its slow im2col path, the product that path computes (of stride 2, that
product at full resolution, every second pixel of it read); a larger window with small patches,
its patches times the weight, in the orientation BLAS runs faster.

For a small batch-1 input torch's CPU convolution leaves oneDNN for `_slow_conv2d_forward`
(`torch._C._select_conv_backend` says `Slow2d`): it multiplies the weight, seen as
`[O, C*kh*kw]`, by the input's patches with one BLAS call. For a 1x1 window of stride 1
without padding the patches are the input itself, seen as `[C, H*W]`, so the convolution is
that product alone. For ResNet's and MobileNetV2's 1x1 convolutions (8-256 channels, 2x2 to
32x32) the convolution call takes longer than the product alone: the rest is the call's
dispatch and checks. The product is the same BLAS call on the same
matrices, so the values are eager's bit for bit; a bias is added by `addmm`, which fills the
result with it and accumulates the product onto it, as the slow path does. The input must be
made by the program (a kernel's contiguous buffer: an argument could come channels-last, and
then eager takes oneDNN); torch's choice is asked for contiguous tensors, so a weight kept
channels-last (`model.to(memory_format=torch.channels_last)`) gives the slow path's values,
not oneDNN's (the same to `assert_close`, not bit for bit).

    %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1, 1], [0, 0], [1, 1], false, [0, 0], 1] ... -> tensor<1x8x4x4xf32>
      ->
    %c = graph.reshape %x : tensor<1x16x4x4xf32> -> tensor<16x16xf32>
    %w2 = graph.reshape %w : tensor<8x16x1x1xf32> -> tensor<8x16xf32>
    %m = graph.matmul %w2, %c : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
    %y = graph.reshape %m : tensor<8x16xf32> -> tensor<1x8x4x4xf32>

A 1x1 window of stride 2 (ResNet's shortcut convolutions) samples its input: its patches are a
strided copy. Its value is the full-resolution product read every second row and column
(`graph.slice`, which the consumer's kernel reads in place): 4x the multiplications, but one
BLAS call and no copy, and torch's slow path is slower still for these shapes, its product
having as few rows as the output has pixels (BLAS's worst shape; faster so for ResNet's three
at 16x16, 8x8 and 4x4 on the CPU). Each value is the
same dot product; BLAS sums it in the same order for the two larger ones (bit for bit eager's)
but not at 4x4 (the same to `assert_close`).

    %m = graph.matmul %w2, %c : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
    %f = graph.reshape %m : tensor<8x16xf32> -> tensor<1x8x4x4xf32>
    %y = graph.slice %f start = [0, 0, 0, 0] limit = [1, 8, 4, 4] stride = [1, 1, 2, 2] : tensor<1x8x4x4xf32> -> tensor<1x8x2x2xf32>

A larger window becomes `graph.patches` (im2col, one row of `C*kh*kw` per output position),
seen as `[OH*OW, C*kh*kw]`, times the weight seen as `[O, C*kh*kw]` and transposed (a view):
the `[OH*OW, O]` product is the output channels-last, which its readers' kernels read as NCHW
through a permute. This is the orientation torch's slow path takes for channels-last input
(Inductor's layout on the CPU): BLAS runs it faster than the NCHW one where the output has
few pixels per channel (ResNet's 3x3 window of stride 2 at 4x4), and slower where it has many
(`PIXELS_PER_CHANNEL`). The patch kernel computes a producer that only the
convolution reads where it reads it (a windowed op, up to `MAX_PATCH_READS` reads of each
element), so the batch norm and ReLU before it become the patch kernel and no kernel is added;
of a program input (ViT's patch embedding) the patch kernel is one more kernel. Only small
patches (`MAX_PATCH_ELEMENTS`, L2-resident) are made, of convolutions torch runs on its slow
path, or whose windows do not overlap whatever torch would pick (their patches are the input
permuted, and torch's oneDNN path reorders the weight on every call, as for ViT's 16x16
patches; a 3x3 window over 128 channels at 14x14, which torch runs with oneDNN, is slower as
patches). The products are not eager's BLAS calls: the values are
eager's to `assert_close`, not bit for bit.

    %i = graph.reshape %x : tensor<1x4x5x5xf32> -> tensor<4x5x5xf32>
    %p = graph.patches %i kernel = [3, 3] stride = [2, 2] padding = [1, 1] : tensor<4x5x5xf32> -> tensor<3x3x4x3x3xf32>
    %rows = graph.reshape %p : tensor<3x3x4x3x3xf32> -> tensor<9x36xf32>
    %w2 = graph.reshape %w : tensor<6x4x3x3xf32> -> tensor<6x36xf32>
    %wt = graph.permute %w2 perm = [1, 0] : tensor<6x36xf32> -> tensor<36x6xf32>
    %m = graph.matmul %rows, %wt : tensor<9x36xf32>, tensor<36x6xf32> -> tensor<9x6xf32>
    %y = (reshape [3, 3, 6], permute [2, 0, 1], reshape [1, 6, 3, 3]) %m

The slow path is the backend torch picks for this input, weight and thread count at compile
time (asked for inputs of up to `ASK_TORCH_MAX_ELEMENTS`); `every` rewrites without asking
(tests).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    Float32Type,
    Float64Type,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from xfuse.dialects import graph
from xfuse.dialects.facts import MAX_PATCH_READS
from xfuse.frontend.convolution import ConvolutionCall
from xfuse.ir import dtypes
from xfuse.passes.transforms.decompose import OpList

ADDMM = "aten.addmm.default"


MAX_STRIDE = 2
"""Strides of a 1x1 window up to this are rewritten: the full-resolution product does
`stride**2` times the multiplications the convolution needs."""


MAX_PATCH_ELEMENTS = 1 << 18
"""Patches of up to this many elements (1 MiB of f32: they stay in a core's L2 between the
kernel that writes them and the product that reads them) replace a convolution whatever
backend torch would pick."""

PIXELS_PER_CHANNEL = 4
"""Patches replace a convolution only when its output has at most this many pixels per output
channel: the product's rows (BLAS's `m`) are then the output channels, and they are many
enough. Where the pixels outnumber them torch's own orientation, the pixels as rows, is the
faster (each convolution alone on the CPU, patches against the library call:
benchmarks/RESULTS.md, "Convolutions as patches on the CPU")."""


def _batch_one(op: graph.TorchCallOp) -> ConvolutionCall | None:
    """The convolution `op` (`ConvolutionCall.of`) when it is a batch-1, 2-D, ungrouped,
    undilated one of a non-empty `[1, C, H, W]` input, f32 or f64 throughout (a bias `[O]`)."""
    conv = ConvolutionCall.of(op)
    if conv is None or conv.groups != 1 or len(conv.stride) != 2 or conv.dilation != (1, 1):
        return None
    shape, wshape = graph.shape_of(conv.input), graph.shape_of(conv.weight)
    if len(shape) != 4 or shape[0] != 1 or 0 in shape or 0 in wshape or wshape[1] != shape[1]:
        return None
    spatial = graph.pool_shape(shape[2:], conv.kernel, conv.stride, conv.padding, (1, 1), False)
    if graph.shape_of(op.outputs[0]) != (1, wshape[0], *spatial) or 0 in spatial:
        return None
    dtype = graph.dtype_of(conv.input)
    values = [conv.input, conv.weight, op.outputs[0]]
    values += [conv.bias] if conv.bias is not None else []
    if not isinstance(dtype, Float32Type | Float64Type):
        return None
    if any(graph.dtype_of(v) != dtype for v in values):
        return None
    if conv.bias is not None and graph.shape_of(conv.bias) != (wshape[0],):
        return None
    return conv


def pointwise(op: graph.TorchCallOp) -> ConvolutionCall | None:
    """`_batch_one`'s convolution when its window is 1x1, its stride 1 or 2 (`MAX_STRIDE`)
    along each dim, it has no padding, and the program makes its input (`made_contiguous`:
    then it is the slow path's operand, bit for bit)."""
    conv = _batch_one(op)
    if conv is None or conv.kernel != (1, 1) or conv.padding != (0, 0):
        return None
    if not all(1 <= s <= MAX_STRIDE for s in conv.stride):
        return None
    return conv if made_contiguous(conv.input) else None


def windowed(op: graph.TorchCallOp) -> ConvolutionCall | None:
    """`_batch_one`'s convolution when its window is larger than 1x1, its patches are small
    (`MAX_PATCH_ELEMENTS`) and its output has few pixels per output channel
    (`PIXELS_PER_CHANNEL`). The program may make its input (the patch kernel then
    computes the producer where it reads it, up to `MAX_PATCH_READS` reads of each element:
    no kernel is added) or not (a program input: the patch kernel is one more kernel)."""
    conv = _batch_one(op)
    if conv is None or conv.kernel == (1, 1):
        return None
    if any(p > k // 2 for p, k in zip(conv.padding, conv.kernel, strict=True)):
        return None
    _, outs, *spatial = graph.shape_of(op.outputs[0])
    pixels, channels = graph.numel(spatial), graph.shape_of(conv.input)[1]
    if pixels * channels * graph.numel(conv.kernel) > MAX_PATCH_ELEMENTS:
        return None
    if pixels > PIXELS_PER_CHANNEL * outs:
        return None
    if made_contiguous(conv.input):
        reads = graph.numel(conv.kernel) / graph.numel(conv.stride)
        return conv if reads <= MAX_PATCH_READS else None
    return conv


def made_contiguous(value: SSAValue) -> bool:
    """Whether `value` is a contiguous tensor at run time whatever the call's arguments: made by
    an op of the program that is neither a view the runtime may keep (`STRIDED_VIEWS`) nor a
    torch call (an argument may be channels-last, say, and then torch's convolution takes
    oneDNN, whose values the product would not reproduce)."""
    owner = value.owner
    return isinstance(owner, Operation) and not isinstance(
        owner, (*graph.STRIDED_VIEWS, graph.TorchCallOp)
    )


ASK_TORCH_MAX_ELEMENTS = 1 << 22
"""Larger inputs are left to torch without asking it (asking allocates the input's size): a
call's fixed costs, which the rewrite saves, are nothing beside their work."""


def torch_runs_slow_path(conv: ConvolutionCall) -> bool:
    """Whether torch runs `conv` with `_slow_conv2d_forward` (one matrix product) on the CPU,
    as it decides for these shapes and this process's thread count."""
    import torch

    if graph.numel(graph.shape_of(conv.input)) > ASK_TORCH_MAX_ELEMENTS:
        return False
    dtype = dtypes.to_torch(graph.dtype_of(conv.input))
    x = torch.empty(graph.shape_of(conv.input), dtype=dtype)
    w = torch.empty(graph.shape_of(conv.weight), dtype=dtype)
    b = torch.empty(graph.shape_of(conv.bias), dtype=dtype) if conv.bias is not None else None
    select = getattr(torch._C, "_select_conv_backend")  # noqa: B009 - private, not in the stubs
    backend = select(x, w, b, list(conv.stride), list(conv.padding), [1, 1], False, [0, 0], 1)
    return getattr(backend, "name", None) == "Slow2d"


def _product(ops: OpList, a: SSAValue, b: SSAValue, bias: SSAValue | None) -> SSAValue:
    """`a @ b`, or `addmm(bias, a, b)` (the result filled with the bias, broadcast, and the
    product accumulated onto it, as torch's slow path adds a convolution's bias)."""
    if bias is None:
        return ops.add(graph.MatmulOp(a, b))
    result = TensorType(graph.dtype_of(a), [graph.shape_of(a)[0], graph.shape_of(b)[1]])
    refs: list[Attribute] = [StringAttr(f"%t{i}") for i in range(3)]
    return ops.add(graph.TorchCallOp(ADDMM, [bias, a, b], [result], ArrayAttr(refs)))


def as_matmul(conv: ConvolutionCall) -> tuple[list[Operation], SSAValue]:
    """The ops that compute `conv` as a matrix product (at full resolution, then sampled every
    `stride` pixels), and its value."""
    ops = OpList()
    _, channels, height, width = graph.shape_of(conv.input)
    outs = graph.shape_of(conv.weight)[0]
    cols = ops.add(graph.ReshapeOp(conv.input, [channels, height * width]))
    weight = ops.add(graph.ReshapeOp(conv.weight, [outs, channels]))
    bias = None if conv.bias is None else ops.add(graph.ReshapeOp(conv.bias, [outs, 1]))
    shape = [1, outs, height, width]
    full = ops.add(graph.ReshapeOp(_product(ops, weight, cols, bias), shape))
    if conv.stride == (1, 1):
        return ops.ops, full
    return ops.ops, ops.add(graph.SliceOp(full, [0] * 4, shape, [1, 1, *conv.stride]))


def as_patch_product(conv: ConvolutionCall) -> tuple[list[Operation], SSAValue]:
    """The ops that compute `conv` as its patches (`[OH * OW, C * KH * KW]`) times its weight
    transposed, and its value: the `[OH * OW, O]` product is the output channels-last, read
    as NCHW through a permute (no copy: its readers' kernels index it)."""
    ops = OpList()
    _, channels, height, width = graph.shape_of(conv.input)
    outs = graph.shape_of(conv.weight)[0]
    image = ops.add(graph.ReshapeOp(conv.input, [channels, height, width]))
    patches = ops.add(graph.PatchesOp(image, conv.kernel, conv.stride, conv.padding))
    oh, ow = graph.shape_of(patches)[:2]
    depth = channels * graph.numel(conv.kernel)
    rows = ops.add(graph.ReshapeOp(patches, [oh * ow, depth]))
    weight = ops.add(graph.ReshapeOp(conv.weight, [outs, depth]))
    weight_t = ops.add(graph.PermuteOp(weight, [1, 0]))
    product = _product(ops, rows, weight_t, conv.bias)
    pixels = ops.add(graph.ReshapeOp(product, [oh, ow, outs]))
    planes = ops.add(graph.PermuteOp(pixels, [2, 0, 1]))
    return ops.ops, ops.add(graph.ReshapeOp(planes, [1, outs, oh, ow]))


def disjoint_windows(conv: ConvolutionCall) -> bool:
    """Whether `conv`'s windows do not overlap (stride >= window, ViT's patch embedding): its
    patches are its input, permuted."""
    return all(s >= k for s, k in zip(conv.stride, conv.kernel, strict=True))


class ConvolutionIntoProduct(RewritePattern):
    """A batch-1 `aten.convolution` -> one matrix product: a 1x1 one (`pointwise`) that torch
    runs on its slow path, its product (`as_matmul`); a larger window with small patches
    (`windowed`) that torch runs on its slow path or whose windows do not overlap (torch's
    oneDNN path reorders the weight on every call), its patches times its weight
    (`as_patch_product`). With `every`, torch is not asked."""

    def __init__(self, every: bool):
        self.every = every

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.TorchCallOp, rewriter: PatternRewriter) -> None:
        conv, build, disjoint = pointwise(op), as_matmul, False
        if conv is None:
            conv, build = windowed(op), as_patch_product
            disjoint = conv is not None and disjoint_windows(conv)
        if conv is None or not (self.every or disjoint or torch_runs_slow_path(conv)):
            return
        ops, value = build(conv)
        rewriter.replace(op, ops, [value])


@dataclass(frozen=True)
class ConvolutionMatmulPass(ModulePass):
    """Batch-1 convolutions as one matrix product: a 1x1 one that torch runs with one
    product, that product; a larger window with small patches, its patches times the weight.

    Options: `every` (rewrite every batch-1 f32/f64 convolution the rules allow, not only those
    torch would run on its slow path with this process's threads; for tests).
    `xfuse.compile` runs this pass after `decompose` on the CPU (NCHW programs)."""

    name = "convolution-matmul"

    every: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([ConvolutionIntoProduct(self.every)])
        ).rewrite_module(op)
