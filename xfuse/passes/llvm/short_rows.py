"""
Short rows of symbolic kernels (cpu): an innermost loop of a kernel of runtime sizes runs to a
runtime bound (`scf.for %i = %a to %b`, a row of a symbolic width), which LLVM vectorizes for
long trips: 16 lanes a vector, several vectors a trip, then a scalar remainder. A row of a few
elements (a depthwise convolution's 8x8 map, its pad's interior) never reaches the vector loop
and runs one element at a time. Each such loop is versioned on its trip count: where it is at
most `SHORT_TRIP`, a copy whose bound is written `min(%b, %a + SHORT_TRIP)` runs (the same bound
there: only what LLVM can see changes, and `xfuse.backends.loop_hints.widen_bounded_rows` marks
the copy for one masked vector of `SHORT_TRIP` lanes); else the loop as it was:

    scf.for %i = %a to %b { body }
      ->
    scf.if %b - %a <= 8 {
      scf.for %i = %a to min(%b, %a + 8) { body }
    } else {
      scf.for %i = %a to %b { body }
    }

Only loops of step 1 that carry no value (a sum's lanes are left to LLVM) and store what they
compute are versioned; loops with a constant trip are `loop_hints.widen_short_rows`'.
"""

from __future__ import annotations

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.ir import Block
from xdsl.rewriter import InsertPoint, Rewriter

from xfuse.ir.constants import int_constant

SHORT_TRIP = 8
"""The longest trip the short copy runs: one vector of 8 lanes (256 bits of f32). Measured on
the 2-core CPU (AVX-512, one thread) on a 7x7 depthwise stencil of symbolic height and width
(`depthwise-stencil{symbolic-windows=true}`), 9 images: rows of 8 took 0.39x the unversioned
kernel's time (114 against 290 us), rows of 4 0.58x (123 against 211); a copy for up to 16
trips, at 16 lanes or at 8, was slower than the loop it replaced at rows of 8 to 16
(benchmarks/RESULTS.md, dynamic shapes)."""


def versionable(loop: scf.ForOp) -> bool:
    """Whether `loop` is an innermost loop of step 1 to a runtime bound that carries no
    value and stores."""
    if loop.iter_args or int_constant(loop.step) != 1 or int_constant(loop.ub) is not None:
        return False
    body = list(loop.body.walk())
    if any(isinstance(op, scf.ForOp | scf.ParallelOp | scf.WhileOp) for op in body):
        return False
    return any(isinstance(op, memref.StoreOp) for op in body)


def version_short_row(loop: scf.ForOp) -> bool:
    """Version `loop` on its trip count (module docstring); whether it did."""
    if not versionable(loop):
        return False
    most = arith.ConstantOp(IntegerAttr(SHORT_TRIP, IndexType()))
    trip = arith.SubiOp(loop.ub, loop.lb)
    short = arith.CmpiOp(trip.result, most.result, "sle")
    end = arith.AddiOp(loop.lb, most.result)
    bound = arith.MinSIOp(loop.ub, end.result)
    copy = loop.clone()
    copy.operands = [loop.lb, bound.result, loop.step]
    fast, slow = Block(), Block()
    fast.add_ops([end, bound, copy, scf.YieldOp()])
    slow.add_ops([loop.clone(), scf.YieldOp()])
    branch = scf.IfOp(short.result, [], [fast], [slow])
    Rewriter.insert_op([most, trip, short, branch], InsertPoint.before(loop))
    Rewriter.erase_op(loop)
    return True
