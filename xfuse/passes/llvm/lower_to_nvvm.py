"""
`lower-to-nvvm`: kernels mapped by `gpu-map-parallel` to the `llvm` dialect for NVPTX.

The generic conversions of `lower-to-llvm` do the work (f16/bf16 computed in f32, scf -> cf,
memref -> pointer arithmetic, arith, cf, func, types); what differs for the GPU is here:

- `math` on floats becomes calls of libdevice's `__nv_*` functions (NVPTX has no libcalls for
  `llvm.exp.f32` and friends); the backend links libdevice in;
- loads and stores that `gpu-map-parallel` marked `xfuse.gpu.align` carry that alignment, so that
  LLVM's load/store vectorizer merges a thread's lanes into 128-bit `ld.global.v4`/`st.global.v4`;
- kernel pointer arguments are `noalias` and 16-byte aligned (the loader checks the pointers);
- rounding f32 to bf16 is one `cvt.rn.bf16.f32` (sm_80 on; what eager's CUDA kernels use),
  not the generic integer expansion of `ExpandBF16Conversion` (about ten instructions, which
  made bf16 channels-last kernels' PTX several times larger and slower to compile);
- a kernel that gathers stops with `llvm.trap` where it reports an index out of range (its
  error flag, `ERROR_FLAG_ATTR`): like eager CUDA's device-side assert, an asynchronous CUDA
  error that the next synchronisation raises (docs/gpu.md).

    %y = math.exp %x : f32   ->   %y = llvm.call @__nv_expf(%x) : (f32) -> f32
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, llvm, math, memref
from xdsl.dialects.builtin import (
    AnyFloat,
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    UnrealizedConversionCastOp,
    f32,
    i16,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint, Rewriter

from xfuse.dialects.mlir_ops import ErfcOp, RemFOp
from xfuse.ir.constants import int_constant
from xfuse.ir.dtypes import bf16_round, byte_width
from xfuse.ir.names import ALIGN_ATTR, ERROR_FLAG_ATTR, LANE_ATTR, STRATEGY_ATTR
from xfuse.passes.llvm.convert_arith_to_llvm import LLVMConversionError
from xfuse.passes.llvm.convert_func_to_llvm import ConvertLLVMTypes, convert_llvm_type, rewrite_once
from xfuse.passes.llvm.convert_math_to_llvm import declare_external
from xfuse.passes.llvm.convert_memref_to_llvm import AddressArithmetic, element_address
from xfuse.passes.llvm.driver import LLVMTarget, PowerRules, lower_kernels

POINTER_ALIGNMENT = 16
"""Bytes of alignment kernels assume for every buffer (torch allocates at 256 or more)."""

LIBDEVICE_FLOAT: dict[type[Operation], str] = {
    math.AbsFOp: "fabs",
    math.AcosOp: "acos",
    math.AcoshOp: "acosh",
    math.AsinOp: "asin",
    math.AsinhOp: "asinh",
    math.Atan2Op: "atan2",
    math.AtanOp: "atan",
    math.AtanhOp: "atanh",
    math.CbrtOp: "cbrt",
    math.CeilOp: "ceil",
    math.CopySignOp: "copysign",
    math.CosOp: "cos",
    math.CoshOp: "cosh",
    math.ErfOp: "erf",
    math.Exp2Op: "exp2",
    math.ExpM1Op: "expm1",
    math.ExpOp: "exp",
    math.FloorOp: "floor",
    math.FmaOp: "fma",
    math.Log10Op: "log10",
    math.Log1pOp: "log1p",
    math.Log2Op: "log2",
    math.LogOp: "log",
    math.PowFOp: "pow",
    math.RoundEvenOp: "rint",
    math.RoundOp: "round",
    math.RsqrtOp: "rsqrt",
    math.SinOp: "sin",
    math.SinhOp: "sinh",
    math.SqrtOp: "sqrt",
    math.TanOp: "tan",
    math.TanhOp: "tanh",
    math.TruncOp: "trunc",
    ErfcOp: "erfc",
    RemFOp: "fmod",  # arith.remf: C's fmod
}
"""math op -> libdevice function of doubles (`__nv_exp`); the float one ends in `f`."""


def libdevice_name(base: str, t: Attribute) -> str:
    bits = t.bitwidth if isinstance(t, AnyFloat) else None
    if bits not in (32, 64):
        raise LLVMConversionError(f"libdevice '{base}' on {t}: expected f32 or f64")
    return f"__nv_{base}" if bits == 64 else f"__nv_{base}f"


def _call(op: Operation, rewriter: PatternRewriter, name: str, args: list[SSAValue]) -> SSAValue:
    result_type = op.results[0].type
    declare_external(op, name, llvm.LLVMFunctionType([a.type for a in args], result_type))
    return rewriter.insert(llvm.CallOp(name, *args, return_type=result_type)).results[0]


class ConvertMathToLibdevice(RewritePattern):
    """Float `math` ops -> calls of libdevice (`math.fpowi` -> `__nv_powi[f]`)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if type(op) in LIBDEVICE_FLOAT:
            name = libdevice_name(LIBDEVICE_FLOAT[type(op)], op.results[0].type)
            rewriter.replace(op, (), (_call(op, rewriter, name, list(op.operands)),))
        elif isinstance(op, math.FPowIOp):
            base, exponent = op.operands
            if isinstance(exponent.type, IntegerType) and exponent.type.width.data != 32:
                exponent = rewriter.insert(llvm.TruncOp(exponent, i32)).res
            name = libdevice_name("powi", op.results[0].type)
            rewriter.replace(op, (), (_call(op, rewriter, name, [base, exponent]),))


def _lane_address(
    rewriter: PatternRewriter,
    op: memref.LoadOp | memref.StoreOp,
    lane: int,
    arithmetic: AddressArithmetic,
) -> SSAValue:
    """`&m[..., j + lane]` as `&m[..., j]` + lane, so that LLVM sees the lanes are adjacent."""
    *outer, last = op.indices
    producer = last.owner
    if isinstance(producer, arith.AddiOp) and int_constant(producer.rhs) == lane:
        base = element_address(rewriter, op.memref, [*outer, producer.lhs], arithmetic)
        element = convert_llvm_type(_element_type(op))
        offset = llvm.GEPOp(base, [lane], element, inbounds=True)
        return rewriter.insert(offset).result
    return element_address(rewriter, op.memref, op.indices, arithmetic)


def _element_type(op: memref.LoadOp | memref.StoreOp) -> Attribute:
    t = op.memref.type
    assert isinstance(t, MemRefType)
    return t.element_type


class RoundToBF16WithCvt(RewritePattern):
    """`arith.truncf` f32 -> bf16 as PTX's `cvt.rn.bf16.f32` (round to nearest even, NaN stays
    NaN), its 16 bits in an `h` register, as eager's `__float2bfloat16` does.

        %b = arith.truncf %x : f32 to bf16
          ->
        %h = llvm.inline_asm "cvt.rn.bf16.f32 $0, $1;", "=h,f" %x : (f32) -> i16
        %b = arith.bitcast %h : i16 to bf16
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: arith.TruncFOp, rewriter: PatternRewriter) -> None:
        if not isinstance(op.result.type, BFloat16Type) or not isinstance(
            op.input.type, Float32Type
        ):
            return
        bits = rewriter.insert(
            llvm.InlineAsmOp("cvt.rn.bf16.f32 $0, $1;", "=h,f", [op.input], [i16])
        ).res
        assert bits is not None
        rewriter.replace(op, arith.BitcastOp(bits, op.result.type))


class RoundTripBF16WithCvt(RewritePattern):
    """f32 rounded to bf16 and read back as f32 (an f16/bf16 op's result that the next op of
    the kernel reads): the rounded value in one `cvt.rn.bf16x2.f32` of the value and 0, whose
    32 bits are bf16(x) in the upper half and bf16(0) = 0 in the lower, i.e. the f32 whose
    value is the rounded one. Otherwise it is a cvt to 16 bits and a shift back (two
    instructions in SASS; the bf16 pointwise chain rounds four times per element).

        %b = arith.truncf %x : f32 to bf16
        %y = arith.extf %b : bf16 to f32
          ->
        %r = llvm.inline_asm "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f" %x, %zero : (f32, f32) -> i32
        %y = arith.bitcast %r : i32 to f32
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: arith.ExtFOp, rewriter: PatternRewriter) -> None:
        trunc = op.input.owner
        if not (
            isinstance(trunc, arith.TruncFOp)
            and isinstance(trunc.result.type, BFloat16Type)
            and isinstance(trunc.input.type, Float32Type)
            and isinstance(op.result.type, Float32Type)
        ):
            return
        source = trunc.input.owner
        if isinstance(source, arith.ConstantOp) and isinstance(source.value, FloatAttr):
            rounded = FloatAttr(float(bf16_round(source.value.value.data)), f32)
            rewriter.replace(op, arith.ConstantOp(rounded))  # a bf16 constant: folded here
            return
        zero = rewriter.insert(arith.ConstantOp(FloatAttr(0.0, f32))).result
        asm = llvm.InlineAsmOp(
            "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f", [trunc.input, zero], [i32]
        )
        bits = rewriter.insert(asm).res
        assert bits is not None
        rewriter.replace(op, arith.BitcastOp(bits, f32))
        if not trunc.result.uses:
            rewriter.erase(trunc)


def _after_cf(kernel: func.FuncOp) -> None:
    rewrite_once(kernel, ConvertVectorLaneAccess())
    rewrite_once(kernel, RoundTripBF16WithCvt())
    rewrite_once(kernel, RoundToBF16WithCvt())


@dataclass
class ConvertVectorLaneAccess(RewritePattern):
    """Loads and stores of a thread's vector lanes (`xfuse.gpu.align` on the first lane,
    `xfuse.gpu.lane` on the others) -> llvm, adjacent and aligned so that LLVM's load/store
    vectorizer merges them into one 128-bit access."""

    arithmetic: AddressArithmetic = field(default_factory=AddressArithmetic)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, memref.LoadOp | memref.StoreOp):
            return
        align_attr = op.attributes.get(ALIGN_ATTR)
        lane_attr = op.attributes.get(LANE_ATTR)
        if align_attr is None and lane_attr is None:
            return
        element = _element_type(op)
        align = byte_width(element)
        if isinstance(align_attr, IntegerAttr):
            align = align_attr.value.data
            address = element_address(rewriter, op.memref, op.indices, self.arithmetic)
        else:
            assert isinstance(lane_attr, IntegerAttr)
            address = _lane_address(rewriter, op, lane_attr.value.data, self.arithmetic)
        held = convert_llvm_type(element)  # bf16 is held in i16
        if isinstance(op, memref.LoadOp):
            loaded = rewriter.insert(llvm.LoadOp(address, held, alignment=align))
            value = _cast(rewriter, loaded.dereferenced_value, element)
            rewriter.replace(op, (), (value,))
        else:
            value = _cast(rewriter, op.value, held)
            rewriter.replace(op, llvm.StoreOp(value, address, alignment=align))


def _cast(rewriter: PatternRewriter, value: SSAValue, t: Attribute) -> SSAValue:
    if value.type == t:
        return value
    return rewriter.insert(UnrealizedConversionCastOp.get([value], [t])).results[0]


@dataclass
class AlignKernelPointers(RewritePattern):
    """Pointer arguments of converted kernels assume `POINTER_ALIGNMENT` bytes."""

    kernels: frozenset[str]

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: llvm.FuncOp, rewriter: PatternRewriter) -> None:
        if op.sym_name.data not in self.kernels or op.arg_attrs is None:
            return
        attrs = []
        for t, old in zip(op.function_type.inputs, op.arg_attrs.data, strict=True):
            entries = dict(old.data)
            if isinstance(t, llvm.LLVMPointerType):
                entries["llvm.align"] = IntegerAttr(POINTER_ALIGNMENT, i64)
            attrs.append(DictionaryAttr(entries))
        op.arg_attrs = ArrayAttr(attrs)


def _convert_block_argument_types(kernel: func.FuncOp) -> None:
    """Arguments of the blocks that scf -> cf left in the kernel's own region (loop indices):
    `ConvertLLVMTypes` converts those of the regions of the ops it visits, not the kernel's.
    Of the entry block, the `index` size arguments of a kernel with symbolic sizes become
    i64 (its buffers stay memrefs until `_align_pointers`)."""
    for block in list(kernel.body.blocks)[1:]:
        for arg in list(block.args):
            converted = convert_llvm_type(arg.type)
            if converted != arg.type:
                Rewriter.replace_value_with_new_type(arg, converted)
    for arg in list(kernel.body.blocks[0].args):
        if isinstance(arg.type, IndexType):
            Rewriter.replace_value_with_new_type(arg, i64)


def _check_mapped(kernel: func.FuncOp) -> None:
    if STRATEGY_ATTR not in kernel.attributes:
        raise LLVMConversionError(
            f"@{kernel.sym_name.data}: run gpu-map-parallel before lower-to-nvvm"
        )


TRAP = "llvm.trap"


def _trap_on_bad_index(kernel: func.FuncOp) -> None:
    """After each store to the error flag (the kernel's last argument), `llvm.trap`: a bad
    index stops the kernel, as eager's device-side assert does, instead of going on with the
    clamped index (a CUDA kernel's flag is never read back: that would synchronise)."""
    if ERROR_FLAG_ATTR not in kernel.attributes:
        return
    flag = kernel.body.block.args[-1]
    for op in list(kernel.walk()):
        if isinstance(op, memref.StoreOp) and op.memref == flag:
            declare_external(op, TRAP, llvm.LLVMFunctionType([]))
            Rewriter.insert_op(llvm.CallOp(TRAP), InsertPoint.after(op))


def _check_and_trap(kernel: func.FuncOp) -> None:
    _check_mapped(kernel)
    _trap_on_bad_index(kernel)


def _convert_kernel_types(kernel: func.FuncOp) -> None:
    rewrite_once(kernel, ConvertLLVMTypes())
    _convert_block_argument_types(kernel)


def _align_pointers(module: ModuleOp, kernels: list[str]) -> None:
    # The kernels' entry-block arguments are still memrefs: now pointers too.
    rewrite_once(module, ConvertLLVMTypes())
    rewrite_once(module, AlignKernelPointers(frozenset(kernels)))


NVVM_TARGET = LLVMTarget(
    check_kernel=_check_and_trap,
    math=lambda kernel: rewrite_once(kernel, ConvertMathToLibdevice()),
    after_cf=_after_cf,
    convert_types=_convert_kernel_types,
    finish_module=_align_pointers,
    powers=PowerRules(rounds_each=frozenset({BFloat16Type, Float16Type})),
)
"""Eager's CUDA pow kernel rounds f16 and bf16 products after each product (its `Half` and
`BFloat16` operators), and runs 0.5, -0.5 and -1 as sqrt, rsqrt and reciprocal for every type
(checked bit for bit on an H200: tests/backends/test_cuda.py)."""


def lower_kernels_to_nvvm(module: ModuleOp) -> list[str]:
    """Lower every mapped `xfuse.kernel` function to an `llvm.func`; returns their names."""
    return lower_kernels(module, NVVM_TARGET)


@dataclass(frozen=True)
class LowerToNVVMPass(ModulePass):
    """GPU-mapped kernels to the llvm dialect with NVVM intrinsics and libdevice calls."""

    name = "lower-to-nvvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lower_kernels_to_nvvm(op)
