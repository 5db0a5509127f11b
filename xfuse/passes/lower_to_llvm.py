"""
`lower-to-llvm{target=cpu}`: xfuse's kernels (loop IR, docs/contracts.md) to the `llvm` dialect.

Only functions carrying `xfuse.kernel` are lowered; `@forward` stays as it is (the runtime
interprets it). For each kernel:

1. the target's preparation. cpu: the outermost dimension of the kernel's `scf.parallel` runs
   over new leading arguments `[lo, hi)` so that a thread pool can split it, the other parallel
   dimensions become nested `scf.for`s, and a constant global `@<kernel>.extent` holds the full
   trip count of the split dimension and `@<kernel>.arity` the number of buffers (the loader
   reads both);
2. f16/bf16 arithmetic and math are computed in f32 (what torch does on CPUs), bf16 constants
   become rounded f32 ones;
3. `expand-math` (vectorizable exp, log, tanh, erf, sin, cos, ...);
4. `convert-scf-to-cf`, `convert-memref-to-llvm`;
5. arith constants and bf16 conversions, then types (index -> i64, bf16 -> i16, memref -> ptr),
   then `arith`, `math`, `cf` and `func` ops;
6. `reconcile-unrealized-casts`.

Steps 2-6 are target-independent; a target adds itself to `TARGET_PREPARATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, llvm, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    ModuleOp,
    UnitAttr,
    f32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint
from xdsl.transforms.convert_scf_to_cf import ForLowering, IfLowering, SwitchLowering
from xdsl.transforms.reconcile_unrealized_casts import reconcile_unrealized_casts
from xdsl.utils.exceptions import DiagnosticException, PassFailedException

from xfuse.passes.convert_arith_to_llvm import convert_arith_ops, lower_before_type_conversion
from xfuse.passes.convert_cf_to_llvm import convert_cf_ops
from xfuse.passes.convert_func_to_llvm import (
    KERNEL_ATTR,
    convert_funcs,
    convert_types,
    rewrite_once,
)
from xfuse.passes.convert_math_to_llvm import convert_math_ops
from xfuse.passes.convert_memref_to_llvm import convert_memref_ops
from xfuse.passes.expand_math import expand_math

RANGE_ARGS_ATTR = "xfuse.range_args"
"""Set on a kernel whose first two arguments are the `[lo, hi)` range of its parallel loop."""


def extent_symbol(kernel_name: str) -> str:
    """The constant i64 global holding the trip count that `[lo, hi)` divides."""
    return f"{kernel_name}.extent"


def arity_symbol(kernel_name: str) -> str:
    """The constant i64 global holding the number of buffer (pointer) arguments."""
    return f"{kernel_name}.arity"


# ---------------------------------------------------------------------------------------------
# cpu: the first parallel dimension -> [lo, hi) arguments
# ---------------------------------------------------------------------------------------------


def _constant_index(value: SSAValue) -> int | None:
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


def _nest_of_fors(
    bounds: list[tuple[SSAValue, SSAValue, SSAValue]], rewriter: PatternRewriter
) -> tuple[scf.ForOp, Block, list[SSAValue]]:
    """Nested `scf.for`s over `bounds`: (outermost loop, innermost body, induction variables)."""
    outer: scf.ForOp | None = None
    block: Block | None = None
    ivs: list[SSAValue] = []
    for lb, ub, step in bounds:
        body = Block(arg_types=[IndexType()])
        loop = scf.ForOp(lb, ub, step, [], body)
        if block is None:
            outer = loop
        else:
            block.add_ops((loop, scf.YieldOp()))
        block = body
        ivs.append(body.args[0])
    assert outer is not None and block is not None
    return outer, block, ivs


@dataclass
class ParallelLoopToRangeArgs(RewritePattern):
    """A kernel's `scf.parallel` -> `scf.for %i = %lo to %hi` around `scf.for`s of the rest."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.FuncOp, rewriter: PatternRewriter) -> None:
        if KERNEL_ATTR not in op.attributes or RANGE_ARGS_ATTR in op.attributes:
            return
        entry = op.body.blocks[0]
        lo = rewriter.insert_block_argument(entry, 0, IndexType())
        hi = rewriter.insert_block_argument(entry, 1, IndexType())
        lo.name_hint, hi.name_hint = "lo", "hi"
        op.function_type = func.FunctionType.from_lists(
            [IndexType(), IndexType(), *op.function_type.inputs], op.function_type.outputs
        )
        if op.arg_attrs is not None:
            op.arg_attrs = type(op.arg_attrs)([DictionaryAttr({})] * 2 + list(op.arg_attrs))
        op.attributes[RANGE_ARGS_ATTR] = UnitAttr()
        loops = [o for o in entry.ops if isinstance(o, scf.ParallelOp)]
        if len(loops) > 1:
            raise DiagnosticException(
                f"@{op.sym_name.data}: expected one scf.parallel, found {len(loops)}"
            )
        extent = self._split(loops[0], lo, hi, rewriter) if loops else 1
        arity = len(op.function_type.inputs) - 2
        self._add_global(op, arity_symbol(op.sym_name.data), arity, rewriter)
        self._add_global(op, extent_symbol(op.sym_name.data), extent, rewriter)

    @staticmethod
    def _split(loop: scf.ParallelOp, lo: SSAValue, hi: SSAValue, rewriter: PatternRewriter) -> int:
        if loop.res:
            raise DiagnosticException("scf.parallel with reductions is not supported")
        lb0 = _constant_index(loop.lowerBound[0])
        ub0 = _constant_index(loop.upperBound[0])
        step0 = _constant_index(loop.step[0])
        if lb0 != 0 or step0 != 1 or ub0 is None:
            raise DiagnosticException(
                "expected the first parallel dimension to run from 0 by 1 to a constant"
            )
        bounds = [(lo, hi, loop.step[0])]
        bounds += list(zip(loop.lowerBound[1:], loop.upperBound[1:], loop.step[1:], strict=True))
        outer, innermost, ivs = _nest_of_fors(bounds, rewriter)
        rewriter.insert(outer, InsertPoint.before(loop))
        body = loop.body.block
        reduce = body.last_op
        assert isinstance(reduce, scf.ReduceOp)
        rewriter.erase(reduce)
        rewriter.inline_block(body, InsertPoint.at_end(innermost), ivs)
        innermost.add_op(scf.YieldOp())
        rewriter.erase(loop)
        return ub0

    @staticmethod
    def _add_global(op: func.FuncOp, name: str, value: int, rewriter: PatternRewriter) -> None:
        glob = llvm.GlobalOp(
            i64, name, llvm.LinkageAttr("external"), constant=True, value=IntegerAttr(value, i64)
        )
        rewriter.insert(glob, InsertPoint.after(op))


def prepare_cpu_kernels(module: ModuleOp) -> None:
    rewrite_once(module, ParallelLoopToRangeArgs())


TARGET_PREPARATIONS: dict[str, Callable[[ModuleOp], None]] = {"cpu": prepare_cpu_kernels}

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


# ---------------------------------------------------------------------------------------------
# The pipeline
# ---------------------------------------------------------------------------------------------


def _lower_kernel_body(kernel: func.FuncOp, *, contract: bool) -> None:
    rewrite_once(kernel, PromoteLowPrecisionFloatOp())
    expand_math(kernel)
    PatternRewriteWalker(
        GreedyRewritePatternApplier([SwitchLowering(), IfLowering(), ForLowering()])
    ).rewrite_region(kernel.body)
    convert_memref_ops(kernel)
    lower_before_type_conversion(kernel)
    convert_types(kernel)
    convert_arith_ops(kernel, contract=contract)
    convert_math_ops(kernel)
    convert_cf_ops(kernel)


def lower_kernels_to_llvm(module: ModuleOp, target: str = "cpu", *, contract: bool = True) -> None:
    """Lower every `xfuse.kernel` function of `module` to `llvm.func` for `target`."""
    if target not in TARGET_PREPARATIONS:
        known = ", ".join(sorted(TARGET_PREPARATIONS))
        raise PassFailedException(f"lower-to-llvm: unknown target '{target}' (expected {known})")
    TARGET_PREPARATIONS[target](module)
    kernels = [
        op for op in module.ops if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes
    ]
    for kernel in kernels:
        _lower_kernel_body(kernel, contract=contract)
    convert_funcs(module, kernels_only=True)
    reconcile_unrealized_casts(module)


@dataclass(frozen=True)
class LowerToLLVMPass(ModulePass):
    """Kernels of loop IR to the llvm dialect, ready for `xdsl.backend.llvm.convert`."""

    name = "lower-to-llvm"

    target: str = "cpu"
    """What the kernels are for: "cpu" (`[lo, hi)` range arguments)."""

    contract: bool = True
    """Allow LLVM to contract a*b+c into FMAs."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lower_kernels_to_llvm(op, self.target, contract=self.contract)
