"""
Fusion legality, shared by `fuse-greedy` and `fuse-scored`.

Every check answers with a named reason (the vocabulary of `--fusion-report`):

- `extern-boundary`  an `Extern` op (matmul, linear, torch_call) never joins a group;
- `composite-op`     a `Composite` op (softmax, layer_norm, ...) must be decomposed first;
- `not-fusable`      not a graph op, or refused by the caller's fusability predicate;
- `shape-mismatch`   the two iteration spaces are unrelated (see `combine_spaces`) and the
                     consumer is no pad or pool taking in its producer (`window_absorbs`) nor
                     a consumer computing a producer that reduces nothing where it reads it
                     (`inline_absorbs`),
                     or a slice, concat or gather reads a reducing producer elsewhere than the
                     group iterates (a gather's table of another shape: see `gather_mismatch`);
- `max-group-size`   the merged group would hold more ops than allowed;
- `window`           (fuse-scored) the pair is further apart in the block than the window;
- `max-rounds`       (fuse-scored) the pair was still waiting when the rounds ran out;
- `arg-limit`        the merged group would take more inputs plus outputs than allowed;
- `mutation-hazard`  fusing would move a read across an op that may write memory;
- `rng-order`        fusing would move an op that draws from torch's RNG (dropout) below one
                     that stays between the pair: each would draw the other's numbers;
- `would-create-cycle` a path leaves the pair and comes back (producer -> X -> consumer);
- `loop-structure`   one kernel's loop nest cannot compute the merged group (see below);
- `window-recompute` a windowed consumer (pool, pad, patches, a stencil's slices) would
                     recompute its producer at every window reading an element: refused where
                     the extra work (`recompute_cost`) passes the consumer's budget
                     (`RECOMPUTE_BUDGET`), as for a transcendental producer read 9 times;
- `view-for-extern`  a permute or slice read only by externs (as a matmul reads a transpose)
                     stays a torch view where the value it views leaves the group anyway:
                     fused, the group would write that value twice, once in the view's layout;
                     and a transpose of the last two dims that only matmuls read stays one
                     always (fused, its producer would write the value transposed);
- `recompute-cost`   (fuse-scored) a group's output that cheap ops compute, computed again
                     in its readers, would cost more per element than its target's
                     `OUTPUT_RECOMPUTE_BUDGET`, or more than once per element there;
- `scan`             a kernel holds at most one `graph.scan` and no reduction:
                     its loop carries a value along the scan's dim and computes every other op at
                     the scan's index. Producers that reduce nothing fuse into it; consumers
                     only when elementwise (they read the scan at its own index), and every
                     output has the scan's shape (see `scan_merge`).

A group with reductions runs as one row loop (docs/contracts.md, `lower-to-loops`), by the
rules of `kernel_loops`, which `lower-to-loops` builds its loops by: the reductions share one
full shape and reduced dims, each iteration computes one row, a reduction's result is known
only for the iteration's own row, and each output is of the full shape, a row shape, or
another shape of as many elements (written at the same memory position). `loop_structure`
checks that of a merged group: it follows the index at which each value is
read, from the outputs and the reductions' inputs back through the group's ops (layout ops map
it, torch broadcasting drops dims), and refuses when a reduction's result would be read at
another row, or an output has another shape. Groups without reductions run as one loop over
their elements; outputs of different element counts are split apart by `group-cleanup`.

Cycles are found with topological positions: every path from `first` to `second` runs through
nodes placed strictly between them, so the search never leaves that span and costs what the
nodes depending on `first` inside the span cost, not the size of the graph. The same search
yields the nodes that must move below the merged group to keep the block in topological order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Required, TypedDict, Unpack, cast

from xdsl.ir import Block, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.op_kinds import Kind, KindGroup, OpGroup, kind_of
from xfuse.passes.fusion.graph import FusionGraph, Node, by_position
from xfuse.passes.fusion.kernel_loops import (
    ROW_PLACES,
    OutputPlace,
    RowPasses,
    RowShape,
    ScanLoop,
    reads_own_row,
)
from xfuse.passes.fusion.op_facts import (
    OpClass,
    Space,
    combine_spaces,
    gather_mismatch,
    is_constant_op,
    is_window_op,
    max_window_reads,
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
RNG_ORDER = "rng-order"
SHAPE_MISMATCH = "shape-mismatch"
EXTERN_BOUNDARY = "extern-boundary"
WINDOW = "window"
MAX_GROUP_SIZE = "max-group-size"
MAX_ROUNDS = "max-rounds"
NOT_FUSABLE = "not-fusable"
COMPOSITE_OP = "composite-op"
LOOP_STRUCTURE = "loop-structure"
SCAN = "scan"
WINDOW_RECOMPUTE = "window-recompute"
VIEW_FOR_EXTERN = "view-for-extern"
ROW_RECOMPUTE = "row-recompute"
RECOMPUTE_COST = "recompute-cost"

REASONS = (
    FUSED,
    WOULD_CREATE_CYCLE,
    ARG_LIMIT,
    MUTATION_HAZARD,
    RNG_ORDER,
    SHAPE_MISMATCH,
    EXTERN_BOUNDARY,
    WINDOW,
    MAX_GROUP_SIZE,
    MAX_ROUNDS,
    NOT_FUSABLE,
    COMPOSITE_OP,
    LOOP_STRUCTURE,
    SCAN,
    WINDOW_RECOMPUTE,
    VIEW_FOR_EXTERN,
    ROW_RECOMPUTE,
    RECOMPUTE_COST,
)

VIEWS_OF_EXTERNS = (graph.PermuteOp, graph.SliceOp)
"""Strided views an extern reads in place (a reshape keeps its input's layout: no copy to
save)."""

# Op kinds that are boundaries, with the reason that names them.
BOUNDARY_REASONS: dict[str, str] = {Kind.EXTERN: EXTERN_BOUNDARY, Kind.COMPOSITE: COMPOSITE_OP}

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
"""The answer of a gate that passed with nothing to move (shared: a frozen dataclass is slow
to build, and the gates answer for every pair fusion looks at)."""


# ---------------------------------------------------------------------------------------------
# Kinds
# ---------------------------------------------------------------------------------------------


def is_candidate_node(node: Node) -> bool:
    """Nodes that fusion examines at all: groups and graph ops other than constants (data,
    not computation). `func.return` and foreign ops are not examined."""
    op = node.op
    if op is None:
        return True
    return node.kind != Kind.OPAQUE and not is_constant_op(op)


def fusability(node: Node, predicate: Predicate | None = None) -> Verdict:
    """Whether a node may be part of a group at all."""
    op = node.op
    if op is None:
        return PASSED
    kind = node.kind
    if kind in BOUNDARY_REASONS:
        return refuse(BOUNDARY_REASONS[kind], f"{op.name} is {kind}")
    if kind not in KindGroup.FUSABLE or is_constant_op(op):
        return refuse(NOT_FUSABLE, f"{op.name} is not a fusable graph op")
    if predicate is not None and not predicate(op):
        return refuse(NOT_FUSABLE, f"{op.name} refused by the fusability predicate")
    return PASSED


def edge_gather_mismatch(
    g: FusionGraph, first: Node, second: Node, *, inline: bool = False
) -> str | None:
    """`gather_mismatch` over the ops of `second` that read values of `first`. With `inline`
    (a merge, not a copy), slices and concats may compute a producer that reduces nothing and
    that nothing else reads where they read it (`lower-to-loops` computes every value at the
    index it is read at)."""
    if OpClass.GATHER not in second.classes:
        return None  # most nodes hold no slice or concat: skip the walk over the uses
    reduces = bool(g.space(first).reduced)
    inline = inline and not reduces and all(r == (second,) for r in g.output_readers(first))
    return gather_mismatch(g.edge_readers(first, second), reduces, inline)


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
    space, inline = combine_spaces(a, b), False
    if space is None:
        if sibling or not (window_absorbs(g, first, second) or inline_absorbs(g, first, second)):
            return refuse(SHAPE_MISMATCH, f"{a} vs {b}")
        inline, space = True, b  # the windowed or inlining consumer's space is the group's
    detail = None if sibling else window_recompute(g, first, second, inline)
    if detail is not None:
        return refuse(WINDOW_RECOMPUTE, detail)
    detail = None if sibling else row_recompute(g, first, second)
    if detail is not None:
        return refuse(ROW_RECOMPUTE, detail)
    detail = None if sibling else view_for_extern(g, first, second)
    if detail is not None:
        return refuse(VIEW_FOR_EXTERN, detail)
    detail = edge_gather_mismatch(g, first, second, inline=not sibling)
    if detail is not None:
        return refuse(SHAPE_MISMATCH, detail)
    if max_group_size is not None:
        size = first.size + second.size
        if size > max_group_size:
            return refuse(MAX_GROUP_SIZE, f"{size} ops > {max_group_size}")
    # The common case passes on the bound, without building the union of the inputs.
    if g.merged_arg_bound(first, second) > arg_limit:
        args = g.merged_arg_count(first, second)
        if args > arg_limit:
            return refuse(ARG_LIMIT, f"{args} inputs+outputs > {arg_limit}")
    detail = scan_merge(g, first, second)
    if detail is not None:
        return refuse(SCAN, detail)
    if not space.reduced:
        return PASSED  # one loop over the elements: any group of one element count lowers
    detail = loop_structure(g, (first, second), space)
    return PASSED if detail is None else refuse(LOOP_STRUCTURE, detail)


def view_for_extern(g: FusionGraph, first: Node, second: Node) -> str | None:
    """Why consumer `second`, a permute or slice that only externs read (through further
    views), stays a torch view of a value `first` writes for other readers anyway (None
    where it may fuse). The runtime runs such a view in place (`runtime.compiler`'s views):
    fused, it would be one more output of the group, as many bytes written again."""
    op = second.op
    if op is None or not isinstance(op, VIEWS_OF_EXTERNS):
        return None
    if not graph.read_only_by_externs(op, or_return=True):
        return None
    value = op.operands[0]
    if g.owner_node(value) is not first:
        return None
    others = [reader for reader in g.readers_of(value) if reader is not second]
    if others:
        return f"{g.op_label(op)} views {g.label(value)}, which {g.op_label(others[0])} reads too"
    if transposed_for_readers(op):
        return f"{g.op_label(op)} is a transpose that its readers read in place"
    return None


def transposed_for_readers(op: Operation) -> bool:
    """Whether `op` swaps the last two dims of its operand and is read (and perhaps returned)
    by ops that read a transposed operand in place (`OpFacts.reads_transposed`: a matmul,
    as the library's transposed operand) alone. Fused, the permute would make its producer's
    kernel write the value transposed (a stride of a whole row between neighbouring writes)
    for no byte saved. Other readers may be the return and further views (which
    `view_for_extern` has checked lead to externs or the return alone)."""
    if not isinstance(op, graph.PermuteOp):
        return False
    rank = len(op.permutation)
    if rank < 2 or op.permutation != (*range(rank - 2), rank - 1, rank - 2):
        return False
    readers = [use.operation for use in op.result.uses]
    in_place = [graph.op_facts(reader).reads_transposed for reader in readers]
    return any(in_place) and all(
        reads or isinstance(reader, graph.STRIDED_VIEWS) or reader.name == "func.return"
        for reader, reads in zip(readers, in_place, strict=True)
    )


def check_order(g: FusionGraph, first: Node, second: Node) -> Verdict:
    """The gates that depend on the rest of the graph: mutation and cycles. Re-run before
    applying a decision taken earlier, since merges elsewhere can add paths."""
    mutator = mutation_between(g, first, second)
    if mutator is not None:
        return refuse(MUTATION_HAZARD, f"{g.op_label(mutator)} may write memory in between")
    moved = find_cycle_or_moved(g, first, second)
    if moved is None:
        return refuse(WOULD_CREATE_CYCLE, "a path leaves the pair and comes back")
    overtaken = draw_overtaken(g, second, moved)
    if overtaken is not None:
        return refuse(RNG_ORDER, f"{g.op_label(overtaken)} would draw from the RNG first")
    return Verdict(FUSED, moved=moved)


def draw_overtaken(g: FusionGraph, second: Node, moved: Sequence[Node]) -> Node | None:
    """A node drawing from torch's RNG that stays before `second` while an earlier draw among
    `moved` goes below the merged group (which takes `second`'s place): it would draw first."""
    if not g.drawers:
        return None
    drawers, moving = set(g.drawers), set(moved)
    draws = [n.pos for n in moved if n in drawers]
    if not draws:
        return None
    first_draw = min(draws)
    for node in g.drawers:
        if node.alive and first_draw < node.pos < second.pos and node not in moving:
            return node
    return None


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
    detail = window_recompute(g, producer, consumer)
    if detail is not None:
        return refuse(WINDOW_RECOMPUTE, detail)
    detail = row_recompute(g, producer, consumer)
    if detail is not None:
        return refuse(ROW_RECOMPUTE, detail)
    detail = edge_gather_mismatch(g, producer, consumer)
    if detail is not None:
        return refuse(SHAPE_MISMATCH, detail)
    args = g.recompute_arg_count(producer, consumer)
    if args > arg_limit:
        return refuse(ARG_LIMIT, f"{args} inputs+outputs > {arg_limit}")
    detail = scan_merge(g, producer, consumer, recompute=True)
    if detail is not None:
        return refuse(SCAN, detail)
    mutator = mutation_between(g, producer, consumer)
    if mutator is not None:
        return refuse(MUTATION_HAZARD, f"{g.op_label(mutator)} may write memory in between")
    return PASSED


def is_cheap_cone(cone: Sequence[Operation]) -> bool:
    """Whether the ops computing a group's output are all cheap (elementwise, broadcast or
    reshape, or scalar constants): a candidate for `check_output_recompute`."""
    return all(
        kind_of(op) in KindGroup.CHEAP or isinstance(op, graph.ReshapeOp) or is_constant_op(op)
        for op in cone
    )


def check_output_recompute(
    g: FusionGraph,
    group: Node,
    value: SSAValue,
    cone: Sequence[Operation],
    consumer: Node,
    *,
    arg_limit: int,
    max_group_size: int,
    budget: float,
) -> Verdict:
    """Gates for copying `cone`, the ops of `group` computing its output `value`
    (`FusionGraph.output_cone`, cheap ops: `is_cheap_cone`), into `consumer`, a reader of
    `value`, so that `group` no longer writes it. The cone costs at most `budget` per element
    (`OUTPUT_RECOMPUTE_BUDGET`); the consumer computes each element it reads once
    (`computes_once`) and reads through no window, and stays within `max_group_size`
    ops and `arg_limit` arguments; the copy reads the cone's inputs where the consumer is, so
    no op may write memory in between."""
    cost = sum(op_cost(op) for op in cone if g.shape(op.results[0]) == g.shape(value))
    if cost > budget:
        return refuse(
            RECOMPUTE_COST,
            f"computing {g.label(value)} again costs {cost:g} ops per element > {budget:g}",
        )
    if OpClass.WINDOW in consumer.classes or not computes_once(g, consumer):
        return refuse(
            RECOMPUTE_COST, f"{g.op_label(consumer)} would compute {g.label(value)} more than once"
        )
    size = consumer.size + len(cone)
    if size > max_group_size:
        return refuse(MAX_GROUP_SIZE, f"{size} ops > {max_group_size}")
    if combine_spaces(g.space(consumer), Space(g.shape(value))) is None:
        return refuse(SHAPE_MISMATCH, f"{g.space(consumer)} vs {g.shape(value)}")
    reads = g.inputs_of(consumer) | g.cone_inputs(cone)
    reads.discard(value)
    args = len(reads) + max(sum(1 for users in g.output_readers(consumer) if users), 1)
    if args > arg_limit:
        return refuse(ARG_LIMIT, f"{args} inputs+outputs > {arg_limit}")
    mutator = mutation_between(g, group, consumer)
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
# Loop structure: what one row loop can compute (see the module doc)
# ---------------------------------------------------------------------------------------------

Digit = tuple[int, int, int]
"""`(k, stride, radix)`: `(v_k floordiv stride) mod radix`, a piece of the loop variable `v_k`
of full dim `k` (the whole of it: `(k, 1, full[k])`)."""

Entry = tuple[Digit, ...] | None
"""Where one dim of a value is read, in terms of the row loop's index into the full shape:
digits in mixed radix, outermost first (`()` is index 0; adjacent pieces of one variable are
merged, so each value has one spelling), or None for anything else (an offset, an index an op
computes)."""

Index = tuple[Entry, ...]

OPAQUE = -1
"""The dim of a digit that stands for an unknown index (its radix the dim's size)."""


def _radix(digits: Sequence[Digit]) -> int:
    return graph.numel([r for _, _, r in digits])


def _merged(digits: Sequence[Digit]) -> Entry:
    """The entry of `digits` (outermost first); None if one is unknown."""
    out: list[Digit] = []
    for k, stride, radix in digits:
        if k == OPAQUE:
            return None
        if out and out[-1][0] == k and out[-1][1] == stride * radix:
            out[-1] = (k, stride, radix * out[-1][2])
        else:
            out.append((k, stride, radix))
    return tuple(out)


@dataclass
class _Digits:
    """The digits of a memory position, outermost first, cut into a shape's dims from the
    innermost. Only the innermost digit may be cut inside (`lower-to-loops` spells the pieces
    of the innermost loop variable so that they merge back; a cut inside another digit leaves
    a floor division of a sum that it does not see through)."""

    digits: list[Digit]
    cuttable: bool

    def take(self, size: int) -> list[Digit] | None:
        """Pop the innermost digits that make up `size` (outermost first); None where they
        cannot be cut there."""
        taken: list[Digit] = []
        got = 1
        while got < size and self.digits:
            need, rest = divmod(size, got)
            if rest:
                return None
            k, stride, radix = self.digits.pop()
            if radix <= need:
                taken.append((k, stride, radix))
                got *= radix
                self.cuttable = False
            elif self.cuttable and radix % need == 0:
                taken.append((k, stride, need))
                self.digits.append((k, stride * need, radix // need))
                got *= need
            else:
                return None
        return taken[::-1] if got == size else None


@dataclass(frozen=True)
class RowLoop(RowShape):
    """The loop nest of a group with reductions (`kernel_loops.RowShape`), with the index
    each value is read at in its digits; one iteration computes one row (the kept dims)."""

    @cached_property
    def identity(self) -> Index:
        """The index of the full shape's element in the innermost loop."""
        return tuple(() if d == 1 else ((k, 1, d),) for k, d in enumerate(self.full))

    def row(self, keepdim: bool) -> Index:
        """The index of the iteration's row in a reduction's result."""
        return self.rows[keepdim]

    @cached_property
    def rows(self) -> tuple[Index, Index]:
        """`row(False)` and `row(True)`."""
        return (self._row(False), self._row(True))

    def _row(self, keepdim: bool) -> Index:
        if keepdim:
            return tuple(() if k in self.dims else e for k, e in enumerate(self.identity))
        return tuple(e for k, e in enumerate(self.identity) if k not in self.dims)

    def output_index(self, shape: tuple[int, ...]) -> Index | None:
        """Where an output of `shape` is written: the full shape, a row shape, or as many
        elements at the same memory position (`RowShape.output_place`); None for any other
        shape."""
        place = self.output_place(shape)
        if place is OutputPlace.FULL:
            return self.identity
        if place in ROW_PLACES:
            return self.row(place is OutputPlace.ROW_KEEPDIM)
        if place is OutputPlace.SAME_ELEMENTS:
            return self.reshape(self.identity, self.full, shape)
        return None

    def is_own_row(self, keepdim: bool, shape: tuple[int, ...], index: Index) -> bool:
        """Whether a reduction's result of `shape` read at `index` is read at its own row."""
        return reads_own_row(index, self.rows[keepdim], shape)

    def reshape(self, index: Index, shape: tuple[int, ...], to: tuple[int, ...]) -> Index:
        """The index of the element of shape `to` at the same memory position as the element
        of `shape` at `index`: the digits of the position, cut into `to`'s dims from the
        innermost (a dim that cuts a digit of an unknown index, or that the digits cannot
        make up, is unknown, and so are the dims outside it)."""
        digits: list[Digit] = []
        for entry, size in zip(index, shape, strict=True):
            if size == 1:
                continue
            if entry is not None and _radix(entry) == size:
                digits.extend(entry)
            else:
                digits.append((OPAQUE, 1, size))
        innermost = digits[-1] if digits else (OPAQUE, 1, 1)
        cuttable = innermost[0] != OPAQUE and innermost[1:] == (1, self.full[innermost[0]])
        cut = _Digits(digits, cuttable)
        out: list[Entry] = [() if d == 1 else None for d in to]
        for j in reversed(range(len(to))):
            if to[j] == 1:
                continue
            taken = cut.take(to[j])
            if taken is None:
                break
            out[j] = _merged(taken)
        return tuple(out)


ShapeOf = Callable[[SSAValue], tuple[int, ...]]
Reads = list[tuple[SSAValue, Index]]


def _broadcast_in_dim_reads(
    op: graph.BroadcastInDimOp, index: Index, loop: RowLoop, shape_of: ShapeOf
) -> Reads:
    in_shape = shape_of(op.input)
    return [
        (op.input, tuple(() if in_shape[i] == 1 else index[d] for i, d in enumerate(op.dim_map)))
    ]


def _reshape_reads(op: graph.ReshapeOp, index: Index, loop: RowLoop, shape_of: ShapeOf) -> Reads:
    return [(op.input, loop.reshape(index, shape_of(op.result), shape_of(op.input)))]


def _permute_reads(op: graph.PermuteOp, index: Index, loop: RowLoop, shape_of: ShapeOf) -> Reads:
    src: list[Entry] = [()] * len(index)
    for i, p in enumerate(op.permutation):
        src[p] = index[i]
    return [(op.input, tuple(src))]


def _slice_reads(op: graph.SliceOp, index: Index, loop: RowLoop, shape_of: ShapeOf) -> Reads:
    start, _, stride = op.bounds
    return [(op.input, tuple(map(_slice_entry, index, start, stride, shape_of(op.input))))]


def _concat_reads(op: graph.ConcatOp, index: Index, loop: RowLoop, shape_of: ShapeOf) -> Reads:
    reads: Reads = []
    axis, offset = op.axis, 0
    for v in op.inputs:
        reads.append((v, index if offset == 0 else (*index[:axis], None, *index[axis + 1 :])))
        offset += shape_of(v)[axis]
    return reads


def _identity_reads(op: Operation, index: Index, loop: RowLoop, shape_of: ShapeOf) -> Reads:
    return [(op.operands[0], index)]  # a reduction over no dims


def _elementwise_reads(op: Operation, index: Index, loop: RowLoop, shape_of: ShapeOf) -> Reads:
    return [(v, _broadcast(index, shape_of(v), len(index))) for v in op.operands]


def _unknown_reads(op: Operation, index: Index, loop: RowLoop, shape_of: ShapeOf) -> Reads:
    return [(v, tuple(() if d == 1 else None for d in shape_of(v))) for v in op.operands]


READ_RULES: tuple[tuple[type[Operation], Callable[..., Reads]], ...] = (
    (graph.BroadcastInDimOp, _broadcast_in_dim_reads),
    (graph.ReshapeOp, _reshape_reads),
    (graph.PermuteOp, _permute_reads),
    (graph.SliceOp, _slice_reads),
    (graph.ConcatOp, _concat_reads),
    (graph.ReduceOp, _identity_reads),
)
"""How each op that moves elements reads its operands (as `lower-to-loops` indexes them)."""

_rule_of_type: dict[type[Operation], Callable[..., Reads]] = {}


def operand_reads(op: Operation, index: Index, loop: RowLoop, shape_of: ShapeOf) -> Reads:
    """The index at which `op` reads each operand to compute its result at `index` (every op
    but real reductions): layout ops map it (`READ_RULES`), elementwise ops broadcast it as
    torch does, and an op of another kind (one that computes its own indices) reads at
    unknown ones. The rule is found once per op class."""
    rule = _rule_of_type.get(type(op))
    if rule is None:
        found = [r for cls, r in READ_RULES if isinstance(op, cls)]
        elementwise = kind_of(op) == Kind.ELEMENTWISE
        rule = found[0] if found else _elementwise_reads if elementwise else _unknown_reads
        _rule_of_type[type(op)] = rule
    return rule(op, index, loop, shape_of)


def _broadcast(index: Index, shape: tuple[int, ...], out_rank: int) -> Index:
    """Torch broadcasting: shapes align on the right, a size-1 dim reads element 0."""
    lead = out_rank - len(shape)
    return tuple(() if d == 1 else index[lead + k] for k, d in enumerate(shape))


def _slice_entry(entry: Entry, start: int, stride: int, size: int) -> Entry:
    if size == 1 or (entry == () and start == 0):
        return ()
    return entry if start == 0 and stride == 1 else None


def loop_structure(g: FusionGraph, nodes: tuple[Node, ...], space: Space) -> str | None:
    """Why one row loop over `space` cannot compute the group of `nodes` merged (None when it
    can): an output of another shape, reductions over different rows, or a reduction's result
    read at another row than the iteration's own (a softmax whose output is permuted)."""
    loop = RowLoop(space.domain, tuple(sorted(space.reduced)))
    if graph.numel(loop.full) == 0:
        return None  # the kernel never runs
    inside = set(nodes)
    node_of = g.node_of
    reads: list[tuple[SSAValue, Index, Operation | None]] = []
    # Plain: elementwise ops and keepdim reductions only, outputs of the full or keepdim row
    # shape. Every value derived from a reduction then has the full rank and is read at the
    # full index broadcast: at its own row. The common case, decided without the walk.
    plain_shapes = (loop.full, graph.reduced_shape(loop.full, loop.dims, True))
    plain = True
    for node in nodes:
        for value, readers in zip(node.outputs, g.output_readers(node), strict=True):
            if all(r in inside for r in readers):
                continue
            shape = g.shape(value)
            index = loop.output_index(shape)
            if index is None:
                return (
                    f"output {g.label(value)} of shape {graph.fmt_shape(shape)} is neither the "
                    f"full shape {graph.fmt_shape(loop.full)}, a row shape, nor of as many elements"
                )
            plain = plain and shape in plain_shapes
            written = loop.written_value(value, lambda op: node_of(op) in inside)
            if written is not value:
                value, index = written, loop.identity
            reads.append((value, index, None))
        for op in node.ops if node.op is None else (node.op,):
            row = g.row_reduction(op)
            if row is not None:
                source = op.operands[0]
                if not loop.holds(g.shape(source), row[0]):
                    return f"{g.op_label(op)} reduces another shape or dims than {space}"
                plain = plain and row[1]
                reads.append((source, loop.identity, None))
            elif plain and kind_of(op) != Kind.ELEMENTWISE:
                plain = False
    if plain:
        return None
    seen: set[tuple[int, Index]] = set()
    while reads:
        value, index, via = reads.pop()
        key = (id(value), index)
        if key in seen:
            continue
        seen.add(key)
        owner = value.owner
        if isinstance(owner, Block) or node_of(owner) not in inside:
            continue  # read from outside the group: a buffer
        row = g.row_reduction(owner)
        if row is not None:
            if not loop.is_own_row(row[1], g.shape(value), index):
                through = f" (through {g.op_label(via)})" if via is not None else ""
                return (
                    f"the result of {g.op_label(owner)} would be read at another row than its "
                    f"own{through}: one row loop cannot express it"
                )
            continue
        step = via if kind_of(owner) == Kind.ELEMENTWISE else owner
        reads.extend((v, i, step) for v, i in operand_reads(owner, index, loop, g.shape))
    return None


# ---------------------------------------------------------------------------------------------
# Consumers that compute their producer where they read it (fewer kernels)
# ---------------------------------------------------------------------------------------------

MAX_INLINE_READS = 4.0
"""A consumer takes in a producer of another space only when its ops read each of the
producer's elements at most this many times on average (Inductor's `realize_reads_threshold`):
the kernel computes the producer's elements where they are read, so a broadcast reading each
element twice (Llama's key/value heads repeated for grouped-query attention) computes it
twice."""


def inline_absorbs(g: FusionGraph, first: Node, second: Node) -> bool:
    """Whether `second` may take in its producer `first` although their spaces differ, because
    `lower-to-loops` computes each value of a group without reductions at the index it is read
    at: GPT-2's split of the fused QKV projection into heads (slices), Llama's rotate-half
    (slices and a concat) and repeated key/value heads (a broadcast). Only when neither node
    reduces (a reduction's rows are the loop), nothing else reads `first` (the merged group
    has `second`'s outputs only), no gather reads it at computed positions, and `second`'s
    ops read each element of `first` at most `MAX_INLINE_READS` times, unless `first` only
    moves elements (`moves_only`: recomputing it is index arithmetic, no arithmetic on values;
    a depthwise stencil's weight columns, read once per output element)."""
    if g.space(first).reduced or g.space(second).reduced or not second.outputs:
        return False
    if any(readers != (second,) for readers in g.output_readers(first)):
        return False
    reads: dict[SSAValue, int] = {}
    for reader, value in g.edge_readers(first, second):
        if isinstance(reader, graph.GatherOp) or not reader.results:
            return False
        read = value if isinstance(reader, graph.ConcatOp) else reader.results[0]
        reads[value] = reads.get(value, 0) + graph.numel(g.shape(read))
    return bool(reads) and (
        moves_only(first)
        or all(n <= MAX_INLINE_READS * graph.numel(g.shape(v)) for v, n in reads.items())
    )


def moves_only(node: Node) -> bool:
    return all(isinstance(op, OpGroup.MOVING) for op in _ops_of(node))


# ---------------------------------------------------------------------------------------------
# Windowed consumers
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
            if window_reads(reader) > max_window_reads(reader):
                return False
            windowed = True
        elif combine_spaces(space_of_op(reader), g.space(first)) is None:
            return False
    return windowed or any(is_window_op(op) for op in second.ops)


# ---------------------------------------------------------------------------------------------
# What a window recomputes: a consumer reading each element of its producer several times
# ---------------------------------------------------------------------------------------------

OP_COSTS: tuple[tuple[tuple[type[Operation], ...], float], ...] = (
    (OpGroup.MOVING, 0.0),  # index arithmetic only
    (OpGroup.TRANSCENDENTAL, 4.0),
    (OpGroup.DIVIDING, 2.0),
)
"""What computing one element of an op costs, in elementwise ops (the first row that names
its class; any other op costs 1)."""

RECOMPUTE_BUDGET: tuple[tuple[type[Operation], float], ...] = (
    (graph.PatchesOp, 48.0),
    (graph.PoolOp, 12.0),
    (graph.PadOp, 12.0),
)
"""How much recomputation a consumer may take on per element of a producer it absorbs:
(reads - 1) * cost per element (`recompute_cost`), in elementwise ops, per windowed op class;
other readers (a stencil's slices, inlining consumers) have `INLINE_RECOMPUTE_BUDGET`. A
3x3 / stride-2 max pool (2.25 reads) takes in a batch norm and ReLU (5 ops) or SiLU (9); a
3x3 stencil or a 2x2 / stride-1 pool (4 reads) only cheap chains. Patches' budget is larger:
each patch element is multiplied by every output channel's weight next, so a batch norm and
ReLU recomputed at 9 reads (40) costs little beside the product, but not a GELU (64)."""

INLINE_RECOMPUTE_BUDGET = 12.0

OUTPUT_RECOMPUTE_BUDGET: dict[str, float] = {"cpu": 16.0, "cuda": 8.0}
"""What computing a group's output again in a reader (`check_output_recompute`) may cost per
element, in elementwise ops, per target. A bias add and an erf GELU, cast from bf16 and back,
cost 11: computed again on the CPU (ConvNeXt-V2's GRN: 0.86x the time of a forward at batch
1), not on an H200, where the erf makes the kernel compute-bound (1.07x at batch 32)."""


def op_cost(op: Operation) -> float:
    """What computing one element of `op` costs (`OP_COSTS`), cached per op class."""
    return _op_class_cost(type(op))


@cache
def _op_class_cost(cls: type[Operation]) -> float:
    for classes, cost in OP_COSTS:
        if issubclass(cls, classes):
            return cost
    return 0.0 if issubclass(cls, graph.ConstantOp) else 1.0


def recompute_cost(g: FusionGraph, node: Node) -> float:
    """What computing one element of `node`'s values costs where a consumer reads it: its
    ops over its whole space (ops over fewer elements, a batch norm's per-channel scale, are
    computed once outside the window loop), a windowed op its reads per element more."""
    full = graph.numel(g.space(node).domain)
    cost = 0.0
    for op in _ops_of(node):
        if not op.results or graph.numel(g.shape(op.results[0])) < full:
            continue
        reads = window_reads(op) if is_window_op(op) else 1.0
        cost += op_cost(op) * max(reads, 1.0)
    return cost


def recompute_budget(op: Operation) -> float:
    for cls, budget in RECOMPUTE_BUDGET:
        if isinstance(op, cls):
            return budget
    return INLINE_RECOMPUTE_BUDGET


def _element_reads(g: FusionGraph, second: Node, reader: Operation, value: SSAValue) -> float:
    """How many times `second` reads each element of `value` through `reader`, on average:
    a windowed op's reads, also where `reader` is an op over `value`'s own space whose result
    a window of `second` reads (a producer the window already absorbed)."""
    if is_window_op(reader):
        return window_reads(reader)
    if OpClass.WINDOW not in second.classes:
        return 1.0  # no window in `second` reads what `reader` computes
    size, inside = graph.numel(g.shape(value)), set(_ops_of(second))
    reads, stack, seen = 1.0, [reader], set()
    while stack:
        op = stack.pop()
        if op in seen or not op.results or graph.numel(g.shape(op.results[0])) != size:
            continue
        seen.add(op)
        for use in op.results[0].uses:
            user = use.operation
            if user not in inside:
                continue
            if is_window_op(user):
                reads = max(reads, window_reads(user))
            else:
                stack.append(user)
    return reads


def _inline_reads(g: FusionGraph, reader: Operation, value: SSAValue) -> float:
    """How many times an inlining consumer's op reads each element of `value`, on average."""
    if isinstance(reader, graph.ConcatOp) or not reader.results:
        return 1.0
    return graph.numel(g.shape(reader.results[0])) / max(graph.numel(g.shape(value)), 1)


def _reader_budget(consumer: Node, reader: Operation, through_window: bool) -> float:
    """The recompute budget for `reader`: its own where it is windowed, or where its reads
    are an inlining consumer's own; where it reads each element several times through the
    windows of the consumer's group after it (a batch norm's residual add before ResNet's
    patches), the smallest budget of those windowed ops."""
    if is_window_op(reader) or not through_window:
        return recompute_budget(reader)
    windows = [recompute_budget(op) for op in _ops_of(consumer) if is_window_op(op)]
    return min(windows, default=recompute_budget(reader))


def window_recompute(g: FusionGraph, first: Node, second: Node, inline: bool = False) -> str | None:
    """Why `second` may not compute `first`'s values where it reads them (None when it may):
    it reads each element more than once through a window (or, `inline`, through any op of
    an inlining consumer), and the extra work, (reads - 1) times `first`'s cost per element,
    passes that reader's `recompute_budget`. Each input element of a 3x3 pool of stride 1 is
    recomputed once per window covering it: 9 times."""
    if not inline and OpClass.WINDOW not in second.classes:
        return None  # every read is one per element: skip the walk over the uses
    cost = None
    for reader, value in g.edge_readers(first, second):
        through = _element_reads(g, second, reader, value)
        reads = through
        if inline and not is_window_op(reader):
            reads = max(reads, _inline_reads(g, reader, value))
        if reads <= 1.0:
            continue
        if cost is None:
            cost = recompute_cost(g, first)
        through_window = through >= reads
        extra, budget = (reads - 1.0) * cost, _reader_budget(second, reader, through_window)
        if extra > budget:
            return (
                f"{g.op_label(reader)} reads each element {reads:.2f} times: recomputing "
                f"{g.op_label(first)} there costs {extra:.1f} ops per element > {budget:g}"
            )
    return None


ROW_RECOMPUTE_BUDGET = 48.0
"""How much recomputation a row kernel (one with reductions) may take on per element: its
loops over a row (`RowPasses`: one per phase of its reductions, one more to write values over
the row) each compute again the values its reductions read, from the group's inputs
(`row_recompute`). A layer
norm's four passes over a residual add, a bias and casts (about 15) are cheap beside its
memory traffic; a depthwise stencil's products (4 ops per tap: 36 for 3x3, 196 for 7x7) are
not."""


@dataclass(frozen=True)
class _RowKernel:
    """What one row kernel of a pair computes: its ops (in program order), its reductions
    over some dims, the element count of their largest input, and its loops over a row."""

    ops: list[Operation]
    reductions: list[graph.ReduceOp]
    full: int
    passes: RowPasses


def _row_kernel(g: FusionGraph, *nodes: Node) -> _RowKernel | None:
    """The row kernel of `nodes` (one node, or a pair in program order), or None when none
    holds a reduction over some dims."""
    if not any(g.space(n).reduced for n in nodes):
        return None  # no row kernel (and no walk over the ops of long elementwise chains)
    ops = [op for n in nodes for op in _ops_of(n)]
    # (`row_reduction` answers only for a `graph.ReduceOp`)
    reductions = cast(list[graph.ReduceOp], [op for op in ops if g.row_reduction(op) is not None])
    if not reductions:
        return None
    full = max(graph.numel(g.shape(op.operands[0])) for op in reductions)
    written = _written_rows(g, nodes, full)
    return _RowKernel(ops, reductions, full, RowPasses.of(ops, reductions, written))


def row_passes(g: FusionGraph, first: Node, second: Node) -> RowPasses | None:
    """The loops over a row that one kernel of `first` and `second` makes (`RowPasses`, as
    `lower-to-loops` emits them), or None when neither holds a reduction over some dims."""
    kernel = _row_kernel(g, first, second)
    return None if kernel is None else kernel.passes


def row_recompute(g: FusionGraph, first: Node, second: Node) -> str | None:
    """Why `first` and `second` may not make one row kernel (None when they may): its ops
    that no reduction of the pair feeds but a reduction reads (the values each pass over a
    row computes again from the inputs) cost more per element, times the passes after the
    first (`row_passes`), than `ROW_RECOMPUTE_BUDGET`."""
    kernel = _row_kernel(g, first, second)
    if kernel is None:
        return None
    passes = kernel.passes.count
    if passes <= 1:
        return None  # nothing computed again: no need to price a pass
    extra = (passes - 1) * _pass_cost(g, kernel.ops, kernel.reductions, kernel.full)
    if extra <= ROW_RECOMPUTE_BUDGET:
        return None
    return (
        f"one kernel of {g.op_label(first)} and {g.op_label(second)} reads each row {passes} "
        f"times: recomputing what its reductions read costs {extra:.1f} ops per element > "
        f"{ROW_RECOMPUTE_BUDGET:g}"
    )


def _pass_cost(
    g: FusionGraph, ops: Sequence[Operation], reductions: Sequence[Operation], full: int
) -> float:
    """What one pass over a row computes again per element: the cost (`op_cost`) of the ops
    of `ops` (in program order) of `full` elements that depend on none of `reductions`."""
    after: set[Operation] = set(reductions)
    cost = 0.0
    for op in ops:
        if op in after or any(v.owner in after for v in op.operands):
            after.add(op)
        elif op.results and graph.numel(g.shape(op.results[0])) >= full:
            cost += op_cost(op)
    return cost


def _written_rows(g: FusionGraph, nodes: Sequence[Node], full: int) -> list[SSAValue]:
    """The values of `full` elements one kernel of `nodes` writes: the last node's outputs,
    and those of the others that nodes outside the kernel read."""
    *inner, last = nodes
    outputs = list(last.outputs) + [
        v
        for n in inner
        for v, readers in zip(n.outputs, g.output_readers(n), strict=True)
        if any(all(r is not m for m in nodes) for r in readers)
    ]
    return [v for v in outputs if graph.numel(g.shape(v)) >= full]


# ---------------------------------------------------------------------------------------------
# Scans
# ---------------------------------------------------------------------------------------------


def computes_once(g: FusionGraph, node: Node) -> bool:
    """Whether `node`'s kernel computes what it reads once per element: it reduces nothing,
    or its reductions over some dims fold in one loop over a row that writes its outputs too
    (`RowPasses`: a split reduction's first stage, a sum beside the activation it writes)."""
    if node.kind in KindGroup.NON_REDUCING:
        return True
    kernel = _row_kernel(g, node)
    if kernel is None or any(
        kind_of(op) == Kind.REDUCTION and op not in kernel.reductions for op in kernel.ops
    ):
        return False  # a scan's loop, or reductions over every dim: not priced here
    return kernel.passes.count == 1


def _ops_of(node: Node) -> Sequence[Operation]:
    return node.ops if node.op is None else (node.op,)


def scan_merge(g: FusionGraph, first: Node, second: Node, recompute: bool = False) -> str | None:
    """Why one kernel cannot compute `first` and `second` around a `graph.scan` (None when it
    can, or when neither holds one). The kernel is the scan's loop (`lower-to-loops`): a
    parallel loop over the scan's other dims, a sequential one along its dim, every op computed
    at the index the scan or an output reads it at. So: one scan, no reduction; what the scan's
    node computes is read only by elementwise ops that fit inside its shape (at its own index);
    every output, and a copied producer (`recompute`), has the scan's shape or fits inside it.
    The loop's own rule (one scan, no reduction, outputs of its shape) is `ScanLoop`'s, which
    `lower-to-loops` builds by."""
    if Kind.REDUCTION not in (first.kind, second.kind):
        return None  # (a scan's kind is reduction: most pairs hold none)
    scans = [op for node in (first, second) for op in _ops_of(node) if type(op) is graph.ScanOp]
    if not scans:
        return None
    if not ScanLoop.computes(len(scans), 0):
        return "two scans: each is a loop of its own"
    scan = scans[0]
    if recompute and type(first.op) is graph.ScanOp:
        return f"{g.op_label(scan)} is not copied into its readers"
    loop = ScanLoop.of(scan)
    shape = loop.shape
    holder_is_first = scan in _ops_of(first)
    reductions = 0
    for node in (first, second):
        for op in _ops_of(node):
            reductions += g.row_reduction(op) is not None
            if not ScanLoop.computes(len(scans), reductions):
                return f"{g.op_label(op)} reduces: a scan's kernel loops along the scan's dim only"
            reads_scan = holder_is_first and node is second
            if reads_scan and not _fits_at_own_index(op, shape):
                return (
                    f"{g.op_label(op)} would read {g.op_label(scan)} elsewhere than at its own "
                    "index"
                )
    pair = (first, second)
    for node in pair:
        for value, readers in zip(node.outputs, g.output_readers(node), strict=True):
            if all(r in pair for r in readers) or loop.writes(g.shape(value)):
                continue
            if not (recompute and node is first):
                return (
                    f"output {g.label(value)} of shape {graph.fmt_shape(g.shape(value))} is "
                    f"not the scan's shape {graph.fmt_shape(shape)}"
                )
    return None


def _fits_at_own_index(op: Operation, shape: tuple[int, ...]) -> bool:
    """An elementwise op whose result broadcasts into `shape`: it reads the scan's value (of
    `shape`) at the iteration's own index, if at all."""
    if kind_of(op) != Kind.ELEMENTWISE or is_constant_op(op):
        return is_constant_op(op)
    return graph.broadcast_shapes(graph.shape_of(op.results[0]), shape) == shape
