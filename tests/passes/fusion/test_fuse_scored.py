"""fuse-scored from Python: options, scores, window and rounds, decisions."""

from __future__ import annotations

from xdsl.passes import PassPipeline

from xfuse.dialects.fusion import GroupOp
from xfuse.ir.context import make_context, parse
from xfuse.passes import get_all_passes
from xfuse.passes.fusion.decisions import Score
from xfuse.passes.fusion.fuse_scored import FuseScoredPass

CHAIN = """func.func @forward(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %a = graph.exp %x : tensor<8x8xf32>
  %m0 = graph.matmul %x, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %m1 = graph.matmul %m0, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %m2 = graph.matmul %m1, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %d = graph.add %a, %m2 : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %e = graph.tanh %d : tensor<8x8xf32>
  func.return %e : tensor<8x8xf32>
}"""


def test_options_parse_in_kebab_case() -> None:
    spec = "fuse-scored{window=3 max-rounds=2 arg-limit=9 max-group-size=5}"
    (p,) = PassPipeline.parse_spec(get_all_passes(), spec).passes
    assert p == FuseScoredPass(window=3, max_rounds=2, arg_limit=9, max_group_size=5)


def test_score_orders_kind_then_bytes_then_closeness() -> None:
    scores = [Score(1, 900, 1), Score(3, 10, 5), Score(3, 10, 1), Score(3, 20, 9)]
    ranked = sorted(scores, key=Score.key, reverse=True)
    assert ranked == [Score(3, 20, 9), Score(3, 10, 1), Score(3, 10, 5), Score(1, 900, 1)]


def test_window_is_a_recorded_reason() -> None:
    m = parse(CHAIN)
    p = FuseScoredPass(window=2)
    p.apply(make_context(), m)
    m.verify()
    by_pair = {(d.producer, d.consumer): d for d in p.decisions}
    d = by_pair[("%a graph.exp", "%d graph.add")]
    assert (d.fused, d.reason, d.detail) == (False, "window", "4 > 2")
    fused = by_pair[("%d graph.add", "%e graph.tanh")]
    assert fused.fused and fused.score is not None and fused.score.bytes_saved == 2 * 256


def test_max_rounds_is_a_recorded_reason() -> None:
    text = """func.func @forward(%x: tensor<16xf32>) -> tensor<16xf32> {
  %a = graph.exp %x : tensor<16xf32>
  %b = graph.neg %a : tensor<16xf32>
  %c = graph.tanh %b : tensor<16xf32>
  %d = graph.abs %c : tensor<16xf32>
  func.return %d : tensor<16xf32>
}"""
    m = parse(text)
    p = FuseScoredPass(max_rounds=1)
    p.apply(make_context(), m)
    m.verify()
    assert "max-rounds" in {d.reason for d in p.decisions}
    assert sum(isinstance(op, GroupOp) for op in m.walk()) == 2
    m = parse(text)
    FuseScoredPass().apply(make_context(), m)
    assert sum(isinstance(op, GroupOp) for op in m.walk()) == 1
