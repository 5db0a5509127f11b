"""group-cleanup after the fusion passes: recomputed producers are computed once."""

from __future__ import annotations

import torch

from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp
from xfuse.interpreters.graph import interpret
from xfuse.ir.context import make_context, parse
from xfuse.passes.fusion.fuse_greedy import FuseGreedyPass
from xfuse.passes.fusion.group_cleanup import GroupCleanupPass

TEXT = """func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = graph.constant dense<3.0> : tensor<f32>
  %a = graph.exp %x : tensor<4x8xf32>
  %p = graph.mul %a, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %q = graph.add %a, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %r = graph.sub %p, %q : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}"""


def count(module, kind: type) -> int:  # type: ignore[no-untyped-def]
    return sum(isinstance(op, kind) for op in module.walk())


def test_cleanup_dedupes_what_fusion_copied() -> None:
    m = parse(TEXT)
    FuseGreedyPass().apply(make_context(), m)
    before = (count(m, graph.ExpOp), count(m, graph.ConstantOp))
    GroupCleanupPass().apply(make_context(), m)
    m.verify()
    assert count(m, GroupOp) == 1
    assert (count(m, graph.ExpOp), count(m, graph.ConstantOp)) == (1, 1)
    assert before[0] >= 1 and before[1] >= 1
    x = torch.randn(4, 8)
    torch.testing.assert_close(interpret(m, [x]), interpret(parse(TEXT), [x]))


def test_cleanup_updates_the_kind_when_the_reduction_was_dead() -> None:
    m = parse("""func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = fusion.group(%x) kind = "reduction" rule = "fuse-greedy:sibling" : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %s = graph.reduce_sum %a dims = [0] : tensor<4xf32> -> tensor<f32>
    %n = graph.neg %a : tensor<4xf32>
    fusion.yield %n : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}""")
    GroupCleanupPass().apply(make_context(), m)
    (g,) = [op for op in m.walk() if isinstance(op, GroupOp)]
    assert g.kind.data == "elementwise"
