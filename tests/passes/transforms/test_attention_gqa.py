"""`attention-gqa`: attention over `repeat_kv` copies reads the key and value heads themselves
(`enable_gqa`), the copies go, and the program computes what it did (bit for bit on the CPU);
`xfuse.compile` runs the pass on the CPU only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xfuse
from xfuse import interpret
from xfuse.dialects import graph
from xfuse.frontend import import_module
from xfuse.passes.transforms.attention_gqa import torch_has_gqa
from xfuse.pipeline import device_passes
from xfuse.runtime.driver import run_pipeline

pytestmark = pytest.mark.skipif(not torch_has_gqa(), reason="torch's attention has no enable_gqa")


def repeat_kv(x: torch.Tensor, r: int) -> torch.Tensor:
    """transformers' `repeat_kv`: each head `r` times in a row."""
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, r, s, d).reshape(b, h * r, s, d)


class GroupedAttention(nn.Module):
    def __init__(self, heads: int = 4, kv_heads: int = 2, dim: int = 8, masked: bool = True):
        super().__init__()
        self.heads, self.kv_heads, self.dim, self.masked = heads, kv_heads, dim, masked
        self.q = nn.Linear(heads * dim, heads * dim)
        self.kv = nn.Linear(heads * dim, 2 * kv_heads * dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2 * self.kv_heads, self.dim).transpose(1, 2).chunk(2, dim=1)
        r = self.heads // self.kv_heads
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril() if self.masked else None
        out = F.scaled_dot_product_attention(q, repeat_kv(k, r), repeat_kv(v, r), mask)
        return out.transpose(1, 2).reshape(b, s, -1), k  # the keys, as a cache returns them


def _count(module: object, op_type: type) -> int:
    return sum(isinstance(op, op_type) for op in module.walk())  # type: ignore[attr-defined]


@pytest.mark.parametrize("masked", [True, False], ids=["mask", "no-mask"])
def test_the_copies_go_and_the_values_stay_bit_for_bit(masked: bool) -> None:
    model = GroupedAttention(masked=masked).eval()
    x = torch.randn(2, 16, 32)
    imported = import_module(model, (x,))
    args = imported.arguments(x)
    run_pipeline("decompose", imported.module)
    before = interpret(imported.module, args)
    assert _count(imported.module, graph.BroadcastInDimOp) == 2
    run_pipeline("attention-gqa", imported.module)
    imported.module.verify()
    assert _count(imported.module, graph.BroadcastInDimOp) == 0
    assert "enable_gqa = true" in str(imported.module)
    after = interpret(imported.module, args)
    for b, a in zip(before, after, strict=True):
        assert torch.equal(a, b)


def test_xfuse_compile_runs_it_on_the_cpu_and_matches_eager() -> None:
    model = GroupedAttention().eval()
    x = torch.randn(2, 16, 32)
    with torch.no_grad():
        compiled = xfuse.compile(model, (x,), quiet=True, fallback="error")
        got, want = compiled(x), model(x)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    assert "enable_gqa = true" in str(compiled.default.program.module)


def test_only_the_cpu_runs_it() -> None:
    names = [p.name for p in device_passes(False, torch.device("cpu"))]
    assert "attention-gqa" in names
    assert "attention-gqa" not in [p.name for p in device_passes(False, torch.device("cuda"))]
