"""
Column reductions in blocks of columns (cpu): a kernel whose innermost parallel dimension `c`
walks memory with unit stride while each of its iterations reduces over rows (a sum over dim 0
of a `[rows, columns]` tensor, a mean over an image's pixels in NHWC, a bias gradient) keeps
one serial chain of scalar adds per column, its loads a row apart: LLVM vectorizes innermost
loops only, and the row loop is innermost. Here each iteration of the parallel loop takes a
block of `BLOCK` columns instead, and every phase of its body runs over the block, innermost:

    scf.parallel (%i, %c) = (0, 0) to (%n, 768)         scf.parallel (%i, %b) = (0, 0) to (%n, 12)
      %s = scf.for %r = 0 to 49 iter_args(%a = 0.0)  ->    %acc = memref.alloca() : memref<64xf32>
        %a + x[%i, %r, %c]                                 for %j: %acc[%j] = 0.0
      y[%i, %c] = %s / 49                                  scf.for %r = 0 to 49 { for %j: %acc[%j] += x[%i, %r, 64 %b + %j] }
                                                           for %j: y[%i, 64 %b + %j] = %acc[%j] / 49

Each column sums its rows in a vector lane of its own (as eager's outer reductions do). A row
loop of plain ops whose accumulators all regroup (a float sum or product marked `reassoc`, with
other sums, maxima or minima beside it; no argmax) adds its rows in runs of `ROW_BLOCK` rather
than one by one, as torch's cascade sum does: per run, the loop over the block's columns folds
the run's rows from the identity, unrolled (partial sums in registers, 16 loads per column
where a serial sum loads and stores the column's sum at every row), and adds that into the
block of sums; rows after the last whole run are added one by one. Longer loops take more
levels (runs of 256 rows summed into a block of partials, which is added into the sums and
reset), as many as keep each level at `ROW_BLOCK` values or fewer (`_row_levels`). A serial
sum of 64 rows of one sign gathers 2-4x eager's rounding error, in runs of 16 about eager's.
Any other row loop keeps the order the loop IR gives. A loop without results (the
write loop of a normalization over channels in NCHW) is blocked the same way. A float value
that a loop reads from the part of the body before it (a mean, in the variance loop after it)
is computed once per column into a block of its own; index arithmetic is computed again where
it is used. A kernel with symbolic sizes (docs/dynamic-shapes.md) is blocked as a static one
where its columns are a static count: its row loops run to a size argument, defined outside
the parallel loop as a constant bound is (a column sum over a runtime batch, 6-15x faster so
than a column at a time). Innermost dims of a runtime size, and bodies other than row loops
between plain ops (a nested parallel loop, a store before the last loop), are left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import AnyFloat, FloatAttr, IndexType, IntegerAttr, IntegerType
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from xfuse.ir.constants import int_constant
from xfuse.passes.lowering.reductions import REASSOC
from xfuse.passes.lowering.scalar_ops import REDUCTION_IDENTITIES, reduction_identity

_Fill = Callable[[Block, dict[SSAValue, SSAValue], SSAValue], None]
"""What fills the body of a loop over a block's columns: the body, the value map (old values
to new, the column index included), and the loop's index `%j`."""

BLOCK = 64
"""Columns per block: four AVX-512 vectors of f32 (eight of AVX2), independent add chains."""

MIN_COLUMNS = 8
"""Fewer columns than this gain nothing from a vector across them."""

ROW_BLOCK = 16
"""Rows per run of a blocked sum (`_row_levels`): torch's cascade sum adds 16 at each level."""

RUNTIME_ROW_LEVELS = 3
"""Levels of runs for a row loop of a runtime count (no level adds more than `ROW_BLOCK`
values up to 16**4 rows)."""

_REGROUPED = (arith.AddfOp, arith.MulfOp)
"""Float combiners whose result depends on the grouping (marked `reassoc` by lower-to-loops)."""


def block_column_reductions(parallel: scf.ParallelOp) -> bool:
    """Rewrite `parallel` (a kernel's loop) to take `BLOCK` columns per iteration where its
    innermost dimension is a column of reductions (module docstring); whether it did."""
    columns = _columns(parallel)
    if columns is None:
        return False
    body = parallel.body.block
    ops = [op for op in body.ops if not isinstance(op, scf.ReduceOp)]
    loops = [op for op in ops if isinstance(op, scf.ForOp)]
    if not _blockable(parallel, ops, loops):
        return False
    _Blocked(parallel, columns, ops, loops).build()
    return True


def _columns(parallel: scf.ParallelOp) -> int | None:
    """The constant trip count of the innermost parallel dimension (from 0 by 1), or None."""
    if parallel.res or not parallel.upperBound:
        return None
    lb, ub, step = parallel.lowerBound[-1], parallel.upperBound[-1], parallel.step[-1]
    columns = int_constant(ub)
    if int_constant(lb) != 0 or int_constant(step) != 1 or columns is None or columns < MIN_COLUMNS:
        return None
    return columns


def _inside(op: Operation, ancestor: Operation) -> bool:
    while (op := op.parent_op()) is not None:  # type: ignore[assignment]
        if op is ancestor:
            return True
    return False


def _blockable(parallel: scf.ParallelOp, ops: list[Operation], loops: list[scf.ForOp]) -> bool:
    """Row loops (bounds from outside the parallel loop) between ops without regions, at least
    one a reduction (results); stores in loops (each element's once per row, as before) or after
    the last loop; some load in a loop walks the columns with unit stride."""
    if not any(loop.results for loop in loops):
        return False
    last = ops.index(loops[-1])
    for i, op in enumerate(ops):
        if isinstance(op, scf.ForOp):
            continue
        if op.regions or (isinstance(op, memref.StoreOp) and i < last):
            return False
        if isinstance(op, memref.AllocaOp | memref.AllocOp):
            return False
    for loop in loops:
        if any(isinstance(o, memref.AllocaOp | scf.ParallelOp) for o in loop.walk()):
            return False
        bounds = (loop.lb, loop.ub, loop.step)
        if any(isinstance(v, OpResult) and _inside(v.op, parallel) for v in bounds):
            return False
    column = parallel.body.block.args[-1]
    return any(
        isinstance(o, memref.LoadOp) and o.indices and unit_stride_in(o.indices[-1], column)
        for loop in loops
        for o in loop.walk()
    )


def _combiners(loop: scf.ForOp) -> list[type[Operation]] | None:
    """The combining op of each of `loop`'s accumulators where each is one that may be
    regrouped (its block argument used only by the op it yields, an op with an identity; a float
    sum or product marked `reassoc`) and one is a float sum or product; else None."""
    body = loop.body.block
    yielded = body.last_op
    if not loop.results or not isinstance(yielded, scf.YieldOp):
        return None
    found: list[type[Operation]] = []
    for arg, value in zip(body.args[1:], yielded.operands, strict=True):
        op = value.owner
        if not isinstance(op, Operation) or type(op) not in REDUCTION_IDENTITIES:
            return None
        if arg not in op.operands or len(list(arg.uses)) != 1:
            return None
        if isinstance(op, _REGROUPED) and REASSOC.data - set(op.fastmath.data):
            return None
        found.append(type(op))
    return found if any(c in _REGROUPED for c in found) else None


def _row_levels(loop: scf.ForOp) -> int:
    """How many levels of runs `loop`'s rows are summed in (torch's cascade sum): none for up
    to `ROW_BLOCK` rows, else enough that no level adds more than `ROW_BLOCK` values (64 rows:
    4 runs of 16; 4096 rows: 16 runs of 256 of 16); `RUNTIME_ROW_LEVELS` for a runtime count."""
    if int_constant(loop.step) != 1 or any(op.regions for op in loop.body.block.ops):
        return 0
    lower, upper = int_constant(loop.lb), int_constant(loop.ub)
    if lower is None or upper is None:
        return RUNTIME_ROW_LEVELS
    levels = 0
    while ROW_BLOCK ** (levels + 1) < upper - lower:
        levels += 1
    return levels


def _whole_runs(lower: SSAValue, upper: SSAValue, run: int) -> bool:
    """Whether rows `lower` to `upper` are constants a whole number of runs of `run` apart: then
    no run is cut short at `upper`, nor, runs being powers of `ROW_BLOCK`, any shorter run."""
    first, last = int_constant(lower), int_constant(upper)
    return first is not None and last is not None and (last - first) % run == 0


def _identity(combiner: type[Operation], t: Attribute) -> FloatAttr | IntegerAttr:
    value = reduction_identity(combiner, t)
    if isinstance(t, AnyFloat):
        return FloatAttr(float(value), t)
    return IntegerAttr(int(value), cast(IntegerType, t))


def _combine(combiner: type[Operation], a: SSAValue, b: SSAValue) -> Operation:
    """`combiner(a, b)`, a float sum or product marked `reassoc` as lower-to-loops marks it."""
    make = cast(Callable[..., Operation], combiner)
    return make(a, b, REASSOC) if combiner in _REGROUPED else make(a, b)


def unit_stride_in(index: SSAValue, column: SSAValue) -> bool:
    """Whether `index` is `column` plus values that do not depend on it."""
    if index is column:
        return True
    if isinstance(index, OpResult) and isinstance(index.op, arith.AddiOp):
        a, b = index.op.lhs, index.op.rhs
        return (unit_stride_in(a, column) and not depends_on(b, column)) or (
            unit_stride_in(b, column) and not depends_on(a, column)
        )
    return False


def depends_on(value: SSAValue, column: SSAValue) -> bool:
    todo, seen = [value], set[SSAValue]()
    while todo:
        v = todo.pop()
        if v is column:
            return True
        if v in seen or not isinstance(v, OpResult):
            continue
        seen.add(v)
        todo.extend(v.op.operands)
    return False


def _inline(block: Block, mapper: dict[SSAValue, SSAValue], into: Block) -> list[SSAValue]:
    """`block`'s ops cloned at the end of `into`, their operands through `mapper` (which gains
    each clone's results); the values its `scf.yield` yields, mapped."""
    yielded: list[SSAValue] = []
    for op in block.ops:
        if isinstance(op, scf.YieldOp):
            yielded = [mapper.get(v, v) for v in op.operands]
            continue
        clone = op.clone(value_mapper=mapper)
        into.add_op(clone)
        for old, new in zip(op.results, clone.results, strict=True):
            mapper[old] = new
    return yielded


class _Rows:
    """A row loop whose accumulators regroup (`_combiners`), folded in runs."""

    def __init__(self, loop: scf.ForOp, combiners: list[type[Operation]]) -> None:
        self.loop, self.combiners = loop, combiners

    def fold(
        self, column: Block, values: dict[SSAValue, SSAValue], rows: list[SSAValue]
    ) -> list[SSAValue]:
        """At the end of `column`, the loop's body once per row of `rows` (in order), its
        accumulators starting from the identity; the partial results."""
        body = self.loop.body.block
        carried: list[SSAValue] = []
        for combiner, result in zip(self.combiners, self.loop.results, strict=True):
            identity = arith.ConstantOp(_identity(combiner, result.type))
            column.add_op(identity)
            carried.append(identity.result)
        for row in rows:
            mapper = dict(values)
            mapper[body.args[0]] = row
            mapper.update(zip(body.args[1:], carried, strict=True))
            carried = _inline(body, mapper, column)
        return carried


class _Blocked:
    """The new body of the parallel loop (one block of columns per iteration), built in place."""

    def __init__(
        self, parallel: scf.ParallelOp, columns: int, ops: list[Operation], loops: list[scf.ForOp]
    ) -> None:
        self.parallel, self.columns, self.ops, self.loops = parallel, columns, ops, loops
        self.old = parallel.body.block
        self.results: dict[SSAValue, SSAValue] = {}
        """Each loop result -> the block (alloca) that holds it per column."""
        self.kept: dict[SSAValue, SSAValue] = {}
        """Each float value of the body a loop reads -> the block that holds it per column."""

    def build(self) -> None:
        index = IndexType()
        new = Block(arg_types=[index] * len(self.old.args))
        self.block = new
        self.start = self._add(arith.MuliOp(new.args[-1], self._index(BLOCK)))
        left = self._add(arith.SubiOp(self._index(self.columns), self.start))
        self.count = self._add(arith.MinUIOp(left, self._index(BLOCK)))
        for loop in self.loops:
            self._loop(loop)
        self._each_column(new, self._last_pass)
        new.add_op(scf.ReduceOp())
        blocks = -(-self.columns // BLOCK)
        upper = list(self.parallel.upperBound)
        upper[-1] = self._constant_before(blocks)
        Rewriter.replace_op(
            self.parallel,
            scf.ParallelOp(
                list(self.parallel.lowerBound), upper, list(self.parallel.step), Region(new)
            ),
        )

    # -- helpers -------------------------------------------------------------------------------

    def _add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def _index(self, value: int) -> SSAValue:
        return self._add(arith.ConstantOp(IntegerAttr(value, IndexType())))

    def _constant_before(self, value: int) -> SSAValue:
        op = arith.ConstantOp(IntegerAttr(value, IndexType()))
        Rewriter.insert_op(op, InsertPoint.before(self.parallel))
        return op.result

    def _alloca(self, t: Attribute) -> SSAValue:
        op = memref.AllocaOp.get(t, shape=[BLOCK])
        self.block.add_op(op)
        return op.memref

    def _each_column(self, block: Block, fill: _Fill) -> None:
        """`for %j = 0 to count`, at the end of `block`, its body made by `fill` with the old
        column index mapped to `start + j` and the other parallel indices to the new ones."""
        body = Block(arg_types=[IndexType()])
        j = body.args[0]
        column = arith.AddiOp(self.start, j)
        body.add_op(column)
        values: dict[SSAValue, SSAValue] = dict(zip(self.old.args, self.block.args, strict=True))
        values[self.old.args[-1]] = column.result
        fill(body, values, j)
        body.add_op(scf.YieldOp())
        zero = arith.ConstantOp(IntegerAttr(0, IndexType()))
        one = arith.ConstantOp(IntegerAttr(1, IndexType()))
        block.add_ops([zero, one, scf.ForOp(zero, self.count, one, [], Region(body))])

    def _value(
        self, v: SSAValue, body: Block, values: dict[SSAValue, SSAValue], j: SSAValue
    ) -> SSAValue:
        """`v` of the old body at the current column, in `body`: a loop result or kept value
        loaded from its block, anything else of the old body cloned (with what it uses)."""
        if v in values:
            return values[v]
        if v in self.results or v in self.kept:
            load = memref.LoadOp.get((self.results | self.kept)[v], [j])
            body.add_op(load)
            values[v] = load.res
            return load.res
        if not isinstance(v, OpResult) or v.op.parent_block() is not self.old:
            return v  # defined outside the parallel loop
        for operand in v.op.operands:
            self._value(operand, body, values, j)
        clone = v.op.clone(value_mapper=values)
        body.add_op(clone)
        for old, new in zip(v.op.results, clone.results, strict=True):
            values[old] = new
        return values[v]

    def _last_pass(self, body: Block, values: dict[SSAValue, SSAValue], j: SSAValue) -> None:
        """Every op of the old body but its loops, in order: the results, and the stores."""
        for op in self.ops:
            if isinstance(op, scf.ForOp):
                continue
            for v in op.results or op.operands:
                self._value(v, body, values, j)
            if not op.results:
                body.add_op(op.clone(value_mapper=values))

    def _free(self, loop: scf.ForOp) -> list[SSAValue]:
        """Values of the old body (or its column index) that `loop` uses."""
        found: dict[SSAValue, None] = {}
        for op in loop.walk():
            for v in op.operands:
                owner = v.op.parent_block() if isinstance(v, OpResult) else None
                if isinstance(v, BlockArgument):
                    owner = v.block
                if owner is self.old:
                    found[v] = None
        return list(found)

    def _keeps(self, v: SSAValue) -> bool:
        """Whether a loop's use of `v` reads it from a block of its own: a value of the body
        (not an index, a constant or another loop's result) that no earlier loop keeps."""
        if v in self.results or v in self.kept or isinstance(v.type, IndexType):
            return False
        return not (isinstance(v, OpResult) and isinstance(v.op, arith.ConstantOp))

    def _loop(self, loop: scf.ForOp) -> None:
        """Blocks of the loop's accumulators, initialised per column; the float values it reads
        from the body kept per column; then the row loop around a loop over the block, or, where
        `_row_levels` says so, runs of rows (`_rows`)."""
        accumulators = [self._alloca(r.type) for r in loop.results]
        kept = {v: self._alloca(v.type) for v in self._free(loop) if self._keeps(v)}
        combiners = _combiners(loop)
        levels = _row_levels(loop) if combiners is not None else 0
        partials = [[self._alloca(r.type) for r in loop.results] for _ in range(levels - 1)]

        def initialise(body: Block, values: dict[SSAValue, SSAValue], j: SSAValue) -> None:
            for init, acc in zip(loop.iter_args, accumulators, strict=True):
                body.add_op(memref.StoreOp.get(self._value(init, body, values, j), acc, [j]))
            for v, block in kept.items():
                body.add_op(memref.StoreOp.get(self._value(v, body, values, j), block, [j]))
            for level in partials:
                assert combiners is not None
                for combiner, result, block in zip(combiners, loop.results, level, strict=True):
                    identity = arith.ConstantOp(_identity(combiner, result.type))
                    body.add_ops([identity, memref.StoreOp.get(identity.result, block, [j])])

        self._each_column(self.block, initialise)
        self.kept.update(kept)
        if combiners is None or levels == 0:
            self.block.add_op(self._row_loop(loop, loop.lb, loop.ub, accumulators))
        else:
            whole = _whole_runs(loop.lb, loop.ub, ROW_BLOCK**levels)
            rows = _Rows(loop, combiners)
            self._rows(rows, loop.lb, loop.ub, [accumulators, *partials], self.block, whole)
        for result, acc in zip(loop.results, accumulators, strict=True):
            self.results[result] = acc

    def _rows(
        self,
        rows: _Rows,
        lower: SSAValue,
        upper: SSAValue,
        targets: list[list[SSAValue]],
        into: Block,
        whole: bool,
    ) -> None:
        """At the end of `into`, the rows `lower` to `upper` folded into the blocks `targets[0]`
        in runs (torch's cascade sum, `_row_levels`): with one target, runs of `ROW_BLOCK`
        (`_runs`); with more, runs of `ROW_BLOCK ** len(targets)` rows, each folded into
        `targets[1]` (which holds the identity; in shorter runs, through the targets after it),
        then combined into `targets[0]`, and `targets[1]` reset to the identity. With `whole`,
        the rows are a whole number of runs (none ends at `upper` before its length)."""
        if len(targets) == 1:
            self._runs(rows, lower, upper, targets[0], into, whole)
            return
        run = arith.ConstantOp(IntegerAttr(ROW_BLOCK ** len(targets), IndexType()))
        body = Block(arg_types=[IndexType()])
        start = body.args[0]
        stop = arith.AddiOp(start, run.result)
        body.add_op(stop)
        end = stop.result
        if not whole:
            cut = arith.MinUIOp(end, upper)
            body.add_op(cut)
            end = cut.result
        self._rows(rows, start, end, targets[1:], body, whole)
        inner, outer = targets[1], targets[0]

        def combine(column: Block, values: dict[SSAValue, SSAValue], j: SSAValue) -> None:
            for combiner, part, acc in zip(rows.combiners, inner, outer, strict=True):
                a, p = memref.LoadOp.get(acc, [j]), memref.LoadOp.get(part, [j])
                total = _combine(combiner, a.res, p.res)
                identity = arith.ConstantOp(_identity(combiner, p.res.type))
                column.add_ops([a, p, total, identity])
                column.add_op(memref.StoreOp.get(total.results[0], acc, [j]))
                column.add_op(memref.StoreOp.get(identity.result, part, [j]))

        self._each_column(body, combine)
        body.add_op(scf.YieldOp())
        into.add_ops([run, scf.ForOp(lower, upper, run.result, [], Region(body))])

    def _runs(
        self,
        rows: _Rows,
        lower: SSAValue,
        upper: SSAValue,
        target: list[SSAValue],
        into: Block,
        whole: bool,
    ) -> None:
        """At the end of `into`, the rows `lower` to `upper` folded into the block `target` in
        runs of `ROW_BLOCK`: per run, a loop over the block whose body folds the run's rows
        from the identity, unrolled (the partial results stay in registers, the column loop
        stays innermost for the vectorizer), and combines them into `target`; the rows after
        the last whole run (none with `whole`) are folded into `target` one by one."""
        run = arith.ConstantOp(IntegerAttr(ROW_BLOCK, IndexType()))
        into.add_op(run)
        stop = upper
        if not whole:
            span = arith.SubiOp(upper, lower)
            count = arith.DivUIOp(span.result, run.result)
            length = arith.MuliOp(count.result, run.result)
            last = arith.AddiOp(lower, length.result)
            into.add_ops([span, count, length, last])
            stop = last.result
        body = Block(arg_types=[IndexType()])
        starts: list[SSAValue] = [body.args[0]]
        for k in range(1, ROW_BLOCK):
            offset = arith.ConstantOp(IntegerAttr(k, IndexType()))
            row = arith.AddiOp(body.args[0], offset.result)
            body.add_ops([offset, row])
            starts.append(row.result)

        def fold(column: Block, values: dict[SSAValue, SSAValue], j: SSAValue) -> None:
            for v in self._free(rows.loop):
                self._value(v, column, values, j)
            partials = rows.fold(column, values, starts)
            for combiner, part, acc in zip(rows.combiners, partials, target, strict=True):
                a = memref.LoadOp.get(acc, [j])
                total = _combine(combiner, a.res, part)
                column.add_ops([a, total, memref.StoreOp.get(total.results[0], acc, [j])])

        self._each_column(body, fold)
        body.add_op(scf.YieldOp())
        into.add_op(scf.ForOp(lower, stop, run.result, [], Region(body)))
        if not whole:
            into.add_op(self._row_loop(rows.loop, stop, upper, target))

    def _row_loop(
        self, loop: scf.ForOp, lower: SSAValue, upper: SSAValue, accumulators: list[SSAValue]
    ) -> scf.ForOp:
        """`for %r = lower to upper` around a loop over the block: `loop`'s body at each column,
        its accumulators loaded from and stored to `accumulators`."""
        rows = Block(arg_types=[IndexType()])
        old_body = loop.body.block

        def step(body: Block, values: dict[SSAValue, SSAValue], j: SSAValue) -> None:
            values[old_body.args[0]] = rows.args[0]
            for arg, acc in zip(old_body.args[1:], accumulators, strict=True):
                load = memref.LoadOp.get(acc, [j])
                body.add_op(load)
                values[arg] = load.res
            for v in self._free(loop):
                self._value(v, body, values, j)
            yielded = _inline(old_body, values, body)
            for value, acc in zip(yielded, accumulators, strict=True):
                body.add_op(memref.StoreOp.get(value, acc, [j]))

        self._each_column(rows, step)
        rows.add_op(scf.YieldOp())
        return scf.ForOp(lower, upper, loop.step, [], Region(rows))
