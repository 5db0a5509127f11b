"""Fusion around a graph.scan: producers that reduce nothing fuse into it,
elementwise consumers too; anything that would read the scan elsewhere than at its own
index, a reduction, a second scan or an output of another shape is refused with `scan`; and
every group fusion forms lowers."""

from __future__ import annotations

import pytest

from tests.passes.lowering.test_lower_to_loops import lower
from xfuse.ir.context import make_context, parse
from xfuse.passes.fusion.fuse_greedy import FuseGreedyPass
from xfuse.passes.fusion.fuse_scored import FuseScoredPass
from xfuse.passes.fusion.graph import FusionGraph
from xfuse.passes.fusion.group_cleanup import GroupCleanupPass
from xfuse.passes.fusion.legality import FUSED, SCAN, check_merge

GRAPH = """func.func @forward(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xi64>, tensor<4x8xf32>, tensor<8xf32>) {
  %r = graph.relu %x : tensor<4x8xf32>
  %c = graph.scan %r dim = 1 kind = "sum" : tensor<4x8xf32> -> tensor<4x8xf32>
  %a = graph.add %c, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %f = graph.flip %c dims = [1] : tensor<4x8xf32>
  %s = graph.reduce_sum %c dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %i = graph.scan %r dim = 1 kind = "argmax" : tensor<4x8xf32> -> tensor<4x8xi64>
  %e = graph.exp %b : tensor<8xf32>
  %m = graph.mul %c, %e : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  func.return %a, %f, %s, %i, %m, %e : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xi64>, tensor<4x8xf32>, tensor<8xf32>
}"""


@pytest.fixture
def g() -> FusionGraph:
    m = parse(GRAPH)
    return FusionGraph(m.body.block.first_op.body.block)  # type: ignore[union-attr]


def node(g: FusionGraph, name: str) -> object:
    return next(op for op in g.nodes() if g.op_label(op).startswith(f"%{name} "))


@pytest.mark.parametrize(
    ("first", "second", "reason", "detail"),
    [
        ("r", "c", FUSED, ""),  # a producer: computed at the scan's index
        ("c", "a", FUSED, ""),  # an elementwise consumer at the scan's own index
        ("c", "f", SCAN, "elsewhere than at its own index"),  # a flip reads it reversed
        ("c", "s", SCAN, "reduces"),
        ("c", "i", SCAN, "two scans"),
        ("e", "m", FUSED, ""),  # %e broadcasts into %m, which reads no scan
    ],
)
def test_named_reasons(g: FusionGraph, first: str, second: str, reason: str, detail: str) -> None:
    verdict = check_merge(g, node(g, first), node(g, second), arg_limit=128)  # type: ignore[arg-type]
    assert verdict.reason == reason, verdict
    assert detail in verdict.detail


def test_an_output_of_another_shape_is_refused(g: FusionGraph) -> None:
    """%e ([8]) is returned: a kernel looping over the scan's [4, 8] cannot write it."""
    g.merge(node(g, "c"), node(g, "m"), "test")  # type: ignore[arg-type]
    group = g.node_of(next(op for op in g.nodes() if g.op_label(op).startswith("%e ")).op)  # type: ignore[union-attr]
    merged = next(n for n in g.nodes() if n is not group and n.op is None)
    verdict = check_merge(g, group, merged, arg_limit=128)  # type: ignore[arg-type]
    assert verdict.reason == SCAN and "not the scan's shape" in verdict.detail


@pytest.mark.parametrize("fuser", [FuseScoredPass(), FuseGreedyPass()], ids=["scored", "greedy"])
def test_every_group_formed_lowers(fuser: object) -> None:
    m = parse(GRAPH)
    fuser.apply(make_context(), m)  # type: ignore[attr-defined]
    GroupCleanupPass().apply(make_context(), m)
    m.verify()
    lowered = lower(m)
    kernels = [op for op in lowered.walk() if op.name == "func.func"][1:]
    assert 1 < len(kernels) < 8
