"""group-cleanup after the fusion passes: recomputed producers are computed once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp
from xfuse.interpreters.graph import interpret
from xfuse.ir.context import make_context, parse
from xfuse.passes import get_all_passes
from xfuse.passes.fusion.fuse_greedy import FuseGreedyPass
from xfuse.passes.fusion.group_cleanup import GroupCleanupPass, body_dce

TEXT = """func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = graph.constant dense<3.0> : tensor<f32>
  %a = graph.exp %x : tensor<4x8xf32>
  %p = graph.mul %a, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %q = graph.add %a, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %r = graph.sub %p, %q : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %r : tensor<4x8xf32>
}"""


def fused_groups(f: Callable[..., Any], args: tuple[torch.Tensor, ...]) -> list[GroupOp]:
    """The groups of `f` imported, decomposed, fused and cleaned up (as `xfuse.compile` runs
    those passes)."""
    from xfuse.frontend.export import import_for_xfuse

    imported = import_for_xfuse(f, args).program.module
    for name in ("decompose", "fuse-scored", "group-cleanup"):
        get_all_passes()[name]()().apply(make_context(), imported)
    return [op for op in imported.walk() if isinstance(op, GroupOp)]


def count(module, kind: type) -> int:  # type: ignore[no-untyped-def]
    return sum(isinstance(op, kind) for op in module.walk())


def test_cleanup_dedupes_what_fusion_copied() -> None:
    m = parse(TEXT)
    FuseGreedyPass().apply(make_context(), m)
    before = (count(m, graph.ExpOp), count(m, graph.ConstantOp))
    GroupCleanupPass().apply(make_context(), m)
    m.verify()
    assert count(m, GroupOp) == 1
    assert (count(m, graph.ExpOp), count(m, graph.ConstantOp)) == (1, 1)
    assert before[0] >= 1 and before[1] >= 1
    x = torch.randn(4, 8)
    torch.testing.assert_close(interpret(m, [x]), interpret(parse(TEXT), [x]))


def test_cleanup_updates_the_kind_when_the_reduction_was_dead() -> None:
    m = parse("""func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = fusion.group(%x) kind = "reduction" rule = "fuse-greedy:sibling" : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %s = graph.reduce_sum %a dims = [0] : tensor<4xf32> -> tensor<f32>
    %n = graph.neg %a : tensor<4xf32>
    fusion.yield %n : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}""")
    GroupCleanupPass().apply(make_context(), m)
    (g,) = [op for op in m.walk() if isinstance(op, GroupOp)]
    assert g.kind.data == "elementwise"


def test_body_dce_erases_dead_ops_and_leaves_a_live_body_as_it_is(monkeypatch: Any) -> None:
    m = parse("""func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:sibling" : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.exp %a : tensor<4xf32>
    %d = graph.neg %e : tensor<4xf32>
    %n = graph.neg %e : tensor<4xf32>
    fusion.yield %n : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}""")
    (g,) = [op for op in m.walk() if isinstance(op, GroupOp)]
    body_dce(g.body)
    assert [op.name for op in g.block.ops] == ["graph.exp", "graph.neg", "fusion.yield"]
    # Every op of the body is read now: the liveness walk is not run again.
    import xfuse.passes.fusion.group_cleanup as cleanup

    def walk(*_: object) -> bool:
        raise AssertionError("region_dce ran on a body without dead ops")

    monkeypatch.setattr(cleanup, "region_dce", walk)
    body_dce(g.body)
    assert [op.name for op in g.block.ops] == ["graph.exp", "graph.neg", "fusion.yield"]


def test_outputs_of_different_element_counts_become_one_group_each() -> None:
    """A rotary-like value and its repeat (grouped-query attention's keys): one loop cannot
    write both, so each count gets its own group, recomputing what it needs (no fallback)."""
    import torch

    import xfuse

    def f(x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.sin(x) * c
        return y, y.unsqueeze(1).expand(2, 3, 8).reshape(6, 8)

    x, c = torch.randn(2, 8), torch.randn(8)
    compiled = xfuse.compile(f, (x, c), quiet=True, fallback="error")
    for got, want in zip(compiled(x, c), f(x, c), strict=True):
        torch.testing.assert_close(got, want)
    groups = fused_groups(f, (x, c))
    assert groups
    for group in groups:
        assert len({graph.numel(graph.shape_of(r)) for r in group.results}) == 1


def test_a_reduction_over_no_dims_does_not_keep_a_group_from_splitting() -> None:
    """`reduce_max` over no dims reduces nothing (the fuzzer's `x.amax(dim=())` of a scalar):
    its group runs one loop over its elements, so outputs of different counts split too."""
    from xfuse.passes.lowering.lower_to_loops import lower_group

    text = """func.func @f(%x: tensor<4x8xf32>, %s: tensor<f32>) -> (tensor<4x8xf32>, tensor<f32>) {
  %r:2 = fusion.group(%x, %s) kind = "reduction" rule = "fuse-scored:producer-consumer" : (tensor<4x8xf32>, tensor<f32>) -> (tensor<4x8xf32>, tensor<f32>) {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<f32>):
    %m = graph.reduce_max %b dims = [] : tensor<f32> -> tensor<f32>
    %e = graph.exp %m : tensor<f32>
    %y = graph.maximum %a, %m : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    fusion.yield %y, %e : tensor<4x8xf32>, tensor<f32>
  }
  func.return %r#0, %r#1 : tensor<4x8xf32>, tensor<f32>
}"""
    m = parse(text)
    GroupCleanupPass().apply(make_context(), m)
    m.verify()
    groups = [op for op in m.walk() if isinstance(op, GroupOp)]
    assert len(groups) == 2
    for i, group in enumerate(groups):
        lower_group(group, f"k{i}")
    x, s = torch.randn(4, 8), torch.randn(())
    for got, want in zip(interpret(m, [x, s]), interpret(parse(text), [x, s]), strict=True):
        torch.testing.assert_close(got, want)


def test_an_output_and_its_reshape_are_written_once() -> None:
    """A value that the next block reads and a 1x1 convolution's product reads reshaped: the
    group yields it once, and its reshape is a view after the group (the kernel wrote both
    shapes before). Values and aliasing as eager's: the returned reshape is a view of the
    returned value, as it is in eager."""
    import xfuse

    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.relu(x * 2.0)
        flat = y.reshape(4, 16)
        return w @ flat, y, flat

    x, w = torch.randn(1, 4, 4, 4), torch.randn(3, 4)
    (group,) = fused_groups(f, (x, w))
    assert [graph.shape_of(r) for r in group.results] == [(1, 4, 4, 4)]
    assert group.kind.data == "elementwise"
    compiled = xfuse.compile(f, (x, w), quiet=True, fallback="error")
    got, want = compiled(x, w), f(x, w)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
        assert g.stride() == e.stride()
    assert got[2].data_ptr() == got[1].data_ptr()


def test_output_reshapes_stay_inside_where_an_op_may_write_memory() -> None:
    """Sharing one buffer between two outputs is only safe where nothing writes in place."""
    m = parse("""func.func @f(%x: tensor<1x4x2x2xf32>, %t: tensor<4xf32>) -> (tensor<1x4x2x2xf32>, tensor<4x4xf32>, tensor<4xf32>) {
  %p, %q = fusion.group(%x) kind = "injective" rule = "fuse-scored:producer-consumer" : (tensor<1x4x2x2xf32>) -> (tensor<1x4x2x2xf32>, tensor<4x4xf32>) {
  ^bb0(%a: tensor<1x4x2x2xf32>):
    %r = graph.relu %a : tensor<1x4x2x2xf32>
    %v = graph.reshape %r : tensor<1x4x2x2xf32> -> tensor<4x4xf32>
    fusion.yield %r, %v : tensor<1x4x2x2xf32>, tensor<4x4xf32>
  }
  %u = graph.torch_call "aten.relu_.default"(%t) args = ["%t0"] kwargs = {} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %p, %q, %u : tensor<1x4x2x2xf32>, tensor<4x4xf32>, tensor<4xf32>
}""")
    GroupCleanupPass().apply(make_context(), m)
    (group,) = [op for op in m.walk() if isinstance(op, GroupOp)]
    assert len(group.results) == 2


def test_a_lone_reshaped_output_is_computed_in_its_own_shape() -> None:
    """A max pool whose `[C, H*W]` reshape alone is read (by a 1x1 convolution's product): the
    kernel loops over the pool's `[1, C, H, W]` (no flat index divided to find the window),
    and the reshape is a view after the group. Values as eager's, bit for bit."""
    import xfuse

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.max_pool2d(torch.relu(x), 3, 2, 1)
        return w @ y.reshape(4, 64)

    x, w = torch.randn(1, 4, 16, 16), torch.randn(3, 4)
    (group,) = fused_groups(f, (x, w))
    assert [graph.shape_of(r) for r in group.results] == [(1, 4, 8, 8)]
    compiled = xfuse.compile(f, (x, w), quiet=True, fallback="error")
    torch.testing.assert_close(compiled(x, w), f(x, w), rtol=0, atol=0)


def _attention_of_group(extra_reader: str) -> str:
    t, m = "tensor<1x2x4x8xf32>", "tensor<1x4x2x8xf32>"
    return f"""func.func @f(%x: {t}, %k: {t}) -> ({m}, {t}) {{
  %q = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:producer-consumer" : ({t}) -> {t} {{
  ^bb0(%a: {t}):
    %e = graph.exp %a : {t}
    %n = graph.neg %e : {t}
    fusion.yield %n : {t}
  }}
  %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k) args = ["%t0", "%t1", "%t1"] kwargs = {{}} orders = [array<i64: 0, 2, 1, 3>] : ({t}, {t}) -> {m}
  %r = {extra_reader}
  func.return %o, %r : {m}, {t}
}}"""


def test_a_query_group_writes_its_result_in_attentions_memory_order() -> None:
    """The query a group computes for attention whose output is [B, T, H, D] in memory is
    written so (a permute yielded), and a permute after the group gives attention its query."""
    text = _attention_of_group("graph.neg %k : tensor<1x2x4x8xf32>")
    m = parse(text)
    GroupCleanupPass().apply(make_context(), m)
    m.verify()
    (group,) = [op for op in m.walk() if isinstance(op, GroupOp)]
    assert graph.shape_of(group.results[0]) == (1, 4, 2, 8)
    assert isinstance(group.yield_op.values[0].owner, graph.PermuteOp)
    (view,) = group.results[0].uses
    assert isinstance(view.operation, graph.PermuteOp)
    (read,) = view.operation.results[0].uses
    assert isinstance(read.operation, graph.TorchCallOp) and read.index == 0
    x, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    for got, want in zip(interpret(m, [x, k]), interpret(parse(text), [x, k]), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_query_a_kernel_also_reads_keeps_its_layout() -> None:
    """A query that a kernel reads too stays row-major (the kernel would copy a permuted one)."""
    m = parse(_attention_of_group("graph.exp %q : tensor<1x2x4x8xf32>"))
    GroupCleanupPass().apply(make_context(), m)
    (group,) = [op for op in m.walk() if isinstance(op, GroupOp)]
    assert graph.shape_of(group.results[0]) == (1, 2, 4, 8)
    assert not any(isinstance(op, graph.PermuteOp) for op in m.walk())
