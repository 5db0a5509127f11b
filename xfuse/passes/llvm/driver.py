"""
The kernel-to-LLVM driver that `lower-to-llvm` (CPU) and `lower-to-nvvm` (CUDA) share: one
sequence of steps over every `xfuse.kernel` function, with the steps that differ by target
given by an `LLVMTarget`.

1. `prepare_module`: the target's own preparation of the module (CPU: `[lo, hi)` range
   arguments; CUDA: a check that `gpu-map-parallel` ran);
2. f16/bf16 arithmetic and math computed in f32 (`PromoteLowPrecisionFloatOp`), bf16 constants
   as rounded f32 ones;
3. `math`: math functions (CPU: vectorizable expansions; CUDA: libdevice calls);
4. `convert-scf-to-cf`, then `after_cf` (CUDA: vector lane accesses), then
   `convert-memref-to-llvm`;
5. arith constants and bf16 conversions, `convert_types` (index -> i64, bf16 -> i16, memref ->
   ptr), then `arith` (FMA contraction if `contract`), `math`, `cf` and `func` ops;
6. `finish_module` (CUDA: pointer alignment), then `reconcile-unrealized-casts`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import BFloat16Type, Float16Type, FloatAttr, ModuleOp, f32
from xdsl.ir import Attribute, Operation
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.transforms.convert_scf_to_cf import ForLowering, IfLowering, SwitchLowering
from xdsl.transforms.reconcile_unrealized_casts import reconcile_unrealized_casts

from xfuse.ir.names import KERNEL_ATTR
from xfuse.passes.llvm.convert_arith_to_llvm import convert_arith_ops, lower_before_type_conversion
from xfuse.passes.llvm.convert_cf_to_llvm import convert_cf_ops
from xfuse.passes.llvm.convert_func_to_llvm import convert_funcs, rewrite_once
from xfuse.passes.llvm.convert_math_to_llvm import convert_math_ops
from xfuse.passes.llvm.convert_memref_to_llvm import convert_memref_ops

KernelStep = Callable[[func.FuncOp], None]


def _nothing(_: object) -> None:
    return None


def _finish_nothing(module: ModuleOp, kernels: list[str]) -> None:
    return None


@dataclass(frozen=True)
class LLVMTarget:
    """What differs between targets in `lower_kernels` (see the module docstring)."""

    prepare_module: Callable[[ModuleOp], None] = _nothing
    check_kernel: KernelStep = _nothing
    math: KernelStep = _nothing
    after_cf: KernelStep = _nothing
    convert_types: KernelStep = _nothing
    contract: bool = True
    finish_module: Callable[[ModuleOp, list[str]], None] = _finish_nothing


def kernel_functions(module: ModuleOp) -> list[func.FuncOp]:
    """The module's top-level `xfuse.kernel` functions, in order."""
    return [op for op in module.ops if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes]


def lower_kernels(module: ModuleOp, target: LLVMTarget) -> list[str]:
    """Lower every kernel of `module` to an `llvm.func` for `target`; returns their names."""
    target.prepare_module(module)
    kernels = kernel_functions(module)
    for kernel in kernels:
        target.check_kernel(kernel)
        rewrite_once(kernel, PromoteLowPrecisionFloatOp())
        target.math(kernel)
        PatternRewriteWalker(
            GreedyRewritePatternApplier([SwitchLowering(), IfLowering(), ForLowering()])
        ).rewrite_region(kernel.body)
        target.after_cf(kernel)
        convert_memref_ops(kernel)
        lower_before_type_conversion(kernel)
        target.convert_types(kernel)
        convert_arith_ops(kernel, contract=target.contract)
        convert_math_ops(kernel)
        convert_cf_ops(kernel)
    names = [k.sym_name.data for k in kernels]
    convert_funcs(module, kernels_only=True)
    target.finish_module(module, names)
    reconcile_unrealized_casts(module)
    return names


# ---------------------------------------------------------------------------------------------
# Every target: f16/bf16 compute in f32
# ---------------------------------------------------------------------------------------------

_LOW_PRECISION = (Float16Type, BFloat16Type)


def _is_low_precision(t: Attribute) -> bool:
    return isinstance(t, _LOW_PRECISION)


def _computes_in_float(op: Operation) -> bool:
    if isinstance(op, arith.FloatingPointLikeBinaryOperation | arith.NegfOp | arith.CmpfOp):
        return True
    return op.dialect_name() == "math"


class PromoteLowPrecisionFloatOp(RewritePattern):
    """An f16/bf16 arith or math op -> the same op on f32 operands, its result truncated back."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, arith.ConstantOp) and isinstance(op.result.type, BFloat16Type):
            assert isinstance(op.value, FloatAttr)
            wide = rewriter.insert(arith.ConstantOp(FloatAttr(op.value.value.data, f32)))
            rewriter.replace(op, arith.TruncFOp(wide.result, op.result.type))
            return
        if not _computes_in_float(op) or not any(_is_low_precision(v.type) for v in op.operands):
            return
        operands = [
            rewriter.insert(arith.ExtFOp(v, f32)).result if _is_low_precision(v.type) else v
            for v in op.operands
        ]
        result_types = [f32 if _is_low_precision(r.type) else r.type for r in op.results]
        wide_op = rewriter.insert(
            type(op).create(
                operands=operands,
                result_types=result_types,
                properties=dict(op.properties),
                attributes=dict(op.attributes),
            )
        )
        results = [
            rewriter.insert(arith.TruncFOp(new, old.type)).result if new.type != old.type else new
            for new, old in zip(wide_op.results, op.results, strict=True)
        ]
        rewriter.replace(op, (), results)
