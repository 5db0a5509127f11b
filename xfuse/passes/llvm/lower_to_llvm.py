"""
`lower-to-llvm{target=cpu}`: xfuse's kernels (loop IR, docs/contracts.md) to the `llvm` dialect.

Only functions carrying `xfuse.kernel` are lowered; `@forward` stays as it is (the runtime
interprets it). Input that is not loop IR yet (a `fusion.group`, or a graph op that
lower-to-loops would make a kernel of) is an error, not silently left alone. For each kernel:

1. the target's preparation. cpu: the outermost dimension of the kernel's `scf.parallel` runs
   over new leading arguments `[lo, hi)` so that a thread pool can split it (with the second
   dimension, as one flat index, where the first has fewer than `MIN_SPLIT_EXTENT` trips and the
   second is static and not the last: 3 channels split unevenly between threads), the other
   parallel dimensions become nested `scf.for`s, and a constant global `@<kernel>.extent` holds
   the full trip count of the split range and `@<kernel>.arity` the number of buffers (the
   loader reads both). Before that, four rewrites that only pay on CPUs: a value that the last
   reduction loop computes with a math function and the write loop computes again (softmax's
   exp(x - max)) is stored into an output by the reduction loop and loaded back by the write
   loop (`reuse_reduction_values`); `x / s` in a loop, `s` defined outside it, becomes
   `x * (1 / s)`; a loop whose innermost dimension is a column of reductions takes a block of
   columns per iteration, the row loop around a loop over the block (`column_blocks`); else a
   two-dimensional loop that reads an operand transposed runs its inner dimension in blocks, the
   block index outermost (`transpose_blocks`). After it, a loop whose body compares its index
   with constants (a concat's parts, a pad's border) is cut into one loop per range where the
   comparisons do not change, their branches folded away (`range_pieces`);
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
from xdsl.dialects import arith, func, llvm, memref, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    IndexType,
    IntegerAttr,
    ModuleOp,
    UnitAttr,
    i64,
)
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import DiagnosticException, PassFailedException

from xfuse.dialects import fusion
from xfuse.ir.constants import int_constant
from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import CODEGEN_ERROR_ATTR, KERNEL_ATTR, RANGE_ARGS_ATTR, SIZE_ARGS_ATTR
from xfuse.passes.llvm.column_blocks import block_column_reductions
from xfuse.passes.llvm.convert_func_to_llvm import convert_types, rewrite_once
from xfuse.passes.llvm.driver import LLVMTarget, PowerRules, lower_kernels
from xfuse.passes.llvm.expand_math import expand_math
from xfuse.passes.llvm.range_pieces import split_loop_ranges
from xfuse.passes.llvm.short_rows import version_short_row
from xfuse.passes.llvm.transpose_blocks import block_transposed_loops
from xfuse.passes.lowering.divisions import divide_by_reciprocal, kept_divisors
from xfuse.passes.lowering.lower_to_loops import is_lone_kernel_op


def extent_symbol(kernel_name: str) -> str:
    """The constant i64 global holding the trip count that `[lo, hi)` divides."""
    return f"{kernel_name}.extent"


def arity_symbol(kernel_name: str) -> str:
    """The constant i64 global holding the number of buffer (pointer) arguments."""
    return f"{kernel_name}.arity"


def sizes_symbol(kernel_name: str) -> str:
    """The constant i64 global of a kernel with symbolic sizes holding the number of its size
    arguments (i64s after the pointers); a static kernel has none."""
    return f"{kernel_name}.sizes"


SYMBOLIC_EXTENT = -1
"""`@k.extent` of a kernel whose split loop runs to a size argument: the runtime computes it."""


# ---------------------------------------------------------------------------------------------
# cpu: the first parallel dimension -> [lo, hi) arguments
# ---------------------------------------------------------------------------------------------


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


MIN_SPLIT_EXTENT = 8
"""A kernel's split range under this many trips takes in the parallel dimension after it: a
range of 3 channels (an image's input pad) or of 7 blocks (a 14x14 map's transposed blocks)
splits unevenly between threads, and its few chunks cannot balance them. Longer ones are left
as they are: the row loop's bounds cost more than an uneven split gains (ConvNeXt's 14-block
kernels took 10-25% longer merged on 2 threads, its 7-block ones 10% less), and a depthwise
stencil's rows keep their constant bounds."""


def _merged_extent(loop: scf.ParallelOp) -> int | None:
    """The trip count of the second parallel dimension where the split range runs over the
    first two as one flat index (row-major): the first is a constant under `MIN_SPLIT_EXTENT`,
    the second runs from 0 by 1 to a constant and is not the last (the one LLVM vectorizes)."""
    first = int_constant(loop.upperBound[0])
    if first is None or first >= MIN_SPLIT_EXTENT or len(loop.upperBound) < 3:
        return None
    second = int_constant(loop.upperBound[1])
    if int_constant(loop.lowerBound[1]) != 0 or int_constant(loop.step[1]) != 1:
        return None
    return second if second is not None and second > 0 else None


def _merged_nest(
    loop: scf.ParallelOp, lo: SSAValue, hi: SSAValue, second: int, rewriter: PatternRewriter
) -> tuple[scf.ForOp, Block, list[SSAValue]]:
    """`_nest_of_fors` for a range `[lo, hi)` of the flat index over the first two dimensions
    (`second` trips in the second): the first from `lo / second` to `ceil(hi / second)`, the
    second within it from `max(lo - base, 0)` to `min(hi - base, second)` (`base` the first's
    index times `second`), then the other dimensions. Bounds are computed once per row, so the
    loops step as the unmerged ones do."""
    index = IndexType()
    zero, one, size, size_less_one = (
        arith.ConstantOp.from_int_and_width(v, index) for v in (0, 1, second, second - 1)
    )
    first_lo = arith.DivUIOp(lo, size)
    rounded_hi = arith.AddiOp(hi, size_less_one)
    first_hi = arith.DivUIOp(rounded_hi, size)
    rewriter.insert(
        [zero, one, size, size_less_one, first_lo, rounded_hi, first_hi], InsertPoint.before(loop)
    )
    outer, row, (i,) = _nest_of_fors([(first_lo.result, first_hi.result, one.result)], rewriter)
    base = arith.MuliOp(i, size)
    lo_in_row, hi_in_row = arith.SubiOp(lo, base), arith.SubiOp(hi, base)
    start, stop = arith.MaxSIOp(lo_in_row, zero), arith.MinSIOp(hi_in_row, size)
    bounds: list[tuple[SSAValue, SSAValue, SSAValue]] = [(start.result, stop.result, one.result)]
    bounds += zip(loop.lowerBound[2:], loop.upperBound[2:], loop.step[2:], strict=True)
    inner, innermost, ivs = _nest_of_fors(bounds, rewriter)
    row.add_ops([base, lo_in_row, start, hi_in_row, stop, inner, scf.YieldOp()])
    return outer, innermost, [i, *ivs]


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
            [IndexType(), IndexType(), *op.function_type.inputs], op.function_type.outputs.data
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
        size_args = op.attributes.get(SIZE_ARGS_ATTR)
        sizes = len(size_args) if isinstance(size_args, ArrayAttr) else 0
        arity = len(op.function_type.inputs) - 2 - sizes
        if isinstance(size_args, ArrayAttr):
            self._add_global(op, sizes_symbol(op.sym_name.data), sizes, rewriter)
        self._add_global(op, arity_symbol(op.sym_name.data), arity, rewriter)
        self._add_global(op, extent_symbol(op.sym_name.data), extent, rewriter)

    @staticmethod
    def _split(loop: scf.ParallelOp, lo: SSAValue, hi: SSAValue, rewriter: PatternRewriter) -> int:
        if loop.res:
            raise DiagnosticException("scf.parallel with reductions is not supported")
        lb0 = int_constant(loop.lowerBound[0])
        ub0 = int_constant(loop.upperBound[0])
        step0 = int_constant(loop.step[0])
        kernel = loop.parent_op()
        symbolic = ub0 is None and kernel is not None and SIZE_ARGS_ATTR in kernel.attributes
        if lb0 != 0 or step0 != 1 or (ub0 is None and not symbolic):
            raise DiagnosticException(
                "expected the first parallel dimension to run from 0 by 1 to a constant "
                "or a size argument"
            )
        second = _merged_extent(loop)
        if second is None:
            bounds = [(lo, hi, loop.step[0])]
            bounds += zip(loop.lowerBound[1:], loop.upperBound[1:], loop.step[1:], strict=True)
            outer, innermost, ivs = _nest_of_fors(bounds, rewriter)
        else:
            outer, innermost, ivs = _merged_nest(loop, lo, hi, second, rewriter)
        rewriter.insert(outer, InsertPoint.before(loop))
        body = loop.body.block
        reduce = body.last_op
        assert isinstance(reduce, scf.ReduceOp)
        rewriter.erase(reduce)
        rewriter.inline_block(body, InsertPoint.at_end(innermost), ivs)
        innermost.add_op(scf.YieldOp())
        rewriter.erase(loop)
        return SYMBOLIC_EXTENT if ub0 is None else ub0 * (second or 1)

    @staticmethod
    def _add_global(op: func.FuncOp, name: str, value: int, rewriter: PatternRewriter) -> None:
        glob = llvm.GlobalOp(
            i64, name, llvm.LinkageAttr("external"), constant=True, value=IntegerAttr(value, i64)
        )
        rewriter.insert(glob, InsertPoint.after(op))


# ---------------------------------------------------------------------------------------------
# cpu: values the last reduction loop computes are kept in the output for the write loop
# ---------------------------------------------------------------------------------------------

_Key = object


def _defined_in(value: SSAValue, block: Block) -> bool:
    if isinstance(value, BlockArgument):
        return value.block is block
    return value.owner.parent_block() is block  # pyright: ignore[reportAttributeAccessIssue]


def _loop_value_keys(loop: scf.ForOp, unstored: set[SSAValue]) -> dict[SSAValue, _Key]:
    """A structural key of each value that `loop`'s body computes from its induction variable
    and loop-invariant values only (arith, math, loads of buffers the kernel never stores):
    values of equal keys in two loops of equal bounds are equal at equal iterations."""
    body = loop.body.block
    keys: dict[SSAValue, _Key] = {body.args[0]: ("iv",)}
    for op in body.ops:
        pure = op.dialect_name() in ("arith", "math") or (
            isinstance(op, memref.LoadOp) and op.memref in unstored
        )
        if not pure or op.regions or len(op.results) != 1:
            continue
        operand_keys: list[_Key] = []
        for operand in op.operands:
            if operand in keys:
                operand_keys.append(keys[operand])
            elif _defined_in(operand, body):
                break  # an iter_arg, or a value made from one
            else:
                operand_keys.append(operand)
        else:
            keys[op.results[0]] = (
                op.name,
                str(op.properties),
                str(op.attributes),
                op.results[0].type,
                tuple(operand_keys),
            )
    return keys


def _available_before(value: SSAValue, op: Operation) -> bool:
    """Whether `value` is defined before `op`: ahead of it in its block, or in an enclosing
    block (where whatever `op`'s region uses is defined before it)."""
    block = op.parent_block()
    home = value.block if isinstance(value, BlockArgument) else value.owner.parent_block()  # pyright: ignore[reportAttributeAccessIssue]
    if block is None or home is None:
        return False
    if home is block:
        if isinstance(value, BlockArgument):
            return True
        owner = value.owner
        assert isinstance(owner, Operation)
        return block.get_operation_index(owner) < block.get_operation_index(op)
    parent = block.parent_op()
    while parent is not None:
        outer = parent.parent_block()
        if outer is home:
            return True
        parent = outer.parent_op() if outer is not None else None
    return False


def _early_index(index: SSAValue, iv: SSAValue, loop: scf.ForOp) -> SSAValue | None:
    """Where the element a write loop stores at `index` is at the same iteration of the
    earlier `loop`: `iv` itself for the induction variable, `index` for a value defined before
    `loop`, the offset `o` of `o + iv` (a symbolic kernel's linear offset, `o` defined before
    `loop`); None otherwise."""
    if index == iv:
        return iv
    if _available_before(index, loop):
        return index
    if isinstance(index, OpResult) and isinstance(index.op, arith.AddiOp):
        a, b = index.op.lhs, index.op.rhs
        offset = b if a == iv else a if b == iv else None
        if offset is not None and offset != iv and _available_before(offset, loop):
            return offset
    return None


def _defined_by(value: SSAValue, block: Block, position: int) -> bool:
    """Whether `value` is defined outside `block` or by one of its first `position` ops."""
    if not isinstance(value, OpResult) or value.op.parent_block() is not block:
        return True
    return block.get_operation_index(value.op) < position


def _same_bounds(a: scf.ForOp, b: scf.ForOp) -> bool:
    return all(
        x == y or (int_constant(x) is not None and int_constant(x) == int_constant(y))
        for x, y in ((a.lb, b.lb), (a.ub, b.ub), (a.step, b.step))
    )


def _is_expensive(value: SSAValue, loop_block: Block) -> bool:
    """Whether computing `value` in the loop body involves a math function (exp, erf, ...)."""
    todo, seen = [value], set[SSAValue]()
    while todo:
        v = todo.pop()
        if v in seen or not isinstance(v, OpResult) or v.op.parent_block() is not loop_block:
            continue
        seen.add(v)
        if v.op.dialect_name() == "math":
            return True
        todo.extend(v.op.operands)
    return False


def _erase_dead(block: Block) -> None:
    changed = True
    while changed:
        changed = False
        for op in reversed(list(block.ops)):
            pure = op.dialect_name() in ("arith", "math") or isinstance(op, memref.LoadOp)
            if pure and not op.regions and all(not r.uses for r in op.results):
                op.detach()
                op.erase()
                changed = True


def reuse_reduction_values(op: scf.ParallelOp) -> None:
    """softmax-like rows: the last reduction loop computes e = exp(x - max) for its sum and the
    write loop computes it again for `e / sum`. The reduction loop stores e into the output
    (at the element the write loop writes) and the write loop loads it back: one exp per element
    instead of two, and the row is in cache. The element is the write loop's at the same
    iteration: its index is the loop's variable, a value known before the reduction loop, or
    one plus the variable (a symbolic kernel's linear offset `row + j`). cpu only: the GPU mapping keeps the row in
    registers instead (and wants output buffers written only)."""
    kernel = op.parent_op()
    if not isinstance(kernel, func.FuncOp) or KERNEL_ATTR not in kernel.attributes:
        return
    body = op.body.block
    loops = [o for o in body.ops if isinstance(o, scf.ForOp)]
    if len(loops) < 2 or loops[-1].results or not loops[-2].results:
        return
    reduce_loop, write_loop = loops[-2], loops[-1]
    if not _same_bounds(reduce_loop, write_loop):
        return
    stored = {o.memref for o in kernel.walk() if isinstance(o, memref.StoreOp)}
    loaded = {o.memref for o in kernel.walk() if isinstance(o, memref.LoadOp)}
    unstored = set[SSAValue](kernel.body.block.args) - stored
    reduce_keys = _loop_value_keys(reduce_loop, unstored)
    by_key = {k: v for v, k in reduce_keys.items()}
    write_block = write_loop.body.block
    write_iv = write_block.args[0]
    write_keys = _loop_value_keys(write_loop, unstored)
    # buffers the write loop stores once, at indices known before the reduction loop
    slots: list[memref.StoreOp] = []
    for store in write_block.ops:
        if not isinstance(store, memref.StoreOp) or store.memref in loaded:
            continue
        if (
            sum(isinstance(o, memref.StoreOp) and o.memref == store.memref for o in kernel.walk())
            != 1
        ):
            continue
        if all(_early_index(i, write_iv, reduce_loop) is not None for i in store.indices):
            slots.append(store)
    for candidate in list(write_block.ops):
        if not slots:
            break
        if len(candidate.results) != 1:
            continue
        value = candidate.results[0]
        key = write_keys.get(value)
        if key is None or key not in by_key or isinstance(candidate, memref.LoadOp):
            continue
        # only the largest recomputed values: one of its users is not recomputed
        if all(
            len(u.operation.results) == 1 and write_keys.get(u.operation.results[0]) in by_key
            for u in value.uses
        ):
            continue
        if not _is_expensive(value, write_block):
            continue
        # a buffer whose final value is stored after this value is needed
        position = write_block.get_operation_index(candidate)
        slot = next(
            (
                s
                for s in slots
                if s.value.type == value.type and write_block.get_operation_index(s) > position
            ),
            None,
        )
        if slot is None:
            continue
        anchor = by_key[key].owner
        if not isinstance(anchor, Operation) or not all(
            _defined_by(i, write_block, position) for i in slot.indices
        ):
            continue
        slots.remove(slot)
        early = by_key[key]
        reduce_iv = reduce_loop.body.block.args[0]
        early_indices: list[SSAValue] = []
        for i in slot.indices:
            offset = _early_index(i, write_iv, reduce_loop)
            assert offset is not None  # (every index of a slot has one)
            if offset is write_iv:
                early_indices.append(reduce_iv)
            elif offset is i:
                early_indices.append(i)
            else:  # the write loop's `offset + iv` at the reduction loop's iv
                moved = arith.AddiOp(offset, reduce_iv)
                reduce_loop.body.block.insert_op_after(moved, anchor)
                anchor = moved
                early_indices.append(moved.result)
        keep = memref.StoreOp.get(early, slot.memref, early_indices)
        reduce_loop.body.block.insert_op_after(keep, anchor)
        reload = memref.LoadOp.get(slot.memref, list(slot.indices))
        write_block.insert_op_before(reload, candidate)
        value.replace_all_uses_with(reload.res)
    _erase_dead(write_block)


def prepare_cpu_kernels(module: ModuleOp) -> None:
    for kernel in kernel_functions(module):
        for parallel in [o for o in kernel.walk() if isinstance(o, scf.ParallelOp)]:
            reuse_reduction_values(parallel)
        kept = kept_divisors(kernel)
        for loop in [o for o in kernel.walk() if isinstance(o, scf.ForOp)]:
            divide_by_reciprocal(loop, kept)
        for parallel in [o for o in kernel.walk() if isinstance(o, scf.ParallelOp)]:
            if not block_column_reductions(parallel):
                block_transposed_loops(parallel)
    rewrite_once(module, ParallelLoopToRangeArgs())
    for kernel in kernel_functions(module):
        for loop in reversed([o for o in kernel.walk() if isinstance(o, scf.ForOp)]):
            split_loop_ranges(loop)
        if SIZE_ARGS_ATTR in kernel.attributes:
            for loop in [o for o in kernel.walk() if isinstance(o, scf.ForOp)]:
                version_short_row(loop)


TARGET_PREPARATIONS: dict[str, Callable[[ModuleOp], None]] = {"cpu": prepare_cpu_kernels}

# ---------------------------------------------------------------------------------------------
# The pipeline
# ---------------------------------------------------------------------------------------------


def lower_kernels_to_llvm(module: ModuleOp, target: str = "cpu", *, contract: bool = False) -> None:
    """Lower every `xfuse.kernel` function of `module` to `llvm.func` for `target`."""
    if target not in TARGET_PREPARATIONS:
        known = ", ".join(sorted(TARGET_PREPARATIONS))
        raise PassFailedException(f"lower-to-llvm: unknown target '{target}' (expected {known})")
    lower_kernels(
        module,
        LLVMTarget(
            prepare_module=TARGET_PREPARATIONS[target],
            math=expand_math,
            convert_types=convert_types,
            contract=contract,
            powers=CPU_POWERS,
            ties_keep_first=True,
        ),
    )


CPU_POWERS = PowerRules(
    rounds_each=frozenset({BFloat16Type}), roots_call_pow=frozenset({Float16Type})
)
"""ATen's CPU pow kernel: bf16 products round after each product, f16 ones once (in f32); f16
0.5, -0.5 and -1 call pow (`pow(-inf, -0.5)` is +0 there, not rsqrt's NaN)."""


@dataclass(frozen=True)
class LowerToLLVMPass(ModulePass):
    """Kernels of loop IR to the llvm dialect, ready for `xdsl.backend.llvm.convert`."""

    name = "lower-to-llvm"

    target: str = "cpu"
    """What the kernels are for: "cpu" (`[lo, hi)` range arguments)."""

    contract: bool = False
    """Allow LLVM to contract a*b+c into FMAs. Off by default: eager's CPU kernels round
    each op's result (`x * 0.75 - 0.1` is two roundings, an FMA one), and so does Inductor's
    C++ (`-ffp-contract=off`, its default)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        check_lowered_to_loops(op)
        lower_kernels_to_llvm(op, self.target, contract=self.contract)


def ops_needing_loops(module: ModuleOp) -> list[Operation]:
    """Ops outside kernels that lower-to-loops would have made kernels of: fusion groups and
    lone non-extern graph ops (those it left in place, with `xfuse.codegen_error`, excepted)."""
    found: list[Operation] = []
    for f in module.ops:
        if not isinstance(f, func.FuncOp) or KERNEL_ATTR in f.attributes or not f.body.blocks:
            continue
        for op in f.body.block.ops:
            if CODEGEN_ERROR_ATTR in op.attributes:
                continue
            if isinstance(op, fusion.GroupOp) or (
                op.dialect_name() == "graph" and is_lone_kernel_op(op)
            ):
                found.append(op)
    return found


def check_lowered_to_loops(module: ModuleOp) -> None:
    """Fail (one line) on input that is not loop IR yet, instead of silently lowering nothing:
    `lower-to-llvm` lowers kernels, which `lower-to-loops` makes."""
    pending = ops_needing_loops(module)
    if not pending:
        return
    names = sorted({op.name for op in pending})
    count = f"{len(pending)} op{'s' if len(pending) > 1 else ''}"
    raise PassFailedException(
        f"the input has {count} it cannot lower ({', '.join(names)}): "
        "not loop IR yet; run lower-to-loops first"
    )
