"""
The kernel of one group (`KernelBuilder`): each value of the group is emitted as a scalar
expression at an index, memoized per (value, index) in the innermost loop scope where it is
valid; an expression that does not depend on an inner loop's variable is placed before that
loop (a row's `rsqrt` is computed once per row). Code inside an `scf.if` branch stays in the
branch. `lower_to_loops`' module docstring describes the loop nests it builds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import cast

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    FunctionType,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    UnitAttr,
    f32,
    f64,
    i1,
    i8,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from xfuse.dialects import fusion, graph
from xfuse.dialects.graph import (
    SizesAttr,
    dims_of,
    dtype_of,
    is_float,
    is_symbolic,
    numel,
    shape_of,
)
from xfuse.dialects.op_kinds import OpGroup
from xfuse.ir.names import (
    ERROR_FLAG_ATTR,
    EXTENT_ATTR,
    KERNEL_ATTR,
    PARALLEL_DIMS_ATTR,
    SIZE_ARGS_ATTR,
    SIZE_HINTS_ATTR,
)
from xfuse.passes.fusion.kernel_loops import RowPasses, RowShape, reads_own_row
from xfuse.passes.lowering.domains import (
    Domain,
    Leaf,
    Runs,
    collapsed_domain,
    divisions,
    flat_domain,
    loads_are_flat,
    merge_index,
    merged_buffer_dims,
    merged_row_domain,
    merged_shape,
    nd_domain,
)
from xfuse.passes.lowering.emitter import (
    ERROR_FLAG_TYPE,
    LoopBody,
    LoopLoweringError,
    Scope,
    emit_for,
)
from xfuse.passes.lowering.index_algebra import (
    Affine,
    Atom,
    Clamp,
    FloorDiv,
    Gathered,
    Index,
    LoopVar,
    Reflect,
    Size,
    SizedClamp,
    SizedDiv,
    SizedMod,
    SizedMul,
    Within,
    add,
    bounds,
    constant_index,
    index_vars,
    is_gathered,
    linearize,
    scale,
    within,
)
from xfuse.passes.lowering.operand_index import operand_indices
from xfuse.passes.lowering.reductions import (
    SHORT_SUM,
    accumulator_type,
    is_real_reduction,
    reassociates,
    reduction_combiner,
    reduction_init,
    sums_f32,
)
from xfuse.passes.lowering.scalar_ops import (
    UnsupportedScalarOp,
    compute_type,
    emit_cast,
    emit_elementwise,
    emit_select,
    from_compute,
    has_scalar_rule,
    to_compute,
)
from xfuse.passes.lowering.scans import emit_scan, scan_domain
from xfuse.passes.lowering.symbolic_kernels import (
    SizeValues,
    check_symbolic,
    is_symbolic_group,
    product_factors,
    size_args,
    size_index,
    symbolic_buffer_type,
    symbolic_domain,
)
from xfuse.passes.lowering.windows import (
    emit_window_index,
    pad_value_at,
    patches_value_at,
    pool_value_at,
)


def buffer_type(value: SSAValue, flat: bool, runs: Runs | None = None) -> MemRefType[Attribute]:
    """The memref of `value`'s buffer: its shape, its element count (`flat`), or its shape
    with the dims of each of `runs` merged."""
    t = dtype_of(value)
    shape = shape_of(value)
    dims = [numel(shape)] if flat else list(shape) if runs is None else merged_shape(shape, runs)
    return MemRefType(i8 if t == i1 else t, dims)


SUPPORTED_OPS: tuple[type[Operation], ...] = (
    graph.ConstantOp,
    graph.ConcatOp,
    graph.ReduceOp,
    *OpGroup.LAYOUT,
    graph.IotaOp,
    graph.SizeValueOp,
    *OpGroup.WINDOW,
    graph.GatherOp,
    graph.ScanOp,
)
"""The ops a kernel computes besides those with a scalar rule (`scalar_ops`)."""

MOVES_ITS_OPERAND: tuple[type[Operation], ...] = (*OpGroup.LAYOUT, graph.ReduceOp, graph.GatherOp)
"""Ops whose element is their first operand's element at the index `operand_indices` maps
(a reduction over no dims: at the same index)."""


def is_supported(op: Operation) -> bool:
    return isinstance(op, SUPPORTED_OPS) or has_scalar_rule(op.name)


def iota_value(b: KernelBuilder, op: graph.IotaOp, index: Index) -> SSAValue:
    """`start + i * step` of the loop index along the iota's dim, in i64 (then the result
    type), placed in the outermost scope where that index is known."""
    counted = index[op.axis]
    start, step = op.counting
    t = dtype_of(op.result)

    def compute() -> SSAValue:
        x = b.insert(arith.IndexCastOp(b.index_value(counted), i64))
        if step != 1:
            x = b.insert(arith.MuliOp(x, b.constant(step, i64)))
        if start != 0:
            x = b.insert(arith.AddiOp(x, b.constant(start, i64)))
        return x if t == i64 else b.insert(arith.TruncIOp(x, cast(IntegerType, t)))

    return b.memoized_at(("iota", start, step, t, counted), (counted,), compute)


class KernelBuilder:
    """Builds the kernel of one group (see the module docstring); implements
    `xfuse.dialects.facts.ScalarBuilder`."""

    def __init__(
        self,
        name: str,
        group: fusion.GroupOp,
        leaves: dict[SSAValue, Leaf],
        buffers: list[SSAValue],
        merge_dims: bool,
        sizes: SizesAttr | None = None,
        buffer_runs: dict[SSAValue, Runs] | None = None,
        *,
        wide_sums: bool,
    ):
        self.name = name
        self.merge_dims = merge_dims
        self.wide_sums = wide_sums
        """Whether short f32 sums accumulate in f64 (`reductions.SHORT_SUM`)."""
        self.size_table = sizes
        """The function's size symbols, as given."""
        self.buffer_runs = {} if buffer_runs is None else buffer_runs
        """The buffers whose adjacent dims are merged (`merged_buffer_dims`), by value."""
        self.accesses: dict[SSAValue, list[Index]] = {}
        """The indices each buffer (by value) is read or written at, as `build` emits them."""
        self.group = group
        self.leaves = leaves
        self.buffers = buffers
        self.outputs = list(group.yield_op.values)
        self.row_values: dict[Operation, SSAValue] = {}
        ops = [op for op in group.block.ops if not isinstance(op, fusion.YieldOp)]
        self.sizes: SizeValues | None = None
        self.table = sizes if is_symbolic_group(group) else None
        """The function's size symbols, for a group with symbolic sizes (`symbolic_kernels`)."""
        self.size_hints = self.table.hints if self.table is not None else None
        """Each size symbol's size at the example's sizes (a symbolic kernel's)."""
        if self.table is not None:
            check_symbolic(self)
        for op in ops:
            if not is_supported(op):
                raise self.error(f"'{op.name}' has no loop lowering")
        self.reductions: list[graph.ReduceOp] = [
            op for op in ops if isinstance(op, graph.ReduceOp) and op.reduce_dims
        ]
        self.error_flag = self._check_gathers(ops)
        self.scans = [op for op in ops if isinstance(op, graph.ScanOp)]
        self.rows_merged = False
        """Whether the domain loops over a reduction's adjacent dims as one (`merged_row_domain`)."""
        self.domain = self._domain()
        self.blocked_sums_wide = wide_sums and (
            len(self.domain.reduce_vars) > 1 or self.rows_merged
        )
        """Whether this kernel's short f32 sums accumulate in f64: with `wide_sums`, where its
        rows are summed over several loops, in blocks (`partial_sums_nest`), an order unlike
        eager's, or over several dims merged into one loop (`merged_row_domain`). A row of one
        dim is summed in vector lanes as eager's is, at f32's width."""

    def identity(self, r: graph.ReduceOp) -> SSAValue:
        """`r`'s identity, in the type it accumulates in (`accumulator_type`)."""
        acc = accumulator_type(r, self.wide_sums, self.blocked_sums_wide, self.size_hints)
        return self.constant(reduction_init(r), acc)

    def error(self, reason: str) -> LoopLoweringError:
        return LoopLoweringError(f"cannot lower @{self.name} to loops: {reason}")

    def _check_gathers(self, ops: Sequence[Operation]) -> bool:
        """Whether the kernel gathers (then it takes an error flag after its outputs)."""
        gathers = [op for op in ops if isinstance(op, graph.GatherOp)]
        for op in gathers:
            table = shape_of(op.table)
            if 0 in table[op.axis : op.axis + len(op.indices)] and numel(shape_of(op.result)):
                raise self.error(
                    "'graph.gather' indexes an empty dim (every index is out of range)"
                )
        return bool(gathers)

    # -- structure -----------------------------------------------------------------------------

    def _domain(self) -> Domain:
        if self.table is not None:
            return symbolic_domain(self, self.table)
        if self.scans:
            return scan_domain(self)
        rows = self.row_shape()
        full = rows.full
        if not self.reductions and len({numel(shape_of(v)) for v in self.outputs}) == 1:
            # outputs of one element count: one flat loop where every access is at the
            # loop's position; else adjacent dims merged where no access divides; else one
            # flat loop for outputs of different shapes
            if loads_are_flat(self.outputs, self.leaves, full):
                return flat_domain(full)
            same_shape = all(shape_of(v) == full for v in self.outputs)
            merged = collapsed_domain(full, self.outputs, self.leaves) if self.merge_dims else None
            loops = sum(d != 1 for d in full)  # nd_domain's
            if merged is not None and (len(merged.parallel) < loops or not same_shape):
                return merged
            if not same_shape:
                # outputs permuted from the full shape (attention's query in [B, T, H, D]
                # beside its key and value in [B, H, T, D]) written at their permuted index
                # over (h, t, d), where one flat loop would find their coordinates by dividing
                permuted = nd_domain(full, ())
                if self.merge_dims and permuted.index_permutes(self.outputs):
                    return permuted
                return flat_domain(full)
        for v in self.outputs:
            if rows.output_place(shape_of(v)) is None:
                raise self.error(
                    f"output of shape {graph.fmt_shape(shape_of(v))} is neither the group's "
                    f"full shape {graph.fmt_shape(full)}, its row shape, nor of as many elements"
                )
        if self.merge_dims and self.reductions and self.table is None:
            short = SHORT_SUM if self._short_sums_wide() else 0
            merged = merged_row_domain(full, rows.dims, short)
            if merged is not None:
                self.rows_merged = True
                return self._index_permuted_outputs(merged)
        domain = nd_domain(full, rows.dims)
        return self._index_permuted_outputs(domain) if self.merge_dims else domain

    def _index_permuted_outputs(self, domain: Domain) -> Domain:
        """`domain` where a row kernel's outputs written per element that are permutes of a
        value of the full shape are written at their permuted index (`Domain.index_permutes`):
        ConvNeXt's last NHWC block written NCHW beside its pooled mean, where writing it at the
        iteration's position in memory would compute each element again at a divided index.
        With `merge_dims` only (off on CUDA, whose loops `gpu-map-parallel` maps itself)."""
        domain.index_permutes([v for v in self.outputs if domain.writes_per_element(shape_of(v))])
        return domain

    def _short_sums_wide(self) -> bool:
        """Whether every f32 sum of the kernel would accumulate in f64 if its rows were
        merged (`accumulator_type`): only then may a short run of reduced dims be one loop,
        which sums in another order than eager's."""
        return self.wide_sums and all(
            accumulator_type(r, True, True) == f64 for r in self.reductions if sums_f32(r)
        )

    def row_shape(self) -> RowShape:
        """The shape the reductions reduce and their dims (the first output's shape, no dims,
        without reductions)."""
        if not self.reductions:
            return RowShape(shape_of(self.outputs[0]), ())
        first = self.reductions[0]
        rows = RowShape(shape_of(first.input), tuple(first.reduce_dims))
        for r in self.reductions[1:]:
            if not rows.holds(shape_of(r.input), r.reduce_dims):
                raise self.error(
                    f"reductions over different dims or shapes ({graph.fmt_shape(rows.full)} "
                    f"dims {list(rows.dims)} and {graph.fmt_shape(shape_of(r.input))} dims "
                    f"{list(r.reduce_dims)}) do not share one row loop"
                )
        return rows

    def build(self) -> func.FuncOp:
        d = self.domain
        arg_types: list[Attribute] = [
            symbolic_buffer_type(v)
            if is_symbolic(v)
            else buffer_type(v, d.flat, self.buffer_runs.get(v))
            for v in [*self.buffers, *self.outputs]
        ]
        if self.error_flag:
            arg_types.append(ERROR_FLAG_TYPE)
        names = size_args(self.group, self.table) if self.table is not None else []
        self.sizes = (
            SizeValues(self, self.table, names, len(arg_types)) if self.table is not None else None
        )
        arg_types += [IndexType()] * len(names)
        kernel = func.FuncOp(self.name, FunctionType.from_lists(arg_types, []))
        kernel.attributes[KERNEL_ATTR] = UnitAttr()
        if self.error_flag:
            kernel.attributes[ERROR_FLAG_ATTR] = UnitAttr()
        kernel.attributes[PARALLEL_DIMS_ATTR] = IntegerAttr(len(d.parallel), i64)
        if self.table is not None:
            kernel.attributes[SIZE_ARGS_ATTR] = ArrayAttr([StringAttr(n) for n in names])
            if d.parallel[0].size is not None:
                kernel.attributes[EXTENT_ATTR] = StringAttr(d.parallel[0].size)
            hints = [self.table.by_name[n].hint for n in names]
            kernel.attributes[SIZE_HINTS_ATTR] = ArrayAttr([IntegerAttr(h, i64) for h in hints])
        entry = kernel.body.block
        self.args = list(entry.args)
        self.scope = Scope(entry, None)
        zero, one = self.index_constant(0), self.index_constant(1)
        body = Block(arg_types=[IndexType()] * len(d.parallel))
        loop = scf.ParallelOp(
            [zero] * len(d.parallel),
            [self.loop_extent(v) for v in d.parallel],
            [one] * len(d.parallel),
            Region(body),
        )
        entry.add_op(loop)
        entry.add_op(func.ReturnOp())
        self.scope.anchor = loop
        self.scope = Scope(
            body,
            self.scope,
            {v.ident: a for v, a in zip(d.parallel, body.args, strict=True)},
            root=True,
        )
        try:
            self._emit_row()
        except UnsupportedScalarOp as e:
            raise self.error(str(e)) from None
        body.add_op(scf.ReduceOp())
        return kernel

    def row_passes(self) -> RowPasses:
        """The loops over a row that `_emit_row` makes: one per phase of the reductions, then
        one writing the outputs stored at every element, where one reads the last phase's
        results (else the last phase's loop writes them)."""
        written = [v for v, _ in self.per_element_outputs()]
        return RowPasses.of(self.group.block.ops, self.reductions, written)

    def per_element_outputs(self) -> list[tuple[SSAValue, int]]:
        """The outputs stored at every element of the row (not once a row), with their
        positions among the outputs."""
        d = self.domain
        return [(v, i) for i, v in enumerate(self.outputs) if d.writes_per_element(shape_of(v))]

    def _emit_row(self) -> None:
        if self.scans:
            return emit_scan(self)
        passes = self.row_passes()
        d = self.domain
        full = self.per_element_outputs()

        def write_full() -> None:
            for v, i in full:
                self.store(v, i, d.output_index(shape_of(v)))

        def write_loop(_: list[SSAValue]) -> list[SSAValue]:
            write_full()
            return []

        for k, phase in enumerate(passes.phases):
            last = k == len(passes.phases) - 1
            self._emit_phase(phase, write_full if last and passes.in_last else None)
        for i, v in enumerate(self.outputs):
            if not d.writes_per_element(shape_of(v)):
                self.store(v, i, d.output_index(shape_of(v)))
        if passes.writes:
            self.for_nest(d.reduce_vars, [], write_loop)

    def _emit_phase(
        self, phase: Sequence[graph.ReduceOp], also: Callable[[], None] | None = None
    ) -> None:
        """One loop over the row folding `phase`'s reductions; `also` emits more at each
        element (the outputs' stores)."""
        inits: list[SSAValue] = []
        for r in phase:
            inits.append(self.identity(r))
            if isinstance(r, graph.ArgReduceOp):  # and the index of the value so far
                inits.append(self.constant(0, i64))

        def accumulate(accs: list[SSAValue]) -> list[SSAValue]:
            out: list[SSAValue] = []
            carried = iter(accs)
            for r in phase:
                x = self.value_at(r.input, self.domain.full_index)
                x = to_compute(self, x, dtype_of(r.input))
                if isinstance(r, graph.ArgReduceOp):
                    out += self._arg_step(r, next(carried), next(carried), x)
                    continue
                acc = next(carried)
                if acc.type == f64 and x.type == f32:  # a short sum in f64
                    x = self.insert(arith.ExtFOp(x, acc.type))
                out.append(self.insert(reduction_combiner(r)(acc, x)))
            if also is not None:
                also()
            return out

        loop_vars = self.domain.reduce_vars
        arg_reduces = any(isinstance(r, graph.ArgReduceOp) for r in phase)
        if not arg_reduces and reassociates(phase):
            accs = self.partial_sums_nest(phase, loop_vars, inits, accumulate)
        else:
            accs = self.for_nest(loop_vars, inits, accumulate)
        results = iter(accs)
        for r in phase:
            acc = next(results)
            self.row_values[r] = (
                next(results) if isinstance(r, graph.ArgReduceOp) else self._finalize(r, acc)
            )

    def _arg_step(
        self, r: graph.ArgReduceOp, acc: SSAValue, index: SSAValue, x: SSAValue
    ) -> list[SSAValue]:
        """argmax/argmin: take x and its position where it beats the value so far
        strictly (the first of equal ones stays), or is the first NaN."""
        dim = r.reduce_dims[0]
        position = self.insert(
            arith.IndexCastOp(self.index_value(self.domain.full_index[dim]), i64)
        )
        is_max = isinstance(r, graph.ArgMaxOp)
        if is_float(x.type):
            take = self.insert(arith.CmpfOp(x, acc, "ogt" if is_max else "olt"))
            first_nan = self.insert(
                arith.AndIOp(
                    self.insert(arith.CmpfOp(x, x, "uno")),
                    self.insert(arith.CmpfOp(acc, acc, "ord")),
                )
            )
            take = self.insert(arith.OrIOp(take, first_nan))
        else:
            take = self.insert(arith.CmpiOp(x, acc, "sgt" if is_max else "slt"))
        return [
            self.insert(arith.SelectOp(take, x, acc)),
            self.insert(arith.SelectOp(take, position, index)),
        ]

    def partial_sums_nest(
        self,
        phase: Sequence[graph.ReduceOp],
        loop_vars: Sequence[LoopVar],
        carried: list[SSAValue],
        body: LoopBody,
    ) -> list[SSAValue]:
        """`for_nest` for accumulators of float sums or products over several reduced dims:
        each inner loop starts from the identity and its partial result is combined into the
        enclosing loop's accumulator (blocked summation, as torch's cascade sum), so that the
        rounding error grows with the sum of the extents, not their product. One carried
        accumulator through the whole nest would add a 6x33 sum's 198 values one by one, and
        of many equal values its rounding errors add up far past eager's."""
        if len(loop_vars) < 2:
            return self.for_nest(loop_vars, carried, body)
        identities = [self.identity(r) for r in phase]

        def outer(accs: list[SSAValue]) -> list[SSAValue]:
            partials = self.partial_sums_nest(phase, loop_vars[1:], identities, body)
            return [
                self.insert(reduction_combiner(r)(acc, partial))
                for r, acc, partial in zip(phase, accs, partials, strict=True)
            ]

        return self.for_nest(loop_vars[:1], carried, outer)

    def _finalize(self, r: graph.ReduceOp, acc: SSAValue) -> SSAValue:
        if isinstance(r, graph.ReduceMeanOp):
            reduced = tuple(dims_of(r.input)[k] for k in r.reduce_dims)
            if self.sizes is not None and any(isinstance(d, str) for d in reduced):
                divisor = self.sizes.count(reduced, acc.type)
            else:
                count = numel([shape_of(r.input)[k] for k in r.reduce_dims])
                divisor = self.constant(float(count), acc.type)
            acc = self.insert(arith.DivfOp(acc, divisor))
        computed = compute_type(dtype_of(r.result))
        if acc.type == f64 and computed == f32:  # a short sum in f64, rounded once
            acc = self.insert(arith.TruncFOp(acc, computed))
        return from_compute(self, acc, dtype_of(r.result))

    def for_nest(
        self, loop_vars: Sequence[LoopVar], carried: list[SSAValue], body: LoopBody
    ) -> list[SSAValue]:
        """Nested `scf.for` over `loop_vars` (outer first) carrying `carried` as iter_args;
        `body` maps the innermost iteration's carried values to the next ones."""
        if not loop_vars:
            return body(carried)
        v = loop_vars[0]
        limits = (self.index_constant(0), self.loop_extent(v), self.index_constant(1))
        return emit_for(
            self, v, limits, carried, lambda inner: self.for_nest(loop_vars[1:], inner, body)
        )

    # -- scopes --------------------------------------------------------------------------------

    @contextmanager
    def child_scope(
        self, block: Block, op: Operation, var_values: dict[int, SSAValue], barrier: bool = False
    ) -> Iterator[Scope]:
        """Fill `block` of `op` (already inserted in the current scope)."""
        parent = self.scope
        saved, parent.anchor = parent.anchor, op
        self.scope = Scope(block, parent, var_values, barrier=barrier)
        try:
            yield self.scope
        finally:
            self.scope, parent.anchor = parent, saved

    @contextmanager
    def in_scope(self, scope: Scope) -> Iterator[None]:
        saved, self.scope = self.scope, scope
        try:
            yield
        finally:
            self.scope = saved

    def lookup(self, key: object) -> SSAValue | None:
        s: Scope | None = self.scope
        while s is not None:
            if key in s.memo:
                return s.memo[key]
            s = s.parent
        return None

    def target_scope(self, needed: frozenset[int], pure: bool) -> Scope:
        """The outermost scope where a value needing loop variables `needed` may go: the one
        defining the innermost of them, not beyond an scf.if branch unless `pure`."""
        s = self.scope
        while not (needed & s.var_values.keys() or s.root or (s.barrier and not pure)):
            assert s.parent is not None
            s = s.parent
        return s

    def memoized(
        self, key: object, needed: frozenset[int], pure: bool, compute: Callable[[], SSAValue]
    ) -> SSAValue:
        hit = self.lookup(key)
        if hit is not None:
            return hit
        target = self.target_scope(needed, pure)
        with self.in_scope(target):
            value = compute()
        target.memo[key] = value
        return value

    def memoized_at(
        self, key: object, index: Sequence[Affine], compute: Callable[[], SSAValue]
    ) -> SSAValue:
        """`memoized` for a value computed from the positions `index`: placed where their
        loop variables are known, but kept in its scf.if branch where one of them reads an
        index tensor (that load may run only where the branch runs)."""
        pure = not any(is_gathered(e) for e in index)
        return self.memoized(key, index_vars(index), pure, compute)

    # -- ScalarBuilder -------------------------------------------------------------------------

    def insert(self, op: Operation) -> SSAValue:
        self.scope.insert(op)
        return op.results[0]

    def constant(self, value: float | int, type: Attribute) -> SSAValue:
        entry = self.scope
        while entry.parent is not None:
            entry = entry.parent
        key = ("constant", repr(value), type)
        if key not in entry.memo:
            attr = (
                FloatAttr(float(value), type)  # type: ignore[call-overload]
                if is_float(type)
                else IntegerAttr(int(value), type)  # type: ignore[call-overload]
            )
            op = arith.ConstantOp(attr)  # pyright: ignore[reportArgumentType]
            entry.insert(op)
            entry.memo[key] = op.result
        return entry.memo[key]

    def index_constant(self, value: int) -> SSAValue:
        return self.constant(value, IndexType())

    def entry_value(self, key: object, compute: Callable[[], SSAValue]) -> SSAValue:
        """`compute()` once per `key`, in the kernel's entry block (before its loop)."""
        entry = self.scope
        while entry.parent is not None:
            entry = entry.parent
        if key not in entry.memo:
            with self.in_scope(entry):
                entry.memo[key] = compute()
        return entry.memo[key]

    def loop_extent(self, v: LoopVar) -> SSAValue:
        """The trip count of `v`'s loop: its static extent, or its symbol's runtime size."""
        if v.size is not None and self.sizes is not None:
            return self.sizes.of(v.size)
        return self.index_constant(v.extent)

    # -- indices -------------------------------------------------------------------------------

    def index_value(self, e: Affine) -> SSAValue:
        if not e.terms:
            return self.index_constant(e.const)
        return self.memoized_at(("index", e), (e,), lambda: self._compute_index(e))

    def _compute_index(self, e: Affine) -> SSAValue:
        if e.const == 0 and len(e.terms) == 1 and e.terms[0][1] == 1:
            return self._compute_atom(e.terms[0][0])
        acc: SSAValue | None = None
        for atom, k in e.terms:
            v = self.index_value(Affine(((atom, 1),)))
            if k != 1:
                v = self.insert(arith.MuliOp(v, self.index_constant(k)))
            acc = v if acc is None else self.insert(arith.AddiOp(acc, v))
        assert acc is not None
        if e.const:
            acc = self.insert(arith.AddiOp(acc, self.index_constant(e.const)))
        return acc

    def _compute_atom(self, a: Atom) -> SSAValue:
        if isinstance(a, LoopVar):
            s: Scope | None = self.scope
            while s is not None:
                if a.ident in s.var_values:
                    return s.var_values[a.ident]
                s = s.parent
            raise AssertionError(f"loop variable {a} is not defined here")
        if isinstance(a, Clamp | Reflect | SizedClamp):
            return emit_window_index(self, a)
        if isinstance(a, Within):
            return self.index_value(a.arg)
        if isinstance(a, Gathered):
            return self._gathered(a)
        if isinstance(a, Size):
            assert self.sizes is not None, f"size {a.name} in a kernel without size arguments"
            return self.sizes.of(a.name)
        if isinstance(a, SizedMul | SizedDiv | SizedMod):
            assert self.sizes is not None, "runtime sizes in a kernel without size arguments"
            arg = self.index_value(a.arg)
            if isinstance(a, SizedMul):
                return self.insert(arith.MuliOp(arg, self.sizes.product(a.factor)))
            if isinstance(a, SizedDiv):
                return self.insert(arith.DivUIOp(arg, self.sizes.product(a.divisor)))
            return self.insert(arith.RemUIOp(arg, self.sizes.product(a.modulus)))
        op = arith.DivUIOp if isinstance(a, FloorDiv) else arith.RemUIOp
        c = a.divisor if isinstance(a, FloorDiv) else a.modulus
        return self.insert(op(self.index_value(a.arg), self.index_constant(c)))

    @property
    def error_flag_position(self) -> int:
        """The error flag's argument: after the buffers and outputs (size arguments follow)."""
        return len(self.buffers) + len(self.outputs)

    def _gathered(self, a: Gathered) -> SSAValue:
        """The index tensor's element as an index in [0, size): wrapped where torch wraps,
        clamped (to 0) when outside, which also sets the kernel's error flag."""
        i = self.insert(arith.IndexCastOp(self.value_at(a.indices, a.at), IndexType()))
        zero = self.index_constant(0)
        size = (
            self.sizes.of(a.symbol)
            if a.symbol is not None and self.sizes is not None
            else self.index_constant(a.size)
        )
        if a.wrap:
            negative = self.insert(arith.CmpiOp(i, zero, "slt"))
            i = self.insert(arith.SelectOp(negative, self.insert(arith.AddiOp(i, size)), i))
        bad = self.insert(arith.CmpiOp(i, size, "uge"))  # negative ones are large unsigned
        report = Block()
        report.add_ops(
            [
                memref.StoreOp.get(
                    self.constant(1, i8), self.args[self.error_flag_position], [zero]
                ),
                scf.YieldOp(),
            ]
        )
        self.scope.insert(scf.IfOp(bad, [], Region(report)))
        return self.insert(arith.SelectOp(bad, zero, i))

    def access(self, value: SSAValue, index: Index) -> list[SSAValue]:
        """memref indices of `value`'s element at `index` in its buffer."""
        if self.sizes is not None and is_symbolic(value):
            sizes, dims = self.sizes, dims_of(value)
            offset = self.memoized_at(
                ("offset", dims, index), index, lambda: sizes.offset(dims, index)
            )
            return [offset]
        if self.domain.flat:
            return [self.index_value(linearize(index, shape_of(value)))]
        self.accesses.setdefault(value, []).append(index)
        runs = self.buffer_runs.get(value)
        if runs is not None:
            index = merge_index(index, shape_of(value), runs)
        return [self.index_value(e) for e in index]

    def build_merged(self) -> func.FuncOp:
        """The kernel (`build`), built again with merged dims where some of its buffers divide
        less so (`merged_buffers`)."""
        kernel = self.build()
        runs = self.merged_buffers()
        args = (self.name, self.group, self.leaves, self.buffers, self.merge_dims)
        if self.rows_merged and self._divides_merged(runs):
            # a reduction's merged row loop that some buffer still reads through a division:
            # its dims looped over one by one instead (`nd_domain`)
            return KernelBuilder(
                *args[:4], False, self.size_table, wide_sums=self.wide_sums
            ).build_merged()
        if not runs:
            return kernel
        return KernelBuilder(*args, self.size_table, runs, wide_sums=self.wide_sums).build()

    def _divides_merged(self, runs: dict[SSAValue, Runs]) -> bool:
        """Whether some buffer access of this kernel divides even with the buffers' dims
        merged by `runs`."""
        for v, indices in self.accesses.items():
            merged = runs.get(v)
            for index in indices:
                at = index if merged is None else merge_index(index, shape_of(v), merged)
                if any(divisions(e) for e in at):
                    return True
        return False

    def merged_buffers(self) -> dict[SSAValue, Runs]:
        """The buffers of the built kernel whose dims to merge (`merged_buffer_dims`)."""
        merged: dict[SSAValue, Runs] = {}
        for v, indices in self.accesses.items():
            runs = merged_buffer_dims(shape_of(v), indices)
            if runs is not None:
                merged[v] = runs
        return merged

    # -- values --------------------------------------------------------------------------------

    def value_at(self, v: SSAValue, index: Index) -> SSAValue:
        """The scalar value of `v`'s element at `index`."""
        return self.memoized(
            ("value", v, index), index_vars(index), False, lambda: self._compute_value(v, index)
        )

    def _compute_value(self, v: SSAValue, index: Index) -> SSAValue:
        leaf = self.leaves.get(v)
        if leaf is not None:
            return self._leaf_at(leaf, v, index)
        op = v.owner
        assert isinstance(op, Operation)
        if isinstance(op, graph.ConcatOp):
            return self._concat_at(op, index, 0)
        if isinstance(op, graph.PadOp):
            return pad_value_at(self, op, index)
        if isinstance(op, graph.PatchesOp):
            return patches_value_at(self, op, index)
        if isinstance(op, graph.PoolOp):
            return pool_value_at(self, op, index)
        if is_real_reduction(op):
            return self._row_value(op, index)
        if isinstance(op, graph.ScanOp):  # emit_scan sets its value at its own index
            raise self.error(f"the result of '{op.name}' is read at another index than its own")
        if isinstance(op, graph.IotaOp):
            return iota_value(self, op, index)
        if isinstance(op, graph.SizeValueOp):
            if self.sizes is None:
                raise self.error("a size of the call in a kernel without a size table")
            return self.sizes.value(op)
        operands = [
            self.value_at(o, i)
            for o, i in zip(
                op.operands,
                operand_indices(op, index, self.dim_size, self.dim_factors),
                strict=True,
            )
        ]
        if isinstance(op, MOVES_ITS_OPERAND):
            return operands[0]
        if isinstance(op, graph.CastOp):
            return emit_cast(self, operands[0], dtype_of(op.input), dtype_of(op.result))
        if isinstance(op, graph.WhereOp):
            return emit_select(self, *operands)
        return emit_elementwise(self, op.name, operands, dtype_of(op.operands[0]))

    def _leaf_at(self, leaf: Leaf, v: SSAValue, index: Index) -> SSAValue:
        t = dtype_of(v)
        if leaf.splat is not None:
            return self.constant(leaf.splat, t)
        if 0 in shape_of(v):
            # An empty buffer is never read: what reads it runs in a loop of no trips (a sum
            # of no elements). A load would be placed before that loop where its index does
            # not depend on it, and read outside the buffer; a constant takes its place.
            return self.constant(0, t)
        assert leaf.arg is not None
        loaded = self.insert(memref.LoadOp.get(self.args[leaf.arg], self.access(v, index)))
        return self.insert(arith.TruncIOp(loaded, i1)) if t == i1 else loaded

    def _row_value(self, op: graph.ReduceOp, index: Index) -> SSAValue:
        if not reads_own_row(index, self.domain.row_index(op.keeps_dims), shape_of(op.result)):
            raise self.error(
                f"the result of '{op.name}' is read at another row than its own "
                "(one row loop cannot express it)"
            )
        return self.row_values[op]

    def _concat_at(self, op: graph.ConcatOp, index: Index, first: int) -> SSAValue:
        """`scf.if` chain over the inputs from `first` on, skipping the tests the index's
        bounds already decide. An input's offset is the sum of the sizes before it along the
        axis: static, or with the runtime sizes of symbolic ones (`size_index`)."""
        axis = op.axis
        offsets = [constant_index(0)]
        for v in op.inputs:
            offsets.append(add(offsets[-1], self.dim_size(dims_of(v)[axis])))
        lo, hi = bounds(index[axis])
        k = first
        while k < len(op.inputs) - 1 and bounds(offsets[k + 1])[1] <= lo:  # (all empty: never runs)
            k += 1
        size = bounds(self.dim_size(dims_of(op.inputs[k])[axis]))[1]
        at = within(add(index[axis], scale(offsets[k], -1)), 0, size - 1)
        shifted = index[:axis] + (at,) + index[axis + 1 :]
        if k == len(op.inputs) - 1 or hi < bounds(offsets[k + 1])[0]:
            return self.value_at(op.inputs[k], shifted)
        cond = self.insert(
            arith.CmpiOp(self.index_value(index[axis]), self.index_value(offsets[k + 1]), "ult")
        )
        then_block, else_block = Block(), Block()
        branch = scf.IfOp(cond, [dtype_of(op.result)], Region(then_block), Region(else_block))
        self.scope.insert(branch)
        with self.child_scope(then_block, branch, {}, barrier=True):
            self.scope.insert(scf.YieldOp(self.value_at(op.inputs[k], shifted)))
        with self.child_scope(else_block, branch, {}, barrier=True):
            self.scope.insert(scf.YieldOp(self._concat_at(op, index, k + 1)))
        return branch.results[0]

    def dim_size(self, d: graph.Dim) -> Affine:
        """A dim's size as an index: a constant, or a symbol's runtime size."""
        if isinstance(d, int):
            return constant_index(d)
        assert self.sizes is not None, f"symbolic size {d} in a kernel without size arguments"
        return size_index(self.sizes.table, d)

    def dim_factors(self, d: str) -> tuple[graph.Dim, ...] | None:
        """A symbolic dim's factors where its size is one product (`product_factors`)."""
        return None if self.sizes is None else product_factors(self.sizes.table, d)

    def store(self, v: SSAValue, output: int, index: Index) -> None:
        d = self.domain
        written = v if d.flat else d.rows.written_value(v, lambda op: True)
        x = self.value_at(v, index) if written is v else self.value_at(written, d.full_index)
        if dtype_of(v) == i1:
            x = self.insert(arith.ExtUIOp(x, i8))
        ref = self.args[len(self.buffers) + output]
        self.scope.insert(memref.StoreOp.get(x, ref, self.access(v, index)))
