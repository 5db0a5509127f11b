"""
`simplify`: exact algebraic simplifications of graph programs. Each rewrite gives every element
the value the original computes, bit for bit: NaN, infinities and the sign of zero included.

`ReduceSumOfOneHot`: a float sum over one dim of a one-hot, `where(iota == i, a, 0)` with `i`
and `a` the same all along the dim (size 1 there, or broadcast to it), times factors `b` that
are the same along it too, is the one element the one-hot selects, without a loop over the dim.
This is the gradient of `nll_loss` summed over the classes in the backward of `log_softmax`
(the cross-entropy backward of a language model: a pass over the whole vocabulary per row):

    %eq = graph.eq %i, %iota : tensor<4x1xi64>, tensor<4x10xi64> -> tensor<4x10xi1>
    %h = graph.where %eq, %a, %zeros : tensor<4x10xi1>, tensor<4x1xf32>, tensor<4x10xf32> -> tensor<4x10xf32>
    %t = graph.mul %h, %b : tensor<4x10xf32>, tensor<4x1xf32> -> tensor<4x10xf32>
    %s = graph.reduce_sum %t dims = [1] keepdim : tensor<4x10xf32> -> tensor<4x1xf32>
      ->
    %in = graph.bitwise_and (graph.ge %i, 0), (graph.le %i, 9)
    %t' = graph.mul (graph.where %in, %a, 0.0), %b
    %s = graph.add (graph.add %t', (graph.mul 0.0, %b)), 0.0

The iota counts by 1 from `start` over the whole dim (n >= 2 elements), so at most one element
is selected: the sum is that element plus n - 1 (or n) copies of `0 * b` (a zero, or NaN where
`b` is infinite or NaN), starting from +0. `t' + 0 * b + 0` is that sum: it is NaN where a
copy is, and +0 where every term is a zero (of either sign).

The one-hot may also be torch's `aten.scatter.value(zeros, d, i, v)` (a `graph.torch_call`:
the importer keeps it where the count of indices is symbolic, as in a backward compiled with
`dynamic=True`) with one index per row: the sum is `v * b + 0 * b + 0`; the scatter stays
for its other readers, and raises for an index outside the dim as before. The reduced dim may
be a size symbol there (at least 2).

Left alone: sums over several dims, integer sums, an iota that is not the dim's own (of
another length, a step other than 1, or a symbolic length), and a one-hot whose selected
value varies along the dim (`a` gathered at `i`).

`GatherByIdentity`: `gather(t, i)` along dim d whose one index tensor `i` is computed from no
argument of the function (iotas and arithmetic: `compact.constant_ops`, evaluated at
compile time) and holds, at every position of the result, that position along d, with the
result of `t`'s type, is `t`: each element reads itself. torch's group
norm decomposition indexes its per-channel scale and shift by an arange over the channels;
as a gather it needs a bounds check per element, which keeps the norm's row kernel off CUDA's
`rows` mapping (one thread per row instead of a block).

    %i = graph.iota dim = 1 start = 0 step = 1 : tensor<1x8xi64>
    %r = graph.reshape %i : tensor<1x8xi64> -> tensor<8xi64>
    %g = graph.gather %t[%r] dim = 0 : tensor<8xf32>, tensor<8xi64> -> tensor<8xf32>
      ->
    %t

`MulByOne`: `x * 1` where the product has `x`'s type (no broadcast, no promotion) is `x` (a
float times one is itself, NaN, infinities and -0.0 included). Llama's rotary embedding scales
its cos and sin by `attention_scaling`, 1.0 by default: a multiply per element, in the forward
and again in the backward (which computes cos and sin again), for nothing. A program output
that becomes an argument this way is copied by the runtime, as any fresh output that shares
an argument's memory (`xfuse.runtime.outputs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from xdsl.context import Context
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp
from xdsl.ir import Attribute, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from xfuse.dialects import graph
from xfuse.dialects.torch_args import tensor_ref
from xfuse.interpreters.compact import constant_ops, evaluate_compact
from xfuse.ir.dense import splat_value
from xfuse.passes.transforms.decompose import OpList


def _dim_in(value: SSAValue, at: int, rank: int) -> int:
    """Where dim `at` of a result of rank `rank` is in `value`, an operand that broadcasts to
    it (aligned on the right); negative where `value` has no such dim."""
    return at - (rank - len(graph.dims_of(value)))


def _uniform_source(value: SSAValue, at: int) -> SSAValue | None:
    """What `value` reads that has size 1 at its dim `at` (or no such dim, `at` < 0): `value`
    itself, or the operand of a `broadcast_in_dim` that stretched a size-1 dim (or none) to
    it; None where `value` may vary along the dim."""
    dims = graph.dims_of(value)
    if at < 0 or dims[at] == 1:
        return value
    op = value.owner
    if not isinstance(op, graph.BroadcastInDimOp):
        return None
    source = op.dim_map
    if at in source and graph.dims_of(op.input)[source.index(at)] != 1:
        return None
    return op.input


def _splat(value: SSAValue) -> float | int | None:
    """The one value of a splat constant, or of a `broadcast_in_dim` of one; else None."""
    op = value.owner
    if isinstance(op, graph.BroadcastInDimOp):
        op = op.input.owner
    return splat_value(op.value) if isinstance(op, graph.ConstantOp) else None


@dataclass(frozen=True)
class Uniform:
    """A value that is the same all along the reduced dim, its own dim `at` there."""

    value: SSAValue
    at: int

    @staticmethod
    def match(value: SSAValue, at: int) -> Uniform | None:
        return Uniform(value, at) if _uniform_source(value, at) is not None else None


@dataclass(frozen=True)
class OneHot:
    """`where(eq(i, iota), a, zero)` (or `eq(iota, i)`): `a` where the iota, counting by 1
    from `start` along the reduced dim, equals `i`; the splat `zero` elsewhere."""

    index: Uniform
    start: int
    length: int
    selected: Uniform
    zero: float

    @staticmethod
    def match(value: SSAValue, at: int, length: int) -> OneHot | None:
        where = value.owner
        if not isinstance(where, graph.WhereOp):
            return None
        zero = _splat(where.rhs)
        selected = Uniform.match(where.lhs, _dim_in(where.lhs, at, len(graph.dims_of(value))))
        eq = where.cond.owner
        if zero != 0 or selected is None or not isinstance(eq, graph.EqOp):
            return None
        at_eq = _dim_in(eq.result, at, len(graph.dims_of(value)))
        rank = len(graph.dims_of(eq.result))
        for counter, index in ((eq.rhs, eq.lhs), (eq.lhs, eq.rhs)):
            start = _counting_start(counter, _dim_in(counter, at_eq, rank), length)
            uniform = Uniform.match(index, _dim_in(index, at_eq, rank))
            if start is not None and uniform is not None:
                return OneHot(uniform, start, length, selected, float(zero))
        return None


def _counting_start(value: SSAValue, at: int, length: int) -> int | None:
    """The first value of `value` where it is an iota along its dim `at` of `length` elements
    that counts by 1; else None."""
    iota = value.owner
    if not isinstance(iota, graph.IotaOp) or at < 0 or iota.axis != at:
        return None
    start, step = iota.counting
    return start if step == 1 and graph.dims_of(value)[at] == length else None


def _number(attr: Attribute) -> float | None:
    return float(attr.value.data) if isinstance(attr, FloatAttr | IntegerAttr) else None


@dataclass(frozen=True)
class Scattered:
    """`aten.scatter.value(zeros, dim, index, value)` (a `torch_call`: the importer's one-hot
    where the count of indices is symbolic) with one index per position of the other dims:
    `value` where the index points along the reduced dim, the splat `zero` elsewhere. An index
    outside the dim is the scatter's error, which stays."""

    scatter: SSAValue
    value: float
    zero: float

    @staticmethod
    def match(value: SSAValue, at: int) -> Scattered | None:
        call = value.owner
        if not isinstance(call, graph.TorchCallOp) or call.target.data != "aten.scatter.value":
            return None
        args, dims = call.args.data, graph.dims_of(value)
        if (
            len(args) != 4
            or call.kwargs.data
            or [tensor_ref(args[0]), tensor_ref(args[2])] != [0, 1]
        ):
            return None
        dim, scattered, zero = args[1], _number(args[3]), _splat(call.inputs[0])
        if not isinstance(dim, IntegerAttr) or dim.value.data % len(dims) != at:
            return None
        index = [*graph.dims_of(call.inputs[1])]
        one_per_row = index[at] == 1 and index[:at] + index[at + 1 :] == [
            *dims[:at],
            *dims[at + 1 :],
        ]
        if scattered is None or zero != 0 or not one_per_row:
            return None
        return Scattered(value, scattered, float(zero))


@dataclass(frozen=True)
class Scaled:
    """`mul(inner, factor)` (or `mul(factor, inner)`, `inner_first` False) with a factor the
    same all along the reduced dim."""

    inner: Summand
    factor: Uniform
    inner_first: bool

    @staticmethod
    def match(value: SSAValue, at: int, length: graph.Dim) -> Scaled | None:
        mul = value.owner
        if not isinstance(mul, graph.MulOp):
            return None
        rank = len(graph.dims_of(value))
        for inner, factor, first in ((mul.lhs, mul.rhs, True), (mul.rhs, mul.lhs, False)):
            uniform = Uniform.match(factor, _dim_in(factor, at, rank))
            if uniform is None:
                continue
            summand = match_summand(inner, _dim_in(inner, at, rank), length)
            if summand is not None:
                return Scaled(summand, uniform, first)
        return None


Summand = OneHot | Scattered | Scaled


def match_summand(value: SSAValue, at: int, length: graph.Dim) -> Summand | None:
    """`value`, at its dim `at` (the reduced one, of `length` elements), as a one-hot times
    factors the same along it; None if it is not one."""
    if at < 0:
        return None
    if isinstance(length, int):
        found = OneHot.match(value, at, length)
        if found is not None:
            return found
    return Scattered.match(value, at) or Scaled.match(value, at, length)


class Builder(OpList):
    """The ops of a rewrite, in order (`OpList`'s builders, and a one-hot sum's pieces)."""

    def uniform(self, u: Uniform) -> SSAValue:
        """`u`'s value with size 1 at its reduced dim: what its broadcast read, stretched to
        the value's other dims."""
        source = _uniform_source(u.value, u.at)
        assert source is not None
        if source is u.value:
            return source
        stretch = u.value.owner
        assert isinstance(stretch, graph.BroadcastInDimOp)
        dims = list(graph.dims_of(u.value))
        dims[u.at] = 1
        if list(graph.dims_of(source)) == dims:
            return source
        return self.add(graph.BroadcastInDimOp(source, dims, stretch.dim_map))

    def summand(self, s: Summand) -> tuple[SSAValue, SSAValue]:
        """The selected element (the summand where the iota equals the index, the summand's
        zero where the index is outside the iota's range) and the summand's zero."""
        if isinstance(s, OneHot):
            index = self.uniform(s.index)
            low = self.add(graph.GeOp(index, self.const(s.start, index)))
            high = self.add(graph.LeOp(index, self.const(s.start + s.length - 1, index)))
            inside = self.add(graph.BitwiseAndOp(low, high))
            selected = self.uniform(s.selected)
            zero = self.const(s.zero, selected)
            return self.add(graph.WhereOp(inside, selected, zero)), zero
        if isinstance(s, Scattered):
            return self.const(s.value, s.scatter), self.const(s.zero, s.scatter)
        factor = self.uniform(s.factor)
        picked, zero = self.summand(s.inner)
        if s.inner_first:
            return self.add(graph.MulOp(picked, factor)), self.add(graph.MulOp(zero, factor))
        return self.add(graph.MulOp(factor, picked)), self.add(graph.MulOp(factor, zero))

    def shaped(self, value: SSAValue, op: graph.ReduceSumOp) -> SSAValue:
        """`value` (size 1 or absent at the reduced dim) as `op`'s result."""
        kept = list(graph.dims_of(op.input))
        kept[op.reduce_dims[0]] = 1
        dims = graph.dims_of(value)
        if list(dims) != kept:
            value = self.add(
                graph.BroadcastInDimOp(value, kept, range(len(kept) - len(dims), len(kept)))
            )
        if not op.keeps_dims:
            value = self.add(graph.ReshapeOp(value, graph.dims_of(op.result)))
        return value


class ReduceSumOfOneHot(RewritePattern):
    """`reduce_sum(where(eq(i, iota), a, 0) * b, [d])` with `i`, `a` and `b` the same along
    `d` -> `where(start <= i <= last, a, 0) * b + 0 * b + 0` (exact; see the module)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.ReduceSumOp, rewriter: PatternRewriter) -> None:
        if len(op.reduce_dims) != 1 or not graph.is_float(graph.dtype_of(op.input)):
            return
        at = op.reduce_dims[0]
        length = graph.dims_of(op.input)[at]
        if isinstance(length, int) and length < 2:  # a size symbol is at least 2
            return
        summand = match_summand(op.input, at, length)
        if summand is None:
            return
        b = Builder()
        picked, zero = b.summand(summand)
        if isinstance(summand, Scaled):  # n - 1 copies of `0 * b`: NaN where b is not finite
            picked = b.add(graph.AddOp(picked, zero))
        total = b.add(graph.AddOp(picked, b.const(0.0, picked)))  # -0 -> +0, as the sum from +0
        result = b.shaped(total, op)
        rewriter.replace(op, b.ops, [result])


class MulByOne(RewritePattern):
    """`mul(x, 1)` or `mul(1, x)`, the one a splat constant, of `x`'s type -> `x`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MulOp, rewriter: PatternRewriter) -> None:
        for x, one in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            if x.type == op.result.type and _splat(one) == 1:
                rewriter.replace(op, [], [x])
                return


def reads_own_index(op: graph.GatherOp) -> bool:
    """Whether `op` reads each element of its table at its own index: one index tensor,
    computed from no argument of the function (iotas and arithmetic: `constant_ops`), whose
    value at every position of the result is that position along the gathered dim."""
    index = op.indices[0]
    ops = constant_ops(index, None)
    if ops is None:
        return False
    shape = graph.shape_of(op.result)
    dim = op.dim.value.data
    got = evaluate_compact(ops, index, {}).expand(shape)
    own = torch.arange(shape[dim]).view([-1 if k == dim else 1 for k in range(len(shape))])
    return bool(torch.equal(got.to(torch.int64), own.expand(shape)))


class GatherByIdentity(RewritePattern):
    """`gather(t, i)` that reads every element of `t` at its own index -> `t`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.GatherOp, rewriter: PatternRewriter) -> None:
        if len(op.indices) != 1 or op.result.type != op.table.type:
            return
        if graph.is_symbolic(op.table) or graph.is_symbolic(op.indices[0]):
            return
        if reads_own_index(op):
            rewriter.replace(op, [], [op.table])


@dataclass(frozen=True)
class SimplifyPass(ModulePass):
    """Exact algebraic simplifications: a sum over a dim of a one-hot (the cross-entropy
    backward's `nll_loss` gradient) becomes the element it selects; a gather that reads each
    element at its own index (group norm's per-channel scale), its table; a product by one,
    its other factor.

    Every element keeps its value bit for bit (NaN, infinities, the sign of zero)."""

    name = "simplify"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([ReduceSumOfOneHot(), GatherByIdentity(), MulByOne()])
        ).rewrite_module(op)
