"""
Reductions in a kernel: the accumulator type, initial value, combining op (a float sum or
product with `fastmath<reassoc>`, so that LLVM may vectorize it). The phases in which a
group's reductions run are `xfuse.passes.fusion.kernel_loops.RowPasses`'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypeGuard, cast

from xdsl.dialects import arith
from xdsl.dialects.builtin import f32, f64, i1
from xdsl.dialects.utils.fast_math import FastMathFlag
from xdsl.ir import Attribute, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.graph import dtype_of, is_float, shape_of
from xfuse.passes.lowering.scalar_ops import UnsupportedScalarOp, compute_type, reduction_identity

_FLOAT_COMBINE: dict[str, type[Operation]] = {
    "graph.reduce_sum": arith.AddfOp,
    "graph.reduce_mean": arith.AddfOp,
    "graph.reduce_prod": arith.MulfOp,
    "graph.reduce_max": arith.MaximumfOp,
    "graph.reduce_min": arith.MinimumfOp,
}
_INT_COMBINE: dict[str, type[Operation]] = {
    "graph.reduce_sum": arith.AddiOp,
    "graph.reduce_prod": arith.MuliOp,
    "graph.reduce_max": arith.MaxSIOp,
    "graph.reduce_min": arith.MinSIOp,
}
# torch reduces bools as integers and casts back: sum/max are `or`, prod/min are `and`.
_BOOL_COMBINE: dict[str, type[Operation]] = {
    "graph.reduce_sum": arith.OrIOp,
    "graph.reduce_prod": arith.AndIOp,
    "graph.reduce_max": arith.OrIOp,
    "graph.reduce_min": arith.AndIOp,
}


WIDE_SUMS = True
"""Whether short f32 sums accumulate in f64 (`SHORT_SUM`) unless told otherwise; the runtime
turns it off on CUDA."""

SHORT_SUM = 64
"""The most terms per row of an f32 sum (or mean) over several loops, or over several dims
merged into one loop (`merged_row_domain`: a 7x7 pool's 49), that accumulates in f64 where
wide sums are on (`LowerToLoopsPass.wide_sums`, the CPU's): summed in f64 and rounded once,
such a sum is the f32 value nearest the exact one. Over several loops a row is summed in
blocks (`partial_sums_nest`), an order unlike eager's, and a blocked f32 sum of a few dozen
terms can land a few ulps off where eager's happens to land on it; a steep function after it
(acos near its clamp) multiplies that distance into a gradient far from eager's. A row of one
dim (a softmax's, a layer norm's) keeps f32, summed in vector lanes as eager's is: in f64 it
took 1.3-1.9x the time on the CPU."""


TOTAL_SUM = (1 << 16) - 1
"""The most terms of an f32 sum (or mean) to one value (a loss, a statistic) that accumulates
in f64 where wide sums are on, however its kernel loops over it. Such a sum is often the small
difference of large terms (a sum of normalized values, of centred ones), where any f32 order
lands some ulps of its terms off, eager's cascade as well as xfuse's blocks; in f64 it is the
f32 value nearest the exact one. One pass over fewer than 64K elements, a few microseconds;
a longer sum is split across threads (`split-reductions`' `min_length`, 65,536), its first
stage's partial sums f32."""


def sums_f32(op: graph.ReduceOp) -> bool:
    """Whether `op` sums f32 elements (the sums `accumulator_type` may widen)."""
    return dtype_of(op.input) == f32 and _combiner_class(op) is arith.AddfOp


def accumulator_type(
    op: graph.ReduceOp, wide_sums: bool, blocked: bool, hints: Mapping[str, int] | None = None
) -> Attribute:
    """The type `op` accumulates in: its elements' compute type (f32 for f16/bf16: far finer
    than their result); with `wide_sums`, f64 for a sum of f32 to one value (`TOTAL_SUM`),
    or, where its kernel sums in blocks (`blocked`), a short one (`SHORT_SUM`). A runtime size
    counts at its hint (`hints`, by symbol: a symbolic kernel's sizes as the example had them,
    where the static program would choose the same); without one, the compute type. Either
    type is right at every size: f64 only rounds less."""
    t = compute_type(dtype_of(op.input))
    if wide_sums and sums_f32(op):
        shape = shape_of(op.input)
        dims = graph.dims_of(op.input)
        terms = [
            shape[d] if shape[d] >= 0 else (hints or {}).get(str(dims[d]), -1)
            for d in op.reduce_dims
        ]
        if any(n < 0 for n in terms):  # a runtime size without a hint
            return t
        n = math.prod(terms)
        one_value = all(d == 1 for d in shape_of(op.result))
        if (blocked and n <= SHORT_SUM) or (one_value and n <= TOTAL_SUM):
            return f64
    return t


def reduction_init(op: graph.ReduceOp) -> float | int:
    """The identity of the reduction's combining op, for its input's element type."""
    return reduction_identity(_combiner_class(op), dtype_of(op.input))


REASSOC = arith.FastMathFlagsAttr([FastMathFlag.REASSOC])
"""The flags of a float sum/product accumulation: the reduction may be reassociated (split into
vector lanes and partial sums), which is what lets LLVM vectorize it. Only the accumulating op
carries them; max/min need none (`llvm.maximum`/`llvm.minimum` vectorize as they are, NaN
propagating like torch)."""


_ARG_COMBINE: dict[str, tuple[type[Operation], type[Operation]]] = {
    "graph.argmax": (arith.MaximumfOp, arith.MaxSIOp),
    "graph.argmin": (arith.MinimumfOp, arith.MinSIOp),
}
"""argmax/argmin: the combiner whose identity starts the value accumulator (float,
int); the accumulation itself is `KernelBuilder._arg_step`."""


def _combiner_class(op: graph.ReduceOp) -> type[Operation]:
    t = dtype_of(op.input)
    if op.name in _ARG_COMBINE:
        return _ARG_COMBINE[op.name][0 if is_float(t) else 1]
    table = _FLOAT_COMBINE if is_float(t) else _BOOL_COMBINE if t == i1 else _INT_COMBINE
    if op.name not in table:
        raise UnsupportedScalarOp(f"'{op.name}' on {t} has no loop lowering")
    return table[op.name]


def reassociates(phase: Sequence[graph.ReduceOp]) -> bool:
    """Whether some reduction of the phase is a float sum or product (whose rounding error
    depends on the order of its terms)."""
    return any(_combiner_class(r) in (arith.AddfOp, arith.MulfOp) for r in phase)


def reduction_combiner(op: graph.ReduceOp) -> Callable[[SSAValue, SSAValue], Operation]:
    combine = cast(Callable[..., Operation], _combiner_class(op))
    if combine in (arith.AddfOp, arith.MulfOp):
        return lambda acc, x: combine(acc, x, REASSOC)
    return combine


def is_real_reduction(op: Operation) -> TypeGuard[graph.ReduceOp]:
    return isinstance(op, graph.ReduceOp) and bool(op.reduce_dims)
