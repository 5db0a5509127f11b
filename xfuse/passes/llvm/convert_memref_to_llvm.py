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
from dataclasses import dataclass, field

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
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)
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


Terms = tuple[tuple[SSAValue, int], ...]
"""A sum of `index * stride` terms, in dim order."""


@dataclass
class AddressArithmetic:
    """The address arithmetic of one walk over a function's accesses in program order, each
    value made once: `index` constants at the top of the function's entry block (which
    dominates every access), and each partial sum of `index * stride` terms, offset cast and
    data pointer where the first access of a block that needs it is, for the accesses after it
    in that block (a thread's vector lanes share all but their last index)."""

    constants: dict[tuple[Block, int], SSAValue] = field(default_factory=lambda: {})
    sums: dict[tuple[Block | None, Terms], SSAValue] = field(default_factory=lambda: {})
    casts: dict[tuple[Block | None, SSAValue, Attribute], SSAValue] = field(
        default_factory=lambda: {}
    )

    def constant(self, rewriter: PatternRewriter, value: int) -> SSAValue:
        top = _entry_block_start(rewriter.current_operation)
        known = self.constants.get((top.block, value))
        if known is None:
            constant = arith.ConstantOp(IntegerAttr(value, IndexType()))
            rewriter.insert_op(constant, top)
            known = self.constants[top.block, value] = constant.result
        return known

    def linear(self, rewriter: PatternRewriter, terms: Terms) -> SSAValue:
        """sum(index * stride for index, stride in `terms`), at least one term."""
        block = rewriter.current_operation.parent_block()
        known = self.sums.get((block, terms))
        if known is not None:
            return known
        *rest, (index, stride) = terms
        term = index
        if stride != 1:
            scale = arith.MuliOp(index, self.constant(rewriter, stride), overflow=_NSW)
            term = rewriter.insert(scale).result
        if rest:
            head = self.linear(rewriter, tuple(rest))
            term = rewriter.insert(arith.AddiOp(head, term, overflow=_NSW)).result
        self.sums[block, terms] = term
        return term

    def cast(self, rewriter: PatternRewriter, value: SSAValue, t: Attribute) -> SSAValue:
        """`value` as a `t` (an index cast to i64, or a memref's data pointer)."""
        block = rewriter.current_operation.parent_block()
        known = self.casts.get((block, value, t))
        if known is None:
            op: Operation = (
                arith.IndexCastOp(value, t)
                if isinstance(value.type, IndexType)
                else UnrealizedConversionCastOp.get([value], [t])
            )
            known = self.casts[block, value, t] = rewriter.insert(op).results[0]
        return known


def element_address(
    rewriter: PatternRewriter,
    buffer: SSAValue,
    indices: Sequence[SSAValue],
    arithmetic: AddressArithmetic | None = None,
) -> SSAValue:
    """The address of `buffer[indices]`: data pointer + sum(index * stride) + offset (its
    arithmetic shared through `arithmetic` with the walk's earlier accesses, where given)."""
    t = buffer.type
    assert isinstance(t, MemRefType)
    strides, offset = _static_layout(t)
    made = AddressArithmetic() if arithmetic is None else arithmetic
    terms: Terms = tuple(zip(indices, strides, strict=True))
    if offset or not terms:
        terms = (*terms, (made.constant(rewriter, offset), 1))
    linear64 = made.cast(rewriter, made.linear(rewriter, terms), i64)
    pointer = made.cast(rewriter, buffer, llvm.LLVMPointerType())
    element = convert_llvm_type(t.element_type)
    gep = llvm.GEPOp(
        pointer, [llvm.GEP_USE_SSA_VAL], element, ssa_indices=[linear64], inbounds=True
    )
    return rewriter.insert(gep).result


def _cast_if_needed(rewriter: PatternRewriter, value: SSAValue, t: Attribute) -> SSAValue:
    if value.type == t:
        return value
    return rewriter.insert(UnrealizedConversionCastOp.get([value], [t])).results[0]


@dataclass
class ConvertLoad(RewritePattern):
    arithmetic: AddressArithmetic = field(default_factory=AddressArithmetic)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: memref.LoadOp, rewriter: PatternRewriter) -> None:
        element = op.res.type
        address = element_address(rewriter, op.memref, op.indices, self.arithmetic)
        stored = convert_llvm_type(element)
        loaded = rewriter.insert(llvm.LoadOp(address, stored, alignment=byte_width(element)))
        rewriter.replace(op, (), (_cast_if_needed(rewriter, loaded.dereferenced_value, element),))


@dataclass
class ConvertStore(RewritePattern):
    arithmetic: AddressArithmetic = field(default_factory=AddressArithmetic)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: memref.StoreOp, rewriter: PatternRewriter) -> None:
        element = op.value.type
        address = element_address(rewriter, op.memref, op.indices, self.arithmetic)
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
    """The memref ops nested in `root`: loads and stores in one walk, in program order, which
    `AddressArithmetic` needs to share their arithmetic."""
    rewrite_once(root, ConvertAlloca())
    arithmetic = AddressArithmetic()
    accesses = GreedyRewritePatternApplier([ConvertLoad(arithmetic), ConvertStore(arithmetic)])
    rewrite_once(root, accesses)


@dataclass(frozen=True)
class ConvertMemRefToLLVMPass(ModulePass):
    """memref.load/store/alloca of static memrefs to llvm pointer arithmetic and memory ops."""

    name = "convert-memref-to-llvm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        convert_memref_ops(op)
