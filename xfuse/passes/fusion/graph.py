"""
The graph the fusion passes decide on, shared by `fuse-greedy` and `fuse-scored`.

`FusionGraph` is a plain Python view of one function body: nodes (`Node`, a top-level op or a
group of ops) in a linked order with topological positions, and, per node, its inputs, the
values it computes that others read (outputs), its iteration space, size, kind and score.
`merge` and `recompute` change only this view: no IR is rewritten while the passes decide,
beyond pointing a moved op at the copy of a scalar constant (or of a recomputed producer) its
group reads. `finish` then builds every group as one `fusion.group` and puts the block in the
order the graph has: each op moves once, and a merge costs what the moved ops and the group's
boundary cost, never the size of the group.

A merge keeps the conventions of TorchScript's graph fuser, so that the groups come out as the
IR helpers that preceded this module built them: a producer moves to the front of its
consumer's group, a consumer to its back, scalar constants are copied in at the front, inputs
and outputs keep their order and new ones follow in the order of the moved ops, and a group
whose outputs stay the same keeps its identity (a merge that changes them makes a new node).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from operator import attrgetter
from typing import TypeVar

from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr, i64
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue, Use
from xdsl.traits import IsolatedFromAbove

from xfuse.collector import collector_paused
from xfuse.dialects import graph
from xfuse.dialects.effects import draws_random, may_mutate
from xfuse.dialects.fusion import GroupOp, YieldOp
from xfuse.dialects.op_kinds import Kind, KindGroup, kind_of, stronger_kind
from xfuse.ir.dtypes import byte_width
from xfuse.ir.functions import function_bodies
from xfuse.passes.fusion.op_facts import (
    OpClass,
    Space,
    combine_spaces,
    is_inlinable_constant,
    is_window_op,
    op_classes,
    space_of_op,
)
from xfuse.passes.fusion.symbolic import hinted_numel, static_proxies

T = TypeVar("T")

by_position = attrgetter("pos")
"""Sort key: a node's topological position."""

SCORE_ATTR = "fusion.score"
"""Discardable group attribute: estimated bytes of memory traffic the merges saved."""

# ---------------------------------------------------------------------------------------------
# IR helpers
# ---------------------------------------------------------------------------------------------


@cache
def _string_attr(text: str) -> StringAttr:
    """Attributes are immutable: one per distinct text (building and verifying one is slow)."""
    return StringAttr(str(text))


@cache
def score_attr(score: int) -> IntegerAttr:
    """The `fusion.score` attribute for `score`, shared like `_string_attr`."""
    return IntegerAttr(score, i64)


def group_space(group: GroupOp) -> Space:
    """The space of an existing group: the combination of its ops' spaces."""
    return ops_space(group.block.ops, graph.shape_of(group.results[0]))


def ops_space(ops: Iterable[Operation], fallback: tuple[int, ...]) -> Space:
    """The combination of the spaces of `ops` (scalar constants and the yield left out)."""
    space: Space | None = None
    for op in ops:
        if isinstance(op, YieldOp) or is_inlinable_constant(op.results[0]):
            continue
        s = space_of_op(op)
        # A pad or pool computes its producers at its own positions: its space is the group's.
        space = (
            s if space is None else (combine_spaces(space, s) or (s if is_window_op(op) else space))
        )
    return space if space is not None else Space(fallback)


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
            if not op.regions:
                continue  # most ops: no trait lookup (slow) needed
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


def tensor_bytes(value: SSAValue) -> int:
    """The bytes of a tensor; a symbolic one's at its symbols' hints (`symbolic`)."""
    return hinted_numel(graph.shape_of(value)) * byte_width(graph.dtype_of(value))


@dataclass(frozen=True)
class RecomputePlan:
    """Bytes saved by the two ways of fusing a producer with several readers."""

    readers: tuple[Node, ...]
    recompute_saving: int
    multi_output_saving: int

    @property
    def prefers_recompute(self) -> bool:
        return self.recompute_saving > self.multi_output_saving


# ---------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------


class Node:
    """A node of the graph: one top-level op (`op`), or a group of ops (`op` is None) that
    becomes a `fusion.group` when the pass ends.

    A group holds its ops in order (`ops`, scalar constants copied in included), its inputs
    (values computed outside that its ops read, in operand order), with the op that joined
    last of those reading each (`reader`: reports name it), and its outputs (values its ops
    compute that others read, in result order). A node absorbed by a merge, or one a
    merge replaced, is no longer `alive`; `forward` leads to the node that holds its ops now.
    `classes` are the op classes (`OpClass`) of the ops it holds: a gate that concerns a
    class (a slice's `gather_mismatch`, a window's `window_recompute`) reads it there.
    `pos` is its topological position (see `FusionGraph.renumber`), and `out_readers` the
    nodes reading each output (`FusionGraph.output_readers`, None until asked for), both kept on
    the node since the passes ask for them with nearly every pair they look at (a lookup in
    a graph-wide table costs a cache miss once the graph is large).
    """

    __slots__ = (
        "arg_hints",
        "attributes",
        "alive",
        "classes",
        "forward",
        "input_set",
        "inputs",
        "kind",
        "next",
        "op",
        "ops",
        "out_readers",
        "outputs",
        "pos",
        "prev",
        "reader",
        "rule",
        "score",
        "size",
        "space",
        "unused",
    )

    def __init__(self, op: Operation | None, kind: str, outputs: list[SSAValue]) -> None:
        self.op = op
        self.kind = kind
        self.outputs = outputs
        self.ops: deque[Operation] = deque()
        self.inputs: list[SSAValue] = []
        self.input_set: set[SSAValue] = set()
        self.reader: dict[SSAValue, Operation] = {}
        self.out_readers: tuple[tuple[Node, ...], ...] | None = None
        self.rule = ""
        self.score = 0
        self.size = 1
        self.space: Space | None = None
        self.attributes: dict[str, Attribute] = {}
        self.arg_hints: dict[SSAValue, str | None] = {}
        self.unused: set[SSAValue] = set()
        self.alive = True
        self.forward: Node | None = None
        self.classes: frozenset[OpClass] = op_classes(op) if op is not None else frozenset()
        self.prev: Node | None = None
        self.next: Node | None = None
        self.pos = 0.0

    @property
    def is_group(self) -> bool:
        return self.op is None

    def representative(self) -> Operation:
        """The op that names the node: its op, or the op computing a group's first output."""
        if self.op is not None:
            return self.op
        owner = self.outputs[0].owner
        assert isinstance(owner, Operation)
        return owner

    def renewed(self) -> Node:
        """A new node holding this one's contents (this one is no longer alive)."""
        new = Node(None, self.kind, self.outputs)
        new.ops, new.inputs, new.input_set = self.ops, self.inputs, self.input_set
        new.reader = self.reader
        new.rule, new.score, new.size, new.space = self.rule, self.score, self.size, self.space
        new.attributes, new.arg_hints, new.unused = self.attributes, self.arg_hints, self.unused
        new.add_classes(self.classes)
        self.alive, self.forward = False, new
        return new

    def add_classes(self, classes: frozenset[OpClass]) -> None:
        """Record the op classes of ops that joined the node (the only place `classes`
        grows)."""
        if not classes <= self.classes:
            self.classes = self.classes | classes

    def __repr__(self) -> str:
        return f"<Node {self.representative().name}{' group' if self.is_group else ''}>"


# ---------------------------------------------------------------------------------------------
# The graph the passes work on
# ---------------------------------------------------------------------------------------------


class FusionGraph:
    """Nodes of one function body with topological positions and cached facts."""

    def __init__(self, block: Block):
        self.block = block
        self.labels = ssa_labels(block)
        # Ops by identity (`id`, cheaper to hash than an op): every op the graph has seen
        # stays alive in `_alive_ops`, so that no identity is used twice.
        self._node_of: dict[int, Node] = {}
        self._alive_ops: list[Operation] = []
        # `readers_of` for the function's arguments (a node keeps its outputs' readers in
        # `Node.out_readers`), until a merge changes a node reading one. Like the facts below,
        # keyed by the value's `id`: a value's `__hash__` is a Python call, several times the
        # cost of the lookup, and every value the graph has seen stays alive (its op does),
        # so no identity is used twice.
        self._readers: dict[int, tuple[Node, ...]] = {}
        self._first: Node | None = None
        self._last: Node | None = None
        # Facts of values that never change (type, owner): asked for on every gate.
        self._bytes: dict[int, int] = {}
        self._inlinable: dict[int, bool] = {}
        self._shapes: dict[int, tuple[int, ...]] = {}
        self._rows: dict[int, tuple[tuple[int, ...], bool] | None] = {}
        # Names of the results of groups given in the input (a group keeps its results' names).
        self._result_hints: dict[SSAValue, str | None] = {}
        # The order in which the readers of a value are listed (`readers_of`): a stamp per
        # reading node, latest first; see `_to_front` and `_reverse`.
        self._order: dict[SSAValue, dict[Node, int]] = {}
        self._stamp = 0
        top = list(block.ops)
        # Opening a group of the input rewires uses: remember their order from before. Without
        # groups the uses stay as they are, and are read when needed.
        users: dict[SSAValue, list[Operation]] | None = None
        if any(isinstance(op, GroupOp) for op in top):
            users = {r: [use.operation for use in r.uses] for op in top for r in op.results}
        for op in top:
            node = self._open_group(op) if isinstance(op, GroupOp) else self._op_node(op)
            self._link_after(node, self._last)
        for node in self.nodes():
            node_op = node.op
            results = node_op.results if node_op is not None else ()
            for value, res in zip(node.outputs, results or node.outputs, strict=True):
                if users is None:
                    self._first_order(value, [use.operation for use in res.uses])
                else:
                    self._first_order(value, users.get(res, ()))
        self.mutators = [n for n in self.nodes() if n.op is not None and may_mutate(n.op)]
        self.drawers = [n for n in self.nodes() if n.op is not None and draws_random(n.op)]
        self.renumber()

    def _first_order(self, value: SSAValue, users: Sequence[Operation]) -> None:
        """The readers of `value` in the order of its uses in the input (the latest first)."""
        order: dict[Node, int] = {}
        for i, user in enumerate(users):
            node = self.node_of(user)
            if node is not None:
                order.setdefault(node, -i)
        self._order[value] = order

    def _to_front(self, group: Node) -> None:
        """`group` is now the latest reader of each of its inputs: building or rewiring a group
        op makes its operands' uses the newest ones."""
        order = self._order
        for value in group.inputs:
            self._stamp += 1
            order.setdefault(value, {})[group] = self._stamp

    def _reverse(self, value: SSAValue) -> None:
        """Reverse the order of the readers of `value`: replacing a value by another (a group's
        new result) moves its uses one by one, so that they come out reversed."""
        order = self._order.get(value)
        if not order:
            return
        live = sorted(((s, n) for n, s in order.items() if n.alive), key=lambda p: -p[0])
        order.clear()
        for _, node in live:
            self._stamp += 1
            order[node] = self._stamp

    def _op_node(self, op: Operation) -> Node:
        node = Node(op, kind_of(op), list(op.results))
        self._register(op, node)
        return node

    def _open_group(self, group: GroupOp) -> Node:
        """A group of the input as a node: its ops leave the group, which is erased; `finish`
        builds it again (unchanged when no merge touched it)."""
        block = group.block
        node = Node(None, group.kind.data, list(group.yield_op.values))
        node.rule, node.attributes = group.rule.data, dict(group.attributes)
        node.score = self.score_of_attr(group)
        node.space = group_space(group)
        node.inputs = list(group.inputs)
        node.input_set = set(node.inputs)
        for value, arg in zip(group.inputs, block.args, strict=True):
            node.arg_hints[value] = arg.name_hint
            if arg.first_use is None:
                node.unused.add(value)
            else:
                node.reader[value] = arg.first_use.operation
            for use in tuple(arg.uses):
                use.operation.operands[use.index] = value
        for res, inner in zip(group.results, node.outputs, strict=True):
            self._result_hints[inner] = res.name_hint
            for use in tuple(res.uses):
                use.operation.operands[use.index] = inner
        for op in [op for op in block.ops if not isinstance(op, YieldOp)]:
            op.detach()
            node.ops.append(op)
            node.add_classes(op_classes(op))
            self._register(op, node)
        node.size = len(node.ops)
        group.detach()
        group.erase()
        return node

    @staticmethod
    def score_of_attr(op: Operation) -> int:
        attr = op.attributes.get(SCORE_ATTR)
        return attr.value.data if isinstance(attr, IntegerAttr) else 0

    # --- order -------------------------------------------------------------------------------

    def _join(self, prev: Node | None, nxt: Node | None) -> None:
        """Make `nxt` follow `prev` (None: `nxt` comes first, or `prev` last)."""
        if prev is None:
            self._first = nxt
        else:
            prev.next = nxt
        if nxt is None:
            self._last = prev
        else:
            nxt.prev = prev

    def _link_after(self, node: Node, prev: Node | None) -> None:
        """Put `node` (not linked) right after `prev`, or first when `prev` is None."""
        nxt = self._first if prev is None else prev.next
        self._join(prev, node)
        self._join(node, nxt)

    def _unlink(self, node: Node) -> None:
        self._join(node.prev, node.next)
        node.prev = node.next = None

    def _replace_link(self, old: Node, new: Node) -> None:
        """`new` (not linked) takes the place of `old` in the order."""
        if old is new:
            return
        prev = old.prev
        self._unlink(old)
        self._link_after(new, prev)

    # --- queries -----------------------------------------------------------------------------

    def renumber(self) -> None:
        """Number the nodes in order (`Node.pos`); merges then place nodes in the gaps."""
        for i, node in enumerate(self.nodes()):
            node.pos = float(i)

    def nodes(self) -> list[Node]:
        found: list[Node] = []
        node = self._first
        while node is not None:
            found.append(node)
            node = node.next
        return found

    def contains(self, node: Node) -> bool:
        return node.alive

    def node_of(self, op: Operation | Block) -> Node | None:
        """The node holding `op` now (None for ops outside the body, and for blocks)."""
        node = self._node_of.get(id(op))
        if node is None or node.forward is None:
            return node
        root = node
        while root.forward is not None:
            root = root.forward
        while node.forward is not None and node.forward is not root:  # shorten the path
            node.forward, node = root, node.forward
        self._node_of[id(op)] = root
        return root

    def _register(self, op: Operation, node: Node) -> None:
        """`op` belongs to `node` from now on (ops are keyed by identity: they stay alive)."""
        self._node_of[id(op)] = node
        self._alive_ops.append(op)

    def owner_node(self, value: SSAValue) -> Node | None:
        """The node computing `value` (None for the function's arguments)."""
        return self.node_of(value.owner)

    def readers_of(self, value: SSAValue) -> tuple[Node, ...]:
        """The nodes reading `value` other than the node computing it, in the order of its
        uses (remembered until a merge changes them)."""
        owner = self.node_of(value.owner)
        if owner is not None:
            for out, readers in zip(owner.outputs, self.output_readers(owner), strict=True):
                if out is value:
                    return readers
            return self._find_readers(value, owner)  # read inside its node only
        found = self._readers.get(id(value))
        if found is None:
            found = self._readers[id(value)] = self._find_readers(value, None)
        return found

    def output_readers(self, node: Node) -> tuple[tuple[Node, ...], ...]:
        """`readers_of` each output of `node`, in order (remembered on the node)."""
        found = node.out_readers
        if found is None:
            found = node.out_readers = tuple(self._find_readers(v, node) for v in node.outputs)
        return found

    def _find_readers(self, value: SSAValue, owner: Node | None) -> tuple[Node, ...]:
        node_of, known = self.node_of, self._node_of.get
        users: dict[Node, None] = {}
        for use in value.uses:
            op = use.operation
            user = known(id(op))
            if user is not None and user.forward is not None:
                user = node_of(op)  # merged since: follow to the node holding it now
            if user is not None and user is not owner:
                users[user] = None
        if len(users) > 1:
            stamps = self._order.get(value, {})
            return tuple(sorted(users, key=lambda n: -stamps.get(n, 0)))
        return tuple(users)

    def read_outside(self, value: SSAValue, node: Node) -> bool:
        """Whether a node other than `node` reads `value` (asked while the graph changes:
        not remembered)."""
        node_of, known = self.node_of, self._node_of.get
        for use in value.uses:
            op = use.operation
            user = known(id(op))
            if user is not None and user.forward is not None:
                user = node_of(op)
            if user is not node:
                return True
        return False

    def successors(self, node: Node) -> tuple[Node, ...]:
        """The nodes reading the outputs of `node`, output by output in `readers_of` order."""
        readers = self.output_readers(node)
        if len(readers) == 1:
            return readers[0]
        found: dict[Node, None] = {}
        for users in readers:
            for user in users:
                found[user] = None
        return tuple(found)

    def producers(self, node: Node) -> list[Node]:
        """The nodes defining the node's operands, latest first."""
        values = node.inputs if node.op is None else node.op.operands
        found: set[Node] = set()
        for v in values:
            producer = self.owner_node(v)
            if producer is not None and producer is not node:
                found.add(producer)
        return sorted(found, key=by_position, reverse=True)

    def space(self, node: Node) -> Space:
        if node.space is None:
            assert node.op is not None
            node.space = space_of_op(node.op)
        return node.space

    def value_bytes(self, value: SSAValue) -> int:
        """`tensor_bytes`, cached."""
        n = self._bytes.get(id(value))
        if n is None:
            n = self._bytes[id(value)] = tensor_bytes(value)
        return n

    def shape(self, value: SSAValue) -> tuple[int, ...]:
        """`graph.shape_of`, cached (the loop-structure gate asks for every value it reads)."""
        shape = self._shapes.get(id(value))
        if shape is None:
            shape = self._shapes[id(value)] = graph.shape_of(value)
        return shape

    def row_reduction(self, op: Operation) -> tuple[tuple[int, ...], bool] | None:
        """The dims and keepdim of a reduction over some dims; None for any other op (cached:
        reading an op's properties is slow)."""
        key = id(op)
        if key in self._rows:
            return self._rows[key]
        found = None
        if isinstance(op, graph.ReduceOp) and op.reduce_dims:
            found = (op.reduce_dims, op.keeps_dims)
        self._rows[key] = found
        return found

    def is_inlinable(self, value: SSAValue) -> bool:
        """`is_inlinable_constant`, cached."""
        flag = self._inlinable.get(id(value))
        if flag is None:
            flag = self._inlinable[id(value)] = is_inlinable_constant(value)
        return flag

    def inputs_of(self, node: Node) -> set[SSAValue]:
        """The tensors a node reads from outside it (scalar constants are copied in). An op
        node's operands never change (it joins a group, a new node, to read a copy)."""
        op = node.op
        if op is not None and not node.input_set:
            node.input_set = {v for v in op.operands if not self.is_inlinable(v)}
        return node.input_set

    def edge_readers(self, first: Node, second: Node) -> Iterator[tuple[Operation, SSAValue]]:
        """The ops of `second` that read values of `first`, with the value read."""
        node_of = self.node_of
        for res, readers in zip(first.outputs, self.output_readers(first), strict=True):
            if second not in readers:
                continue
            for use in res.uses:
                if node_of(use.operation) is second:
                    yield use.operation, res

    def merged_arg_bound(self, first: Node, second: Node) -> int:
        """At least `merged_arg_count`: every input and output of both nodes counted once."""
        outputs = len(first.outputs) + len(second.outputs)
        return len(self.inputs_of(first)) + len(self.inputs_of(second)) + max(outputs, 1)

    def merged_arg_count(self, first: Node, second: Node) -> int:
        inputs = self.inputs_of(first) | self.inputs_of(second)
        count, outputs = len(inputs), 0
        for node, other in ((first, second), (second, first)):
            for value, users in zip(node.outputs, self.output_readers(node), strict=True):
                if value in inputs:  # the other node reads it: it stops being an input
                    count -= 1
                # It stays an output when a node other than `other` reads it (the readers are
                # distinct nodes: two or more include one that is not `other`).
                if len(users) > 1 or (users and users[0] is not other):
                    outputs += 1
        return count + max(outputs, 1)

    def recompute_arg_count(self, producer: Node, consumer: Node) -> int:
        inputs = self.inputs_of(producer) | self.inputs_of(consumer)
        inputs = inputs.difference(producer.outputs)
        outputs = sum(1 for users in self.output_readers(consumer) if users)
        return len(inputs) + max(outputs, 1)

    def label(self, value: SSAValue) -> str:
        return self.labels.get(value, "%?")

    def op_label(self, op: Operation | Node) -> str:
        """`%3 graph.exp`: the op's first result as the input IR names it, and the op."""
        if isinstance(op, Node):
            op = op.representative()
        # `next(iter(...))`: indexing `op.results` runs a Python-level `__getitem__`.
        first = next(iter(op.results), None)
        return f"{self.label(first)} {op.name}" if first is not None else op.name

    @staticmethod
    def _latest_reader(node: Node, value: SSAValue) -> Operation | None:
        """The op of `node` reading `value` from outside (the one that joined it last)."""
        op = node.op
        if op is not None:
            for v in op.operands:
                if v is value:
                    return op
            return None
        return node.reader.get(value) if value in node.input_set else None

    def reader_in(self, node: Node, value: SSAValue) -> Operation:
        """The op of `node` that reads `value` (the one that joined it last)."""
        found = self._latest_reader(node, value)
        return found if found is not None else node.representative()

    def pair_ops(self, first: Node, second: Node) -> tuple[Operation, Operation]:
        """The ops that name a producer-consumer pair: the op computing the first tensor
        `second` reads, and its reader (the one that joined `second` last)."""
        for value in first.outputs:
            reader = self._latest_reader(second, value)
            if reader is not None:
                owner = value.owner
                assert isinstance(owner, Operation)
                return owner, reader
        return first.representative(), second.representative()

    # --- cost model --------------------------------------------------------------------------

    def merge_saving(self, first: Node, second: Node) -> int:
        """Bytes of memory traffic saved by merging: a tensor only `second` reads is neither
        written nor read back (2x); one that others read too is read once less (1x); an input
        both read is read once."""
        saved = 0
        value_bytes = self.value_bytes
        for res, users in zip(first.outputs, self.output_readers(first), strict=True):
            if second in users:
                saved += (2 if len(users) == 1 else 1) * value_bytes(res)
        for value in self.inputs_of(first) & self.inputs_of(second):
            saved += value_bytes(value)
        return saved

    def recompute_plan(self, producer: Node) -> RecomputePlan | None:
        """For a cheap producer (one elementwise or broadcast op) read by several nodes: the
        bytes saved by copying it into each reader versus keeping it as an extra output of
        one of them. None when the producer is not a candidate."""
        if producer.op is None or producer.kind not in KindGroup.CHEAP:
            return None
        readers = list(self.successors(producer))
        if len(readers) < 2:
            return None
        out = sum(self.value_bytes(r) for r in producer.outputs)
        extra = 0
        reader_inputs = [self.inputs_of(r) for r in readers]
        for value in self.inputs_of(producer):
            new_readers = sum(1 for inputs in reader_inputs if value not in inputs)
            extra += self.value_bytes(value) * (new_readers - 1)
        recompute = (len(readers) + 1) * out - extra
        multi = max(self.merge_saving(producer, r) for r in readers)
        return RecomputePlan(tuple(readers), recompute, multi)

    def output_cone(self, group: Node, value: SSAValue) -> list[Operation]:
        """The ops of `group` that its output `value` depends on, in the group's order (back
        to the group's inputs)."""
        needed: set[Operation] = set()
        owner = value.owner
        assert isinstance(owner, Operation)
        stack = [owner]
        while stack:
            op = stack.pop()
            if op in needed:
                continue
            needed.add(op)
            for v in op.operands:
                if isinstance(v.owner, Operation) and self.node_of(v.owner) is group:
                    stack.append(v.owner)
        return [op for op in group.ops if op in needed]

    def cone_inputs(self, cone: Sequence[Operation]) -> set[SSAValue]:
        """The tensors `cone`'s ops read from outside it (scalar constants are copied in)."""
        inside = {res for op in cone for res in op.results}
        return {
            v for op in cone for v in op.operands if v not in inside and not self.is_inlinable(v)
        }

    def output_recompute_saving(
        self, value: SSAValue, cone: Sequence[Operation], readers: Sequence[Node]
    ) -> int:
        """Bytes saved by computing `value` again from its cone's inputs in each of its
        readers: it is neither written nor read back, and each reader reads the cone's
        inputs it did not read yet."""
        saved = (len(readers) + 1) * self.value_bytes(value)
        for v in self.cone_inputs(cone):
            saved -= self.value_bytes(v) * sum(1 for r in readers if v not in self.inputs_of(r))
        return saved

    # --- merges ------------------------------------------------------------------------------

    def _reconnect(
        self,
        group: Node,
        moved: Sequence[Operation],
        *,
        joined: bool = True,
        source: Node | None = None,
    ) -> bool:
        """Fix the boundary of `group` after `moved` ops joined it: their scalar constants are
        copied in (at the front), the values they read from outside become inputs, inputs
        now computed inside are dropped, and the values read outside are the outputs (the
        outputs of `moved` are already the group's when they did not join it: a singleton).
        `source` is the node the ops come from, if any. True when the outputs stayed the same
        (the group keeps its identity)."""
        node_of, known, inlinable = self.node_of, self._node_of.get, self.is_inlinable
        inputs, input_set, reader = group.inputs, group.input_set, group.reader
        from_group = source is not None and source.is_group
        # The ops of a group read from outside only its inputs (their scalar constants are
        # copies inside already), and only its outputs are read outside it: the walk over
        # its ops, in order (the order decides the new inputs' order and readers), looks
        # closer only at those, and a merge costs little per op moved.
        crossing = leaving = None
        if from_group:
            assert source is not None
            crossing = {id(v) for v in source.inputs}
            leaving = {id(v) for v in source.outputs}
        copies: dict[SSAValue, SSAValue] = {}
        for op in moved:
            if crossing is not None and all(id(v) not in crossing for v in op.operands):
                continue  # reads only values computed inside
            for i, value in enumerate(op.operands):
                owner = value.owner
                holder = known(id(owner))
                if holder is not None and holder.forward is not None:
                    holder = node_of(owner)
                if holder is group:
                    continue
                if inlinable(value):
                    copy = copies.get(value)
                    if copy is None:
                        assert isinstance(owner, Operation)  # a constant op
                        clone = owner.clone()
                        group.ops.appendleft(clone)
                        group.add_classes(op_classes(clone))
                        self._register(clone, group)
                        copy = copies[value] = clone.results[0]
                    op.operands[i] = copy
                else:
                    reader[value] = op
                    if value not in input_set:
                        inputs.append(value)
                        input_set.add(value)

        unused = group.unused
        kept = [v for v in inputs if not (unused and v in unused) and node_of(v.owner) is not group]
        if len(kept) != len(inputs):
            group.inputs, group.input_set = kept, set(kept)
        if unused:
            group.unused = set()

        old = group.outputs
        outputs = [v for v in old if self.read_outside(v, group)]
        for op in moved if joined else ():
            for res in op.results:
                if (leaving is None or id(res) in leaving) and self.read_outside(res, group):
                    outputs.append(res)
        if not outputs:  # nothing reads the group: keep one output so that it stays valid
            outputs = [old[0]]
        group.outputs = outputs
        same = outputs == old
        if not same:  # the group op is rebuilt: its results replace the values it yields
            old_set = set(old)
            for v in outputs:
                # A dissolved group's result was replaced by the value (reversed) and now by
                # the new result (reversed again): its readers keep their order.
                if v in old_set or not from_group:
                    self._reverse(v)
        return same

    def _singleton(self, op: Operation, rule: str) -> Node:
        """A group of the one op `op` (the op's node is no longer alive)."""
        old = self.node_of(op)
        assert old is not None
        node = Node(None, kind_of(op), list(op.results))
        node.rule, node.space = rule, old.space
        node.ops.append(op)
        node.add_classes(old.classes)
        old.alive, old.forward = False, node
        for res in op.results:  # the group's results replace the op's
            self._order.setdefault(res, {})
            self._reverse(res)
        self._reconnect(node, [op], joined=False)
        return node

    def _absorb(self, group: Node, other: Node, *, front: bool) -> bool:
        """Move the ops of `other` into `group`: at the front when they come first. Returns
        `_reconnect`'s answer."""
        ops = list(other.ops) if other.op is None else [other.op]
        if front:
            group.ops.extendleft(reversed(ops))
        else:
            group.ops.extend(ops)
        group.add_classes(other.classes)
        other.alive, other.forward = False, group
        return self._reconnect(group, ops, source=other)

    def merge(
        self,
        first: Node,
        second: Node,
        rule: str,
        moved: Sequence[Node] = (),
        saved: int = 0,
    ) -> Node:
        """Merge node `first` into node `second` (`first` earlier; the gates have passed and
        `moved` are the nodes between them that depend on `first`). The group takes `second`'s
        place and `moved` follow it, in order."""
        self._forget_readers(first)
        self._forget_readers(second)
        nxt = second.next
        kind = stronger_kind(first.kind, second.kind)
        # (None: a windowed consumer took in its producer, legality.window_absorbs)
        space = combine_spaces(self.space(first), self.space(second)) or self.space(second)
        size = first.size + second.size
        score = first.score + second.score + saved
        at = second.pos
        if first.is_group and second.is_group and first.size > second.size:
            target, same = first, self._absorb(first, second, front=False)
        elif second.is_group:
            target, same = second, self._absorb(second, first, front=True)
        elif first.is_group:
            target, same = first, self._absorb(first, second, front=False)
        else:
            assert second.op is not None
            target, same = self._singleton(second.op, rule), True  # a new node already
            self._absorb(target, first, front=True)
        group = target if same else target.renewed()
        self._describe(group, kind, rule, score, space, size)
        prev = second.prev if second.prev is not first else first.prev
        self._unlink(first)
        self._unlink(second)
        self._link_after(group, prev)
        group.pos = at
        self._place_after(group, moved, nxt)
        self._to_front(group)
        return group

    def _reads_in(self, node: Node) -> Callable[[Use], bool]:
        """Whether a use is by an op of `node` (for `replace_uses_with_if`)."""
        return lambda use: self.node_of(use.operation) is node

    def recompute(
        self, producer: Node, consumers: Sequence[Node], rule: str, saved: int = 0
    ) -> list[Node]:
        """Copy the single op of `producer` into every consumer (each becomes or stays a
        group); the producer goes away once nothing reads it."""
        op = producer.op
        assert op is not None
        for node in (producer, *consumers):
            self._forget_readers(node)
        space = self.space(producer)
        groups = self._copy_into(
            [op], op.results, consumers, rule, saved, (producer.kind, space, producer.classes)
        )
        if all(res.first_use is None for res in op.results):
            self._unlink(producer)
            producer.alive = False
            op.detach()
            op.erase()
        return groups

    def recompute_output(
        self,
        group: Node,
        value: SSAValue,
        cone: Sequence[Operation],
        consumers: Sequence[Node],
        rule: str,
        saved: int = 0,
    ) -> list[Node]:
        """Copy `cone`, the ops of `group` computing its output `value` (`output_cone`), into
        every consumer reading it: the group no longer writes `value` (the ops only it
        needed are left dead, for `group-cleanup`)."""
        for node in (group, *consumers):
            self._forget_readers(node)
        kind: str = Kind.ELEMENTWISE
        classes: frozenset[OpClass] = frozenset()
        for op in cone:
            kind, classes = stronger_kind(kind, kind_of(op)), classes | op_classes(op)
        space = ops_space(cone, self.shape(value))
        groups = self._copy_into(cone, [value], consumers, rule, saved, (kind, space, classes))
        if not self._reconnect(group, [], joined=False):
            renewed = group.renewed()
            self._replace_link(group, renewed)
            renewed.pos = group.pos
        return groups

    def _copy_into(
        self,
        ops: Sequence[Operation],
        values: Sequence[SSAValue],
        consumers: Sequence[Node],
        rule: str,
        saved: int,
        facts: tuple[str, Space, frozenset[OpClass]],
    ) -> list[Node]:
        """Copy `ops` into every consumer, which reads the copies of `values` from then on;
        `facts` are the kind, space and op classes of the copied ops."""
        kind, space, classes = facts
        groups: list[Node] = []
        share = saved // max(len(consumers), 1)
        for consumer in consumers:
            clones = self._clone_ops(ops)
            copies: dict[SSAValue, SSAValue] = {
                res: copy
                for op, clone in zip(ops, clones, strict=True)
                for res, copy in zip(op.results, clone.results, strict=True)
            }
            # The consumer reads the copies of `values` only (a copied op that computes an
            # input of the consumer's otherwise, such as the group's other output, is not read).
            copies = {res: copies[res] for res in values}
            for res in values:
                res.replace_uses_with_if(copies[res], self._reads_in(consumer))
            merged_kind = stronger_kind(kind, consumer.kind)
            merged_space = combine_spaces(space, self.space(consumer)) or self.space(consumer)
            size, score, at = consumer.size + len(ops), consumer.score + share, consumer.pos
            if consumer.is_group:
                target = consumer
                target.inputs = [copies.get(v, v) for v in target.inputs]
                target.input_set = set(target.inputs)
            else:
                assert consumer.op is not None
                target = self._singleton(consumer.op, rule)
            target.ops.extendleft(reversed(clones))
            target.add_classes(classes)
            for clone in clones:
                self._register(clone, target)
            same = self._reconnect(target, clones) or target is not consumer
            group = target if same else target.renewed()
            self._describe(group, merged_kind, rule, score, merged_space, size)
            self._replace_link(consumer, group)
            group.pos = at
            self._to_front(group)
            groups.append(group)
        return groups

    def _clone_ops(self, ops: Sequence[Operation]) -> list[Operation]:
        """Copies of `ops` (in order), each reading the copies of the ones before it; the
        results keep their labels."""
        mapping: dict[SSAValue, SSAValue] = {}
        clones: list[Operation] = []
        for op in ops:
            clone = op.clone(value_mapper=mapping)
            for res, copy in zip(op.results, clone.results, strict=True):
                mapping[res] = copy
                self.labels[copy] = self.label(res)
            clones.append(clone)
        return clones

    @staticmethod
    def _describe(group: Node, kind: str, rule: str, score: int, space: Space, size: int) -> None:
        """Set what a merge made of `group`."""
        group.kind, group.rule, group.score, group.space, group.size = (
            kind,
            rule,
            score,
            space,
            size,
        )
        group.attributes[SCORE_ATTR] = score_attr(score)

    def _forget_readers(self, node: Node) -> None:
        """Drop the remembered readers of the values `node` reads or computes, before a merge
        changes it. Those are the only values whose readers, their order or their owner a merge
        changes (scalar constants included: an op node reads them directly, and moving the op
        into a group makes it read a copy), so the rest stay remembered across merges."""
        node.out_readers = None
        for value in node.op.operands if node.op is not None else node.inputs:
            owner = self.node_of(value.owner)
            if owner is None:
                self._readers.pop(id(value), None)
            else:
                owner.out_readers = None

    def _place_after(self, group: Node, moved: Sequence[Node], nxt: Node | None) -> None:
        prev = group
        for node in moved:
            self._unlink(node)
            self._link_after(node, prev)
            prev = node
        if not moved:
            return
        lo = group.pos
        hi = nxt.pos if nxt is not None else lo + len(moved) + 1
        step = (hi - lo) / (len(moved) + 1)
        new = [lo + step * (i + 1) for i in range(len(moved))]
        if all(a < b for a, b in pairwise([lo, *new, hi])):
            for node, at in zip(moved, new, strict=True):
                node.pos = at
        else:  # the gap is exhausted: number the block afresh
            self.renumber()

    # --- building the IR ---------------------------------------------------------------------

    def finish(self) -> None:
        """Build the IR the graph describes: every group becomes a `fusion.group` in its
        place, the top-level ops follow the graph's order, and scalar constants (and iotas)
        that nothing reads any more (every reader has its own copy now) are erased. The graph is done
        then: only `label` and `op_label` answer after it."""
        block = self.block
        outer_of: dict[SSAValue, SSAValue] = {}
        prev: Operation | None = None
        for node in self.nodes():
            op = node.op if node.op is not None else self._build_group(node, outer_of)
            if op.parent is not block or op.prev_op is not prev:
                if op.parent is not None:
                    op.detach()
                if prev is not None:
                    block.insert_op_after(op, prev)
                elif block.first_op is not None:
                    block.insert_op_before(op, block.first_op)
                else:
                    block.add_op(op)
            prev = op
        for op in list(block.ops):
            if (
                isinstance(op, graph.ConstantOp | graph.IotaOp | graph.SizeValueOp)
                and op.result.first_use is None
            ):
                op.detach()
                op.erase()
        self._release()

    def _release(self) -> None:
        """Drop what only the decisions needed. The passes pause the garbage collector while
        they decide; once it runs again it would walk every object still held here, and the
        links of the node list are cycles that only it could free."""
        node = self._first
        while node is not None:
            node.out_readers = None
            node.prev, node.next, node = None, None, node.next
        self._first = self._last = None
        self.mutators = []
        self.drawers = []
        self._node_of.clear()
        self._alive_ops.clear()
        self._readers.clear()
        self._order.clear()
        self._bytes.clear()
        self._inlinable.clear()
        self._shapes.clear()
        self._rows.clear()

    def _build_group(self, node: Node, outer_of: dict[SSAValue, SSAValue]) -> GroupOp:
        """The `fusion.group` of a group node; its outputs replace the values they yield
        outside it (`outer_of` records them for the groups built after it)."""
        inputs = [outer_of.get(v, v) for v in node.inputs]
        body = Block(arg_types=[v.type for v in inputs])
        arg_of: dict[SSAValue, BlockArgument] = {}
        for arg, value, outer in zip(body.args, node.inputs, inputs, strict=True):
            arg.name_hint = node.arg_hints.get(value)
            arg_of[outer] = arg
        for op in node.ops:
            if op.parent is not None:
                op.detach()
            body.add_op(op)
            for i, value in enumerate(op.operands):
                inner = arg_of.get(value)
                if inner is not None:
                    op.operands[i] = inner
        body.add_op(YieldOp.create(operands=node.outputs))  # `create`: no argument parsing
        group = GroupOp.create(
            operands=inputs,
            result_types=[v.type for v in node.outputs],
            properties={"kind": _string_attr(node.kind), "rule": _string_attr(node.rule)},
            regions=[Region(body)],
        )
        group.attributes.update(node.attributes)
        for res, value in zip(group.results, node.outputs, strict=True):
            res.name_hint = self._result_hints.get(value, value.name_hint)
            value.replace_uses_with_if(res, lambda use: use.operation.parent is not body)
            outer_of[value] = res
        return group


def directly_connected(g: FusionGraph, first: Node, second: Node) -> bool:
    """`second` reads a value of `first`."""
    return any(s is second for s in g.successors(first))


def fuse_each_function(module: ModuleOp, fuse: Callable[[FusionGraph], Iterable[T]]) -> list[T]:
    """Run `fuse` on the fusion graph of every function body of `module` (the collector
    paused: `collector_paused`); returns what the runs return (their decision records), in order."""
    found: list[T] = []
    for f in function_bodies(module):
        with collector_paused(), static_proxies(f):
            found.extend(fuse(FusionGraph(f.body.block)))
    return found
