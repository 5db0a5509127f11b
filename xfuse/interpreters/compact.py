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

`constant_ops` picks the values a pass may compute so at compile time: those computed from no
argument of their function (`attention-mask`'s masks, `simplify`'s gathers by an iota).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from xdsl.ir import Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.effects import computed_by_xfuse
from xfuse.interpreters.graph import (
    SIZES,
    PreparedOp,
    check_indices,
    gathered,
    iota_values,
    prepare_op,
)

Tensor = torch.Tensor

MAX_CONSTANT_OPS = 64
MAX_CONSTANT_ELEMENTS = 1 << 22
"""A value is computed at compile time (`constant_ops`) from at most this many ops, none with a
result of more elements."""


def constant_ops(value: SSAValue, table: graph.SizesAttr | None) -> list[Operation] | None:
    """The ops `value` is computed from, in order, when it depends on no argument of its
    function and only on ops that xfuse computes itself (`computed_by_xfuse`: no extern, no
    effect), `MAX_CONSTANT_OPS` at most, none with a result of more than `MAX_CONSTANT_ELEMENTS`
    elements (at the size hints of `table` where a shape is symbolic); else None."""
    order: list[Operation] = []
    seen: set[Operation] = set()

    def visit(v: SSAValue) -> bool:
        op = v.owner
        if not isinstance(op, Operation) or not computed_by_xfuse(op):
            return False
        if op in seen:
            return True
        seen.add(op)
        if len(seen) > MAX_CONSTANT_OPS or any(
            graph.numel(graph.hinted_shape_of(r, table)) > MAX_CONSTANT_ELEMENTS for r in op.results
        ):
            return False
        if not all(visit(o) for o in op.operands):
            return False
        order.append(op)
        return True

    return order if visit(value) else None


class Call(NamedTuple):
    """An op at the sizes of the moment (`SIZES`): its operand and result shapes, and its
    torch code (`prepare_op`)."""

    operands: tuple[tuple[int, ...], ...]
    result: tuple[int, ...]
    run: PreparedOp


Rule = Callable[[Operation, list[Tensor], Call], Tensor | None]
"""An op's result held compact from its operands held compact; None where the rule does not
apply (the op then runs whole)."""


def evaluate_compact(
    order: Sequence[Operation], value: SSAValue, sizes: Mapping[str, int]
) -> Tensor:
    """`value`, the result of the last of the ops `order` (which read no other value), held
    compact (`value`'s rank, each dim its size at `sizes` or 1 where it is the same all along
    it), computed with the size symbols at `sizes` on torch's default device."""
    return prepare_compact(order, value)(sizes)


@dataclass(frozen=True)
class _Step:
    """One op of a prepared run: its rule, its torch code prepared (`prepare_op`), the slots
    of its operands and results, and their dims."""

    op: Operation
    rule: Rule | None
    run: PreparedOp
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    operand_dims: tuple[tuple[graph.Dim, ...], ...]
    result_dims: tuple[graph.Dim, ...] | None
    """The one result's dims (None for an op of several results, which runs whole)."""

    def results(self, xs: list[Tensor], sizes: Mapping[str, int]) -> list[Tensor]:
        """The op's results held compact, from its operands held compact."""
        operands = tuple(graph.dims_at(d, sizes) for d in self.operand_dims)
        if self.rule is not None and self.result_dims is not None:
            shape = graph.dims_at(self.result_dims, sizes)
            out = self.rule(self.op, xs, Call(operands, shape, self.run))
            if out is not None and _fits(out, shape):
                return [out]
        return self.run([x.expand(n) for x, n in zip(xs, operands, strict=True)])


def prepare_compact(
    order: Sequence[Operation], value: SSAValue
) -> Callable[[Mapping[str, int]], Tensor]:
    """`evaluate_compact` of `order` and `value` as a function of the sizes, each op's rule,
    torch code and dims read once (for ops run at many sizes: a `MaskGuard`'s)."""
    slot: dict[SSAValue, int] = {}
    steps: list[_Step] = []
    for op in order:
        ins = tuple(slot[v] for v in op.operands)
        outs = tuple(slot.setdefault(r, len(slot)) for r in op.results)
        rule = RULES.get(op.name)
        if rule is None and op.operands and op.has_trait(graph.Elementwise):
            rule = _elementwise
        one = graph.dims_of(op.results[0]) if len(op.results) == 1 else None
        dims = tuple(graph.dims_of(v) for v in op.operands)
        steps.append(_Step(op, rule, prepare_op(op), ins, outs, dims, one))
    found, n_slots = slot[value], len(slot)

    def run(sizes: Mapping[str, int]) -> Tensor:
        env: list[Any] = [None] * n_slots
        token = SIZES.set(sizes)
        try:
            for step in steps:
                xs = [env[i] for i in step.ins]
                for i, t in zip(step.outs, step.results(xs, sizes), strict=True):
                    env[i] = t
        finally:
            SIZES.reset(token)
        out: Tensor = env[found]
        return out

    return run


def _fits(t: Tensor, shape: tuple[int, ...]) -> bool:
    """Whether `t` holds a value of `shape` compact: its rank, each dim that size or 1."""
    return t.dim() == len(shape) and all(n in (1, d) for n, d in zip(t.shape, shape, strict=True))


def _elementwise(op: Operation, xs: list[Tensor], call: Call) -> Tensor:
    """An elementwise op on its operands held compact: torch broadcasts them, and the result
    is the same along every dim where each operand is."""
    [out] = call.run(xs)
    return out


def _iota(op: Operation, xs: list[Tensor], call: Call) -> Tensor:
    assert isinstance(op, graph.IotaOp)
    return iota_values(op)


def _broadcast_in_dim(op: Operation, xs: list[Tensor], call: Call) -> Tensor | None:
    """The operand's dims placed at theirs, every new dim at 1."""
    assert isinstance(op, graph.BroadcastInDimOp)
    dims = op.dim_map
    if list(dims) != sorted(dims):
        return None
    view = [1] * len(call.result)
    for i, d in enumerate(dims):
        view[d] = xs[0].shape[i]
    return xs[0].reshape(view)


def _reshape(op: Operation, xs: list[Tensor], call: Call) -> Tensor | None:
    """A reshape that only adds or drops dims of size 1: the other dims keep their sizes."""
    [before], after = call.operands, call.result
    kept = [n for n, d in zip(xs[0].shape, before, strict=True) if d != 1]
    if [d for d in before if d != 1] != [d for d in after if d != 1]:
        return None
    sizes = iter(kept)
    return xs[0].reshape([1 if d == 1 else next(sizes) for d in after])


def _slice(op: Operation, xs: list[Tensor], call: Call) -> Tensor:
    """The slice of the dims held whole; a dim held at 1 stays so (the same all along it)."""
    assert isinstance(op, graph.SliceOp)
    x = xs[0]
    return x[tuple(slice(None) if n == 1 else s for n, s in zip(x.shape, op.index, strict=True))]


def _scan(op: Operation, xs: list[Tensor], call: Call) -> Tensor:
    """The scan along its dim held whole, the other dims as they are held."""
    assert isinstance(op, graph.ScanOp)
    x, axis = xs[0], op.axis
    shape = list(x.shape)
    shape[axis] = call.operands[0][axis]
    [out] = call.run([x.expand(shape)])
    return out


def _gather(op: Operation, xs: list[Tensor], call: Call) -> Tensor | None:
    """The gather from the table held compact: an indexed dim the table holds at 1 is read at
    0 (its index checked against the dim's size first, as the whole table would check it,
    then held as one 0); a result dim is the same all along it where the table and every
    index are."""
    assert isinstance(op, graph.GatherOp)
    table, indices = xs[0], list(xs[1:])
    rank, dim = len(call.result), op.axis
    if any(t.dim() != rank for t in indices):
        return None
    sizes = call.operands[0]
    for j, t in enumerate(indices):
        if table.shape[dim + j] == 1 and sizes[dim + j] != 1:
            check_indices(t, sizes[dim + j], op.wraps)
            indices[j] = t.new_zeros((1,) * rank, dtype=torch.int64)
    out = [
        size
        if any(t.shape[m] != 1 for t in indices) or (m != dim and table.shape[op.table_dim(m)] != 1)
        else 1
        for m, size in enumerate(call.result)
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
