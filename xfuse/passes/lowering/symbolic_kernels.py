"""
Kernels of groups with symbolic sizes (docs/dynamic-shapes.md, "loops"): one kernel serves
every size of its symbols.

- The kernel takes, after its buffers (and error flag), one `index` argument per input size
  symbol of the function's `graph.sizes` table that its types name (directly or through a
  derived symbol), in the table's order; `xfuse.size_args` names them. A derived symbol is
  computed once in the kernel's entry block from those arguments by its polynomial.
- A buffer with a dynamic dim is a 1-D `memref<?xT>` read and written at a linear offset
  that the kernel computes from its index and the runtime sizes (the stride of a dim is the
  product of the sizes after it); a static buffer keeps its static type. So the LLVM lowering
  needs nothing but a pointer and an offset, as it does for static buffers.
- The loops are one per dim (`symbolic_domain`, never flattened or merged: those decisions
  divide by sizes): the parallel loop over the kept dims and `scf.for`s over the reduced dims,
  bounded by the runtime sizes; a loop variable over a symbol knows an upper bound of it
  (`LoopVar.size`, `upper_bound`) for the index algebra's simplifications, which are then valid
  for every size in range. A mean divides by its runtime count.
- Ops: those with a scalar rule, splat and static constants, reductions (all over the same dims
  of one shape, as static kernels), `broadcast_in_dim`, `permute`, `reshape` (where only the
  first dim of each side is symbolic, the strides stay static; where its symbolic dims stay
  themselves between static runs of equal products, `[2, s, 64]` to `[2, s, 2, 32]`, each run
  maps on its own; else the linear offset maps through divisions and moduli by runtime
  sizes, `operand_index.sized_delinearize`, which `SizeValues.offset` folds back), `slice`
  (a symbolic dim kept whole, or within its first `MIN_SIZE` elements), `iota` (the loop
  index), `gather` (an index is checked against the indexed dim's size, a symbolic one's at
  run time, and reported through the kernel's error flag, which comes after the outputs and
  before the size arguments), one scan along any dim (`ScanLoop`'s rule: its dim the
  sequential loop), `concat` (an input's offset along the axis the sum of the sizes before it,
  a symbol's as a `Size` atom of the index algebra, bounded by its range) and `flip` (element
  i of a dim of size n reads n - 1 - i, n a `Size` atom where the dim is symbolic). An output
  is of the full shape, the row shape, a permute of a value of the full shape (written at
  each element's permuted index, `output_permutation`), or of as many elements as the full
  shape for every size (written at the same linear offset: `[s, s]` in a group of `[1, 1,
  1, s, s]`, `[b, s, 64]` in one of `[b*s, 64]` through runtime divisions; `output_index`).
  Anything else is refused in one line naming the op (`check_symbolic`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from xdsl.dialects import arith
from xdsl.dialects.builtin import DYNAMIC_INDEX, MemRefType, i1, i8, i64
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from xfuse.dialects import fusion, graph
from xfuse.dialects.graph import Dim, SizeExpr, SizesAttr, dims_of, dtype_of, is_symbolic
from xfuse.passes.fusion.kernel_loops import RowShape, ScanLoop
from xfuse.passes.lowering.domains import Domain, nd_domain, output_permutation
from xfuse.passes.lowering.emitter import LoopLoweringError
from xfuse.passes.lowering.index_algebra import (
    UNBOUNDED,
    ZERO,
    Affine,
    Index,
    LoopVar,
    Size,
    SizedDiv,
    add,
    constant_index,
    linearize,
    scale,
)
from xfuse.passes.lowering.operand_index import reshaped_index, sized_delinearize
from xfuse.passes.lowering.scalar_ops import has_scalar_rule


class KernelBuilder(Protocol):
    """What this module asks of `kernel_builder.KernelBuilder`."""

    group: fusion.GroupOp
    outputs: list[SSAValue]
    reductions: list[graph.ReduceOp]
    scans: list[graph.ScanOp]
    args: list[BlockArgument]

    def error(self, reason: str) -> LoopLoweringError: ...

    def row_shape(self) -> RowShape: ...

    def insert(self, op: Operation) -> SSAValue: ...

    def index_constant(self, value: int) -> SSAValue: ...

    def index_value(self, e: Affine) -> SSAValue: ...

    def entry_value(self, key: object, compute: Callable[[], SSAValue]) -> SSAValue: ...

    def memoized_at(
        self, key: object, index: Sequence[Affine], compute: Callable[[], SSAValue]
    ) -> SSAValue: ...


SYMBOLIC_OPS: tuple[type[Operation], ...] = (
    graph.ConstantOp,
    graph.ConcatOp,
    graph.FlipOp,
    graph.ReduceOp,
    graph.BroadcastInDimOp,
    graph.PermuteOp,
    graph.ReshapeOp,
    graph.SliceOp,
    graph.PadOp,
    graph.IotaOp,
    graph.SizeValueOp,
    graph.GatherOp,
    graph.ScanOp,
)
"""The ops a symbolic kernel computes besides those with a scalar rule (a slice reads its
input at `start + stride * i` whatever its limit, a pad tests a padded symbolic dim against
its runtime size, an iota counts along its loop index whatever its length, a size value is
its polynomial of the size arguments, a gather checks an index against a symbolic dim's
runtime size, a scan runs to it)."""


def group_values(group: fusion.GroupOp) -> Iterator[SSAValue]:
    yield from group.block.args
    for op in group.block.ops:
        yield from op.results


def is_symbolic_group(group: fusion.GroupOp) -> bool:
    """Whether the group's kernel reads sizes of the call: a value of symbolic shape, or a
    `graph.size_value`."""
    return any(is_symbolic(v) for v in group_values(group)) or any(
        isinstance(op, graph.SizeValueOp) for op in group.block.ops
    )


def upper_bound(table: SizesAttr, name: str) -> int:
    """An upper bound of symbol `name`: its polynomial of atoms at their upper bounds where
    every coefficient is positive and every bound finite, else `UNBOUNDED`. An input symbol's
    bound is its range's end; a floor division's, its polynomial's bound floor divided."""
    symbol = table.by_name[name]
    if symbol.expr is None:
        return UNBOUNDED if symbol.high is None else min(symbol.high, UNBOUNDED)
    if symbol.divisor is not None:
        bound = _polynomial_bound(table, table.atoms[name][0])
        return bound if bound == UNBOUNDED else bound // symbol.divisor
    return _polynomial_bound(table, table.expansions[name])


def _polynomial_bound(table: SizesAttr, expansion: SizeExpr) -> int:
    """An upper bound of a polynomial of atoms (`upper_bound`)."""
    if any(c < 0 for _, c in expansion.terms):
        return UNBOUNDED
    values: dict[str, int] = {}
    for s in expansion.symbols:
        values[s] = upper_bound(table, s)
        if values[s] == UNBOUNDED:
            return UNBOUNDED
    return min(expansion.evaluate(values), UNBOUNDED)


def size_index(table: SizesAttr, name: str) -> Affine:
    """Symbol `name`'s runtime size as an index (a `Size` atom): within its range for an input
    symbol, and from 0 up to its upper bound (`upper_bound`) for a derived one."""
    symbol = table.by_name[name]
    low = symbol.low if symbol.expr is None else 0
    return Affine(((Size(name, low, upper_bound(table, name)), 1),))


def product_factors(table: SizesAttr, name: str) -> tuple[Dim, ...] | None:
    """Symbol `name`'s factors where its polynomial is one product of two or more (`e0 = s0 *
    s53`: a number above 1 first, then its symbols, a power's as often), else None
    (`operand_index.Factors`)."""
    expansion = table.expansions.get(name)
    if expansion is None or len(expansion.terms) != 1:
        return None
    ((mono, coeff),) = expansion.terms
    found: tuple[Dim, ...] = ((coeff,) if coeff > 1 else ()) + tuple(mono)
    return found if coeff >= 1 and len(found) >= 2 else None


def size_args(group: fusion.GroupOp, table: SizesAttr) -> list[str]:
    """The input symbols the group's sizes depend on, in the table's order."""
    needed: set[str] = set()
    for v in group_values(group):
        for d in dims_of(v) if is_symbolic(v) else ():
            if isinstance(d, str):
                needed |= table.input_dependencies[d]
    for op in group.block.ops:
        if isinstance(op, graph.SizeValueOp):
            for name in op.expr.symbols:
                needed |= table.input_dependencies[name]
    return [s.name for s in table.inputs() if s.name in needed]


def symbolic_buffer_type(value: SSAValue) -> MemRefType[Attribute]:
    t = dtype_of(value)
    return MemRefType(i8 if t == i1 else t, [DYNAMIC_INDEX])


def check_symbolic(b: KernelBuilder) -> None:
    """Refuse (one line naming the op) what a symbolic kernel does not compute yet."""
    for op in b.group.block.ops:
        if isinstance(op, fusion.YieldOp):
            continue
        if not (has_scalar_rule(op.name) or isinstance(op, SYMBOLIC_OPS)):
            raise b.error(f"'{op.name}' on symbolic sizes has no loop lowering yet")


def symbolic_domain(b: KernelBuilder, table: SizesAttr) -> Domain:
    """One loop per dim of size != 1 of the group's full shape (`nd_domain`'s loops, the
    symbolic dims bounded by their runtime sizes); every output of the full or the row shape,
    or written at an index of its own (`output_index`, `Domain.indexed`).
    A scan's group: its dim the sequential loop, every output of its shape (`ScanLoop`)."""

    def loop_var(k: int, d: Dim) -> LoopVar:
        return LoopVar(k, upper_bound(table, d), d) if isinstance(d, str) else LoopVar(k, d)

    if b.scans:
        return _scan_domain(b, loop_var)
    rows = b.row_shape()  # (the same reductions rule as static kernels)
    full = dims_of(b.reductions[0].input) if b.reductions else dims_of(b.outputs[0])
    dims = rows.dims
    row_keep = tuple(1 if k in dims else d for k, d in enumerate(full))
    row = tuple(d for k, d in enumerate(full) if k not in dims)
    domain = nd_domain(rows.full, dims, full, loop_var)
    for v in b.outputs:
        if dims_of(v) in (full, row_keep, row):
            continue
        index = output_index(v, full, domain.full_index, table)
        if index is None or domain.indexed.setdefault(graph.shape_of(v), index) != index:
            raise b.error(
                f"output of shape {graph.fmt_shape(dims_of(v))} is neither the group's full "
                f"shape {graph.fmt_shape(full)}, its row shape, a permute of the full shape, "
                "nor of as many elements for every size (symbolic sizes)"
            )
    return domain


def output_index(
    output: SSAValue, full: tuple[Dim, ...], full_index: Index, table: SizesAttr
) -> Index | None:
    """The index of the element of `output` that the iteration at `full_index` of the group's
    full shape writes: the permuted index of a permute of a value of the full shape
    (`output_permutation`), else, where `output` has as many elements as the full shape for
    every size, the element at the same linear offset (`reshaped_index`: size-1 dims dropped
    or added, a product of symbols split into its factors through runtime divisions); each
    element is written once, at its own index. None otherwise."""
    perm = output_permutation(output, full)
    if perm is not None:
        return tuple(full_index[p] for p in perm)
    dims = dims_of(output)
    if table.expand(graph.dims_numel(dims)) != table.expand(graph.dims_numel(full)):
        return None

    def size_of(d: Dim) -> Affine:
        return constant_index(d) if isinstance(d, int) else size_index(table, d)

    return reshaped_index(
        full_index, full, dims, size_of, functools.partial(product_factors, table)
    )


def _scan_domain(b: KernelBuilder, loop_var: Callable[[int, Dim], LoopVar]) -> Domain:
    """The one scan's shape, its dim the sequential loop (as `scans.scan_domain`, on dims)."""
    if not ScanLoop.computes(len(b.scans), len(b.reductions)):
        raise b.error("a scan shares its kernel with another scan or a reduction")
    scan = b.scans[0]
    full = dims_of(scan.result)
    for v in b.outputs:
        if dims_of(v) != full:
            raise b.error(
                f"output of shape {graph.fmt_shape(dims_of(v))} is not the scan's shape "
                f"{graph.fmt_shape(full)}"
            )
    return nd_domain(graph.shape_of(scan.result), (scan.axis,), full, loop_var)


class SizeValues:
    """The runtime sizes of one kernel as `index` values of its entry block."""

    def __init__(self, b: KernelBuilder, table: SizesAttr, args: list[str], first: int) -> None:
        self.b = b
        self.table = table
        self.args = args
        self.first = first
        """The position of the first size argument among the kernel's arguments."""

    def of(self, name: str) -> SSAValue:
        """Symbol `name`'s size (an input symbol's argument, a derived one's polynomial)."""
        return self.b.entry_value(("size", name), lambda: self._compute(name))

    def _compute(self, name: str) -> SSAValue:
        if name in self.args:
            return self.b.args[self.first + self.args.index(name)]
        symbol = self.table.by_name[name]
        if symbol.expr is not None and symbol.divisor is not None:
            # floor division of a polynomial with non-negative coefficients of sizes
            # (canonical form): a non-negative dividend, so unsigned division floors
            numerator = self.polynomial(self.table.atoms[name][0])
            divisor = self.b.index_constant(symbol.divisor)
            return self.b.insert(arith.DivUIOp(numerator, divisor))
        return self.polynomial(self.table.expansions[name])

    def polynomial(self, e: SizeExpr) -> SSAValue:
        b = self.b
        total: SSAValue | None = None
        for mono, coeff in e.terms:
            term: SSAValue | None = None
            for s in mono:
                x = self.of(s)
                term = x if term is None else b.insert(arith.MuliOp(term, x))
            if term is None:
                term = b.index_constant(coeff)
            elif coeff != 1:
                term = b.insert(arith.MuliOp(term, b.index_constant(coeff)))
            total = term if total is None else b.insert(arith.AddiOp(total, term))
        return total if total is not None else b.index_constant(0)

    def value(self, op: graph.SizeValueOp) -> SSAValue:
        """A `graph.size_value`'s polynomial as an i64, computed once in the entry block."""
        return self.b.entry_value(
            ("size_value", op.expr),
            lambda: self.b.insert(arith.IndexCastOp(self.polynomial(op.expr), i64)),
        )

    def product(self, dims: tuple[Dim, ...]) -> SSAValue:
        """The product of `dims` (static sizes and symbols)."""
        return self.b.entry_value(("product", dims), lambda: self._product(dims))

    def _product(self, dims: tuple[Dim, ...]) -> SSAValue:
        static = 1
        for d in dims:
            if isinstance(d, int):
                static *= d
        names = [d for d in dims if isinstance(d, str)]
        if not names:
            return self.b.index_constant(static)
        if len(names) > 1:
            value = self.b.insert(arith.MuliOp(self.product(tuple(names[:-1])), self.of(names[-1])))
        else:
            value = self.of(names[0])
        if static != 1:
            value = self.b.insert(arith.MuliOp(value, self.b.index_constant(static)))
        return value

    def extent(self, v: LoopVar) -> SSAValue:
        return self.of(v.size) if v.size is not None else self.b.index_constant(v.extent)

    def offset(self, dims: tuple[Dim, ...], index: Index) -> SSAValue:
        """The linear offset of the element at `index` of a row-major buffer of `dims`: an
        affine index where only the first dim is symbolic (its strides are static, and a
        reshape's index folds back as in static kernels), else a sum of index * stride."""
        b = self.b
        if all(isinstance(d, int) for d in dims[1:]):
            return b.index_value(linearize(index, [d if isinstance(d, int) else -1 for d in dims]))
        linear = self._linear_of(index, dims)
        if linear is not None:
            return b.index_value(linear)
        parts: list[tuple[Affine, tuple[Dim, ...]]] = []
        k = 0
        while k < len(index):
            e, width = self._folded_at(index, dims, k)
            k += width
            if e != ZERO:
                parts.append((e, dims[k:]))
        if all(isinstance(d, int) for _, after in parts for d in after):  # static strides
            return b.index_value(add(*(scale(e, _static_product(a)) for e, a in parts)))
        total: SSAValue | None = None
        for e, after in parts:
            term = self._strided(e, after)
            total = term if total is None else b.insert(arith.AddiOp(total, term))
        return total if total is not None else b.index_constant(0)

    def size_of(self, d: Dim) -> Affine:
        return constant_index(d) if isinstance(d, int) else size_index(self.table, d)

    def _linear_of(self, index: Index, dims: tuple[Dim, ...]) -> Affine | None:
        """The linear offset `L` where `index` is the element at `L` of a tensor of `dims`, as
        a reshape with symbolic strides reads it (`sized_delinearize`): the offset without
        the divisions and moduli that would compute it again. None otherwise."""
        first = index[0] if index else None
        if first is None or first.const != 0 or len(first.terms) != 1:
            return None
        atom, k = first.terms[0]
        if k != 1 or not isinstance(atom, SizedDiv):
            return None
        return atom.arg if sized_delinearize(atom.arg, dims, self.size_of) == index else None

    def _folded_at(self, index: Index, dims: tuple[Dim, ...], k: int) -> tuple[Affine, int]:
        """The index of dims `k`, `k + 1`, ... as one: `(a, m)` where the `m` components from
        `k` on are `a` split into those dims (`sized_delinearize`: a symbolic product split
        into its factors, `operand_index.factored_index`), else `(index[k], 1)`."""
        e = index[k]
        if e.const == 0 and len(e.terms) == 1 and e.terms[0][1] == 1:
            atom = e.terms[0][0]
            if isinstance(atom, SizedDiv):
                width = 1 + len(atom.divisor)
                run = dims[k : k + width]
                if run[1:] == atom.divisor and (
                    sized_delinearize(atom.arg, run, self.size_of) == index[k : k + width]
                ):
                    return atom.arg, width
        return e, 1

    def _strided(self, e: Affine, stride: tuple[Dim, ...]) -> SSAValue:
        """`e * product(stride)`, placed where `e` is known."""
        b = self.b
        if all(d == 1 for d in stride):
            return b.index_value(e)

        def compute() -> SSAValue:
            return b.insert(arith.MuliOp(b.index_value(e), self.product(stride)))

        return b.memoized_at(("strided", e, stride), (e,), compute)

    def count(self, dims: tuple[Dim, ...], type: Attribute) -> SSAValue:
        """The product of `dims` as a float of `type` (a mean's divisor)."""
        b = self.b

        def compute() -> SSAValue:
            n = b.insert(arith.IndexCastOp(self.product(dims), i64))
            return b.insert(arith.SIToFPOp(n, type))  # type: ignore[arg-type]  # a float type

        return b.entry_value(("count", dims, type), compute)


def _static_product(dims: tuple[Dim, ...]) -> int:
    return math.prod(d for d in dims if isinstance(d, int))


__all__ = [
    "SYMBOLIC_OPS",
    "SizeValues",
    "check_symbolic",
    "is_symbolic_group",
    "output_index",
    "size_args",
    "size_index",
    "symbolic_buffer_type",
    "symbolic_domain",
    "upper_bound",
]
