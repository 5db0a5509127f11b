"""
`fold-linear`: matmuls with a transposed 2-D weight, and the bias adds that fusion left alone,
back into `graph.linear` (one library GEMM call with the bias in its epilogue).

`decompose` splits `linear` into `permute`, `matmul` and `add`, so that fusion may take the bias
add into a kernel with what follows it (bias + ReLU as one group). Where fusion did not, the
pieces cost a launch each: a copy or view of the transposed weight, the GEMM, and a kernel
that reads the GEMM's output again to add the bias. Run after fusion, this pass puts them back
together; an add inside a `fusion.group` is left where fusion put it.

    %wt = graph.permute %w perm = [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
    %mm = graph.matmul %x, %wt : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
    %y = graph.add %mm, %b : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
      ->
    %y = graph.linear %x, %w bias(%b : tensor<16xf32>) : tensor<4x8xf32>, tensor<16x8xf32> -> tensor<4x16xf32>
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
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


def transposed_weight(value: SSAValue) -> SSAValue | None:
    """`w` when `value` is `permute(w, [1, 0])` of a 2-D `w`."""
    op = value.owner
    if isinstance(op, graph.PermuteOp) and op.permutation == (1, 0):
        return op.input
    return None


class FoldTransposedMatmul(RewritePattern):
    """`matmul(x, permute(w, [1, 0]))` -> `linear(x, w)`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MatmulOp, rewriter: PatternRewriter) -> None:
        w = transposed_weight(op.rhs)
        if w is None or len(graph.shape_of(op.lhs)) < 2:
            return
        if not graph.dtype_of(op.lhs) == graph.dtype_of(w) == graph.dtype_of(op.result):
            return
        linear = graph.LinearOp(op.lhs, w)
        if linear.result.type != op.result.type:
            return
        rewriter.replace(op, linear)


class FoldBiasIntoLinear(RewritePattern):
    """`add(linear(x, w), b)` (or `add(b, ...)`) with a bias `b` of shape [N] or [] and the
    linear's result used only there -> `linear(x, w, bias b)`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.AddOp, rewriter: PatternRewriter) -> None:
        for y, b in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            linear = y.owner
            if (
                isinstance(linear, graph.LinearOp)
                and linear.bias is None
                and y.has_one_use()
                and op.result.type == y.type
                and graph.dtype_of(b) == graph.dtype_of(y)
                and graph.shape_of(b) in ((graph.shape_of(linear.weight)[0],), ())
            ):
                rewriter.replace(op, graph.LinearOp(linear.input, linear.weight, b))
                rewriter.erase(linear)
                return


class EraseDeadPermute(RewritePattern):
    """A `permute` whose users were all folded away."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.PermuteOp, rewriter: PatternRewriter) -> None:
        if not op.result.uses:
            rewriter.erase(op)


@dataclass(frozen=True)
class FoldLinearPass(ModulePass):
    """Fold transposed-weight matmuls and their unfused bias adds into `graph.linear`."""

    name = "fold-linear"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # Inside a group an add reads a block argument, never a linear: it stays where it is.
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [FoldTransposedMatmul(), FoldBiasIntoLinear(), EraseDeadPermute()]
            )
        ).rewrite_module(op)
