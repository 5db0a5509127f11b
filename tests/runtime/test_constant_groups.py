"""Groups that read nothing the call gives (an attention mask of iota and compares) are
computed once at compile time (`ProgramCompiler._fold`): no kernel runs for them, and the
program still matches eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xfuse
import xfuse.runtime.compiler as compiler
from xfuse.runtime.compiler import CONSTANT, FUSED


def _masked(x: torch.Tensor) -> torch.Tensor:
    """Sliding-window causal attention as Mistral builds it: the mask goes to an extern (SDPA),
    so it is a group of its own, with no input (a plain causal mask would not be: the
    `attention-mask` pass runs it as `is_causal`)."""
    rows = torch.arange(x.shape[-2], device=x.device)
    window = (rows[:, None] >= rows[None, :]) & (rows[:, None] - rows[None, :] < 4)
    return F.scaled_dot_product_attention(x, x * 2, x + 1, attn_mask=window)


def test_a_mask_of_no_input_is_computed_at_compile_time() -> None:
    x = torch.randn(2, 16, 8)
    compiled = xfuse.compile(_masked, (x,), quiet=True, fallback="error")
    statuses = [g.status for g in compiled.groups]
    assert CONSTANT in statuses
    (folded,) = [g for g in compiled.groups if g.status == CONSTANT]
    assert folded.kernels == [] and "graph.iota" in folded.ops
    assert all(g.status == FUSED for g in compiled.groups if g is not folded)
    assert len(compiled.kernels) == sum(len(g.kernels) for g in compiled.groups)
    for _ in range(2):
        x = torch.randn(2, 16, 8)
        torch.testing.assert_close(compiled(x), _masked(x))
    explanation = str(xfuse.explain(_masked, (x,), quiet=True))
    assert "none: computed at compile time" in explanation


def test_a_returned_constant_group_is_fresh_memory_each_call() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.arange(8) * 2 + 1, x + 1

    compiled = xfuse.compile(fn, (torch.randn(8),), quiet=True, fallback="error")
    first, _ = compiled(torch.randn(8))
    first.add_(100)  # the caller owns it: the next call must not see the write
    second, _ = compiled(torch.randn(8))
    torch.testing.assert_close(second, torch.arange(8) * 2 + 1)
    assert first.data_ptr() != second.data_ptr()


def test_a_group_over_the_size_limit_stays_a_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiler, "FOLD_LIMIT_BYTES", 8)
    compiled = xfuse.compile(_masked, (torch.randn(2, 16, 8),), quiet=True, fallback="error")
    assert CONSTANT not in [g.status for g in compiled.groups]
    assert all(g.kernels for g in compiled.groups)
