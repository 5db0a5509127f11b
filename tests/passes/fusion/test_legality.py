"""The shared legality gates: iteration spaces, mutation, and each named reason."""

from __future__ import annotations

import pytest

from xfuse.dialects import graph
from xfuse.dialects.effects import may_mutate
from xfuse.ir.context import parse
from xfuse.passes.fusion.graph import FusionGraph
from xfuse.passes.fusion.legality import (
    ARG_LIMIT,
    COMPOSITE_OP,
    EXTERN_BOUNDARY,
    FUSED,
    MAX_GROUP_SIZE,
    MUTATION_HAZARD,
    NOT_FUSABLE,
    SHAPE_MISMATCH,
    WOULD_CREATE_CYCLE,
    check_merge,
)
from xfuse.passes.fusion.op_facts import Space, combine_spaces


def R(domain: tuple[int, ...], *dims: int) -> Space:
    return Space(domain, frozenset(dims))


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        (R((4, 8)), R((4, 8)), R((4, 8))),
        (R((4, 8)), R((8,)), R((4, 8))),  # a bias broadcasts in
        (R((4, 1)), R((4, 8)), R((4, 8))),
        (R((4, 8), 1), R((4, 8)), R((4, 8), 1)),  # a reduction absorbs its domain
        (R((4, 8), 1), R((4, 1)), R((4, 8), 1)),  # ... and its keepdim shape
        (R((4, 8), 1), R((4,)), R((4, 8), 1)),  # ... and its reduced shape
        (R((4, 8)), R((32,)), R((4, 8))),  # a reshape between them
        (R((4, 8)), R((3, 5)), None),
        (R((4, 8), 1), R((4, 8), 0), None),  # reductions over different dims
        (R((4, 8), 1), R((4, 8, 2)), None),  # larger than the reduction's domain
        (R((4, 8), 1), R((32,)), None),
    ],
)
def test_combine_spaces(a: Space, b: Space, want: Space | None) -> None:
    assert combine_spaces(a, b) == want
    assert combine_spaces(b, a) == want


def test_may_mutate_reads_the_torch_schema() -> None:
    m = parse(
        """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.torch_call "aten.relu_.default"(%x) args = ["%t0"] kwargs = {} : (tensor<4xf32>) -> tensor<4xf32>
  %b = graph.torch_call "aten.cumsum.default"(%a) args = ["%t0", 0] kwargs = {} : (tensor<4xf32>) -> tensor<4xf32>
  %c = graph.torch_call "aten.no_such_op.default"(%b) args = ["%t0"] kwargs = {} : (tensor<4xf32>) -> tensor<4xf32>
  %d = graph.exp %c : tensor<4xf32>
  func.return %d : tensor<4xf32>
}"""
    )
    ops = list(m.body.block.first_op.body.block.ops)  # type: ignore[union-attr]
    assert [may_mutate(op) for op in ops] == [True, False, True, False, False]


GRAPH = """func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %v: tensor<3x5xf32>) -> (tensor<4x8xf32>, tensor<3x5xf32>, tensor<4x8xf32>) {
  %e = graph.exp %x : tensor<4x8xf32>
  %m = graph.matmul %e, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %d = graph.add %e, %m : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %n = graph.neg %v : tensor<3x5xf32>
  %s = graph.softmax %d dim = 1 : tensor<4x8xf32>
  %t = graph.tanh %x : tensor<4x8xf32>
  %i = graph.torch_call "aten.relu_.default"(%t) args = ["%t0"] kwargs = {} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %u = graph.neg %t : tensor<4x8xf32>
  func.return %s, %n, %u : tensor<4x8xf32>, tensor<3x5xf32>, tensor<4x8xf32>
}"""


@pytest.fixture
def g() -> FusionGraph:
    m = parse(GRAPH)
    return FusionGraph(m.body.block.first_op.body.block)  # type: ignore[union-attr]


def node(g: FusionGraph, name: str) -> graph.Operation:
    return next(op for op in g.nodes() if g.op_label(op).startswith(f"%{name} "))


@pytest.mark.parametrize(
    ("first", "second", "reason"),
    [
        ("e", "m", EXTERN_BOUNDARY),
        ("d", "s", COMPOSITE_OP),
        ("e", "d", WOULD_CREATE_CYCLE),
        ("n", "d", SHAPE_MISMATCH),
        ("t", "u", MUTATION_HAZARD),
        ("m", "d", EXTERN_BOUNDARY),
    ],
)
def test_named_reasons(g: FusionGraph, first: str, second: str, reason: str) -> None:
    verdict = check_merge(g, node(g, first), node(g, second), arg_limit=128)
    assert verdict.reason == reason
    assert not verdict.ok


def test_limits_and_predicate(g: FusionGraph) -> None:
    t, u = node(g, "t"), node(g, "u")
    g.mutators.clear()  # take the in-place op out of the picture
    assert check_merge(g, t, u, arg_limit=128).reason == FUSED
    assert check_merge(g, t, u, arg_limit=2).reason == ARG_LIMIT
    assert check_merge(g, t, u, arg_limit=128, max_group_size=1).reason == MAX_GROUP_SIZE
    refuse_neg = check_merge(
        g, t, u, arg_limit=128, predicate=lambda op: not isinstance(op, graph.NegOp)
    )
    assert refuse_neg.reason == NOT_FUSABLE


def test_cycle_search_returns_the_nodes_to_move(g: FusionGraph) -> None:
    # %e -> %m -> %d: fusing %e with a node after %d must move %m (and %d) below the group.
    e, u = node(g, "e"), node(g, "u")
    g.mutators.clear()
    from xfuse.passes.fusion.legality import find_cycle_or_moved

    moved = find_cycle_or_moved(g, e, u)
    assert moved is not None
    assert [g.op_label(op) for op in moved] == [
        "%m graph.matmul",
        "%d graph.add",
        "%s graph.softmax",
    ]
