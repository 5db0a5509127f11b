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
order. Loops with bounds that are not constants, a step other than 1, or more than
`MAX_PIECES` pieces are left alone.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, i1
from xdsl.ir import Operation, SSAValue
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


def _offset(value: SSAValue, iv: SSAValue) -> int | None:
    """`k` where `value` is `iv + k` (`iv` itself, or `arith.addi`/`arith.subi` of `iv` and a
    constant), else None."""
    if value == iv:
        return 0
    op = value.owner
    if isinstance(op, arith.AddiOp):
        if op.lhs == iv and (k := int_constant(op.rhs)) is not None:
            return k
        if op.rhs == iv and (k := int_constant(op.lhs)) is not None:
            return k
    if isinstance(op, arith.SubiOp) and op.lhs == iv and (k := int_constant(op.rhs)) is not None:
        return -k
    return None


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


def _decide(piece: scf.ForOp, start: int, stop: int) -> None:
    """Replace `piece`'s comparisons and clamps of its index by what they are over its range
    [start, stop), then fold what they decide. One whose operand was a clamp decided here
    (`min(max(i, 0), n)`: the max decided first) may change inside the range, as the cuts did
    not see it: it is kept."""
    iv = piece.body.block.args[0]
    for op in list(piece.body.walk()):
        decided = _decision(op, iv)
        if decided is None:
            continue
        kind, c = decided
        if not _constant_over(kind, c, start, stop):
            continue
        holds = _HOLDS[kind](start, c)
        clamp = _index_clamp(op, iv)
        if clamp is not None:
            op.results[0].replace_all_uses_with(clamp[2] if holds else clamp[3])
            Rewriter.erase_op(op)
        else:
            Rewriter.replace_op(op, arith.ConstantOp(IntegerAttr(int(holds), i1)))
    PatternRewriteWalker(_FOLDS).rewrite_region(piece.body)


def split_loop_ranges(loop: scf.ForOp) -> bool:
    """Cut `loop` into pieces where its index's comparisons change (module docstring);
    whether it did."""
    pieces = _pieces(loop)
    if pieces is None:
        return False
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
        _decide(piece, start, stop)
    return True
