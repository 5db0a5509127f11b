"""
`convolution-bias`: a library convolution with a bias runs without it, and a graph add after
it adds the bias, where fusion puts it in the kernel of what reads the convolution (a
normalization, an activation), as Inductor's lowering does on CUDA. torch's cuDNN
convolution adds its bias in a kernel of its own (`add_`), which reads and writes the whole
output again; eager rounds the convolution to its dtype before that add, as the graph's add
does.

    %y = graph.torch_call "aten.convolution.default"(%x, %w, %b) args = ["%t0", "%t1", "%t2", [1, 1], [0, 0], [1, 1], false, [0, 0], 1] kwargs = {} : (...) -> tensor<1x8x4x4xf32>
      ->
    %c = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1, 1], [0, 0], [1, 1], false, [0, 0], 1] kwargs = {} : (...) -> tensor<1x8x4x4xf32>
    %r = graph.reshape %b : tensor<8xf32> -> tensor<1x8x1x1xf32>
    %y = graph.add %c, %r : tensor<1x8x4x4xf32>, tensor<1x8x1x1xf32> -> tensor<1x8x4x4xf32>

Run on CUDA only (`xfuse.pipeline.device_passes`), after `depthwise-stencil` (a stencil adds
its bias itself): oneDNN's CPU convolutions add the bias as they write the output.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, NoneAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from xfuse.dialects import graph
from xfuse.dialects.torch_args import renumbered, tensor_ref
from xfuse.frontend.convolution import ConvolutionCall

BIAS = 2
"""The bias's position among `aten.convolution`'s arguments."""


class ConvolutionBiasIntoAdd(RewritePattern):
    """`aten.convolution(x, w, b, ...)` with a bias of one value per output channel ->
    `aten.convolution(x, w, None, ...) + reshape(b)`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.TorchCallOp, rewriter: PatternRewriter) -> None:
        conv = ConvolutionCall.of(op)
        if conv is None or conv.bias is None or op.kwargs.data:
            return
        args = op.args.data
        position = tensor_ref(args[BIAS])
        refs = [tensor_ref(a) for a in args]
        if position is None or refs.count(position) != 1:
            return
        result = op.outputs[0].type
        channels = graph.shape_of(op.outputs[0])[1]
        if graph.shape_of(conv.bias) != (channels,) or graph.dtype_of(conv.bias) != (
            graph.dtype_of(op.outputs[0])
        ):
            return
        inputs = [v for i, v in enumerate(op.inputs) if i != position]
        dropped: int = position
        new_args = [
            NoneAttr() if i == BIAS else renumbered(a, lambda k: k - (k > dropped))
            for i, a in enumerate(args)
        ]
        call = graph.TorchCallOp(op.target.data, inputs, [result], ArrayAttr(new_args))
        rank = len(graph.shape_of(op.outputs[0]))
        column = graph.ReshapeOp(conv.bias, [1, channels, *[1] * (rank - 2)])
        add = graph.AddOp(call.outputs[0], column.result)
        rewriter.replace(op, [call, column, add])


@dataclass(frozen=True)
class ConvolutionBiasPass(ModulePass):
    """Library convolutions run without their bias; a graph add after them adds it."""

    name = "convolution-bias"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ConvolutionBiasIntoAdd()).rewrite_module(op)
