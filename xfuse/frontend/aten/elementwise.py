"""Converters of elementwise ops: unary, binary (torch's promotion, `alpha`, f16 opmath),
comparisons, `where`, casts, and the aten ops that are formulas of them (rsub, clamp,
leaky_relu, elu, rounding division, logical ops)."""

from __future__ import annotations

from typing import Any

import torch.fx
from xdsl.dialects.builtin import BFloat16Type, Float16Type, f32, f64, i1, i64
from xdsl.ir import Attribute, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.frontend.aten.common import Args, Converter, _each
from xfuse.frontend.builder import (
    ImportBuilder,
    Value,
    is_size_node,
    out_type,
    promoted_dtype,
)
from xfuse.ir.dtypes import opmath_type, to_torch

# ---------------------------------------------------------------------------------------------
# Unary, binary and comparison families
# ---------------------------------------------------------------------------------------------


def _unary(op_cls: type[graph.UnaryOp]) -> Converter:
    """A unary op on the operand cast to the result dtype (a test, whose result is bool, on
    the operand as it is). Bool operands stay eager."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        if issubclass(op_cls, graph.UnaryPredicateOp):
            dtype = graph.dtype_of(lw.tensor(a["self"]))
            dtype = i64 if dtype == i1 else dtype  # isnan/isinf/signbit of a bool: as an int
        if (op_cls.FLOAT_ONLY and not graph.is_float(dtype)) or dtype == i1:
            return None
        return lw.emit(op_cls(lw.operand(a["self"], dtype)))

    return convert


def _binary(op_cls: type[graph.BinaryOp]) -> Converter:
    """add/sub/mul/div/pow/maximum/minimum: operands cast to the result dtype; `alpha` scales
    rhs. The rhs is `other`, or `exponent` in pow's schemas."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        other = "other" if "other" in a else "exponent"
        if op_cls.FLOAT_ONLY and not graph.is_float(dtype):
            return None
        compute = _opmath(lw, op_cls, dtype, a["self"], a[other])
        lhs, rhs = lw.operand(a["self"], compute), lw.operand(a[other], compute)
        alpha = a.get("alpha")
        if alpha is not None and alpha != 1:
            rhs = lw.emit(graph.MulOp(rhs, lw.constant(alpha, compute)))
        return lw.cast(lw.emit(op_cls(lhs, rhs)), dtype)

    return convert


def _opmath(
    lw: ImportBuilder, op_cls: type[graph.BinaryOp], dtype: Attribute, *operands: Any
) -> Attribute:
    """The dtype to compute an f16/bf16 binary op in. Eager's mul and div keep a Python number
    (float or int), a size of the call or a wider (f32/f64) 0-d tensor operand unrounded: they
    compute in f32 and round once; its add and sub round that operand to the op's dtype
    first. xfuse does the same."""
    if not isinstance(dtype, Float16Type | BFloat16Type) or op_cls not in (
        graph.MulOp,
        graph.DivOp,
    ):
        return dtype
    for x in operands:
        if isinstance(x, bool):
            continue
        if isinstance(x, float | int) and float(torch.tensor(x, dtype=to_torch(dtype))) != x:
            return f32  # (a number the dtype holds exactly gives the same result either way)
        if is_size_node(x):
            return f32  # (a size: exact in the dtype at some calls only)
        if isinstance(x, torch.fx.Node) and graph.dtype_of(lw.tensor(x)) in (f32, f64):
            return f32
    return dtype


def _comparison(op_cls: type[graph.ComparisonOp]) -> Converter:
    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = promoted_dtype(a["self"], a["other"])
        return lw.emit(op_cls(lw.operand(a["self"], dtype), lw.operand(a["other"], dtype)))

    return convert


def _where(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    dtype = out_type(node).element_type
    cond = lw.operand(a["condition"], i1)
    return lw.emit(graph.WhereOp(cond, lw.operand(a["self"], dtype), lw.operand(a["other"], dtype)))


def _cast(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    return lw.cast(lw.tensor(a["self"]), out_type(node).element_type)


def _convert_element_type(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """prims.convert_element_type (some of torch's decompositions leave it): a cast."""
    return lw.cast(lw.tensor(a["a"]), out_type(node).element_type)


# ---------------------------------------------------------------------------------------------
# Formulas of elementwise ops
# ---------------------------------------------------------------------------------------------


def _rsub(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """other - alpha * self."""
    dtype = out_type(node).element_type
    lhs, rhs = lw.operand(a["other"], dtype), lw.operand(a["self"], dtype)
    if a.get("alpha", 1) != 1:
        rhs = lw.emit(graph.MulOp(rhs, lw.constant(a["alpha"], dtype)))
    return lw.emit(graph.SubOp(lhs, rhs))


def _div_mode(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """div with rounding_mode: graph.div truncates integers, so only integer trunc maps, and
    only by a number other than 0 and -1: a kernel's integer division by zero (or of the
    smallest integer by -1) traps and kills the process, where eager raises (a torch_call)."""
    dtype = out_type(node).element_type
    mode = a.get("rounding_mode")
    if mode is None:
        return _binary(graph.DivOp)(lw, node, a)
    if mode == "floor" or graph.is_float(dtype):
        return _rounded_division(lw, node, a)
    if mode == "trunc" and _int_division_is_safe(a["other"]):
        return lw.emit(graph.DivOp(lw.operand(a["self"], dtype), lw.operand(a["other"], dtype)))
    return None


def _pow_scalar(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """pow.Scalar: number ** tensor."""
    dtype = out_type(node).element_type
    if not graph.is_float(dtype):
        return None
    return lw.emit(graph.PowOp(lw.operand(a["self"], dtype), lw.operand(a["exponent"], dtype)))


def _clamp(low: str | None, high: str | None) -> Converter:
    """clamp/clamp_min/clamp_max/hardtanh as maximum with the low bound, minimum with the high."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        y = lw.operand(a["self"], dtype)
        if low is not None and a.get(low) is not None:
            y = lw.emit(graph.MaximumOp(y, lw.operand(a[low], dtype)))
        if high is not None and a.get(high) is not None:
            y = lw.emit(graph.MinimumOp(y, lw.operand(a[high], dtype)))
        return y

    return convert


def _leaky_relu(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    dtype = out_type(node).element_type
    x = lw.operand(a["self"], dtype)
    positive = lw.emit(graph.GtOp(x, lw.constant(0, dtype)))
    scaled = lw.emit(graph.MulOp(x, lw.constant(a["negative_slope"], dtype)))
    return lw.emit(graph.WhereOp(positive, x, scaled))


def _scaled(lw: ImportBuilder, x: SSAValue, factor: float) -> SSAValue:
    if factor == 1:
        return x
    return lw.emit(graph.MulOp(x, lw.constant(factor, graph.dtype_of(x))))


def _elu(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """elu (and selu, celu): x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale,
    computed in f32 for f16/bf16 as eager's kernel does."""
    dtype = out_type(node).element_type
    if not graph.is_float(dtype):
        return None
    alpha, scale, input_scale = (float(a.get(k, 1)) for k in ("alpha", "scale", "input_scale"))
    compute = opmath_type(dtype)
    x = lw.operand(a["self"], compute)
    negative = lw.emit(graph.Expm1Op(_scaled(lw, x, input_scale)))
    negative = _scaled(lw, negative, alpha * scale)
    positive = lw.emit(graph.GtOp(x, lw.constant(0, compute)))
    return lw.cast(lw.emit(graph.WhereOp(positive, _scaled(lw, x, scale), negative)), dtype)


def _round_decimals(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """round(x * 10^d) / 10^d, or round(x / 10^-d) * 10^-d for d < 0, as eager's kernel for
    the device computes it: in f32 for f16/bf16 on the CPU, but in the input's own type on
    CUDA (where 1e4 * 100 overflows f16 to inf: eager's CUDA kernel gives inf too)."""
    dtype = out_type(node).element_type
    if not graph.is_float(dtype):
        return None
    decimals = int(a.get("decimals", 0))
    val = node.meta.get("val")
    on_cuda = isinstance(val, torch.Tensor) and val.device.type == "cuda"
    compute = dtype if on_cuda else opmath_type(dtype)
    x = lw.operand(a["self"], compute)
    if decimals == 0:
        return lw.cast(lw.emit(graph.RoundOp(x)), dtype)
    power = lw.constant(10.0 ** abs(decimals), compute)
    scale, unscale = (graph.MulOp, graph.DivOp) if decimals > 0 else (graph.DivOp, graph.MulOp)
    rounded = lw.emit(graph.RoundOp(lw.emit(scale(x, power))))
    return lw.cast(lw.emit(unscale(rounded, power)), dtype)


# ---------------------------------------------------------------------------------------------
# Logical and bitwise ops, division with rounding
# ---------------------------------------------------------------------------------------------


def _int_division_is_safe(divisor: Any) -> bool:
    """Whether an integer division (or remainder) by `divisor` may run in a kernel: only by a
    number other than 0 and -1. A kernel's integer division by zero (or of the smallest
    integer by -1) traps and kills the process, where eager raises ZeroDivisionError: any
    other divisor leaves the node to torch (a `graph.torch_call`)."""
    return isinstance(divisor, int) and divisor not in (0, -1)


def _division(op_cls: type[graph.BinaryOp], divisor_arg: str = "other") -> Converter:
    """fmod / remainder / floor_divide: floats always; integers by a safe number only."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        if dtype == i1 or (not graph.is_float(dtype) and not _int_division_is_safe(a[divisor_arg])):
            return None
        return lw.emit(op_cls(lw.operand(a["self"], dtype), lw.operand(a[divisor_arg], dtype)))

    return convert


def _rounded_division(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """div(rounding_mode="floor") is floor_divide; float "trunc" is trunc of the true division
    rounded to the dtype (eager's f16/bf16 kernels round the quotient before truncating)."""
    if a["rounding_mode"] == "floor":
        return _division(graph.FloorDivideOp)(lw, node, a)
    quotient = _binary(graph.DivOp)(lw, node, a)
    assert isinstance(quotient, SSAValue)
    return lw.emit(graph.TruncOp(quotient))


def _bitwise_not(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    dtype = out_type(node).element_type
    if graph.is_float(dtype):
        return None
    return lw.emit(graph.BitwiseNotOp(lw.operand(a["self"], dtype)))


def _logical_not(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """not (x != 0), on the operand as a bool (NaN is true)."""
    if out_type(node).element_type != i1:
        return None
    return lw.emit(graph.BitwiseNotOp(lw.operand(a["self"], i1)))


def _logical(op_cls: type[graph.IntegerBinaryOp]) -> Converter:
    """logical_and/or/xor: the bitwise op on both operands as bools."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        if out_type(node).element_type != i1:
            return None
        return lw.emit(op_cls(lw.operand(a["self"], i1), lw.operand(a["other"], i1)))

    return convert


# ---------------------------------------------------------------------------------------------
# The family's rows of the table
# ---------------------------------------------------------------------------------------------

OWN_CONVERTERS: dict[type[Operation], Converter] = {
    graph.CastOp: _cast,
    graph.WhereOp: _where,
    graph.BitwiseNotOp: _bitwise_not,
    graph.FmodOp: _division(graph.FmodOp),
    graph.RemainderOp: _division(graph.RemainderOp),
    graph.FloorDivideOp: _division(graph.FloorDivideOp),
}

FORMULAS: dict[str, Converter] = {
    "aten.rsub.Tensor": _rsub,
    "aten.rsub.Scalar": _rsub,
    "aten.div.Tensor_mode": _div_mode,
    "aten.div.Scalar_mode": _div_mode,
    "aten.pow.Scalar": _pow_scalar,
    **_each(["aten.clamp.default", "aten.clamp.Tensor"], _clamp("min", "max")),
    **_each(["aten.clamp_min.default", "aten.clamp_min.Tensor"], _clamp("min", None)),
    **_each(["aten.clamp_max.default", "aten.clamp_max.Tensor"], _clamp(None, "max")),
    "aten.hardtanh.default": _clamp("min_val", "max_val"),
    "aten.leaky_relu.default": _leaky_relu,
    "aten.elu.default": _elu,
    "aten.round.decimals": _round_decimals,
    "aten.logical_not.default": _logical_not,
    "aten.logical_and.default": _logical(graph.BitwiseAndOp),
    "aten.logical_or.default": _logical(graph.BitwiseOrOp),
    "aten.logical_xor.default": _logical(graph.BitwiseXorOp),
    "prims.convert_element_type.default": _convert_element_type,
}
"""Aten ops that are formulas of elementwise ops."""
