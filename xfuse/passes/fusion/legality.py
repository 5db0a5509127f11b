"""
Fusion legality, shared by `fuse-greedy` and `fuse-scored`.

Every check answers with a named reason (the vocabulary of `--fusion-report`):

- `extern-boundary`  an `Extern` op (matmul, linear, torch_call) never joins a group;
- `composite-op`     a `Composite` op (softmax, layer_norm, ...) must be decomposed first;
- `not-fusable`      not a graph op, or refused by the caller's fusability predicate;
- `shape-mismatch`   the two iteration spaces are unrelated (see `combine_spaces`), and the
                     consumer is no pad or pool taking in its producer (`window_absorbs`);
- `max-group-size`   the merged group would hold more ops than allowed;
- `window`           (fuse-scored) the pair is further apart in the block than the window;
- `max-rounds`       (fuse-scored) the pair was still waiting when the rounds ran out;
- `arg-limit`        the merged group would take more inputs plus outputs than allowed;
- `mutation-hazard`  fusing would move a read across an op that may write memory;
- `would-create-cycle` a path leaves the pair and comes back (producer -> X -> consumer).

Cycles are found with topological positions: every path from `first` to `second` runs through
nodes placed strictly between them, so the search never leaves that span and costs what the
nodes depending on `first` inside the span cost, not the size of the graph. The same search
yields the nodes that must move below the merged group to keep the block in topological order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Required, TypedDict, Unpack

from xdsl.ir import Operation, SSAValue

from xfuse.dialects import graph
from xfuse.passes.fusion.graph import FusionGraph, Node, by_position
from xfuse.passes.fusion.op_facts import (
    FUSABLE_KINDS,
    MAX_WINDOW_READS,
    combine_spaces,
    gather_mismatch,
    is_constant_op,
    is_window_op,
    space_of_op,
    window_reads,
)

# ---------------------------------------------------------------------------------------------
# Reasons
# ---------------------------------------------------------------------------------------------

FUSED = "fused"
WOULD_CREATE_CYCLE = "would-create-cycle"
ARG_LIMIT = "arg-limit"
MUTATION_HAZARD = "mutation-hazard"
SHAPE_MISMATCH = "shape-mismatch"
EXTERN_BOUNDARY = "extern-boundary"
WINDOW = "window"
MAX_GROUP_SIZE = "max-group-size"
MAX_ROUNDS = "max-rounds"
NOT_FUSABLE = "not-fusable"
COMPOSITE_OP = "composite-op"

REASONS = (
    FUSED,
    WOULD_CREATE_CYCLE,
    ARG_LIMIT,
    MUTATION_HAZARD,
    SHAPE_MISMATCH,
    EXTERN_BOUNDARY,
    WINDOW,
    MAX_GROUP_SIZE,
    MAX_ROUNDS,
    NOT_FUSABLE,
    COMPOSITE_OP,
)

# Op kinds that are boundaries, with the reason that names them.
BOUNDARY_REASONS = {"extern": EXTERN_BOUNDARY, "composite": COMPOSITE_OP}

Predicate = Callable[[Operation], bool]


@dataclass(frozen=True)
class Verdict:
    """The answer of a gate: `reason` is `fused` when the pair may fuse; `moved` lists the
    nodes between the pair that depend on the first node (they move below the merged group)."""

    reason: str
    detail: str = ""
    moved: tuple[Node, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.reason == FUSED


def refuse(reason: str, detail: str = "") -> Verdict:
    return Verdict(reason, detail)


PASSED = Verdict(FUSED)
"""The answer of a gate that passed with nothing to move (shared: a frozen dataclass costs a
few microseconds to build, and the gates answer hundreds of thousands of times)."""


# ---------------------------------------------------------------------------------------------
# Kinds
# ---------------------------------------------------------------------------------------------


def is_candidate_node(node: Node) -> bool:
    """Nodes that fusion examines at all: groups and graph ops other than constants (data,
    not computation). `func.return` and foreign ops are not examined."""
    op = node.op
    if op is None:
        return True
    return node.kind != "opaque" and not is_constant_op(op)


def fusability(node: Node, predicate: Predicate | None = None) -> Verdict:
    """Whether a node may be part of a group at all."""
    op = node.op
    if op is None:
        return PASSED
    kind = node.kind
    if kind in BOUNDARY_REASONS:
        return refuse(BOUNDARY_REASONS[kind], f"{op.name} is {kind}")
    if kind not in FUSABLE_KINDS or is_constant_op(op):
        return refuse(NOT_FUSABLE, f"{op.name} is not a fusable graph op")
    if predicate is not None and not predicate(op):
        return refuse(NOT_FUSABLE, f"{op.name} refused by the fusability predicate")
    return PASSED


def edge_gather_mismatch(g: FusionGraph, first: Node, second: Node) -> str | None:
    """`gather_mismatch` over the ops of `second` that read values of `first`."""
    if not second.gathers:
        return None  # most nodes hold no slice or concat: skip the walk over the uses
    return gather_mismatch(g.edge_readers(first, second))


# ---------------------------------------------------------------------------------------------
# Gates
# ---------------------------------------------------------------------------------------------


def find_cycle_or_moved(g: FusionGraph, first: Node, second: Node) -> tuple[Node, ...] | None:
    """Nodes strictly between `first` and `second` that depend on `first`, in block order; None
    when `second` depends on one of them (merging the two would create a cycle)."""
    limit = second.pos
    stack, seen = [first], {first}
    found: list[Node] = []
    while stack:
        node = stack.pop()
        for succ in g.successors(node):
            if succ is second:
                if node is not first:
                    return None
                continue
            if succ in seen or succ.pos >= limit:
                continue
            seen.add(succ)
            found.append(succ)
            stack.append(succ)
    found.sort(key=lambda n: n.pos)
    return tuple(found)


def mutation_between(g: FusionGraph, first: Node, second: Node) -> Node | None:
    """A node that may mutate memory placed between the two nodes: fusing would move reads of
    `first` below it (and its dependants below `second`'s reads)."""
    lo, hi = first.pos, second.pos
    for node in g.mutators:
        if node.alive and lo < node.pos < hi:
            return node
    return None


class PairLimits(TypedDict, total=False):
    """The limits `check_pair` takes by keyword (`arg_limit` is required)."""

    arg_limit: Required[int]
    max_group_size: int | None
    predicate: Predicate | None
    sibling: bool


def check_merge(g: FusionGraph, first: Node, second: Node, **limits: Unpack[PairLimits]) -> Verdict:
    """Every gate for merging node `first` into node `second` (`first` earlier in the block):
    producer into consumer, or two siblings reading the same tensor (`sibling`)."""
    verdict = check_pair(g, first, second, **limits)
    return check_order(g, first, second) if verdict.ok else verdict


def check_pair(
    g: FusionGraph,
    first: Node,
    second: Node,
    *,
    arg_limit: int,
    max_group_size: int | None = None,
    predicate: Predicate | None = None,
    sibling: bool = False,
) -> Verdict:
    """The gates that depend only on the two nodes: kinds, shapes, size, arguments. Their
    answer holds as long as neither node changes (merges elsewhere replace no node here)."""
    for node in (first, second):
        if node.op is not None:  # a group is fusable: its ops passed when they joined
            verdict = fusability(node, predicate)
            if verdict.reason != FUSED:
                return verdict
    a, b = g.space(first), g.space(second)
    if sibling and a.domain != b.domain:
        return refuse(SHAPE_MISMATCH, f"siblings iterate {a} and {b}")
    if combine_spaces(a, b) is None and (sibling or not window_absorbs(g, first, second)):
        return refuse(SHAPE_MISMATCH, f"{a} vs {b}")
    detail = edge_gather_mismatch(g, first, second)
    if detail is not None:
        return refuse(SHAPE_MISMATCH, detail)
    if max_group_size is not None:
        size = first.size + second.size
        if size > max_group_size:
            return refuse(MAX_GROUP_SIZE, f"{size} ops > {max_group_size}")
    if g.merged_arg_bound(first, second) <= arg_limit:
        return PASSED  # the common case, without building the union of the inputs
    args = g.merged_arg_count(first, second)
    if args > arg_limit:
        return refuse(ARG_LIMIT, f"{args} inputs+outputs > {arg_limit}")
    return PASSED


def check_order(g: FusionGraph, first: Node, second: Node) -> Verdict:
    """The gates that depend on the rest of the graph: mutation and cycles. Re-run before
    applying a decision taken earlier, since merges elsewhere can add paths."""
    mutator = mutation_between(g, first, second)
    if mutator is not None:
        return refuse(MUTATION_HAZARD, f"{g.op_label(mutator)} may write memory in between")
    moved = find_cycle_or_moved(g, first, second)
    if moved is None:
        return refuse(WOULD_CREATE_CYCLE, "a path leaves the pair and comes back")
    return Verdict(FUSED, moved=moved)


def check_recompute(
    g: FusionGraph,
    producer: Node,
    consumer: Node,
    *,
    arg_limit: int,
    predicate: Predicate | None = None,
) -> Verdict:
    """Gates for copying the single op `producer` into `consumer`. The copy reads only the
    producer's inputs, so no cycle can form; mutation, shapes and arguments still matter."""
    for node in (producer, consumer):
        verdict = fusability(node, predicate)
        if not verdict.ok:
            return verdict
    a, b = g.space(producer), g.space(consumer)
    if combine_spaces(a, b) is None:
        return refuse(SHAPE_MISMATCH, f"{a} vs {b}")
    detail = edge_gather_mismatch(g, producer, consumer)
    if detail is not None:
        return refuse(SHAPE_MISMATCH, detail)
    args = g.recompute_arg_count(producer, consumer)
    if args > arg_limit:
        return refuse(ARG_LIMIT, f"{args} inputs+outputs > {arg_limit}")
    mutator = mutation_between(g, producer, consumer)
    if mutator is not None:
        return refuse(MUTATION_HAZARD, f"{g.op_label(mutator)} may write memory in between")
    return PASSED


def sibling_candidates(
    g: FusionGraph, value: SSAValue, readers: tuple[Node, ...] | None = None
) -> list[list[Node]]:
    """The fusable readers of `value` (`readers`, when the caller has them), bucketed by
    iteration domain, in block order."""
    if readers is None:
        readers = g.readers_of(value)
    if len(readers) < 2 or graph.numel(graph.shape_of(value)) <= 1:
        return []  # most values have one reader: no siblings, and no shape to look at
    buckets: dict[tuple[int, ...], list[Node]] = {}
    for node in sorted(readers, key=by_position):
        if fusability(node).ok:
            buckets.setdefault(g.space(node).domain, []).append(node)
    return [b for b in buckets.values() if len(b) > 1]


# ---------------------------------------------------------------------------------------------
# Windowed consumers (pool task)
# ---------------------------------------------------------------------------------------------


def window_absorbs(g: FusionGraph, first: Node, second: Node) -> bool:
    """Whether `second`, which holds a pad or pool, may take in its producer `first` although
    their spaces differ: `second` computes `first`'s values at the positions its windows read
    (its space stays the group's). Only when nothing else reads `first` (no output of another
    shape), `first` reduces nothing (its rows would be read at other rows), and every op of
    `second` reading `first` is a windowed op reading each element a few times or an op over
    `first`'s own space (a producer the window already absorbed)."""
    if g.space(first).reduced or not second.outputs:
        return False
    if any(readers != (second,) for readers in g.output_readers(first)):
        return False
    windowed = False
    for reader, _ in g.edge_readers(first, second):
        if is_window_op(reader):
            if window_reads(reader) > MAX_WINDOW_READS:
                return False
            windowed = True
        elif combine_spaces(space_of_op(reader), g.space(first)) is None:
            return False
    return windowed or any(is_window_op(op) for op in second.ops)
