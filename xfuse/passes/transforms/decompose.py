"""
`decompose`: rewrites the graph composite ops (softmax, log_softmax, layer_norm, rms_norm, gelu,
silu, var, linear) into graph primitives, so that fusion sees only elementwise, broadcast,
reduction, layout and extern ops.

f16/bf16 inputs are computed in f32 and cast back, as torch's CPU and CUDA kernels do.
Reductions keep their dims so that the following elementwise ops broadcast against them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.traits import Pure

from xfuse.dialects import graph
from xfuse.ir.dtypes import opmath_type


@dataclass
class OpList:
    """Collects the ops a decomposition creates, in order, with small builders."""

    ops: list[Operation] = field(default_factory=list[Operation])

    def add(self, op: Operation) -> SSAValue:
        self.ops.append(op)
        return op.results[0]

    def const(self, value: float | int, like: SSAValue) -> SSAValue:
        """A rank-0 constant of `like`'s element type."""
        return self.add(graph.ConstantOp.scalar(value, graph.dtype_of(like)))

    def cast(self, value: SSAValue, dtype: Attribute) -> SSAValue:
        if graph.dtype_of(value) == dtype:
            return value
        return self.add(graph.CastOp(value, dtype))

    def upcast(self, value: SSAValue) -> SSAValue:
        """f16/bf16 to f32 (torch's compute type for them, `opmath_type`); other types
        unchanged."""
        return self.cast(value, opmath_type(graph.dtype_of(value)))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(graph.MulOp(a, b))

    def mean(self, x: SSAValue, dims: Sequence[int]) -> SSAValue:
        return self.add(graph.ReduceMeanOp(x, dims, keepdim=True))


def _replace(rewriter: PatternRewriter, op: Operation, ops: OpList, result: SSAValue) -> None:
    rewriter.replace(op, ops.ops, [result])


def _trailing_dims(x: SSAValue, rank: int) -> list[int]:
    total = len(graph.shape_of(x))
    return list(range(total - rank, total))


def _centered(ops: OpList, x: SSAValue, dims: Sequence[int]) -> tuple[SSAValue, SSAValue]:
    """d = x - mean(x) and c, the mean of d (the corrected two-pass algorithm): d - c is the
    centered value. The mean rounded to f32 is off by up to half an ulp, and that error shifts
    every centered element the same way: a sum of a layer norm's output then drifts by N times
    it (8x eager's error on 33-element rows); c is the mean of the rounding errors. The squares
    of d - c sum to sum(d^2) - N c^2, so a variance reads d once for both c and sum(d^2)."""
    shifted = ops.add(graph.SubOp(x, ops.mean(x, dims)))
    return shifted, ops.mean(shifted, dims)


def _at_least_zero(ops: OpList, value: SSAValue) -> SSAValue:
    return ops.add(graph.MaximumOp(value, ops.const(0.0, value)))


def _softmax_parts(ops: OpList, x: SSAValue, dim: int) -> tuple[SSAValue, SSAValue, SSAValue]:
    """x - max(x), its exp, and the sum of that along `dim` (kept as size 1)."""
    shifted = ops.add(graph.SubOp(x, ops.add(graph.ReduceMaxOp(x, [dim], keepdim=True))))
    exps = ops.add(graph.ExpOp(shifted))
    return shifted, exps, ops.add(graph.ReduceSumOp(exps, [dim], keepdim=True))


# Composite ops computed on their input upcast to f32 (f16/bf16; others as they are) and cast
# back: one rule each, (ops, op, upcast input) -> the result before the cast back.
UpcastRule = Callable[[OpList, Any, SSAValue], SSAValue]


def _softmax(ops: OpList, op: graph.SoftmaxOp, x: SSAValue) -> SSAValue:
    """softmax(x) = exp(x - max) / sum(exp(x - max))."""
    _, exps, total = _softmax_parts(ops, x, op.axis)
    return ops.add(graph.DivOp(exps, total))


def _log_softmax(ops: OpList, op: graph.LogSoftmaxOp, x: SSAValue) -> SSAValue:
    """log_softmax(x) = (x - max) - log(sum(exp(x - max)))."""
    shifted, _, total = _softmax_parts(ops, x, op.axis)
    return ops.add(graph.SubOp(shifted, ops.add(graph.LogOp(total))))


def _layer_norm(ops: OpList, op: graph.LayerNormOp, x: SSAValue) -> SSAValue:
    """(x - mean) * rsqrt(mean((x - mean)^2) + eps) * weight + bias over the trailing dims,
    with x - mean corrected and mean((d - c)^2) as mean(d^2) - c^2 (`_centered`)."""
    dims = _trailing_dims(x, op.normalized_rank)
    shifted, correction = _centered(ops, x, dims)
    squares = ops.mean(ops.mul(shifted, shifted), dims)
    var = _at_least_zero(ops, ops.add(graph.SubOp(squares, ops.mul(correction, correction))))
    centered = ops.add(graph.SubOp(shifted, correction))
    inv_std = ops.add(graph.RsqrtOp(ops.add(graph.AddOp(var, ops.const(op.epsilon, var)))))
    y = ops.mul(centered, inv_std)
    if op.weight is not None:
        y = ops.mul(y, ops.upcast(op.weight))
    if op.bias is not None:
        y = ops.add(graph.AddOp(y, ops.upcast(op.bias)))
    return y


def _gelu(ops: OpList, op: graph.GeluOp, x: SSAValue) -> SSAValue:
    """0.5 * x * (1 + erf(x / sqrt(2))), or with tanh(sqrt(2/pi) * (x + 0.044715 x^3))."""
    if op.approximate.data == "tanh":
        cube = ops.mul(ops.mul(x, x), x)
        inner = ops.add(graph.AddOp(x, ops.mul(cube, ops.const(0.044715, x))))
        shape = ops.add(graph.TanhOp(ops.mul(inner, ops.const(math.sqrt(2 / math.pi), x))))
    else:
        shape = ops.add(graph.ErfOp(ops.mul(x, ops.const(math.sqrt(0.5), x))))
    one_plus = ops.add(graph.AddOp(shape, ops.const(1.0, x)))
    return ops.mul(ops.mul(x, ops.const(0.5, x)), one_plus)


def _silu(ops: OpList, op: graph.SiluOp, x: SSAValue) -> SSAValue:
    """silu(x) = x * sigmoid(x)."""
    return ops.mul(x, ops.add(graph.SigmoidOp(x)))


def _var(ops: OpList, op: graph.VarOp, x: SSAValue) -> SSAValue:
    """(sum(d^2) - N c^2) / max(0, N - correction) over `dims` (`_centered`); over a dim of a
    runtime size, mean(d^2) - c^2, whose means divide by the call's count, then (a correction
    other than 0) times N / max(0, N - correction), N the call's count (`_runtime_count`)."""
    dims = op.reduce_dims
    shifted, correction = _centered(ops, x, dims)
    if any(graph.shape_of(x)[d] < 0 for d in dims):
        squares = ops.mean(ops.mul(shifted, shifted), dims)
        var = _at_least_zero(ops, ops.add(graph.SubOp(squares, ops.mul(correction, correction))))
        if op.correction.value.data != 0:
            n = _runtime_count(ops, x, dims, var)
            divisor = ops.add(graph.SubOp(n, ops.const(op.correction.value.data, n)))
            ratio = ops.add(graph.DivOp(n, _at_least_zero(ops, divisor)))
            var = ops.mul(var, ratio)
        return var if op.keeps_dims else ops.add(graph.ReshapeOp(var, graph.shape_of(op.result)))
    squares = ops.add(graph.ReduceSumOp(ops.mul(shifted, shifted), dims, op.keeps_dims))
    count = graph.numel([graph.shape_of(x)[d] for d in dims])
    drift = ops.mul(ops.mul(correction, correction), ops.const(count, correction))
    if not op.keeps_dims:
        drift = ops.add(graph.ReshapeOp(drift, graph.shape_of(squares)))
    total = _at_least_zero(ops, ops.add(graph.SubOp(squares, drift)))
    divisor = ops.const(max(0, count - op.correction.value.data), total)
    return ops.add(graph.DivOp(total, divisor))


def _runtime_count(ops: OpList, x: SSAValue, dims: Sequence[int], like: SSAValue) -> SSAValue:
    """The count of `x`'s elements over `dims` (one of a runtime size, at least) at the call,
    in `like`'s type, shaped as a kept reduction (1 at every dim): per dim of a runtime size,
    the largest index along it plus one (an `iota` of that dim alone, reduced by max: exact
    in integers, and no read of `x`), times the static sizes' product."""
    sizes = graph.dims_of(x)
    rank = len(sizes)
    count: SSAValue | None = None
    for d in dims:
        if isinstance(sizes[d], int):
            continue
        along = [sizes[i] if i == d else 1 for i in range(rank)]
        index = ops.add(graph.IotaOp(graph.tensor_of(i64, along), dim=d))
        last = ops.cast(ops.add(graph.ReduceMaxOp(index, [d], keepdim=True)), graph.dtype_of(like))
        size = ops.add(graph.AddOp(last, ops.const(1, like)))
        count = size if count is None else ops.mul(count, size)
    assert count is not None, "a count of static sizes is a constant"
    static = graph.numel([d for d in (sizes[i] for i in dims) if isinstance(d, int)])
    return count if static == 1 else ops.mul(count, ops.const(static, like))


UPCAST_RULES: dict[type[Operation], UpcastRule] = {
    graph.SoftmaxOp: _softmax,
    graph.LogSoftmaxOp: _log_softmax,
    graph.LayerNormOp: _layer_norm,
    graph.GeluOp: _gelu,
    graph.SiluOp: _silu,
    graph.VarOp: _var,
}


class DecomposeUpcast(RewritePattern):
    """A composite op of `UPCAST_RULES`: its rule on the upcast input, cast back."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        rule = UPCAST_RULES.get(type(op))
        if rule is None:
            return
        x = op.operands[0]
        if graph.numel(graph.shape_of(x)) == 0 and op.results[0].type == x.type:
            rewriter.replace(op, [], [x])  # nothing to compute (e.g. an empty diagonal)
            return
        ops = OpList()
        y = rule(ops, op, ops.upcast(x))
        _replace(rewriter, op, ops, ops.cast(y, graph.dtype_of(x)))


class DecomposeRMSNorm(RewritePattern):
    """x * rsqrt(mean(x^2) + eps) * weight in f32 for f16/bf16, cast back to x's type once
    (torch 2.13's order, eager and its decomposition alike: casting before the weight's
    product was one ulp off eager in f16 and bf16)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.RMSNormOp, rewriter: PatternRewriter) -> None:
        ops = OpList()
        x = ops.upcast(op.input)
        mean_square = ops.mean(ops.mul(x, x), _trailing_dims(x, op.normalized_rank))
        inv_rms = ops.add(
            graph.RsqrtOp(ops.add(graph.AddOp(mean_square, ops.const(op.epsilon, mean_square))))
        )
        y = ops.mul(x, inv_rms)
        if op.weight is not None:
            y = ops.mul(y, ops.upcast(op.weight))
        _replace(rewriter, op, ops, ops.cast(y, graph.dtype_of(op.input)))


class DecomposeLinear(RewritePattern):
    """linear(x, w, b) = x @ permute(w) + b; a 1-D x is a row for the matmul. A linear read
    only by externs, directly or through views (BERT's query/key/value heads: reshaped and
    transposed for the attention), stays whole: its bias add has nothing to fuse with, and in
    the GEMM's epilogue it leaves the views free (`group-cleanup`)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.LinearOp, rewriter: PatternRewriter) -> None:
        if op.bias is not None and graph.read_only_by_externs(op):
            return
        ops = OpList()
        x = op.input
        if len(graph.shape_of(x)) == 1:  # (its dim may be a size symbol: `dims_of`)
            x = ops.add(graph.ReshapeOp(x, (1, graph.dims_of(x)[0])))
        y = ops.add(graph.MatmulOp(x, ops.add(graph.PermuteOp(op.weight, [1, 0]))))
        if graph.dims_of(y) != graph.dims_of(op.result):
            y = ops.add(graph.ReshapeOp(y, graph.dims_of(op.result)))
        if op.bias is not None:
            y = ops.add(graph.AddOp(y, op.bias))
        _replace(rewriter, op, ops, y)


class ReshapeThenCast(RewritePattern):
    """`cast(reshape(x))` -> `reshape(cast(x))`, the reshape read by the cast alone: a cast
    commutes with a reshape, and below it the reshape may stay a view of the cast's result. A
    row kernel (a softmax's backward) whose rows the reshape cuts, cast on its way out as
    autocast's backward does, then writes its rows where it computes them (fusion's
    `loop-structure` cannot follow a row split by a reshape)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.CastOp, rewriter: PatternRewriter) -> None:
        reshape = op.input.owner
        if not isinstance(reshape, graph.ReshapeOp) or len(list(reshape.result.uses)) != 1:
            return
        cast = graph.CastOp(reshape.input, graph.dtype_of(op.result))
        moved = graph.ReshapeOp(cast.result, graph.shape_of(op.result))
        rewriter.replace(op, [cast, moved])
        rewriter.erase(reshape)


class ComposePermutes(RewritePattern):
    """`permute(permute(x, p), q)` -> `permute(x, [p[i] for i in q])`, and -> `x` where that is
    the identity: a torch call's result read back to its logical shape (`graph.TorchCallOp`'s
    `orders`) and permuted again by the program (attention's [B, H, T, D] output back to
    [B, T, H, D]) is then read as it lies in memory. The inner permute goes with its last
    reader."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.PermuteOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if not isinstance(inner, graph.PermuteOp):
            return
        perm = [inner.permutation[i] for i in op.permutation]
        if perm == sorted(perm):
            rewriter.replace(op, [], [inner.input])
        else:
            rewriter.replace(op, graph.PermuteOp(inner.input, perm))
        if not inner.result.uses:
            rewriter.erase(inner)


MAX_GATHERED_OPS = 16
"""Most elementwise ops `GatherThroughElementwise` computes again at the gathered positions."""


def _of_elements(op: Operation) -> bool:
    """Whether each element of `op`'s result is a function of its operands' elements there
    alone: a pure elementwise op that reads tensors (not an iota, whose value is its
    position)."""
    return (
        graph.op_kind(op) == "elementwise"
        and op.has_trait(Pure)
        and bool(op.operands)
        and not isinstance(op, graph.IotaOp)
    )


@dataclass
class _Gathering:
    """Values read at a gather's positions (`GatherThroughElementwise`): the index tensors,
    the first indexed dim, the table's and the result's shapes; elementwise ops are computed
    again there from their operands gathered, and new ops go into `ops` (in order)."""

    indices: list[SSAValue]
    dim: int
    table: tuple[graph.Dim, ...]
    result: tuple[graph.Dim, ...]
    wrap: bool
    ops: list[Operation] = field(default_factory=list[Operation])
    pushed: list[int] = field(default_factory=lambda: [0])
    """Elementwise ops computed again so far (shared with the gatherings it makes)."""

    @property
    def indexed(self) -> range:
        return range(self.dim, self.dim + len(self.indices))

    def value(self, v: SSAValue) -> SSAValue | None:
        """`v` (broadcast to the table) read at the gathered positions, in the result's shape;
        None where it cannot be."""
        dims = graph.dims_of(v)
        shape = (1,) * (len(self.table) - len(dims)) + dims
        sizes = {shape[k] for k in self.indexed}
        if sizes == {1}:
            return self._broadcast(v, shape)
        if len(sizes) != 1:
            return None  # some indexed dims broadcast, some not
        owner = v.owner
        if self.pushed[0] < MAX_GATHERED_OPS and isinstance(owner, Operation):
            if _of_elements(owner):
                return self._elementwise(owner)
            if isinstance(owner, graph.ReshapeOp) and shape == self.table == dims:
                through = self._through_reshape(owner)
                if through is not None:
                    return through
        if len(shape) != len(dims):
            v = self._add(graph.ReshapeOp(v, shape))
        return self._add(graph.GatherOp(v, self.indices, self.dim, self.result, wrap=self.wrap))

    def _elementwise(self, op: Operation) -> SSAValue | None:
        self.pushed[0] += 1
        operands: list[SSAValue] = []
        for o in op.operands:
            gathered = self.value(o)
            if gathered is None:
                return None
            operands.append(gathered)
        clone = type(op).create(
            operands=operands,
            result_types=[graph.tensor_of(graph.dtype_of(op.results[0]), self.result)],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        return self._add(clone)

    def _through_reshape(self, op: graph.ReshapeOp) -> SSAValue | None:
        """A reshape of the table's whole shape (not broadcast along the rows: those rows are
        the indices' too) that regroups only the dims before the indexed ones (a [B*T, V] view
        of [B, T, V] logits): the gather reads its input, indices reshaped alike."""
        source = graph.dims_of(op.input)
        suffix = self.table[self.dim :]
        if len(source) < len(suffix) or source[len(source) - len(suffix) :] != suffix:
            return None
        if any(graph.dims_of(i) != self.result for i in self.indices):
            return None  # an index broadcasts: its reshape is no plain regrouping
        prefix = source[: len(source) - len(suffix)]
        result = (*prefix, *self.result[self.dim :])
        indices = [self._add(graph.ReshapeOp(i, result)) for i in self.indices]
        inner = _Gathering(indices, len(prefix), source, result, self.wrap, self.ops, self.pushed)
        value = inner.value(op.input)
        return None if value is None else self._add(graph.ReshapeOp(value, self.result))

    def _broadcast(self, v: SSAValue, shape: tuple[graph.Dim, ...]) -> SSAValue:
        """`v`, whose indexed dims are 1, as the result's broadcast operand: those dims made
        one of size 1."""
        if len(self.indexed) == 1 or all(d == 1 for d in graph.dims_of(v)):
            return v  # torch broadcasting reads it as it is
        kept = (*shape[: self.dim], 1, *shape[self.indexed.stop :])
        return self._add(graph.ReshapeOp(v, kept))

    def _add(self, op: Operation) -> SSAValue:
        self.ops.append(op)
        return op.results[0]


class GatherThroughElementwise(RewritePattern):
    """`gather(f(a, m), idx)` -> `f(gather(a, idx), m)`: an elementwise op read only at
    gathered positions is computed there, from its operands gathered (an operand that is 1
    along the gathered dims, a row statistic, is read as it is; a reshape that regroups the
    dims before them is gathered through). A loss's log-probabilities `x - max - log(sum(exp))`
    picked at the labels then read the logits at the labels alone, and the log-softmax's
    kernel writes its two row statistics, not the [tokens x vocab] tensor. Only where the
    table's other dims are the result's (torch.gather's index may be smaller) and an indexed
    dim is larger than 1 (so a gather, and its bounds check, stays)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.GatherOp, rewriter: PatternRewriter) -> None:
        producer = op.table.owner
        if not isinstance(producer, Operation) or not _of_elements(producer):
            return
        table, result = graph.dims_of(op.table), graph.dims_of(op.result)
        dim = op.dim.value.data
        gathering = _Gathering(list(op.indices), dim, table, result, op.wrap is not None)
        indexed = gathering.indexed
        outside = [k for k in range(len(table)) if k not in indexed]
        kept = [k for k in range(len(result)) if k != dim]
        if [table[k] for k in outside] != [result[k] for k in kept]:
            return
        if all(table[k] == 1 for k in indexed):
            return
        value = gathering.value(op.table)
        if value is None:
            return
        rewriter.replace(op, gathering.ops, [value])


DECOMPOSITIONS: tuple[type[RewritePattern], ...] = (
    DecomposeUpcast,
    DecomposeRMSNorm,
    DecomposeLinear,
    ReshapeThenCast,
    GatherThroughElementwise,
    ComposePermutes,
)


@dataclass(frozen=True)
class DecomposePass(ModulePass):
    """Rewrite every composite graph op into graph primitives (and casts of reshapes into
    reshapes of casts, gathers of elementwise ops into elementwise ops of gathers, permutes
    of permutes into one: `ReshapeThenCast`, `GatherThroughElementwise`,
    `ComposePermutes`)."""

    name = "decompose"

    keep_linear: bool = False
    """Leave `graph.linear` whole (for backends that call a library GEMM with a bias)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns = [p() for p in DECOMPOSITIONS if not (self.keep_linear and p is DecomposeLinear)]
        PatternRewriteWalker(
            GreedyRewritePatternApplier(patterns),  # pyright: ignore[reportArgumentType]
            apply_recursively=False,
        ).rewrite_module(op)
