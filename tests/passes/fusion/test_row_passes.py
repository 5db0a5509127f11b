"""The passes over a row that fusion's `row-recompute` gate counts (`legality.row_passes`) are
the loops `lower-to-loops` emits in the row kernel: both come from `kernel_loops.RowPasses`."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from xdsl.dialects import func, scf
from xdsl.ir import Operation, SSAValue

from tests.passes.lowering.test_lower_to_loops import (
    Build,
    kernels,
    layer_norm,
    lower,
    make_module,
    softmax_group,
)
from xfuse.dialects import graph
from xfuse.passes.fusion.graph import FusionGraph, Node
from xfuse.passes.fusion.legality import row_passes

F32 = torch.float32


def rms_norm(x: SSAValue, w: SSAValue) -> Operation:
    eps = graph.ConstantOp.scalar(1e-6, graph.dtype_of(x))
    ms = graph.ReduceMeanOp(graph.MulOp(x, x), [2], keepdim=True)
    return graph.MulOp(graph.MulOp(x, graph.RsqrtOp(graph.AddOp(ms, eps))), w)


def sum_of_squares(x: SSAValue) -> Operation:
    return graph.ReduceSumOp(graph.MulOp(x, x), [1])


def log_sum_exp_minus_max(x: SSAValue) -> Operation:
    """Two reductions that read only the input: one loop folds both."""
    s = graph.ReduceSumOp(graph.ExpOp(x), [1])
    m = graph.ReduceMaxOp(x, [1])
    return graph.SubOp(graph.LogOp(s), m)


def centred_and_mean(x: SSAValue) -> list[Operation]:
    """A row output and a full one: the loop of the mean, then the loop writing `x - mean`."""
    mean = graph.ReduceMeanOp(x, [1], keepdim=True)
    return [graph.SubOp(x, mean), mean]


KERNELS: dict[str, tuple[Sequence[tuple[Sequence[int], torch.dtype]], Build, int]] = {
    "softmax": ([((5, 16), F32)], softmax_group, 3),
    "layer-norm": ([((4, 10), F32), ((10,), F32), ((10,), F32)], layer_norm, 3),
    "rms-norm": ([((2, 3, 8), F32), ((8,), F32)], rms_norm, 2),
    "sum": ([((4, 6), F32)], sum_of_squares, 1),
    "two-reductions-one-loop": ([((2, 5), F32)], log_sum_exp_minus_max, 1),
    "row-and-full-outputs": ([((4, 6), F32)], centred_and_mean, 2),
}


def row_loops(args: Sequence[tuple[Sequence[int], torch.dtype]], build: Build) -> int:
    """The `scf.for` loops over a row in the kernel `lower-to-loops` makes of one group of
    the ops `build` makes."""
    (kernel,) = kernels(lower(make_module(args, build)))
    par = next(op for op in kernel.walk() if isinstance(op, scf.ParallelOp))
    return sum(isinstance(op, scf.ForOp) for op in par.body.block.ops)


def last_merge(g: FusionGraph) -> tuple[Node, Node]:
    """A group of every op of the function but its last, and the node of the last: the pair
    whose merge makes one group of them all."""
    nodes = [n for n in g.nodes() if not isinstance(n.op, func.ReturnOp)]
    first = nodes[0]
    for node in nodes[1:-1]:
        first = g.merge(first, node, "test:hand")
    return first, nodes[-1]


@pytest.mark.parametrize("name", KERNELS)
def test_the_gate_counts_the_loops_the_kernel_makes(name: str) -> None:
    args, build, loops = KERNELS[name]
    module = make_module(args, build, group=False)
    f = next(op for op in module.ops if isinstance(op, func.FuncOp))
    g = FusionGraph(f.body.block)
    plan = row_passes(g, *last_merge(g))
    assert plan is not None
    assert plan.count == row_loops(args, build) == loops
