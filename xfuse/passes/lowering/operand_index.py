"""
Where each operand element comes from: the index of the element of each operand that a
result element at a given index reads. Layout ops (broadcast_in_dim, reshape, permute, slice,
flip, roll) and torch broadcasting map the index; `graph.gather` reads its table at a
`Gathered` index (the index tensor's element) in place of the indexed dims.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import Operation

from xfuse.dialects import graph
from xfuse.dialects.graph import shape_of
from xfuse.passes.lowering.index_algebra import (
    ZERO,
    Affine,
    Gathered,
    Index,
    add,
    constant_index,
    delinearize,
    linearize,
    mod,
    scale,
)


def broadcast_index(index: Index, in_shape: Sequence[int], out_shape: Sequence[int]) -> Index:
    """Torch broadcasting: shapes align on the right, a size-1 dim reads element 0."""
    lead = len(out_shape) - len(in_shape)
    return tuple(ZERO if d == 1 else index[lead + k] for k, d in enumerate(in_shape))


def operand_indices(op: Operation, index: Index) -> list[Index]:
    """The index of each operand's element that the result element at `index` reads (every
    op but concat and real reductions)."""
    out_shape = shape_of(op.results[0])
    if isinstance(op, graph.BroadcastInDimOp):
        in_shape = shape_of(op.input)
        return [tuple(ZERO if in_shape[i] == 1 else index[d] for i, d in enumerate(op.dim_map))]
    if isinstance(op, graph.ReshapeOp):
        return [delinearize(linearize(index, out_shape), shape_of(op.input))]
    if isinstance(op, graph.PermuteOp):
        src = [ZERO] * len(index)
        for i, p in enumerate(op.permutation):
            src[p] = index[i]
        return [tuple(src)]
    if isinstance(op, graph.SliceOp):
        start, _, stride = op.bounds
        return [
            tuple(
                add(scale(e, k), constant_index(s))
                for e, s, k in zip(index, start, stride, strict=True)
            )
        ]
    if isinstance(op, graph.ReduceOp):  # no dims: the identity
        return [index]
    if isinstance(op, graph.FlipOp):
        return [flipped_index(index, shape_of(op.input), op.flipped)]
    if isinstance(op, graph.RollOp):
        return [rolled_index(index, shape_of(op.input), dict(op.rolled))]
    if isinstance(op, graph.GatherOp):
        return gather_indices(op, index)
    return [broadcast_index(index, shape_of(v), out_shape) for v in op.operands]


def flipped_index(index: Index, shape: Sequence[int], dims: Sequence[int]) -> Index:
    """Element i of a dim of size n flipped reads element n - 1 - i."""
    return tuple(
        add(constant_index(shape[k] - 1), scale(e, -1)) if k in dims else e
        for k, e in enumerate(index)
    )


def rolled_index(index: Index, shape: Sequence[int], shifts: dict[int, int]) -> Index:
    """Element i of a dim of size n rolled by s reads element (i - s) mod n."""
    return tuple(
        mod(add(e, constant_index(-shifts[k] % shape[k])), shape[k]) if k in shifts else e
        for k, e in enumerate(index)
    )


def gather_indices(op: graph.GatherOp, index: Index) -> list[Index]:
    """The table's index (a `Gathered` atom per indexed dim) and each index tensor's."""
    table = shape_of(op.table)
    reads = [broadcast_index(index, shape_of(v), shape_of(op.result)) for v in op.indices]
    picked = [
        Affine(((Gathered(v, at, table[op.axis + j], op.wraps), 1),))
        for j, (v, at) in enumerate(zip(op.indices, reads, strict=True))
    ]
    outer = [ZERO if table[op.table_dim(m)] == 1 else e for m, e in enumerate(index)]
    return [(*outer[: op.axis], *picked, *outer[op.axis + 1 :]), *reads]
