"""A group that its lowering refuses is compiled op by op (each op its own kernel, view or
extern) instead of running eagerly: strict mode passes, the values are eager's, and the group
says why it was split."""

from __future__ import annotations

import torch

import xfuse


def _softmax_then_transpose(x: torch.Tensor) -> torch.Tensor:
    # Fusion puts the transpose into the softmax's group; one row loop cannot write it.
    return torch.softmax(x, -1).transpose(0, 1).reshape(8, 6)


def test_a_group_lowering_refuses_runs_as_kernels_op_by_op() -> None:
    x = torch.randn(6, 8)
    compiled = xfuse.compile(_softmax_then_transpose, (x,), quiet=True, fallback="error")
    torch.testing.assert_close(compiled(x), _softmax_then_transpose(x))
    assert compiled.fallbacks == []
    (group,) = compiled.groups
    assert group.unfused is not None and "another row" in group.unfused
    assert group.fallback is None and len(group.kernels) > 1
