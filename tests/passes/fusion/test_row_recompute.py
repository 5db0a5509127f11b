"""A row kernel (one with reductions) computes what its reductions read again at each of its
passes over a row: it takes in a producer only while that recomputation stays within
`ROW_RECOMPUTE_BUDGET` (`legality.row_recompute`). A normalization keeps its residual add;
a depthwise stencil before it stays a kernel of its own."""

from __future__ import annotations

import pytest

from tests.passes.fusion.test_legality import node
from xfuse.ir.context import parse
from xfuse.passes.fusion.graph import FusionGraph, Node
from xfuse.passes.fusion.legality import FUSED, ROW_RECOMPUTE, check_merge, row_passes

T = "tensor<4x16xf32>"
R = "tensor<4x1xf32>"


def chain(ops: int) -> str:
    """A group of `ops` muls and adds over `%x` (a stencil's products and sums), as `%p`."""
    body = [f"    %c0 = graph.mul %a, %a : {T}, {T} -> {T}"]
    for i in range(1, ops):
        kind = "add" if i % 2 else "mul"
        body.append(f"    %c{i} = graph.{kind} %c{i - 1}, %a : {T}, {T} -> {T}")
    return (
        f'  %p = fusion.group(%x) kind = "elementwise" rule = "fuse-scored:producer-consumer" '
        f": ({T}) -> {T} {{\n  ^bb0(%a: {T}):\n" + "\n".join(body) + "\n"
        f"    fusion.yield %c{ops - 1} : {T}\n  }}"
    )


NORM = f"""%m = graph.reduce_mean {{src}} dims = [1] keepdim : {T} -> {R}
  %d = graph.sub {{src}}, %m : {T}, {R} -> {T}
  %s = graph.mul %d, %d : {T}, {T} -> {T}
  %v = graph.reduce_mean %s dims = [1] keepdim : {T} -> {R}
  %r = graph.rsqrt %v : {R}
  %y = graph.mul %d, %r : {T}, {R} -> {T}"""


def normalized(ops: int, grouped: bool) -> FusionGraph:
    """`%p` (a group of `ops` ops), then a layer norm over its rows: its ops, or (`grouped`)
    one group of them, `%n`."""
    if grouped:
        norm = (
            f'%n = fusion.group(%p) kind = "reduction" rule = "fuse-scored:producer-consumer" '
            f": ({T}) -> {T} {{\n  ^bb0(%b: {T}):\n  "
            + NORM.format(src="%b")
            + f"\n    fusion.yield %y : {T}\n  }}"
        )
        result = "%n"
    else:
        norm, result = NORM.format(src="%p"), "%y"
    m = parse(
        f"""func.func @forward(%x: {T}) -> {T} {{
{chain(ops)}
  {norm}
  func.return {result} : {T}
}}"""
    )
    return FusionGraph(m.body.block.first_op.body.block)  # type: ignore[union-attr]


def groups(g: FusionGraph) -> list[Node]:
    return [n for n in g.nodes() if n.op is None]


@pytest.mark.parametrize(
    ("ops", "reason"),
    [
        (2, FUSED),  # a residual add and a cast: 2 ops again at each later pass
        (17, FUSED),  # 17 ops at 2 later passes: 34, within the budget
        (30, ROW_RECOMPUTE),  # 60: a stencil's taps
    ],
)
def test_a_normalization_takes_in_only_a_cheap_producer(ops: int, reason: str) -> None:
    """The norm's kernel passes over each row three times (the mean, the variance, the
    output): the producer's ops are computed at each."""
    g = normalized(ops, grouped=True)
    first, norm = groups(g)
    verdict = check_merge(g, first, norm, arg_limit=128)
    assert verdict.reason == reason, verdict.detail


def test_a_value_no_reduction_feeds_is_written_in_the_reductions_pass() -> None:
    """The mean reads each row once; the producer's value is also read after it (by the
    subtraction), but depends on no reduction: the same pass writes it, so even a costly
    producer is computed once per element."""
    g = normalized(60, grouped=False)
    (first,) = groups(g)
    passes = row_passes(g, first, node(g, "m"))
    assert passes is not None
    assert (len(passes.phases), passes.writes, passes.in_last, passes.count) == (1, False, True, 1)
    assert check_merge(g, first, node(g, "m"), arg_limit=128).reason == FUSED
