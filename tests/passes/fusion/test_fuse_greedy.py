"""fuse-greedy from Python: options, the fusability predicate, decisions and reports."""

from __future__ import annotations

import json

import torch
from xdsl.passes import PassPipeline

from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp
from xfuse.interpreters.graph import interpret
from xfuse.ir.context import make_context, parse
from xfuse.passes import get_all_passes
from xfuse.passes.fusion.decisions import format_report, report_json
from xfuse.passes.fusion.fuse_greedy import FuseGreedyPass

PROGRAM = """func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = graph.exp %x : tensor<4x8xf32>
  %b = graph.neg %a : tensor<4x8xf32>
  %m = graph.matmul %b, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %c = graph.relu %m : tensor<4x8xf32>
  %d = graph.tanh %x : tensor<4x8xf32>
  func.return %c, %d : tensor<4x8xf32>, tensor<4x8xf32>
}"""


def groups(module) -> list[GroupOp]:  # type: ignore[no-untyped-def]
    return [op for op in module.walk() if isinstance(op, GroupOp)]


def test_options_parse_in_kebab_case_and_fusable_has_no_text_form() -> None:
    pipeline = PassPipeline.parse_spec(get_all_passes(), "fuse-greedy{arg-limit=7}")
    (p,) = pipeline.passes
    assert isinstance(p, FuseGreedyPass) and p.arg_limit == 7
    custom = FuseGreedyPass(arg_limit=7, fusable=lambda op: True)
    assert str(custom) == "fuse-greedy{arg_limit=7}"


def test_predicate_limits_what_joins_a_group() -> None:
    text = """func.func @forward(%x: tensor<16xf32>) -> tensor<16xf32> {
  %a = graph.exp %x : tensor<16xf32>
  %b = graph.neg %a : tensor<16xf32>
  %c = graph.tanh %b : tensor<16xf32>
  func.return %c : tensor<16xf32>
}"""
    m = parse(text)
    p = FuseGreedyPass(fusable=lambda op: not isinstance(op, graph.TanhOp))
    p.apply(make_context(), m)
    m.verify()
    (group,) = groups(m)
    assert [op.name for op in group.block.ops] == ["graph.exp", "graph.neg", "fusion.yield"]
    refused = {(d.producer, d.consumer): d for d in p.decisions}[("%b graph.neg", "%c graph.tanh")]
    assert (refused.fused, refused.reason) == (False, "not-fusable")


def test_decisions_are_collected_and_reported() -> None:
    m = parse(PROGRAM)
    p = FuseGreedyPass()
    p.apply(make_context(), m)
    by_pair = {(d.producer, d.consumer): d for d in p.decisions}
    assert by_pair[("%a graph.exp", "%b graph.neg")].fused
    refused = by_pair[("%b graph.neg", "%m graph.matmul")]
    assert not refused.fused and refused.reason == "extern-boundary"
    assert by_pair[("%m graph.matmul", "%c graph.relu")].reason == "extern-boundary"
    table = format_report(p.decisions)
    lines = table.splitlines()
    assert lines[0].split() == [
        "pass",
        "producer",
        "consumer",
        "decision",
        "reason",
        "rule",
        "score",
        "detail",
    ]
    assert "extern-boundary" in table and lines[-1].startswith(f"{len(p.decisions)} pairs examined")
    # Columns are aligned: every row starts its `decision` cell at the same offset.
    col = lines[0].index("decision")
    assert all(line[col:].split()[0] in ("fused", "kept") for line in lines[1:-1])
    records = json.loads(report_json(p.decisions))
    assert {r["reason"] for r in records} >= {"fused", "extern-boundary"}
    # A second run starts from a clean record.
    p.apply(make_context(), parse(PROGRAM))
    assert len(p.decisions) == len(records)


def test_fixed_point_fuses_what_one_scan_unlocks() -> None:
    # The sibling merge of %p and %q only becomes possible once %e joins... and the result
    # is one group computing both outputs.
    text = """func.func @forward(%x: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %e = graph.exp %x : tensor<16xf32>
  %p = graph.neg %e : tensor<16xf32>
  %q = graph.tanh %x : tensor<16xf32>
  %r = graph.add %q, %p : tensor<16xf32>, tensor<16xf32> -> tensor<16xf32>
  func.return %r, %p : tensor<16xf32>, tensor<16xf32>
}"""
    m = parse(text)
    FuseGreedyPass().apply(make_context(), m)
    m.verify()
    assert len(groups(m)) == 1
    x = torch.randn(16)
    torch.testing.assert_close(interpret(m, [x]), interpret(parse(text), [x]))
