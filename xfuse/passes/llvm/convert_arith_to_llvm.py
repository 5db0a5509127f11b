"""
`convert-arith-to-llvm`: `arith` ops to the `llvm` dialect (xDSL 0.74 has no such conversion).

Run it after index, bf16 and memref types have been converted (see `convert-func-to-llvm`): the
patterns read the operand types they find, so `arith.index_cast` of an `i64` (a converted
`index`) to `i64` simply forwards its operand. Two groups of patterns must run *before* type
conversion, and the pass runs them first:

- `ExpandBF16Conversion`: `arith.extf` from bf16 and `arith.truncf` to bf16 become integer bit
  operations (bf16 is the top half of an f32; rounding is to nearest even, NaN stays NaN), so
  that bf16 values can live in `i16` registers and memory.
- `ConvertArithConstant`: `arith.constant` becomes `llvm.mlir.constant` of the converted type
  (lowering constants first avoids `TypeConversionPattern` looping on `0 : index`).

    %s = arith.addf %a, %b fastmath<contract> : f32   ->   %s = llvm.fadd %a, %b {fastmathFlags = #llvm.fastmath<contract>} : f32
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, builtin, llvm
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    UnrealizedConversionCastOp,
    i1,
    i16,
    i32,
    i64,
)
from xdsl.dialects.utils.fast_math import FastMathFlag
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern
from xdsl.utils.exceptions import DiagnosticException

from xfuse.dialects.mlir_ops import RemFOp
from xfuse.errors import XfuseError
from xfuse.passes.llvm.convert_func_to_llvm import convert_llvm_type, convert_types, rewrite_once


class LLVMConversionError(XfuseError, DiagnosticException):
    """An op the conversion to LLVM cannot handle (the runtime falls back for such kernels)."""


def llvm_fastmath(flags: arith.FastMathFlagsAttr | None, *, contract: bool) -> llvm.FastMathAttr:
    """The llvm fast-math flags for arith ones, plus `contract` (FMA formation) when asked."""
    chosen = set(flags.data) if flags is not None else set()
    if contract:
        chosen.add(FastMathFlag.ALLOW_CONTRACT)
    return llvm.FastMathAttr(chosen or None)


def _rounded_back(op: Operation) -> bool:
    """Whether the op's result is rounded to a narrower float (f16/bf16 ops computed in f32,
    as eager computes them). Such an op gets no `contract`: LLVM narrows it to a native f16
    op where the target has them, and an FMA formed from those would round once where eager
    rounds after each op."""
    return any(
        isinstance(use.operation, arith.TruncFOp | llvm.FPTruncOp) for use in op.results[0].uses
    )


def _overflow(op: Operation) -> llvm.OverflowAttr:
    flags = op.properties.get("overflowFlags")
    if isinstance(flags, arith.IntegerOverflowAttr):
        return llvm.OverflowAttr([llvm.OverflowFlag(flag.value) for flag in flags.data] or None)
    return llvm.OverflowAttr(None)


def _width(t: Attribute) -> int:
    if isinstance(t, IntegerType):
        return t.width.data
    if isinstance(t, builtin.AnyFloat):
        return t.bitwidth
    raise LLVMConversionError(f"expected an integer or float type, found {t}")


# ---------------------------------------------------------------------------------------------
# Before type conversion
# ---------------------------------------------------------------------------------------------


def _bf16_bits_to_f32(rewriter: PatternRewriter, bits: SSAValue) -> SSAValue:
    wide = rewriter.insert(arith.ExtUIOp(bits, i32)).result
    sixteen = rewriter.insert(arith.ConstantOp(IntegerAttr(16, i32))).result
    shifted = rewriter.insert(arith.ShLIOp(wide, sixteen)).result
    return rewriter.insert(arith.BitcastOp(shifted, builtin.f32)).result


def _f32_to_bf16_bits(rewriter: PatternRewriter, value: SSAValue) -> SSAValue:
    """Round to nearest even, as torch does: bits + 0x7fff + ((bits >> 16) & 1); NaN -> 0x7fc0."""

    def const(v: int) -> SSAValue:
        return rewriter.insert(arith.ConstantOp(IntegerAttr(v, i32))).result

    bits = rewriter.insert(arith.BitcastOp(value, i32)).result
    sixteen = const(16)
    lsb = rewriter.insert(
        arith.AndIOp(rewriter.insert(arith.ShRUIOp(bits, sixteen)).result, const(1))
    ).result
    bias = rewriter.insert(arith.AddiOp(lsb, const(0x7FFF))).result
    rounded = rewriter.insert(arith.AddiOp(bits, bias)).result
    top = rewriter.insert(arith.ShRUIOp(rounded, sixteen)).result
    is_nan = rewriter.insert(arith.CmpfOp(value, value, "uno")).result
    chosen = rewriter.insert(arith.SelectOp(is_nan, const(0x7FC0), top)).result
    return rewriter.insert(arith.TruncIOp(chosen, i16)).result


class ExpandBF16Conversion(RewritePattern):
    """`arith.extf`/`arith.truncf` between bf16 and wider floats as integer bit operations."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, arith.ExtFOp) and isinstance(op.input.type, BFloat16Type):
            bits: SSAValue = rewriter.insert(arith.BitcastOp(op.input, i16)).result
            value = _bf16_bits_to_f32(rewriter, bits)
            if not isinstance(op.result.type, Float32Type):
                value = rewriter.insert(arith.ExtFOp(value, op.result.type)).result
            rewriter.replace(op, (), (value,))
        elif isinstance(op, arith.TruncFOp) and isinstance(op.result.type, BFloat16Type):
            value = op.input
            if not isinstance(value.type, Float32Type):
                value = rewriter.insert(arith.TruncFOp(value, builtin.f32)).result
            bits = _f32_to_bf16_bits(rewriter, value)
            rewriter.replace(
                op, (), (rewriter.insert(arith.BitcastOp(bits, op.result.type)).result,)
            )


class ConvertArithConstant(RewritePattern):
    """`arith.constant` -> `llvm.mlir.constant` of the converted type (cast back for old users)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: arith.ConstantOp, rewriter: PatternRewriter) -> None:
        old_type = op.result.type
        new_type = convert_llvm_type(old_type)
        value = op.value
        if isinstance(value, IntegerAttr) and isinstance(old_type, IndexType):
            value = IntegerAttr(value.value.data, i64)
        elif isinstance(value, FloatAttr) and isinstance(old_type, BFloat16Type):
            raise LLVMConversionError("bf16 constants must be extended to f32 first")
        elif not isinstance(value, IntegerAttr | FloatAttr):
            raise LLVMConversionError(f"unsupported constant {value}")
        constant = rewriter.insert(llvm.ConstantOp(value, new_type)).result
        if new_type != old_type:
            cast = UnrealizedConversionCastOp.get([constant], [old_type])
            rewriter.replace(op, cast)
        else:
            rewriter.replace(op, (), (constant,))


# ---------------------------------------------------------------------------------------------
# After type conversion
# ---------------------------------------------------------------------------------------------

FLOAT_BINARY: dict[type[Operation], type[llvm.AbstractFloatArithOp]] = {
    arith.AddfOp: llvm.FAddOp,
    arith.SubfOp: llvm.FSubOp,
    arith.MulfOp: llvm.FMulOp,
    arith.DivfOp: llvm.FDivOp,
    RemFOp: llvm.FRemOp,  # C's fmod (libm's fmodf / fmod on the CPU)
}

INT_BINARY_OVERFLOW: dict[type[Operation], type[llvm.ArithmeticBinOpOverflow]] = {
    arith.AddiOp: llvm.AddOp,
    arith.SubiOp: llvm.SubOp,
    arith.MuliOp: llvm.MulOp,
    arith.ShLIOp: llvm.ShlOp,
}

INT_BINARY: dict[type[Operation], Callable[[SSAValue, SSAValue], Operation]] = {
    arith.DivSIOp: llvm.SDivOp,
    arith.DivUIOp: llvm.UDivOp,
    arith.RemSIOp: llvm.SRemOp,
    arith.RemUIOp: llvm.URemOp,
    arith.AndIOp: llvm.AndOp,
    arith.OrIOp: llvm.OrOp,
    arith.XOrIOp: llvm.XOrOp,
    arith.ShRSIOp: llvm.AShrOp,
    arith.ShRUIOp: llvm.LShrOp,
}

INT_MIN_MAX: dict[type[Operation], str] = {
    arith.MinSIOp: "slt",
    arith.MaxSIOp: "sgt",
    arith.MinUIOp: "ult",
    arith.MaxUIOp: "ugt",
}

FLOAT_MIN_MAX_INTRINSIC: dict[type[Operation], str] = {
    arith.MaximumfOp: "llvm.maximum",
    arith.MinimumfOp: "llvm.minimum",
}


def _intrinsic_suffix(t: Attribute) -> str:
    if isinstance(t, IntegerType):
        return f"i{t.width.data}"
    if isinstance(t, builtin.AnyFloat):
        return f"f{t.bitwidth}"
    raise LLVMConversionError(f"no intrinsic suffix for {t}")


def call_intrinsic(
    rewriter: PatternRewriter, name: str, args: list[SSAValue], result_type: Attribute
) -> SSAValue:
    """Call an overloaded LLVM intrinsic, mangled by its result and first argument types."""
    suffixes = [_intrinsic_suffix(result_type)]
    if args and args[0].type != result_type:
        suffixes.append(_intrinsic_suffix(args[0].type))
    full_name = ".".join([name, *suffixes])
    op = rewriter.insert(llvm.CallIntrinsicOp(full_name, args, [result_type]))
    result = op.ress
    assert result is not None
    return result


def _int_constant(rewriter: PatternRewriter, value: int, t: Attribute) -> SSAValue:
    # t is an integer type, the type parameter xDSL's IntegerAttr wants.
    return rewriter.insert(llvm.ConstantOp(IntegerAttr(value, t), t)).result  # type: ignore[call-overload]


def _convert_cast(op: Operation, rewriter: PatternRewriter) -> SSAValue | None:
    """Integer/float casts by source and target widths (None: not a cast)."""
    source = op.operands[0]
    target_type = op.results[0].type
    match op:
        case arith.IndexCastOp() | arith.ExtSIOp() | arith.TruncIOp() | arith.ExtUIOp():
            src_w, dst_w = _width(source.type), _width(target_type)
            if src_w == dst_w:
                return source
            if src_w > dst_w:
                return rewriter.insert(llvm.TruncOp(source, target_type)).res
            if isinstance(op, arith.ExtUIOp):
                return rewriter.insert(llvm.ZExtOp(source, target_type)).res
            return rewriter.insert(llvm.SExtOp(source, target_type)).res
        case arith.ExtFOp():
            return rewriter.insert(llvm.FPExtOp(source, target_type)).results[0]
        case arith.TruncFOp():
            return rewriter.insert(llvm.FPTruncOp(source, target_type)).results[0]
        case arith.SIToFPOp():
            return rewriter.insert(llvm.SIToFPOp(source, target_type)).results[0]
        case arith.UIToFPOp():
            # llvm has no uitofp op in xDSL 0.74: zero-extend into a wider signed integer.
            if _width(source.type) >= 64:
                raise LLVMConversionError("arith.uitofp from i64 is not supported")
            wide = rewriter.insert(llvm.ZExtOp(source, i64)).res
            return rewriter.insert(llvm.SIToFPOp(wide, target_type)).results[0]
        case arith.FPToSIOp():
            # No fptosi op either: the saturating intrinsic (NaN -> 0) vectorizes the same way.
            return call_intrinsic(rewriter, "llvm.fptosi.sat", [source], target_type)
        case arith.FPToUIOp():
            return call_intrinsic(rewriter, "llvm.fptoui.sat", [source], target_type)
        case arith.BitcastOp():
            if source.type == target_type:
                return source
            return rewriter.insert(llvm.BitcastOp(source, target_type)).results[0]
        case _:
            return None


def _floor_div_si(op: Operation, rewriter: PatternRewriter) -> SSAValue:
    """floor(a / b) = q - 1 where the remainder is non-zero and has the other sign than b."""
    a, b = op.operands
    q = rewriter.insert(llvm.SDivOp(a, b)).res
    r = rewriter.insert(llvm.SRemOp(a, b)).res
    zero = _int_constant(rewriter, 0, a.type)
    one = _int_constant(rewriter, 1, a.type)
    nonzero = rewriter.insert(llvm.ICmpOp(r, zero, _icmp("ne"))).res
    signs_differ = rewriter.insert(
        llvm.ICmpOp(rewriter.insert(llvm.XOrOp(r, b)).res, zero, _icmp("slt"))
    ).res
    adjust = rewriter.insert(llvm.AndOp(nonzero, signs_differ)).res
    q_minus_1 = rewriter.insert(llvm.SubOp(q, one)).res
    return rewriter.insert(llvm.SelectOp(adjust, q_minus_1, q)).res


def _icmp(predicate: str) -> IntegerAttr[IntegerType]:
    return IntegerAttr(llvm.ICmpPredicateFlag(predicate).to_int(), i64)


@dataclass
class ConvertArithOp(RewritePattern):
    """Every non-constant arith op to its llvm counterpart (tables above; casts by widths)."""

    contract: bool = True
    """Add `contract` to float add/sub/mul so that LLVM may form FMAs (no reassociation)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if op.dialect_name() != "arith" or isinstance(op, arith.ConstantOp):
            return
        result = self._convert(op, rewriter)
        if result is None:
            raise LLVMConversionError(f"no LLVM conversion for {op.name}")
        rewriter.replace(op, (), (result,))

    def _convert(self, op: Operation, rewriter: PatternRewriter) -> SSAValue | None:
        kind = type(op)
        if kind in FLOAT_BINARY:
            contract = self.contract and not _rounded_back(op)
            fm = llvm_fastmath(op.properties.get("fastmath"), contract=contract)  # type: ignore[arg-type]
            return rewriter.insert(FLOAT_BINARY[kind](op.operands[0], op.operands[1], fm)).results[
                0
            ]
        if kind in INT_BINARY_OVERFLOW:
            new = INT_BINARY_OVERFLOW[kind](op.operands[0], op.operands[1], overflow=_overflow(op))
            return rewriter.insert(new).results[0]
        if kind in INT_BINARY:
            return rewriter.insert(INT_BINARY[kind](op.operands[0], op.operands[1])).results[0]
        if kind in INT_MIN_MAX:
            a, b = op.operands
            pick_a = rewriter.insert(llvm.ICmpOp(a, b, _icmp(INT_MIN_MAX[kind]))).res
            return rewriter.insert(llvm.SelectOp(pick_a, a, b)).res
        if kind in FLOAT_MIN_MAX_INTRINSIC:
            return call_intrinsic(
                rewriter, FLOAT_MIN_MAX_INTRINSIC[kind], list(op.operands), op.results[0].type
            )
        match op:
            case arith.MaxnumfOp():
                return rewriter.insert(llvm.VectorFMaxOp(op.lhs, op.rhs)).res
            case arith.MinnumfOp():
                return rewriter.insert(llvm.VectorFMinOp(op.lhs, op.rhs)).res
            case arith.NegfOp():
                return rewriter.insert(llvm.FNegOp(op.operand)).res
            case arith.FloorDivSIOp():
                return _floor_div_si(op, rewriter)
            case arith.CmpiOp():
                return rewriter.insert(llvm.ICmpOp(op.lhs, op.rhs, op.predicate)).res
            case arith.CmpfOp():
                return self._cmpf(op, rewriter)
            case arith.SelectOp():
                return rewriter.insert(llvm.SelectOp(op.cond, op.lhs, op.rhs)).res
            case _:
                return _convert_cast(op, rewriter)

    @staticmethod
    def _cmpf(op: arith.CmpfOp, rewriter: PatternRewriter) -> SSAValue:
        flag = llvm.FCmpPredicateFlag.from_int(op.predicate.value.data)
        if flag in (llvm.FCmpPredicateFlag.FALSE, llvm.FCmpPredicateFlag.TRUE):
            value = int(flag == llvm.FCmpPredicateFlag.TRUE)
            return _int_constant(rewriter, value, i1)
        return rewriter.insert(llvm.FCmpOp(op.lhs, op.rhs, op.predicate)).res


def lower_before_type_conversion(root: Operation) -> None:
    rewrite_once(root, ExpandBF16Conversion())
    rewrite_once(root, ConvertArithConstant())


def convert_arith_ops(root: Operation, *, contract: bool = True) -> None:
    rewrite_once(root, ConvertArithOp(contract))


@dataclass(frozen=True)
class ConvertArithToLLVMPass(ModulePass):
    """arith -> llvm: bf16 conversions and constants, then types (index -> i64), then ops."""

    name = "convert-arith-to-llvm"

    contract: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lower_before_type_conversion(op)
        convert_types(op)
        convert_arith_ops(op, contract=self.contract)
