"""
`lower-to-loops`: every `fusion.group`, and every lone non-extern graph op, becomes a kernel
`func.func` of loop IR (`scf`, `memref`, `arith`, `math`) over buffers, launched from `@forward`
with `fusion.launch` (docs/contracts.md, "loop IR").

How a kernel computes its outputs:

- Indices are symbolic affine expressions of the loop variables (`Affine`), with floor division
  and modulo by constants. Layout ops (broadcast_in_dim, reshape, permute, slice) and torch
  broadcasting of operands map the index a consumer reads at to the index of the producer's
  element; nothing is copied. Simplification (`floordiv`, `mod` and the recombination of
  `x mod a + a * (x floordiv a)` into `x`) makes a reshape chain that ends where it started
  cost nothing. `concat` is an `scf.if` chain on the concatenated dim, each branch reading its
  input at an index known to lie in that input's range (`Within`: ViT's patch rows after the
  class token read as `r - 1`, which divides by the grid's sizes as a patch number). `flip` reads element
  `n - 1 - i` (a negative coefficient), `roll` element `(i - shift) mod n`, and `iota`
  (arange) is `start + i * step` of the loop index itself: no buffer at all. `graph.gather`
  reads its table at a data-dependent index: a `Gathered` atom (the index tensor's element, loaded,
  wrapped where torch wraps, clamped to its dim and reported through the kernel's error flag,
  docs/contracts.md) takes the place of the indexed dims, so an elementwise producer of the
  table is recomputed at the gathered position; its loads stay inside their `scf.if` branch.
- `pad` and `pool` read their input at shifted positions: a position its bounds cannot place
  inside the input is loaded at a clamped (or, for reflect padding, mirrored) address and
  selected away by an `i1` test, so no load ever leaves its buffer; tests the bounds decide
  are not emitted. A pool's window is unrolled up to `UNROLL_WINDOW` elements (each position
  its own guard), else an `scf.for` nest carrying the accumulator whose loops are clipped to
  the input, as eager's kernels and Inductor's: from max(start, 0) (the first tap inside, with
  a dilation) to min(start + kernel, size), so that its loads need no guard and a window far
  larger than its input (a global pool written as `AvgPool2d(1280)`) walks the input only.
- Each value of the group is emitted as a scalar expression at an index, memoized per
  (value, index) in the innermost loop scope where it is valid; an expression that does not
  depend on an inner loop's variable is placed before that loop (a row's `rsqrt` is computed
  once per row). Code inside an `scf.if` branch stays in the branch.
- Elementwise groups: one `scf.parallel` over the output dims, or over the flattened output
  (buffers declared 1-D) when every load is either at the output's own position or at a
  constant one.
- Groups with reductions: all reductions must reduce the same dims of the same shape (the
  "full" shape); the kept dims are the parallel loop (one row per iteration), and inside it one
  `scf.for` nest per reduction phase (reductions that need another one's result come in a later
  phase) carries the accumulators (`f32` for f16/bf16 data; `f64`, with `wide_sums`, for a sum
  of at most `SHORT_SUM` f32 terms over several loops or merged dims, or of at most `TOTAL_SUM`
  to one value) as `iter_args`; a last nest over the reduced dims writes the outputs of the
  full shape, and outputs of another shape with as many elements (a layer norm's output
  reshaped) at the same position in memory, where one of them reads the last phase's results;
  else the last phase's nest writes them (an activation beside its channel sum: each element
  read and computed once). Outputs of the row shape (keepdim or not) are written once per
  row. A reduction's result may only be read at its own row (these rules are
  `xfuse.passes.fusion.kernel_loops`', which fusion checks a group against too). A float sum
  or product accumulates with `fastmath<reassoc>` (that op only), so that LLVM may vectorize
  it into partial sums; max/min need no flag. Over several reduced dims, a float sum or
  product gives each inner loop a partial accumulator of its own (`partial_sums_nest`).
- A buffer read or written through a reshape its dims split (a split reduction reads a
  `[N, 56, 56, C]` buffer as `[N, 49, 64, C]`) is declared with those dims merged
  (`memref<Nx3136xC>`) where that takes the divisions out of its indices (`merged_buffer_dims`):
  the kernel is built once, then again with the merged buffers.
- Groups with a scan (cumsum, cumprod, logcumsumexp, cummax, cummin): the scan's other dims
  are the parallel loop, and one `scf.for` along its dim carries the running value (f32 for
  f16/bf16, as eager's CPU kernels) and, for cummax's / cummin's indices, its position; each
  iteration combines the next element in eager's order (no fastmath flag), then stores it and
  the outputs computed from it at that index (`emit_scan`).
- Groups with symbolic sizes (a function with a `graph.sizes` table, docs/dynamic-shapes.md)
  make kernels that take their sizes as `index` arguments (`symbolic_kernels`): elementwise,
  broadcast and row-reduction groups; other ops are refused in one line naming the op.
- Group shapes this cannot express (reductions over different dims or shapes, outputs of other
  shapes, ops without a scalar lowering) raise `CodegenError` naming the kernel and the reason:
  the runtime compiles that group op by op (or falls back). Fusion's `loop-structure` gate
  (`xfuse.passes.fusion.legality`) keeps such groups from forming. With `keep-unsupported`, the
  pass instead leaves such a group (or op) where it is, with its reason in the
  `xfuse.codegen_error` attribute.

Constants: a splat `graph.constant` (inside a group, or outside feeding one) becomes an
`arith.constant` in the kernel; a non-splat constant is a buffer input (one inside a group is
moved before the launch). `graph.constant` ops outside groups stay in `@forward`.
Bool tensors are `i8` buffers (torch.bool is one byte): loads are followed by `arith.trunci` to
`i1`, stores preceded by `arith.extui`.

The pass is this module; the kernel's parts live beside it by concern: `index_algebra`
(affine indices), `operand_index` (where each operand element comes from), `domains` (the
loops), `reductions`, `windows` (pad, pool, patches), `scans`, and `kernel_builder`, which
emits a group's kernel from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import SymbolTable

from xfuse.dialects import fusion, graph
from xfuse.dialects.op_kinds import KindGroup, kind_of
from xfuse.errors import CodegenError
from xfuse.ir.names import CODEGEN_ERROR_ATTR, KERNEL_ATTR, SIZES_ATTR
from xfuse.passes.lowering.domains import MERGE_DIMS, Leaf, splat_value
from xfuse.passes.lowering.kernel_builder import KernelBuilder
from xfuse.passes.lowering.reductions import WIDE_SUMS

__all__ = [
    "MERGE_DIMS",
    "WIDE_SUMS",
    "FunctionLowering",
    "LowerToLoopsPass",
    "LoweredGroup",
    "is_kernel",
    "is_lone_kernel_op",
    "lower_functions",
    "lower_group",
    "wrap_in_group",
]


@dataclass
class LoweredGroup:
    kernel: func.FuncOp
    launch_inputs: list[SSAValue]
    hoisted: list[graph.ConstantOp]
    """Non-splat constants of the group body, to be placed before the launch."""


def lower_group(
    group: fusion.GroupOp,
    name: str,
    *,
    merge_dims: bool = MERGE_DIMS,
    sizes: graph.SizesAttr | None = None,
    wide_sums: bool = WIDE_SUMS,
) -> LoweredGroup:
    """The kernel `@name` of `group` and the values its launch takes (raises CodegenError);
    `merge_dims` and `wide_sums` as `LowerToLoopsPass`'s; `sizes` the function's size symbols
    (by default the table of the function the group is in), which a group with symbolic sizes
    needs."""
    leaves: dict[SSAValue, Leaf] = {}
    buffers: list[SSAValue] = []
    launch_inputs: list[SSAValue] = []
    hoisted: list[graph.ConstantOp] = []
    for arg, outer in zip(group.block.args, group.inputs, strict=True):
        owner = outer.owner
        splat = splat_value(owner) if isinstance(owner, graph.ConstantOp) else None
        if splat is not None:
            leaves[arg] = Leaf(splat=splat)
            continue
        leaves[arg] = Leaf(arg=len(buffers))
        buffers.append(arg)
        launch_inputs.append(outer)
    for op in group.block.ops:
        if isinstance(op, graph.ConstantOp):
            splat = splat_value(op)
            if splat is not None:
                leaves[op.result] = Leaf(splat=splat)
                continue
            copy = graph.ConstantOp(op.value)
            leaves[op.result] = Leaf(arg=len(buffers))
            buffers.append(op.result)
            hoisted.append(copy)
            launch_inputs.append(copy.result)
    if sizes is None:
        sizes = graph.size_table(group)
    kernel = KernelBuilder(
        name, group, leaves, buffers, merge_dims, sizes, wide_sums=wide_sums
    ).build_merged()
    return LoweredGroup(kernel, launch_inputs, hoisted)


def wrap_in_group(op: Operation) -> fusion.GroupOp:
    """A detached one-op group around a clone of `op` (its operands are `op`'s)."""
    inputs = list(dict.fromkeys(op.operands))
    block = Block(arg_types=[v.type for v in inputs])
    clone = op.clone(value_mapper=dict(zip(inputs, block.args, strict=True)))
    block.add_ops([clone, fusion.YieldOp(*clone.results)])
    return fusion.GroupOp(
        inputs,
        [r.type for r in op.results],
        Region(block),
        kind_of(op).value,
        "lower-to-loops:lone-op",
    )


def is_lone_kernel_op(op: Operation) -> bool:
    """A graph op outside groups that becomes a kernel of its own: one of a kind that may join
    a group (`KindGroup.FUSABLE`), other than a constant (data, read by the kernels). The one
    definition: the program compiler and `lower-to-llvm` ask it too."""
    return kind_of(op) in KindGroup.FUSABLE and not isinstance(op, graph.ConstantOp)


def is_kernel(op: Operation) -> bool:
    return isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes


@dataclass
class FunctionLowering:
    """Lowers the groups and lone ops of one function, appending kernels to `module`."""

    function: func.FuncOp
    module: ModuleOp
    keep_unsupported: bool
    merge_dims: bool
    wide_sums: bool
    leave: Callable[[Operation], bool] | None = None
    """Lone ops left in place, no kernel made (those a runtime runs as torch views)."""
    count: int = 0
    unit_ops: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    """Each kernel made, by its symbol: the names of the ops it computes, in order."""
    inlined: set[graph.ConstantOp] = field(default_factory=set[graph.ConstantOp])
    """Constants of the function that kernels read as arith.constant (erased once unused)."""

    @property
    def sizes(self) -> graph.SizesAttr | None:
        table = self.function.attributes.get(SIZES_ATTR)
        return table if isinstance(table, graph.SizesAttr) else None

    def run(self) -> None:
        for op in list(self.function.body.block.ops):
            if isinstance(op, fusion.GroupOp):
                self.lower(op, op)
            elif is_lone_kernel_op(op) and not (self.leave is not None and self.leave(op)):
                group = wrap_in_group(op)
                try:
                    self.lower(group, op)
                finally:
                    group.erase()
        for op in self.inlined:
            if op.parent is not None and not op.result.uses:
                op.detach()
                op.erase()

    def kernel_name(self) -> str:
        while True:
            name = f"{self.function.sym_name.data}_k{self.count}"
            self.count += 1
            if SymbolTable.lookup_symbol(self.module, name) is None:
                return name

    def lower(self, group: fusion.GroupOp, replaced: Operation) -> None:
        name = self.kernel_name()
        try:
            lowered = lower_group(
                group, name, merge_dims=self.merge_dims, sizes=self.sizes, wide_sums=self.wide_sums
            )
        except CodegenError as e:
            if not self.keep_unsupported:
                raise
            replaced.attributes[CODEGEN_ERROR_ATTR] = StringAttr(str(e))
            return
        self.inlined |= {v.owner for v in group.inputs if isinstance(v.owner, graph.ConstantOp)}
        block = self.function.body.block
        for c in lowered.hoisted:
            block.insert_op_before(c, replaced)
        launch = fusion.LaunchOp(name, lowered.launch_inputs, [r.type for r in replaced.results])
        block.insert_op_before(launch, replaced)
        for old, new in zip(replaced.results, launch.results, strict=True):
            old.replace_all_uses_with(new)
        replaced.detach()
        replaced.erase()
        self.module.body.block.add_op(lowered.kernel)
        self.unit_ops[name] = [o.name for o in group.body_ops]


@dataclass(frozen=True)
class LowerToLoopsPass(ModulePass):
    """Groups and lone graph ops to kernels of loop IR launched with `fusion.launch`."""

    name = "lower-to-loops"

    keep_unsupported: bool = False
    """Leave groups that cannot be lowered in place (reason in `xfuse.codegen_error`) instead
    of raising CodegenError."""

    merge_dims: bool = MERGE_DIMS
    """Merge adjacent dims of an elementwise kernel's loops where no buffer access divides
    (an NCHW batch norm loops over `[C, H*W]`: long inner loops for the CPU's vectorizer, the
    channel's values loaded once per row), and a reduction's adjacent reduced dims where no
    access divides once the buffers' dims merge (`merged_row_domain`: a squeeze's mean over
    `[C, 56, 56]` sums in 49 blocks of 64); and loop over each dim where outputs of one
    element count differ in shape only by permutes (attention's query, key and value written
    in their layouts by one kernel), where one flat loop would divide to find each output's
    coordinates. `xfuse.compile` turns it off on CUDA, whose
    `gpu-map-parallel` flattens the loops itself and vectorizes the accesses indexed by the
    innermost loop variable."""

    wide_sums: bool = WIDE_SUMS
    """Accumulate a float sum of at most `SHORT_SUM` f32 terms per row, over several loops or
    several dims merged into one loop (a 7x7 pool's 49), and a sum of at most `TOTAL_SUM` to
    one value, in f64, rounded once at its end (`reductions`). The runtime turns it off on
    CUDA."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lower_functions(
            op,
            keep_unsupported=self.keep_unsupported,
            merge_dims=self.merge_dims,
            wide_sums=self.wide_sums,
        )


def lower_functions(
    module: ModuleOp,
    *,
    keep_unsupported: bool = False,
    merge_dims: bool = MERGE_DIMS,
    wide_sums: bool = WIDE_SUMS,
    leave: Callable[[Operation], bool] | None = None,
) -> dict[str, list[str]]:
    """`lower-to-loops` on every function of `module` that is no kernel (the pass's options),
    leaving in place the lone ops `leave` names; the names of the ops each kernel made
    computes, by its symbol."""
    functions = [f for f in module.ops if isinstance(f, func.FuncOp) and not is_kernel(f)]
    unit_ops: dict[str, list[str]] = {}
    for f in functions:
        if f.body.blocks:
            lowering = FunctionLowering(f, module, keep_unsupported, merge_dims, wide_sums, leave)
            lowering.run()
            unit_ops |= lowering.unit_ops
    return unit_ops
