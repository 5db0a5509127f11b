"""A windowed consumer computes its producer at every window reading an element: it takes in
a producer only while the recomputation stays within its budget (`legality.window_recompute`),
and a window larger than its input counts the positions inside the input only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xfuse
from tests.passes.fusion.test_legality import node
from xfuse.ir.context import parse
from xfuse.passes.fusion.graph import FusionGraph
from xfuse.passes.fusion.legality import (
    FUSED,
    WINDOW_RECOMPUTE,
    check_merge,
    recompute_cost,
)
from xfuse.passes.fusion.op_facts import window_reads

POOL = (
    'graph.pool %{src} kind = "{kind}" kernel = [{k}, {k}] stride = [{s}, {s}] '
    "padding = [{p}, {p}] dilation = [1, 1] : tensor<1x4x8x8xf32> -> tensor<1x4x{o}x{o}xf32>"
)


def pool_graph(producer: str, kind: str, k: int, s: int, p: int, o: int) -> FusionGraph:
    pool = POOL.format(src="a", kind=kind, k=k, s=s, p=p, o=o)
    m = parse(
        f"""func.func @forward(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x{o}x{o}xf32> {{
  {producer}
  %y = {pool}
  func.return %y : tensor<1x4x{o}x{o}xf32>
}}"""
    )
    return FusionGraph(m.body.block.first_op.body.block)  # type: ignore[union-attr]


RELU = "%a = graph.relu %x : tensor<1x4x8x8xf32>"
ERF = "%a = graph.erf %x : tensor<1x4x8x8xf32>"
EXP = "%a = graph.exp %x : tensor<1x4x8x8xf32>"


@pytest.mark.parametrize(
    ("producer", "k", "s", "p", "o", "reason"),
    [
        (RELU, 3, 1, 1, 8, FUSED),  # cheap: 8 extra reads of 1 op
        (EXP, 3, 1, 1, 8, WINDOW_RECOMPUTE),  # same shape as the producer, so no other gate
        (EXP, 3, 2, 1, 4, FUSED),  # 2.25 reads
        (ERF, 2, 1, 0, 7, FUSED),  # 3.06 reads of one erf: 8.2 extra ops, within 12
        (ERF, 3, 1, 1, 8, WINDOW_RECOMPUTE),  # 7.6 reads: 26.6
        (ERF, 40, 40, 0, 1, FUSED),  # one window over the whole map: each element once
    ],
)
def test_a_window_recomputes_only_a_cheap_producer(
    producer: str, k: int, s: int, p: int, o: int, reason: str
) -> None:
    g = pool_graph(producer, "avg", k, s, p, o)
    verdict = check_merge(g, node(g, "a"), node(g, "y"), arg_limit=128)
    assert verdict.reason == reason, verdict.detail


def test_a_window_larger_than_its_input_reads_each_element_once() -> None:
    g = pool_graph(RELU, "avg", 40, 40, 0, 1)
    pool = node(g, "y").op
    assert pool is not None
    assert window_reads(pool) == 1.0
    g = pool_graph(RELU, "max", 3, 2, 1, 4)
    pool = node(g, "y").op
    assert pool is not None
    assert window_reads(pool) == pytest.approx(121 / 64)  # 11 of 12 taps per dim inside


def test_a_transcendental_costs_more_than_a_chain_of_cheap_ops() -> None:
    relu, erf = pool_graph(RELU, "max", 3, 2, 1, 4), pool_graph(ERF, "max", 3, 2, 1, 4)
    assert recompute_cost(relu, node(relu, "a")) == 1.0
    assert recompute_cost(erf, node(erf, "a")) == 4.0


def test_a_stride_1_pool_of_silu_is_two_kernels_and_matches_eager() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(F.silu(x * 1.5 + 0.5), 3, 1, 1)

    x = torch.randn(1, 4, 9, 9)
    compiled = xfuse.compile(fn, (x,), quiet=True, fallback="error")
    torch.testing.assert_close(compiled(x), fn(x))
    assert len(compiled.kernels) == 2, [g.ops for g in compiled.groups]
