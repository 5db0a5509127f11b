"""
Scans in a kernel (cumsum, cumprod, logcumsumexp, cummax, cummin): a kernel with a
`graph.scan` runs the parallel loop over the other dims and, inside it, one `scf.for` along
the scan's dim carrying the value so far (and, for cummax / cummin, its position) in the
compute type (f32 for f16/bf16, as eager's CPU kernels): each iteration combines the next
element in, in eager's order (no fastmath flag), then stores it and the outputs computed from
it at that index. Nothing else reads the scan's result (fusion's `scan` gate: it is a kernel
of its own), so no other index is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from math import inf as math_inf
from typing import cast

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import IntegerType, f32, f64, i1, i64
from xdsl.ir import Attribute, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.graph import dtype_of, is_float, shape_of
from xfuse.passes.fusion.kernel_loops import ScanLoop
from xfuse.passes.lowering.domains import Domain, nd_domain
from xfuse.passes.lowering.emitter import LoopEmitter
from xfuse.passes.lowering.index_algebra import Affine
from xfuse.passes.lowering.scalar_ops import compute_type, emit_cast


def scan_domain(b: LoopEmitter) -> Domain:
    """The one scan's shape, its dim the sequential loop; every output of its shape (the rule
    is `ScanLoop`'s, which fusion's `scan` gate checks too)."""
    if not ScanLoop.computes(len(b.scans), len(b.reductions)):
        raise b.error("a scan shares its kernel with another scan or a reduction")
    loop = ScanLoop.of(b.scans[0])
    for v in b.outputs:
        if not loop.writes(shape_of(v)):
            raise b.error(
                f"output of shape {graph.fmt_shape(shape_of(v))} is not the scan's shape "
                f"{graph.fmt_shape(loop.shape)}"
            )
    return nd_domain(loop.shape, (loop.axis,))


def _scan_init(kind: str, t: Attribute) -> float | int:
    """The value a scan's accumulator starts from: the identity of sum / prod / logsumexp;
    for max / min one that the first element always replaces (-inf, the smallest integer,
    false for max)."""
    if kind in ("sum", "prod"):
        one = int(kind == "prod")
        return float(one) if is_float(t) else one
    if kind == "logsumexp":
        return -math_inf
    is_max = kind in ("max", "argmax")
    if is_float(t):
        return -math_inf if is_max else math_inf
    if t == i1:
        return 0 if is_max else 1
    bound = 2 ** (cast(IntegerType, t).width.data - 1)
    return -bound if is_max else bound - 1


def emit_scan(b: LoopEmitter) -> None:
    """The scan loop (see above): the value at each index is the carried one after that
    element, memoized there so that the outputs read it."""
    scan, d = b.scans[0], b.domain
    src, kind = dtype_of(scan.input), scan.combines
    t = scan_accumulator_type(kind, src)
    carried = [b.constant(_scan_init(kind, t), t)]
    if kind in graph.SCAN_ARG_KINDS:
        carried.append(b.constant(0, i64))

    def step(accs: list[SSAValue]) -> list[SSAValue]:
        x = emit_cast(b, b.value_at(scan.input, d.full_index), src, t)
        new = _scan_step(b, kind, accs, x, d.full_index[scan.axis])
        value = new[1] if kind in graph.SCAN_ARG_KINDS else emit_cast(b, new[0], t, src)
        b.scope.memo[("value", scan.result, d.full_index)] = value
        for i, v in enumerate(b.outputs):
            b.store(v, i, d.full_index)
        return new

    b.for_nest(d.reduce_vars, carried, step)


def scan_accumulator_type(kind: str, src: Attribute) -> Attribute:
    """The type a scan carries its value in: eager's CPU kernels accumulate an f32 cumsum or
    cumprod in f64 (`acc_type<float, false>`), rounding each output once (an f32 accumulator
    drifts from eager's over long chains); f16/bf16 in f32."""
    if kind in ("sum", "prod") and src == f32:
        return f64
    return compute_type(src)


_SCAN_COMBINE: dict[tuple[str, bool], type[Operation]] = {
    ("sum", True): arith.AddfOp,
    ("sum", False): arith.AddiOp,
    ("prod", True): arith.MulfOp,
    ("prod", False): arith.MuliOp,
}
"""(kind, float) -> the op combining a sum or product scan's next element (no fastmath flag:
eager's order of the terms)."""


def _scan_step(
    b: LoopEmitter, kind: str, accs: list[SSAValue], x: SSAValue, position: Affine
) -> list[SSAValue]:
    """The carried values after element `x` (at `position` along the dim)."""
    acc = accs[0]
    float_ = is_float(x.type)
    if kind in ("sum", "prod"):
        combine = cast(Callable[[SSAValue, SSAValue], Operation], _SCAN_COMBINE[kind, float_])
        return [b.insert(combine(acc, x))]
    if kind == "logsumexp":
        return [_log_add_exp(b, x, acc)]
    take = _takes(b, kind, x, acc)
    out = [b.insert(arith.SelectOp(take, x, acc))]
    if kind in graph.SCAN_ARG_KINDS:
        here = b.insert(arith.IndexCastOp(b.index_value(position), i64))
        out.append(b.insert(arith.SelectOp(take, here, accs[1])))
    return out


def _takes(b: LoopEmitter, kind: str, x: SSAValue, acc: SSAValue) -> SSAValue:
    """cummax / cummin's test (eager's CPU kernel): x is NaN, or the value so far is not and
    x >= it (<= for min): ties and NaNs take the later element."""
    is_max = kind in ("max", "argmax")
    if is_float(x.type):
        x_nan = b.insert(arith.CmpfOp(x, x, "uno"))
        acc_ordered = b.insert(arith.CmpfOp(acc, acc, "ord"))
        beats = b.insert(arith.CmpfOp(x, acc, "oge" if is_max else "ole"))
        return b.insert(arith.OrIOp(x_nan, b.insert(arith.AndIOp(acc_ordered, beats))))
    signed = x.type != i1  # bool: true > false
    predicate = ("sge" if is_max else "sle") if signed else ("uge" if is_max else "ule")
    return b.insert(arith.CmpiOp(x, acc, predicate))


def _log_add_exp(b: LoopEmitter, x: SSAValue, acc: SSAValue) -> SSAValue:
    """Eager's `_log_add_exp_helper(x, acc)`: with lo / hi = min / max of the two (acc when
    it is NaN; std::min / std::max keep x when unordered), log1p(exp(lo - hi)) + hi when
    they differ or are finite, else x (both the same infinity)."""
    acc_nan = b.insert(arith.CmpfOp(acc, acc, "uno"))
    acc_lower = b.insert(arith.CmpfOp(acc, x, "olt"))
    x_lower = b.insert(arith.CmpfOp(x, acc, "olt"))
    lo = b.insert(arith.SelectOp(acc_nan, acc, b.insert(arith.SelectOp(acc_lower, acc, x))))
    hi = b.insert(arith.SelectOp(acc_nan, acc, b.insert(arith.SelectOp(x_lower, acc, x))))
    general = b.insert(
        arith.AddfOp(
            b.insert(math.Log1pOp(b.insert(math.ExpOp(b.insert(arith.SubfOp(lo, hi)))))), hi
        )
    )
    differ = b.insert(arith.CmpfOp(lo, hi, "une"))
    inf = b.constant(math_inf, x.type)
    finite = b.insert(arith.CmpfOp(b.insert(math.AbsFOp(lo)), inf, "one"))
    return b.insert(arith.SelectOp(b.insert(arith.OrIOp(differ, finite)), general, x))
