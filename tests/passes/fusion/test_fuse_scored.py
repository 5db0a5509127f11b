"""fuse-scored from Python: options, scores, window and rounds, decisions."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline

from xfuse.dialects.fusion import GroupOp
from xfuse.interpreters.graph import interpret
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


ACTIVATION_READ_TWICE = """func.func @forward(%y: tensor<4x64x32xf32>, %b: tensor<32xf32>) -> tensor<4x64x32xf32> {
  %h = graph.add %y, %b : tensor<4x64x32xf32>, tensor<32xf32> -> tensor<4x64x32xf32>
  %g = graph.tanh %h : tensor<4x64x32xf32>
  %s = graph.reduce_sum %g dims = [1] keepdim : tensor<4x64x32xf32> -> tensor<4x1x32xf32>
  %m = graph.reduce_mean %s dims = [2] keepdim : tensor<4x1x32xf32> -> tensor<4x1x1xf32>
  %r = graph.div %s, %m : tensor<4x1x32xf32>, tensor<4x1x1xf32> -> tensor<4x1x32xf32>
  %n = graph.mul %g, %r : tensor<4x64x32xf32>, tensor<4x1x32xf32> -> tensor<4x64x32xf32>
  %o = graph.add %n, %g : tensor<4x64x32xf32>, tensor<4x64x32xf32> -> tensor<4x64x32xf32>
  func.return %o : tensor<4x64x32xf32>
}"""


def fused(text: str, **options: Any) -> tuple[ModuleOp, FuseScoredPass, list[GroupOp]]:
    """`text` after `fuse-scored` with `options`, the pass and the groups it made."""
    m = parse(text)
    p = FuseScoredPass(**options)
    p.apply(make_context(), m)
    m.verify()
    return m, p, [op for op in m.walk() if isinstance(op, GroupOp)]


def test_a_cheap_output_is_computed_again_in_its_reader() -> None:
    """A bias add and activation that a reduction's group computes, and a later group reads
    beside a normalization of the reduction's result (GRN's): the later group computes it
    again from the bias add's input (read once more) instead of reading what the first group
    would write (written and read back)."""
    m, p, (first, _, second) = fused(ACTIVATION_READ_TWICE)
    assert len(first.results) == 1 and first.kind.data == "reduction"
    assert second.rule.data == "fuse-scored:recompute"
    y = m.body.block.ops.first.body.block.args[0]  # type: ignore[union-attr]
    assert y in second.inputs and first.results[0] not in second.inputs
    recomputed = [d for d in p.decisions if d.rule == "recompute" and d.fused]
    assert {(d.producer, d.consumer) for d in recomputed} == {("%g graph.tanh", "%n graph.mul")}
    # %g is neither written nor read back (2 x 32 KiB); %y and %b are read once more.
    saved = 2 * 4 * 64 * 32 * 4 - 4 * 64 * 32 * 4 - 32 * 4
    assert recomputed[0].score is not None and recomputed[0].score.bytes_saved == saved
    x, b = torch.randn(4, 64, 32), torch.randn(32)
    torch.testing.assert_close(
        interpret(m, [x, b]), interpret(parse(ACTIVATION_READ_TWICE), [x, b])
    )


def test_an_output_whose_inputs_cost_as_much_to_read_is_kept() -> None:
    """An output two full-size inputs compute (a residual add): computing it again reads
    both, as many bytes as writing and reading it back saves."""
    text = ACTIVATION_READ_TWICE.replace("%b: tensor<32xf32>", "%b: tensor<4x64x32xf32>").replace(
        "tensor<4x64x32xf32>, tensor<32xf32> -> tensor<4x64x32xf32>",
        "tensor<4x64x32xf32>, tensor<4x64x32xf32> -> tensor<4x64x32xf32>",
    )
    _, p, (first, _, _) = fused(text)
    assert len(first.results) == 2
    assert not [d for d in p.decisions if d.rule == "recompute"]


def test_an_output_too_costly_to_compute_again_is_kept() -> None:
    """A bias add, a multiply and five transcendental ops per element (22) pass the CPU's
    budget (16, `OUTPUT_RECOMPUTE_BUDGET`)."""
    chain = "\n".join(f"  %t{i} = graph.tanh %t{i - 1} : tensor<4x64x32xf32>" for i in range(1, 5))
    text = ACTIVATION_READ_TWICE.replace(
        "  %g = graph.tanh %h : tensor<4x64x32xf32>",
        f"  %t0 = graph.mul %h, %h : tensor<4x64x32xf32>, tensor<4x64x32xf32> -> tensor<4x64x32xf32>\n{chain}\n"
        "  %g = graph.tanh %t4 : tensor<4x64x32xf32>",
    )
    _, p, (first, _, _) = fused(text)
    assert len(first.results) == 2
    (refused,) = {(d.reason, d.detail) for d in p.decisions if d.rule == "recompute"}
    assert refused[0] == "recompute-cost" and "> 16" in refused[1]


def test_a_copy_that_would_pass_max_group_size_is_refused() -> None:
    """The reader's two ops and the copied bias add and activation: 4 ops > 3."""
    _, p, _ = fused(ACTIVATION_READ_TWICE, max_group_size=3)
    (refused,) = {(d.reason, d.detail) for d in p.decisions if d.rule == "recompute"}
    assert refused == ("max-group-size", "4 ops > 3")


def test_the_budget_for_computing_an_output_again_is_the_targets() -> None:
    """A bias add and two transcendental ops (9 per element): computed again on the CPU
    (budget 16), written once on CUDA (budget 8), where such a kernel is compute-bound."""
    text = ACTIVATION_READ_TWICE.replace(
        "  %g = graph.tanh %h : tensor<4x64x32xf32>",
        "  %t = graph.tanh %h : tensor<4x64x32xf32>\n  %g = graph.tanh %t : tensor<4x64x32xf32>",
    )
    outputs = {}
    for target in ("cpu", "cuda"):
        _, p, groups = fused(text, target=target)
        outputs[target] = len(groups[0].results)
        (verdict,) = {(d.reason, d.detail) for d in p.decisions if d.rule == "recompute"}
        if target == "cuda":
            assert verdict == ("recompute-cost", "computing %g again costs 9 ops per element > 8")
    assert outputs == {"cpu": 1, "cuda": 2}


SPLIT_NORM = """func.func @forward(%x: tensor<4x64x32xbf16>) -> tensor<4x8xf32> {
  %c = graph.cast %x : tensor<4x64x32xbf16> to tensor<4x64x32xf32>
  %g = graph.reshape %c : tensor<4x64x32xf32> -> tensor<4x2048xf32>
  %r = graph.reshape %g : tensor<4x2048xf32> -> tensor<4x8x256xf32>
  %p = graph.reduce_sum %r dims = [2] : tensor<4x8x256xf32> -> tensor<4x8xf32>
  %s = graph.reduce_sum %p dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %n = graph.constant dense<2.048000e+03> : tensor<f32>
  %m = graph.div %s, %n : tensor<4x1xf32>, tensor<f32> -> tensor<4x1xf32>
  %d = graph.sub %g, %m : tensor<4x2048xf32>, tensor<4x1xf32> -> tensor<4x2048xf32>
  %dr = graph.reshape %d : tensor<4x2048xf32> -> tensor<4x8x256xf32>
  %q = graph.mul %dr, %dr : tensor<4x8x256xf32>, tensor<4x8x256xf32> -> tensor<4x8x256xf32>
  %v = graph.reduce_sum %q dims = [2] : tensor<4x8x256xf32> -> tensor<4x8xf32>
  func.return %v : tensor<4x8xf32>
}"""
"""A one-group norm's two split passes (PoolFormer's on CUDA at batch 1): the mean's first
stage, then the centred squares' first stage, both over the image's f32 copy (`%g`)."""


def test_an_output_is_computed_again_in_a_reduction_that_reads_it_once() -> None:
    """The variance's first stage folds its sum in one loop over each chunk, so it computes
    the cast (and the reshape) of the bf16 input again instead of reading an f32 copy that the
    mean's stage would write."""
    m, p, groups = fused(SPLIT_NORM, target="cuda")
    first = groups[0]
    assert len(first.results) == 1
    recomputed = {(d.producer, d.consumer) for d in p.decisions if d.rule == "recompute"}
    assert recomputed == {("%g graph.reshape", "%d graph.sub")}
    x = torch.randn(4, 64, 32).to(torch.bfloat16)
    torch.testing.assert_close(interpret(m, [x]), interpret(parse(SPLIT_NORM), [x]))


def test_an_output_read_in_two_passes_over_a_row_is_kept() -> None:
    """A reader whose row kernel makes two loops over each row (a max, then a sum of exps)
    would compute the output once in each: the group writes it."""
    two_passes = SPLIT_NORM.replace(
        "  %dr = graph.reshape %d : tensor<4x2048xf32> -> tensor<4x8x256xf32>\n"
        "  %q = graph.mul %dr, %dr : tensor<4x8x256xf32>, tensor<4x8x256xf32> -> tensor<4x8x256xf32>\n"
        "  %v = graph.reduce_sum %q dims = [2] : tensor<4x8x256xf32> -> tensor<4x8xf32>\n"
        "  func.return %v : tensor<4x8xf32>",
        "  %mx = graph.reduce_max %d dims = [1] keepdim : tensor<4x2048xf32> -> tensor<4x1xf32>\n"
        "  %e0 = graph.sub %d, %mx : tensor<4x2048xf32>, tensor<4x1xf32> -> tensor<4x2048xf32>\n"
        "  %e = graph.exp %e0 : tensor<4x2048xf32>\n"
        "  %v = graph.reduce_sum %e dims = [1] keepdim : tensor<4x2048xf32> -> tensor<4x1xf32>\n"
        "  func.return %v : tensor<4x1xf32>",
    ).replace("-> tensor<4x8xf32> {", "-> tensor<4x1xf32> {", 1)
    _, p, groups = fused(two_passes, target="cuda")
    assert len(groups[0].results) == 2
    (refused,) = {(d.reason, d.detail) for d in p.decisions if d.rule == "recompute"}
    assert refused == ("recompute-cost", "%v graph.reduce_sum would compute %g more than once")


def test_an_unknown_target_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="option 'target' must be one of cpu, cuda, found 'gpu'"):
        FuseScoredPass(target="gpu")
