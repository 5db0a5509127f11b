"""
`reduction-cse`: a reduction that repeats an earlier one of its function block (the same op
and dims, of the same value) goes, and its readers read the earlier one's result.

A one-group `GroupNorm` imports as torch's `var_mean`, a `graph.var` and a `graph.reduce_mean`
of one input, and `decompose` computes the var with a mean of its own: the same
`graph.reduce_mean` as the norm's. `split-reductions` then makes two partial sums and two
final sums of them; fusion puts the partial sums in one kernel, where `group-cleanup` merges
them, but the final sums stay two kernels. Run after `split-reductions`, this pass leaves one:

    %r1 = graph.reshape %x : tensor<1x62720xf32> -> tensor<1x256x245xf32>
    %p1 = graph.reduce_sum %r1 dims = [2] : tensor<1x256x245xf32> -> tensor<1x256xf32>
    %s1 = graph.reduce_sum %p1 dims = [1] : tensor<1x256xf32> -> tensor<1xf32>
    %r2 = graph.reshape %x : tensor<1x62720xf32> -> tensor<1x256x245xf32>
    %p2 = graph.reduce_sum %r2 dims = [2] : tensor<1x256x245xf32> -> tensor<1x256xf32>
    %s2 = graph.reduce_sum %p2 dims = [1] : tensor<1x256xf32> -> tensor<1xf32>
      ->
    %r1 = graph.reshape %x : tensor<1x62720xf32> -> tensor<1x256x245xf32>
    %p1 = graph.reduce_sum %r1 dims = [2] : tensor<1x256x245xf32> -> tensor<1x256xf32>
    %s1 = graph.reduce_sum %p1 dims = [1] : tensor<1x256xf32> -> tensor<1xf32>

Repeats are found by value numbering over every op xfuse computes itself
(`computed_by_xfuse`: graph ops that are not externs, whose value depends on their operands
alone), so a reduction of a repeated view or cast (`%r2`) repeats too; the ops that only the
erased reduction read go with it. Only reductions are merged: a cheap op that repeats (a
constant, an iota, a cast, the division after a sum) stays, and fusion recomputes it in each
kernel that reads it. Shared, one copy would be read by several kernels and tie them together
(a 1-element mean read by a centering kernel and by the output's kernel joined both into one
group, which then could not take the variance's sum: two kernels more per norm).

An op that may write memory (an in-place `torch_call`, `xfuse.dialects.effects.may_mutate`)
makes two equal ops unequal: the second may read an operand written in between, and a later
write to the first's result must not reach the second's readers. A block holding any such op
is left as it is (as `group-cleanup` does for its own CSE).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xfuse.dialects.effects import computed_by_xfuse, erase_dead, may_mutate
from xfuse.dialects.op_kinds import Kind, kind_of


def _identity(op: Operation, operands: tuple[SSAValue, ...]) -> Hashable:
    """What makes two ops compute the same values, given their operands' value numbers."""
    return (
        op.name,
        operands,
        tuple(op.result_types),
        tuple(op.properties.items()),
        tuple(op.attributes.items()),
    )


def eliminate_repeated_reductions(block: Block) -> int:
    """Merge each reduction of `block` that repeats an earlier one into it; the count of
    reductions erased (none where an op of the block may write memory)."""
    if any(may_mutate(op) for op in block.ops):
        return 0
    number: dict[SSAValue, SSAValue] = {}
    first: dict[Hashable, Operation] = {}
    erased = 0
    for op in list(block.ops):
        if op.regions or not computed_by_xfuse(op):
            continue
        operands = tuple(number.get(v, v) for v in op.operands)
        kept = first.setdefault(_identity(op, operands), op)
        if kept is op:
            continue
        number.update(zip(op.results, kept.results, strict=True))
        if kind_of(op) == Kind.REDUCTION:
            for old, new in zip(op.results, kept.results, strict=True):
                old.replace_all_uses_with(new)
            erase_dead(block, [op])
            erased += 1
    return erased


@dataclass(frozen=True)
class ReductionCSEPass(ModulePass):
    """Compute each repeated reduction once, in function blocks where no op may write memory.

    A reduction that repeats an earlier one (the same op and dims of the same value, up to
    repeated views and elementwise ops) goes, and its readers read the earlier one; a block
    with an op that may write memory (an in-place `torch_call`) is left as it is. A one-group
    `GroupNorm`'s mean (its `var_mean`'s, and the one `decompose` computes the var with) is
    then summed once. Cheap repeated ops stay, for fusion to recompute."""

    name = "reduction-cse"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.walk():
            if isinstance(f, func.FuncOp):
                for block in f.body.blocks:
                    eliminate_repeated_reductions(block)
