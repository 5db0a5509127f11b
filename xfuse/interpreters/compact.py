"""
Runs `graph` ops without materialising their broadcasts: each value is held compact, a tensor
of its rank whose every dim is either the value's size there or 1 where the value is the same
all along it, so that `compact.expand(shape)` is the value the reference interpreter computes.

A mask that attention reads is often computed from sizes alone and broadcast over the batch
(transformers' causal mask: `[B, 1, L, S]`, the same for every batch): run by the graph
interpreter, every op after the broadcast computes `B` copies; held compact, it computes one.
The values are exact: each op below keeps a dim at 1 only where its result is the same along
it, and any op without a rule here runs in the reference interpreter on its operands
broadcast to their shapes (`expand` views, no copy), its result held whole.

    %b = graph.broadcast_in_dim %r dims = [1] : tensor<?xi64> -> tensor<?x?xi64>  (B x L: held 1 x L)
    %m = graph.le %b, %c : ...                                                   (held 1 x L)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from xdsl.ir import Operation, SSAValue

from xfuse.dialects import graph
from xfuse.interpreters.graph import (
    SIZES,
    check_indices,
    concrete_shape,
    gathered,
    iota_values,
    run_op,
)

Tensor = torch.Tensor

Rule = Callable[[Operation, list[Tensor]], Tensor | None]
"""An op's result held compact from its operands held compact; None where the rule does not
apply (the op then runs whole)."""


def evaluate_compact(
    order: Sequence[Operation], value: SSAValue, sizes: Mapping[str, int]
) -> Tensor:
    """`value`, the result of the last of the ops `order` (which read no other value), held
    compact (`value`'s rank, each dim its size at `sizes` or 1 where it is the same all along
    it), computed with the size symbols at `sizes` on torch's default device."""
    values: dict[SSAValue, Tensor] = {}
    token = SIZES.set(sizes)
    try:
        for op in order:
            results = compact_results(op, [values[o] for o in op.operands])
            values.update(zip(op.results, results, strict=True))
    finally:
        SIZES.reset(token)
    return values[value]


def compact_results(op: Operation, operands: list[Tensor]) -> list[Tensor]:
    """`op`'s results held compact, from its operands held compact (sizes from `SIZES`)."""
    rule = RULES.get(op.name)
    if rule is None and operands and op.has_trait(graph.Elementwise):
        rule = _elementwise
    if rule is not None and len(op.results) == 1:
        out = rule(op, operands)
        if out is not None and _fits(out, concrete_shape(op.results[0])):
            return [out]
    return run_op(
        op, [x.expand(concrete_shape(v)) for x, v in zip(operands, op.operands, strict=True)]
    )


def _fits(t: Tensor, shape: tuple[int, ...]) -> bool:
    """Whether `t` holds a value of `shape` compact: its rank, each dim that size or 1."""
    return t.dim() == len(shape) and all(n in (1, d) for n, d in zip(t.shape, shape, strict=True))


def _elementwise(op: Operation, xs: list[Tensor]) -> Tensor:
    """An elementwise op on its operands held compact: torch broadcasts them, and the result
    is the same along every dim where each operand is."""
    [out] = run_op(op, xs)
    return out


def _iota(op: Operation, xs: list[Tensor]) -> Tensor:
    assert isinstance(op, graph.IotaOp)
    return iota_values(op)


def _broadcast_in_dim(op: Operation, xs: list[Tensor]) -> Tensor | None:
    """The operand's dims placed at theirs, every new dim at 1."""
    assert isinstance(op, graph.BroadcastInDimOp)
    dims = op.dim_map
    if list(dims) != sorted(dims):
        return None
    view = [1] * len(graph.dims_of(op.result))
    for i, d in enumerate(dims):
        view[d] = xs[0].shape[i]
    return xs[0].reshape(view)


def _reshape(op: Operation, xs: list[Tensor]) -> Tensor | None:
    """A reshape that only adds or drops dims of size 1: the other dims keep their sizes."""
    before, after = concrete_shape(op.operands[0]), concrete_shape(op.results[0])
    kept = [n for n, d in zip(xs[0].shape, before, strict=True) if d != 1]
    if [d for d in before if d != 1] != [d for d in after if d != 1]:
        return None
    sizes = iter(kept)
    return xs[0].reshape([1 if d == 1 else next(sizes) for d in after])


def _slice(op: Operation, xs: list[Tensor]) -> Tensor:
    """The slice of the dims held whole; a dim held at 1 stays so (the same all along it)."""
    assert isinstance(op, graph.SliceOp)
    x = xs[0]
    return x[tuple(slice(None) if n == 1 else s for n, s in zip(x.shape, op.index, strict=True))]


def _scan(op: Operation, xs: list[Tensor]) -> Tensor:
    """The scan along its dim held whole, the other dims as they are held."""
    assert isinstance(op, graph.ScanOp)
    x, axis = xs[0], op.axis
    shape = list(x.shape)
    shape[axis] = concrete_shape(op.operands[0])[axis]
    [out] = run_op(op, [x.expand(shape)])
    return out


def _gather(op: Operation, xs: list[Tensor]) -> Tensor | None:
    """The gather from the table held compact: an indexed dim the table holds at 1 is read at
    0 (its index checked against the dim's size first, as the whole table would check it,
    then held as one 0); a result dim is the same all along it where the table and every
    index are."""
    assert isinstance(op, graph.GatherOp)
    table, indices = xs[0], list(xs[1:])
    rank, dim = len(graph.dims_of(op.result)), op.axis
    if any(t.dim() != rank for t in indices):
        return None
    sizes = concrete_shape(op.table)
    for j, t in enumerate(indices):
        if table.shape[dim + j] == 1 and sizes[dim + j] != 1:
            check_indices(t, sizes[dim + j], op.wraps)
            indices[j] = t.new_zeros((1,) * rank, dtype=torch.int64)
    whole = concrete_shape(op.result)
    out = [
        size
        if any(t.shape[m] != 1 for t in indices) or (m != dim and table.shape[op.table_dim(m)] != 1)
        else 1
        for m, size in enumerate(whole)
    ]
    return gathered(op, table, indices, out)


RULES: dict[str, Rule] = {
    "graph.iota": _iota,
    "graph.broadcast_in_dim": _broadcast_in_dim,
    "graph.reshape": _reshape,
    "graph.slice": _slice,
    "graph.scan": _scan,
    "graph.gather": _gather,
}
"""The ops held compact other than elementwise ones (whose operands torch broadcasts)."""
