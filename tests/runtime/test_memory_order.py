"""Torch calls whose results torch lays out as a dense permutation of a row-major tensor (CPU
attention's output and gradients, [B, H, T, D] in [B, T, H, D] memory) are read by kernels in
that memory order, with no contiguous copy (`graph.TorchCallOp`'s `orders`), and compute
eager's values wherever torch lays them out at run time."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import xfuse
from tests.runtime.ir_reads import ir_functions_run
from xfuse import dynamo
from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp
from xfuse.interpreters import graph as interpreter
from xfuse.runtime.executor import CompiledProgram
from xfuse.training import PartCompiler

Tensor = torch.Tensor
B, H, T, D = 2, 4, 16, 8
COPIES = ("aten::clone", "aten::copy_", "aten::contiguous")


def _heads() -> tuple[Tensor, Tensor, Tensor]:
    """Query, key and value heads as an attention block splits its projection: [B, H, T, D]
    views of [B, T, 3, H, D] memory."""
    torch.manual_seed(0)
    x = torch.randn(B, T, 3, H, D)
    q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)
    return q, k, v


def attention_then_elementwise(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    out = F.scaled_dot_product_attention(q, k, v)
    return out.transpose(1, 2).reshape(B, T, H * D) * 2 + 1


def _copies(fn: Callable[[], object]) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key in COPIES)


def test_a_kernel_reads_attention_in_memory_order_without_a_copy() -> None:
    q, k, v = _heads()
    assert F.scaled_dot_product_attention(q, k, v).transpose(1, 2).is_contiguous()
    compiled = xfuse.compile(attention_then_elementwise, (q, k, v), quiet=True, fallback="error")
    got, want = compiled(q, k, v), attention_then_elementwise(q, k, v)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()
    module = compiled.default.program.module
    calls = [op for op in module.walk() if isinstance(op, graph.TorchCallOp)]
    assert [c.memory_orders for c in calls] == [((0, 2, 1, 3),)]
    # The permutes back to [B, H, T, D] and on to [B, T, H, D] fold away.
    assert not any(isinstance(op, graph.PermuteOp) for op in module.walk())
    assert _copies(lambda: compiled(q, k, v)) <= _copies(
        lambda: attention_then_elementwise(q, k, v)
    )


def test_a_query_a_kernel_computes_keeps_attention_in_memory_order() -> None:
    """A query computed by a kernel (Llama's rotary embedding) is written in eager's
    [B, T, H, D] memory, so that attention's output lies in the order the kernel after it reads
    it in: no copy before the heads merge."""
    q, k, v = _heads()

    def scaled_query(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return attention_then_elementwise(q * 2.0 + 1.0, k, v)

    compiled = xfuse.compile(scaled_query, (q, k, v), quiet=True, fallback="error")
    torch.testing.assert_close(compiled(q, k, v), scaled_query(q, k, v))
    module = compiled.default.program.module
    (call,) = [op for op in module.walk() if isinstance(op, graph.TorchCallOp)]
    query = call.inputs[0].owner  # the kernel's [B, T, H, D] buffer, seen as [B, H, T, D]
    assert isinstance(query, graph.PermuteOp) and isinstance(query.input.owner, GroupOp)
    assert _copies(lambda: compiled(q, k, v)) <= _copies(lambda: scaled_query(q, k, v))


def test_a_compiled_attention_call_reads_no_ir() -> None:
    """A call of a program whose attention result is in memory order (`orders`) runs no
    function of xDSL: the runtime read the IR when it prepared the program."""
    q, k, v = _heads()
    compiled = xfuse.compile(attention_then_elementwise, (q, k, v), quiet=True, fallback="error")
    compiled(q, k, v)
    got: list[Tensor] = []
    assert ir_functions_run(lambda: got.append(compiled(q, k, v))) == []
    torch.testing.assert_close(got[0], attention_then_elementwise(q, k, v))


def test_a_torch_compiled_attention_block_call_reads_no_ir() -> None:
    """The same through `torch.compile(backend="xfuse")`, attention's output and its
    projection."""
    torch.manual_seed(0)
    model = AttentionBlock().eval()
    x = torch.randn(B, T, H * D)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="xfuse", options={"fallback": "error"})
        got: list[Tensor] = []
        with torch.no_grad():
            compiled(x)
            assert ir_functions_run(lambda: got.append(compiled(x))) == []
            torch.testing.assert_close(got[0], model(x))
    finally:
        torch._dynamo.reset()


def test_attention_returned_as_it_is_has_eager_strides() -> None:
    q, k, v = _heads()

    def attention(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        out = F.scaled_dot_product_attention(q, k, v)
        return out, out.exp()

    compiled = xfuse.compile(attention, (q, k, v), quiet=True, fallback="error")
    got, want = compiled(q, k, v), attention(q, k, v)
    torch.testing.assert_close(got, want)
    assert got[0].stride() == want[0].stride()


def test_a_layout_other_than_the_traced_one_computes_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where torch lays the result out otherwise at run time (another version or backend),
    the memory-order view is no longer contiguous: the kernel copies it, and computes the
    same values."""
    q, k, v = _heads()
    compiled = xfuse.compile(attention_then_elementwise, (q, k, v), quiet=True, fallback="error")
    real = interpreter.in_memory_order
    seen: list[bool] = []

    def contiguous_first(result: Tensor, order: tuple[int, ...] | None) -> Tensor:
        view = real(result.contiguous(), order)
        seen.append(view.is_contiguous())
        return view

    monkeypatch.setattr(interpreter, "in_memory_order", contiguous_first)
    got = compiled(q, k, v)
    assert seen == [False]
    torch.testing.assert_close(got, attention_then_elementwise(q, k, v))


class AttentionBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(H * D, 3 * H * D)
        self.out = torch.nn.Linear(H * D, H * D)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(x).split(H * D, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, H * D) * 2 + 1)


def test_attention_block_trains_with_eager_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backward's attention gradients ([B, T, H, D] memory) are read by the kernel that
    concatenates them for the projection's gradient as they lie: their permutes fold away."""
    compiled_parts: list[CompiledProgram] = []
    real = PartCompiler.compile

    def recording(self: PartCompiler, gm: torch.fx.GraphModule, inputs: Any) -> CompiledProgram:
        compiled_parts.append(real(self, gm, inputs))
        return compiled_parts[-1]

    monkeypatch.setattr(PartCompiler, "compile", recording)
    torch.manual_seed(0)
    model = AttentionBlock()
    reference = AttentionBlock()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(B, T, H * D)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="xfuse", options={"fallback": "error"})
        compiled(x).square().mean().backward()
    finally:
        torch._dynamo.reset()
    reference(x).square().mean().backward()
    for (name, p), r in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert p.grad is not None and r.grad is not None
        torch.testing.assert_close(p.grad, r.grad, msg=name)
    backward = compiled_parts[-1].default.program.module
    (call,) = [op for op in backward.walk() if isinstance(op, graph.TorchCallOp)]
    assert call.memory_orders == ((0, 2, 1, 3),) * 3
    assert all(isinstance(use.operation, graph.ReshapeOp) for r in call.results for use in r.uses)


class SequenceAttentionBlock(AttentionBlock):
    """`AttentionBlock` over any sequence length (its sizes read from the input)."""

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        q, k, v = (u.view(b, t, H, D).transpose(1, 2) for u in self.qkv(x).split(H * D, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, H * D) * 2 + 1)


def test_a_symbolic_attention_block_merges_its_heads_without_a_copy() -> None:
    """With a symbolic sequence length (`dynamic=True`: one program for every length), the
    query's kernel writes it in attention's output order as in a static program, so that the
    heads' merge is a view at every length: no more copies a call than eager makes."""
    torch.manual_seed(0)
    model = SequenceAttentionBlock().eval()
    start = dynamo.COMPILES["symbolic"]
    torch._dynamo.reset()
    try:
        compiled = torch.compile(
            model, backend="xfuse", dynamic=True, options={"fallback": "error"}
        )
        with torch.no_grad():
            for t in (5, 9, 16):
                x = torch.randn(B, t, H * D)
                torch.testing.assert_close(compiled(x), model(x))
                call = functools.partial(compiled, x)
                assert _copies(call) <= _copies(functools.partial(model, x))
    finally:
        torch._dynamo.reset()
    assert dynamo.COMPILES["symbolic"] - start == 1
