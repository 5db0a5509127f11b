"""A group that its lowering refuses is compiled op by op (each op its own kernel, view or
extern) instead of running eagerly: strict mode passes, the values are eager's, and the group,
`explain()` and the fusion report say that it ran op by op and why. Fusion's `loop-structure`
gate keeps such groups from forming; the tests take the gate away to reach the safety net."""

from __future__ import annotations

import pytest
import torch

import xfuse
from xfuse.passes.fusion import legality


def _softmax_then_transpose(x: torch.Tensor) -> torch.Tensor:
    # One row loop cannot write the transposed softmax reshaped (a transpose alone it writes
    # at the permuted index): fusion splits it where it cannot.
    return torch.softmax(x, -1).transpose(0, 1).reshape(4, 12)


def test_fusion_splits_the_softmax_from_its_transpose_up_front() -> None:
    x = torch.randn(6, 8)
    explanation = xfuse.explain(_softmax_then_transpose, (x,), quiet=True)
    assert [g.status for g in explanation.groups] == ["fused", "fused"]
    assert len(explanation.kernels) == 2
    reasons = {d.reason for d in explanation.report.decisions if not d.fused}
    assert legality.LOOP_STRUCTURE in reasons
    assert "op by op" not in str(explanation)


@pytest.fixture
def without_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(legality, "loop_structure", lambda *args: None)


@pytest.mark.usefixtures("without_the_gate")
def test_a_group_lowering_refuses_runs_as_kernels_op_by_op() -> None:
    x = torch.randn(6, 8)
    compiled = xfuse.compile(_softmax_then_transpose, (x,), quiet=True, fallback="error")
    torch.testing.assert_close(compiled(x), _softmax_then_transpose(x))
    assert compiled.fallbacks == []
    (group,) = compiled.groups
    assert group.unfused is not None and "another row" in group.unfused
    assert group.status == "op by op"
    assert group.fallback is None and len(group.kernels) > 1
    assert compiled.op_by_op == [f"{group.label}: {group.unfused}"]


@pytest.mark.usefixtures("without_the_gate")
def test_explain_and_the_report_say_when_a_group_ran_op_by_op() -> None:
    x = torch.randn(6, 8)
    explanation = xfuse.explain(_softmax_then_transpose, (x,), quiet=True)
    text = str(explanation)
    assert "op by op: @kernel_0" in text  # the group's kernels cell
    assert "op by op: group 0 (graph.reduce_max" in text
    assert "op by op: group 0" in str(explanation.report)
    summary = explanation.summary()
    (group,) = summary.groups
    assert group.status == "op by op" and group.bytes_saved == 0  # nothing credited
    assert summary.not_fused["op by op"] == group.bytes_unfused == summary.bytes_not_fused
    assert explanation.to_dict()["report"]["op_by_op"] == summary.op_by_op
