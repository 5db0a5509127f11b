"""
`split-reductions`: a long reduction becomes two (Inductor's "split reductions"), so that it
accumulates in two short sums instead of one long one, and its first stage has rows that CPU
threads and GPU blocks share.

A `graph.reduce_{sum,mean,max,min,prod}` over trailing dims whose reduced length L (the
product of the reduced dims) is at least `min-length` reads its input as `[..., B, C]`
(`graph.reshape`; B * C <= L, C about sqrt(L)), reduces the C dim (stage 1, `B` partial
results per kept row), then the B dim (stage 2):

    %y = graph.reduce_sum %x dims = [0] : tensor<1048576xf32> -> tensor<f32>
      ->
    %r = graph.reshape %x : tensor<1048576xf32> -> tensor<1024x1024xf32>
    %p = graph.reduce_sum %r dims = [1] : tensor<1024x1024xf32> -> tensor<1024xf32>
    %y = graph.reduce_sum %p dims = [0] : tensor<1024xf32> -> tensor<f32>

- B * C = L when L has a divisor between sqrt(L)/4 and 4 sqrt(L) (the one nearest sqrt(L)).
  Otherwise B = L // C and the remaining L - B * C < C elements (`graph.slice`) are reduced on
  their own and combined with stage 2's result (`graph.add`, `maximum`, `minimum`, `mul`):
  every stage stays a plain row reduction, without a padded (branching) row.
- mean is a sum in both stages, divided by L at the end (one rounding, like torch's mean).
- f16/bf16 sums, means and products are cast to f32 first and the result cast back at the end,
  so that the partial results are not rounded to 16 bits (lower-to-loops accumulates them in
  f32 too); max and min are exact in any type.
- Left alone: reductions over dims that are not the trailing ones, bool (i1) reductions, those
  shorter than `min-length`, and normalizations (softmax's max and sum, layer norm's means: the
  result meets the input again) of at least `normalization-rows` rows, which fusion keeps as one
  row kernel over rows that are parallel already.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import BFloat16Type, Float16Type, ModuleOp, TensorType, f32, i1
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xfuse.dialects import graph
from xfuse.dialects.graph import dtype_of, numel, shape_of
from xfuse.passes.legality import may_mutate

DIVISOR_SPREAD = 4
"""How far (as a factor) from sqrt(L) an exact divisor of L may be to serve as the chunk length C;
beyond that, a remainder is reduced on its own."""

_COMBINE: dict[str, Callable[[SSAValue, SSAValue], Operation]] = {
    "graph.reduce_sum": graph.AddOp,
    "graph.reduce_mean": graph.AddOp,
    "graph.reduce_prod": graph.MulOp,
    "graph.reduce_max": graph.MaximumOp,
    "graph.reduce_min": graph.MinimumOp,
}
"""How stage 2's result and the remainder's combine, per reduction."""


@dataclass(frozen=True)
class Split:
    """Stage 1 reduces `rows` chunks of `chunk` elements; `remainder` elements are left over."""

    rows: int
    chunk: int
    remainder: int


def choose_split(length: int) -> Split:
    """B and C for a reduction of `length` (>= 4) elements: the exact divisor nearest
    sqrt(length) within a factor `DIVISOR_SPREAD`, else C = round(sqrt(length)) and a remainder."""
    root = math.isqrt(length)
    low = max(2, root // DIVISOR_SPREAD)
    for distance in range(root - low + 1):
        for chunk in (root - distance, root + distance + 1):
            if chunk >= low and length % chunk == 0 and length // chunk >= 2:
                return Split(length // chunk, chunk, 0)
    chunk = max(2, round(math.sqrt(length)))
    return Split(length // chunk, chunk, length % chunk)


def trailing_dims(op: graph.ReduceOp) -> bool:
    """Whether the reduced dims are the input's last ones (the contiguous ones)."""
    rank = len(shape_of(op.input))
    dims = op.reduce_dims
    return list(dims) == list(range(rank - len(dims), rank))


def reduced_length(op: graph.ReduceOp) -> int:
    """L: how many elements make one result element (the product of the reduced dims)."""
    shape = shape_of(op.input)
    return numel([shape[d] for d in op.reduce_dims])


def is_splittable(op: graph.ReduceOp, min_length: int) -> bool:
    """A reduction this pass can rewrite: long enough, over trailing dims, not of bools."""
    return (
        op.name in _COMBINE
        and bool(op.reduce_dims)
        and dtype_of(op.input) != i1
        and trailing_dims(op)
        and reduced_length(op) >= max(min_length, 4)
    )


MAX_NORMALIZATION_DEPTH = 8
"""How many row-shaped ops `is_normalization` follows from a reduction's result."""


def is_normalization(op: graph.ReduceOp) -> bool:
    """Whether the reduction's result, through row-shaped ops (reshape, `+ eps`, rsqrt, ...),
    meets a tensor of its input's shape again in an elementwise op, as softmax's max and sum and
    layer norm's means do: fusion makes such a chain one row kernel that reads each row once."""
    full, rows = shape_of(op.input), numel(shape_of(op.result))
    frontier, seen = [op.result], set[SSAValue]()
    for _ in range(MAX_NORMALIZATION_DEPTH):
        following: list[SSAValue] = []
        for value in frontier:
            for use in value.uses:
                user = use.operation
                if graph.op_kind(user) not in ("elementwise", "broadcast", "injective"):
                    continue
                if any(o is not value and shape_of(o) == full for o in user.operands):
                    return True
                for r in user.results:
                    if numel(shape_of(r)) == rows and r not in seen:
                        seen.add(r)
                        following.append(r)
        frontier = following
    return False


class _Builder:
    """Creates graph ops before an anchor op, in order."""

    def __init__(self, anchor: Operation):
        self.anchor = anchor

    def add(self, op: Operation) -> SSAValue:
        Rewriter.insert_op(op, InsertPoint.before(self.anchor))
        return op.results[0]

    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        if shape_of(x) == tuple(shape):
            return x
        return self.add(graph.ReshapeOp(x, shape))

    def cast(self, x: SSAValue, dtype: Attribute) -> SSAValue:
        if dtype_of(x) == dtype:
            return x
        return self.add(graph.CastOp(x, dtype))

    def last_dim_slice(self, x: SSAValue, start: int, limit: int) -> SSAValue:
        shape = shape_of(x)
        starts = [0] * (len(shape) - 1) + [start]
        return self.add(graph.SliceOp(x, starts, [*shape[:-1], limit], [1] * len(shape)))


MAX_PROLOGUE = 32
"""Most elementwise ops `_Relayout` rebuilds above one reduction (a bound on its recursion)."""


@dataclass
class _Relayout:
    """Applies a layout change (slice, reshape) to the elementwise prologue's inputs instead of
    its result, rebuilding the prologue on them: `reduce(view(f(x)))` -> `reduce(f(view(x)))`.

    The view of an input of the function is a view at run time (no copy) and its kernel reads
    the buffer in the new shape; and a prologue read through two slices (a split's rows and its
    remainder) is computed in each reader's group instead of being written out once."""

    builder: _Builder
    view: Callable[[SSAValue], SSAValue]
    budget: int = MAX_PROLOGUE
    done: dict[SSAValue, SSAValue] = field(default_factory=dict[SSAValue, SSAValue])

    def __call__(self, value: SSAValue, reader: Operation) -> SSAValue:
        if value not in self.done:
            self.done[value] = self._rebuild(value, reader)
        return self.done[value]

    def _rebuild(self, value: SSAValue, reader: Operation) -> SSAValue:
        op = value.owner
        if not self._passes_through(op, value, reader):
            return self.view(value)
        assert isinstance(op, Operation)
        self.budget -= 1
        operands = [o if not shape_of(o) else self(o, op) for o in op.operands]
        shape = shape_of(operands[[bool(shape_of(o)) for o in op.operands].index(True)])
        clone = type(op).create(
            operands=operands,
            result_types=[TensorType(dtype_of(value), shape)],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        return self.builder.add(clone)

    def _passes_through(self, op: object, value: SSAValue, reader: Operation) -> bool:
        """An elementwise op read only by `reader`, whose operands have its shape or are 0-d."""
        return (
            self.budget > 0
            and isinstance(op, Operation)
            and graph.op_kind(op) == "elementwise"
            and not isinstance(op, graph.ConstantOp)
            and len(op.results) == 1
            and all(use.operation is reader for use in value.uses)
            and all(shape_of(o) in ((), shape_of(value)) for o in op.operands)
            and any(shape_of(o) for o in op.operands)
        )


def _erase_dead(value: SSAValue) -> None:
    """Erase the unused pure graph ops that computed `value`, and theirs."""
    op = value.owner
    if not isinstance(op, Operation) or op.parent is None or any(r.uses for r in op.results):
        return
    if not op.name.startswith("graph.") or graph.op_kind(op) == "extern":
        return
    operands = list(dict.fromkeys(op.operands))
    op.detach()
    op.erase()
    for o in operands:
        _erase_dead(o)


def _accumulates(op: graph.ReduceOp) -> bool:
    """Sums, means and products round at every step (max and min do not)."""
    return op.name in ("graph.reduce_sum", "graph.reduce_mean", "graph.reduce_prod")


def _stage(op: graph.ReduceOp) -> type[graph.ReduceOp]:
    """The reduction each stage performs: a mean's stages are sums."""
    return graph.ReduceSumOp if isinstance(op, graph.ReduceMeanOp) else type(op)


def _compute(b: _Builder, op: graph.ReduceOp, x: SSAValue) -> SSAValue:
    """f16/bf16 data of a sum, mean or product in f32 (as lower-to-loops accumulates it)."""
    if _accumulates(op) and isinstance(dtype_of(x), Float16Type | BFloat16Type):
        return b.cast(x, f32)
    return x


def split_reduction(op: graph.ReduceOp, *, rebuild: bool = True) -> None:
    """Rewrite one splittable reduction into its two stages (and remainder), in place; with
    `rebuild`, its elementwise prologue is rebuilt on the viewed inputs (`_Relayout`)."""
    b = _Builder(op)
    budget = MAX_PROLOGUE if rebuild else 0
    shape = shape_of(op.input)
    kept = list(shape[: len(shape) - len(op.reduce_dims)])
    length = reduced_length(op)
    split = choose_split(length)
    stage = _stage(op)
    used = split.rows * split.chunk

    def rows_view(x: SSAValue) -> SSAValue:
        if split.remainder:
            x = b.last_dim_slice(b.reshape(x, [*kept, length]), 0, used)
        return b.reshape(x, [*kept, split.rows, split.chunk])

    def remainder_view(x: SSAValue) -> SSAValue:
        return b.last_dim_slice(b.reshape(x, [*kept, length]), used, length)

    rows = _compute(b, op, _Relayout(b, rows_view, budget)(op.input, op))
    total = b.add(stage(b.add(stage(rows, [len(kept) + 1])), [len(kept)]))
    if split.remainder:
        rest = _compute(b, op, _Relayout(b, remainder_view, budget)(op.input, op))
        total = b.add(_COMBINE[op.name](total, b.add(stage(rest, [len(kept)]))))
    if isinstance(op, graph.ReduceMeanOp):
        total = b.add(graph.DivOp(total, b.add(graph.ConstantOp.scalar(length, dtype_of(total)))))
    result = b.reshape(b.cast(total, dtype_of(op.result)), shape_of(op.result))
    source = op.input
    Rewriter.replace_op(op, [], [result])
    _erase_dead(source)


@dataclass(frozen=True)
class SplitReductionsPass(ModulePass):
    """Split every reduction of at least `min-length` elements into two stages."""

    name = "split-reductions"

    min_length: int = 65536
    """Shortest reduced length that is split (the product of the reduced dims)."""

    normalization_rows: int = 8
    """A normalization (`is_normalization`: softmax, layer norm, `x - mean`) with at least this
    many rows is left alone: its rows are parallel already, and split it would take two more
    kernels and a round trip of the row through memory (0: split them all)."""

    def splits(self, op: graph.ReduceOp) -> bool:
        """Whether this pass rewrites `op`."""
        if not is_splittable(op, self.min_length):
            return False
        many_rows = numel(shape_of(op.result)) >= self.normalization_rows > 0
        return not (many_rows and is_normalization(op))

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.walk():
            if isinstance(f, func.FuncOp) and f.body.blocks:
                self.split_in(f.body.block)

    def split_in(self, block: Block) -> None:
        """Split the reductions of one function body. Where an op may write memory, the
        prologue stays where it is: recomputed later, it could read a value written since."""
        rebuild = not any(may_mutate(op) for op in block.ops)
        for r in [r for r in block.ops if isinstance(r, graph.ReduceOp)]:
            if self.splits(r):
                split_reduction(r, rebuild=rebuild)
