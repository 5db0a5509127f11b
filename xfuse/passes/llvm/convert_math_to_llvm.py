"""
`convert-math-to-llvm`: `math` ops to LLVM intrinsics (`llvm.call_intrinsic`), or to calls of
the C math library where LLVM has no intrinsic (erf, expm1, log1p, cbrt, asinh, acosh, atanh).

Intrinsics such as `llvm.exp.f32` become scalar libm calls in the backend, which the loop
vectorizer cannot vectorize: run `expand-math` first for the f32 functions it knows.

    %y = math.floor %x : f32   ->   %y = llvm.call_intrinsic "llvm.floor.f32"(%x) : (f32) -> f32
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import llvm, math
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp, i1
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.traits import SymbolTable

from xfuse.dialects.mlir_ops import ErfcOp
from xfuse.passes.llvm.convert_arith_to_llvm import LLVMConversionError, call_intrinsic
from xfuse.passes.llvm.convert_func_to_llvm import rewrite_once

FLOAT_INTRINSICS: dict[type[Operation], str] = {
    math.AbsFOp: "llvm.fabs",
    math.CeilOp: "llvm.ceil",
    math.FloorOp: "llvm.floor",
    math.TruncOp: "llvm.trunc",
    math.RoundOp: "llvm.round",
    math.RoundEvenOp: "llvm.roundeven",
    math.SqrtOp: "llvm.sqrt",
    math.ExpOp: "llvm.exp",
    math.Exp2Op: "llvm.exp2",
    math.LogOp: "llvm.log",
    math.Log2Op: "llvm.log2",
    math.Log10Op: "llvm.log10",
    math.SinOp: "llvm.sin",
    math.CosOp: "llvm.cos",
    math.TanOp: "llvm.tan",
    math.SinhOp: "llvm.sinh",
    math.CoshOp: "llvm.cosh",
    math.TanhOp: "llvm.tanh",
    math.AsinOp: "llvm.asin",
    math.AcosOp: "llvm.acos",
    math.AtanOp: "llvm.atan",
    math.Atan2Op: "llvm.atan2",
    math.PowFOp: "llvm.pow",
    math.CopySignOp: "llvm.copysign",
    math.FmaOp: "llvm.fma",
}

INT_INTRINSICS_WITH_POISON_FLAG: dict[type[Operation], str] = {
    math.AbsIOp: "llvm.abs",
    math.CountLeadingZerosOp: "llvm.ctlz",
    math.CountTrailingZerosOp: "llvm.cttz",
}

LIBM_FUNCTIONS: dict[type[Operation], str] = {
    math.ErfOp: "erf",
    math.ExpM1Op: "expm1",
    math.Log1pOp: "log1p",
    math.CbrtOp: "cbrt",
    math.AsinhOp: "asinh",
    math.AcoshOp: "acosh",
    math.AtanhOp: "atanh",
    ErfcOp: "erfc",
}
"""C names of the double versions; float versions end in `f`."""


def declare_external(op: Operation, name: str, function_type: llvm.LLVMFunctionType) -> None:
    """Declare `@name` at the top of the module holding `op` unless it is there."""
    module = op.get_toplevel_object()
    if not isinstance(module, ModuleOp) or SymbolTable.lookup_symbol(module, name) is not None:
        return
    declaration = llvm.FuncOp(name, function_type, linkage=llvm.LinkageAttr("external"))
    module.body.block.add_op(declaration)


@dataclass
class ConvertMathOp(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if op.dialect_name() != "math":
            return
        result = self._convert(op, rewriter)
        rewriter.replace(op, (), (result,))

    @staticmethod
    def _convert(op: Operation, rewriter: PatternRewriter) -> SSAValue:
        kind = type(op)
        result_type = op.results[0].type
        if kind in FLOAT_INTRINSICS:
            return call_intrinsic(rewriter, FLOAT_INTRINSICS[kind], list(op.operands), result_type)
        if kind is math.CtPopOp:
            return call_intrinsic(rewriter, "llvm.ctpop", list(op.operands), result_type)
        if kind in INT_INTRINSICS_WITH_POISON_FLAG:
            no_poison = rewriter.insert(llvm.ConstantOp(IntegerAttr(0, i1), i1)).result
            args = [op.operands[0], no_poison]
            return call_intrinsic(
                rewriter, INT_INTRINSICS_WITH_POISON_FLAG[kind], args, result_type
            )
        if kind is math.RsqrtOp:
            root = call_intrinsic(rewriter, "llvm.sqrt", [op.operands[0]], result_type)
            # rsqrt's result type is a float type, the type parameter xDSL's FloatAttr wants.
            one_attr = FloatAttr(1.0, result_type)  # type: ignore[call-overload]
            one = rewriter.insert(llvm.ConstantOp(one_attr, result_type))
            return rewriter.insert(llvm.FDivOp(one.result, root)).res
        if kind in LIBM_FUNCTIONS:
            return _call_libm(op, rewriter, LIBM_FUNCTIONS[kind])
        raise LLVMConversionError(f"no LLVM conversion for {op.name}")


def _call_libm(op: Operation, rewriter: PatternRewriter, double_name: str) -> SSAValue:
    result_type = op.results[0].type
    bits = getattr(result_type, "bitwidth", None)
    if bits not in (32, 64):
        raise LLVMConversionError(f"{op.name} on {result_type}: expected f32 or f64")
    name = double_name if bits == 64 else double_name + "f"
    declare_external(op, name, llvm.LLVMFunctionType([result_type], result_type))
    call = rewriter.insert(llvm.CallOp(name, op.operands[0], return_type=result_type))
    return call.results[0]


def convert_math_ops(root: Operation) -> None:
    rewrite_once(root, ConvertMathOp())


@dataclass(frozen=True)
class ConvertMathToLLVMPass(ModulePass):
    """math -> llvm intrinsics and libm calls (after bf16/f16 promotion and `expand-math`)."""

    name = "convert-math-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        convert_math_ops(op)
