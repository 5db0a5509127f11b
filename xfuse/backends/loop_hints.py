"""Loop metadata for the CPU's LLVM pipeline: which loops LLVM must keep as loops (sums,
`keep_sum_loops`; long rows once vectorized, `keep_long_rows`), and which short rows it
vectorizes at full width (`widen_short_rows`).

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
loop, which LLVM does not unroll first, is left without it.) Only a loop that steps through
memory one element a trip and divides no integers (`unit_stride`) is kept: one that reads a
column (a stride of a row) or computes a flat index's coordinates keeps LLVM's own choice,
where the vectorizer would need gathers, scatters and scalarised divisions.

    .11:                                       ; the loop's header
      %acc = phi float [0.0, %.10], [%s, %.12]
      %c = icmp slt i64 %i, 64
      br i1 %c, label %.12, label %.13
    .12:                                       ; its latch
      %s = fadd reassoc float %acc, %x
      br label %.11, !llvm.loop !1             ; !1 = !{!1, !2}, !2 = !{!"llvm.loop.unroll.disable"}
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from llvmlite import ir

from xfuse.passes.llvm.short_rows import SHORT_TRIP

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
    blocks: tuple[ir.Block, ...]
    """The blocks from the header to the latch."""


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
                found.append(Loop(target, block, tuple(blocks[h : i + 1])))
    return found


def innermost(found: list[Loop]) -> Iterator[Loop]:
    """The loops that hold no other loop's header."""
    for loop in found:
        if not any(o is not loop and o.header in loop.blocks for o in found):
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


def trip_test(loop: Loop) -> ir.ICMPInstr | None:
    """The header's test `icmp slt %iv, %bound`, if it ends in one."""
    term = loop.header.terminator
    if not isinstance(term, ir.ConditionalBranch):
        return None
    cond = term.operands[0]
    return cond if isinstance(cond, ir.ICMPInstr) and cond.op == "slt" else None


def constant_trip(test: ir.ICMPInstr, loop: Loop) -> int | None:
    """The trip count of a test `icmp slt %iv, C` with a constant C, else None: C less the
    constant `%iv` starts from (a loop cut into pieces, `range_pieces`, starts past 0)."""
    bound = test.operands[1]
    if not (isinstance(bound, ir.Constant) and isinstance(bound.constant, int)):
        return None
    return bound.constant - _constant_start(test.operands[0], loop)


def _constant_start(iv: ir.Value, loop: Loop) -> int:
    """The constant a header phi `iv` takes from outside `loop`, else 0."""
    if not isinstance(iv, ir.PhiInstr):
        return 0
    for value, block in iv.incomings:
        if block not in loop.blocks and isinstance(value, ir.Constant):
            return value.constant if isinstance(value.constant, int) else 0
    return 0


_DIVIDING = frozenset({"udiv", "sdiv", "urem", "srem"})


def unit_stride(loop: Loop, iv: ir.Value) -> bool:
    """Whether each load and store of `loop` addresses one element at every trip or the
    element after the last trip's (its last index `%iv + %k` or `%iv`, `%k` and the other
    indices the same at every trip, `%k` a sum of such values), and no integer is divided in
    it."""
    varies = varying_in(loop, iv)

    def iv_plus(index: ir.Value) -> bool:
        """`index` is `%iv` plus values that do not vary (`add`s of any nesting: a symbolic
        kernel's index adds its zero offsets one by one)."""
        if index is iv:
            return True
        if not (isinstance(index, ir.Instruction) and index.opname == "add"):
            return False
        a, b = index.operands
        return (iv_plus(a) and not varies(b)) or (iv_plus(b) and not varies(a))

    def steps_by_one(index: ir.Value) -> bool:
        return not varies(index) or iv_plus(index)

    for block in loop.blocks:
        for inst in block.instructions:
            if inst.opname in _DIVIDING:
                return False
            if isinstance(inst, ir.LoadInstr | ir.StoreInstr):
                pointer = inst.operands[0 if isinstance(inst, ir.LoadInstr) else 1]
                if not _steps_through(pointer, varies, steps_by_one):
                    return False
    return True


def varying_in(loop: Loop, iv: ir.Value) -> Callable[[ir.Value], bool]:
    """Whether a value changes from one trip of `loop` to the next: `iv`, or an instruction of
    the loop computed from one that does (memoized)."""
    inside = {id(inst) for block in loop.blocks for inst in block.instructions}
    varying: dict[int, bool] = {}

    def varies(value: ir.Value) -> bool:
        if value is iv:
            return True
        if not isinstance(value, ir.Instruction) or id(value) not in inside:
            return False
        if id(value) not in varying:
            varying[id(value)] = False  # a phi's cycle back to itself adds nothing
            varying[id(value)] = any(varies(o) for o in value.operands)
        return varying[id(value)]

    return varies


def _steps_through(
    pointer: ir.Value,
    varies: Callable[[ir.Value], bool],
    steps_by_one: Callable[[ir.Value], bool],
) -> bool:
    """Whether an address is the same at every trip or a GEP whose last index steps by one
    and whose base and other indices are the same at every trip."""
    if not varies(pointer):
        return True
    if not isinstance(pointer, ir.GEPInstr):
        return False
    *leading, last = pointer.indices
    return not varies(pointer.pointer) and not any(map(varies, leading)) and steps_by_one(last)


def keep_sum_loops(module: ir.Module) -> int:
    """Mark `llvm.loop.unroll.disable` on each innermost loop of `module` that carries a
    `reassoc` float accumulation over a constant trip of at least `MIN_KEPT_TRIP`; returns
    how many loops were marked."""
    marked = 0
    disable: ir.MDValue | None = None
    for loop, trip in unit_stride_loops(module):
        if MIN_KEPT_TRIP <= trip < FULL_UNROLL_TRIP and accumulates_reassociated(loop):
            if disable is None:
                disable = module.add_metadata([ir.MetaDataString(module, UNROLL_DISABLE)])
            loop.latch.terminator.set_metadata("llvm.loop", loop_id(module, disable))
            marked += 1
    return marked


LONG_ROW = 128
"""The shortest constant trip count of a row loop whose vector loop `keep_long_rows` keeps."""

FOLLOWUP_VECTORIZED = "llvm.loop.vectorize.followup_vectorized"


def keep_long_rows(module: ir.Module) -> int:
    """Mark each innermost loop of `module` that steps through memory one element a trip
    (`unit_stride`) over a constant trip of at least `LONG_ROW` with
    `llvm.loop.vectorize.followup_vectorized` = `llvm.loop.unroll.disable`: once vectorized
    (and interleaved), its vector loop stays a loop. Left alone, LLVM unrolls it fully after
    vectorizing (a row of 1024 f32: 16 trips of 4 vectors, 64 loads in one block, which its
    scheduler issues out of order). Kept as loops, on the 2-core CPU (one thread, medians of
    interleaved calls; benchmarks/RESULTS.md): RMSNorm over 4096 rows of 1024 0.84-0.97x the
    unrolled kernel's time, layer norm 0.89-0.98x, softmax 0.95-0.97x; the four CPU benchmark
    kernels at 1024x1024 and 2048x2048 0.75-1.01x; the zoo's CPU kernels within 1% in all.
    Returns how many loops were marked; a loop LLVM does not vectorize is left as it was."""
    marked = 0
    properties: tuple[ir.MDValue, ...] = ()
    for loop, trip in unit_stride_loops(module):
        if trip < LONG_ROW:
            continue
        if not properties:
            disable = module.add_metadata([ir.MetaDataString(module, UNROLL_DISABLE)])
            followup = ir.MetaDataString(module, FOLLOWUP_VECTORIZED)
            properties = (module.add_metadata([followup, disable]),)
        loop.latch.terminator.set_metadata("llvm.loop", loop_id(module, *properties))
        marked += 1
    return marked


def unit_stride_loops(module: ir.Module) -> Iterator[tuple[Loop, int]]:
    """Each innermost loop of `module`'s functions with a constant trip count that steps
    through memory one element a trip (`unit_stride`), and its trip count."""
    for function in module.functions:
        if function.is_declaration:
            continue
        for loop in innermost(loops(function)):
            test = trip_test(loop)
            trip = None if test is None else constant_trip(test, loop)
            if test is not None and trip is not None and unit_stride(loop, test.operands[0]):
                yield loop, trip


def loop_id(module: ir.Module, *properties: ir.MDValue) -> ir.MDValue:
    """A new loop id `!n = !{!n, properties...}` (its first operand itself, as LLVM asks)."""
    node = ir.values.MDValue(module, properties, name=str(len(module.metadata)))
    node.operands = (node, *properties)
    return node


VECTOR_LANES = 16
"""An AVX-512 vector of f32: the width a short row loop is vectorized at (`widen_short_rows`)."""

SHORT_ROW = (8, 128)
"""The constant trip counts, from and below, of the row loops `widen_short_rows` marks: past a
few vectors, masking every trip costs more than a remainder loop."""

WIDTH = "llvm.loop.vectorize.width"
PREDICATE = "llvm.loop.vectorize.predicate.enable"


def widen_short_rows(module: ir.Module) -> int:
    """Mark `llvm.loop.vectorize.width` `VECTOR_LANES` with a masked tail
    (`llvm.loop.vectorize.predicate.enable`) on each innermost loop of `module` that steps
    through memory one element a trip (`unit_stride`), over a constant trip in `SHORT_ROW`
    that is no multiple of `VECTOR_LANES` or is one vector, and is `elementwise` (a float sum's
    lanes are left to LLVM, as `keep_sum_loops` does); returns how many loops were marked. Left
    alone, LLVM picks the widest vector that divides such a trip: a padded output's row of 28,
    with an `exp` per element, ran in 4 lanes.

    A row of one vector, or one vector and one element (trips 8 to 17), also gets
    `llvm.loop.unroll.disable`: else LLVM unrolls it fully before vectorizing and then
    vectorizes the loop around it, one lane per row, its stores scattered a row apart. A
    batch norm over channels-last [1, 16, 112, 112] (rows of 16 channels, each reading its
    channel's scale and shift) took 196 us so, 39 with the hint; rows of 8, 12 and 17 channels
    46, 149 and 206 us, with it 30, 35 and 56 (eager: 45, 99, 119; 2-core CPU, one thread).
    Longer rows (24 to 49 measured) vectorize as rows without it, and slower with it.

    A trip one past whole vectors (17, 33, 49...) gets the width with no masked tail: its last
    element runs as a scalar trip, not as a masked vector of one lane. LLVM 22's X86 backend
    lowers a masked store whose constant mask has one lane as a scalar store, and where the
    store narrows integers (i32 computed, i8 or i16 stored: a bool output, fuzz seed 93 program
    2609) it stores the element unnarrowed, 4 bytes into a buffer's last byte (`movl` where
    `vpmovdb` writes one): a write past the end of the output. Masks of two lanes or more lower
    as the masked vectors they are."""
    marked = 0
    made: dict[tuple[bool, bool], tuple[ir.MDValue, ...]] = {}
    shortest, longest = SHORT_ROW
    for loop, trip in unit_stride_loops(module):
        if not shortest <= trip < longest or trip % VECTOR_LANES == 0 < trip - VECTOR_LANES:
            continue
        if not elementwise(loop):
            continue
        kind = (trip % VECTOR_LANES > 1, trip <= VECTOR_LANES + 1)  # (masked, kept a loop)
        if kind not in made:
            masked, kept = kind
            made[kind] = (
                _width(module),
                *((_masked_tail(module),) if masked else ()),
                *((_unroll_disable(module),) if kept else ()),
            )
        loop.latch.terminator.set_metadata("llvm.loop", loop_id(module, *made[kind]))
        marked += 1
    return marked


def widen_bounded_rows(module: ir.Module) -> int:
    """Mark `llvm.loop.vectorize.width` `SHORT_TRIP` lanes with a masked tail on each innermost
    loop of `module` whose bound is `min(%b, %a + SHORT_TRIP)` for a loop from `%a`, or `min(%b,
    c)` from a constant `c - SHORT_TRIP` (`xfuse.passes.llvm.short_rows`' copy of a short row:
    at most `SHORT_TRIP` trips, fewer at run time), that steps through memory one element a trip
    and is `elementwise`: the row runs as one masked vector where LLVM would run it one element
    at a time (its vector loop needs more trips than the row has). The mask is computed at run
    time, so the one-lane constant masks of `widen_short_rows`' note do not arise. Returns how
    many loops were marked."""
    marked = 0
    properties: tuple[ir.MDValue, ...] = ()
    for function in module.functions:
        if function.is_declaration:
            continue
        for loop in innermost(loops(function)):
            test = trip_test(loop)
            if test is None or most_trips(test, loop) != SHORT_TRIP:
                continue
            if not unit_stride(loop, test.operands[0]) or not elementwise(loop):
                continue
            if not properties:
                lanes = ir.Constant(ir.IntType(32), SHORT_TRIP)
                width = module.add_metadata([ir.MetaDataString(module, WIDTH), lanes])
                properties = (width, _masked_tail(module))
            loop.latch.terminator.set_metadata("llvm.loop", loop_id(module, *properties))
            marked += 1
    return marked


def most_trips(test: ir.ICMPInstr, loop: Loop) -> int | None:
    """The most trips of a loop whose test `icmp slt %iv, %bound` has a bound `select (icmp slt
    %b, %m), %b, %m` (a signed min) of `%m` = the index's start plus a constant, or a constant
    where the index starts at a constant: that constant less the start; else None."""
    bound = test.operands[1]
    if not (isinstance(bound, ir.SelectInstr) and isinstance(bound.operands[0], ir.ICMPInstr)):
        return None
    compare, (_, chosen, other) = bound.operands[0], bound.operands
    if compare.op != "slt" or list(compare.operands) != [chosen, other]:
        return None
    iv = test.operands[0]
    if isinstance(other, ir.Constant) and isinstance(other.constant, int):
        start = _start_value(iv, loop)
        if isinstance(start, ir.Constant) and isinstance(start.constant, int):
            return other.constant - start.constant
        return None
    if isinstance(other, ir.Instruction) and other.opname == "add":
        a, b = other.operands
        start = _start_value(iv, loop)
        for base, step in ((a, b), (b, a)):
            if base is start and isinstance(step, ir.Constant) and isinstance(step.constant, int):
                return step.constant
    return None


def _start_value(iv: ir.Value, loop: Loop) -> ir.Value | None:
    """The value a header phi `iv` takes from outside `loop`."""
    if not isinstance(iv, ir.PhiInstr):
        return None
    outside = [value for value, block in iv.incomings if block not in loop.blocks]
    return outside[0] if len(outside) == 1 else None


def elementwise(loop: Loop) -> bool:
    """Whether a `unit_stride` loop carries nothing from one trip to the next (its header's
    one phi is its index), calls no function but LLVM's intrinsics, and stores each trip at an
    address of its own: every store's address varies, so it steps by one (a store to one
    address every trip, a value carried out of the loop, or a call of a C math function with
    no vector form, `cbrtf` or `asinhf`, leaves LLVM unable to vectorize it, and a loop marked
    for vectorization that it cannot vectorize prints a remark)."""
    test = trip_test(loop)
    if test is None:
        return False
    iv = test.operands[0]
    phis = [i for i in loop.header.instructions if isinstance(i, ir.PhiInstr)]
    if phis != [iv] or any(calls_a_function(block) for block in loop.blocks):
        return False
    varies = varying_in(loop, iv)
    return all(
        varies(inst.operands[1])
        for block in loop.blocks
        for inst in block.instructions
        if isinstance(inst, ir.StoreInstr)
    )


def calls_a_function(block: ir.Block) -> bool:
    """Whether `block` calls a function that is not one of LLVM's intrinsics (a C library
    function: `LIBM_FUNCTIONS` of the math conversion)."""
    return any(
        isinstance(inst, ir.CallInstr) and not inst.callee.name.startswith("llvm.")
        for inst in block.instructions
    )


def _width(module: ir.Module) -> ir.MDValue:
    """`llvm.loop.vectorize.width` `VECTOR_LANES`, as a loop property."""
    lanes = ir.Constant(ir.IntType(32), VECTOR_LANES)
    return module.add_metadata([ir.MetaDataString(module, WIDTH), lanes])


def _unroll_disable(module: ir.Module) -> ir.MDValue:
    """`llvm.loop.unroll.disable`, as a loop property."""
    return module.add_metadata([ir.MetaDataString(module, UNROLL_DISABLE)])


def _masked_tail(module: ir.Module) -> ir.MDValue:
    """`llvm.loop.vectorize.predicate.enable`: the last trip a masked vector, as a loop
    property."""
    return module.add_metadata(
        [ir.MetaDataString(module, PREDICATE), ir.Constant(ir.IntType(1), 1)]
    )
