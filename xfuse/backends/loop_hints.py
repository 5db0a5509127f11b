"""Loop metadata for the CPU's LLVM pipeline: which loops LLVM must keep as loops.

A float sum or product that `lower-to-loops` marks `reassoc` is vectorized by LLVM's loop
vectorizer into vector lanes of partial sums, combined as a tree at the end (as eager's
kernels sum). But LLVM fully unrolls a loop of a small constant trip count before the loop
vectorizer runs, and the unrolled chain of `fadd reassoc` stays one serial sum: the SLP
vectorizer reassociates a chain only with `nsz` as well, which xfuse does not give (LLVM 22
miscompiles `reassoc nsz` sums of a loop that also stores what it loads). A serial sum of 64
equal values gathers 64 rounding errors in one direction, where eager's lanes gather 4. So each
innermost loop that carries such a sum over a constant trip count of at least
`MIN_KEPT_TRIP` and below `FULL_UNROLL_TRIP` gets `llvm.loop.unroll.disable`: the vectorizer
sees the loop. (The hint also keeps the vectorizer from interleaving the loop, so a longer
loop, which LLVM does not unroll first, is left without it.)

    .11:                                       ; the loop's header
      %acc = phi float [0.0, %.10], [%s, %.12]
      %c = icmp slt i64 %i, 64
      br i1 %c, label %.12, label %.13
    .12:                                       ; its latch
      %s = fadd reassoc float %acc, %x
      br label %.11, !llvm.loop !1             ; !1 = !{!1, !2}, !2 = !{!"llvm.loop.unroll.disable"}
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from llvmlite import ir

MIN_KEPT_TRIP = 16
"""The shortest constant trip count whose float-sum loop is kept for the vectorizer (one
AVX-512 vector of f32; a shorter serial sum has no more rounding error than a vector lane)."""

FULL_UNROLL_TRIP = 128
"""The shortest constant trip count of a float-sum loop that LLVM 22's O3 pipeline does not
unroll fully before vectorizing (with the smallest body, one load and one add)."""

UNROLL_DISABLE = "llvm.loop.unroll.disable"

_ACCUMULATING = frozenset({"fadd", "fmul"})


@dataclass(frozen=True)
class Loop:
    """A loop of an LLVM function as `convert-scf-to-cf` lays it out: a header block whose
    conditional branch tests the trip, and a latch block (after it) that branches back."""

    header: ir.Block
    latch: ir.Block
    span: range
    """The indices of the blocks from the header to the latch."""


def loops(function: ir.Function) -> list[Loop]:
    """The loops of `function`: each unconditional branch back to an earlier block."""
    blocks = list(function.blocks)
    index = {id(b): i for i, b in enumerate(blocks)}
    found = []
    for i, block in enumerate(blocks):
        term = block.terminator
        if isinstance(term, ir.Branch) and not isinstance(term, ir.ConditionalBranch):
            target = term.operands[0]
            h = index.get(id(target))
            if h is not None and h <= i:
                found.append(Loop(target, block, range(h, i + 1)))
    return found


def innermost(found: list[Loop]) -> Iterator[Loop]:
    """The loops that hold no other loop's header."""
    for loop in found:
        if not any(o is not loop and o.span.start in loop.span for o in found):
            yield loop


def accumulates_reassociated(loop: Loop) -> bool:
    """Whether a float phi of the header takes, from the latch's path, a `reassoc` sum or
    product."""
    for inst in loop.header.instructions:
        if not isinstance(inst, ir.PhiInstr) or not isinstance(
            inst.type, (ir.FloatType, ir.DoubleType, ir.HalfType)
        ):
            continue
        for value, _ in inst.incomings:
            if (
                isinstance(value, ir.Instruction)
                and value.opname in _ACCUMULATING
                and "reassoc" in getattr(value, "flags", ())
            ):
                return True
    return False


def constant_trip(loop: Loop) -> int | None:
    """The trip count of a header that tests `icmp slt %iv, C` with a constant C, else None."""
    term = loop.header.terminator
    if not isinstance(term, ir.ConditionalBranch):
        return None
    cond = term.operands[0]
    if not isinstance(cond, ir.ICMPInstr) or cond.op != "slt":
        return None
    bound = cond.operands[1]
    if isinstance(bound, ir.Constant) and isinstance(bound.constant, int):
        return bound.constant
    return None


def keep_sum_loops(module: ir.Module) -> int:
    """Mark `llvm.loop.unroll.disable` on each innermost loop of `module` that carries a
    `reassoc` float accumulation over a constant trip of at least `MIN_KEPT_TRIP`; returns
    how many loops were marked."""
    marked = 0
    disable: ir.MDValue | None = None
    for function in module.functions:
        if function.is_declaration:
            continue
        for loop in innermost(loops(function)):
            trip = constant_trip(loop)
            if trip is None or not MIN_KEPT_TRIP <= trip < FULL_UNROLL_TRIP:
                continue
            if not accumulates_reassociated(loop):
                continue
            if disable is None:
                disable = module.add_metadata([ir.MetaDataString(module, UNROLL_DISABLE)])
            loop.latch.terminator.set_metadata("llvm.loop", loop_id(module, disable))
            marked += 1
    return marked


def loop_id(module: ir.Module, *properties: ir.MDValue) -> ir.MDValue:
    """A new loop id `!n = !{!n, properties...}` (its first operand itself, as LLVM asks)."""
    node = ir.values.MDValue(module, properties, name=str(len(module.metadata)))
    node.operands = (node, *properties)
    return node
