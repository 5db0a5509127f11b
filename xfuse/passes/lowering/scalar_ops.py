"""
Scalar code for one element of a `graph` op: the table `lower-to-loops` reads to turn each
elementwise op of a group into `arith` / `math` ops on scalars.

Semantics follow torch on CPU:
- f16 and bf16 are computed in f32 and rounded back after each op (what eager torch does per
  op); comparisons of f16/bf16 compare the f32 extensions (exact).
- Float comparisons use ordered predicates (`oeq`, `olt`, ...), except `ne`, which is `une`:
  torch says NaN != x.
- `maximum`, `minimum` and `relu` propagate NaN (`arith.maximumf` / `arith.minimumf`).
- Integer division truncates (`arith.divsi`); bool `add`/`maximum` are `or`, `mul`/`minimum`
  are `and`, as torch computes them on bool tensors.
- Casts: int -> f16/bf16 goes through f32 (as c10::Half/BFloat16 do), float -> bool and
  int -> bool are `x != 0` (NaN is true), bool -> number is 0 or 1 (`uitofp` / `extui`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from math import inf as math_inf
from typing import cast

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    Float16Type,
    Float64Type,
    IntegerType,
    f32,
    i1,
)
from xdsl.ir import Attribute, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.facts import ScalarBuilder, ScalarRule
from xfuse.dialects.graph import is_float
from xfuse.errors import XfuseError


class UnsupportedScalarOp(XfuseError):
    """A graph op on an element type that the scalar table has no rule for."""


def is_half(t: Attribute) -> bool:
    """f16 and bf16: stored as such, computed in f32."""
    return isinstance(t, Float16Type | BFloat16Type)


def compute_type(t: Attribute) -> Attribute:
    """The type arithmetic on elements of type `t` is done in."""
    return f32 if is_half(t) else t


def float_width(t: Attribute) -> int:
    if isinstance(t, Float64Type):
        return 64
    return 16 if is_half(t) else 32


# graph op name -> scalar rule, from each op's `scalar` fact (`xfuse.dialects.facts`).
# `graph.cast` and `graph.where` are `emit_cast` / `emit_select`.
def scalar_rules(ops: Iterable[type[Operation]]) -> dict[str, ScalarRule]:
    """graph op name -> the op's `scalar` fact, for those of `ops` that have one."""
    return {op.name: rule for op in ops if (rule := graph.op_facts(op).scalar) is not None}


SCALAR_RULES: dict[str, ScalarRule] = scalar_rules(graph.Graph.operations)


def has_scalar_rule(op_name: str) -> bool:
    return op_name in SCALAR_RULES or op_name in ("graph.cast", "graph.where")


def emit_elementwise(
    b: ScalarBuilder, op_name: str, operands: Sequence[SSAValue], dtype: Attribute
) -> SSAValue:
    """One element of `op_name` on operands of element type `dtype`."""
    rule = SCALAR_RULES[op_name]
    if is_float(dtype):
        fn = rule.float_fn
    elif dtype == i1:
        fn = rule.bool_fn
    else:
        fn = rule.int_fn
    if fn is None:
        raise UnsupportedScalarOp(f"'{op_name}' on {dtype} has no scalar lowering")
    if not is_half(dtype):
        return fn(b, operands, dtype)
    wide = [b.insert(arith.ExtFOp(x, f32)) for x in operands]
    result = fn(b, wide, f32)
    return result if rule.compare else b.insert(arith.TruncFOp(result, dtype))


def emit_select(b: ScalarBuilder, cond: SSAValue, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
    return b.insert(arith.SelectOp(cond, lhs, rhs))


def to_compute(b: ScalarBuilder, x: SSAValue, dtype: Attribute) -> SSAValue:
    """f16/bf16 -> f32 (exact); other types unchanged."""
    return b.insert(arith.ExtFOp(x, f32)) if is_half(dtype) else x


def from_compute(b: ScalarBuilder, x: SSAValue, dtype: Attribute) -> SSAValue:
    """Round an f32 result back to f16/bf16; other types unchanged."""
    return b.insert(arith.TruncFOp(x, dtype)) if is_half(dtype) else x


def emit_cast(b: ScalarBuilder, x: SSAValue, src: Attribute, dst: Attribute) -> SSAValue:
    """torch's `Tensor.to(dst)` on one element of type `src`."""
    if src == dst:
        return x
    if is_float(src):
        x, src = to_compute(b, x, src), compute_type(src)
        if dst == i1:
            return b.insert(arith.CmpfOp(x, b.constant(0.0, src), "une"))
        if isinstance(dst, IntegerType):
            return b.insert(arith.FPToSIOp(x, dst))
        return _float_to_float(b, x, src, dst)
    if is_float(dst):
        wide = cast(AnyFloat, compute_type(dst))  # dst is a float type, and so is wide
        convert = arith.UIToFPOp if src == i1 else arith.SIToFPOp
        return from_compute(b, b.insert(convert(x, wide)), dst)
    assert isinstance(src, IntegerType) and isinstance(dst, IntegerType)
    if dst == i1:
        return b.insert(arith.CmpiOp(x, b.constant(0, src), "ne"))
    if src == i1:
        return b.insert(arith.ExtUIOp(x, dst))
    if dst.width.data > src.width.data:
        return b.insert(arith.ExtSIOp(x, dst))
    return b.insert(arith.TruncIOp(x, dst))


def _float_to_float(b: ScalarBuilder, x: SSAValue, src: Attribute, dst: Attribute) -> SSAValue:
    """`x` is f32 or f64 here; f64 -> f16/bf16 rounds through f32 like c10's conversions."""
    if src == dst:
        return x
    if float_width(dst) > float_width(src):
        return b.insert(arith.ExtFOp(x, dst))
    if is_half(dst) and isinstance(src, Float64Type):
        x = b.insert(arith.TruncFOp(x, f32))
    return b.insert(arith.TruncFOp(x, dst))


# ---------------------------------------------------------------------------------------------
# Reductions: the identity of each combining op
# ---------------------------------------------------------------------------------------------


def _int_width(t: Attribute) -> int:
    assert isinstance(t, IntegerType)
    return t.width.data


REDUCTION_IDENTITIES: dict[type[Operation], Callable[[Attribute], float | int]] = {
    arith.AddfOp: lambda t: 0.0,
    arith.MulfOp: lambda t: 1.0,
    arith.MaximumfOp: lambda t: -math_inf,
    arith.MaxnumfOp: lambda t: -math_inf,
    arith.MinimumfOp: lambda t: math_inf,
    arith.MinnumfOp: lambda t: math_inf,
    arith.AddiOp: lambda t: 0,
    arith.MuliOp: lambda t: 1,
    arith.MaxSIOp: lambda t: -(2 ** (_int_width(t) - 1)),
    arith.MinSIOp: lambda t: 2 ** (_int_width(t) - 1) - 1,
    arith.OrIOp: lambda t: 0,
    arith.AndIOp: lambda t: 1 if _int_width(t) == 1 else -1,
}
"""Combining op of an accumulation -> its identity for an element type (`acc` starts there)."""


def reduction_identity(combiner: type[Operation], t: Attribute) -> float | int:
    """The value an accumulation with `combiner` over elements of type `t` starts from."""
    return REDUCTION_IDENTITIES[combiner](t)
