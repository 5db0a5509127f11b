"""
The kernel-to-LLVM driver that `lower-to-llvm` (CPU) and `lower-to-nvvm` (CUDA) share: one
sequence of steps over every `xfuse.kernel` function, with the steps that differ by target
given by an `LLVMTarget`.

1. `prepare_module`: the target's own preparation of the module (CPU: `[lo, hi)` range
   arguments; CUDA: a check that `gpu-map-parallel` ran);
2. small constant powers as eager's pow kernels compute them (`SmallPowerAsProducts`: `x ** 3`
   is `x * x * x`, `x ** -0.5` an rsqrt), then f16/bf16 arithmetic and math computed in f32
   (`PromoteLowPrecisionFloatOp`), bf16 constants as rounded f32 ones;
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

from xdsl.dialects import arith, func, math
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    ModuleOp,
    f32,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.transforms.convert_scf_to_cf import ForLowering, IfLowering, SwitchLowering
from xdsl.transforms.reconcile_unrealized_casts import reconcile_unrealized_casts

from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import TIES_KEEP_FIRST_ATTR
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
class PowerRules:
    """How eager's `pow(Tensor, Scalar)` kernel on a target computes the small constant powers
    it special-cases (`SMALL_POWERS`; `SmallPowerAsProducts` follows it): the f16/bf16 types
    whose products (`x ** 3`, `x ** -2`) round after each product, not once; and the types
    for which 0.5, -0.5 and -1 call pow rather than sqrt, rsqrt and reciprocal."""

    rounds_each: frozenset[type[Attribute]] = frozenset()
    roots_call_pow: frozenset[type[Attribute]] = frozenset()


@dataclass(frozen=True)
class LLVMTarget:
    """What differs between targets in `lower_kernels` (see the module docstring)."""

    prepare_module: Callable[[ModuleOp], None] = _nothing
    check_kernel: KernelStep = _nothing
    math: KernelStep = _nothing
    after_cf: KernelStep = _nothing
    convert_types: KernelStep = _nothing
    contract: bool = False
    """Let LLVM contract `a * b + c` into one FMA (one rounding). Off for both targets: eager
    rounds each op's result, so a fused `x * w + b` rounds twice (docs/contracts.md)."""
    powers: PowerRules = PowerRules()
    """How eager's pow kernel of the target computes small constant powers."""
    ties_keep_first: bool = False
    """Eager's elementwise max and min on this target keep their first operand where -0.0 and
    +0.0 tie (the CPU's `a < b ? b : a`; CUDA's are IEEE maximum and minimum): the ops marked
    `TIES_KEEP_FIRST_ATTR` become compare-and-select (`TiesKeepFirst`)."""
    finish_module: Callable[[ModuleOp, list[str]], None] = _finish_nothing


def lower_kernels(module: ModuleOp, target: LLVMTarget) -> list[str]:
    """Lower every kernel of `module` to an `llvm.func` for `target`; returns their names."""
    target.prepare_module(module)
    kernels = kernel_functions(module)
    for kernel in kernels:
        target.check_kernel(kernel)
        rewrite_once(kernel, SmallPowerAsProducts(target.powers))
        rewrite_once(kernel, PromoteLowPrecisionFloatOp())
        if target.ties_keep_first:
            rewrite_once(kernel, TiesKeepFirst())
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


class TiesKeepFirst(RewritePattern):
    """A marked `maximumf(a, b)` -> `a < b or b is NaN ? b : a` (`minimumf`: `a > b`): NaN from
    either side propagates, and a tie of -0.0 and +0.0 keeps `a`, as eager's CPU kernels
    (relu of -0.0 is -0.0 there; IEEE's maximum gives +0.0)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, arith.MaximumfOp | arith.MinimumfOp):
            return
        if TIES_KEEP_FIRST_ATTR not in op.attributes:
            return
        a, b = op.operands
        predicate = "olt" if isinstance(op, arith.MaximumfOp) else "ogt"
        beats = rewriter.insert(arith.CmpfOp(a, b, predicate))
        nan = rewriter.insert(arith.CmpfOp(b, b, "uno"))
        take_b = rewriter.insert(arith.OrIOp(beats, nan))
        rewriter.replace(op, arith.SelectOp(take_b, b, a))


# ---------------------------------------------------------------------------------------------
# Every target: small constant powers as eager computes them
# ---------------------------------------------------------------------------------------------


def _float_constant(value: SSAValue) -> float | None:
    """The value of a float `arith.constant` (seen through `arith.extf`/`arith.truncf`), else
    None. A truncation may have rounded it: compare the result only with values that every
    float type holds exactly (small integers and halves)."""
    owner = value.owner
    while isinstance(owner, arith.ExtFOp | arith.TruncFOp):
        owner = owner.input.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, FloatAttr):
        return owner.value.value.data
    return None


SMALL_POWERS = (0.0, 1.0, 2.0, 3.0, -2.0, 0.5, -0.5, -1.0)
"""The exponents that eager's `pow(Tensor, Scalar)` kernels (CPU and CUDA) special-case: 0 fills
ones, 1 copies, 2, 3 and -2 are products (`x * x * x`, `1 / (x * x)`), 0.5, -0.5 and -1
(`ROOT_POWERS`) run the sqrt, rsqrt and reciprocal kernels (where `PowerRules.roots_call_pow`
says so). Other exponents call pow."""

ROOT_POWERS = (0.5, -0.5, -1.0)


def _narrow_type(op: math.PowFOp) -> Attribute | None:
    """The f16/bf16 type that `op` computes in: its own, or, once lowering has promoted it to
    f32 (`truncf(powf(extf(x)))`), the type its operand comes from and its result goes to."""
    t = op.result.type
    if _is_low_precision(t):
        return t
    source = op.lhs.owner
    if not isinstance(source, arith.ExtFOp) or not _is_low_precision(source.input.type):
        return None
    narrow = source.input.type
    uses = [use.operation for use in op.result.uses]
    if uses and all(isinstance(u, arith.TruncFOp) and u.result.type == narrow for u in uses):
        return narrow
    return None


@dataclass
class SmallPowerAsProducts(RewritePattern):
    """`math.powf %x, c` with a constant `c` of `SMALL_POWERS` -> eager's special case, so that
    the result is eager's bit for bit (a pow call rounds `x ** 3` once, eager's product twice)
    and the loop stays vectorizable (on the CPU pow is a scalar libm call). The products are
    computed in f32; where the op computes in a type of `rules.rounds_each` (f16/bf16, before
    or after promotion to f32), each intermediate product is rounded to it, as eager does.

        %y = math.powf %x, %c3 : f32   ->   %s = arith.mulf %x, %x   %y = arith.mulf %s, %x
    """

    rules: PowerRules

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, math.PowFOp):
            return
        exponent = _float_constant(op.rhs)
        if exponent not in SMALL_POWERS:
            return
        narrow = _narrow_type(op)
        if exponent in ROOT_POWERS and type(narrow or op.result.type) in self.rules.roots_call_pow:
            return

        def emit(new: Operation) -> SSAValue:
            return rewriter.insert(new).results[0]

        def rounded(v: SSAValue) -> SSAValue:
            if narrow is None or type(narrow) not in self.rules.rounds_each:
                return v
            return emit(arith.ExtFOp(emit(arith.TruncFOp(v, narrow)), f32))

        x = op.lhs
        if _is_low_precision(x.type):
            x = emit(arith.ExtFOp(x, f32))
        wide = x.type
        assert isinstance(wide, Float32Type | Float64Type)
        one = emit(arith.ConstantOp(FloatAttr(1.0, wide))) if exponent in (0, -1, -2) else x
        fm = op.fastmath
        if exponent == 0.0:
            y = one
        elif exponent == 1.0:
            y = x
        elif exponent == 0.5:
            y = emit(math.SqrtOp(x, fm))
        elif exponent == -0.5:
            y = emit(math.RsqrtOp(x, fm))
        elif exponent == -1.0:
            y = emit(arith.DivfOp(one, x, fm))
        else:
            y = emit(arith.MulfOp(x, x, fm))
            if exponent == 3.0:
                y = emit(arith.MulfOp(rounded(y), x, fm))
            elif exponent == -2.0:
                y = emit(arith.DivfOp(one, rounded(y), fm))
        if y.type != op.result.type:
            y = emit(arith.TruncFOp(y, op.result.type))
        rewriter.replace(op, (), (y,))
