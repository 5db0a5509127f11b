"""Groupings that cut the zoo's kernel count (fewer kernels than Inductor): a
consumer computes a producer that reduces nothing where it reads it (`inline_absorbs`): slices
and concats (GPT-2's QKV split, Llama's rotate-half) and broadcasts (Llama's repeated key/value
heads); and each program below compiles to one kernel that matches eager."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import xfuse
from tests.passes.fusion.test_legality import node
from xfuse.dialects import graph
from xfuse.ir.context import parse
from xfuse.passes.fusion.graph import FusionGraph
from xfuse.passes.fusion.legality import FUSED, SHAPE_MISMATCH, VIEW_FOR_EXTERN, check_merge

GRAPH = """func.func @forward(%x: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x8xf32>, tensor<2x4xf32>) {
  %e = graph.exp %x : tensor<4x8xf32>
  %s = graph.slice %e start = [0, 0] limit = [4, 4] stride = [1, 1] : tensor<4x8xf32> -> tensor<4x4xf32>
  %n = graph.neg %x : tensor<4x8xf32>
  %t = graph.slice %n start = [0, 4] limit = [4, 8] stride = [1, 1] : tensor<4x8xf32> -> tensor<4x4xf32>
  %a = graph.abs %x : tensor<4x8xf32>
  %u = graph.slice %a start = [0, 0] limit = [2, 4] stride = [1, 1] : tensor<4x8xf32> -> tensor<2x4xf32>
  func.return %s, %t, %n, %u : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x8xf32>, tensor<2x4xf32>
}"""


@pytest.fixture
def g() -> FusionGraph:
    m = parse(GRAPH)
    return FusionGraph(m.body.block.first_op.body.block)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("first", "second", "reason"),
    [
        ("e", "s", FUSED),  # exp computed where the slice reads it
        ("n", "t", SHAPE_MISMATCH),  # %n is an output too: it would be computed twice
        ("a", "u", FUSED),
    ],
)
def test_inline_absorbs(g: FusionGraph, first: str, second: str, reason: str) -> None:
    assert check_merge(g, node(g, first), node(g, second), arg_limit=128).reason == reason


def _one_kernel(fn: object, *inputs: torch.Tensor) -> None:
    compiled = xfuse.compile(fn, inputs, quiet=True, fallback="error")
    torch.testing.assert_close(compiled(*inputs), fn(*inputs))  # type: ignore[operator]
    assert len(compiled.kernels) == 1, [g.ops for g in compiled.groups]


def test_qkv_split_into_heads_is_one_kernel() -> None:
    """GPT-2's attention input: bias add, split into q, k, v, each into heads."""

    def split(y: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = (y + b).split(64, dim=-1)
        return tuple(t.view(1, 16, 4, 16).transpose(1, 2).contiguous() for t in (q, k, v))

    _one_kernel(split, torch.randn(1, 16, 192), torch.randn(192))


def test_rotary_embedding_is_one_kernel() -> None:
    """Llama's rotary embedding of the query heads: rotate-half is two slices and a concat."""

    def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q = x.view(1, 16, 4, 16).transpose(1, 2)
        half = torch.cat((-q[..., 8:], q[..., :8]), dim=-1)
        return q * cos + half * sin

    _one_kernel(rope, torch.randn(1, 16, 64), torch.randn(1, 1, 16, 16), torch.randn(1, 1, 16, 16))


def test_repeated_kv_heads_is_one_kernel() -> None:
    """Llama's grouped-query attention: key/value heads transposed, then each repeated twice."""

    def repeat_kv(x: torch.Tensor) -> torch.Tensor:
        kv = x.view(1, 16, 2, 16).transpose(1, 2)
        return kv[:, :, None].expand(1, 2, 2, 16, 16).reshape(1, 4, 16, 16)

    _one_kernel(repeat_kv, torch.randn(1, 16, 32))


def test_query_key_value_heads_are_one_kernel() -> None:
    """BERT's attention input: three GEMMs, each followed by its bias add and transpose into
    heads; the three groups share no tensor and merge horizontally into one kernel."""
    torch.manual_seed(0)
    projections = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(3))

    def heads(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(p(x).view(1, 16, 4, 16).transpose(1, 2).contiguous() for p in projections)

    x = torch.randn(1, 16, 64)
    compiled = xfuse.compile(heads, (x,), quiet=True, fallback="error")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), heads(x))
    assert len(compiled.kernels) == 1, [g.ops for g in compiled.groups]
    assert [g.rule for g in compiled.groups] == ["fuse-scored:horizontal"]


@pytest.mark.parametrize("bias", [False, True])
def test_layout_between_externs_is_views_not_kernels(bias: bool) -> None:
    """Attention's output transposed back into the output projection's input, and the heads
    split for the attention, are torch views of the externs' outputs: no kernel, torch copies
    only where the real strides allow no view. The query projection's bias stays in
    its GEMM (`decompose` keeps a linear whole that only externs read, through views)."""
    import torch.nn.functional as F

    x, w, o = torch.randn(2, 8, 32), torch.randn(32, 32), torch.randn(32, 32)
    b = torch.randn(32) if bias else None

    def fn(x: torch.Tensor, w: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        q = F.linear(x, w, b).reshape(2, 8, 4, 8).permute(0, 2, 1, 3)
        a = F.scaled_dot_product_attention(q, q, q)
        return F.linear(a.permute(0, 2, 1, 3).reshape(2, 8, 32), o)

    compiled = xfuse.compile(fn, (x, w, o), quiet=True, fallback="error")
    torch.testing.assert_close(compiled(x, w, o), fn(x, w, o))
    assert not compiled.kernels, [g.ops for g in compiled.groups]
    ops = compiled.default.op_names
    assert ops.count("graph.linear") == 2 and "graph.add" not in ops, ops


class _TorchClones(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the clones torch makes under it (a reshape that cannot view, `.contiguous()`)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.ops.aten.clone.default:
            self.copies += 1
        return func(*args, **(kwargs or {}))


def test_heads_torch_would_copy_are_written_by_one_kernel_in_eagers_layout() -> None:
    """`nn.MultiheadAttention` splits its packed projection into heads through a permute and
    `.contiguous()`; as views of the GEMM's row-major result, the reshape into heads is a copy
    torch makes with its strided copy, one per query, key and value. One kernel writes all
    three in eager's layout instead, and the views after it (the heads' transpose, which the
    attention reads in place) stay torch views: the compiled call makes no torch copy, where
    eager makes one."""
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(64, 4, batch_first=True).eval()

    def attend(x: torch.Tensor) -> torch.Tensor:
        return attention(x, x, x, need_weights=False)[0]

    x = torch.randn(2, 10, 64)
    eager, xfused = _TorchClones(), _TorchClones()
    with eager:
        expected = attend(x)
    with torch.no_grad():
        compiled = xfuse.compile(attend, (x,), quiet=True, fallback="error")
        with xfused:
            torch.testing.assert_close(compiled(x), expected)
    assert eager.copies >= 1 and xfused.copies == 0, (eager.copies, xfused.copies)
    heads = [g for g in compiled.groups if "graph.slice" in g.ops]
    assert len(heads) == 1 and set(heads[0].ops) <= {
        "graph.reshape",
        "graph.permute",
        "graph.slice",
    }


def test_a_consumer_reads_a_moved_producer_in_place_however_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A depthwise stencil's weight columns (slices of the weight seen as [1, C, 3, 3]) are
    read 100 times per element, over `MAX_INLINE_READS`: they only move values, so the
    stencil's group reads them in place. Without that rule they are a group of their own, a
    kernel that copies them."""
    from tests.passes.transforms.test_depthwise_stencil import Conv
    from xfuse.dialects.fusion import GroupOp
    from xfuse.frontend import import_module
    from xfuse.passes.fusion import legality
    from xfuse.runtime.driver import run_pipeline

    model = Conv(8, (3, 3), padding=1)  # MobileNet's: activation, convolution, batch norm

    def groups() -> int:
        imported = import_module(model.eval(), (torch.randn(1, 8, 10, 10),))
        run_pipeline("decompose,depthwise-stencil,fuse-scored", imported.module)
        return sum(isinstance(op, GroupOp) for op in imported.module.walk())

    assert groups() == 2  # the activation (read 9 times per element); the stencil and after
    monkeypatch.setattr(legality, "moves_only", lambda node: False)
    assert groups() == 3


def test_a_row_kernel_writes_a_reshape_of_its_rows_where_it_computes_them() -> None:
    """A softmax's backward cast to bfloat16 and reshaped so that its rows are cut (autocast's
    backward of a language model's loss: [B*T, V] -> [B, T, V]): the output is the row
    value at the iteration's own element, so the reduction and its readers share one kernel."""

    def backward(g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        s = (g * y).sum(-1, keepdim=True)
        return (torch.exp(y) * s - g).reshape(2, 16, 100).to(torch.bfloat16)

    _one_kernel(backward, torch.randn(32, 100), torch.randn(32, 100))


VIEWED_TWICE = """func.func @forward(%x: tensor<8x4xf32>, %w: tensor<4x4xf32>, %v: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<4x4xf32>) {
  %e = graph.exp %x : tensor<8x4xf32>
  %t = graph.permute %e perm = [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %a = graph.matmul %e, %w : tensor<8x4xf32>, tensor<4x4xf32> -> tensor<8x4xf32>
  %b = graph.matmul %t, %v : tensor<4x8xf32>, tensor<8x4xf32> -> tensor<4x4xf32>
  func.return %a, %b : tensor<8x4xf32>, tensor<4x4xf32>
}"""


def test_a_transpose_for_a_matmul_of_a_value_written_anyway_stays_a_view() -> None:
    """The gradient of a linear layer's input and weight read one tensor, as it is and
    transposed: fused, its group would write it twice; as a view, once."""
    g = FusionGraph(parse(VIEWED_TWICE).body.block.first_op.body.block)  # type: ignore[union-attr]
    verdict = check_merge(g, node(g, "e"), node(g, "t"), arg_limit=128)
    assert verdict.reason == VIEW_FOR_EXTERN, verdict

    def grads(x: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        e = torch.exp(x)
        return e @ w, e.t() @ v

    inputs = (torch.randn(8, 4), torch.randn(4, 4), torch.randn(8, 4))
    compiled = xfuse.compile(grads, inputs, quiet=True, fallback="error")
    torch.testing.assert_close(compiled(*inputs), grads(*inputs))
    assert len(compiled.kernels) == 1  # the exp's; the transpose is a view of its output
    assert not any("permute" in op for g in compiled.groups for op in g.ops)


def test_a_transpose_only_a_matmul_reads_stays_a_view_of_its_producer() -> None:
    """A linear layer's weight cast under autocast and transposed for its matmul (a language
    model's head): the cast's kernel writes the weight in its own layout and the matmul reads
    the transpose in place, as eager's `t()` is a view; fused, the kernel would write it
    transposed. A permute of other dims stays in the group."""

    def head(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w.to(torch.float64).t()

    inputs = (torch.randn(8, 16, dtype=torch.float64), torch.randn(32, 16))
    compiled = xfuse.compile(head, inputs, quiet=True, fallback="error")
    torch.testing.assert_close(compiled(*inputs), head(*inputs))
    assert len(compiled.kernels) == 1  # the cast's; the transpose is a view of its output
    assert not any("permute" in op for g in compiled.groups for op in g.ops)

    def saved(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = w.to(torch.float64).t()
        return x @ t, t.t()  # the transpose returned through another view, as saved for grads

    compiled = xfuse.compile(saved, inputs, quiet=True, fallback="error")
    torch.testing.assert_close(compiled(*inputs), saved(*inputs))
    assert not any("permute" in op for g in compiled.groups for op in g.ops)

    def heads(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w.to(torch.float64).reshape(2, 16, 16).permute(1, 0, 2).reshape(16, 32)

    inputs = (torch.randn(8, 16, dtype=torch.float64), torch.randn(32, 16))
    compiled = xfuse.compile(heads, inputs, quiet=True, fallback="error")
    torch.testing.assert_close(compiled(*inputs), heads(*inputs))
    assert any("permute" in op for g in compiled.groups for op in g.ops)


TRANSPOSED_TWICE = """func.func @forward(%w: tensor<8x4xf32>, %x: tensor<2x4xbf16>) -> (tensor<2x8xbf16>, tensor<8x4xbf16>) {
  %c = graph.cast %w : tensor<8x4xf32> to tensor<8x4xbf16>
  %t = graph.permute %c perm = [1, 0] : tensor<8x4xbf16> -> tensor<4x8xbf16>
  %y = graph.matmul %x, %t : tensor<2x4xbf16>, tensor<4x8xbf16> -> tensor<2x8xbf16>
  %s = graph.permute %t perm = [1, 0] : tensor<4x8xbf16> -> tensor<8x4xbf16>
  func.return %y, %s : tensor<2x8xbf16>, tensor<8x4xbf16>
}"""


def test_a_transpose_a_matmul_reads_and_a_view_of_it_returned_stays_a_view() -> None:
    """Autocast's head weight as AOTAutograd's forward has it: cast, transposed for the
    matmul, and transposed back for the backward (returned)."""
    g = FusionGraph(parse(TRANSPOSED_TWICE).body.block.first_op.body.block)  # type: ignore[union-attr]
    verdict = check_merge(g, node(g, "c"), node(g, "t"), arg_limit=128)
    assert verdict.reason == VIEW_FOR_EXTERN, verdict


TRANSPOSED_FOR_A_CALL = """func.func @forward(%w: tensor<8x4xf32>, %x: tensor<2x4xf32>) -> tensor<2x8xf32> {
  %c = graph.exp %w : tensor<8x4xf32>
  %t = graph.permute %c perm = [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %y = graph.torch_call "aten.mm.default"(%x, %t) args = ["%t0", "%t1"] kwargs = {} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}"""


@pytest.mark.parametrize("reads_transposed", [True, False])
def test_the_readers_fact_keeps_a_transpose_a_view(
    monkeypatch: pytest.MonkeyPatch, reads_transposed: bool
) -> None:
    """A transpose stays a view of its producer where its readers read a transposed operand
    in place (`OpFacts.reads_transposed`), whatever op they are; without the fact, it fuses."""
    facts = replace(graph.TorchCallOp.FACTS, reads_transposed=reads_transposed)
    monkeypatch.setattr(graph.TorchCallOp, "FACTS", facts)
    g = FusionGraph(parse(TRANSPOSED_FOR_A_CALL).body.block.first_op.body.block)  # type: ignore[union-attr]
    verdict = check_merge(g, node(g, "c"), node(g, "t"), arg_limit=128)
    assert verdict.reason == (VIEW_FOR_EXTERN if reads_transposed else FUSED), verdict


def test_lone_reductions_over_one_space_are_one_kernel() -> None:
    """Two reductions of unrelated tensors over the same space (a split norm's final sums of
    its two sets of partial sums) merge horizontally, though neither joined a group."""

    def sums(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a.sum(dim=1), b.amax(dim=1)

    a, b = torch.randn(4, 448), torch.randn(4, 448)
    compiled = xfuse.compile(sums, (a, b), quiet=True, fallback="error")
    torch.testing.assert_close(compiled(a, b), sums(a, b))
    assert len(compiled.kernels) == 1, [g.ops for g in compiled.groups]
    assert [g.rule for g in compiled.groups] == ["fuse-scored:horizontal"]
