"""
`convert-cf-to-llvm`: `cf.br` and `cf.cond_br` to `llvm.br` and `llvm.cond_br` (block arguments
become phi nodes when `xdsl.backend.llvm.convert` translates them).

    cf.cond_br %c, ^body(%i : index), ^exit   ->   llvm.cond_br %c, ^body(%i : i64), ^exit
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import cf, llvm
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from xfuse.passes.llvm.convert_func_to_llvm import convert_types, rewrite_once


class ConvertBranch(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: cf.BranchOp, rewriter: PatternRewriter) -> None:
        rewriter.replace(op, llvm.BrOp(op.successor, *op.arguments))


class ConvertConditionalBranch(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: cf.ConditionalBranchOp, rewriter: PatternRewriter) -> None:
        rewriter.replace(
            op,
            llvm.CondBrOp(
                op.cond, op.then_block, op.then_arguments, op.else_block, op.else_arguments
            ),
        )


def convert_cf_ops(root: Operation) -> None:
    rewrite_once(root, ConvertBranch())
    rewrite_once(root, ConvertConditionalBranch())


@dataclass(frozen=True)
class ConvertCfToLLVMPass(ModulePass):
    """Block-argument types (index -> i64) and branches to the llvm dialect."""

    name = "convert-cf-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        convert_types(op)
        convert_cf_ops(op)
