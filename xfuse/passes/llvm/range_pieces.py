"""
Loops cut where a comparison of their index changes (cpu): a concat reads operand `k` where its
index is in `k`'s part, a pad reads its operand inside the border and yields zero outside, so
their loop bodies branch on `%i < 96`, `%i < 192`, ... at every iteration. LLVM does not
vectorize a loop whose loads sit under such branches (a load of the other side could be out of
bounds), so a layer norm over a concat (Swin's patch merging) ran its four row loops one element
at a time. Here a loop `scf.for %i = a to b step 1` whose body compares `%i` with constants is
cut into one loop per range where every such comparison is the same:

    scf.for %i = 0 to 384 {                            scf.for %i = 0 to 96 { x0[.., %i] }
      %c = arith.cmpi ult, %i, 96                 ->   scf.for %i = 96 to 192 { x1[.., %i - 96] }
      scf.if %c { x0[.., %i] } else { ... }            ...

each piece a copy of the body with its comparisons replaced by their value there, and the
branches, selects and boolean ops they decide folded away. An index clamp (`min(i, c)`,
`max(i, c)`: a pad's read of its border's nearest element) cuts the loop as `i <= c` or
`i >= c` would, and each piece reads `i` or `c` in its place, so the row's loads step by one
element and vectorize. A loop carrying values (a sum) passes
them from one piece to the next, so every element is computed by the same ops in the same
order. Loops with a step other than 1 or more than `MAX_PIECES` pieces are left alone.

A loop of a symbolic kernel runs to a runtime size `n` (`scf.for %i = 0 to %n + 6`: a padded
dim of a size symbol) and compares its index with `n` (`%i - 3 < %n`) as well as with
constants (`%i - 3 >= 0`). Its cuts are then constants and `n` plus constants, and they fall
in that order once `n` is large enough: the pieces are made for that order, and run where `n`
is at least that large; below it, the loop as it was (an `scf.if` on `n`):

    scf.for %i = 0 to %n + 6 { .. %i - 3 >= 0, %i - 3 < %n .. }
      ->
    scf.if %n >= 0 {
      scf.for %i = 0 to 3 { fill }  scf.for %i = 3 to %n + 3 { x[%i - 3] }  scf.for %i = %n + 3 to %n + 6 { fill }
    } else { the loop }

Loops whose bounds are neither constants nor one runtime value plus a constant, or that
compare with two runtime values, are left alone.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, i1
from xdsl.ir import Block, Operation, SSAValue
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriteWalker
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.transforms.canonicalization_patterns.arith import (
    SelectConstPattern,
    SignlessIntegerBinaryOperationConstantProp,
)
from xdsl.transforms.canonicalization_patterns.scf import IfPropagateConstantCondition

from xfuse.ir.constants import int_constant

MAX_PIECES = 8
"""Pieces a loop is cut into at most (each is a copy of its body)."""

_KINDS = ("eq", "ne", "lt", "le", "gt", "ge", "lt", "le", "gt", "ge")
"""`arith.cmpi`'s predicates by number (eq, ne, slt, sle, sgt, sge, ult, ule, ugt, uge), signs
dropped: only comparisons where both agree are read (`_index_comparison`)."""
_FIRST_UNSIGNED = 6
_MIRRORED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
_HOLDS = {
    "eq": int.__eq__,
    "ne": int.__ne__,
    "lt": int.__lt__,
    "le": int.__le__,
    "gt": int.__gt__,
    "ge": int.__ge__,
}
_CUTS = {"lt": (0,), "ge": (0,), "le": (1,), "gt": (1,), "eq": (0, 1), "ne": (0, 1)}
"""Where `i kind c` may change as `i` steps up by one: before `c + offset`, per offset."""


def _split_value(value: SSAValue) -> tuple[SSAValue, int]:
    """`(base, c)` where `value` is `base + c` (an `arith.addi`/`arith.subi` of a constant),
    else `(value, 0)`."""
    op = value.owner
    if isinstance(op, arith.AddiOp):
        if (c := int_constant(op.rhs)) is not None:
            return op.lhs, c
        if (c := int_constant(op.lhs)) is not None:
            return op.rhs, c
    if isinstance(op, arith.SubiOp) and (c := int_constant(op.rhs)) is not None:
        return op.lhs, -c
    return value, 0


def _offset(value: SSAValue, iv: SSAValue) -> int | None:
    """`k` where `value` is `iv + k` (`iv` itself, or `arith.addi`/`arith.subi` of `iv` and a
    constant), else None."""
    base, k = _split_value(value)
    return k if base == iv else None


def _index_comparison(op: Operation, iv: SSAValue) -> tuple[str, int] | None:
    """`(kind, c)` where `op` is `arith.cmpi` of `iv + k` with a constant `c'`, as
    `iv kind c` (`c = c' - k`; a comparison written `c' kind iv + k` is mirrored), `c`
    non-negative. An unsigned comparison only where `k >= 0` (`iv + k` is then non-negative,
    and unsigned and signed agree)."""
    if not isinstance(op, arith.CmpiOp) or op.predicate.value.data >= len(_KINDS):
        return None
    kind = _KINDS[op.predicate.value.data]
    if (k := _offset(op.lhs, iv)) is not None and (c := int_constant(op.rhs)) is not None:
        pass
    elif (k := _offset(op.rhs, iv)) is not None and (c := int_constant(op.lhs)) is not None:
        kind = _MIRRORED[kind]
    else:
        return None
    unsigned = op.predicate.value.data >= _FIRST_UNSIGNED
    if (unsigned and (k < 0 or c < 0)) or c - k < 0:
        return None
    return kind, c - k


_CLAMPS: dict[type[Operation], str] = {
    arith.MinSIOp: "le",
    arith.MaxSIOp: "ge",
    arith.MinUIOp: "le",
    arith.MaxUIOp: "ge",
}
"""Index clamps, by the comparison under which each is its index operand: `min(i, c)` is `i`
where `i <= c`, `max(i, c)` where `i >= c` (a pad's read of its border's nearest element)."""


def _index_clamp(op: Operation, iv: SSAValue) -> tuple[str, int, SSAValue, SSAValue] | None:
    """`(kind, c, moving, fixed)` where `op` is a min or max of `iv + k` (`moving`) and a
    constant (`fixed`) that is `moving` where `iv kind c` holds and `fixed` elsewhere; an
    unsigned one only where `k >= 0` and the constant is non-negative."""
    kind = _CLAMPS.get(type(op))
    if kind is None:
        return None
    lhs, rhs = op.operands
    for moving, fixed in ((lhs, rhs), (rhs, lhs)):
        k, c = _offset(moving, iv), int_constant(fixed)
        if k is None or c is None:
            continue
        unsigned = isinstance(op, arith.MinUIOp | arith.MaxUIOp)
        if (unsigned and (k < 0 or c < 0)) or c - k < 0:
            return None
        return kind, c - k, moving, fixed
    return None


def _decision(op: Operation, iv: SSAValue) -> tuple[str, int] | None:
    """The comparison of `iv` with a constant that decides `op`: a comparison's own, or the
    one under which a clamp is its index operand."""
    comparison = _index_comparison(op, iv)
    if comparison is not None:
        return comparison
    clamp = _index_clamp(op, iv)
    return None if clamp is None else clamp[:2]


def _pieces(loop: scf.ForOp) -> list[tuple[int, int]] | None:
    """The ranges `loop` is cut into, or None where it is left alone (module docstring)."""
    lb, ub, step = int_constant(loop.lb), int_constant(loop.ub), int_constant(loop.step)
    if lb is None or ub is None or step != 1 or lb < 0 or ub - lb < 2:
        return None
    iv = loop.body.block.args[0]
    cuts = {
        cut
        for op in loop.body.walk()
        if (comparison := _decision(op, iv)) is not None
        for offset in _CUTS[comparison[0]]
        if lb < (cut := comparison[1] + offset) < ub
    }
    if not cuts or len(cuts) + 1 > MAX_PIECES:
        return None
    bounds = [lb, *sorted(cuts), ub]
    return list(zip(bounds, bounds[1:], strict=False))


_FOLDS = GreedyRewritePatternApplier(
    [
        IfPropagateConstantCondition(),
        SelectConstPattern(),
        SignlessIntegerBinaryOperationConstantProp(),
    ]
)


def _constant_over(kind: str, c: int, start: int, stop: int) -> bool:
    """Whether `i kind c` is the same for every `i` in [start, stop)."""
    if kind in ("eq", "ne"):
        return not start <= c < stop or stop - start == 1
    return _HOLDS[kind](start, c) == _HOLDS[kind](stop - 1, c)


# ---------------------------------------------------------------------------------------------
# Loops to a runtime size
# ---------------------------------------------------------------------------------------------


Choices = tuple[SSAValue, SSAValue] | None
"""A clamp's operands: what it is where its comparison holds (`iv + k`), and elsewhere; None
for a comparison."""


def _sized_decision(op: Operation, iv: SSAValue) -> tuple[str, SSAValue, int, Choices] | None:
    """`(kind, base, c, choices)` where `op` compares `iv + k` with a runtime value `base + c'`
    (a signed comparison, or a signed min or max of them) as `iv kind base + c` (`c = c' -
    k`)."""
    if isinstance(op, arith.CmpiOp):
        predicate = op.predicate.value.data
        if predicate >= _FIRST_UNSIGNED:
            return None
        kind = _KINDS[predicate]
        pairs = ((op.lhs, op.rhs, kind), (op.rhs, op.lhs, _MIRRORED[kind]))
    elif isinstance(op, arith.MinSIOp | arith.MaxSIOp):
        kind = _CLAMPS[type(op)]
        pairs = ((op.lhs, op.rhs, kind), (op.rhs, op.lhs, kind))
    else:
        return None
    for moving, fixed, kind in pairs:
        k = _offset(moving, iv)
        if k is None or int_constant(fixed) is not None:
            continue
        base, c = _split_value(fixed)
        if _offset(base, iv) is None:
            clamp = None if isinstance(op, arith.CmpiOp) else (moving, fixed)
            return kind, base, c - k, clamp
    return None


def _defined_outside(value: SSAValue, loop: scf.ForOp) -> bool:
    owner = value.owner
    return not loop.is_ancestor(owner)


Bound = tuple[SSAValue | None, int]
"""A piece's start or stop: a constant, or a runtime value plus a constant."""


def _sized_pieces(loop: scf.ForOp) -> tuple[SSAValue, int, list[tuple[Bound, Bound]]] | None:
    """For a loop from a constant to a runtime `n + c` that compares its index with
    constants and with `n` plus constants: `(n, least n, pieces)`, the pieces in the order
    their cuts have where `n` is at least `least n`; None where it is left alone."""
    lb, step = int_constant(loop.lb), int_constant(loop.step)
    if lb is None or step != 1 or lb < 0 or int_constant(loop.ub) is not None:
        return None
    base, top = _split_value(loop.ub)
    if not _defined_outside(base, loop):
        return None
    iv = loop.body.block.args[0]
    fixed: set[int] = set()
    sized: set[int] = set()
    for op in loop.body.walk():
        if (comparison := _decision(op, iv)) is not None:
            fixed |= {c for o in _CUTS[comparison[0]] if (c := comparison[1] + o) > lb}
        elif (decided := _sized_decision(op, iv)) is not None:
            kind, other, c, _ = decided
            if other != base:
                return None
            sized |= {d for o in _CUTS[kind] if (d := c + o) < top}
    if not sized or len(fixed) + len(sized) + 1 > MAX_PIECES:
        return None
    cuts: list[Bound] = [(None, lb), *((None, c) for c in sorted(fixed))]
    cuts += [(base, d) for d in sorted(sized)] + [(base, top)]
    least = max(fixed | {lb}) - min(sized)
    return base, least, list(zip(cuts, cuts[1:], strict=False))


def _decide(piece: scf.ForOp, start: Bound, stop: Bound, base: SSAValue | None = None) -> None:
    """Replace `piece`'s comparisons and clamps of its index by what they are over its range
    [start, stop), then fold what they decide. One whose operand was a clamp decided here
    (`min(max(i, 0), n)`: the max decided first) may change inside the range, as the cuts did
    not see it: it is kept.
    A piece of a loop to a runtime size `base` (`split_sized_loop`) decides a comparison with
    a constant at its start where that is a constant, else as far above every constant; one
    with `base` plus a constant at its start where that is `base` plus a constant, else as far
    below it (`_sized_pieces` made the cuts so)."""
    iv = piece.body.block.args[0]
    at, offset = start
    for op in list(piece.body.walk()):
        decided = _decision(op, iv)
        sized = None if decided is not None or base is None else _sized_decision(op, iv)
        if decided is not None:
            kind, c = decided
            if stop[0] is None and not _constant_over(kind, c, offset, stop[1]):
                continue
            holds = _HOLDS[kind](offset, c) if at is None else kind in ("gt", "ge", "ne")
            clamp = _index_clamp(op, iv)
            choices = None if clamp is None else clamp[2:]
        elif sized is not None and sized[1] == base:
            kind, _, c, choices = sized
            holds = _HOLDS[kind](offset, c) if at is not None else kind in ("lt", "le", "ne")
        else:
            continue
        if choices is not None:
            op.results[0].replace_all_uses_with(choices[0] if holds else choices[1])
            Rewriter.erase_op(op)
        else:
            Rewriter.replace_op(op, arith.ConstantOp(IntegerAttr(int(holds), i1)))
    PatternRewriteWalker(_FOLDS).rewrite_region(piece.body)


def _bound_value(bound: Bound) -> tuple[list[Operation], SSAValue]:
    base, offset = bound
    constant = arith.ConstantOp(IntegerAttr(offset, IndexType()))
    if base is None:
        return [constant], constant.result
    if offset == 0:
        return [], base
    total = arith.AddiOp(base, constant.result)
    return [constant, total], total.result


def split_sized_loop(loop: scf.ForOp) -> bool:
    """Cut a loop to a runtime size into pieces, run where the size is large enough for
    their order, the loop itself elsewhere (module docstring); whether it did."""
    found = _sized_pieces(loop)
    if found is None:
        return False
    base, least, pieces = found
    fast, slow = Block(), Block()
    carried: list[SSAValue] = list(loop.iter_args)
    made: list[tuple[scf.ForOp, Bound, Bound]] = []
    for start, stop in pieces:
        start_ops, start_value = _bound_value(start)
        stop_ops, stop_value = _bound_value(stop)
        piece = loop.clone()
        piece.operands = [start_value, stop_value, loop.step, *carried]
        fast.add_ops([*start_ops, *stop_ops, piece])
        carried = list(piece.results)
        made.append((piece, start, stop))
    fast.add_op(scf.YieldOp(*carried))
    whole = loop.clone()
    slow.add_ops([whole, scf.YieldOp(*whole.results)])
    threshold = arith.ConstantOp(IntegerAttr(least, IndexType()))
    large = arith.CmpiOp(base, threshold.result, "sge")
    branch = scf.IfOp(large.result, [r.type for r in loop.results], [fast], [slow])
    Rewriter.insert_op([threshold, large, branch], InsertPoint.before(loop))
    for old, new in zip(loop.results, branch.results, strict=True):
        old.replace_all_uses_with(new)
    Rewriter.erase_op(loop)
    for piece, start, stop in made:
        _decide(piece, start, stop, base)
    return True


def split_loop_ranges(loop: scf.ForOp) -> bool:
    """Cut `loop` into pieces where its index's comparisons change (module docstring);
    whether it did."""
    pieces = _pieces(loop)
    if pieces is None:
        return split_sized_loop(loop)
    carried: list[SSAValue] = list(loop.iter_args)
    made: list[tuple[scf.ForOp, int, int]] = []
    for start, stop in pieces:
        bounds = [arith.ConstantOp(IntegerAttr(v, IndexType())) for v in (start, stop)]
        piece = loop.clone()
        piece.operands = [bounds[0].result, bounds[1].result, loop.step, *carried]
        Rewriter.insert_op([*bounds, piece], InsertPoint.before(loop))
        carried = list(piece.results)
        made.append((piece, start, stop))
    for old, new in zip(loop.results, carried, strict=True):
        old.replace_all_uses_with(new)
    Rewriter.erase_op(loop)
    for piece, start, stop in made:
        _decide(piece, (None, start), (None, stop))
    return True
