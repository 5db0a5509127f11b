"""A layout op's torch view (`VIEW_IMPLS`), one table for static programs (`ViewStep`) and
symbolic ones (`view_at_sizes`, the CPU runner's method calls): the view at a call's sizes
is eager's, a symbolic dim sliced whole (`SliceOp.index`)."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from xfuse.dialects import graph
from xfuse.frontend import import_module
from xfuse.interpreters.graph import find_function
from xfuse.runtime.steps import VIEW_IMPLS, View
from xfuse.runtime.symbolic import view_at_sizes


def layouts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x[:, 1:9:2].exp(), x.reshape(-1, 4, 4).exp(), x.t().exp()


def eager_views(x: torch.Tensor) -> list[torch.Tensor]:
    return [x[:, 1:9:2], x.reshape(-1, 4, 4), x.t()]


def layout_ops(dynamic: bool) -> list[graph.SliceOp | graph.ReshapeOp | graph.PermuteOp]:
    """`layouts`' slice, reshape and permute, imported with a symbolic batch or static."""
    shapes = {"x": {0: Dim("batch", min=2, max=64)}} if dynamic else None
    imported = import_module(layouts, (torch.randn(5, 16),), dynamic_shapes=shapes)
    forward = find_function(imported.module, "forward")
    kinds = (graph.SliceOp, graph.ReshapeOp, graph.PermuteOp)
    return [op for op in forward.body.block.ops if isinstance(op, kinds)]


def test_a_slice_index_keeps_a_symbolic_dim_whole() -> None:
    slice_op = layout_ops(dynamic=True)[0]
    assert isinstance(slice_op, graph.SliceOp)
    assert slice_op.bounds == ((0, 1), (-1, 9), (1, 2))
    assert slice_op.index == (slice(0, None, 1), slice(1, 9, 2))
    static = layout_ops(dynamic=False)[0]
    assert isinstance(static, graph.SliceOp)
    assert static.index == (slice(0, 5, 1), slice(1, 9, 2))


def test_a_symbolic_layout_ops_view_names_its_symbols() -> None:
    """The table's view of a symbolic op: a reshape's dims name the batch's symbol, the slice
    keeps the batch whole, the permute is its permutation."""
    slice_op, reshape, permute = (VIEW_IMPLS[op.name](op) for op in layout_ops(dynamic=True))
    (symbol, _) = graph.dims_of(layout_ops(dynamic=True)[0].input)
    assert isinstance(symbol, str)
    assert slice_op == View("__getitem__", (slice(0, None, 1), slice(1, 9, 2)))
    assert reshape == View("reshape", (symbol, 4, 4))
    assert permute == View("permute", (1, 0))


@pytest.mark.parametrize("batch", [2, 5, 33])
def test_a_symbolic_layout_ops_view_at_a_calls_sizes_is_eagers(batch: int) -> None:
    ops = layout_ops(dynamic=True)
    (symbol, _) = graph.dims_of(ops[0].input)
    assert isinstance(symbol, str)
    x = torch.randn(batch, 16)
    for op, want in zip(ops, eager_views(x), strict=True):
        got = view_at_sizes(VIEW_IMPLS[op.name](op))(x, {symbol: batch})
        assert got.shape == want.shape and got.stride() == want.stride()
        assert got.data_ptr() == want.data_ptr()  # a view, no copy


def test_a_static_layout_ops_view_is_eagers() -> None:
    x = torch.randn(5, 16)
    for op, want in zip(layout_ops(dynamic=False), eager_views(x), strict=True):
        got = VIEW_IMPLS[op.name](op)(x)
        assert got.shape == want.shape and got.stride() == want.stride()
        assert got.data_ptr() == want.data_ptr()
