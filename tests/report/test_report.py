"""Pictures and the summary table: `xfuse.report`, `Explanation.to_dot` / `.render`."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from xdsl.dialects.builtin import ModuleOp

import xfuse
from xfuse.errors import GraphvizMissingWarning, RenderError
from xfuse.passes.fusion.decisions import FusionDecision
from xfuse.report.dot import KIND_COLOURS, program_dot
from xfuse.report.op_index import OpIndex
from xfuse.report.render import render_dot
from xfuse.report.summary import format_summary, summarize
from xfuse.runtime.driver import run_pipeline

# relu and add fuse (elementwise); exp stays alone (the extern matmul is between it and them);
# exp and reduce_sum of w form a second group (a reduction); the slice after the reduction
# is refused (shape-mismatch).
PROGRAM = """\
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>) {
  %0 = graph.exp %x : tensor<4x8xf32>
  %1 = graph.matmul %0, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %2 = graph.relu %1 : tensor<4x8xf32>
  %3 = graph.add %2, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %4 = graph.exp %w : tensor<8x8xf32>
  %5 = graph.reduce_sum %4 dims = [1] : tensor<8x8xf32> -> tensor<8xf32>
  %6 = graph.slice %5 start = [0] limit = [4] stride = [1] : tensor<8xf32> -> tensor<4xf32>
  func.return %3, %6 : tensor<4x8xf32>, tensor<4xf32>
}
"""


def fused(spec: str = "fuse-greedy") -> tuple[ModuleOp, list[FusionDecision], OpIndex]:
    module = xfuse.parse(PROGRAM)
    index = OpIndex()
    decisions = run_pipeline(spec, module, index.observe)
    return module, decisions, index


def test_summary_counts_groups_kernels_and_bytes() -> None:
    module, decisions, _ = fused()
    s = summarize(module, decisions)
    kinds = sorted(g.kind for g in s.groups)
    assert kinds == ["elementwise", "reduction"], format_summary(s)
    relu_add = next(g for g in s.groups if g.kind == "elementwise")
    # relu reads 128 B and writes 128 B; add reads two 128 B tensors and writes 128 B.
    assert relu_add.bytes_unfused == 5 * 128
    # Fused: the matmul result and x in, the sum out.
    assert relu_add.bytes_fused == 3 * 128
    assert relu_add.bytes_saved == 2 * 128
    # exp, matmul and slice stay alone; exp becomes a kernel, as the runtime makes them: the
    # matmul is extern and the slice a view of the reduction's result (the program returns it).
    assert (s.lone_ops, s.kernels, s.kernels_estimated) == (3, 3, True)
    assert s.bytes_unfused - s.bytes_fused == sum(g.bytes_saved for g in s.groups)
    reasons = {r.reason: r.pairs for r in s.rejections}
    assert reasons == {"extern-boundary": 2, "shape-mismatch": 1, "would-create-cycle": 1}
    assert s.examined == len(decisions) and s.fused_pairs == sum(d.fused for d in decisions)


def test_summary_table_is_aligned() -> None:
    module, decisions, _ = fused()
    lines = format_summary(summarize(module, decisions)).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("unit"))
    columns = [m.start() for m in re.finditer(r"(?<=  )\S", lines[header])]
    for row in lines[header + 1 : header + 5]:  # two groups, lone ops, total
        for col in (c for c in columns if c < len(row)):
            assert row[col - 2 : col] == "  ", f"column {col} is not aligned in {row!r}"


def test_summary_without_fusion_pass_reports_groups_in_the_ir() -> None:
    module, _, _ = fused()
    again = xfuse.parse(str(module))
    s = summarize(again)
    assert len(s.groups) == 2 and s.examined == 0
    assert "no fusion decisions recorded" in format_summary(s)
    json.dumps(s.to_dict())


def test_dot_draws_groups_as_coloured_clusters_with_typed_edges() -> None:
    module, decisions, index = fused()
    dot = program_dot(module, decisions, index)
    assert dot.startswith('digraph "xfuse" {') and dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_") == 2
    assert f'fillcolor="{KIND_COLOURS["elementwise"]}"' in dot
    assert f'fillcolor="{KIND_COLOURS["reduction"]}"' in dot
    assert "saves 256 B (640 B -> 384 B)" in dot
    assert '[label="4x8xf32"]' in dot and '[label="8x8xf32"]' in dot
    assert '[label="4xf32"]' in dot  # the slice's result into the output


def test_dot_draws_refused_pairs_as_dashed_edges_between_the_ops() -> None:
    module, decisions, index = fused()
    dot = program_dot(module, decisions, index)
    names = dict(re.findall(r'(n\d+) \[label="%\d+ (\w+)"', dot))
    refused = re.findall(r'(n\d+) -> (n\d+) \[label="([\w-]+)", style="dashed"', dot)
    pairs = {(names[a], names[b], reason) for a, b, reason in refused}
    assert pairs == {
        ("exp", "matmul", "extern-boundary"),
        ("matmul", "relu", "extern-boundary"),
        ("reduce_sum", "slice", "shape-mismatch"),
        ("exp", "add", "would-create-cycle"),
    }, dot
    # Without the index there is nothing to resolve the names with: no dashed edges.
    assert "dashed" not in program_dot(module, decisions, None)


def test_dot_escapes_quotes_in_labels() -> None:
    module = xfuse.parse(
        'func.func @f(%x: tensor<4xf32> {graph.input = "a \\"quoted\\" name"}) -> tensor<4xf32> {\n'
        "  %0 = graph.exp %x : tensor<4xf32>\n"
        "  func.return %0 : tensor<4xf32>\n"
        "}\n"
    )
    assert '[label="a \\"quoted\\" name\\n4xf32"' in program_dot(module)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
def test_render_svg_and_png(tmp_path: Path) -> None:
    module, decisions, index = fused()
    text = program_dot(module, decisions, index)
    svg = render_dot(text, tmp_path / "fused.svg")
    content = svg.read_text()
    assert "<svg" in content
    assert "group 0: " in content and "group 1: " in content
    png = render_dot(text, tmp_path / "fused.png")
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_render_without_graphviz_writes_dot_and_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    module, decisions, index = fused()
    text = program_dot(module, decisions, index)
    with pytest.warns(GraphvizMissingWarning, match="install Graphviz"):
        written = render_dot(text, tmp_path / "fused.svg")
    assert written == tmp_path / "fused.dot" and written.read_text() == text
    assert not (tmp_path / "fused.svg").exists()


def test_render_dot_suffix_and_bad_suffix(tmp_path: Path) -> None:
    assert render_dot("digraph {}\n", tmp_path / "g.dot").read_text() == "digraph {}\n"
    with pytest.raises(RenderError, match=r"\.svg, \.png, \.pdf or \.dot"):
        render_dot("digraph {}\n", tmp_path / "g.txt")


def test_explanation_to_dot_and_render(tmp_path: Path) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.exp(x) @ w) + x

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        explanation = xfuse.explain(fn, (x, w), quiet=True)
    dot = explanation.to_dot()
    assert dot.count("subgraph cluster_") == len(explanation.groups) >= 1
    assert "extern-boundary" in dot
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphvizMissingWarning)
        written = Path(explanation.render(str(tmp_path / "fn.svg")))
    assert written.exists() and written.stat().st_size > 0
    data = json.loads(explanation.to_json())
    assert data["summary"]["kernels"] == len(explanation.kernels)
    assert data["summary"]["bytes_fused"] < data["summary"]["bytes_unfused"]


# --- what does not run as a fused kernel ---------------------------------------------------------


def test_extern_ops_count_as_not_fused() -> None:
    module, decisions, _ = fused()
    s = summarize(module, decisions)
    # The matmul reads 4x8 and 8x8 f32 and writes 4x8: 128 + 256 + 128 bytes.
    assert s.not_fused == {"torch_call": 0, "extern": 512, "eager": 0, "op by op": 0}
    assert s.bytes_not_fused == 512
    assert "not in fused kernels: 512 B of the" in format_summary(s)
    assert s.to_dict()["bytes_not_fused"] == 512


@pytest.mark.parametrize("status", ["eager", "op by op"])
def test_a_group_that_did_not_run_as_its_kernel_is_credited_nothing(status: str) -> None:
    module, decisions, _ = fused()
    before = summarize(module, decisions)
    relu_add = next(g for g in before.groups if g.kind == "elementwise")
    s = summarize(
        module, decisions, group_kernels={}, kernels=0, group_status={relu_add.index: status}
    )
    group = s.groups[relu_add.index]
    assert (group.status, group.bytes_fused, group.bytes_saved) == (status, 5 * 128, 0)
    assert s.bytes_fused == before.bytes_fused + relu_add.bytes_saved
    assert s.not_fused[status] == 5 * 128 and s.bytes_not_fused == 512 + 5 * 128
    lines = format_summary(s).splitlines()
    row = next(line for line in lines if line.startswith(f"group {relu_add.index} "))
    assert f" {status} " in row  # the kernels cell


def _with_torch_call(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = torch.sort(torch.exp(x) + 1, 0).values  # sort: an eager torch_call
    return torch.tanh(y @ w) * 2


def test_explain_counts_torch_calls_externs_and_fallen_back_groups(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from xfuse.errors import CodegenError
    from xfuse.report.summary import op_traffic
    from xfuse.runtime import compiler

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    first = xfuse.explain(_with_torch_call, (x, w), quiet=True)
    s, module = first.summary(), first.module
    assert module is not None
    calls = [op for op in module.walk() if op.name == "graph.torch_call"]
    # sort reads 128 bytes, writes 128 of values and 256 of i64 indices
    assert len(calls) == 1 and s.not_fused["torch_call"] == op_traffic(calls[0]) == 512
    assert s.not_fused["extern"] == 512  # the matmul
    assert s.not_fused["eager"] == s.not_fused["op by op"] == 0

    # The tanh group cannot be lowered, nor can its ops one by one: it falls back to eager.
    lower = compiler.lower_to_loops

    def refuse_tanh(m: ModuleOp, device: torch.device | str = "cpu") -> None:
        if any(op.name == "graph.tanh" for op in m.walk()):
            raise CodegenError("no tanh today")
        lower(m, device)

    monkeypatch.setattr(compiler, "lower_to_loops", refuse_tanh)
    # A cache of its own: the one above holds this program fused and lowered unpatched.
    monkeypatch.setenv("XFUSE_CACHE_DIR", str(tmp_path))
    explanation = xfuse.explain(_with_torch_call, (x, w), quiet=True)
    (fell,) = [g for g in explanation.groups if g.fallback is not None]
    t = explanation.summary()
    group = t.groups[fell.index]
    assert group.status == "eager" and group.bytes_saved == 0
    assert t.not_fused["eager"] == group.bytes_unfused > 0
    assert t.bytes_not_fused == 512 + 512 + group.bytes_unfused
    assert "fallback: group" in str(explanation)
