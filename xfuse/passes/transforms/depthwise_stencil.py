"""
`depthwise-stencil`: a depthwise convolution with a small window becomes a sum of shifted
products (a stencil), which fuses into the kernels around it instead of running as a library
call.

A depthwise convolution (`groups` = input channels = output channels, MobileNet's and
ConvNeXt's) does `prod(kernel)` multiply-adds per output element: far too little work for a
library call's fixed costs, which dominate a 3x3 one of a few thousand elements on the CPU,
NCHW or NHWC; and on either device the call stands between the batch norm
and activation before it and those after it, so they cannot share a kernel. Written as
`pad`, strided `slice`s of the input, products with a weight column each and a sum, it is
elementwise work that fusion places in one kernel with its neighbours. The weight columns
are slices of the weight seen as `[1, C, *kernel]`: each broadcasts into the output, and
fusion reads it in place (`legality.moves_only`).

    %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1, 1], [1, 1], [1, 1], false, [0, 0], 8] ... -> tensor<1x8x6x6xf32>
      ->
    %w1 = graph.reshape %w : tensor<8x1x3x3xf32> -> tensor<1x8x3x3xf32>
    %p = graph.pad %x low = [0, 0, 1, 1] high = [0, 0, 1, 1] ...
    %zero = graph.constant dense<0.000000e+00> : tensor<f32>
    %x00 = graph.slice %p start = [0, 0, 0, 0] limit = [1, 8, 6, 6] stride = [1, 1, 1, 1] ...
    %c00 = graph.slice %w1 start = [0, 0, 0, 0] limit = [1, 8, 1, 1] stride = [1, 1, 1, 1] ...
    %t00 = graph.mul %x00, %c00 : tensor<1x8x6x6xf32>, tensor<1x8x1x1xf32> -> tensor<1x8x6x6xf32>
    %s00 = graph.add %zero, %t00 ...
    ... (one product per tap, in row-major window order, summed from +0 in that order; the
    bias last)

Half-precision (f16, bf16) convolutions compute in f32 and round once at the end, as the
library kernels do (their accumulators are f32): input and weight are widened where they are
read, so they stay half-width in memory. f32 and f64 compute in their own type. Only the
summation order differs from the library's, as between any two convolution algorithms.

On symbolic sizes the stencil is the same: its pad leaves a symbolic batch unpadded and its
slices keep it whole; a symbolic height or width is padded to a size symbol of its own (`s0 +
2`, added to the function's table where it has none) and each tap slices it from `t *
dilation` to `(k - 1 - t) * dilation` elements before its end, which is the convolution's
output size for every input size:

    %p = graph.pad %x low = [0, 0, 1, 1] high = [0, 0, 1, 1] ... : tensor<1x8x?x?xf32, #graph.syms<s0, s1>> -> tensor<1x8x?x?xf32, #graph.syms<e0, e1>>
    %x00 = graph.slice %p start = [0, 0, 0, 0] limit = [1, 8, -3, -3] stride = [1, 1, 1, 1] ... -> tensor<1x8x?x?xf32, #graph.syms<s0, s1>>
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
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
from xfuse.frontend.convolution import ConvolutionCall
from xfuse.ir.dtypes import opmath_type
from xfuse.passes.options import NON_NEGATIVE, option
from xfuse.passes.transforms.decompose import OpList


def depthwise(op: graph.TorchCallOp, symbolic_windows: bool = False) -> ConvolutionCall | None:
    """The convolution `op` (`ConvolutionCall.of`) when it is depthwise: 1 to 3 window dims,
    `groups` = input channels = output channels (weight `[C, 1, *kernel]`), a float type
    shared by input, weight, bias and result; its channels static, its batch static or
    symbolic, its window dims symbolic only where `symbolic_windows`."""
    conv = ConvolutionCall.of(op)
    if conv is None:
        return None
    dims, wshape = graph.dims_of(conv.input), graph.shape_of(conv.weight)
    n = len(dims) - 2
    if not 1 <= n <= 3 or len(wshape) != n + 2:
        return None
    static = dims[1:2] if symbolic_windows else dims[1:]
    if any(isinstance(d, str) for d in static):
        return None
    shape = graph.shape_of(conv.input)
    channels = shape[1]
    if conv.groups != channels or wshape[:2] != (channels, 1):
        return None
    dtype = graph.dtype_of(conv.input)
    values = [conv.input, conv.weight, op.outputs[0]]
    values += [conv.bias] if conv.bias is not None else []
    if not graph.is_float(dtype) or any(graph.dtype_of(v) != dtype for v in values):
        return None
    return conv


def stencil(
    op: graph.TorchCallOp, conv: ConvolutionCall, result: TensorType[Attribute]
) -> tuple[list[Operation], SSAValue]:
    """The ops that compute `conv` (of `op`) as a sum of shifted products, and the value of
    the sum (of `result`'s type). A padded symbolic dim's size symbol is added to the table
    of `op`'s function where it has none."""
    ops = OpList()
    x, n = conv.input, len(conv.kernel)
    acc_type = opmath_type(graph.dtype_of(x))
    w = ops.add(graph.ReshapeOp(conv.weight, [1, graph.shape_of(x)[1], *conv.kernel]))
    if any(conv.padding):
        pads = [0, 0, *conv.padding]
        dims = [padded_dim(op, d, 2 * p) for d, p in zip(graph.dims_of(x), pads, strict=True)]
        x = ops.add(graph.PadOp(x, pads, pads, dims=dims))
    shape, out = graph.dims_of(x), graph.dims_of(result)
    channels = shape[1]
    assert isinstance(channels, int)
    # The sum starts at +0, as a library's accumulator does: a window of padding alone times a
    # negative weight gives +0 as in eager, not -0.
    acc = ops.add(graph.ConstantOp.scalar(0.0, acc_type))
    for tap in itertools.product(*(range(k) for k in conv.kernel)):
        start = [0, 0, *(t * d for t, d in zip(tap, conv.dilation, strict=True))]
        limit = [
            -1 if isinstance(shape[0], str) else shape[0],
            channels,
            *(
                tap_limit(b, s, o, (k - 1 - t) * d)
                for b, s, o, k, t, d in zip(
                    start[2:], conv.stride, out[2:], conv.kernel, tap, conv.dilation, strict=True
                )
            ),
        ]
        symbolic = any(isinstance(o, str) for o in out[2:])
        window = ops.add(
            graph.SliceOp(x, start, limit, [1, 1, *conv.stride], dims=out if symbolic else None)
        )
        # The weight as [1, C, *kernel]: each tap's column [1, C, 1, ...] broadcasts into the
        # output, so fusion reads it inside the stencil's kernel (a [C, 1, 1, 1] slice would be
        # a space of its own, and a kernel that copies it).
        column = [1, channels, *(t + 1 for t in tap)]
        weight = ops.add(graph.SliceOp(w, [0, 0, *tap], column, [1] * (n + 2)))
        if acc_type != graph.dtype_of(x):
            # Half types are widened where they are read, element by element of the output
            # (the column spread over it first, so that the widening is elementwise work of
            # the stencil's own kernel): the input and the weight stay half-width in memory.
            spread = ops.add(graph.BroadcastInDimOp(weight, graph.shape_of(window), range(n + 2)))
            window, weight = ops.cast(window, acc_type), ops.cast(spread, acc_type)
        acc = ops.add(graph.AddOp(acc, ops.mul(window, weight)))
    if conv.bias is not None:
        bias = ops.add(graph.ReshapeOp(ops.cast(conv.bias, acc_type), [1, channels, *[1] * n]))
        acc = ops.add(graph.AddOp(acc, bias))
    return ops.ops, ops.cast(acc, result.element_type)


def symbolic_taps_fit(op: graph.TorchCallOp, conv: ConvolutionCall) -> bool:
    """Whether every symbolic window dim of `conv`, padded and sliced by each tap, has the
    convolution's output size for every size of its symbol (`graph.sliced_length`; the
    importer's output sizes are the same floor divisions); True where none is symbolic."""
    dims, out = graph.dims_of(conv.input), graph.dims_of(op.outputs[0])
    table = graph.size_table(op)
    for d, o, p, k, s, dil in zip(
        dims[2:], out[2:], conv.padding, conv.kernel, conv.stride, conv.dilation, strict=True
    ):
        if not isinstance(d, str):
            continue
        if table is None or not isinstance(o, str):
            return False
        padded = graph.SizeExpr.dim(d) + graph.SizeExpr.constant(2 * p)
        length = graph.sliced_length(table, padded, 0, (k - 1) * dil, s)
        if length is None or table.expand(length) != table.expand(graph.SizeExpr.symbol(o)):
            return False
    return True


def padded_dim(op: Operation, d: graph.Dim, extra: int) -> graph.Dim:
    """Dim `d` padded by `extra` elements in all: a static size, or the size symbol of `d +
    extra` in the table of `op`'s function (`graph.size_dim`)."""
    if isinstance(d, int):
        return d + extra
    return (
        d
        if extra == 0
        else graph.size_dim(op, graph.SizeExpr.dim(d) + graph.SizeExpr.constant(extra))
    )


def tap_limit(start: int, stride: int, out: graph.Dim, back: int) -> int:
    """Where a tap's slice of a (padded) window dim ends: after the last of `out` outputs
    from `start` by `stride`; along a symbolic dim `back` elements before its end (a limit
    `-1 - back`), which leaves `out` outputs for every size."""
    if isinstance(out, str):
        return -1 - back
    return start + max(stride * (out - 1) + 1, 0)


def signature(conv: ConvolutionCall, sizes: Mapping[str, int] | None = None) -> str:
    """What a depthwise convolution's speed depends on, as text: the input's shape and dtype,
    the window, stride, padding, dilation and whether it has a bias (`f32 1x8x6x6 k3x3 s1x1
    p1x1 d1x1 bias`); a symbolic dim by its size symbol's name (`f32 s0x8x6x6 ...`), or at its
    size in `sizes` where given. `library` names convolutions by it."""
    shape = graph.dims_of(conv.input)
    dims = "x".join(map(str, shape if sizes is None else graph.dims_at(shape, sizes)))
    window = " ".join(
        f"{tag}{'x'.join(map(str, v))}"
        for tag, v in (
            ("k", conv.kernel),
            ("s", conv.stride),
            ("p", conv.padding),
            ("d", conv.dilation),
        )
    )
    bias = " bias" if conv.bias is not None else ""
    return f"{graph.dtype_of(conv.input)} {dims} {window}{bias}"


def candidates(
    module: ModuleOp, max_taps: int = 49, symbolic_windows: bool = False
) -> list[ConvolutionCall]:
    """The depthwise convolutions of `module` that `depthwise-stencil` would rewrite."""
    found = []
    for op in module.walk():
        if isinstance(op, graph.TorchCallOp):
            conv = depthwise(op, symbolic_windows)
            if conv is not None and math.prod(conv.kernel) <= max_taps:
                found.append(conv)
    return found


class DepthwiseConvolutionIntoStencil(RewritePattern):
    """A depthwise `aten.convolution` of at most `max_taps` window elements, whose `signature`
    is not in `library` -> pad, slices, products and a sum."""

    def __init__(
        self, max_taps: int, library: frozenset[str] = frozenset(), symbolic_windows: bool = False
    ):
        self.max_taps = max_taps
        self.library = library
        self.symbolic_windows = symbolic_windows

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.TorchCallOp, rewriter: PatternRewriter) -> None:
        conv = depthwise(op, self.symbolic_windows)
        if conv is None or math.prod(conv.kernel) > self.max_taps:
            return
        if self.library and signature(conv) in self.library:
            return
        if not symbolic_taps_fit(op, conv):
            return
        result = op.outputs[0].type
        assert isinstance(result, TensorType)
        ops, value = stencil(op, conv, result)
        if value.type != result:  # a result shape the window does not give: not ours to fix
            return
        rewriter.replace(op, ops, [value])


@dataclass(frozen=True)
class DepthwiseStencilPass(ModulePass):
    """Depthwise convolutions of small windows as stencils that fuse with their neighbours.

    Options: `max-taps` (the largest window rewritten, in elements: 49 takes ConvNeXt's 7x7; 0
    rewrites none); `library` (the `signature`s of convolutions that stay library calls);
    `symbolic-windows` (also rewrite convolutions whose height or width is symbolic: off by
    default, because such a stencil's kernel, whose loops cannot be merged across runtime
    sizes, is measured slower than the library call, and `xfuse.choices` times only static
    stencils). `xfuse.compile` runs this pass after `decompose` on every device, with
    `library` the convolutions whose library call it measured faster than their stencil."""

    name = "depthwise-stencil"

    max_taps: int = option(49, NON_NEGATIVE)
    library: tuple[str, ...] = ()
    symbolic_windows: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = DepthwiseConvolutionIntoStencil(
            self.max_taps, frozenset(self.library), self.symbolic_windows
        )
        PatternRewriteWalker(GreedyRewritePatternApplier([pattern])).rewrite_module(op)
