"""
Transposes in blocks of the inner dimension (cpu): a kernel whose two parallel dimensions
`(%o, %i)` store with unit stride in `%i` while some load walks memory with unit stride in `%o`
(an elementwise op with a permute between its operands: ConvNeXt's residual add of an NHWC
branch into NCHW) reads that operand `O` elements apart at every inner iteration. Over the
whole inner range, each cache line it loads serves one element per outer iteration, and the
`O` outer iterations sweep the whole operand again each time. Here the inner range is cut into
blocks of `B` iterations, and the block index becomes the outermost parallel dimension:

    scf.parallel (%o, %i) = (0, 0) to (96, 3136)       scf.parallel (%b, %o, %j) = (0, 0, 0) to (16, 96, 196)
      y[%o, %i] = x[%o, %i] + t[%i * 96 + %o]     ->     %i = %b * 196 + %j
                                                         y[%o, %i] = x[%o, %i] + t[%i * 96 + %o]

so that a block's lines of the permuted operand (`B` lines of `O` values) stay in cache while
all `O` outer iterations read them. The body, its loads and stores are unchanged (every
element is computed by the same ops), only the order of the iterations changes. `B` is the
largest divisor of the inner extent that keeps a block of the permuted operand within
`TILE_ELEMENTS` values, at least `MIN_BLOCK`, with at least `MIN_BLOCKS` blocks (the
outermost dimension is the one threads split). Other loops (more or fewer parallel
dimensions, bounds that are not constants, bodies with regions) are left alone.
"""

from __future__ import annotations

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Block, Region, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from xfuse.ir.constants import int_constant
from xfuse.passes.llvm.column_blocks import depends_on, unit_stride_in

TILE_ELEMENTS = 16384
"""Values of the permuted operand a block may read (64 KiB of f32: within a core's L2, near
its L1)."""

MIN_BLOCK = 16
"""Inner iterations per block at least: one AVX-512 vector of f32."""

MIN_BLOCKS = 4
"""Blocks at least, so that threads still have outer iterations to share."""


def block_transposed_loops(parallel: scf.ParallelOp) -> bool:
    """Rewrite `parallel` (a kernel's loop) to run its inner dimension in blocks, the block
    index outermost, where it reads an operand transposed (module docstring); whether it did."""
    extents = _extents(parallel)
    if extents is None or not _transposed(parallel.body.block):
        return False
    outer, inner = extents
    block = block_size(outer, inner)
    if block is None:
        return False
    _rewrite(parallel, outer, inner, block)
    return True


def block_size(outer: int, inner: int) -> int | None:
    """The inner iterations per block for extents `(outer, inner)`, or None where no divisor of
    `inner` fits (module docstring)."""
    limit = min(TILE_ELEMENTS // max(outer, 1), inner // MIN_BLOCKS)
    for size in range(limit, MIN_BLOCK - 1, -1):
        if inner % size == 0:
            return size
    return None


def _extents(parallel: scf.ParallelOp) -> tuple[int, int] | None:
    """The constant trip counts of a two-dimensional loop from 0 by 1 without results."""
    if parallel.res or len(parallel.upperBound) != 2:
        return None
    extents: list[int] = []
    for lb, ub, step in zip(parallel.lowerBound, parallel.upperBound, parallel.step, strict=True):
        count = int_constant(ub)
        if int_constant(lb) != 0 or int_constant(step) != 1 or count is None:
            return None
        extents.append(count)
    return extents[0], extents[1]


def _transposed(body: Block) -> bool:
    """A body of ops without regions whose stores all walk the inner index with unit stride and
    one of whose loads walks the outer index with unit stride and depends on the inner one."""
    outer, inner = body.args
    if any(op.regions for op in body.ops):
        return False
    stores = [op for op in body.ops if isinstance(op, memref.StoreOp)]
    if not stores or not all(s.indices and unit_stride_in(s.indices[-1], inner) for s in stores):
        return False
    return any(
        isinstance(op, memref.LoadOp)
        and op.indices
        and unit_stride_in(op.indices[-1], outer)
        and any(depends_on(index, inner) for index in op.indices)
        for op in body.ops
    )


def _rewrite(parallel: scf.ParallelOp, outer: int, inner: int, block: int) -> None:
    """`parallel` as `(%b, %o, %j)` over `(inner / block, outer, block)`, the old inner index
    computed as `%b * block + %j` at the top of the moved body."""
    index = IndexType()
    old = parallel.body.block
    new = Block(arg_types=[index, index, index])
    size = arith.ConstantOp(IntegerAttr(block, index))
    start = arith.MuliOp(new.args[0], size)
    position = arith.AddiOp(start, new.args[2])
    new.add_ops([size, start, position])
    old.args[0].replace_all_uses_with(new.args[1])
    old.args[1].replace_all_uses_with(position.result)
    for op in list(old.ops):
        op.detach()
        new.add_op(op)
    bounds = [_constant_before(parallel, n) for n in (0, inner // block, outer, block, 1)]
    zero, blocks, outer_count, block_count, one = bounds
    Rewriter.replace_op(
        parallel,
        scf.ParallelOp(
            [zero, zero, zero], [blocks, outer_count, block_count], [one, one, one], Region(new)
        ),
    )


def _constant_before(parallel: scf.ParallelOp, value: int) -> SSAValue:
    op = arith.ConstantOp(IntegerAttr(value, IndexType()))
    Rewriter.insert_op(op, InsertPoint.before(parallel))
    return op.result
