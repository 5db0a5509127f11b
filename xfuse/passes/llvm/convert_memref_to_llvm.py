"""
`convert-memref-to-llvm`: loads and stores of statically shaped, statically strided memrefs
to `llvm.getelementptr` + `llvm.load`/`llvm.store` on the buffer's data pointer, and
`memref.alloca` to an `llvm.alloca` in the function's entry block (once per call, not once per
loop iteration).

A memref value becomes its data pointer through `builtin.unrealized_conversion_cast`; once
`convert-func-to-llvm` has turned memref arguments into `!llvm.ptr`, the casts reconcile away.
Index arithmetic is emitted in `arith` on `index` (no-wrap flags: buffers are smaller than 2^63),
so the arith and type conversions that follow lower it.

    %v = memref.load %m[%i, %j] : memref<4x8xf32>
  ->
    %p = builtin.unrealized_conversion_cast %m : memref<4x8xf32> to !llvm.ptr
    %o = arith.muli %i, %c8 overflow<nsw> : index   (+ %j, then index_cast to i64)
    %a = llvm.getelementptr inbounds %p[%o] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %v = llvm.load %a {alignment = 4 : i64} : !llvm.ptr -> f32
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, llvm, memref
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    NoneAttr,
    UnrealizedConversionCastOp,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import DiagnosticException

from xfuse.ir.dtypes import byte_width
from xfuse.passes.llvm.convert_func_to_llvm import convert_llvm_type, rewrite_once

_NSW = arith.IntegerOverflowAttr([arith.IntegerOverflowFlag.NSW])


def _static_layout(t: MemRefType[Attribute]) -> tuple[Sequence[int], int]:
    if t.get_shape() == (DYNAMIC_INDEX,) and isinstance(t.layout, NoneAttr):
        return [1], 0  # a kernel's buffer of symbolic size (docs/dynamic-shapes.md)
    strides = t.get_strides()
    offset = t.get_offset()
    if strides is None or offset is None or any(s is None for s in strides):
        raise DiagnosticException(f"only static strides and offsets are supported, found {t}")
    if any(d < 0 for d in t.get_shape()):
        raise DiagnosticException(f"only static shapes are supported, found {t}")
    return [s for s in strides if s is not None], offset


def _index_constant(rewriter: PatternRewriter, value: int) -> SSAValue:
    return rewriter.insert(arith.ConstantOp(IntegerAttr(value, IndexType()))).result


def element_address(
    rewriter: PatternRewriter, buffer: SSAValue, indices: Sequence[SSAValue]
) -> SSAValue:
    """The address of `buffer[indices]`: data pointer + sum(index * stride) + offset."""
    t = buffer.type
    assert isinstance(t, MemRefType)
    strides, offset = _static_layout(t)
    linear: SSAValue | None = None
    for index, stride in zip(indices, strides, strict=True):
        term = index
        if stride != 1:
            term = rewriter.insert(
                arith.MuliOp(index, _index_constant(rewriter, stride), overflow=_NSW)
            ).result
        linear = (
            term
            if linear is None
            else rewriter.insert(arith.AddiOp(linear, term, overflow=_NSW)).result
        )
    if offset or linear is None:
        offset_value = _index_constant(rewriter, offset)
        linear = (
            offset_value
            if linear is None
            else rewriter.insert(arith.AddiOp(linear, offset_value, overflow=_NSW)).result
        )
    linear64 = rewriter.insert(arith.IndexCastOp(linear, i64)).result
    pointer = rewriter.insert(
        UnrealizedConversionCastOp.get([buffer], [llvm.LLVMPointerType()])
    ).results[0]
    element = convert_llvm_type(t.element_type)
    gep = llvm.GEPOp(
        pointer, [llvm.GEP_USE_SSA_VAL], element, ssa_indices=[linear64], inbounds=True
    )
    return rewriter.insert(gep).result


def _cast_if_needed(rewriter: PatternRewriter, value: SSAValue, t: Attribute) -> SSAValue:
    if value.type == t:
        return value
    return rewriter.insert(UnrealizedConversionCastOp.get([value], [t])).results[0]


class ConvertLoad(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: memref.LoadOp, rewriter: PatternRewriter) -> None:
        element = op.res.type
        address = element_address(rewriter, op.memref, op.indices)
        stored = convert_llvm_type(element)
        loaded = rewriter.insert(llvm.LoadOp(address, stored, alignment=byte_width(element)))
        rewriter.replace(op, (), (_cast_if_needed(rewriter, loaded.dereferenced_value, element),))


class ConvertStore(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: memref.StoreOp, rewriter: PatternRewriter) -> None:
        element = op.value.type
        address = element_address(rewriter, op.memref, op.indices)
        value = _cast_if_needed(rewriter, op.value, convert_llvm_type(element))
        rewriter.replace(op, llvm.StoreOp(value, address, alignment=byte_width(element)))


def _entry_block_start(op: Operation) -> InsertPoint:
    top = op
    while (parent := top.parent_op()) is not None and not isinstance(parent, ModuleOp):
        top = parent
    return InsertPoint.at_start(top.regions[0].blocks[0])


class ConvertAlloca(RewritePattern):
    """A static `memref.alloca` -> `llvm.alloca` at the top of the function."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: memref.AllocaOp, rewriter: PatternRewriter) -> None:
        t = op.memref.type
        _static_layout(t)
        count = 1
        for d in t.get_shape():
            count *= d
        where = _entry_block_start(op)
        size = llvm.ConstantOp(IntegerAttr(count, i64), i64)
        alloca = llvm.AllocaOp(size, convert_llvm_type(t.element_type), alignment=64)
        rewriter.insert((size, alloca), where)
        rewriter.replace(op, UnrealizedConversionCastOp.get([alloca.res], [t]))


def convert_memref_ops(root: Operation) -> None:
    for pattern in (ConvertAlloca(), ConvertLoad(), ConvertStore()):
        rewrite_once(root, pattern)


@dataclass(frozen=True)
class ConvertMemRefToLLVMPass(ModulePass):
    """memref.load/store/alloca of static memrefs to llvm pointer arithmetic and memory ops."""

    name = "convert-memref-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        convert_memref_ops(op)
