"""
Divisions by a loop-invariant divisor as multiplications by its reciprocal, where that may be
done: `x / s` in a loop with `s` defined outside it becomes `x * (1 / s)`, one division per
loop instead of one per element. The product is within an ulp or two of the quotient, so a
quotient that reaches a rounding, a remainder or a conversion to an integer (which an ulp can
move to the next integer: `trunc(x / s)` where `x / s` is exactly 8) keeps its division.
A comparison does not: eager's softmax and normalizations multiply by the reciprocal
themselves, and an argmax of a softmax must pick what eager's picks. (At loop level a true
division and a normalization look alike, so `x / s == 8` is compared as `x * (1 / s)`.)

A kernel computes a value again where it reads it in another loop (a row's maximum, then each
element compared with it): every division of a kernel by a divisor that one of them must keep
(`kept_divisors`) is kept, so that `max(v) == v` holds where `max` reaches a floor and the
comparison does not.
"""

from __future__ import annotations

from xdsl.dialects import arith, math, scf
from xdsl.dialects.builtin import FloatAttr, f32, f64
from xdsl.ir import Block, Operation, SSAValue

from xfuse.dialects.mlir_ops import RemFOp

DISCRETE_USERS: tuple[type[Operation], ...] = (
    RemFOp,
    arith.FPToSIOp,
    arith.FPToUIOp,
    math.FloorOp,
    math.CeilOp,
    math.TruncOp,
    math.RoundOp,
    math.RoundEvenOp,
)
"""Ops whose result can jump to the next integer where an operand moves by an ulp."""


def kept_divisors(kernel: Operation) -> set[SSAValue]:
    """The divisors of `kernel`'s divisions whose quotient reaches one of `DISCRETE_USERS`."""
    return {
        op.rhs
        for op in kernel.walk()
        if isinstance(op, arith.DivfOp) and _reaches_discrete(op.result)
    }


def divide_by_reciprocal(loop: scf.ForOp, kept: set[SSAValue]) -> None:
    """Each `x / s` of `loop`'s body whose divisor (f32/f64) is defined outside the loop and
    not in `kept` (its kernel's `kept_divisors`) -> `x * (1 / s)`, `1 / s` before the loop."""
    body = loop.body.block
    for op in list(body.ops):
        if not isinstance(op, arith.DivfOp) or op.rhs.type not in (f32, f64):
            continue
        if _defined_inside(op.rhs, loop) or op.rhs in kept:
            continue
        one = arith.ConstantOp(FloatAttr(1.0, op.rhs.type))  # pyright: ignore[reportArgumentType]
        reciprocal = arith.DivfOp(one.result, op.rhs)
        parent = loop.parent_block()
        assert parent is not None
        parent.insert_ops_before([one, reciprocal], loop)
        product = arith.MulfOp(op.lhs, reciprocal.result, op.fastmath)
        body.insert_op_before(product, op)
        op.result.replace_all_uses_with(product.result)
        op.detach()
        op.erase()


def _defined_inside(value: SSAValue, loop: scf.ForOp) -> bool:
    """Whether `value` is defined in `loop`'s body, at any depth."""
    owner = value.owner
    block: Block | None = owner if isinstance(owner, Block) else owner.parent_block()
    while block is not None:
        if block is loop.body.block:
            return True
        op = block.parent_op()
        block = op.parent_block() if op is not None else None
    return False


def _reaches_discrete(value: SSAValue) -> bool:
    """Whether `value`, through the ops that use it, reaches one of `DISCRETE_USERS`."""
    seen: set[SSAValue] = set()
    work = [value]
    while work:
        current = work.pop()
        if current in seen:
            continue
        seen.add(current)
        for use in current.uses:
            user = use.operation
            if isinstance(user, DISCRETE_USERS):
                return True
            if isinstance(user, scf.YieldOp) and (loop := user.parent_op()) is not None:
                work.extend(loop.results)  # a loop's carried value reaches its results
            work.extend(user.results)
    return False
