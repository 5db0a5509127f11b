"""
Group building, shared by `fuse-greedy` and `fuse-scored`.

Three IR helpers build `fusion.group`s, after TorchScript's graph fuser:
`create_singleton_group` wraps one op, `merge_into_group` moves one op into a group,
`merge_groups` merges two groups. They all end in `_reconnect`, which turns the values that
cross the group's boundary into inputs (block arguments) and outputs (yielded values), copies
scalar constants in, and rebuilds the group op only when its outputs change: a merge costs what
the moved ops and the boundary cost, never the size of the group.

`FusionGraph` is the view of one function body the passes work on: nodes (top-level ops, groups
included) with topological positions, cached iteration spaces and sizes, and `merge` /
`recompute`, which keep the block in topological order.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from itertools import pairwise

from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
from xdsl.ir import Block, Operation, OpResult, Region, SSAValue
from xdsl.traits import IsolatedFromAbove

from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp, YieldOp
from xfuse.dtypes import byte_width
from xfuse.passes.legality import (
    Space,
    combine_spaces,
    is_inlinable_constant,
    may_mutate,
    node_kind,
    op_kind,
    space_of_op,
    stronger_kind,
)

SCORE_ATTR = "fusion.score"
"""Discardable group attribute: estimated bytes of memory traffic the merges saved."""

# ---------------------------------------------------------------------------------------------
# IR helpers
# ---------------------------------------------------------------------------------------------


def _defined_in(value: SSAValue, block: Block) -> bool:
    owner = value.owner
    return owner is block if isinstance(owner, Block) else owner.parent is block


@cache
def _string_attr(text: str) -> StringAttr:
    """Attributes are immutable: one per distinct text (building and verifying one is slow)."""
    return StringAttr(text)


@cache
def score_attr(score: int) -> IntegerAttr:
    """The `fusion.score` attribute for `score`, shared like `_string_attr`."""
    return IntegerAttr(score, i64)


def _set_props(group: GroupOp, kind: str, rule: str) -> None:
    group.properties["kind"] = _string_attr(kind)
    group.properties["rule"] = _string_attr(rule)


def _reconnect(group: GroupOp, moved: Sequence[Operation], kind: str, rule: str) -> GroupOp:
    """Fix the boundary of `group` after `moved` ops were inserted into its block."""
    block = group.block
    yielded = list(group.yield_op.values)
    inputs, args = list(group.inputs), list(block.args)
    arg_of = dict(zip(inputs, args, strict=True))
    constants: dict[SSAValue, SSAValue] = {}
    for op in moved:
        for i, value in enumerate(op.operands):
            if isinstance(value, OpResult) and value.op is group:
                op.operands[i] = yielded[value.index]
            elif _defined_in(value, block):
                continue
            elif is_inlinable_constant(value):
                if value not in constants:
                    clone = value.owner.clone()  # pyright: ignore[reportAttributeAccessIssue]
                    assert isinstance(clone, Operation) and block.first_op is not None
                    block.insert_op_before(clone, block.first_op)
                    constants[value] = clone.results[0]
                op.operands[i] = constants[value]
            else:
                if value not in arg_of:
                    arg_of[value] = block.insert_arg(value.type, len(block.args))
                    inputs.append(value)
                    args.append(arg_of[value])
                op.operands[i] = arg_of[value]

    kept_inputs: list[SSAValue] = []
    for value, arg in zip(inputs, args, strict=True):
        if _defined_in(value, block):  # an absorbed producer computes it now
            arg.replace_all_uses_with(value)
            block.erase_arg(arg)
        elif arg.first_use is None:
            block.erase_arg(arg)
        else:
            kept_inputs.append(value)

    outputs: list[tuple[SSAValue, OpResult | None]] = [
        (inner, res)
        for inner, res in zip(yielded, group.results, strict=True)
        if res.first_use is not None
    ]
    for op in moved:
        for res in op.results:
            if any(u.operation.parent is not block and u.operation is not group for u in res.uses):
                outputs.append((res, None))
    if not outputs:  # nothing reads the group: keep one output so that it stays valid
        outputs = [(yielded[0], group.results[0])]

    if [res for _, res in outputs] == list(group.results):
        group.operands = kept_inputs
        _set_props(group, kind, rule)
        return group

    region = group.detach_region(group.body)
    new = GroupOp(kept_inputs, [inner.type for inner, _ in outputs], region, kind, rule)
    new.attributes.update(group.attributes)
    parent = group.parent_block()
    assert parent is not None
    parent.insert_op_before(new, group)
    new.yield_op.operands = [inner for inner, _ in outputs]
    for res, (inner, old) in zip(new.results, outputs, strict=True):
        if old is not None:
            old.replace_all_uses_with(res)
        else:
            inner.replace_uses_with_if(res, lambda use: use.operation.parent is not block)
    group.detach()
    group.erase()
    return new


def create_singleton_group(op: Operation, rule: str) -> GroupOp:
    """Wrap `op` (a top-level graph op) in a group of its own, in its place."""
    parent = op.parent_block()
    assert parent is not None
    group = GroupOp([], [r.type for r in op.results], Region(Block()), op_kind(op), rule)
    parent.insert_op_before(group, op)
    for res, out in zip(op.results, group.results, strict=True):
        res.replace_all_uses_with(out)
    op.detach()
    group.block.add_ops([op, YieldOp(*op.results)])
    return _reconnect(group, [op], op_kind(op), rule)


def merge_into_group(
    group: GroupOp, op: Operation, kind: str, rule: str, *, front: bool
) -> GroupOp:
    """Move the top-level op `op` into `group`: at the front when it is a producer (or a
    sibling placed before the group), before the yield when it is a consumer."""
    op.detach()
    block = group.block
    anchor = block.first_op if front else group.yield_op
    assert anchor is not None
    block.insert_op_before(op, anchor)
    return _reconnect(group, [op], kind, rule)


def _dissolve(group: GroupOp) -> list[Operation]:
    """Take the ops out of `group` (detached, in order) and erase it: its arguments become its
    inputs and its results the values it yielded."""
    block = group.block
    for arg, value in zip(block.args, group.inputs, strict=True):
        arg.replace_all_uses_with(value)
    terminator = group.yield_op
    for res, inner in zip(group.results, terminator.values, strict=True):
        res.replace_all_uses_with(inner)
    ops = [op for op in block.ops if op is not terminator]
    for op in ops:
        op.detach()
    group.detach()
    group.erase()
    return ops


def merge_groups(
    first: GroupOp, second: GroupOp, kind: str, rule: str, *, into_first: bool = False
) -> GroupOp:
    """Merge two groups (`first` earlier in the block) into one placed where `second` was.
    The ops of one group move into the other: pass `into_first` when `first` is larger."""
    if into_first:
        first.detach()
        parent = second.parent_block()
        assert parent is not None
        parent.insert_op_before(first, second)
        ops = _dissolve(second)
        first.block.insert_ops_before(ops, first.yield_op)
        return _reconnect(first, ops, kind, rule)
    ops = _dissolve(first)
    anchor = second.block.first_op
    assert anchor is not None
    second.block.insert_ops_before(ops, anchor)
    return _reconnect(second, ops, kind, rule)


def group_space(group: GroupOp) -> Space:
    """The space of an existing group: the combination of its ops' spaces."""
    space: Space | None = None
    for op in group.block.ops:
        if isinstance(op, YieldOp) or is_inlinable_constant(op.results[0]):
            continue
        s = space_of_op(op)
        space = s if space is None else (combine_spaces(space, s) or space)
    return space if space is not None else Space(graph.shape_of(group.results[0]))


def node_inputs(node: Operation) -> set[SSAValue]:
    """The tensors a node reads from outside it (scalar constants are copied in)."""
    if isinstance(node, GroupOp):
        return set(node.inputs)
    return {v for v in node.operands if not is_inlinable_constant(v)}


def ssa_labels(block: Block) -> dict[SSAValue, str]:
    """The names the printer gives the values of a function body (`%x`, `%3`), so that reports
    name values the way the input IR does."""
    labels: dict[SSAValue, str] = {}

    def name(value: SSAValue, counter: int) -> int:
        if value.name_hint:
            labels[value] = f"%{value.name_hint}"
            return counter
        labels[value] = f"%{counter}"
        return counter + 1

    def number(b: Block, counter: int) -> int:
        for arg in b.args:
            counter = name(arg, counter)
        for op in b.ops:
            for res in op.results:
                counter = name(res, counter)
            isolated = op.has_trait(IsolatedFromAbove)
            for region in op.regions:
                for inner in region.blocks:
                    if isolated:  # the printer numbers isolated regions in a scope of their own
                        number(inner, counter)
                    else:
                        counter = number(inner, counter)
        return counter

    number(block, 0)
    return labels


CHEAP_KINDS = ("elementwise", "broadcast")
"""Kinds of single ops cheap enough to recompute in every reader (as Inductor inlines
pointwise buffers)."""


def tensor_bytes(value: SSAValue) -> int:
    return graph.numel(graph.shape_of(value)) * byte_width(graph.dtype_of(value))


@dataclass(frozen=True)
class RecomputePlan:
    """Bytes saved by the two ways of fusing a producer with several readers."""

    readers: tuple[Operation, ...]
    recompute_saving: int
    multi_output_saving: int

    @property
    def prefers_recompute(self) -> bool:
        return self.recompute_saving > self.multi_output_saving


@contextmanager
def paused_gc() -> Iterator[None]:
    """Run without the cyclic garbage collector: fusion allocates many small objects that live
    until the pass ends, and the collector's passes over them cost a fifth of the run (and more
    as the graph grows). Reference counting still frees what the merges drop."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# ---------------------------------------------------------------------------------------------
# The graph the passes work on
# ---------------------------------------------------------------------------------------------


class FusionGraph:
    """Nodes of one function body with topological positions and cached facts."""

    def __init__(self, block: Block):
        self.block = block
        self.pos: dict[Operation, float] = {}
        self.labels = ssa_labels(block)
        self.mutators = [op for op in block.ops if may_mutate(op)]
        self._space: dict[Operation, Space] = {}
        self._size: dict[Operation, int] = {}
        # Facts of values that never change (type, owner): asked for on every gate.
        self._bytes: dict[SSAValue, int] = {}
        self._inlinable: dict[SSAValue, bool] = {}
        self.renumber()

    # --- queries -----------------------------------------------------------------------------

    def renumber(self) -> None:
        self.pos = {op: float(i) for i, op in enumerate(self.block.ops)}

    def nodes(self) -> list[Operation]:
        return list(self.block.ops)

    def contains(self, node: Operation) -> bool:
        return node.parent is self.block

    def successors(self, node: Operation) -> Iterator[Operation]:
        seen: set[Operation] = set()
        for res in node.results:
            for use in res.uses:
                user = use.operation
                if user not in seen:
                    seen.add(user)
                    yield user

    def producers(self, node: Operation) -> list[Operation]:
        """The nodes defining the node's operands, latest first."""
        found = {
            v.op for v in node.operands if isinstance(v, OpResult) and v.op.parent is self.block
        }
        return sorted(found, key=self.pos.__getitem__, reverse=True)

    def readers(self, value: SSAValue) -> list[Operation]:
        """The nodes reading `value`, in block order."""
        found = {use.operation for use in value.uses if use.operation.parent is self.block}
        return sorted(found, key=self.pos.__getitem__)

    def space(self, node: Operation) -> Space:
        if node not in self._space:
            self._space[node] = (
                group_space(node) if isinstance(node, GroupOp) else space_of_op(node)
            )
        return self._space[node]

    def size(self, node: Operation) -> int:
        if node not in self._size:
            self._size[node] = (
                sum(1 for op in node.block.ops) - 1 if isinstance(node, GroupOp) else 1
            )
        return self._size[node]

    def value_bytes(self, value: SSAValue) -> int:
        """`tensor_bytes`, cached."""
        n = self._bytes.get(value)
        if n is None:
            n = self._bytes[value] = tensor_bytes(value)
        return n

    def inputs_of(self, node: Operation) -> set[SSAValue]:
        """`node_inputs`, with the constant test cached per value."""
        if isinstance(node, GroupOp):
            return set(node.operands)
        inlinable = self._inlinable
        found: set[SSAValue] = set()
        for v in node.operands:
            flag = inlinable.get(v)
            if flag is None:
                flag = inlinable[v] = is_inlinable_constant(v)
            if not flag:
                found.add(v)
        return found

    def edge_readers(
        self, first: Operation, second: Operation
    ) -> Iterator[tuple[Operation, SSAValue]]:
        """The ops inside `second` that read results of `first`, with the value read."""
        for res in first.results:
            for use in res.uses:
                if use.operation is not second:
                    continue
                if isinstance(second, GroupOp):
                    for inner in second.block.args[use.index].uses:
                        yield inner.operation, res
                else:
                    yield second, res

    def merged_arg_count(self, first: Operation, second: Operation) -> int:
        inputs = {
            v
            for v in self.inputs_of(first) | self.inputs_of(second)
            if v.owner is not first and v.owner is not second
        }
        outputs = sum(
            1
            for node, other in ((first, second), (second, first))
            for res in node.results
            if any(use.operation is not other for use in res.uses)
        )
        return len(inputs) + max(outputs, 1)

    def recompute_arg_count(self, producer: Operation, consumer: Operation) -> int:
        inputs = {
            v
            for v in self.inputs_of(producer) | self.inputs_of(consumer)
            if v.owner is not producer
        }
        outputs = sum(1 for res in consumer.results if res.first_use is not None)
        return len(inputs) + max(outputs, 1)

    def label(self, value: SSAValue) -> str:
        return self.labels.get(value, "%?")

    def op_label(self, op: Operation) -> str:
        """`%3 graph.exp`: the op's first result as the input IR names it, and the op."""
        if isinstance(op, GroupOp):
            inner = op.yield_op.values[0]
            return self.op_label(inner.owner) if isinstance(inner, OpResult) else "group"
        return f"{self.label(op.results[0])} {op.name}" if op.results else op.name

    def value_op(self, value: SSAValue) -> Operation:
        """The op computing `value`, looking through a group's yield."""
        owner = value.owner
        if isinstance(owner, GroupOp):
            return self.value_op(owner.yield_op.values[value.index])  # pyright: ignore
        assert isinstance(owner, Operation)
        return owner

    def reader_in(self, node: Operation, value: SSAValue) -> Operation:
        """The op inside `node` that reads `value`."""
        if isinstance(node, GroupOp):
            for outer, arg in zip(node.inputs, node.block.args, strict=True):
                if outer is value and arg.first_use is not None:
                    return arg.first_use.operation
        return node

    def pair_ops(self, first: Operation, second: Operation) -> tuple[Operation, Operation]:
        """The ops that name a producer-consumer pair: the op computing the tensor, its reader."""
        for reader, value in self.edge_readers(first, second):
            return self.value_op(value), reader
        return first, second

    # --- cost model --------------------------------------------------------------------------

    def merge_saving(self, first: Operation, second: Operation) -> int:
        """Bytes of memory traffic saved by merging: a tensor only `second` reads is neither
        written nor read back (2x); one that others read too is read once less (1x); an input
        both read is read once."""
        saved = 0
        for res in first.results:
            users = {use.operation for use in res.uses}
            if second in users:
                saved += (2 if len(users) == 1 else 1) * self.value_bytes(res)
        common = self.inputs_of(first) & self.inputs_of(second)
        return saved + sum(self.value_bytes(v) for v in common)

    def successors_of_value(self, value: SSAValue) -> Iterator[Operation]:
        for use in value.uses:
            yield use.operation

    def recompute_plan(self, producer: Operation) -> RecomputePlan | None:
        """For a cheap producer (one elementwise or broadcast op) read by several nodes: the
        bytes saved by copying it into each reader versus keeping it as an extra output of
        one of them. None when the producer is not a candidate."""
        if isinstance(producer, GroupOp) or node_kind(producer) not in CHEAP_KINDS:
            return None
        readers = list(self.successors(producer))
        if len(readers) < 2:
            return None
        out = sum(self.value_bytes(r) for r in producer.results)
        extra = 0
        reader_inputs = [self.inputs_of(r) for r in readers]
        for value in self.inputs_of(producer):
            new_readers = sum(1 for inputs in reader_inputs if value not in inputs)
            extra += self.value_bytes(value) * (new_readers - 1)
        recompute = (len(readers) + 1) * out - extra
        multi = max(self.merge_saving(producer, r) for r in readers)
        return RecomputePlan(tuple(readers), recompute, multi)

    @staticmethod
    def score_of(node: Operation) -> int:
        attr = node.attributes.get(SCORE_ATTR)
        return attr.value.data if isinstance(attr, IntegerAttr) else 0

    # --- rewrites ----------------------------------------------------------------------------

    def merge(
        self,
        first: Operation,
        second: Operation,
        rule: str,
        moved: Sequence[Operation] = (),
        saved: int = 0,
    ) -> GroupOp:
        """Merge node `first` into node `second` (`first` earlier; the gates have passed and
        `moved` are the nodes between them that depend on `first`). The group takes `second`'s
        place and `moved` follow it, in order."""
        nxt = second.next_op
        kind = stronger_kind(node_kind(first), node_kind(second))
        space = combine_spaces(self.space(first), self.space(second))
        assert space is not None
        size = self.size(first) + self.size(second)
        score = self.score_of(first) + self.score_of(second) + saved
        if isinstance(first, GroupOp) and isinstance(second, GroupOp):
            into_first = self.size(first) > self.size(second)
            group = merge_groups(first, second, kind, rule, into_first=into_first)
        elif isinstance(second, GroupOp):
            group = merge_into_group(second, first, kind, rule, front=True)
        elif isinstance(first, GroupOp):
            first.detach()
            self.block.insert_op_before(first, second)
            group = merge_into_group(first, second, kind, rule, front=False)
        else:
            group = create_singleton_group(second, rule)
            group = merge_into_group(group, first, kind, rule, front=True)
        group.attributes[SCORE_ATTR] = score_attr(score)
        at = self.pos[second]
        self._forget(first, second)
        self.pos[group], self._space[group], self._size[group] = at, space, size
        self._place_after(group, moved, nxt)
        return group

    def recompute(
        self, producer: Operation, consumers: Sequence[Operation], rule: str, saved: int = 0
    ) -> list[GroupOp]:
        """Copy the single op `producer` into every consumer (each becomes or stays a group);
        the producer goes away once nothing reads it."""
        groups: list[GroupOp] = []
        share = saved // max(len(consumers), 1)
        for consumer in consumers:
            clone = producer.clone()
            self.block.insert_op_before(clone, consumer)
            for res, copy in zip(producer.results, clone.results, strict=True):
                self.labels[copy] = self.label(res)
                res.replace_uses_with_if(copy, lambda use, c=consumer: use.operation is c)
            kind = stronger_kind(node_kind(producer), node_kind(consumer))
            space = combine_spaces(self.space(producer), self.space(consumer))
            size, score = self.size(consumer) + 1, self.score_of(consumer) + share
            group = consumer if isinstance(consumer, GroupOp) else None
            if group is None:
                group = create_singleton_group(consumer, rule)
            group = merge_into_group(group, clone, kind, rule, front=True)
            group.attributes[SCORE_ATTR] = score_attr(score)
            at, space = self.pos[consumer], space or self.space(consumer)
            self._forget(consumer)
            self.pos[group], self._space[group], self._size[group] = at, space, size
            groups.append(group)
        if all(res.first_use is None for res in producer.results):
            self._forget(producer)
            producer.detach()
            producer.erase()
        return groups

    def erase_dead_constants(self) -> None:
        """Scalar constants copied into every group that read them are left unused."""
        for op in list(self.block.ops):
            if isinstance(op, graph.ConstantOp) and op.result.first_use is None:
                self._forget(op)
                op.detach()
                op.erase()

    def _forget(self, *nodes: Operation) -> None:
        for node in nodes:
            self.pos.pop(node, None)
            self._space.pop(node, None)
            self._size.pop(node, None)

    def _place_after(
        self, group: GroupOp, moved: Sequence[Operation], nxt: Operation | None
    ) -> None:
        prev: Operation = group
        for op in moved:
            op.detach()
            self.block.insert_op_after(op, prev)
            prev = op
        if not moved:
            return
        lo = self.pos[group]
        hi = self.pos[nxt] if nxt is not None and nxt in self.pos else lo + len(moved) + 1
        step = (hi - lo) / (len(moved) + 1)
        new = [lo + step * (i + 1) for i in range(len(moved))]
        if all(a < b for a, b in pairwise([lo, *new, hi])):
            self.pos.update(zip(moved, new, strict=True))
        else:  # the gap is exhausted: number the block afresh
            self.renumber()
