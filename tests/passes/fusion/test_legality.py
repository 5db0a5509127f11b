"""The shared legality gates: iteration spaces, mutation, and each named reason."""

from __future__ import annotations

import pytest

from xfuse.dialects import graph
from xfuse.dialects.effects import may_mutate
from xfuse.ir.context import make_context, parse
from xfuse.passes.fusion.graph import FusionGraph
from xfuse.passes.fusion.legality import (
    ARG_LIMIT,
    COMPOSITE_OP,
    EXTERN_BOUNDARY,
    FUSED,
    LOOP_STRUCTURE,
    MAX_GROUP_SIZE,
    MUTATION_HAZARD,
    NOT_FUSABLE,
    RNG_ORDER,
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
        (R((4, 8), 1), R((32,)), R((4, 8), 1)),  # a full-size output of another shape
        (R((4, 8), 1), R((16,)), None),
    ],
)
def test_combine_spaces(a: Space, b: Space, want: Space | None) -> None:
    assert combine_spaces(a, b) == want
    assert combine_spaces(b, a) == want


def test_combined_static_spaces_are_remembered_and_symbolic_ones_are_not() -> None:
    first = combine_spaces(R((4, 8)), R((8,)))
    assert combine_spaces(R((4, 8)), R((8,))) is first
    # A symbolic domain equals the plain tuple of its ints: each comes back as itself.
    for _ in range(2):
        symbolic = Space(graph.SymbolicShape(("s0", 8)))
        assert combine_spaces(symbolic, R((8,))) is symbolic


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


DRAWS = """func.func @forward(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = graph.exp %x : tensor<4x8xf32>
  %da, %ma = graph.torch_call "aten.native_dropout.default"(%a) args = ["%t0", 1.000000e-01 : f64, true] kwargs = {} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  %b = graph.neg %y : tensor<4x8xf32>
  %db, %mb = graph.torch_call "aten.TARGET.default"(%b) args = ["%t0", 1.000000e-01 : f64, true] kwargs = {} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  %c = graph.tanh %x : tensor<4x8xf32>
  func.return %da, %db, %c : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}"""


@pytest.mark.parametrize(
    ("target", "reason"), [("native_dropout", RNG_ORDER), ("native_layer_norm", FUSED)]
)
def test_a_merge_keeps_the_order_of_draws_from_the_rng(target: str, reason: str) -> None:
    """Merging the siblings %a and %c moves %a's dropout below the group, which takes %c's
    place: past %b's dropout, which would then draw first and take %a's numbers. A call that
    draws nothing in between is no obstacle (the schema here is only parsed, never run)."""
    m = parse(DRAWS.replace("TARGET", target))
    g = FusionGraph(m.body.block.first_op.body.block)  # type: ignore[union-attr]
    verdict = check_merge(g, node(g, "a"), node(g, "c"), arg_limit=128, sibling=True)
    assert verdict.reason == reason, verdict


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


# --- loop structure: what one row loop can compute ---------------------------------------------

SOFTMAX = """
  %m = graph.reduce_max %x dims = [1] keepdim : tensor<6x8xf32> -> tensor<6x1xf32>
  %s = graph.sub %x, %m : tensor<6x8xf32>, tensor<6x1xf32> -> tensor<6x8xf32>
  %e = graph.exp %s : tensor<6x8xf32>
  %z = graph.reduce_sum %e dims = [1] keepdim : tensor<6x8xf32> -> tensor<6x1xf32>
  %y = graph.div %e, %z : tensor<6x8xf32>, tensor<6x1xf32> -> tensor<6x8xf32>"""

LOOP_PROGRAMS = {
    # A softmax whose output is permuted: the permuted element reads another row's sum.
    "softmax-permuted": (
        "tensor<8x6xf32>",
        SOFTMAX + "\n  %t = graph.permute %y perm = [1, 0] : tensor<6x8xf32> -> tensor<8x6xf32>",
    ),
    # The row sums laid out as a row: an output that is no row shape (1x6, not 6x1 or 6).
    "row-permuted": (
        "tensor<1x6xf32>",
        """
  %q = graph.slice %x start = [0, 0] limit = [6, 6] stride = [1, 1] : tensor<6x8xf32> -> tensor<6x6xf32>
  %r = graph.reduce_sum %q dims = [1] keepdim : tensor<6x6xf32> -> tensor<6x1xf32>
  %z = graph.exp %r : tensor<6x1xf32>
  %t = graph.reshape %z : tensor<6x1xf32> -> tensor<1x6xf32>""",
    ),
    # A row value reshaped to add a unit dim is still read at its own row.
    "unit-dim-reshape": (
        "tensor<6x8xf32>",
        """
  %r = graph.reduce_sum %x dims = [1] : tensor<6x8xf32> -> tensor<6xf32>
  %u = graph.reshape %r : tensor<6xf32> -> tensor<6x1xf32>
  %t = graph.sub %x, %u : tensor<6x8xf32>, tensor<6x1xf32> -> tensor<6x8xf32>""",
    ),
    # A full-shape value reshaped to as many elements (heads split off): same memory position.
    "full-reshaped": (
        "tensor<6x2x4xf32>",
        SOFTMAX + "\n  %t = graph.reshape %y : tensor<6x8xf32> -> tensor<6x2x4xf32>",
    ),
    # The reduced dim split into heads and merged back: the own row.
    "heads-round-trip": (
        "tensor<6x8xf32>",
        SOFTMAX
        + """
  %a = graph.reshape %y : tensor<6x8xf32> -> tensor<6x2x4xf32>
  %b = graph.exp %a : tensor<6x2x4xf32>
  %t = graph.reshape %b : tensor<6x2x4xf32> -> tensor<6x8xf32>""",
    ),
    # Both dims split and merged back: the same element, but lower-to-loops' index algebra
    # does not see through the split of the outer dim, so the gate refuses it too.
    "reshape-round-trip": (
        "tensor<6x8xf32>",
        SOFTMAX
        + """
  %a = graph.reshape %y : tensor<6x8xf32> -> tensor<3x2x2x4xf32>
  %b = graph.exp %a : tensor<3x2x2x4xf32>
  %t = graph.reshape %b : tensor<3x2x2x4xf32> -> tensor<6x8xf32>""",
    ),
    # A group norm: rows of a merged dim, normalized, merged back, scaled per channel.
    "group-norm": (
        "tensor<6x8xf32>",
        """
  %g = graph.reshape %x : tensor<6x8xf32> -> tensor<6x2x4xf32>
  %mu = graph.reduce_mean %g dims = [2] keepdim : tensor<6x2x4xf32> -> tensor<6x2x1xf32>
  %d = graph.sub %g, %mu : tensor<6x2x4xf32>, tensor<6x2x1xf32> -> tensor<6x2x4xf32>
  %n = graph.reshape %d : tensor<6x2x4xf32> -> tensor<6x8xf32>
  %w = graph.exp %x : tensor<6x8xf32>
  %t = graph.mul %n, %w : tensor<6x8xf32>, tensor<6x8xf32> -> tensor<6x8xf32>""",
    ),
}


def loop_program(name: str) -> str:
    result, body = LOOP_PROGRAMS[name]
    return (
        f"func.func @forward(%x: tensor<6x8xf32>) -> {result} {{{body}\n"
        f"  func.return %t : {result}\n}}"
    )


@pytest.mark.parametrize("fuser", ["fuse-greedy", "fuse-scored"])
@pytest.mark.parametrize(
    ("name", "groups", "refused"),
    [
        ("softmax-permuted", 2, "would be read at another row than its own"),
        ("row-permuted", None, "%t of shape [1, 6] is neither the full shape [6, 6]"),
        ("unit-dim-reshape", 1, None),
        ("full-reshaped", 1, None),
        ("heads-round-trip", 1, None),
        ("reshape-round-trip", None, "would be read at another row than its own"),
        ("group-norm", 1, None),
    ],
)
def test_groups_split_where_one_row_loop_cannot_compute_them(
    fuser: str, name: str, groups: int | None, refused: str | None
) -> None:
    """Merges that one row loop could not compute are refused as `loop-structure`, with what
    goes wrong; the groups formed all lower to loops, and the legal shapes stay one group."""
    from xfuse.dialects.fusion import GroupOp
    from xfuse.passes import get_all_passes
    from xfuse.passes.lowering.lower_to_loops import lower_group

    module = parse(loop_program(name))
    fuse = get_all_passes()[fuser]()()
    fuse.apply(make_context(), module)
    found = [op for op in module.walk() if isinstance(op, GroupOp)]
    assert groups is None or len(found) == groups
    for i, group in enumerate(found):
        lower_group(group, f"k{i}")  # raises if one kernel cannot express it
    details = [d.detail for d in fuse.decisions if d.reason == LOOP_STRUCTURE]
    if refused is None:
        assert details == []
    else:
        assert details and all(refused in d for d in details), details


def test_the_loop_structure_detail_names_the_reduction_and_the_layout_op() -> None:
    m = parse(loop_program("softmax-permuted"))
    g = FusionGraph(m.body.block.first_op.body.block)  # type: ignore[union-attr]
    y, t = node(g, "y"), node(g, "t")
    group = g.merge(y, t, "test")
    verdict = check_merge(g, node(g, "z"), group, arg_limit=128)
    assert verdict.reason == LOOP_STRUCTURE
    assert "%z graph.reduce_sum" in verdict.detail
    assert "through %t graph.permute" in verdict.detail
