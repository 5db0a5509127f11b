"""
`convert-func-to-llvm`: types and functions to the `llvm` dialect.

- `ConvertLLVMTypes` rewrites the types of values to what LLVM holds them in: `index` -> `i64`,
  `bf16` -> `i16` (its bits; see `ExpandBF16Conversion`), `memref<...>` -> `!llvm.ptr` (the data
  pointer; loads and stores must already be lowered, see `convert-memref-to-llvm`).
- `ConvertFuncToLLVMFunc` turns a `func.func` into an `llvm.func` with the same body; pointer
  arguments are marked `noalias` where the caller promises that buffers do not overlap.
- `ConvertFuncReturn` turns `func.return` into `llvm.return`.

    func.func @k(%a: memref<4xf32>, %n: index)   ->   llvm.func @k(%a: !llvm.ptr {llvm.noalias}, %n: i64)
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    IndexType,
    MemRefType,
    ModuleOp,
    UnitAttr,
    i16,
    i64,
)
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    TypeConversionPattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import Rewriter

from xfuse.ir.names import KERNEL_ATTR


def convert_llvm_type(t: Attribute) -> Attribute:
    """The type LLVM code holds a value of type `t` in."""
    if isinstance(t, IndexType):
        return i64
    if isinstance(t, BFloat16Type):
        return i16
    if isinstance(t, MemRefType):
        return llvm.LLVMPointerType()
    return t


def rewrite_once(root: Operation, pattern: RewritePattern) -> None:
    """Apply `pattern` to every op nested in `root` (one walk; new ops are not revisited)."""
    walker = PatternRewriteWalker(pattern, apply_recursively=False)
    if isinstance(root, ModuleOp):
        walker.rewrite_module(root)
        return
    for region in root.regions:
        walker.rewrite_region(region)


class ConvertLLVMTypes(TypeConversionPattern):
    """Result and block-argument types to LLVM's (not recursive: attributes keep their types)."""

    def convert_type(self, typ: Attribute, /) -> Attribute | None:
        converted = convert_llvm_type(typ)
        return converted if converted != typ else None


def convert_types(root: Operation) -> None:
    """`ConvertLLVMTypes` on everything nested in `root`, and on its own blocks' arguments."""
    rewrite_once(root, ConvertLLVMTypes())
    for region in root.regions:
        for block in region.blocks:
            for arg in block.args:
                if (converted := convert_llvm_type(arg.type)) != arg.type:
                    Rewriter.replace_value_with_new_type(arg, converted)


@dataclass
class ConvertFuncToLLVMFunc(RewritePattern):
    """`func.func` -> `llvm.func`, with `noalias` pointers (kernels only, unless told otherwise)."""

    kernels_only: bool = True
    noalias: bool = True

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.FuncOp, rewriter: PatternRewriter) -> None:
        if self.kernels_only and KERNEL_ATTR not in op.attributes:
            return
        inputs = [convert_llvm_type(t) for t in op.function_type.inputs]
        outputs = [convert_llvm_type(t) for t in op.function_type.outputs]
        if len(outputs) > 1:
            raise ValueError(f"@{op.sym_name.data}: LLVM functions return at most one value")
        output = outputs[0] if outputs else llvm.LLVMVoidType()
        arg_attrs = ArrayAttr(
            [
                DictionaryAttr(
                    {"llvm.noalias": UnitAttr()}
                    if self.noalias and isinstance(t, llvm.LLVMPointerType)
                    else {}
                )
                for t in inputs
            ]
        )
        new = llvm.FuncOp(
            op.sym_name,
            llvm.LLVMFunctionType(inputs, output),
            linkage=llvm.LinkageAttr("external"),
            body=rewriter.move_region_contents_to_new_regions(op.body),
            other_props={"arg_attrs": arg_attrs},
        )
        rewriter.replace(op, new)


class ConvertFuncReturn(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.ReturnOp, rewriter: PatternRewriter) -> None:
        if not isinstance(op.parent_op(), llvm.FuncOp):
            return
        rewriter.replace(op, llvm.ReturnOp(op.arguments[0] if op.arguments else None))


def convert_funcs(root: Operation, *, kernels_only: bool = True, noalias: bool = True) -> None:
    rewrite_once(root, ConvertFuncToLLVMFunc(kernels_only, noalias))
    rewrite_once(root, ConvertFuncReturn())


@dataclass(frozen=True)
class ConvertFuncToLLVMPass(ModulePass):
    """Types (index, bf16, memref) and every `func.func` of the module to the llvm dialect."""

    name = "convert-func-to-llvm"

    noalias: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        convert_types(op)
        convert_funcs(op, kernels_only=False, noalias=self.noalias)
