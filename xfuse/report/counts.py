"""
The three numbers of the headline `ops -> groups -> kernels`, defined once, for every report
that prints them (`xfuse.explain`, `xfuse-opt --fusion-report`, the progress line of
`xfuse.compile`, `make demo`):

- **ops**: the graph ops of the program as the fusion pipeline left it (after `decompose` and
  the other passes), inside groups or not, constants excluded: the ops that kernels and library
  calls compute, one row each in the report's table, whose `total` row sums to this number. A
  `linear` the pipeline splits into `permute` and `matmul` counts two; one that `fold-linear`
  keeps whole, one. (The ops as imported are `Explanation.imported_ops`.)
- **groups**: the `fusion.group` regions of that program.
- **kernels**: the compiled kernels launched per call (library calls, views and groups computed
  at compile time launch none). Exact for a compiled program (`Program.kernels`); from IR alone
  (`xfuse-opt`), counted as the runtime makes them: one per group it does not compute at
  compile time, one per lone op it compiles (`is_lone_kernel_op`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp, YieldOp
from xfuse.ir.functions import function_bodies
from xfuse.runtime.compiler import Program, folds, is_lone_kernel_op


def is_graph_op(op: Operation) -> bool:
    """An op the headline counts: a graph op that is not a constant."""
    return op.name.startswith("graph.") and not isinstance(op, graph.ConstantOp)


def inner_ops(group: GroupOp) -> list[Operation]:
    """Every op inside a group but its `fusion.yield`."""
    return [op for op in group.block.ops if not isinstance(op, YieldOp)]


def group_ops(group: GroupOp) -> list[Operation]:
    """The counted ops inside a group."""
    return [op for op in inner_ops(group) if is_graph_op(op)]


def program_ops(module: ModuleOp) -> list[Operation]:
    """The ops the headline counts, in program order (a group's in place of the group)."""
    ops: list[Operation] = []
    for f in function_bodies(module):
        for op in f.body.block.ops:
            if isinstance(op, GroupOp):
                ops += group_ops(op)
            elif is_graph_op(op):
                ops.append(op)
    return ops


def op_count(module: ModuleOp) -> int:
    """ops: see the module docstring."""
    return len(program_ops(module))


def groups_of(module: ModuleOp) -> list[GroupOp]:
    return [
        op for f in function_bodies(module) for op in f.body.block.ops if isinstance(op, GroupOp)
    ]


def group_count(module: ModuleOp) -> int:
    """groups: see the module docstring."""
    return len(groups_of(module))


def kernel_estimate(module: ModuleOp) -> int:
    """kernels from IR alone: see the module docstring."""
    lone = (
        op
        for f in function_bodies(module)
        for op in f.body.block.ops
        if not isinstance(op, GroupOp) and is_lone_kernel_op(op)
    )
    return sum(not folds(g) for g in groups_of(module)) + sum(1 for _ in lone)


def kernel_count(program: Program) -> int:
    """kernels of a compiled program: the kernels one call launches."""
    return len(program.kernels)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def headline(
    ops: int, groups: int, kernels: int, *, estimated: bool = False, fallbacks: int = 0
) -> str:
    """`8 ops -> 1 group -> 1 kernel`, `(estimated from the IR)` when counted from IR alone,
    and how many units fell back to eager."""
    line = f"{plural(ops, 'op')} -> {plural(groups, 'group')} -> {plural(kernels, 'kernel')}"
    if estimated:
        line += " (estimated from the IR)"
    if fallbacks:
        line += f" ({plural(fallbacks, 'fallback')})"
    return line
