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
- A reduction over the leading dims (a column reduction: `x.sum(0)`) of at least
  `min-column-length` elements per result, with fewer than `column-parallelism / 2` results,
  reads its input as `[B, C, ...kept]` and reduces C, then B: stage 1 has B times as many
  results, each a strided walk over C rows that neighbouring threads read side by side, so a
  GPU has enough threads in flight to reach its memory bandwidth (one thread per column of a
  16384x16384 sum keeps 16k threads busy: half the bandwidth). B * K is about
  `column-parallelism` (K results) and C at least sqrt(L); a remainder of rows is reduced on
  its own as above.

      %y = graph.reduce_sum %x dims = [0] : tensor<16384x16384xf32> -> tensor<16384xf32>
        ->
      %r = graph.reshape %x : tensor<16384x16384xf32> -> tensor<32x512x16384xf32>
      %p = graph.reduce_sum %r dims = [1] : tensor<32x512x16384xf32> -> tensor<32x16384xf32>
      %y = graph.reduce_sum %p dims = [0] : tensor<32x16384xf32> -> tensor<16384xf32>

- Consecutive inner dims (neither the first nor the last: a channels-last image's spatial mean,
  `[N, H, W, C]` over H and W) are split as leading dims are, beside the kept dims before
  them: `[*lead, B, C, *kept]`, C reduced, then B. Without it, each of the N x C results is
  one GPU thread walking H x W elements (EfficientNet's squeeze-and-excitation means at batch
  32: 1024 threads over 12544 elements each).
- A reduction with fewer results than the target's rows that are parallel already (below) is
  split from `few-rows-min-length` elements (`FEW_ROWS_MIN_LENGTH`): on CUDA from 8192, as
  Inductor splits a reduction with few outputs, since each row is one block.
- Left alone: reductions over dims that are not consecutive, bool
  (i1) reductions, those shorter than `min-length` (`min-column-length`), and normalizations
  (softmax's max and sum, layer norm's means: the result meets the input again) of at least
  `normalization-rows` rows, which fusion keeps as one row kernel over rows that are parallel
  already. How many rows that takes depends on the `target` (`NORMALIZATION_ROWS`): a few CPU
  threads share 8 rows, while a GPU's row kernel gives each row one block, so it takes a row
  per SM.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import BFloat16Type, Float16Type, ModuleOp, TensorType, f32, i1
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from xfuse.dialects import graph
from xfuse.dialects.effects import may_mutate
from xfuse.dialects.graph import dtype_of, numel, shape_of
from xfuse.dialects.op_kinds import Kind, KindGroup, kind_of
from xfuse.passes.options import COUNT_OR_TARGETS, POSITIVE, option

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


def choose_column_split(length: int, kept: int, parallelism: int) -> Split:
    """B and C for a reduction over leading dims of `length` rows of `kept` elements: B about
    parallelism / kept but at most sqrt(length) (so that C >= sqrt(length)), an exact divisor
    of `length` down to half that where there is one, else a remainder of rows."""
    root = math.isqrt(length)
    want = max(2, min(parallelism // max(kept, 1), root))
    for distance in range(want // 2 + 1):
        for rows in (want - distance, want + distance):
            if 2 <= rows <= min(2 * want, root) and length % rows == 0:
                return Split(rows, length // rows, 0)
    return Split(want, length // want, length % want)


def trailing_dims(op: graph.ReduceOp) -> bool:
    """Whether the reduced dims are the input's last ones (the contiguous ones)."""
    rank = len(shape_of(op.input))
    dims = op.reduce_dims
    return list(dims) == list(range(rank - len(dims), rank))


def leading_dims(op: graph.ReduceOp) -> bool:
    """Whether the reduced dims are the input's first ones, and not all of them."""
    dims = op.reduce_dims
    return 0 < len(dims) < len(shape_of(op.input)) and list(dims) == list(range(len(dims)))


def inner_dims(op: graph.ReduceOp) -> bool:
    """Whether the reduced dims are consecutive and neither the first nor the last ones (a
    channels-last image's spatial dims, `[N, H, W, C]` over H and W)."""
    dims, rank = list(op.reduce_dims), len(shape_of(op.input))
    return (
        bool(dims)
        and dims == list(range(dims[0], dims[-1] + 1))
        and 0 < dims[0] <= dims[-1] < rank - 1
    )


def reduced_length(op: graph.ReduceOp) -> int:
    """L: how many elements make one result element (the product of the reduced dims)."""
    shape = shape_of(op.input)
    return numel([shape[d] for d in op.reduce_dims])


def is_splittable(op: graph.ReduceOp, min_length: int) -> bool:
    """A reduction this pass can rewrite: long enough, over trailing dims, not of bools."""
    return _reduces_numbers(op) and trailing_dims(op) and reduced_length(op) >= max(min_length, 4)


def is_splittable_column(op: graph.ReduceOp, min_length: int, parallelism: int) -> bool:
    """A reduction over leading (or inner) dims this pass can rewrite: long enough, and with
    fewer than parallelism / 2 results (more are parallel enough as they are)."""
    return (
        _reduces_numbers(op)
        and (leading_dims(op) or inner_dims(op))
        and reduced_length(op) >= max(min_length, 4)
        and 2 * numel(shape_of(op.result)) <= parallelism
    )


def _reduces_numbers(op: graph.ReduceOp) -> bool:
    return op.name in _COMBINE and bool(op.reduce_dims) and dtype_of(op.input) != i1


NORMALIZATION_ROWS = {"cpu": 8, "cuda": 132}
"""The fewest rows of a long normalization that are parallel already, per target. On the CPU 8:
split, softmax over 8 x 131072 took 5.7 ms on 16 threads against 0.91 ms as one row kernel. On
CUDA a row per SM of an H100 or H200 (132): the row kernel gives each row one block, so
GroupNorm(1, C)'s 32 rows at batch 32 kept 32 SMs busy (PoolFormer-S12 on an H200, bf16: 9.5
ms a forward whole, 4.6 ms split)."""

FEW_ROWS_MIN_LENGTH: dict[str, int | None] = {"cpu": None, "cuda": 8192}
"""Shortest reduced length that is split, per target, where the reduction has fewer results than
`NORMALIZATION_ROWS`. On CUDA one block reduces a row: PoolFormer-S12's one-group norms over
62,720 and 25,088 elements (one row an image) took 54 us a launch at batch 1 on an H200, bf16,
and its forward 1.34 ms whole against 0.75 ms split from 8192 (reduce-overhead 0.80); at batch
32 2.56 against 2.08 (2.39). None: from `min-length`, as any reduction (the CPU's threads
share few rows already)."""

MAX_NORMALIZATION_DEPTH = 8
"""How many row-shaped ops `is_normalization` follows from a reduction's result."""


def is_normalization(op: graph.ReduceOp) -> bool:
    """Whether the reduction's result, through row-shaped ops (reshape, `+ eps`, rsqrt, ...),
    meets a tensor of its input's shape again in an elementwise op, as softmax's max and sum and
    layer norm's means do: fusion makes such a chain one row kernel that reads each row once."""
    full, rows = shape_of(op.input), numel(shape_of(op.result))
    frontier: list[SSAValue] = [op.result]
    seen = set[SSAValue]()
    for _ in range(MAX_NORMALIZATION_DEPTH):
        following: list[SSAValue] = []
        for value in frontier:
            for use in value.uses:
                user = use.operation
                if kind_of(user) not in KindGroup.NON_REDUCING:
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

    def dim_slice(self, x: SSAValue, dim: int, start: int, limit: int) -> SSAValue:
        """`x[..., start:limit, ...]` along `dim`."""
        shape = list(shape_of(x))
        starts = [0] * len(shape)
        starts[dim], shape[dim] = start, limit
        return self.add(graph.SliceOp(x, starts, shape, [1] * len(shape)))


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
            and kind_of(op) == Kind.ELEMENTWISE
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
    if not op.name.startswith("graph.") or kind_of(op) == Kind.EXTERN:
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
    """Rewrite one splittable reduction over trailing dims into its two stages (and
    remainder, `choose_split`), in place; with `rebuild`, its elementwise prologue is rebuilt
    on the viewed inputs (`_Relayout`)."""
    shape = shape_of(op.input)
    kept = list(shape[: len(shape) - len(op.reduce_dims)])
    length = reduced_length(op)
    split = choose_split(length)
    # The reduced dims as one (the last): [*kept, length]; stage 1 reduces C of
    # [*kept, B, C], stage 2 B of [*kept, B].
    flat, first = [*kept, length], [*kept, split.rows, split.chunk]
    _rewrite(op, split, flat, first, (len(kept) + 1, len(kept)), rebuild=rebuild)


def split_column_reduction(op: graph.ReduceOp, split: Split, *, rebuild: bool = True) -> None:
    """Rewrite one reduction over leading or inner dims into its two stages (and remainder) as
    `split_reduction` does: stage 1 reduces C of [*lead, B, C, *kept], stage 2 B of
    [*lead, B, *kept] (`lead`: the kept dims before the reduced ones, none for leading dims)."""
    shape, dims = shape_of(op.input), op.reduce_dims
    lead, kept = list(shape[: dims[0]]), list(shape[dims[-1] + 1 :])
    flat = [*lead, reduced_length(op), *kept]
    first = [*lead, split.rows, split.chunk, *kept]
    _rewrite(op, split, flat, first, (len(lead) + 1, len(lead)), rebuild=rebuild)


def _rewrite(
    op: graph.ReduceOp,
    split: Split,
    flat: list[int],
    first: list[int],
    stage_dims: tuple[int, int],
    *,
    rebuild: bool,
) -> None:
    """The two stages of `op`: its input viewed as `flat` (the reduced dims as one, at
    `stage_dims[1]`) and then `first` (that dim as B x C), reduced over `stage_dims[0]` (C)
    and then `stage_dims[1]` (B); the rows left over (`split.remainder`) are sliced off along
    that dim and reduced on their own."""
    b = _Builder(op)
    budget = MAX_PROLOGUE if rebuild else 0
    length, at = reduced_length(op), stage_dims[1]
    stage = _stage(op)
    used = split.rows * split.chunk

    def rows_view(x: SSAValue) -> SSAValue:
        if split.remainder:
            x = b.dim_slice(b.reshape(x, flat), at, 0, used)
        return b.reshape(x, first)

    def remainder_view(x: SSAValue) -> SSAValue:
        return b.dim_slice(b.reshape(x, flat), at, used, length)

    rows = _compute(b, op, _Relayout(b, rows_view, budget)(op.input, op))
    total = b.add(stage(b.add(stage(rows, [stage_dims[0]])), [at]))
    if split.remainder:
        rest = _compute(b, op, _Relayout(b, remainder_view, budget)(op.input, op))
        total = b.add(_COMBINE[op.name](total, b.add(stage(rest, [at]))))
    if isinstance(op, graph.ReduceMeanOp):
        total = b.add(graph.DivOp(total, b.add(graph.ConstantOp.scalar(length, dtype_of(total)))))
    result = b.reshape(b.cast(total, dtype_of(op.result)), shape_of(op.result))
    source = op.input
    Rewriter.replace_op(op, [], [result])
    _erase_dead(source)


@dataclass(frozen=True)
class SplitReductionsPass(ModulePass):
    """Split every reduction of at least `min-length` elements, and column reductions of few
    results, into two stages."""

    name = "split-reductions"

    min_length: int = option(65536, POSITIVE)
    """Shortest reduced length that is split (the product of the reduced dims)."""

    normalization_rows: int = option(-1, COUNT_OR_TARGETS)
    """A normalization (`is_normalization`: softmax, layer norm, `x - mean`) with at least this
    many rows is left alone: its rows are parallel already, and split it would take two more
    kernels and a round trip of the row through memory (0: split them all; -1: the target's
    count, `NORMALIZATION_ROWS`)."""

    few_rows_min_length: int = option(-1, COUNT_OR_TARGETS)
    """Shortest reduced length that is split where the reduction has fewer results than its
    target's rows that are parallel already (`normalization-rows`; -1: the target's,
    `FEW_ROWS_MIN_LENGTH`)."""

    target: str = "cpu"
    """What the kernels are for, "cpu" or "cuda" (`xfuse.compile` sets its device's)."""

    TARGET_FROM_DEVICE: ClassVar[bool] = True
    """`xfuse.pipeline.for_target` sets `target` to the compile's device."""

    min_column_length: int = option(128, POSITIVE)
    """Shortest reduced length of a reduction over leading or inner dims that is split (with
    fewer than `column-parallelism / 2` results). Unsplit, each result is one GPU thread
    walking its whole length, over nested loops where several dims are reduced: EfficientNet's
    squeeze-and-excitation means at batch 1 (96 to 1152 results of 196 to 3136 elements) were
    most of its GPU time so."""

    column_parallelism: int = option(1 << 19, POSITIVE)
    """About how many partial results stage 1 of a split column reduction computes (about what
    an H100 keeps in flight: 132 SMs x 2048 threads, twice); reductions over leading dims with
    at least half as many results are left alone."""

    def __post_init__(self) -> None:
        if self.target not in NORMALIZATION_ROWS:
            raise ValueError(
                f"option 'target' must be one of {', '.join(NORMALIZATION_ROWS)}, "
                f"found '{self.target}'"
            )

    @property
    def rows_parallel_already(self) -> int:
        """How many rows of a normalization are parallel already (`normalization-rows`)."""
        if self.normalization_rows >= 0:
            return self.normalization_rows
        return NORMALIZATION_ROWS[self.target]

    @property
    def shortest_few_rows(self) -> int:
        """The shortest length split with fewer rows than are parallel already."""
        if self.few_rows_min_length >= 0:
            return self.few_rows_min_length
        shortest = FEW_ROWS_MIN_LENGTH[self.target]
        return self.min_length if shortest is None else shortest

    def splits(self, op: graph.ReduceOp) -> bool:
        """Whether this pass rewrites `op` (over trailing dims)."""
        rows, parallel = numel(shape_of(op.result)), self.rows_parallel_already
        few_rows = rows < parallel
        shortest = min(self.min_length, self.shortest_few_rows) if few_rows else self.min_length
        if not is_splittable(op, shortest):
            return False
        return few_rows or parallel == 0 or not is_normalization(op)

    def splits_columns(self, op: graph.ReduceOp) -> bool:
        """Whether this pass rewrites `op` (over leading dims)."""
        return is_splittable_column(op, self.min_column_length, self.column_parallelism)

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
            elif self.splits_columns(r):
                kept = numel(shape_of(r.result))
                split = choose_column_split(reduced_length(r), kept, self.column_parallelism)
                split_column_reduction(r, split, rebuild=rebuild)
