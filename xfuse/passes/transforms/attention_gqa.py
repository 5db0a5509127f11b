"""
`attention-gqa`: attention over repeated key and value heads reads the heads unrepeated.

Grouped-query attention (Llama, Mistral, Qwen) has fewer key and value heads than query heads;
transformers' `repeat_kv` copies each key and value head `r` times before the attention call
(an expand and a reshape: one copy kernel per layer in xfuse, the `r`-times larger tensors
written and read again). torch's attention takes the unrepeated heads itself
(`enable_gqa=True`, torch 2.5 and later), with the same values: the CPU kernel reads each key
and value head for its `r` query heads, bit for bit what it computes on the copies.

    %k5 = graph.reshape %k : tensor<1x2x16x8xf32> -> tensor<1x2x1x16x8xf32>
    %kb = graph.broadcast_in_dim %k5 dims = [0, 1, 2, 3, 4] : tensor<1x2x1x16x8xf32> -> tensor<1x2x2x16x8xf32>
    %kr = graph.reshape %kb : tensor<1x2x2x16x8xf32> -> tensor<1x4x16x8xf32>
    (the same for %v)
    %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %kr, %vr) args = ["%t0", "%t1", "%t2"] kwargs = {} : ...
      ->
    %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v) args = ["%t0", "%t1", "%t2"] kwargs = {enable_gqa = true} : ...

`xfuse.compile` runs it on the CPU only: on CUDA an explicit mask with `enable_gqa` leaves
torch's math kernel (the fused kernels take one or the other), several kernels where the
copies cost one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, i1
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from xfuse.dialects import graph
from xfuse.dialects.torch_args import tensor_ref
from xfuse.frontend.attention import SDPA

GQA = "enable_gqa"


@cache
def torch_has_gqa() -> bool:
    """Whether this torch's attention takes `enable_gqa` (2.5 and later)."""
    import torch

    schema = torch.ops.aten.scaled_dot_product_attention.default._schema
    return any(argument.name == GQA for argument in schema.arguments)


def repeated_heads(value: SSAValue) -> tuple[SSAValue, int] | None:
    """`(x, r)` when `value` is `x` ([b, h, s, d]) with each head repeated `r` times in a row:
    `reshape(broadcast_in_dim(reshape(x, [b, h, 1, s, d]), [b, h, r, s, d]), [b, h*r, s, d])`."""
    outer = value.owner
    if not isinstance(outer, graph.ReshapeOp):
        return None
    spread = outer.input.owner
    if not isinstance(spread, graph.BroadcastInDimOp) or spread.dim_map != (0, 1, 2, 3, 4):
        return None
    inner = spread.input.owner
    if not isinstance(inner, graph.ReshapeOp):
        return None
    x = inner.input
    shape = graph.shape_of(x)
    if len(shape) != 4:
        return None
    b, h, s, d = shape
    r = graph.shape_of(spread.result)[2]
    if (
        graph.shape_of(inner.result) != (b, h, 1, s, d)
        or graph.shape_of(spread.result) != (b, h, r, s, d)
        or graph.shape_of(outer.result) != (b, h * r, s, d)
    ):
        return None
    return x, r


def _operand(op: graph.TorchCallOp, position: int) -> int | None:
    """The operand index of positional argument `position`, if it is a tensor."""
    return tensor_ref(op.args.data[position]) if position < len(op.args.data) else None


class RepeatedKeyValueIntoGQA(RewritePattern):
    """Attention on `repeat_kv` copies of the key and value heads -> on the heads themselves,
    with `enable_gqa=True` (the walker's dead-code elimination erases the copies once nothing
    else reads them)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.TorchCallOp, rewriter: PatternRewriter) -> None:
        if op.target.data != SDPA or GQA in op.kwargs.data or len(op.outputs) != 1:
            return
        query, key, value = (_operand(op, i) for i in range(3))
        if query is None or key is None or value is None or len({query, key, value}) != 3:
            return
        keys, values = repeated_heads(op.inputs[key]), repeated_heads(op.inputs[value])
        if keys is None or values is None or keys[1] != values[1]:
            return
        if graph.shape_of(op.inputs[query])[1:2] != graph.shape_of(op.inputs[key])[1:2]:
            return
        inputs = list(op.inputs)
        inputs[key], inputs[value] = keys[0], values[0]
        kwargs = DictionaryAttr({**op.kwargs.data, GQA: IntegerAttr(1, i1)})
        rewriter.replace(
            op,
            graph.TorchCallOp(
                op.target.data,
                inputs,
                [op.outputs[0].type],
                op.args,
                kwargs,
                orders=op.memory_orders,
            ),
        )


@dataclass(frozen=True)
class AttentionGQAPass(ModulePass):
    """Attention reads repeated key and value heads unrepeated (`enable_gqa`), where this
    torch's attention takes it."""

    name = "attention-gqa"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not torch_has_gqa():
            return
        PatternRewriteWalker(
            GreedyRewritePatternApplier([RepeatedKeyValueIntoGQA()])
        ).rewrite_module(op)
