"""
`group-cleanup`: tidy every `fusion.group` after fusion (what ONNX Runtime's fuser runs on a
fused subgraph).

Inside each group: identical constants are pooled (one copy, at the top of the body), common
subexpressions are eliminated (a producer recomputed into several readers that later became
one group is computed once), and dead ops are removed. At the boundary: outputs nothing reads
and duplicate outputs are dropped, an output that only passes an input through is replaced by
that input, unused and duplicate inputs are dropped, and a group whose results are all unused
is erased. An output that is the reshape of another output, or the only output (of a group
without reductions), is a reshape after the group (a view) of the value the group computes:
the kernel writes the values once, looping over their own shape. An input that the group reads
only through `graph.reshape`s to one shape is reshaped outside instead (the runtime's reshape
is a view): the kernel then indexes the buffer in that shape, e.g. a row loop of a split
reduction reads its row's elements at (row, i), which is what `gpu-map-parallel` maps onto the
`rows` strategy.

A group without reductions whose outputs differ in element count is split into one group per
count (each recomputing what it needs): one loop nest cannot write both.

A group left with only layout ops that torch runs as views (`graph.STRIDED_VIEWS`: the
permute and reshape between two attention GEMMs), whose results only externs read, is
dissolved: the runtime runs those ops as torch views of the extern's real output, which is
free where that output's strides allow it (torch copies where they do not, as eager does).
Where the strides are known at compile time (a `linear`'s row-major product) and a reshape
could only run as torch's strided copy, the group stays: it writes what those reshapes give,
and the views after them run as torch views of its outputs.

A group that computes the query of an attention call whose output torch lays out in another
memory order (`orders`: the CPU kernel's [B, H, T, D] output in [B, T, H, D] memory, where its
query is so) writes the query in that order, and a permute after the group (a view) hands it
to the call: the output then lies as the call's `orders` read it, as in eager, where a
row-major query would leave the heads' merge and a saved output to copies (Llama's rotary
embedding computes its query in a kernel).

Sharing one tensor between two outputs (pooling, CSE, duplicate outputs) is only safe when no
op may write memory: in a function holding an in-place `torch_call` (or any op that may
mutate), only dead code and unused inputs/outputs are removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, Region, SSAValue, Use
from xdsl.passes import ModulePass
from xdsl.traits import IsTerminator
from xdsl.transforms.common_subexpression_elimination import cse
from xdsl.transforms.dead_code_elimination import region_dce

from xfuse.dialects import graph
from xfuse.dialects.effects import may_mutate
from xfuse.dialects.fusion import GroupOp
from xfuse.dialects.op_kinds import Kind, kind_of, stronger_kind
from xfuse.frontend.attention import SDPA, SDPA_KERNELS
from xfuse.frontend.builder import inverse_permutation
from xfuse.passes.fusion.graph import group_space
from xfuse.passes.fusion.symbolic import static_proxies


def body_dce(body: Region) -> None:
    """`region_dce` of a group's body, skipped where it has nothing to erase (most bodies,
    after fusion and CSE): one block without nested regions whose every op but the
    terminator has a result that is read. Each such op feeds a later op of the block, and
    so, through later ops, the terminator: every op is live."""
    if _may_hold_dead_ops(body):
        region_dce(body)


def _may_hold_dead_ops(body: Region) -> bool:
    if len(body.blocks) != 1:
        return True
    for op in body.block.ops:
        if op.regions:
            return True
        if all(r.first_use is None for r in op.results) and not op.has_trait(IsTerminator):
            return True
    return False


def pool_constants(block: Block) -> None:
    """One constant per distinct value and type, moved to the top of the block."""
    first: dict[tuple[Attribute, Attribute], graph.ConstantOp] = {}
    for op in [op for op in block.ops if isinstance(op, graph.ConstantOp)]:
        key = (op.value, op.result.type)
        op.detach()
        if key in first:
            op.result.replace_all_uses_with(first[key].result)
            op.erase()
        else:
            first[key] = op
    top = block.first_op
    assert top is not None  # the yield at least
    block.insert_ops_before(list(first.values()), top)


def _input_for(group: GroupOp, value: SSAValue) -> SSAValue | None:
    """The outer value an inner value stands for, when it is a block argument."""
    if isinstance(value, BlockArgument) and value.block is group.block:
        return group.inputs[value.index]
    return None


def clean_boundary(group: GroupOp, *, share: bool) -> GroupOp | None:
    """Drop what the group's boundary does not need; the rebuilt group, or None if erased."""
    yielded = list(group.yield_op.values)
    keep: list[tuple[SSAValue, list[SSAValue]]] = []  # inner value, outer results it replaces
    index: dict[SSAValue, int] = {}
    for inner, res in zip(yielded, group.results, strict=True):
        if res.first_use is None:
            continue
        outer = _input_for(group, inner)
        if outer is not None and share:
            res.replace_all_uses_with(outer)
            continue
        if share and inner in index:
            keep[index[inner]][1].append(res)
            continue
        index[inner] = len(keep)
        keep.append((inner, [res]))
    if not keep:
        group.detach()
        group.erase()
        return None

    block = group.block
    inputs: list[SSAValue] = []
    for outer, arg in list(zip(group.inputs, block.args, strict=True)):
        if arg.first_use is None:
            block.erase_arg(arg)
        else:
            inputs.append(outer)

    if len(keep) == len(group.results) and len(inputs) == len(group.inputs):
        return group
    region = group.detach_region(group.body)
    new = GroupOp(inputs, [v.type for v, _ in keep], region, group.kind.data, group.rule.data)
    new.attributes.update(group.attributes)
    parent = group.parent_block()
    assert parent is not None
    parent.insert_op_before(new, group)
    new.yield_op.operands = [v for v, _ in keep]
    for res, (_, olds) in zip(new.results, keep, strict=True):
        for old in olds:
            old.replace_all_uses_with(res)
    group.detach()
    group.erase()
    return new


def group_kind(group: GroupOp) -> str:
    """The strongest kind left in the group (dead code may have taken the strongest op)."""
    kind: str = Kind.ELEMENTWISE
    for op in group.block.ops:
        if op is not group.yield_op:
            kind = stronger_kind(kind, kind_of(op))
    return kind


def merge_duplicate_inputs(group: GroupOp) -> None:
    """One block argument per outer value (the same tensor passed twice)."""
    arg_of: dict[SSAValue, BlockArgument] = {}
    for outer, arg in zip(group.inputs, group.block.args, strict=True):
        if outer in arg_of:
            arg.replace_all_uses_with(arg_of[outer])
        else:
            arg_of[outer] = arg


def _reshaped_input_shape(arg: BlockArgument) -> tuple[int, ...] | None:
    """The one shape every use of `arg` reshapes it to, if all its uses are reshapes."""
    shapes = {
        graph.shape_of(use.operation.results[0])
        if isinstance(use.operation, graph.ReshapeOp)
        else None
        for use in arg.uses
    }
    if len(shapes) != 1:
        return None
    return shapes.pop()


def hoist_input_reshapes(group: GroupOp) -> None:
    """An input read only through reshapes to one shape is reshaped before the group; the
    reshaped input is looked at again, so that a chain of reshapes (Swin's window mask, made
    `[nW, 1, N, N]` then `[1, nW, 1, N, N]`) goes out whole."""
    block = group.block
    i = 0
    while i < len(block.args):
        outer, arg = group.inputs[i], block.args[i]
        shape = _reshaped_input_shape(arg)
        if shape is None:
            i += 1
            continue
        view = graph.ReshapeOp(outer, shape)
        parent = group.parent_block()
        assert parent is not None
        parent.insert_op_before(view, group)
        new_arg = block.insert_arg(view.result.type, i)
        for use in list(arg.uses):
            reshape = use.operation
            reshape.results[0].replace_all_uses_with(new_arg)
            reshape.detach()
            reshape.erase()
        block.erase_arg(arg)
        group.operands = [*group.operands[:i], view.result, *group.operands[i + 1 :]]


def _hoistable_reshape(group: GroupOp, inner: SSAValue) -> graph.ReshapeOp | None:
    """The reshape that yielded `inner` is, when the kernel may write its input instead: its
    input is another output, or it is the only output of a group without reductions and
    nothing else in the group reads it."""
    reshape = inner.owner
    if not isinstance(reshape, graph.ReshapeOp) or reshape.parent_block() is not group.block:
        return None
    source = reshape.input
    if isinstance(source, BlockArgument):
        return None
    yielded = list(group.yield_op.values)
    if source in yielded:
        return reshape
    alone = len(yielded) == 1 and group_kind(group) != Kind.REDUCTION
    return reshape if alone and len(list(inner.uses)) == 1 else None


def hoist_output_reshapes(group: GroupOp) -> GroupOp:
    """An output that is a `graph.reshape` of a value the group computes becomes that value's
    reshape after the group (a view), so that the kernel loops over the value's own shape and
    writes it once:
    - a batch norm whose result the next block and a 1x1 convolution's matrix product both
      read (reshaped) wrote its values twice, in each shape;
    - a max pool whose `[C, H*W]` reshape alone is read looped over `[C, H*W]`, and found its
      window's rows and columns by dividing the flat index.
    Returns the group, rebuilt when an output was added."""
    hoists = [
        (i, reshape)
        for i, (inner, res) in enumerate(zip(group.yield_op.values, group.results, strict=True))
        if res.first_use is not None and (reshape := _hoistable_reshape(group, inner))
    ]
    if not hoists:
        return group
    sources = [r.input for _, r in hoists if r.input not in group.yield_op.values]
    if sources:
        group = add_outputs(group, list(dict.fromkeys(sources)))
    result_of = dict(zip(group.yield_op.values, group.results, strict=True))
    parent = group.parent_block()
    assert parent is not None
    for i, reshape in hoists:
        res = group.results[i]
        view = graph.ReshapeOp(result_of[reshape.input], graph.shape_of(res))
        parent.insert_op_after(view, group)
        res.replace_all_uses_with(view.result)
    return group


def add_outputs(group: GroupOp, values: list[SSAValue]) -> GroupOp:
    """The group rebuilt with `values` (computed inside) yielded after its outputs."""
    region = group.detach_region(group.body)
    types = [r.type for r in group.results] + [v.type for v in values]
    new = GroupOp(list(group.inputs), types, region, group.kind.data, group.rule.data)
    new.attributes.update(group.attributes)
    parent = group.parent_block()
    assert parent is not None
    parent.insert_op_before(new, group)
    new.yield_op.operands = [*new.yield_op.values, *values]
    for old, res in zip(group.results, new.results, strict=False):
        old.replace_all_uses_with(res)
    group.detach()
    group.erase()
    return new


def clean_group(group: GroupOp, *, share: bool) -> GroupOp | None:
    merge_duplicate_inputs(group)
    if share:
        hoist_input_reshapes(group)
        pool_constants(group.block)
        cse(group.body)
    body_dce(group.body)
    cleaned = clean_boundary(group, share=share)
    if cleaned is not None and share:  # on the minimal boundary (one output per value)
        cleaned = clean_boundary(hoist_output_reshapes(cleaned), share=share)
    if cleaned is not None:
        body_dce(cleaned.body)  # what only the dropped outputs read
        cleaned.properties["kind"] = StringAttr(group_kind(cleaned))
    return cleaned


def split_by_output_size(group: GroupOp, *, share: bool) -> list[GroupOp]:
    """A group without reductions whose outputs differ in element count (a rotary embedding
    and its key repeated for grouped-query attention) becomes one group per count, each
    recomputing the ops it needs: one loop cannot write both. (Groups with reductions write
    outputs of the full and the row shape; `lower-to-loops` handles those, and fusion's
    `loop-structure` gate keeps out any other. A reduction over no dims reduces nothing: its
    group runs one loop over its elements like any other.)"""
    if group_space(group).reduced:
        return [group]
    sizes = [graph.numel(graph.shape_of(r)) for r in group.results]
    if len(set(sizes)) <= 1:
        return [group]
    parent = group.parent_block()
    assert parent is not None
    parts: list[GroupOp] = []
    for size in dict.fromkeys(sizes):
        part = group.clone()
        parent.insert_op_before(part, group)
        for old, new, n in zip(group.results, part.results, sizes, strict=True):
            if n == size:
                old.replace_all_uses_with(new)
        parts.append(part)
    group.detach()
    group.erase()
    cleaned: list[GroupOp] = []
    for part in parts:
        # Once to drop the outputs of other sizes, once more for the ops only they needed.
        kept = clean_group(part, share=share)
        kept = clean_group(kept, share=share) if kept is not None else None
        if kept is not None:
            cleaned.append(kept)
    return cleaned


def _only_views_read_by_externs(group: GroupOp) -> bool:
    body = group.body_ops
    return (
        bool(body)
        and all(isinstance(op, graph.STRIDED_VIEWS) for op in body)
        and graph.read_only_by_externs(group)
    )


def _writes_row_major(op: Operation) -> bool:
    """Whether `op`'s results are row-major at run time whatever its inputs' strides: a
    kernel's buffers, `linear`'s product, and `matmul`'s where torch does not compute it
    transposed (its left operand has no fewer dims than its right). A group read by another
    group's views stays a kernel (`clean_function` dissolves only groups read by externs
    alone, readers first), and a channels-last kernel's buffer is row-major in its NHWC
    shape, the NCHW tensor a permute of it outside groups."""
    if isinstance(op, GroupOp | graph.LinearOp):
        return True
    return isinstance(op, graph.MatmulOp) and len(graph.shape_of(op.lhs)) >= len(
        graph.shape_of(op.rhs)
    )


def _run_time_strides(value: SSAValue) -> tuple[int, ...] | None:
    """`value`'s strides at run time where they are known: row-major where its op writes so
    (`_writes_row_major`), or a torch view of such a value outside groups (a reshape torch
    copies is row-major); None where they depend on an extern or the caller."""
    owner = value.owner
    if graph.is_symbolic(value) or not isinstance(owner, Operation):
        return None
    shape = graph.shape_of(value)
    if _writes_row_major(owner):
        return graph.row_major_strides(shape)
    if not isinstance(owner, graph.STRIDED_VIEWS) or isinstance(owner.parent_op(), GroupOp):
        return None
    base = _run_time_strides(owner.operands[0])
    if base is None:
        return None
    return graph.view_strides(owner, base) or graph.row_major_strides(shape)


def copying_reshapes(group: GroupOp) -> list[Operation]:
    """The reshapes of a group of views that torch could only run as copies, given the
    strides its inputs have at run time (`_run_time_strides`; none where those are unknown):
    the heads of a row-major `linear` result that `nn.MultiheadAttention` splits apart."""
    strides: dict[SSAValue, tuple[int, ...] | None] = {
        arg: _run_time_strides(outer)
        for arg, outer in zip(group.block.args, group.inputs, strict=True)
    }
    copies: list[Operation] = []
    for op in group.block.ops:
        if op is group.yield_op:
            continue
        known = strides.get(op.operands[0])
        result = graph.view_strides(op, known) if known is not None else None
        if known is not None and result is None:
            copies.append(op)
            result = graph.row_major_strides(graph.shape_of(op.results[0]))
        strides[op.results[0]] = result
    return copies


def hoist_views_after_copies(group: GroupOp, copies: list[Operation]) -> GroupOp | None:
    """The group of views writes the results of its `copies` (row-major, coalesced) and the
    views after them run outside as torch views of those, as eager's `.contiguous()` would
    have them: torch's strided copy is left with nothing to copy."""
    after: list[Operation] = []
    reached = {c.results[0] for c in copies}
    for op in group.block.ops:
        if op is not group.yield_op and op not in copies and reached & set(op.operands):
            after.append(op)
            reached.update(op.results)
    group = add_outputs(group, [c.results[0] for c in copies])
    result_of = dict(zip(group.yield_op.values, group.results, strict=False))
    outside: dict[SSAValue, SSAValue] = {c.results[0]: result_of[c.results[0]] for c in copies}
    parent = group.parent_block()
    assert parent is not None
    anchor: Operation = group
    for op in after:
        moved = op.clone(value_mapper=dict(outside))
        parent.insert_op_after(moved, anchor)
        anchor = moved
        outside.update(zip(op.results, moved.results, strict=True))
    for inner, res in zip(group.yield_op.values, group.results, strict=True):
        if inner in outside and res is not outside[inner]:
            res.replace_all_uses_with(outside[inner])
    cleaned = clean_boundary(group, share=True)
    if cleaned is not None:
        body_dce(cleaned.body)
    return cleaned


def dissolve_view_group(group: GroupOp) -> None:
    """The group's ops move out in front of it, reading its inputs; the group goes."""
    parent = group.parent_block()
    assert parent is not None
    for arg, outer in zip(group.block.args, group.inputs, strict=True):
        arg.replace_all_uses_with(outer)
    for op in group.body_ops:
        op.detach()
        parent.insert_op_before(op, group)
    for res, inner in zip(group.results, group.yield_op.values, strict=True):
        res.replace_all_uses_with(inner)
    group.detach()
    group.erase()


ATTENTION_CALLS = frozenset((SDPA, *SDPA_KERNELS))
"""Attention calls whose output torch lays out in its query's memory order (the CPU kernel's
[B, H, T, D] output is [B, T, H, D] in memory where its query is)."""


def _query_order(call: graph.TorchCallOp) -> tuple[int, ...] | None:
    """The memory order of an attention call's output (`orders`), where the call takes its
    query as its first operand and that order is not the identity; else None."""
    if call.target.data not in ATTENTION_CALLS or not call.args.data or not call.inputs:
        return None
    first = call.args.data[0]
    orders = call.memory_orders
    if not isinstance(first, StringAttr) or first.data != "%t0" or not orders:
        return None
    order = orders[0]
    if order is None or order == tuple(range(len(order))):
        return None
    return order


def query_in_output_order(block: Block) -> None:
    """A query that a group computes for an attention call whose output is in another memory
    order (`_query_order`) is written in that order: the group yields it permuted (row-major
    in that order) and a permute after the group, a view, gives the call its query in eager's
    layout. The call's output then lies in the order its `orders` read it in, as in eager:
    the reshapes that merge its heads are views, and a saved output needs no copy into
    eager's strides. Only the query of a group without reductions, read by such calls and
    the return alone, is moved."""
    for call in [op for op in block.ops if isinstance(op, graph.TorchCallOp)]:
        order = _query_order(call)
        if order is None:
            continue
        query = call.inputs[0]
        group = query.owner
        if (
            isinstance(query, OpResult)
            and isinstance(group, GroupOp)
            and group.parent_block() is block
            and group.kind.data != "reduction"
            and not graph.is_symbolic(query)
            and len(graph.shape_of(query)) == len(order)
            and all(_reads_as_query(u, order) for u in query.uses)
        ):
            _write_permuted(group, query.index, order)


def _reads_as_query(use: Use, order: tuple[int, ...]) -> bool:
    """Whether `use` is the return, or the query of an attention call of output `order`."""
    user = use.operation
    if isinstance(user, func.ReturnOp):
        return True
    return isinstance(user, graph.TorchCallOp) and use.index == 0 and _query_order(user) == order


def _write_permuted(group: GroupOp, index: int, order: tuple[int, ...]) -> None:
    """The group yields its output `index` permuted by `order`, and a permute after it gives
    that output's readers its value back (a view of the group's buffer); the group's
    unpermuted output goes."""
    inner = group.yield_op.values[index]
    permuted = graph.PermuteOp(inner, order)
    group.block.insert_op_before(permuted, group.yield_op)
    group = add_outputs(group, [permuted.result])
    back = graph.PermuteOp(group.results[-1], inverse_permutation(order))
    parent = group.parent_block()
    assert parent is not None
    parent.insert_op_after(back, group)
    group.results[index].replace_all_uses_with(back.result)
    clean_boundary(group, share=True)


def clean_function(f: func.FuncOp) -> None:
    block = f.body.block
    share = not any(may_mutate(op) for op in block.ops)
    groups: list[Operation] = [op for op in block.ops if isinstance(op, GroupOp)]
    for group in reversed(groups):  # readers first, so that a dead reader frees its inputs
        assert isinstance(group, GroupOp)
        cleaned = clean_group(group, share=share)
        if cleaned is not None:
            for part in split_by_output_size(cleaned, share=share):
                # (a view aliases its base: only where no op may write memory)
                if not (share and _only_views_read_by_externs(part)):
                    continue
                copies = copying_reshapes(part)
                if copies:
                    hoist_views_after_copies(part, copies)
                else:
                    dissolve_view_group(part)
    if share:
        query_in_output_order(block)


@dataclass(frozen=True)
class GroupCleanupPass(ModulePass):
    """DCE, CSE and constant pooling inside every `fusion.group`, then a minimal boundary."""

    name = "group-cleanup"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.walk():
            if isinstance(f, func.FuncOp) and f.body.blocks:
                with static_proxies(f):
                    clean_function(f)
