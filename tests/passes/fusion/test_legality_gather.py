"""Legality of `graph.gather`: its index tensors are read elementwise (the usual
rules), its table at computed positions: an elementwise producer of the table may join, a
producer that reduces may not, nor a table of another shape (as for a slice)."""

from __future__ import annotations

import pytest

from tests.passes.fusion.test_legality import node
from xfuse.ir.context import parse
from xfuse.passes.fusion.graph import FusionGraph
from xfuse.passes.fusion.legality import FUSED, SHAPE_MISMATCH, check_merge

GRAPH = """func.func @forward(%x: tensor<10x4xf32>, %i: tensor<10x1xi64>, %w: tensor<50x4xf32>) -> (tensor<10x1xf32>, tensor<10x4xf32>, tensor<10x4xf32>) {
  %r = graph.reduce_sum %x dims = [1] keepdim : tensor<10x4xf32> -> tensor<10x1xf32>
  %g = graph.gather %r[%i] dim = 0 : tensor<10x1xf32>, tensor<10x1xi64> -> tensor<10x1xf32>
  %e = graph.exp %x : tensor<10x4xf32>
  %j = graph.add %i, %i : tensor<10x1xi64>, tensor<10x1xi64> -> tensor<10x1xi64>
  %h = graph.gather %e[%j] dim = 0 : tensor<10x4xf32>, tensor<10x1xi64> -> tensor<10x4xf32>
  %n = graph.neg %w : tensor<50x4xf32>
  %k = graph.gather %n[%i] dim = 0 : tensor<50x4xf32>, tensor<10x1xi64> -> tensor<10x4xf32>
  func.return %g, %h, %k : tensor<10x1xf32>, tensor<10x4xf32>, tensor<10x4xf32>
}"""


@pytest.fixture
def g() -> FusionGraph:
    m = parse(GRAPH)
    return FusionGraph(m.body.block.first_op.body.block)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("first", "second", "reason", "detail"),
    [
        ("r", "g", SHAPE_MISMATCH, "reads its table at computed indices"),
        ("e", "h", FUSED, ""),  # an elementwise table, recomputed at the gathered rows
        ("j", "h", FUSED, ""),  # an elementwise index tensor
        ("n", "k", SHAPE_MISMATCH, ""),  # a table of another shape
    ],
)
def test_gather_operands(g: FusionGraph, first: str, second: str, reason: str, detail: str) -> None:
    verdict = check_merge(g, node(g, first), node(g, second), arg_limit=128)
    assert verdict.reason == reason
    assert detail in verdict.detail
